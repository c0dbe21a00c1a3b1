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

mod access;
mod session;

pub use access::{
    AccessConfig, ExportSpec, IdentitySpec, Permission, SINGLE_EXPORT, SINGLE_IDENTITY, check_name,
};

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};
use zcp_engine::IoClass;
use zcp_engine::sync::{Locked, Waits};

use zcp_engine::fs::Root;
use zcp_engine::sys::random;
use zcp_wire::{
    Accepted, Deadline, ErrorCode, Message, Opener, Psk, Sealer, SessionId, SessionKeys,
    escape_text,
};

use crate::conn::read_plain;
use crate::error::{FrameIoError, Refusal, SessionError};
use crate::event::{ServerEvent, ServerReporter};
use crate::recv::RxCore;
use crate::transport::Landing;
use access::Live;

/// Most directory entries the start-up count of partial files looks at
/// ([`ServerEvent::Leftovers`]).
pub(crate) const LEFTOVER_SCAN_CAP: u64 = 100_000;

/// How the server runs.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// The exports (everything is written beneath, and read from beneath, one of them) and
    /// the identities that may use them.
    pub access: AccessConfig,
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
    /// For an IPv6 address: refuse IPv4 clients (`-6`). Otherwise `[::]` is dual-stack.
    pub v6only: bool,
    /// Longest a stopping server waits for its sessions to end.
    pub drain_timeout: Duration,
}

impl ServerConfig {
    /// A configuration with zcp's default limits: one root, one key that may read and
    /// write beneath it (`serve --root --key-file`).
    pub fn new(root: PathBuf, psk: Psk) -> ServerConfig {
        ServerConfig::with_access(AccessConfig::single(root, psk))
    }

    /// A configuration with zcp's default limits and these exports and identities.
    pub fn with_access(access: AccessConfig) -> ServerConfig {
        ServerConfig {
            access,
            max_streams: 16,
            max_sessions: 16,
            max_pending: 64,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            v6only: false,
            drain_timeout: Duration::from_secs(10),
        }
    }
}

struct Ctx {
    cfg: ServerConfig,
    /// The exports and identities in force: each session takes the snapshot current at its
    /// handshake and keeps it; a reload replaces it for later sessions.
    live: Mutex<Arc<Live>>,
    sessions: Mutex<HashMap<SessionId, Arc<Session>>>,
    pending: AtomicUsize,
    reporter: Arc<dyn ServerReporter>,
    /// `serve --once`: the server runs one session; set once it is taken.
    single: AtomicBool,
    taken: AtomicBool,
    /// The server is stopping: running sessions end, telling their clients why.
    pub(crate) shutdown: AtomicBool,
}

/// A bound server.
pub struct Server {
    listeners: Vec<TcpListener>,
    ctx: Arc<Ctx>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("listeners", &self.listeners)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Opens the exports and binds `addr`.
    pub fn bind(
        addr: SocketAddr,
        cfg: ServerConfig,
        reporter: Arc<dyn ServerReporter>,
    ) -> Result<Server, crate::SessionError> {
        Server::bind_all(&[addr], cfg, reporter)
    }

    /// Opens the exports and binds every address in `addrs` (a config file's `listen`).
    pub fn bind_all(
        addrs: &[SocketAddr],
        cfg: ServerConfig,
        reporter: Arc<dyn ServerReporter>,
    ) -> Result<Server, crate::SessionError> {
        let live = Arc::new(Live::open(&cfg.access)?);
        let mut listeners = Vec::with_capacity(addrs.len());
        for &addr in addrs {
            let listener = zcp_engine::sys::listen_tcp(addr, cfg.v6only).map_err(|source| {
                crate::SessionError::Io {
                    what: format!("cannot listen on {addr}"),
                    source,
                }
            })?;
            listener
                .set_nonblocking(true)
                .map_err(|source| crate::SessionError::Io {
                    what: "listener".into(),
                    source,
                })?;
            listeners.push(listener);
        }
        if listeners.is_empty() {
            return Err(crate::SessionError::Usage("no address to listen on".into()));
        }
        Ok(Server {
            listeners,
            ctx: Arc::new(Ctx {
                cfg,
                live: Mutex::new(live),
                sessions: Mutex::new(HashMap::new()),
                pending: AtomicUsize::new(0),
                reporter,
                single: AtomicBool::new(false),
                shutdown: AtomicBool::new(false),
                taken: AtomicBool::new(false),
            }),
        })
    }

    /// A handle that replaces the exports and identities of a running server.
    pub fn reloader(&self) -> Reloader {
        Reloader {
            ctx: self.ctx.clone(),
        }
    }

