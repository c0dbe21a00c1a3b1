//! One data stream's receiving: the engines' per-stream state (pipe, buffers, rings) and the
//! loop each engine runs for a chunk.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rustix::io::Errno;
use rustix::pipe::SpliceFlags;

use super::{
    Completion, DIRECT_ALIGN, DIRECT_DEPTH, RecvEngine, Sink, WriteFailure, direct, holes, readback,
};
use crate::EngineError;
use crate::error::retry;
use crate::sys::{Usage, socket_timeout};

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
    /// Receive-buffer memory this stream may take ([`StreamReceiver::limit_memory`]).
    budget: Option<u64>,
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
            budget: None,
        }
    }

    fn block_for(&self, engine: RecvEngine) -> usize {
        let block = if self.block == 0 {
            engine.default_block() as usize
        } else {
            self.block.max(4096)
        };
        let Some(budget) = self.budget else {
            return block;
        };
        match engine {
            // The ring holds DIRECT_DEPTH blocks, each aligned for O_DIRECT.
            RecvEngine::Direct => {
                let max = budget / DIRECT_DEPTH as u64;
                block.min((max.max(DIRECT_ALIGN) / DIRECT_ALIGN * DIRECT_ALIGN) as usize)
            }
            // One buffer, filled by each read as far as the socket holds; or a pipe, whose
            // pages are kernel memory: fs.pipe-max-size bounds it only for a process without
            // CAP_SYS_RESOURCE (a server run as root may size it to any block a peer asks).
            RecvEngine::ReadWrite | RecvEngine::Mem | RecvEngine::Splice | RecvEngine::Null => {
                block.min(budget.max(4096) as usize)
            }
            RecvEngine::Auto => block,
        }
    }

    /// Holds the engines' receive buffers to `bytes` for this stream: the `direct` ring's
    /// [`DIRECT_DEPTH`] blocks together, or the one buffer of `rw` and `mem`. How a session
    /// keeps its streams within a memory budget, whatever block size the peer asks for.
    pub fn limit_memory(mut self, bytes: u64) -> StreamReceiver {
        self.budget = Some(bytes);
        self
    }

    /// Moves exactly `len` bytes from `sock` to `target` at `offset` with `engine` (already
    /// resolved by [`choose`](super::choose)), feeding them to `sink` (if any) where the engine sees them.
    /// `progress` counts bytes taken from the socket. `target` is `None` for `null` and `mem`.
    ///
    /// When this returns an error, `done` and `sink` are dropped uncalled. When it returns
    /// `Ok`, `done` is called exactly once — with `Ok` once the bytes are written (for
    /// `splice`, also read back into the sink), or with the failure — and `sink` is told
    /// [`ChunkSink::seen_all`](super::ChunkSink::seen_all) before `done(Ok)`, possibly later and from a helper thread.
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
        let whole = [(offset, len)];
        let extents: &[(u64, u64)] = if len == 0 { &[] } else { &whole };
        self.receive_sparse(
            engine,
            target,
            sock,
            (offset, len),
            extents,
            sink,
            progress,
            done,
        )
    }

    /// As [`StreamReceiver::receive`], for the chunk `offset..offset+len` of which only the
    /// data `extents` (absolute `(offset, len)`: ascending, apart, aligned as
    /// [`crate::sparse::EXTENT_ALIGN`] says) come from the socket, in order. The rest of the
    /// chunk is hole: made a hole in the target's file before any data lands (so nothing an
    /// earlier attempt wrote there survives), and fed to `sink` as zeros, so the sink sees the
    /// chunk's every byte. Extents that do not fit the chunk are an error, before anything is
    /// read. A hole that cannot be made fails the chunk like a failed write.
    #[allow(clippy::too_many_arguments)]
    pub fn receive_sparse(
        &mut self,
        engine: RecvEngine,
        target: Option<&Target>,
        sock: BorrowedFd<'_>,
        (offset, len): (u64, u64),
        extents: &[(u64, u64)],
        sink: Option<Sink>,
        progress: &AtomicU64,
        done: Completion,
    ) -> Result<(), EngineError> {
        let chunk = Chunk {
            engine,
            target,
            src: Src::Fd(sock, None),
            at: (offset, len),
            extents,
            eof_ends: false,
        };
        self.run(chunk, sink, progress, done).map(|_| ())
    }

    /// As [`StreamReceiver::receive_sparse`], for bytes that come from `src` (a decrypting
    /// reader: they are in user memory already) instead of a socket. `splice` and `null`
    /// need a socket to move bytes from: they run as `rw` and `mem`.
    #[allow(clippy::too_many_arguments)]
    pub fn receive_from(
        &mut self,
        engine: RecvEngine,
        target: Option<&Target>,
        src: &mut (dyn ByteSource + 'static),
        (offset, len): (u64, u64),
        extents: &[(u64, u64)],
        sink: Option<Sink>,
        progress: &AtomicU64,
        done: Completion,
    ) -> Result<(), EngineError> {
        let engine = match engine {
            RecvEngine::Splice => RecvEngine::ReadWrite,
            RecvEngine::Null => RecvEngine::Mem,
            e => e,
        };
        let chunk = Chunk {
            engine,
            target,
            src: Src::Bytes(src),
            at: (offset, len),
            extents,
            eof_ends: false,
        };
        self.run(chunk, sink, progress, done).map(|_| ())
    }

    /// For a bare byte stream, whose length is known only at its end: as
    /// [`StreamReceiver::receive`], except that the peer closing the connection ends the
    /// piece `offset..offset+len` early instead of failing it. Returns the bytes taken: `len`
    /// when the piece filled (the stream may go on), fewer when the stream ended; `done` and
    /// `sink` then see exactly those bytes (the file holds nothing past them, except that
    /// `direct` pads its last block with zeros: cut the file to the bytes taken). A failed
    /// write fails the call at once (nothing is drained). `offset` must suit the engine, as
    /// for `receive` (a multiple of [`DIRECT_ALIGN`] for `direct`).
    #[allow(clippy::too_many_arguments)]
    pub fn receive_until_eof(
        &mut self,
        engine: RecvEngine,
        target: Option<&Target>,
        sock: BorrowedFd<'_>,
        (offset, len): (u64, u64),
        sink: Option<Sink>,
        progress: &AtomicU64,
        done: Completion,
    ) -> Result<u64, EngineError> {
        let whole = [(offset, len)];
        let chunk = Chunk {
            engine,
            target,
            src: Src::Fd(sock, None),
            at: (offset, len),
            extents: if len == 0 { &[] } else { &whole },
            eof_ends: true,
        };
        self.run(chunk, sink, progress, done)
    }

    /// One chunk through its engine; the bytes taken from the socket.
    fn run(
        &mut self,
        c: Chunk<'_>,
        sink: Option<Sink>,
        progress: &AtomicU64,
        done: Completion,
    ) -> Result<u64, EngineError> {
        let Chunk {
            engine,
            target,
            src,
            at: (offset, len),
            extents,
            eof_ends,
        } = c;
        holes::check(offset, len, extents)?;
        let dense = extents == [(offset, len)];
        let sink = match sink {
            Some(s) if !dense => Some(holes::ZeroFill::wrap(s, offset, len, extents)),
            s => s,
        };
        let src = match src {
            Src::Fd(fd, _) => Src::Fd(fd, *self.timeout.get_or_insert_with(|| socket_timeout(fd))),
            bytes => bytes,
        };
        let block = self.block_for(engine);
        let job = Job {
            src,
            offset,
            len,
            extents,
            sink,
            progress,
            done,
            eof_ends,
        };
        if !dense
            && engine.stores()
            && let Some(t) = target
            && let Err(e) = holes::punch(t, offset, len, extents)
        {
            return self.discard_rest(job, 0, e);
        }
        let need = |t: Option<&Target>| {
            t.cloned().ok_or_else(|| EngineError::Unsupported {
                engine: engine.name(),
                reason: "no destination file".into(),
            })
        };
        match engine {
            RecvEngine::Direct => self.direct(need(target)?, block, job),
            RecvEngine::Splice => self.splice(need(target)?, block, job),
            RecvEngine::Null => self.null(block, job),
            RecvEngine::ReadWrite => self.copy(Some(need(target)?.file), block, job),
            RecvEngine::Mem => self.copy(None, block, job),
            RecvEngine::Auto => Err(EngineError::Unsupported {
                engine: "auto",
                reason: "resolve auto with recv::choose first".into(),
            }),
        }
    }

    fn direct(&mut self, t: Target, block: usize, job: Job<'_>) -> Result<u64, EngineError> {
        let direct = t.direct.ok_or_else(|| EngineError::Unsupported {
            engine: "direct",
            reason: "the file has no O_DIRECT descriptor".into(),
        })?;
        let ring = match &mut self.ring {
            Some(ring) => ring,
            ring => ring.insert(direct::DirectRing::new(block)?),
        };
        let Job {
            src,
            extents,
            sink,
            progress,
            done,
            eof_ends,
            ..
        } = job;
        ring.receive(direct, src, extents, sink, progress, done, eof_ends)
    }

    fn splice(&mut self, t: Target, block: usize, job: Job<'_>) -> Result<u64, EngineError> {
        if self.pipe.is_none() {
            self.pipe = Some(Pipe::new(block)?);
        }
        if self.readback.is_none() {
            self.readback = Some(readback::Readback::new()?);
        }
        let pipe = self.pipe.as_ref().expect("made above");
        let extents = job.extents;
        let mut got = 0;
        'extents: for &(start, n) in extents {
            let mut off = start;
            let mut done = 0;
            while done < n {
                let (sock, timeout) = job.src.fd()?;
                let pumped = pipe.pump(sock, timeout, t.file.as_fd(), Some(&mut off), n - done)?;
                let k = match pumped {
                    Pumped::Moved(0) if job.eof_ends => break 'extents,
                    Pumped::Moved(0) => return Err(job.disconnected(got)),
                    Pumped::Moved(k) => k as u64,
                    Pumped::OutFailed { moved, error } => {
                        job.progress.fetch_add(moved as u64, Ordering::Relaxed);
                        return self.discard_rest(job, got + moved as u64, error);
                    }
                };
                done += k;
                got += k;
                job.progress.fetch_add(k, Ordering::Relaxed);
            }
        }
        if got == 0 && job.eof_ends {
            job.complete();
            return Ok(0);
        }
        // Short only when the stream ended (eof_ends): then the chunk is what arrived.
        let len = if got < job.wire() { got } else { job.len };
        crate::fs::start_writeback(&*t.file, job.offset, len);
        let ranges = (extents != [(job.offset, len)] && len == job.len).then(|| extents.to_vec());
        self.readback.as_mut().expect("made above").queue(
            t.file,
            (job.offset, len),
            ranges,
            job.sink,
            job.done,
        )?;
        Ok(got)
    }

    fn null(&mut self, block: usize, job: Job<'_>) -> Result<u64, EngineError> {
        if self.pipe.is_none() {
            self.pipe = Some(Pipe::new(block)?);
        }
        if self.devnull.is_none() {
            let flags = rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::CLOEXEC;
            self.devnull = Some(
                rustix::fs::open("/dev/null", flags, rustix::fs::Mode::empty())
                    .map_err(|e| EngineError::sys("open", "/dev/null", e))?,
            );
        }
        let (pipe, devnull) = (
            self.pipe.as_ref().expect("made"),
            self.devnull.as_ref().expect("made"),
        );
        let (mut got, wire) = (0, job.wire());
        while got < wire {
            let (sock, timeout) = job.src.fd()?;
            let n = match pipe.pump(sock, timeout, devnull.as_fd(), None, wire - got)? {
                Pumped::Moved(0) if job.eof_ends => break,
                Pumped::Moved(0) => return Err(job.disconnected(got)),
                Pumped::Moved(n) => n as u64,
                Pumped::OutFailed { error, .. } => return Err(error),
            };
            got += n;
            job.progress.fetch_add(n, Ordering::Relaxed);
        }
        job.complete();
        Ok(got)
    }

    /// `rw` (into `file`) and `mem` (no file): read into a buffer, feed the sink, write.
    fn copy(
        &mut self,
        file: Option<Arc<OwnedFd>>,
        block: usize,
        mut job: Job<'_>,
    ) -> Result<u64, EngineError> {
        if self.buf.len() != block {
            self.buf = vec![0; block];
        }
        let extents = job.extents;
        let mut got = 0;
        'extents: for &(start, len) in extents {
            let mut done = 0;
            while done < len {
                let want = (len - done).min(self.buf.len() as u64) as usize;
                let buf = &mut self.buf[..want];
                let n = job.src.read(buf, false)?;
                if n == 0 && job.eof_ends {
                    break 'extents;
                }
                if n == 0 {
                    return Err(job.disconnected(got));
                }
                job.progress.fetch_add(n as u64, Ordering::Relaxed);
                if let Some(s) = job.sink.as_mut() {
                    s.bytes(&self.buf[..n]);
                }
                if let Some(f) = &file
                    && let Err(error) = pwrite_all(f.as_fd(), &self.buf[..n], start + done)
                {
                    return self.discard_rest(job, got + n as u64, error);
                }
                done += n as u64;
                got += n as u64;
            }
        }
        job.complete();
        Ok(got)
    }

    /// After a chunk's write failed with `error` (a full disk, an I/O error, a hole that could
    /// not be made), `got` bytes of its data in: reads and drops the rest of the chunk's data,
    /// so the stream stays usable for the chunks that follow, and reports the failure to the
    /// chunk's completion. The stream fails only if the socket does.
    fn discard_rest(
        &mut self,
        mut job: Job<'_>,
        mut got: u64,
        error: EngineError,
    ) -> Result<u64, EngineError> {
        if job.eof_ends {
            // A bare stream has no next chunk to keep the connection for.
            return Err(error);
        }
        if self.buf.is_empty() {
            self.buf = vec![0; 64 * 1024];
        }
        let wire = job.wire();
        while got < wire {
            let want = (wire - got).min(self.buf.len() as u64) as usize;
            let buf = &mut self.buf[..want];
            let n = job.src.read(buf, false)?;
            if n == 0 {
                return Err(job.disconnected(got));
            }
            got += n as u64;
            job.progress.fetch_add(n as u64, Ordering::Relaxed);
        }
        (job.done)(Err(WriteFailure::from(&error)));
        Ok(wire)
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

/// Hands out a stream's bytes from user memory (a decrypting reader), for
/// [`StreamReceiver::receive_from`].
pub trait ByteSource: Send {
    /// Reads up to `buf.len()` bytes into `buf`; 0 when the stream ended.
    fn read(&mut self, buf: &mut [u8]) -> Result<usize, EngineError>;
}

/// Where a chunk's bytes come from.
pub(super) enum Src<'a> {
    /// A socket, and its receive timeout.
    Fd(BorrowedFd<'a>, Option<Duration>),
    /// A source in user memory.
    Bytes(&'a mut (dyn ByteSource + 'static)),
}

