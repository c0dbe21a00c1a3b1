//! The client: `zcp send` (push: the client sends) and `zcp get` (pull: the server sends).
//!
//! Both connect, authenticate, ask for a session with `Open`, open the data streams the server
//! granted (the client always connects, so a firewall need only let one port in), and then
//! run a role: the [`crate::sender`] for a push, the [`crate::receiver`] for a pull. A
//! [`ClientObserver`] turns what the role reports into [`Event`]s, adds the interval reports
//! from the streams' counters and `TCP_INFO`, and builds the [`Summary`].

use std::net::TcpStream;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use zcp_engine::fs::Root;
use zcp_engine::sys::{process_usage, random, tcp_info, thread_usage};
use zcp_engine::{RecvEngine, SendEngine};
use zcp_wire::{ErrorCode, Message, Open, Psk, escape, escape_text};

use crate::confine::{Requested, Scope};
use crate::conn::{ClientSession, authenticate, connect, open_data};
use crate::control::ControlWriter;
use crate::error::{FrameIoError, SessionError};
use crate::event::{
    Cpu, Event, Failure, FileOutcome, Interval, Observer, Reporter, Start, StreamInterval, Summary,
};
use crate::manifest::{Top, Walker, join};
use crate::recv::state::RxConfig;
use crate::recv::{RxCore, RxEvent, RxSetup};
use crate::send::{SendSetup, SenderConfig};
use crate::transport::tcp::TcpStreams;

/// Failures kept in a summary (all are counted).
const MAX_FAILURES_KEPT: usize = 100;

/// Connection settings shared by `send` and `get`.
#[derive(Debug, Clone)]
pub struct Connection {
    /// Server host name or address.
    pub host: String,
    /// Server port.
    pub port: u16,
    /// The pre-shared key.
    pub psk: Psk,
    /// Time allowed to connect and authenticate.
    pub connect_timeout: Duration,
    /// A transfer with no progress and no word from the peer for this long fails.
    pub idle_timeout: Duration,
}

/// How bytes move, shared by `send` and `get`.
#[derive(Debug, Clone)]
pub struct Transfer {
    /// Sender engine to try first.
    pub engine: SendEngine,
    /// Receiver engine to ask for.
    pub recv_engine: RecvEngine,
    /// Bytes per engine call (0: each engine's default), on both sides.
    pub block_size: u64,
    /// Chunk size; `None` picks one per file from its size.
    pub chunk_size: Option<u64>,
    /// Data streams to ask for.
    pub streams: u16,
    /// Descend into directories.
    pub recursive: bool,
    /// Interval between reports; `None` for none.
    pub interval: Option<Duration>,
}

/// `zcp send`: what to send and where.
#[derive(Debug, Clone)]
pub struct SendOptions {
    /// How to reach the server.
    pub conn: Connection,
    /// How to move the bytes.
    pub transfer: Transfer,
    /// Files and directories to send.
    pub sources: Vec<PathBuf>,
    /// Destination relative to the server root (raw bytes).
    pub dest: Vec<u8>,
}

/// `zcp get`: what to fetch and where to put it.
#[derive(Debug, Clone)]
pub struct GetOptions {
    /// How to reach the server.
    pub conn: Connection,
    /// How to move the bytes.
    pub transfer: Transfer,
    /// Paths relative to the server root.
    pub paths: Vec<Vec<u8>>,
    /// Local destination: a directory (created if missing), or for one path a new name.
    pub dest: PathBuf,
}

/// Turns a role's reports into events, and adds intervals.
struct ClientObserver<'a> {
    reporter: &'a mut dyn Reporter,
    start: Option<Start>,
    t0: Instant,
    interval: Option<Duration>,
    last_tick: Instant,
    counters: Vec<Arc<AtomicU64>>,
    socks: Vec<TcpStream>,
    at_tick: Vec<(u64, u32)>,
    first_retrans: Vec<u32>,
    failures: Vec<Failure>,
    failed: u64,
    skipped: u64,
    files: u64,
    bytes: u64,
    verified: bool,
    stored: bool,
    digest: Option<[u8; 32]>,
    receiver_engine: Option<String>,
    sender_engine: Option<String>,
    /// Notices and failures that came before the engines were known; shown right after the
    /// `Start` they would otherwise have forced out early.
    early: Vec<Event>,
}

/// Early events kept before `Start` at most; more force it out.
const MAX_EARLY: usize = 1000;

