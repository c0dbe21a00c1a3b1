//! Sender engines: moving a byte range of a file into a connected TCP socket.
//!
//! * `sendfile` — `sendfile(2)` hands page-cache pages to the socket; no copy in user space.
//! * `rw` — `pread(2)` into a buffer, `send(2)` from it: two copies, the conventional path.
//! * `mmap` — `send(2)` straight from a read-only mapping: one copy (into the socket).
//! * `splice` — file -> pipe -> socket with two `splice(2)` calls: what `sendfile` does
//!   inside the kernel, spelled out (document 001), with the pipe in user hands.
//!
//! Every loop handles short transfers, EINTR and the kernel's per-call cap
//! ([`MAX_PER_CALL`]), keeps offsets in `u64`, and stops with [`EngineError::SourceShort`]
//! when the file ends before the range does.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use rustix::io::Errno;
use rustix::net::SendFlags;
use rustix::pipe::SpliceFlags;

use crate::EngineError;
use crate::error::retry;
use crate::pace::Pacer;
use crate::recv::Pipe;
use crate::sys::socket_timeout;

/// Linux moves at most this many bytes per `sendfile`/`splice`/`read`/`write` call
/// (`MAX_RW_COUNT`, 2 GiB minus a page).
pub const MAX_PER_CALL: u64 = 0x7fff_f000;

/// How the sender moves file bytes into the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SendEngine {
    /// `sendfile(2)` from the page cache.
    Sendfile,
    /// `pread(2)` + `send(2)` through a user buffer.
    ReadWrite,
    /// `send(2)` from a read-only mapping of the file.
    Mmap,
    /// `splice(2)` file -> pipe, then pipe -> socket.
    Splice,
}

impl SendEngine {
    /// Every sender engine.
    pub const ALL: [SendEngine; 4] = [
        SendEngine::Sendfile,
        SendEngine::ReadWrite,
        SendEngine::Mmap,
        SendEngine::Splice,
    ];

    /// The engine's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            SendEngine::Sendfile => "sendfile",
            SendEngine::ReadWrite => "rw",
            SendEngine::Mmap => "mmap",
            SendEngine::Splice => "splice",
        }
    }

    /// Parses a command-line name.
    pub fn parse(s: &str) -> Option<SendEngine> {
        Self::ALL.into_iter().find(|e| e.name() == s)
    }

    /// Bytes per call when the user sets no block size.
    pub fn default_block(self) -> u64 {
        match self {
            SendEngine::Sendfile | SendEngine::Mmap => 8 << 20,
            // One pipe's worth per call (pipes of 1 MiB need no privilege).
            SendEngine::ReadWrite | SendEngine::Splice => 1 << 20,
        }
    }

    /// Checks that this engine can read `file` (of `size` bytes); returns the engine to use
    /// and, when it is not this one, why.
    pub fn probe(self, file: BorrowedFd<'_>, size: u64) -> (SendEngine, Option<String>) {
        if size == 0 {
            return (self, None);
        }
        let failed = match self {
            SendEngine::ReadWrite => return (self, None),
            SendEngine::Sendfile => probe_sendfile(file).err(),
            SendEngine::Splice => probe_splice_file(file).err(),
            SendEngine::Mmap => crate::map::visit_mapped(file, 0, 1, |_| {})
                .err()
                .map(|e| e.to_string()),
        };
        match failed {
            None => (self, None),
            Some(why) => (
                SendEngine::ReadWrite,
                Some(format!(
                    "{} does not work on this source ({why}); using rw",
                    self.name()
                )),
            ),
        }
    }
}

/// `sendfile` of one byte into a pipe: the call works for this file if that does.
fn probe_sendfile(file: BorrowedFd<'_>) -> Result<(), String> {
    let (r, w) = rustix::pipe::pipe().map_err(|e| format!("pipe: {e}"))?;
    let mut off = 0u64;
    let res = rustix::fs::sendfile(&w, file, Some(&mut off), 1);
    drop(r);
    match res {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("sendfile: {}", std::io::Error::from(e))),
    }
}

