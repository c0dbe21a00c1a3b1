//! The accept loop's one thread: the listeners and every connection still in its handshake
//! wait on one poller ([`zcp_engine::poller`]), and the [`PendingTable`] decides who stays.
//!
//! A pending connection costs a descriptor, a table entry and at most a frame's bytes, never
//! a thread: only an authenticated connection gets one (its session's, or its data stream's).
//! A newcomer is always admitted; when the table or its source's share is full, it evicts a
//! connection that got less far (see [`super::pending`]). Deadlines are the table's; evictions,
//! expiries and connections their peer closed before a whole handshake are logged as a
//! summary at most once a second ([`ServerEvent::Shed`]), since whoever opens and holds
//! connections decides how many there are; a handshake that fails on what the peer sent (a
//! bad frame, a wrong key) is logged on its own line, up to [`LINES_PER_SUMMARY`] a second,
//! and counted in the summary beyond that. Out of file descriptors
//! (`EMFILE`), a pending connection is shed to make room; with none to shed, the listeners
//! rest for [`REST`] instead of spinning on a backlog the loop cannot take. A session that
//! finds the process out of descriptors (opening a file, [`note_out_of_descriptors`]) makes
//! the next turn shed up to [`SHED_FOR_SESSIONS`] pending connections the same way: the
//! descriptors are the process's, so whoever holds connections in their handshake gives way
//! to the sessions.

use std::collections::HashMap;
use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use zcp_engine::poller::{Poller, Ready};
use zcp_engine::sync::Locked;
use zcp_wire::{ErrorCode, Message};

use super::handshake::{PEER_CLOSED, Pending};
use super::pending::{Id, Limits, PendingTable, Shed, Source};
use super::{Ctx, Joined, session};
use crate::event::ServerEvent;

/// Listener tokens have this bit set; connection tokens are table ids.
const LISTENER: u64 = 1 << 63;
/// Most connections taken from one listener per turn (the pending ones get their turn too).
const ACCEPT_BURST: usize = 64;
/// Longest wait per turn: the caller checks its stop flag this often.
const TICK: Duration = Duration::from_millis(100);
/// How long the listeners rest when the process is out of descriptors and nothing pending
/// can be shed.
pub(super) const REST: Duration = Duration::from_millis(100);
/// Pending connections shed in one turn after a session found the process out of
/// descriptors.
const SHED_FOR_SESSIONS: usize = 8;

/// Times a session found the process out of file descriptors: process-wide, as they are.
static OUT_OF_DESCRIPTORS: AtomicU64 = AtomicU64::new(0);

/// A session could not open a file or a connection for want of descriptors: the accept
/// loop sheds pending connections on its next turn to make room.
pub(crate) fn note_out_of_descriptors() {
    OUT_OF_DESCRIPTORS.fetch_add(1, Ordering::Relaxed);
}

/// Shortest time between two [`ServerEvent::Shed`] summaries.
const SUMMARY_EVERY: Duration = Duration::from_secs(1);
/// Failed handshakes logged one by one per [`SUMMARY_EVERY`]; the rest are counted in the
/// summary (this thread must not spend itself writing a flood of lines).
const LINES_PER_SUMMARY: u64 = 20;

/// Sheds since the last summary.
#[derive(Debug, Default)]
struct Tally {
    evicted: u64,
    expired: u64,
    gave_up: u64,
    probes: u64,
    descriptors: u64,
    /// Failed handshakes logged on their own line, and the ones beyond that only counted.
    logged: u64,
    unlogged: u64,
    last: Option<Instant>,
}

/// The listeners and the connections in their handshake.
pub(super) struct Gate<'a> {
    ctx: &'a Arc<Ctx>,
    listeners: &'a [TcpListener],
    poller: Poller,
    table: PendingTable,
    conns: HashMap<Id, Pending>,
    ready: Vec<Ready>,
    /// [`OUT_OF_DESCRIPTORS`] as of the last turn.
    sessions_short: u64,
    /// The listeners are out of the poller until then (out of descriptors).
    resting: Option<Instant>,
    tally: Tally,
    /// The table's size: `--max-pending`, or half the descriptor limit when that is less.
    max: usize,
}

