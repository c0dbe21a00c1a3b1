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
            let next = match open_beneath(&cur, comp, OFlags::RDONLY | OFlags::DIRECTORY) {
                Err(Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(&cur, comp.as_slice(), Mode::from_raw_mode(0o755)) {
                        Ok(()) => existed = existed.min(i),
                        Err(Errno::EXIST) => {}
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
        Ok((cur, existed))
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
/// later honest transfer "resume" bytes it never sent), and a sender never sends one.
pub fn is_reserved_name(name: &[u8]) -> bool {
    name.starts_with(b".zcp-")
        && [&b".part"[..], b".journal", b".link"]
            .iter()
            .any(|ext| name.ends_with(ext))
}

/// A file being received, under a name derived from its target (`.zcp-<key>.part`, with its
/// resume journal `.zcp-<key>.journal`) in the target's directory. The same target always maps
/// to the same names, so a later session finds what an interrupted one left. While open, the
/// part file is locked: a second transfer to the same target is refused, not interleaved.
///
/// Dropped without [`PartFile::rename_to`], it removes itself and its journal — unless marked
/// [`PartFile::set_keep`] (it holds verified chunks worth resuming). Either way a partial file
/// never gets the target's name.
#[derive(Debug)]
pub struct PartFile {
    dir: Arc<OwnedFd>,
    part: CString,
    journal: CString,
    file: Arc<OwnedFd>,
    journal_fd: Option<OwnedFd>,
    /// Whether a journal may exist (one was found, or started): only then is it removed.
    journal_made: bool,
    /// Created by this open, so nothing of an earlier attempt is in it.
    fresh: bool,
    keep: bool,
    live: bool,
}

/// How long [`PartFile::open`] waits for another transfer's lock on the same partial file.
pub const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Largest journal zcp reads back (a journal for 2^18 chunks is about 13 MiB).
pub const MAX_JOURNAL_BYTES: u64 = 32 << 20;

impl PartFile {
    /// Opens `.zcp-<key>.part` in `dir`, creating it (mode 0600) if absent, and locks it.
    /// Returns whether it already existed.
    ///
    /// A lock held by another transfer is waited for up to [`LOCK_WAIT`]: a session whose
    /// peer just died may still be letting go of the file when the same command is run again.
    pub fn open(dir: Arc<OwnedFd>, key: &str) -> Result<(PartFile, bool), EngineError> {
        let deadline = std::time::Instant::now() + LOCK_WAIT;
        loop {
            match Self::open_once(dir.clone(), key) {
                Ok(Some(opened)) => return Ok(opened),
                Err(EngineError::Busy(m)) if std::time::Instant::now() >= deadline => {
                    return Err(EngineError::Busy(m));
                }
                Ok(None) if std::time::Instant::now() >= deadline => {
                    return Err(EngineError::Busy(
                        "another transfer keeps replacing this destination's partial file".into(),
                    ));
                }
                Ok(None) | Err(EngineError::Busy(_)) => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One attempt of [`PartFile::open`]; `None` when the file it locked was removed or
    /// replaced under its name meanwhile (its previous holder cleaning up).
    fn open_once(dir: Arc<OwnedFd>, key: &str) -> Result<Option<(PartFile, bool)>, EngineError> {
        let part = CString::new(format!(".zcp-{key}.part"))
            .map_err(|_| EngineError::Path("NUL in key".into()))?;
        let journal = CString::new(format!(".zcp-{key}.journal"))
            .map_err(|_| EngineError::Path("NUL in key".into()))?;
        let flags = OFlags::RDWR | OFlags::CLOEXEC | OFlags::NOFOLLOW;
        // Most part files are new: create exclusively first, so that case is one call.
        let created = retry(
            "openat(O_CREAT)",
            "partial file",
            None,
            || match rustix::fs::openat(
                &dir,
                part.as_c_str(),
                flags | OFlags::CREATE | OFlags::EXCL,
                Mode::from_raw_mode(0o600),
            ) {
                Err(Errno::EXIST) => Ok(None),
                other => other.map(Some),
            },
        )?;
        let (file, existed) = match created {
            Some(f) => (f, false),
            None => {
                let f = rustix::fs::openat(&dir, part.as_c_str(), flags, Mode::empty())
                    .map_err(|e| EngineError::sys("openat", "partial file", e))?;
                // O_NOFOLLOW refuses a symlink; anything else but a regular file is refused here.
                if FileType::from_raw_mode(
                    rustix::fs::fstat(&f)
                        .map_err(|e| EngineError::sys("fstat", "partial file", e))?
                        .st_mode,
                ) != FileType::RegularFile
                {
                    return Err(EngineError::Path(format!(
                        "{} is not a regular file",
                        part.to_string_lossy()
                    )));
                }
                (f, true)
            }
        };
        let mut pf = PartFile {
            dir,
            part,
            journal,
            file: Arc::new(file),
            journal_fd: None,
            journal_made: existed,
            fresh: !existed,
            keep: existed,
            live: true,
        };
        // From here a failure drops `pf`, which removes what it created.
        match rustix::fs::flock(
            &*pf.file,
            rustix::fs::FlockOperation::NonBlockingLockExclusive,
        ) {
            Ok(()) => {}
            Err(Errno::WOULDBLOCK) => {
                // Not ours to remove, even if we created it an instant ago.
                pf.keep = true;
                return Err(EngineError::Busy(
                    "another transfer is writing this destination right now".into(),
                ));
            }
            Err(e) => return Err(EngineError::sys("flock", "partial file", e)),
        }
        if existed {
            // Locked, but maybe only after its last holder unlinked it: then it is not ours.
            let ours = rustix::fs::fstat(&*pf.file)
                .map_err(|e| EngineError::sys("fstat", "partial file", e))?;
            let named = rustix::fs::statat(&*pf.dir, pf.part.as_c_str(), AtFlags::SYMLINK_NOFOLLOW);
            if !matches!(named, Ok(n) if (n.st_dev, n.st_ino) == (ours.st_dev, ours.st_ino)) {
                pf.keep = true;
                return Ok(None);
            }
        }
        Ok(Some((pf, existed)))
    }

    /// The partial file (buffered).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    /// The partial file, shared (for the engines that write it).
    pub fn shared_fd(&self) -> Arc<OwnedFd> {
        self.file.clone()
    }

    /// The directory the file is in.
    pub fn dir(&self) -> &Arc<OwnedFd> {
        &self.dir
    }

    /// The partial file's name, for messages and tests.
    pub fn name(&self) -> String {
        self.part.to_string_lossy().into_owned()
    }

    /// A second descriptor on the same file, opened with `O_DIRECT`; an error where the
    /// filesystem refuses O_DIRECT.
    pub fn open_direct(&self) -> Result<OwnedFd, Errno> {
        rustix::fs::openat(
            &self.dir,
            self.part.as_c_str(),
            OFlags::WRONLY | OFlags::DIRECT | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        )
    }

    /// Whether to keep the files when dropped uncommitted (they hold resumable chunks).
    pub fn set_keep(&mut self, keep: bool) {
        self.keep = keep;
    }

    /// Reserves `size` bytes, so a full filesystem fails now, not mid-transfer. Filesystems
    /// without `fallocate` get the size set and a free-space check instead.
    pub fn preallocate(&self, size: u64) -> Result<(), EngineError> {
        preallocate(&self.file, size)
    }

    /// The journal's bytes, if there is one (and it is not absurdly large).
    pub fn read_journal(&self) -> Result<Option<Vec<u8>>, EngineError> {
        let fd = match rustix::fs::openat(
            &self.dir,
            self.journal.as_c_str(),
            OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
            Mode::empty(),
        ) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => return Ok(None),
            Err(e) => return Err(EngineError::sys("openat", "journal", e)),
        };
        let size = rustix::fs::fstat(&fd)
            .map_err(|e| EngineError::sys("fstat", "journal", e))?
            .st_size as u64;
        if size > MAX_JOURNAL_BYTES {
            return Ok(None);
        }
        let mut buf = vec![0u8; size as usize];
        let mut got = 0;
        while got < buf.len() {
            let n = retry("pread", "journal", None, || {
                rustix::io::pread(&fd, &mut buf[got..], got as u64)
            })?;
            if n == 0 {
                break;
            }
            got += n;
        }
        buf.truncate(got);
        Ok(Some(buf))
    }

    /// Forgets everything received so far: empties the file and removes the journal.
    pub fn reset(&mut self) -> Result<(), EngineError> {
        self.journal_fd = None;
        match rustix::fs::unlinkat(&self.dir, self.journal.as_c_str(), AtFlags::empty()) {
            Ok(()) | Err(Errno::NOENT) => {}
            Err(e) => return Err(EngineError::sys("unlinkat", "journal", e)),
        }
        retry("ftruncate", "partial file", None, || {
            rustix::fs::ftruncate(&self.file, 0)
        })
    }

    /// Starts a new journal with `header` (replacing any old one), durably.
    pub fn start_journal(&mut self, header: &[u8]) -> Result<(), EngineError> {
        let fd = retry("openat(O_CREAT)", "journal", None, || {
            rustix::fs::openat(
                &self.dir,
                self.journal.as_c_str(),
                OFlags::WRONLY
                    | OFlags::CREATE
                    | OFlags::TRUNC
                    | OFlags::CLOEXEC
                    | OFlags::NOFOLLOW,
                Mode::from_raw_mode(0o600),
            )
        })?;
        crate::recv::pwrite_all(fd.as_fd(), header, 0)?;
        retry("fdatasync", "journal", None, || rustix::fs::fdatasync(&fd))?;
        // The new name must survive a crash too, or the chunks it records are lost.
        retry("fsync", "destination directory", None, || {
            rustix::fs::fsync(&self.dir)
        })?;
        self.journal_fd = Some(fd);
        self.journal_made = true;
        Ok(())
    }

    /// Continues an existing journal, cutting off anything after its last intact record.
    pub fn continue_journal(&mut self, valid_len: u64) -> Result<(), EngineError> {
        let fd = retry("openat", "journal", None, || {
            rustix::fs::openat(
                &self.dir,
                self.journal.as_c_str(),
                OFlags::WRONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW,
                Mode::empty(),
            )
        })?;
        retry("ftruncate", "journal", None, || {
            rustix::fs::ftruncate(&fd, valid_len)
        })?;
        self.journal_fd = Some(fd);
        Ok(())
    }

    /// Appends records to the journal and makes them durable. The caller has already made the
    /// chunks they record durable ([`PartFile::sync_data`]).
    pub fn append_journal(&mut self, records: &[u8]) -> Result<(), EngineError> {
        let Some(fd) = &self.journal_fd else {
            return Err(EngineError::Path("no journal open".into()));
        };
        let end = rustix::fs::fstat(fd)
            .map_err(|e| EngineError::sys("fstat", "journal", e))?
            .st_size as u64;
        crate::recv::pwrite_all(fd.as_fd(), records, end)?;
        retry("fdatasync", "journal", None, || rustix::fs::fdatasync(fd))
    }

    /// Whether a journal is open for appending.
    pub fn has_journal(&self) -> bool {
        self.journal_fd.is_some()
    }

    /// `fdatasync` the file: its data reaches stable storage.
    pub fn sync_data(&self) -> Result<(), EngineError> {
        retry("fdatasync", "partial file", None, || {
            rustix::fs::fdatasync(&self.file)
        })
    }

    /// Cuts the file to `size` (O_DIRECT may have padded its last block, an earlier attempt
    /// may have left it longer) and sets its mode and mtime. A file this open created, and
    /// which `padded` says no engine wrote past `size`, is already `size` long and is not cut.
    /// Makes nothing durable: see [`PartFile::sync`] or [`syncfs`].
    pub fn set_final_metadata(
        &self,
        size: u64,
        mode: u32,
        mtime: (i64, u32),
        padded: bool,
    ) -> Result<(), EngineError> {
        let f = &*self.file;
        if padded || !self.fresh {
            retry("ftruncate", "partial file", None, || {
                rustix::fs::ftruncate(f, size)
            })?;
        }
        retry("fchmod", "partial file", None, || {
            rustix::fs::fchmod(f, Mode::from_raw_mode(mode & 0o777))
        })?;
        let times = timestamps(mtime);
        retry("futimens", "partial file", None, || {
            rustix::fs::futimens(f, &times)
        })
    }

    /// `fsync` the file: data and metadata (mode, mtime) reach stable storage.
    pub fn sync(&self) -> Result<(), EngineError> {
        retry("fsync", "partial file", None, || {
            rustix::fs::fsync(&self.file)
        })
    }

    /// Renames the file over `target` in its directory and removes its journal. The rename
    /// is durable once the directory is synced ([`fsync_dir`] or [`syncfs`]). Call only after
    /// the contents are verified and synced.
    pub fn rename_to(mut self, target: &[u8]) -> Result<(), EngineError> {
        retry("renameat", "destination", None, || {
            rustix::fs::renameat(&self.dir, self.part.as_c_str(), &self.dir, target)
        })?;
        self.live = false;
        self.journal_fd = None;
        if self.journal_made {
            let _ = rustix::fs::unlinkat(&self.dir, self.journal.as_c_str(), AtFlags::empty());
        }
        Ok(())
    }
}

impl Drop for PartFile {
    fn drop(&mut self) {
        if self.live && !self.keep {
            let _ = rustix::fs::unlinkat(&self.dir, self.part.as_c_str(), AtFlags::empty());
            if self.journal_made {
                let _ = rustix::fs::unlinkat(&self.dir, self.journal.as_c_str(), AtFlags::empty());
            }
        }
    }
}

fn preallocate(file: &OwnedFd, size: u64) -> Result<(), EngineError> {
    if size == 0 {
        return Ok(());
    }
    let no_space =
        |free: u64| EngineError::NoSpace(format!("the file needs {size} bytes, {free} are free"));
    match retry("fallocate", "partial file", None, || {
        rustix::fs::fallocate(file, FallocateFlags::empty(), 0, size)
    }) {
        Ok(()) => Ok(()),
        Err(e) if e.is_no_space() => {
            Err(no_space(fs_info(file).map(|i| i.free_bytes).unwrap_or(0)))
        }
        Err(EngineError::Sys { source, .. })
            if matches!(
                source.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
            ) =>
        {
            let free = fs_info(file)?.free_bytes;
            let have = rustix::fs::fstat(file)
                .map(|s| s.st_blocks as u64 * 512)
                .unwrap_or(0);
            if free + have < size {
                return Err(no_space(free));
            }
            retry("ftruncate", "partial file", None, || {
                rustix::fs::ftruncate(file, size)
            })
        }
        Err(e) => Err(e),
    }
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

/// Sets the permission bits (`mode & 0o777`: setuid, setgid and sticky are never set from the
/// network) and mtime of an open directory or file.
pub fn set_mode_and_mtime(fd: impl AsFd, mode: u32, mtime: (i64, u32)) -> Result<(), EngineError> {
    set_mode_within(fd, mode, false, mtime)
}

/// [`set_mode_and_mtime`], with the new permission bits limited to those the file has now
/// when `narrow_only`: a mode can lose bits, never gain one.
pub fn set_mode_within(
    fd: impl AsFd,
    mode: u32,
    narrow_only: bool,
    mtime: (i64, u32),
) -> Result<(), EngineError> {
    let mut mode = mode & 0o777;
    if narrow_only {
        mode &= stat_fd(&fd)?.mode & 0o777;
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

/// What a directory entry is and the facts a sender announces, without following symlinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta {
    /// File, directory, link, other.
    pub kind: EntryKind,
    /// Size in bytes.
    pub size: u64,
    /// `st_mode & 0o7777`.
    pub mode: u32,
    /// Modification time.
    pub mtime: (i64, u32),
    /// Status change time (catches changes that keep the mtime).
    pub ctime: (i64, u32),
    /// Device and inode: the file's identity.
    pub id: (u64, u64),
    /// Hard links; 0 once the file was deleted.
    pub nlink: u64,
    /// For `Other`: what it is, for the note that skips it.
    pub other: &'static str,
}

fn meta_of(st: &rustix::fs::Stat) -> Meta {
    let ft = FileType::from_raw_mode(st.st_mode);
    let (kind, other) = match ft {
        FileType::Directory => (EntryKind::Dir, ""),
        FileType::RegularFile => (EntryKind::File, ""),
        FileType::Symlink => (EntryKind::Symlink, ""),
        FileType::Fifo => (EntryKind::Other, "FIFO"),
        FileType::Socket => (EntryKind::Other, "socket"),
        FileType::CharacterDevice => (EntryKind::Other, "character device"),
        FileType::BlockDevice => (EntryKind::Other, "block device"),
        _ => (EntryKind::Other, "special file"),
    };
    Meta {
        kind,
        size: st.st_size as u64,
        mode: st.st_mode & 0o7777,
        mtime: (st.st_mtime, st.st_mtime_nsec as u32),
        ctime: (st.st_ctime, st.st_ctime_nsec as u32),
        id: (st.st_dev, st.st_ino),
        nlink: st.st_nlink,
        other,
    }
}

/// `fstatat(dir, name, AT_SYMLINK_NOFOLLOW)`.
pub fn stat_at(dir: impl AsFd, name: &[u8]) -> Result<Meta, EngineError> {
    rustix::fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
        .map(|st| meta_of(&st))
        .map_err(|e| EngineError::Sys {
            call: "fstatat",
            what: "source",
            source: e.into(),
        })
}

/// `fstat(fd)`.
pub fn stat_fd(fd: impl AsFd) -> Result<Meta, EngineError> {
    rustix::fs::fstat(&fd)
        .map(|st| meta_of(&st))
        .map_err(|e| EngineError::Sys {
            call: "fstat",
            what: "source",
            source: e.into(),
        })
}

/// Opens a path as given (following symlinks, as for command-line arguments).
pub fn open_path(path: &Path) -> Result<OwnedFd, EngineError> {
    rustix::fs::open(
        path,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK,
        Mode::empty(),
    )
    .map_err(|e| EngineError::Path(format!("{}: {}", path.display(), std::io::Error::from(e))))
}

/// Opens entry `name` of `dir` for reading, never following a symlink; a regular file or a
/// directory. `O_NONBLOCK` keeps a FIFO that appeared in its place from hanging the open.
pub fn open_at(dir: impl AsFd, name: &[u8]) -> Result<OwnedFd, EngineError> {
    let flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOFOLLOW | OFlags::NONBLOCK;
    retry("openat", "source", None, || {
        rustix::fs::openat(&dir, name, flags, Mode::empty())
    })
}

/// The target of symlink `name` in `dir`, as raw bytes.
pub fn read_link_at(dir: impl AsFd, name: &[u8]) -> Result<Vec<u8>, EngineError> {
    rustix::fs::readlinkat(&dir, name, Vec::new())
        .map(|c| c.into_bytes())
        .map_err(|e| EngineError::Sys {
            call: "readlinkat",
            what: "source",
            source: e.into(),
        })
}

/// Reads the entries of a directory (without `.` and `..`), a batch at a time: memory stays
/// bounded however many entries it holds.
pub struct DirEntries(rustix::fs::Dir);

impl std::fmt::Debug for DirEntries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DirEntries")
    }
}

/// Starts reading the directory open at `dir`.
pub fn read_dir(dir: impl AsFd) -> Result<DirEntries, EngineError> {
    rustix::fs::Dir::read_from(&dir)
        .map(DirEntries)
        .map_err(|e| EngineError::Sys {
            call: "getdents64",
            what: "source directory",
            source: e.into(),
        })
}

impl Iterator for DirEntries {
    type Item = Result<Vec<u8>, EngineError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            match self.0.read()? {
                Ok(e) => {
                    let name = e.file_name().to_bytes();
                    if name == b"." || name == b".." {
                        continue;
                    }
                    return Some(Ok(name.to_vec()));
                }
                Err(e) => {
                    return Some(Err(EngineError::Sys {
                        call: "getdents64",
                        what: "source directory",
                        source: e.into(),
                    }));
                }
            }
        }
    }
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

/// Drops a file's clean pages from the page cache (`posix_fadvise(POSIX_FADV_DONTNEED)`), so
/// the next read comes from the disk. Any user who can open the file may do this; dirty pages
/// stay until written, so sync the file first.
pub fn drop_cached(fd: impl AsFd) -> Result<(), EngineError> {
    rustix::fs::fadvise(&fd, 0, None, rustix::fs::Advice::DontNeed)
        .map_err(|e| EngineError::sys("posix_fadvise(DONTNEED)", "source file", e))
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
    fn a_second_open_waits_for_the_lock_and_never_takes_an_unlinked_file() {
        let (d, r) = root();
        for keep in [false, true] {
            let (mut p, _) =
                PartFile::open(Arc::new(r.open_dir(&[], false).unwrap()), "w").unwrap();
            p.set_keep(keep);
            let dir = Arc::new(r.open_dir(&[], false).unwrap());
            let waiter = std::thread::spawn(move || PartFile::open(dir, "w"));
            std::thread::sleep(std::time::Duration::from_millis(200));
            drop(p);
            let (q, existed) = waiter.join().unwrap().unwrap();
            // A removed file is created afresh; a kept one is taken over.
            assert_eq!(existed, keep);
            let named = std::fs::metadata(d.path().join(q.name())).unwrap();
            let held = rustix::fs::fstat(&*q.shared_fd()).unwrap();
            assert_eq!(std::os::unix::fs::MetadataExt::ino(&named), held.st_ino);
            drop(q);
        }
    }

    #[test]
    fn part_file_is_locked_kept_or_removed_and_renamed() {
        let (d, r) = root();
        let (p, existed) =
            PartFile::open(Arc::new(r.open_dir(&[], false).unwrap()), "abc").unwrap();
        assert!(!existed);
        let name = p.name();
        assert_eq!(name, ".zcp-abc.part");
        // A second writer for the same target is refused while the first holds it.
        let e = PartFile::open(Arc::new(r.open_dir(&[], false).unwrap()), "abc").unwrap_err();
        assert!(matches!(e, EngineError::Busy(_)), "{e}");
        drop(p);
        assert!(!d.path().join(&name).exists(), "removed when not kept");

        let (mut p, _) = PartFile::open(Arc::new(r.open_dir(&[], false).unwrap()), "abc").unwrap();
        p.start_journal(b"header").unwrap();
        p.append_journal(b"+record").unwrap();
        assert_eq!(p.read_journal().unwrap().unwrap(), b"header+record");
        p.set_keep(true);
        drop(p);
        assert!(d.path().join(".zcp-abc.part").exists(), "kept for resume");
        let (mut p, existed) =
            PartFile::open(Arc::new(r.open_dir(&[], false).unwrap()), "abc").unwrap();
        assert!(existed);
        p.continue_journal(6).unwrap();
        p.append_journal(b"!").unwrap();
        assert_eq!(p.read_journal().unwrap().unwrap(), b"header!");

        p.preallocate(10_000).unwrap();
        rustix::io::pwrite(p.fd(), b"hello", 0).unwrap();
        // Not fresh: cut to size even though no engine padded it.
        p.set_final_metadata(5, 0o640, (1_000_000_000, 5), false)
            .unwrap();
        p.sync().unwrap();
        p.rename_to(b"final").unwrap();
        let path = d.path().join("final");
        assert_eq!(std::fs::read(&path).unwrap(), b"hello");
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let m = std::fs::metadata(&path).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o640);
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_000_000_000, 5));
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            1,
            "no partial or journal left"
        );

        // A fresh file is cut only when an engine padded it.
        for (padded, len) in [(false, 8192), (true, 3)] {
            let key = format!("fresh{padded}");
            let (p, existed) =
                PartFile::open(Arc::new(r.open_dir(&[], false).unwrap()), &key).unwrap();
            assert!(!existed);
            rustix::io::pwrite(p.fd(), &[7u8; 8192], 0).unwrap();
            p.set_final_metadata(3, 0o600, (0, 0), padded).unwrap();
            assert_eq!(rustix::fs::fstat(p.fd()).unwrap().st_size, len);
        }
    }

    #[test]
    fn zcp_names_its_own_files_with_reserved_names() {
        for n in [&b".zcp-abc.part"[..], b".zcp-0123.journal", b".zcp-ff.link"] {
            assert!(is_reserved_name(n), "{n:?}");
        }
        for n in [
            &b"zcp-abc.part"[..],
            b".zcp-abc",
            b"a.part",
            b".zcp-abc.parts",
        ] {
            assert!(!is_reserved_name(n), "{n:?}");
        }
    }

    #[test]
    fn symlinks_are_made_and_replaced_atomically_never_over_directories() {
        let (d, r) = root();
        assert!(make_symlink(r.fd(), b"l", b"/somewhere").unwrap());
        assert!(make_symlink(r.fd(), b"l", b"elsewhere").unwrap());
        assert!(
            !make_symlink(r.fd(), b"l", b"elsewhere").unwrap(),
            "no change"
        );
        assert_eq!(
            std::fs::read_link(d.path().join("l")).unwrap(),
            std::path::Path::new("elsewhere")
        );
        std::fs::create_dir(d.path().join("dir")).unwrap();
        assert!(make_symlink(r.fd(), b"dir", b"x").is_err());
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
    }

    #[test]
    fn open_dir_says_what_it_made_and_modes_can_be_held_to_narrowing() {
        let (d, r) = root();
        std::fs::create_dir(d.path().join("a")).unwrap();
        let comps = [b"a".to_vec(), b"b".to_vec(), b"c".to_vec()];
        let (_, existed) = r.open_dir_made(&comps, true).unwrap();
        assert_eq!(existed, 1, "a was there, b and c were made");
        let (fd, existed) = r.open_dir_made(&comps, true).unwrap();
        assert_eq!(existed, 3);
        let mode = |p: &str| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(d.path().join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        set_mode_within(&fd, 0o4700, true, (5, 0)).unwrap();
        assert_eq!(mode("a/b/c"), 0o700);
        set_mode_within(&fd, 0o777, true, (5, 0)).unwrap();
        assert_eq!(mode("a/b/c"), 0o700, "never widened");
        set_mode_within(&fd, 0o1777, false, (5, 0)).unwrap();
        assert_eq!(mode("a/b/c"), 0o777, "no sticky bit from the network");
    }

    #[test]
    fn walking_by_descriptor() {
        let (d, r) = root();
        std::fs::write(d.path().join("f"), b"12345").unwrap();
        symlink("f", d.path().join("l")).unwrap();
        let mut names: Vec<_> = read_dir(r.fd()).unwrap().map(|n| n.unwrap()).collect();
        names.sort();
        assert_eq!(names, vec![b"f".to_vec(), b"l".to_vec()]);
        let m = stat_at(r.fd(), b"f").unwrap();
        assert_eq!((m.kind, m.size), (EntryKind::File, 5));
        assert_eq!(stat_at(r.fd(), b"l").unwrap().kind, EntryKind::Symlink);
        assert_eq!(read_link_at(r.fd(), b"l").unwrap(), b"f");
        assert!(
            open_at(r.fd(), b"l").is_err(),
            "a symlink is never opened through"
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
