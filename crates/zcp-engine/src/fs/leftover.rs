//! What interrupted transfers left behind: finding part files and journals beneath a root
//! (`zcp clean`, and the count `zcp serve` logs at start) and removing them.
//!
//! The walk holds one directory open per level, opens each subdirectory from its parent's
//! descriptor with `O_NOFOLLOW | O_DIRECTORY` (a symlink is never followed, not even one that
//! replaces a directory during the walk), and looks only at regular files named exactly as
//! [`PartFile`] names them. Removal takes the part file's lock first: a file a running
//! transfer holds is reported in use and left alone.

use std::collections::BTreeMap;

use super::*;

/// Which of a receiver's own files a name is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum LeftoverKind {
    /// `.zcp-<key>.part`: the data received so far.
    Part,
    /// `.zcp-<key>.journal`: which of its chunks are durable, for a resume.
    Journal,
}

/// Hex digits in a receiver's part-file key ([`part_key`]).
const KEY_DIGITS: usize = 16;

/// The key and kind of `name` when it is exactly a name a receiver gives a part file or a
/// journal (`.zcp-` + 16 lowercase hex digits + `.part` or `.journal`, see [`part_key`]);
/// `None` for anything else, however similar (other case, other length, other suffix).
pub fn leftover_name(name: &[u8]) -> Option<(&str, LeftoverKind)> {
    let rest = name.strip_prefix(b".zcp-")?;
    let (key, kind) = if let Some(k) = rest.strip_suffix(b".part") {
        (k, LeftoverKind::Part)
    } else {
        (rest.strip_suffix(b".journal")?, LeftoverKind::Journal)
    };
    let hex = |b: &u8| b.is_ascii_digit() || (b'a'..=b'f').contains(b);
    if key.len() != KEY_DIGITS || !key.iter().all(hex) {
        return None;
    }
    Some((std::str::from_utf8(key).ok()?, kind))
}

/// One file found: what `fstatat` said of it when the walk passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileFacts {
    /// Size in bytes.
    pub size: u64,
    /// Bytes allocated on the disk (`st_blocks` × 512): what removing it frees.
    pub allocated: u64,
    /// Last modification.
    pub mtime: (i64, u32),
    /// Device and inode: removal checks the name still holds this file.
    pub id: (u64, u64),
}

/// A part file and its journal (either may be missing) in one directory, sharing a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftover {
    /// The directory, relative to the root (empty for the root itself), exact bytes.
    pub dir: Vec<u8>,
    /// The key both names share.
    pub key: String,
    /// The part file, if there is one.
    pub part: Option<FileFacts>,
    /// The journal, if there is one.
    pub journal: Option<FileFacts>,
}

impl Leftover {
    /// The file's path relative to the root, exact bytes.
    pub fn path(&self, kind: LeftoverKind) -> Vec<u8> {
        let mut p = self.dir.clone();
        if !p.is_empty() {
            p.push(b'/');
        }
        let ext = match kind {
            LeftoverKind::Part => "part",
            LeftoverKind::Journal => "journal",
        };
        p.extend_from_slice(format!(".zcp-{}.{ext}", self.key).as_bytes());
        p
    }

    /// The files present, part file first.
    pub fn files(&self) -> impl Iterator<Item = (LeftoverKind, FileFacts)> + '_ {
        [
            (LeftoverKind::Part, self.part),
            (LeftoverKind::Journal, self.journal),
        ]
        .into_iter()
        .filter_map(|(k, f)| f.map(|f| (k, f)))
    }

    /// The latest modification of its files: how long ago the transfer last wrote.
    pub fn mtime(&self) -> (i64, u32) {
        self.files().map(|(_, f)| f.mtime).max().unwrap_or((0, 0))
    }
}

/// How a walk ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScanEnd {
    /// Directory entries read.
    pub entries: u64,
    /// Whether it stopped at the cap on entries before seeing the whole tree.
    pub capped: bool,
    /// Directories it could not open or read (relative path, why); what is beneath them was
    /// not looked at.
    pub unreadable: Vec<(Vec<u8>, String)>,
}