    /// The (first) address actually bound (port 0 becomes the kernel's choice).
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addrs()[0]
    }

    /// Every address bound, in the order given.
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners
            .iter()
            .map(|l| l.local_addr().expect("bound listener has an address"))
            .collect()
    }

    /// Serves until `stop` is set. With `once`, the first authenticated session is the only
    /// one (later clients are refused as busy, so no other session's outcome can stand in for
    /// it) and this returns when it ends, with its exit code (see
    /// [`crate::exit::for_failures`]: 0 only when every entry arrived); otherwise returns
    /// `None` when stopped.
    ///
    /// Once `stop` is set, no connection is accepted; every running session ends (its client
    /// is told the server is shutting down; what is durable stays for a resume), and this
    /// returns once they have, or after [`ServerConfig::drain_timeout`].
    pub fn run(&self, stop: &AtomicBool, once: bool) -> Option<i32> {
        self.ctx.single.store(once, Ordering::Relaxed);
        let served = self.ctx.live.locked().describe();
        for addr in self.local_addrs() {
            self.ctx.reporter.event(&ServerEvent::Listening {
                addr,
                root: served.clone(),
            });
        }
        self.count_leftovers();
        let (ended_tx, ended_rx) = mpsc::channel::<i32>();
        loop {
            if stop.load(Ordering::Relaxed) {
                self.drain();
                // With --once, the session's outcome (cut short: a failure), if it had one.
                return once.then(|| {
                    let taken = self.ctx.taken.load(Ordering::Relaxed);
                    match ended_rx.try_recv() {
                        Ok(code) => code,
                        Err(_) if taken => crate::exit::FAILURE,
                        Err(_) => crate::exit::OK,
                    }
                });
            }
            if once && let Ok(ok) = ended_rx.try_recv() {
                return Some(ok);
            }
            let mut accepted = false;
            for listener in &self.listeners {
                accepted |= self.accept_one(listener, &ended_tx);
            }
            if !accepted {
                let fds: Vec<_> = self.listeners.iter().map(AsFd::as_fd).collect();
                zcp_engine::sys::wait_any_readable(&fds, Duration::from_millis(100));
            }
        }
    }

    /// Takes one connection from `listener`, if one waits, onto a thread of its own; whether
    /// one did.
    fn accept_one(&self, listener: &TcpListener, ended_tx: &mpsc::Sender<i32>) -> bool {
        match listener.accept() {
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
                true
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => false,
            // EMFILE, ECONNABORTED and friends: transient; keep serving.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                false
            }
        }
    }
}

impl Server {
    /// Ends every running session and waits for them, at most the drain timeout.
    fn drain(&self) {
        self.ctx.shutdown.store(true, Ordering::Relaxed);
        let sessions = self.ctx.sessions.locked().len();
        self.ctx.reporter.event(&ServerEvent::Stopping { sessions });
        let until = Instant::now() + self.ctx.cfg.drain_timeout;
        while Instant::now() < until
            && (!self.ctx.sessions.locked().is_empty()
                || self.ctx.pending.load(Ordering::Relaxed) > 0)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Counts, on a thread of its own, the part files and journals beneath the root that no
    /// transfer holds (looking at [`LEFTOVER_SCAN_CAP`] entries at most), and reports them
    /// when there are any.
    fn count_leftovers(&self) {
        let roots: Vec<Arc<Root>> = (self.ctx.live.locked().exports())
            .map(|(_, r)| r.clone())
            .collect();
        let reporter = self.ctx.reporter.clone();
        let _ = std::thread::Builder::new()
            .name("zcp-leftovers".into())
            .spawn(move || {
                for root in roots {
                    count_leftovers_in(&root, &*reporter);
                }
            });
    }
}

/// A handle that replaces a running server's exports and identities ([`Server::reloader`]).
#[derive(Clone)]
pub struct Reloader {
    ctx: Arc<Ctx>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader").finish_non_exhaustive()
    }
}

impl Reloader {
    /// Opens `access`'s exports and puts them and its identities in force for the sessions
    /// that start from now on; running sessions keep what they started with. On an error
    /// nothing changes. Reports [`ServerEvent::Reloaded`] either way.
    pub fn reload(&self, access: &AccessConfig) -> Result<(), SessionError> {
        match Live::open(access) {
            Ok(live) => {
                let described = live.describe();
                *self.ctx.live.locked() = Arc::new(live);
                self.ctx.reporter.event(&ServerEvent::Reloaded {
                    ok: true,
                    message: described,
                });
                Ok(())
            }
            Err(e) => {
                self.ctx.reporter.event(&ServerEvent::Reloaded {
                    ok: false,
                    message: escape_text(&e.to_string()),
                });
                Err(e)
            }
        }
    }

