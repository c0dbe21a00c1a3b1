//! Removing an entry and everything beneath it (`--delete`), never following a link, never
//! descending into another mount, and keeping what the caller says to keep.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::{AtFlags, Mode, OFlags, StatxFlags};
use rustix::io::Errno;

use super::{DirEntries, EntryKind, entry_kind, path_error, read_dir, show};
use crate::EngineError;

/// Directories deep a removal goes at most (two descriptors each: the directory's and its
/// listing's).
pub const MAX_REMOVE_DEPTH: usize = 256;

/// What a removal did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Removed {
    /// Entries removed (or, in a dry run, that would be), the entry itself included.
    pub removed: u64,
    /// Entries kept because the caller's `keep` said so. With any, the directories that hold
    /// them stay, the entry itself among them.
    pub kept: u64,
}

/// What [`remove_entry`] asks of its caller as it goes.
pub trait RemoveGuide {
    /// Whether to keep `path` (beneath the directory given to [`remove_entry`], starting
    /// with the entry's own name, `/`-separated), a directory when `dir`.
    fn keep(&mut self, path: &[u8], dir: bool) -> bool;
    /// Called after every entry looked at: `false` stops the removal where it is (what was
    /// removed stays removed).
    fn go_on(&mut self) -> bool;
}

/// One directory being emptied: its descriptor (and the listing's own), its path from the
/// start, and whether anything in it is kept.
struct Level {
    fd: OwnedFd,
    entries: DirEntries,
    path: Vec<u8>,
    kept: bool,
}

/// The mount a descriptor is on: its mount ID (`statx`, Linux 5.8 and later; two bind
/// mounts of one filesystem share a device but not a mount ID) where the kernel gives one,
/// and its device.
fn mount_of(fd: BorrowedFd<'_>) -> Result<(Option<u64>, u64), EngineError> {
    let id = rustix::fs::statx(fd, "", AtFlags::EMPTY_PATH, StatxFlags::MNT_ID)
        .ok()
        .filter(|s| s.stx_mask & StatxFlags::MNT_ID.bits() != 0)
        .map(|s| s.stx_mnt_id);
    let st = rustix::fs::fstat(fd).map_err(|e| EngineError::sys("fstat", "directory", e))?;
    Ok((id, st.st_dev))
}

/// Whether names in directory `dir` are matched without regard to case: a directory with
/// ext4's or f2fs's casefold flag, or a filesystem that folds case (FAT, exFAT, NTFS, SMB,
/// HFS+).
pub fn case_insensitive(dir: impl AsFd) -> bool {
    const FS_CASEFOLD_FL: u32 = 0x4000_0000;
    if rustix::fs::ioctl_getflags(&dir).is_ok_and(|f| f.bits() & FS_CASEFOLD_FL != 0) {
        return true;
    }
    rustix::fs::fstatfs(&dir).is_ok_and(|st| {
        matches!(
            st.f_type as u64,
            0x4d44 | 0x2011_BAB0 | 0x5346_544E | 0x7366_746E | 0xFF53_4D42 | 0xFE53_4D42 | 0x482B
        )
    })
}

fn joined(a: &[u8], b: &[u8]) -> Vec<u8> {
    let mut p = a.to_vec();
    p.push(b'/');
    p.extend_from_slice(b);
    p
}