impl<'a> Gate<'a> {
    pub(super) fn new(
        ctx: &'a Arc<Ctx>,
        listeners: &'a [TcpListener],
        poller: Poller,
    ) -> io::Result<Gate<'a>> {
        for (i, l) in listeners.iter().enumerate() {
            poller.add(l, LISTENER | i as u64)?;
        }
        // Pending connections may take at most half the descriptors: the sessions need the
        // rest (their connections, part files and journals).
        let fd_share = zcp_engine::sys::open_files_limit().map_or(usize::MAX, |n| n as usize / 2);
        let limits = Limits {
            max: ctx.cfg.max_pending.min(fd_share),
            per_source: ctx.cfg.max_pending_per_source,
            timeout: ctx.cfg.handshake_timeout,
        };
        Ok(Gate {
            ctx,
            listeners,
            poller,
            table: PendingTable::new(limits),
            conns: HashMap::new(),
            ready: Vec::new(),
            resting: None,
            sessions_short: OUT_OF_DESCRIPTORS.load(Ordering::Relaxed),
            tally: Tally::default(),
            max: limits.max,
        })
    }

    /// One turn: waits at most [`TICK`] (less when a deadline falls sooner), takes new
    /// connections, advances the handshakes that have bytes, sheds the expired ones.
    pub(super) fn turn(&mut self, ended: &mpsc::Sender<i32>) {
        let now = Instant::now();
        self.wake_listeners(now);
        let mut wait = TICK;
        for at in [self.table.next_deadline(now), self.resting]
            .into_iter()
            .flatten()
        {
            wait = wait.min(at.saturating_duration_since(now) + Duration::from_millis(1));
        }
        let mut ready = std::mem::take(&mut self.ready);
        if self.poller.wait(wait, &mut ready).is_err() {
            std::thread::sleep(Duration::from_millis(10));
        }
        for r in &ready {
            if r.token & LISTENER != 0 {
                self.accept_burst((r.token & !LISTENER) as usize, ended);
            } else {
                self.advance(r.token, ended);
            }
        }
        self.ready = ready;
        let now = Instant::now();
        for id in self.table.expire(now) {
            self.shed(id, Shed::Expired);
        }
        let short = OUT_OF_DESCRIPTORS.load(Ordering::Relaxed);
        if short != self.sessions_short {
            self.sessions_short = short;
            self.tally.descriptors += 1;
            for _ in 0..SHED_FOR_SESSIONS {
                self.shed_one();
            }
        }
        self.summarize(now);
    }

    /// Takes what waits on listener `i`, up to [`ACCEPT_BURST`].
    fn accept_burst(&mut self, i: usize, ended: &mpsc::Sender<i32>) {
        for _ in 0..ACCEPT_BURST {
            match self.listeners[i].accept() {
                Ok((stream, peer)) => self.admit(stream, peer, ended),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionAborted | io::ErrorKind::Interrupted
                    ) => {}
                Err(e) => {
                    // Out of descriptors (or kernel memory): a pending connection makes room;
                    // with none, rest rather than spin on a backlog that cannot be taken.
                    let fd_limit = zcp_engine::sys::is_fd_limit(&e);
                    if fd_limit {
                        self.tally.descriptors += 1;
                    }
                    // One a turn: the next `accept` waits for the next poll, so the
                    // connections still in their handshake advance in between.
                    match self.table.busiest() {
                        Some(_) if fd_limit => return self.shed_one(),
                        _ => return self.rest(),
                    }
                }
            }
        }
    }

    /// Sheds the least advanced connection of all (`PendingTable::evict_one`).
    fn shed_one(&mut self) {
        if let Some(id) = self.table.evict_one() {
            self.shed(id, Shed::Evicted);
        }
    }

    /// Takes the listeners out of the poller for [`REST`].
    fn rest(&mut self) {
        for l in self.listeners {
            let _ = self.poller.remove(l);
        }
        self.resting = Some(Instant::now() + REST);
    }

    fn wake_listeners(&mut self, now: Instant) {
        if self.resting.is_some_and(|t| now >= t) {
            for (i, l) in self.listeners.iter().enumerate() {
                let _ = self.poller.add(l, LISTENER | i as u64);
            }
            self.resting = None;
        }
    }

    /// A new connection into the table (evicting one if it must), then its first bytes: a
    /// client's `Hello` usually came with it.
    fn admit(&mut self, stream: TcpStream, peer: SocketAddr, ended: &mpsc::Sender<i32>) {
        let (id, evicted) = self.table.admit(Instant::now(), Source::of(peer.ip()));
        if let Some(v) = evicted {
            self.shed(v, Shed::Evicted);
        }
        let p = Pending::new(stream, peer);
        if self.poller.add(&p.stream, id).is_err() {
            self.table.remove(id);
            return;
        }
        self.conns.insert(id, p);
        self.advance(id, ended);
    }

    /// Advances connection `id`'s handshake with what it sent.
    fn advance(&mut self, id: Id, ended: &mpsc::Sender<i32>) {
        let Some(p) = self.conns.get_mut(&id) else {
            return; // shed earlier in this turn
        };
        match p.on_readable(self.ctx) {
            Ok(None) => self.table.progress(id, p.stage()),
            Ok(Some(joined)) => {
                let p = self.take(id);
                hand_off(self.ctx, p, joined, ended);
            }
            // Closed or reset before its first byte: a probe, not a refusal.
            Err(_) if p.heard_nothing() => {
                self.take(id);
                self.tally.probes += 1;
            }
            Err(r) if r.message == PEER_CLOSED => {
                self.take(id);
                self.tally.gave_up += 1;
            }
            Err(r) => {
                let mut p = self.take(id);
                if self.tally.logged < LINES_PER_SUMMARY {
                    self.tally.logged += 1;
                    super::reject(self.ctx, &mut p.stream, p.peer, r.code, r.message);
                } else {
                    self.tally.unlogged += 1;
                    let _ = p.stream.write(
                        &Message::Error {
                            code: r.code,
                            message: r.message,
                        }
                        .encode_frame(),
                    );
                    let _ = p.stream.shutdown(Shutdown::Both);
                }
            }
        }
    }

    /// Takes connection `id` out of the table and the poller.
    fn take(&mut self, id: Id) -> Pending {
        self.table.remove(id);
        let p = self.conns.remove(&id).expect("a pending connection");
        let _ = self.poller.remove(&p.stream);
        p
    }

    /// Closes connection `id` (already out of the table), telling it why, and counts it.
    fn shed(&mut self, id: Id, why: Shed) {
        let Some(mut p) = self.conns.remove(&id) else {
            return;
        };
        let (code, message) = match why {
            Shed::Evicted => {
                self.tally.evicted += 1;
                (
                    ErrorCode::Busy,
                    "too many connections in their handshake: this one made room for a newer \
                     one; try again"
                        .to_string(),
                )
            }
            Shed::Expired => {
                self.tally.expired += 1;
                (
                    ErrorCode::Limit,
                    format!(
                        "handshake not finished within {:?}",
                        self.table.limit(Instant::now())
                    ),
                )
            }
        };
        // Best effort: the socket is non-blocking, and a peer that does not read loses it.
        let _ = p
            .stream
            .write(&Message::Error { code, message }.encode_frame());
        let _ = p.stream.shutdown(Shutdown::Both);
    }

    /// Reports the sheds since the last summary, at most once every [`SUMMARY_EVERY`].
    fn summarize(&mut self, now: Instant) {
        let t = &mut self.tally;
        if t.last
            .is_some_and(|l| now.duration_since(l) < SUMMARY_EVERY)
        {
            return;
        }
        if t.evicted + t.expired + t.gave_up + t.probes + t.descriptors + t.unlogged == 0 {
            // Nothing to report: a new second for the failed handshakes' own lines.
            *t = Tally {
                last: Some(now),
                ..Tally::default()
            };
            return;
        }
        let busiest = self.table.busiest().map(|(s, n)| (s.to_string(), n));
        self.ctx.reporter.event(&ServerEvent::Shed {
            evicted: t.evicted,
            expired: t.expired,
            gave_up: t.gave_up,
            probes: t.probes,
            refused: t.unlogged,
            descriptors: t.descriptors,
            pending: self.table.len(),
            max: self.max,
            busiest,
        });
        *t = Tally {
            last: Some(now),
            ..Tally::default()
        };
    }
}

