//! `zcp send --raw`: one regular file's bytes, nothing before or after them, into a TCP
//! connection, with a sender engine; then our end is shut for writing and the peer's close
//! awaited, so a peer that resets the connection (it closed with bytes unread) fails the send.

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use zcp_engine::pace::Pacer;
use zcp_engine::sys::{process_usage, set_socket_timeouts};
use zcp_engine::{EngineError, FileSender, SendEngine, io_class};

use super::{Watch, retransmits};
use crate::client::StopFlag;
use crate::error::SessionError;
use crate::event::{Cpu, Event, RateLimit, RawEnd, RawStart, Reporter};

/// What `zcp send --raw` sends, where, and how.
#[derive(Debug, Clone)]
pub struct RawSendOptions {
    /// The file: one regular file.
    pub source: PathBuf,
    /// The listener's host name or address.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// The sender engine to try first.
    pub engine: SendEngine,
    /// Bytes per engine call (0: the engine's default).
    pub block_size: u64,
    /// Cap, bits per second (held in user space).
    pub limit_rate: Option<u64>,
    /// Time allowed to connect.
    pub connect_timeout: Duration,
    /// A send that moves nothing for this long fails; also how long the peer's close is
    /// awaited once every byte is out.
    pub idle_timeout: Duration,
    /// Interval between reports; `None` for none.
    pub interval: Option<Duration>,
    /// Set by a signal to stop.
    pub stop: Option<StopFlag>,
}

/// Sends the file; the end as reported.
pub fn send_raw(o: &RawSendOptions, reporter: &mut dyn Reporter) -> Result<RawEnd, SessionError> {
    let shown = zcp_wire::escape(o.source.as_os_str().as_encoded_bytes());
    let (file, size) = open_source(o, &shown)?;
    let sock = connect(o)?;
    set_socket_timeouts(&sock, Some(o.idle_timeout)).map_err(|e| SessionError::Io {
        what: "setting the socket's timeouts".into(),
        source: e,
    })?;
    let (engine, note) = o.engine.probe(file.as_fd(), size);
    let pacer = o.limit_rate.map(|bits| Arc::new(Pacer::new(bits / 8)));
    let (local, remote) = addrs(&sock)?;
    reporter.event(&Event::RawStart(RawStart {
        direction: "send",
        local,
        remote,
        path: shown.clone(),
        size: Some(size),
        engine: engine.name().into(),
        engine_note: note,
        limit_rate: o.limit_rate.map(|bits| RateLimit {
            bits_per_second: bits,
            pacing: "user space".into(),
        }),
    }));
    let usage0 = process_usage();
    let t0 = Instant::now();
    let progress = AtomicU64::new(0);
    let watch = Watch {
        sock: &sock,
        progress: &progress,
        total: Some(size),
        interval: o.interval,
        stop: o.stop.as_ref(),
        stopped: "before every byte was sent",
    };
    let ((discarded, closed), max_rss) = watch.run(reporter, || {
        let mut sender = FileSender::new(engine, o.block_size).paced(pacer);
        sender
            .send(file.as_fd(), sock.as_fd(), 0, size, &progress)
            .map_err(|e| send_error(e, &shown, remote))?;
        zcp_engine::send::shutdown_write(&sock);
        await_close(&sock, remote, o.idle_timeout)
    })?;
    if !closed {
        reporter.event(&Event::Notice(format!(
            "every byte was sent, but the peer did not close the connection within {} s",
            o.idle_timeout.as_secs()
        )));
    }
    let usage = process_usage().since(&usage0);
    let end = RawEnd {
        direction: "send",
        bytes: size,
        seconds: t0.elapsed().as_secs_f64(),
        engine: engine.name().into(),
        blake3: None,
        checked: Vec::new(),
        stored: None,
        cpu: Cpu::new(usage.user, usage.sys),
        max_rss,
        retransmits: retransmits(&sock),
        discarded,
    };
    reporter.event(&Event::RawEnd(end.clone()));
    Ok(end)
}

