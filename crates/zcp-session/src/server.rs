//! The server: accepts connections, authenticates them, and runs each session's role —
//! receiving beneath its root for a push, sending from beneath its root for a pull.
//!
//! Threads: the accept loop polls the listener; every connection gets a thread that runs its
//! handshake under a deadline. An authenticated control connection becomes a session: its
//! thread reads `Open`, grants limits (a client may only tighten them) and runs the role. An
//! authenticated data connection joins its session: for a push its thread receives the stream
//! ([`crate::receiver::data_loop`]); for a pull it hands the socket to the sending role and
//! ends. A stalled or hostile connection only ever holds its own thread, so it cannot block
//! other sessions. Nothing here prints: events go to a [`ServerReporter`].

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};
use zcp_engine::sync::{Locked, Waits};

use zcp_engine::fs::Root;
use zcp_engine::sys::{random, wait_readable};
use zcp_engine::{RecvEngine, SendEngine};
use zcp_wire::{
    Accepted, Deadline, ErrorCode, Message, Opener, Psk, RelPath, Sealer, SessionId, SessionKeys,
    escape_text,
};

use crate::confine::Scope;
use crate::conn::{ControlRx, ControlTx, FrameReader, read_plain};
use crate::control::ControlWriter;
use crate::error::FrameIoError;
use crate::event::{Failure, FileOutcome, Observer, ServerEvent, ServerReporter};
use crate::manifest::{Top, Walker};
use crate::recv::state::RxConfig;
use crate::recv::{MAX_RECV_BLOCK, RxCore, RxEvent, RxSetup};
use crate::send::{SendSetup, SenderConfig};
use crate::transport::Landing;
use crate::transport::tcp::TcpStreams;

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Everything is written beneath (and, for pulls, read from beneath) this directory.
    pub root: PathBuf,
    /// The pre-shared key.
    pub psk: Psk,
    /// Most data streams per session.
    pub max_streams: u16,
    /// Most sessions at once.
    pub max_sessions: usize,
    /// Most connections still in their handshake at once.
    pub max_pending: usize,
    /// Time a connection has to finish its handshake.
    pub handshake_timeout: Duration,
    /// A session with no traffic for this long is ended.
    pub idle_timeout: Duration,
}

impl ServerConfig {
    /// A configuration with zcp's default limits.
    pub fn new(root: PathBuf, psk: Psk) -> ServerConfig {
        ServerConfig {
            root,
            psk,
            max_streams: 16,
            max_sessions: 16,
            max_pending: 64,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        }
    }
}

struct Ctx {
    cfg: ServerConfig,
    root: Arc<Root>,
    sessions: Mutex<HashMap<SessionId, Arc<Session>>>,
    pending: AtomicUsize,
    reporter: Arc<dyn ServerReporter>,
}

