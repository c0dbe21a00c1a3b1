//! The sending role: walks the sources, announces each entry, and moves every file's chunks
//! over N data streams, proving each with a keyed MAC. It runs on the client in a push and on
//! the server in a pull; the data connections are the client's either way.
//!
//! Threads: the role's own loop (this module's [`run`]) owns all per-file state and is the
//! only one that decides anything. Stream threads take chunk jobs from one shared queue and
//! move the bytes with the sender engine, so one large file spreads over every stream and many
//! small files keep every stream busy. Hash workers read the same chunks from the page cache
//! through guarded mappings and report MACs, which the loop forwards. Everything the threads
//! learn comes back to the loop as an event; the control reader adds the receiver's messages.
//!
//! Per file: `PutFile` → (`Have`…) `FileReady` → [resume check → `Go`] → chunks and
//! `ChunkMac`s → every chunk acknowledged (`ChunkAck ok`; a `ChunkAck` not ok sends the chunk
//! again, up to [`MAX_RETRIES`] times; a file of one chunk skips the acknowledgement) →
//! source unchanged? → `FileEnd` → `FileCommitted`.

use std::collections::{HashMap, VecDeque};
use std::fs::File;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use zcp_engine::sync::{Locked, Waits};

use zcp_engine::fs::Meta;
use zcp_engine::send::{STAGED_MAX, send_all};
use zcp_engine::sys::thread_usage;
use zcp_engine::{EngineError, FileSender, SendEngine, Usage};
use zcp_wire::{
    ChunkHeader, ChunkPlan, ErrorCode, Have, Message, Psk, PutFile, SessionKeys, SideStats, escape,
    escape_text,
};

use crate::control::{Batched, ControlWriter};
use crate::error::{FrameIoError, SessionError};
use crate::event::{Failure, FileOutcome, Observer};
use crate::incoming::{MAX_CHUNKS, MAX_SESSION_CHUNKS};
use crate::manifest::{Entry, Walker};

/// Times one chunk may fail verification before its file is given up.
pub(crate) const MAX_RETRIES: u32 = 3;
/// Files announced but not yet committed: bounds open descriptors and per-file state.
pub(crate) const MAX_OPEN_FILES: usize = 768;
/// How often the loop wakes without events (intervals, liveness).
const TICK: Duration = Duration::from_millis(100);
/// Memory the `Have`s a sender holds at once may take, over every file of a session: each
/// costs its message and 40 bytes an entry ([`have_cost`]), so a receiver cannot grow the
/// sender past this by offering chunks, however it splits its offers. One `Have` per chunk of
/// the open files ([`MAX_SESSION_CHUNKS`]) at 1500 entries a message is about 21 MiB.
pub(crate) const MAX_HELD_HAVE_BYTES: usize = 32 << 20;
/// How long a receiver's keep-alive `Progress` counts as progress for a file whose `FileEnd`
/// was sent: a large commit (`fsync`) may take minutes, but not forever.
const MAX_COMMIT_WAIT: Duration = Duration::from_secs(30 * 60);

/// What holding `h` costs: the message, and its entries on the heap (with an allocator's
/// overhead for each of the two allocations).
fn have_cost(h: &Have) -> usize {
    std::mem::size_of::<Have>() + h.entries.capacity() * std::mem::size_of::<(u64, [u8; 32])>() + 32
}

/// How the sender runs.
#[derive(Debug, Clone)]
pub(crate) struct SenderConfig {
    pub(crate) engine: SendEngine,
    pub(crate) block: u64,
    pub(crate) chunk_size: Option<u64>,
    pub(crate) idle: Duration,
}

/// What the loop hears.
pub(crate) enum SEvent {
    Ctl(Result<Message, FrameIoError>),
    Hashed {
        file: u32,
        index: u64,
        mac: [u8; 32],
    },
    HashFailed {
        file: u32,
        why: String,
    },
    ResumeChecked {
        file: u32,
        kept: Option<Vec<(u64, [u8; 32])>>,
    },
    SourceFailed {
        file: u32,
        why: String,
    },
    StreamFailed {
        stream: u16,
        why: String,
    },
    StreamDone {
        usage: Usage,
        end: Instant,
    },
}

impl SEvent {
    pub(crate) fn ctl(r: Result<Message, FrameIoError>) -> SEvent {
        SEvent::Ctl(r)
    }
}

/// A shared work queue: jobs in FIFO order, closed once no more will come.
struct Queue<T> {
    items: Mutex<(VecDeque<T>, bool)>,
    cv: Condvar,
}

impl<T> Queue<T> {
    fn new() -> Arc<Queue<T>> {
        Arc::new(Queue {
            items: Mutex::new((VecDeque::new(), false)),
            cv: Condvar::new(),
        })
    }

    fn push(&self, item: T) {
        self.items.locked().0.push_back(item);
        self.cv.notify_one();
    }

    fn close(&self) {
        self.items.locked().1 = true;
        self.cv.notify_all();
    }

