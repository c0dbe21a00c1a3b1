//! Exports and identities: the directories a server offers, the keys it knows by name, and what
//! each key may do with each directory.
//!
//! `serve --root DIR --key-file K` is one export and one identity that may read and write it;
//! a config file names several. A session takes one snapshot ([`Live`]) at its handshake and
//! keeps it to its end, so a reload changes only the sessions that start after it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use zcp_engine::fs::Root;
use zcp_wire::{ErrorCode, Psk, escape_text};

use crate::error::{Refusal, SessionError};

/// What an identity may do with an export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Permission {
    /// Pull (`zcp get`) only.
    Read,
    /// Push (`zcp send`) only: nothing already there is shown, listed or offered for resume.
    Write,
    /// Both.
    ReadWrite,
    /// Both, and `--delete` in a push: removing what the client does not have.
    ReadWriteDelete,
}

impl Permission {
    /// Every permission, as written in a config file.
    pub const ALL: [Permission; 4] = [
        Permission::Read,
        Permission::Write,
        Permission::ReadWrite,
        Permission::ReadWriteDelete,
    ];

    /// The permission a config file names: `read`, `write`, `read-write` or
    /// `read-write-delete`.
    pub fn parse(s: &str) -> Option<Permission> {
        Permission::ALL.into_iter().find(|p| p.name() == s)
    }

    /// Its name in a config file.
    pub fn name(self) -> &'static str {
        match self {
            Permission::Read => "read",
            Permission::Write => "write",
            Permission::ReadWrite => "read-write",
            Permission::ReadWriteDelete => "read-write-delete",
        }
    }

    /// Whether it allows pulling.
    pub fn reads(self) -> bool {
        self != Permission::Write
    }

    /// Whether it allows pushing.
    pub fn writes(self) -> bool {
        self != Permission::Read
    }

    /// Whether a push may remove what the client does not have (`--delete`).
    pub fn deletes(self) -> bool {
        self == Permission::ReadWriteDelete
    }
}

/// One exported directory.
#[derive(Debug, Clone)]
pub struct ExportSpec {
    /// Its name: the first component of a remote path.
    pub name: String,
    /// The directory (absolute).
    pub path: PathBuf,
}

/// One named key and its permissions.
#[derive(Debug, Clone)]
pub struct IdentitySpec {
    /// Its name, for logs and refusals.
    pub name: String,
    /// The key.
    pub psk: Psk,
    /// Export name → permission. An export not listed does not exist for this identity.
    pub access: BTreeMap<String, Permission>,
    /// Sessions of this identity must be encrypted: a client that does not ask is refused
    /// in the handshake, before any byte is stored.
    pub require_encryption: bool,
}

/// The exports and identities a server serves.
#[derive(Debug, Clone)]
pub struct AccessConfig {
    /// Whether clients name an export as the first component of a remote path. `false`: the
    /// one export of `serve --root`, addressed without a name.
    pub named: bool,
    /// The exports.
    pub exports: Vec<ExportSpec>,
    /// The identities.
    pub identities: Vec<IdentitySpec>,
}

/// The export and identity name of `serve --root` (logs only; clients never name it).
pub const SINGLE_EXPORT: &str = "root";
/// The identity of `serve --root --key-file`.
pub const SINGLE_IDENTITY: &str = "default";

/// Checks an export or identity name: not empty, not `.` or `..`, no `/`, no NUL or control
/// character, at most 255 bytes.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name == "." || name == ".." {
        return Err(format!("'{}' is not a usable name", escape_text(name)));
    }
    if name.len() > zcp_wire::MAX_NAME {
        let head: String = name.chars().take(16).collect();
        return Err(format!(
            "name '{}...' is over 255 bytes",
            escape_text(&head)
        ));
    }
    if name.chars().any(|c| c == '/' || c.is_control()) {
        return Err(format!(
            "name '{}' holds a '/' or a control character",
            escape_text(name)
        ));
    }
    Ok(())
}

impl AccessConfig {
    /// `serve --root DIR --key-file K`: one export, one identity that may read and write it.
    pub fn single(root: PathBuf, psk: Psk) -> AccessConfig {
        AccessConfig {
            named: false,
            exports: vec![ExportSpec {
                name: SINGLE_EXPORT.into(),
                path: root,
            }],
            identities: vec![IdentitySpec {
                name: SINGLE_IDENTITY.into(),
                psk,
                access: BTreeMap::from([(SINGLE_EXPORT.into(), Permission::ReadWrite)]),
                require_encryption: false,
            }],
        }
    }

