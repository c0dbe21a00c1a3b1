//! Filesystem work on the receiver: resolving names beneath the root without following
//! symlinks, temporary files beside their target, preallocation, durable commit, and the facts
//! about a filesystem that engine probes need.
//!
//! Every name arrives as a list of components already checked by `zcp_wire::RelPath` (no `..`,
//! no `/`, no NUL). Each component is opened relative to its parent's descriptor with
//! `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)`, so neither a symlink
//! planted on the receiver nor a race that swaps a directory for one can lead a write outside
//! the root. Kernels without `openat2` (before 5.6) get `openat(O_NOFOLLOW)` per component,
//! which is as safe for single components.

use std::ffi::CString;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::{AtFlags, FallocateFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::EngineError;
use crate::error::retry;

mod leftover;
mod meta;
mod part;
mod remove;

pub use leftover::{
    FileFacts, Leftover, LeftoverKind, Removal, ScanEnd, leftover_name, remove_leftover,
    scan_leftovers,
};
pub use meta::*;
use part::part_names;
pub use part::{LOCK_WAIT, MAX_JOURNAL_BYTES, PartFile, part_key};
pub use remove::{MAX_REMOVE_DEPTH, RemoveGuide, Removed, case_insensitive, remove_entry};

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).escape_debug().to_string()
}

/// The receiver's root directory, held open: every path is resolved from this descriptor.
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
    path: PathBuf,
    /// Symlinks to directories on the way to a directory are followed ([`Root::following`]).
    follow: bool,
}

/// What a name in a directory is, without following symlinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// Nothing by that name.
    Missing,
    /// A directory.
    Dir,
    /// A regular file.
    File,
    /// A symbolic link (never followed).
    Symlink,
    /// A device, socket or FIFO.
    Other,
}

impl Root {
    /// Opens `path` as the root. It must exist and be a directory.
    pub fn open(path: &Path) -> Result<Root, EngineError> {
        let dir = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| {
            EngineError::Path(format!(
                "cannot open root directory {}: {}",
                path.display(),
                std::io::Error::from(e)
            ))
        })?;
        Ok(Root {
            dir,
            path: path.to_path_buf(),
            follow: false,
        })
    }

    /// This root, but following symlinks on the way to a directory (`/scratch` a link to
    /// `/gpfs/scratch`), as a user's own tools do: for a session run as that user, who
    /// reaches what the links reach anyway (the far side of ssh). Files, a directory's
    /// entries and everything a walk or a removal opens still never follow one.
    pub fn following(self) -> Root {
        Root {
            follow: true,
            ..self
        }
    }

    /// The root's path, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The root's descriptor.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.dir.as_fd()
    }

    /// Opens the directory named by `components` beneath the root, one component at a time,
    /// never following a symlink. With `create`, missing directories are made (mode 0755).
    pub fn open_dir(&self, components: &[Vec<u8>], create: bool) -> Result<OwnedFd, EngineError> {
        self.open_dir_made(components, create).map(|(fd, _)| fd)
    }

    /// [`Root::open_dir`], and how many of `components` were there already: this call made
    /// `components[n..]` (an empty range when it made none).
    pub fn open_dir_made(
        &self,
        components: &[Vec<u8>],
        create: bool,
    ) -> Result<(OwnedFd, usize), EngineError> {
        let mut cur = rustix::io::fcntl_dupfd_cloexec(&self.dir, 0)
            .map_err(|e| EngineError::sys("dup", "root directory", e))?;
        let mut existed = components.len();
        for (i, comp) in components.iter().enumerate() {
            let shown = || show(&components[..=i].join(&b'/'));
            let next = match self.open_component(&cur, comp) {
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(&cur, comp.as_slice(), Mode::from_raw_mode(0o755)) {
                        Ok(()) => existed = existed.min(i),
                        Err(Errno::EXIST) => {}
                        Err(e) => return Err(path_error(&shown(), "mkdirat", e)),
                    }
                    self.open_component(&cur, comp)
                }
                other => other,
            };
            cur = match next {
                Ok(fd) => fd,
                // O_DIRECTORY|O_NOFOLLOW reports a symlink as ENOTDIR: look at the entry
                // itself so the message names the real cause.
                Err(Errno::NOTDIR | Errno::LOOP)
                    if !self.follow && entry_kind(&cur, comp)? == EntryKind::Symlink =>
                {
                    return Err(path_error(&shown(), "openat2", Errno::LOOP));
                }
                Err(e) => return Err(path_error(&shown(), "openat2", e)),
            };
        }
        Ok((cur, existed))
    }
}