    /// The next item; `None` once closed and empty.
    fn pop(&self) -> Option<T> {
        let mut g = self.items.locked();
        loop {
            if let Some(item) = g.0.pop_front() {
                return Some(item);
            }
            if g.1 {
                return None;
            }
            g = self.cv.wait_on(g);
        }
    }
}

/// One chunk to move.
struct SendJob {
    file_id: u32,
    file: Arc<File>,
    index: u64,
    offset: u64,
    len: u64,
    /// A small chunk the stream thread hashes itself, from one read of its bytes, instead of
    /// handing it to the hash workers.
    staged: bool,
    cancelled: Arc<AtomicBool>,
}

/// One thing to hash.
enum HashJob {
    Chunk {
        file_id: u32,
        file: Arc<File>,
        index: u64,
        offset: u64,
        len: u64,
        cancelled: Arc<AtomicBool>,
    },
    Resume {
        file_id: u32,
        file: Arc<File>,
        plan: ChunkPlan,
        haves: Vec<Have>,
    },
}

#[derive(Debug, PartialEq, Eq)]
enum State {
    Announced,
    Checking,
    Sending,
    Ending,
}

struct OutFile {
    file: Arc<File>,
    display: String,
    meta: Meta,
    plan: ChunkPlan,
    state: State,
    haves: Vec<Have>,
    /// Chunks offered in `Have`s so far (one bit each): each chunk at most once.
    offered: Vec<u64>,
    /// Bytes of `haves` and of the resume check: counted in [`Run::held_haves`].
    held: usize,
    /// The highest `Progress` the receiver reported for this file.
    progress: u64,
    /// When `FileEnd` went out.
    ending_since: Option<Instant>,
    /// The receiver offered the target it already holds (not an interrupted attempt).
    held_target: bool,
    macs: Vec<Option<[u8; 32]>>,
    acked: Vec<bool>,
    n_acked: u64,
    retries: HashMap<u64, u32>,
    skipped: u64,
    cancelled: Arc<AtomicBool>,
    started: Instant,
    engine: String,
    /// Whether the receiver verifies (every engine but `null`); no MACs otherwise.
    verify: bool,
}

/// What a finished sender role reports.
#[derive(Debug, Default)]
pub(crate) struct SenderTotals {
    pub(crate) files: u64,
    pub(crate) bytes: u64,
    pub(crate) bytes_skipped: u64,
    pub(crate) entries: u64,
    pub(crate) resent: u64,
    pub(crate) failed: u64,
    pub(crate) engine: Option<SendEngine>,
    pub(crate) receiver_engine: Option<String>,
    pub(crate) verified: bool,
    pub(crate) stored: bool,
    pub(crate) digest: Option<[u8; 32]>,
    pub(crate) send_end: Option<Instant>,
    pub(crate) last_commit: Option<Instant>,
    pub(crate) usage: Usage,
    pub(crate) data_usage: Usage,
    pub(crate) peer: SideStats,
}