/// `splice` of one byte from the file into a pipe.
fn probe_splice_file(file: BorrowedFd<'_>) -> Result<(), String> {
    let (r, w) = rustix::pipe::pipe().map_err(|e| format!("pipe: {e}"))?;
    let mut off = 0u64;
    let res = rustix::pipe::splice(file, Some(&mut off), &w, None, 1, SpliceFlags::empty());
    drop(r);
    match res {
        Ok(_) => Ok(()),
        Err(e) => Err(format!("splice(file -> pipe): {}", std::io::Error::from(e))),
    }
}

/// Moves file ranges into a socket with one engine; holds the engine's buffer, if any.
#[derive(Debug)]
pub struct FileSender {
    engine: SendEngine,
    block: u64,
    buf: Vec<u8>,
    /// For `splice`, made on first use.
    pipe: Option<Pipe>,
    /// For [`FileSender::send_staged`]; grows to the largest chunk staged.
    staged: Vec<u8>,
    /// The session's rate cap, drawn from before every call.
    pacer: Option<Arc<Pacer>>,
}

impl FileSender {
    /// A sender using `engine` with `block` bytes per call (0: the engine's default).
    pub fn new(engine: SendEngine, block: u64) -> FileSender {
        let block = if block == 0 {
            engine.default_block()
        } else {
            block.min(MAX_PER_CALL)
        };
        let buf = match engine {
            SendEngine::ReadWrite => vec![0u8; block as usize],
            _ => Vec::new(),
        };
        FileSender {
            engine,
            block,
            buf,
            pipe: None,
            staged: Vec::new(),
            pacer: None,
        }
    }

    /// Draws every byte it sends from `pacer` (the session's rate cap), in calls no larger
    /// than the pacer's quantum, so the cap holds over short spans too.
    pub fn paced(mut self, pacer: Option<Arc<Pacer>>) -> FileSender {
        if let Some(p) = &pacer {
            self.block = self.block.min(p.quantum()).max(1);
        }
        self.pacer = pacer;
        self
    }

    /// Waits until `n` bytes may go (at once when not paced).
    fn pace(&self, n: u64) {
        if let Some(p) = &self.pacer {
            p.take(n);
        }
    }

    /// Gives back bytes drawn for a call that moved fewer.
    fn unpace(&self, n: u64) {
        if let (Some(p), true) = (&self.pacer, n > 0) {
            p.give_back(n);
        }
    }

    /// `send(2)` of all of `bytes`, paced, in calls of at most a block.
    fn send_buf(
        &self,
        sock: BorrowedFd<'_>,
        bytes: &[u8],
        progress: &AtomicU64,
    ) -> Result<(), EngineError> {
        for piece in bytes.chunks(self.block as usize) {
            self.pace(piece.len() as u64);
            send_all(sock, piece, false, progress)?;
        }
        Ok(())
    }

    /// The engine.
    pub fn engine(&self) -> SendEngine {
        self.engine
    }

    /// Sends exactly bytes `offset..offset+len` of `file` into `sock`, adding each call's
    /// bytes to `progress` as they go.
    pub fn send(
        &mut self,
        file: BorrowedFd<'_>,
        sock: BorrowedFd<'_>,
        offset: u64,
        len: u64,
        progress: &AtomicU64,
    ) -> Result<(), EngineError> {
        let end = offset.checked_add(len).ok_or(EngineError::SourceShort {
            at: offset,
            expected: u64::MAX,
        })?;
        let out = Out { sock, progress };
        match self.engine {
            SendEngine::Sendfile => self.sendfile(file, &out, offset, end),
            SendEngine::ReadWrite => self.read_write(file, &out, offset, end),
            SendEngine::Splice => self.splice(file, &out, offset, end),
            SendEngine::Mmap => self.mmap(file, &out, offset, end),
        }
        .map_err(|e| timed_out(e, sock))
    }

