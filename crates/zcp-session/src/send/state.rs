//! The sending role as a state machine, without I/O. Inputs: entries of the walk
//! ([`Sending::take_entry`]), the receiver's frames ([`Sending::handle_frame`], in
//! `frames.rs`), what the hash workers and the transport report ([`Sending::hashed`],
//! [`Sending::departed`], [`Sending::resume_progress`], [`Sending::resume_checked`],
//! [`Sending::source_failed`], [`Sending::stream_done`]), the answer to a source check
//! ([`Sending::source_checked`]) and the clock ([`Sending::tick`]). Outputs
//! ([`Sending::take_out`]): frames, chunks for the transport, hash jobs, source checks, and
//! reports for the person.
//!
//! Per file: `PutFile` → (`Have`…) `FileReady` → [resume check → `Go`] → chunks, each
//! chunk's `ChunkMac` once it is hashed and has departed (never before: a MAC stands for
//! bytes that left; an acknowledgement of a chunk whose MAC was not sent is a protocol
//! error) → every chunk departed and acknowledged (`ChunkAck ok`; a `ChunkAck` not ok sends
//! the chunk again, up to [`MAX_RETRIES`] times; a file of one chunk skips the
//! acknowledgement) → source unchanged? → `FileEnd` → `FileCommitted`. A file is reported
//! done only when `proof.rs` finds its `FileReady` and `FileCommitted` prove it stored and
//! verified as the session asked; otherwise it fails.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use zcp_engine::fs::Meta;
use zcp_engine::send::STAGED_MAX;
use zcp_engine::{RecvEngine, SendEngine, Usage};
use zcp_wire::{
    ChunkPlan, ChunkProof, ErrorCode, Have, Message, Nonce, SessionKeys, SideStats, VerifyMode,
};

use super::entries::Awaiting;
use super::hash::HashJob;
use crate::error::SessionError;
use crate::event::{Failure, FileOutcome, Report};
use crate::recv::chunks::{MAX_CHUNKS, MAX_SESSION_CHUNKS};
use crate::transport::OutChunk;

/// Times one chunk may fail verification before its file is given up.
pub(crate) const MAX_RETRIES: u32 = 3;
/// Files announced but not yet committed: bounds open descriptors and per-file state.
pub(crate) const MAX_OPEN_FILES: usize = 768;
/// How long a receiver's keep-alive `Progress` counts as progress for a file whose `FileEnd`
/// was sent: a large commit (`fsync`) may take minutes, but not forever.
pub(crate) const MAX_COMMIT_WAIT: Duration = Duration::from_secs(30 * 60);

/// How the sending role runs.
#[derive(Debug, Clone)]
pub(crate) struct SenderConfig {
    /// The engine asked for (probed on the first file).
    pub(crate) engine: SendEngine,
    pub(crate) block: u64,
    /// Chunk size; `None` picks one per file from its size.
    pub(crate) chunk_size: Option<u64>,
    pub(crate) idle: Duration,
    /// How the session proves its data: with [`VerifyMode::None`] no chunk MAC and no file
    /// digest is computed.
    pub(crate) verify: VerifyMode,
    /// `--delete` or its dry run: the receiver prunes once the walk was whole.
    pub(crate) delete: zcp_wire::DeleteMode,
    /// The receiver engine the session asked for (the client's, in `Open`): every
    /// `FileReady` must name one of its class (`super::proof::engine_fits`).
    pub(crate) recv_engine: RecvEngine,
}

#[derive(Debug, PartialEq, Eq)]
pub(crate) enum State {
    Announced,
    Checking,
    Sending,
    Ending,
}

