//! The client: `zcp send` (push: the client sends) and `zcp get` (pull: the server sends).
//!
//! Both connect, authenticate, ask for a session with `Open`, open the data streams the server
//! granted (the client always connects, so a firewall need only let one port in), and then
//! run a role: the [`crate::sender`] for a push, the [`crate::receiver`] for a pull. A
//! [`ClientObserver`] turns what the role reports into [`Event`]s, adds the interval reports
//! from the streams' counters and `TCP_INFO`, and builds the [`Summary`].

mod list;
mod observer;
mod open;
mod route;
mod ssh;
mod tunnel;

pub use list::{ListOptions, ListOutcome, Listed, list};
pub use ssh::{LineSink, READY, Relay, RemoteRoot, SECRET, Ssh};

use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use zcp_engine::fs::Root;
use zcp_engine::sys::{process_usage, thread_usage};
use zcp_engine::{RecvEngine, SendEngine};
use zcp_wire::{ExistingMode, Message, Psk, VerifyMode, escape};

use crate::confine::{Requested, Scope};
use crate::conn::ClientSession;
use crate::conn::ControlRx;
use crate::control::ControlWriter;
use crate::error::SessionError;
use crate::event::Encryption;
use crate::event::{Cpu, Event, Observer, Phase, Progress, Reporter, Retry, Summary};
use crate::manifest::{Top, Walker, join};
use crate::recv::state::RxConfig;
use crate::send::SenderConfig;
use crate::transport::Link;
use crate::wiring::{Receiver, Role, Sender, Wired, Wiring};
use observer::{ClientObserver, Measured};
use open::{Opened, open_message, open_session, start_event};
use route::{reach, through_ssh, unreachable};
use zcp_wire::{Nonce, SessionKeys};

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
    /// Times a failed session is tried again (`--retry`): only failures another try may
    /// mend (see [`SessionError::retryable`]); each try resumes what is durable.
    pub retries: u32,
    /// Wait before the first retry; each later one waits twice as long, up to
    /// [`MAX_RETRY_WAIT`].
    pub retry_wait: Duration,
    /// Set to a signal's number to stop the transfer: it ends as after a lost connection,
    /// keeping what is durable, with [`SessionError::Stopped`].
    pub stop: Option<StopFlag>,
    /// How the session proves its data (`--verify`): keyed BLAKE3 unless asked otherwise.
    pub verify: VerifyMode,
    /// How the data moves: the transport (`--transport`, TCP unless asked otherwise), its
    /// rate control (`--udp-mode`) and the rate cap (`--limit-rate`), which the sending
    /// side holds (the server in a `get`).
    pub link: Link,
    /// What the receiver does with a file already at a destination (`--ignore-existing`,
    /// `--no-clobber`, `--backup`): the server in a push, this side in a get.
    pub existing: ExistingMode,
    /// `--exclude` / `--include` rules, in order: the walk of a push here, the server's walk
    /// in a get (they travel in `Open`).
    pub filter: Vec<zcp_wire::FilterRule>,
    /// `--delete` or `--delete-dry-run` (with `recursive`): the receiver removes what the
    /// sender does not have inside the trees copied, once every entry is in.
    pub delete: zcp_wire::DeleteMode,
}

/// Set to a signal's number (non-zero) to stop a running transfer.
pub type StopFlag = Arc<std::sync::atomic::AtomicUsize>;

/// Longest wait between two tries.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(300);
/// Shortest wait before a retry, whatever `--retry-wait` says: no retry loop spins.
const MIN_RETRY_WAIT: Duration = Duration::from_millis(100);

