//! One file being received: where each of its chunks stands, and whether the file can be
//! decided. No I/O and no locks: the receiving role ([`super::state::Receiving`]) owns every
//! [`RxFile`] and is the only one that changes it.
//!
//! A chunk is *verified* when its bytes are written (the engine's completion fired), its MAC
//! over what was written is known, and the sender's MAC for it has arrived and is equal; it is
//! *durable* once the journal thread has synced the data and recorded it. A mismatch resets the
//! chunk so the sender can send it again. The file commits only when every chunk is durable
//! and the whole-file digests agree: the verified ranges then cover exactly `[0, size)`,
//! because the plan admits each chunk once, at one offset, with one length.

use crate::error::Refusal;
use std::time::Instant;

use zcp_engine::RecvEngine;
use zcp_engine::recv::Target;
use zcp_wire::{ChunkPlan, ChunkProof, ErrorCode, SessionKeys};

/// Most chunks one file may have; bounds the receiver's per-file bookkeeping (about 110 bytes
/// a chunk). With the largest chunk size (1 GiB) that is a 256 TiB file.
pub(crate) const MAX_CHUNKS: u64 = 1 << 18;

/// Most chunks the open files of one session may have together (files announced and not yet
/// committed or failed): bounds the bookkeeping of both roles per session (about 55 MiB on a
/// receiver, 34 MiB on a sender) whatever the files and chunk sizes. A sender announces a
/// file only while the open ones leave room for it; a receiver refuses a file past it.
pub(crate) const MAX_SESSION_CHUNKS: u64 = 1 << 19;

const CLAIMED: u8 = 1;
const WRITTEN: u8 = 2;
const HASHED: u8 = 4;
const VERIFIED: u8 = 8;
const DURABLE: u8 = 16;

/// Times a chunk may fail verification before its file is given up (the sender's limit too).
pub(crate) const MAX_MISMATCHES: u8 = 4;

/// Bytes a second a sender checking offered chunks keeps up at least, for its `Progress` to
/// count as work (any disk hashes far faster; a peer inching the count up does not).
pub(crate) const MIN_CHECK_RATE: f64 = (1u64 << 20) as f64;

#[derive(Debug, Clone, Copy, Default)]
struct Chunk {
    flags: u8,
    /// Failed verifications so far (kept across the chunk's resets).
    mismatches: u8,
    local: [u8; 32],
    /// The chunk's plain BLAKE3 chaining value (what `local` binds).
    cv: [u8; 32],
    expected: Option<[u8; 32]>,
}

/// Where a file stands as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Resumable chunks were offered; no data until the sender says `Go`.
    AwaitGo,
    /// Receiving.
    Open,
}

/// Whether a file can be settled now (see [`RxFile::settle`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settle {
    /// Not yet: chunks outstanding, or no `FileEnd` yet.
    Wait,
    /// Every chunk durable and the digests agree: commit with this digest.
    Commit([u8; 32]),
    /// The file failed: tell the sender.
    Fail(Refusal),
}

/// What the caller must do after a chunk changed state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Nothing yet.
    Pending,
    /// Verified: make it durable (journal), then acknowledge it.
    Verified(u64),
    /// Failed verification and was reset: ask the sender for it again.
    Mismatch(u64),
    /// Failed verification [`MAX_MISMATCHES`] times: the file is given up.
    GiveUp(u64),
}

/// Where the file's journal stands (the journal itself is the I/O side's).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct JournalState {
    /// Whether the file keeps a journal at all (files of one chunk do not: there is nothing
    /// to resume).
    pub(crate) kept: bool,
    /// Whether the journal file exists with its header.
    pub(crate) open: bool,
    /// Whether this session's record is in it yet.
    pub(crate) session_recorded: bool,
    /// This session's tag in the journal.
    pub(crate) tag: u16,
}

