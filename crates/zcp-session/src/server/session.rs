//! One authenticated session on the server: its `Open` read and granted (a client may only
//! tighten the server's limits), then the receiving role for a push or the sending role for
//! a pull, its outcome logged and turned into an exit code (`serve --once`).

use crate::error::Refusal;
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use zcp_engine::fs::Root;
use zcp_engine::pace::tcp_max_segment;
use zcp_engine::sync::Locked;
use zcp_engine::{RecvEngine, SendEngine};
use zcp_wire::udp::{TransportKind, UdpMode};
use zcp_wire::{
    ErrorCode, ExistingMode, MAX_RATE, MIN_RATE, Message, Nonce, Open, Opener, Pacing, Psk,
    RelPath, Sealer, VerifyMode, escape_text,
};

use super::access::{Granted, Live};
use super::observer::{Asked, ServerObserver, clip};
use super::{Ctx, Session, SessionRole};
use crate::confine::Scope;
use crate::conn::{ControlRx, ControlTx, FrameReader};
use crate::control::ControlWriter;
use crate::error::SessionError;
use crate::event::ServerEvent;
use crate::manifest::{Top, Walker};
use crate::recv::MAX_RECV_BLOCK;
use crate::recv::state::RxConfig;
use crate::send::SenderConfig;
use crate::transport::Link;
use crate::wiring::{Receiver, Sender, Wiring};

/// Paths one `get` may ask for.
const MAX_GETS: usize = 4096;

/// A session's control connection, before its role takes it over.
pub(super) struct Control {
    pub(super) ctl: Arc<ControlWriter>,
    rx: ControlRx,
}

impl Control {
    fn new(
        stream: TcpStream,
        sealer: Sealer,
        opener: Opener,
        idle: Duration,
    ) -> Result<Control, SessionError> {
        let io = |source: std::io::Error| {
            if zcp_engine::sys::is_fd_limit(&source) {
                super::gate::note_out_of_descriptors();
            }
            SessionError::Io {
                what: "the control connection".into(),
                source,
            }
        };
        let read_half = stream.try_clone().map_err(io)?;
        stream.set_write_timeout(Some(idle)).map_err(io)?;
        read_half
            .set_read_timeout(Some(Duration::from_millis(250)))
            .map_err(io)?;
        Ok(Control {
            ctl: Arc::new(ControlWriter::new(ControlTx { stream, sealer })),
            rx: ControlRx {
                stream: read_half,
                opener,
                reader: FrameReader::default(),
            },
        })
    }

    /// The next message, before `until` (what a client must send before its role starts —
    /// `Open`, the `Get`s — comes within one handshake timeout, however it is spread).
    pub(super) fn next(&mut self, until: Instant) -> Result<Message, SessionError> {
        loop {
            match self.rx.poll() {
                Ok(Some(m)) => return Ok(m),
                Ok(None) if Instant::now() > until => {
                    return Err(SessionError::Connection {
                        peer: "the client".into(),
                        reason:
                            "the client did not finish its request within the handshake timeout"
                                .into(),
                    });
                }
                Ok(None) => {}
                Err(e) => return Err(e.into_session("the client")),
            }
        }
    }

    /// Tells the client why, and ends the session.
    pub(super) fn refuse(&self, code: ErrorCode, message: String) -> SessionError {
        self.ctl.send_error(code, &message);
        SessionError::Refusing { code, message }
    }

    pub(super) fn opened(&self, g: &Grant) -> Result<(), SessionError> {
        self.ctl
            .send(&Message::Opened {
                streams: g.streams,
                idle_ms: g.idle.as_millis() as u32,
                pacing: g.pacing.0,
                verify: g.verify.name().into(),
                transport: g.link.kind.name().into(),
                udp_mode: g.link.udp_mode.name().into(),
            })
            .map_err(|e| e.into_session("the client"))
    }
}

/// What the server granted a session, from its `Open`.
pub(super) struct Grant {
    pull: bool,
    /// A listing (`zcp ls`): no data streams, no role.
    list: bool,
    pub(super) recursive: bool,
    recv: RecvEngine,
    send: SendEngine,
    block: u64,
    chunk_size: Option<u64>,
    streams: u16,
    idle: Duration,
    /// How the data moves: the transport, its rate control and the rate cap (held by the
    /// server only in a pull).
    link: Link,
    /// How the server will hold the cap, and why not in the kernel.
    pacing: (Pacing, Option<String>),
    /// How the session proves its data (`--verify`).
    verify: VerifyMode,
    /// What the receiver does with a file already there (`--ignore-existing`, ...).
    existing: ExistingMode,
    /// `--exclude` / `--include` rules: for the walk of a pull; what `--delete` keeps in a
    /// push.
    pub(super) filter: Arc<zcp_wire::Filter>,
    /// `--delete` or its dry run.
    pub(super) delete: zcp_wire::DeleteMode,
}