/// A bound server.
pub struct Server {
    listener: TcpListener,
    ctx: Arc<Ctx>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Opens the root and binds `addr`.
    pub fn bind(
        addr: SocketAddr,
        cfg: ServerConfig,
        reporter: Arc<dyn ServerReporter>,
    ) -> Result<Server, crate::SessionError> {
        let root = Arc::new(Root::open(&cfg.root)?);
        let listener = TcpListener::bind(addr).map_err(|source| crate::SessionError::Io {
            what: format!("cannot listen on {addr}"),
            source,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| crate::SessionError::Io {
                what: "listener".into(),
                source,
            })?;
        Ok(Server {
            listener,
            ctx: Arc::new(Ctx {
                cfg,
                root,
                sessions: Mutex::new(HashMap::new()),
                pending: AtomicUsize::new(0),
                reporter,
            }),
        })
    }

    /// The address actually bound (port 0 becomes the kernel's choice).
    pub fn local_addr(&self) -> SocketAddr {
        self.listener
            .local_addr()
            .expect("bound listener has an address")
    }

    /// Serves until `stop` is set. With `once`, returns after the first authenticated session
    /// ends, with its exit code (see [`crate::exit::for_failures`]: 0 only when every entry
    /// arrived); otherwise returns `None` when stopped.
    pub fn run(&self, stop: &AtomicBool, once: bool) -> Option<i32> {
        self.ctx.reporter.event(&ServerEvent::Listening {
            addr: self.local_addr(),
            root: self.ctx.root.path().display().to_string(),
        });
        let (ended_tx, ended_rx) = mpsc::channel::<i32>();
        loop {
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            if once {
                if let Ok(ok) = ended_rx.try_recv() {
                    return Some(ok);
                }
            }
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    let ctx = self.ctx.clone();
                    let ended = ended_tx.clone();
                    let spawned = std::thread::Builder::new()
                        .name(format!("zcp-conn-{peer}"))
                        .spawn(move || handle(ctx, stream, peer, ended));
                    if spawned.is_err() {
                        // Out of threads: the connection closes when the closure is dropped.
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    wait_readable(self.listener.as_fd(), Duration::from_millis(100));
                }
                // EMFILE, ECONNABORTED and friends: transient; keep serving.
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

/// Decrements the pending-handshake count when dropped.
struct PendingSlot<'a>(&'a AtomicUsize, bool);

impl PendingSlot<'_> {
    fn release(&mut self) {
        if self.1 {
            self.0.fetch_sub(1, Ordering::Relaxed);
            self.1 = false;
        }
    }
}

impl Drop for PendingSlot<'_> {
    fn drop(&mut self) {
        self.release();
    }
}

fn reject(ctx: &Ctx, stream: &mut TcpStream, peer: SocketAddr, code: ErrorCode, reason: String) {
    let _ = stream.write_all(
        &Message::Error {
            code,
            message: reason.clone(),
        }
        .encode_frame(),
    );
    let _ = stream.shutdown(Shutdown::Both);
    ctx.reporter.event(&ServerEvent::Rejected { peer, reason });
}

fn handle(ctx: Arc<Ctx>, mut stream: TcpStream, peer: SocketAddr, ended: mpsc::Sender<i32>) {
    let mut slot = PendingSlot(&ctx.pending, true);
    if ctx.pending.fetch_add(1, Ordering::Relaxed) >= ctx.cfg.max_pending {
        let why = "too many connections in their handshake; try again".to_string();
        return reject(&ctx, &mut stream, peer, ErrorCode::Busy, why);
    }
    match handshake(&ctx, &mut stream) {
        Err((code, why)) => reject(&ctx, &mut stream, peer, code, why),
        Ok(Joined::Control(session, sealer, opener, nonces)) => {
            slot.release();
            let ok = run_session(&ctx, &session, stream, peer, sealer, opener, nonces);
            let _ = ended.send(ok);
        }
        Ok(Joined::Data(session, index)) => {
            slot.release();
            session.attach(index, stream);
        }
    }
}

/// An authenticated connection, ready for its loop.
enum Joined {
    /// A new session's control connection, registered and welcomed.
    Control(
        Arc<Session>,
        Sealer,
        Opener,
        (zcp_wire::Nonce, zcp_wire::Nonce),
    ),
    /// A data stream that joined its session, with its index.
    Data(Arc<Session>, u16),
}

fn random_or<const N: usize>(what: &str) -> Result<[u8; N], (ErrorCode, String)> {
    random().map_err(|e| (ErrorCode::Internal, format!("getrandom ({what}): {e}")))
}

/// Runs a connection's handshake under the deadline. Errors carry the code and the reason
/// to send back and log.
fn handshake(ctx: &Ctx, stream: &mut TcpStream) -> Result<Joined, (ErrorCode, String)> {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let deadline = Deadline::new(Instant::now(), ctx.cfg.handshake_timeout);
    let arm = |s: &TcpStream| -> Result<(), (ErrorCode, String)> {
        let left = deadline
            .remaining(Instant::now())
            .map_err(|e| (ErrorCode::Limit, e.to_string()))?;
        s.set_read_timeout(Some(left))
            .and_then(|_| s.set_write_timeout(Some(left)))
            .map_err(|e| (ErrorCode::Internal, e.to_string()))
    };
    let frame_err = |e: FrameIoError| match e {
        FrameIoError::Io(e)
            if matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ) =>
        {
            (
                ErrorCode::Limit,
                format!(
                    "handshake not finished within {:?}",
                    ctx.cfg.handshake_timeout
                ),
            )
        }
        FrameIoError::Closed => (
            ErrorCode::Protocol,
            "closed the connection during the handshake".to_string(),
        ),
        other => (ErrorCode::Protocol, other.to_string()),
    };
    let write = |s: &mut TcpStream, frame: &[u8]| {
        s.write_all(frame)
            .map_err(|e| (ErrorCode::Protocol, e.to_string()))
    };

