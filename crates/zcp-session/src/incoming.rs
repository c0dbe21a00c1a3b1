//! One file being received: where it goes, which engine writes it, and which of its chunks
//! have arrived, been written, and been verified.
//!
//! Data-stream threads and the session's control thread share an [`Incoming`] through an
//! `Arc`. A chunk is *done* when its bytes are written (the engine's completion fired) and its
//! MAC is known (hashed in the engine's buffer, or from the page cache after a splice). The
//! control thread commits the file only when every chunk is done, every MAC matches the
//! sender's, and the whole-file digests agree: the verified ranges then cover exactly
//! `[0, size)`, because the plan admits each chunk once, at one offset, with one length.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use zcp_engine::RecvEngine;
use zcp_engine::fs::TempFile;
use zcp_wire::{ChunkPlan, ErrorCode, SessionKeys};

/// Most chunks one file may have; bounds the receiver's per-file bookkeeping (about 70 bytes
/// a chunk). With the largest chunk size (1 GiB) that is a 256 TiB file.
pub(crate) const MAX_CHUNKS: u64 = 1 << 18;

const CLAIMED: u8 = 1;
const WRITTEN: u8 = 2;
const HASHED: u8 = 4;

#[derive(Debug, Clone, Copy, Default)]
struct Chunk {
    flags: u8,
    local: [u8; 32],
    expected: Option<[u8; 32]>,
}

#[derive(Debug, Default)]
struct State {
    chunks: Vec<Chunk>,
    done: u64,
    failed: Option<(ErrorCode, String)>,
}

/// A file being received.
#[derive(Debug)]
pub(crate) struct Incoming {
    pub(crate) id: u32,
    pub(crate) plan: ChunkPlan,
    pub(crate) engine: RecvEngine,
    pub(crate) block: u64,
    pub(crate) verify: bool,
    /// Mode and mtime to set at commit.
    pub(crate) mode: u32,
    pub(crate) mtime: (i64, u32),
    /// Final name inside `temp`'s directory.
    pub(crate) name: Vec<u8>,
    /// Final path relative to the root, for display.
    pub(crate) target: String,
    /// The temporary file, for storing engines; taken by the commit.
    pub(crate) temp: Mutex<Option<TempFile>>,
    /// The temporary file's descriptor for streams and hashing (a dup, so it outlives `temp`).
    pub(crate) fd: Option<std::os::fd::OwnedFd>,
    /// The O_DIRECT descriptor, for `direct`.
    pub(crate) direct: Option<std::os::fd::OwnedFd>,
    /// Bytes written so far.
    pub(crate) written: AtomicU64,
    pub(crate) started: Instant,
    state: Mutex<State>,
    changed: Condvar,
}

/// How waiting for a file's chunks ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Every chunk is done.
    Complete,
    /// The file failed.
    Failed(ErrorCode, String),
    /// The timeout passed first; ask again.
    Pending,
}

impl Incoming {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: u32,
        plan: ChunkPlan,
        engine: RecvEngine,
        block: u64,
        mode: u32,
        mtime: (i64, u32),
        name: Vec<u8>,
        target: String,
        temp: Option<TempFile>,
        fd: Option<std::os::fd::OwnedFd>,
        direct: Option<std::os::fd::OwnedFd>,
    ) -> Incoming {
        let count = plan.count() as usize;
        Incoming {
            id,
            plan,
            verify: engine != RecvEngine::Null,
            engine,
            block,
            mode,
            mtime,
            name,
            target,
            temp: Mutex::new(temp),
            fd,
            direct,
            written: AtomicU64::new(0),
            started: Instant::now(),
            state: Mutex::new(State {
                chunks: vec![Chunk::default(); count],
                ..State::default()
            }),
            changed: Condvar::new(),
        }
    }

    fn update<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
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

    /// Claims chunk `index` for a stream; refuses a chunk that was already sent.
    pub(crate) fn claim(&self, index: u64) -> Result<(), String> {
        self.update(|st| {
            let c = &mut st.chunks[index as usize];
            if c.flags & CLAIMED != 0 {
                return Err(format!("chunk {index} of file {} was sent twice", self.id));
            }
            c.flags |= CLAIMED;
            Ok(())
        })
    }

    /// Records the receiver's MAC of chunk `index` (zeros when not verifying).
    pub(crate) fn hashed(&self, index: u64, mac: [u8; 32]) {
        self.update(|st| {
            st.chunks[index as usize].local = mac;
            Self::mark(st, index, HASHED, self.id);
        });
    }

    /// Records that chunk `index` is written (or failed to be).
    pub(crate) fn written(&self, index: u64, result: Result<(), zcp_engine::recv::WriteFailure>) {
        match result {
            Ok(()) => {
                let (_, len) = self.plan.chunk(index);
                self.written.fetch_add(len, Ordering::Relaxed);
                self.update(|st| Self::mark(st, index, WRITTEN, self.id));
            }
            Err(f) => {
                let code = if f.no_space {
                    ErrorCode::NoSpace
                } else {
                    ErrorCode::Io
                };
                self.fail(code, f.message);
            }
        }
    }

    fn mark(st: &mut State, index: u64, flag: u8, id: u32) {
        let c = &mut st.chunks[index as usize];
        c.flags |= flag;
        if c.flags & (WRITTEN | HASHED) == WRITTEN | HASHED {
            st.done += 1;
            if let Some(want) = c.expected {
                if want != c.local {
                    let msg = mismatch(id, index);
                    st.failed.get_or_insert((ErrorCode::Verify, msg));
                }
            }
        }
    }

    /// Records the sender's MAC of chunk `index`.
    pub(crate) fn expect(&self, index: u64, mac: [u8; 32]) -> Result<(), String> {
        if index >= self.plan.count() {
            return Err(format!(
                "MAC for chunk {index}, but file {} has {} chunks",
                self.id,
                self.plan.count()
            ));
        }
        self.update(|st| {
            let c = &mut st.chunks[index as usize];
            if c.expected.is_some() {
                return Err(format!(
                    "MAC for chunk {index} of file {} sent twice",
                    self.id
                ));
            }
            c.expected = Some(mac);
            if c.flags & (WRITTEN | HASHED) == WRITTEN | HASHED && mac != c.local {
                let msg = mismatch(self.id, index);
                st.failed.get_or_insert((ErrorCode::Verify, msg));
            }
            Ok(())
        })
    }

    /// Waits up to `timeout` for every chunk to be done or the file to fail.
    pub(crate) fn wait(&self, timeout: Duration) -> Wait {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let (st, _) = self
            .changed
            .wait_timeout_while(st, timeout, |st| {
                st.failed.is_none() && st.done < st.chunks.len() as u64
            })
            .unwrap_or_else(|p| p.into_inner());
        if let Some((code, msg)) = &st.failed {
            return Wait::Failed(*code, msg.clone());
        }
        if st.done == st.chunks.len() as u64 {
            Wait::Complete
        } else {
            Wait::Pending
        }
    }

    /// After [`Wait::Complete`]: checks that every chunk's MAC was sent and matched, and
    /// returns the receiver's whole-file digest.
    pub(crate) fn digest(&self, keys: &SessionKeys) -> Result<[u8; 32], String> {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut d = keys.file_digest(self.id, self.plan.size(), self.plan.chunk_size());
        for (i, c) in st.chunks.iter().enumerate() {
            match c.expected {
                None => return Err(format!("the sender sent no MAC for chunk {i}")),
                Some(want) if want != c.local => return Err(mismatch(self.id, i as u64)),
                Some(_) => d.push(&c.local),
            }
        }
        Ok(d.finish())
    }
}

