//! What a sender sends: the entries of its sources, produced one at a time.
//!
//! The walk is lazy and depth-first over directory descriptors: memory is one open directory
//! (and its read buffer) per level of depth, never a list of files, so a tree of millions of
//! files costs what its deepest path costs. Inside a tree nothing is followed: a symlink is
//! sent as a link, a FIFO, socket or device is skipped with a note, and every name is opened
//! relative to its directory with `O_NOFOLLOW`, so a sender serving a pull never leaves its
//! root through a link. Command-line sources of `zcp send` are opened as given (a link named
//! on the command line is followed, as `cp` and `scp` do).

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::Arc;

use zcp_engine::fs::{DirEntries, EntryKind, Meta};
use zcp_engine::{EngineError, fs};
use zcp_wire::{Filter, escape};

/// One thing to send.
#[derive(Debug)]
pub(crate) enum Entry {
    /// A directory to create; its mode and mtime are sent after every file (see
    /// [`Walker::dirs`]). `top`: a source directory itself (the top of a tree copied, which
    /// `--delete` prunes), not one beneath it nor one made to hold several sources.
    Dir { dest: Vec<u8>, top: bool },
    /// A file.
    File {
        /// Destination relative to the receiver's root.
        dest: Vec<u8>,
        /// Non-empty for a lone file sent scp-style: used when `dest` is a directory.
        name: Vec<u8>,
        /// Shared with the sending role's file state, which takes it as it is.
        file: Arc<File>,
        meta: Meta,
        display: String,
    },
    /// A symbolic link, sent as one.
    Link { dest: Vec<u8>, target: Vec<u8> },
    /// Not sent, with the reason. `fail`: a source the user named could not be sent (a
    /// failure); otherwise something inside a tree was passed over (special files, entries
    /// that vanished mid-walk), which is only noted.
    Skip {
        display: String,
        why: String,
        fail: bool,
        /// What was passed over is zcp's own (a part file or journal): a receiver keeps
        /// those under `--delete` too, so the walk is still whole.
        ours: bool,
    },
}

/// Where a walk starts.
#[derive(Debug, Clone)]
pub(crate) enum Top {
    /// A directory to create on the receiver (the destination of several sources).
    Dir { dest: Vec<u8> },
    /// A path on this host, as the user typed it.
    Local {
        path: PathBuf,
        dest: Vec<u8>,
        name: Vec<u8>,
    },
    /// A name in a directory beneath a root (the server in a pull), opened when the walk
    /// gets to it (thousands of `Get`s hold no descriptor each); `display` is the path as the
    /// client asked for it, raw.
    Beneath {
        root: std::sync::Arc<fs::Root>,
        parent: Vec<Vec<u8>>,
        name: Vec<u8>,
        dest: Vec<u8>,
        display: Vec<u8>,
    },
}

struct Level {
    fd: OwnedFd,
    entries: DirEntries,
    dest: Vec<u8>,
    /// The directory's path as shown, raw (escaped once, whole, when shown).
    display: Vec<u8>,
    /// Its path beneath the copied directory (empty for that directory), as filters see it.
    rel: Vec<u8>,
}

/// The walk over every source.
pub(crate) struct Walker {
    tops: std::collections::VecDeque<Top>,
    stack: Vec<Level>,
    recursive: bool,
    dirs: Vec<(Vec<u8>, Meta)>,
    /// Entries already walked and given back ([`Walker::put_back`]): they come first.
    back: std::collections::VecDeque<Entry>,
    /// `--exclude` / `--include`: what inside a tree is left out.
    filter: Arc<Filter>,
}

impl std::fmt::Debug for Walker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Walker(depth {}, {} sources left)",
            self.stack.len(),
            self.tops.len()
        )
    }
}

/// `a/b` for relative destination paths; `b` alone when `a` is empty or `.`.
pub(crate) fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    if a.is_empty() || a == b"." {
        return b.to_vec();
    }
    let mut out = a.to_vec();
    if !out.ends_with(b"/") {
        out.push(b'/');
    }
    out.extend_from_slice(b);
    out
}

