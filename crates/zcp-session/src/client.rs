//! The sending side: one file, pushed to a server, verified and committed there.
//!
//! After the handshake and the receiver's `FileReady`, four threads run:
//! * the data thread sends each chunk's header and then its bytes with the sender engine;
//! * the hash thread reads the same chunks from the page cache through guarded mappings,
//!   sends each chunk's MAC on the control connection, waits for the data thread, checks the
//!   source did not change, and sends `FileEnd` with the whole-file digest;
//! * the reader thread forwards control messages from the receiver;
//! * the calling thread ticks the interval reports, watches liveness, and on `FileCommitted`
//!   sends `Finish` and waits for the receiver's `Stats`.
//!
//! Any failure cancels the rest: sockets are shut down so blocked threads return, and the
//! receiver, seeing the session end without `FileEnd`, removes its temporary file.

use std::fs::File;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

use zcp_engine::send::send_all;
use zcp_engine::sys::{process_usage, random, tcp_info, thread_usage};
use zcp_engine::{EngineError, FileSender, RecvEngine, SendEngine};
use zcp_wire::{
    ChunkHeader, ChunkPlan, ErrorCode, Message, Psk, PutFile, ReceiverStats, RelPath, SessionKeys,
    escape,
};

use crate::conn::{ControlTx, authenticate, connect, open_data};
use crate::error::{FrameIoError, SessionError};
use crate::event::{Cpu, Event, Interval, Reporter, Start, StreamInterval, Summary};

/// How often background threads wake to check for cancellation and liveness.
const TICK: Duration = Duration::from_millis(250);

/// Everything a send needs.
#[derive(Debug, Clone)]
pub struct SendOptions {
    /// Server host name or address.
    pub host: String,
    /// Server port.
    pub port: u16,
    /// The pre-shared key.
    pub psk: Psk,
    /// The file to send.
    pub source: PathBuf,
    /// Destination relative to the server root (raw bytes).
    pub dest: Vec<u8>,
    /// Sender engine to try first.
    pub engine: SendEngine,
    /// Receiver engine to ask for.
    pub recv_engine: RecvEngine,
    /// Bytes per engine call (0: each engine's default), on both sides.
    pub block_size: u64,
    /// Chunk size; `None` picks one from the file size.
    pub chunk_size: Option<u64>,
    /// Interval between reports; `None` for none.
    pub interval: Option<Duration>,
    /// Time allowed to connect and authenticate.
    pub connect_timeout: Duration,
    /// A transfer with no progress and no word from the receiver for this long fails.
    pub idle_timeout: Duration,
}

/// What identifies a file's contents cheaply; any change between the start and the end of
/// the send means the source changed while being sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
    ino: u64,
    dev: u64,
}

impl Fingerprint {
    fn of(m: &std::fs::Metadata) -> Fingerprint {
        Fingerprint {
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
            ino: m.ino(),
            dev: m.dev(),
        }
    }
}

/// A one-shot flag other threads can wait on.
#[derive(Debug, Default)]
struct Latch {
    value: Mutex<Option<bool>>,
    cv: Condvar,
}

impl Latch {
    fn set(&self, v: bool) {
        *self.value.lock().unwrap_or_else(|p| p.into_inner()) = Some(v);
        self.cv.notify_all();
    }