impl Root {
    /// Syncs each directory that `components[existed..]` were made in (as
    /// [`Root::open_dir_made`] reported them made), so their names are durable: the deepest
    /// one that was there already and every one made but the last. Directories whose
    /// (device, inode) is in `seen` are not synced again; each synced one is added. One that
    /// is no longer there (removed, or replaced by something else since) ends the walk:
    /// nothing of it is left to make durable. Any other failure to open one is an error.
    pub fn sync_made_in(
        &self,
        components: &[Vec<u8>],
        existed: usize,
        seen: &mut std::collections::HashSet<(u64, u64)>,
    ) -> Result<(), EngineError> {
        if existed >= components.len() {
            return Ok(());
        }
        let mut cur = rustix::io::fcntl_dupfd_cloexec(&self.dir, 0)
            .map_err(|e| EngineError::sys("dup", "root directory", e))?;
        for (k, comp) in components[..components.len() - 1].iter().enumerate() {
            if k >= existed && seen.insert(meta::stat_fd(&cur)?.id) {
                fsync_dir(&cur)?;
            }
            cur = match self.open_component(&cur, comp) {
                Ok(next) => next,
                Err(Errno::NOENT | Errno::NOTDIR | Errno::LOOP) => return Ok(()),
                Err(e) => return Err(EngineError::sys("openat2", "directory made in", e)),
            };
        }
        if seen.insert(meta::stat_fd(&cur)?.id) {
            fsync_dir(&cur)?;
        }
        Ok(())
    }

    /// Opens directory `name` in `dir`: refusing a symlink, or following one when the root
    /// follows them.
    fn open_component(&self, dir: &OwnedFd, name: &[u8]) -> Result<OwnedFd, Errno> {
        let flags = OFlags::RDONLY | OFlags::DIRECTORY;
        if !self.follow {
            return open_beneath(dir, name, flags);
        }
        loop {
            match rustix::fs::openat(dir, name, flags | OFlags::CLOEXEC, Mode::empty()) {
                Err(Errno::INTR) | Err(Errno::AGAIN) => continue,
                other => return other,
            }
        }
    }
}

/// Opens one component beneath `dir`, refusing symlinks.
fn open_beneath(dir: &OwnedFd, name: &[u8], flags: OFlags) -> Result<OwnedFd, Errno> {
    let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    let resolve = ResolveFlags::BENEATH | ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS;
    loop {
        match rustix::fs::openat2(dir, name, flags, Mode::empty(), resolve) {
            Err(Errno::INTR) | Err(Errno::AGAIN) => continue,
            Err(Errno::NOSYS) => return rustix::fs::openat(dir, name, flags, Mode::empty()),
            other => return other,
        }
    }
}

/// A name beneath a root that cannot be used, said the same for a destination and a source:
/// the caller adds which it is.
fn path_error(shown: &str, call: &str, e: Errno) -> EngineError {
    let why = match e {
        Errno::LOOP => "is a symlink, and zcp never follows symlinks beneath its root".to_string(),
        Errno::NOTDIR => "is not a directory".to_string(),
        Errno::XDEV => "resolves outside the root".to_string(),
        Errno::NOENT => "does not exist".to_string(),
        Errno::ACCESS | Errno::PERM => "is not accessible (permission denied)".to_string(),
        other => format!(
            "could not be opened ({call}: {})",
            std::io::Error::from(other)
        ),
    };
    EngineError::Path(format!("'{shown}' {why}"))
}

/// What `name` is in `dir`, without following a symlink.
pub fn entry_kind(dir: impl AsFd, name: &[u8]) -> Result<EntryKind, EngineError> {
    match rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(match FileType::from_raw_mode(st.st_mode) {
            FileType::Directory => EntryKind::Dir,
            FileType::RegularFile => EntryKind::File,
            FileType::Symlink => EntryKind::Symlink,
            _ => EntryKind::Other,
        }),
        Err(Errno::NOENT) => Ok(EntryKind::Missing),
        Err(e) => Err(path_error(&show(name), "fstatat", e)),
    }
}

/// Facts about the filesystem under a descriptor that engine probes use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsInfo {
    /// The filesystem's name (`ext4`, `xfs`, `tmpfs`, ...), or its magic number in hex.
    pub name: String,
    /// Whether its files live in memory (tmpfs, ramfs): O_DIRECT there measures nothing.
    pub in_memory: bool,
    /// Bytes available to unprivileged users.
    pub free_bytes: u64,
    /// O_DIRECT alignment for memory and file offsets, where the kernel reports it (6.1+).
    pub dio_align: Option<(u32, u32)>,
}