    /// Every identity must encrypt (`serve --require-encryption`, or `require_encryption`
    /// at the top of a config file).
    pub fn require_encryption(&mut self) {
        for i in &mut self.identities {
            i.require_encryption = true;
        }
    }

    /// Lets every identity that may read and write an export also delete in it
    /// (`serve --root --allow-delete`).
    pub fn allow_delete(&mut self) {
        for i in &mut self.identities {
            for p in i.access.values_mut() {
                if *p == Permission::ReadWrite {
                    *p = Permission::ReadWriteDelete;
                }
            }
        }
    }

    /// Checks what needs no file system: names, references, counts, distinct keys.
    pub fn check(&self) -> Result<(), String> {
        if self.exports.is_empty() {
            return Err("no export: add at least one [export.NAME] with a path".into());
        }
        if self.identities.is_empty() {
            return Err("no identity: add at least one [identity.NAME] with a key_file".into());
        }
        if !self.named && self.exports.len() != 1 {
            return Err("a server without named exports has exactly one".into());
        }
        let mut names = std::collections::BTreeSet::new();
        for e in &self.exports {
            check_name(&e.name).map_err(|m| format!("export: {m}"))?;
            if !names.insert(e.name.as_str()) {
                return Err(format!("export '{}' is named twice", e.name));
            }
        }
        for (i, id) in self.identities.iter().enumerate() {
            check_name(&id.name).map_err(|m| format!("identity: {m}"))?;
            for export in id.access.keys() {
                if !names.contains(export.as_str()) {
                    return Err(format!(
                        "identity '{}' has access to '{}', which is no export",
                        id.name,
                        escape_text(export)
                    ));
                }
            }
            if let Some(other) = self.identities[..i].iter().find(|o| o.name == id.name) {
                return Err(format!("identity '{}' is named twice", other.name));
            }
            if let Some(other) = self.identities[..i].iter().find(|o| o.psk == id.psk) {
                return Err(format!(
                    "identities '{}' and '{}' hold the same key: give each its own (zcp keygen)",
                    other.name, id.name
                ));
            }
        }
        Ok(())
    }
}

/// One identity, ready for sessions.
#[derive(Debug, Clone)]
pub(crate) struct Identity {
    pub(crate) name: String,
    pub(crate) psk: Psk,
    access: BTreeMap<String, Permission>,
    /// Its sessions must be encrypted.
    pub(crate) require_encryption: bool,
}

/// The exports opened and the identities known: what the sessions started since the last
/// (re)load look things up in.
#[derive(Debug)]
pub(crate) struct Live {
    named: bool,
    exports: BTreeMap<String, Arc<Root>>,
    pub(crate) identities: Vec<Identity>,
}

/// An export a session was granted.
#[derive(Debug, Clone)]
pub(crate) struct Granted {
    pub(crate) name: String,
    pub(crate) root: Arc<Root>,
    pub(crate) permission: Permission,
}

impl Live {
    /// Checks `cfg` and opens every export's directory.
    pub(crate) fn open(cfg: &AccessConfig) -> Result<Live, SessionError> {
        Live::open_with(cfg, false)
    }

    /// [`Live::open`], the exports following symlinks on the way to a directory when
    /// `follow` ([`Root::following`]).
    pub(crate) fn open_with(cfg: &AccessConfig, follow: bool) -> Result<Live, SessionError> {
        cfg.check().map_err(SessionError::Usage)?;
        let mut exports = BTreeMap::new();
        for e in &cfg.exports {
            let root = Root::open(&e.path)?;
            let root = if follow { root.following() } else { root };
            exports.insert(e.name.clone(), Arc::new(root));
        }
        Ok(Live {
            named: cfg.named,
            exports,
            identities: cfg
                .identities
                .iter()
                .map(|i| Identity {
                    name: i.name.clone(),
                    psk: i.psk.clone(),
                    access: i.access.clone(),
                    require_encryption: i.require_encryption,
                })
                .collect(),
        })
    }

    /// Whether clients name exports.
    pub(crate) fn named(&self) -> bool {
        self.named
    }

    /// The keys, in identity order.
    pub(crate) fn keys(&self) -> Vec<&Psk> {
        self.identities.iter().map(|i| &i.psk).collect()
    }

