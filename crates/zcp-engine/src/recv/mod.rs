//! Receiver engines: moving exactly `len` bytes from a TCP socket into a file at an offset.
//!
//! * `splice` — socket -> pipe -> file with `splice(2)`: no user-space copy; the kernel copies
//!   the socket's pages into the page cache once. Each range has its writeback started at once
//!   ([`crate::fs::start_writeback`]) so the disk works while the network does.
//! * `direct` — `recv(2)` into page-aligned buffers, then (on other threads) hashed and written
//!   with `O_DIRECT`, through a ring of buffers: the network fills one buffer while others are
//!   hashed and written, and the page cache is not touched at all (`recv/direct.rs`).
//! * `rw` — `read(2)` into a buffer, `pwrite(2)` into the page cache: the conventional path.
//! * `null` — socket -> pipe -> `/dev/null`: bytes are dropped without being copied; the
//!   network-only ceiling.
//! * `mem` — `read(2)` into a buffer that is then dropped: "to receiver memory".
//! * `auto` — resolved by [`choose`] per destination filesystem.
//!
//! Verification is pushed, not pulled: the caller hands each chunk a [`ChunkSink`], and the
//! engine feeds it the chunk's bytes where they already are — in the receive buffer for
//! `direct`, `rw` and `mem`, from the page cache through a guarded mapping after the write for
//! `splice` (`recv/readback.rs`) — so hashing never costs an extra copy. `direct` and `splice` feed
//! sinks on their own threads, so one stream's receiving, hashing and writing overlap.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustix::io::Errno;
use rustix::pipe::SpliceFlags;

use crate::EngineError;
use crate::buf::AlignedBuf;
use crate::error::retry;
use crate::fs::FsInfo;
use crate::sys::{Usage, socket_timeout};

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

/// Takes one chunk's bytes, in order, as the engine sees them, and is told when it has seen
/// them all. The session's implementation hashes them into the chunk's MAC.
pub trait ChunkSink: Send {
    /// The next piece of the chunk.
    fn bytes(&mut self, bytes: &[u8]);
    /// Every byte of the chunk was passed to [`ChunkSink::bytes`].
    fn seen_all(self: Box<Self>);
}

/// A chunk's sink.
pub type Sink = Box<dyn ChunkSink>;

/// Told once a chunk's bytes are all written, or that writing them failed. See
/// [`StreamReceiver::receive`] for when it is called.
pub type Completion = Box<dyn FnOnce(Result<(), WriteFailure>) + Send>;

pub use direct::{DIRECT_ALIGN, DIRECT_DEPTH, DIRECT_WRITERS};

mod direct;
#[cfg(test)]
mod large;
mod readback;

/// The engine a probe settled on for a destination filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The engine that will run.
    pub engine: RecvEngine,
    /// Why it is not the one asked for, or how `auto` decided.
    pub note: Option<String>,
}