fn hash_worker(
    jobs: Arc<Queue<HashJob>>,
    events: mpsc::Sender<SEvent>,
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
                    Ok(()) => SEvent::Hashed {
                        file: file_id,
                        index,
                        mac: *h.finalize().as_bytes(),
                    },
                    Err(e) => SEvent::HashFailed {
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
            } => SEvent::ResumeChecked {
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
fn check_resume(
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

/// What a stream thread works with.
struct StreamCtx {
    stream: u16,
    sock: TcpStream,
    jobs: Arc<Queue<SendJob>>,
    events: mpsc::Sender<SEvent>,
    engine: SendEngine,
    block: u64,
    progress: Arc<AtomicU64>,
    keys: SessionKeys,
}

fn stream_worker(cx: StreamCtx) -> Usage {
    let StreamCtx {
        stream,
        sock,
        jobs,
        events,
        engine,
        block,
        progress,
        keys,
    } = cx;
    let start = thread_usage();
    let mut sender = FileSender::new(engine, block);
    let headers = AtomicU64::new(0);
    let result = (|| -> Result<(), EngineError> {
        while let Some(job) = jobs.pop() {
            if job.cancelled.load(Ordering::Relaxed) {
                continue;
            }
            if job.staged {
                let mut mac = [0u8; 32];
                let mut header_sent = false;
                let r = sender.send_staged(
                    job.file.as_fd(),
                    sock.as_fd(),
                    job.offset,
                    job.len,
                    |bytes| {
                        let mut h = keys.chunk_hasher(job.file_id, job.offset, job.len);
                        h.update(bytes);
                        mac = *h.finalize().as_bytes();
                        let header = ChunkHeader::data(job.file_id, job.offset, job.len);
                        header_sent = true;
                        send_all(sock.as_fd(), &header.encode(), true, &headers)
                    },
                    &progress,
                );
                let ev = match r {
                    Ok(()) => SEvent::Hashed {
                        file: job.file_id,
                        index: job.index,
                        mac,
                    },
                    // The file shrank: give it up, keeping the stream in step if its header
                    // went out.
                    Err(e @ (EngineError::SourceShort { .. } | EngineError::SourceChanged(_))) => {
                        if header_sent {
                            pad(&sock, &job, &e, &headers)?;
                        }
                        SEvent::SourceFailed {
                            file: job.file_id,
                            why: e.to_string(),
                        }
                    }
                    Err(e) => return Err(e),
                };
                let _ = events.send(ev);
                continue;
            }
            send_all(
                sock.as_fd(),
                &ChunkHeader::data(job.file_id, job.offset, job.len).encode(),
                true,
                &headers,
            )?;
            match sender.send(
                job.file.as_fd(),
                sock.as_fd(),
                job.offset,
                job.len,
                &progress,
            ) {
                Ok(()) => {}
                Err(e @ (EngineError::SourceShort { .. } | EngineError::SourceChanged(_))) => {
                    pad(&sock, &job, &e, &headers)?;
                    let _ = events.send(SEvent::SourceFailed {
                        file: job.file_id,
                        why: e.to_string(),
                    });
                }
                Err(e) => return Err(e),
            }
        }
        send_all(sock.as_fd(), &ChunkHeader::end().encode(), false, &headers)
    })();
    let usage = thread_usage().since(&start);
    let _ = match result {
        Ok(()) => events.send(SEvent::StreamDone {
            usage,
            end: Instant::now(),
        }),
        Err(e) => events.send(SEvent::StreamFailed {
            stream,
            why: e.to_string(),
        }),
    };
    usage
}

/// After a short read of `job`'s source: the header promised `len` bytes, so keep the stream
/// in step with zeros (the chunk's MAC cannot match them).
fn pad(
    sock: &TcpStream,
    job: &SendJob,
    e: &EngineError,
    headers: &AtomicU64,
) -> Result<(), EngineError> {
    let at = match e {
        EngineError::SourceShort { at, .. } => *at,
        _ => job.offset,
    };
    let zeros = vec![0u8; 1 << 20];
    let mut left = job.offset + job.len - at.clamp(job.offset, job.offset + job.len);
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        send_all(sock.as_fd(), &zeros[..n], false, headers)?;
        left -= n as u64;
    }
    Ok(())
}

/// Everything the role needs from the session around it.
pub(crate) struct SenderSetup {
    pub(crate) ctl: Arc<ControlWriter>,
    pub(crate) events: mpsc::Receiver<SEvent>,
    pub(crate) events_tx: mpsc::Sender<SEvent>,
    pub(crate) keys: SessionKeys,
    /// This session's client and server nonces: `Have`s naming them offer the receiver's
    /// existing target, not an interrupted attempt.
    pub(crate) nonces: (zcp_wire::Nonce, zcp_wire::Nonce),
    pub(crate) psk: Psk,
    pub(crate) streams: Vec<TcpStream>,
    pub(crate) counters: Vec<Arc<AtomicU64>>,
    pub(crate) peer: String,
}

struct Run<'a> {
    cfg: &'a SenderConfig,
    ctl: Arc<ControlWriter>,
    keys: SessionKeys,
    nonces: (zcp_wire::Nonce, zcp_wire::Nonce),
    observer: &'a mut dyn Observer,
    send_q: Arc<Queue<SendJob>>,
    hash_q: Arc<Queue<HashJob>>,
    open: HashMap<u32, OutFile>,
    next_id: u32,
    engine: Option<SendEngine>,
    engine_note: Option<String>,
    totals: SenderTotals,
    notes_seen: std::collections::HashSet<String>,
    /// Bytes of `Have`s held over every file (at most [`MAX_HELD_HAVE_BYTES`]).
    held_haves: usize,
    /// Chunks of the open files together (at most [`MAX_SESSION_CHUNKS`]).
    open_chunks: u64,
}

impl Run<'_> {
    fn fail_file(
        &mut self,
        id: u32,
        code: ErrorCode,
        message: String,
        tell_receiver: bool,
    ) -> Result<(), SessionError> {
        let Some(f) = self.open.remove(&id) else {
            return Ok(());
        };
        self.held_haves -= f.held;
        self.open_chunks -= f.plan.count();
        f.cancelled.store(true, Ordering::Relaxed);
        if tell_receiver {
            self.ctl
                .send(&Message::FileAbort {
                    file_id: id,
                    code,
                    message: message.clone(),
                })
                .map_err(|reason| SessionError::Connection {
                    peer: "peer".into(),
                    reason,
                })?;
        }
        self.totals.failed += 1;
        self.observer.file_done(FileOutcome {
            path: f.display,
            bytes: f.plan.size(),
            skipped: f.skipped,
            seconds: f.started.elapsed().as_secs_f64(),
            engine: f.engine,
            verified: false,
            stored: false,
            digest: [0; 32],
            failure: Some(Failure {
                path: String::new(),
                code: code.name(),
                message,
            }),
        });
        Ok(())
    }

    fn send(&self, m: &Message) -> Result<(), SessionError> {
        self.ctl.send(m).map_err(|reason| SessionError::Connection {
            peer: "peer".into(),
            reason,
        })
    }

    /// Takes the next entry from the walk. Returns whether there was one.
    fn take_entry(&mut self, entry: Entry) -> Result<(), SessionError> {
        match entry {
            Entry::Dir { dest } => {
                self.totals.entries += 1;
                self.send(&Message::MakeDir { path: dest })
            }
            Entry::Link { dest, target } => {
                self.totals.entries += 1;
                self.send(&Message::MakeLink { path: dest, target })
            }
            Entry::Skip { display, why, fail } => {
                if fail {
                    self.totals.failed += 1;
                    // The receiver counts it too: in a pull it is the side that reports.
                    let path = display.as_bytes();
                    self.send(&Message::EntryFailed {
                        path: path[..path.len().min(zcp_wire::MAX_PATH)].to_vec(),
                        code: ErrorCode::Io,
                        message: why.clone(),
                    })?;
                    self.observer.notice(
                        Some(Failure {
                            path: display,
                            code: "source",
                            message: why,
                        }),
                        None,
                    );
                } else {
                    let note = format!("skipped {display}: {why}");
                    let _ = self.send(&Message::Notice {
                        message: note.clone(),
                    });
                    self.observer.notice(None, Some(note));
                }
                Ok(())
            }
            Entry::File {
                dest,
                name,
                file,
                meta,
                display,
            } => {
                let chunk_size = self
                    .cfg
                    .chunk_size
                    .unwrap_or_else(|| ChunkPlan::default_chunk_size(meta.size));
                let plan = match ChunkPlan::new(meta.size, chunk_size) {
                    Ok(p) if p.count() <= MAX_CHUNKS => p,
                    Ok(p) => {
                        self.totals.failed += 1;
                        let message = format!(
                            "{} chunks is over the limit of {MAX_CHUNKS}; use a larger --chunk-size",
                            p.count()
                        );
                        self.observer.notice(
                            Some(Failure {
                                path: display,
                                code: "limit",
                                message,
                            }),
                            None,
                        );
                        return Ok(());
                    }
                    Err(e) => {
                        self.totals.failed += 1;
                        self.observer.notice(
                            Some(Failure {
                                path: display,
                                code: "limit",
                                message: e.to_string(),
                            }),
                            None,
                        );
                        return Ok(());
                    }
                };
                if self.engine.is_none() && meta.size > 0 {
                    let (engine, note) = self.cfg.engine.probe(file.as_fd(), meta.size);
                    self.engine_note = note;
                    self.engine = Some(engine);
                }
                let id = self.next_id;
                self.next_id += 1;
                self.open_chunks += plan.count();
                let count = plan.count() as usize;
                self.send(&Message::PutFile(PutFile {
                    file_id: id,
                    dest,
                    name,
                    size: meta.size,
                    mode: meta.mode,
                    mtime_sec: meta.mtime.0,
                    mtime_nsec: meta.mtime.1,
                    chunk_size: plan.chunk_size(),
                }))?;
                self.open.insert(
                    id,
                    OutFile {
                        file: Arc::new(file),
                        display,
                        meta,
                        plan,
                        state: State::Announced,
                        haves: Vec::new(),
                        offered: Vec::new(),
                        held: 0,
                        progress: 0,
                        ending_since: None,
                        held_target: false,
                        macs: vec![None; count],
                        acked: vec![false; count],
                        n_acked: 0,
                        retries: HashMap::new(),
                        skipped: 0,
                        cancelled: Arc::new(AtomicBool::new(false)),
                        started: Instant::now(),
                        engine: String::new(),
                        verify: true,
                    },
                );
                Ok(())
            }
        }
    }

    fn schedule(&mut self, id: u32, indexes: Vec<u64>) {
        let Some(f) = self.open.get_mut(&id) else {
            return;
        };
        for i in indexes {
            let (offset, len) = f.plan.chunk(i);
            let staged = f.verify && len <= STAGED_MAX;
            self.send_q.push(SendJob {
                file_id: id,
                file: f.file.clone(),
                index: i,
                offset,
                len,
                staged,
                cancelled: f.cancelled.clone(),
            });
            if !f.verify {
                // The null receiver never reads the bytes: there is nothing to prove.
                f.macs[i as usize] = Some([0; 32]);
                continue;
            }
            if staged {
                continue;
            }
            self.hash_q.push(HashJob::Chunk {
                file_id: id,
                file: f.file.clone(),
                index: i,
                offset,
                len,
                cancelled: f.cancelled.clone(),
            });
        }
    }

    fn start_sending(&mut self, id: u32, kept: Vec<(u64, [u8; 32])>) -> Result<(), SessionError> {
        let Some(f) = self.open.get_mut(&id) else {
            return Ok(());
        };
        f.state = State::Sending;
        for (i, mac) in kept {
            let i_us = i as usize;
            if !f.acked[i_us] {
                f.acked[i_us] = true;
                f.n_acked += 1;
                f.macs[i_us] = Some(mac);
                f.skipped += f.plan.chunk(i).1;
            }
        }
        let todo: Vec<u64> = (0..f.plan.count())
            .filter(|i| !f.acked[*i as usize])
            .collect();
        self.totals.bytes_skipped += f.skipped;
        self.schedule(id, todo);
        self.maybe_end(id)
    }

    /// Every MAC known and every chunk acknowledged (a file of one chunk is not: the
    /// receiver holds its `FileEnd` until the chunk is verified): check the source did not
    /// change, then send `FileEnd`.
    fn maybe_end(&mut self, id: u32) -> Result<(), SessionError> {
        let Some(f) = self.open.get_mut(&id) else {
            return Ok(());
        };
        let acked = f.plan.count() <= 1 || f.n_acked == f.plan.count();
        if f.state != State::Sending || !acked || f.macs.iter().any(Option::is_none) {
            return Ok(());
        }
        let now = zcp_engine::fs::stat_fd(f.file.as_fd());
        let changed = match &now {
            Ok(m) if m.nlink == 0 => Some("it was deleted while being sent".to_string()),
            Ok(m) if m.size != f.meta.size => Some(format!(
                "its size went from {} to {} bytes",
                f.meta.size, m.size
            )),
            Ok(m) if (m.mtime, m.ctime, m.id) != (f.meta.mtime, f.meta.ctime, f.meta.id) => {
                Some("it was modified (mtime/ctime changed)".to_string())
            }
            Ok(_) => None,
            Err(e) => Some(format!("it can no longer be read: {e}")),
        };
        if let Some(why) = changed {
            return self.fail_file(
                id,
                ErrorCode::SourceChanged,
                format!("the source changed while being sent: {why}"),
                true,
            );
        }
        let mut d = self
            .keys
            .file_digest(id, f.plan.size(), f.plan.chunk_size());
        for m in &f.macs {
            d.push(m.as_ref().expect("all known"));
        }
        f.state = State::Ending;
        f.ending_since = Some(Instant::now());
        self.send(&Message::FileEnd {
            file_id: id,
            digest: d.finish(),
        })
    }

    /// Handles one message from the receiver; says whether it was progress (the idle clock
    /// restarts) or chatter, or the receiver's closing `Stats`.
    fn on_message(&mut self, m: Message, finishing: bool) -> Result<Heard, SessionError> {
        match m {
            Message::Have(h) => self.on_have(h).map(|()| Heard::Chatter),
            Message::FileReady {
                file_id,
                engine,
                note,
                resumed,
                ..
            } => self.on_ready(file_id, &escape_text(&engine), &escape_text(&note), resumed),
            Message::FileFailed {
                file_id,
                code,
                message,
            } => {
                if !self.open.contains_key(&file_id) {
                    return Ok(Heard::Chatter);
                }
                self.fail_file(file_id, code, escape_text(&message), false)?;
                Ok(Heard::Progress)
            }
            Message::ChunkAck { file_id, index, ok } => self.on_ack(file_id, index, ok),
            Message::FileCommitted {
                file_id,
                bytes,
                digest,
                verified,
                stored,
            } => self.on_committed(file_id, bytes, digest, verified, stored),
            Message::EntryFailed {
                path,
                code,
                message,
            } => {
                // A directory or link counted when it was sent did not arrive after all (or
                // its times failed): never claim more arrived than did.
                self.totals.entries = self.totals.entries.saturating_sub(1);
                self.totals.failed += 1;
                self.observer.notice(
                    Some(Failure {
                        path: escape(&path),
                        code: code.name(),
                        message: escape_text(&message),
                    }),
                    None,
                );
                // Reported, but no step forward: a stream of these cannot hold the session.
                Ok(Heard::Chatter)
            }
            Message::Progress { file_id, bytes } => {
                // Alive and moving: hashing an existing target advances the count; during a
                // commit (after FileEnd) the count stands still, for a bounded time. A count
                // is of the file's bytes: past its size it is a lie, not progress.
                let Some(f) = self.open.get_mut(&file_id) else {
                    return Ok(Heard::Chatter);
                };
                if bytes > f.plan.size() {
                    return Err(proto(format!(
                        "Progress of {bytes} bytes for file {file_id}, a file of {}",
                        f.plan.size()
                    )));
                }
                let grew = bytes > f.progress;
                f.progress = f.progress.max(bytes);
                let committing = f
                    .ending_since
                    .is_some_and(|t| t.elapsed() < MAX_COMMIT_WAIT);
                Ok(if grew || committing {
                    Heard::Progress
                } else {
                    Heard::Chatter
                })
            }
            Message::Notice { message } => {
                self.observer
                    .notice(None, Some(format!("receiver: {}", escape_text(&message))));
                Ok(Heard::Chatter)
            }
            Message::Stats(s) if finishing => Ok(Heard::Stats(s)),
            Message::Error { code, message } => {
                let message = escape_text(&message);
                Err(match code {
                    ErrorCode::Verify => SessionError::Verify(message),
                    _ => SessionError::Refused { code, message },
                })
            }
            other => Err(proto(format!(
                "unexpected {} from the receiver",
                other.name()
            ))),
        }
    }

    /// Holds an offer of chunks for a file not yet ready: each chunk of the file at most once,
    /// and no more than [`MAX_HELD_HAVE_BYTES`] over the session.
    fn on_have(&mut self, h: Have) -> Result<(), SessionError> {
        let Some(f) = self.open.get_mut(&h.file_id) else {
            return Err(proto(format!("Have for unknown file {}", h.file_id)));
        };
        if f.state != State::Announced {
            return Err(proto(format!(
                "Have for file {} after its FileReady",
                h.file_id
            )));
        }
        let count = f.plan.count();
        if f.offered.is_empty() {
            f.offered = vec![0; count.div_ceil(64) as usize];
        }
        for (index, _) in &h.entries {
            if *index >= count {
                return Err(proto(format!(
                    "Have offers chunk {index} of a {count}-chunk file"
                )));
            }
            let (word, bit) = ((*index / 64) as usize, 1u64 << (*index % 64));
            if f.offered[word] & bit != 0 {
                return Err(proto(format!(
                    "Have offers chunk {index} of file {} twice",
                    h.file_id
                )));
            }
            f.offered[word] |= bit;
        }
        let cost = have_cost(&h);
        self.held_haves += cost;
        f.held += cost;
        if self.held_haves > MAX_HELD_HAVE_BYTES {
            return Err(proto(format!(
                "more than {} MiB of offered chunks held at once",
                MAX_HELD_HAVE_BYTES >> 20
            )));
        }
        f.haves.push(h);
        Ok(())
    }

    fn on_ready(
        &mut self,
        file_id: u32,
        engine: &str,
        note: &str,
        resumed: bool,
    ) -> Result<Heard, SessionError> {
        if self.totals.receiver_engine.is_none() {
            self.totals.receiver_engine = Some(engine.to_string());
            let sender = self.engine.unwrap_or(self.cfg.engine).name();
            self.observer.engines(
                sender,
                self.engine_note.as_deref(),
                engine,
                (!note.is_empty()).then_some(note),
            );
            self.notes_seen.insert(note.to_string());
        } else if !note.is_empty()
            && self.notes_seen.len() < 64
            && self.notes_seen.insert(note.to_string())
        {
            self.observer
                .notice(None, Some(format!("receiver: {note}")));
        }
        let Some(f) = self.open.get_mut(&file_id) else {
            return Err(proto(format!("FileReady for unknown file {file_id}")));
        };
        if f.state != State::Announced {
            return Err(proto(format!("a second FileReady for file {file_id}")));
        }
        f.verify = engine != zcp_engine::RecvEngine::Null.name();
        f.engine = engine.to_string();
        if resumed {
            if f.haves.is_empty() {
                return Err(proto(format!(
                    "FileReady{{resumed}} for file {file_id} without any Have"
                )));
            }
            f.state = State::Checking;
            let haves = std::mem::take(&mut f.haves);
            f.held_target = haves
                .iter()
                .all(|h| (h.client_nonce, h.server_nonce) == self.nonces);
            self.hash_q.push(HashJob::Resume {
                file_id,
                file: f.file.clone(),
                plan: f.plan,
                haves,
            });
        } else {
            // Offers without `resumed` are dropped unanswered.
            f.haves.clear();
            self.held_haves -= std::mem::take(&mut f.held);
            self.start_sending(file_id, Vec::new())?;
        }
        Ok(Heard::Progress)
    }

    fn on_ack(&mut self, file_id: u32, index: u64, ok: bool) -> Result<Heard, SessionError> {
        let Some(f) = self.open.get_mut(&file_id) else {
            return Ok(Heard::Chatter);
        };
        if index >= f.plan.count() {
            return Err(proto(format!(
                "ChunkAck for chunk {index} of a {}-chunk file",
                f.plan.count()
            )));
        }
        let i = index as usize;
        if ok {
            if f.acked[i] {
                // The same acknowledgement again moves nothing.
                return Ok(Heard::Chatter);
            }
            f.acked[i] = true;
            f.n_acked += 1;
            self.maybe_end(file_id)?;
            return Ok(Heard::Progress);
        }
        let tries = f.retries.entry(index).or_insert(0);
        *tries += 1;
        if *tries > MAX_RETRIES {
            let msg = format!(
                "chunk {index} failed verification {} times; giving up on this file",
                MAX_RETRIES + 1
            );
            self.fail_file(file_id, ErrorCode::Verify, msg, true)?;
            return Ok(Heard::Progress);
        }
        f.macs[i] = None;
        self.totals.resent += 1;
        let note = format!(
            "{}: chunk {index} failed verification on the receiver; sending it again",
            f.display
        );
        self.observer.notice(None, Some(note));
        self.schedule(file_id, vec![index]);
        Ok(Heard::Progress)
    }

    fn on_committed(
        &mut self,
        file_id: u32,
        bytes: u64,
        digest: [u8; 32],
        verified: bool,
        stored: bool,
    ) -> Result<Heard, SessionError> {
        let Some(f) = self.open.remove(&file_id) else {
            return Err(proto(format!("FileCommitted for unknown file {file_id}")));
        };
        self.held_haves -= f.held;
        self.open_chunks -= f.plan.count();
        self.totals.files += 1;
        self.totals.bytes += bytes;
        let first = self.totals.files == 1;
        self.totals.verified = verified && (first || self.totals.verified);
        self.totals.stored = stored && (first || self.totals.stored);
        self.totals.digest = (first && verified).then_some(digest);
        self.totals.last_commit = Some(Instant::now());
        self.observer.file_done(FileOutcome {
            path: f.display,
            bytes,
            skipped: f.skipped,
            seconds: f.started.elapsed().as_secs_f64(),
            engine: f.engine,
            verified,
            stored,
            digest,
            failure: None,
        });
        Ok(Heard::Progress)
    }
}

