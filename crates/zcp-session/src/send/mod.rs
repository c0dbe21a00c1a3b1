//! The sending role: walks the sources, announces each entry, and moves every file's chunks
//! through the data transport, proving each with a keyed MAC. It runs on the client in a push
//! and on the server in a pull.
//!
//! Where each question is answered:
//! - `state.rs`: the role as a state machine ([`Sending`]): entries announced, chunks
//!   scheduled, acknowledged, sent again, files ended; the idle clock; outputs.
//! - `frames.rs`: each message from the receiver (offers, ready, acknowledgements, commits).
//! - `hash.rs`: the hash workers and the resume check.
//! - `entries.rs`: directories, links and directory times awaiting the receiver's answer;
//!   each counts only once the receiver says it made it.
//! - `proof.rs`: whether a receiver's `FileReady` and `FileCommitted` prove a file stored and
//!   verified as the session asked; nothing else is reported done.
//!
//! This file is the thin loop around them, on one thread that alone owns the state machine:
//! it feeds it the walk, the receiver's frames (from the control reader thread), and what the
//! hash workers and the transport report, and carries out what it produces. The transport
//! takes chunks from one shared queue, so one large file spreads over every stream and many
//! small files keep every stream busy.

mod announce;
pub(crate) mod entries;
pub(crate) mod frames;
pub(crate) mod hash;
pub(crate) mod proof;
pub(crate) mod prune;
pub(crate) mod state;
#[cfg(test)]
mod tests;

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use zcp_engine::fs::Meta;
use zcp_engine::sys::thread_usage;
use zcp_engine::{SendEngine, Usage};
use zcp_wire::{ChunkProof, ErrorCode, Message, Nonce, Psk, SessionKeys, SideStats};

use crate::conn::ControlRx;
use crate::control::{Batched, ControlWriter, Reader};
use crate::error::{FrameIoError, SessionError};
use crate::event::{Observer, PhaseCache};
use crate::manifest::{Entry, Walker};
use crate::transport::{Departure, Queue, SendSide, Transport, spawn};
use hash::HashJob;
pub(crate) use state::{SenderConfig, SenderTotals, Sending};

/// How often the loop wakes without events (intervals, liveness).
const TICK: Duration = Duration::from_millis(100);

/// What the loop hears.
pub(crate) enum SendEvent {
    /// A frame from the receiver, or why the control connection ended.
    Ctl(Result<Message, FrameIoError>),
    /// A chunk's proof (a hash worker, or the transport for a staged chunk).
    Hashed {
        file: u32,
        index: u64,
        proof: ChunkProof,
    },
    /// A stream took a file's first chunk.
    Began { file: u32 },
    /// Every byte of a chunk left on the transport.
    Sent { file: u32, index: u64 },
    /// The source of a file could not be read as announced.
    SourceFailed { file: u32, why: String },
    /// A resume check under way: `bytes` of the offered chunks checked so far.
    ResumeProgress { file: u32, bytes: u64 },
    /// A resume check: the chunks to keep, or `None` to send the file whole.
    ResumeChecked {
        file: u32,
        kept: Option<Vec<(u64, ChunkProof)>>,
    },
    /// A data stream sent everything.
    StreamDone { usage: Usage, end: Instant },
    /// A data stream broke (`forged`: as [`Departure::StreamFailed`]).
    StreamFailed {
        stream: u16,
        why: String,
        forged: bool,
    },
    /// The sources were counted (see [`crate::manifest::tally`]).
    Tally { files: u64, bytes: u64 },
}

impl From<Departure> for SendEvent {
    fn from(d: Departure) -> SendEvent {
        match d {
            Departure::Hashed { file, index, proof } => SendEvent::Hashed { file, index, proof },
            Departure::Began { file } => SendEvent::Began { file },
            Departure::Sent { file, index } => SendEvent::Sent { file, index },
            Departure::SourceFailed { file, why } => SendEvent::SourceFailed { file, why },
            Departure::StreamDone { usage, end } => SendEvent::StreamDone { usage, end },
            Departure::StreamFailed {
                stream,
                why,
                forged,
            } => SendEvent::StreamFailed {
                stream,
                why,
                forged,
            },
        }
    }
}

