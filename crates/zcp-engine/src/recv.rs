//! Receiver engines: moving exactly `len` bytes from a TCP socket into a file at an offset.
//!
//! * `splice` — socket -> pipe -> file with `splice(2)`: no user-space copy; the kernel copies
//!   the socket's pages into the page cache once. Each finished range has its writeback
//!   started at once ([`crate::fs::start_writeback`]) so the disk works while the network does.
//! * `direct` — `recv(2)` into page-aligned buffers and `pwrite(2)` with `O_DIRECT` from a
//!   writer thread, through a ring of buffers: the network fills one buffer while the disk
//!   drains another, and the page cache is not touched at all.
//! * `rw` — `read(2)` into a buffer, `pwrite(2)` into the page cache: the conventional path.
//! * `null` — socket -> pipe -> `/dev/null`: bytes are dropped without being copied; the
//!   network-only ceiling.
//! * `mem` — `read(2)` into a buffer that is then dropped: "to receiver memory".
//! * `auto` — resolved by [`choose`] per destination filesystem.
//!
//! Engines that see the bytes in a user buffer (`direct`, `rw`, `mem`) pass them to a hash
//! callback where they are, so verification costs no extra copy; for `splice` the caller
//! hashes the written range from the page cache ([`crate::map::visit_mapped`]).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;

use rustix::io::Errno;
use rustix::net::RecvFlags;
use rustix::pipe::SpliceFlags;

use crate::EngineError;
use crate::buf::AlignedBuf;
use crate::error::retry;
use crate::fs::{FsInfo, TempFile};
use crate::sys::{Usage, socket_timeout, thread_usage};

/// How the receiver moves bytes from the socket to their destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecvEngine {
    /// Pick the fastest engine that works on the destination filesystem.
    Auto,
    /// socket -> pipe -> file with `splice(2)`.
    Splice,
    /// Aligned buffers + `O_DIRECT`, network and disk overlapped.
    Direct,
    /// `read(2)` + `pwrite(2)` through the page cache.
    ReadWrite,
    /// Discard without copying (socket -> pipe -> /dev/null).
    Null,
    /// Read into user memory and discard.
    Mem,
}

impl RecvEngine {
    /// Every receiver engine.
    pub const ALL: [RecvEngine; 6] = [
        RecvEngine::Auto,
        RecvEngine::Splice,
        RecvEngine::Direct,
        RecvEngine::ReadWrite,
        RecvEngine::Null,
        RecvEngine::Mem,
    ];

    /// The engine's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            RecvEngine::Auto => "auto",
            RecvEngine::Splice => "splice",
            RecvEngine::Direct => "direct",
            RecvEngine::ReadWrite => "rw",
            RecvEngine::Null => "null",
            RecvEngine::Mem => "mem",
        }
    }

    /// Parses a command-line name.
    pub fn parse(s: &str) -> Option<RecvEngine> {
        Self::ALL.into_iter().find(|e| e.name() == s)
    }

    /// Whether the engine writes a file (as opposed to discarding the bytes).
    pub fn stores(self) -> bool {
        !matches!(self, RecvEngine::Null | RecvEngine::Mem)
    }

    /// Whether the bytes pass through a user buffer, where they can be hashed for free.
    pub fn sees_bytes(self) -> bool {
        matches!(
            self,
            RecvEngine::Direct | RecvEngine::ReadWrite | RecvEngine::Mem
        )
    }

    /// Bytes per call (per buffer, for `direct`) when the user sets no block size.
    pub fn default_block(self) -> u64 {
        match self {
            RecvEngine::Direct => 4 << 20,
            _ => 1 << 20,
        }
    }
}

/// Why bytes already accepted by an engine could not be written (reported to a
/// [`Completion`] after `receive` returned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFailure {
    /// Whether the filesystem ran out of space.
    pub no_space: bool,
    /// What happened.
    pub message: String,
}

impl From<&EngineError> for WriteFailure {
    fn from(e: &EngineError) -> WriteFailure {
        WriteFailure {
            no_space: e.is_no_space(),
            message: e.to_string(),
        }
    }
}