/// What a file is and where it goes, fixed when it is prepared.
#[derive(Debug, Clone)]
pub(crate) struct FileSpec {
    pub(crate) id: u32,
    pub(crate) plan: ChunkPlan,
    pub(crate) engine: RecvEngine,
    pub(crate) mode: u32,
    pub(crate) mtime: (i64, u32),
    /// Final name inside the part file's directory.
    pub(crate) name: Vec<u8>,
    /// Final path relative to the root, for display.
    pub(crate) target: String,
    /// Where the engines write (`None` for engines that store nothing).
    pub(crate) io: Option<Target>,
    /// The source has holes (`PutFile` said so): the part file gets its size, not its space.
    pub(crate) sparse: bool,
    /// The existing target hashed for the offers, held open until the commit. Kept in
    /// place, the target must still be this file.
    pub(crate) existing: Option<Existing>,
}

/// An existing target whose chunks were offered: the descriptor they were hashed from (which
/// keeps the inode, so its number stays the same even where a filesystem makes them up) and
/// its device and inode.
#[derive(Debug, Clone)]
pub(crate) struct Existing {
    pub(crate) fd: std::sync::Arc<std::os::fd::OwnedFd>,
    pub(crate) id: (u64, u64),
}

/// A file being received.
#[derive(Debug)]
pub(crate) struct RxFile {
    pub(crate) spec: FileSpec,
    /// Whether its chunks are proved: the session verifies (`--verify blake3`) and the engine
    /// reads the bytes (not `null`). Otherwise a chunk counts once its bytes are written, and
    /// what this session writes is never offered for a resume.
    pub(crate) verify: bool,
    /// Bytes written so far.
    pub(crate) written: u64,
    /// Bytes held from an earlier attempt.
    pub(crate) skipped: u64,
    /// The chunks offered are the existing target's: if the sender keeps them all, the
    /// target itself is kept. Cleared when the sender restarts the file.
    pub(crate) in_place: bool,
    /// When it was opened.
    pub(crate) started: Instant,
    /// When its first chunk arrived: its time (and rate) counts from here, not from its
    /// opening, which may come long before its bytes in a tree.
    pub(crate) began: Option<Instant>,
    pub(crate) journal: JournalState,
    pub(crate) phase: Phase,
    chunks: Vec<Chunk>,
    /// Chunks held from an earlier session, offered in `Have`, until `Go`.
    offered: Vec<(u64, ChunkProof)>,
    /// The plain BLAKE3 of chunk 0's bytes as a whole input: the file's digest when it is
    /// the only chunk.
    root: Option<[u8; 32]>,
    /// The highest count of offered bytes the sender said it checked (its `Progress`).
    checked: u64,
    /// Bytes of the chunks offered.
    offered_bytes: u64,
    /// Whether the sender's resume check may count as work (the first offer of this target
    /// in the session).
    pub(crate) check_counts: bool,
    durable: u64,
    failed: Option<Refusal>,
    /// The sender's whole-file digest, once `FileEnd` arrived.
    end: Option<[u8; 32]>,
    /// Handed to the committer (or failed): nothing more to decide.
    settled: bool,
}

impl RxFile {
    /// A file to receive; `verify`: whether the session verifies (the `null` engine never
    /// does).
    pub(crate) fn new(
        spec: FileSpec,
        journal: JournalState,
        offered: Vec<(u64, ChunkProof)>,
        (in_place, verify): (bool, bool),
        now: Instant,
    ) -> RxFile {
        let count = spec.plan.count() as usize;
        let offered_bytes = offered.iter().map(|(i, _)| spec.plan.chunk(*i).1).sum();
        RxFile {
            verify: verify && spec.engine != RecvEngine::Null,
            spec,
            written: 0,
            skipped: 0,
            in_place,
            started: now,
            began: None,
            journal,
            phase: if offered.is_empty() {
                Phase::Open
            } else {
                Phase::AwaitGo
            },
            chunks: vec![Chunk::default(); count],
            offered,
            root: None,
            checked: 0,
            offered_bytes,
            check_counts: true,
            durable: 0,
            failed: None,
            end: None,
            settled: false,
        }
    }

