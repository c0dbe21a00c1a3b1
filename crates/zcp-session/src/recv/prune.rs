//! `--delete` on the receiving side. While entries arrive, [`Mirror`] remembers every name
//! announced and every directory at or beneath a tree's top (`MakeDir{top}`). On the sender's
//! `Prune` the role checks that nothing is open and nothing failed in this session, then
//! [`run`] lists each of those directories and removes what was not announced, never:
//! - outside those directories (so never the root, nor a directory made to hold sources);
//! - a name zcp keeps for its own part files and journals;
//! - a name the session's filter excludes (an excluded file is not the sender's to delete);
//! - `NAME~` backups under `--backup`;
//! - through a link or onto another filesystem ([`zcp_engine::fs::remove_entry`]).
//!
//! Each removal is named to the sender (`Deleted`) and reported here; `Pruned{end}` counts them.

use std::collections::{HashMap, HashSet};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use zcp_engine::fs::{EntryKind, Root};
use zcp_wire::{DeleteMode, ErrorCode, Filter, Message, PruneCount, RelPath, escape};

use crate::confine::key_of;
use crate::control::ControlWriter;
use crate::event::{Failure, Observer};

/// Names a session remembers for `--delete` at most (about 40 bytes each); past this it
/// removes nothing and says so.
pub(crate) const MAX_MIRRORED: usize = 1 << 23;