/// Where an engine that sees the bytes feeds them, in order, for hashing.
pub type HashFeed<'a> = &'a mut dyn FnMut(&[u8]);

/// Told once a chunk's bytes are all written, or that writing them failed. See
/// [`StreamReceiver::receive`] for when it is called.
pub type Completion = Box<dyn FnOnce(Result<(), WriteFailure>) + Send>;

/// Buffers in the `direct` engine's ring.
pub const DIRECT_DEPTH: usize = 4;
/// Alignment zcp uses for O_DIRECT buffers and offsets (chunk offsets are multiples of it).
pub const DIRECT_ALIGN: u64 = 4096;

/// The engine a probe settled on for one file.
#[derive(Debug)]
pub struct Choice {
    /// The engine that will run.
    pub engine: RecvEngine,
    /// Why it is not the one asked for, or how `auto` decided.
    pub note: Option<String>,
    /// For `direct`: the file opened with O_DIRECT.
    pub direct: Option<OwnedFd>,
}

/// Resolves `requested` for a file being received into `tmp` on the filesystem `fs`. Engines
/// that store are probed on the real file; one that fails falls back (direct -> splice -> rw)
/// and the note says why.
pub fn choose(requested: RecvEngine, tmp: Option<&TempFile>, fs: Option<&FsInfo>) -> Choice {
    let plain = |engine| Choice {
        engine,
        note: None,
        direct: None,
    };
    let (Some(tmp), Some(fs)) = (tmp, fs) else {
        return plain(requested);
    };
    match requested {
        RecvEngine::Null | RecvEngine::Mem | RecvEngine::ReadWrite => plain(requested),
        RecvEngine::Direct => match probe_direct(tmp, fs) {
            Ok(fd) => Choice {
                engine: RecvEngine::Direct,
                note: None,
                direct: Some(fd),
            },
            Err(why) => fallback_from_direct(
                tmp,
                format!(
                    "direct is unavailable on this {} destination ({why})",
                    fs.name
                ),
            ),
        },
        RecvEngine::Splice => match probe_splice(tmp) {
            Ok(()) => plain(RecvEngine::Splice),
            Err(why) => Choice {
                engine: RecvEngine::ReadWrite,
                note: Some(format!(
                    "splice does not work on this {} destination ({why}); using rw",
                    fs.name
                )),
                direct: None,
            },
        },
        RecvEngine::Auto => {
            if fs.in_memory {
                let mut c = fallback_from_direct(tmp, String::new());
                c.note = Some(format!(
                    "auto chose {}: the destination is {}, which lives in memory, so O_DIRECT has no disk to reach",
                    c.engine.name(),
                    fs.name
                ));
                return c;
            }
            match probe_direct(tmp, fs) {
                Ok(fd) => Choice {
                    engine: RecvEngine::Direct,
                    note: Some(format!(
                        "auto chose direct: O_DIRECT works on this {} destination",
                        fs.name
                    )),
                    direct: Some(fd),
                },
                Err(why) => fallback_from_direct(
                    tmp,
                    format!(
                        "auto: direct is unavailable on this {} destination ({why})",
                        fs.name
                    ),
                ),
            }
        }
    }
}

fn fallback_from_direct(tmp: &TempFile, why: String) -> Choice {
    match probe_splice(tmp) {
        Ok(()) => Choice {
            engine: RecvEngine::Splice,
            note: Some(format!("{why}; using splice")),
            direct: None,
        },
        Err(e) => Choice {
            engine: RecvEngine::ReadWrite,
            note: Some(format!("{why}; splice fails too ({e}); using rw")),
            direct: None,
        },
    }
}