    fn sendfile(
        &mut self,
        file: BorrowedFd<'_>,
        out: &Out<'_>,
        mut pos: u64,
        end: u64,
    ) -> Result<(), EngineError> {
        while pos < end {
            let want = (end - pos).min(self.block) as usize;
            let mut off = pos;
            self.pace(want as u64);
            let n = retry("sendfile", "socket", None, || {
                rustix::fs::sendfile(out.sock, file, Some(&mut off), want)
            })?;
            self.unpace((want - n) as u64);
            if n == 0 {
                return Err(short(pos, end));
            }
            pos += n as u64;
            out.progress.fetch_add(n as u64, Ordering::Relaxed);
        }
        Ok(())
    }

    fn read_write(
        &mut self,
        file: BorrowedFd<'_>,
        out: &Out<'_>,
        mut pos: u64,
        end: u64,
    ) -> Result<(), EngineError> {
        while pos < end {
            let want = (end - pos).min(self.block) as usize;
            let buf = &mut self.buf[..want];
            let n = retry("pread", "source file", None, || {
                rustix::io::pread(file, &mut *buf, pos)
            })?;
            if n == 0 {
                return Err(short(pos, end));
            }
            self.pace(n as u64);
            send_all(out.sock, &self.buf[..n], false, out.progress)?;
            pos += n as u64;
        }
        Ok(())
    }

    fn splice(
        &mut self,
        file: BorrowedFd<'_>,
        out: &Out<'_>,
        mut pos: u64,
        end: u64,
    ) -> Result<(), EngineError> {
        let pipe = match &mut self.pipe {
            Some(pipe) => pipe,
            pipe => pipe.insert(Pipe::new(self.block as usize)?),
        };
        while pos < end {
            let want = (end - pos).min(pipe.cap as u64).min(self.block) as usize;
            let mut off = pos;
            if let Some(p) = &self.pacer {
                p.take(want as u64);
            }
            let n = retry("splice(file -> pipe)", "source file", None, || {
                rustix::pipe::splice(file, Some(&mut off), &pipe.w, None, want, SpliceFlags::MOVE)
            })?;
            if let (Some(p), true) = (&self.pacer, n < want) {
                p.give_back((want - n) as u64);
            }
            if n == 0 {
                return Err(short(pos, end));
            }
            let more = if pos + (n as u64) < end {
                SpliceFlags::MOVE | SpliceFlags::MORE
            } else {
                SpliceFlags::MOVE
            };
            let mut left = n;
            while left > 0 {
                let m = retry("splice(pipe -> socket)", "socket", None, || {
                    rustix::pipe::splice(&pipe.r, None, out.sock, None, left, more)
                })?;
                if m == 0 {
                    let e = Errno::PIPE;
                    return Err(EngineError::sys("splice(pipe -> socket)", "socket", e));
                }
                left -= m;
                out.progress.fetch_add(m as u64, Ordering::Relaxed);
            }
            pos += n as u64;
        }
        Ok(())
    }

    fn mmap(
        &mut self,
        file: BorrowedFd<'_>,
        out: &Out<'_>,
        offset: u64,
        end: u64,
    ) -> Result<(), EngineError> {
        let mut pos = offset;
        let mut result = Ok(());
        // The kernel reads the mapping inside send(2); a truncated source makes send fail
        // with EFAULT rather than raise SIGBUS, and the guard covers the rest.
        crate::map::visit_mapped(file, offset, end - offset, |bytes| {
            if result.is_err() {
                return;
            }
            for piece in bytes.chunks(self.block as usize) {
                self.pace(piece.len() as u64);
                if let Err(e) = send_all(out.sock, piece, false, out.progress) {
                    result = Err(e);
                    return;
                }
                pos += piece.len() as u64;
            }
        })
        .map_err(|e| match e {
            EngineError::SourceChanged(_) => short(pos, end),
            other => other,
        })?;
        result.map_err(|e| match e {
            EngineError::Sys { source, .. } if source.raw_os_error() == Some(libc::EFAULT) => {
                short(pos, end)
            }
            other => other,
        })
    }
}

/// Where a sender engine writes, and what it counts.
struct Out<'a> {
    sock: BorrowedFd<'a>,
    progress: &'a AtomicU64,
}