    /// The value once set; `None` if `cancel` is raised first.
    fn wait(&self, cancel: &AtomicBool) -> Option<bool> {
        let mut g = self.value.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(v) = *g {
                return Some(v);
            }
            if cancel.load(Ordering::Relaxed) {
                return None;
            }
            g = self
                .cv
                .wait_timeout(g, TICK)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

enum Note {
    Control(Result<Message, FrameIoError>),
    DataDone(Result<Instant, SessionError>),
    Hashed(Result<(ControlTx, [u8; 32]), SessionError>),
}

fn source_error(path: &str, reason: impl std::fmt::Display) -> SessionError {
    SessionError::Source {
        path: path.to_string(),
        reason: reason.to_string(),
    }
}

fn engine_error(path: &str, e: EngineError) -> SessionError {
    match e {
        EngineError::SourceShort { .. } | EngineError::SourceChanged(_) => {
            SessionError::SourceChanged {
                path: path.to_string(),
                reason: e.to_string(),
            }
        }
        other => SessionError::Engine(other),
    }
}

/// Sends one file and returns once the receiver has verified and committed it; the summary
/// is also pushed to `reporter` as [`Event::Summary`].
pub fn send_file(opts: &SendOptions, reporter: &mut dyn Reporter) -> Result<Summary, SessionError> {
    // CPU is counted per thread, over this session's threads only, so a server running in the
    // same process (zcp demo, tests) is not counted as the sender.
    let usage0 = thread_usage();
    let helpers = Mutex::new(zcp_engine::Usage::default());
    // The data thread alone: what the sender engine costs, without hashing.
    let data_usage = Mutex::new(zcp_engine::Usage::default());
    let source_changed: Mutex<Option<String>> = Mutex::new(None);
    let shown = escape(opts.source.as_os_str().as_bytes());
    let file = File::open(&opts.source).map_err(|e| source_error(&shown, e))?;
    let meta = file.metadata().map_err(|e| source_error(&shown, e))?;
    if meta.is_dir() {
        return Err(source_error(
            &shown,
            "is a directory; zcp send takes a regular file",
        ));
    }
    if !meta.is_file() {
        return Err(source_error(
            &shown,
            "is not a regular file (device, FIFO or socket)",
        ));
    }
    let before = Fingerprint::of(&meta);
    let size = meta.len();
    let name = opts
        .source
        .file_name()
        .map(|n| n.as_bytes().to_vec())
        .ok_or_else(|| source_error(&shown, "has no file name"))?;
    RelPath::parse(&opts.dest).map_err(|e| SessionError::Refused {
        code: ErrorCode::BadPath,
        message: e.to_string(),
    })?;
    let chunk_size = opts
        .chunk_size
        .unwrap_or_else(|| ChunkPlan::default_chunk_size(size));
    let plan = ChunkPlan::new(size, chunk_size)
        .map_err(|e| source_error(&shown, format!("--chunk-size: {e}")))?;
    let (engine, sender_note) = opts.engine.probe(file.as_fd(), size);

    let control = connect(&opts.host, opts.port, opts.connect_timeout)?;
    control.set_read_timeout(Some(opts.connect_timeout)).ok();
    control.set_write_timeout(Some(opts.connect_timeout)).ok();
    let nonce = random().map_err(|source| SessionError::Io {
        what: "getrandom".into(),
        source,
    })?;
    let mut cs = authenticate(control, opts.psk.clone(), nonce)?;
    let peer = cs.peer.to_string();
    let put = PutFile {
        file_id: 0,
        dest: opts.dest.clone(),
        name,
        size,
        mode: meta.mode() & 0o7777,
        mtime_sec: meta.mtime(),
        mtime_nsec: meta.mtime_nsec() as u32,
        chunk_size,
        recv_engine: opts.recv_engine.name().into(),
        block_size: opts.block_size.min(u64::from(u32::MAX)) as u32,
    };
    cs.tx
        .send(&Message::PutFile(put))
        .map_err(|e| FrameIoError::from(e).into_session(&peer))?;
    cs.rx.stream.set_read_timeout(Some(TICK)).ok();
    let asked = Instant::now();
    let (receiver_engine, receiver_note, target) = loop {
        match cs.rx.poll().map_err(|e| e.into_session(&peer))? {
            Some(Message::FileReady {
                engine,
                note,
                target,
                ..
            }) => {
                break (engine, (!note.is_empty()).then_some(note), escape(&target));
            }
            Some(Message::Progress { .. }) => {}
            Some(Message::FileFailed { code, message, .. })
            | Some(Message::Error { code, message }) => {
                return Err(SessionError::Refused { code, message });
            }
            Some(other) => {
                return Err(SessionError::Protocol {
                    peer,
                    reason: format!("expected FileReady, got {}", other.name()),
                });
            }
            None if asked.elapsed() > opts.idle_timeout => {
                return Err(SessionError::Connection {
                    peer,
                    reason: "the receiver did not open the file within the timeout".into(),
                });
            }
            None => {}
        }
    };
    let verify = receiver_engine != RecvEngine::Null.name();
    let data = open_data(
        cs.peer,
        &cs.keys,
        cs.session_id,
        0,
        random().unwrap_or(nonce),
        opts.connect_timeout,
    )?;
    data.set_read_timeout(None).ok();
    data.set_write_timeout(Some(opts.idle_timeout)).ok();
    zcp_engine::sys::set_socket_timeouts(&data, Some(opts.idle_timeout)).ok();
    cs.tx.stream.set_write_timeout(Some(opts.idle_timeout)).ok();

    let block = if opts.block_size == 0 {
        engine.default_block()
    } else {
        opts.block_size
    };
    reporter.event(&Event::Start(Start {
        local: cs.local,
        remote: cs.peer,
        session: cs.session_id.iter().map(|b| format!("{b:02x}")).collect(),
        source: shown.clone(),
        target: target.clone(),
        size,
        chunk_size,
        block_size: block,
        streams: 1,
        sender_engine: engine.name().into(),
        sender_note,
        receiver_engine: receiver_engine.clone(),
        receiver_note,
        verify,
    }));

    let progress = AtomicU64::new(0);
    let cancel = AtomicBool::new(false);
    let data_done = Latch::default();
    let (note_tx, notes) = mpsc::channel::<Note>();
    let data_ctl = data.try_clone().map_err(|source| SessionError::Io {
        what: "data connection".into(),
        source,
    })?;
    let ctl_ctl = cs
        .tx
        .stream
        .try_clone()
        .map_err(|source| SessionError::Io {
            what: "control connection".into(),
            source,
        })?;
    let keys = cs.keys.clone();
    let (ctl_tx, mut ctl_rx) = (cs.tx, cs.rx);
    let t0 = Instant::now();

    let outcome = std::thread::scope(|s| {
        {
            let (note, file, plan, progress, cancel, data_done, shown) = (
                note_tx.clone(),
                &file,
                &plan,
                &progress,
                &cancel,
                &data_done,
                &shown,
            );
            let (data, helpers, data_usage) = (&data, &helpers, &data_usage);
            s.spawn(move || {
                let u0 = thread_usage();
                let r = send_chunks(data, file, plan, engine, opts.block_size, progress, cancel)
                    .map_err(|e| engine_error(shown, e));
                data_done.set(r.is_ok());
                let used = thread_usage().since(&u0);
                helpers.lock().unwrap_or_else(|p| p.into_inner()).add(&used);
                *data_usage.lock().unwrap_or_else(|p| p.into_inner()) = used;
                let _ = note.send(Note::DataDone(r));
            });
        }
        {
            let (note, file, plan, cancel, data_done, shown, keys, helpers) = (
                note_tx.clone(),
                &file,
                &plan,
                &cancel,
                &data_done,
                &shown,
                &keys,
                &helpers,
            );
            let source_changed = &source_changed;
            s.spawn(move || {
                let u0 = thread_usage();
                let r = hash_and_end(
                    ctl_tx,
                    file,
                    plan,
                    keys,
                    verify,
                    data_done,
                    cancel,
                    before,
                    shown,
                    source_changed,
                );
                helpers
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .add(&thread_usage().since(&u0));
                let _ = note.send(Note::Hashed(r));
            });
        }
        {
            let (note, cancel, helpers) = (note_tx.clone(), &cancel, &helpers);
            s.spawn(move || {
                let u0 = thread_usage();
                let _count = CountOnDrop(helpers, u0);
                loop {
                    match ctl_rx.poll() {
                        Ok(Some(m)) => {
                            let last = matches!(
                                m,
                                Message::Stats(_)
                                    | Message::Error { .. }
                                    | Message::FileFailed { .. }
                            );
                            let _ = note.send(Note::Control(Ok(m)));
                            if last {
                                return;
                            }
                        }
                        Ok(None) if cancel.load(Ordering::Relaxed) => return,
                        Ok(None) => {}
                        Err(e) => {
                            let _ = note.send(Note::Control(Err(e)));
                            return;
                        }
                    }
                }
            });
        }
        drop(note_tx);
        let r = drive(opts, reporter, &notes, &progress, &data, t0, &peer, verify);
        // A source that changed is the root cause of whatever else failed after it.
        let r = match (
            r,
            source_changed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .take(),
        ) {
            (Err(_), Some(reason)) => Err(SessionError::SourceChanged {
                path: shown.clone(),
                reason,
            }),
            (r, _) => r,
        };
        if r.is_err() {
            cancel.store(true, Ordering::Relaxed);
            let _ = data_ctl.shutdown(Shutdown::Both);
            let _ = ctl_ctl.shutdown(Shutdown::Both);
        }
        r
    });
    let done = outcome?;
    let mut usage = thread_usage().since(&usage0);
    usage.add(&helpers.into_inner().unwrap_or_else(|p| p.into_inner()));
    usage.max_rss_bytes = process_usage().max_rss_bytes;
    let stats = done.stats;
    let mut summary = finish_summary(done, usage, stats, engine, receiver_engine, target, size);
    let d = data_usage.into_inner().unwrap_or_else(|p| p.into_inner());
    summary.sender_data_cpu = Cpu::new(d.user, d.sys);
    reporter.event(&Event::Summary(summary.clone()));
    Ok(summary)
}

/// Adds a thread's CPU since `.1` to `.0` when the thread's work ends, however it ends.
struct CountOnDrop<'a>(&'a Mutex<zcp_engine::Usage>, zcp_engine::Usage);

impl Drop for CountOnDrop<'_> {
    fn drop(&mut self) {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .add(&thread_usage().since(&self.1));
    }
}