impl<'a> ClientObserver<'a> {
    fn new(
        reporter: &'a mut dyn Reporter,
        start: Start,
        interval: Option<Duration>,
        streams: &[TcpStream],
        counters: Vec<Arc<AtomicU64>>,
    ) -> Self {
        let socks: Vec<TcpStream> = streams.iter().filter_map(|s| s.try_clone().ok()).collect();
        let first_retrans: Vec<u32> = socks
            .iter()
            .map(|s| tcp_info(s).map_or(0, |t| t.total_retrans))
            .collect();
        let now = Instant::now();
        ClientObserver {
            reporter,
            start: Some(start),
            t0: now,
            interval,
            last_tick: now,
            at_tick: first_retrans.iter().map(|r| (0, *r)).collect(),
            first_retrans,
            counters,
            socks,
            failures: Vec::new(),
            failed: 0,
            skipped: 0,
            files: 0,
            bytes: 0,
            verified: true,
            stored: true,
            digest: None,
            receiver_engine: None,
            sender_engine: None,
            early: Vec::new(),
        }
    }

    /// Shows `e` now, or keeps it until `Start` is out.
    fn emit(&mut self, e: Event) {
        if self.start.is_some() && self.early.len() < MAX_EARLY {
            self.early.push(e);
        } else {
            self.flush_start();
            self.reporter.event(&e);
        }
    }

    /// Emits the pending `Start` (once), then what waited for it; intervals count from here.
    fn flush_start(&mut self) {
        if let Some(s) = self.start.take() {
            self.reporter.event(&Event::Start(s));
            for e in std::mem::take(&mut self.early) {
                self.reporter.event(&e);
            }
            self.t0 = Instant::now();
            self.last_tick = self.t0;
        }
    }

    fn interval(&mut self, now: Instant) {
        let mut streams = Vec::with_capacity(self.counters.len());
        for (i, c) in self.counters.iter().enumerate() {
            let bytes = c.load(Ordering::Relaxed);
            let tcp = self.socks.get(i).and_then(tcp_info);
            let (b0, r0) = self.at_tick[i];
            let retrans = tcp.map_or(r0, |t| t.total_retrans);
            streams.push(StreamInterval {
                id: i as u16,
                bytes: bytes - b0,
                tcp,
                retransmits: retrans.saturating_sub(r0),
            });
            self.at_tick[i] = (bytes, retrans);
        }
        self.reporter.event(&Event::Interval(Interval {
            start: self.last_tick.duration_since(self.t0).as_secs_f64(),
            end: now.duration_since(self.t0).as_secs_f64(),
            streams,
        }));
        self.last_tick = now;
    }

    /// The final partial interval, ending when the data did, when anything moved since the
    /// last one.
    fn last_interval(&mut self, end: Instant) {
        if self.interval.is_some() && self.start.is_none() {
            let moved = self
                .counters
                .iter()
                .enumerate()
                .any(|(i, c)| c.load(Ordering::Relaxed) != self.at_tick[i].0);
            if moved {
                self.interval(end.max(self.last_tick));
            }
        }
    }

    fn retransmits(&self) -> u32 {
        self.socks
            .iter()
            .zip(&self.first_retrans)
            .map(|(s, r0)| tcp_info(s).map_or(0, |t| t.total_retrans.saturating_sub(*r0)))
            .sum()
    }

    fn record_failure(&mut self, f: Failure) {
        self.failed += 1;
        if self.failures.len() < MAX_FAILURES_KEPT {
            self.failures.push(f.clone());
        }
        self.emit(Event::Failed(f));
    }
}

