//! The server: accepts connections, authenticates them, and runs each session's role —
//! receiving beneath its root for a push, sending from beneath its root for a pull.
//!
//! Threads: one thread ([`gate`]) waits on the listeners and on every connection still in its
//! handshake, advancing each handshake as its bytes arrive ([`handshake`]) under a bounded
//! table that evicts rather than refuses ([`pending`]). Only an authenticated connection gets
//! a thread. A control connection becomes a session: its thread reads `Open`, grants limits
//! (a client may only tighten them) and runs the role. A data connection joins its session:
//! for a push its thread receives the stream; for a pull it hands the socket to the sending
//! role and ends. A stalled or hostile connection holds at most a table entry (pending) or its
//! own thread (authenticated, so it holds a key), so it cannot block other sessions. Nothing
//! here prints: events go to a [`ServerReporter`].

mod access;
pub(crate) mod gate;
mod handshake;
mod list;
mod observer;
mod pending;
mod session;

#[cfg(test)]
pub(crate) use session::get_top;

pub use pending::{
    Id as PendingId, Limits as PendingLimits, PendingTable, Source as PendingSource,
};

pub use access::{
    AccessConfig, AccessSnapshot, ExportSpec, IdentitySpec, Permission, SINGLE_EXPORT,
    SINGLE_IDENTITY, check_name,
};

use std::collections::HashMap;
use std::io::Write;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};
use zcp_engine::sync::{Locked, Waits};

use zcp_engine::fs::Root;
use zcp_engine::sys::random;
use zcp_wire::{ErrorCode, Message, Opener, Psk, Sealer, SessionId, SessionKeys, escape_text};

use crate::error::{Refusal, SessionError};
use crate::event::{ServerEvent, ServerReporter};
use access::Live;

/// Most directory entries the start-up count of partial files looks at
/// ([`ServerEvent::Leftovers`]).
pub(crate) const LEFTOVER_SCAN_CAP: u64 = 100_000;

/// Default [`ServerConfig::max_pending`]: a pending connection costs a descriptor and a
/// few hundred bytes, no thread.
pub const DEFAULT_MAX_PENDING: usize = 4096;
/// Default [`ServerConfig::max_pending_per_source`]: room for many clients behind one NAT
/// address, each opening its control and data connections at once.
pub const DEFAULT_MAX_PENDING_PER_SOURCE: usize = 256;

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
    /// Most connections still in their handshake at once; a newcomer beyond it evicts one
    /// that got less far.
    pub max_pending: usize,
    /// Most of them from one source (an IPv4 address or an IPv6 /64).
    pub max_pending_per_source: usize,
    /// Time a connection has to finish its handshake (a quarter of it, at least 1 s, while
    /// the pending table is three quarters full).
    pub handshake_timeout: Duration,
    /// A session with no traffic for this long is ended.
    pub idle_timeout: Duration,
    /// For an IPv6 address: refuse IPv4 clients (`-6`). Otherwise `[::]` is dual-stack.
    pub v6only: bool,
    /// Longest a stopping server waits for its sessions to end.
    pub drain_timeout: Duration,
    /// Count the partial files beneath each export at start (a standing server; not the far
    /// side of ssh, whose root may be `/`).
    pub count_leftovers: bool,
    /// Follow symlinks on the way to a directory beneath the exports (the far side of ssh,
    /// run as the user: `/scratch` a link to `/gpfs/scratch`); a daemon never does.
    pub follow_dir_links: bool,
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
            max_pending: DEFAULT_MAX_PENDING,
            max_pending_per_source: DEFAULT_MAX_PENDING_PER_SOURCE,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            v6only: false,
            drain_timeout: Duration::from_secs(10),
            count_leftovers: true,
            follow_dir_links: false,
        }
    }
}

struct Ctx {
    cfg: ServerConfig,
    /// The exports and identities in force: each session takes the snapshot current at its
    /// handshake and keeps it; a reload replaces it for later sessions.
    live: Mutex<Arc<Live>>,
    sessions: Mutex<HashMap<SessionId, Arc<Session>>>,
    reporter: Arc<dyn ServerReporter>,
    /// `serve --once`: the server runs one session; set once it is taken.
    single: AtomicBool,
    taken: AtomicBool,
    /// The server is stopping: running sessions end, telling their clients why.
    pub(crate) shutdown: AtomicBool,
}

