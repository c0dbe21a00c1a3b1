//! The receiving server: accepts connections, authenticates them, runs each session's control
//! connection and data streams on their own threads, and stores files beneath its root.
//!
//! Threads: the accept loop polls the listener; every connection gets a thread that runs its
//! handshake under a deadline. An authenticated control connection becomes a session (its
//! thread runs [`control_loop`]); an authenticated data connection joins its session and its
//! thread runs [`data_loop`]. A stalled or hostile connection only ever holds its own thread,
//! so it cannot block other sessions. Nothing here prints: events go to a [`ServerReporter`].

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use zcp_engine::fs::{EntryKind, Root, TempFile};
use zcp_engine::recv::{ChunkSink, Completion, Sink, choose};
use zcp_engine::sys::{Usage, random, thread_usage, wait_readable};
use zcp_engine::{EngineError, RecvEngine, StreamReceiver};
use zcp_wire::{
    Accepted, CHUNK_HEADER_LEN, ChunkHeader, ChunkKind, ChunkPlan, Deadline, ErrorCode, Message,
    Psk, PutFile, ReceiverStats, RelPath, SessionId, SessionKeys, accept, escape,
};

use crate::conn::{ControlRx, ControlTx, FrameReader, read_plain};
use crate::error::{FrameIoError, SessionError};
use crate::event::{ServerEvent, ServerReporter};
use crate::incoming::{Incoming, MAX_CHUNKS, Wait};

/// Largest block size a client may ask the receiver for; the `direct` ring holds four.
pub const MAX_RECV_BLOCK: u64 = 64 << 20;
/// Most files one session may have open at once.
const MAX_OPEN_FILES: usize = 1024;
/// How often the control thread wakes to check liveness and send `Progress`.
const TICK: Duration = Duration::from_secs(1);

