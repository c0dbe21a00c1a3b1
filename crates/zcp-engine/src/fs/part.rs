//! The part file a receiver writes into, its lock and its resume journal.

use super::*;

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

/// The key a receiver names a target's part file and journal after: the first 8 bytes of
/// BLAKE3(the target's name in its directory), in lowercase hex (16 digits). [`PartFile::open`]
/// makes `.zcp-<key>.part` and `.zcp-<key>.journal` of it; [`super::leftover_name`] recognises
/// exactly those names and nothing else.
pub fn part_key(target_name: &[u8]) -> String {
    hex::encode(&blake3::hash(target_name).as_bytes()[..8])
}

/// The part file's and the journal's names for `key`.
pub(super) fn part_names(key: &str) -> Result<(CString, CString), EngineError> {
    let name = |ext: &str| {
        CString::new(format!(".zcp-{key}.{ext}"))
            .map_err(|_| EngineError::Path("NUL in key".into()))
    };
    Ok((name("part")?, name("journal")?))
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
        let (part, journal) = part_names(key)?;
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
                // O_NOFOLLOW refuses a symlink; anything else but a regular file is refused here,
                // and so is one with other hard links: a name planted beside the target, linked
                // to a file elsewhere, would have that file written.
                let st = rustix::fs::fstat(&f)
                    .map_err(|e| EngineError::sys("fstat", "partial file", e))?;
                if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
                    return Err(EngineError::Path(format!(
                        "{} is not a regular file",
                        part.to_string_lossy()
                    )));
                }
                if st.st_nlink > 1 {
                    return Err(EngineError::Path(format!(
                        "{} has other hard links; remove it (zcp clean) to go on",
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

    /// Sets the file's size without reserving its space, for a sparse file: what is not
    /// written stays a hole.
    pub fn set_size(&self, size: u64) -> Result<(), EngineError> {
        retry("ftruncate", "partial file", None, || {
            rustix::fs::ftruncate(&self.file, size)
        })
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

    /// Forgets everything received so far: empties the file and removes the journal. What is
    /// left holds nothing to resume, so it is no longer kept when dropped (until
    /// [`PartFile::set_keep`] says otherwise).
    pub fn reset(&mut self) -> Result<(), EngineError> {
        self.keep = false;
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
    pub fn rename_to(self, target: &[u8]) -> Result<(), EngineError> {
        self.rename(target, rustix::fs::RenameFlags::empty())
    }

    /// [`PartFile::rename_to`], but only where nothing has the name (`renameat2` with
    /// `RENAME_NOREPLACE`): `Ok(false)` when something took it meanwhile, the part file
    /// then let go of (removed unless kept).
    pub fn rename_to_new(self, target: &[u8]) -> Result<bool, EngineError> {
        match self.rename(target, rustix::fs::RenameFlags::NOREPLACE) {
            Ok(()) => Ok(true),
            Err(EngineError::Sys { source, .. })
                if source.raw_os_error() == Some(Errno::EXIST.raw_os_error()) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn rename(mut self, target: &[u8], flags: rustix::fs::RenameFlags) -> Result<(), EngineError> {
        retry("renameat", "destination", None, || {
            rustix::fs::renameat_with(&self.dir, self.part.as_c_str(), &self.dir, target, flags)
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
    // Sizes for people, and the shortfall exact: both sizes may round alike.
    let no_space = |free: u64| {
        EngineError::NoSpace(format!(
            "the file needs {}, {} are free ({} bytes short)",
            zcp_wire::size_text(size),
            zcp_wire::size_text(free),
            size.saturating_sub(free)
        ))
    };
    // On a filesystem in memory (tmpfs), fallocate allocates and charges every page before
    // the first byte moves: about 0.25 s per GiB here, all of it waiting. The writes allocate
    // the same pages while the network runs, so only the free space is checked.
    let in_memory = fs_info(file).is_ok_and(|i| i.in_memory);
    let tried = if in_memory {
        Err(EngineError::sys(
            "fallocate",
            "partial file",
            Errno::OPNOTSUPP,
        ))
    } else {
        retry("fallocate", "partial file", None, || {
            rustix::fs::fallocate(file, FallocateFlags::empty(), 0, size)
        })
    };
    match tried {
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