    arm(stream)?;
    let hello = read_plain(stream).map_err(|e| match e {
        // Whatever fails to decode as the first frame is most likely not zcp at all (an HTTP
        // probe, a port scanner): say so, with the decoder's detail.
        FrameIoError::Decode(_) => {
            let (code, why) = frame_err(e);
            (code, format!("not a zcp client: {why}"))
        }
        other => frame_err(other),
    })?;
    let (state, reply) = zcp_wire::accept(&ctx.cfg.psk, hello, random_or::<32>("nonce")?)
        .map_err(|e| (e.code(), e.to_string()))?;
    write(stream, &reply.encode_frame())?;
    arm(stream)?;
    let msg = read_plain(stream).map_err(frame_err)?;
    if let Message::Error { message, .. } = msg {
        // The client gave up on us (for example: our proof did not match its key). Its words
        // go to the log, escaped.
        return Err((
            ErrorCode::Auth,
            format!("the client gave up: {}", escape_text(&message)),
        ));
    }
    match state {
        Accepted::Control(await_proof) => {
            let session_id: SessionId = random_or::<16>("session id")?;
            let (est, welcome) = await_proof
                .on_proof(msg, session_id, ctx.cfg.max_streams)
                .map_err(|e| (e.code(), e.to_string()))?;
            let session = {
                let mut sessions = ctx.sessions.locked();
                if sessions.len() >= ctx.cfg.max_sessions {
                    return Err((ErrorCode::Busy, "too many sessions; try again later".into()));
                }
                let session = Arc::new(Session::new(session_id, est.keys.clone()));
                sessions.insert(session_id, session.clone());
                session
            };
            if let Err(e) = write(stream, &welcome) {
                ctx.sessions.locked().remove(&session_id);
                return Err(e);
            }
            Ok(Joined::Control(
                session,
                est.sealer,
                est.opener,
                (est.client_nonce, est.server_nonce),
            ))
        }
        Accepted::Data(await_join) => {
            let req = await_join
                .on_join(msg)
                .map_err(|e| (e.code(), e.to_string()))?;
            let session = ctx.sessions.locked().get(&req.session_id).cloned();
            // An unknown session and a bad proof get the same answer: the peer learns nothing
            // about which sessions exist.
            let refused = || {
                (
                    ErrorCode::Auth,
                    "data connection proof does not match any session".to_string(),
                )
            };
            let session = session.ok_or_else(refused)?;
            req.verify(&session.keys).map_err(|_| refused())?;
            session
                .join(req.stream)
                .map_err(|e| (ErrorCode::Limit, e))?;
            write(stream, &Message::DataAccept.encode_frame())?;
            Ok(Joined::Data(session, req.stream))
        }
    }
}

/// What a session's data connections are for, once its `Open` is known.
enum SessionRole {
    /// Not yet known.
    Opening,
    /// Receiving (push): each stream's thread lands its chunks through the role.
    Receive(Arc<RxCore>),
    /// Sending (pull): the sockets wait here for the sending role.
    Send(Vec<Option<TcpStream>>),
    /// Over.
    Closed,
}

