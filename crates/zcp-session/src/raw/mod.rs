//! Bare byte streams: `zcp send --raw` sends one file's bytes and nothing else to any TCP
//! listener (`nc -l`, a Java server), and `zcp recv` takes one connection's bytes, to its
//! end, into a file. No key, no handshake, no frames: the peer is whatever listens or
//! connects, so nothing is authenticated, and what arrives is only as good as the network
//! and the peer. The receiver makes it durable and atomic all the same (a part file, fsync,
//! a rename only after a clean end of stream) and can hold it to a size and a BLAKE3 digest
//! given out of band.
//!
//! The bytes move through the same engines as a session's (`zcp_engine::FileSender`,
//! `StreamReceiver::receive_until_eof`) on a thread of their own, while the caller's thread
//! reports progress and intervals and watches the stop flag.

mod recv;
mod send;

use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use zcp_engine::sys::{RssPeak, tcp_info};

use crate::client::StopFlag;
use crate::error::SessionError;
use crate::event::{Event, Interval, Phase, Progress, Reporter, StreamInterval};

pub use recv::{RawReceiver, RawRecvOptions};
pub use send::{RawSendOptions, send_raw};

/// How often the watching thread reports progress and looks at the stop flag.
const TICK: Duration = Duration::from_millis(100);

/// What the watching thread knows of the stream it watches.
struct Watch<'a> {
    sock: &'a TcpStream,
    progress: &'a AtomicU64,
    total: Option<u64>,
    interval: Option<Duration>,
    stop: Option<&'a StopFlag>,
    /// What a stop means for this stream, for its error.
    stopped: &'static str,
}

/// The first signal the stop flag holds, if any.
fn stopped(stop: Option<&StopFlag>) -> Option<usize> {
    stop.map(|s| s.load(Ordering::Relaxed)).filter(|&s| s != 0)
}

/// The error for a stream stopped by signal `sig`: nothing was committed.
fn stopped_error(sig: usize, what: &str) -> SessionError {
    let name = match sig {
        2 => "SIGINT".to_string(),
        15 => "SIGTERM".to_string(),
        n => format!("signal {n}"),
    };
    SessionError::Stopped {
        reason: format!("interrupted ({name}) {what}"),
        durable: None,
    }
}

impl Watch<'_> {
    /// Runs `work` on a thread of its own while this thread pushes progress (about ten times
    /// a second) and intervals to `reporter`. A stop (the flag set by a signal) shuts the
    /// socket down, which ends `work`, and fails with [`SessionError::Stopped`] whatever
    /// `work` returned. Returns `work`'s result and the peak RSS seen.
    fn run<T: Send>(
        &self,
        reporter: &mut dyn Reporter,
        work: impl FnOnce() -> Result<T, SessionError> + Send,
    ) -> Result<(T, u64), SessionError> {
        let t0 = Instant::now();
        let mut rss = RssPeak::default();
        let retrans0 = tcp_info(self.sock).map_or(0, |t| t.total_retrans);
        let (mut last, mut last_bytes, mut last_retrans) = (t0, 0u64, retrans0);
        let (tx, rx) = mpsc::channel();
        let result = std::thread::scope(|scope| {
            std::thread::Builder::new()
                .name("zcp-raw".into())
                .spawn_scoped(scope, move || {
                    let _ = tx.send(work());
                })
                .map_err(|e| SessionError::Io {
                    what: "starting the stream's thread".into(),
                    source: e,
                })?;
            let mut shut = false;
            loop {
                match rx.recv_timeout(TICK) {
                    Ok(r) => break Ok(r),
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        break Err(SessionError::Io {
                            what: "the stream's thread".into(),
                            source: std::io::Error::other("it ended without a result"),
                        });
                    }
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                }
                if !shut && stopped(self.stop).is_some() {
                    // Reads see an end of stream, writes fail: the work ends, and the stop
                    // flag, checked below, says it was no real end.
                    let _ = self.sock.shutdown(std::net::Shutdown::Both);
                    shut = true;
                }
                rss.sample();
                let now = Instant::now();
                let bytes = self.progress.load(Ordering::Relaxed);
                reporter.event(&Event::Progress(self.progress_at(bytes, now - t0, false)));
                if let Some(every) = self.interval
                    && now - last >= every
                {
                    let tcp = tcp_info(self.sock);
                    let retrans = tcp.map_or(last_retrans, |t| t.total_retrans);
                    reporter.event(&Event::Interval(Interval {
                        start: (last - t0).as_secs_f64(),
                        end: (now - t0).as_secs_f64(),
                        streams: vec![StreamInterval {
                            id: 0,
                            bytes: bytes - last_bytes,
                            tcp,
                            retransmits: retrans.saturating_sub(last_retrans),
                        }],
                        progress: self.progress_at(bytes, now - t0, false),
                        udp: None,
                    }));
                    (last, last_bytes, last_retrans) = (now, bytes, retrans);
                }
            }
        })?;
        if let Some(sig) = stopped(self.stop) {
            return Err(stopped_error(sig, self.stopped));
        }
        let value = result?;
        let bytes = self.progress.load(Ordering::Relaxed);
        reporter.event(&Event::Progress(self.progress_at(
            bytes,
            t0.elapsed(),
            true,
        )));
        Ok((value, rss.sample()))
    }

    fn progress_at(&self, bytes: u64, since: Duration, done: bool) -> Progress {
        Progress {
            phase: if done { Phase::Done } else { Phase::Sending },
            bytes,
            total_bytes: self.total,
            files: u64::from(done),
            total_files: Some(1),
            seconds: since.as_secs_f64(),
        }
    }
}

/// Segments retransmitted on `sock` so far.
fn retransmits(sock: &TcpStream) -> u32 {
    tcp_info(sock).map_or(0, |t| t.total_retrans)
}