/// Opens the file with O_DIRECT and writes one aligned block at offset 0 (later overwritten
/// by the file's first chunk, or cut off at commit).
fn probe_direct(tmp: &TempFile, fs: &FsInfo) -> Result<OwnedFd, String> {
    if let Some((mem, off)) = fs.dio_align {
        if u64::from(mem) > DIRECT_ALIGN || u64::from(off) > DIRECT_ALIGN {
            return Err(format!(
                "it needs {off}-byte offsets and {mem}-byte buffers, above zcp's {DIRECT_ALIGN}"
            ));
        }
    }
    let fd = tmp
        .open_direct()
        .map_err(|e| format!("open(O_DIRECT): {}", std::io::Error::from(e)))?;
    let block = AlignedBuf::new(DIRECT_ALIGN as usize);
    match rustix::io::pwrite(&fd, &block, 0) {
        Ok(n) if n == block.len() => Ok(fd),
        Ok(n) => Err(format!("O_DIRECT probe wrote {n} of {} bytes", block.len())),
        Err(e) => Err(format!("pwrite(O_DIRECT): {}", std::io::Error::from(e))),
    }
}

/// Splices one byte from a pipe into the file at offset 0.
fn probe_splice(tmp: &TempFile) -> Result<(), String> {
    let (r, w) = rustix::pipe::pipe().map_err(|e| format!("pipe: {e}"))?;
    rustix::io::write(&w, b"\0").map_err(|e| format!("write(pipe): {e}"))?;
    let mut off = 0u64;
    match rustix::pipe::splice(&r, None, tmp.fd(), Some(&mut off), 1, SpliceFlags::empty()) {
        Ok(1) => Ok(()),
        Ok(n) => Err(format!("splice moved {n} bytes")),
        Err(e) => Err(format!("splice(pipe -> file): {}", std::io::Error::from(e))),
    }
}

/// A pipe sized for splicing: as large as `want`, or as large as the system allows.
#[derive(Debug)]
struct Pipe {
    r: OwnedFd,
    w: OwnedFd,
    cap: usize,
}

impl Pipe {
    fn new(want: usize) -> Result<Pipe, EngineError> {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)
            .map_err(|e| EngineError::sys("pipe2", "splice pipe", e))?;
        // Unprivileged users may go up to fs.pipe-max-size (1 MiB by default).
        let cap = [want, 1 << 20]
            .into_iter()
            .find_map(|size| rustix::pipe::fcntl_setpipe_size(&w, size).ok())
            .or_else(|| rustix::pipe::fcntl_getpipe_size(&w).ok())
            .unwrap_or(64 * 1024);
        Ok(Pipe { r, w, cap })
    }

    /// Moves up to `max` bytes from `sock` into the pipe, then all of them out to `out`
    /// (at `*off` when given). Returns the bytes moved; 0 means the peer closed the socket.
    fn pump(
        &self,
        sock: BorrowedFd<'_>,
        out: BorrowedFd<'_>,
        mut off: Option<&mut u64>,
        max: u64,
    ) -> Result<usize, EngineError> {
        let timeout = socket_timeout(sock);
        let want = max.min(self.cap as u64) as usize;
        let n = retry("splice(socket -> pipe)", "socket", timeout, || {
            rustix::pipe::splice(
                sock,
                None,
                &self.w,
                None,
                want,
                SpliceFlags::MOVE | SpliceFlags::MORE,
            )
        })?;
        let mut left = n;
        while left > 0 {
            let m = retry("splice(pipe -> file)", "destination", None, || {
                rustix::pipe::splice(
                    &self.r,
                    None,
                    out,
                    off.as_deref_mut(),
                    left,
                    SpliceFlags::MOVE,
                )
            })?;
            if m == 0 {
                return Err(EngineError::sys(
                    "splice(pipe -> file)",
                    "destination",
                    Errno::IO,
                ));
            }
            left -= m;
        }
        Ok(n)
    }
}

/// Receives the chunks of one data stream with one engine. Holds the engine's pipe or
/// buffers, and for `direct` its writer thread; [`StreamReceiver::finish`] waits for
/// every write to land.
#[derive(Debug)]
pub struct StreamReceiver {
    engine: RecvEngine,
    inner: Inner,
}