fn mismatch(id: u32, index: u64) -> String {
    format!(
        "chunk {index} of file {id} does not match what the sender read (corrupted in transit or source changed)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn incoming(size: u64, engine: RecvEngine) -> Incoming {
        let plan = ChunkPlan::new(size, 64 * 1024).unwrap();
        Incoming::new(
            0,
            plan,
            engine,
            0,
            0o644,
            (0, 0),
            b"f".to_vec(),
            "f".into(),
            None,
            None,
            None,
        )
    }

    fn keys() -> SessionKeys {
        let mut k = [1u8; 32];
        k[0] = 2;
        SessionKeys::derive(&zcp_wire::Psk::from_bytes(k), &[1; 32], &[2; 32])
    }

    #[test]
    fn completes_only_when_written_and_hashed() {
        let f = incoming(100_000, RecvEngine::Direct);
        for i in 0..2 {
            f.claim(i).unwrap();
            f.expect(i, [i as u8; 32]).unwrap();
            f.hashed(i, [i as u8; 32]);
        }
        assert_eq!(f.wait(Duration::from_millis(1)), Wait::Pending);
        f.written(0, Ok(()));
        assert_eq!(f.wait(Duration::from_millis(1)), Wait::Pending);
        f.written(1, Ok(()));
        assert_eq!(f.wait(Duration::from_millis(1)), Wait::Complete);
        assert!(f.digest(&keys()).is_ok());
        assert_eq!(f.written.load(Ordering::Relaxed), 100_000);
    }

    #[test]
    fn duplicates_mismatches_and_missing_macs_never_commit() {
        let f = incoming(100_000, RecvEngine::Splice);
        f.claim(0).unwrap();
        assert!(f.claim(0).is_err());
        f.expect(0, [9; 32]).unwrap();
        assert!(f.expect(0, [9; 32]).is_err());
        assert!(f.expect(5, [9; 32]).is_err());
        f.hashed(0, [8; 32]);
        f.written(0, Ok(()));
        assert!(matches!(
            f.wait(Duration::from_millis(1)),
            Wait::Failed(ErrorCode::Verify, _)
        ));

        let f = incoming(1000, RecvEngine::Splice);
        f.claim(0).unwrap();
        f.hashed(0, [1; 32]);
        f.written(0, Ok(()));
        assert_eq!(f.wait(Duration::from_millis(1)), Wait::Complete);
        assert!(f.digest(&keys()).unwrap_err().contains("no MAC"));
    }

    #[test]
    fn a_write_failure_fails_the_file() {
        let f = incoming(1000, RecvEngine::Direct);
        f.written(
            0,
            Err(zcp_engine::recv::WriteFailure {
                no_space: true,
                message: "full".into(),
            }),
        );
        assert!(matches!(
            f.wait(Duration::from_millis(1)),
            Wait::Failed(ErrorCode::NoSpace, _)
        ));
    }

    #[test]
    fn empty_file_is_complete_at_once() {
        let f = incoming(0, RecvEngine::Direct);
        assert_eq!(f.wait(Duration::from_millis(1)), Wait::Complete);
        assert!(f.digest(&keys()).is_ok());
    }
}
