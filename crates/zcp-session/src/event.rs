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

/// A rate cap in force (`--limit-rate`), and what holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    /// The cap on all data streams together, bits per second.
    pub bits_per_second: u64,
    /// What holds it on the sending side: `kernel` (`SO_MAX_PACING_RATE` on each stream,
    /// under a user-space token bucket) or `user space` (the bucket alone).
    pub pacing: String,
}

/// Everything known when the first byte is about to move.
#[derive(Debug, Clone, PartialEq)]
pub struct Start {
    /// Our end of the control connection.
    pub local: SocketAddr,
    /// The server's end.
    pub remote: SocketAddr,
    /// The session id, hex.
    pub session: String,
    /// `send` (push) or `get` (pull).
    pub direction: &'static str,
    /// What is sent, escaped for display (sources joined by spaces).
    pub source: String,
    /// Where it goes, escaped for display.
    pub target: String,
    /// Total size when known up front (one file); `None` for trees, which stream.
    pub size: Option<u64>,
    /// Chunk size in bytes (0: chosen per file).
    pub chunk_size: u64,
    /// Bytes per engine call on the sender (0: each engine's default).
    pub block_size: u64,
    /// Data streams.
    pub streams: u16,
    /// The sender engine that runs.
    pub sender_engine: String,
    /// Why it differs from the one asked for.
    pub sender_note: Option<String>,
    /// The receiver engine that runs (of the first file; see each file's note).
    pub receiver_engine: String,
    /// Why it differs from the one asked for, or how `auto` chose.
    pub receiver_note: Option<String>,
    /// Whether the receiver verifies chunk MACs (not with `--verify none`, nor with the
    /// `null` engine, which never reads the bytes).
    pub verify: bool,
    /// The session's verify mode (`--verify`): `blake3`, or `none` when asked for.
    pub verify_mode: zcp_wire::VerifyMode,
    /// The rate cap, if one was asked for.
    pub limit_rate: Option<RateLimit>,
}

/// Where a transfer is, for the person watching: the end of a transfer (the receiver
/// verifying, syncing and renaming) must not look like a stall.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Phase {
    /// Connecting and authenticating.
    #[default]
    Connecting,
    /// Checking what is already there: the receiver hashing an existing target or reading a
    /// journal, the sender hashing its source against what the receiver holds.
    Checking,
    /// Bytes are moving.
    Sending,
    /// Every byte was sent; the receiver is verifying and syncing it.
    Syncing,
    /// Verified and durable; files are being renamed into place.
    Committing,
    /// Finished.
    Done,
}

impl Phase {
    /// The phase's name in reports and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Connecting => "connecting",
            Phase::Checking => "checking",
            Phase::Sending => "sending",
            Phase::Syncing => "verifying and syncing",
            Phase::Committing => "committing",
            Phase::Done => "done",
        }
    }
}

/// How far a transfer is: sent about ten times a second while it runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    /// What the transfer is doing now.
    pub phase: Phase,
    /// Bytes done: moved over the data streams (a chunk sent again counts once more) plus
    /// bytes resumed from an earlier attempt.
    pub bytes: u64,
    /// Bytes to move in all, once the sender has counted its sources.
    pub total_bytes: Option<u64>,
    /// Files finished (committed or failed).
    pub files: u64,
    /// Files in all, once counted.
    pub total_files: Option<u64>,
    /// Seconds since the first byte could move.
    pub seconds: f64,
}

/// One data stream's numbers over one interval.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamInterval {
    /// Stream index.
    pub id: u16,
    /// Payload bytes moved in the interval.
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
    /// The phase and totals at the interval's end.
    pub progress: Progress,
    /// Over `--transport udp`: its counters so far and its rate now.
    pub udp: Option<crate::UdpReport>,
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

/// A file that arrived: committed on the receiver, proved as the session asked.
#[derive(Debug, Clone, PartialEq)]
pub struct Arrived {
    /// Its path, escaped.
    pub path: String,
    /// Its size.
    pub bytes: u64,
    /// Bytes the receiver held already (resumed, or a target kept in place): not sent.
    pub skipped: u64,
    /// From when its bytes began to move to its commit.
    pub seconds: f64,
    /// Whether its every chunk was verified.
    pub verified: bool,
    /// Its plain BLAKE3 (as `b3sum` prints it), hex, when verified.
    pub digest: Option<String>,
}