impl Observer for ClientObserver<'_> {
    fn engines(
        &mut self,
        sender: &str,
        sender_note: Option<&str>,
        receiver: &str,
        receiver_note: Option<&str>,
    ) {
        self.receiver_engine = Some(receiver.to_string());
        self.sender_engine = Some(sender.to_string());
        if let Some(s) = self.start.as_mut() {
            s.sender_engine = sender.to_string();
            s.sender_note = sender_note.map(str::to_string);
            s.receiver_engine = receiver.to_string();
            s.receiver_note = receiver_note.map(str::to_string);
            s.verify = receiver != RecvEngine::Null.name();
        }
        self.flush_start();
    }

    fn file_done(&mut self, done: FileOutcome) {
        match done.failure {
            Some(mut f) => {
                if f.path.is_empty() {
                    f.path = done.path;
                }
                self.record_failure(f);
            }
            None => {
                self.files += 1;
                self.bytes += done.bytes;
                self.skipped += done.skipped;
                self.verified &= done.verified;
                self.stored &= done.stored;
                self.digest = (self.files == 1 && done.verified).then_some(done.digest);
                // A file kept whole (an existing target proven equal) is counted in the
                // summary's resumed bytes; a line each would bury a re-run tree's output.
                if done.skipped > 0 && done.skipped < done.bytes {
                    self.emit(Event::Notice(format!(
                        "{}: resumed; {} bytes were already on the receiver and not sent again",
                        done.path, done.skipped
                    )));
                }
            }
        }
    }

    fn notice(&mut self, failure: Option<Failure>, note: Option<String>) {
        if let Some(f) = failure {
            self.record_failure(f);
        }
        if let Some(n) = note {
            self.emit(Event::Notice(n));
        }
    }

    fn tick(&mut self) {
        if self.start.is_some() {
            return;
        }
        if let Some(i) = self.interval {
            let now = Instant::now();
            if now >= self.last_tick + i {
                self.interval(now);
            }
        }
    }
}

/// An open session: the control connection, the data streams, what was granted.
struct Opened {
    cs: ClientSession,
    streams: u16,
    idle: Duration,
    data: Vec<TcpStream>,
    /// Said when the server allows fewer streams than asked for.
    capped: Option<String>,
}

/// Connects, authenticates and opens the session and its data streams. A server that grants
/// more streams than asked for (or none, or no idle time) breaks the protocol: nothing is
/// opened for it.
fn open_session(conn: &Connection, mut open: Open) -> Result<Opened, SessionError> {
    let control = connect(&conn.host, conn.port, conn.connect_timeout)?;
    control.set_read_timeout(Some(conn.connect_timeout)).ok();
    control.set_write_timeout(Some(conn.connect_timeout)).ok();
    let nonce = random().map_err(|source| SessionError::Io {
        what: "getrandom".into(),
        source,
    })?;
    let mut cs = authenticate(control, conn.psk.clone(), nonce)?;
    let peer = cs.peer.to_string();
    // The server said its limit in Welcome; ask for no more, and say so.
    let wanted = open.streams.max(1);
    open.streams = wanted.min(cs.max_streams.max(1));
    let capped = (open.streams < wanted).then(|| {
        format!(
            "asked for {wanted} streams; the server allows at most {}, so {} are used",
            cs.max_streams, open.streams
        )
    });
    let asked_streams = open.streams;
    cs.tx
        .send(&Message::Open(open))
        .map_err(|e| FrameIoError::from(e).into_session(&peer))?;
    cs.rx
        .stream
        .set_read_timeout(Some(Duration::from_millis(250)))
        .ok();
    let asked = Instant::now();
    let (streams, idle_ms) = loop {
        match cs.rx.poll().map_err(|e| e.into_session(&peer))? {
            Some(Message::Opened { streams, idle_ms }) => break (streams, idle_ms),
            Some(Message::Error { code, message }) => {
                return Err(SessionError::Refused {
                    code,
                    message: escape_text(&message),
                });
            }
            Some(other) => {
                return Err(SessionError::Protocol {
                    peer,
                    reason: format!("expected Opened, got {}", other.name()),
                });
            }
            None if asked.elapsed() > conn.connect_timeout => {
                return Err(SessionError::Connection {
                    peer,
                    reason: "no answer to Open within the timeout".into(),
                });
            }
            None => {}
        }
    };
    let granted_wrong = match (streams, idle_ms) {
        (0, _) => Some("the server granted no data streams".to_string()),
        (n, _) if n > asked_streams => Some(format!(
            "the server granted {n} data streams, more than the {asked_streams} asked for"
        )),
        (_, 0) => Some("the server granted an idle timeout of 0".to_string()),
        _ => None,
    };
    if let Some(reason) = granted_wrong {
        let _ = cs.tx.send(&Message::Error {
            code: ErrorCode::Protocol,
            message: reason.clone(),
        });
        return Err(SessionError::Protocol { peer, reason });
    }
    let idle = Duration::from_millis(u64::from(idle_ms)).min(conn.idle_timeout);
    let mut data = Vec::with_capacity(usize::from(streams));
    for i in 0..streams {
        let nonce = random().map_err(|source| SessionError::Io {
            what: "getrandom".into(),
            source,
        })?;
        let s = open_data(
            cs.peer,
            &cs.keys,
            cs.session_id,
            i,
            nonce,
            conn.connect_timeout,
        )?;
        s.set_read_timeout(Some(idle)).ok();
        zcp_engine::sys::set_socket_timeouts(&s, Some(idle)).ok();
        data.push(s);
    }
    cs.tx.stream.set_write_timeout(Some(idle)).ok();
    Ok(Opened {
        cs,
        streams,
        idle,
        data,
        capped,
    })
}