fn joined(dir: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = dir.to_vec();
    if !p.is_empty() {
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

/// Bytes of directory paths a session remembers for `--delete` at most; past this (or
/// [`MAX_MIRRORED`] names) it removes nothing and says so.
pub(crate) const MAX_MIRRORED_DIR_BYTES: usize = 128 << 20;

/// What a receiving role remembers for `--delete`.
#[derive(Debug, Default)]
pub(crate) struct Mirror {
    mode: DeleteMode,
    filter: Arc<Filter>,
    /// `--backup`: `NAME~` files are the receiver's, not to be removed.
    backups: bool,
    /// A pull: a top is a requested name itself, never deeper.
    pull: bool,
    /// Every path announced (file, directory, link), by key.
    named: HashSet<[u8; 16]>,
    /// Each directory made at or beneath a top: its key, and how many components its top has.
    mirrored: HashMap<[u8; 16], usize>,
    /// Those directories' paths, in the order made, with their tops' depth; and their bytes.
    dirs: Vec<(Vec<u8>, usize)>,
    dir_bytes: usize,
    /// A directory `MakeDir` named and whose making is under way: `(path, top)`.
    pending: Option<(RelPath, bool)>,
    /// In a pull, requested names made as directories without `top`: the server's walk did
    /// not mark its trees, and nothing is removed.
    untopped: u64,
    /// More was announced than is remembered.
    over: bool,
    /// Failures this role reported: with any, nothing is removed.
    pub(crate) flaws: u64,
    /// The sender's `Prune` came.
    asked: bool,
}

/// The work a `Prune` asks for.
#[derive(Debug)]
pub(crate) struct PruneJob {
    dry_run: bool,
    filter: Arc<Filter>,
    backups: bool,
    named: HashSet<[u8; 16]>,
    dirs: Vec<(Vec<u8>, usize)>,
}

impl Mirror {
    pub(crate) fn new(mode: DeleteMode, filter: Arc<Filter>, backups: bool, pull: bool) -> Mirror {
        Mirror {
            mode,
            filter,
            backups,
            pull,
            ..Mirror::default()
        }
    }

    fn remember(&mut self, path: &[u8]) {
        if !self.mode.prunes() || self.over {
            return;
        }
        if self.named.len() >= MAX_MIRRORED {
            self.over = true;
            return;
        }
        self.named.insert(key_of(path));
    }

    /// A file or link announced at `path` (a file's `name`, if any, beneath it).
    pub(crate) fn name(&mut self, path: &RelPath, name: &[u8]) {
        let p = path.to_bytes();
        self.remember(&p);
        self.beneath_a_top(path);
        if !name.is_empty() {
            self.remember(&joined(&p, name));
        }
    }

    /// In a pull, an entry beneath a requested name that was not made as a tree's top (a
    /// file sent into it without its `MakeDir{top}`): the server's walk did not mark it, and
    /// nothing is removed (its stale entries would otherwise stay, unsaid).
    fn beneath_a_top(&mut self, path: &RelPath) {
        let comps = path.components();
        if self.pull && self.mode.prunes() && comps.len() > 1 {
            self.untopped += u64::from(!self.mirrored.contains_key(&key_of(&comps[0])));
        }
    }

    /// A directory announced (`top`: the sender marks it the top of a tree): its name is
    /// remembered now, the directory itself once it is made ([`Mirror::made_dir`]).
    pub(crate) fn dir(&mut self, path: &RelPath, top: bool) {
        self.remember(&path.to_bytes());
        if path.components().len() > 1 {
            self.beneath_a_top(path);
        }
        self.pending = self.mode.prunes().then(|| (path.clone(), top));
    }

    /// The directory last announced was made (`Some`), or was not (`None`): a made one at or
    /// beneath a top is pruned. In a pull a top is a requested name itself (a deeper one would
    /// move where the filters' anchored rules start); in a push a top beneath a top is not
    /// one of its own.
    pub(crate) fn made_dir(&mut self, made: Option<&RelPath>) {
        let Some((path, top)) = self.pending.take() else {
            return;
        };
        if made != Some(&path) || self.over {
            return;
        }
        let comps = path.components();
        let p = path.to_bytes();
        let parent = comps[..comps.len().saturating_sub(1)].join(&b'/');
        let inherited = self.mirrored.get(&key_of(&parent)).copied();
        let depth = match (inherited, top) {
            (Some(d), _) => Some(d),
            (None, true) if !self.pull || comps.len() == 1 => Some(comps.len()),
            (None, _) => {
                self.untopped += u64::from(self.pull && comps.len() == 1);
                None
            }
        };
        let Some(depth) = depth else {
            return;
        };
        if self.dir_bytes + p.len() > MAX_MIRRORED_DIR_BYTES {
            self.over = true;
            return;
        }
        if let std::collections::hash_map::Entry::Vacant(v) = self.mirrored.entry(key_of(&p)) {
            v.insert(depth);
            self.dir_bytes += p.len();
            self.dirs.push((p, depth));
        }
    }

    /// What `--delete` asked for.
    pub(crate) fn mode(&self) -> DeleteMode {
        self.mode
    }

    /// Whether the sender's `Prune` came.
    pub(crate) fn asked(&self) -> bool {
        self.asked
    }

    /// The sender's `Prune` came.
    pub(crate) fn ask(&mut self) {
        self.asked = true;
    }

    /// The pruning to carry out: what was announced, handed over (nothing more is mirrored).
    pub(crate) fn job(&mut self) -> PruneJob {
        self.mirrored = HashMap::new();
        PruneJob {
            dry_run: self.mode == DeleteMode::DryRun,
            filter: self.filter.clone(),
            backups: self.backups,
            named: std::mem::take(&mut self.named),
            dirs: std::mem::take(&mut self.dirs),
        }
    }

    /// Why nothing may be pruned, if so: files still `open`, or entries that failed.
    pub(crate) fn refusal(&self, open: bool) -> Option<String> {
        if open {
            return Some("files of this session were still open".into());
        }
        if self.flaws > 0 {
            return Some(format!(
                "{} entr{} of this session failed on the receiver",
                self.flaws,
                if self.flaws == 1 { "y" } else { "ies" }
            ));
        }
        if self.untopped > 0 {
            return Some("the server did not mark the directories asked for as trees".into());
        }
        self.over.then(|| {
            format!(
                "the session announced more than {MAX_MIRRORED} entries or {} MiB of directory \
                 paths; split the transfer",
                MAX_MIRRORED_DIR_BYTES >> 20
            )
        })
    }
}

/// Where a pruning reports: the observer, the sender, the clock.
pub(crate) struct PruneIo<'a> {
    pub(crate) root: &'a Root,
    pub(crate) ctl: &'a ControlWriter,
    pub(crate) observer: &'a mut dyn Observer,
    /// How often the sender hears that the pruning is alive.
    pub(crate) every: Duration,
}

/// A pruning under way: the job, its counts, and when the sender last heard.
struct Pruning<'a, 'b> {
    job: &'a PruneJob,
    io: &'a mut PruneIo<'b>,
    c: PruneCount,
    told: Instant,
    /// The connection broke or the role must stop: nothing more is removed.
    stopped: bool,
}

/// Carries out `job`: names each removal to the sender and the observer; returns the counts
/// for the closing `Pruned`. Stops early (what was removed stays removed) when the role must
/// stop or the connection broke.
pub(crate) fn run(job: &PruneJob, io: &mut PruneIo<'_>) -> PruneCount {
    let _cork = io.ctl.cork();
    let mut p = Pruning {
        job,
        io,
        c: PruneCount::default(),
        told: Instant::now(),
        stopped: false,
    };
    for (dir, depth) in &job.dirs {
        // A directory looked at is an entry looked at: many empty ones still say so.
        if !p.tick() {
            break;
        }
        let found = doomed_in(&mut p, dir, *depth);
        let (fd, doomed) = match found {
            Ok(found) => found,
            Err(e) => {
                p.not_deleted(dir, true, format!("its directory could not be pruned: {e}"));
                continue;
            }
        };
        for (name, kind) in doomed {
            if p.stopped {
                break;
            }
            match kind {
                Ok(is_dir) => p.remove(&fd, (dir, *depth), &name, is_dir),
                Err(e) => p.not_deleted(&joined(dir, &name), false, e),
            }
        }
    }
    p.c.end = true;
    p.c
}

impl Pruning<'_, '_> {
    /// Counts an entry looked at; tells the sender now and then; whether to go on.
    fn tick(&mut self) -> bool {
        self.c.scanned += 1;
        if self.told.elapsed() >= self.io.every {
            self.told = Instant::now();
            let alive = self
                .io
                .ctl
                .send_now(&Message::Pruned(self.c.clone()))
                .is_ok();
            self.stopped |= !alive || self.io.observer.stop().is_some();
        }
        !self.stopped
    }

    /// Removes `name` of directory `dir` (open at `fd`), or in a dry run walks it.
    fn remove(&mut self, fd: &OwnedFd, (dir, depth): (&[u8], usize), name: &[u8], is_dir: bool) {
        let path = joined(dir, name);
        let beneath = beneath_top(dir, depth);
        let (dry_run, job) = (self.job.dry_run, self.job);
        let mut guide = Guide {
            pruning: self,
            job,
            beneath,
        };
        let r = zcp_engine::fs::remove_entry(fd, name, &mut guide, dry_run);
        match r {
            // Gone since it was listed.
            Ok(r) if r.removed == 0 && r.kept == 0 => {}
            Ok(r) if r.kept == 0 => {
                self.c.deleted += 1;
                self.io.observer.deleted(escape(&path), is_dir, dry_run);
                let _ = self.io.ctl.send(&Message::Deleted {
                    path,
                    dir: is_dir,
                    failed: None,
                });
            }
            Ok(r) => {
                // Kept, with what it holds that is not to go: not a failure.
                self.c.failed += 1;
                let why = format!(
                    "kept: it holds {} entr{} that the filters, --backup or zcp's own files keep \
                     ({} other{} in it {})",
                    r.kept,
                    if r.kept == 1 { "y" } else { "ies" },
                    r.removed,
                    if r.removed == 1 { "" } else { "s" },
                    if dry_run {
                        "would be removed"
                    } else {
                        "removed"
                    }
                );
                let note = format!("{}: {why}", escape(&path));
                self.io.observer.notice(None, Some(note));
                let _ = self.io.ctl.send(&Message::Deleted {
                    path,
                    dir: is_dir,
                    failed: Some((ErrorCode::Exists, why)),
                });
            }
            Err(e) => self.not_deleted(&path, is_dir, e.to_string()),
        }
    }

    /// `path` could not be removed (or its directory pruned): counted, reported, named.
    fn not_deleted(&mut self, path: &[u8], dir: bool, e: String) {
        self.c.failed += 1;
        self.io.observer.notice(
            Some(Failure {
                path: escape(path),
                code: ErrorCode::Io.name(),
                message: format!("not deleted: {e}"),
            }),
            None,
        );
        let _ = self.io.ctl.send(&Message::Deleted {
            path: path.to_vec(),
            dir,
            failed: Some((ErrorCode::Io, e)),
        });
    }
}

/// What a removal keeps, beneath a doomed entry: what the session's rules keep anywhere.
struct Guide<'a, 'b, 'c> {
    pruning: &'a mut Pruning<'b, 'c>,
    job: &'b PruneJob,
    /// The doomed entry's directory's path beneath its top.
    beneath: Vec<u8>,
}

