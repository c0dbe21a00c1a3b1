//! Preparing and resuming a file, and the other entries: the file-system work the receiving
//! role asks for ([`super::frames::FsJob`]). Resolves names beneath the root one component at
//! a time (cached directory descriptors), opens the file's deterministic part file, reads its
//! journal, hashes an existing target of the same size, preallocates, and picks the engine
//! for the filesystem. Never follows a symlink; remembers which directories it created.

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zcp_engine::fs::{EntryKind, PartFile, Root};
use zcp_engine::recv::{Choice, Target, choose};
use zcp_engine::sync::Locked;
use zcp_engine::{EngineError, RecvEngine};
use zcp_wire::{
    ChunkPlan, ChunkProof, ErrorCode, ExistingMode, Message, Nonce, PutFile, RelPath, SessionKeys,
    escape,
};

use super::chunks::{Existing, FileSpec, JournalState};
use super::frames::{FsDone, FsJob, Offer, Prepared};
use super::state::Refusal;
use super::sync_choice::MadeIn;
use crate::confine::Act;
use crate::control::ControlWriter;
use crate::control::keepalive_every;

/// Directory descriptors kept open for the next entries.
const DIR_CACHE: usize = 256;
/// Below this size `auto` receives with `rw`: see [`Disk::prepare`].
const SMALL_FILE: u64 = 1 << 20;

/// A part file, with the descriptors the engines write it through: the file's own (held by
/// a data stream while it moves a chunk in) and, for `direct`, its O_DIRECT one (held by
/// every buffer queued for the disk).
#[derive(Debug)]
pub(crate) struct Slot {
    pub(crate) part: PartFile,
    file: Arc<OwnedFd>,
    direct: Option<Arc<OwnedFd>>,
}

impl std::ops::Deref for Slot {
    type Target = PartFile;
    fn deref(&self) -> &PartFile {
        &self.part
    }
}

impl std::ops::DerefMut for Slot {
    fn deref_mut(&mut self) -> &mut PartFile {
        &mut self.part
    }
}

/// The part files of the open files. Each sits in a slot of its own: the journal thread works
/// on it in place ([`Parts::with`]); the committer and a release take it out
/// ([`Parts::take`]), waiting for whoever is working on it.
#[derive(Debug, Default)]
pub(crate) struct Parts(Mutex<HashMap<u32, Arc<Mutex<Option<Slot>>>>>);

/// Where a part file is: its directory's components and its key.
type PartAt = (Vec<Vec<u8>>, String);

/// A part file kept for a resume and let go of, still locked until no write can land in it
/// any more: a data stream moving a chunk in holds the file's descriptor, and every buffer the
/// `direct` engine queued holds its O_DIRECT one. Unlocked earlier, a later transfer (of this
/// session or another) could open the same file and have a stale write land over chunks it
/// already made durable.
#[derive(Debug)]
struct Draining {
    slot: Slot,
    /// What a new open would name.
    at: PartAt,
}

impl Draining {
    /// No one but the slot (and the part file itself) holds a descriptor any more.
    fn settled(&self) -> bool {
        Arc::strong_count(&self.slot.file) == 2
            && self
                .slot
                .direct
                .as_ref()
                .is_none_or(|d| Arc::strong_count(d) == 1)
    }
}

impl Parts {
    fn insert(&self, id: u32, part: PartFile, direct: Option<Arc<OwnedFd>>) {
        let file = part.shared_fd();
        let slot = Slot { part, file, direct };
        self.0.locked().insert(id, Arc::new(Mutex::new(Some(slot))));
    }

    /// Runs `f` on the part file of `id`, if it is still there.
    pub(crate) fn with<T>(&self, id: u32, f: impl FnOnce(&mut PartFile) -> T) -> Option<T> {
        let slot = self.0.locked().get(&id).cloned()?;
        let mut g = slot.locked();
        g.as_mut().map(|s| f(&mut s.part))
    }

    /// Takes the part file of `id` out.
    pub(crate) fn take(&self, id: u32) -> Option<Slot> {
        let slot = self.0.locked().remove(&id)?;
        slot.locked().take()
    }
}

/// Where each open file's part file is, and the set of those places (a second open of one
/// is refused without scanning every open file).
#[derive(Debug, Default)]
struct Places {
    by_id: HashMap<u32, PartAt>,
    held: HashSet<PartAt>,
}