/// Everything a sending role is made of.
pub(crate) struct SendSetup {
    pub(crate) cfg: SenderConfig,
    pub(crate) ctl: Arc<ControlWriter>,
    pub(crate) rx: ControlRx,
    pub(crate) keys: SessionKeys,
    /// This session's client and server nonces: `Have`s naming them offer the receiver's
    /// existing target, not an interrupted attempt.
    pub(crate) nonces: (Nonce, Nonce),
    pub(crate) psk: Psk,
    pub(crate) transport: Box<dyn Transport>,
    /// The receiver, as messages name it.
    pub(crate) peer: String,
}

/// Why a source is no longer what was announced, if it is not.
fn source_changed(file: &std::fs::File, was: &Meta) -> Option<String> {
    match zcp_engine::fs::stat_fd(file.as_fd()) {
        Ok(m) if m.nlink == 0 => Some("it was deleted while being sent".to_string()),
        Ok(m) if m.size != was.size => Some(format!(
            "its size went from {} to {} bytes",
            was.size, m.size
        )),
        Ok(m) if (m.mtime, m.ctime, m.id) != (was.mtime, was.ctime, was.id) => {
            Some("it was modified (mtime/ctime changed)".to_string())
        }
        Ok(_) => None,
        Err(e) => Some(format!("it can no longer be read: {e}")),
    }
}

/// The engine for the walk: probed on its first file (entries up to it are returned).
fn probe(cfg: &SenderConfig, walker: &mut Walker) -> ((SendEngine, Option<String>), Vec<Entry>) {
    let mut pending = Vec::new();
    for e in walker.by_ref() {
        let is_file = matches!(e, Entry::File { .. });
        pending.push(e);
        if is_file {
            break;
        }
    }
    let engine = pending
        .iter()
        .find_map(|e| match e {
            Entry::File { file, meta, .. } if meta.size > 0 => {
                Some(cfg.engine.probe(file.as_fd(), meta.size))
            }
            _ => None,
        })
        .unwrap_or((cfg.engine, None));
    (engine, pending)
}

/// How many threads hash chunk MACs: one per data stream, at most one per core (as before);
/// and where fewer streams than cores leave cores idle, as many as those idle cores, at most
/// [`MAX_SPARE_HASHERS`], so that one stream is not held to one core's BLAKE3 rate (about
/// 5 GiB/s with AVX-512). Chunks are independent, so the workers take them in turn.
fn hash_workers(streams: usize, cores: usize) -> usize {
    let spare = cores.saturating_sub(streams).min(MAX_SPARE_HASHERS);
    streams.min(cores).max(spare).max(1)
}

/// Hash workers beyond one per stream, at most.
const MAX_SPARE_HASHERS: usize = 4;