/// What a message from the receiver meant.
enum Heard {
    /// The session moved forward: the idle clock restarts.
    Progress,
    /// Nothing new (a `Notice`, a repeated `Progress`, an offer): the idle clock runs on.
    Chatter,
    /// The receiver's closing `Stats`.
    Stats(SideStats),
}

fn proto(reason: String) -> SessionError {
    SessionError::Protocol {
        peer: "the receiver".into(),
        reason,
    }
}

/// Runs the sending role until every entry is done and the stats are exchanged.
pub(crate) fn run(
    cfg: &SenderConfig,
    setup: SenderSetup,
    mut walker: Walker,
    observer: &mut dyn Observer,
) -> Result<SenderTotals, SessionError> {
    let start = thread_usage();
    let SenderSetup {
        ctl,
        events,
        events_tx,
        keys,
        nonces,
        psk,
        streams,
        counters,
        peer,
    } = setup;
    let send_q: Arc<Queue<SendJob>> = Queue::new();
    let hash_q: Arc<Queue<HashJob>> = Queue::new();
    let shutdowns: Vec<TcpStream> = streams.iter().filter_map(|s| s.try_clone().ok()).collect();
    let n_streams = streams.len();

    // The engine is probed on the first file; streams start once it is known, so the walk
    // begins before any thread exists.
    let mut run = Run {
        cfg,
        ctl: ctl.clone(),
        keys: keys.clone(),
        nonces,
        observer,
        send_q: send_q.clone(),
        hash_q: hash_q.clone(),
        open: HashMap::new(),
        next_id: 0,
        engine: None,
        engine_note: None,
        totals: SenderTotals::default(),
        notes_seen: Default::default(),
        held_haves: 0,
        open_chunks: 0,
    };
    let mut walker_done = false;
    let mut pending: Vec<Entry> = Vec::new();
    // Fill until the first file fixes the engine (or the walk ends).
    while run.engine.is_none() && !walker_done {
        match walker.next() {
            None => walker_done = true,
            Some(e) => {
                let is_file = matches!(e, Entry::File { .. });
                pending.push(e);
                if is_file {
                    break;
                }
            }
        }
    }
    for e in pending {
        run.take_entry(e)?;
    }
    let engine = run.engine.unwrap_or(cfg.engine);
    run.totals.engine = Some(engine);

    let hashers = n_streams.clamp(
        1,
        std::thread::available_parallelism()
            .map_or(2, |n| n.get())
            .max(1),
    );
    let mut threads: Vec<JoinHandle<Usage>> = Vec::new();
    let spawn = |name: String, f: Box<dyn FnOnce() -> Usage + Send>| {
        std::thread::Builder::new()
            .name(name)
            .spawn(f)
            .map_err(|source| SessionError::Io {
                what: "spawning a thread".into(),
                source,
            })
    };
    for i in 0..hashers {
        let (q, ev, k, p) = (hash_q.clone(), events_tx.clone(), keys.clone(), psk.clone());
        threads.push(spawn(
            format!("zcp-hash-{i}"),
            Box::new(move || hash_worker(q, ev, k, p)),
        )?);
    }
    for (i, sock) in streams.into_iter().enumerate() {
        let cx = StreamCtx {
            stream: i as u16,
            sock,
            jobs: send_q.clone(),
            events: events_tx.clone(),
            engine,
            block: cfg.block,
            progress: counters[i].clone(),
            keys: keys.clone(),
        };
        threads.push(spawn(
            format!("zcp-send-{i}"),
            Box::new(move || stream_worker(cx)),
        )?);
    }
    drop(events_tx);

    let outcome = (|| -> Result<(), SessionError> {
        let mut finishing = false;
        let mut got_stats = false;
        let mut streams_done = 0;
        let mut last_alive = Instant::now();
        let mut last_bytes = 0u64;
        let mut queue = Batched::new(&events, &ctl);
        loop {
            // Room for one more file of the largest plan: the open files' chunks together stay
            // within the session's limit, which the receiver enforces.
            while !walker_done
                && run.open.len() < MAX_OPEN_FILES
                && run.open_chunks + MAX_CHUNKS <= MAX_SESSION_CHUNKS
            {
                match walker.next() {
                    None => walker_done = true,
                    Some(e) => run.take_entry(e)?,
                }
            }
            if walker_done && run.open.is_empty() && !finishing {
                send_q.close();
                hash_q.close();
                for (path, meta) in walker.dirs() {
                    run.send(&Message::DirTimes {
                        path,
                        mode: meta.mode,
                        mtime_sec: meta.mtime.0,
                        mtime_nsec: meta.mtime.1,
                    })?;
                }
                run.send(&Message::Finish)?;
                finishing = true;
            }
            let next = queue.next(TICK);
            // Every turn, not only when idle: a busy transfer never waits a whole TICK.
            run.observer.tick();
            // The idle clock: only progress restarts it (bytes moved, chunks hashed,
            // acknowledged or committed, files ready), never chatter such as `Notice`s.
            let b: u64 = counters.iter().map(|c| c.load(Ordering::Relaxed)).sum();
            if b != last_bytes {
                last_bytes = b;
                last_alive = Instant::now();
            }
            if last_alive.elapsed() > cfg.idle {
                return Err(SessionError::Connection {
                    peer: peer.clone(),
                    reason: format!("no progress from the receiver for {} s", cfg.idle.as_secs()),
                });
            }
            let ev = match next {
                Ok(ev) => ev,
                Err(mpsc::RecvTimeoutError::Timeout) => continue,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(SessionError::Connection {
                        peer: peer.clone(),
                        reason: "the session's threads ended unexpectedly".into(),
                    });
                }
            };
            match ev {
                SEvent::Ctl(Ok(m)) => match run.on_message(m, finishing)? {
                    Heard::Progress => last_alive = Instant::now(),
                    Heard::Chatter => {}
                    Heard::Stats(stats) => {
                        run.totals.peer = stats;
                        got_stats = true;
                        if streams_done < n_streams {
                            // Stats arrive after the receiver saw every stream end, so ours have.
                            continue;
                        }
                        return Ok(());
                    }
                },
                SEvent::Ctl(Err(e)) => return Err(e.into_session(&peer)),
                SEvent::Hashed { file, index, mac } => {
                    last_alive = Instant::now();
                    if let Some(f) = run.open.get_mut(&file) {
                        f.macs[index as usize] = Some(mac);
                        run.send(&Message::ChunkMac {
                            file_id: file,
                            index,
                            mac,
                        })?;
                        run.maybe_end(file)?;
                    }
                }
                SEvent::HashFailed { file, why } | SEvent::SourceFailed { file, why } => {
                    run.fail_file(
                        file,
                        ErrorCode::SourceChanged,
                        format!("the source changed while being sent: {why}"),
                        true,
                    )?;
                }
                SEvent::ResumeChecked { file, kept } => {
                    last_alive = Instant::now();
                    if let Some(f) = run.open.get_mut(&file) {
                        run.held_haves -= std::mem::take(&mut f.held);
                    }
                    if run.open.contains_key(&file) {
                        run.send(&Message::Go {
                            file_id: file,
                            restart: kept.is_none(),
                        })?;
                        // A target that differs is simply replaced; an interrupted attempt
                        // that no longer matches is worth a word.
                        if kept.is_none() && !run.open[&file].held_target {
                            let name = run.open[&file].display.clone();
                            run.observer.notice(None, Some(format!("{name}: changed since the interrupted attempt; sending it whole")));
                        }
                        run.start_sending(file, kept.unwrap_or_default())?;
                    }
                }
                SEvent::StreamFailed { stream, why } => {
                    return Err(SessionError::Connection {
                        peer: peer.clone(),
                        reason: format!("data stream {stream}: {why}"),
                    });
                }
                SEvent::StreamDone { usage, end } => {
                    streams_done += 1;
                    run.totals.data_usage.add(&usage);
                    run.totals.send_end = Some(run.totals.send_end.map_or(end, |e| e.max(end)));
                    if streams_done == n_streams && got_stats {
                        return Ok(());
                    }
                }
            }
        }
    })();

    send_q.close();
    hash_q.close();
    if let Err(SessionError::Protocol { reason, .. }) = &outcome {
        // Say why before closing, so the peer does not only see a closed connection.
        ctl.send_error(ErrorCode::Protocol, reason);
    }
    if outcome.is_err() {
        for s in &shutdowns {
            let _ = s.shutdown(Shutdown::Both);
        }
        for f in run.open.values() {
            f.cancelled.store(true, Ordering::Relaxed);
        }
    }
    let mut helpers = Usage::default();
    for t in threads {
        if let Ok(u) = t.join() {
            helpers.add(&u);
        }
    }
    outcome?;
    // Our own stats close the session for the receiver.
    let mut usage = thread_usage().since(&start);
    usage.add(&helpers);
    run.totals.usage = usage;
    let mine = SideStats {
        cpu_user_us: usage.user.as_micros() as u64,
        cpu_sys_us: usage.sys.as_micros() as u64,
        max_rss_bytes: zcp_engine::sys::process_usage().max_rss_bytes,
        bytes: counters.iter().map(|c| c.load(Ordering::Relaxed)).sum(),
        files: run.totals.files,
    };
    let _ = run.send(&Message::Stats(mine));
    Ok(run.totals)
}
