//! One file being received: where it goes, which engine writes it, and where each of its
//! chunks stands.
//!
//! Data-stream threads, engine helper threads, the journal thread and the session's control
//! thread share an [`Incoming`] through an `Arc`. A chunk is *verified* when its bytes are
//! written (the engine's completion fired), its MAC over what was written is known, and the
//! sender's MAC for it has arrived and is equal; it is *durable* once the journal thread has
//! synced the data and recorded it. A mismatch resets the chunk so the sender can send it
//! again. The control thread commits the file only when every chunk is durable and the
//! whole-file digests agree: the verified ranges then cover exactly `[0, size)`, because the
//! plan admits each chunk once, at one offset, with one length.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};
use zcp_engine::sync::Locked;

use zcp_engine::RecvEngine;
use zcp_engine::fs::PartFile;
use zcp_engine::recv::{Target, WriteFailure};
use zcp_wire::{ChunkPlan, ErrorCode, SessionKeys};

/// Most chunks one file may have; bounds the receiver's per-file bookkeeping (about 70 bytes
/// a chunk). With the largest chunk size (1 GiB) that is a 256 TiB file.
pub(crate) const MAX_CHUNKS: u64 = 1 << 18;

/// Most chunks the open files of one session may have together (files announced and not yet
/// committed or failed): bounds the bookkeeping of both roles per session (about 35 MiB on a
/// receiver, 17 MiB on a sender) whatever the files and chunk sizes. A sender announces a
/// file only while the open ones leave room for it; a receiver refuses a file past it.
pub(crate) const MAX_SESSION_CHUNKS: u64 = 1 << 19;

const CLAIMED: u8 = 1;
const WRITTEN: u8 = 2;
const HASHED: u8 = 4;
const VERIFIED: u8 = 8;
const DURABLE: u8 = 16;

#[derive(Debug, Clone, Copy, Default)]
struct Chunk {
    flags: u8,
    local: [u8; 32],
    expected: Option<[u8; 32]>,
}

/// Where a file stands as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Resumable chunks were offered; no data until the sender says `Go`.
    AwaitGo,
    /// Receiving.
    Open,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    chunks: Vec<Chunk>,
    /// Chunks held from an earlier session, offered in `Have`, until `Go`.
    offered: Vec<(u64, [u8; 32])>,
    durable: u64,
    failed: Option<(ErrorCode, String)>,
    /// The sender's whole-file digest, once `FileEnd` arrived.
    end: Option<[u8; 32]>,
    /// Handed to the committer (or failed): nothing more to decide.
    settled: bool,
}

/// Whether a file can be settled now (see [`Incoming::settle`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Settle {
    /// Not yet: chunks outstanding, or no `FileEnd` yet.
    Wait,
    /// Every chunk durable and the digests agree: commit with this digest.
    Commit([u8; 32]),
    /// The file failed: tell the sender.
    Fail(ErrorCode, String),
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
}

/// The journal's state for one file, guarded with its part file.
#[derive(Debug)]
pub(crate) struct Store {
    pub(crate) part: PartFile,
    /// Whether the file keeps a journal at all (files of one chunk do not: there is nothing
    /// to resume).
    pub(crate) journaled: bool,
    /// Whether the journal file exists with its header.
    pub(crate) journal_open: bool,
    /// Whether this session's record is in it yet.
    pub(crate) session_recorded: bool,
    /// This session's tag in the journal.
    pub(crate) tag: u16,
}

/// A file being received.
#[derive(Debug)]
pub(crate) struct Incoming {
    pub(crate) id: u32,
    pub(crate) plan: ChunkPlan,
    pub(crate) engine: RecvEngine,
    pub(crate) verify: bool,
    pub(crate) mode: u32,
    pub(crate) mtime: (i64, u32),
    /// Final name inside the part file's directory.
    pub(crate) name: Vec<u8>,
    /// Final path relative to the root, for display.
    pub(crate) target: String,
    /// The part file and its journal, for storing engines; taken by the commit.
    pub(crate) store: Mutex<Option<Store>>,
    /// Where the engines write.
    pub(crate) target_fds: Option<Target>,
    /// Bytes written so far.
    pub(crate) written: AtomicU64,
    /// Bytes held from an earlier attempt.
    pub(crate) skipped: AtomicU64,
    /// The chunks offered are the existing target's: if the sender keeps them all, the
    /// target itself is kept. Cleared when the sender restarts the file.
    pub(crate) in_place: AtomicBool,
    pub(crate) started: Instant,
    state: Mutex<State>,
    changed: Condvar,
}

