//! The receiving role: validates each entry beneath its root, receives chunks over the data
//! transport, verifies them, makes them durable, and commits files. It runs on the server in
//! a push and on the client in a pull.
//!
//! Where each question is answered:
//! - `state.rs`: the role as a state machine ([`Receiving`]): chunks placed, written, hashed,
//!   verified, made durable; files settled; the idle clock; outputs.
//! - `frames.rs`: each control message from the sender; what file-system work it needs.
//! - `chunks.rs`: one file's chunk states ([`chunks::RxFile`]).
//! - `prepare.rs`: preparing and resuming a file, directories and links (the file system).
//! - `durable.rs`: the journal thread and the committer.
//!
//! This file is the thin loop around them: [`RxCore`] holds the state machine behind one lock
//! and carries out what each input produced (frames to the control connection, jobs to the
//! journal thread and the committer, part files let go); [`run`] drives the control side and
//! the clock. The data transport lands chunks through [`RxCore`] as a
//! [`crate::transport::Landing`].

pub(crate) mod chunks;
mod durable;
mod existing;
mod prepare;
pub(crate) mod prune;
mod resume;
pub(crate) mod state;
mod sync_choice;

pub(crate) use state::frames;

use crate::error::Refusal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use zcp_engine::Usage;
use zcp_engine::fs::Root;
use zcp_engine::recv::WriteFailure;
use zcp_engine::sync::{Locked, Turns, Wakeup};
use zcp_engine::sys::thread_usage;
use zcp_wire::{ChunkHeader, ChunkProof, ErrorCode, Message, Nonce, SessionKeys, SideStats};

use crate::confine::Scope;
use crate::conn::ControlRx;
use crate::control::{Batched, ControlWriter, Reader};
use crate::error::{FrameIoError, SessionError};
use crate::event::{Observer, PhaseCache};
use crate::transport::{Joins, Landing, Transport};
use frames::Step;
pub(crate) use prepare::Disk;
pub(crate) use state::{Placement, ReceiverTotals, Receiving, RxConfig, RxJob};

/// Largest block size a sender may ask the receiver for; the `direct` ring holds six.
pub const MAX_RECV_BLOCK: u64 = 64 << 20;
/// Memory the receive buffers of one session may take together, over all its streams (the
/// `direct` rings, the `rw` and `mem` buffers): each stream's block is cut to fit (up to five
/// streams keep `direct`'s 4 MiB default; 16 streams get about 1.3 MiB `direct` blocks or
/// 8 MiB `rw` buffers; a client asking for 64 MiB blocks gets what fits). The buffers'
/// pages cost memory only once data lands in them.
pub(crate) const BUFFER_BUDGET: u64 = 128 << 20;

/// What wakes the control loop.
pub(crate) enum RxEvent {
    /// A frame from the sender, or why the control connection ended.
    Ctl(Result<Message, FrameIoError>),
    /// The role has reports for the observer (another thread's input produced them).
    Wake,
}

impl RxEvent {
    pub(crate) fn ctl(r: Result<Message, FrameIoError>) -> RxEvent {
        RxEvent::Ctl(r)
    }
}

/// The receiving role with everything its inputs come from and its outputs go to.
pub(crate) struct RxCore {
    state: Mutex<Receiving>,
    /// Notified after every input: a data stream waiting for a file's `Go` looks again.
    changed: Wakeup,
    pub(crate) ctl: Arc<ControlWriter>,
    pub(crate) disk: Disk,
    journal: Mutex<Option<mpsc::Sender<state::JournalJob>>>,
    commit: Mutex<Option<mpsc::Sender<state::CommitJob>>>,
    wake: mpsc::Sender<RxEvent>,
    /// CPU time of the role's helper threads and ended streams.
    pub(crate) usage: Mutex<Usage>,
    counters: Mutex<Vec<Arc<AtomicU64>>>,
    closed: AtomicBool,
    closers: Mutex<Vec<Box<dyn Fn() + Send>>>,
    idle: Duration,
    /// Outputs are carried out in the order the inputs produced them, whichever thread
    /// applied them (a journal's start before its first records, a chunk's ack before its
    /// file's commit).
    turns: Turns,
}

impl std::fmt::Debug for RxCore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RxCore")
    }
}

/// Everything a receiving role is made of.
pub(crate) struct RxSetup {
    pub(crate) cfg: RxConfig,
    pub(crate) keys: SessionKeys,
    pub(crate) nonces: (Nonce, Nonce),
    pub(crate) root: Arc<Root>,
    pub(crate) scope: Scope,
    pub(crate) streams: u16,
    pub(crate) ctl: Arc<ControlWriter>,
    /// Where the control loop's events come in (the control reader sends there too).
    pub(crate) wake: mpsc::Sender<RxEvent>,
}

