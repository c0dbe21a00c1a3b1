//! The receiving role: validates each entry beneath its root, receives chunks over N data
//! streams through the engines, verifies them, makes them durable, and commits files. It runs
//! on the server in a push and on the client in a pull.
//!
//! Threads: the role's loop ([`run`]) handles the sender's control messages and reports; each
//! data stream has its own thread ([`data_loop`]), plus the engines' helpers; the **journal
//! thread** makes verified chunks durable in batches (one `fdatasync` of the file and one
//! `fsync` of its journal for many chunks) and only then acknowledges them; the **committer**
//! commits finished files in batches: one `syncfs` for many small files, or an `fsync` for a
//! lone one, then the renames, then one `fsync` per directory. A file is renamed into place
//! only after every chunk is verified and durable and the whole-file digests agree.

use std::collections::HashMap;
use std::net::{Shutdown, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};
use zcp_engine::sync::Locked;

use zcp_engine::fs::{EntryKind, PartFile, Root};
use zcp_engine::recv::{Choice, ChunkSink, Completion, Sink, Target, choose};
use zcp_engine::sys::thread_usage;
use zcp_engine::{EngineError, RecvEngine, StreamReceiver, Usage};
use zcp_wire::journal::{JournalHeader, JournalRecord, MAX_JOURNAL_SESSIONS, decode_journal};
use zcp_wire::{
    CHUNK_HEADER_LEN, ChunkHeader, ChunkKind, ChunkPlan, ErrorCode, Have, MAX_HAVE_ENTRIES,
    Message, Nonce, PutFile, RelPath, SessionKeys, SideStats, escape, escape_text,
};

mod handler;

use handler::{Flow, Handler};

use crate::confine::{Act, Scope, Times};
use crate::control::{Batched, ControlWriter};
use crate::error::{FrameIoError, SessionError};
use crate::event::{Failure, FileOutcome, Observer};
use crate::incoming::{Incoming, MAX_CHUNKS, MAX_SESSION_CHUNKS, Outcome, Settle, Store};

/// Largest block size a sender may ask the receiver for; the `direct` ring holds six.
pub const MAX_RECV_BLOCK: u64 = 64 << 20;
/// Most files a session may have open at once on the receiver.
const MAX_OPEN_FILES: usize = 1024;
/// Files committed together at most.
const COMMIT_BATCH: usize = 256;
/// Directory descriptors kept open for the next entries.
const DIR_CACHE: usize = 256;
/// Below this size `auto` receives with `rw`: see [`prepare`].
const SMALL_FILE: u64 = 1 << 20;

/// How the receiver runs.
#[derive(Debug, Clone)]
pub(crate) struct ReceiverConfig {
    pub(crate) requested: RecvEngine,
    pub(crate) block: u64,
    pub(crate) idle: Duration,
    /// The sender's engine as asked for, for the report.
    pub(crate) sender_engine: String,
}

/// What the loop hears.
pub(crate) enum REvent {
    Ctl(Result<Message, FrameIoError>),
    Done(FileOutcome),
    StreamEnded {
        usage: Usage,
    },
    /// A data stream broke or was refused (a chunk header that does not fit): the reason,
    /// for the report and the server log.
    StreamFailed {
        why: String,
    },
}

impl REvent {
    pub(crate) fn ctl(r: Result<Message, FrameIoError>) -> REvent {
        REvent::Ctl(r)
    }
}

struct CommitJob {
    file: Arc<Incoming>,
    digest: [u8; 32],
}

/// A refusal to send back: its class and what to fix.
type Refusal = (ErrorCode, String);

/// Verified chunks on their way to the journal thread.
type JournalTx = mpsc::Sender<(Arc<Incoming>, u64)>;

/// Where an entry goes: its directory's components and its final name.
struct Placed {
    dir: Vec<Vec<u8>>,
    name: Vec<u8>,
}

/// A file ready to receive: the `Have`s to offer, its `FileReady`, and its state.
struct Prepared {
    haves: Vec<Have>,
    ready: Message,
    file: Arc<Incoming>,
}

/// What a file id names in this session ([`RxShared::lookup`]).
enum Lookup {
    Open(Arc<Incoming>),
    Gone,
    Unknown,
}

/// A directory beneath the root, open, with the filesystem it is on.
#[derive(Debug, Clone)]
struct Dir {
    fd: Arc<OwnedFd>,
    dev: u64,
}

impl std::ops::Deref for Dir {
    type Target = OwnedFd;
    fn deref(&self) -> &OwnedFd {
        &self.fd
    }
}

/// What every thread of a receiving session shares.
pub(crate) struct RxShared {
    pub(crate) keys: SessionKeys,
    pub(crate) nonces: (Nonce, Nonce),
    pub(crate) root: Arc<Root>,
    pub(crate) ctl: Arc<ControlWriter>,
    pub(crate) events: mpsc::Sender<REvent>,
    pub(crate) cfg: ReceiverConfig,
    /// What this session may touch beneath the root.
    scope: Scope,
    /// Open files, and (`.1`) one above the highest file id announced so far: ids only
    /// increase, so an id below it that is not open is a file given up or committed, with no
    /// set of them to grow.
    files: Mutex<(HashMap<u32, Arc<Incoming>>, u64)>,
    journal: Mutex<Option<JournalTx>>,
    commit: Mutex<Option<mpsc::Sender<CommitJob>>>,
    engines: Mutex<HashMap<u64, Choice>>,
    dirs: Mutex<HashMap<Vec<u8>, Dir>>,
    socks: Mutex<Vec<TcpStream>>,
    closed: AtomicBool,
    pub(crate) usage: Mutex<Usage>,
    counters: Mutex<Vec<Arc<AtomicU64>>>,
}