    pub(crate) fn id(&self) -> u32 {
        self.spec.id
    }

    /// Where this file is, for progress displays.
    pub(crate) fn stage(&self) -> crate::event::Phase {
        use crate::event::Phase as P;
        if self.phase == Phase::AwaitGo {
            P::Checking
        } else if self.settled {
            P::Committing
        } else if self.written + self.skipped < self.spec.plan.size() {
            P::Sending
        } else {
            P::Syncing
        }
    }

    /// Bytes of this file's chunks that are verified and durable (from this attempt or an
    /// earlier one): what a resume would not send again.
    pub(crate) fn durable_bytes(&self) -> u64 {
        if self.spec.io.is_none() {
            // An engine that stores nothing (null, mem) keeps nothing for a resume.
            return 0;
        }
        if !self.verify {
            // Unverified chunks are durable but never offered again: only those kept from a
            // verified attempt are.
            return self.skipped;
        }
        (self.chunks.iter().enumerate())
            .filter(|(_, c)| c.flags & DURABLE != 0)
            .map(|(i, _)| self.spec.plan.chunk(i as u64).1)
            .sum()
    }

    /// Its time so far: from its first chunk's arrival, or (none came: every chunk was held
    /// already) from its opening.
    pub(crate) fn seconds(&self, now: Instant) -> f64 {
        let from = self.began.unwrap_or(self.started);
        now.saturating_duration_since(from).as_secs_f64()
    }

    pub(crate) fn plan(&self) -> &ChunkPlan {
        &self.spec.plan
    }

    /// Marks the file failed (the first failure wins).
    pub(crate) fn fail(&mut self, code: ErrorCode, message: String) {
        self.failed.get_or_insert(Refusal::new(code, message));
    }

    /// The failure, if the file failed.
    pub(crate) fn failure(&self) -> Option<&Refusal> {
        self.failed.as_ref()
    }

    /// Whether the sender may answer `Go` now: only a file that was offered for resume
    /// (`FileReady{resumed}`), and only once.
    pub(crate) fn may_go(&self) -> Result<(), Refusal> {
        if self.phase == Phase::AwaitGo {
            Ok(())
        } else {
            Err(Refusal::protocol(format!(
                "Go for file {}, which was not offered for resume or was answered already",
                self.id()
            )))
        }
    }

    /// The sender's answer to the chunks offered for resume: keep them, or start over, which
    /// discards every chunk's state. Returns the bytes kept.
    pub(crate) fn go(&mut self, restart: bool) -> Result<u64, Refusal> {
        self.may_go()?;
        let mut kept = 0;
        if restart {
            self.in_place = false;
            self.chunks.iter_mut().for_each(|c| *c = Chunk::default());
            self.durable = 0;
            self.journal.open = false;
            self.journal.session_recorded = false;
            self.journal.tag = 0;
        } else {
            for (i, p) in std::mem::take(&mut self.offered) {
                let c = &mut self.chunks[i as usize];
                if c.flags & DURABLE == 0 {
                    *c = Chunk {
                        flags: CLAIMED | WRITTEN | HASHED | VERIFIED | DURABLE,
                        mismatches: 0,
                        local: p.mac,
                        cv: p.cv,
                        expected: Some(p.mac),
                    };
                    if i == 0 {
                        self.root = p.root;
                    }
                    self.durable += 1;
                    kept += self.spec.plan.chunk(i).1;
                }
            }
        }
        self.offered.clear();
        self.phase = Phase::Open;
        self.skipped = kept;
        Ok(kept)
    }