impl RxCore {
    pub(crate) fn new(s: RxSetup) -> Arc<RxCore> {
        let disk = Disk::new(
            s.root,
            s.keys.clone(),
            s.nonces,
            s.cfg.requested,
            s.cfg.idle,
            (s.scope.is_pull(), s.cfg.verify.checks(), s.scope.is_blind()),
            s.cfg.existing,
        );
        let idle = s.cfg.idle;
        let state = Receiving::new(s.cfg, s.keys, s.nonces, s.scope, s.streams, Instant::now());
        Arc::new(RxCore {
            state: Mutex::new(state),
            changed: Wakeup::default(),
            ctl: s.ctl,
            disk,
            journal: Mutex::new(None),
            commit: Mutex::new(None),
            wake: s.wake,
            usage: Mutex::new(Usage::default()),
            counters: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            closers: Mutex::new(Vec::new()),
            idle,
            turns: Turns::default(),
        })
    }

    /// Applies one input to the role and carries out what it produced.
    pub(crate) fn apply<T>(&self, input: impl FnOnce(&mut Receiving, Instant) -> T) -> T {
        let (r, out, ticket) = {
            let mut st = self.state.locked();
            let r = input(&mut st, Instant::now());
            let out = st.take_out();
            let busy = !out.frames.is_empty() || !out.jobs.is_empty() || out.reported;
            (r, out, busy.then(|| self.turns.take()))
        };
        self.changed.notify_all();
        let Some(ticket) = ticket else {
            return r;
        };
        let _turn = self.turns.wait(ticket);
        if !out.frames.is_empty() {
            let _cork = self.ctl.cork();
            for m in &out.frames {
                // A broken connection is noticed by the reader and the loop.
                let _ = self.ctl.send(m);
            }
        }
        for job in out.jobs {
            match job {
                RxJob::Journal(j) => {
                    if let Some(tx) = self.journal.locked().as_ref() {
                        let _ = tx.send(j);
                    }
                }
                RxJob::Commit(j) => {
                    if let Some(tx) = self.commit.locked().as_ref() {
                        let _ = tx.send(j);
                    }
                }
                RxJob::Release { file, keep } => self.disk.release(file, keep),
            }
        }
        if out.reported {
            let _ = self.wake.send(RxEvent::Wake);
        }
        r
    }

    /// Payload bytes received so far, over every stream.
    pub(crate) fn bytes(&self) -> u64 {
        self.counters
            .locked()
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Ends the session: unblocks every data stream.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for c in self.closers.locked().drain(..) {
            c();
        }
    }
}

/// Closes the core it holds when dropped: whatever way the code that set up a receiving role
/// leaves (an error before the role ran, a panic), no data stream that joined waits on.
pub(crate) struct CloseOnDrop(pub(crate) Arc<RxCore>);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

impl Landing for RxCore {
    fn join(&self, counter: Arc<AtomicU64>, closer: Box<dyn Fn() + Send>) {
        self.counters.locked().push(counter);
        self.closers.locked().push(closer);
        // A close that ran meanwhile may have missed it: close it here (either way once).
        if self.closed.load(Ordering::SeqCst) {
            for c in self.closers.locked().drain(..) {
                c();
            }
        }
    }