impl std::fmt::Debug for RxShared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RxShared")
    }
}

impl RxShared {
    pub(crate) fn new(
        keys: SessionKeys,
        nonces: (Nonce, Nonce),
        root: Arc<Root>,
        ctl: Arc<ControlWriter>,
        events: mpsc::Sender<REvent>,
        cfg: ReceiverConfig,
        scope: Scope,
    ) -> RxShared {
        RxShared {
            keys,
            nonces,
            root,
            ctl,
            events,
            cfg,
            scope,
            files: Mutex::new((HashMap::new(), 0)),
            journal: Mutex::new(None),
            commit: Mutex::new(None),
            engines: Mutex::new(HashMap::new()),
            dirs: Mutex::new(HashMap::new()),
            socks: Mutex::new(Vec::new()),
            closed: AtomicBool::new(false),
            usage: Mutex::new(Usage::default()),
            counters: Mutex::new(Vec::new()),
        }
    }

    /// Payload bytes received so far, over every stream.
    pub(crate) fn bytes(&self) -> u64 {
        self.counters
            .locked()
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    fn open_files(&self) -> std::sync::MutexGuard<'_, (HashMap<u32, Arc<Incoming>>, u64)> {
        self.files.locked()
    }

    /// File `id`: open, gone (given up or committed: its late frames and chunks are drained
    /// and ignored), or never announced (a protocol error where it is named).
    fn lookup(&self, id: u32) -> Lookup {
        let files = self.open_files();
        match files.0.get(&id) {
            Some(f) => Lookup::Open(f.clone()),
            None if u64::from(id) < files.1 => Lookup::Gone,
            None => Lookup::Unknown,
        }
    }

    /// Drops a file from the session: later chunks for it are drained and ignored. Its part
    /// file stays for a resume if it holds durable chunks. Returns whether it was still open.
    fn abandon(&self, f: &Incoming) -> bool {
        let open = self.open_files().0.remove(&f.id).is_some();
        let keep = f.holds_resumable();
        if let Some(store) = f.store.locked().as_mut() {
            store.part.set_keep(keep && store.journaled);
        }
        open
    }

    /// Fails a file on the receiver's side: the sender is told, the file abandoned. A file
    /// already given up is not failed twice.
    fn fail_file(&self, f: &Incoming, code: ErrorCode, message: String) {
        f.fail(code, message.clone());
        if !self.abandon(f) {
            return;
        }
        let _ = self.ctl.send(&Message::FileFailed {
            file_id: f.id,
            code,
            message: message.clone(),
        });
        let _ = self.events.send(REvent::Done(FileOutcome {
            path: f.target.clone(),
            bytes: f.plan.size(),
            skipped: f.skipped.load(Ordering::Relaxed),
            seconds: f.started.elapsed().as_secs_f64(),
            engine: f.engine.name().into(),
            verified: false,
            stored: false,
            digest: [0; 32],
            failure: Some(Failure {
                path: f.target.clone(),
                code: code.name(),
                message,
            }),
        }));
    }

    /// Acts on a chunk's new state.
    fn outcome(&self, f: &Arc<Incoming>, o: Outcome) {
        match o {
            Outcome::Pending => {}
            Outcome::Verified(i) => {
                let journaled = f.store.locked().as_ref().is_some_and(|s| s.journaled);
                if journaled {
                    if let Some(tx) = self.journal.locked().as_ref() {
                        let _ = tx.send((f.clone(), i));
                        return;
                    }
                }
                // Nothing to resume for a file without a journal: it is durable at commit.
                f.durable(i);
                if f.plan.count() > 1 {
                    let _ = self.ctl.send(&Message::ChunkAck {
                        file_id: f.id,
                        index: i,
                        ok: true,
                    });
                }
                // A one-chunk file is not acknowledged: its `FileEnd` may already be here.
                self.settle(f);
            }
            Outcome::Mismatch(i) => {
                let _ = self.ctl.send(&Message::ChunkAck {
                    file_id: f.id,
                    index: i,
                    ok: false,
                });
            }
        }
    }

    /// Commits or fails `f` once that can be decided ([`Incoming::settle`]).
    fn settle(&self, f: &Arc<Incoming>) {
        match f.settle(&self.keys) {
            Settle::Wait => {}
            Settle::Commit(digest) => {
                if let Some(tx) = self.commit.locked().as_ref() {
                    let _ = tx.send(CommitJob {
                        file: f.clone(),
                        digest,
                    });
                }
            }
            Settle::Fail(code, message) => self.fail_file(f, code, message),
        }
    }

    /// Fails every open file (a data stream broke: their chunks are incomplete).
    fn fail_open_files(&self, code: ErrorCode, why: &str) {
        let open: Vec<Arc<Incoming>> = self.open_files().0.values().cloned().collect();
        for f in open {
            f.fail(code, why.to_string());
        }
    }

