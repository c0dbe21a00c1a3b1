//! Entry facts, reading directories and links, and the page cache of written ranges.

use super::*;

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
    /// Bytes of storage the file takes (`st_blocks * 512`).
    pub allocated: u64,
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
        allocated: st.st_blocks as u64 * 512,
        other,
    }
}

impl Meta {
    /// Whether this is a regular file that takes less storage than its size: it has holes
    /// (or its filesystem compresses it), so it is sent as its data extents and received
    /// without reserving its size.
    pub fn sparse(&self) -> bool {
        self.kind == EntryKind::File && self.allocated < self.size
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

impl DirEntries {
    /// The next entry's name, and whether the directory says it is a regular file
    /// (`d_type`; a filesystem that does not say gives `false`). A name may be replaced by
    /// another kind of entry before it is opened: only the opened descriptor is proof.
    pub fn next_entry(&mut self) -> Option<Result<(Vec<u8>, bool), EngineError>> {
        loop {
            match self.0.read()? {
                Ok(e) => {
                    let name = e.file_name().to_bytes();
                    if name == b"." || name == b".." {
                        continue;
                    }
                    let file = e.file_type() == FileType::RegularFile;
                    return Some(Ok((name.to_vec(), file)));
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

impl Iterator for DirEntries {
    type Item = Result<Vec<u8>, EngineError>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_entry().map(|r| r.map(|(name, _)| name))
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

/// The value of extended attribute `name` of `fd`, if it has one of at most 256 bytes.
pub fn get_xattr(fd: impl AsFd, name: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    let n = rustix::fs::fgetxattr(&fd, name, &mut buf[..]).ok()?;
    buf.truncate(n);
    Some(buf)
}

/// Sets extended attribute `name` of `fd` (a filesystem without user attributes, or a
/// read-only one, is an error the caller may ignore).
pub fn set_xattr(fd: impl AsFd, name: &str, value: &[u8]) -> Result<(), EngineError> {
    rustix::fs::fsetxattr(&fd, name, value, rustix::fs::XattrFlags::empty())
        .map_err(|e| EngineError::sys("fsetxattr", "file", e))
}
