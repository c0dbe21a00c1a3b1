//! The receiving role as a state machine, without I/O (quinn-proto's `Connection` is the
//! model). Inputs: the sender's frames ([`Receiving::handle_frame`], in `frames.rs`), what
//! the data path and the helper threads report ([`Receiving::place`], [`Receiving::written`],
//! [`Receiving::hashed`], [`Receiving::journaled`], [`Receiving::committed`]), the results of
//! file-system work it asked for ([`Receiving::fs_done`]) and the clock
//! ([`Receiving::tick`]). Outputs, taken with [`Receiving::take_out`]: frames to send, jobs for
//! the journal thread and the committer, part files to let go of, and reports for the person.
//!
//! Whoever runs it ([`crate::recv::RxCore`]) holds it behind one lock: the control loop, every data
//! stream's thread, the engines' helpers, the journal thread and the committer each apply
//! their input and carry out the outputs after the lock is released.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use zcp_engine::recv::Target;
use zcp_engine::{RecvEngine, Usage};
use zcp_wire::journal::{JournalHeader, JournalRecord};
use zcp_wire::{
    ChunkHeader, ChunkProof, ErrorCode, ExistingMode, Message, Nonce, SessionKeys, SideStats,
    VerifyMode,
};

use crate::confine::Scope;
use crate::error::SessionError;
use crate::event::{Failure, FileOutcome, Report};
use crate::recv::chunks::{FileSpec, Outcome, Phase, RxFile, Settle};

pub(crate) mod frames;
mod prune;

/// How the receiving role runs.
#[derive(Debug, Clone)]
pub(crate) struct RxConfig {
    /// The engine the sender asked for (`auto` resolved per filesystem).
    pub(crate) requested: RecvEngine,
    /// Bytes per engine call (0: each engine's default).
    pub(crate) block: u64,
    /// A session without progress for this long ends.
    pub(crate) idle: Duration,
    /// The sender's engine as asked for, for the report.
    pub(crate) sender_engine: String,
    /// How the session proves its data: with [`VerifyMode::None`] nothing is hashed, and
    /// nothing this session writes is journaled for a resume.
    pub(crate) verify: VerifyMode,
    /// What to do with a regular file already at a destination.
    pub(crate) existing: ExistingMode,
    /// `--delete` or its dry run, and the session's filter (what it excludes is kept).
    pub(crate) delete: (zcp_wire::DeleteMode, std::sync::Arc<zcp_wire::Filter>),
}

/// Targets (and files hashed) the keep-alive credit remembers before it starts over.
pub(crate) const MAX_CREDITED: usize = 1 << 16;

/// A refusal to send back: its class and what to fix.
pub(crate) use crate::error::Refusal;

/// What a finished receiving role reports.
#[derive(Debug, Default, Clone)]
pub(crate) struct ReceiverTotals {
    /// Files committed.
    pub(crate) files: u64,
    /// Directories and links made.
    pub(crate) entries: u64,
    /// The sender's closing numbers.
    pub(crate) peer: SideStats,
    /// CPU time of the whole role, as sent in our `Stats`.
    pub(crate) usage: Usage,
    /// Chunks whose MAC did not match and that the sender was asked to send again.
    pub(crate) mismatches: u64,
}

/// Verified chunks of one file to make durable, in order: the journal thread syncs the data,
/// then appends `records` (after creating the journal with `start`, when given). An
/// unverified chunk (`--verify none`) has no records: it is synced, not journaled.
#[derive(Debug)]
pub(crate) struct JournalJob {
    pub(crate) file: u32,
    pub(crate) start: Option<JournalHeader>,
    pub(crate) records: Vec<u8>,
    pub(crate) index: u64,
}

/// A file whose every chunk is durable and whose digests agree: the committer makes it final.
#[derive(Debug)]
pub(crate) struct CommitJob {
    pub(crate) spec: FileSpec,
    pub(crate) digest: [u8; 32],
    /// The target already holds these bytes: keep it (set its mode and mtime).
    pub(crate) in_place: bool,
}

/// Work for the threads around the role.
#[derive(Debug)]
pub(crate) enum RxJob {
    Journal(JournalJob),
    Commit(CommitJob),
    /// The file is given up: let its part file go, keeping it for a resume when `keep`.
    Release {
        file: u32,
        keep: bool,
    },
}