    /// Who sends to this role, as messages name it: the server in a pull, the client in a
    /// push.
    pub(crate) fn peer(&self) -> &'static str {
        if self.scope.is_pull() {
            "the server"
        } else {
            "the client"
        }
    }

    /// Tells the sender this role is alive while files are open (a long commit says nothing
    /// else): `Progress` with the bytes written of one open file.
    fn tell_alive(&self) {
        let any = self.open_files().0.values().next().cloned();
        if let Some(f) = any {
            let _ = self.ctl.send(&Message::Progress {
                file_id: f.id,
                bytes: f.written.load(Ordering::Relaxed),
            });
        }
    }

    /// Ends the session: unblocks every data stream.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        for s in self.socks.locked().drain(..) {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    /// The directory `components` beneath the root, from the cache or resolved (and created
    /// when `create`), never through a symlink.
    fn dir(&self, components: &[Vec<u8>], create: bool) -> Result<Dir, EngineError> {
        let key = components.join(&b'/');
        if let Some(d) = self.dirs.locked().get(&key) {
            return Ok(d.clone());
        }
        let (fd, existed) = self.root.open_dir_made(components, create)?;
        for made in existed..components.len() {
            // This session made these directories: their modes are the sender's to set.
            if let Ok(p) = RelPath::parse(&components[..=made].join(&b'/')) {
                self.scope.created_dir(&p);
            }
        }
        let dev = zcp_engine::fs::stat_fd(&fd)?.id.0;
        let d = Dir {
            fd: Arc::new(fd),
            dev,
        };
        let mut cache = self.dirs.locked();
        if cache.len() >= DIR_CACHE {
            cache.clear();
        }
        cache.insert(key, d.clone());
        Ok(d)
    }

    /// The engine for files in `dir`, probed once per filesystem.
    fn engine_for(&self, dir: &Dir) -> Result<Choice, EngineError> {
        if !self.cfg.requested.stores() {
            return Ok(Choice {
                engine: self.cfg.requested,
                note: None,
            });
        }
        let dev = dir.dev;
        if let Some(c) = self.engines.locked().get(&dev) {
            return Ok(c.clone());
        }
        let fs = zcp_engine::fs::fs_info(&**dir)?;
        let c = choose(self.cfg.requested, dir.as_fd(), &fs);
        self.engines.locked().insert(dev, c.clone());
        Ok(c)
    }
}

fn engine_err(e: EngineError) -> Refusal {
    match e {
        EngineError::NoSpace(m) => (
            ErrorCode::NoSpace,
            format!("no space for the destination: {m}"),
        ),
        EngineError::Path(m) => (ErrorCode::BadPath, format!("destination {m}")),
        EngineError::Busy(m) => (ErrorCode::Busy, m),
        other => (ErrorCode::Io, other.to_string()),
    }
}

/// Where an entry goes: its directory (resolved beneath the root) and its final name.
fn place(shared: &RxShared, dest: &[u8], name: &[u8]) -> Result<Placed, Refusal> {
    let bad_path = |e: zcp_wire::PathError| (ErrorCode::BadPath, e.to_string());
    let dest = RelPath::parse(dest).map_err(bad_path)?;
    if !name.is_empty() {
        RelPath::check_name(name).map_err(bad_path)?;
    }
    // scp's rule for a lone file: a destination that is (or is spelled as) a directory
    // receives the file under the source's name; otherwise the destination is the file.
    if dest.names_directory() {
        if name.is_empty() {
            return Err((
                ErrorCode::BadPath,
                format!("destination '{dest}' names a directory"),
            ));
        }
        return Ok(Placed {
            dir: dest.components().to_vec(),
            name: name.to_vec(),
        });
    }
    let comps = dest.components();
    let (last, parent) = comps
        .split_last()
        .expect("a non-directory path has a component");
    if !name.is_empty() {
        let parent_dir = shared.dir(parent, true).map_err(engine_err)?;
        if zcp_engine::fs::entry_kind(&*parent_dir, last).map_err(engine_err)? == EntryKind::Dir {
            return Ok(Placed {
                dir: comps.to_vec(),
                name: name.to_vec(),
            });
        }
    }
    Ok(Placed {
        dir: parent.to_vec(),
        name: last.clone(),
    })
}

fn display(dir: &[Vec<u8>], name: &[u8]) -> String {
    let mut p = dir.join(&b'/');
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    escape(&p)
}