/// How a server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Everything is written beneath this directory.
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
    root: Root,
    sessions: Mutex<HashMap<SessionId, Arc<Shared>>>,
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
    ) -> Result<Server, SessionError> {
        let root = Root::open(&cfg.root)?;
        let listener = TcpListener::bind(addr).map_err(|source| SessionError::Io {
            what: format!("cannot listen on {addr}"),
            source,
        })?;
        listener
            .set_nonblocking(true)
            .map_err(|source| SessionError::Io {
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
    /// ends, with whether it succeeded; otherwise returns `None` when stopped.
    pub fn run(&self, stop: &AtomicBool, once: bool) -> Option<bool> {
        self.ctx.reporter.event(&ServerEvent::Listening {
            addr: self.local_addr(),
            root: self.ctx.root.path().display().to_string(),
        });
        let (ended_tx, ended_rx) = mpsc::channel::<bool>();
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
    let frame = Message::Error {
        code,
        message: reason.clone(),
    }
    .encode_frame();
    let _ = stream.write_all(&frame);
    let _ = stream.shutdown(Shutdown::Both);
    ctx.reporter.event(&ServerEvent::Rejected { peer, reason });
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn handle(ctx: Arc<Ctx>, mut stream: TcpStream, peer: SocketAddr, ended: mpsc::Sender<bool>) {
    let mut slot = PendingSlot(&ctx.pending, true);
    if ctx.pending.fetch_add(1, Ordering::Relaxed) >= ctx.cfg.max_pending {
        let why = "too many connections in their handshake; try again".to_string();
        return reject(&ctx, &mut stream, peer, ErrorCode::Busy, why);
    }
    match handshake(&ctx, &mut stream) {
        Err((code, why)) => reject(&ctx, &mut stream, peer, code, why),
        Ok(Joined::Control(shared, sealer, opener)) => {
            slot.release();
            let ok = run_session(&ctx, &shared, stream, peer, sealer, opener);
            let _ = ended.send(ok);
        }
        Ok(Joined::Data(shared)) => {
            slot.release();
            data_loop(&ctx, &shared, stream);
        }
    }
}

/// An authenticated connection, ready for its loop.
enum Joined {
    /// A new session's control connection, registered and welcomed.
    Control(Arc<Shared>, zcp_wire::Sealer, zcp_wire::Opener),
    /// A data stream that joined its session.
    Data(Arc<Shared>),
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
    let (state, reply) = accept(&ctx.cfg.psk, hello, random_or::<32>("nonce")?)
        .map_err(|e| (e.code(), e.to_string()))?;
    write(stream, &reply.encode_frame())?;
    arm(stream)?;
    let msg = read_plain(stream).map_err(frame_err)?;
    if let Message::Error { message, .. } = msg {
        // The client gave up on us (for example: our proof did not match its key).
        return Err((ErrorCode::Auth, message));
    }
    match state {
        Accepted::Control(await_proof) => {
            let session_id: SessionId = random_or::<16>("session id")?;
            let (est, welcome) = await_proof
                .on_proof(msg, session_id, ctx.cfg.max_streams)
                .map_err(|e| (e.code(), e.to_string()))?;
            let shared = {
                let mut sessions = ctx.sessions.lock().unwrap_or_else(|p| p.into_inner());
                if sessions.len() >= ctx.cfg.max_sessions {
                    return Err((ErrorCode::Busy, "too many sessions; try again later".into()));
                }
                let shared = Arc::new(Shared::new(
                    session_id,
                    est.keys.clone(),
                    ctx.cfg.max_streams,
                ));
                sessions.insert(session_id, shared.clone());
                shared
            };
            if let Err(e) = write(stream, &welcome) {
                ctx.sessions
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&session_id);
                return Err(e);
            }
            Ok(Joined::Control(shared, est.sealer, est.opener))
        }
        Accepted::Data(await_join) => {
            let req = await_join
                .on_join(msg)
                .map_err(|e| (e.code(), e.to_string()))?;
            let shared = ctx
                .sessions
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&req.session_id)
                .cloned();
            // An unknown session and a bad proof get the same answer: the peer learns nothing
            // about which sessions exist.
            let refused = || {
                (
                    ErrorCode::Auth,
                    "data connection proof does not match any session".to_string(),
                )
            };
            let shared = shared.ok_or_else(refused)?;
            req.verify(&shared.keys).map_err(|_| refused())?;
            shared.join(req.stream).map_err(|e| (ErrorCode::Limit, e))?;
            if let Err(e) = write(stream, &Message::DataAccept.encode_frame()) {
                shared.stream_ended(Usage::default());
                return Err(e);
            }
            Ok(Joined::Data(shared))
        }
    }
}

/// What every thread of one session shares.
struct Shared {
    hex: String,
    keys: SessionKeys,
    max_streams: u16,
    joined: Mutex<Vec<bool>>,
    files: Mutex<HashMap<u32, Arc<Incoming>>>,
    bytes: AtomicU64,
    usage: Mutex<Usage>,
    socks: Mutex<Vec<TcpStream>>,
    active: Mutex<usize>,
    idle: Condvar,
    closed: AtomicBool,
}

impl Shared {
    fn new(id: SessionId, keys: SessionKeys, max_streams: u16) -> Shared {
        Shared {
            hex: hex(&id),
            keys,
            max_streams,
            joined: Mutex::new(vec![false; usize::from(max_streams)]),
            files: Mutex::new(HashMap::new()),
            bytes: AtomicU64::new(0),
            usage: Mutex::new(Usage::default()),
            socks: Mutex::new(Vec::new()),
            active: Mutex::new(0),
            idle: Condvar::new(),
            closed: AtomicBool::new(false),
        }
    }

    fn join(&self, stream: u16) -> Result<(), String> {
        if self.closed.load(Ordering::Relaxed) {
            return Err("the session has ended".into());
        }
        let mut joined = self.joined.lock().unwrap_or_else(|p| p.into_inner());
        match joined.get_mut(usize::from(stream)) {
            None => Err(format!(
                "stream index {stream} is over the session's limit of {} streams",
                self.max_streams
            )),
            Some(true) => Err(format!("stream {stream} already joined this session")),
            Some(slot) => {
                *slot = true;
                *self.active.lock().unwrap_or_else(|p| p.into_inner()) += 1;
                Ok(())
            }
        }
    }

    fn stream_ended(&self, usage: Usage) {
        self.usage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(&usage);
        let mut active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        *active = active.saturating_sub(1);
        self.idle.notify_all();
    }

    /// Waits up to `timeout` for every data stream to end; whether they did.
    fn wait_streams(&self, timeout: Duration) -> bool {
        let active = self.active.lock().unwrap_or_else(|p| p.into_inner());
        let (active, _) = self
            .idle
            .wait_timeout_while(active, timeout, |n| *n > 0)
            .unwrap_or_else(|p| p.into_inner());
        *active == 0
    }

    fn file(&self, id: u32) -> Option<Arc<Incoming>> {
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    fn fail_all(&self, code: ErrorCode, why: &str) {
        for f in self
            .files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            f.fail(code, why.to_string());
        }
    }

    /// Ends the session: fails open files and unblocks every data stream.
    fn close(&self, why: &str) {
        self.closed.store(true, Ordering::Relaxed);
        self.fail_all(ErrorCode::Internal, why);
        for s in self
            .socks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            let _ = s.shutdown(Shutdown::Both);
        }
    }
}

fn run_session(
    ctx: &Ctx,
    shared: &Arc<Shared>,
    stream: TcpStream,
    peer: SocketAddr,
    sealer: zcp_wire::Sealer,
    opener: zcp_wire::Opener,
) -> bool {
    ctx.reporter.event(&ServerEvent::SessionStart {
        peer,
        session: shared.hex.clone(),
    });
    let usage0 = thread_usage();
    let result = stream
        .try_clone()
        .map_err(|e| e.to_string())
        .and_then(|read_half| {
            stream
                .set_write_timeout(Some(ctx.cfg.idle_timeout))
                .map_err(|e| e.to_string())?;
            read_half
                .set_read_timeout(Some(TICK))
                .map_err(|e| e.to_string())?;
            let mut tx = ControlTx { stream, sealer };
            let mut rx = ControlRx {
                stream: read_half,
                opener,
                reader: FrameReader::default(),
            };
            let r = control_loop(ctx, shared, &mut tx, &mut rx, usage0);
            match &r {
                // The client ended it and knows why: do not answer its error with another.
                Err(End::ClientAborted(_)) | Ok(()) => {}
                Err(End::Failed(code, e)) => {
                    let _ = tx.stream.write_all(
                        &Message::Error {
                            code: *code,
                            message: e.clone(),
                        }
                        .encode_frame(),
                    );
                }
            }
            let _ = tx.stream.shutdown(Shutdown::Both);
            r.map_err(|e| e.to_string())
        });
    let reason = result.as_ref().err().cloned();
    shared.close(reason.as_deref().unwrap_or("the session ended"));
    // Unfinished files drop here: their temporary files are removed, nothing is renamed.
    shared
        .files
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clear();
    shared.wait_streams(ctx.cfg.idle_timeout);
    ctx.sessions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .retain(|_, s| !Arc::ptr_eq(s, shared));
    ctx.reporter.event(&ServerEvent::SessionEnd {
        session: shared.hex.clone(),
        ok: reason.is_none(),
        reason,
    });
    result.is_ok()
}

/// Why a session's control loop ended early.
#[derive(Debug)]
enum End {
    /// The client sent an `Error`: it knows why, and is told nothing back.
    ClientAborted(String),
    /// Anything else: the client is told with an `Error` of this code.
    Failed(ErrorCode, String),
}

impl From<String> for End {
    fn from(s: String) -> End {
        End::Failed(ErrorCode::Protocol, s)
    }
}

impl From<&str> for End {
    fn from(s: &str) -> End {
        End::Failed(ErrorCode::Protocol, s.to_string())
    }
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::ClientAborted(m) | End::Failed(_, m) => f.write_str(m),
        }
    }
}