struct Done {
    send_end: Instant,
    commit: Instant,
    t0: Instant,
    digest: [u8; 32],
    verified: bool,
    stored: bool,
    stats: ReceiverStats,
    retransmits: u32,
}

fn finish_summary(
    d: Done,
    usage: zcp_engine::Usage,
    stats: ReceiverStats,
    engine: SendEngine,
    receiver_engine: String,
    target: String,
    size: u64,
) -> Summary {
    Summary {
        bytes: size,
        seconds: d.commit.duration_since(d.t0).as_secs_f64(),
        send_seconds: d.send_end.duration_since(d.t0).as_secs_f64(),
        sender_engine: engine.name().into(),
        receiver_engine,
        sender_cpu: Cpu::new(usage.user, usage.sys),
        sender_data_cpu: Cpu::default(),
        receiver_cpu: Cpu::new(
            Duration::from_micros(stats.cpu_user_us),
            Duration::from_micros(stats.cpu_sys_us),
        ),
        sender_max_rss: usage.max_rss_bytes,
        receiver_max_rss: stats.max_rss_bytes,
        retransmits: d.retransmits,
        verified: d.verified,
        stored: d.stored,
        digest: d
            .verified
            .then(|| d.digest.iter().map(|b| format!("{b:02x}")).collect()),
        target,
    }
}