/// Validates a `PutFile`, resolves its place, opens (or resumes) its part file and picks the
/// engine. Returns the `Have`s to offer, the `FileReady`, and the file.
fn prepare(shared: &RxShared, p: PutFile) -> Result<Prepared, Refusal> {
    let plan =
        ChunkPlan::new(p.size, p.chunk_size).map_err(|e| (ErrorCode::Limit, e.to_string()))?;
    if plan.count() > MAX_CHUNKS {
        return Err((
            ErrorCode::Limit,
            format!(
                "{} chunks is over the limit of {MAX_CHUNKS}; use a larger chunk size",
                plan.count()
            ),
        ));
    }
    {
        let files = shared.open_files();
        if files.0.len() >= MAX_OPEN_FILES {
            return Err((
                ErrorCode::Limit,
                format!("more than {MAX_OPEN_FILES} files open in one session"),
            ));
        }
        let open: u64 = files.0.values().map(|f| f.plan.count()).sum();
        if open + plan.count() > MAX_SESSION_CHUNKS {
            return Err((
                ErrorCode::Limit,
                format!(
                    "{} chunks with the {open} of the files open is over the session's limit of {MAX_SESSION_CHUNKS}",
                    plan.count()
                ),
            ));
        }
    }
    if shared.scope.is_pull() {
        // The client chose every name itself: a name of the server's choosing is refused.
        if !p.name.is_empty() {
            return Err((
                ErrorCode::BadPath,
                format!(
                    "the server sent file '{}' under a name of its own ('{}'); refused, nothing written",
                    escape(&p.dest),
                    escape(&p.name)
                ),
            ));
        }
        let dest = RelPath::parse(&p.dest).map_err(|e| (ErrorCode::BadPath, e.to_string()))?;
        shared.scope.check(&dest, Act::File)?;
    }
    let mtime = (p.mtime_sec, p.mtime_nsec);
    let Placed {
        dir: dir_comps,
        name,
    } = place(shared, &p.dest, &p.name)?;
    let target = display(&dir_comps, &name);
    if !shared.cfg.requested.stores() {
        let inc = Incoming::new(
            p.file_id,
            plan,
            shared.cfg.requested,
            p.mode,
            mtime,
            name,
            target.clone(),
            None,
            None,
            Vec::new(),
        );
        let ready = Message::FileReady {
            file_id: p.file_id,
            engine: shared.cfg.requested.name().into(),
            note: String::new(),
            target: target.into_bytes(),
            resumed: false,
        };
        return Ok(Prepared {
            haves: Vec::new(),
            ready,
            file: Arc::new(inc),
        });
    }
    let dir = shared.dir(&dir_comps, true).map_err(engine_err)?;
    let kind = zcp_engine::fs::entry_kind(&*dir, &name).map_err(engine_err)?;
    match kind {
        EntryKind::Missing | EntryKind::File => {}
        EntryKind::Dir => {
            return Err((
                ErrorCode::BadPath,
                format!("destination '{target}' is a directory"),
            ));
        }
        EntryKind::Symlink => {
            return Err((
                ErrorCode::BadPath,
                format!(
                    "destination '{target}' is a symlink on the receiver; zcp never follows or replaces symlinks there"
                ),
            ));
        }
        EntryKind::Other => {
            return Err((
                ErrorCode::BadPath,
                format!("destination '{target}' is a device, FIFO or socket"),
            ));
        }
    }
    let mut choice = shared.engine_for(&dir).map_err(engine_err)?;
    if choice.engine != RecvEngine::ReadWrite
        && p.size < SMALL_FILE
        && shared.cfg.requested == RecvEngine::Auto
    {
        // A small file is one short write: O_DIRECT's ring and splice's read-back cost more in
        // thread handoffs than they save, and the batched commit syncs it with its neighbours.
        choice = Choice {
            engine: RecvEngine::ReadWrite,
            note: Some(format!(
                "files under {} KiB are written with rw: one short write, synced with its neighbours",
                SMALL_FILE >> 10
            )),
        };
    }
    // The same target always gets the same part file, so a later session finds it.
    let key = hex::encode(&blake3::hash(&name).as_bytes()[..8]);
    let (mut part, existed) = PartFile::open(dir.fd.clone(), &key).map_err(engine_err)?;
    let journaled = plan.count() >= 2;
    let mut offered: Vec<(u64, [u8; 32])> = Vec::new();
    let mut haves = Vec::new();
    let mut tag = 0u16;
    let mut journal_open = false;
    if existed {
        let state = if journaled {
            part.read_journal()
                .ok()
                .flatten()
                .and_then(|b| decode_journal(&b).ok())
        } else {
            None
        };
        match state {
            Some(s)
                if s.header
                    == JournalHeader {
                        size: p.size,
                        chunk_size: plan.chunk_size(),
                    }
                    && s.sessions.len() < MAX_JOURNAL_SESSIONS
                    && s.chunks.iter().all(|(_, i, _)| *i < plan.count()) =>
            {
                // Latest record per chunk wins.
                let mut latest: HashMap<u64, (u16, [u8; 32])> = HashMap::new();
                for (t, i, mac) in &s.chunks {
                    latest.insert(*i, (*t, *mac));
                }
                let mut by_session: HashMap<u16, Vec<(u64, [u8; 32])>> = HashMap::new();
                for (i, (t, mac)) in latest {
                    by_session.entry(t).or_default().push((i, mac));
                    offered.push((i, mac));
                }
                for (t, mut entries) in by_session {
                    entries.sort_unstable_by_key(|e| e.0);
                    let sess = s.sessions[usize::from(t)];
                    for part in entries.chunks(MAX_HAVE_ENTRIES) {
                        haves.push(Have {
                            file_id: p.file_id,
                            client_nonce: sess.client_nonce,
                            server_nonce: sess.server_nonce,
                            old_file_id: sess.file_id,
                            entries: part.to_vec(),
                        });
                    }
                }
                part.continue_journal(s.valid_len as u64)
                    .map_err(engine_err)?;
                tag = s.sessions.len() as u16;
                journal_open = true;
            }
            _ => part.reset().map_err(engine_err)?,
        }
    }
    // A target already there with the file's size: offer its chunks, hashed under this
    // session's key, as held. If the sender's source proves every one, no byte is sent and the
    // target is kept (mode and mtime set in place); any difference sends the file whole.
    let mut in_place = false;
    if offered.is_empty() && matches!(kind, EntryKind::File) && p.size > 0 {
        if let Some(macs) = hash_target(shared, &dir, &name, p.file_id, &plan) {
            let (client_nonce, server_nonce) = shared.nonces;
            for entries in macs.chunks(MAX_HAVE_ENTRIES) {
                haves.push(Have {
                    file_id: p.file_id,
                    client_nonce,
                    server_nonce,
                    old_file_id: p.file_id,
                    entries: entries.to_vec(),
                });
            }
            offered = macs;
            in_place = true;
        }
    }
    if p.size >= SMALL_FILE && !in_place {
        // Claims the space now, so a full filesystem fails the file before any byte moves.
        // A small file skips it: on ext4 it costs more than the write (unwritten extents to
        // convert, a partial block zeroed), and a full disk still fails its write at once.
        part.preallocate(p.size).map_err(engine_err)?;
    }
    let direct = if choice.engine == RecvEngine::Direct {
        match part.open_direct() {
            Ok(fd) => Some(Arc::new(fd)),
            Err(e) => {
                choice = Choice {
                    engine: RecvEngine::Splice,
                    note: Some(format!(
                        "O_DIRECT open failed for this file ({}); using splice",
                        std::io::Error::from(e)
                    )),
                };
                None
            }
        }
    } else {
        None
    };
    let target_fds = Target {
        file: part.shared_fd(),
        direct,
    };
    let resumed = !offered.is_empty();
    let store = Store {
        part,
        journaled,
        journal_open,
        session_recorded: false,
        tag,
    };
    let inc = Incoming::new(
        p.file_id,
        plan,
        choice.engine,
        p.mode,
        mtime,
        name,
        target.clone(),
        Some(store),
        Some(target_fds),
        offered,
    );
    inc.in_place.store(in_place, Ordering::Relaxed);
    let ready = Message::FileReady {
        file_id: p.file_id,
        engine: choice.engine.name().into(),
        note: choice.note.unwrap_or_default(),
        target: target.into_bytes(),
        resumed,
    };
    Ok(Prepared {
        haves,
        ready,
        file: Arc::new(inc),
    })
}