/// Removes entry `name` of `dir` (which the caller has decided is not to be kept): a file,
/// symlink or special file with one `unlinkat`; a directory with everything in it, depth
/// first, less what `guide` keeps (and the directories holding it). A symlink is removed,
/// never followed (each directory is opened relative to its parent with `O_NOFOLLOW`); a
/// directory on another mount than `dir` is not entered: the removal fails there, and what it
/// removed before stays removed. `dry_run`: the same walk, removing nothing.
pub fn remove_entry(
    dir: impl AsFd,
    name: &[u8],
    guide: &mut dyn RemoveGuide,
    dry_run: bool,
) -> Result<Removed, EngineError> {
    let dir = dir.as_fd();
    let mut r = Removed::default();
    let kind = entry_kind(dir, name)?;
    if kind == EntryKind::Missing {
        // Gone since it was listed: nothing to do.
        return Ok(r);
    }
    if kind != EntryKind::Dir {
        if !dry_run {
            match rustix::fs::unlinkat(dir, name, AtFlags::empty()) {
                Ok(()) => {}
                Err(Errno::NOENT) => return Ok(r),
                Err(e) => return Err(path_error(&show(name), "unlinkat", e)),
            }
        }
        r.removed = 1;
        return Ok(r);
    }
    let mount = mount_of(dir)?;
    let mut stack = vec![enter(dir, name, name.to_vec(), mount)?];
    while !stack.is_empty() {
        if !guide.go_on() {
            return Err(EngineError::Path(format!(
                "'{}': stopped before it was all removed",
                show(name)
            )));
        }
        let depth = stack.len();
        let level = stack.last_mut().expect("a level");
        match level.entries.next_entry() {
            Some(Ok((child, _))) => {
                let path = joined(&level.path, &child);
                let kind = entry_kind(&level.fd, &child)?;
                let is_dir = kind == EntryKind::Dir;
                if kind == EntryKind::Missing {
                    continue;
                }
                if guide.keep(&path, is_dir) {
                    level.kept = true;
                    r.kept += 1;
                    continue;
                }
                if is_dir {
                    if depth >= MAX_REMOVE_DEPTH {
                        return Err(EngineError::Path(format!(
                            "'{}' is more than {MAX_REMOVE_DEPTH} directories deep",
                            show(&path)
                        )));
                    }
                    let next = enter(&level.fd, &child, path, mount)?;
                    stack.push(next);
                    continue;
                }
                if !dry_run {
                    match rustix::fs::unlinkat(&level.fd, child.as_slice(), AtFlags::empty()) {
                        Ok(()) | Err(Errno::NOENT) => {}
                        Err(e) => return Err(path_error(&show(&path), "unlinkat", e)),
                    }
                }
                r.removed += 1;
            }
            Some(Err(e)) => return Err(e),
            None => {
                let done = stack.pop().expect("a level");
                let (leaf, kept) = (done.path.rsplit(|b| *b == b'/').next(), done.kept);
                let leaf = leaf.expect("a name").to_vec();
                drop(done.entries);
                drop(done.fd);
                if kept {
                    // What it holds stays, so it stays, and so does every directory above it.
                    if let Some(parent) = stack.last_mut() {
                        parent.kept = true;
                    }
                    continue;
                }
                if !dry_run {
                    let parent = stack.last().map_or(dir, |l| l.fd.as_fd());
                    match rustix::fs::unlinkat(parent, leaf.as_slice(), AtFlags::REMOVEDIR) {
                        Ok(()) | Err(Errno::NOENT) => {}
                        Err(e) => return Err(path_error(&show(&leaf), "rmdir", e)),
                    }
                }
                r.removed += 1;
            }
        }
    }
    Ok(r)
}

