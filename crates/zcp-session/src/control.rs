//! The control connection once a session runs: one writer shared by every thread that has
//! something to say (sealing needs the frames in sequence, so sends take a lock), and one
//! reader thread that turns frames into events for the role's loop.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::Duration;
use zcp_engine::sync::{Locked, Wakeup};

use zcp_engine::Usage;
use zcp_engine::sys::thread_usage;
use zcp_wire::Message;

use crate::conn::{ControlRx, ControlTx};
use crate::error::{FrameIoError, SessionError};

/// The sending half of the control connection, shared.
///
/// Frames are sealed in the order they are sent. A thread that is about to send several
/// messages in a row takes a [`Cork`]: until the last cork is dropped, frames collect in a
/// buffer (up to [`CORK_LIMIT`] bytes) and then leave in one write, so a burst of small
/// messages costs one system call and one TCP segment instead of one each.
#[derive(Debug)]
pub(crate) struct ControlWriter {
    inner: Mutex<Inner>,
    /// A second handle on the socket, so [`ControlWriter::shutdown`] never waits behind a
    /// writer stuck on a stalled peer.
    shut: Option<TcpStream>,
}

#[derive(Debug)]
struct Inner {
    tx: ControlTx,
    pending: Vec<u8>,
    corks: usize,
    /// Set once a write failed; every later send fails with it.
    broken: Option<Broken>,
}

/// The control connection could not be written: every later send fails the same way.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot write to the peer: {0}")]
pub(crate) struct Broken(Arc<std::io::Error>);

impl Broken {
    /// The session's error for a broken control connection to `peer`.
    pub(crate) fn into_session(self, peer: &str) -> SessionError {
        SessionError::Connection {
            peer: peer.into(),
            reason: self.to_string(),
        }
    }
}

/// How often long work the peer waits for says it is alive: a quarter of the idle timeout,
/// at most a second.
pub(crate) fn keepalive_every(idle: Duration) -> Duration {
    (idle / 4).min(Duration::from_secs(1))
}

/// Sealed frames held back while corked, at most.
pub(crate) const CORK_LIMIT: usize = 256 * 1024;

impl Inner {
    fn flush(&mut self) -> Result<(), Broken> {
        if let Some(why) = &self.broken {
            return Err(why.clone());
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        let r = self.tx.stream.write_all(&self.pending);
        self.pending.clear();
        r.map_err(|e| {
            let why = Broken(Arc::new(e));
            self.broken = Some(why.clone());
            why
        })
    }
}

/// Holds a [`ControlWriter`]'s frames back until dropped (see there).
pub(crate) struct Cork<'a> {
    w: &'a ControlWriter,
}

impl Drop for Cork<'_> {
    fn drop(&mut self) {
        let mut g = self.w.lock();
        g.corks -= 1;
        if g.corks == 0 {
            // A failure is kept in `broken` and reported by the next send.
            let _ = g.flush();
        }
    }
}

/// Events waiting at most, handled under one cork before it is pulled.
const BURST: usize = 64;

/// A role loop's event queue, read so that the answers to events already waiting leave in one
/// write: while events are queued they are taken under one [`Cork`] (up to a burst of 64);
/// the cork is pulled before blocking for more.
pub(crate) struct Batched<'a, T> {
    rx: &'a mpsc::Receiver<T>,
    ctl: &'a ControlWriter,
    cork: Option<Cork<'a>>,
    burst: usize,
}

impl<'a, T> Batched<'a, T> {
    pub(crate) fn new(rx: &'a mpsc::Receiver<T>, ctl: &'a ControlWriter) -> Batched<'a, T> {
        Batched {
            rx,
            ctl,
            cork: Some(ctl.cork()),
            burst: 0,
        }
    }

    /// The next event, waiting up to `wait` once none is queued.
    pub(crate) fn next(&mut self, wait: std::time::Duration) -> Result<T, mpsc::RecvTimeoutError> {
        if self.burst < BURST {
            match self.rx.try_recv() {
                Ok(ev) => {
                    self.burst += 1;
                    return Ok(ev);
                }
                Err(mpsc::TryRecvError::Disconnected) => {
                    return Err(mpsc::RecvTimeoutError::Disconnected);
                }
                Err(mpsc::TryRecvError::Empty) => {}
            }
        }
        drop(self.cork.take());
        self.burst = 0;
        let r = self.rx.recv_timeout(wait);
        self.cork = Some(self.ctl.cork());
        r
    }
}

impl ControlWriter {
    pub(crate) fn new(tx: ControlTx) -> ControlWriter {
        let shut = tx.stream.try_clone().ok();
        ControlWriter {
            inner: Mutex::new(Inner {
                tx,
                pending: Vec::new(),
                corks: 0,
                broken: None,
            }),
            shut,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.locked()
    }

    /// Seals and sends one message (or queues it, while corked).
    pub(crate) fn send(&self, m: &Message) -> Result<(), Broken> {
        let mut g = self.lock();
        if let Some(why) = &g.broken {
            return Err(why.clone());
        }
        let frame = g.tx.sealer.seal(m);
        g.pending.extend_from_slice(&frame);
        if g.corks == 0 || g.pending.len() >= CORK_LIMIT {
            g.flush()?;
        }
        Ok(())
    }

    /// Sends one message at once, with the frames held back before it, even while corked: a
    /// keep-alive from inside long work that runs under a cork (hashing an existing target).
    pub(crate) fn send_now(&self, m: &Message) -> Result<(), Broken> {
        let mut g = self.lock();
        if let Some(why) = &g.broken {
            return Err(why.clone());
        }
        let frame = g.tx.sealer.seal(m);
        g.pending.extend_from_slice(&frame);
        g.flush()
    }

    /// Holds frames back until the returned guard (and every other) is dropped.
    pub(crate) fn cork(&self) -> Cork<'_> {
        self.lock().corks += 1;
        Cork { w: self }
    }