#[derive(Debug)]
enum Inner {
    Splice { pipe: Pipe, file: OwnedFd },
    Null { pipe: Pipe, devnull: OwnedFd },
    ReadWrite { buf: Vec<u8>, file: OwnedFd },
    Mem { buf: Vec<u8> },
    Direct(DirectRing),
}

fn dup(fd: BorrowedFd<'_>) -> Result<OwnedFd, EngineError> {
    rustix::io::fcntl_dupfd_cloexec(fd, 0)
        .map_err(|e| EngineError::sys("dup", "destination file", e))
}

impl StreamReceiver {
    /// A receiver for `engine` (already resolved by [`choose`]). `file` is the destination
    /// for storing engines; `direct` its O_DIRECT descriptor for `direct`. `block` is bytes
    /// per call (0: the engine's default).
    pub fn new(
        engine: RecvEngine,
        file: Option<BorrowedFd<'_>>,
        direct: Option<BorrowedFd<'_>>,
        block: u64,
    ) -> Result<StreamReceiver, EngineError> {
        let block = if block == 0 {
            engine.default_block()
        } else {
            block
        }
        .clamp(4096, 1 << 30) as usize;
        fn need_file(
            engine: RecvEngine,
            f: Option<BorrowedFd<'_>>,
        ) -> Result<BorrowedFd<'_>, EngineError> {
            f.ok_or_else(|| EngineError::Unsupported {
                engine: engine.name(),
                reason: "no destination file".into(),
            })
        }
        let inner = match engine {
            RecvEngine::Splice => Inner::Splice {
                pipe: Pipe::new(block)?,
                file: dup(need_file(engine, file)?)?,
            },
            RecvEngine::Null => Inner::Null {
                pipe: Pipe::new(block)?,
                devnull: rustix::fs::open(
                    "/dev/null",
                    rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
                    rustix::fs::Mode::empty(),
                )
                .map_err(|e| EngineError::sys("open", "/dev/null", e))?,
            },
            RecvEngine::ReadWrite => Inner::ReadWrite {
                buf: vec![0; block],
                file: dup(need_file(engine, file)?)?,
            },
            RecvEngine::Mem => Inner::Mem {
                buf: vec![0; block],
            },
            RecvEngine::Direct => {
                Inner::Direct(DirectRing::new(dup(need_file(engine, direct)?)?, block)?)
            }
            RecvEngine::Auto => {
                return Err(EngineError::Unsupported {
                    engine: "auto",
                    reason: "resolve auto with recv::choose first".into(),
                });
            }
        };
        Ok(StreamReceiver { engine, inner })
    }

    /// The engine.
    pub fn engine(&self) -> RecvEngine {
        self.engine
    }

    /// Moves exactly `len` bytes from `sock` to the destination at `offset`. Engines that see
    /// the bytes pass each piece, in order, to `hash`. `progress` counts bytes taken from the
    /// socket.
    ///
    /// When this returns an error, `done` is dropped uncalled. When it returns `Ok`, `done` is
    /// called exactly once: at once for engines that write synchronously, or from the writer
    /// thread when `direct` has written the chunk's last byte (or failed to).
    pub fn receive(
        &mut self,
        sock: BorrowedFd<'_>,
        offset: u64,
        len: u64,
        hash: Option<HashFeed<'_>>,
        progress: &AtomicU64,
        done: Completion,
    ) -> Result<(), EngineError> {
        if let Inner::Direct(ring) = &mut self.inner {
            return ring.receive(sock, offset, len, hash, progress, done);
        }
        self.receive_sync(sock, offset, len, hash, progress)?;
        done(Ok(()));
        Ok(())
    }

    fn receive_sync(
        &mut self,
        sock: BorrowedFd<'_>,
        offset: u64,
        len: u64,
        mut hash: Option<HashFeed<'_>>,
        progress: &AtomicU64,
    ) -> Result<(), EngineError> {
        let timeout = socket_timeout(sock);
        let disconnected = |done: u64| EngineError::Disconnected {
            got: done,
            want: len,
        };
        match &mut self.inner {
            Inner::Splice { pipe, file } => {
                let mut off = offset;
                let mut done = 0;
                while done < len {
                    let n = pipe.pump(sock, file.as_fd(), Some(&mut off), len - done)? as u64;
                    if n == 0 {
                        return Err(disconnected(done));
                    }
                    done += n;
                    progress.fetch_add(n, Ordering::Relaxed);
                }
                crate::fs::start_writeback(&*file, offset, len);
                Ok(())
            }
            Inner::Null { pipe, devnull } => {
                let mut done = 0;
                while done < len {
                    let n = pipe.pump(sock, devnull.as_fd(), None, len - done)? as u64;
                    if n == 0 {
                        return Err(disconnected(done));
                    }
                    done += n;
                    progress.fetch_add(n, Ordering::Relaxed);
                }
                Ok(())
            }
            Inner::ReadWrite { buf, file } => {
                let mut done = 0;
                while done < len {
                    let want = (len - done).min(buf.len() as u64) as usize;
                    let n = retry("read", "socket", timeout, || {
                        rustix::io::read(sock, &mut buf[..want])
                    })?;
                    if n == 0 {
                        return Err(disconnected(done));
                    }
                    progress.fetch_add(n as u64, Ordering::Relaxed);
                    if let Some(h) = hash.as_mut() {
                        h(&buf[..n]);
                    }
                    pwrite_all(file.as_fd(), &buf[..n], offset + done)?;
                    done += n as u64;
                }
                Ok(())
            }
            Inner::Mem { buf } => {
                let mut done = 0;
                while done < len {
                    let want = (len - done).min(buf.len() as u64) as usize;
                    let n = retry("read", "socket", timeout, || {
                        rustix::io::read(sock, &mut buf[..want])
                    })?;
                    if n == 0 {
                        return Err(disconnected(done));
                    }
                    progress.fetch_add(n as u64, Ordering::Relaxed);
                    if let Some(h) = hash.as_mut() {
                        h(&buf[..n]);
                    }
                    done += n as u64;
                }
                Ok(())
            }
            Inner::Direct(_) => unreachable!("direct is handled by receive"),
        }
    }

    /// Waits until every byte handed to the engine is written. Returns the CPU use of the
    /// engine's helper threads, for the session's accounting.
    pub fn finish(self) -> Result<Usage, EngineError> {
        match self.inner {
            Inner::Direct(ring) => ring.finish(),
            _ => Ok(Usage::default()),
        }
    }
}