/// The exports and identities a running server has in force, for its other faces.
#[derive(Clone)]
pub struct AccessView {
    ctx: Arc<Ctx>,
}

impl std::fmt::Debug for AccessView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AccessView")
    }
}

impl AccessView {
    /// The snapshot in force now.
    pub fn snapshot(&self) -> access::AccessSnapshot {
        access::AccessSnapshot(self.ctx.live.locked().clone())
    }
}

/// A bound server.
pub struct Server {
    listeners: Vec<TcpListener>,
    /// What the accept loop waits on ([`gate`]).
    poller: Mutex<Option<zcp_engine::poller::Poller>>,
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
        let live = Arc::new(Live::open_with(&cfg.access, cfg.follow_dir_links)?);
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
        let poller =
            zcp_engine::poller::Poller::new(256).map_err(|source| crate::SessionError::Io {
                what: "epoll".into(),
                source,
            })?;
        Ok(Server {
            listeners,
            poller: Mutex::new(Some(poller)),
            ctx: Arc::new(Ctx {
                cfg,
                live: Mutex::new(live),
                sessions: Mutex::new(HashMap::new()),
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

    /// A handle to the exports and identities in force (a reload replaces them for every
    /// snapshot taken after it).
    pub fn access(&self) -> AccessView {
        AccessView {
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
        if self.ctx.cfg.count_leftovers {
            self.count_leftovers();
        }
        let (ended_tx, ended_rx) = mpsc::channel::<i32>();
        // Made at bind (where its failure is an error); a second run makes its own.
        let poller = self.poller.locked().take();
        let mut gate = poller
            .map(Ok)
            .unwrap_or_else(|| zcp_engine::poller::Poller::new(256))
            .and_then(|p| gate::Gate::new(&self.ctx, &self.listeners, p))
            .ok();
        loop {
            if stop.load(Ordering::Relaxed) {
                // The connections still in their handshake close here.
                drop(gate.take());
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
            match &mut gate {
                Some(g) => g.turn(&ended_tx),
                // Out of descriptors for the poller itself: try again shortly.
                None => {
                    std::thread::sleep(gate::REST);
                    gate = zcp_engine::poller::Poller::new(256)
                        .and_then(|p| gate::Gate::new(&self.ctx, &self.listeners, p))
                        .ok();
                }
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
        while Instant::now() < until && !self.ctx.sessions.locked().is_empty() {
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

/// Where a session's data connections go, once its `Open` is known.
enum SessionRole {
    /// Not yet known.
    Opening,
    /// Receiving (a push): each stream lands through the role on its connection's thread.
    Receive(crate::transport::Lander),
    /// Sending (a pull): each joined stream's socket waits here for the role, in stream
    /// order.
    Streams(Vec<Option<TcpStream>>),
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

    /// Hands a joined data connection to the session, for its role.
    fn attach(&self, index: u16, stream: TcpStream) {
        let mut role = self.role.locked();
        loop {
            match &mut *role {
                SessionRole::Opening => {
                    role = self.changed.wait_for(role, Duration::from_secs(1));
                }
                SessionRole::Receive(lander) => {
                    let lander = lander.clone();
                    // The lock must not be held while the stream lands.
                    drop(role);
                    lander.land(index, stream);
                    return;
                }
                SessionRole::Streams(slots) => {
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

    /// For a push: where the receiving role hands its lander, once streams may land.
    fn receive_streams(self: &Arc<Self>) -> crate::transport::Joins {
        let session = self.clone();
        Box::new(move |lander| session.set_role(SessionRole::Receive(lander)))
    }

    /// For a pull: waits until every granted stream joined; the sockets in stream order.
    fn take_streams(&self, timeout: Duration) -> Result<Vec<TcpStream>, SessionError> {
        let mut role = self.changed.wait_while_for(
            self.role.locked(),
            timeout,
            |r| matches!(r, SessionRole::Streams(s) if s.iter().any(Option::is_none)),
        );
        match &mut *role {
            SessionRole::Streams(slots) if slots.iter().all(Option::is_some) => Ok(slots
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

    /// A pull: `n` data streams may join now, for the sending role to take.
    fn expect_streams(&self, n: u16) {
        self.set_role(SessionRole::Streams((0..n).map(|_| None).collect()));
    }

    fn set_role(&self, r: SessionRole) {
        *self.role.locked() = r;
        self.changed.notify_all();
    }
}