impl Places {
    fn insert(&mut self, id: u32, at: PartAt) {
        self.held.insert(at.clone());
        self.by_id.insert(id, at);
    }

    fn remove(&mut self, id: &u32) -> Option<PartAt> {
        let at = self.by_id.remove(id)?;
        self.held.remove(&at);
        Some(at)
    }
}

/// A directory beneath the root, open, with the filesystem it is on.
#[derive(Debug, Clone)]
pub(crate) struct Dir {
    pub(crate) fd: Arc<OwnedFd>,
    dev: u64,
}

/// The receiving role's file system: the root, directory and engine caches, the part files
/// of the open files.
pub(crate) struct Disk {
    /// How often hashing an existing target tells the sender it is alive.
    keepalive: Duration,
    /// The session's idle timeout: hashing whose keep-alives wait this long in all for a
    /// peer that does not read stops.
    idle: Duration,
    /// A pull: an existing file is offered in place only when its size and mtime are the
    /// announced ones, so a server learns nothing (not even a keyed MAC) of a file the user
    /// changed.
    pull: bool,
    /// The session verifies: only then is an existing target hashed and offered (with
    /// `--verify none` it is replaced without being read).
    verify: bool,
    /// A write-only identity's push: only a journal of its own sessions is resumed (another
    /// part file left there is emptied), and no existing target is hashed (it is replaced
    /// without being read).
    blind: bool,
    /// What to do with a regular file already at a destination (`--ignore-existing`,
    /// `--no-clobber`, `--backup`).
    pub(crate) existing: ExistingMode,
    pub(crate) root: Arc<Root>,
    keys: SessionKeys,
    nonces: (Nonce, Nonce),
    requested: RecvEngine,
    dirs: Mutex<HashMap<Vec<u8>, Dir>>,
    engines: Mutex<HashMap<u64, Choice>>,
    /// The part file of each open file that stores.
    pub(crate) parts: Parts,
    /// Part files let go of, kept, and still locked until their queued writes land.
    draining: Mutex<Vec<Draining>>,
    /// Where each open file's part file is (for [`Draining::at`]).
    places: Mutex<Places>,
    /// Directories made since the role last asked: a path's components and how many of its
    /// leading components were there already (every longer prefix was made). One entry per
    /// resolution, so a deep path costs its length once, not once per level.
    made: Mutex<Vec<(Vec<Vec<u8>>, usize)>>,
    /// The directories something was made in since the committer last synced them.
    unsynced_parents: Mutex<MadeIn>,
}

pub(crate) fn engine_err(e: EngineError) -> Refusal {
    // The process's descriptors, not this file: another try may find them free (and a
    // server sheds connections in their handshake to free them).
    if let Some(r) = Refusal::out_of_descriptors(&e) {
        return r;
    }
    match e {
        EngineError::NoSpace(m) => Refusal::new(
            ErrorCode::NoSpace,
            format!("no space for the destination: {m}"),
        ),
        EngineError::Path(m) => Refusal::new(ErrorCode::BadPath, format!("destination {m}")),
        EngineError::Busy(m) => Refusal::new(ErrorCode::Busy, m),
        other => Refusal::new(ErrorCode::Io, other.to_string()),
    }
}

/// Where an entry goes: its directory's components and its final name.
struct Placed {
    dir: Vec<Vec<u8>>,
    name: Vec<u8>,
}

fn display(dir: &[Vec<u8>], name: &[u8]) -> String {
    let mut p = dir.join(&b'/');
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    escape(&p)
}

impl Disk {
    pub(crate) fn new(
        root: Arc<Root>,
        keys: SessionKeys,
        nonces: (Nonce, Nonce),
        requested: RecvEngine,
        idle: Duration,
        (pull, verify, blind): (bool, bool, bool),
        existing: ExistingMode,
    ) -> Disk {
        Disk {
            pull,
            verify,
            blind,
            existing,
            root,
            keys,
            nonces,
            requested,
            keepalive: keepalive_every(idle),
            idle,
            dirs: Mutex::new(HashMap::new()),
            engines: Mutex::new(HashMap::new()),
            parts: Parts::default(),
            draining: Mutex::new(Vec::new()),
            places: Mutex::new(Places::default()),
            made: Mutex::new(Vec::new()),
            unsynced_parents: Mutex::new(MadeIn::default()),
        }
    }