impl Src<'_> {
    /// Reads up to `buf.len()` bytes (from a socket with `all`, waiting for all of them
    /// unless the stream ends or the timeout passes); 0 when the stream ended.
    pub(super) fn read(&mut self, buf: &mut [u8], all: bool) -> Result<usize, EngineError> {
        match self {
            Src::Fd(fd, timeout) if all => retry("recv", "socket", *timeout, || {
                rustix::net::recv(*fd, &mut *buf, rustix::net::RecvFlags::WAITALL)
            })
            .map(|r| r.0),
            Src::Fd(fd, timeout) => retry("read", "socket", *timeout, || {
                rustix::io::read(*fd, &mut *buf)
            }),
            Src::Bytes(b) => b.read(buf),
        }
    }

    /// The socket, for engines that move bytes without seeing them.
    fn fd(&self) -> Result<(BorrowedFd<'_>, Option<Duration>), EngineError> {
        match self {
            Src::Fd(fd, timeout) => Ok((*fd, *timeout)),
            Src::Bytes(_) => Err(EngineError::Unsupported {
                engine: "splice",
                reason: "the bytes are in user memory, not in a socket".into(),
            }),
        }
    }
}

/// One chunk on its way through an engine.
struct Job<'a> {
    src: Src<'a>,
    /// The chunk.
    offset: u64,
    len: u64,
    /// Its data, as it comes from the socket (the whole chunk unless it has holes).
    extents: &'a [(u64, u64)],
    sink: Option<Sink>,
    progress: &'a AtomicU64,
    done: Completion,
    /// The peer closing the connection ends the chunk rather than failing it (a bare stream).
    eof_ends: bool,
}

/// What [`StreamReceiver::run`] is asked to receive.
struct Chunk<'a> {
    engine: RecvEngine,
    target: Option<&'a Target>,
    src: Src<'a>,
    /// The chunk: `(offset, len)`.
    at: (u64, u64),
    /// Its data extents, as they come from the socket.
    extents: &'a [(u64, u64)],
    eof_ends: bool,
}

impl Job<'_> {
    /// Bytes the chunk takes on the socket.
    fn wire(&self) -> u64 {
        self.extents.iter().map(|e| e.1).sum()
    }

    fn disconnected(&self, got: u64) -> EngineError {
        EngineError::Disconnected {
            got,
            want: self.wire(),
        }
    }

    /// Every byte arrived and was handled in line: the sink has seen all, the chunk is done.
    fn complete(self) {
        if let Some(s) = self.sink {
            s.seen_all();
        }
        (self.done)(Ok(()));
    }
}