fn control_loop(
    ctx: &Ctx,
    shared: &Shared,
    tx: &mut ControlTx,
    rx: &mut ControlRx,
    usage0: Usage,
) -> Result<(), End> {
    let idle = ctx.cfg.idle_timeout;
    let mut last_activity = Instant::now();
    let mut last_bytes = 0;
    let send = |tx: &mut ControlTx, m: &Message| {
        tx.send(m)
            .map_err(|e| format!("cannot write to the client: {e}"))
    };
    loop {
        let msg = match rx.poll() {
            Ok(Some(m)) => {
                last_activity = Instant::now();
                m
            }
            Ok(None) => {
                let b = shared.bytes.load(Ordering::Relaxed);
                if b != last_bytes {
                    last_bytes = b;
                    last_activity = Instant::now();
                }
                if last_activity.elapsed() > idle {
                    return Err(End::Failed(
                        ErrorCode::Limit,
                        format!("no traffic from the client for {} s", idle.as_secs()),
                    ));
                }
                continue;
            }
            Err(FrameIoError::Closed) => {
                return Err("the client closed the control connection before finishing".into());
            }
            Err(e) => return Err(format!("control connection: {e}").into()),
        };
        match msg {
            Message::PutFile(p) => {
                let (id, dest) = (p.file_id, escape(&p.dest));
                match prepare(ctx, shared, p) {
                    Ok(inc) => {
                        let ready = Message::FileReady {
                            file_id: id,
                            engine: inc.1.engine.name().into(),
                            note: inc.0.unwrap_or_default(),
                            target: inc.1.target.as_bytes().to_vec(),
                        };
                        shared
                            .files
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .insert(id, inc.1);
                        send(tx, &ready)?;
                    }
                    Err((code, message)) => {
                        ctx.reporter.event(&ServerEvent::FileFailed {
                            session: shared.hex.clone(),
                            target: dest,
                            reason: message.clone(),
                        });
                        send(
                            tx,
                            &Message::FileFailed {
                                file_id: id,
                                code,
                                message,
                            },
                        )?;
                    }
                }
            }
            Message::ChunkMac {
                file_id,
                index,
                mac,
            } => {
                let f = shared
                    .file(file_id)
                    .ok_or_else(|| format!("MAC for unknown file {file_id}"))?;
                f.expect(index, mac)?;
            }
            Message::FileEnd { file_id, digest } => {
                let f = shared
                    .file(file_id)
                    .ok_or_else(|| format!("FileEnd for unknown file {file_id}"))?;
                let reply = finish_file(ctx, shared, tx, &f, digest)?;
                shared
                    .files
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&file_id);
                match &reply {
                    Message::FileCommitted {
                        bytes,
                        verified,
                        stored,
                        ..
                    } => ctx.reporter.event(&ServerEvent::FileDone {
                        session: shared.hex.clone(),
                        target: f.target.clone(),
                        bytes: *bytes,
                        seconds: f.started.elapsed().as_secs_f64(),
                        engine: f.engine.name().into(),
                        verified: *verified,
                        stored: *stored,
                    }),
                    Message::FileFailed { message, .. } => {
                        ctx.reporter.event(&ServerEvent::FileFailed {
                            session: shared.hex.clone(),
                            target: f.target.clone(),
                            reason: message.clone(),
                        })
                    }
                    _ => {}
                }
                send(tx, &reply)?;
            }
            Message::Finish => {
                if !shared.wait_streams(idle) {
                    return Err("data streams did not end after Finish".into());
                }
                let mut usage = *shared.usage.lock().unwrap_or_else(|p| p.into_inner());
                usage.add(&thread_usage().since(&usage0));
                let stats = ReceiverStats {
                    cpu_user_us: usage.user.as_micros() as u64,
                    cpu_sys_us: usage.sys.as_micros() as u64,
                    max_rss_bytes: zcp_engine::sys::process_usage().max_rss_bytes,
                    bytes_received: shared.bytes.load(Ordering::Relaxed),
                };
                send(tx, &Message::Stats(stats))?;
                return Ok(());
            }
            Message::Error { code, message } => {
                return Err(End::ClientAborted(format!(
                    "the client aborted: {message} [{}]",
                    code.name()
                )));
            }
            other => {
                return Err(
                    format!("unexpected {} on the control connection", other.name()).into(),
                );
            }
        }
    }
}