/// Opens the source: a regular file, or a clear refusal naming what to fix.
fn open_source(o: &RawSendOptions, shown: &str) -> Result<(std::fs::File, u64), SessionError> {
    let refuse = |reason: String| SessionError::Source {
        path: shown.to_string(),
        reason,
    };
    // Looked at before it is opened: opening a FIFO would wait for a writer.
    let meta = std::fs::metadata(&o.source).map_err(|e| refuse(e.to_string()))?;
    if meta.is_dir() {
        return Err(refuse(
            "is a directory; a bare stream carries one file's bytes (send a tree to a zcp \
             server with zcp send -r, or pack it first: tar -c DIR | nc HOST PORT)"
                .into(),
        ));
    }
    if !meta.is_file() {
        return Err(refuse(
            "is not a regular file (a device, FIFO or socket); --raw sends one regular file".into(),
        ));
    }
    let file = std::fs::File::open(&o.source).map_err(|e| refuse(e.to_string()))?;
    let meta = file.metadata().map_err(|e| refuse(e.to_string()))?;
    if !meta.is_file() {
        return Err(refuse(
            "was replaced by something other than a regular file".into(),
        ));
    }
    Ok((file, meta.len()))
}

/// Connects to the first address of the host that answers, all within the timeout.
fn connect(o: &RawSendOptions) -> Result<TcpStream, SessionError> {
    crate::conn::connect(&o.host, o.port, o.connect_timeout)
}

fn addrs(sock: &TcpStream) -> Result<(SocketAddr, SocketAddr), SessionError> {
    let io = |source| SessionError::Io {
        what: "the connection's addresses".into(),
        source,
    };
    Ok((
        sock.local_addr().map_err(io)?,
        sock.peer_addr().map_err(io)?,
    ))
}

/// A failed send, named: the source that changed, or the connection that failed.
fn send_error(e: EngineError, shown: &str, peer: SocketAddr) -> SessionError {
    match e {
        EngineError::SourceShort { .. } | EngineError::SourceChanged(_) => {
            SessionError::SourceChanged {
                path: shown.to_string(),
                reason: e.to_string(),
            }
        }
        EngineError::Sys {
            call,
            what: "socket",
            source,
        } => SessionError::Connection {
            peer: peer.to_string(),
            reason: format!(
                "{call}: {source}; not every byte was sent (the peer closed or reset the \
                 connection)"
            ),
        },
        EngineError::Timeout { .. } => SessionError::Connection {
            peer: peer.to_string(),
            reason: format!("{e}; not every byte was sent"),
        },
        other => SessionError::Source {
            path: shown.to_string(),
            reason: other.to_string(),
        },
    }
}

/// After our end is shut for writing: reads (and drops) what the peer sends until it closes.
/// Returns the bytes dropped and whether it closed within `timeout`. A reset is an error: a
/// peer that closes with bytes unread resets the connection, so not every byte was taken.
fn await_close(
    sock: &TcpStream,
    peer: SocketAddr,
    timeout: Duration,
) -> Result<(u64, bool), SessionError> {
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 4096];
    let mut dropped = 0u64;
    let mut s = sock;
    while Instant::now() < deadline {
        match s.read(&mut buf) {
            Ok(0) => return Ok((dropped, true)),
            Ok(n) => dropped += n as u64,
            Err(e) => match io_class(&e) {
                zcp_engine::IoClass::Interrupted => {}
                zcp_engine::IoClass::TimedOut => return Ok((dropped, false)),
                zcp_engine::IoClass::Failed => {
                    return Err(SessionError::Connection {
                        peer: peer.to_string(),
                        reason: format!(
                            "{e} after every byte was sent: the peer closed without reading \
                             them all"
                        ),
                    });
                }
            },
        }
    }
    Ok((dropped, false))
}