/// What the threads of one session share.
struct Session {
    hex: String,
    keys: SessionKeys,
    granted: Mutex<u16>,
    joined: Mutex<Vec<bool>>,
    role: Mutex<SessionRole>,
    changed: Condvar,
    counters: Mutex<Vec<Arc<AtomicU64>>>,
}

impl Session {
    fn new(id: SessionId, keys: SessionKeys) -> Session {
        Session {
            hex: hex::encode(id),
            keys,
            granted: Mutex::new(0),
            joined: Mutex::new(Vec::new()),
            role: Mutex::new(SessionRole::Opening),
            changed: Condvar::new(),
            counters: Mutex::new(Vec::new()),
        }
    }

    fn join(&self, stream: u16) -> Result<(), String> {
        let granted = *self.granted.locked();
        if matches!(*self.role.locked(), SessionRole::Closed) {
            return Err("the session has ended".into());
        }
        let mut joined = self.joined.locked();
        if stream >= granted {
            return Err(format!(
                "stream index {stream} is over the {granted} streams this session was granted"
            ));
        }
        if joined[usize::from(stream)] {
            return Err(format!("stream {stream} already joined this session"));
        }
        joined[usize::from(stream)] = true;
        Ok(())
    }

    fn counter(&self, i: u16) -> Arc<AtomicU64> {
        self.counters.locked()[usize::from(i)].clone()
    }

    /// Hands a joined data connection to the session's role.
    fn attach(&self, index: u16, stream: TcpStream) {
        let mut role = self.role.locked();
        loop {
            match &mut *role {
                SessionRole::Opening => {
                    role = self.changed.wait_for(role, Duration::from_secs(1));
                }
                SessionRole::Receive(core) => {
                    let core: Arc<dyn Landing> = core.clone();
                    drop(role);
                    crate::transport::tcp::land(core, stream, self.counter(index));
                    return;
                }
                SessionRole::Send(slots) => {
                    slots[usize::from(index)] = Some(stream);
                    self.changed.notify_all();
                    return;
                }
                SessionRole::Closed => {
                    let _ = stream.shutdown(Shutdown::Both);
                    return;
                }
            }
        }
    }

    /// For a pull: waits until every granted stream joined; the sockets in index order.
    fn take_send_streams(&self, timeout: Duration) -> Result<Vec<TcpStream>, String> {
        let mut role = self.changed.wait_while_for(
            self.role.locked(),
            timeout,
            |r| matches!(r, SessionRole::Send(s) if s.iter().any(Option::is_none)),
        );
        match &mut *role {
            SessionRole::Send(slots) if slots.iter().all(Option::is_some) => Ok(slots
                .iter_mut()
                .map(|s| s.take().expect("checked"))
                .collect()),
            _ => Err(format!(
                "not every data stream joined within {} s",
                timeout.as_secs()
            )),
        }
    }

    fn set_role(&self, r: SessionRole) {
        *self.role.locked() = r;
        self.changed.notify_all();
    }
}

/// Notices (failed files, refusals, the peer's own notes) logged per session; past this they
/// are counted, and the count is logged when the session ends. A peer cannot flood the log.
const MAX_LOGGED_NOTICES: u64 = 100;
/// Characters of one peer text (a path, a reason) a log line shows at most.
const MAX_LOGGED_TEXT: usize = 300;

/// `text` cut to [`MAX_LOGGED_TEXT`] characters, saying how much was left out.
fn clip(text: String) -> String {
    match text.char_indices().nth(MAX_LOGGED_TEXT) {
        None => text,
        Some((at, _)) => format!("{}... ({} bytes more)", &text[..at], text.len() - at),
    }
}