/// A file being sent.
pub(crate) struct OutFile {
    pub(crate) file: Arc<File>,
    pub(crate) display: String,
    pub(crate) meta: Meta,
    pub(crate) plan: ChunkPlan,
    pub(crate) state: State,
    pub(crate) haves: Vec<Have>,
    /// Chunks offered in `Have`s so far (one bit each): each chunk at most once.
    pub(crate) offered: Vec<u64>,
    /// Bytes of `haves` and of the resume check: counted in [`Sending::held_haves`].
    pub(crate) held: usize,
    /// The highest `Progress` the receiver reported for this file.
    pub(crate) progress: u64,
    /// When `FileEnd` went out.
    pub(crate) ending_since: Option<Instant>,
    /// The digest `FileEnd` carried: what a `FileCommitted` is held to.
    pub(crate) sent_digest: Option<[u8; 32]>,
    /// The receiver offered the target it already holds (not an interrupted attempt).
    pub(crate) held_target: bool,
    pub(crate) macs: Vec<Option<[u8; 32]>>,
    /// Each chunk's plain BLAKE3 chaining value, once hashed ([`OutFile::prove`]).
    pub(crate) cvs: Vec<[u8; 32]>,
    /// Chunk 0's bytes hashed as a whole input: the digest of a one-chunk file.
    pub(crate) root: Option<[u8; 32]>,
    /// Chunks whose bytes all left on the transport (or that a resume kept). A chunk's
    /// `ChunkMac` goes out only once it is both hashed and departed, so every MAC this side
    /// ever gives out stands for bytes that crossed the wire: none can be acknowledged,
    /// replayed in a later `Have`, or end the file before its bytes were sent.
    pub(crate) departed: Vec<bool>,
    pub(crate) acked: Vec<bool>,
    pub(crate) n_acked: u64,
    pub(crate) retries: HashMap<u64, u32>,
    pub(crate) skipped: u64,
    pub(crate) cancelled: Arc<AtomicBool>,
    /// When it was announced.
    pub(crate) started: Instant,
    /// When a stream took its first chunk: its bytes began to move. Its time (and rate) is
    /// counted from here, not from its announcement, which may come long before in a tree.
    pub(crate) began: Option<Instant>,
    pub(crate) engine: String,
    /// Whether the file is proved: the session verifies (`--verify blake3`) and the
    /// receiver's engine reads the bytes (every engine but `null`, which only a session that
    /// asked for it accepts). Otherwise no chunk MAC and no file digest is computed.
    pub(crate) verify: bool,
    /// Whether the receiver's engine stores the file (every engine but `null` and `mem`):
    /// what its `FileCommitted` must then say.
    pub(crate) stores: bool,
}

/// What a finished sending role reports.
#[derive(Debug, Default, Clone)]
pub(crate) struct SenderTotals {
    /// Files committed by the receiver.
    pub(crate) files: u64,
    /// Directories and links the receiver said it made (`EntryDone`).
    pub(crate) entries: u64,
    /// Chunks sent again after a failed verification.
    pub(crate) resent: u64,
    /// The engine that ran.
    pub(crate) engine: Option<SendEngine>,
    /// The receiver's engine, from its first `FileReady`.
    pub(crate) receiver_engine: Option<String>,
    /// When the last stream sent its last byte.
    pub(crate) send_end: Option<Instant>,
    /// When the last file was committed.
    pub(crate) last_commit: Option<Instant>,
    /// CPU time of the whole role.
    pub(crate) usage: Usage,
    /// CPU time of the data streams alone.
    pub(crate) data_usage: Usage,
    /// The receiver's closing numbers.
    pub(crate) peer: SideStats,
    /// Where the receiver said the first file lands (its final path beneath the root).
    pub(crate) stored_as: Option<Vec<u8>>,
}

/// Ask the loop whether a file's source is still what it was, before its `FileEnd`.
#[derive(Debug)]
pub(crate) struct Check {
    pub(crate) file_id: u32,
    pub(crate) file: Arc<File>,
    pub(crate) meta: Meta,
}

/// What one input produced.
#[derive(Debug, Default)]
pub(crate) struct SendOut {
    pub(crate) frames: Vec<Message>,
    pub(crate) chunks: Vec<OutChunk>,
    pub(crate) hashes: Vec<HashJob>,
    pub(crate) checks: Vec<Check>,
    pub(crate) reports: Vec<Report>,
}

/// The sending role's state.
pub(crate) struct Sending {
    pub(super) cfg: SenderConfig,
    /// The engine that runs, and why it differs from the one asked for.
    pub(super) engine: SendEngine,
    pub(super) engine_note: Option<String>,
    pub(super) keys: SessionKeys,
    pub(super) nonces: (Nonce, Nonce),
    pub(super) open: HashMap<u32, OutFile>,
    pub(super) next_id: u32,
    pub(super) totals: SenderTotals,
    pub(super) notes_seen: HashSet<String>,
    /// Bytes of `Have`s held over every file (at most [`super::frames::MAX_HELD_HAVE_BYTES`]).
    pub(super) held_haves: usize,
    /// Chunks of the open files together (at most [`MAX_SESSION_CHUNKS`]).
    pub(super) open_chunks: u64,
    /// Directories, links and directory times sent and not yet answered.
    pub(super) awaiting: Awaiting,
    pub(super) finishing: bool,
    /// `--delete`: whether to ask the receiver to prune, and its answers.
    pub(super) prune: super::prune::SendPrune,
    got_stats: bool,
    streams: usize,
    streams_done: usize,
    last_progress: Instant,
    last_bytes: u64,
    pub(super) out: SendOut,
}