    fn place(&self, h: &ChunkHeader) -> Result<Placement, Refusal> {
        // Placing produces no outputs: it runs under the lock directly, and waits under it
        // while the file waits for the sender's `Go` (up to the idle timeout).
        let until = Instant::now() + self.idle;
        let mut st = self.state.locked();
        loop {
            match st.place(h, Instant::now())? {
                Placement::Wait => {}
                placed => return Ok(placed),
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Refusal::protocol(format!(
                    "no Go for file {} within {:?}",
                    h.file_id, self.idle
                )));
            }
            st = self.changed.wait_for(st, left);
        }
    }

    fn written(&self, file: u32, index: u64, r: Result<(), WriteFailure>) {
        let r = r.map_err(|w| {
            let code = if w.no_space {
                ErrorCode::NoSpace
            } else {
                ErrorCode::Io
            };
            Refusal::new(code, w.message)
        });
        self.apply(|st, now| st.written(file, index, r, now));
    }

    fn hashed(&self, file: u32, index: u64, proof: ChunkProof) {
        self.apply(|st, now| st.hashed(file, index, proof, now));
    }

    fn keys(&self) -> SessionKeys {
        self.state.locked().keys().clone()
    }

    fn stream_ended(&self, usage: Usage, failed: Option<Refusal>, late: Option<String>) {
        self.usage.locked().add(&usage);
        let closed = self.closed.load(Ordering::Relaxed);
        self.apply(|st, _| {
            if let Some(e) = &late {
                st.fail_open_files(ErrorCode::Io, e);
            }
            let at_once = |r: &&Refusal| r.is_out_of_descriptors() || r.code == ErrorCode::Verify;
            if let Some(r) = failed.as_ref().filter(at_once) {
                // Out of descriptors (the sender's retry comes back), or bytes that failed
                // authentication: the session ends at once.
                st.short_of_descriptors(r.clone());
            } else if let Some(Refusal { code, message: why }) = &failed {
                // A broken stream leaves chunks missing: fail what is open, so the sender
                // hears at once instead of at the idle timeout; and say why.
                st.fail_open_files(*code, &format!("data stream failed: {why}"));
            }
            let why = failed.filter(|_| !closed).map(
                |Refusal {
                     code: c,
                     message: w,
                 }| format!("{w} [{}]", c.name()),
            );
            st.stream_ended(why);
        });
        // The loop may be waiting for this (the last stream's end lets the stats go out):
        // wake it now rather than on its next tick.
        let _ = self.wake.send(RxEvent::Wake);
    }

    fn block(&self) -> u64 {
        self.state.locked().block()
    }

    fn alive(&self) -> bool {
        !self.closed.load(Ordering::SeqCst)
    }

    fn memory_limit(&self) -> u64 {
        let streams = u64::from(self.state.locked().streams().max(1));
        BUFFER_BUDGET / streams
    }

    fn idle(&self) -> Duration {
        self.idle
    }
}

/// Runs the receiving role until the sender's `Finish` and the stats exchange: a control
/// reader on `rx` (its frames go to `events` through `tx`), the data transport landing chunks
/// through `core`: the streams connected now on threads of their own, those that join while
/// the role runs through the [`crate::transport::Lander`] handed to `joins`. Returns the
/// role's totals and the reader's CPU time.
pub(crate) fn run(
    core: Arc<RxCore>,
    (tx, events): (mpsc::Sender<RxEvent>, mpsc::Receiver<RxEvent>),
    rx: ControlRx,
    (transport, joins): (Box<dyn Transport>, Option<Joins>),
    observer: &mut dyn Observer,
) -> Result<(ReceiverTotals, Usage), SessionError> {
    let _closing = CloseOnDrop(core.clone());
    let reader = Reader::start(rx, tx, RxEvent::ctl)?;
    let landing: Arc<dyn Landing> = core.clone();
    let result = crate::transport::receive(transport, landing, joins).and_then(|streams| {
        let r = run_role(&core, events, &reader, observer);
        // Either way no stream may wait on: after a success every stream has ended already.
        core.close();
        // Over either way: after the stats exchange nothing more crosses the control
        // connection (and the reader, and any thread still answering the peer, wake at once).
        core.ctl.shutdown();
        for s in streams {
            let _ = s.join();
        }
        r
    });
    // What was not committed is dropped now, once nothing more can be written (the streams
    // have ended, and a part file kept for a resume stays locked until its last queued write
    // lands): part files without durable chunks are removed, the others kept.
    let finished = result.is_ok();
    core.apply(|st, now| st.close(finished, now));
    deliver(&core, observer);
    core.disk.clear(core.idle + Duration::from_secs(10));
    let reader_usage = reader.finish();
    result.map(|()| (core.state.locked().totals().clone(), reader_usage))
}

/// The role proper: helper threads, the control loop, and what is left when it ends. A
/// protocol error is sent to the peer as `Error{protocol}` before the role ends.
fn run_role(
    core: &Arc<RxCore>,
    events: mpsc::Receiver<RxEvent>,
    reader: &Reader,
    observer: &mut dyn Observer,
) -> Result<(), SessionError> {
    let start = thread_usage();
    let (journal_tx, journal_rx) = mpsc::channel();
    *core.journal.locked() = Some(journal_tx);
    let (commit_tx, commit_rx) = mpsc::channel();
    *core.commit.locked() = Some(commit_tx);
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .map_err(|source| SessionError::Io {
                what: "spawning a thread".into(),
                source,
            })
    };
    let journal = {
        let c = core.clone();
        spawn(
            "zcp-journal",
            Box::new(move || durable::journal_thread(c, journal_rx)),
        )?
    };
    let committer = {
        let c = core.clone();
        spawn(
            "zcp-commit",
            Box::new(move || durable::commit_thread(c, commit_rx)),
        )?
    };
    let result = control_loop(core, &events, reader, observer, start);
    match &result {
        // Say why before closing, so the peer does not only see a closed connection.
        Err(SessionError::Protocol { reason, .. }) => {
            core.ctl.send_error(ErrorCode::Protocol, reason);
        }
        Err(SessionError::Refusing { code, message }) => core.ctl.send_error(*code, message),
        _ => {}
    }
    // Stop the helpers: no more journal or commit work once the loop ends.
    *core.journal.locked() = None;
    *core.commit.locked() = None;
    if result.is_err() {
        core.close();
    }
    let _ = journal.join();
    let _ = committer.join();
    result
}