/// One level of the walk: a directory being read and the leftovers found in it so far.
struct Level {
    entries: rustix::fs::Dir,
    rel: Vec<u8>,
    found: BTreeMap<String, Leftover>,
}

impl Level {
    fn open(fd: OwnedFd, rel: Vec<u8>) -> Result<Level, Errno> {
        Ok(Level {
            entries: rustix::fs::Dir::new(fd)?,
            rel,
            found: BTreeMap::new(),
        })
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.entries.fd().expect("the directory's descriptor")
    }

    /// Opens subdirectory `name`, never through a symlink: `Ok(None)` when it is one now, or
    /// is gone (it changed since it was listed); the path and why when it cannot be read.
    fn descend(&self, name: &[u8]) -> Result<Option<Level>, (Vec<u8>, String)> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let rel = join(&self.rel, name);
        match rustix::fs::openat(self.fd(), name, flags, Mode::empty()) {
            Ok(fd) => match Level::open(fd, rel.clone()) {
                Ok(level) => Ok(Some(level)),
                Err(e) => Err((rel, why(e))),
            },
            Err(Errno::LOOP | Errno::NOTDIR | Errno::NOENT) => Ok(None),
            Err(e) => Err((rel, why(e))),
        }
    }

    /// Notes entry `name` when it is a part file or a journal: a regular file of that name.
    fn note(&mut self, name: &[u8]) {
        let Some((key, which)) = leftover_name(name) else {
            return;
        };
        let Ok(st) = rustix::fs::statat(self.fd(), name, AtFlags::SYMLINK_NOFOLLOW) else {
            return;
        };
        if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
            return;
        }
        let facts = FileFacts {
            size: st.st_size as u64,
            allocated: st.st_blocks as u64 * 512,
            mtime: (st.st_mtime, st.st_mtime_nsec as u32),
            id: (st.st_dev, st.st_ino),
        };
        let rel = &self.rel;
        let l = self
            .found
            .entry(key.to_string())
            .or_insert_with(|| Leftover {
                dir: rel.clone(),
                key: key.to_string(),
                part: None,
                journal: None,
            });
        match which {
            LeftoverKind::Part => l.part = Some(facts),
            LeftoverKind::Journal => l.journal = Some(facts),
        }
    }
}