/// A socket's timeout error, with the socket's configured timeout: read only once one
/// expired (reading it for every send cost two system calls per small file).
fn timed_out(e: EngineError, sock: BorrowedFd<'_>) -> EngineError {
    match e {
        EngineError::Timeout { what: "socket", .. } => EngineError::Timeout {
            what: "socket",
            secs: socket_timeout(sock).map_or(0.0, |t| t.as_secs_f64()),
        },
        other => other,
    }
}

/// The source ended at `at`, before `end`.
fn short(at: u64, end: u64) -> EngineError {
    EngineError::SourceShort { at, expected: end }
}

/// Chunks up to this size are read once into a buffer (see [`FileSender::send_staged`]).
pub const STAGED_MAX: u64 = 1 << 20;

impl FileSender {
    /// Reads bytes `offset..offset+len` of `file` into a buffer of its own — for a small chunk whose bytes
    /// the caller needs anyway (to hash them) — and sends the `data` ranges of them (absolute
    /// `(offset, len)`, ascending, inside the chunk: the whole chunk, or its data extents when
    /// it has holes) into `sock`: `sendfile` still
    /// moves them from the page cache, `rw` and `mmap` send the buffer rather than read or
    /// map the range a second time. Fails with [`EngineError::SourceShort`] before sending
    /// anything when the file ends early, so the caller can skip the chunk. `inspect` sees
    /// the whole chunk between the read and the send (and may send what must precede it, or
    /// stop the send with an error). `len` must not exceed [`STAGED_MAX`].
    pub fn send_staged(
        &mut self,
        file: BorrowedFd<'_>,
        sock: BorrowedFd<'_>,
        (offset, len): (u64, u64),
        data: &[(u64, u64)],
        inspect: impl FnOnce(&[u8]) -> Result<(), EngineError>,
        progress: &AtomicU64,
    ) -> Result<(), EngineError> {
        assert!(
            len <= STAGED_MAX,
            "a staged chunk is at most {STAGED_MAX} bytes"
        );
        let n = len as usize;
        let mut buf = std::mem::take(&mut self.staged);
        buf.resize(n, 0);
        let mut got = 0;
        while got < n {
            let r = match retry("pread", "source file", None, || {
                rustix::io::pread(file, &mut buf[got..], offset + got as u64)
            }) {
                Ok(r) => r,
                Err(e) => {
                    self.staged = buf;
                    return Err(e);
                }
            };
            if r == 0 {
                self.staged = buf;
                return Err(EngineError::SourceShort {
                    at: offset + got as u64,
                    expected: offset + len,
                });
            }
            got += r;
        }
        if let Err(e) = inspect(&buf) {
            self.staged = buf;
            return Err(e);
        }
        let r = data.iter().try_for_each(|&(at, k)| {
            let inside = at
                .checked_sub(offset)
                .filter(|rel| rel.checked_add(k).is_some_and(|e| e <= len));
            let Some(rel) = inside else {
                return Err(EngineError::Path(format!(
                    "range {at}+{k} is outside the staged chunk {offset}+{len}"
                )));
            };
            match self.engine {
                SendEngine::Sendfile | SendEngine::Splice => self.send(file, sock, at, k, progress),
                SendEngine::ReadWrite | SendEngine::Mmap => {
                    let rel = rel as usize;
                    self.send_buf(sock, &buf[rel..rel + k as usize], progress)
                }
            }
        });
        self.staged = buf;
        r
    }
}

/// `send(2)` all of `bytes`; `more` sets `MSG_MORE` so a small header goes out together with
/// the payload that follows it. Never raises SIGPIPE.
pub fn send_all(
    sock: BorrowedFd<'_>,
    bytes: &[u8],
    more: bool,
    progress: &AtomicU64,
) -> Result<(), EngineError> {
    let flags = if more {
        SendFlags::NOSIGNAL | SendFlags::MORE
    } else {
        SendFlags::NOSIGNAL
    };
    let mut done = 0;
    while done < bytes.len() {
        let n = retry("send", "socket", None, || {
            rustix::net::send(sock, &bytes[done..], flags)
        })
        .map_err(|e| timed_out(e, sock))?;
        done += n;
        progress.fetch_add(n as u64, Ordering::Relaxed);
    }
    Ok(())
}