/// Resolves `requested` for files received into directory `dir` on the filesystem `fs`.
/// Engines that store are probed on a scratch file in `dir` (created and removed here, so no
/// file being received is touched); one that fails falls back (direct -> splice -> rw) and the
/// note says why. The answer holds for every directory of that filesystem: callers cache it.
pub fn choose(requested: RecvEngine, dir: BorrowedFd<'_>, fs: &FsInfo) -> Choice {
    let choice = |engine, note: Option<String>| Choice { engine, note };
    if !requested.stores() || requested == RecvEngine::ReadWrite {
        return choice(requested, None);
    }
    let scratch = match Scratch::create(dir) {
        Ok(s) => s,
        Err(e) => {
            return choice(
                RecvEngine::ReadWrite,
                Some(format!("cannot probe the destination ({e}); using rw")),
            );
        }
    };
    // Without O_DIRECT: splice if it works here, else rw (and why not splice).
    let buffered = || match probe_splice(scratch.fd.as_fd()) {
        Ok(()) => (RecvEngine::Splice, String::new()),
        Err(e) => (RecvEngine::ReadWrite, format!("; splice fails too ({e})")),
    };
    match requested {
        RecvEngine::Splice => match probe_splice(scratch.fd.as_fd()) {
            Ok(()) => choice(RecvEngine::Splice, None),
            Err(why) => choice(
                RecvEngine::ReadWrite,
                Some(format!(
                    "splice does not work on this {} destination ({why}); using rw",
                    fs.name
                )),
            ),
        },
        RecvEngine::Direct => match probe_direct(&scratch, fs) {
            Ok(()) => choice(RecvEngine::Direct, None),
            Err(why) => {
                let (engine, also) = buffered();
                let note = format!(
                    "direct is unavailable on this {} destination ({why}){also}; using {}",
                    fs.name,
                    engine.name()
                );
                choice(engine, Some(note))
            }
        },
        RecvEngine::Auto if fs.in_memory => {
            let (engine, also) = buffered();
            let note = format!(
                "auto chose {}: the destination is {}, which lives in memory, so O_DIRECT has no disk to reach{also}",
                engine.name(),
                fs.name
            );
            choice(engine, Some(note))
        }
        RecvEngine::Auto => match probe_direct(&scratch, fs) {
            Ok(()) => choice(
                RecvEngine::Direct,
                Some(format!(
                    "auto chose direct: O_DIRECT works on this {} destination",
                    fs.name
                )),
            ),
            Err(why) => {
                let (engine, also) = buffered();
                let note = format!(
                    "auto chose {}: direct is unavailable on this {} destination ({why}){also}",
                    engine.name(),
                    fs.name
                );
                choice(engine, Some(note))
            }
        },
        RecvEngine::ReadWrite | RecvEngine::Null | RecvEngine::Mem => choice(requested, None),
    }
}

/// Whether O_DIRECT and splice each work for files in directory `dir` on filesystem `fs`,
/// tried on one scratch file (created and removed here): each is `Err` with the reason when
/// it does not, or when the probe file cannot be created.
pub fn probe_engines(dir: BorrowedFd<'_>, fs: &FsInfo) -> (Result<(), String>, Result<(), String>) {
    match Scratch::create(dir) {
        Ok(scratch) => (probe_direct(&scratch, fs), probe_splice(scratch.fd.as_fd())),
        Err(e) => (Err(e.clone()), Err(e)),
    }
}

/// A probe file, removed when dropped.
struct Scratch<'a> {
    dir: BorrowedFd<'a>,
    name: String,
    fd: OwnedFd,
}