    /// The sender's `Progress` while it checks the offered chunks against its source, before
    /// `Go`: `Ok(true)` when it is work being done (the count grows, at a rate any disk keeps
    /// up), `Ok(false)` when it is not (a repeat, a crawl, or no check under way). A count
    /// past the bytes offered is a protocol error.
    pub(crate) fn resume_progress(&mut self, bytes: u64, now: Instant) -> Result<bool, Refusal> {
        if self.phase != Phase::AwaitGo {
            return Ok(false);
        }
        let offered = self.offered_bytes;
        if bytes > offered {
            return Err(Refusal::protocol(format!(
                "Progress of {bytes} bytes checked for file {}, of {offered} offered",
                self.id()
            )));
        }
        let grew = bytes > self.checked;
        self.checked = self.checked.max(bytes);
        let since = now.saturating_duration_since(self.started).as_secs_f64();
        Ok(self.check_counts && grew && bytes as f64 >= since * MIN_CHECK_RATE)
    }

    /// Claims chunk `index` for a stream; refuses a chunk that is already being received or
    /// done, and any before `Go`.
    pub(crate) fn claim(&mut self, index: u64) -> Result<(), Refusal> {
        if self.phase != Phase::Open {
            return Err(Refusal::protocol(format!(
                "chunk {index} of file {} arrived before Go",
                self.id()
            )));
        }
        let c = &mut self.chunks[index as usize];
        if c.flags & CLAIMED != 0 {
            return Err(Refusal::protocol(format!(
                "chunk {index} of file {} was sent twice",
                self.id()
            )));
        }
        c.flags |= CLAIMED;
        Ok(())
    }

    fn check(&mut self, index: u64) -> Outcome {
        let c = &mut self.chunks[index as usize];
        if c.flags & (WRITTEN | HASHED | VERIFIED) != WRITTEN | HASHED {
            return Outcome::Pending;
        }
        match c.expected {
            None => Outcome::Pending,
            Some(want) if want == c.local => {
                c.flags |= VERIFIED;
                Outcome::Verified(index)
            }
            Some(_) => {
                // Forget this attempt entirely: the sender sends the chunk and its MAC again
                // (its bytes no longer count as written).
                let mismatches = c.mismatches.saturating_add(1);
                *c = Chunk {
                    mismatches,
                    ..Chunk::default()
                };
                self.written = self.written.saturating_sub(self.spec.plan.chunk(index).1);
                if mismatches >= MAX_MISMATCHES {
                    Outcome::GiveUp(index)
                } else {
                    Outcome::Mismatch(index)
                }
            }
        }
    }

    /// Records the receiver's proof of chunk `index` (zeros when not verifying).
    pub(crate) fn hashed(&mut self, index: u64, proof: ChunkProof) -> Outcome {
        let c = &mut self.chunks[index as usize];
        c.local = proof.mac;
        c.cv = proof.cv;
        c.flags |= HASHED;
        if !self.verify {
            c.expected = Some(proof.mac);
        }
        if index == 0 {
            self.root = proof.root;
        }
        self.check(index)
    }

    /// Records that chunk `index` is written.
    pub(crate) fn written(&mut self, index: u64) -> Outcome {
        self.written += self.spec.plan.chunk(index).1;
        self.chunks[index as usize].flags |= WRITTEN;
        self.check(index)
    }

    /// Records the sender's MAC of chunk `index`.
    pub(crate) fn expect(&mut self, index: u64, mac: [u8; 32]) -> Result<Outcome, Refusal> {
        if index >= self.spec.plan.count() {
            return Err(Refusal::protocol(format!(
                "MAC for chunk {index}, but file {} has {} chunks",
                self.id(),
                self.spec.plan.count()
            )));
        }
        if !self.verify {
            return Err(Refusal::protocol(format!(
                "MAC for chunk {index} of file {}, which this session does not verify",
                self.id()
            )));
        }
        let c = &mut self.chunks[index as usize];
        if c.expected.is_some() {
            return Err(Refusal::protocol(format!(
                "MAC for chunk {index} of file {} sent twice",
                self.id()
            )));
        }
        c.expected = Some(mac);
        Ok(self.check(index))
    }