fn join(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

fn why(e: Errno) -> String {
    std::io::Error::from(e).to_string()
}

/// Walks the tree beneath `root` depth first, never through a symlink, and hands each
/// directory's leftovers to `found` with that directory's descriptor (for
/// [`remove_leftover`]) once the directory has been read. Stops after `cap` entries when
/// given. Directories that cannot be opened or read are listed in [`ScanEnd::unreadable`].
pub fn scan_leftovers(
    root: BorrowedFd<'_>,
    cap: Option<u64>,
    mut found: impl FnMut(BorrowedFd<'_>, Leftover),
) -> ScanEnd {
    let mut end = ScanEnd::default();
    let first = rustix::fs::openat(
        root,
        c".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .and_then(|fd| Level::open(fd, Vec::new()));
    let mut stack = match first {
        Ok(level) => vec![level],
        Err(e) => {
            end.unreadable.push((Vec::new(), why(e)));
            return end;
        }
    };
    // Hands over what a level found, once it is done (or the walk stops).
    let mut finish = |mut done: Level| {
        for (_, l) in std::mem::take(&mut done.found) {
            found(done.fd(), l);
        }
    };
    while let Some(top) = stack.last_mut() {
        if cap.is_some_and(|c| end.entries >= c) {
            end.capped = true;
            break;
        }
        let entry = match top.entries.read() {
            Some(Ok(entry)) => entry,
            other => {
                if let Some(Err(e)) = other {
                    end.unreadable.push((top.rel.clone(), why(e)));
                }
                finish(stack.pop().expect("a level"));
                continue;
            }
        };
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        end.entries += 1;
        let mut kind = entry.file_type();
        if kind == FileType::Unknown {
            match rustix::fs::statat(top.fd(), name, AtFlags::SYMLINK_NOFOLLOW) {
                Ok(st) => kind = FileType::from_raw_mode(st.st_mode),
                Err(_) => continue,
            }
        }
        if kind != FileType::Directory {
            top.note(name);
            continue;
        }
        match top.descend(name) {
            Ok(Some(level)) => stack.push(level),
            Ok(None) => {}
            Err(unreadable) => end.unreadable.push(unreadable),
        }
    }
    while let Some(level) = stack.pop() {
        finish(level);
    }
    end
}

/// What [`remove_leftover`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    /// Its files are gone.
    Removed,
    /// A dry run: they would have been removed.
    WouldRemove,
    /// A transfer holds the part file's lock: left alone.
    InUse,
    /// A file is no longer the one the walk saw (replaced, gone, or a part file appeared
    /// beside a lone journal): left alone.
    Changed,
}

/// Whether `name` in `dir` is still the regular file `facts` describes.
fn still(dir: BorrowedFd<'_>, name: &CString, facts: &FileFacts) -> Result<bool, EngineError> {
    match rustix::fs::statat(dir, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(FileType::from_raw_mode(st.st_mode) == FileType::RegularFile
            && (st.st_dev, st.st_ino) == facts.id),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(EngineError::sys("fstatat", "partial file", e)),
    }
}

/// Removes a leftover's journal, then its part file, from `dir` (the directory the walk
/// handed over), holding the part file's lock meanwhile: a transfer that holds it (running,
/// or still letting go) makes this [`Removal::InUse`], and one that starts meanwhile waits
/// for the lock and then makes a new part file ([`PartFile::open`] never takes over an
/// unlinked one). Nothing is removed that is not still the regular file the walk saw. With
/// `dry_run`, the lock is only tried.
pub fn remove_leftover(
    dir: BorrowedFd<'_>,
    l: &Leftover,
    dry_run: bool,
) -> Result<Removal, EngineError> {
    let (part, journal) = part_names(&l.key)?;
    let _lock = match &l.part {
        Some(facts) => {
            let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
            let fd = match rustix::fs::openat(dir, part.as_c_str(), flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::NOENT | Errno::LOOP) => return Ok(Removal::Changed),
                Err(e) => return Err(EngineError::sys("openat", "partial file", e)),
            };
            let st =
                rustix::fs::fstat(&fd).map_err(|e| EngineError::sys("fstat", "partial file", e))?;
            if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile
                || (st.st_dev, st.st_ino) != facts.id
            {
                return Ok(Removal::Changed);
            }
            match rustix::fs::flock(&fd, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {}
                Err(Errno::WOULDBLOCK) => return Ok(Removal::InUse),
                Err(e) => return Err(EngineError::sys("flock", "partial file", e)),
            }
            if !still(dir, &part, facts)? {
                return Ok(Removal::Changed);
            }
            Some(fd)
        }
        None => {
            // A journal alone: a transfer to its target would have made (and locked) a part
            // file first. One that did since the walk decides about the journal itself.
            match rustix::fs::statat(dir, part.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Err(Errno::NOENT) => None,
                Ok(_) => return Ok(Removal::Changed),
                Err(e) => return Err(EngineError::sys("fstatat", "partial file", e)),
            }
        }
    };
    if let Some(facts) = &l.journal
        && !still(dir, &journal, facts)?
    {
        return Ok(Removal::Changed);
    }
    if dry_run {
        return Ok(Removal::WouldRemove);
    }
    if l.journal.is_some() {
        retry("unlinkat", "journal", None, || {
            rustix::fs::unlinkat(dir, journal.as_c_str(), AtFlags::empty())
        })?;
    }
    if l.part.is_some() {
        retry("unlinkat", "partial file", None, || {
            rustix::fs::unlinkat(dir, part.as_c_str(), AtFlags::empty())
        })?;
    }
    Ok(Removal::Removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::path::Path;

    const K1: &str = "0123456789abcdef";
    const K2: &str = "fedcba9876543210";

    fn put(p: &Path, bytes: usize) {
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, vec![7u8; bytes]).unwrap();
    }

    fn scan_all(root: &Path, cap: Option<u64>) -> (Vec<Leftover>, ScanEnd) {
        let fd = std::fs::File::open(root).unwrap();
        let mut found = Vec::new();
        let end = scan_leftovers(fd.as_fd(), cap, |_, l| found.push(l));
        found.sort_by(|a, b| (&a.dir, &a.key).cmp(&(&b.dir, &b.key)));
        (found, end)
    }

    #[test]
    fn only_the_exact_names_a_receiver_gives_are_leftovers() {
        assert_eq!(
            leftover_name(format!(".zcp-{K1}.part").as_bytes()),
            Some((K1, LeftoverKind::Part))
        );
        assert_eq!(
            leftover_name(format!(".zcp-{K1}.journal").as_bytes()),
            Some((K1, LeftoverKind::Journal))
        );
        // The receiver's own naming function makes names that are recognised.
        let key = part_key(b"big.bin");
        let (part, journal) = part_names(&key).unwrap();
        assert_eq!(leftover_name(part.as_bytes()).unwrap().0, key);
        assert_eq!(leftover_name(journal.as_bytes()).unwrap().0, key);
        for other in [
            ".zcp-0123456789ABCDEF.part",
            ".ZCP-0123456789abcdef.part",
            ".zcp-0123456789abcdef.PART",
            ".zcp-0123456789abcde.part",
            ".zcp-0123456789abcdef0.part",
            ".zcp-0123456789abcdeg.part",
            ".zcp-0123456789abcdef.part.bak",
            ".zcp-0123456789abcdef.link",
            ".zcp-0123456789abcdef.",
            "zcp-0123456789abcdef.part",
            "x.zcp-0123456789abcdef.part",
            ".zcp-bench-4242.part",
            ".zcp-probe-0123456789abcdef",
            ".zcp-.part",
        ] {
            assert_eq!(leftover_name(other.as_bytes()), None, "{other}");
        }
    }

    #[test]
    fn the_walk_finds_part_files_and_journals_and_never_follows_a_symlink() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("root");
        put(&root.join(format!(".zcp-{K1}.part")), 5000);
        put(&root.join(format!(".zcp-{K1}.journal")), 100);
        put(&root.join(format!("a/b/.zcp-{K2}.part")), 10);
        put(&root.join(format!("a/.zcp-{K2}.journal")), 20);
        // Look-alikes and things that are not regular files stay unseen.
        put(&root.join("a/.zcp-0123456789ABCDEF.part"), 1);
        put(&root.join(format!("a/.zcp-{K1}.part.keep")), 1);
        symlink("/etc/passwd", root.join(format!("a/b/.zcp-{K1}.part"))).unwrap();
        std::fs::create_dir_all(root.join(format!("dir/.zcp-{K2}.part"))).unwrap();
        put(&root.join(format!("dir/.zcp-{K2}.part/inner")), 1);
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join(format!("dir/.zcp-{K1}.journal")),
            FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        // A symlink to a directory full of part files, beneath and at the root's level.
        let outside = d.path().join("outside");
        put(&outside.join(format!(".zcp-{K1}.part")), 1);
        symlink(&outside, root.join("link")).unwrap();
        let (found, end) = scan_all(&root, None);
        assert!(!end.capped && end.unreadable.is_empty(), "{end:?}");
        let got: Vec<(String, &str, Option<u64>, Option<u64>)> = found
            .iter()
            .map(|l| {
                (
                    String::from_utf8_lossy(&l.dir).into_owned(),
                    l.key.as_str(),
                    l.part.map(|f| f.size),
                    l.journal.map(|f| f.size),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (String::new(), K1, Some(5000), Some(100)),
                ("a".into(), K2, None, Some(20)),
                ("a/b".into(), K2, Some(10), None),
            ]
        );
        assert_eq!(
            found[2].path(LeftoverKind::Part),
            format!("a/b/.zcp-{K2}.part").into_bytes()
        );
        assert!(found[0].part.unwrap().allocated >= 4096);
    }

    #[test]
    fn the_walk_stops_at_its_cap_and_still_reports_what_it_saw() {
        let d = tempfile::tempdir().unwrap();
        put(&d.path().join(format!(".zcp-{K1}.part")), 1);
        for i in 0..50 {
            put(&d.path().join(format!("many/f{i}")), 1);
        }
        let (found, end) = scan_all(d.path(), Some(10));
        assert!(end.capped, "{end:?}");
        assert_eq!(end.entries, 10);
        let (all, end) = scan_all(d.path(), None);
        assert!(!end.capped);
        assert_eq!(end.entries, 52);
        assert_eq!(all.len(), 1);
        // Whether the part file was among the first ten entries depends on the directory
        // order; it is reported if it was.
        assert!(found.len() <= 1);
    }

    fn one(root: &Path) -> (std::fs::File, Leftover) {
        let (mut found, _) = scan_all(root, None);
        assert_eq!(found.len(), 1, "{found:?}");
        let l = found.pop().unwrap();
        let dir = std::fs::File::open(root.join(String::from_utf8_lossy(&l.dir).as_ref())).unwrap();
        (dir, l)
    }

    #[test]
    fn removal_skips_a_locked_part_file_and_takes_the_journal_with_it() {
        let d = tempfile::tempdir().unwrap();
        let r = Root::open(d.path()).unwrap();
        let dir = Arc::new(r.open_dir(&[], false).unwrap());
        let (mut held, _) = PartFile::open(dir.clone(), K1).unwrap();
        held.start_journal(b"header").unwrap();
        let (fd, l) = one(d.path());
        assert!(l.part.is_some() && l.journal.is_some());
        for dry in [true, false] {
            assert_eq!(
                remove_leftover(fd.as_fd(), &l, dry).unwrap(),
                Removal::InUse
            );
        }
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
        held.set_keep(true);
        drop(held);
        assert_eq!(
            remove_leftover(fd.as_fd(), &l, true).unwrap(),
            Removal::WouldRemove
        );
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2, "a dry run");
        assert_eq!(
            remove_leftover(fd.as_fd(), &l, false).unwrap(),
            Removal::Removed
        );
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        // A transfer to the same target afterwards starts a fresh part file.
        let (p, existed) = PartFile::open(dir, K1).unwrap();
        assert!(!existed);
        drop(p);
    }

    #[test]
    fn removal_leaves_files_that_changed_since_the_walk() {
        let d = tempfile::tempdir().unwrap();
        let part = d.path().join(format!(".zcp-{K1}.part"));
        put(&part, 10);
        let (fd, l) = one(d.path());
        // Replaced by another file under the same name (renamed over it, as a new inode).
        put(&d.path().join("new"), 10);
        std::fs::rename(d.path().join("new"), &part).unwrap();
        assert_eq!(
            remove_leftover(fd.as_fd(), &l, false).unwrap(),
            Removal::Changed
        );
        assert!(part.exists());
        // Replaced by a symlink: the link is not followed, nothing removed.
        let target = d.path().join("mine");
        put(&target, 3);
        let (fd, l) = one(d.path());
        std::fs::remove_file(&part).unwrap();
        symlink(&target, &part).unwrap();
        assert_eq!(
            remove_leftover(fd.as_fd(), &l, false).unwrap(),
            Removal::Changed
        );
        assert!(target.exists() && part.symlink_metadata().is_ok());
        std::fs::remove_file(&part).unwrap();
        // A lone journal whose part file appeared meanwhile.
        let journal = d.path().join(format!(".zcp-{K2}.journal"));
        put(&journal, 10);
        std::fs::remove_file(&target).unwrap();
        let (fd, l) = one(d.path());
        put(&d.path().join(format!(".zcp-{K2}.part")), 1);
        assert_eq!(
            remove_leftover(fd.as_fd(), &l, false).unwrap(),
            Removal::Changed
        );
        assert!(journal.exists());
    }
}
