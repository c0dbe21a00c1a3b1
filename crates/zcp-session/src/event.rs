//! What a session tells the outside world, and the traits it tells it through.
//!
//! In this crate, sessions follow the "push" model, as ripgrep's searcher does: a transfer
//! pushes [`Event`]s into a [`Reporter`] as things happen and never formats or prints anything
//! itself. Printing a table, a JSON document or JSON lines is the reporter's business (the
//! `zcp-report` crate); tests use a reporter that just collects. Events carry measured values
//! only, in plain units (bytes, seconds), so every output format shows the same numbers.

use std::net::SocketAddr;
use std::time::Duration;

pub use zcp_engine::TcpStats;

/// CPU time of one side, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Cpu {
    /// User-mode seconds.
    pub user: f64,
    /// Kernel-mode seconds.
    pub sys: f64,
}

impl Cpu {
    /// From user and system durations.
    pub fn new(user: Duration, sys: Duration) -> Cpu {
        Cpu {
            user: user.as_secs_f64(),
            sys: sys.as_secs_f64(),
        }
    }

    /// User plus system seconds.
    pub fn total(&self) -> f64 {
        self.user + self.sys
    }
}

/// Everything known when the first byte is about to be sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    /// Our end of the control connection.
    pub local: SocketAddr,
    /// The server's end.
    pub remote: SocketAddr,
    /// The session id, hex.
    pub session: String,
    /// The source path, escaped for display.
    pub source: String,
    /// The final path on the receiver, relative to its root, escaped for display.
    pub target: String,
    /// File size in bytes.
    pub size: u64,
    /// Chunk size in bytes.
    pub chunk_size: u64,
    /// Bytes per engine call on the sender.
    pub block_size: u64,
    /// Data streams.
    pub streams: u16,
    /// The sender engine that runs.
    pub sender_engine: String,
    /// Why it differs from the one asked for.
    pub sender_note: Option<String>,
    /// The receiver engine that runs.
    pub receiver_engine: String,
    /// Why it differs from the one asked for, or how `auto` chose.
    pub receiver_note: Option<String>,
    /// Whether the receiver will verify chunk MACs.
    pub verify: bool,
}

/// One data stream's numbers over one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamInterval {
    /// Stream index.
    pub id: u16,
    /// Payload bytes sent in the interval.
    pub bytes: u64,
    /// TCP_INFO at the end of the interval, where available.
    pub tcp: Option<TcpStats>,
    /// Segments retransmitted during the interval.
    pub retransmits: u32,
}

/// One reporting interval (`-i`), in seconds since the first byte.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    /// Interval start.
    pub start: f64,
    /// Interval end.
    pub end: f64,
    /// Per-stream numbers.
    pub streams: Vec<StreamInterval>,
}

impl Interval {
    /// Bytes over all streams.
    pub fn bytes(&self) -> u64 {
        self.streams.iter().map(|s| s.bytes).sum()
    }

    /// Retransmits over all streams.
    pub fn retransmits(&self) -> u32 {
        self.streams.iter().map(|s| s.retransmits).sum()
    }
}

/// The outcome of a finished transfer.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Payload bytes transferred.
    pub bytes: u64,
    /// Seconds from the first byte sent to the receiver's durable commit.
    pub seconds: f64,
    /// Seconds from the first byte to the last byte handed to the kernel.
    pub send_seconds: f64,
    /// Sender engine that ran.
    pub sender_engine: String,
    /// Receiver engine that ran.
    pub receiver_engine: String,
    /// Sender CPU of the session's threads (handshake and hashing included).
    pub sender_cpu: Cpu,
    /// Sender CPU of the data thread alone: what the sender engine costs, without hashing.
    pub sender_data_cpu: Cpu,
    /// Receiver CPU of the session's threads.
    pub receiver_cpu: Cpu,
    /// Sender peak RSS, bytes.
    pub sender_max_rss: u64,
    /// Receiver peak RSS, bytes (process-wide).
    pub receiver_max_rss: u64,
    /// Segments retransmitted over the whole transfer.
    pub retransmits: u32,
    /// Whether every chunk MAC and the digest were checked on the receiver.
    pub verified: bool,
    /// Whether the file was stored durably under its final name.
    pub stored: bool,
    /// The keyed BLAKE3 digest, hex, when verified.
    pub digest: Option<String>,
    /// The final path on the receiver, escaped for display.
    pub target: String,
}

/// What a sending session reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Connected, authenticated, and the receiver is ready.
    Start(Start),
    /// One interval passed.
    Interval(Interval),
    /// The transfer finished and was committed.
    Summary(Summary),
}

/// Receives a sending session's events, on the session's own thread, in order.
pub trait Reporter {
    /// Handles one event.
    fn event(&mut self, event: &Event);
}

/// A reporter that keeps every event; for tests and for callers that format later.
#[derive(Debug, Default)]
pub struct Collect(pub Vec<Event>);

impl Reporter for Collect {
    fn event(&mut self, event: &Event) {
        self.0.push(event.clone());
    }
}

/// What a server reports. Sent from many sessions' threads at once.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// The server is accepting connections.
    Listening {
        /// The bound address.
        addr: SocketAddr,
        /// The root directory.
        root: String,
    },
    /// A connection was refused before or during authentication.
    Rejected {
        /// Who connected.
        peer: SocketAddr,
        /// Why it was refused.
        reason: String,
    },
    /// A session authenticated.
    SessionStart {
        /// Who connected.
        peer: SocketAddr,
        /// Session id, hex.
        session: String,
    },
    /// A file was verified and committed (or discarded by a null/mem receiver).
    FileDone {
        /// Session id, hex.
        session: String,
        /// Final path, escaped.
        target: String,
        /// Bytes.
        bytes: u64,
        /// Seconds from the file's announcement to its commit.
        seconds: f64,
        /// Receiver engine that ran.
        engine: String,
        /// Whether it was verified.
        verified: bool,
        /// Whether it was stored.
        stored: bool,
    },
    /// A file failed; nothing was renamed into place.
    FileFailed {
        /// Session id, hex.
        session: String,
        /// Destination as asked, escaped.
        target: String,
        /// Why.
        reason: String,
    },
    /// A session ended.
    SessionEnd {
        /// Session id, hex.
        session: String,
        /// Whether every file it announced was committed and the session closed cleanly.
        ok: bool,
        /// Why not, when not.
        reason: Option<String>,
    },
}

/// Receives a server's events; must tolerate calls from many threads.
pub trait ServerReporter: Send + Sync {
    /// Handles one event.
    fn event(&self, event: &ServerEvent);
}

/// A server reporter that drops everything.
#[derive(Debug, Default)]
pub struct Quiet;

impl ServerReporter for Quiet {
    fn event(&self, _event: &ServerEvent) {}
}