/// A file, directory or link that did not arrive.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    /// Its path, escaped.
    pub path: String,
    /// The failure class (`bad-path`, `no-space`, `verify`, `source-changed`, ...).
    pub code: &'static str,
    /// Why.
    pub message: String,
}

/// The outcome of a finished transfer.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Bytes in the files committed.
    pub bytes: u64,
    /// Payload bytes that crossed the data streams (re-sent chunks count twice).
    pub bytes_sent: u64,
    /// Bytes already on the receiver from an interrupted earlier attempt, not sent again.
    pub bytes_skipped: u64,
    /// Files committed.
    pub files: u64,
    /// Files already at their destination and left as they were (`--ignore-existing`):
    /// neither sent nor compared, on the receiver's word.
    pub left_existing: u64,
    /// Entries `--delete` removed (or, with `deleted_dry_run`, would have).
    pub deleted: u64,
    /// The deletions were a dry run (`--delete-dry-run`).
    pub deleted_dry_run: bool,
    /// Directories and links created.
    pub entries: u64,
    /// Chunks sent again after failing verification.
    pub resent_chunks: u64,
    /// Seconds from the first byte to the last commit.
    pub seconds: f64,
    /// Seconds from the first byte to the last byte handed to the kernel.
    pub send_seconds: f64,
    /// Sender engine that ran.
    pub sender_engine: String,
    /// Receiver engine that ran (of the first file).
    pub receiver_engine: String,
    /// Sender CPU of the session's threads (hashing included).
    pub sender_cpu: Cpu,
    /// Sender CPU of the data threads alone: what the sender engine costs, without hashing.
    pub sender_data_cpu: Cpu,
    /// Receiver CPU of the session's threads.
    pub receiver_cpu: Cpu,
    /// Sender peak RSS, bytes (process-wide).
    pub sender_max_rss: u64,
    /// Receiver peak RSS, bytes (process-wide).
    pub receiver_max_rss: u64,
    /// Segments retransmitted over the whole transfer, all streams.
    pub retransmits: u32,
    /// Whether every chunk MAC and digest was checked on the receiver.
    pub verified: bool,
    /// The session's verify mode (`--verify`): with `none`, nothing was verified.
    pub verify_mode: zcp_wire::VerifyMode,
    /// Whether the files were stored durably under their final names.
    pub stored: bool,
    /// The file's plain BLAKE3 (as `b3sum` prints it), hex, when exactly one file was sent and
    /// verified.
    pub digest: Option<String>,
    /// The destination, escaped for display.
    pub target: String,
    /// What did not arrive (at most the first 100; `failed` counts all).
    pub failures: Vec<Failure>,
    /// How many entries failed.
    pub failed: u64,
    /// Sessions that ended early and were tried again (`--retry`).
    pub retries: u32,
    /// The rate cap that was in force, if any.
    pub limit_rate: Option<RateLimit>,
    /// Over `--transport udp`: what its streams counted.
    pub udp: Option<crate::UdpReport>,
    /// How the session was encrypted (`None`: in clear, authenticated and verified only).
    pub encryption: Option<Encryption>,
}

mod encryption;
pub use encryption::Encryption;

/// What a client session reports.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Connected, authenticated, streams open.
    Start(Start),
    /// One interval passed.
    Interval(Interval),
    /// Something the person should know that is not a failure (a special file skipped, a
    /// file resumed).
    Notice(String),
    /// A file arrived (every one: the text report shows them with `-v`).
    File(Arrived),
    /// An entry did not arrive; the transfer goes on with the rest.
    Failed(Failure),
    /// `--delete`: the receiver removed an entry the sender does not have (or, in a dry run,
    /// would have).
    Deleted(Deleted),
    /// How far the transfer is; about ten times a second (for progress bars).
    Progress(Progress),
    /// The session ended early and is tried again (`--retry`).
    Retry(Retry),
    /// The transfer finished (some entries may have failed: see `failed`).
    Summary(Summary),
    /// A bare byte stream is connected (`zcp send --raw`, `zcp recv`).
    RawStart(RawStart),
    /// A bare byte stream ended cleanly (and, received, was stored).
    RawEnd(RawEnd),
}

