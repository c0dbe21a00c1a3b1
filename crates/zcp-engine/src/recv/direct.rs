//! The `direct` engine: a three-stage pipeline over a ring of aligned buffers.
//!
//! ```text
//!  stream thread          hash thread             writer threads (DIRECT_WRITERS)
//!  recv into buffer  -->  feed the chunk's sink -->  pwrite(O_DIRECT)  --> buffer back to the ring
//! ```
//!
//! Each stage runs on its own thread, so one stream's receive copy, its hashing and its disk
//! writes overlap instead of taking turns, and several writes in flight keep the device queue
//! non-empty as fio's `iodepth` does (a single synchronous writer leaves the disk idle between
//! requests). The bytes are hashed in the very buffer the socket filled and the disk reads
//! from: no extra copy, and the page cache is never touched.

use crate::sync::Locked;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;

use super::stream::Src;
use super::{Completion, Sink, WriteFailure, pwrite_all};
use crate::EngineError;
use crate::buf::AlignedBuf;
use crate::sys::{Usage, thread_usage};

/// Buffers in the ring: one being filled from the socket, the rest being hashed, queued or
/// written.
pub const DIRECT_DEPTH: usize = 6;
/// O_DIRECT writer threads per stream: the device queue depth the `direct` engine keeps.
pub const DIRECT_WRITERS: usize = 2;
/// Alignment zcp uses for O_DIRECT buffers and offsets (chunk offsets are multiples of it).
pub const DIRECT_ALIGN: u64 = 4096;

/// A chunk's buffers still on their way to the disk, and who to tell when they land. Buffers
/// of one chunk may land in any order across writers; the last to land fires the completion.
struct ChunkWrites {
    pending: AtomicUsize,
    failure: Mutex<Option<WriteFailure>>,
    done: Mutex<Option<Completion>>,
}

impl ChunkWrites {
    /// One buffer landed (or failed with `err`).
    fn landed(&self, err: Option<&EngineError>) {
        if let Some(e) = err {
            self.failure.locked().get_or_insert(WriteFailure::from(e));
        }
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            let done = self.done.locked().take();
            let failure = self.failure.locked().take();
            if let Some(done) = done {
                done(failure.map_or(Ok(()), Err));
            }
        }
    }
}

/// One buffer on its way through the pipeline.
struct Job {
    fd: Arc<OwnedFd>,
    buf: AlignedBuf,
    offset: u64,
    len: usize,
    chunk: Arc<ChunkWrites>,
    /// On a chunk's first buffer: the sink its buffers feed.
    sink: Option<Sink>,
    /// On a chunk's last buffer: the sink has now seen everything.
    last: bool,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Job({} bytes at {})", self.len, self.offset)
    }
}

/// What the helper threads share.
#[derive(Debug, Default)]
struct Shared {
    failed: AtomicBool,
    first_error: Mutex<Option<EngineError>>,
}

impl Shared {
    fn fail(&self, e: EngineError) {
        if !self.failed.swap(true, Ordering::AcqRel) {
            *self.first_error.locked() = Some(e);
        }
    }
}

/// The ring, its helper threads, and the channels between them.
#[derive(Debug)]
pub(super) struct DirectRing {
    shared: Arc<Shared>,
    free: mpsc::Receiver<AlignedBuf>,
    to_hash: Option<mpsc::SyncSender<Job>>,
    threads: Vec<JoinHandle<Usage>>,
    block: usize,
}

fn spawn(
    name: String,
    f: impl FnOnce() -> Usage + Send + 'static,
) -> Result<JoinHandle<Usage>, EngineError> {
    std::thread::Builder::new()
        .name(name)
        .spawn(f)
        .map_err(|e| EngineError::Sys {
            call: "pthread_create",
            what: "direct engine",
            source: e,
        })
}