/// Validates a `PutFile`, resolves its destination beneath the root, creates and preallocates
/// the temporary file, and picks the engine. Returns the engine note and the file.
fn prepare(
    ctx: &Ctx,
    shared: &Shared,
    p: PutFile,
) -> Result<(Option<String>, Arc<Incoming>), (ErrorCode, String)> {
    let bad_path = |e: zcp_wire::PathError| (ErrorCode::BadPath, e.to_string());
    let dest = RelPath::parse(&p.dest).map_err(bad_path)?;
    RelPath::check_name(&p.name).map_err(bad_path)?;
    let requested = RecvEngine::parse(&p.recv_engine).ok_or_else(|| {
        let names: Vec<_> = RecvEngine::ALL.iter().map(|e| e.name()).collect();
        (
            ErrorCode::Protocol,
            format!(
                "unknown receiver engine '{}' (known: {})",
                p.recv_engine,
                names.join(", ")
            ),
        )
    })?;
    let plan =
        ChunkPlan::new(p.size, p.chunk_size).map_err(|e| (ErrorCode::Limit, e.to_string()))?;
    if plan.count() > MAX_CHUNKS {
        return Err((
            ErrorCode::Limit,
            format!(
                "{} chunks is over the limit of {MAX_CHUNKS}; use a larger chunk size",
                plan.count()
            ),
        ));
    }
    if u64::from(p.block_size) > MAX_RECV_BLOCK {
        return Err((
            ErrorCode::Limit,
            format!(
                "block size {} is over the receiver's limit of {MAX_RECV_BLOCK}",
                p.block_size
            ),
        ));
    }
    {
        let files = shared.files.lock().unwrap_or_else(|p| p.into_inner());
        if files.contains_key(&p.file_id) {
            return Err((
                ErrorCode::Protocol,
                format!("file id {} is already in use", p.file_id),
            ));
        }
        if files.len() >= MAX_OPEN_FILES {
            return Err((
                ErrorCode::Limit,
                format!("more than {MAX_OPEN_FILES} files open in one session"),
            ));
        }
    }
    let block = u64::from(p.block_size);
    let mtime = (p.mtime_sec, p.mtime_nsec);
    if !requested.stores() {
        let choice = choose(requested, None, None);
        let inc = Incoming::new(
            p.file_id,
            plan,
            choice.engine,
            block,
            p.mode,
            mtime,
            p.name,
            dest.to_string(),
            None,
            None,
            None,
        );
        return Ok((choice.note, Arc::new(inc)));
    }
    let engine_err = |e: EngineError| match e {
        EngineError::NoSpace(m) => (ErrorCode::NoSpace, format!("no space on the receiver: {m}")),
        EngineError::Path(m) => (ErrorCode::BadPath, m),
        other => (ErrorCode::Io, other.to_string()),
    };
    // scp's rule: a destination that is (or is spelled as) a directory receives the file
    // under the source's name; otherwise the destination is the file's own name.
    let (dir_path, name) = if dest.names_directory() {
        (dest.clone(), p.name.clone())
    } else {
        let comps = dest.components();
        let (last, parent) = comps
            .split_last()
            .expect("a non-directory path has a component");
        let parent_dir = ctx.root.open_dir(parent, true).map_err(engine_err)?;
        match zcp_engine::fs::entry_kind(&parent_dir, last).map_err(engine_err)? {
            EntryKind::Dir => (dest.clone(), p.name.clone()),
            _ => (
                RelPath::parse(&parent.join(&b'/'))
                    .unwrap_or_else(|_| RelPath::parse(b".").expect("root")),
                last.clone(),
            ),
        }
    };
    let dir = ctx
        .root
        .open_dir(dir_path.components(), true)
        .map_err(engine_err)?;
    let target = dir_path.join(&name).map_err(bad_path)?.to_string();
    match zcp_engine::fs::entry_kind(&dir, &name).map_err(engine_err)? {
        EntryKind::Missing | EntryKind::File => {}
        EntryKind::Dir => {
            return Err((
                ErrorCode::BadPath,
                format!("destination '{target}' is a directory"),
            ));
        }
        EntryKind::Symlink => {
            return Err((
                ErrorCode::BadPath,
                format!(
                    "destination '{target}' is a symlink on the receiver; zcp never follows or replaces symlinks there"
                ),
            ));
        }
        EntryKind::Other => {
            return Err((
                ErrorCode::BadPath,
                format!("destination '{target}' is a device, FIFO or socket"),
            ));
        }
    }
    let temp = TempFile::create(dir).map_err(engine_err)?;
    temp.preallocate(p.size).map_err(engine_err)?;
    let fs = zcp_engine::fs::fs_info(temp.fd()).map_err(engine_err)?;
    let choice = choose(requested, Some(&temp), Some(&fs));
    let fd = rustix_dup(&temp).map_err(engine_err)?;
    let inc = Incoming::new(
        p.file_id,
        plan,
        choice.engine,
        block,
        p.mode,
        mtime,
        name,
        target,
        Some(temp),
        Some(fd),
        choice.direct,
    );
    Ok((choice.note, Arc::new(inc)))
}