fn start_event(
    cs: &ClientSession,
    direction: &'static str,
    source: String,
    target: String,
    size: Option<u64>,
    t: &Transfer,
    streams: u16,
) -> Start {
    Start {
        local: cs.local,
        remote: cs.peer,
        session: hex::encode(cs.session_id),
        direction,
        source,
        target,
        size,
        chunk_size: t.chunk_size.unwrap_or(0),
        block_size: t.block_size,
        streams,
        sender_engine: t.engine.name().into(),
        sender_note: None,
        receiver_engine: t.recv_engine.name().into(),
        receiver_note: None,
        verify: t.recv_engine != RecvEngine::Null,
    }
}

fn open_message(t: &Transfer, pull: bool, idle: Duration) -> Open {
    Open {
        pull,
        recursive: t.recursive,
        streams: t.streams.max(1),
        idle_ms: idle.as_millis().min(u128::from(u32::MAX)) as u32,
        recv_engine: t.recv_engine.name().into(),
        send_engine: t.engine.name().into(),
        block_size: t.block_size.min(u64::from(u32::MAX)) as u32,
        chunk_size: t.chunk_size.unwrap_or(0),
    }
}

/// Where the walk of a send starts: one regular file is sent scp-style (the destination may
/// name the file); anything else goes into the destination as a directory. Also says which.
pub(crate) fn send_tops(sources: &[PathBuf], dest: &[u8]) -> (Vec<Top>, bool) {
    let lone_file = sources.len() == 1 && std::fs::metadata(&sources[0]).is_ok_and(|m| m.is_file());
    if lone_file {
        let top = Top::Local {
            path: sources[0].clone(),
            dest: dest.to_vec(),
            name: basename(&sources[0]),
        };
        return (vec![top], true);
    }
    let mut v = Vec::new();
    if dest != b"." {
        v.push(Top::Dir {
            dest: dest.to_vec(),
        });
    }
    for s in sources {
        v.push(Top::Local {
            path: s.clone(),
            dest: join(dest, &basename(s)),
            name: Vec::new(),
        });
    }
    (v, false)
}

fn basename(p: &Path) -> Vec<u8> {
    p.file_name()
        .map(|n| n.as_bytes().to_vec())
        .unwrap_or_else(|| b".".to_vec())
}