/// Hands the role's reports to the observer.
fn deliver(core: &RxCore, observer: &mut dyn Observer) {
    let reports = core.state.locked().take_reports();
    for r in reports {
        r.deliver(observer);
    }
}

/// The loop: control messages (and the file-system work they need), reports, the stats
/// exchange, and the clock.
fn control_loop(
    core: &Arc<RxCore>,
    events: &mpsc::Receiver<RxEvent>,
    reader: &Reader,
    observer: &mut dyn Observer,
    start: Usage,
) -> Result<(), SessionError> {
    let mut queue = Batched::new(events, &core.ctl);
    let mut rss = zcp_engine::sys::RssPeak::default();
    let mut phase = PhaseCache::default();
    loop {
        rss.sample();
        let ev = match queue.next(Duration::from_millis(100)) {
            Ok(ev) => Some(ev),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                let e = core.apply(|st, _| st.proto("the session's threads ended".into()));
                return Err(e);
            }
        };
        match ev {
            None | Some(RxEvent::Wake) => {}
            Some(RxEvent::Ctl(Ok(m))) => {
                reader.taken();
                let step = core.apply(|st, now| st.handle_frame(m, now))?;
                match step {
                    Step::Next => {}
                    Step::Done => {
                        deliver(core, observer);
                        return Ok(());
                    }
                    Step::Prune(job) => {
                        let root = core.disk.root.clone();
                        let mut io = prune::PruneIo {
                            root: &root,
                            ctl: &core.ctl,
                            observer: &mut *observer,
                            every: crate::control::keepalive_every(core.idle),
                        };
                        let count = prune::run(&job, &mut io);
                        core.apply(|st, now| {
                            st.progress(now);
                            st.send(Message::Pruned(count));
                        });
                    }
                    Step::Fs(job) => {
                        let done = core.disk.run(job, &core.ctl);
                        let made = core.disk.take_made();
                        core.apply(|st, now| {
                            st.made_dirs(&made);
                            st.fs_done(done, now)
                        })?;
                    }
                }
            }
            Some(RxEvent::Ctl(Err(e))) => {
                let peer = core.apply(|st, _| st.peer());
                return Err(e.into_session(peer));
            }
        }
        deliver(core, observer);
        if core.apply(|st, _| st.wants_stats()) {
            let (stats, usage) = stats(core, start, rss.sample());
            core.apply(|st, _| st.send_stats(stats, usage));
        }
        observer.tick(phase.get(Instant::now(), || core.state.locked().phase()));
        if let Some(reason) = observer.stop() {
            core.ctl.send_error(ErrorCode::Busy, &reason);
            let durable = core.state.locked().durable_pending();
            return Err(SessionError::Stopped {
                reason,
                durable: Some(durable),
            });
        }
        core.disk.reap();
        let bytes = core.bytes();
        core.apply(|st, now| st.tick(now, bytes))?;
    }
}

/// Our closing numbers: CPU time of the whole role, the process's peak RSS while the role ran
/// (`rss`, sampled: on a server, other sessions' memory is in it too), bytes, files.
fn stats(core: &RxCore, start: Usage, rss: u64) -> (SideStats, Usage) {
    let mut usage = *core.usage.locked();
    usage.add(&thread_usage().since(&start));
    // Taken first: the state's lock below is held to the end of the statement.
    let cipher_us = Landing::keys(core).crypto_time().as_micros() as u64;
    let stats = SideStats {
        cpu_user_us: usage.user.as_micros() as u64,
        cpu_sys_us: usage.sys.as_micros() as u64,
        max_rss_bytes: rss,
        bytes: core.bytes(),
        files: core.state.locked().totals().files,
        cipher_us,
    };
    (stats, usage)
}
