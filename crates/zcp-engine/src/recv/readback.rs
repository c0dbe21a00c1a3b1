//! The `splice` engine's second half: after a chunk is spliced into the page cache, a helper
//! thread reads it back through a guarded mapping into the chunk's sink (so verification reads
//! the page cache, never a copy), then lets the *previous* chunk's writeback finish and drops
//! its pages from the cache. Running this beside the stream thread lets the network deliver
//! chunk k+1 while chunk k is hashed and chunk k-1 reaches the disk.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;

use super::{Completion, Sink, WriteFailure};
use crate::EngineError;
use crate::sys::{Usage, thread_usage};

/// Chunks that may wait for read-back: bounds how far the network runs ahead of hashing (and
/// how much unsettled page cache a stream holds).
const QUEUE: usize = 4;

struct Job {
    file: Arc<OwnedFd>,
    offset: u64,
    len: u64,
    /// The data extents written, when the chunk has holes (`None`: all of it). Only these are
    /// read back; the sink fills the holes with zeros itself.
    ranges: Option<Vec<(u64, u64)>>,
    sink: Option<Sink>,
    done: Completion,
}

/// The read-back thread of one `splice` stream.
#[derive(Debug)]
pub(super) struct Readback {
    tx: Option<mpsc::SyncSender<Job>>,
    thread: Option<JoinHandle<Usage>>,
}

impl Readback {
    pub(super) fn new() -> Result<Readback, EngineError> {
        let (tx, rx) = mpsc::sync_channel::<Job>(QUEUE);
        let thread = std::thread::Builder::new()
            .name("zcp-splice-readback".into())
            .spawn(move || {
                let start = thread_usage();
                let mut behind: Option<(Arc<OwnedFd>, u64, u64)> = None;
                for job in rx {
                    let read = match job.sink {
                        Some(mut sink) => {
                            let whole = [(job.offset, job.len)];
                            let ranges = job.ranges.as_deref().unwrap_or(&whole);
                            let read = ranges.iter().try_for_each(|&(off, len)| {
                                crate::map::visit_mapped(&*job.file, off, len, |b| sink.bytes(b))
                            });
                            match read {
                                Ok(()) => {
                                    sink.seen_all();
                                    Ok(())
                                }
                                Err(e) => Err(WriteFailure {
                                    no_space: false,
                                    message: format!("reading back the written range: {e}"),
                                }),
                            }
                        }
                        None => Ok(()),
                    };
                    (job.done)(read);
                    if let Some((file, off, len)) = behind.replace((job.file, job.offset, job.len))
                    {
                        crate::fs::settle(&*file, off, len);
                    }
                }
                if let Some((file, off, len)) = behind {
                    crate::fs::settle(&*file, off, len);
                }
                thread_usage().since(&start)
            })
            .map_err(|e| EngineError::Sys {
                call: "pthread_create",
                what: "splice read-back",
                source: e,
            })?;
        Ok(Readback {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    /// Queues a spliced chunk (its data `ranges`, when it has holes) for read-back; waits while [`QUEUE`] chunks are pending.
    pub(super) fn queue(
        &mut self,
        file: Arc<OwnedFd>,
        (offset, len): (u64, u64),
        ranges: Option<Vec<(u64, u64)>>,
        sink: Option<Sink>,
        done: Completion,
    ) -> Result<(), EngineError> {
        let job = Job {
            file,
            offset,
            len,
            ranges,
            sink,
            done,
        };
        match self.tx.as_ref().map(|tx| tx.send(job)) {
            Some(Ok(())) => Ok(()),
            _ => Err(EngineError::Sys {
                call: "mmap",
                what: "splice read-back",
                source: std::io::Error::other("the read-back thread stopped"),
            }),
        }
    }

    pub(super) fn finish(mut self) -> Result<Usage, EngineError> {
        self.stop()
    }

    fn stop(&mut self) -> Result<Usage, EngineError> {
        self.tx = None;
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(u)) => Ok(u),
            None => Ok(Usage::default()),
            Some(Err(_)) => Err(EngineError::Sys {
                call: "mmap",
                what: "splice read-back",
                source: std::io::Error::other("the read-back thread panicked"),
            }),
        }
    }
}

impl Drop for Readback {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