fn shown(display: &[u8], name: &[u8]) -> Vec<u8> {
    join(display, name)
}

/// Why a destination path cannot cross the protocol, if it cannot: longer than
/// [`zcp_wire::MAX_PATH`] bytes, or a component longer than [`zcp_wire::MAX_NAME`].
fn over_limits(dest: &[u8], name: &[u8]) -> Option<String> {
    if name.len() > zcp_wire::MAX_NAME {
        return Some(format!(
            "its name is {} bytes, over the limit of {} bytes per component; not sent",
            name.len(),
            zcp_wire::MAX_NAME
        ));
    }
    (dest.len() > zcp_wire::MAX_PATH).then(|| {
        format!(
            "its destination path is {} bytes, over the limit of {} bytes; not sent",
            dest.len(),
            zcp_wire::MAX_PATH
        )
    })
}

impl Walker {
    /// A walk over `tops`; directories are entered only when `recursive`.
    pub(crate) fn new(tops: Vec<Top>, recursive: bool) -> Walker {
        Walker {
            tops: tops.into(),
            stack: Vec::new(),
            recursive,
            dirs: Vec::new(),
            back: std::collections::VecDeque::new(),
            filter: Arc::default(),
        }
    }

    /// The same walk, leaving out what `filter` excludes inside trees.
    pub(crate) fn filtered(mut self, filter: Arc<Filter>) -> Walker {
        self.filter = filter;
        self
    }

    /// Gives back `entries` taken from the walk (to look ahead at them): the walk yields them
    /// again, in order, before anything new.
    pub(crate) fn put_back(&mut self, entries: Vec<Entry>) {
        let mut entries: std::collections::VecDeque<Entry> = entries.into();
        entries.append(&mut self.back);
        self.back = entries;
    }

    /// What [`tally`] needs to count the sources still to walk as the walk would send them.
    pub(crate) fn tops(&self) -> Tally {
        Tally {
            tops: self.tops.iter().cloned().collect(),
            recursive: self.recursive,
            filter: self.filter.clone(),
        }
    }

    /// Directories seen so far, with the mode and mtime to give them once every file is in.
    pub(crate) fn dirs(&mut self) -> Vec<(Vec<u8>, Meta)> {
        std::mem::take(&mut self.dirs)
    }

    fn skip(display: String, why: impl std::fmt::Display) -> Entry {
        Entry::Skip {
            display,
            why: why.to_string(),
            fail: false,
            ours: false,
        }
    }

    fn fail(display: String, why: impl std::fmt::Display) -> Entry {
        Entry::Skip {
            display,
            why: why.to_string(),
            fail: true,
            ours: false,
        }
    }

