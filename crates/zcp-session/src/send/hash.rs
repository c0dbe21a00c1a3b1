//! The sending role's hash workers: chunk MACs read from the page cache through guarded
//! mappings (a read, not a copy; a sparse source's holes hashed as zeros, never read), and the resume check, which recomputes every chunk the
//! receiver claims to hold under the key of the session that verified it.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use zcp_engine::Usage;
use zcp_engine::sys::thread_usage;
use zcp_wire::{ChunkPlan, ChunkProof, Have, Psk, SessionKeys};

use super::SendEvent;
use crate::transport::Queue;

/// One thing to hash.
#[derive(Debug)]
pub(crate) enum HashJob {
    /// A chunk's MAC under this session's key.
    Chunk {
        file_id: u32,
        file: Arc<File>,
        index: u64,
        offset: u64,
        len: u64,
        cancelled: Arc<AtomicBool>,
    },
    /// The chunks a receiver offered for resume, each under the key of its session; a
    /// keep-alive `every` so long while it runs.
    Resume {
        file_id: u32,
        file: Arc<File>,
        plan: ChunkPlan,
        haves: Vec<Have>,
        every: Duration,
    },
}

/// Hashes jobs from `jobs` until the queue closes; reports each result to `events`.
pub(crate) fn hash_worker(
    jobs: Arc<Queue<HashJob>>,
    events: mpsc::Sender<SendEvent>,
    keys: SessionKeys,
    psk: Psk,
) -> Usage {
    let start = thread_usage();
    while let Some(job) = jobs.pop() {
        let ev = match job {
            HashJob::Chunk {
                file_id,
                file,
                index,
                offset,
                len,
                cancelled,
            } => {
                if cancelled.load(Ordering::Relaxed) {
                    continue;
                }
                let mut h = keys.chunk_hasher(file_id, offset, len);
                match zcp_engine::sparse::visit(&*file, offset, len, |b| {
                    h.update(b);
                }) {
                    Ok(()) => SendEvent::Hashed {
                        file: file_id,
                        index,
                        proof: h.finalize(),
                    },
                    Err(e) => SendEvent::SourceFailed {
                        file: file_id,
                        why: e.to_string(),
                    },
                }
            }
            HashJob::Resume {
                file_id,
                file,
                plan,
                haves,
                every,
            } => {
                let mut told = Instant::now();
                let mut tell = |bytes| {
                    if told.elapsed() >= every {
                        told = Instant::now();
                        let _ = events.send(SendEvent::ResumeProgress {
                            file: file_id,
                            bytes,
                        });
                    }
                };
                SendEvent::ResumeChecked {
                    file: file_id,
                    kept: check_resume(&file, &plan, &haves, &psk, &mut tell),
                }
            }
        };
        if events.send(ev).is_err() {
            break;
        }
    }
    thread_usage().since(&start)
}

/// Recomputes every chunk the receiver claims to hold, under the key of the session that
/// verified it, over the source as it is now. All equal: those chunks need not be sent, and
/// their proofs (that session's MAC, the source's chaining value) are returned.
/// `checked` hears the bytes checked so far after each chunk (a large file takes a while, and
/// the receiver waits for the answer).
pub(crate) fn check_resume(
    file: &File,
    plan: &ChunkPlan,
    haves: &[Have],
    psk: &Psk,
    checked: &mut dyn FnMut(u64),
) -> Option<Vec<(u64, ChunkProof)>> {
    let mut kept = Vec::new();
    let mut bytes = 0;
    for h in haves {
        let old = SessionKeys::derive(psk, &h.client_nonce, &h.server_nonce);
        for (index, mac) in &h.entries {
            if *index >= plan.count() {
                return None;
            }
            let (offset, len) = plan.chunk(*index);
            let mut hasher = old.chunk_hasher(h.old_file_id, offset, len);
            zcp_engine::sparse::visit(file, offset, len, |b| {
                hasher.update(b);
            })
            .ok()?;
            let proof = hasher.finalize();
            if proof.mac != *mac {
                return None;
            }
            kept.push((*index, proof));
            bytes += len;
            checked(bytes);
        }
    }
    Some(kept)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// A source of `chunks` 64 KiB chunks and the `Have` a receiver holding all of them
    /// (verified in session `(n1, n2)` as file 3) would send.
    fn source_and_have(psk: &Psk, chunks: u64) -> (Arc<File>, ChunkPlan, Have) {
        let mut f = tempfile::tempfile().unwrap();
        let body: Vec<u8> = (0..chunks * 65536).map(|i| (i % 251) as u8).collect();
        f.write_all(&body).unwrap();
        let plan = ChunkPlan::new(body.len() as u64, 65536).unwrap();
        let (n1, n2) = ([1u8; 32], [2u8; 32]);
        let old = SessionKeys::derive(psk, &n1, &n2);
        let entries = (0..chunks)
            .map(|i| {
                let (off, len) = plan.chunk(i);
                let mut h = old.chunk_hasher(3, off, len);
                h.update(&body[off as usize..(off + len) as usize]);
                (i, *h.finalize().as_bytes())
            })
            .collect();
        let have = Have {
            file_id: 0,
            client_nonce: n1,
            server_nonce: n2,
            old_file_id: 3,
            entries,
        };
        (Arc::new(f), plan, have)
    }

    #[test]
    fn a_resume_check_says_it_is_alive_while_it_runs() {
        let psk = Psk::from_bytes([5; 32]);
        let (file, plan, have) = source_and_have(&psk, 8);
        let jobs = Queue::new();
        jobs.push(HashJob::Resume {
            file_id: 0,
            file,
            plan,
            haves: vec![have],
            every: Duration::ZERO,
        });
        jobs.close();
        let (tx, rx) = mpsc::channel();
        let keys = SessionKeys::derive(&psk, &[7; 32], &[8; 32]);
        hash_worker(jobs, tx, keys, psk);
        let mut told = Vec::new();
        let mut kept = None;
        for ev in rx.try_iter() {
            match ev {
                SendEvent::ResumeProgress { file: 0, bytes } => told.push(bytes),
                SendEvent::ResumeChecked { file: 0, kept: k } => kept = Some(k),
                _ => panic!("unexpected event"),
            }
        }
        let want: Vec<u64> = (1..=8).map(|i| i * 65536).collect();
        assert_eq!(told, want, "a keep-alive after every chunk checked");
        assert_eq!(kept.unwrap().map(|k| k.len()), Some(8), "every chunk kept");
    }
}