/// Opens directory `name` of `parent` to empty it: never through a symlink, never onto
/// another mount.
fn enter(
    parent: impl AsFd,
    name: &[u8],
    path: Vec<u8>,
    mount: (Option<u64>, u64),
) -> Result<Level, EngineError> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(parent, name, flags, Mode::empty())
        .map_err(|e| path_error(&show(&path), "openat", e))?;
    let here = mount_of(fd.as_fd())?;
    let other_id = matches!((here.0, mount.0), (Some(a), Some(b)) if a != b);
    if other_id || here.1 != mount.1 {
        return Err(EngineError::Path(format!(
            "'{}' is a mount point; not entered",
            show(&path)
        )));
    }
    let entries = read_dir(&fd)?;
    Ok(Level {
        fd,
        entries,
        path,
        kept: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn dir_fd(p: &std::path::Path) -> OwnedFd {
        rustix::fs::open(p, OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap()
    }

    /// Keeps names ending in `.keep`; counts the entries looked at; stops after `limit`.
    struct Guide {
        seen: u64,
        limit: u64,
    }

    impl RemoveGuide for Guide {
        fn keep(&mut self, path: &[u8], _: bool) -> bool {
            path.ends_with(b".keep")
        }
        fn go_on(&mut self) -> bool {
            self.seen += 1;
            self.seen <= self.limit
        }
    }

    fn guide() -> Guide {
        Guide {
            seen: 0,
            limit: u64::MAX,
        }
    }

    #[test]
    fn a_tree_goes_and_nothing_a_link_points_at_does() {
        let t = tempfile::tempdir().unwrap();
        let outside = t.path().join("outside");
        std::fs::create_dir_all(outside.join("keep")).unwrap();
        std::fs::write(outside.join("keep/precious"), b"x").unwrap();
        let root = t.path().join("root");
        std::fs::create_dir_all(root.join("gone/a/b")).unwrap();
        std::fs::write(root.join("gone/a/b/f"), b"1").unwrap();
        std::fs::write(root.join("gone/g"), b"2").unwrap();
        symlink(&outside, root.join("gone/a/to-outside")).unwrap();
        symlink(outside.join("keep/precious"), root.join("gone/to-file")).unwrap();
        std::fs::write(root.join("stays"), b"3").unwrap();
        let fd = dir_fd(&root);
        // A dry run walks it all and removes nothing.
        let dry = remove_entry(&fd, b"gone", &mut guide(), true).unwrap();
        assert_eq!(
            dry,
            Removed {
                removed: 7,
                kept: 0
            }
        );
        assert!(root.join("gone/a/b/f").exists());
        // gone, a, b, f, g, two links.
        let r = remove_entry(&fd, b"gone", &mut guide(), false).unwrap();
        assert_eq!(r, dry);
        assert!(!root.join("gone").exists());
        assert!(root.join("stays").exists());
        assert_eq!(std::fs::read(outside.join("keep/precious")).unwrap(), b"x");
        // A link itself, at the top, is removed, not followed.
        symlink(&outside, root.join("l")).unwrap();
        assert_eq!(
            remove_entry(&fd, b"l", &mut guide(), false)
                .unwrap()
                .removed,
            1
        );
        assert!(outside.join("keep/precious").exists());
        // Gone since it was listed: nothing removed, no error.
        let r = remove_entry(&fd, b"missing", &mut guide(), false).unwrap();
        assert_eq!(r, Removed::default());
    }

    #[test]
    fn what_the_guide_keeps_stays_with_the_directories_that_hold_it() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        std::fs::create_dir_all(root.join("old/a/b")).unwrap();
        std::fs::create_dir_all(root.join("old/c")).unwrap();
        std::fs::write(root.join("old/a/b/secret.keep"), b"k").unwrap();
        std::fs::write(root.join("old/a/b/junk"), b"j").unwrap();
        std::fs::write(root.join("old/c/junk"), b"j").unwrap();
        let fd = dir_fd(root);
        let r = remove_entry(&fd, b"old", &mut guide(), false).unwrap();
        assert_eq!(
            r,
            Removed {
                removed: 3,
                kept: 1
            }
        );
        assert_eq!(
            std::fs::read(root.join("old/a/b/secret.keep")).unwrap(),
            b"k"
        );
        assert!(!root.join("old/a/b/junk").exists() && !root.join("old/c").exists());
    }

    #[test]
    fn a_stop_or_a_tree_too_deep_fails_and_keeps_what_is_left() {
        let t = tempfile::tempdir().unwrap();
        let mut p = t.path().join("deep");
        for _ in 0..MAX_REMOVE_DEPTH + 1 {
            p = p.join("d");
        }
        std::fs::create_dir_all(&p).unwrap();
        let fd = dir_fd(t.path());
        let e = remove_entry(&fd, b"deep", &mut guide(), false).unwrap_err();
        assert!(e.to_string().contains("directories deep"), "{e}");
        assert!(t.path().join("deep").exists());
        let mut stop = Guide { seen: 0, limit: 3 };
        let e = remove_entry(&fd, b"deep", &mut stop, false).unwrap_err();
        assert!(e.to_string().contains("stopped"), "{e}");
        assert!(t.path().join("deep").exists());
    }
}