    /// The entry for `name` in the directory open at `parent`, not following links. `file`:
    /// the directory listing says it is a regular file, so it is opened first and its facts
    /// are read from the descriptor (one path lookup instead of two); anything else, or a
    /// name that turns out not to be a regular file when opened, is looked at by name.
    /// `rel`: its path beneath the copied directory, for the filter (`None` for a source
    /// named on the command line, never filtered); `None` back when the filter leaves it out,
    /// decided before it is opened.
    fn visit(
        &mut self,
        parent: &OwnedFd,
        (name, file): (&[u8], bool),
        (dest, rel): (Vec<u8>, Option<Vec<u8>>),
        raw: Vec<u8>,
    ) -> Option<Entry> {
        let display = escape(&raw);
        if fs::is_reserved_name(name) {
            // What an interrupted transfer into this tree left behind: no receiver takes it.
            return Some(Entry::Skip {
                display,
                why: "is a part file or journal of an interrupted zcp transfer; not sent".into(),
                fail: false,
                ours: true,
            });
        }
        let filter = self.filter.clone();
        let excluded = |is_dir| rel.as_deref().is_some_and(|r| filter.excludes(r, is_dir));
        if file {
            if excluded(false) {
                return None;
            }
            match fs::open_at(parent, name).and_then(|fd| fs::stat_fd(&fd).map(|m| (fd, m))) {
                Ok((fd, meta)) if meta.kind == EntryKind::File => {
                    return Some(Entry::File {
                        dest,
                        name: Vec::new(),
                        file: Arc::new(File::from(fd)),
                        meta,
                        display,
                    });
                }
                Err(EngineError::Sys { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    return Some(Self::skip(display, format!("vanished ({source})")));
                }
                // Replaced by something else meanwhile, or refused: looked at by name below.
                _ => {}
            }
        }
        let meta = match fs::stat_at(parent, name) {
            Ok(m) => m,
            Err(EngineError::Sys { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Some(Self::skip(display, format!("vanished ({source})")));
            }
            Err(e) => return Some(Self::fail(display, format!("cannot be read ({e})"))),
        };
        if excluded(meta.kind == EntryKind::Dir) {
            return None;
        }
        Some(match meta.kind {
            EntryKind::File => match fs::open_at(parent, name) {
                Ok(fd) => Entry::File {
                    dest,
                    name: Vec::new(),
                    file: Arc::new(File::from(fd)),
                    meta,
                    display,
                },
                Err(e) => Self::fail(display, format!("cannot be opened ({e})")),
            },
            EntryKind::Dir => {
                let rel = rel.unwrap_or_default();
                self.enter(fs::open_at(parent, name), (dest, rel), raw, meta)
            }
            EntryKind::Symlink => match fs::read_link_at(parent, name) {
                Ok(target) => Entry::Link { dest, target },
                Err(e) => Self::fail(display, format!("link cannot be read ({e})")),
            },
            EntryKind::Other => Self::skip(
                display,
                format!(
                    "is a {}; only files, directories and links are sent",
                    meta.other
                ),
            ),
            EntryKind::Missing => Self::skip(display, "vanished"),
        })
    }

    /// Enters a directory; `rel` is its path beneath the copied directory (empty for that
    /// directory itself).
    fn enter(
        &mut self,
        fd: Result<OwnedFd, EngineError>,
        (dest, rel): (Vec<u8>, Vec<u8>),
        raw: Vec<u8>,
        meta: Meta,
    ) -> Entry {
        let display = escape(&raw);
        if !self.recursive {
            return Self::fail(display, "is a directory; add -r to copy directories");
        }
        // What cannot be read fails (the exit code says so); special files and entries that
        // vanished mid-walk are only noted.
        let fd = match fd {
            Ok(fd) => fd,
            Err(e) => return Self::fail(display, format!("cannot be opened ({e})")),
        };
        let entries = match fs::read_dir(&fd) {
            Ok(e) => e,
            Err(e) => return Self::fail(display, format!("cannot be listed ({e})")),
        };
        self.dirs.push((dest.clone(), meta));
        // A source directory itself has no path beneath the copied directory.
        let top = rel.is_empty();
        self.stack.push(Level {
            fd,
            entries,
            dest: dest.clone(),
            display: raw,
            rel,
        });
        Entry::Dir { dest, top }
    }

    fn top(&mut self, top: Top) -> Entry {
        match top {
            Top::Dir { dest } => Entry::Dir { dest, top: false },
            Top::Local { path, dest, name } => {
                let raw = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()).to_vec();
                let display = escape(&raw);
                let fd = match fs::open_path(&path) {
                    Ok(fd) => fd,
                    Err(e) => return Self::fail(display, e),
                };
                let meta = match fs::stat_fd(&fd) {
                    Ok(m) => m,
                    Err(e) => return Self::fail(display, e),
                };
                match meta.kind {
                    EntryKind::File => Entry::File {
                        dest,
                        name,
                        file: Arc::new(File::from(fd)),
                        meta,
                        display,
                    },
                    EntryKind::Dir => self.enter(Ok(fd), (dest, Vec::new()), raw, meta),
                    _ => Self::fail(
                        display,
                        format!(
                            "is a {}; only files, directories and links are sent",
                            meta.other
                        ),
                    ),
                }
            }
            Top::Beneath {
                root,
                parent,
                name,
                dest,
                display,
            } => {
                let parent = match root.open_dir(&parent, false) {
                    Ok(fd) => fd,
                    Err(e) => return Self::fail(escape(&display), format!("{e} on the server")),
                };
                let shown = escape(&display);
                // A named source is never filtered (`rel` is `None`), so there is an entry.
                match self.visit(&parent, (&name, false), (dest, None), display) {
                    // A path the client asked for that is not there is a failure, not a note;
                    // and it did not vanish mid-walk: it was never there to be found.
                    Some(Entry::Skip { display, why, .. }) if why.starts_with("vanished") => {
                        Self::fail(display, "no such file or directory on the server")
                    }
                    Some(Entry::Skip { display, why, .. }) => Self::fail(display, why),
                    Some(other) => other,
                    None => Self::fail(shown, "left out by a filter"),
                }
            }
        }
    }
}

/// Entries [`tally`] looks at, at most.
const TALLY_MAX_ENTRIES: u64 = 2_000_000;
/// Time [`tally`] may take, at most.
const TALLY_MAX_TIME: std::time::Duration = std::time::Duration::from_secs(30);

/// What [`tally`] counts: the sources still to walk, as the walk would.
#[derive(Debug)]
pub(crate) struct Tally {
    pub(crate) tops: Vec<Top>,
    pub(crate) recursive: bool,
    pub(crate) filter: Arc<Filter>,
}

/// Counts the regular files beneath the sources and their bytes, as the walk would send them
/// (nothing followed, zcp's own part files and what the filter excludes left out), with `stat`
/// alone: what a progress display shows as the total. `None` when the count would take too
/// long (more than [`TALLY_MAX_ENTRIES`] entries or [`TALLY_MAX_TIME`]): the display then
/// shows no total. Gives up (`None`) as soon as `going` is cleared.
pub(crate) fn tally(t: Tally, going: &std::sync::atomic::AtomicBool) -> Option<(u64, u64)> {
    let until = std::time::Instant::now() + TALLY_MAX_TIME;
    let (mut files, mut bytes, mut seen) = (0u64, 0u64, 0u64);
    // One directory being listed per level of depth, as in the walk: never more descriptors
    // than the deepest path needs; with each, its path beneath the copied directory.
    let mut levels: Vec<(OwnedFd, DirEntries, Vec<u8>)> = Vec::new();
    let recursive = t.recursive;
    let mut count = |m: &Meta, dir: Option<OwnedFd>, rel: Vec<u8>, levels: &mut Vec<_>| match m.kind
    {
        EntryKind::File => {
            files += 1;
            bytes = bytes.saturating_add(m.size);
        }
        EntryKind::Dir if recursive => {
            levels.extend(dir.and_then(|d| fs::read_dir(&d).ok().map(|e| (d, e, rel))));
        }
        _ => {}
    };
    for top in t.tops {
        match top {
            Top::Dir { .. } => {}
            Top::Local { path, .. } => {
                let Ok(fd) = fs::open_path(&path) else {
                    continue;
                };
                let Ok(m) = fs::stat_fd(&fd) else { continue };
                count(&m, Some(fd), Vec::new(), &mut levels);
            }
            Top::Beneath {
                root, parent, name, ..
            } => {
                let Ok(dir) = root.open_dir(&parent, false) else {
                    continue;
                };
                let Ok(m) = fs::stat_at(&dir, &name) else {
                    continue;
                };
                let fd = (m.kind == EntryKind::Dir)
                    .then(|| fs::open_at(&dir, &name).ok())
                    .flatten();
                count(&m, fd, Vec::new(), &mut levels);
            }
        }
        while let Some((dir, entries, rel)) = levels.last_mut() {
            let Some(Ok(name)) = entries.next() else {
                levels.pop();
                continue;
            };
            seen += 1;
            if seen > TALLY_MAX_ENTRIES
                || (seen % 1024 == 0
                    && (std::time::Instant::now() > until
                        || !going.load(std::sync::atomic::Ordering::Relaxed)))
            {
                return None;
            }
            if fs::is_reserved_name(&name) {
                continue;
            }
            let Ok(m) = fs::stat_at(&*dir, &name) else {
                continue;
            };
            let rel = join(rel, &name);
            if t.filter.excludes(&rel, m.kind == EntryKind::Dir) {
                continue;
            }
            let fd = (m.kind == EntryKind::Dir)
                .then(|| fs::open_at(&*dir, &name).ok())
                .flatten();
            count(&m, fd, rel, &mut levels);
        }
    }
    Some((files, bytes))
}

impl Iterator for Walker {
    type Item = Entry;