/// Sends files and trees; returns once every entry is committed or failed and the session
/// has ended. The summary is also pushed to `reporter`.
pub fn send(opts: &SendOptions, reporter: &mut dyn Reporter) -> Result<Summary, SessionError> {
    let t = &opts.transfer;
    zcp_wire::RelPath::parse(&opts.dest).map_err(|e| {
        SessionError::Usage(format!("invalid destination '{}': {e}", escape(&opts.dest)))
    })?;
    if opts.sources.is_empty() {
        return Err(SessionError::Source {
            path: String::new(),
            reason: "nothing to send".into(),
        });
    }
    // What cannot be sent at all is said before connecting.
    for s in &opts.sources {
        let shown = escape(s.as_os_str().as_bytes());
        let m = std::fs::metadata(s).map_err(|e| SessionError::Source {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        if m.is_dir() && !t.recursive {
            return Err(SessionError::Source {
                path: shown,
                reason: "is a directory; send directories with -r".into(),
            });
        }
        if !m.is_dir() && !m.is_file() {
            return Err(SessionError::Source {
                path: shown,
                reason: "is not a regular file or directory (device, FIFO or socket)".into(),
            });
        }
    }
    let (tops, lone_file) = send_tops(&opts.sources, &opts.dest);
    let size = if lone_file {
        std::fs::metadata(&opts.sources[0]).ok().map(|m| m.len())
    } else {
        None
    };
    let source_shown: Vec<String> = opts
        .sources
        .iter()
        .map(|p| escape(p.as_os_str().as_bytes()))
        .collect();

    let usage0 = thread_usage();
    let Opened {
        cs,
        streams,
        idle,
        data,
        capped,
    } = open_session(&opts.conn, open_message(t, false, opts.conn.idle_timeout))?;
    let peer = cs.peer.to_string();
    let counters: Vec<Arc<AtomicU64>> = (0..streams).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let start = start_event(
        &cs,
        "send",
        source_shown.join(" "),
        escape(&opts.dest),
        size,
        t,
        streams,
    );
    let mut obs = ClientObserver::new(reporter, start, t.interval, &data, counters.clone());
    obs.notice(None, capped);
    let ClientSession {
        tx,
        rx,
        keys,
        nonces,
        ..
    } = cs;
    let setup = SendSetup {
        cfg: SenderConfig {
            engine: t.engine,
            block: t.block_size,
            chunk_size: t.chunk_size,
            idle,
        },
        ctl: Arc::new(ControlWriter::new(tx)),
        rx,
        keys,
        nonces,
        psk: opts.conn.psk.clone(),
        transport: Box::new(TcpStreams::new(data, counters.clone())),
        peer,
    };
    let walker = Walker::new(tops, t.recursive);
    let (totals, reader_usage) = crate::send::run(setup, walker, &mut obs)?;
    obs.flush_start();
    obs.last_interval(totals.send_end.unwrap_or_else(Instant::now));
    let mut usage = thread_usage().since(&usage0);
    usage.add(&reader_usage);
    usage.add(&totals.usage);
    let end = totals.last_commit.unwrap_or_else(Instant::now);
    let summary = Summary {
        bytes: obs.bytes,
        bytes_sent: counters.iter().map(|c| c.load(Ordering::Relaxed)).sum(),
        bytes_skipped: obs.skipped,
        files: obs.files,
        entries: totals.entries,
        resent_chunks: totals.resent,
        seconds: end.saturating_duration_since(obs.t0).as_secs_f64(),
        send_seconds: totals
            .send_end
            .unwrap_or(end)
            .saturating_duration_since(obs.t0)
            .as_secs_f64(),
        sender_engine: totals.engine.unwrap_or(t.engine).name().into(),
        receiver_engine: totals
            .receiver_engine
            .clone()
            .unwrap_or_else(|| t.recv_engine.name().into()),
        sender_cpu: Cpu::new(usage.user, usage.sys),
        sender_data_cpu: Cpu::new(totals.data_usage.user, totals.data_usage.sys),
        receiver_cpu: Cpu::new(
            Duration::from_micros(totals.peer.cpu_user_us),
            Duration::from_micros(totals.peer.cpu_sys_us),
        ),
        sender_max_rss: process_usage().max_rss_bytes,
        receiver_max_rss: totals.peer.max_rss_bytes,
        retransmits: obs.retransmits(),
        verified: obs.files > 0 && obs.verified,
        stored: obs.files > 0 && obs.stored,
        digest: obs.digest.map(hex::encode),
        target: escape(&opts.dest),
        failed: obs.failed,
        failures: obs.failures.clone(),
    };
    obs.reporter.event(&Event::Summary(summary.clone()));
    Ok(summary)
}

/// Fetches paths from the server; returns once every entry is committed or failed and the
/// session has ended. The summary is also pushed to `reporter`.
pub fn get(opts: &GetOptions, reporter: &mut dyn Reporter) -> Result<Summary, SessionError> {
    let t = &opts.transfer;
    if opts.paths.is_empty() {
        return Err(SessionError::Source {
            path: String::new(),
            reason: "nothing to get".into(),
        });
    }
    for p in &opts.paths {
        let rel = zcp_wire::RelPath::parse(p)
            .map_err(|e| SessionError::Usage(format!("cannot fetch '{}': {e}", escape(p))))?;
        if rel.components().is_empty() {
            return Err(SessionError::Usage(format!(
                "cannot fetch '{}': name a path below the server root, not the root itself",
                escape(p)
            )));
        }
    }
    // One path into something that is not a directory: that is its new name. Otherwise
    // everything goes into the destination directory, made if missing.
    let dest_is_dir = opts.dest.is_dir() || opts.dest.as_os_str().as_bytes().ends_with(b"/");
    let one_new_name = opts.paths.len() == 1 && !dest_is_dir;
    let names: Vec<Vec<u8>> = if one_new_name {
        vec![basename(&opts.dest)]
    } else {
        opts.paths
            .iter()
            .map(|p| basename(Path::new(std::ffi::OsStr::from_bytes(p))))
            .collect()
    };
    // The names are ours: the server may send these and (with -r) what is beneath them,
    // nothing else.
    for n in &names {
        zcp_wire::RelPath::check_name(n).map_err(|e| {
            SessionError::Usage(format!(
                "cannot fetch into {}: {e}",
                escape(opts.dest.as_os_str().as_bytes())
            ))
        })?;
    }
    let root_path = if one_new_name {
        opts.dest
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
            .to_path_buf()
    } else {
        opts.dest.clone()
    };
    let scope = Scope::pull(Requested {
        names: names.clone(),
        recursive: t.recursive,
    });
    // A destination directory that is not there yet is made only once the server answered:
    // a refused or failed connection leaves nothing behind.
    let early = (one_new_name || root_path.is_dir())
        .then(|| Root::open(&root_path))
        .transpose()?;
    let usage0 = thread_usage();
    let Opened {
        cs,
        streams,
        idle,
        data,
        capped,
    } = open_session(&opts.conn, open_message(t, true, opts.conn.idle_timeout))?;
    let root = Arc::new(match early {
        Some(root) => root,
        None => {
            std::fs::create_dir_all(&root_path).map_err(|source| SessionError::Io {
                what: format!("creating {}", root_path.display()),
                source,
            })?;
            Root::open(&root_path)?
        }
    });
    let counters: Vec<Arc<AtomicU64>> = (0..streams).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let shown: Vec<String> = opts.paths.iter().map(|p| escape(p)).collect();
    let start = start_event(
        &cs,
        "get",
        shown.join(" "),
        escape(opts.dest.as_os_str().as_bytes()),
        None,
        t,
        streams,
    );
    let mut obs = ClientObserver::new(reporter, start, t.interval, &data, counters.clone());
    obs.notice(None, capped);
    let ClientSession {
        tx,
        rx,
        keys,
        nonces,
        ..
    } = cs;
    let ctl = Arc::new(ControlWriter::new(tx));
    let cork = ctl.cork();
    for (path, name) in opts.paths.iter().zip(names) {
        ctl.send(&Message::Get {
            path: path.clone(),
            dest: name,
        })
        .map_err(|reason| SessionError::Connection {
            peer: "the server".into(),
            reason,
        })?;
    }
    ctl.send(&Message::GetEnd)
        .map_err(|reason| SessionError::Connection {
            peer: "the server".into(),
            reason,
        })?;
    drop(cork);
    let (wake, events) = mpsc::channel::<RxEvent>();
    let core = RxCore::new(RxSetup {
        cfg: RxConfig {
            requested: t.recv_engine,
            block: t.block_size,
            idle,
            sender_engine: t.engine.name().into(),
        },
        keys,
        nonces,
        root,
        scope,
        streams,
        ctl,
        wake: wake.clone(),
    });
    let transport = Box::new(TcpStreams::new(data, counters.clone()));
    let (totals, mut reader_usage) =
        crate::recv::run(core, (wake, events), rx, Some(transport), &mut obs)?;
    obs.flush_start();
    obs.last_interval(Instant::now());
    reader_usage.add(&thread_usage().since(&usage0));
    let mut usage = totals.usage;
    usage.add(&reader_usage);
    let end = Instant::now();
    let summary = Summary {
        bytes: obs.bytes,
        bytes_sent: counters.iter().map(|c| c.load(Ordering::Relaxed)).sum(),
        bytes_skipped: obs.skipped,
        files: obs.files,
        entries: totals.entries,
        resent_chunks: 0,
        seconds: end.saturating_duration_since(obs.t0).as_secs_f64(),
        send_seconds: end.saturating_duration_since(obs.t0).as_secs_f64(),
        sender_engine: obs
            .sender_engine
            .clone()
            .unwrap_or_else(|| t.engine.name().into()),
        receiver_engine: obs
            .receiver_engine
            .clone()
            .unwrap_or_else(|| t.recv_engine.name().into()),
        sender_cpu: Cpu::new(
            Duration::from_micros(totals.peer.cpu_user_us),
            Duration::from_micros(totals.peer.cpu_sys_us),
        ),
        sender_data_cpu: Cpu::default(),
        receiver_cpu: Cpu::new(usage.user, usage.sys),
        sender_max_rss: totals.peer.max_rss_bytes,
        receiver_max_rss: process_usage().max_rss_bytes,
        retransmits: obs.retransmits(),
        verified: obs.files > 0 && obs.verified,
        stored: obs.files > 0 && obs.stored,
        digest: obs.digest.map(hex::encode),
        target: escape(opts.dest.as_os_str().as_bytes()),
        failed: obs.failed,
        failures: obs.failures.clone(),
    };
    obs.reporter.event(&Event::Summary(summary.clone()));
    Ok(summary)
}