/// What one input produced.
#[derive(Debug, Default)]
pub(crate) struct Out {
    pub(crate) frames: Vec<Message>,
    pub(crate) jobs: Vec<RxJob>,
    /// Reports are waiting for the control loop ([`Receiving::take_reports`]).
    pub(crate) reported: bool,
}

/// Where a chunk that arrived on a data stream goes ([`Receiving::place`]).
#[derive(Debug)]
pub(crate) enum Placement {
    /// Into this file; the chunk is claimed.
    Land {
        file: u32,
        index: u64,
        engine: RecvEngine,
        target: Option<Target>,
        verify: bool,
    },
    /// The file was given up or committed: read the bytes and drop them.
    Drop,
    /// Not yet: the file waits for the sender's `Go`. Ask again when the role changes.
    Wait,
}

/// What a file id names in this session.
enum Lookup<'a> {
    Open(&'a mut RxFile),
    Gone,
    Unknown,
}

/// The receiving role's state.
pub(crate) struct Receiving {
    cfg: RxConfig,
    keys: SessionKeys,
    nonces: (Nonce, Nonce),
    scope: Scope,
    /// Open files.
    files: HashMap<u32, RxFile>,
    /// Chunks of the open files together (at most [`crate::recv::chunks::MAX_SESSION_CHUNKS`]).
    open_chunks: u64,
    /// One above the highest file id announced: ids only increase, so an id below it that is
    /// not open was given up or committed.
    next_id: u64,
    /// The file being prepared (announced, not yet open).
    preparing: Option<u32>,
    streams: u16,
    streams_ended: u16,
    engines_told: bool,
    finishing: bool,
    stats_sent: bool,
    totals: ReceiverTotals,
    /// `EntryFailed`s from the sender: sources it could not send.
    source_failures: u64,
    /// `--delete`: what was announced, and whether anything failed.
    mirror: crate::recv::prune::Mirror,
    last_progress: Instant,
    /// Targets whose offers earned keep-alive credit ([`Receiving::credit`]).
    credited: HashSet<[u8; 16]>,
    last_bytes: u64,
    last_tell: Instant,
    out: Out,
    reports: Vec<Report>,
    /// A data stream found the process out of file descriptors: the session ends as busy on
    /// the next [`Receiving::tick`] (the sender's `--retry` comes back and resumes), rather
    /// than fail every open file. Or it carried bytes that failed authentication: the
    /// session ends then too, as failing verification.
    short: Option<Refusal>,
}

impl Receiving {
    /// The session's keys, for the chunk MACs.
    pub(crate) fn keys(&self) -> &SessionKeys {
        &self.keys
    }

    /// Bytes per engine call (0: each engine's default).
    pub(crate) fn block(&self) -> u64 {
        self.cfg.block
    }

    /// The data streams the session has.
    pub(crate) fn streams(&self) -> u16 {
        self.streams
    }

    /// What the role did so far.
    pub(crate) fn totals(&self) -> &ReceiverTotals {
        &self.totals
    }

    /// The file-system work made these directories (the scope may then set their times).
    pub(crate) fn made_dirs(&mut self, made: &[(Vec<Vec<u8>>, usize)]) {
        self.scope.created_dirs(made);
    }