fn rustix_dup(temp: &TempFile) -> Result<std::os::fd::OwnedFd, EngineError> {
    temp.fd()
        .try_clone_to_owned()
        .map_err(|source| EngineError::Sys {
            call: "dup",
            what: "temporary file",
            source,
        })
}

/// Waits for every chunk, checks the digests, and commits. Returns the reply to send; an
/// `Err` only for a broken control connection.
fn finish_file(
    ctx: &Ctx,
    shared: &Shared,
    tx: &mut ControlTx,
    f: &Incoming,
    digest: [u8; 32],
) -> Result<Message, String> {
    let failed = |code, message| Message::FileFailed {
        file_id: f.id,
        code,
        message,
    };
    let mut last_bytes = shared.bytes.load(Ordering::Relaxed);
    let mut last_progress = Instant::now();
    loop {
        match f.wait(TICK) {
            Wait::Complete => break,
            Wait::Failed(code, msg) => return Ok(failed(code, msg)),
            Wait::Pending => {
                let b = shared.bytes.load(Ordering::Relaxed);
                if b != last_bytes {
                    last_bytes = b;
                    last_progress = Instant::now();
                } else if last_progress.elapsed() > ctx.cfg.idle_timeout {
                    f.fail(
                        ErrorCode::Io,
                        format!("no data arrived for {} s", ctx.cfg.idle_timeout.as_secs()),
                    );
                    continue;
                }
                tx.send(&Message::Progress {
                    file_id: f.id,
                    bytes: f.written.load(Ordering::Relaxed),
                })
                .map_err(|e| format!("cannot write to the client: {e}"))?;
            }
        }
    }
    let local = if f.verify {
        match f.digest(&shared.keys) {
            Ok(d) if d == digest => d,
            Ok(_) => {
                return Ok(failed(
                    ErrorCode::Verify,
                    "the whole-file digests differ".into(),
                ));
            }
            Err(m) => return Ok(failed(ErrorCode::Verify, m)),
        }
    } else {
        [0; 32]
    };
    if f.engine.stores() {
        let Some(temp) = f.temp.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return Ok(failed(
                ErrorCode::Internal,
                "the file was already committed".into(),
            ));
        };
        // The commit's fsync can take a while on a slow disk: run it beside this thread, which
        // keeps telling the client the receiver is alive.
        let size = f.plan.size();
        let result = std::thread::scope(|s| {
            let job = s.spawn(|| {
                let u0 = thread_usage();
                let r = temp.commit(size, f.mode, f.mtime, &f.name);
                shared
                    .usage
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .add(&thread_usage().since(&u0));
                r
            });
            let mut told = Instant::now();
            while !job.is_finished() {
                std::thread::sleep(Duration::from_millis(10));
                if told.elapsed() >= TICK {
                    told = Instant::now();
                    let _ = tx.send(&Message::Progress {
                        file_id: f.id,
                        bytes: size,
                    });
                }
            }
            job.join()
                .unwrap_or_else(|_| Err(EngineError::Path("the commit thread panicked".into())))
        });
        if let Err(e) = result {
            let code = if e.is_no_space() {
                ErrorCode::NoSpace
            } else {
                ErrorCode::Io
            };
            return Ok(failed(code, format!("commit failed: {e}")));
        }
    }
    Ok(Message::FileCommitted {
        file_id: f.id,
        bytes: f.plan.size(),
        digest: local,
        verified: f.verify,
        stored: f.engine.stores(),
    })
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` when the stream ended before the first.
fn read_header(s: &mut TcpStream, buf: &mut [u8]) -> Result<bool, String> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err("the data stream ended inside a chunk header".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Err("no data from the client within the idle timeout".into());
            }
            Err(e) => return Err(format!("data stream: {e}")),
        }
    }
    Ok(true)
}

fn data_loop(ctx: &Ctx, shared: &Shared, mut sock: TcpStream) {
    let usage0 = thread_usage();
    let _ = sock.set_read_timeout(Some(ctx.cfg.idle_timeout));
    let _ = sock.set_write_timeout(Some(ctx.cfg.idle_timeout));
    if let Ok(c) = sock.try_clone() {
        shared
            .socks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(c);
    }
    // Closed while we registered: stop at once.
    if shared.closed.load(Ordering::Relaxed) {
        let _ = sock.shutdown(Shutdown::Both);
    }
    let mut receivers: HashMap<u32, StreamReceiver> = HashMap::new();
    let result = receive_chunks(shared, &mut sock, &mut receivers);
    let mut usage = Usage::default();
    for (id, rx) in receivers {
        match rx.finish() {
            Ok(u) => usage.add(&u),
            Err(e) => {
                if let Some(f) = shared.file(id) {
                    f.fail(ErrorCode::Io, e.to_string());
                }
            }
        }
    }
    if let Err((code, why)) = result {
        // A broken stream leaves chunks missing: fail what it was carrying, so the control
        // thread answers FileFailed at once instead of waiting for the idle timeout.
        shared.fail_all(code, &format!("data stream failed: {why}"));
        let _ = sock.shutdown(Shutdown::Both);
    }
    usage.add(&thread_usage().since(&usage0));
    shared.stream_ended(usage);
}

/// Hashes a chunk's bytes, as the engine feeds them, into the chunk's MAC.
struct MacSink {
    hasher: blake3::Hasher,
    file: Arc<Incoming>,
    index: u64,
}

impl ChunkSink for MacSink {
    fn bytes(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
    }

    fn seen_all(self: Box<Self>) {
        self.file
            .hashed(self.index, *self.hasher.finalize().as_bytes());
    }
}

fn receive_chunks(
    shared: &Shared,
    sock: &mut TcpStream,
    receivers: &mut HashMap<u32, StreamReceiver>,
) -> Result<(), (ErrorCode, String)> {
    let proto = |m: String| (ErrorCode::Protocol, m);
    loop {
        let mut hb = [0u8; CHUNK_HEADER_LEN];
        if !read_header(sock, &mut hb).map_err(|m| (ErrorCode::Io, m))? {
            return Err((
                ErrorCode::Io,
                "the data stream closed before its end marker".into(),
            ));
        }
        let h = ChunkHeader::decode(&hb).map_err(|e| proto(e.to_string()))?;
        if h.kind == ChunkKind::End {
            return Ok(());
        }
        let f = shared
            .file(h.file_id)
            .ok_or_else(|| proto(format!("chunk for unknown file {}", h.file_id)))?;
        let index = f
            .plan
            .locate(h.offset, h.len)
            .map_err(|e| proto(e.to_string()))?;
        f.claim(index).map_err(proto)?;
        let rx = match receivers.entry(h.file_id) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => v.insert(
                StreamReceiver::new(
                    f.engine,
                    f.fd.as_ref().map(|fd| fd.as_fd()),
                    f.direct.as_ref().map(|fd| fd.as_fd()),
                    f.block,
                )
                .map_err(|e| (ErrorCode::Io, e.to_string()))?,
            ),
        };
        let done: Completion = {
            let f = f.clone();
            Box::new(move |r| f.written(index, r))
        };
        let sink: Option<Sink> = if f.verify {
            Some(Box::new(MacSink {
                hasher: shared.keys.chunk_hasher(f.id, h.offset, h.len),
                file: f.clone(),
                index,
            }))
        } else {
            // The null engine never sees the bytes: nothing to hash.
            f.hashed(index, [0; 32]);
            None
        };
        if let Err(e) = rx.receive(sock.as_fd(), h.offset, h.len, sink, &shared.bytes, done) {
            let code = if e.is_no_space() {
                ErrorCode::NoSpace
            } else {
                ErrorCode::Io
            };
            return Err((code, e.to_string()));
        }
    }
}