/// `pwrite(2)` all of `bytes` at `offset`.
pub fn pwrite_all(fd: BorrowedFd<'_>, bytes: &[u8], offset: u64) -> Result<(), EngineError> {
    let mut done = 0;
    while done < bytes.len() {
        let n = retry("pwrite", "destination file", None, || {
            rustix::io::pwrite(fd, &bytes[done..], offset + done as u64)
        })?;
        if n == 0 {
            return Err(EngineError::sys("pwrite", "destination file", Errno::IO));
        }
        done += n;
    }
    Ok(())
}

/// One buffer on its way to the disk; the chunk's last buffer carries its completion.
struct Job {
    buf: AlignedBuf,
    offset: u64,
    len: usize,
    done: Option<Completion>,
}

/// The `direct` engine: the stream's thread fills aligned buffers from the socket (and hashes
/// them there); a writer thread writes them with O_DIRECT and hands them back.
#[derive(Debug)]
struct DirectRing {
    failed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    free: mpsc::Receiver<AlignedBuf>,
    work: Option<mpsc::SyncSender<Job>>,
    writer: Option<JoinHandle<Result<Usage, EngineError>>>,
    block: usize,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Job({} bytes at {})", self.len, self.offset)
    }
}

impl DirectRing {
    fn new(fd: OwnedFd, block: usize) -> Result<DirectRing, EngineError> {
        let align = DIRECT_ALIGN as usize;
        let block = block.div_ceil(align) * align;
        let (free_tx, free) = mpsc::sync_channel(DIRECT_DEPTH);
        let (work, work_rx) = mpsc::sync_channel::<Job>(DIRECT_DEPTH);
        for _ in 0..DIRECT_DEPTH {
            free_tx
                .send(AlignedBuf::new(block))
                .expect("receiver is alive");
        }
        let failed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = failed.clone();
        let writer = std::thread::Builder::new()
            .name("zcp-direct-writer".into())
            .spawn(move || -> Result<Usage, EngineError> {
                let start = thread_usage();
                let mut first_error: Option<EngineError> = None;
                // After a failure keep draining, so every queued completion hears of it and the
                // receiving thread is never left waiting for a buffer.
                for mut job in work_rx {
                    if first_error.is_none() {
                        // O_DIRECT wants whole blocks: pad the file's last block with zeros;
                        // the commit cuts the file back to its exact size.
                        let padded = job.len.div_ceil(align) * align;
                        job.buf[job.len..padded].fill(0);
                        if let Err(e) = pwrite_all(fd.as_fd(), &job.buf[..padded], job.offset) {
                            flag.store(true, Ordering::Release);
                            first_error = Some(e);
                        }
                    }
                    if let Some(done) = job.done.take() {
                        done(
                            first_error
                                .as_ref()
                                .map_or(Ok(()), |e| Err(WriteFailure::from(e))),
                        );
                    }
                    let _ = free_tx.send(job.buf);
                }
                match first_error {
                    None => Ok(thread_usage().since(&start)),
                    Some(e) => Err(e),
                }
            })
            .map_err(|e| EngineError::Sys {
                call: "pthread_create",
                what: "direct writer",
                source: e,
            })?;
        Ok(DirectRing {
            failed,
            free,
            work: Some(work),
            writer: Some(writer),
            block,
        })
    }