impl<'a> Scratch<'a> {
    fn create(dir: BorrowedFd<'a>) -> Result<Scratch<'a>, String> {
        let tag: [u8; 8] = crate::sys::random().map_err(|e| format!("getrandom: {e}"))?;
        let name = format!(".zcp-probe-{}", hex::encode(tag));
        let fd = rustix::fs::openat(
            dir,
            name.as_str(),
            rustix::fs::OFlags::RDWR
                | rustix::fs::OFlags::CREATE
                | rustix::fs::OFlags::EXCL
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .map_err(|e| format!("creating a probe file: {}", std::io::Error::from(e)))?;
        Ok(Scratch { dir, name, fd })
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::unlinkat(self.dir, self.name.as_str(), rustix::fs::AtFlags::empty());
    }
}

/// Opens the scratch file with O_DIRECT and writes one aligned block.
fn probe_direct(scratch: &Scratch<'_>, fs: &FsInfo) -> Result<(), String> {
    if let Some((mem, off)) = fs.dio_align {
        if u64::from(mem) > DIRECT_ALIGN || u64::from(off) > DIRECT_ALIGN {
            return Err(format!(
                "it needs {off}-byte offsets and {mem}-byte buffers, above zcp's {DIRECT_ALIGN}"
            ));
        }
    }
    let fd = rustix::fs::openat(
        scratch.dir,
        scratch.name.as_str(),
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::DIRECT | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| format!("open(O_DIRECT): {}", std::io::Error::from(e)))?;
    let block = AlignedBuf::new(DIRECT_ALIGN as usize);
    match rustix::io::pwrite(&fd, &block, 0) {
        Ok(n) if n == block.len() => Ok(()),
        Ok(n) => Err(format!("O_DIRECT probe wrote {n} of {} bytes", block.len())),
        Err(e) => Err(format!("pwrite(O_DIRECT): {}", std::io::Error::from(e))),
    }
}

/// Splices one byte from a pipe into the scratch file.
fn probe_splice(file: BorrowedFd<'_>) -> Result<(), String> {
    let (r, w) = rustix::pipe::pipe().map_err(|e| format!("pipe: {e}"))?;
    rustix::io::write(&w, b"\0").map_err(|e| format!("write(pipe): {e}"))?;
    let mut off = 0u64;
    match rustix::pipe::splice(&r, None, file, Some(&mut off), 1, SpliceFlags::empty()) {
        Ok(1) => Ok(()),
        Ok(n) => Err(format!("splice moved {n} bytes")),
        Err(e) => Err(format!("splice(pipe -> file): {}", std::io::Error::from(e))),
    }
}

/// A pipe sized for splicing: as large as `want`, or as large as the system allows.
#[derive(Debug)]
pub(crate) struct Pipe {
    pub(crate) r: OwnedFd,
    pub(crate) w: OwnedFd,
    pub(crate) cap: usize,
}

impl Pipe {
    pub(crate) fn new(want: usize) -> Result<Pipe, EngineError> {
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
    /// A failure to write `out` is [`Pumped::OutFailed`], with the pipe emptied again, so
    /// the caller can drain the rest of the chunk from the socket and go on.
    fn pump(
        &self,
        sock: BorrowedFd<'_>,
        timeout: Option<Duration>,
        out: BorrowedFd<'_>,
        off: Option<&mut u64>,
        max: u64,
    ) -> Result<Pumped, EngineError> {
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
        match self.drain_to(out, off, n) {
            Ok(()) => Ok(Pumped::Moved(n)),
            Err((e, left)) => {
                let mut scratch = vec![0u8; left.min(1 << 20)];
                let mut left = left;
                while left > 0 {
                    let k = left.min(scratch.len());
                    let m = retry("read(pipe)", "splice pipe", None, || {
                        rustix::io::read(&self.r, &mut scratch[..k])
                    })?;
                    if m == 0 {
                        break;
                    }
                    left -= m;
                }
                Ok(Pumped::OutFailed { moved: n, error: e })
            }
        }
    }

    /// Moves `n` bytes now in the pipe out to `out`; on failure, the error and what is left.
    fn drain_to(
        &self,
        out: BorrowedFd<'_>,
        mut off: Option<&mut u64>,
        n: usize,
    ) -> Result<(), (EngineError, usize)> {
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
            })
            .map_err(|e| (e, left))?;
            if m == 0 {
                let e = EngineError::sys("splice(pipe -> file)", "destination", Errno::IO);
                return Err((e, left));
            }
            left -= m;
        }
        Ok(())
    }
}

/// What one [`Pipe::pump`] did.
enum Pumped {
    /// Bytes moved from the socket to the destination; 0 when the peer closed the socket.
    Moved(usize),
    /// Bytes taken from the socket, whose writing failed (the pipe is empty again).
    OutFailed { moved: usize, error: EngineError },
}

/// Where a chunk goes: the destination file (buffered descriptor) and, for `direct`, its
/// O_DIRECT descriptor. Shared with the engine's helper threads.
#[derive(Debug, Clone)]
pub struct Target {
    /// The file, opened normally.
    pub file: Arc<OwnedFd>,
    /// The file opened with `O_DIRECT`, for `direct`.
    pub direct: Option<Arc<OwnedFd>>,
}

/// Receives the chunks of one data stream, of any files and engines. Holds each engine's
/// pipe, buffers and helper threads, made the first time that engine runs on this stream and
/// kept for every later chunk and file (a tree of a million small files does not start a
/// million threads). [`StreamReceiver::finish`] waits for every write and every sink.
#[derive(Debug)]
pub struct StreamReceiver {
    block: usize,
    pipe: Option<Pipe>,
    devnull: Option<OwnedFd>,
    buf: Vec<u8>,
    readback: Option<readback::Readback>,
    ring: Option<direct::DirectRing>,
    /// The socket's receive timeout, read once (it is the same for every chunk).
    timeout: Option<Option<Duration>>,
    /// Largest `direct` block ([`StreamReceiver::limit_direct`]).
    direct_max: Option<usize>,
}

