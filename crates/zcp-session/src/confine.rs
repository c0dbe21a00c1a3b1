//! What a receiving role may touch, beyond "beneath the root".
//!
//! Every path from the network is already a [`RelPath`] resolved beneath the root without
//! following links. A [`Scope`] narrows that further:
//!
//! - no entry may name the root itself (`.`, `./`): the root's own mode and mtime are the
//!   receiver's, never the peer's;
//! - directory times (`DirTimes`) only for directories this session's `MakeDir` named, so a
//!   peer cannot chmod directories it did not send; and a directory that was there before
//!   the session gets its mtime but never a permission bit it did not have (its mode can
//!   only narrow), so naming an existing private directory cannot open it to others;
//! - in a pull, the client accepts only the names it asked for — each requested name itself,
//!   and with `-r` the paths beneath it — so a malicious server cannot plant files elsewhere
//!   in the destination (the class of scp's CVE-2019-6111 and rsync's CVE-2024-12087).
//!   Without `-r` a requested name is a file or a link (a requested path that is a link on
//!   the server comes as a link); with `-r` also a directory. A link at a requested name is
//!   made only where no file or directory is: no server can swap the user's file for a link
//!   ([`Scope::guards_existing`]).

use crate::error::Refusal;
use std::collections::HashMap;
use std::sync::Mutex;

use zcp_engine::sync::Locked;

use zcp_wire::{ErrorCode, RelPath};

/// Directories a session remembers (named by `MakeDir`, or created by it); past this, later
/// directories keep the times they get. About 40 MiB at most.
pub(crate) const MAX_MADE_DIRS: usize = 1 << 20;

/// What a session knows of a directory beneath its root.
#[derive(Debug, Clone, Copy, Default)]
struct DirFacts {
    /// This session created it (it was not there before).
    created: bool,
    /// The peer's `MakeDir` named it.
    named: bool,
    /// The peer's `MakeLink` made a link there.
    linked: bool,
}

/// How `DirTimes` may apply to a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Times {
    /// The session created it: the peer's permission bits and mtime.
    Created,
    /// It was there before: the peer's mtime, and permission bits only where the directory
    /// already had them (`old & mode`): a mode can narrow, never widen.
    Existing,
}

/// What an entry does to its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Act {
    /// Store a file there.
    File,
    /// Create a directory (or use the one that is there).
    Dir,
    /// Create or replace a symlink.
    Link,
    /// Set a directory's mode and mtime.
    Times,
}

impl Act {
    fn noun(self) -> &'static str {
        match self {
            Act::File => "file",
            Act::Dir => "directory",
            Act::Link => "link",
            Act::Times => "directory times",
        }
    }
}

/// Refuses a path (and a file's own `name`, when given) that names one of zcp's own files
/// ([`zcp_engine::fs::is_reserved_name`]): a peer could otherwise plant a journal that makes a
/// later honest transfer "resume" bytes it never sent, or swap a part file for a link.
pub(crate) fn not_reserved(path: &RelPath, name: &[u8]) -> Result<(), Refusal> {
    let named = path.components().iter().map(Vec::as_slice);
    match named
        .chain(std::iter::once(name))
        .find(|c| zcp_engine::fs::is_reserved_name(c))
    {
        None => Ok(()),
        Some(c) => Err(Refusal::new(
            ErrorCode::BadPath,
            format!(
                "'{path}' names '{}', a name zcp keeps for its own part files and journals; refused, nothing written",
                zcp_wire::escape(c)
            ),
        )),
    }
}

/// The names a pulling client asked for.
#[derive(Debug, Clone)]
pub(crate) struct Requested {
    /// Each the single last component the client chose for a requested path.
    pub(crate) names: Vec<Vec<u8>>,
    /// `-r`: paths beneath a requested name are accepted too.
    pub(crate) recursive: bool,
    /// The `--exclude` / `--include` rules the server's walk was asked to apply: what they
    /// exclude beneath a requested name is refused, whatever the server sends.
    pub(crate) filter: std::sync::Arc<zcp_wire::Filter>,
}