    fn receive(
        &mut self,
        sock: BorrowedFd<'_>,
        offset: u64,
        len: u64,
        mut hash: Option<HashFeed<'_>>,
        progress: &AtomicU64,
        completion: Completion,
    ) -> Result<(), EngineError> {
        if len == 0 {
            completion(Ok(()));
            return Ok(());
        }
        let timeout = socket_timeout(sock);
        let mut completion = Some(completion);
        let mut done = 0u64;
        while done < len {
            if self.failed.load(Ordering::Acquire) {
                return Err(self.writer_failure());
            }
            let Ok(mut buf) = self.free.recv() else {
                return Err(self.writer_failure());
            };
            let n = (len - done).min(self.block as u64) as usize;
            let mut filled = 0;
            while filled < n {
                let got = retry("recv", "socket", timeout, || {
                    rustix::net::recv(sock, &mut buf[filled..n], RecvFlags::WAITALL)
                })?
                .0;
                if got == 0 {
                    return Err(EngineError::Disconnected {
                        got: done + filled as u64,
                        want: len,
                    });
                }
                filled += got;
                progress.fetch_add(got as u64, Ordering::Relaxed);
            }
            if let Some(h) = hash.as_mut() {
                h(&buf[..n]);
            }
            let last = done + n as u64 == len;
            let job = Job {
                buf,
                offset: offset + done,
                len: n,
                done: if last { completion.take() } else { None },
            };
            if self
                .work
                .as_ref()
                .expect("open until finish")
                .send(job)
                .is_err()
            {
                return Err(self.writer_failure());
            }
            done += n as u64;
        }
        Ok(())
    }

    /// The writer thread stopped early: collect its error.
    fn writer_failure(&mut self) -> EngineError {
        self.work = None;
        match self.writer.take().map(JoinHandle::join) {
            Some(Ok(Err(e))) => e,
            _ => EngineError::Sys {
                call: "pwrite",
                what: "direct writer",
                source: std::io::Error::other("the O_DIRECT writer thread stopped"),
            },
        }
    }

    fn finish(mut self) -> Result<Usage, EngineError> {
        self.work = None;
        match self.writer.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            _ => Err(EngineError::Sys {
                call: "pwrite",
                what: "direct writer",
                source: std::io::Error::other("the O_DIRECT writer thread panicked"),
            }),
        }
    }
}

impl Drop for DirectRing {
    fn drop(&mut self) {
        self.work = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}