    /// The exports identity `who` may use, by name, with what it may do in each.
    pub(crate) fn usable(&self, who: usize) -> Vec<(String, Permission)> {
        let id = &self.identities[who];
        (id.access.iter())
            .filter(|(name, _)| self.exports.contains_key(*name))
            .map(|(name, p)| (name.clone(), *p))
            .collect()
    }

    /// The exports, by name.
    pub(crate) fn exports(&self) -> impl Iterator<Item = (&String, &Arc<Root>)> {
        self.exports.iter()
    }

    /// How the `Listening` line names what is served.
    pub(crate) fn describe(&self) -> String {
        if !self.named {
            return self
                .exports
                .values()
                .next()
                .map(|r| r.path().display().to_string())
                .unwrap_or_default();
        }
        let exports: Vec<String> = self
            .exports
            .iter()
            .map(|(n, r)| format!("{n}={}", r.path().display()))
            .collect();
        format!(
            "exports {}; {} identit{}",
            exports.join(", "),
            self.identities.len(),
            if self.identities.len() == 1 {
                "y"
            } else {
                "ies"
            }
        )
    }

    /// The export `name` for identity `who`, for a pull or a push. An export that is not
    /// there and one this identity has no access to get the same answer: no oracle for what
    /// exists.
    pub(crate) fn export(&self, who: usize, name: &str, pull: bool) -> Result<Granted, Refusal> {
        let id = &self.identities[who];
        let yours = || {
            let mut yours: Vec<String> = self
                .usable(who)
                .iter()
                .map(|(e, _)| escape_text(e))
                .collect();
            yours.truncate(20);
            yours.join(", ")
        };
        let wanted = if self.named {
            if name.is_empty() {
                return Err(Refusal::new(
                    ErrorCode::BadPath,
                    format!(
                        "this server has exports: name one as the first component of the remote path (HOST:EXPORT/PATH; yours: {})",
                        yours()
                    ),
                ));
            }
            name
        } else if name.is_empty() {
            SINGLE_EXPORT
        } else {
            return Err(Refusal::protocol(
                "an Open named an export, but this server has none (its Welcome said so)",
            ));
        };
        let missing = || {
            Refusal::new(
                ErrorCode::BadPath,
                format!(
                    "no export '{}' on this server (yours: {}; `zcp ls HOST:` lists them)",
                    escape_text(wanted),
                    yours()
                ),
            )
        };
        let (Some(permission), Some(root)) = (id.access.get(wanted), self.exports.get(wanted))
        else {
            return Err(missing());
        };
        let allowed = if pull {
            permission.reads()
        } else {
            permission.writes()
        };
        if !allowed {
            let what = if pull { "read from" } else { "write to" };
            return Err(Refusal::new(
                ErrorCode::Auth,
                format!(
                    "{} may not {what} {}",
                    escape_text(&id.name),
                    escape_text(wanted)
                ),
            ));
        }
        Ok(Granted {
            name: wanted.to_string(),
            root: root.clone(),
            permission: *permission,
        })
    }
}

/// The exports and identities in force, for a face of the server other than its own protocol
/// (the HTTP face): one snapshot, kept for one request.
#[derive(Debug, Clone)]
pub struct AccessSnapshot(pub(crate) Arc<Live>);

impl AccessSnapshot {
    /// Checks `cfg` and opens its exports (a snapshot of no running server: tests, and a
    /// face that serves without one).
    pub fn open(cfg: &AccessConfig) -> Result<AccessSnapshot, SessionError> {
        Live::open(cfg).map(|l| AccessSnapshot(Arc::new(l)))
    }

    /// Whether paths start with an export's name.
    pub fn named(&self) -> bool {
        self.0.named
    }

    /// The key of identity `name`.
    pub fn key_of(&self, name: &str) -> Option<&Psk> {
        (self.0.identities.iter())
            .find(|i| i.name == name)
            .map(|i| &i.psk)
    }

    /// Export `export` (ignored when exports are not named) as identity `identity` may use
    /// it, with what it may do there; `None` when it does not exist or the identity has no
    /// access (the same answer, so no oracle for what exists).
    pub fn export_for(&self, identity: &str, export: &str) -> Option<(Arc<Root>, Permission)> {
        let id = self.0.identities.iter().find(|i| i.name == identity)?;
        let export = if self.0.named { export } else { SINGLE_EXPORT };
        let p = id.access.get(export)?;
        Some((self.0.exports.get(export)?.clone(), *p))
    }