impl Incoming {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: u32,
        plan: ChunkPlan,
        engine: RecvEngine,
        mode: u32,
        mtime: (i64, u32),
        name: Vec<u8>,
        target: String,
        store: Option<Store>,
        target_fds: Option<Target>,
        offered: Vec<(u64, [u8; 32])>,
    ) -> Incoming {
        let count = plan.count() as usize;
        Incoming {
            id,
            plan,
            verify: engine != RecvEngine::Null,
            engine,
            mode,
            mtime,
            name,
            target,
            store: Mutex::new(store),
            target_fds,
            written: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            in_place: AtomicBool::new(false),
            started: Instant::now(),
            state: Mutex::new(State {
                phase: if offered.is_empty() {
                    Phase::Open
                } else {
                    Phase::AwaitGo
                },
                chunks: vec![Chunk::default(); count],
                offered,
                durable: 0,
                failed: None,
                end: None,
                settled: false,
            }),
            changed: Condvar::new(),
        }
    }

    fn update<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut st = self.state.locked();
        let out = f(&mut st);
        self.changed.notify_all();
        out
    }

    /// Marks the file failed (the first failure wins).
    pub(crate) fn fail(&self, code: ErrorCode, message: String) {
        self.update(|st| {
            st.failed.get_or_insert((code, message));
        });
    }

    /// Whether the sender may answer `Go` now: only a file that was offered for resume
    /// (`FileReady{resumed}`), and only once.
    pub(crate) fn may_go(&self) -> Result<(), String> {
        let st = self.state.locked();
        if st.phase == Phase::AwaitGo {
            Ok(())
        } else {
            Err(format!(
                "Go for file {}, which was not offered for resume or was answered already",
                self.id
            ))
        }
    }

    /// The sender's answer to the chunks offered for resume: keep them, or start over, which
    /// discards every chunk's state. Returns the bytes kept. Check [`Incoming::may_go`] first.
    pub(crate) fn go(&self, restart: bool) -> Result<u64, String> {
        self.may_go()?;
        Ok(self.update(|st| {
            let mut kept = 0;
            if restart {
                self.in_place.store(false, Ordering::Relaxed);
                st.chunks.iter_mut().for_each(|c| *c = Chunk::default());
                st.durable = 0;
            } else {
                for (i, mac) in std::mem::take(&mut st.offered) {
                    let c = &mut st.chunks[i as usize];
                    if c.flags & DURABLE == 0 {
                        *c = Chunk {
                            flags: CLAIMED | WRITTEN | HASHED | VERIFIED | DURABLE,
                            local: mac,
                            expected: Some(mac),
                        };
                        st.durable += 1;
                        kept += self.plan.chunk(i).1;
                    }
                }
            }
            st.offered.clear();
            st.phase = Phase::Open;
            kept
        }))
    }

    /// Waits until the file may receive data (after `Go`), up to `timeout`.
    pub(crate) fn wait_open(&self, timeout: Duration) -> Result<(), String> {
        let st = self.state.locked();
        let (st, _) = self
            .changed
            .wait_timeout_while(st, timeout, |st| {
                st.phase == Phase::AwaitGo && st.failed.is_none()
            })
            .unwrap_or_else(|p| p.into_inner());
        match (&st.failed, st.phase) {
            (Some((_, m)), _) => Err(m.clone()),
            (None, Phase::Open) => Ok(()),
            (None, Phase::AwaitGo) => Err(format!("no Go for file {} within {timeout:?}", self.id)),
        }
    }

    /// Claims chunk `index` for a stream; refuses a chunk that is already being received or
    /// done.
    pub(crate) fn claim(&self, index: u64) -> Result<(), String> {
        self.update(|st| {
            if st.phase != Phase::Open {
                return Err(format!(
                    "chunk {index} of file {} arrived before Go",
                    self.id
                ));
            }
            let c = &mut st.chunks[index as usize];
            if c.flags & CLAIMED != 0 {
                return Err(format!("chunk {index} of file {} was sent twice", self.id));
            }
            c.flags |= CLAIMED;
            Ok(())
        })
    }

    fn check(&self, st: &mut State, index: u64) -> Outcome {
        let c = &mut st.chunks[index as usize];
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
                // Forget this attempt entirely: the sender sends the chunk and its MAC again.
                *c = Chunk::default();
                Outcome::Mismatch(index)
            }
        }
    }

    /// Records the receiver's MAC of chunk `index` (zeros when not verifying).
    pub(crate) fn hashed(&self, index: u64, mac: [u8; 32]) -> Outcome {
        let mut st = self.state.locked();
        st.chunks[index as usize].local = mac;
        st.chunks[index as usize].flags |= HASHED;
        if !self.verify {
            st.chunks[index as usize].expected = Some(mac);
        }
        let out = self.check(&mut st, index);
        self.changed.notify_all();
        out
    }

    /// Records that chunk `index` is written (or failed to be).
    pub(crate) fn written(&self, index: u64, result: Result<(), WriteFailure>) -> Outcome {
        match result {
            Ok(()) => {
                self.written
                    .fetch_add(self.plan.chunk(index).1, Ordering::Relaxed);
                let mut st = self.state.locked();
                st.chunks[index as usize].flags |= WRITTEN;
                let out = self.check(&mut st, index);
                self.changed.notify_all();
                out
            }
            Err(f) => {
                let code = if f.no_space {
                    ErrorCode::NoSpace
                } else {
                    ErrorCode::Io
                };
                self.fail(code, f.message);
                Outcome::Pending
            }
        }
    }

    /// Records the sender's MAC of chunk `index`.
    pub(crate) fn expect(&self, index: u64, mac: [u8; 32]) -> Result<Outcome, String> {
        if index >= self.plan.count() {
            return Err(format!(
                "MAC for chunk {index}, but file {} has {} chunks",
                self.id,
                self.plan.count()
            ));
        }
        let mut st = self.state.locked();
        let c = &mut st.chunks[index as usize];
        if c.expected.is_some() {
            return Err(format!(
                "MAC for chunk {index} of file {} sent twice",
                self.id
            ));
        }
        c.expected = Some(mac);
        let out = self.check(&mut st, index);
        self.changed.notify_all();
        Ok(out)
    }

    /// The MAC a verified chunk was verified against (for its journal record).
    pub(crate) fn mac(&self, index: u64) -> [u8; 32] {
        self.state.locked().chunks[index as usize].local
    }

    /// Records that verified chunk `index` is durable (synced and journaled).
    pub(crate) fn durable(&self, index: u64) {
        self.update(|st| {
            let c = &mut st.chunks[index as usize];
            if c.flags & VERIFIED != 0 && c.flags & DURABLE == 0 {
                c.flags |= DURABLE;
                st.durable += 1;
            }
        });
    }

    /// Whether the part file holds chunks worth keeping for a resume: chunks made durable in
    /// this session, or journaled chunks of an earlier one still offered (the session ended
    /// between `FileReady{resumed}` and `Go`). An existing target's chunks are not: the target
    /// itself holds them.
    pub(crate) fn holds_resumable(&self) -> bool {
        let st = self.state.locked();
        st.durable > 0 || (!st.offered.is_empty() && !self.in_place.load(Ordering::Relaxed))
    }

    /// Records the sender's `FileEnd` digest. Refuses a second one.
    pub(crate) fn end(&self, digest: [u8; 32]) -> Result<(), String> {
        self.update(|st| match st.end {
            Some(_) => Err(format!("FileEnd for file {} sent twice", self.id)),
            None => {
                st.end = Some(digest);
                Ok(())
            }
        })
    }

    /// Decides the file once it can be decided: after `FileEnd`, with every chunk durable
    /// and the receiver's whole-file digest (over the MACs it verified) equal to the
    /// sender's, it commits; a failure, once `FileEnd` arrived, fails it, and so does a
    /// `FileEnd` of a file of several chunks that arrives before all are acknowledged (a
    /// one-chunk file's `FileEnd` waits for its chunk). Says so only once; every later call
    /// waits.
    pub(crate) fn settle(&self, keys: &SessionKeys) -> Settle {
        let mut st = self.state.locked();
        if st.settled {
            return Settle::Wait;
        }
        let Some(sent) = st.end else {
            return Settle::Wait;
        };
        if let Some((code, message)) = st.failed.clone() {
            st.settled = true;
            return Settle::Fail(code, message);
        }
        if st.durable < self.plan.count() {
            if self.plan.count() < 2 {
                // A one-chunk file's FileEnd follows its MAC, not its acknowledgement.
                return Settle::Wait;
            }
            st.settled = true;
            return Settle::Fail(
                ErrorCode::Protocol,
                format!(
                    "FileEnd with {} of {} chunks acknowledged",
                    st.durable,
                    self.plan.count()
                ),
            );
        }
        st.settled = true;
        if !self.verify {
            return Settle::Commit([0; 32]);
        }
        let mut d = keys.file_digest(self.id, self.plan.size(), self.plan.chunk_size());
        for c in &st.chunks {
            d.push(&c.local);
        }
        let d = d.finish();
        if d == sent {
            Settle::Commit(d)
        } else {
            Settle::Fail(ErrorCode::Verify, "the whole-file digests differ".into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incoming(size: u64, engine: RecvEngine, offered: Vec<(u64, [u8; 32])>) -> Incoming {
        let plan = ChunkPlan::new(size, 64 * 1024).unwrap();
        Incoming::new(
            0,
            plan,
            engine,
            0o644,
            (0, 0),
            b"f".to_vec(),
            "f".into(),
            None,
            None,
            offered,
        )
    }

    fn keys() -> SessionKeys {
        let mut k = [1u8; 32];
        k[0] = 2;
        SessionKeys::derive(&zcp_wire::Psk::from_bytes(k), &[1; 32], &[2; 32])
    }

    #[test]
    fn verified_only_when_written_hashed_and_expected_match() {
        let f = incoming(100_000, RecvEngine::Direct, vec![]);
        f.claim(0).unwrap();
        assert_eq!(f.expect(0, [7; 32]), Ok(Outcome::Pending));
        assert_eq!(f.hashed(0, [7; 32]), Outcome::Pending);
        assert_eq!(f.written(0, Ok(())), Outcome::Verified(0));
        f.durable(0);
        // The other order: written, hashed, then the sender's MAC.
        f.claim(1).unwrap();
        assert_eq!(f.written(1, Ok(())), Outcome::Pending);
        assert_eq!(f.hashed(1, [8; 32]), Outcome::Pending);
        assert_eq!(f.expect(1, [8; 32]), Ok(Outcome::Verified(1)));
        let want = digest_of(&f, &[[7; 32], [8; 32]]);
        f.durable(1);
        assert_eq!(f.settle(&keys()), Settle::Wait, "no FileEnd yet");
        f.end(want).unwrap();
        assert!(f.end(want).is_err(), "one FileEnd per file");
        assert_eq!(f.settle(&keys()), Settle::Commit(want));
        assert_eq!(f.settle(&keys()), Settle::Wait, "decided once");
    }

    #[test]
    fn an_end_before_every_chunk_is_acknowledged_fails_a_file_of_several_chunks() {
        let f = incoming(100_000, RecvEngine::ReadWrite, vec![]);
        f.claim(0).unwrap();
        f.written(0, Ok(()));
        f.hashed(0, [7; 32]);
        assert_eq!(f.expect(0, [7; 32]), Ok(Outcome::Verified(0)));
        f.durable(0);
        f.end(digest_of(&f, &[[7; 32], [8; 32]])).unwrap();
        assert!(matches!(
            f.settle(&keys()),
            Settle::Fail(ErrorCode::Protocol, m) if m.contains("1 of 2")
        ));
        assert_eq!(f.settle(&keys()), Settle::Wait, "decided once");
    }

    /// The digest the sender would send for `f` with these chunk MACs.
    fn digest_of(f: &Incoming, macs: &[[u8; 32]]) -> [u8; 32] {
        let mut d = keys().file_digest(f.id, f.plan.size(), f.plan.chunk_size());
        for m in macs {
            d.push(m);
        }
        d.finish()
    }

    #[test]
    fn a_digest_that_differs_fails_and_an_early_end_waits_for_the_chunk() {
        let f = incoming(1000, RecvEngine::ReadWrite, vec![]);
        // One chunk: FileEnd may come before the chunk is verified.
        f.end(digest_of(&f, &[[5; 32]])).unwrap();
        f.claim(0).unwrap();
        assert_eq!(f.expect(0, [5; 32]), Ok(Outcome::Pending));
        assert_eq!(f.settle(&keys()), Settle::Wait);
        f.written(0, Ok(()));
        assert_eq!(f.hashed(0, [5; 32]), Outcome::Verified(0));
        f.durable(0);
        assert!(matches!(f.settle(&keys()), Settle::Commit(_)));

        let f = incoming(1000, RecvEngine::ReadWrite, vec![]);
        f.end(digest_of(&f, &[[6; 32]])).unwrap();
        f.claim(0).unwrap();
        f.written(0, Ok(()));
        f.hashed(0, [5; 32]);
        assert_eq!(f.expect(0, [5; 32]), Ok(Outcome::Verified(0)));
        f.durable(0);
        assert!(matches!(
            f.settle(&keys()),
            Settle::Fail(ErrorCode::Verify, _)
        ));
    }

    #[test]
    fn a_mismatch_resets_the_chunk_for_a_resend() {
        let f = incoming(100_000, RecvEngine::Splice, vec![]);
        f.claim(0).unwrap();
        f.written(0, Ok(()));
        f.hashed(0, [1; 32]);
        assert_eq!(f.expect(0, [2; 32]), Ok(Outcome::Mismatch(0)));
        // Claimable again, with a fresh MAC expected.
        f.claim(0).unwrap();
        f.written(0, Ok(()));
        f.hashed(0, [2; 32]);
        assert_eq!(f.expect(0, [2; 32]), Ok(Outcome::Verified(0)));
        assert!(f.claim(0).is_err(), "a verified chunk is not sent twice");
        assert!(f.expect(5, [0; 32]).is_err());
    }

    #[test]
    fn resumed_chunks_wait_for_go() {
        let f = incoming(
            200_000,
            RecvEngine::Direct,
            vec![(0, [3; 32]), (1, [4; 32])],
        );
        assert!(f.claim(2).is_err(), "no data before Go");
        assert!(f.wait_open(Duration::from_millis(1)).is_err());
        assert!(f.holds_resumable(), "offered chunks are kept until Go");
        assert_eq!(f.go(false), Ok(2 * 65536));
        assert!(f.go(false).is_err(), "one Go per file");
        f.wait_open(Duration::from_millis(1)).unwrap();
        assert!(f.claim(0).is_err(), "kept chunks are done");
        for i in 2..4 {
            f.claim(i).unwrap();
            f.written(i, Ok(()));
            f.hashed(i, [9; 32]);
            assert_eq!(f.expect(i, [9; 32]), Ok(Outcome::Verified(i)));
            f.durable(i);
        }
        f.end(digest_of(&f, &[[3; 32], [4; 32], [9; 32], [9; 32]]))
            .unwrap();
        assert!(matches!(f.settle(&keys()), Settle::Commit(_)));

        let f = incoming(200_000, RecvEngine::Direct, vec![(0, [3; 32])]);
        assert_eq!(f.go(true), Ok(0));
        assert!(!f.holds_resumable(), "a restart keeps nothing");
        f.claim(0).unwrap();
    }

    #[test]
    fn go_for_a_file_that_was_not_offered_is_refused() {
        // The attack: chunks verified and durable, then Go{restart} empties the part file;
        // had the chunks stayed durable, an all-zero file would commit as verified.
        let f = incoming(200_000, RecvEngine::ReadWrite, vec![]);
        f.claim(0).unwrap();
        f.written(0, Ok(()));
        f.hashed(0, [9; 32]);
        assert_eq!(f.expect(0, [9; 32]), Ok(Outcome::Verified(0)));
        f.durable(0);
        assert!(f.may_go().is_err());
        let e = f.go(true).unwrap_err();
        assert!(e.contains("not offered"), "{e}");
        assert!(f.holds_resumable(), "the durable chunk is untouched");
        assert!(f.claim(0).is_err(), "and still done");
    }

    #[test]
    fn write_failures_and_empty_files() {
        let f = incoming(1000, RecvEngine::Direct, vec![]);
        f.written(
            0,
            Err(WriteFailure {
                no_space: true,
                message: "full".into(),
            }),
        );
        assert_eq!(
            f.settle(&keys()),
            Settle::Wait,
            "failed, but no FileEnd yet"
        );
        f.end([0; 32]).unwrap();
        assert!(matches!(
            f.settle(&keys()),
            Settle::Fail(ErrorCode::NoSpace, _)
        ));
        let f = incoming(0, RecvEngine::Direct, vec![]);
        f.end(digest_of(&f, &[])).unwrap();
        assert!(matches!(f.settle(&keys()), Settle::Commit(_)));
    }
}