/// An authenticated connection onto a thread of its own: a session's control loop, or a data
/// stream joining its session. Blocking again, with the handshake timeout until the session
/// sets its own.
fn hand_off(ctx: &Arc<Ctx>, p: Pending, joined: Joined, ended: &mpsc::Sender<i32>) {
    let Pending { stream, peer, .. } = p;
    let _ = stream.set_nonblocking(false);
    let t = Some(ctx.cfg.handshake_timeout);
    let _ = stream.set_read_timeout(t).and(stream.set_write_timeout(t));
    let started = match &joined {
        Joined::Control(s, ..) => Some(s.clone()),
        Joined::Data(..) => None,
    };
    let (c, e) = (ctx.clone(), ended.clone());
    let spawned = std::thread::Builder::new()
        .name(format!("zcp-conn-{peer}"))
        .spawn(move || match joined {
            Joined::Control(session, sealer, opener, nonces, (live, who)) => {
                let j = session::Joined {
                    stream,
                    peer,
                    sealer,
                    opener,
                    nonces,
                    live,
                    who,
                };
                let ok = session::run_session(&c, &session, j);
                let _ = e.send(ok);
            }
            Joined::Data(session, index) => session.attach(index, stream),
        });
    if spawned.is_err() {
        // Out of threads: the connection closed with the closure. A session that never ran
        // does not stay registered (nor take `serve --once`'s one slot).
        if let Some(s) = started {
            ctx.sessions.locked().retain(|_, v| !Arc::ptr_eq(v, &s));
            ctx.taken.store(false, Ordering::Relaxed);
        }
        ctx.reporter.event(&ServerEvent::Rejected {
            peer,
            reason: "out of threads: the authenticated connection could not be served".into(),
            cause: ErrorCode::Busy.name(),
        });
    }
}