    /// Whether identity `identity` must only be served encrypted (`require_encryption`).
    pub fn must_encrypt(&self, identity: &str) -> bool {
        (self.0.identities.iter()).any(|i| i.name == identity && i.require_encryption)
    }

    /// The exports identity `identity` may use, by name, with what it may do in each.
    pub fn exports_of(&self, identity: &str) -> Vec<(String, Permission)> {
        match self.0.identities.iter().position(|i| i.name == identity) {
            Some(who) => self.0.usable(who),
            None => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> Psk {
        Psk::from_bytes([b; 32])
    }

    fn two(dir: &std::path::Path) -> AccessConfig {
        let (a, b) = (dir.join("a"), dir.join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        AccessConfig {
            named: true,
            exports: vec![
                ExportSpec {
                    name: "incoming".into(),
                    path: a,
                },
                ExportSpec {
                    name: "archive".into(),
                    path: b,
                },
            ],
            identities: vec![IdentitySpec {
                name: "observatory".into(),
                psk: key(1),
                access: BTreeMap::from([
                    ("incoming".into(), Permission::Write),
                    ("archive".into(), Permission::Read),
                ]),
                require_encryption: false,
            }],
        }
    }

    #[test]
    fn permissions_and_unknown_exports() {
        let dir = tempfile::tempdir().unwrap();
        let mut cfg = two(dir.path());
        cfg.identities.push(IdentitySpec {
            name: "lab".into(),
            psk: key(2),
            access: BTreeMap::from([("archive".into(), Permission::ReadWrite)]),
            require_encryption: false,
        });
        let live = Live::open(&cfg).unwrap();
        assert!(live.export(0, "incoming", false).is_ok());
        let r = live.export(0, "incoming", true).unwrap_err();
        assert_eq!(r.message, "observatory may not read from incoming");
        let r = live.export(0, "archive", false).unwrap_err();
        assert_eq!(r.message, "observatory may not write to archive");
        assert!(live.export(0, "archive", true).is_ok());
        // Not granted and not there: the same words.
        let not_granted = live.export(1, "incoming", false).unwrap_err();
        let not_there = live.export(1, "nothing", false).unwrap_err();
        assert_eq!(not_granted.code, not_there.code);
        assert_eq!(
            not_granted.message.replace("incoming", "X"),
            not_there.message.replace("nothing", "X")
        );
        for bad in ["../archive", "archive/..", "/archive", ".", ""] {
            assert!(live.export(1, bad, true).is_err(), "{bad}");
        }
        assert!(live.export(1, "archive", false).is_ok());
    }

    #[test]
    fn the_single_root_is_addressed_without_a_name() {
        let dir = tempfile::tempdir().unwrap();
        let live = Live::open(&AccessConfig::single(dir.path().into(), key(3))).unwrap();
        let g = live.export(0, "", false).unwrap();
        assert_eq!(g.permission, Permission::ReadWrite);
        assert!(live.export(0, "", true).is_ok());
        assert!(live.export(0, "root", true).is_err());
    }

    #[test]
    fn checks_names_references_and_keys() {
        let dir = tempfile::tempdir().unwrap();
        let good = two(dir.path());
        assert!(good.check().is_ok());
        let mut c = good.clone();
        c.identities[0]
            .access
            .insert("elsewhere".into(), Permission::Read);
        assert!(
            c.check()
                .unwrap_err()
                .contains("'elsewhere', which is no export")
        );
        let mut c = good.clone();
        c.identities.push(IdentitySpec {
            name: "twin".into(),
            psk: key(1),
            access: BTreeMap::new(),
            require_encryption: false,
        });
        assert!(c.check().unwrap_err().contains("hold the same key"));
        for bad in ["", ".", "..", "a/b", "a\nb"] {
            let mut c = good.clone();
            c.exports[0].name = bad.into();
            assert!(c.check().is_err(), "{bad:?}");
        }
        let mut c = good.clone();
        c.exports.clear();
        assert!(c.check().unwrap_err().contains("no export"));
        let mut c = good;
        c.identities.clear();
        assert!(c.check().unwrap_err().contains("no identity"));
        assert_eq!(Permission::parse("read-write"), Some(Permission::ReadWrite));
        assert_eq!(Permission::parse("rw"), None);
    }
}
