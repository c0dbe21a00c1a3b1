//! The sending role's hash workers: chunk MACs read from the page cache through guarded
//! mappings (a read, not a copy), and the resume check, which recomputes every chunk the
//! receiver claims to hold under the key of the session that verified it.

use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use zcp_engine::Usage;
use zcp_engine::sys::thread_usage;
use zcp_wire::{ChunkPlan, Have, Psk, SessionKeys};

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
    /// The chunks a receiver offered for resume, each under the key of its session.
    Resume {
        file_id: u32,
        file: Arc<File>,
        plan: ChunkPlan,
        haves: Vec<Have>,
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
                match zcp_engine::map::visit_mapped(&*file, offset, len, |b| {
                    h.update(b);
                }) {
                    Ok(()) => SendEvent::Hashed {
                        file: file_id,
                        index,
                        mac: *h.finalize().as_bytes(),
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
            } => SendEvent::ResumeChecked {
                file: file_id,
                kept: check_resume(&file, &plan, &haves, &psk),
            },
        };
        if events.send(ev).is_err() {
            break;
        }
    }
    thread_usage().since(&start)
}

/// Recomputes every chunk the receiver claims to hold, under the key of the session that
/// verified it, over the source as it is now. All equal: those chunks need not be sent.
pub(crate) fn check_resume(
    file: &File,
    plan: &ChunkPlan,
    haves: &[Have],
    psk: &Psk,
) -> Option<Vec<(u64, [u8; 32])>> {
    let mut kept = Vec::new();
    for h in haves {
        let old = SessionKeys::derive(psk, &h.client_nonce, &h.server_nonce);
        for (index, mac) in &h.entries {
            if *index >= plan.count() {
                return None;
            }
            let (offset, len) = plan.chunk(*index);
            let mut hasher = old.chunk_hasher(h.old_file_id, offset, len);
            zcp_engine::map::visit_mapped(file, offset, len, |b| {
                hasher.update(b);
            })
            .ok()?;
            if hasher.finalize().as_bytes() != mac {
                return None;
            }
            kept.push((*index, *mac));
        }
    }
    Some(kept)
}