/// Runs the sending role until every entry is done and the stats are exchanged. Returns its
/// totals and the CPU time of the control reader.
pub(crate) fn run(
    s: SendSetup,
    mut walker: Walker,
    observer: &mut dyn Observer,
) -> Result<(SenderTotals, Usage), SessionError> {
    let start = thread_usage();
    let sources = walker.tops();
    let (engine, pending) = probe(&s.cfg, &mut walker);
    // Walked to find the first file; taken by the drive loop as the window of answers allows.
    walker.put_back(pending);
    let counters = s.transport.counters();
    let close_streams = s.transport.closer();
    let now = Instant::now();
    let engine_used = engine.0;
    let mut sm = Sending::new(
        s.cfg.clone(),
        engine,
        s.keys.clone(),
        s.nonces,
        counters.len(),
        now,
    );
    let (tx, events) = mpsc::channel::<SendEvent>();
    let reader = Reader::start(s.rx, tx.clone(), SendEvent::Ctl)?;
    let send_q: Arc<Queue<crate::transport::OutChunk>> = Queue::new();
    let hash_q: Arc<Queue<HashJob>> = Queue::new();
    let hashers = hash_workers(
        counters.len(),
        std::thread::available_parallelism().map_or(2, |n| n.get()),
    );
    let mut threads = Vec::new();
    // Counted beside the walk, for progress displays only: nothing waits for it, and it
    // gives up when the role ends.
    let tallying = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let _tally = {
        let (tx, on) = (tx.clone(), tallying.clone());
        spawn("zcp-tally".into(), move || {
            if let Some((files, bytes)) = crate::manifest::tally(sources, &on) {
                let _ = tx.send(SendEvent::Tally { files, bytes });
            }
        })?
    };
    let _stop_tally = ClearOnDrop(tallying);
    for i in 0..hashers {
        let (q, ev, k, p) = (hash_q.clone(), tx.clone(), s.keys.clone(), s.psk.clone());
        threads.push(spawn(format!("zcp-hash-{i}"), move || {
            hash::hash_worker(q, ev, k, p)
        })?);
    }
    let report = {
        let tx = std::sync::Mutex::new(tx);
        Arc::new(move |d: Departure| {
            use zcp_engine::sync::Locked;
            let _ = tx.locked().send(d.into());
        })
    };
    threads.extend(s.transport.send(SendSide {
        engine: engine_used,
        block: s.cfg.block,
        keys: s.keys.clone(),
        chunks: send_q.clone(),
        report,
    })?);
    let mut io = Io {
        reader: &reader,
        ctl: &s.ctl,
        send_q: &send_q,
        hash_q: &hash_q,
        peer: &s.peer,
        rss: Default::default(),
    };
    let outcome = drive(&mut sm, &mut io, &events, &mut walker, observer, &counters);
    send_q.close();
    hash_q.close();
    if let Err(SessionError::Protocol { reason, .. }) = &outcome {
        // Say why before closing, so the peer does not only see a closed connection.
        s.ctl.send_error(ErrorCode::Protocol, reason);
    }
    if outcome.is_err() {
        close_streams();
        sm.cancel_all();
    }
    let mut helpers = Usage::default();
    for t in threads {
        if let Ok(u) = t.join() {
            helpers.add(&u);
        }
    }
    if let Err(e) = outcome {
        s.ctl.shutdown();
        reader.finish();
        return Err(e);
    }
    // Our own stats close the session for the receiver; nothing more crosses the control
    // connection after them, so it is shut down (which also wakes the reader at once).
    let mut usage = thread_usage().since(&start);
    usage.add(&helpers);
    let mine = SideStats {
        cpu_user_us: usage.user.as_micros() as u64,
        cpu_sys_us: usage.sys.as_micros() as u64,
        max_rss_bytes: io.rss.sample(),
        bytes: counters.iter().map(|c| c.load(Ordering::Relaxed)).sum(),
        files: sm.totals().files,
        cipher_us: sm.keys.crypto_time().as_micros() as u64,
    };
    let _ = s.ctl.send(&Message::Stats(mine));
    s.ctl.shutdown();
    let reader_usage = reader.finish();
    Ok((sm.into_totals(usage), reader_usage))
}

/// Clears its flag when dropped: a helper watching it stops.
struct ClearOnDrop(Arc<std::sync::atomic::AtomicBool>);

impl Drop for ClearOnDrop {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// Where the loop carries the role's outputs.
struct Io<'a> {
    reader: &'a Reader,
    ctl: &'a ControlWriter,
    send_q: &'a Queue<crate::transport::OutChunk>,
    hash_q: &'a Queue<HashJob>,
    peer: &'a str,
    /// The process's peak RSS while the role runs.
    rss: zcp_engine::sys::RssPeak,
}

impl Io<'_> {
    /// Carries out what the role produced: frames, chunks, hash jobs, reports; a source
    /// check is answered at once (and may produce more).
    fn carry_out(
        &mut self,
        sm: &mut Sending,
        observer: &mut dyn Observer,
    ) -> Result<(), SessionError> {
        loop {
            let out = sm.take_out();
            {
                let _cork = self.ctl.cork();
                for m in &out.frames {
                    self.ctl.send(m).map_err(|e| e.into_session("peer"))?;
                }
            }
            for c in out.chunks {
                self.send_q.push(c);
            }
            for h in out.hashes {
                self.hash_q.push(h);
            }
            for r in out.reports {
                r.deliver(observer);
            }
            if out.checks.is_empty() {
                return Ok(());
            }
            for c in out.checks {
                let changed = source_changed(&c.file, &c.meta);
                sm.source_checked(c.file_id, changed, Instant::now());
            }
        }
    }
}