/// Shuts down the sending half of a socket, so the peer reads end-of-stream once it has
/// everything.
pub fn shutdown_write(sock: impl AsFd) {
    let _ = rustix::net::shutdown(&sock, rustix::net::Shutdown::Write);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    /// A connected pair of TCP sockets on loopback (sendfile needs a real socket).
    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn every_engine_draws_every_byte_from_its_pacer() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i * 13 % 251) as u8).collect();
        f.write_all(&data).unwrap();
        for engine in SendEngine::ALL {
            // 40 MB/s, so 2 MB (less the 400 KB burst) takes 40 ms at least; unpaced, loopback
            // moves it in about a millisecond.
            let pacer = Arc::new(Pacer::new(40_000_000));
            let (a, mut b) = pair();
            let reader = std::thread::spawn(move || {
                let mut got = Vec::new();
                b.read_to_end(&mut got).unwrap();
                got
            });
            let mut s = FileSender::new(engine, 0).paced(Some(pacer.clone()));
            assert_eq!(s.block, pacer.quantum(), "{}", engine.name());
            let progress = AtomicU64::new(0);
            let t0 = std::time::Instant::now();
            s.send(f.as_fd(), a.as_fd(), 1000, 1_000_000, &progress)
                .unwrap();
            // A staged chunk too, sent from its buffer by rw and mmap.
            s.send_staged(
                f.as_fd(),
                a.as_fd(),
                (1_001_000, 1_000_000),
                &[(1_001_000, 1_000_000)],
                |_| Ok(()),
                &progress,
            )
            .unwrap();
            let took = t0.elapsed();
            drop(a);
            assert_eq!(
                reader.join().unwrap(),
                &data[1000..2_001_000],
                "{}",
                engine.name()
            );
            assert!(
                took >= std::time::Duration::from_millis(39),
                "{}: 2 MB in {took:?}",
                engine.name()
            );
        }
    }

    #[test]
    fn staged_sends_what_it_showed_for_every_engine_and_stops_before_sending_a_short_range() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        f.write_all(&data).unwrap();
        for engine in SendEngine::ALL {
            let (a, mut b) = pair();
            let mut s = FileSender::new(engine, 0);
            let progress = AtomicU64::new(0);
            let mut seen = Vec::new();
            s.send_staged(
                f.as_fd(),
                a.as_fd(),
                (1000, 200_000),
                &[(1000, 200_000)],
                |b| {
                    seen = b.to_vec();
                    Ok(())
                },
                &progress,
            )
            .unwrap();
            assert_eq!(seen, &data[1000..201_000], "{}", engine.name());
            assert_eq!(progress.load(Ordering::Relaxed), 200_000);
            // Past the end: refused before a byte goes out.
            let e = s
                .send_staged(
                    f.as_fd(),
                    a.as_fd(),
                    (250_000, 100_000),
                    &[(250_000, 100_000)],
                    |_| panic!("shown"),
                    &progress,
                )
                .unwrap_err();
            assert!(
                matches!(e, EngineError::SourceShort { at: 300_000, .. }),
                "{e}"
            );
            // A chunk with holes: the whole chunk is shown, only its data ranges are sent.
            let mut shown = 0;
            s.send_staged(
                f.as_fd(),
                a.as_fd(),
                (0, 65536),
                &[(4096, 100), (60_000, 5536)],
                |b| {
                    shown = b.len();
                    Ok(())
                },
                &progress,
            )
            .unwrap();
            assert_eq!(shown, 65536);
            assert!(
                s.send_staged(
                    f.as_fd(),
                    a.as_fd(),
                    (0, 4096),
                    &[(4000, 200)],
                    |_| Ok(()),
                    &progress
                )
                .is_err(),
                "a range outside the chunk"
            );
            drop(a);
            let mut got = Vec::new();
            b.read_to_end(&mut got).unwrap();
            let mut want = data[1000..201_000].to_vec();
            want.extend_from_slice(&data[4096..4196]);
            want.extend_from_slice(&data[60_000..65536]);
            assert_eq!(got, want, "{}", engine.name());
        }
    }
}