    fn next(&mut self) -> Option<Entry> {
        if let Some(e) = self.back.pop_front() {
            return Some(e);
        }
        loop {
            if let Some(level) = self.stack.last_mut() {
                match level.entries.next_entry() {
                    None => {
                        self.stack.pop();
                    }
                    Some(Err(e)) => {
                        let display = escape(&level.display);
                        self.stack.pop();
                        return Some(Self::fail(display, format!("listing stopped ({e})")));
                    }
                    Some(Ok((name, file))) => {
                        let dest = join(&level.dest, &name);
                        let rel = join(&level.rel, &name);
                        let display = shown(&level.display, &name);
                        if let Some(why) = over_limits(&dest, &name) {
                            // Only this entry (and, for a directory, what is in it) fails:
                            // nothing is announced, so the receiver creates nothing for it.
                            return Some(Self::fail(escape(&display), why));
                        }
                        // Take the level out for the visit (which may push a child level
                        // for a subdirectory), then put it back *below* that child.
                        let level = self.stack.pop().expect("checked above");
                        let depth = self.stack.len();
                        let entry =
                            self.visit(&level.fd, (&name, file), (dest, Some(rel)), display);
                        self.stack.insert(depth, level);
                        match entry {
                            Some(entry) => return Some(entry),
                            None => continue,
                        }
                    }
                }
                continue;
            }
            let top = self.tops.pop_front()?;
            return Some(self.top(top));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn names(w: Walker) -> Vec<String> {
        let mut v: Vec<String> = w
            .map(|e| match e {
                Entry::Dir { dest, top } => {
                    format!("D{} {}", if top { "+" } else { "" }, escape(&dest))
                }
                Entry::File { dest, meta, .. } => format!("F {} {}", escape(&dest), meta.size),
                Entry::Link { dest, target } => {
                    format!("L {} -> {}", escape(&dest), escape(&target))
                }
                Entry::Skip { display, why, .. } => format!("S {display}: {why}"),
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn walks_trees_without_following_links() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("tree");
        std::fs::create_dir_all(t.join("a/b")).unwrap();
        std::fs::create_dir(t.join("empty")).unwrap();
        std::fs::write(t.join("a/b/f"), b"xyz").unwrap();
        std::fs::write(t.join("zero"), b"").unwrap();
        std::fs::write(t.join("a/.zcp-00ff.part"), b"left by a killed transfer").unwrap();
        symlink("/etc", t.join("a/outside")).unwrap();
        let made = std::process::Command::new("mkfifo")
            .arg(t.join("fifo"))
            .status()
            .unwrap();
        assert!(made.success());
        let tops = vec![Top::Local {
            path: t.clone(),
            dest: b"dst/tree".to_vec(),
            name: Vec::new(),
        }];
        // The count agrees with the walk: two files of 3 and 0 bytes, nothing followed.
        let on = std::sync::atomic::AtomicBool::new(true);
        let count = |recursive| {
            let filter = Arc::default();
            tally(
                Tally {
                    tops: tops.clone(),
                    recursive,
                    filter,
                },
                &on,
            )
        };
        assert_eq!(count(true), Some((2, 3)));
        assert_eq!(count(false), Some((0, 0)));
        let got = names(Walker::new(tops.clone(), true));
        let skip = |what: &str| {
            got.iter()
                .find(|s| s.starts_with("S ") && s.contains(what))
                .unwrap_or_else(|| panic!("{what} skipped: {got:?}"))
                .clone()
        };
        let fifo_skip = skip("FIFO");
        assert!(fifo_skip.contains("fifo"), "{fifo_skip}");
        let part_skip = skip("part file");
        let mut want = vec![
            "D+ dst/tree",
            "D dst/tree/a",
            "D dst/tree/a/b",
            "D dst/tree/empty",
            "F dst/tree/a/b/f 3",
            "F dst/tree/zero 0",
            "L dst/tree/a/outside -> /etc",
        ];
        want.push(&fifo_skip);
        want.push(&part_skip);
        want.sort();
        assert_eq!(got, want);

        // Filtered: the walk and the count leave out the same things; an excluded directory
        // is not entered, and the FIFO excluded by name is not reported as skipped.
        let rules = ["- /a/b/", "- fifo", "- outside"].map(|r| r.to_string());
        let filter = Arc::new(Filter::from_wire(&rules).unwrap());
        let t2 = Tally {
            tops: tops.clone(),
            recursive: true,
            filter: filter.clone(),
        };
        assert_eq!(tally(t2, &on), Some((1, 0)));
        let got = names(Walker::new(tops.clone(), true).filtered(filter));
        let mut want = vec![
            "D+ dst/tree",
            "D dst/tree/a",
            "D dst/tree/empty",
            "F dst/tree/zero 0",
        ];
        want.push(&part_skip);
        want.sort();
        assert_eq!(got, want);

        // Without -r a directory is skipped with the reason.
        let w = Walker::new(
            vec![Top::Local {
                path: t,
                dest: b"x".to_vec(),
                name: Vec::new(),
            }],
            false,
        );
        assert!(names(w)[0].contains("-r"));
    }

    #[test]
    fn a_path_over_the_limits_fails_only_its_entry() {
        let d = tempfile::tempdir().unwrap();
        let t = d.path().join("tree");
        std::fs::create_dir_all(t.join("subdir")).unwrap();
        std::fs::write(t.join("ok"), b"1").unwrap();
        std::fs::write(t.join("subdir/f"), b"2").unwrap();
        std::fs::write(t.join("x".repeat(120)), b"3").unwrap();
        // A destination 8 bytes short of the limit: "ok" and "subdir" fit, a 120-byte name
        // does not, nor does "subdir/f".
        let dest = vec![b'd'; zcp_wire::MAX_PATH - 8];
        let w = Walker::new(
            vec![Top::Local {
                path: t,
                dest: dest.clone(),
                name: Vec::new(),
            }],
            true,
        );
        let got: Vec<String> = names(w)
            .into_iter()
            .map(|s| s.replace(&*String::from_utf8(dest.clone()).unwrap(), "D"))
            .collect();
        assert_eq!(got.len(), 5, "{got:?}");
        assert!(got.contains(&"D+ D".to_string()), "{got:?}");
        assert!(got.contains(&"D D/subdir".to_string()), "{got:?}");
        assert!(got.contains(&"F D/ok 1".to_string()), "{got:?}");
        let fails: Vec<&String> = got.iter().filter(|s| s.starts_with("S ")).collect();
        assert_eq!(fails.len(), 2, "{got:?}");
        for f in fails {
            assert!(f.contains("over the limit of 4096 bytes"), "{f}");
        }
        assert!(
            got.iter()
                .any(|s| s.contains("subdir/f: its destination path")),
            "{got:?}"
        );
    }

    #[test]
    fn an_unreadable_source_is_named() {
        let w = Walker::new(
            vec![Top::Local {
                path: "/nonexistent/zcp-test/file.bin".into(),
                dest: b"x".to_vec(),
                name: Vec::new(),
            }],
            false,
        );
        let got = names(w);
        assert!(got[0].contains("/nonexistent/zcp-test/file.bin"), "{got:?}");
    }
}