/// `fstatfs` and `statx(STATX_DIOALIGN)` on `fd`.
pub fn fs_info(fd: impl AsFd) -> Result<FsInfo, EngineError> {
    let st = rustix::fs::fstatfs(&fd).map_err(|e| EngineError::sys("fstatfs", "destination", e))?;
    let magic = st.f_type as u64;
    let name = match magic {
        0xEF53 => "ext4".to_string(),
        0x5846_5342 => "xfs".to_string(),
        0x9123_683E => "btrfs".to_string(),
        0x0102_1994 => "tmpfs".to_string(),
        0x8584_58F6 => "ramfs".to_string(),
        0x6969 => "nfs".to_string(),
        0x794C_7630 => "overlayfs".to_string(),
        0x2FC1_2FC1 => "zfs".to_string(),
        0x6573_5546 => "fuse".to_string(),
        0xFF53_4D42 => "cifs".to_string(),
        0x0BD0_0BD0 => "lustre".to_string(),
        0x4750_4653 => "gpfs".to_string(),
        other => format!("0x{other:x}"),
    };
    let dio_align = rustix::fs::statx(
        &fd,
        "",
        AtFlags::EMPTY_PATH,
        rustix::fs::StatxFlags::DIOALIGN,
    )
    .ok()
    .filter(|s| {
        s.stx_mask & rustix::fs::StatxFlags::DIOALIGN.bits() != 0 && s.stx_dio_offset_align != 0
    })
    .map(|s| (s.stx_dio_mem_align, s.stx_dio_offset_align));
    Ok(FsInfo {
        in_memory: matches!(magic, 0x0102_1994 | 0x8584_58F6),
        free_bytes: st.f_bavail.saturating_mul(st.f_bsize as u64),
        dio_align,
        name,
    })
}

/// Whether `name` is one zcp uses for its own files beside a target: a part file
/// (`.zcp-<key>.part`), its journal (`.zcp-<key>.journal`) or a link being made
/// (`.zcp-<tag>.link`). Nothing a peer names may be one (it could plant a journal that makes a
/// later honest transfer "resume" bytes it never sent), and a sender never sends one. Case
/// does not matter: on a case-insensitive root (vfat, exFAT, SMB, casefolded directories)
/// `.ZCP-<key>.PART` *is* the part file.
pub fn is_reserved_name(name: &[u8]) -> bool {
    let has = |at: usize, what: &[u8]| {
        name.get(at..at + what.len())
            .is_some_and(|n| n.eq_ignore_ascii_case(what))
    };
    has(0, b".zcp-")
        && [&b".part"[..], b".journal", b".link"]
            .iter()
            .any(|ext| name.len() >= ext.len() && has(name.len() - ext.len(), ext))
}

fn timestamps(mtime: (i64, u32)) -> rustix::fs::Timestamps {
    rustix::fs::Timestamps {
        last_access: rustix::fs::Timespec {
            tv_sec: 0,
            tv_nsec: rustix::fs::UTIME_OMIT,
        },
        last_modification: rustix::fs::Timespec {
            tv_sec: mtime.0,
            tv_nsec: i64::from(mtime.1.min(999_999_999)),
        },
    }
}

/// `fsync` a directory: renames and creations in it become durable.
pub fn fsync_dir(dir: impl AsFd) -> Result<(), EngineError> {
    retry("fsync", "destination directory", None, || {
        rustix::fs::fsync(&dir)
    })
}

/// `syncfs`: everything written to the filesystem under `fd` reaches stable storage. One call
/// for a batch of small files instead of an `fsync` each.
pub fn syncfs(fd: impl AsFd) -> Result<(), EngineError> {
    retry("syncfs", "destination filesystem", None, || {
        rustix::fs::syncfs(&fd)
    })
}

/// `fsync` of each file or directory, on up to `threads` threads at once, so the
/// filesystem's journal can commit them together: what a batch of files uses instead of
/// [`syncfs`] where the filesystem holds other processes' dirty data, which `syncfs` would
/// wait for too. Every one is synced even when one fails; the first error is returned.
pub fn fsync_each(fds: &[BorrowedFd<'_>], threads: usize) -> Result<(), EngineError> {
    each_on_threads(fds, threads, |fd| {
        retry("fsync", "destination file", None, || rustix::fs::fsync(fd))
    })
}

/// Creates `path` and every missing directory above it (mode 0755 less the umask), durably:
/// each directory it made is synced into its parent. What a `get` does for its destination.
pub fn create_dir_all_durable(path: &Path) -> Result<(), EngineError> {
    let mut missing = Vec::new();
    let mut at = path;
    while std::fs::symlink_metadata(at).is_err() {
        missing.push(at);
        match at.parent() {
            Some(p) if !p.as_os_str().is_empty() => at = p,
            _ => break,
        }
    }
    std::fs::create_dir_all(path).map_err(|source| EngineError::Sys {
        call: "mkdir",
        what: "destination directory",
        source,
    })?;
    for made in missing {
        let parent = match made.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let fd = rustix::fs::open(
            parent,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| EngineError::sys("open", "destination directory", e))?;
        fsync_dir(&fd)?;
    }
    Ok(())
}

/// Runs `op` once for each item, on up to `threads` threads (this one among them); returns the
/// first error after all have run.
fn each_on_threads<T: Sync>(
    items: &[T],
    threads: usize,
    op: impl Fn(&T) -> Result<(), EngineError> + Sync,
) -> Result<(), EngineError> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || -> Result<(), EngineError> {
        let mut first = Ok(());
        loop {
            let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(item) = items.get(i) else {
                return first;
            };
            let r = op(item);
            first = first.and(r);
        }
    };
    let helpers = threads.clamp(1, items.len().max(1)) - 1;
    std::thread::scope(|s| {
        let spawned: Vec<_> = (0..helpers)
            .filter_map(|_| {
                std::thread::Builder::new()
                    .name("zcp-fsync".into())
                    .spawn_scoped(s, work)
                    .ok()
            })
            .collect();
        let mine = work();
        spawned.into_iter().fold(mine, |first, h| {
            let theirs = h
                .join()
                .unwrap_or_else(|_| Err(EngineError::Path("an fsync thread panicked".into())));
            first.and(theirs)
        })
    })
}