impl DirectRing {
    pub(super) fn new(block: usize) -> Result<DirectRing, EngineError> {
        let align = DIRECT_ALIGN as usize;
        let block = block.div_ceil(align) * align;
        let (free_tx, free) = mpsc::sync_channel(DIRECT_DEPTH);
        let (to_hash, hash_rx) = mpsc::sync_channel::<Job>(DIRECT_DEPTH);
        let (to_write, write_rx) = mpsc::sync_channel::<Job>(DIRECT_DEPTH);
        for _ in 0..DIRECT_DEPTH {
            free_tx
                .send(AlignedBuf::new(block))
                .expect("receiver is alive");
        }
        let shared = Arc::new(Shared::default());
        let mut threads = Vec::with_capacity(DIRECT_WRITERS + 1);

        threads.push(spawn("zcp-direct-hash".into(), move || {
            let start = thread_usage();
            let mut current: Option<Sink> = None;
            for mut job in hash_rx {
                if let Some(s) = job.sink.take() {
                    current = Some(s);
                }
                if let Some(s) = current.as_mut() {
                    s.bytes(&job.buf[..job.len]);
                }
                if job.last
                    && let Some(s) = current.take()
                {
                    s.seen_all();
                }
                if to_write.send(job).is_err() {
                    break;
                }
            }
            thread_usage().since(&start)
        })?);

        let write_rx = Arc::new(Mutex::new(write_rx));
        for i in 0..DIRECT_WRITERS {
            let (write_rx, free_tx, shared) = (write_rx.clone(), free_tx.clone(), shared.clone());
            threads.push(spawn(format!("zcp-direct-w{i}"), move || {
                let start = thread_usage();
                loop {
                    // Hold the lock only to take a job, never while writing.
                    let next = write_rx.locked().recv();
                    let Ok(mut job) = next else { break };
                    // After a failure keep draining, so every queued chunk hears of it and
                    // the receiving thread is never left waiting for a buffer.
                    let err = if shared.failed.load(Ordering::Acquire) {
                        Some(EngineError::Sys {
                            call: "pwrite",
                            what: "destination file",
                            source: std::io::Error::other("an earlier O_DIRECT write failed"),
                        })
                    } else {
                        // O_DIRECT wants whole blocks: pad the file's last block with zeros;
                        // the commit cuts the file back to its exact size. (Only the file's
                        // last block can be partial: every extent of a sparse chunk ends on a
                        // block boundary or at the chunk's end.)
                        let padded = job.len.div_ceil(align) * align;
                        job.buf[job.len..padded].fill(0);
                        pwrite_all(job.fd.as_fd(), &job.buf[..padded], job.offset).err()
                    };
                    job.chunk.landed(err.as_ref());
                    if let Some(e) = err {
                        shared.fail(e);
                    }
                    let _ = free_tx.send(job.buf);
                }
                thread_usage().since(&start)
            })?);
        }
        Ok(DirectRing {
            shared,
            free,
            to_hash: Some(to_hash),
            threads,
            block,
        })
    }

