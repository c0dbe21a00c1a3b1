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

use rustix::fs::{AtFlags, FallocateFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::EngineError;
use crate::error::retry;

fn show(name: &[u8]) -> String {
    String::from_utf8_lossy(name).escape_debug().to_string()
}

/// The receiver's root directory, held open: every path is resolved from this descriptor.
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
    path: PathBuf,
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
        })
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
        let mut cur = rustix::io::fcntl_dupfd_cloexec(&self.dir, 0)
            .map_err(|e| EngineError::sys("dup", "root directory", e))?;
        for (i, comp) in components.iter().enumerate() {
            let shown = || show(&components[..=i].join(&b'/'));
            let next = match open_beneath(&cur, comp, OFlags::RDONLY | OFlags::DIRECTORY) {
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(&cur, comp.as_slice(), Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(path_error(&shown(), "mkdirat", e)),
                    }
                    open_beneath(&cur, comp, OFlags::RDONLY | OFlags::DIRECTORY)
                }
                other => other,
            };
            cur = match next {
                Ok(fd) => fd,
                // O_DIRECTORY|O_NOFOLLOW reports a symlink as ENOTDIR: look at the entry
                // itself so the message names the real cause.
                Err(Errno::NOTDIR | Errno::LOOP)
                    if entry_kind(&cur, comp)? == EntryKind::Symlink =>
                {
                    return Err(path_error(&shown(), "openat2", Errno::LOOP));
                }
                Err(e) => return Err(path_error(&shown(), "openat2", e)),
            };
        }
        Ok(cur)
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