/// The chunk MACs of an existing target of exactly the plan's size, under this session's
/// key and `file_id`; `None` when it is not such a file or cannot be read (then the file is
/// simply sent). Tells the sender about once a second that the receiver is alive, as hashing
/// a large target takes a while.
fn hash_target(
    shared: &RxShared,
    dir: &Dir,
    name: &[u8],
    file_id: u32,
    plan: &ChunkPlan,
) -> Option<Vec<(u64, [u8; 32])>> {
    let fd = zcp_engine::fs::open_at(&**dir, name).ok()?;
    let meta = zcp_engine::fs::stat_fd(&fd).ok()?;
    if !matches!(meta.kind, EntryKind::File) || meta.size != plan.size() {
        return None;
    }
    let mut macs = Vec::with_capacity(plan.count() as usize);
    let mut told = Instant::now();
    for index in 0..plan.count() {
        let (offset, len) = plan.chunk(index);
        let mut hasher = shared.keys.chunk_hasher(file_id, offset, len);
        zcp_engine::map::visit_mapped(&fd, offset, len, |b| {
            hasher.update(b);
        })
        .ok()?;
        macs.push((index, *hasher.finalize().as_bytes()));
        if told.elapsed() >= Duration::from_secs(1) {
            told = Instant::now();
            let _ = shared.ctl.send(&Message::Progress {
                file_id,
                bytes: offset + len,
            });
        }
    }
    Some(macs)
}

/// Makes verified chunks durable in batches, then acknowledges them.
fn journal_thread(shared: Arc<RxShared>, rx: mpsc::Receiver<(Arc<Incoming>, u64)>) {
    while let Ok(first) = rx.recv() {
        let u0 = thread_usage();
        let mut batch = vec![first];
        while batch.len() < 1024 {
            match rx.try_recv() {
                Ok(x) => batch.push(x),
                Err(_) => break,
            }
        }
        let mut groups: Vec<(Arc<Incoming>, Vec<u64>)> = Vec::new();
        for (f, i) in batch {
            match groups.iter_mut().find(|(g, _)| g.id == f.id) {
                Some((_, v)) => v.push(i),
                None => groups.push((f, vec![i])),
            }
        }
        let mut acks = Vec::new();
        for (f, idxs) in groups {
            let res = (|| -> Result<(), EngineError> {
                let mut g = f.store.locked();
                let Some(store) = g.as_mut() else {
                    return Ok(());
                };
                store.part.sync_data()?;
                if !store.journal_open {
                    let header = JournalHeader {
                        size: f.plan.size(),
                        chunk_size: f.plan.chunk_size(),
                    };
                    store.part.start_journal(&header.encode())?;
                    store.journal_open = true;
                    store.session_recorded = false;
                    store.tag = 0;
                }
                let mut records = Vec::new();
                if !store.session_recorded {
                    let (c, s) = shared.nonces;
                    records.extend(
                        JournalRecord::Session {
                            client_nonce: c,
                            server_nonce: s,
                            file_id: f.id,
                        }
                        .encode(),
                    );
                    store.session_recorded = true;
                }
                for i in &idxs {
                    records.extend(
                        JournalRecord::Chunk {
                            session: store.tag,
                            index: *i,
                            mac: f.mac(*i),
                        }
                        .encode(),
                    );
                }
                store.part.append_journal(&records)?;
                Ok(())
            })();
            match res {
                Ok(()) => {
                    for i in idxs {
                        f.durable(i);
                        acks.push(Message::ChunkAck {
                            file_id: f.id,
                            index: i,
                            ok: true,
                        });
                    }
                    shared.settle(&f);
                }
                Err(e) => {
                    let (code, msg) = engine_err(e);
                    shared.fail_file(&f, code, format!("making chunks durable: {msg}"));
                }
            }
        }
        let cork = shared.ctl.cork();
        for a in &acks {
            let _ = shared.ctl.send(a);
        }
        drop(cork);
        shared.usage.locked().add(&thread_usage().since(&u0));
    }
}