/// The loop: the walk while there is room, `Finish` once every file is done, then events.
fn drive(
    sm: &mut Sending,
    io: &mut Io<'_>,
    events: &mpsc::Receiver<SendEvent>,
    walker: &mut Walker,
    observer: &mut dyn Observer,
    counters: &[Arc<std::sync::atomic::AtomicU64>],
) -> Result<(), SessionError> {
    let mut walker_done = false;
    let mut queue = Batched::new(events, io.ctl);
    let mut phase = PhaseCache::default();
    loop {
        while !walker_done && sm.wants_entry() {
            match walker.next() {
                None => walker_done = true,
                Some(e) => sm.take_entry(e, Instant::now()),
            }
        }
        if walker_done && sm.idle_files() && !sm.finishing() {
            io.send_q.close();
            io.hash_q.close();
            sm.finish(walker.dirs());
        }
        io.carry_out(sm, observer)?;
        let next = queue.next(TICK);
        // Every turn, not only when idle: a busy transfer never waits a whole TICK.
        observer.tick(phase.get(Instant::now(), || sm.phase()));
        io.rss.sample();
        if let Some(reason) = observer.stop() {
            io.ctl.send_error(ErrorCode::Busy, &reason);
            return Err(SessionError::Stopped {
                reason,
                durable: Some(sm.durable_pending()),
            });
        }
        let bytes: u64 = counters.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        sm.tick(Instant::now(), bytes, io.peer)?;
        let ev = match next {
            Ok(ev) => ev,
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(SessionError::Connection {
                    peer: io.peer.to_string(),
                    reason: "the session's threads ended unexpectedly".into(),
                });
            }
        };
        let now = Instant::now();
        match ev {
            SendEvent::Ctl(Ok(m)) => {
                io.reader.taken();
                sm.handle_frame(m, now)?
            }
            SendEvent::Ctl(Err(e)) => return Err(e.into_session(io.peer)),
            SendEvent::Hashed { file, index, proof } => sm.hashed(file, index, proof, now),
            SendEvent::Began { file } => sm.began(file, now),
            SendEvent::Sent { file, index } => sm.departed(file, index, now),
            SendEvent::SourceFailed { file, why } => sm.source_failed(file, why, now),
            SendEvent::ResumeProgress { file, bytes } => sm.resume_progress(file, bytes, now),
            SendEvent::ResumeChecked { file, kept } => sm.resume_checked(file, kept, now),
            SendEvent::StreamFailed {
                stream,
                why,
                forged: true,
            } => return Err(SessionError::Verify(format!("data stream {stream}: {why}"))),
            SendEvent::StreamFailed { stream, why, .. } => {
                let broke = SessionError::Connection {
                    peer: io.peer.to_string(),
                    reason: format!("data stream {stream}: {why}"),
                };
                return Err(the_receivers_reason(&mut queue, sm, io.reader, broke));
            }
            SendEvent::StreamDone { usage, end } => sm.stream_done(usage, end),
            SendEvent::Tally { files, bytes } => sm.plan(files, bytes),
        }
        if sm.done() {
            return io.carry_out(sm, observer);
        }
    }
}

/// How long a broken data stream waits for the receiver's word on why (its `Error` on the
/// control connection, sent just before it closed the data streams).
const REASON_GRACE: Duration = Duration::from_secs(2);

/// A data stream broke: a receiver that ends a session on purpose (shutting down, a refusal)
/// says why on the control connection, which can arrive just after the stream's own error.
/// Its reason, if it gives one within [`REASON_GRACE`]; otherwise what broke.
fn the_receivers_reason(
    queue: &mut Batched<'_, SendEvent>,
    sm: &mut Sending,
    reader: &Reader,
    broke: SessionError,
) -> SessionError {
    let until = Instant::now() + REASON_GRACE;
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match queue.next(left) {
            Ok(SendEvent::Ctl(Ok(m))) => {
                // Every frame taken lets the reader read on: the Error may be queued behind
                // hundreds of acknowledgements.
                reader.taken();
                if matches!(m, Message::Error { .. }) {
                    return match sm.handle_frame(m, Instant::now()) {
                        Err(e) => e,
                        Ok(()) => broke,
                    };
                }
            }
            Ok(SendEvent::Ctl(Err(_))) | Err(_) => return broke,
            Ok(_) if left.is_zero() => return broke,
            Ok(_) => {}
        }
    }
}

#[cfg(test)]
mod hasher_tests {
    use super::hash_workers;

    #[test]
    fn hash_workers_one_per_stream_or_the_idle_cores_whichever_is_more() {
        assert_eq!(hash_workers(1, 1), 1);
        assert_eq!(hash_workers(1, 2), 1);
        assert_eq!(hash_workers(1, 8), 4);
        assert_eq!(hash_workers(2, 4), 2);
        assert_eq!(hash_workers(4, 8), 4);
        assert_eq!(hash_workers(8, 64), 8);
        assert_eq!(hash_workers(16, 8), 8);
        assert_eq!(hash_workers(0, 0), 1);
    }
}