impl zcp_engine::fs::RemoveGuide for Guide<'_, '_, '_> {
    fn keep(&mut self, path: &[u8], dir: bool) -> bool {
        let name = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
        keeps(self.job, name, &joined(&self.beneath, path), dir)
    }

    fn go_on(&mut self) -> bool {
        self.pruning.tick()
    }
}

/// Whether the session's rules keep entry `name` (at `rel` beneath its top): zcp's own files,
/// `--backup`'s `NAME~`, what the filters exclude.
fn keeps(job: &PruneJob, name: &[u8], rel: &[u8], dir: bool) -> bool {
    zcp_engine::fs::is_reserved_name(name)
        || (job.backups && name.ends_with(b"~"))
        || job.filter.excludes(rel, dir)
}

/// Directory `dir`'s path beneath its top (`depth` components), empty for the top itself.
fn beneath_top(dir: &[u8], depth: usize) -> Vec<u8> {
    dir.split(|b| *b == b'/')
        .skip(depth)
        .collect::<Vec<_>>()
        .join(&b'/')
}

/// Entries of a directory to remove: each name, and whether it is a directory (or why it
/// could not be looked at).
type Doomed = Vec<(Vec<u8>, Result<bool, String>)>;

/// Directory `dir` opened beneath the root, and what in it is to go (sorted by name, each
/// with whether it is a directory).
fn doomed_in(
    p: &mut Pruning<'_, '_>,
    dir: &[u8],
    depth: usize,
) -> Result<(OwnedFd, Doomed), String> {
    let comps: Vec<Vec<u8>> = dir.split(|b| *b == b'/').map(<[u8]>::to_vec).collect();
    let fd =
        p.io.root
            .open_dir(&comps, false)
            .map_err(|e| e.to_string())?;
    let beneath = beneath_top(dir, depth);
    let mut doomed = Vec::new();
    for name in zcp_engine::fs::read_dir(&fd).map_err(|e| e.to_string())? {
        let name = name.map_err(|e| e.to_string())?;
        if !p.tick() {
            break;
        }
        if p.job.named.contains(&key_of(&joined(dir, &name))) {
            continue;
        }
        let kind = match zcp_engine::fs::entry_kind(&fd, &name) {
            Ok(kind) => kind,
            Err(e) => {
                doomed.push((name, Err(e.to_string())));
                continue;
            }
        };
        let is_dir = kind == EntryKind::Dir;
        if kind == EntryKind::Missing || keeps(p.job, &name, &joined(&beneath, &name), is_dir) {
            continue;
        }
        doomed.push((name, Ok(is_dir)));
    }
    doomed.sort_by(|a, b| a.0.cmp(&b.0));
    Ok((fd, doomed))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RelPath {
        RelPath::parse(s.as_bytes()).unwrap()
    }

    fn made(m: &mut Mirror, path: &str, top: bool) {
        m.dir(&p(path), top);
        m.made_dir(Some(&p(path)));
    }

    fn mirror(pull: bool) -> Mirror {
        Mirror::new(DeleteMode::Delete, Arc::default(), false, pull)
    }

    #[test]
    fn in_a_pull_a_top_is_a_requested_name_and_a_deeper_one_changes_nothing() {
        let mut m = mirror(true);
        made(&mut m, "app", true);
        // A "top" deeper down keeps the requested name's depth: the filters still start there.
        made(&mut m, "app/conf", true);
        m.name(&p("app/conf/f"), b"");
        assert_eq!(m.dirs, [(b"app".to_vec(), 1), (b"app/conf".to_vec(), 1)]);
        assert_eq!(m.refusal(false), None);
        // A requested name made as a directory without `top`: the walk did not mark it.
        let mut m = mirror(true);
        made(&mut m, "data", false);
        assert!(m.refusal(false).unwrap().contains("did not mark"));
        // A file sent into a requested name never made a top: the same.
        let mut m = mirror(true);
        m.name(&p("data/f"), b"");
        assert!(m.refusal(false).unwrap().contains("did not mark"));
    }

    #[test]
    fn in_a_push_a_top_beneath_a_top_is_part_of_the_first() {
        let mut m = mirror(false);
        made(&mut m, "dst", false);
        made(&mut m, "dst/t", true);
        made(&mut m, "dst/t/u", true);
        assert_eq!(m.dirs, [(b"dst/t".to_vec(), 2), (b"dst/t/u".to_vec(), 2)]);
    }

    #[test]
    fn a_directory_not_made_is_not_pruned_and_off_remembers_nothing() {
        let mut m = mirror(false);
        m.dir(&p("t"), true);
        m.made_dir(None);
        assert!(m.dirs.is_empty());
        let mut off = Mirror::new(DeleteMode::Off, Arc::default(), false, false);
        made(&mut off, "t", true);
        off.name(&p("t/f"), b"");
        assert!(off.dirs.is_empty() && off.named.is_empty());
    }

    #[test]
    fn past_the_bytes_of_directory_paths_it_removes_nothing() {
        let mut m = mirror(false);
        made(&mut m, "t", true);
        let long = "d".repeat(250);
        let mut path = String::from("t");
        let mut i = 0;
        while m.refusal(false).is_none() {
            // Paths of 4 KiB: a peer's cheapest way to spend the receiver's memory.
            if path.len() > 3800 {
                path = format!("t/{i}");
                made(&mut m, &path, false);
            }
            path = format!("{path}/{long}");
            made(&mut m, &path, false);
            i += 1;
            assert!(i < 200_000, "never over");
        }
        assert!(m.dir_bytes <= MAX_MIRRORED_DIR_BYTES);
        assert!(m.refusal(false).unwrap().contains("split the transfer"));
    }
}