/// An entry `--delete` removed (or named, in its dry run).
#[derive(Debug, Clone, PartialEq)]
pub struct Deleted {
    /// Its path beneath the receiver's destination root, escaped for display.
    pub path: String,
    /// A directory, removed with everything in it.
    pub dir: bool,
    /// `--delete-dry-run`: named, not removed.
    pub dry_run: bool,
}

/// A bare byte stream (`zcp send --raw`, `zcp recv`), connected: no key, no protocol.
#[derive(Debug, Clone, PartialEq)]
pub struct RawStart {
    /// `send` or `recv`.
    pub direction: &'static str,
    /// Our end of the connection.
    pub local: SocketAddr,
    /// The peer's end.
    pub remote: SocketAddr,
    /// The file sent, or the destination received into, escaped for display.
    pub path: String,
    /// The file's size (send), or the size `--expect-size` expects (recv).
    pub size: Option<u64>,
    /// The engine that runs.
    pub engine: String,
    /// Why it is not the one asked for, or how `auto` chose.
    pub engine_note: Option<String>,
    /// The rate cap, if one was asked for (send).
    pub limit_rate: Option<RateLimit>,
}

/// How a bare byte stream ended: every byte sent and the peer closed, or (recv) every byte
/// received up to the peer's close, checked as asked and stored.
#[derive(Debug, Clone, PartialEq)]
pub struct RawEnd {
    /// `send` or `recv`.
    pub direction: &'static str,
    /// Bytes moved.
    pub bytes: u64,
    /// Seconds from the connection to the end (recv: to the rename).
    pub seconds: f64,
    /// The engine that ran.
    pub engine: String,
    /// BLAKE3 (unkeyed) of the bytes received, hex; `None` when not computed (send, or the
    /// `null` receiver, which never sees the bytes).
    pub blake3: Option<String>,
    /// What the bytes were checked against (`--expect-size`, `--expect-blake3`), in words.
    pub checked: Vec<String>,
    /// Where the bytes were stored (recv), escaped; `None` when sent or discarded.
    pub stored: Option<String>,
    /// CPU of this process during the stream.
    pub cpu: Cpu,
    /// Peak RSS of this process, bytes.
    pub max_rss: u64,
    /// Segments retransmitted (sending side; 0 when receiving).
    pub retransmits: u32,
    /// Bytes the peer sent back and were discarded (send).
    pub discarded: u64,
}

/// A session that failed and is about to be tried again.
#[derive(Debug, Clone, PartialEq)]
pub struct Retry {
    /// The attempt about to start (the first retry is attempt 2).
    pub attempt: u32,
    /// Attempts allowed in all.
    pub attempts: u32,
    /// Why the last attempt ended.
    pub reason: String,
    /// Seconds waited before the attempt.
    pub wait: f64,
}

/// Receives a client session's events, on the session's own thread, in order.
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

/// How a [`ServerEvent::SessionEnd`]'s reason begins when the client ended the session on
/// purpose (its `Error{busy}`: interrupted, or stopping): not the server's failure.
pub const STOPPED_BY_CLIENT: &str = "stopped by the client";