    /// The directories something was made in since the last call, to sync (see
    /// [`Disk::give_back_parents`] when that fails).
    pub(crate) fn take_unsynced_parents(&self) -> MadeIn {
        std::mem::take(&mut *self.unsynced_parents.locked())
    }

    /// Parents taken but not synced: the next batch tries them again.
    pub(crate) fn give_back_parents(&self, parents: MadeIn) {
        self.unsynced_parents.locked().merge(parents);
    }

    /// Directories made since the last call, for the role's scope.
    pub(crate) fn take_made(&self) -> Vec<(Vec<Vec<u8>>, usize)> {
        std::mem::take(&mut *self.made.locked())
    }

    /// Lets the part file of `file` go; it removes itself unless `keep`. A kept one stays
    /// locked until no queued write can land in it ([`Draining`]); one removed is unlinked at
    /// once (a late write can only reach the unlinked file).
    pub(crate) fn release(&self, file: u32, keep: bool) {
        let at = self.places.locked().remove(&file);
        let Some(mut slot) = self.parts.take(file) else {
            return;
        };
        slot.part.set_keep(keep);
        if let (true, Some(at)) = (keep, at) {
            self.draining.locked().push(Draining { slot, at });
            self.reap();
        }
    }

    /// Takes the part file of `file` out for its commit.
    pub(crate) fn take(&self, file: u32) -> Option<PartFile> {
        self.places.locked().remove(&file);
        self.parts.take(file).map(|s| s.part)
    }

    /// Lets go of the drained part files: those no queued write holds any more.
    pub(crate) fn reap(&self) {
        self.draining.locked().retain(|d| !d.settled());
    }