/// Sets the permission bits (`mode & 0o777`: setuid, setgid and sticky are never set from the
/// network) and mtime of an open directory or file.
pub fn set_mode_and_mtime(fd: impl AsFd, mode: u32, mtime: (i64, u32)) -> Result<(), EngineError> {
    set_mode_within(fd, mode, false, mtime)
}

/// [`set_mode_and_mtime`], with the new permission bits limited to those the file has now
/// when `narrow_only`: a mode can lose bits, never gain one, and the setuid, setgid and sticky
/// bits it has stay as they are (a shared drop directory stays sticky, a project directory
/// keeps handing its group to new files).
pub fn set_mode_within(
    fd: impl AsFd,
    mode: u32,
    narrow_only: bool,
    mtime: (i64, u32),
) -> Result<(), EngineError> {
    let mut mode = mode & 0o777;
    if narrow_only {
        let old = stat_fd(&fd)?.mode;
        mode = (old & 0o7000) | (mode & old & 0o777);
    }
    retry("fchmod", "destination", None, || {
        rustix::fs::fchmod(&fd, Mode::from_raw_mode(mode))
    })?;
    let times = timestamps(mtime);
    retry("futimens", "destination", None, || {
        rustix::fs::futimens(&fd, &times)
    })
}

/// Creates symlink `name` -> `target` in `dir`, replacing an existing non-directory entry of
/// that name atomically (a new link under a temporary name, renamed over it). The target is
/// stored as given and never followed. Returns whether anything changed: a link to the same
/// target already there is left as it is.
pub fn make_symlink(dir: impl AsFd, name: &[u8], target: &[u8]) -> Result<bool, EngineError> {
    match entry_kind(&dir, name)? {
        EntryKind::Dir => {
            return Err(EngineError::Path(format!(
                "'{}' is a directory on the receiver; not replaced by a link",
                show(name)
            )));
        }
        EntryKind::Missing => {
            return retry("symlinkat", "destination", None, || {
                rustix::fs::symlinkat(target, &dir, name)
            })
            .map(|()| true);
        }
        EntryKind::Symlink if read_link_at(&dir, name).is_ok_and(|t| t == target) => {
            return Ok(false);
        }
        _ => {}
    }
    let tag: [u8; 8] =
        crate::sys::random().map_err(|e| EngineError::Path(format!("getrandom: {e}")))?;
    let tmp = format!(".zcp-{}.link", hex::encode(tag));
    retry("symlinkat", "destination", None, || {
        rustix::fs::symlinkat(target, &dir, tmp.as_str())
    })?;
    retry("renameat", "destination", None, || {
        rustix::fs::renameat(&dir, tmp.as_str(), &dir, name)
    })
    .inspect_err(|_| {
        let _ = rustix::fs::unlinkat(&dir, tmp.as_str(), AtFlags::empty());
    })
    .map(|()| true)
}

/// Keeps the regular file `name` in `dir` as `name~` (replacing an older `name~` that is a
/// regular file; never following a link), before a new file takes its name (`--backup`).
/// `Ok(false)`: there was no regular file there to keep.
pub fn keep_as_backup(dir: impl AsFd, name: &[u8]) -> Result<bool, EngineError> {
    let dir = dir.as_fd();
    if entry_kind(dir, name)? != EntryKind::File {
        return Ok(false);
    }
    let mut backup = name.to_vec();
    backup.push(b'~');
    if !matches!(
        entry_kind(dir, &backup)?,
        EntryKind::Missing | EntryKind::File
    ) {
        return Err(EngineError::Path(format!(
            "its backup name '{}' is not a regular file",
            show(&backup)
        )));
    }
    retry("renameat", "backup", None, || {
        rustix::fs::renameat(dir, name, dir, backup.as_slice())
    })?;
    Ok(true)
}

#[cfg(test)]
mod tests;