/// Commits finished files in batches.
fn commit_thread(shared: Arc<RxShared>, rx: mpsc::Receiver<CommitJob>) {
    while let Ok(first) = rx.recv() {
        let u0 = thread_usage();
        let mut batch = vec![first];
        // A moment for more small files to finish, so one sync covers them all.
        let until = Instant::now() + Duration::from_millis(2);
        while batch.len() < COMMIT_BATCH {
            match rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
                Ok(j) => batch.push(j),
                Err(_) => break,
            }
        }
        let mut stores: Vec<(CommitJob, Option<PartFile>)> = Vec::new();
        let mut failed: Vec<(CommitJob, ErrorCode, String)> = Vec::new();
        for job in batch {
            let store = job.file.store.locked().take();
            match store {
                Some(mut s) if job.file.in_place.load(Ordering::Relaxed) => {
                    // The target holds exactly these bytes already: keep it, give it the
                    // source's mode and mtime, and drop the part file.
                    s.part.set_keep(false);
                    let r =
                        zcp_engine::fs::open_at(&**s.part.dir(), &job.file.name).and_then(|fd| {
                            zcp_engine::fs::set_mode_and_mtime(
                                &fd,
                                job.file.mode & 0o777,
                                job.file.mtime,
                            )
                        });
                    drop(s);
                    match r {
                        Ok(()) => stores.push((job, None)),
                        Err(e) => {
                            let (c, m) = engine_err(e);
                            failed.push((job, c, m));
                        }
                    }
                }
                Some(s) => match s.part.set_final_metadata(
                    job.file.plan.size(),
                    job.file.mode,
                    job.file.mtime,
                    job.file.engine == RecvEngine::Direct,
                ) {
                    Ok(()) => stores.push((job, Some(s.part))),
                    Err(e) => {
                        let (c, m) = engine_err(e);
                        failed.push((job, c, m));
                    }
                },
                None => stores.push((job, None)),
            }
        }
        let storing = stores.iter().filter(|(_, p)| p.is_some()).count();
        let synced = match storing {
            0 => Ok(()),
            1 => stores
                .iter()
                .find_map(|(_, p)| p.as_ref())
                .expect("one")
                .sync(),
            _ => zcp_engine::fs::syncfs(shared.root.fd()),
        };
        if let Err(e) = synced {
            let (c, m) = engine_err(e);
            for (job, _) in stores.drain(..) {
                failed.push((job, c, format!("commit failed: {m}")));
            }
        }
        // Each directory once (files of one directory share its descriptor).
        let mut dirs: Vec<Arc<OwnedFd>> = Vec::new();
        let mut done: Vec<CommitJob> = Vec::new();
        for (job, part) in stores {
            let Some(part) = part else {
                done.push(job);
                continue;
            };
            let dir = part.dir().clone();
            match part.rename_to(&job.file.name) {
                Ok(()) => {
                    if !dirs.iter().any(|d| Arc::ptr_eq(d, &dir)) {
                        dirs.push(dir);
                    }
                    done.push(job);
                }
                Err(e) => {
                    let (c, m) = engine_err(e);
                    failed.push((job, c, format!("rename failed: {m}")));
                }
            }
        }
        let dir_sync = dirs
            .iter()
            .try_for_each(|d| zcp_engine::fs::fsync_dir(&**d));
        let cork = shared.ctl.cork();
        for job in done {
            let f = &job.file;
            if let Err(e) = &dir_sync {
                // Renamed but not durably: say so rather than claim success.
                shared.fail_file(
                    f,
                    ErrorCode::Io,
                    format!("syncing the directory after the rename failed: {e}"),
                );
                continue;
            }
            shared.open_files().0.remove(&f.id);
            let _ = shared.ctl.send(&Message::FileCommitted {
                file_id: f.id,
                bytes: f.plan.size(),
                digest: job.digest,
                verified: f.verify,
                stored: f.engine.stores(),
            });
            let _ = shared.events.send(REvent::Done(FileOutcome {
                path: f.target.clone(),
                bytes: f.plan.size(),
                skipped: f.skipped.load(Ordering::Relaxed),
                seconds: f.started.elapsed().as_secs_f64(),
                engine: f.engine.name().into(),
                verified: f.verify,
                stored: f.engine.stores(),
                digest: job.digest,
                failure: None,
            }));
        }
        for (job, code, msg) in failed {
            shared.fail_file(&job.file, code, msg);
        }
        drop(cork);
        shared.usage.locked().add(&thread_usage().since(&u0));
    }
}

/// What a finished receiver role reports.
#[derive(Debug, Default)]
pub(crate) struct ReceiverTotals {
    pub(crate) files: u64,
    pub(crate) bytes: u64,
    pub(crate) entries: u64,
    pub(crate) failed: u64,
    pub(crate) peer: SideStats,
    pub(crate) usage: Usage,
}