    /// Waits, up to `limit`, until no part file of `at` is draining: `false` if one still is.
    fn drained(&self, at: &PartAt, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            self.reap();
            if !self.draining.locked().iter().any(|d| d.at == *at) {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Lets every part file go (the role ended), after [`Disk::release`] decided each, and
    /// waits up to `limit` for the kept ones to drain. One that does not (a write held by a
    /// stalled peer) stays open and locked, never reused while a write may still land.
    pub(crate) fn clear(&self, limit: Duration) {
        self.parts.0.locked().clear();
        self.dirs.locked().clear();
        let until = Instant::now() + limit;
        loop {
            self.reap();
            if self.draining.locked().is_empty() || Instant::now() >= until {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        for d in self.draining.locked().drain(..) {
            std::mem::forget(d);
        }
    }

    /// Does `job`. `ctl` carries keep-alives while an existing target is hashed.
    pub(crate) fn run(&self, job: FsJob, ctl: &ControlWriter) -> FsDone {
        match job {
            FsJob::Prepare { put, plan } => {
                let id = put.file_id;
                let shown = escape(&put.dest);
                FsDone::Prepared {
                    id,
                    shown,
                    result: self.prepare(put, plan, ctl),
                }
            }
            FsJob::MakeDir { raw, path } => {
                let result = self.dir(path.components(), true).map(|_| true);
                entry(raw, Act::Dir, path, result.map_err(engine_err))
            }
            FsJob::MakeLink {
                raw,
                path,
                target,
                guard,
            } => {
                let result = self.link(&path, &target, guard);
                entry(raw, Act::Link, path, result)
            }
            FsJob::Times {
                raw,
                path,
                mode,
                narrow,
                mtime,
            } => {
                // Permission bits only: the engine drops setuid, setgid and sticky.
                let result = self
                    .dir(path.components(), false)
                    .and_then(|d| zcp_engine::fs::set_mode_within(&*d.fd, mode, narrow, mtime))
                    .map(|()| true);
                entry(raw, Act::Times, path, result.map_err(engine_err))
            }
            FsJob::Reset { file, size, sparse } => FsDone::Reset {
                file,
                result: self.reset(file, size, sparse),
            },
        }
    }

    fn link(&self, p: &RelPath, target: &[u8], guard: bool) -> Result<bool, Refusal> {
        let (last, parent) = p.components().split_last().expect("not the root");
        let dir = self.dir(parent, true).map_err(engine_err)?;
        let there = zcp_engine::fs::entry_kind(&*dir.fd, last).map_err(engine_err)?;
        if guard && !matches!(there, EntryKind::Missing | EntryKind::Symlink) {
            // Only nothing, or a link, is replaced at a name the user asked for: never a file,
            // a directory, a FIFO or a socket of theirs.
            let what = match there {
                EntryKind::Dir => "directory",
                EntryKind::File => "file",
                _ => "FIFO, socket or device",
            };
            return Err(Refusal::new(
                ErrorCode::BadPath,
                format!(
                    "the server sent a link for '{p}', where your {what} '{p}' is; nothing of yours is replaced by a link of the server's choosing; refused, nothing written"
                ),
            ));
        }
        zcp_engine::fs::make_symlink(&*dir.fd, last, target).map_err(engine_err)
    }

    fn reset(&self, file: u32, size: u64, sparse: bool) -> Result<(), Refusal> {
        self.parts
            .with(file, |p| {
                p.reset()?;
                if sparse {
                    p.set_size(size)
                } else {
                    p.preallocate(size)
                }
            })
            .unwrap_or(Ok(()))
            .map_err(engine_err)
    }

    /// The directory `components` beneath the root, from the cache or resolved (and created
    /// when `create`), never through a symlink.
    pub(crate) fn dir(&self, components: &[Vec<u8>], create: bool) -> Result<Dir, EngineError> {
        let key = components.join(&b'/');
        if let Some(d) = self.dirs.locked().get(&key) {
            return Ok(d.clone());
        }
        let (fd, existed) = match self.root.open_dir_made(components, create) {
            Ok(opened) => opened,
            Err(e) => {
                // Some of the path may have been made before it failed: sync whatever of it
                // is there (syncing a directory that was there already costs only the sync).
                if create {
                    let all = components.len();
                    self.unsynced_parents.locked().add(key, 0, all);
                }
                return Err(e);
            }
        };
        if existed < components.len() {
            self.made.locked().push((components.to_vec(), existed));
            let made = components.len() - existed;
            self.unsynced_parents
                .locked()
                .add(key.clone(), existed, made);
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
        if let Some(c) = self.engines.locked().get(&dir.dev) {
            return Ok(c.clone());
        }
        let fs = zcp_engine::fs::fs_info(&*dir.fd)?;
        let mut c = choose(self.requested, dir.fd.as_fd(), &fs);
        if self.keys.encrypted() && c.engine == RecvEngine::Splice {
            // Decrypted, the bytes are in user memory: no socket to splice them from.
            c = Choice {
                engine: RecvEngine::ReadWrite,
                note: Some(
                    "encrypted: the bytes are decrypted in user memory, so they are written with rw, not spliced"
                        .into(),
                ),
            };
        }
        self.engines.locked().insert(dir.dev, c.clone());
        Ok(c)
    }

    /// Where an entry goes: its directory (resolved beneath the root) and its final name.
    fn place(&self, dest: &[u8], name: &[u8]) -> Result<Placed, Refusal> {
        let bad_path = |e: zcp_wire::PathError| Refusal::new(ErrorCode::BadPath, e.to_string());
        let dest = RelPath::parse(dest).map_err(bad_path)?;
        if !name.is_empty() {
            RelPath::check_name(name).map_err(bad_path)?;
        }
        // scp's rule for a lone file: a destination that is (or is spelled as) a directory
        // receives the file under the source's name; otherwise the destination is the file.
        if dest.names_directory() {
            if name.is_empty() {
                return Err(Refusal::new(
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
            let parent_dir = self.dir(parent, true).map_err(engine_err)?;
            if zcp_engine::fs::entry_kind(&*parent_dir.fd, last).map_err(engine_err)?
                == EntryKind::Dir
            {
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

    /// Resolves a `PutFile`'s place, checks what is there, picks the engine, and opens (or
    /// resumes) the file's part file ([`Disk::open_part`]).
    fn prepare(
        &self,
        p: PutFile,
        plan: ChunkPlan,
        ctl: &ControlWriter,
    ) -> Result<Prepared, Refusal> {
        let Placed { dir: comps, name } = self.place(&p.dest, &p.name)?;
        let target = display(&comps, &name);
        let spec = FileSpec {
            id: p.file_id,
            plan,
            engine: self.requested,
            mode: p.mode,
            mtime: (p.mtime_sec, p.mtime_nsec),
            name,
            target,
            io: None,
            sparse: p.sparse,
            existing: None,
        };
        if !self.requested.stores() {
            return Ok(Prepared {
                spec,
                journal: JournalState::default(),
                offers: Vec::new(),
                in_place: false,
                note: None,
                own_work: Duration::ZERO,
            });
        }
        let dir = self.dir(&comps, true).map_err(engine_err)?;
        let kind = zcp_engine::fs::entry_kind(&*dir.fd, &spec.name).map_err(engine_err)?;
        let t = &spec.target;
        let refused = |why: &str| {
            Err(Refusal::new(
                ErrorCode::BadPath,
                format!("destination '{t}' {why}"),
            ))
        };
        match kind {
            EntryKind::Missing | EntryKind::File => {}
            // A write-only identity learns that something is in the way, not what it is.
            _ if self.blind => {
                return refused("is in the way: something that is not a regular file is there");
            }
            EntryKind::Dir => return refused("is a directory"),
            EntryKind::Symlink => {
                return refused(
                    "is a symlink on the receiver; zcp never follows or replaces symlinks there",
                );
            }
            EntryKind::Other => return refused("is a device, FIFO or socket"),
        }
        let announced = super::existing::Announced {
            size: p.size,
            mtime: spec.mtime,
            target: t,
        };
        let at = (dir.fd.as_fd(), spec.name.as_slice(), kind);
        super::existing::answer(self.existing, at, &announced)?;
        let choice = if p.size < SMALL_FILE && self.requested == RecvEngine::Auto {
            // A small file is one short write: O_DIRECT's ring and splice's read-back cost
            // more in thread handoffs than they save, and the batched commit syncs it with its
            // neighbours. Nothing is probed or measured for it (on tmpfs, measuring the
            // engines takes a tenth of a second).
            Choice {
                engine: RecvEngine::ReadWrite,
                note: Some(format!(
                    "files under {} KiB are written with rw: one short write, synced with its neighbours",
                    SMALL_FILE >> 10
                )),
            }
        } else {
            self.engine_for(&dir).map_err(engine_err)?
        };
        let existing = kind == EntryKind::File;
        self.open_part(spec, (&dir, &comps), existing, choice, ctl)
    }

    /// Opens the file's part file (waiting while an earlier attempt's is still draining),
    /// reads its journal, offers an existing target of the same size, preallocates, and opens
    /// the O_DIRECT descriptor for `direct`.
    fn open_part(
        &self,
        mut spec: FileSpec,
        (dir, comps): (&Dir, &[Vec<u8>]),
        existing: bool,
        mut choice: Choice,
        ctl: &ControlWriter,
    ) -> Result<Prepared, Refusal> {
        let (id, plan, size) = (spec.id, spec.plan, spec.plan.size());
        let began = Instant::now();
        let key = zcp_engine::fs::part_key(&spec.name);
        let at = (comps.to_vec(), key.clone());
        if self.places.locked().held.contains(&at) {
            // This session holds it: waiting for its own lock would only stall the session.
            return Err(Refusal::new(
                ErrorCode::Busy,
                format!(
                    "'{}' is already being received in this session",
                    spec.target
                ),
            ));
        }
        if !self.drained(&at, zcp_engine::fs::LOCK_WAIT) {
            return Err(Refusal::new(
                ErrorCode::Busy,
                format!(
                    "'{}' is still being let go of by an earlier attempt; try again",
                    spec.target
                ),
            ));
        }
        let (mut part, existed) = PartFile::open(dir.fd.clone(), &key).map_err(engine_err)?;
        let mut journal = JournalState {
            kept: plan.count() >= 2,
            ..JournalState::default()
        };
        let mut offers = Vec::new();
        if existed {
            // A write-only identity resumes only what its own sessions wrote.
            let owner = self.blind.then(|| self.keys.journal_owner());
            offers = super::resume::resume(&mut part, &plan, &mut journal, size, owner)?;
        }
        // A target already there with the file's size: offer its chunks, hashed under this
        // session's key, as held. If the sender's source proves every one, no byte is sent and
        // the target is kept (mode and mtime set in place); any difference sends it whole.
        // Not in a session that does not verify: hashing the target is the cost it skips.
        let mut in_place = false;
        let mut blocked = Duration::ZERO;
        if offers.is_empty() && existing && size > 0 && self.verify && !self.blind {
            let h = self.hash_target(dir, &spec, ctl);
            blocked = h.blocked;
            if let Some((macs, inode)) = h.result {
                offers.push(Offer {
                    nonces: self.nonces,
                    old_file_id: id,
                    entries: macs,
                });
                in_place = true;
                spec.existing = Some(inode);
            }
        }
        if spec.sparse {
            // A sparse source: the size only. Its holes are never written, so they stay
            // holes here; a full filesystem fails the write that meets it.
            part.set_size(size).map_err(engine_err)?;
        } else if size >= SMALL_FILE && !in_place {
            // Claims the space now, so a full filesystem fails the file before any byte
            // moves. A small file skips it: on ext4 it costs more than the write (unwritten
            // extents to convert, a partial block zeroed), and a full disk still fails its
            // write at once.
            part.preallocate(size).map_err(engine_err)?;
        }
        let direct = match choice.engine {
            RecvEngine::Direct => match part.open_direct() {
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
            },
            _ => None,
        };
        spec.engine = choice.engine;
        spec.io = Some(Target {
            file: part.shared_fd(),
            direct: direct.clone(),
        });
        self.parts.insert(id, part, direct);
        self.places.locked().insert(id, at);
        Ok(Prepared {
            spec,
            journal,
            offers,
            in_place,
            note: choice.note,
            own_work: began.elapsed().saturating_sub(blocked),
        })
    }

    /// The chunk MACs of an existing target of exactly the plan's size, under this session's
    /// key and `file_id`, and the target's device and inode; no result when it is not such a
    /// file or cannot be read (then the file is simply sent). Tells the sender about once a
    /// second that the receiver is alive, as hashing a large target takes a while; a peer that
    /// leaves those keep-alives waiting an idle timeout in all stops the hashing, and the
    /// time they waited is not the receiver's own work.
    fn hash_target(&self, dir: &Dir, spec: &FileSpec, ctl: &ControlWriter) -> TargetHashed {
        let mut blocked = Duration::ZERO;
        let result = self.hash_target_blocked(dir, spec, ctl, &mut blocked);
        TargetHashed { result, blocked }
    }

    fn hash_target_blocked(
        &self,
        dir: &Dir,
        spec: &FileSpec,
        ctl: &ControlWriter,
        blocked: &mut Duration,
    ) -> Option<(TargetMacs, Existing)> {
        let (file_id, plan) = (spec.id, &spec.plan);
        let fd = zcp_engine::fs::open_at(&*dir.fd, &spec.name).ok()?;
        let meta = zcp_engine::fs::stat_fd(&fd).ok()?;
        // Kept in place, the target's inode gets the source's mode and mtime: never one with
        // other hard links (that would change a file elsewhere, perhaps outside the root).
        if !matches!(meta.kind, EntryKind::File) || meta.size != plan.size() || meta.nlink != 1 {
            return None;
        }
        if self.pull && meta.mtime != spec.mtime {
            return None;
        }
        let mut macs = Vec::with_capacity(plan.count() as usize);
        let mut told = Instant::now();
        for index in 0..plan.count() {
            let (offset, len) = plan.chunk(index);
            let mut hasher = self.keys.chunk_hasher(file_id, offset, len);
            // A sparse target's holes are hashed as zeros, never faulted into the cache.
            zcp_engine::sparse::visit(&fd, offset, len, |b| {
                hasher.update(b);
            })
            .ok()?;
            macs.push((index, hasher.finalize()));
            if told.elapsed() >= self.keepalive {
                // At once: this runs under the control loop's cork. A peer that is gone, or
                // that has left keep-alives waiting an idle timeout in all, stops the hashing.
                let sending = Instant::now();
                let sent = ctl.send_now(&Message::Progress {
                    file_id,
                    bytes: offset + len,
                });
                told = Instant::now();
                *blocked += told - sending;
                if sent.is_err() || *blocked >= self.idle {
                    return None;
                }
            }
        }
        let (fd, id) = (Arc::new(fd), meta.id);
        Some((macs, Existing { fd, id }))
    }
}

/// An existing target's chunk MACs, by index.
type TargetMacs = Vec<(u64, ChunkProof)>;

/// What [`Disk::hash_target`] found (the MACs, the file held open), and how long its
/// keep-alives waited for the peer.
struct TargetHashed {
    result: Option<(TargetMacs, Existing)>,
    blocked: Duration,
}

fn entry(raw: Vec<u8>, act: Act, path: RelPath, result: Result<bool, Refusal>) -> FsDone {
    FsDone::Entry {
        raw,
        act,
        path: Some(path),
        result,
    }
}