/// Checks an `Open` and grants the server's limits, or the client's tighter ones.
fn grant(ctx: &Ctx, c: &Control, open: Open, encrypted: bool) -> Result<Grant, SessionError> {
    if ctx.shutdown.load(Ordering::Relaxed) {
        let m = "the server is shutting down".to_string();
        return Err(c.refuse(ErrorCode::Busy, m));
    }
    let unknown = |what: &str, name: &str, known: Vec<&str>| {
        c.refuse(
            ErrorCode::Protocol,
            format!(
                "unknown {what} engine '{name}' (known: {})",
                known.join(", ")
            ),
        )
    };
    let recv = RecvEngine::parse(&open.recv_engine).ok_or_else(|| {
        let names = RecvEngine::ALL.iter().map(|e| e.name()).collect();
        unknown("receiver", &open.recv_engine, names)
    })?;
    let send = SendEngine::parse(&open.send_engine).ok_or_else(|| {
        let names = SendEngine::ALL.iter().map(|e| e.name()).collect();
        unknown("sender", &open.send_engine, names)
    })?;
    let verify = VerifyMode::parse(&open.verify).ok_or_else(|| {
        let names: Vec<&str> = VerifyMode::ALL.iter().map(|m| m.name()).collect();
        c.refuse(
            ErrorCode::Protocol,
            format!(
                "unknown verify mode '{}' (known: {})",
                open.verify,
                names.join(", ")
            ),
        )
    })?;
    let link = link_of(c, &open, encrypted)?;
    let existing = ExistingMode::parse(&open.existing).ok_or_else(|| {
        let names: Vec<&str> = ExistingMode::ALL.iter().map(|m| m.name()).collect();
        c.refuse(
            ErrorCode::Protocol,
            format!(
                "unknown existing-file mode '{}' (known: {})",
                escape_text(&open.existing),
                names.join(", ")
            ),
        )
    })?;
    if open.list && !open.pull {
        return Err(c.refuse(
            ErrorCode::Protocol,
            "a listing reads: its Open must say pull".into(),
        ));
    }
    if !open.pull && !open.filters.is_empty() && !open.delete.prunes() {
        return Err(c.refuse(
            ErrorCode::Protocol,
            "filter rules in a push without --delete: the client's own walk applies them".into(),
        ));
    }
    if open.delete.prunes() && (open.list || !open.recursive) {
        return Err(c.refuse(
            ErrorCode::Protocol,
            format!("{} in a listing or without -r", open.delete.flag()),
        ));
    }
    let filter = zcp_wire::Filter::from_wire(&open.filters).map_err(|e| {
        let code = match e {
            zcp_wire::FilterError::Limit(_) => ErrorCode::Limit,
            _ => ErrorCode::Protocol,
        };
        c.refuse(code, escape_text(&e.to_string()))
    })?;
    if u64::from(open.block_size) > MAX_RECV_BLOCK {
        return Err(c.refuse(
            ErrorCode::Limit,
            format!(
                "block size {} is over the server's limit of {MAX_RECV_BLOCK}",
                open.block_size
            ),
        ));
    }
    if open.chunk_size != 0 {
        zcp_wire::ChunkPlan::new(0, open.chunk_size)
            .map_err(|e| c.refuse(ErrorCode::Limit, e.to_string()))?;
    }
    if open.rate != 0 && !(MIN_RATE..=MAX_RATE).contains(&open.rate) {
        return Err(c.refuse(
            ErrorCode::Limit,
            format!(
                "rate cap {} bit/s is outside {MIN_RATE}..={MAX_RATE} bit/s",
                open.rate
            ),
        ));
    }
    // A client may only tighten the server's limits; a listing moves no data.
    let streams = match open.list {
        true => 0,
        false => open.streams.clamp(1, ctx.cfg.max_streams),
    };
    Ok(Grant {
        pull: open.pull,
        list: open.list,
        recursive: open.recursive,
        recv,
        send,
        block: u64::from(open.block_size),
        chunk_size: (open.chunk_size != 0).then_some(open.chunk_size),
        streams,
        idle: match open.idle_ms {
            0 => ctx.cfg.idle_timeout,
            ms => Duration::from_millis(u64::from(ms)).min(ctx.cfg.idle_timeout),
        },
        // In a push the client sends, and holds its own cap. The data streams take the
        // control connection's path: its segment size is theirs.
        pacing: if open.pull && !open.list {
            let mss = tcp_max_segment(std::os::fd::AsFd::as_fd(&c.rx.stream));
            link.plan(usize::from(streams), mss)
        } else {
            (Pacing::None, None)
        },
        link,
        verify,
        existing,
        filter: Arc::new(filter),
        delete: open.delete,
    })
}

