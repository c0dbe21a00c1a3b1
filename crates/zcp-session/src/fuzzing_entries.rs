//! A driver for fuzzing the manifest entries a sender announces — `PutFile`, `MakeDir`,
//! `MakeLink`, `DirTimes` — through the receiver's gate: the body decoded as it comes off the
//! control connection, then the checks the receiving role makes before it touches anything
//! ([`RelPath`], [`not_reserved`], a file's own name, [`Scope::check`], [`Scope::made_dir`]),
//! in a push or in a pull that asked for two names. Each entry is either raw body bytes or
//! built from a handful of path components (`..`, `.`, empty, a reserved part-file name, a
//! requested name, a name that was not requested), so that most entries reach the scope
//! rules. After each one:
//!
//! - what decodes re-encodes to a message that decodes to itself;
//! - an accepted path has only plain components, none of them a name zcp keeps for its own
//!   files, and never names the root;
//! - in a pull, an accepted path starts with a requested name, lies beneath it only with
//!   `-r`, is a directory only with `-r`, and a file never carries a name of the server's
//!   choosing;
//! - `DirTimes` is accepted only for a directory a `MakeDir` of this session named;
//! - a `PutFile`'s chunk plan, when it has one, covers exactly the file's bytes.
//!
//! `cargo fuzz run manifest_entry` runs it under libFuzzer; the unit test below runs it on
//! seeded random scripts in the suite.

use std::collections::HashSet;

use zcp_wire::{ChunkPlan, Message, PutFile, RelPath};

use crate::confine::{Act, Requested, Scope, not_reserved};
use crate::error::Refusal;
use crate::fuzzing::Script;

/// The names a fuzzed pull asks for.
const REQUESTED: [&[u8]; 2] = [b"a", b"b.txt"];

/// Path components entries are built from: requested and unrequested names, the ones a path
/// may not hold, and one zcp keeps for its own files.
const PARTS: [&[u8]; 8] = [
    b"a",
    b"b.txt",
    b"c",
    b"..",
    b".",
    b"",
    b".zcp-x.part",
    b"a/b",
];

/// The shared script reader ([`crate::fuzzing::Script`]), with paths of this target's parts.
impl Script<'_> {
    /// A path of up to four components from [`PARTS`], now and then with a trailing `/`.
    fn path(&mut self) -> Vec<u8> {
        let b = self.u8();
        let mut out = Vec::new();
        for i in 0..=(b & 3) {
            if i > 0 {
                out.push(b'/');
            }
            out.extend_from_slice(PARTS[usize::from(self.u8() & 7)]);
        }
        if b & 4 != 0 {
            out.push(b'/');
        }
        out
    }
}

/// The kinds of the four entry messages, as their frames' type bytes.
fn kinds() -> [u8; 4] {
    [
        Message::PutFile(put_file(Vec::new(), Vec::new(), 0, 0)).kind(),
        Message::MakeDir {
            path: Vec::new(),
            top: false,
        }
        .kind(),
        Message::MakeLink {
            path: Vec::new(),
            target: Vec::new(),
        }
        .kind(),
        Message::DirTimes {
            path: Vec::new(),
            mode: 0,
            mtime_sec: 0,
            mtime_nsec: 0,
        }
        .kind(),
    ]
}

fn put_file(dest: Vec<u8>, name: Vec<u8>, size: u64, chunk_size: u64) -> PutFile {
    PutFile {
        file_id: 1,
        dest,
        name,
        size,
        mode: 0o644,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size,
        sparse: false,
    }
}

/// One entry: raw body bytes of one of the four kinds, or one built from [`PARTS`].
fn next_entry(s: &mut Script<'_>, kinds: &[u8; 4]) -> Option<Message> {
    let b = s.u8();
    let kind = kinds[usize::from(b & 3)];
    let m = if b & 4 == 0 {
        let len = usize::from(s.u8()) * 4;
        let body = s.bytes(len).to_vec();
        Message::decode(kind, &body).ok()?
    } else {
        let path = s.path();
        match b & 3 {
            0 => {
                let name = if b & 8 != 0 { s.path() } else { Vec::new() };
                let size = u64::from(s.u8()) << (s.u8() & 63);
                let chunk = u64::from(s.u8()) << (s.u8() & 63);
                Message::PutFile(put_file(path, name, size, chunk))
            }
            1 => Message::MakeDir { path, top: false },
            2 => Message::MakeLink {
                path,
                target: s.path(),
            },
            _ => Message::DirTimes {
                path,
                mode: 0o755,
                mtime_sec: 0,
                mtime_nsec: 0,
            },
        }
    };
    // Whatever decodes (or is built) goes out and comes back as itself.
    if let Ok(again) = Message::decode(m.kind(), &m.encode_body()) {
        assert_eq!(again, m);
    }
    Some(m)
}