/// The limits of one receiving session (see the module documentation).
#[derive(Debug)]
pub(crate) struct Scope {
    requested: Option<Requested>,
    dirs: Mutex<HashMap<[u8; 16], DirFacts>>,
    /// In a pull, which requested names the server sent an entry for (by index).
    answered: Mutex<Vec<bool>>,
    /// A push by a write-only identity: nothing already there is offered but the part files
    /// of its own sessions (no other journal resumed, no existing target hashed), so the
    /// sender learns nothing of what exists beyond what it wrote itself.
    blind: bool,
}

fn key(path: &RelPath) -> [u8; 16] {
    key_of(&path.to_bytes())
}

/// A path's key in the sets a session keeps of paths: 16 bytes of its BLAKE3.
pub(crate) fn key_of(bytes: &[u8]) -> [u8; 16] {
    let h = blake3::hash(bytes);
    h.as_bytes()[..16].try_into().expect("16 of 32 bytes")
}

/// Why `beneath` (a path's components below the requested name) is left out by `filter`:
/// the entry itself, or a directory it is in.
pub(crate) fn excluded(
    filter: &zcp_wire::Filter,
    beneath: &[Vec<u8>],
    act: Act,
) -> Option<&'static str> {
    if filter.is_empty() || beneath.is_empty() {
        return None;
    }
    let mut rel = Vec::new();
    for (i, c) in beneath.iter().enumerate() {
        if i > 0 {
            rel.push(b'/');
        }
        rel.extend_from_slice(c);
        let last = i + 1 == beneath.len();
        let is_dir = !last || matches!(act, Act::Dir | Act::Times);
        if filter.excludes(&rel, is_dir) {
            return Some(match last {
                true => "the filter excludes",
                false => "is in a directory the filter excludes",
            });
        }
    }
    None
}

impl Scope {
    /// A push: anything beneath the root but the root itself.
    pub(crate) fn push() -> Scope {
        Scope {
            requested: None,
            dirs: Mutex::new(HashMap::new()),
            answered: Mutex::new(Vec::new()),
            blind: false,
        }
    }

    /// A push by an identity that may not read: as [`Scope::push`], and nothing already
    /// there is offered to the sender but its own sessions' part files.
    pub(crate) fn push_blind() -> Scope {
        Scope {
            blind: true,
            ..Scope::push()
        }
    }

    /// Whether nothing already there may be offered to the sender.
    pub(crate) fn is_blind(&self) -> bool {
        self.blind
    }

    /// A pull: only what was requested.
    pub(crate) fn pull(requested: Requested) -> Scope {
        Scope {
            answered: Mutex::new(vec![false; requested.names.len()]),
            requested: Some(requested),
            dirs: Mutex::new(HashMap::new()),
            blind: false,
        }
    }