pub(crate) fn proto(reason: String) -> SessionError {
    SessionError::Protocol {
        peer: "the receiver".into(),
        reason,
    }
}

impl Sending {
    /// How the role runs (what the fuzz driver's checks hold it to).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn cfg(&self) -> &SenderConfig {
        &self.cfg
    }

    /// What the role did so far.
    pub(crate) fn totals(&self) -> &SenderTotals {
        &self.totals
    }

    /// The role's totals, its CPU time `usage` counted in: the role is over.
    pub(crate) fn into_totals(self, usage: Usage) -> SenderTotals {
        SenderTotals {
            usage,
            ..self.totals
        }
    }

    /// Files open now, and bytes of `Have` offers held for them (the fuzz driver checks
    /// both stay within their bounds).
    #[cfg(any(test, feature = "fuzzing"))]
    pub(crate) fn holding(&self) -> (usize, usize) {
        (self.open.len(), self.held_haves)
    }

    /// Whether the walk ended and the role is finishing.
    pub(crate) fn finishing(&self) -> bool {
        self.finishing
    }

    pub(crate) fn new(
        cfg: SenderConfig,
        engine: (SendEngine, Option<String>),
        keys: SessionKeys,
        nonces: (Nonce, Nonce),
        streams: usize,
        now: Instant,
    ) -> Sending {
        Sending {
            prune: super::prune::SendPrune::new(cfg.delete),
            cfg,
            engine: engine.0,
            // Encrypted, no engine moves file pages to the socket untouched: each chunk is
            // read into the stream's record, hashed and encrypted there.
            engine_note: match keys.encrypted() {
                true => Some(format!(
                    "encrypted: {} cannot run; each chunk is read once into user memory, hashed and sealed there",
                    engine.0.name()
                )),
                false => engine.1,
            },
            keys,
            nonces,
            open: HashMap::new(),
            next_id: 0,
            totals: SenderTotals {
                engine: Some(engine.0),
                ..SenderTotals::default()
            },
            notes_seen: HashSet::new(),
            held_haves: 0,
            open_chunks: 0,
            awaiting: Awaiting::default(),
            finishing: false,
            got_stats: false,
            streams,
            streams_done: 0,
            last_progress: now,
            last_bytes: 0,
            out: SendOut::default(),
        }
    }

    /// The outputs since the last call.
    pub(crate) fn take_out(&mut self) -> SendOut {
        std::mem::take(&mut self.out)
    }

    pub(crate) fn send(&mut self, m: Message) {
        self.out.frames.push(m);
    }

    pub(crate) fn report(&mut self, r: Report) {
        if r.is_flaw() {
            self.prune.flaw();
        }
        self.out.reports.push(r);
    }

    /// The session moved forward: the idle clock restarts.
    pub(crate) fn progress(&mut self, now: Instant) {
        self.last_progress = now;
    }

    /// The walk was counted: tell the receiver and the person.
    pub(crate) fn plan(&mut self, files: u64, bytes: u64) {
        self.send(Message::Plan { files, bytes });
        self.report(Report::Plan { files, bytes });
    }

    /// Where the role is, for progress displays: the earliest stage any open file is in
    /// (chunks handed to the transport but not acknowledged count as being verified; the
    /// observer shows `Sending` while bytes move).
    pub(crate) fn phase(&self) -> crate::event::Phase {
        use crate::event::Phase as P;
        // The least advanced open file: a file whose chunks are still leaving is sending;
        // one whose every chunk left awaits the receiver's verification and sync.
        let stage = |f: &OutFile| match f.state {
            State::Announced | State::Checking => (0, P::Checking),
            State::Sending if f.departed.iter().any(|d| !d) => (1, P::Sending),
            State::Sending => (2, P::Syncing),
            State::Ending => (3, P::Committing),
        };
        match self.open.values().map(stage).min_by_key(|(r, _)| *r) {
            Some((_, p)) => p,
            None if self.finishing => P::Committing,
            None => P::Sending,
        }
    }

    /// Bytes the receiver acknowledged as verified and durable in files not yet committed:
    /// what a resume keeps.
    pub(crate) fn durable_pending(&self) -> u64 {
        (self.open.values())
            // An engine that stores nothing (null, mem) keeps nothing for a resume.
            .filter(|f| !matches!(f.engine.as_str(), "null" | "mem"))
            .map(|f| {
                if !f.verify {
                    // Unverified chunks are durable but never resumed: only the chunks kept
                    // from a verified attempt are.
                    return f.skipped;
                }
                (f.acked.iter().enumerate())
                    .filter(|(_, a)| **a)
                    .map(|(i, _)| f.plan.chunk(i as u64).1)
                    .sum::<u64>()
            })
            .sum()
    }

    /// Whether another entry may be announced: room for one more file of the largest plan,
    /// so the open files' chunks together stay within the session's limit, which the receiver
    /// enforces, and room for one more directory or link awaiting its answer.
    pub(crate) fn wants_entry(&self) -> bool {
        // Once the walk is over (`finish`), nothing more: a `Prune` may be out.
        !self.finishing
            && !self.awaiting.walk_over()
            && self.open.len() < MAX_OPEN_FILES
            && self.open_chunks + MAX_CHUNKS <= MAX_SESSION_CHUNKS
            && !self.awaiting.full()
    }

    /// Whether every announced file is done.
    pub(crate) fn idle_files(&self) -> bool {
        self.open.is_empty()
    }

    /// The walk is over and every file done: directory times, as the window of answers
    /// allows (called again each turn until they are all out; `dirs` is taken the first
    /// time), then `Finish`.
    pub(crate) fn finish(&mut self, dirs: Vec<(Vec<u8>, Meta)>) {
        if self.finishing {
            return;
        }
        self.awaiting.take_times(dirs);
        if !self.prune_over() {
            return;
        }
        while let Some((path, meta)) = self.awaiting.next_times() {
            self.send(Message::DirTimes {
                path,
                mode: meta.mode,
                mtime_sec: meta.mtime.0,
                mtime_nsec: meta.mtime.1,
            });
        }
        if self.awaiting.times_sent() {
            self.send(Message::Finish);
            self.finishing = true;
        }
    }

    /// Whether the session is over: the receiver's `Stats` came and every stream ended.
    pub(crate) fn done(&self) -> bool {
        self.got_stats && self.streams_done == self.streams
    }

    /// Removes file `id` from the session, releasing what it held.
    pub(crate) fn remove(&mut self, id: u32) -> Option<OutFile> {
        let f = self.open.remove(&id)?;
        self.held_haves -= f.held;
        self.open_chunks -= f.plan.count();
        Some(f)
    }

    /// Gives up file `id`: its chunks still queued are skipped, the receiver is told (when
    /// `tell_receiver`), and the failure is reported.
    pub(crate) fn fail_file(
        &mut self,
        id: u32,
        code: ErrorCode,
        message: String,
        tell_receiver: bool,
        now: Instant,
    ) {
        let Some(f) = self.remove(id) else {
            return;
        };
        f.cancelled.store(true, Ordering::Relaxed);
        if tell_receiver {
            self.send(Message::FileAbort {
                file_id: id,
                code,
                message: message.clone(),
            });
        }
        let seconds = f.seconds(now);
        self.report(Report::FileDone(FileOutcome {
            path: f.display,
            bytes: f.plan.size(),
            skipped: f.skipped,
            seconds,
            engine: f.engine,
            verified: false,
            stored: false,
            digest: [0; 32],
            failure: Some(Failure {
                path: String::new(),
                code: code.name(),
                message,
            }),
        }));
    }

    /// Queues chunks `indexes` of file `id` for the transport (and their hashing).
    pub(crate) fn schedule(&mut self, id: u32, indexes: Vec<u64>) {
        let Some(f) = self.open.get_mut(&id) else {
            return;
        };
        // The file's clock starts when a stream takes the first of these (if none moved yet).
        let mut first = f.began.is_none();
        for i in indexes {
            let (offset, len) = f.plan.chunk(i);
            // Encrypted, every byte passes through user memory on its way: hash it there.
            let staged = f.verify && (len <= STAGED_MAX || self.keys.encrypted());
            self.out.chunks.push(OutChunk {
                file_id: id,
                file: f.file.clone(),
                index: i,
                offset,
                len,
                staged,
                sparse: f.meta.sparse(),
                cancelled: f.cancelled.clone(),
                first: std::mem::take(&mut first),
            });
            if !f.verify {
                // `--verify none`, or a null receiver that never reads the bytes: nothing
                // to prove, nothing hashed.
                f.macs[i as usize] = Some([0; 32]);
                continue;
            }
            if staged {
                continue;
            }
            self.out.hashes.push(HashJob::Chunk {
                file_id: id,
                file: f.file.clone(),
                index: i,
                offset,
                len,
                cancelled: f.cancelled.clone(),
            });
        }
    }

    /// Starts sending file `id`, keeping the chunks the receiver proved it holds.
    pub(crate) fn start_sending(&mut self, id: u32, kept: Vec<(u64, ChunkProof)>) {
        let Some(f) = self.open.get_mut(&id) else {
            return;
        };
        f.state = State::Sending;
        for (i, proof) in kept {
            let i_us = i as usize;
            if !f.acked[i_us] {
                f.acked[i_us] = true;
                f.n_acked += 1;
                f.prove(i, proof);
                // Proved held by the receiver against this side's own hash of the source:
                // nothing to send.
                f.departed[i_us] = true;
                f.skipped += f.plan.chunk(i).1;
            }
        }
        let todo: Vec<u64> = (0..f.plan.count())
            .filter(|i| !f.acked[*i as usize])
            .collect();
        self.schedule(id, todo);
        self.maybe_end(id);
    }

    /// Every chunk departed, every MAC known and every chunk acknowledged (a file of one
    /// chunk is not: the receiver holds its `FileEnd` until the chunk is verified): ask
    /// whether the source changed; [`Sending::source_checked`] sends `FileEnd`.
    pub(crate) fn maybe_end(&mut self, id: u32) {
        let Some(f) = self.open.get_mut(&id) else {
            return;
        };
        let acked = f.plan.count() <= 1 || f.n_acked == f.plan.count();
        if f.state != State::Sending
            || !acked
            || f.macs.iter().any(Option::is_none)
            || f.departed.iter().any(|d| !d)
        {
            return;
        }
        f.state = State::Ending;
        self.out.checks.push(Check {
            file_id: id,
            file: f.file.clone(),
            meta: f.meta,
        });
    }

    /// The source of file `id` is as it was (`None`), or changed (why): `FileEnd`, or the
    /// file is given up.
    pub(crate) fn source_checked(&mut self, id: u32, changed: Option<String>, now: Instant) {
        if let Some(why) = changed {
            let m = format!("the source changed while being sent: {why}");
            return self.fail_file(id, ErrorCode::SourceChanged, m, true, now);
        }
        let Some(f) = self.open.get_mut(&id) else {
            return;
        };
        let digest = if f.verify {
            let mut d = self
                .keys
                .file_digest(id, f.plan.size(), f.plan.chunk_size());
            for m in &f.macs {
                d.push(m.as_ref().expect("all known"));
            }
            d.finish()
        } else {
            // Nothing was hashed: a zero digest, which the receiver does not check.
            [0; 32]
        };
        f.ending_since = Some(now);
        f.sent_digest = Some(digest);
        self.send(Message::FileEnd {
            file_id: id,
            digest,
        });
    }

    /// A chunk's proof, from a hash worker or a staged send: its MAC is sent once the chunk
    /// has departed.
    pub(crate) fn hashed(&mut self, file: u32, index: u64, proof: ChunkProof, now: Instant) {
        self.progress(now);
        let Some(f) = self.open.get_mut(&file) else {
            return;
        };
        let i = index as usize;
        if i >= f.macs.len() {
            return;
        }
        f.prove(index, proof);
        if f.departed[i] {
            self.send(Message::ChunkMac {
                file_id: file,
                index,
                mac: proof.mac,
            });
        }
        self.maybe_end(file);
    }

    /// A stream took file `file`'s first chunk: the file's time counts from now.
    pub(crate) fn began(&mut self, file: u32, now: Instant) {
        if let Some(f) = self.open.get_mut(&file) {
            f.began.get_or_insert(now);
        }
    }

    /// Every byte of a chunk left on the transport (TCP: written to the socket; UDP: each
    /// datagram sent at least once): its MAC goes out if known (else when it is).
    pub(crate) fn departed(&mut self, file: u32, index: u64, now: Instant) {
        self.progress(now);
        let Some(f) = self.open.get_mut(&file) else {
            return;
        };
        let i = index as usize;
        if i >= f.departed.len() || f.departed[i] {
            return;
        }
        f.departed[i] = true;
        // `--verify none` (or a null receiver) sends no MAC: its placeholder is not one.
        if let (true, Some(mac)) = (f.verify, f.macs[i]) {
            self.send(Message::ChunkMac {
                file_id: file,
                index,
                mac,
            });
        }
        self.maybe_end(file);
    }

    /// The source could not be read as it was announced (shrunk, changed, unreadable).
    pub(crate) fn source_failed(&mut self, file: u32, why: String, now: Instant) {
        let m = format!("the source changed while being sent: {why}");
        self.fail_file(file, ErrorCode::SourceChanged, m, true, now);
    }

    /// The resume check of file `file` has checked `bytes` so far: the sender is working,
    /// and the receiver, which waits for its `Go`, hears so (a `Progress` of its own).
    pub(crate) fn resume_progress(&mut self, file: u32, bytes: u64, now: Instant) {
        if self.open.contains_key(&file) {
            self.progress(now);
            self.send(Message::Progress {
                file_id: file,
                bytes,
            });
        }
    }

    /// The resume check of file `id`: the chunks to keep, or `None` to send it whole.
    pub(crate) fn resume_checked(
        &mut self,
        file: u32,
        kept: Option<Vec<(u64, ChunkProof)>>,
        now: Instant,
    ) {
        self.progress(now);
        let Some(f) = self.open.get_mut(&file) else {
            return;
        };
        self.held_haves -= std::mem::take(&mut f.held);
        let note = (kept.is_none() && !f.held_target).then(|| {
            format!(
                "{}: changed since the interrupted attempt; sending it whole",
                f.display
            )
        });
        self.send(Message::Go {
            file_id: file,
            restart: kept.is_none(),
        });
        // A target that differs is simply replaced; an interrupted attempt that no longer
        // matches is worth a word.
        if let Some(n) = note {
            self.report(Report::Notice(None, Some(n)));
        }
        self.start_sending(file, kept.unwrap_or_default());
    }

    /// A data stream sent everything.
    pub(crate) fn stream_done(&mut self, usage: Usage, end: Instant) {
        self.streams_done += 1;
        self.totals.data_usage.add(&usage);
        self.totals.send_end = Some(self.totals.send_end.map_or(end, |e| e.max(end)));
    }

    /// The receiver's closing `Stats`: it has answered everything it is going to, so each
    /// directory, link or directory's times still unanswered fails.
    pub(crate) fn stats(&mut self, s: SideStats) {
        self.totals.peer = s;
        self.got_stats = true;
        let unanswered: Vec<_> = self.awaiting.drain().collect();
        for (what, path) in unanswered {
            let f = Failure {
                path: zcp_wire::escape(&path),
                code: ErrorCode::Verify.name(),
                message: format!(
                    "the receiver closed the session without saying it made this {}",
                    what.what()
                ),
            };
            self.report(Report::Notice(Some(f), None));
        }
    }

    /// The idle clock: only progress restarts it (bytes moved, chunks hashed, acknowledged
    /// or committed, files ready), never chatter such as `Notice`s.
    pub(crate) fn tick(
        &mut self,
        now: Instant,
        bytes: u64,
        peer: &str,
    ) -> Result<(), SessionError> {
        if bytes != self.last_bytes {
            self.last_bytes = bytes;
            self.progress(now);
        }
        if now.saturating_duration_since(self.last_progress) > self.cfg.idle {
            return Err(SessionError::Connection {
                peer: peer.to_string(),
                reason: format!(
                    "no progress from the receiver for {} s",
                    self.cfg.idle.as_secs()
                ),
            });
        }
        Ok(())
    }

    /// The session failed: every chunk still queued is skipped.
    pub(crate) fn cancel_all(&mut self) {
        for f in self.open.values() {
            f.cancelled.store(true, Ordering::Relaxed);
        }
    }
}