/// Turns a role's reports into server events, and keeps what the session's exit code needs.
struct ServerObserver<'a> {
    reporter: &'a dyn ServerReporter,
    session: String,
    files: u64,
    /// Failure classes of the entries that failed, in order (the first few), and the first
    /// integrity failure however late it came: what the session's exit code needs.
    failures: Vec<&'static str>,
    /// Notices so far, logged or not.
    notices: u64,
}

impl ServerObserver<'_> {
    /// The session ended: what was not logged is counted.
    fn finish(&mut self) {
        if self.notices > MAX_LOGGED_NOTICES {
            self.reporter.event(&ServerEvent::Note {
                session: self.session.clone(),
                message: format!(
                    "{} more notices in this session not logged",
                    self.notices - MAX_LOGGED_NOTICES
                ),
            });
        }
    }

    fn failed(&mut self, code: &'static str) {
        let integrity = |c: &str| matches!(c, "verify" | "source-changed");
        if self.failures.len() < 64
            || (integrity(code) && !self.failures.iter().any(|c| integrity(c)))
        {
            self.failures.push(code);
        }
    }
}

impl Observer for ServerObserver<'_> {
    fn engines(&mut self, _: &str, _: Option<&str>, _: &str, _: Option<&str>) {}

    fn file_done(&mut self, d: FileOutcome) {
        match d.failure {
            None => {
                self.files += 1;
                self.reporter.event(&ServerEvent::FileDone {
                    session: self.session.clone(),
                    target: clip(d.path),
                    bytes: d.bytes,
                    skipped: d.skipped,
                    seconds: d.seconds,
                    engine: d.engine,
                    verified: d.verified,
                    stored: d.stored,
                });
            }
            Some(f) => {
                // A failed file is a notice too: counted against the log's cap, clipped.
                self.failed(f.code);
                self.notices += 1;
                if self.notices > MAX_LOGGED_NOTICES {
                    return;
                }
                self.reporter.event(&ServerEvent::FileFailed {
                    session: self.session.clone(),
                    target: clip(if f.path.is_empty() { d.path } else { f.path }),
                    reason: clip(f.message),
                })
            }
        }
    }

    fn notice(&mut self, failure: Option<Failure>, note: Option<String>) {
        if let Some(f) = &failure {
            self.failed(f.code);
        }
        self.notices += 1;
        if self.notices > MAX_LOGGED_NOTICES {
            return;
        }
        if let Some(f) = failure {
            self.reporter.event(&ServerEvent::FileFailed {
                session: self.session.clone(),
                target: clip(f.path),
                reason: clip(f.message),
            });
        }
        if let Some(message) = note {
            self.reporter.event(&ServerEvent::Note {
                session: self.session.clone(),
                message: clip(message),
            });
        }
    }

    fn tick(&mut self) {}
}