    /// In a pull, the requested names the server sent no entry for.
    pub(crate) fn unanswered(&self) -> Vec<Vec<u8>> {
        let Some(req) = &self.requested else {
            return Vec::new();
        };
        let answered = self.answered.locked();
        req.names
            .iter()
            .zip(answered.iter())
            .filter(|(_, a)| !**a)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Whether this is a pull (the peer is the server the client pulls from).
    pub(crate) fn is_pull(&self) -> bool {
        self.requested.is_some()
    }

    /// Whether the session may `act` on `path`; the refusal names the path, escaped. For
    /// [`Act::Times`], how the times apply.
    pub(crate) fn check(&self, path: &RelPath, act: Act) -> Result<Times, Refusal> {
        let comps = path.components();
        if comps.is_empty() {
            return Err(Refusal::new(
                ErrorCode::BadPath,
                format!(
                    "a {} entry may not name the root itself ('.'); entries go beneath it",
                    act.noun()
                ),
            ));
        }
        not_reserved(path, b"")?;
        if let Some(req) = &self.requested {
            let at = req.names.iter().position(|n| *n == comps[0]);
            let inside = at.is_some();
            if !inside || (comps.len() > 1 && !req.recursive) {
                return Err(Refusal::new(
                    ErrorCode::BadPath,
                    format!(
                        "the server sent a {} '{path}' that was not asked for; refused, nothing written",
                        act.noun()
                    ),
                ));
            }
            if let Some(why) = excluded(&req.filter, &comps[1..], act) {
                return Err(Refusal::new(
                    ErrorCode::BadPath,
                    format!(
                        "the server sent a {} '{path}' that {why}; refused, nothing written",
                        act.noun()
                    ),
                ));
            }
            let plain = matches!(act, Act::File | Act::Link);
            if comps.len() == 1 && !plain && !req.recursive {
                return Err(Refusal::new(
                    ErrorCode::BadPath,
                    format!(
                        "the server sent a {} for '{path}', which was asked for without -r; refused, nothing written",
                        act.noun()
                    ),
                ));
            }
        }
        if let Some(i) = self
            .requested
            .as_ref()
            .and_then(|r| r.names.iter().position(|n| *n == comps[0]))
        {
            // The server answered this name (whether what it sent arrives is told apart by
            // the failure, if any, that follows).
            self.answered.locked()[i] = true;
        }
        if act != Act::Times {
            return Ok(Times::Created);
        }
        let dirs = self.dirs.locked();
        match dirs.get(&key(path)) {
            Some(f) if f.named && f.created => Ok(Times::Created),
            Some(f) if f.named => Ok(Times::Existing),
            _ => Err(Refusal::new(
                ErrorCode::BadPath,
                format!(
                    "directory times for '{path}', a directory this session did not create or send; left as it is"
                ),
            )),
        }
    }

    /// Whether a link at `path` must not replace what is there: in a pull, a requested name
    /// itself (the user's own file). Links beneath a requested directory mirror the server's
    /// tree, as `rsync -l` does.
    pub(crate) fn guards_existing(&self, path: &RelPath) -> bool {
        self.requested.is_some() && path.components().len() == 1
    }

    /// Records a directory this session's `MakeDir` named. Returns whether it is new to the
    /// session (a repeated `MakeDir` is no progress).
    pub(crate) fn made_dir(&self, path: &RelPath) -> bool {
        self.remember(path, |f| std::mem::replace(&mut f.named, true))
            .is_some_and(|was| !was)
    }

    /// Records a link this session made at `path`. Returns whether it is the first there.
    pub(crate) fn made_link(&self, path: &RelPath) -> bool {
        self.remember(path, |f| std::mem::replace(&mut f.linked, true))
            .is_some_and(|was| !was)
    }

    /// Records a directory this session created (it was not there before).
    #[cfg(test)]
    pub(crate) fn created_dir(&self, path: &RelPath) {
        self.remember(path, |f| f.created = true);
    }

    /// Records directories this session created: for each `(components, existed)`, every
    /// prefix longer than `existed` components.
    pub(crate) fn created_dirs(&self, made: &[(Vec<Vec<u8>>, usize)]) {
        for (comps, existed) in made {
            let mut path = Vec::new();
            for (i, c) in comps.iter().enumerate() {
                if i > 0 {
                    path.push(b'/');
                }
                path.extend_from_slice(c);
                if i >= *existed {
                    // The components were validated when the path was parsed: these are
                    // the bytes `key` hashes for this prefix.
                    self.remember_key(key_of(&path), |f| f.created = true);
                }
            }
        }
    }

    fn remember<T>(&self, path: &RelPath, f: impl FnOnce(&mut DirFacts) -> T) -> Option<T> {
        self.remember_key(key(path), f)
    }

    fn remember_key<T>(&self, k: [u8; 16], f: impl FnOnce(&mut DirFacts) -> T) -> Option<T> {
        let mut dirs = self.dirs.locked();
        if dirs.len() >= MAX_MADE_DIRS && !dirs.contains_key(&k) {
            return None;
        }
        Some(f(dirs.entry(k).or_default()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &[u8]) -> RelPath {
        RelPath::parse(s).unwrap()
    }

    #[test]
    fn the_root_is_never_an_entry() {
        let s = Scope::push();
        for root in [&b"."[..], b"./", b"./.", b".//"] {
            for act in [Act::File, Act::Dir, Act::Link, Act::Times] {
                let e = s.check(&p(root), act).unwrap_err();
                assert_eq!(e.code, ErrorCode::BadPath);
                assert!(e.message.contains("root"), "{}", e.message);
            }
        }
        assert!(s.check(&p(b"a/b"), Act::File).is_ok());
    }

    #[test]
    fn zcp_s_own_names_are_never_an_entry() {
        let s = Scope::push();
        for bad in [
            &b".zcp-1a2b.part"[..],
            b"d/.zcp-1a2b.journal",
            b".zcp-x.link/y",
        ] {
            for act in [Act::File, Act::Dir, Act::Link, Act::Times] {
                let e = s.check(&p(bad), act).unwrap_err();
                assert!(
                    e.message.contains("part files and journals"),
                    "{}",
                    e.message
                );
            }
        }
    }

    #[test]
    fn times_only_for_directories_the_session_made() {
        let s = Scope::push();
        assert!(s.check(&p(b"private"), Act::Times).is_err());
        // Created by the session but never named by a MakeDir: not the peer's.
        s.created_dir(&p(b"implicit"));
        assert!(s.check(&p(b"implicit"), Act::Times).is_err());
        // Named, and there before the session: times, and a mode that can only narrow.
        assert!(s.made_dir(&p(b"private/")));
        assert!(!s.made_dir(&p(b"private")), "the same directory twice");
        assert_eq!(s.check(&p(b"private"), Act::Times), Ok(Times::Existing));
        assert_eq!(s.check(&p(b"./private/"), Act::Times), Ok(Times::Existing));
        assert!(s.check(&p(b"private/sub"), Act::Times).is_err());
        // Named and created by the session: the peer's mode.
        s.created_dir(&p(b"new"));
        assert!(s.made_dir(&p(b"new")));
        assert_eq!(s.check(&p(b"new"), Act::Times), Ok(Times::Created));
    }

    #[test]
    fn a_pull_accepts_only_what_was_asked_for() {
        let one = Scope::pull(Requested {
            names: vec![b"want.txt".to_vec()],
            recursive: false,
            filter: Default::default(),
        });
        assert!(one.is_pull());
        assert!(one.check(&p(b"want.txt"), Act::File).is_ok());
        // Without -r the requested name is a file or a link (the remote path may be one),
        // never a directory or its times; a link there never replaces the user's file.
        assert!(one.check(&p(b"want.txt"), Act::Link).is_ok());
        assert!(one.guards_existing(&p(b"want.txt")));
        for act in [Act::Dir, Act::Times] {
            let e = one.check(&p(b"want.txt"), act).unwrap_err();
            assert!(e.message.contains("without -r"), "{}", e.message);
        }
        for bad in [
            &b".ssh/authorized_keys"[..],
            b"other.txt",
            b"want.txt/x",
            b"want",
        ] {
            let e = one.check(&p(bad), Act::File).unwrap_err();
            assert!(e.message.contains("not asked for"), "{}", e.message);
        }
        let tree = Scope::pull(Requested {
            names: vec![b"run42".to_vec(), b"b".to_vec()],
            recursive: true,
            filter: Default::default(),
        });
        assert!(tree.check(&p(b"run42"), Act::Dir).is_ok());
        assert!(tree.check(&p(b"run42"), Act::File).is_ok());
        assert!(tree.check(&p(b"run42/a/b/c"), Act::File).is_ok());
        assert!(tree.check(&p(b"b/x"), Act::Link).is_ok());
        assert!(
            !tree.guards_existing(&p(b"b/x")),
            "inside the tree: a mirror"
        );
        assert!(tree.guards_existing(&p(b"run42")));
        assert!(!Scope::push().guards_existing(&p(b"run42")));
        assert!(tree.check(&p(b"run4"), Act::Dir).is_err());
        assert!(tree.check(&p(b"run42x/y"), Act::File).is_err());
        // Times need the MakeDir as well as the name.
        assert!(tree.check(&p(b"run42"), Act::Times).is_err());
        tree.made_dir(&p(b"run42"));
        assert_eq!(tree.check(&p(b"run42"), Act::Times), Ok(Times::Existing));
    }
}