/// What a server reports. Sent from many sessions' threads at once.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// The server is accepting connections.
    Listening {
        /// The bound address.
        addr: SocketAddr,
        /// The root directory (`serve --root`), or the exports and how many identities.
        root: String,
    },
    /// The server stops: it accepts nothing more and ends its running sessions.
    Stopping {
        /// Sessions running when it began to stop.
        sessions: usize,
    },
    /// Part files and journals of earlier transfers that no transfer holds, found beneath
    /// the root at start (on a thread of its own: start is not delayed). Sent only when some
    /// were found or the count stopped at its cap.
    Leftovers {
        /// The root directory.
        root: String,
        /// Files found.
        files: u64,
        /// Bytes they take on the disk.
        bytes: u64,
        /// The cap on entries looked at, when the count stopped there (the tree is larger).
        capped: Option<u64>,
    },
    /// A connection was refused before or during authentication.
    Rejected {
        /// Who connected.
        peer: SocketAddr,
        /// Why it was refused.
        reason: String,
        /// The refusal's class: an [`zcp_wire::ErrorCode`] name (`auth`, `busy`,
        /// `protocol`, `version`, ...), for counting.
        cause: &'static str,
    },
    /// Connections that ended before they finished their handshake, since the last such
    /// summary (at most one a second): evicted to admit newer ones, past their deadline,
    /// closed by their peer, or shed because the process ran out of file descriptors.
    Shed {
        /// Evicted to admit newcomers (the table or their source's share was full).
        evicted: u64,
        /// Past their handshake deadline.
        expired: u64,
        /// Closed by their peer inside a handshake (a client giving up).
        gave_up: u64,
        /// Closed (or reset) by their peer without sending a byte: a TCP probe, such as
        /// `zcp doctor --peer`'s RTT measurement, a load balancer's health check or a port
        /// scan. Not refusals.
        probes: u64,
        /// Refused (a bad frame, a wrong key, ...) beyond the ones logged on their own line
        /// ([`ServerEvent::Rejected`], at most 20 a second).
        refused: u64,
        /// Times accepting found the process out of file descriptors.
        descriptors: u64,
        /// Connections in their handshake now.
        pending: usize,
        /// The most there may be (`--max-pending`).
        max: usize,
        /// The source (an IPv4 address or an IPv6 /64) holding the most of them now, and how
        /// many.
        busiest: Option<(String, usize)>,
    },
    /// A session authenticated.
    SessionStart {
        /// Who connected.
        peer: SocketAddr,
        /// Session id, hex.
        session: String,
        /// `push` (receiving) or `pull` (sending).
        direction: &'static str,
        /// Data streams granted.
        streams: u16,
        /// The identity whose key the client holds (a config file's name; `default` for
        /// `serve --root`).
        identity: String,
        /// The export the session reads or writes (`root` for `serve --root`).
        export: String,
    },
    /// The exports and identities were loaded again (SIGHUP): in force for the sessions
    /// that start from now on. When `ok` is false the old ones stay, and `message` says why.
    Reloaded {
        /// Whether the new configuration is in force.
        ok: bool,
        /// What is served now, or why the reload failed.
        message: String,
    },
    /// The engines that run in a session, known once its first file is ready (at most once
    /// per session).
    Engines {
        /// Session id, hex.
        session: String,
        /// The sending side's engine.
        sender: String,
        /// The receiving side's engine.
        receiver: String,
    },
    /// How far a session is: about once a second while it runs, and not written to the log.
    Progress {
        /// Session id, hex.
        session: String,
        /// What the session is doing ([`Phase::name`]).
        phase: &'static str,
        /// Payload bytes moved so far over the data streams, plus bytes resumed.
        bytes: u64,
        /// Of `bytes`, those resumed from an earlier attempt rather than moved: not
        /// throughput.
        resumed: u64,
        /// Bytes to move in all, once the sender has counted them (a pull).
        total_bytes: Option<u64>,
        /// Files committed so far.
        files: u64,
        /// Files to move in all, once the sender has counted them (a pull).
        total_files: Option<u64>,
        /// The last file committed, escaped.
        last: Option<String>,
    },
    /// A file was verified and committed (or, pulled, sent and committed by the client).
    FileDone {
        /// Session id, hex.
        session: String,
        /// Path, escaped.
        target: String,
        /// Bytes.
        bytes: u64,
        /// Bytes resumed from an earlier attempt rather than sent.
        skipped: u64,
        /// Seconds from the file's announcement to its commit.
        seconds: f64,
        /// Receiver engine that ran.
        engine: String,
        /// Whether it was verified.
        verified: bool,
        /// Whether it was stored.
        stored: bool,
        /// The plain BLAKE3 of the whole file (as `b3sum` prints it), hex, when it was verified.
        digest: Option<String>,
    },
    /// An entry failed; nothing was renamed into place.
    FileFailed {
        /// Session id, hex.
        session: String,
        /// Path, escaped.
        target: String,
        /// Why.
        reason: String,
        /// The failure's class ([`Failure::code`]: `verify`, `io`, `exists`, ...).
        code: &'static str,
    },
    /// Something a session's role noted: a data stream that broke or was refused (with the
    /// reason), an entry the peer passed over. Text from the peer arrives escaped.
    Note {
        /// Session id, hex.
        session: String,
        /// What happened.
        message: String,
    },
    /// A session ended.
    SessionEnd {
        /// Session id, hex.
        session: String,
        /// Whether the session closed cleanly.
        ok: bool,
        /// Why not, when not.
        reason: Option<String>,
        /// Files committed (push) or sent (pull).
        files: u64,
        /// Payload bytes moved.
        bytes: u64,
        /// Seconds from authentication to the end.
        seconds: f64,
        /// Chunks sent again after their verification failed.
        resent_chunks: u64,
        /// Entries that failed (each also a [`ServerEvent::FileFailed`], but for those a
        /// peer reported past the log's cap on its notices).
        failed: u64,
        /// Files already there and left as the client asked (`--ignore-existing`, a quick
        /// check): neither committed nor failed.
        left: u64,
        /// Entries removed under `--delete` (or that would be, in its dry run), each also a
        /// [`ServerEvent::Note`].
        deleted: u64,
    },
    /// A session was refused after its client authenticated, before it started (an export
    /// the identity may not use, a bad `Open`, the server shutting down): no
    /// [`ServerEvent::SessionStart`] or [`ServerEvent::SessionEnd`] for it.
    SessionRefused {
        /// Session id, hex.
        session: String,
        /// Who connected.
        peer: SocketAddr,
        /// The identity whose key the client holds.
        identity: String,
        /// The export asked for, escaped, once the client said (its `Open`).
        export: Option<String>,
        /// `push` or `pull`, once the client said.
        direction: Option<&'static str>,
        /// The refusal's class, for counting: `access` when the identity may not use the
        /// export or the direction it asked for, [`CLIENT_GAVE_UP`] when the client itself
        /// ended the session before asking for anything (no refusal), else an
        /// [`zcp_wire::ErrorCode`] name (`busy`, `protocol`, ...).
        cause: &'static str,
        /// Why, escaped.
        reason: String,
    },
}