    /// Receives a chunk's data `extents` (absolute; the whole chunk unless it has holes) from
    /// `sock` into the ring, each written at its offset; returns the bytes taken. With
    /// `eof_ends`, the peer closing the connection ends the chunk where it is (see
    /// [`super::StreamReceiver::receive_until_eof`]).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn receive(
        &mut self,
        fd: Arc<OwnedFd>,
        mut src: Src<'_>,
        extents: &[(u64, u64)],
        sink: Option<Sink>,
        progress: &AtomicU64,
        completion: Completion,
        eof_ends: bool,
    ) -> Result<u64, EngineError> {
        let buffers = buffer_count(extents, self.block) as u64;
        if buffers == 0 {
            if let Some(s) = sink {
                s.seen_all();
            }
            completion(Ok(()));
            return Ok(0);
        }
        let chunk = Arc::new(ChunkWrites {
            pending: AtomicUsize::new(buffers as usize),
            failure: Mutex::new(None),
            done: Mutex::new(Some(completion)),
        });
        let r = self.queue_chunk(&fd, &mut src, (extents, eof_ends), sink, progress, &chunk);
        if r.is_err() {
            // Not every buffer was queued, so the count never reaches zero; drop the
            // completion uncalled now, as `receive` promises.
            chunk.done.locked().take();
        }
        r
    }

    fn queue_chunk(
        &mut self,
        fd: &Arc<OwnedFd>,
        src: &mut Src<'_>,
        (extents, eof_ends): (&[(u64, u64)], bool),
        mut sink: Option<Sink>,
        progress: &AtomicU64,
        chunk: &Arc<ChunkWrites>,
    ) -> Result<u64, EngineError> {
        let wire: u64 = extents.iter().map(|e| e.1).sum();
        let mut got = 0u64;
        let mut queued = 0usize;
        for (i, &(offset, len)) in extents.iter().enumerate() {
            let mut done = 0u64;
            while done < len {
                if self.shared.failed.load(Ordering::Acquire) {
                    return Err(self.helper_failure());
                }
                let Ok(mut buf) = self.free.recv() else {
                    return Err(self.helper_failure());
                };
                let n = (len - done).min(self.block as u64) as usize;
                let mut filled = 0;
                while filled < n {
                    let k = src.read(&mut buf[filled..n], true)?;
                    if k == 0 && eof_ends {
                        // The stream ended: this buffer (perhaps empty) is the chunk's last.
                        // The buffers never filled will not land; take them off the count
                        // before the last one goes, so the count cannot reach zero early.
                        let never = buffer_count(extents, self.block) - queued - 1;
                        chunk.pending.fetch_sub(never, Ordering::AcqRel);
                        let job = Job {
                            fd: fd.clone(),
                            buf,
                            offset: offset + done,
                            len: filled,
                            chunk: chunk.clone(),
                            sink: sink.take(),
                            last: true,
                        };
                        self.send_job(job)?;
                        return Ok(got + filled as u64);
                    }
                    if k == 0 {
                        return Err(EngineError::Disconnected {
                            got: got + filled as u64,
                            want: wire,
                        });
                    }
                    filled += k;
                    progress.fetch_add(k as u64, Ordering::Relaxed);
                }
                let job = Job {
                    fd: fd.clone(),
                    buf,
                    offset: offset + done,
                    len: n,
                    chunk: chunk.clone(),
                    sink: sink.take(),
                    last: i + 1 == extents.len() && done + n as u64 == len,
                };
                self.send_job(job)?;
                queued += 1;
                done += n as u64;
                got += n as u64;
            }
        }
        Ok(got)
    }

    /// Hands a filled buffer to the hash thread.
    fn send_job(&mut self, job: Job) -> Result<(), EngineError> {
        match self.to_hash.as_ref().expect("open until finish").send(job) {
            Ok(()) => Ok(()),
            Err(_) => Err(self.helper_failure()),
        }
    }

    /// Stops the helpers and waits for them; their CPU, or the first write error.
    fn stop(&mut self) -> Result<Usage, EngineError> {
        self.to_hash = None;
        let mut usage = Usage::default();
        for t in self.threads.drain(..) {
            match t.join() {
                Ok(u) => usage.add(&u),
                Err(_) => self.shared.fail(EngineError::Sys {
                    call: "pwrite",
                    what: "direct engine",
                    source: std::io::Error::other("a direct engine thread panicked"),
                }),
            }
        }
        match self.shared.first_error.locked().take() {
            Some(e) => Err(e),
            None => Ok(usage),
        }
    }

    /// A helper failed: stop them all and return the first error.
    fn helper_failure(&mut self) -> EngineError {
        match self.stop() {
            Err(e) => e,
            Ok(_) => EngineError::Sys {
                call: "pwrite",
                what: "direct engine",
                source: std::io::Error::other("the O_DIRECT writers stopped"),
            },
        }
    }

    pub(super) fn finish(mut self) -> Result<Usage, EngineError> {
        self.stop()
    }
}

/// Buffers of `block` bytes that `extents` fill.
fn buffer_count(extents: &[(u64, u64)], block: usize) -> usize {
    extents
        .iter()
        .map(|e| e.1.div_ceil(block as u64) as usize)
        .sum()
}

impl Drop for DirectRing {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}