/// Runs `once` until it succeeds, fails for good, or the tries allowed are used up; tells
/// the reporter before each retry and how long it waits.
fn retrying(
    t: &Transfer,
    reporter: &mut dyn Reporter,
    mut once: impl FnMut(&mut dyn Reporter, u32) -> Result<Summary, SessionError>,
) -> Result<Summary, SessionError> {
    let attempts = t.retries.saturating_add(1);
    let mut attempt = 1;
    // Whether a try got past connecting (it may have moved data).
    let mut reached = false;
    let stopped = |during: &str| {
        let s = t.stop.as_ref().map_or(0, |s| s.load(Ordering::Relaxed));
        (s != 0).then(|| SessionError::Stopped {
            reason: format!(
                "the client was interrupted ({}) {during}",
                observer::signal_name(s as i32)
            ),
            durable: None,
        })
    };
    loop {
        if attempt > 1
            && let Some(e) = stopped("before trying again")
        {
            return Err(e);
        }
        let e = match once(reporter, attempt - 1) {
            Err(e) if e.retryable() && attempt < attempts => e,
            // A connection refused now, after an earlier try reached the server: what that
            // one moved may be held there, so this is no "nothing was sent".
            Err(SessionError::Connect { addr, source }) if reached => {
                return Err(SessionError::Connection {
                    peer: addr,
                    reason: format!(
                        "cannot connect again after {} tr{}: {source}",
                        attempt - 1,
                        if attempt == 2 { "y" } else { "ies" }
                    ),
                });
            }
            done => return done,
        };
        reached |= !matches!(e, SessionError::Connect { .. });
        let shift = (attempt - 1).min(16);
        let first = t.retry_wait.max(MIN_RETRY_WAIT);
        let wait = (first * (1u32 << shift)).min(MAX_RETRY_WAIT.max(first));
        attempt += 1;
        tracing::info!(attempt, attempts, wait_s = wait.as_secs_f64(), error = %e, "retrying");
        reporter.event(&Event::Retry(Retry {
            attempt,
            attempts,
            reason: e.to_string(),
            wait: wait.as_secs_f64(),
        }));
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if let Some(e) = stopped("while waiting to retry") {
                return Err(e);
            }
            std::thread::sleep(Duration::from_millis(50).min(until - Instant::now()));
        }
    }
}

/// `role` wired over the session's connections as the transfer's link says.
fn wire<R: Role>(
    ctl: Arc<ControlWriter>,
    (rx, keys, nonces): (ControlRx, SessionKeys, (Nonce, Nonce)),
    t: &Transfer,
    (data, counters): (Vec<std::net::TcpStream>, &[Arc<AtomicU64>]),
    role: R,
) -> Wired<R> {
    Wiring {
        ctl,
        rx,
        keys,
        nonces,
        link: t.link,
        data,
        counters: counters.to_vec(),
        udp: None,
    }
    .wire(role)
}

/// The observer of a wired role: its start (and the note on streams the server capped), the
/// streams it reports on, and what the transport says of itself (the cap's note, UDP's
/// counters).
fn observe<'a, R: Role>(
    reporter: &'a mut dyn Reporter,
    (start, capped): (crate::event::Start, Option<String>),
    t: &Transfer,
    (socks, counters): (Vec<std::net::TcpStream>, Vec<Arc<AtomicU64>>),
    wired: &Wired<R>,
) -> ClientObserver<'a> {
    let mut obs = ClientObserver::new(reporter, start, t.interval, socks, counters, t.stop.clone());
    obs.ignore_existing = t.existing.leaves();
    obs.notice(None, capped);
    obs.notice(None, wired.note());
    obs.udp = wired.udp().map(|s| (s, t.link.udp_mode));
    obs
}

/// The data connections again, for the reports' `TCP_INFO`.
fn clones(data: &[std::net::TcpStream]) -> Vec<std::net::TcpStream> {
    data.iter().filter_map(|s| s.try_clone().ok()).collect()
}

/// A byte counter for each of `streams` data streams.
fn stream_counters(streams: u16) -> Vec<Arc<AtomicU64>> {
    (0..streams).map(|_| Arc::new(AtomicU64::new(0))).collect()
}

/// A remote path as the user wrote it: over ssh an absolute one has its `/` again.
fn shown_remote(ssh: &Option<Ssh>, path: &[u8]) -> String {
    match ssh.as_ref().map(|s| s.root) {
        Some(RemoteRoot::Slash) if path == b"." => "/".into(),
        Some(RemoteRoot::Slash) => escape(&[b"/", path].concat()),
        _ => escape(path),
    }
}

/// The sender engine as the summary names it: encrypted, no engine moves the file's pages
/// untouched; each chunk is read into a record, hashed and sealed there ("sealed").
fn sender_engine(keys: &zcp_wire::SessionKeys, named: String) -> String {
    match keys.encrypted() {
        true => SEALED_ENGINE.into(),
        false => named,
    }
}

/// The sender engine of an encrypted session, as reports name it.
pub(crate) const SEALED_ENGINE: &str = "sealed";