/// What the receiver's gate says of one entry: its path and act if accepted.
fn gate(scope: &Scope, m: &Message) -> Option<Result<(RelPath, Act), Refusal>> {
    let bad = |e: zcp_wire::PathError| Refusal::new(zcp_wire::ErrorCode::BadPath, e.to_string());
    let (raw, act) = match m {
        Message::PutFile(p) => {
            let checked = RelPath::parse(&p.dest).map_err(bad).and_then(|dest| {
                not_reserved(&dest, &p.name)?;
                if !p.name.is_empty() {
                    RelPath::check_name(&p.name).map_err(bad)?;
                    if scope.is_pull() {
                        return Err(Refusal::new(
                            zcp_wire::ErrorCode::BadPath,
                            "a name of its own",
                        ));
                    }
                }
                if scope.is_pull() {
                    scope.check(&dest, Act::File)?;
                }
                Ok((dest, Act::File))
            });
            return Some(checked);
        }
        Message::MakeDir { path, .. } => (path, Act::Dir),
        Message::MakeLink { path, .. } => (path, Act::Link),
        Message::DirTimes { path, .. } => (path, Act::Times),
        _ => return None,
    };
    Some(
        RelPath::parse(raw)
            .map_err(bad)
            .and_then(|p| scope.check(&p, act).map(|_| (p, act))),
    )
}

/// Runs one script of entries (see the module documentation); returns how many the gate
/// accepted.
pub fn manifest_entries(data: &[u8]) -> usize {
    let mut s = Script { data, at: 0 };
    let mode = s.u8();
    let pull = mode & 1 != 0;
    let recursive = mode & 2 != 0;
    let scope = if pull {
        Scope::pull(Requested {
            names: REQUESTED.iter().map(|n| n.to_vec()).collect(),
            recursive,
            // What a `get --exclude` asks for: entries it excludes are refused too.
            filter: std::sync::Arc::new(
                zcp_wire::Filter::from_wire(&["- *.x".into(), "- d/".into()])
                    .expect("fixed rules parse"),
            ),
        })
    } else {
        Scope::push()
    };
    let kinds = kinds();
    let mut named_dirs: HashSet<Vec<u8>> = HashSet::new();
    let mut accepted = 0;
    while s.at < data.len() {
        let Some(m) = next_entry(&mut s, &kinds) else {
            continue;
        };
        let Some(Ok((path, act))) = gate(&scope, &m) else {
            continue;
        };
        accepted += 1;
        let comps = path.components();
        if let Message::PutFile(p) = &m {
            if let Ok(plan) = ChunkPlan::new(p.size, p.chunk_size) {
                let (off, len) = plan.chunk(plan.count().saturating_sub(1));
                assert!(plan.count() == 0 && p.size == 0 || off + len == p.size);
            }
            assert!(
                !pull || p.name.is_empty(),
                "a pull took a server's name: {m:?}"
            );
            if comps.is_empty() {
                // A file into the root is placed by its own name (checked above).
                continue;
            }
        }
        assert!(!comps.is_empty(), "{m:?} named the root");
        for c in comps {
            assert!(!c.is_empty() && c != b"." && c != b".." && !c.contains(&b'/'));
            assert!(!zcp_engine::fs::is_reserved_name(c), "{m:?}");
        }
        if pull {
            assert!(
                REQUESTED.contains(&comps[0].as_slice()),
                "{m:?} not asked for"
            );
            assert!(
                recursive || comps.len() == 1,
                "{m:?} beneath a name without -r"
            );
            assert!(
                recursive || matches!(act, Act::File | Act::Link),
                "{m:?} without -r"
            );
        }
        match act {
            Act::Dir => {
                scope.made_dir(&path);
                named_dirs.insert(path.to_bytes());
            }
            Act::Times => assert!(
                named_dirs.contains(&path.to_bytes()),
                "times for a directory no MakeDir named: {m:?}"
            ),
            Act::File | Act::Link => {}
        }
    }
    accepted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_scripts_keep_the_gates_rules() {
        let mut rng = fastrand::Rng::with_seed(0xe47);
        let mut accepted = 0;
        for _ in 0..3000 {
            let len = rng.usize(0..512);
            let data: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
            accepted += manifest_entries(&data);
        }
        // Enough entries get through that the checks on accepted ones are not vacuous.
        assert!(accepted > 100, "{accepted} accepted");
    }

    #[test]
    fn a_built_directory_gets_its_times_in_a_recursive_pull() {
        // Mode 3: a recursive pull. MakeDir "a" (built: kind 1 | 4, one component, PARTS[0]),
        // then DirTimes "a" (kind 3 | 4): both pass the gate, in that order.
        let scope = Scope::pull(Requested {
            names: REQUESTED.iter().map(|n| n.to_vec()).collect(),
            recursive: true,
            filter: Default::default(),
        });
        let kinds = kinds();
        let mut s = Script {
            data: &[5, 0, 0, 7, 0, 0],
            at: 0,
        };
        let dir = next_entry(&mut s, &kinds).unwrap();
        assert!(matches!(gate(&scope, &dir), Some(Ok((_, Act::Dir)))));
        let times = next_entry(&mut s, &kinds).unwrap();
        assert!(
            matches!(gate(&scope, &times), Some(Err(_))),
            "not yet named"
        );
        let Some(Ok((p, _))) = gate(&scope, &dir) else {
            panic!()
        };
        scope.made_dir(&p);
        assert!(matches!(gate(&scope, &times), Some(Ok((_, Act::Times)))));
        assert_eq!(manifest_entries(&[3, 5, 0, 0, 7, 0, 0]), 2);
    }
}