    /// Reports that a reload failed before it reached the server (the config file did not
    /// parse): the old configuration stays in force.
    pub fn failed(&self, why: &str) {
        self.ctx.reporter.event(&ServerEvent::Reloaded {
            ok: false,
            message: escape_text(why),
        });
    }
}

/// Counts the part files and journals beneath one export that no transfer holds.
fn count_leftovers_in(root: &Arc<Root>, reporter: &dyn ServerReporter) {
    use zcp_engine::fs::{Removal, remove_leftover, scan_leftovers};
    let (mut files, mut bytes) = (0, 0);
    let end = scan_leftovers(root.fd(), Some(LEFTOVER_SCAN_CAP), |dir, l| {
        // A dry run only tries the lock: one a session holds is not counted.
        if let Ok(Removal::WouldRemove) = remove_leftover(dir, &l, true) {
            for (_, f) in l.files() {
                files += 1;
                bytes += f.allocated;
            }
        }
    });
    if files > 0 || end.capped {
        reporter.event(&ServerEvent::Leftovers {
            root: root.path().display().to_string(),
            files,
            bytes,
            capped: end.capped.then_some(LEFTOVER_SCAN_CAP),
        });
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
    ctx.reporter.event(&ServerEvent::Rejected {
        peer,
        reason,
        cause: code.name(),
    });
}

fn handle(ctx: Arc<Ctx>, mut stream: TcpStream, peer: SocketAddr, ended: mpsc::Sender<i32>) {
    let mut slot = PendingSlot(&ctx.pending, true);
    if ctx.pending.fetch_add(1, Ordering::Relaxed) >= ctx.cfg.max_pending {
        let why = "too many connections in their handshake; try again".to_string();
        return reject(&ctx, &mut stream, peer, ErrorCode::Busy, why);
    }
    match handshake(&ctx, &mut stream) {
        Err(Refusal { code, message }) => reject(&ctx, &mut stream, peer, code, message),
        Ok(Joined::Control(session, sealer, opener, nonces, (live, who))) => {
            slot.release();
            let joined = session::Joined {
                stream,
                peer,
                sealer,
                opener,
                nonces,
                live,
                who,
            };
            let ok = session::run_session(&ctx, &session, joined);
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
        (Arc<Live>, usize),
    ),
    /// A data stream that joined its session, with its index.
    Data(Arc<Session>, u16),
}

fn random_or<const N: usize>(what: &str) -> Result<[u8; N], Refusal> {
    random().map_err(|e| Refusal::new(ErrorCode::Internal, format!("getrandom ({what}): {e}")))
}

/// Runs a connection's handshake under the deadline. Errors carry the code and the reason
/// to send back and log.
fn handshake(ctx: &Ctx, stream: &mut TcpStream) -> Result<Joined, Refusal> {
    let _ = stream.set_nonblocking(false);
    let _ = stream.set_nodelay(true);
    let deadline = Deadline::new(Instant::now(), ctx.cfg.handshake_timeout);
    let arm = |s: &TcpStream| -> Result<(), Refusal> {
        let left = deadline
            .remaining(Instant::now())
            .map_err(|e| Refusal::new(ErrorCode::Limit, e.to_string()))?;
        s.set_read_timeout(Some(left))
            .and_then(|_| s.set_write_timeout(Some(left)))
            .map_err(|e| Refusal::new(ErrorCode::Internal, e.to_string()))
    };
    let frame_err = |e: FrameIoError| match e {
        FrameIoError::Io(e) if zcp_engine::io_class(&e) == IoClass::TimedOut => Refusal::new(
            ErrorCode::Limit,
            format!(
                "handshake not finished within {:?}",
                ctx.cfg.handshake_timeout
            ),
        ),
        FrameIoError::Closed => Refusal::protocol("closed the connection during the handshake"),
        other => Refusal::protocol(other.to_string()),
    };
    let write = |s: &mut TcpStream, frame: &[u8]| {
        s.write_all(frame)
            .map_err(|e| Refusal::new(ErrorCode::Protocol, e.to_string()))
    };

    arm(stream)?;
    let hello = read_plain(stream).map_err(|e| match e {
        // Whatever fails to decode as the first frame is most likely not zcp at all (an HTTP
        // probe, a port scanner): say so, with the decoder's detail.
        FrameIoError::Decode(_) => {
            let r = frame_err(e);
            Refusal::new(r.code, format!("not a zcp client: {}", r.message))
        }
        other => frame_err(other),
    })?;
    // This connection's snapshot of the exports and identities, kept by its session.
    let live = ctx.live.locked().clone();
    let (state, reply, who) = zcp_wire::accept_any(&live.keys(), hello, random_or::<32>("nonce")?)
        .map_err(|e| match e {
            zcp_wire::HandshakeError::ClientProof => Refusal::new(
                ErrorCode::Auth,
                "the client's key is not one this server knows (wrong --key-file?)",
            ),
            e => Refusal::new(e.code(), e.to_string()),
        })?;
    write(stream, &reply.encode_frame())?;
    arm(stream)?;
    let msg = read_plain(stream).map_err(frame_err)?;
    if let Message::Error { message, .. } = msg {
        // The client gave up on us (for example: our proof did not match its key). Its words
        // go to the log, escaped.
        return Err(Refusal::new(
            ErrorCode::Auth,
            format!("the client gave up: {}", escape_text(&message)),
        ));
    }
    match state {
        Accepted::Control(await_proof) => {
            let session_id: SessionId = random_or::<16>("session id")?;
            let who = who.ok_or_else(|| Refusal::protocol("a control Hello names no identity"))?;
            let (est, welcome) = await_proof
                .on_proof_with(msg, session_id, ctx.cfg.max_streams, live.named())
                .map_err(|e| Refusal::new(e.code(), e.to_string()))?;
            let session = {
                let mut sessions = ctx.sessions.locked();
                if ctx.single.load(Ordering::Relaxed) && ctx.taken.swap(true, Ordering::Relaxed) {
                    return Err(Refusal::new(
                        ErrorCode::Busy,
                        "this server runs one session (serve --once), and it is taken",
                    ));
                }
                if sessions.len() >= ctx.cfg.max_sessions {
                    return Err(Refusal::new(
                        ErrorCode::Busy,
                        "too many sessions; try again later",
                    ));
                }
                let session = Arc::new(Session::new(session_id, est.keys.clone()));
                sessions.insert(session_id, session.clone());
                session
            };
            if let Err(e) = write(stream, &welcome) {
                ctx.sessions.locked().remove(&session_id);
                // `serve --once`: a session that never started does not take the one slot.
                ctx.taken.store(false, Ordering::Relaxed);
                return Err(e);
            }
            Ok(Joined::Control(
                session,
                est.sealer,
                est.opener,
                (est.client_nonce, est.server_nonce),
                (live, who),
            ))
        }
        Accepted::Data(await_join) => {
            let req = await_join
                .on_join(msg)
                .map_err(|e| Refusal::new(e.code(), e.to_string()))?;
            let session = ctx.sessions.locked().get(&req.session_id).cloned();
            // An unknown session and a bad proof get the same answer: the peer learns nothing
            // about which sessions exist.
            let refused = || {
                Refusal::new(
                    ErrorCode::Auth,
                    "data connection proof does not match any session",
                )
            };
            let session = session.ok_or_else(refused)?;
            req.verify(&session.keys).map_err(|_| refused())?;
            session.join(req.stream)?;
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
    /// A UDP push: its streams land datagrams (with GSO/GRO or not), counting here.
    udp: Mutex<Option<(bool, Arc<crate::transport::udp::UdpStats>)>>,
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
            udp: Mutex::new(None),
        }
    }

    fn join(&self, stream: u16) -> Result<(), Refusal> {
        let granted = *self.granted.locked();
        let limit = |m: String| Err(Refusal::new(ErrorCode::Limit, m));
        if matches!(*self.role.locked(), SessionRole::Closed) {
            return limit("the session has ended".into());
        }
        let mut joined = self.joined.locked();
        if stream >= granted {
            return limit(format!(
                "stream index {stream} is over the {granted} streams this session was granted"
            ));
        }
        if joined[usize::from(stream)] {
            return limit(format!("stream {stream} already joined this session"));
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
                    let counter = self.counter(index);
                    // Taken out first: the lock must not be held while the stream lands.
                    let udp = self.udp.locked().clone();
                    match udp {
                        Some((offload, stats)) => {
                            let i = usize::from(index);
                            crate::transport::udp::recv::land(
                                core, stream, counter, offload, &stats, i,
                            );
                        }
                        None => crate::transport::tcp::land(core, stream, counter),
                    }
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
    fn take_send_streams(&self, timeout: Duration) -> Result<Vec<TcpStream>, SessionError> {
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
            _ => Err(SessionError::Connection {
                peer: "the client".into(),
                reason: format!(
                    "not every data stream joined within {} s",
                    timeout.as_secs()
                ),
            }),
        }
    }

    fn set_role(&self, r: SessionRole) {
        *self.role.locked() = r;
        self.changed.notify_all();
    }
}