/// The link an `Open` asks for; unknown names are refused by name, and so is a link that
/// cannot run (`fixed` without a rate cap would blast at an unbounded rate).
fn link_of(c: &Control, open: &Open, encrypted: bool) -> Result<Link, SessionError> {
    let known = |names: Vec<&str>| names.join(", ");
    let transport = TransportKind::parse(&open.transport).ok_or_else(|| {
        let names = TransportKind::ALL.iter().map(|t| t.name()).collect();
        c.refuse(
            ErrorCode::Protocol,
            format!(
                "unknown transport '{}' (known: {})",
                escape_text(&open.transport),
                known(names)
            ),
        )
    })?;
    let mode = UdpMode::parse(&open.udp_mode).ok_or_else(|| {
        let names = UdpMode::ALL.iter().map(|m| m.name()).collect();
        c.refuse(
            ErrorCode::Protocol,
            format!(
                "unknown UDP mode '{}' (known: {})",
                escape_text(&open.udp_mode),
                known(names)
            ),
        )
    })?;
    let link = Link {
        kind: transport,
        udp_mode: mode,
        limit_rate: (open.rate != 0).then_some(open.rate),
        encrypt: encrypted,
    };
    if let Some(problem) = link.problem() {
        return Err(c.refuse(ErrorCode::Limit, problem.into()));
    }
    Ok(link)
}

/// What a session did: files committed, directories and links, bytes on the data streams.
#[derive(Debug, Default)]
struct Served {
    files: u64,
    entries: u64,
    bytes: u64,
    resent_chunks: u64,
}

/// An authenticated control connection's keys and nonces, and who it is.
pub(super) struct Joined {
    pub(super) stream: TcpStream,
    pub(super) peer: SocketAddr,
    pub(super) sealer: Sealer,
    pub(super) opener: Opener,
    pub(super) nonces: (Nonce, Nonce),
    /// The exports and identities in force at the handshake, kept to the session's end.
    pub(super) live: Arc<Live>,
    /// Which identity's key the client holds (an index into `live`).
    pub(super) who: usize,
}

/// Runs one session to its end; its exit code (0 only when every entry arrived).
pub(super) fn run_session(ctx: &Ctx, session: &Arc<Session>, j: Joined) -> i32 {
    let mut observer = ServerObserver {
        reporter: &*ctx.reporter,
        session: session.hex.clone(),
        files: 0,
        failures: Vec::new(),
        notices: 0,
        failed_files: 0,
        ignore_existing: false,
        left_existing: 0,
        deleted: 0,
        started: false,
        asked: Asked {
            peer: j.peer,
            identity: j.live.identities[j.who].name.clone(),
            export: None,
            direction: None,
            access_refused: false,
            hidden: false,
        },
        shutdown: &ctx.shutdown,
        moved: None,
        skipped: 0,
        plan: None,
        last: None,
        progress_at: None,
    };
    let began = Instant::now();
    let result = serve(ctx, session, j, &mut observer);
    session.set_role(SessionRole::Closed);
    ctx.sessions
        .locked()
        .retain(|_, s| !Arc::ptr_eq(s, session));
    observer.finish();
    end(ctx, session, result, &observer, began)
}