impl StreamReceiver {
    /// A receiver moving `block` bytes per call (0: each engine's default).
    pub fn new(block: u64) -> StreamReceiver {
        StreamReceiver {
            block: block.min(1 << 30) as usize,
            pipe: None,
            devnull: None,
            buf: Vec::new(),
            readback: None,
            ring: None,
            timeout: None,
            direct_max: None,
        }
    }

    fn block_for(&self, engine: RecvEngine) -> usize {
        let block = if self.block == 0 {
            engine.default_block() as usize
        } else {
            self.block.max(4096)
        };
        match (engine, self.direct_max) {
            (RecvEngine::Direct, Some(max)) => block.min(max),
            _ => block,
        }
    }

    /// Caps the `direct` engine's block at `max` bytes (its ring holds [`DIRECT_DEPTH`] of
    /// them): how a session keeps its rings within a memory budget.
    pub fn limit_direct(mut self, max: u64) -> StreamReceiver {
        self.direct_max = Some((max.max(DIRECT_ALIGN) / DIRECT_ALIGN * DIRECT_ALIGN) as usize);
        self
    }

    /// Moves exactly `len` bytes from `sock` to `target` at `offset` with `engine` (already
    /// resolved by [`choose`]), feeding them to `sink` (if any) where the engine sees them.
    /// `progress` counts bytes taken from the socket. `target` is `None` for `null` and `mem`.
    ///
    /// When this returns an error, `done` and `sink` are dropped uncalled. When it returns
    /// `Ok`, `done` is called exactly once — with `Ok` once the bytes are written (for
    /// `splice`, also read back into the sink), or with the failure — and `sink` is told
    /// [`ChunkSink::seen_all`] before `done(Ok)`, possibly later and from a helper thread.
    /// `null` never sees the bytes: pass no sink.
    #[allow(clippy::too_many_arguments)]
    pub fn receive(
        &mut self,
        engine: RecvEngine,
        target: Option<&Target>,
        sock: BorrowedFd<'_>,
        offset: u64,
        len: u64,
        sink: Option<Sink>,
        progress: &AtomicU64,
        done: Completion,
    ) -> Result<(), EngineError> {
        let timeout = *self.timeout.get_or_insert_with(|| socket_timeout(sock));
        let disconnected = |got: u64| EngineError::Disconnected { got, want: len };
        let block = self.block_for(engine);
        let need = |t: Option<&Target>| {
            t.cloned().ok_or_else(|| EngineError::Unsupported {
                engine: engine.name(),
                reason: "no destination file".into(),
            })
        };
        match engine {
            RecvEngine::Direct => {
                let t = need(target)?;
                let direct = t.direct.ok_or_else(|| EngineError::Unsupported {
                    engine: "direct",
                    reason: "the file has no O_DIRECT descriptor".into(),
                })?;
                if self.ring.is_none() {
                    self.ring = Some(direct::DirectRing::new(block)?);
                }
                self.ring
                    .as_mut()
                    .expect("made above")
                    .receive(direct, sock, offset, len, sink, progress, done)
            }
            RecvEngine::Splice => {
                let t = need(target)?;
                if self.pipe.is_none() {
                    self.pipe = Some(Pipe::new(block)?);
                }
                if self.readback.is_none() {
                    self.readback = Some(readback::Readback::new()?);
                }
                let pipe = self.pipe.as_ref().expect("made above");
                let mut off = offset;
                let mut got = 0;
                while got < len {
                    let n = match pipe.pump(
                        sock,
                        timeout,
                        t.file.as_fd(),
                        Some(&mut off),
                        len - got,
                    )? {
                        Pumped::Moved(n) => n as u64,
                        Pumped::OutFailed { moved, error } => {
                            progress.fetch_add(moved as u64, Ordering::Relaxed);
                            got += moved as u64;
                            return self
                                .discard_rest(sock, timeout, len, got, progress, error, done);
                        }
                    };
                    if n == 0 {
                        return Err(disconnected(got));
                    }
                    got += n;
                    progress.fetch_add(n, Ordering::Relaxed);
                }
                crate::fs::start_writeback(&*t.file, offset, len);
                self.readback
                    .as_mut()
                    .expect("made above")
                    .queue(t.file, offset, len, sink, done)
            }
            RecvEngine::Null => {
                if self.pipe.is_none() {
                    self.pipe = Some(Pipe::new(block)?);
                }
                if self.devnull.is_none() {
                    self.devnull = Some(
                        rustix::fs::open(
                            "/dev/null",
                            rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC,
                            rustix::fs::Mode::empty(),
                        )
                        .map_err(|e| EngineError::sys("open", "/dev/null", e))?,
                    );
                }
                let (pipe, devnull) = (
                    self.pipe.as_ref().expect("made"),
                    self.devnull.as_ref().expect("made"),
                );
                let mut got = 0;
                while got < len {
                    let n = match pipe.pump(sock, timeout, devnull.as_fd(), None, len - got)? {
                        Pumped::Moved(n) => n as u64,
                        Pumped::OutFailed { error, .. } => return Err(error),
                    };
                    if n == 0 {
                        return Err(disconnected(got));
                    }
                    got += n;
                    progress.fetch_add(n, Ordering::Relaxed);
                }
                if let Some(s) = sink {
                    s.seen_all();
                }
                done(Ok(()));
                Ok(())
            }
            RecvEngine::ReadWrite | RecvEngine::Mem => {
                let file = if engine == RecvEngine::ReadWrite {
                    Some(need(target)?.file)
                } else {
                    None
                };
                if self.buf.len() != block {
                    self.buf = vec![0; block];
                }
                let buf = &mut self.buf;
                let mut sink = sink;
                let mut got = 0;
                while got < len {
                    let want = (len - got).min(buf.len() as u64) as usize;
                    let n = retry("read", "socket", timeout, || {
                        rustix::io::read(sock, &mut buf[..want])
                    })?;
                    if n == 0 {
                        return Err(disconnected(got));
                    }
                    progress.fetch_add(n as u64, Ordering::Relaxed);
                    if let Some(s) = sink.as_mut() {
                        s.bytes(&buf[..n]);
                    }
                    if let Some(f) = &file
                        && let Err(error) = pwrite_all(f.as_fd(), &buf[..n], offset + got)
                    {
                        got += n as u64;
                        return self.discard_rest(sock, timeout, len, got, progress, error, done);
                    }
                    got += n as u64;
                }
                if let Some(s) = sink {
                    s.seen_all();
                }
                done(Ok(()));
                Ok(())
            }
            RecvEngine::Auto => Err(EngineError::Unsupported {
                engine: "auto",
                reason: "resolve auto with recv::choose first".into(),
            }),
        }
    }