/// Runs the receiving role until the sender's `Finish` and the stats exchange. `streams`
/// data streams are expected; each runs [`data_loop`] on a thread of the caller's. A protocol
/// error is sent to the peer as `Error{protocol}` before the role ends.
pub(crate) fn run(
    shared: Arc<RxShared>,
    events: mpsc::Receiver<REvent>,
    streams: u16,
    observer: &mut dyn Observer,
) -> Result<ReceiverTotals, SessionError> {
    let start = thread_usage();
    let (journal_tx, journal_rx) = mpsc::channel();
    *shared.journal.locked() = Some(journal_tx);
    let (commit_tx, commit_rx) = mpsc::channel::<CommitJob>();
    *shared.commit.locked() = Some(commit_tx);
    let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name.into())
            .spawn(f)
            .map_err(|source| SessionError::Io {
                what: "spawning a thread".into(),
                source,
            })
    };
    let journal = {
        let s = shared.clone();
        spawn(
            "zcp-journal",
            Box::new(move || journal_thread(s, journal_rx)),
        )?
    };
    let committer = {
        let s = shared.clone();
        spawn("zcp-commit", Box::new(move || commit_thread(s, commit_rx)))?
    };
    let mut totals = ReceiverTotals::default();
    let result = receive_loop(&shared, &events, streams, observer, &mut totals, start);
    if let Err(SessionError::Protocol { reason, .. }) = &result {
        // Say why before closing, so the peer does not only see a closed connection.
        shared.ctl.send_error(ErrorCode::Protocol, reason);
    }
    // Stop the helpers: no more journal or commit work once the loop ends.
    *shared.journal.locked() = None;
    *shared.commit.locked() = None;
    if result.is_err() {
        shared.close();
    }
    let _ = journal.join();
    let _ = committer.join();
    // What was not committed is dropped here: partial files without durable chunks are
    // removed, the others kept for a resume.
    let open: Vec<Arc<Incoming>> = shared.open_files().0.drain().map(|(_, f)| f).collect();
    for f in open {
        shared.abandon(&f);
    }
    shared.dirs.locked().clear();
    result.map(|()| totals)
}

/// The role's loop: control messages, finished files, stream ends, the stats exchange, and
/// the idle clock, which only progress restarts (bytes received, entries and chunks handled,
/// files finished) — never chatter such as `Notice`.
fn receive_loop(
    shared: &Arc<RxShared>,
    events: &mpsc::Receiver<REvent>,
    streams: u16,
    observer: &mut dyn Observer,
    totals: &mut ReceiverTotals,
    start: Usage,
) -> Result<(), SessionError> {
    let mut ended = 0u16;
    let mut last_alive = Instant::now();
    let mut last_bytes = 0u64;
    let mut last_tell = Instant::now();
    let mut queue = Batched::new(events, &shared.ctl);
    let mut h = Handler {
        shared,
        observer,
        totals,
        engines_told: false,
        finishing: false,
        stats_sent: false,
    };
    loop {
        let ev = match queue.next(Duration::from_millis(100)) {
            Ok(ev) => Some(ev),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Err(h.proto("the session's threads ended".into()));
            }
        };
        match ev {
            None => {}
            Some(REvent::Ctl(Ok(m))) => match h.message(m)? {
                Flow::Done => return Ok(()),
                Flow::Go { progress } => {
                    if progress {
                        last_alive = Instant::now();
                    }
                }
            },
            Some(REvent::Ctl(Err(e))) => return Err(e.into_session(shared.peer())),
            Some(REvent::Done(outcome)) => {
                last_alive = Instant::now();
                if outcome.failure.is_some() {
                    h.totals.failed += 1;
                } else {
                    h.totals.files += 1;
                    h.totals.bytes += outcome.bytes;
                }
                h.observer.file_done(outcome);
            }
            Some(REvent::StreamEnded { usage }) => {
                ended += 1;
                shared.usage.locked().add(&usage);
            }
            Some(REvent::StreamFailed { why }) => {
                h.observer.notice(None, Some(format!("data stream: {why}")));
            }
        }
        if h.finishing && !h.stats_sent && ended >= streams {
            send_stats(shared, h.totals, start)?;
            h.stats_sent = true;
        }
        h.observer.tick();
        let b = shared.bytes();
        if b != last_bytes {
            last_bytes = b;
            last_alive = Instant::now();
        }
        if last_tell.elapsed() >= Duration::from_secs(1) {
            last_tell = Instant::now();
            shared.tell_alive();
        }
        if last_alive.elapsed() > shared.cfg.idle {
            return Err(SessionError::Connection {
                peer: shared.peer().into(),
                reason: format!(
                    "no progress from {} for {} s",
                    shared.peer(),
                    shared.cfg.idle.as_secs()
                ),
            });
        }
    }
}

/// Our `Stats`, once every stream ended after the sender's `Finish`.
fn send_stats(
    shared: &RxShared,
    totals: &mut ReceiverTotals,
    start: Usage,
) -> Result<(), SessionError> {
    let mut usage = *shared.usage.locked();
    usage.add(&thread_usage().since(&start));
    totals.usage = usage;
    let stats = SideStats {
        cpu_user_us: usage.user.as_micros() as u64,
        cpu_sys_us: usage.sys.as_micros() as u64,
        max_rss_bytes: zcp_engine::sys::process_usage().max_rss_bytes,
        bytes: shared.bytes(),
        files: totals.files,
    };
    shared
        .ctl
        .send(&Message::Stats(stats))
        .map_err(|reason| SessionError::Connection {
            peer: shared.peer().into(),
            reason,
        })
}

/// Hashes a chunk's bytes, as the engine feeds them, into the chunk's MAC.
struct MacSink {
    hasher: blake3::Hasher,
    file: Arc<Incoming>,
    shared: Arc<RxShared>,
    index: u64,
}

impl ChunkSink for MacSink {
    fn bytes(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
    }