/// Shows that the session is connecting (before anything else is known).
fn connecting(reporter: &mut dyn Reporter, size: Option<u64>) {
    reporter.event(&Event::Progress(Progress {
        phase: Phase::Connecting,
        bytes: 0,
        total_bytes: size,
        files: 0,
        total_files: size.map(|_| 1),
        seconds: 0.0,
    }));
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
    /// Reach the host over ssh (`[USER@]HOST:PATH`): each try starts zcp there, and `conn`
    /// gives only the timeouts.
    pub ssh: Option<Ssh>,
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
    /// Reach the host over ssh (`[USER@]HOST:PATH`): each try starts zcp there, and `conn`
    /// gives only the timeouts.
    pub ssh: Option<Ssh>,
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

/// The transfer's `--exclude` / `--include` rules, compiled: a rule that does not parse is a
/// usage error, said before connecting.
pub(crate) fn compile_filter(t: &Transfer) -> Result<zcp_wire::Filter, SessionError> {
    zcp_wire::Filter::new(&t.filter)
        .map_err(|e| SessionError::Usage(escape(e.to_string().as_bytes())))
}

/// Sends files and trees; returns once every entry is committed or failed and the session
/// has ended (tried again as `--retry` allows). The summary is also pushed to `reporter`.
pub fn send(opts: &SendOptions, reporter: &mut dyn Reporter) -> Result<Summary, SessionError> {
    retrying(&opts.transfer, reporter, |r, retries| {
        let far = reach(&opts.ssh, &opts.conn, &opts.transfer, r)?;
        let conn = far.as_ref().map(|f| f.connection(&opts.conn));
        let ran = send_once(opts, conn.as_ref().unwrap_or(&opts.conn), r, retries);
        unreachable(&opts.ssh, through_ssh((&opts.ssh, &far), ran, r))
    })
}

/// What cannot be sent at all, said before connecting: a bad destination, no sources, a
/// source that is not there, a directory without `-r`, a device, FIFO or socket.
fn check_sources(opts: &SendOptions) -> Result<(), SessionError> {
    zcp_wire::RelPath::parse(&opts.dest).map_err(|e| {
        SessionError::Usage(format!("invalid destination '{}': {e}", escape(&opts.dest)))
    })?;
    if opts.sources.is_empty() {
        return Err(SessionError::Source {
            path: String::new(),
            reason: "nothing to send".into(),
        });
    }
    for s in &opts.sources {
        let shown = escape(s.as_os_str().as_bytes());
        let m = std::fs::metadata(s).map_err(|e| SessionError::Source {
            path: shown.clone(),
            reason: e.to_string(),
        })?;
        if m.is_dir() && !opts.transfer.recursive {
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
    Ok(())
}

fn send_once(
    opts: &SendOptions,
    conn: &Connection,
    reporter: &mut dyn Reporter,
    retries: u32,
) -> Result<Summary, SessionError> {
    let t = &opts.transfer;
    let filter = compile_filter(t)?;
    check_sources(opts)?;
    let (_, lone_file) = send_tops(&opts.sources, &opts.dest);
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
    connecting(reporter, size);
    let Opened {
        cs,
        streams,
        idle,
        data,
        capped,
        paths,
        ..
    } = open_session(
        conn,
        open_message(t, false, conn.idle_timeout),
        std::slice::from_ref(&opts.dest),
        t.link.encrypt,
    )?;
    // Beneath the export, when the server has them.
    let (tops, _) = send_tops(&opts.sources, &paths[0]);
    let counters = stream_counters(streams);
    let mut start = start_event(
        &cs,
        "send",
        source_shown.join(" "),
        shown_remote(&opts.ssh, &opts.dest),
        size,
        t,
        streams,
    );
    let peer = cs.peer.to_string();
    let ClientSession {
        tx,
        rx,
        keys,
        nonces,
        ..
    } = cs;
    let socks = clones(&data);
    let role = Sender {
        cfg: SenderConfig {
            engine: t.engine,
            block: t.block_size,
            chunk_size: t.chunk_size,
            idle,
            verify: t.verify,
            delete: t.delete,
            recv_engine: t.recv_engine,
        },
        walker: Walker::new(tops, t.recursive).filtered(Arc::new(filter)),
        psk: conn.psk.clone(),
        peer,
        plan: None,
    };
    let ctl = Arc::new(ControlWriter::new(tx));
    let cipher = keys.clone();
    let wired = wire(ctl, (rx, keys, nonces), t, (data, &counters), role);
    let limit_rate = wired.limit();
    start.limit_rate = limit_rate.clone();
    let mut obs = observe(reporter, (start, capped), t, (socks, counters), &wired);
    if opts.ssh.is_some() && !cipher.encrypted() {
        obs.notice(None, Some(ssh::IN_THE_CLEAR.into()));
    }
    let (totals, reader_usage) = wired.run(&mut obs).map_err(|e| with_committed(e, &obs))?;
    obs.flush_start();
    obs.done();
    obs.last_interval(totals.send_end.unwrap_or_else(Instant::now));
    let mut usage = thread_usage().since(&usage0);
    usage.add(&reader_usage);
    usage.add(&totals.usage);
    let end = totals.last_commit.unwrap_or_else(Instant::now);
    let peer = &totals.peer;
    Ok(obs.summary(Measured {
        entries: totals.entries,
        resent_chunks: totals.resent,
        end,
        send_end: totals.send_end.unwrap_or(end),
        sender_engine: sender_engine(&cipher, totals.engine.unwrap_or(t.engine).name().into()),
        receiver_engine: (totals.receiver_engine.clone())
            .unwrap_or_else(|| t.recv_engine.name().into()),
        sender_cpu: Cpu::new(usage.user, usage.sys),
        sender_data_cpu: Cpu::new(totals.data_usage.user, totals.data_usage.sys),
        receiver_cpu: peer_cpu(peer),
        sender_max_rss: process_usage().max_rss_bytes,
        receiver_max_rss: peer.max_rss_bytes,
        target: match (&totals.stored_as, lone_file) {
            (Some(t), true) => shown_remote(&opts.ssh, t),
            _ => shown_remote(&opts.ssh, &opts.dest),
        },
        retries,
        limit_rate,
        encryption: Encryption::of(&cipher, true, peer.cipher_us),
    }))
}

/// A stopped session's durable bytes, with the files already committed counted in.
fn with_committed(e: SessionError, obs: &ClientObserver<'_>) -> SessionError {
    match e {
        SessionError::Stopped { reason, durable } => SessionError::Stopped {
            reason,
            durable: durable.map(|d| d + obs.committed().1),
        },
        other => other,
    }
}

/// The CPU time a peer reported in its `Stats`.
fn peer_cpu(s: &zcp_wire::SideStats) -> Cpu {
    Cpu::new(
        Duration::from_micros(s.cpu_user_us),
        Duration::from_micros(s.cpu_sys_us),
    )
}

/// Where one fetched path is stored, shown: the destination directory joined with its name.
fn stored_as(root: &Path, names: &[Vec<u8>]) -> Option<String> {
    match names {
        [one] => Some(escape(
            root.join(std::ffi::OsStr::from_bytes(one))
                .as_os_str()
                .as_bytes(),
        )),
        _ => None,
    }
}

/// What a `get` asks for and where it goes, checked before connecting.
struct PullPlan {
    /// The name each path takes locally: the server may send these and (with `-r`) what is
    /// beneath them, nothing else.
    names: Vec<Vec<u8>>,
    /// The local directory the names are in.
    root_path: PathBuf,
    /// One path, stored under the new name the destination gives it.
    one_new_name: bool,
}

/// Checks a `get`'s paths and destination: one path into something that is not a
/// directory takes that name; otherwise everything goes into the destination directory.
fn pull_plan(opts: &GetOptions) -> Result<PullPlan, SessionError> {
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
    Ok(PullPlan {
        names,
        root_path,
        one_new_name,
    })
}

/// Asks for each path under its local name, then says that is all (one batch).
fn ask(ctl: &ControlWriter, paths: &[Vec<u8>], names: Vec<Vec<u8>>) -> Result<(), SessionError> {
    let _cork = ctl.cork();
    for (path, name) in paths.iter().zip(names) {
        ctl.send(&Message::Get {
            path: path.clone(),
            dest: name,
        })
        .map_err(|e| e.into_session("the server"))?;
    }
    ctl.send(&Message::GetEnd)
        .map_err(|e| e.into_session("the server"))
}

/// Fetches paths from the server; returns once every entry is committed or failed and the
/// session has ended (tried again as `--retry` allows). The summary is also pushed to
/// `reporter`.
pub fn get(opts: &GetOptions, reporter: &mut dyn Reporter) -> Result<Summary, SessionError> {
    retrying(&opts.transfer, reporter, |r, retries| {
        let far = reach(&opts.ssh, &opts.conn, &opts.transfer, r)?;
        let conn = far.as_ref().map(|f| f.connection(&opts.conn));
        let ran = get_once(opts, conn.as_ref().unwrap_or(&opts.conn), r, retries);
        unreachable(&opts.ssh, through_ssh((&opts.ssh, &far), ran, r))
    })
}

fn get_once(
    opts: &GetOptions,
    conn: &Connection,
    reporter: &mut dyn Reporter,
    retries: u32,
) -> Result<Summary, SessionError> {
    let t = &opts.transfer;
    let PullPlan {
        names,
        root_path,
        one_new_name,
    } = pull_plan(opts)?;
    let filter = Arc::new(compile_filter(t)?);
    let scope = Scope::pull(Requested {
        names: names.clone(),
        recursive: t.recursive,
        filter: filter.clone(),
    });
    // A destination directory that is not there yet is made only once the server answered:
    // a refused or failed connection leaves nothing behind.
    let early = (one_new_name || root_path.is_dir())
        .then(|| Root::open(&root_path))
        .transpose()?;
    let usage0 = thread_usage();
    connecting(reporter, None);
    let Opened {
        cs,
        streams,
        idle,
        data,
        capped,
        pacing,
        paths,
    } = open_session(
        conn,
        open_message(t, true, conn.idle_timeout),
        &opts.paths,
        t.link.encrypt,
    )?;
    // The server holds the cap, and said how.
    let limit_rate = t.link.limit(pacing);
    let root = Arc::new(match early {
        Some(root) => root,
        None => {
            // Made durably: each directory it makes is synced into its parent.
            zcp_engine::fs::create_dir_all_durable(&root_path).map_err(|e| SessionError::Io {
                what: format!("creating {}", root_path.display()),
                source: match e {
                    zcp_engine::EngineError::Sys { source, .. } => source,
                    other => std::io::Error::other(other.to_string()),
                },
            })?;
            Root::open(&root_path)?
        }
    });
    let counters = stream_counters(streams);
    let shown: Vec<String> = opts
        .paths
        .iter()
        .map(|p| shown_remote(&opts.ssh, p))
        .collect();
    let mut start = start_event(
        &cs,
        "get",
        shown.join(" "),
        escape(opts.dest.as_os_str().as_bytes()),
        None,
        t,
        streams,
    );
    start.limit_rate = limit_rate.clone();
    let ClientSession {
        tx,
        rx,
        keys,
        nonces,
        ..
    } = cs;
    let ctl = Arc::new(ControlWriter::new(tx));
    let role = Receiver {
        cfg: RxConfig {
            requested: t.recv_engine,
            block: t.block_size,
            idle,
            sender_engine: sender_engine(&keys, t.engine.name().into()),
            verify: t.verify,
            existing: t.existing,
            delete: (t.delete, filter),
        },
        root,
        scope,
        joins: None,
    };
    let socks = clones(&data);
    let cipher = keys.clone();
    let wired = wire(ctl.clone(), (rx, keys, nonces), t, (data, &counters), role);
    let mut obs = observe(reporter, (start, capped), t, (socks, counters), &wired);
    if opts.ssh.is_some() && !cipher.encrypted() {
        obs.notice(None, Some(ssh::IN_THE_CLEAR.into()));
    }
    let stored = stored_as(&root_path, &names);
    ask(&ctl, &paths, names)?;
    let (totals, mut reader_usage) = wired.run(&mut obs).map_err(|e| with_committed(e, &obs))?;
    obs.flush_start();
    obs.done();
    obs.last_interval(Instant::now());
    reader_usage.add(&thread_usage().since(&usage0));
    let mut usage = totals.usage;
    usage.add(&reader_usage);
    let end = Instant::now();
    Ok(obs.summary(Measured {
        entries: totals.entries,
        resent_chunks: 0,
        end,
        send_end: end,
        sender_engine: sender_engine(
            &cipher,
            (obs.sender_engine.clone()).unwrap_or_else(|| t.engine.name().into()),
        ),
        receiver_engine: (obs.receiver_engine.clone())
            .unwrap_or_else(|| t.recv_engine.name().into()),
        sender_cpu: peer_cpu(&totals.peer),
        sender_data_cpu: Cpu::default(),
        receiver_cpu: Cpu::new(usage.user, usage.sys),
        sender_max_rss: totals.peer.max_rss_bytes,
        receiver_max_rss: process_usage().max_rss_bytes,
        target: stored.unwrap_or_else(|| escape(opts.dest.as_os_str().as_bytes())),
        retries,
        limit_rate,
        encryption: Encryption::of(&cipher, false, totals.peer.cipher_us),
    }))
}