/// Logs how the session ended; its exit code.
fn end(
    ctx: &Ctx,
    session: &Session,
    result: Result<Served, SessionError>,
    o: &ServerObserver<'_>,
    began: Instant,
) -> i32 {
    if !o.started {
        ctx.reporter.event(&o.refusal(result.as_ref().err()));
        return crate::exit::FAILURE;
    }
    let served = result.as_ref().ok();
    let stored = served.is_some_and(|s| s.files + s.entries > 0);
    let mut reason = result.as_ref().err().map(|e| match e {
        // The client's `Error{busy}`: it was interrupted or is stopping, not a failure here.
        SessionError::Refused {
            code: zcp_wire::ErrorCode::Busy,
            message,
        } => format!(
            "{}: {}",
            crate::event::STOPPED_BY_CLIENT,
            escape_text(message)
        ),
        e => escape_text(&e.to_string()),
    });
    if result.is_ok() && !stored && o.failures.is_empty() {
        // Nothing requested arrived, and nothing failed either: no success to report.
        reason = Some("the session ended without storing or sending anything".into());
    }
    let code = match reason {
        None => crate::exit::for_failures(o.failures.iter().copied(), stored),
        Some(_) => crate::exit::FAILURE,
    };
    ctx.reporter.event(&ServerEvent::SessionEnd {
        session: session.hex.clone(),
        ok: reason.is_none(),
        reason,
        files: served.map_or(0, |s| s.files),
        bytes: served.map_or(0, |s| s.bytes),
        seconds: began.elapsed().as_secs_f64(),
        resent_chunks: served.map_or(0, |s| s.resent_chunks),
        failed: o.failed_files,
        left: o.left_existing,
        deleted: o.deleted,
    });
    code
}

/// The session: its `Open`, then the role.
fn serve(
    ctx: &Ctx,
    session: &Arc<Session>,
    j: Joined,
    observer: &mut ServerObserver<'_>,
) -> Result<Served, SessionError> {
    let mut c = Control::new(j.stream, j.sealer, j.opener, ctx.cfg.idle_timeout)?;
    let open = match c.next(Instant::now() + ctx.cfg.handshake_timeout)? {
        Message::Open(o) => *o,
        // The client gave up before it asked for anything (a usage mistake it found after
        // authenticating, a signal): its word, not a refusal of ours.
        Message::Error { code, message } => return Err(SessionError::Refused { code, message }),
        other => {
            let m = format!("expected Open, got {}", other.name());
            return Err(c.refuse(ErrorCode::Protocol, m));
        }
    };
    observer.asked.export = Some(clip(escape_text(&open.export)));
    observer.asked.direction = Some(match (open.list, open.pull) {
        (true, _) => "list",
        (false, true) => "pull",
        (false, false) => "push",
    });
    if open.list && j.live.named() && open.export.is_empty() {
        // `zcp ls HOST:` on a server with exports: the ones this identity may use.
        let g = grant(ctx, &c, open, session.keys.encrypted())?;
        ctx.reporter.event(&ServerEvent::SessionStart {
            peer: j.peer,
            session: session.hex.clone(),
            direction: "list",
            streams: 0,
            identity: j.live.identities[j.who].name.clone(),
            export: "(its exports)".into(),
        });
        observer.started = true;
        let entries = super::list::serve_exports(ctx, c, &g, &j.live, j.who)?;
        return Ok(Served {
            entries,
            ..Served::default()
        });
    }
    // The export, and whether this identity may read or write it, before anything else.
    let export = j.live.export(j.who, &open.export, open.pull).map_err(|r| {
        // The client is told no more than for a name that is no export (no oracle); the
        // server's accounting says what it was.
        observer.asked.access_refused = matches!(r.code, ErrorCode::BadPath | ErrorCode::Auth);
        observer.asked.hidden =
            r.code == ErrorCode::BadPath && j.live.exports().any(|(name, _)| *name == open.export);
        c.refuse(r.code, r.message)
    })?;
    let identity = &j.live.identities[j.who];
    let g = grant(ctx, &c, open, session.keys.encrypted())?;
    *session.granted.locked() = g.streams;
    *session.joined.locked() = vec![false; usize::from(g.streams)];
    *session.counters.locked() = (0..g.streams)
        .map(|_| Arc::new(AtomicU64::new(0)))
        .collect();
    ctx.reporter.event(&ServerEvent::SessionStart {
        peer: j.peer,
        session: session.hex.clone(),
        direction: observer.asked.direction.unwrap_or("push"),
        streams: g.streams,
        identity: identity.name.clone(),
        export: export.name.clone(),
    });
    observer.started = true;
    observer.ignore_existing = g.existing.leaves();
    if g.list {
        let entries = super::list::serve_list(ctx, c, &g, &export, observer)?;
        return Ok(Served {
            entries,
            ..Served::default()
        });
    }
    if g.pull {
        let (peer, psk) = (j.peer, identity.psk.clone());
        serve_pull(
            ctx,
            session,
            c,
            &g,
            (peer, j.nonces, psk, &export),
            observer,
        )
    } else {
        serve_push(ctx, session, c, &g, (j.nonces, &export), observer)
    }
}