    /// Whether the session proves its data (`--verify`).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn verifies(&self) -> bool {
        self.cfg.verify.checks()
    }

    /// Whether a `Prune` may be carried out now: no file open or being prepared, and no
    /// entry failed.
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn may_prune(&self) -> bool {
        self.files.is_empty() && self.preparing.is_none() && self.mirror.flaws == 0
    }

    pub(crate) fn new(
        cfg: RxConfig,
        keys: SessionKeys,
        nonces: (Nonce, Nonce),
        scope: Scope,
        streams: u16,
        now: Instant,
    ) -> Receiving {
        let mirror = crate::recv::prune::Mirror::new(
            cfg.delete.0,
            cfg.delete.1.clone(),
            cfg.existing == ExistingMode::Backup,
            scope.is_pull(),
        );
        Receiving {
            cfg,
            keys,
            nonces,
            scope,
            files: HashMap::new(),
            open_chunks: 0,
            next_id: 0,
            preparing: None,
            streams,
            streams_ended: 0,
            engines_told: false,
            finishing: false,
            stats_sent: false,
            totals: ReceiverTotals::default(),
            source_failures: 0,
            mirror,
            last_progress: now,
            credited: HashSet::new(),
            last_bytes: 0,
            last_tell: now,
            out: Out::default(),
            reports: Vec::new(),
            short: None,
        }
    }

    /// Who sends to this role, as messages name it: the server in a pull, the client in a
    /// push.
    pub(crate) fn peer(&self) -> &'static str {
        if self.scope.is_pull() {
            "the server"
        } else {
            "the client"
        }
    }

    pub(crate) fn proto(&self, reason: String) -> SessionError {
        SessionError::Protocol {
            peer: self.peer().into(),
            reason,
        }
    }

    /// The outputs since the last call.
    pub(crate) fn take_out(&mut self) -> Out {
        std::mem::take(&mut self.out)
    }

    /// The reports since the last call, for the observer (on the control loop's thread).
    pub(crate) fn take_reports(&mut self) -> Vec<Report> {
        std::mem::take(&mut self.reports)
    }

    pub(crate) fn send(&mut self, m: Message) {
        self.out.frames.push(m);
    }

    pub(crate) fn report(&mut self, r: Report) {
        if r.is_flaw() {
            self.mirror.flaws += 1;
        }
        self.reports.push(r);
        self.out.reported = true;
    }

    /// The receiver itself was busy for `spent` (hashing an existing target the control loop
    /// waited for): the idle clock stands still for that long, so the peer is not blamed.
    pub(crate) fn paused(&mut self, spent: Duration, now: Instant) {
        self.last_progress = (self.last_progress + spent).min(now);
    }

    /// Whether preparing `target` (and hashing the existing file `inode`, when it was) may
    /// earn keep-alive credit in this session: only the first time the target, and the file,
    /// is asked for (a second name for one file, as on a case-insensitive directory, earns
    /// nothing). The memory is bounded: after [`MAX_CREDITED`] targets it starts over, so a
    /// target earns again only after that many others were prepared.
    pub(crate) fn credit(&mut self, target: &str, inode: Option<(u64, u64)>) -> bool {
        let key = |tag: &[u8], bytes: &[u8]| -> [u8; 16] {
            let mut h = blake3::Hasher::new();
            h.update(tag).update(bytes);
            h.finalize().as_bytes()[..16]
                .try_into()
                .expect("16 of 32 bytes")
        };
        if self.credited.len() + 2 > MAX_CREDITED {
            self.credited.clear();
        }
        let named = self.credited.insert(key(b"name", target.as_bytes()));
        let file = inode.is_none_or(|(dev, ino)| {
            let id = [dev.to_le_bytes(), ino.to_le_bytes()].concat();
            self.credited.insert(key(b"inode", &id))
        });
        named && file
    }

    /// The session moved forward: the idle clock restarts.
    pub(crate) fn progress(&mut self, now: Instant) {
        self.last_progress = now;
    }

    fn lookup(&mut self, id: u32) -> Lookup<'_> {
        let gone = u64::from(id) < self.next_id && self.preparing != Some(id);
        match self.files.get_mut(&id) {
            Some(f) => Lookup::Open(f),
            None if gone => Lookup::Gone,
            None => Lookup::Unknown,
        }
    }

    /// File `id` if it is open; `None` if it was given up or committed (frames about it are
    /// late, and ignored); a protocol error if no `PutFile` named it.
    pub(crate) fn open_file(
        &mut self,
        id: u32,
        what: &str,
    ) -> Result<Option<&mut RxFile>, SessionError> {
        let peer = self.peer();
        match self.lookup(id) {
            Lookup::Open(f) => Ok(Some(f)),
            Lookup::Gone => Ok(None),
            Lookup::Unknown => Err(SessionError::Protocol {
                peer: peer.into(),
                reason: format!("{what} for unknown file {id}"),
            }),
        }
    }

    // ---- the data path ----

    /// A chunk header arrived on a data stream: where its bytes go. Claims the chunk. An error
    /// is a protocol error that closes the stream.
    pub(crate) fn place(&mut self, h: &ChunkHeader, now: Instant) -> Result<Placement, Refusal> {
        let f = match self.lookup(h.file_id) {
            Lookup::Open(f) => f,
            Lookup::Gone => return Ok(Placement::Drop),
            Lookup::Unknown => {
                return Err(Refusal::protocol(format!(
                    "chunk for unknown file {}",
                    h.file_id
                )));
            }
        };
        if let Some(failed) = f.failure() {
            // A chunk of a failed file ends its stream as a protocol error, whatever failed it.
            return Err(Refusal::protocol(failed.message.clone()));
        }
        if f.phase == Phase::AwaitGo {
            return Ok(Placement::Wait);
        }
        let index = f
            .plan()
            .locate(h.offset, h.len)
            .map_err(|e| Refusal::protocol(e.to_string()))?;
        f.claim(index)?;
        f.began.get_or_insert(now);
        Ok(Placement::Land {
            file: h.file_id,
            index,
            engine: f.spec.engine,
            target: f.spec.io.clone(),
            verify: f.verify,
        })
    }

    /// Chunk `index` of `file` is written (or its write failed).
    pub(crate) fn written(&mut self, file: u32, index: u64, r: Result<(), Refusal>, now: Instant) {
        let Some(f) = self.files.get_mut(&file) else {
            return;
        };
        match r {
            Ok(()) => {
                let o = f.written(index);
                self.outcome(file, o, now);
            }
            // Tell the sender now: the chunk will never be verified.
            Err(Refusal { code, message }) => self.fail_file(file, code, message, now),
        }
    }

    /// The receiver's proof of chunk `index` of `file` (zeros when not verifying).
    pub(crate) fn hashed(&mut self, file: u32, index: u64, proof: ChunkProof, now: Instant) {
        if let Some(f) = self.files.get_mut(&file) {
            let o = f.hashed(index, proof);
            self.outcome(file, o, now);
        }
    }

    /// Acts on a chunk's new state.
    pub(crate) fn outcome(&mut self, file: u32, o: Outcome, now: Instant) {
        let Some(f) = self.files.get_mut(&file) else {
            return;
        };
        match o {
            Outcome::Pending => {}
            Outcome::Verified(i) if f.journal.kept && !f.verify => {
                // Written, not proved: synced before it is acknowledged, as any chunk, but
                // not journaled, so no later session (verified or not) can resume it.
                self.last_progress = now;
                self.out.jobs.push(RxJob::Journal(JournalJob {
                    file,
                    start: None,
                    records: Vec::new(),
                    index: i,
                }));
            }
            Outcome::Verified(i) if f.journal.kept => {
                self.last_progress = now;
                let mut records = Vec::new();
                let start = (!f.journal.open).then(|| {
                    f.journal.open = true;
                    f.journal.session_recorded = false;
                    f.journal.tag = 0;
                    JournalHeader {
                        size: f.plan().size(),
                        chunk_size: f.plan().chunk_size(),
                    }
                });
                if !f.journal.session_recorded {
                    f.journal.session_recorded = true;
                    let (c, s) = self.nonces;
                    records.extend(
                        JournalRecord::Session {
                            owner: self.keys.journal_owner(),
                            client_nonce: c,
                            server_nonce: s,
                            file_id: file,
                        }
                        .encode(),
                    );
                }
                let (mac, cv) = f.proof(i);
                records.extend(
                    JournalRecord::Chunk {
                        session: f.journal.tag,
                        index: i,
                        mac,
                        cv,
                    }
                    .encode(),
                );
                self.out.jobs.push(RxJob::Journal(JournalJob {
                    file,
                    start,
                    records,
                    index: i,
                }));
            }
            Outcome::Verified(i) => {
                self.last_progress = now;
                // Nothing to resume for a file without a journal: it is durable at commit.
                f.durable(i);
                if f.plan().count() > 1 {
                    self.send(Message::ChunkAck {
                        file_id: file,
                        index: i,
                        ok: true,
                    });
                }
                // A one-chunk file is not acknowledged: its `FileEnd` may already be here.
                self.settle(file, now);
            }
            Outcome::Mismatch(i) => {
                self.totals.mismatches += 1;
                self.send(Message::ChunkAck {
                    file_id: file,
                    index: i,
                    ok: false,
                })
            }
            Outcome::GiveUp(i) => {
                let m = format!(
                    "chunk {i} failed verification {} times; giving up on this file",
                    crate::recv::chunks::MAX_MISMATCHES
                );
                self.fail_file(file, ErrorCode::Verify, m, now);
            }
        }
    }

    /// Chunks of `file` are durable (synced and journaled), or could not be made so.
    pub(crate) fn journaled(
        &mut self,
        file: u32,
        indexes: &[u64],
        r: Result<(), Refusal>,
        now: Instant,
    ) {
        if let Err(Refusal { code, message: m }) = r {
            return self.fail_file(file, code, format!("making chunks durable: {m}"), now);
        }
        let Some(f) = self.files.get_mut(&file) else {
            return;
        };
        for &i in indexes {
            f.durable(i);
        }
        for &i in indexes {
            self.send(Message::ChunkAck {
                file_id: file,
                index: i,
                ok: true,
            });
        }
        self.settle(file, now);
    }

    /// Commits or fails `file` once that can be decided.
    pub(crate) fn settle(&mut self, file: u32, now: Instant) {
        let Some(f) = self.files.get_mut(&file) else {
            return;
        };
        match f.settle(&self.keys) {
            Settle::Wait => {}
            Settle::Commit(digest) => {
                let job = CommitJob {
                    spec: f.spec.clone(),
                    digest,
                    in_place: f.in_place,
                };
                self.out.jobs.push(RxJob::Commit(job));
            }
            Settle::Fail(Refusal { code, message }) => self.fail_file(file, code, message, now),
        }
    }

    /// The committer finished `file`: committed, or failed with the reason.
    pub(crate) fn committed(
        &mut self,
        file: u32,
        digest: [u8; 32],
        r: Result<(), Refusal>,
        now: Instant,
    ) {
        if let Err(Refusal { code, message: m }) = r {
            return self.fail_file(file, code, m, now);
        }
        let Some(f) = self.files.remove(&file) else {
            return;
        };
        self.open_chunks -= f.plan().count();
        self.progress(now);
        let stored = f.spec.engine.stores();
        self.send(Message::FileCommitted {
            file_id: file,
            bytes: f.plan().size(),
            digest,
            verified: f.verify,
            stored,
        });
        self.totals.files += 1;
        self.report(Report::FileDone(FileOutcome {
            path: f.spec.target.clone(),
            bytes: f.plan().size(),
            skipped: f.skipped,
            seconds: f.seconds(now),
            engine: f.spec.engine.name().into(),
            verified: f.verify,
            stored,
            // The plain BLAKE3 users compare; the keyed digest above is the proof.
            digest: f.plain_digest(),
            failure: None,
        }));
    }

    /// Drops `file` from the session: later chunks for it are drained and ignored. Its part
    /// file stays for a resume if it holds durable chunks.
    pub(crate) fn abandon(&mut self, file: u32) -> Option<RxFile> {
        self.give_up(file, true)
    }

    /// [`Receiving::abandon`]; unless `resumable`, the part file and its journal are removed
    /// whatever they hold: a later run can resume nothing from them (the source changed).
    pub(crate) fn give_up(&mut self, file: u32, resumable: bool) -> Option<RxFile> {
        let f = self.files.remove(&file)?;
        self.open_chunks -= f.plan().count();
        let keep = resumable && f.holds_resumable() && f.journal.kept;
        self.out.jobs.push(RxJob::Release { file, keep });
        Some(f)
    }

    /// Fails a file on the receiver's side: the sender is told, the file abandoned. A file
    /// already given up is not failed twice.
    pub(crate) fn fail_file(&mut self, file: u32, code: ErrorCode, message: String, now: Instant) {
        let Some(mut f) = self.abandon(file) else {
            return;
        };
        f.fail(code, message.clone());
        self.send(Message::FileFailed {
            file_id: file,
            code,
            message: message.clone(),
        });
        self.report(Report::FileDone(failed_outcome(&f, code, message, now)));
    }

    /// Marks every open file failed (a data stream broke: their chunks are incomplete).
    pub(crate) fn fail_open_files(&mut self, code: ErrorCode, why: &str) {
        for f in self.files.values_mut() {
            f.fail(code, why.to_string());
        }
    }

    /// A data stream found the process out of file descriptors, or bytes that failed
    /// authentication ([`Receiving::short`]).
    pub(crate) fn short_of_descriptors(&mut self, r: Refusal) {
        self.short.get_or_insert(r);
    }

    /// A data stream ended; `failed`: why it broke (reported), when it did.
    pub(crate) fn stream_ended(&mut self, failed: Option<String>) {
        self.streams_ended += 1;
        if let Some(why) = failed {
            self.report(Report::Notice(None, Some(format!("data stream: {why}"))));
        }
    }

    /// Whether our `Stats` are due: the sender finished and every stream ended.
    pub(crate) fn wants_stats(&self) -> bool {
        self.finishing && !self.stats_sent && self.streams_ended >= self.streams
    }

    /// Our closing numbers.
    pub(crate) fn send_stats(&mut self, stats: SideStats, usage: Usage) {
        self.stats_sent = true;
        self.totals.usage = usage;
        self.send(Message::Stats(stats));
    }

    /// Where the role is, for progress displays: the earliest stage any open file is in.
    pub(crate) fn phase(&self) -> crate::event::Phase {
        use crate::event::Phase as P;
        let mut stages = self.files.values().map(RxFile::stage);
        let rank = |p: &P| match p {
            P::Checking => 0,
            P::Sending => 1,
            P::Syncing => 2,
            _ => 3,
        };
        match stages.by_ref().min_by_key(rank) {
            _ if self.preparing.is_some() => P::Checking,
            Some(p) => p,
            None => P::Sending,
        }
    }

    /// Bytes verified and durable in files not yet committed (what a resume keeps).
    pub(crate) fn durable_pending(&self) -> u64 {
        self.files.values().map(RxFile::durable_bytes).sum()
    }

    /// The clock: payload bytes seen so far over every stream (moving bytes is progress), a
    /// keep-alive about once a second while files are open (a long commit says nothing else),
    /// and the idle timeout, which only progress restarts — never chatter such as `Notice`.
    pub(crate) fn tick(&mut self, now: Instant, bytes: u64) -> Result<(), SessionError> {
        if let Some(r) = self.short.take() {
            return Err(r.into());
        }
        if bytes != self.last_bytes {
            self.last_bytes = bytes;
            self.progress(now);
        }
        if now.saturating_duration_since(self.last_tell) >= Duration::from_secs(1) {
            self.last_tell = now;
            if let Some(f) = self.files.values().next() {
                let m = Message::Progress {
                    file_id: f.id(),
                    bytes: f.written.min(f.plan().size()),
                };
                self.send(m);
            }
        }
        if now.saturating_duration_since(self.last_progress) > self.cfg.idle {
            let peer = self.peer();
            return Err(SessionError::Connection {
                peer: peer.into(),
                reason: format!("no progress from {peer} for {} s", self.cfg.idle.as_secs()),
            });
        }
        Ok(())
    }

    /// The session ends: every file still open is dropped (a part file without durable chunks
    /// is removed, the others kept for a resume). When the sender said it `finished`, a file
    /// still open did not arrive, and in a pull neither did a requested name the server never
    /// answered: each is a failure, so success is never reported for missing work.
    pub(crate) fn close(&mut self, finished: bool, now: Instant) {
        let open: Vec<u32> = self.files.keys().copied().collect();
        for id in open {
            let Some(f) = self.abandon(id) else {
                continue;
            };
            if finished {
                let message = format!(
                    "{} finished the session before this file was complete",
                    self.peer()
                );
                let outcome = failed_outcome(&f, ErrorCode::Protocol, message, now);
                self.report(Report::FileDone(outcome));
            }
        }
        if finished {
            self.unanswered();
        }
    }

    /// In a pull, requested names the server sent nothing for (and no `EntryFailed` stands
    /// for): each a failure.
    fn unanswered(&mut self) {
        let missing = self.scope.unanswered();
        let answered_by_failures = usize::try_from(self.source_failures).unwrap_or(usize::MAX);
        if missing.len() <= answered_by_failures {
            return;
        }
        let message = "asked for, but the server sent nothing for it".to_string();
        let failures: Vec<Failure> = if answered_by_failures == 0 {
            missing
                .iter()
                .map(|n| Failure {
                    path: zcp_wire::escape(n),
                    code: ErrorCode::Protocol.name(),
                    message: message.clone(),
                })
                .collect()
        } else {
            vec![Failure {
                path: String::new(),
                code: ErrorCode::Protocol.name(),
                message: format!(
                    "{} of the names asked for got no answer from the server",
                    missing.len() - answered_by_failures
                ),
            }]
        };
        for f in failures {
            self.report(Report::Notice(Some(f), None));
        }
    }
}

/// What is reported for a file that failed with `code`: nothing verified or stored.
fn failed_outcome(f: &RxFile, code: ErrorCode, message: String, now: Instant) -> FileOutcome {
    FileOutcome {
        path: f.spec.target.clone(),
        bytes: f.plan().size(),
        skipped: f.skipped,
        seconds: f.seconds(now),
        engine: f.spec.engine.name().into(),
        verified: false,
        stored: false,
        digest: [0; 32],
        failure: Some(Failure {
            path: f.spec.target.clone(),
            code: code.name(),
            message,
        }),
    }
}

#[cfg(test)]
mod tests;