    /// Sends an unsealed `Error` (it ends the session) at once, with whatever was held back
    /// before it, without waiting on a stuck peer long.
    pub(crate) fn send_error(&self, code: zcp_wire::ErrorCode, message: &str) {
        let mut g = self.lock();
        if g.broken.is_some() {
            return;
        }
        let frame = g.tx.sealer.seal(&Message::Error {
            code,
            message: message.to_string(),
        });
        g.pending.extend_from_slice(&frame);
        let _ = g.flush();
    }

    /// Shuts the connection down both ways, so the reader thread and the peer notice.
    pub(crate) fn shutdown(&self) {
        match &self.shut {
            Some(s) => {
                let _ = s.shutdown(Shutdown::Both);
            }
            None => {
                let _ = self.lock().tx.stream.shutdown(Shutdown::Both);
            }
        }
    }
}

/// Frames the control reader may have handed to the role's loop and the loop not yet taken:
/// past this the reader stops reading, so a peer that floods frames while the loop is busy
/// (or stalled on a peer that does not read) meets TCP's backpressure, not our memory.
pub(crate) const MAX_INFLIGHT: usize = 256;

/// Counts frames between the control reader and the role's loop ([`MAX_INFLIGHT`]).
#[derive(Debug, Default)]
pub(crate) struct Inflight {
    n: Mutex<usize>,
    cv: Wakeup,
}

impl Inflight {
    /// Takes a place for one more frame, waiting while all are taken; `false` once `stop`.
    fn acquire(&self, stop: &AtomicBool) -> bool {
        let mut n = self.n.locked();
        while *n >= MAX_INFLIGHT {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            n = self.cv.wait_for(n, Duration::from_millis(100));
        }
        *n += 1;
        true
    }

    /// The loop took a frame.
    pub(crate) fn release(&self) {
        let mut n = self.n.locked();
        *n = n.saturating_sub(1);
        self.cv.notify_one();
    }
}

/// A running control reader (see [`spawn_reader`]).
pub(crate) struct Reader {
    handle: JoinHandle<Usage>,
    stop: Arc<AtomicBool>,
    inflight: Arc<Inflight>,
}

impl Reader {
    /// Starts a reader on `rx`; its frames go to `out` through `wrap`.
    pub(crate) fn start<T: Send + 'static>(
        rx: ControlRx,
        out: mpsc::Sender<T>,
        wrap: fn(Result<Message, FrameIoError>) -> T,
    ) -> Result<Reader, crate::SessionError> {
        let stop = Arc::new(AtomicBool::new(false));
        let inflight = Arc::new(Inflight::default());
        let handle =
            spawn_reader(rx, out, wrap, stop.clone(), inflight.clone()).map_err(|source| {
                crate::SessionError::Io {
                    what: "spawning a thread".into(),
                    source,
                }
            })?;
        Ok(Reader {
            handle,
            stop,
            inflight,
        })
    }

    /// The loop took a frame.
    pub(crate) fn taken(&self) {
        self.inflight.release();
    }

    /// Stops the reader (at its next read timeout, or now if the connection is shut down);
    /// its CPU time.
    pub(crate) fn finish(self) -> Usage {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}

/// Runs the reader: every message, then the error that ended it (or `Closed`), goes to `out`
/// through `wrap`, with at most [`MAX_INFLIGHT`] messages not yet [`Inflight::release`]d by
/// the loop. Ends early once `stop` is set (checked between reads, at least every read
/// timeout of the socket). Returns the thread's CPU use.
fn spawn_reader<T: Send + 'static>(
    mut rx: ControlRx,
    out: mpsc::Sender<T>,
    wrap: fn(Result<Message, FrameIoError>) -> T,
    stop: Arc<AtomicBool>,
    inflight: Arc<Inflight>,
) -> std::io::Result<JoinHandle<Usage>> {
    std::thread::Builder::new()
        .name("zcp-control-rx".into())
        .spawn(move || {
            let start = thread_usage();
            loop {
                match rx.poll() {
                    Ok(Some(m)) => {
                        if !inflight.acquire(&stop) || out.send(wrap(Ok(m))).is_err() {
                            break;
                        }
                    }
                    Ok(None) if stop.load(Ordering::Relaxed) => break,
                    Ok(None) => {}
                    Err(e) => {
                        let _ = out.send(wrap(Err(e)));
                        break;
                    }
                }
            }
            thread_usage().since(&start)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inflight_frames_are_bounded_and_stop_frees_the_reader() {
        let g = Inflight::default();
        let stop = AtomicBool::new(false);
        for _ in 0..MAX_INFLIGHT {
            assert!(g.acquire(&stop));
        }
        stop.store(true, Ordering::Relaxed);
        assert!(
            !g.acquire(&stop),
            "full: waits until the loop takes one, or stop"
        );
        stop.store(false, Ordering::Relaxed);
        g.release();
        assert!(g.acquire(&stop));
    }
}