/// Reads the next message on the control connection within `limit`.
/// The next message on the control connection, before `until` (what a client must send
/// before the role starts — `Open`, the `Get`s — comes within one handshake timeout).
fn next_message(rx: &mut ControlRx, until: Instant) -> Result<Message, String> {
    loop {
        match rx.poll() {
            Ok(Some(m)) => return Ok(m),
            Ok(None) if Instant::now() > until => {
                return Err(
                    "the client did not finish its request within the handshake timeout".into(),
                );
            }
            Ok(None) => {}
            Err(e) => return Err(format!("control connection: {e}")),
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run_session(
    ctx: &Ctx,
    session: &Arc<Session>,
    stream: TcpStream,
    peer: SocketAddr,
    sealer: Sealer,
    opener: Opener,
    nonces: (zcp_wire::Nonce, zcp_wire::Nonce),
) -> i32 {
    let mut files = 0;
    let mut bytes = 0;
    let mut observer = ServerObserver {
        reporter: &*ctx.reporter,
        session: session.hex.clone(),
        files: 0,
        failures: Vec::new(),
        notices: 0,
    };
    let result = (|| -> Result<u64, String> {
        let read_half = stream.try_clone().map_err(|e| e.to_string())?;
        stream
            .set_write_timeout(Some(ctx.cfg.idle_timeout))
            .map_err(|e| e.to_string())?;
        read_half
            .set_read_timeout(Some(Duration::from_millis(250)))
            .map_err(|e| e.to_string())?;
        let mut rx = ControlRx {
            stream: read_half,
            opener,
            reader: FrameReader::default(),
        };
        let ctl = Arc::new(ControlWriter::new(ControlTx { stream, sealer }));
        let refuse = |code: ErrorCode, m: String| {
            ctl.send_error(code, &m);
            m
        };
        let open = match next_message(&mut rx, Instant::now() + ctx.cfg.handshake_timeout)? {
            Message::Open(o) => o,
            other => {
                return Err(refuse(
                    ErrorCode::Protocol,
                    format!("expected Open, got {}", other.name()),
                ));
            }
        };
        let recv = RecvEngine::parse(&open.recv_engine).ok_or_else(|| {
            let names: Vec<_> = RecvEngine::ALL.iter().map(|e| e.name()).collect();
            refuse(
                ErrorCode::Protocol,
                format!(
                    "unknown receiver engine '{}' (known: {})",
                    open.recv_engine,
                    names.join(", ")
                ),
            )
        })?;
        let send = SendEngine::parse(&open.send_engine).ok_or_else(|| {
            let names: Vec<_> = SendEngine::ALL.iter().map(|e| e.name()).collect();
            refuse(
                ErrorCode::Protocol,
                format!(
                    "unknown sender engine '{}' (known: {})",
                    open.send_engine,
                    names.join(", ")
                ),
            )
        })?;
        if u64::from(open.block_size) > MAX_RECV_BLOCK {
            return Err(refuse(
                ErrorCode::Limit,
                format!(
                    "block size {} is over the server's limit of {MAX_RECV_BLOCK}",
                    open.block_size
                ),
            ));
        }
        if open.chunk_size != 0 {
            zcp_wire::ChunkPlan::new(0, open.chunk_size)
                .map_err(|e| refuse(ErrorCode::Limit, e.to_string()))?;
        }
        // A client may only tighten the server's limits.
        let streams = open.streams.clamp(1, ctx.cfg.max_streams);
        let idle = match open.idle_ms {
            0 => ctx.cfg.idle_timeout,
            ms => Duration::from_millis(u64::from(ms)).min(ctx.cfg.idle_timeout),
        };
        *session.granted.locked() = streams;
        *session.joined.locked() = vec![false; usize::from(streams)];
        *session.counters.locked() = (0..streams).map(|_| Arc::new(AtomicU64::new(0))).collect();
        ctx.reporter.event(&ServerEvent::SessionStart {
            peer,
            session: session.hex.clone(),
            direction: if open.pull { "pull" } else { "push" },
            streams,
        });
        if !open.pull {
            let (wake, events) = mpsc::channel::<RxEvent>();
            let core = RxCore::new(RxSetup {
                cfg: RxConfig {
                    requested: recv,
                    block: u64::from(open.block_size),
                    idle,
                    sender_engine: send.name().into(),
                },
                keys: session.keys.clone(),
                nonces,
                root: ctx.root.clone(),
                scope: Scope::push(),
                streams,
                ctl: ctl.clone(),
                wake: wake.clone(),
            });
            session.set_role(SessionRole::Receive(core.clone()));
            ctl.send(&Message::Opened {
                streams,
                idle_ms: idle.as_millis() as u32,
            })?;
            // The data streams join on their own connections' threads (`attach`).
            let r = crate::recv::run(core.clone(), (wake, events), rx, None, &mut observer);
            let (totals, _) = r.map_err(|e| e.to_string())?;
            files = totals.files;
            bytes = totals.peer.bytes.max(core.bytes());
            Ok(totals.entries)
        } else {
            session.set_role(SessionRole::Send((0..streams).map(|_| None).collect()));
            ctl.send(&Message::Opened {
                streams,
                idle_ms: idle.as_millis() as u32,
            })?;
            // The paths come before the walk: read them now, all within one handshake timeout.
            let gets_until = Instant::now() + ctx.cfg.handshake_timeout;
            let mut tops = Vec::new();
            loop {
                match next_message(&mut rx, gets_until)? {
                    Message::Get { path, dest } => {
                        tops.push(get_top(&ctx.root, &path, &dest).map_err(|(c, m)| refuse(c, m))?)
                    }
                    Message::GetEnd => break,
                    other => {
                        return Err(refuse(
                            ErrorCode::Protocol,
                            format!("expected Get, got {}", other.name()),
                        ));
                    }
                }
                if tops.len() > 4096 {
                    return Err(refuse(
                        ErrorCode::Limit,
                        "more than 4096 paths in one get".into(),
                    ));
                }
            }
            let data = session.take_send_streams(ctx.cfg.handshake_timeout.max(idle))?;
            let counters = session.counters.locked().clone();
            let setup = SendSetup {
                cfg: SenderConfig {
                    engine: send,
                    block: u64::from(open.block_size),
                    chunk_size: (open.chunk_size != 0).then_some(open.chunk_size),
                    idle,
                },
                ctl: ctl.clone(),
                rx,
                keys: session.keys.clone(),
                nonces,
                psk: ctx.cfg.psk.clone(),
                transport: Box::new(TcpStreams::new(data, counters.clone())),
                peer: peer.to_string(),
            };
            let walker = Walker::new(tops, open.recursive);
            let r = crate::send::run(setup, walker, &mut observer).map(|(t, _)| t);
            let totals = r.map_err(|e| e.to_string())?;
            files = totals.files;
            bytes = counters.iter().map(|c| c.load(Ordering::Relaxed)).sum();
            Ok(totals.entries)
        }
    })();
    session.set_role(SessionRole::Closed);
    ctx.sessions
        .locked()
        .retain(|_, s| !Arc::ptr_eq(s, session));
    observer.finish();
    let stored = match &result {
        Ok(entries) => files + entries > 0,
        Err(_) => false,
    };
    let mut reason = result.as_ref().err().map(|r| escape_text(r));
    if result.is_ok() && !stored && observer.failures.is_empty() {
        // Nothing requested arrived, and nothing failed either: no success to report.
        reason = Some("the session ended without storing or sending anything".into());
    }
    let code = match (&result, &reason) {
        (Ok(_), None) => crate::exit::for_failures(observer.failures.iter().copied(), stored),
        _ => crate::exit::FAILURE,
    };
    ctx.reporter.event(&ServerEvent::SessionEnd {
        session: session.hex.clone(),
        ok: reason.is_none(),
        reason,
        files,
        bytes,
    });
    code
}

/// Where a pulled path starts: its directory resolved beneath the root now (never through a
/// symlink), so a path that is not there is refused before the session; reopened by the walk.
fn get_top(root: &Arc<Root>, path: &[u8], dest: &[u8]) -> Result<Top, (ErrorCode, String)> {
    let p = RelPath::parse(path).map_err(|e| (ErrorCode::BadPath, e.to_string()))?;
    let Some((last, parent)) = p.components().split_last() else {
        return Err((
            ErrorCode::BadPath,
            "name a path below the server root, not the root itself".into(),
        ));
    };
    root.open_dir(parent, false)
        .map_err(|e| (ErrorCode::BadPath, format!("source {e} on the server")))?;
    let dest = if dest.is_empty() {
        last.clone()
    } else {
        dest.to_vec()
    };
    RelPath::parse(&dest).map_err(|e| (ErrorCode::BadPath, e.to_string()))?;
    Ok(Top::Beneath {
        root: root.clone(),
        parent: parent.to_vec(),
        name: last.clone(),
        dest,
        display: path.to_vec(),
    })
}
