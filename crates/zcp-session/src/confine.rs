//! What a receiving role may touch, beyond "beneath the root".
//!
//! Every path from the network is already a [`RelPath`] resolved beneath the root without
//! following links. A [`Scope`] narrows that further:
//!
//! - no entry may name the root itself (`.`, `./`): the root's own mode and mtime are the
//!   receiver's, never the peer's;
//! - directory times (`DirTimes`) only for directories this session's `MakeDir` named, so a
//!   peer cannot chmod directories it did not send;
//! - in a pull, the client accepts only the names it asked for — each requested name itself,
//!   and with `-r` the paths beneath it — so a malicious server cannot plant files elsewhere
//!   in the destination (the class of scp's CVE-2019-6111 and rsync's CVE-2024-12087).

use std::collections::HashSet;
use std::sync::Mutex;

use zcp_wire::{ErrorCode, RelPath};

/// Directories whose `MakeDir` a session remembers for `DirTimes`; past this, later
/// directories keep the times they get.
pub(crate) const MAX_MADE_DIRS: usize = 1 << 20;

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

/// The names a pulling client asked for.
#[derive(Debug, Clone)]
pub(crate) struct Requested {
    /// Each the single last component the client chose for a requested path.
    pub(crate) names: Vec<Vec<u8>>,
    /// `-r`: paths beneath a requested name are accepted too.
    pub(crate) recursive: bool,
}

/// The limits of one receiving session (see the module documentation).
#[derive(Debug)]
pub(crate) struct Scope {
    requested: Option<Requested>,
    made: Mutex<HashSet<[u8; 16]>>,
}

fn key(path: &RelPath) -> [u8; 16] {
    let h = blake3::hash(&path.to_bytes());
    h.as_bytes()[..16].try_into().expect("16 of 32 bytes")
}

impl Scope {
    /// A push: anything beneath the root but the root itself.
    pub(crate) fn push() -> Scope {
        Scope {
            requested: None,
            made: Mutex::new(HashSet::new()),
        }
    }

    /// A pull: only what was requested.
    pub(crate) fn pull(requested: Requested) -> Scope {
        Scope {
            requested: Some(requested),
            made: Mutex::new(HashSet::new()),
        }
    }

    /// Whether this is a pull (the peer is the server the client pulls from).
    pub(crate) fn is_pull(&self) -> bool {
        self.requested.is_some()
    }

    /// Whether the session may `act` on `path`; the refusal names the path, escaped.
    pub(crate) fn check(&self, path: &RelPath, act: Act) -> Result<(), (ErrorCode, String)> {
        let comps = path.components();
        if comps.is_empty() {
            return Err((
                ErrorCode::BadPath,
                format!(
                    "a {} entry may not name the root itself ('.'); entries go beneath it",
                    act.noun()
                ),
            ));
        }
        if let Some(req) = &self.requested {
            let inside = req.names.iter().any(|n| *n == comps[0]);
            if !inside || (comps.len() > 1 && !req.recursive) {
                return Err((
                    ErrorCode::BadPath,
                    format!(
                        "the server sent a {} '{path}' that was not asked for; refused, nothing written",
                        act.noun()
                    ),
                ));
            }
        }
        if act == Act::Times {
            let made = self.made.lock().unwrap_or_else(|p| p.into_inner());
            if !made.contains(&key(path)) {
                return Err((
                    ErrorCode::BadPath,
                    format!(
                        "directory times for '{path}', a directory this session did not create or send; left as it is"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Records a directory this session's `MakeDir` named. Returns whether it is new to the
    /// session (a repeated `MakeDir` is no progress).
    pub(crate) fn made_dir(&self, path: &RelPath) -> bool {
        let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
        if made.len() >= MAX_MADE_DIRS {
            return false;
        }
        made.insert(key(path))
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
                assert_eq!(e.0, ErrorCode::BadPath);
                assert!(e.1.contains("root"), "{}", e.1);
            }
        }
        assert!(s.check(&p(b"a/b"), Act::File).is_ok());
    }

    #[test]
    fn times_only_for_directories_the_session_made() {
        let s = Scope::push();
        assert!(s.check(&p(b"private"), Act::Times).is_err());
        assert!(s.made_dir(&p(b"private/")));
        assert!(!s.made_dir(&p(b"private")), "the same directory twice");
        assert!(s.check(&p(b"private"), Act::Times).is_ok());
        assert!(s.check(&p(b"./private/"), Act::Times).is_ok());
        assert!(s.check(&p(b"private/sub"), Act::Times).is_err());
    }

    #[test]
    fn a_pull_accepts_only_what_was_asked_for() {
        let one = Scope::pull(Requested {
            names: vec![b"want.txt".to_vec()],
            recursive: false,
        });
        assert!(one.is_pull());
        assert!(one.check(&p(b"want.txt"), Act::File).is_ok());
        assert!(one.check(&p(b"want.txt"), Act::Link).is_ok());
        for bad in [
            &b".ssh/authorized_keys"[..],
            b"other.txt",
            b"want.txt/x",
            b"want",
        ] {
            let e = one.check(&p(bad), Act::File).unwrap_err();
            assert!(e.1.contains("not asked for"), "{}", e.1);
        }
        let tree = Scope::pull(Requested {
            names: vec![b"run42".to_vec(), b"b".to_vec()],
            recursive: true,
        });
        assert!(tree.check(&p(b"run42"), Act::Dir).is_ok());
        assert!(tree.check(&p(b"run42/a/b/c"), Act::File).is_ok());
        assert!(tree.check(&p(b"b/x"), Act::Link).is_ok());
        assert!(tree.check(&p(b"run4"), Act::Dir).is_err());
        assert!(tree.check(&p(b"run42x/y"), Act::File).is_err());
        // Times need the MakeDir as well as the name.
        assert!(tree.check(&p(b"run42"), Act::Times).is_err());
        tree.made_dir(&p(b"run42"));
        assert!(tree.check(&p(b"run42"), Act::Times).is_ok());
    }
}