/// The [`ServerEvent::SessionRefused`] cause of a session its client ended before it asked
/// for anything (its own `Error`): logged, but neither a refusal nor a failure.
pub const CLIENT_GAVE_UP: &str = "client";

/// Receives a server's events; must tolerate calls from many threads.
pub trait ServerReporter: Send + Sync {
    /// Handles one event.
    fn event(&self, event: &ServerEvent);
}

/// A server reporter that hands each event to several (the log, the metrics, the transfer
/// log), in order.
#[derive(Default)]
pub struct Fanout(pub Vec<std::sync::Arc<dyn ServerReporter>>);

impl ServerReporter for Fanout {
    fn event(&self, event: &ServerEvent) {
        for r in &self.0 {
            r.event(event);
        }
    }
}

/// A server reporter that drops everything.
#[derive(Debug, Default)]
pub struct Quiet;

impl ServerReporter for Quiet {
    fn event(&self, _event: &ServerEvent) {}
}

/// How often a role loop works out its [`Phase`] for [`Observer::tick`] at most: the phase
/// scans every open file (hundreds while small files stream), and a busy loop turns once per
/// event, thousands of times a second; observers act on it every 100 ms at the finest.
pub(crate) const PHASE_EVERY: std::time::Duration = std::time::Duration::from_millis(20);

/// A role's [`Phase`], worked out again only when [`PHASE_EVERY`] has passed.
#[derive(Debug, Default)]
pub(crate) struct PhaseCache {
    at: Option<std::time::Instant>,
    phase: Phase,
}

impl PhaseCache {
    /// The phase as of at most [`PHASE_EVERY`] ago: `work_out` runs only when it is older.
    pub(crate) fn get(
        &mut self,
        now: std::time::Instant,
        work_out: impl FnOnce() -> Phase,
    ) -> Phase {
        if self
            .at
            .is_none_or(|at| now.saturating_duration_since(at) >= PHASE_EVERY)
        {
            self.phase = work_out();
            self.at = Some(now);
        }
        self.phase
    }
}