/// A push: the receiving role; the data streams join on their own connections' threads.
fn serve_push(
    ctx: &Ctx,
    session: &Arc<Session>,
    c: Control,
    g: &Grant,
    (nonces, export): ((Nonce, Nonce), &Granted),
    observer: &mut ServerObserver<'_>,
) -> Result<Served, SessionError> {
    // Skipping or refusing a file because one is there would tell an identity that may not
    // read what exists.
    if !export.permission.reads() && g.existing.reveals() {
        return Err(c.refuse(
            ErrorCode::Auth,
            format!(
                "this identity may not read {}, so it cannot ask to leave files already there \
                 (--ignore-existing, --no-clobber, --size-only and --quick-check would tell it \
                 which exist; --backup may)",
                escape_text(&export.name)
            ),
        ));
    }
    if g.delete.prunes() && !export.permission.deletes() {
        return Err(c.refuse(
            ErrorCode::Auth,
            format!(
                "this identity may not delete in {} ({} needs the access read-write-delete, \
                 which the server's operator grants in its config, or `zcp serve --root DIR \
                 --allow-delete`)",
                escape_text(&export.name),
                g.delete.flag()
            ),
        ));
    }
    let role = Receiver {
        cfg: RxConfig {
            requested: g.recv,
            block: g.block,
            idle: g.idle,
            sender_engine: g.send.name().into(),
            verify: g.verify,
            existing: g.existing,
            delete: (g.delete, g.filter.clone()),
        },
        root: export.root.clone(),
        // An identity that may not read learns nothing of what is there.
        scope: if export.permission.reads() {
            Scope::push()
        } else {
            Scope::push_blind()
        },
        // The data streams land as they join, each on a thread of its own.
        joins: Some(session.receive_streams()),
    };
    c.opened(g)?;
    let counters = session.counters.locked().clone();
    observer.moved = Some(moved(&counters));
    let wired = wiring(session, c, g, nonces, (Vec::new(), counters.clone())).wire(role);
    let udp = wired.udp();
    let ran = wired.run(observer);
    if let Some(stats) = udp {
        udp_note(ctx, session, &stats, g.link.udp_mode);
    }
    let (totals, _) = ran?;
    Ok(Served {
        files: totals.files,
        entries: totals.entries,
        // Counted here, as the bytes landed: the client's own count (its `Stats`) is its word.
        bytes: moved(&counters)(),
        resent_chunks: totals.mismatches,
    })
}

/// What the data streams counted so far.
fn moved(counters: &[Arc<AtomicU64>]) -> Box<dyn Fn() -> u64 + Send> {
    let counters = counters.to_vec();
    Box::new(move || counters.iter().map(|c| c.load(Ordering::Relaxed)).sum())
}

/// The session's connections, for its role.
fn wiring(
    session: &Session,
    c: Control,
    g: &Grant,
    nonces: (Nonce, Nonce),
    (data, counters): (Vec<TcpStream>, Vec<Arc<AtomicU64>>),
) -> Wiring {
    Wiring {
        ctl: c.ctl,
        rx: c.rx,
        keys: session.keys.clone(),
        nonces,
        link: g.link,
        data,
        counters,
        udp: None,
    }
}