    /// The MAC a verified chunk was verified against, and its chaining value (for its
    /// journal record).
    pub(crate) fn proof(&self, index: u64) -> ([u8; 32], [u8; 32]) {
        let c = &self.chunks[index as usize];
        (c.local, c.cv)
    }

    /// The file's plain BLAKE3 (what `b3sum` prints), from the chaining values its chunks
    /// were verified with: the digest reports show. Zeros for a file not verified.
    pub(crate) fn plain_digest(&self) -> [u8; 32] {
        if !self.verify {
            return [0; 32];
        }
        let cvs: Vec<[u8; 32]> = self.chunks.iter().map(|c| c.cv).collect();
        zcp_wire::plain_digest(&cvs, self.root)
    }

    /// Records that verified chunk `index` is durable (synced and journaled).
    pub(crate) fn durable(&mut self, index: u64) {
        let c = &mut self.chunks[index as usize];
        if c.flags & VERIFIED != 0 && c.flags & DURABLE == 0 {
            c.flags |= DURABLE;
            self.durable += 1;
        }
    }

    /// Whether the part file holds chunks worth keeping for a resume: chunks made durable in
    /// this session, or journaled chunks of an earlier one still offered (the session ended
    /// between `FileReady{resumed}` and `Go`). An existing target's chunks are not, offered
    /// or kept: the target itself holds them, and its part file holds nothing.
    pub(crate) fn holds_resumable(&self) -> bool {
        // Without verification only the chunks kept from a verified attempt count: what this
        // session wrote is never journaled, so never resumed.
        let durable = if self.verify {
            self.durable > 0
        } else {
            self.skipped > 0
        };
        !self.in_place && (durable || !self.offered.is_empty())
    }

    /// Records the sender's `FileEnd` digest. Refuses a second one.
    pub(crate) fn end(&mut self, digest: [u8; 32]) -> Result<(), Refusal> {
        match self.end {
            Some(_) => Err(Refusal::protocol(format!(
                "FileEnd for file {} sent twice",
                self.id()
            ))),
            None => {
                self.end = Some(digest);
                Ok(())
            }
        }
    }

    /// Decides the file once it can be decided: after `FileEnd`, with every chunk durable
    /// and the receiver's whole-file digest (over the MACs it verified) equal to the
    /// sender's, it commits; a failure, once `FileEnd` arrived, fails it, and so does a
    /// `FileEnd` of a file of several chunks that arrives before all are acknowledged (a
    /// one-chunk file's `FileEnd` waits for its chunk). Says so only once; every later call
    /// waits.
    pub(crate) fn settle(&mut self, keys: &SessionKeys) -> Settle {
        if self.settled {
            return Settle::Wait;
        }
        let Some(sent) = self.end else {
            return Settle::Wait;
        };
        if let Some(refusal) = self.failed.clone() {
            self.settled = true;
            return Settle::Fail(refusal);
        }
        let count = self.spec.plan.count();
        if self.durable < count {
            if count < 2 {
                // A one-chunk file's FileEnd follows its MAC, not its acknowledgement.
                return Settle::Wait;
            }
            self.settled = true;
            return Settle::Fail(Refusal::protocol(format!(
                "FileEnd with {} of {count} chunks acknowledged",
                self.durable
            )));
        }
        self.settled = true;
        if !self.verify {
            return Settle::Commit([0; 32]);
        }
        let p = &self.spec.plan;
        let mut d = keys.file_digest(self.id(), p.size(), p.chunk_size());
        for c in &self.chunks {
            d.push(&c.local);
        }
        let d = d.finish();
        if d == sent {
            Settle::Commit(d)
        } else {
            Settle::Fail(Refusal::new(
                ErrorCode::Verify,
                "the whole-file digests differ",
            ))
        }
    }
}

#[cfg(test)]
#[path = "chunks_tests.rs"]
mod tests;