/// What a transfer role tells whoever runs it, as files and entries finish. The client turns
/// these into [`Event`]s (and adds intervals on [`Observer::tick`]); the server into
/// [`ServerEvent`]s.
pub(crate) trait Observer {
    /// The engines that run, known once the first file is ready (called at most once).
    fn engines(
        &mut self,
        sender: &str,
        sender_note: Option<&str>,
        receiver: &str,
        receiver_note: Option<&str>,
    );
    /// A file is done: committed (`ok`), or failed with `code` and `message`.
    fn file_done(&mut self, done: FileOutcome);
    /// A directory or link failed, or a note for the person.
    fn notice(&mut self, failure: Option<Failure>, note: Option<String>);
    /// Called about every 100 ms while the role runs, with the role's phase.
    fn tick(&mut self, phase: Phase);
    /// The sender counted what the session will announce: files and bytes.
    fn plan(&mut self, _files: u64, _bytes: u64) {}
    /// `--delete`: the receiver removed `path` (escaped; a directory with all in it when
    /// `dir`), or in a dry run (`dry_run`) would have.
    fn deleted(&mut self, path: String, dir: bool, dry_run: bool);
    /// Why the role must stop now (a signal, the server shutting down), if it must. Asked
    /// every tick; the role then ends as after a lost connection, keeping what is durable.
    fn stop(&self) -> Option<String> {
        None
    }
}

/// How one file ended, as a role reports it.
#[derive(Debug, Clone)]
pub(crate) struct FileOutcome {
    pub(crate) path: String,
    pub(crate) bytes: u64,
    pub(crate) skipped: u64,
    pub(crate) seconds: f64,
    pub(crate) engine: String,
    pub(crate) verified: bool,
    pub(crate) stored: bool,
    pub(crate) digest: [u8; 32],
    pub(crate) failure: Option<Failure>,
}

/// An [`Observer`] call, held until the thread that owns the observer can make it (a role's
/// inputs come from many threads; its observer lives on the control loop's).
#[derive(Debug, Clone)]
pub(crate) enum Report {
    /// [`Observer::engines`].
    Engines {
        sender: String,
        sender_note: Option<String>,
        receiver: String,
        receiver_note: Option<String>,
    },
    /// [`Observer::file_done`].
    FileDone(FileOutcome),
    /// [`Observer::notice`].
    Notice(Option<Failure>, Option<String>),
    /// [`Observer::plan`].
    Plan { files: u64, bytes: u64 },
    /// [`Observer::deleted`].
    Deleted {
        path: String,
        dir: bool,
        dry_run: bool,
    },
}

impl Report {
    /// Whether it is a failure that keeps a transfer from being whole, so `--delete` removes
    /// nothing: any but a file left as it was because it is already there (its name was
    /// announced, and the receiver keeps it).
    pub(crate) fn is_flaw(&self) -> bool {
        let fails = |f: &Failure| f.code != zcp_wire::ErrorCode::Exists.name();
        match self {
            Report::Notice(Some(f), _) => fails(f),
            Report::FileDone(d) => d.failure.as_ref().is_some_and(fails),
            _ => false,
        }
    }

    /// Makes the call.
    pub(crate) fn deliver(self, o: &mut dyn Observer) {
        match self {
            Report::Engines {
                sender,
                sender_note,
                receiver,
                receiver_note,
            } => o.engines(
                &sender,
                sender_note.as_deref(),
                &receiver,
                receiver_note.as_deref(),
            ),
            Report::FileDone(d) => o.file_done(d),
            Report::Notice(f, n) => o.notice(f, n),
            Report::Plan { files, bytes } => o.plan(files, bytes),
            Report::Deleted { path, dir, dry_run } => o.deleted(path, dir, dry_run),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn the_phase_is_worked_out_again_only_after_phase_every() {
        let mut cache = PhaseCache::default();
        let t = Instant::now();
        let mut asked = 0;
        let mut ask = |p: Phase| {
            asked += 1;
            p
        };
        assert_eq!(cache.get(t, || ask(Phase::Sending)), Phase::Sending);
        // Within PHASE_EVERY the last answer stands, without asking.
        let soon = t + PHASE_EVERY / 2;
        assert_eq!(cache.get(soon, || ask(Phase::Syncing)), Phase::Sending);
        let later = t + PHASE_EVERY + Duration::from_millis(1);
        assert_eq!(
            cache.get(later, || ask(Phase::Committing)),
            Phase::Committing
        );
        assert_eq!(asked, 2);
    }
}