/// A pull: the paths (within one handshake timeout), the data streams, the sending role.
fn serve_pull(
    ctx: &Ctx,
    session: &Arc<Session>,
    mut c: Control,
    g: &Grant,
    (peer, nonces, psk, export): (SocketAddr, (Nonce, Nonce), Psk, &Granted),
    observer: &mut ServerObserver<'_>,
) -> Result<Served, SessionError> {
    session.expect_streams(g.streams);
    c.opened(g)?;
    let until = Instant::now() + ctx.cfg.handshake_timeout;
    let mut tops = Vec::new();
    loop {
        match c.next(until)? {
            Message::Get { path, dest } => {
                let top =
                    get_top(&export.root, &path, &dest).map_err(|r| c.refuse(r.code, r.message))?;
                tops.push(top);
            }
            Message::GetEnd => break,
            other => {
                let m = format!("expected Get, got {}", other.name());
                return Err(c.refuse(ErrorCode::Protocol, m));
            }
        }
        if tops.len() > MAX_GETS {
            let m = format!("more than {MAX_GETS} paths in one get");
            return Err(c.refuse(ErrorCode::Limit, m));
        }
    }
    let data = session.take_streams(ctx.cfg.handshake_timeout.max(g.idle))?;
    let counters = session.counters.locked().clone();
    observer.moved = Some(moved(&counters));
    let role = Sender {
        cfg: SenderConfig {
            engine: g.send,
            // The client's block sizes the `rw` engine's buffer and the `splice` engine's
            // pipe on every stream: held to the session's 128 MiB as a receiver's are.
            block: g
                .block
                .min(crate::recv::BUFFER_BUDGET / u64::from(g.streams.max(1))),
            chunk_size: g.chunk_size,
            idle: g.idle,
            verify: g.verify,
            delete: g.delete,
            recv_engine: g.recv,
        },
        walker: Walker::new(tops, g.recursive).filtered(g.filter.clone()),
        psk,
        peer: peer.to_string(),
        plan: Some(g.pacing.clone()),
    };
    let n = data.len();
    let ctl = c.ctl.clone();
    let wired = wiring(session, c, g, nonces, (data, counters.clone())).wire(role);
    if let Some(limit) = wired.limit() {
        let mut message = format!(
            "rate cap {} bit/s over {n} streams, pacing: {}",
            limit.bits_per_second, limit.pacing
        );
        if let Some(note) = wired.note() {
            message.push_str(&format!(" ({note})"));
        }
        ctx.reporter.event(&ServerEvent::Note {
            session: session.hex.clone(),
            message,
        });
        if wired.pacing() != g.pacing.0 {
            // Opened promised the kernel; the client's report should not.
            let note = wired.note().unwrap_or_default();
            let _ = ctl.send(&Message::Notice { message: note });
        }
    }
    let udp = wired.udp();
    let ran = wired.run(observer);
    if let Some(stats) = udp {
        udp_note(ctx, session, &stats, g.link.udp_mode);
    }
    let (totals, _) = ran?;
    Ok(Served {
        files: totals.files,
        entries: totals.entries,
        bytes: moved(&counters)(),
        resent_chunks: totals.resent,
    })
}

/// The server log's line on a UDP session's datagrams (its own side's counts).
fn udp_note(ctx: &Ctx, session: &Session, stats: &crate::transport::udp::UdpStats, mode: UdpMode) {
    let u = stats.report(mode);
    let message = format!(
        "udp {} ({}, {} B payloads): {} datagrams sent, {} received, {} lost, {} re-sent, \
         {} receiver drops, {} refused, {} duplicates, {} rate cuts; chunk buffers at most {} \
         of {} bytes",
        u.mode,
        u.engines,
        u.payload,
        u.sent,
        u.received,
        u.lost,
        u.resent,
        u.receiver_drops,
        u.rejected,
        u.duplicates,
        u.cuts,
        stats.memory.peak(),
        stats.memory.limit(),
    );
    ctx.reporter.event(&ServerEvent::Note {
        session: session.hex.clone(),
        message,
    });
}

/// Where a pulled path starts: its directory resolved beneath the root now (never through a
/// symlink), so a path that is not there is refused before the session; reopened by the walk.
pub(crate) fn get_top(root: &Arc<Root>, path: &[u8], dest: &[u8]) -> Result<Top, Refusal> {
    let p = RelPath::parse(path).map_err(|e| Refusal::new(ErrorCode::BadPath, e.to_string()))?;
    let Some((last, parent)) = p.components().split_last() else {
        return Err(Refusal::new(
            ErrorCode::BadPath,
            "name a path below the server's root or export, not the root itself",
        ));
    };
    root.open_dir(parent, false)
        .map_err(|e| Refusal::new(ErrorCode::BadPath, format!("source {e} on the server")))?;
    let dest = if dest.is_empty() {
        last.clone()
    } else {
        dest.to_vec()
    };
    RelPath::parse(&dest).map_err(|e| Refusal::new(ErrorCode::BadPath, e.to_string()))?;
    Ok(Top::Beneath {
        root: root.clone(),
        parent: parent.to_vec(),
        name: last.clone(),
        dest,
        display: path.to_vec(),
    })
}