    fn seen_all(self: Box<Self>) {
        let o = self
            .file
            .hashed(self.index, *self.hasher.finalize().as_bytes());
        self.shared.outcome(&self.file, o);
    }
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` when the stream ended before the first.
fn read_header(s: &mut TcpStream, buf: &mut [u8]) -> Result<bool, String> {
    use std::io::Read;
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err("the data stream ended inside a chunk header".into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err("no data on the stream within the idle timeout".into());
            }
            Err(e) => return Err(format!("data stream: {e}")),
        }
    }
    Ok(true)
}

/// Receives one data stream until its end marker; reports the end to the role's loop.
pub(crate) fn data_loop(shared: Arc<RxShared>, mut sock: TcpStream, counter: Arc<AtomicU64>) {
    let usage0 = thread_usage();
    let _ = sock.set_read_timeout(Some(shared.cfg.idle));
    let _ = sock.set_write_timeout(Some(shared.cfg.idle));
    if let Ok(c) = sock.try_clone() {
        shared.socks.locked().push(c);
    }
    shared.counters.locked().push(counter.clone());
    if shared.closed.load(Ordering::Relaxed) {
        let _ = sock.shutdown(Shutdown::Both);
    }
    let mut rx = StreamReceiver::new(shared.cfg.block);
    let result = receive_chunks(&shared, &mut sock, &mut rx, &counter);
    let mut usage = Usage::default();
    match rx.finish() {
        Ok(u) => usage.add(&u),
        Err(e) => shared.fail_open_files(ErrorCode::Io, &e.to_string()),
    }
    if let Err((code, why)) = result {
        // A broken stream leaves chunks missing: fail what is open, so the sender hears at
        // once instead of at the idle timeout; and say why in the report and the log.
        shared.fail_open_files(code, &format!("data stream failed: {why}"));
        let _ = sock.shutdown(Shutdown::Both);
        if !shared.closed.load(Ordering::Relaxed) {
            let _ = shared.events.send(REvent::StreamFailed {
                why: format!("{why} [{}]", code.name()),
            });
        }
    }
    usage.add(&thread_usage().since(&usage0));
    let _ = shared.events.send(REvent::StreamEnded { usage });
}

fn receive_chunks(
    shared: &Arc<RxShared>,
    sock: &mut TcpStream,
    rx: &mut StreamReceiver,
    counter: &AtomicU64,
) -> Result<(), (ErrorCode, String)> {
    let proto = |m: String| (ErrorCode::Protocol, m);
    loop {
        let mut hb = [0u8; CHUNK_HEADER_LEN];
        if !read_header(sock, &mut hb).map_err(|m| (ErrorCode::Io, m))? {
            return Err((
                ErrorCode::Io,
                "the data stream closed before its end marker".into(),
            ));
        }
        let h = ChunkHeader::decode(&hb).map_err(|e| proto(e.to_string()))?;
        if h.kind == ChunkKind::End {
            return Ok(());
        }
        let f = match shared.lookup(h.file_id) {
            Lookup::Open(f) => Some(f),
            Lookup::Gone => None,
            Lookup::Unknown => return Err(proto(format!("chunk for unknown file {}", h.file_id))),
        };
        let r = if let Some(f) = f {
            receive_chunk(shared, rx, sock, &h, f, counter)
        } else {
            // The file was given up; its chunks still in flight are read and dropped.
            rx.receive(
                RecvEngine::Mem,
                None,
                sock.as_fd(),
                h.offset,
                h.len,
                None,
                counter,
                Box::new(|_| {}),
            )
            .map_err(|e| (ErrorCode::Io, e.to_string()))
        };
        r?;
    }
}

/// Moves one chunk of open file `f` from the stream into its file, with its MAC sink and its
/// completion (which verifies, journals or fails the file).
fn receive_chunk(
    shared: &Arc<RxShared>,
    rx: &mut StreamReceiver,
    sock: &TcpStream,
    h: &ChunkHeader,
    f: Arc<Incoming>,
    counter: &AtomicU64,
) -> Result<(), (ErrorCode, String)> {
    let proto = |m: String| (ErrorCode::Protocol, m);
    f.wait_open(shared.cfg.idle).map_err(proto)?;
    let index = f
        .plan
        .locate(h.offset, h.len)
        .map_err(|e| proto(e.to_string()))?;
    f.claim(index).map_err(proto)?;
    let done: Completion = {
        let (f, s) = (f.clone(), shared.clone());
        Box::new(move |r| {
            let failure = r.as_ref().err().map(|w| {
                let code = if w.no_space {
                    ErrorCode::NoSpace
                } else {
                    ErrorCode::Io
                };
                (code, w.message.clone())
            });
            let o = f.written(index, r);
            s.outcome(&f, o);
            if let Some((code, message)) = failure {
                // Tell the sender now: the chunk will never be verified.
                s.fail_file(&f, code, message);
            }
        })
    };
    let sink: Option<Sink> = if f.verify {
        Some(Box::new(MacSink {
            hasher: shared.keys.chunk_hasher(f.id, h.offset, h.len),
            file: f.clone(),
            shared: shared.clone(),
            index,
        }))
    } else {
        // The null engine never sees the bytes: nothing to hash.
        let o = f.hashed(index, [0; 32]);
        shared.outcome(&f, o);
        None
    };
    rx.receive(
        f.engine,
        f.target_fds.as_ref(),
        sock.as_fd(),
        h.offset,
        h.len,
        sink,
        counter,
        done,
    )
    .map_err(|e| {
        let code = if e.is_no_space() {
            ErrorCode::NoSpace
        } else {
            ErrorCode::Io
        };
        (code, e.to_string())
    })
}