fn path_error(shown: &str, call: &str, e: Errno) -> EngineError {
    let why = match e {
        Errno::LOOP => {
            "is a symlink on the receiver, and zcp never follows symlinks there".to_string()
        }
        Errno::NOTDIR => "is not a directory on the receiver".to_string(),
        Errno::XDEV => "resolves outside the server root".to_string(),
        Errno::NOENT => "does not exist on the receiver".to_string(),
        Errno::ACCESS | Errno::PERM => {
            "is not accessible to the server (permission denied)".to_string()
        }
        other => format!(
            "could not be opened ({call}: {})",
            std::io::Error::from(other)
        ),
    };
    EngineError::Path(format!("destination '{shown}' {why}"))
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

/// A file being received, under a temporary name beside its target. Dropped without
/// [`TempFile::commit`], it removes itself: a partial file is never renamed into place.
#[derive(Debug)]
pub struct TempFile {
    dir: OwnedFd,
    name: CString,
    file: OwnedFd,
    live: bool,
}

impl TempFile {
    /// Creates `.zcp-<random>.part` in `dir`, mode 0600, exclusively.
    pub fn create(dir: OwnedFd) -> Result<TempFile, EngineError> {
        loop {
            let tag: [u8; 8] =
                crate::sys::random().map_err(|e| EngineError::Path(format!("getrandom: {e}")))?;
            let name = CString::new(format!(".zcp-{}.part", hex(&tag))).expect("no NUL in hex");
            match rustix::fs::openat(
                &dir,
                name.as_c_str(),
                OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::from_raw_mode(0o600),
            ) {
                Ok(file) => {
                    return Ok(TempFile {
                        dir,
                        name,
                        file,
                        live: true,
                    });
                }
                Err(Errno::EXIST) | Err(Errno::INTR) => continue,
                Err(e) => {
                    return Err(EngineError::sys(
                        "openat(O_CREAT|O_EXCL)",
                        "temporary file",
                        e,
                    ));
                }
            }
        }
    }

    /// The open file (buffered).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The temporary name, for messages and tests.
    pub fn name(&self) -> String {
        self.name.to_string_lossy().into_owned()
    }

    /// A second descriptor on the same file, opened with `O_DIRECT`; an error where the
    /// filesystem refuses O_DIRECT.
    pub fn open_direct(&self) -> Result<OwnedFd, Errno> {
        rustix::fs::openat(
            &self.dir,
            self.name.as_c_str(),
            OFlags::WRONLY | OFlags::DIRECT | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
    }

    /// Reserves `size` bytes, so a full filesystem fails now, not mid-transfer. Filesystems
    /// without `fallocate` get the size set and a free-space check instead.
    pub fn preallocate(&self, size: u64) -> Result<(), EngineError> {
        if size == 0 {
            return Ok(());
        }
        match retry("fallocate", "temporary file", None, || {
            rustix::fs::fallocate(&self.file, FallocateFlags::empty(), 0, size)
        }) {
            Ok(()) => Ok(()),
            Err(e) if e.is_no_space() => {
                let free = fs_info(&self.file).map(|i| i.free_bytes).unwrap_or(0);
                Err(EngineError::NoSpace(format!(
                    "the file needs {size} bytes, {free} are free"
                )))
            }
            Err(EngineError::Sys { source, .. })
                if matches!(
                    source.raw_os_error(),
                    Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
                ) =>
            {
                let free = fs_info(&self.file)?.free_bytes;
                if free < size {
                    return Err(EngineError::NoSpace(format!(
                        "the file needs {size} bytes, {free} are free"
                    )));
                }
                retry("ftruncate", "temporary file", None, || {
                    rustix::fs::ftruncate(&self.file, size)
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Makes the file durable and gives it its final name: cut to `size` (O_DIRECT may have
    /// padded the last block), set mode and mtime, `fsync` the file, rename over `target`,
    /// `fsync` the directory. Call only after the contents are verified.
    pub fn commit(
        mut self,
        size: u64,
        mode: u32,
        mtime: (i64, u32),
        target: &[u8],
    ) -> Result<(), EngineError> {
        let f = &self.file;
        retry("ftruncate", "temporary file", None, || {
            rustix::fs::ftruncate(f, size)
        })?;
        retry("fchmod", "temporary file", None, || {
            rustix::fs::fchmod(f, Mode::from_raw_mode(mode & 0o777))
        })?;
        let times = rustix::fs::Timestamps {
            last_access: rustix::fs::Timespec {
                tv_sec: 0,
                tv_nsec: rustix::fs::UTIME_OMIT,
            },
            last_modification: rustix::fs::Timespec {
                tv_sec: mtime.0,
                tv_nsec: i64::from(mtime.1.min(999_999_999)),
            },
        };
        retry("futimens", "temporary file", None, || {
            rustix::fs::futimens(f, &times)
        })?;
        // fsync, not fdatasync: the mode and mtime just set must survive a crash too.
        retry("fsync", "temporary file", None, || rustix::fs::fsync(f))?;
        retry("renameat", "destination", None, || {
            rustix::fs::renameat(&self.dir, self.name.as_c_str(), &self.dir, target)
        })?;
        self.live = false;
        retry("fsync", "destination directory", None, || {
            rustix::fs::fsync(&self.dir)
        })
    }

    /// `fdatasync` the file: its data reaches stable storage.
    pub fn sync_data(&self) -> Result<(), EngineError> {
        retry("fdatasync", "temporary file", None, || {
            rustix::fs::fdatasync(&self.file)
        })
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if self.live {
            let _ = rustix::fs::unlinkat(&self.dir, self.name.as_c_str(), AtFlags::empty());
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Write-behind for buffered receivers: once a range is written, start its writeback at once
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`) so the disk works while the network delivers
/// the next range; [`settle`] later waits for it and drops the clean pages, so a file larger
/// than memory does not push everything else out of the page cache. Neither makes anything
/// durable: the commit's `fsync` does that.
pub fn start_writeback(fd: impl AsFd, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    // SAFETY: a plain syscall on a borrowed, open descriptor; no memory is passed.
    #[allow(unsafe_code)]
    unsafe {
        libc::sync_file_range(
            fd.as_fd().as_raw_fd(),
            offset as i64,
            len as i64,
            libc::SYNC_FILE_RANGE_WRITE,
        );
    }
}

/// Waits for a range's writeback and drops its pages from the page cache. See
/// [`start_writeback`].
pub fn settle(fd: impl AsFd, offset: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: as in `start_writeback`.
    #[allow(unsafe_code)]
    unsafe {
        libc::sync_file_range(fd.as_fd().as_raw_fd(), offset as i64, len as i64, flags);
    }
    let _ = rustix::fs::fadvise(
        &fd,
        offset,
        std::num::NonZeroU64::new(len),
        rustix::fs::Advice::DontNeed,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn root() -> (tempfile::TempDir, Root) {
        let d = tempfile::tempdir().unwrap();
        let r = Root::open(d.path()).unwrap();
        (d, r)
    }

    #[test]
    fn open_dir_creates_and_refuses_symlinks() {
        let (d, r) = root();
        r.open_dir(&[b"a".to_vec(), b"b".to_vec()], true).unwrap();
        assert!(d.path().join("a/b").is_dir());
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path(), d.path().join("link")).unwrap();
        let e = r
            .open_dir(&[b"link".to_vec(), b"x".to_vec()], true)
            .unwrap_err();
        assert!(e.to_string().contains("symlink"), "{e}");
        assert!(!outside.path().join("x").exists());
        std::fs::write(d.path().join("file"), b"x").unwrap();
        let e = r.open_dir(&[b"file".to_vec()], true).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        let e = r.open_dir(&[b"missing".to_vec()], false).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
    }

    #[test]
    fn temp_file_is_removed_unless_committed() {
        let (d, r) = root();
        let t = TempFile::create(r.open_dir(&[], false).unwrap()).unwrap();
        let name = t.name();
        assert!(d.path().join(&name).exists());
        drop(t);
        assert!(!d.path().join(&name).exists());

        let t = TempFile::create(r.open_dir(&[], false).unwrap()).unwrap();
        t.preallocate(10_000).unwrap();
        rustix::io::pwrite(t.fd(), b"hello", 0).unwrap();
        t.commit(5, 0o640, (1_000_000_000, 5), b"final").unwrap();
        let p = d.path().join("final");
        assert_eq!(std::fs::read(&p).unwrap(), b"hello");
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o640);
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_000_000_000, 5));
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            1,
            "no temporary file left"
        );
    }

    #[test]
    fn entry_kinds_do_not_follow_links() {
        let (d, r) = root();
        std::fs::create_dir(d.path().join("dir")).unwrap();
        symlink("/etc/passwd", d.path().join("l")).unwrap();
        assert_eq!(entry_kind(r.fd(), b"dir").unwrap(), EntryKind::Dir);
        assert_eq!(entry_kind(r.fd(), b"l").unwrap(), EntryKind::Symlink);
        assert_eq!(entry_kind(r.fd(), b"none").unwrap(), EntryKind::Missing);
    }

    #[test]
    fn fs_info_reads_something() {
        let (_d, r) = root();
        let i = fs_info(r.fd()).unwrap();
        assert!(!i.name.is_empty());
        assert!(i.free_bytes > 0);
    }
}