    /// After a chunk's write failed with `error` (a full disk, an I/O error): reads and drops
    /// the rest of the chunk, so the stream stays usable for the chunks that follow, and
    /// reports the failure to the chunk's completion. The stream fails only if the socket
    /// does.
    #[allow(clippy::too_many_arguments)]
    fn discard_rest(
        &mut self,
        sock: BorrowedFd<'_>,
        timeout: Option<Duration>,
        len: u64,
        mut got: u64,
        progress: &AtomicU64,
        error: EngineError,
        done: Completion,
    ) -> Result<(), EngineError> {
        if self.buf.is_empty() {
            self.buf = vec![0; 64 * 1024];
        }
        while got < len {
            let want = (len - got).min(self.buf.len() as u64) as usize;
            let n = retry("read", "socket", timeout, || {
                rustix::io::read(sock, &mut self.buf[..want])
            })?;
            if n == 0 {
                return Err(EngineError::Disconnected { got, want: len });
            }
            got += n as u64;
            progress.fetch_add(n as u64, Ordering::Relaxed);
        }
        done(Err(WriteFailure::from(&error)));
        Ok(())
    }

    /// Waits until every byte handed to the engines is written and every sink fed. Returns
    /// the CPU use of the engines' helper threads, for the session's accounting.
    pub fn finish(mut self) -> Result<Usage, EngineError> {
        let mut usage = Usage::default();
        if let Some(ring) = self.ring.take() {
            usage.add(&ring.finish()?);
        }
        if let Some(rb) = self.readback.take() {
            usage.add(&rb.finish()?);
        }
        Ok(usage)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::fs_info;

    #[test]
    fn choose_explains_every_decision_and_leaves_nothing_behind() {
        let d = tempfile::tempdir().unwrap();
        let dir = rustix::fs::open(
            d.path(),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let fs = fs_info(&dir).unwrap();

        let c = choose(RecvEngine::Auto, dir.as_fd(), &fs);
        let note = c.note.unwrap();
        assert!(
            note.starts_with(&format!("auto chose {}", c.engine.name())),
            "{note}"
        );

        let mem = FsInfo {
            in_memory: true,
            name: "tmpfs".into(),
            ..fs.clone()
        };
        let c = choose(RecvEngine::Auto, dir.as_fd(), &mem);
        assert_eq!(c.engine, RecvEngine::Splice);
        assert!(c.note.unwrap().contains("lives in memory"));

        // A filesystem whose O_DIRECT alignment zcp's chunks cannot meet.
        let strict = FsInfo {
            dio_align: Some((65536, 65536)),
            ..fs.clone()
        };
        let c = choose(RecvEngine::Direct, dir.as_fd(), &strict);
        assert_eq!(c.engine, RecvEngine::Splice);
        let note = c.note.unwrap();
        assert!(
            note.contains("65536-byte") && note.ends_with("using splice"),
            "{note}"
        );
        let c = choose(RecvEngine::Auto, dir.as_fd(), &strict);
        assert!(
            c.note
                .unwrap()
                .starts_with("auto chose splice: direct is unavailable")
        );

        for e in [RecvEngine::Null, RecvEngine::Mem, RecvEngine::ReadWrite] {
            assert_eq!(
                choose(e, dir.as_fd(), &fs),
                Choice {
                    engine: e,
                    note: None
                }
            );
        }
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            0,
            "probe files removed"
        );
    }

    #[test]
    fn a_failed_write_drops_its_chunk_and_the_stream_goes_on() {
        use std::io::Write;
        use std::sync::mpsc;
        let d = tempfile::tempdir().unwrap();
        for engine in [RecvEngine::ReadWrite, RecvEngine::Splice] {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut tx = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (rx, _) = l.accept().unwrap();
            let a: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
            let b: Vec<u8> = (0..100_000u32).map(|i| (i % 241) as u8).collect();
            let (a2, b2) = (a.clone(), b.clone());
            let writer = std::thread::spawn(move || {
                tx.write_all(&a2).unwrap();
                tx.write_all(&b2).unwrap();
            });
            // A descriptor open read-only: every write to it fails (EBADF).
            let ro = d.path().join("ro");
            std::fs::write(&ro, b"").unwrap();
            let bad = Target {
                file: Arc::new(std::fs::File::open(&ro).unwrap().into()),
                direct: None,
            };
            let okp = d.path().join(format!("ok-{}", engine.name()));
            let good = Target {
                file: Arc::new(std::fs::File::create(&okp).unwrap().into()),
                direct: None,
            };
            let mut r = StreamReceiver::new(64 * 1024);
            let progress = AtomicU64::new(0);
            let (dtx, drx) = mpsc::channel();
            for (t, len) in [(&bad, a.len()), (&good, b.len())] {
                let dtx = dtx.clone();
                r.receive(
                    engine,
                    Some(t),
                    rx.as_fd(),
                    0,
                    len as u64,
                    None,
                    &progress,
                    Box::new(move |res| dtx.send(res.is_ok()).unwrap()),
                )
                .unwrap_or_else(|e| panic!("{}: {e}", engine.name()));
            }
            r.finish().unwrap();
            writer.join().unwrap();
            assert_eq!(
                drx.try_iter().collect::<Vec<_>>(),
                [false, true],
                "{}",
                engine.name()
            );
            assert_eq!(std::fs::read(&okp).unwrap(), b, "{}", engine.name());
            assert_eq!(progress.load(Ordering::Relaxed), 400_000);
        }
    }
}