/// The calling thread's part: intervals, liveness, and the end of the session.
#[allow(clippy::too_many_arguments)]
fn drive(
    opts: &SendOptions,
    reporter: &mut dyn Reporter,
    notes: &mpsc::Receiver<Note>,
    progress: &AtomicU64,
    data: &TcpStream,
    t0: Instant,
    peer: &str,
    verify: bool,
) -> Result<Done, SessionError> {
    let mut ctl: Option<ControlTx> = None;
    let mut ours: Option<[u8; 32]> = None;
    let mut send_end: Option<Instant> = None;
    let mut committed: Option<(Instant, [u8; 32], bool, bool)> = None;
    let mut finish_sent = false;
    let mut last_alive = Instant::now();
    let mut last_progress = 0;
    let first_retrans = tcp_info(data).map_or(0, |t| t.total_retrans);
    let mut retrans_at_tick = first_retrans;
    let mut last_tick = t0;
    let mut bytes_at_tick = 0;
    let emit = |reporter: &mut dyn Reporter,
                now: Instant,
                last_tick: &mut Instant,
                bytes_at_tick: &mut u64,
                retrans_at_tick: &mut u32| {
        let bytes = progress.load(Ordering::Relaxed);
        let tcp = tcp_info(data);
        let retrans = tcp.map_or(*retrans_at_tick, |t| t.total_retrans);
        reporter.event(&Event::Interval(Interval {
            start: last_tick.duration_since(t0).as_secs_f64(),
            end: now.duration_since(t0).as_secs_f64(),
            streams: vec![StreamInterval {
                id: 0,
                bytes: bytes - *bytes_at_tick,
                tcp,
                retransmits: retrans.saturating_sub(*retrans_at_tick),
            }],
        }));
        *last_tick = now;
        *bytes_at_tick = bytes;
        *retrans_at_tick = retrans;
    };
    loop {
        let now = Instant::now();
        let wait = match (opts.interval, send_end) {
            (Some(i), None) => (last_tick + i).saturating_duration_since(now).min(TICK),
            _ => TICK,
        };
        match notes.recv_timeout(wait) {
            Ok(Note::DataDone(Ok(t))) => {
                send_end = Some(t);
                if opts.interval.is_some() && t > last_tick {
                    emit(
                        reporter,
                        t,
                        &mut last_tick,
                        &mut bytes_at_tick,
                        &mut retrans_at_tick,
                    );
                }
            }
            Ok(Note::DataDone(Err(e))) | Ok(Note::Hashed(Err(e))) => return Err(e),
            Ok(Note::Hashed(Ok((tx, digest)))) => {
                ctl = Some(tx);
                ours = Some(digest);
            }
            Ok(Note::Control(Ok(m))) => {
                last_alive = Instant::now();
                match m {
                    Message::Progress { .. } => {}
                    Message::FileCommitted {
                        digest,
                        verified,
                        stored,
                        ..
                    } => {
                        committed = Some((Instant::now(), digest, verified, stored));
                    }
                    Message::FileFailed { code, message, .. }
                    | Message::Error { code, message } => {
                        return Err(match code {
                            ErrorCode::Verify => SessionError::Verify(message),
                            _ => SessionError::Refused { code, message },
                        });
                    }
                    Message::Stats(stats) => {
                        let (commit, digest, verified, stored) =
                            committed.ok_or_else(|| SessionError::Protocol {
                                peer: peer.into(),
                                reason: "Stats before FileCommitted".into(),
                            })?;
                        return Ok(Done {
                            send_end: send_end.unwrap_or(commit),
                            commit,
                            t0,
                            digest,
                            verified,
                            stored,
                            stats,
                            retransmits: tcp_info(data)
                                .map_or(0, |t| t.total_retrans)
                                .saturating_sub(first_retrans),
                        });
                    }
                    other => {
                        return Err(SessionError::Protocol {
                            peer: peer.into(),
                            reason: format!("unexpected {} from the receiver", other.name()),
                        });
                    }
                }
            }
            Ok(Note::Control(Err(e))) => return Err(e.into_session(peer)),
            Err(mpsc::RecvTimeoutError::Timeout) => {
                let now = Instant::now();
                if let Some(i) = opts.interval {
                    if send_end.is_none() && now >= last_tick + i {
                        emit(
                            reporter,
                            now,
                            &mut last_tick,
                            &mut bytes_at_tick,
                            &mut retrans_at_tick,
                        );
                    }
                }
                let p = progress.load(Ordering::Relaxed);
                if p != last_progress {
                    last_progress = p;
                    last_alive = now;
                }
                if last_alive.elapsed() > opts.idle_timeout {
                    return Err(SessionError::Connection {
                        peer: peer.into(),
                        reason: format!(
                            "no progress and no word from the receiver for {} s",
                            opts.idle_timeout.as_secs()
                        ),
                    });
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(SessionError::Connection {
                    peer: peer.into(),
                    reason: "the session's threads ended unexpectedly".into(),
                });
            }
        }
        if let (Some((_, digest, verified, _)), Some(ours), false) = (committed, ours, finish_sent)
        {
            if verify && (!verified || digest != ours) {
                return Err(SessionError::Verify(
                    "the receiver reported a digest that differs from the sender's".into(),
                ));
            }
            let tx = ctl.as_mut().expect("digest and control come together");
            tx.send(&Message::Finish)
                .map_err(|e| FrameIoError::from(e).into_session(peer))?;
            finish_sent = true;
        }
    }
}

fn send_chunks(
    sock: &TcpStream,
    file: &File,
    plan: &ChunkPlan,
    engine: SendEngine,
    block: u64,
    progress: &AtomicU64,
    cancel: &AtomicBool,
) -> Result<Instant, EngineError> {
    let mut sender = FileSender::new(engine, block);
    let headers = AtomicU64::new(0);
    for i in 0..plan.count() {
        if cancel.load(Ordering::Relaxed) {
            break;
        }
        let (off, len) = plan.chunk(i);
        send_all(
            sock.as_fd(),
            &ChunkHeader::data(0, off, len).encode(),
            true,
            &headers,
        )?;
        sender.send(file.as_fd(), sock.as_fd(), off, len, progress)?;
    }
    send_all(sock.as_fd(), &ChunkHeader::end().encode(), false, &headers)?;
    Ok(Instant::now())
}

#[allow(clippy::too_many_arguments)]
fn hash_and_end(
    mut ctl: ControlTx,
    file: &File,
    plan: &ChunkPlan,
    keys: &SessionKeys,
    verify: bool,
    data_done: &Latch,
    cancel: &AtomicBool,
    before: Fingerprint,
    shown: &str,
    source_changed: &Mutex<Option<String>>,
) -> Result<(ControlTx, [u8; 32]), SessionError> {
    let peer = ctl
        .stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let io = |e: std::io::Error| FrameIoError::from(e).into_session(&peer);
    let abort = |ctl: &mut ControlTx, reason: String| -> SessionError {
        // Record the root cause before telling the receiver, whose answer may otherwise win
        // the race to the calling thread.
        *source_changed.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.clone());
        let _ = ctl.send(&Message::Error {
            code: ErrorCode::SourceChanged,
            message: format!("the source changed while being sent: {reason}"),
        });
        SessionError::SourceChanged {
            path: shown.to_string(),
            reason,
        }
    };
    let mut digest = keys.file_digest(0, plan.size(), plan.chunk_size());
    if verify {
        for i in 0..plan.count() {
            if cancel.load(Ordering::Relaxed) {
                return Err(SessionError::Connection {
                    peer,
                    reason: "cancelled".into(),
                });
            }
            let (off, len) = plan.chunk(i);
            let mut h = keys.chunk_hasher(0, off, len);
            if let Err(e) = zcp_engine::map::visit_mapped(file, off, len, |b| {
                h.update(b);
            }) {
                return Err(abort(&mut ctl, e.to_string()));
            }
            let mac = *h.finalize().as_bytes();
            digest.push(&mac);
            ctl.send(&Message::ChunkMac {
                file_id: 0,
                index: i,
                mac,
            })
            .map_err(io)?;
        }
    }
    // The source must stay unchanged until its last byte has left.
    match data_done.wait(cancel) {
        Some(true) => {}
        _ => {
            return Err(SessionError::Connection {
                peer,
                reason: "cancelled".into(),
            });
        }
    }
    let after = file.metadata().map(|m| Fingerprint::of(&m));
    if after.as_ref().ok() != Some(&before) {
        let why = match after {
            Ok(a) if a.len != before.len => {
                format!("its size went from {} to {} bytes", before.len, a.len)
            }
            Ok(_) => "it was modified (mtime/ctime changed)".to_string(),
            Err(e) => format!("it can no longer be read: {e}"),
        };
        return Err(abort(&mut ctl, why));
    }
    let digest = if verify { digest.finish() } else { [0; 32] };
    ctl.send(&Message::FileEnd { file_id: 0, digest })
        .map_err(io)?;
    Ok((ctl, digest))
}
