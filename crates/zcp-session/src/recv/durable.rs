//! Making durable and committing: the journal thread and the committer.
//!
//! The **journal thread** makes verified chunks durable in batches — one `fdatasync` of a
//! file and one append (and `fsync`) of its journal for many chunks — and only then do they
//! count as durable and get acknowledged. The **committer** commits finished files in
//! batches: one `syncfs` for many small files, or an `fsync` of each on a few threads where
//! other writers' dirty data would hold `syncfs` up ([`super::sync_choice`]), or an `fsync`
//! for a lone one; then the renames, then one `fsync` per directory, and one of each
//! directory a directory was made in since the last batch (so the new directory's name is
//! durable too). A file is renamed into place only after the role decided it
//! ([`super::state::Receiving::settle`]): every chunk verified and durable, digests equal.

use std::collections::HashSet;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use zcp_engine::fs::PartFile;
use zcp_engine::sync::Locked;
use zcp_engine::sys::thread_usage;
use zcp_engine::{EngineError, RecvEngine};
use zcp_wire::{ErrorCode, ExistingMode};

use super::RxCore;
use super::prepare::engine_err;
use super::state::{CommitJob, JournalJob, Refusal};
use super::sync_choice::{FSYNC_THREADS, MadeIn, Way};

/// Files committed together at most.
const COMMIT_BATCH: usize = 256;
/// Verified chunks made durable together at most.
const JOURNAL_BATCH: usize = 1024;

/// Makes verified chunks durable in batches, then tells the role.
pub(crate) fn journal_thread(core: Arc<RxCore>, rx: mpsc::Receiver<JournalJob>) {
    while let Ok(first) = rx.recv() {
        let u0 = thread_usage();
        let mut batch = vec![first];
        while batch.len() < JOURNAL_BATCH {
            match rx.try_recv() {
                Ok(x) => batch.push(x),
                Err(_) => break,
            }
        }
        // One sync and one append per file, its jobs in the order they came.
        let mut groups: Vec<Vec<JournalJob>> = Vec::new();
        for job in batch {
            match groups.iter_mut().find(|g| g[0].file == job.file) {
                Some(g) => g.push(job),
                None => groups.push(vec![job]),
            }
        }
        let _cork = core.ctl.cork();
        for group in groups {
            let file = group[0].file;
            let indexes: Vec<u64> = group.iter().map(|j| j.index).collect();
            // A file given up meanwhile has nothing to make durable.
            let Some(r) = core.disk.parts.with(file, |p| append(p, &group)) else {
                continue;
            };
            let r = r.map_err(engine_err);
            core.apply(|st, now| st.journaled(file, &indexes, r, now));
        }
        core.usage.locked().add(&thread_usage().since(&u0));
    }
}

fn append(part: &mut PartFile, jobs: &[JournalJob]) -> Result<(), EngineError> {
    part.sync_data()?;
    let mut records = Vec::new();
    for j in jobs {
        if let Some(h) = &j.start {
            part.start_journal(&h.encode())?;
            records.clear();
        }
        records.extend_from_slice(&j.records);
    }
    if records.is_empty() {
        // Unverified chunks (`--verify none`): synced, never journaled.
        return Ok(());
    }
    part.append_journal(&records)
}

/// A file on its way through one commit batch.
struct Step {
    job: CommitJob,
    /// Its part file, to sync and rename; `None` when nothing is renamed (kept in place, or
    /// an engine that stores nothing).
    part: Option<PartFile>,
}

/// Commits finished files in batches.
pub(crate) fn commit_thread(core: Arc<RxCore>, rx: mpsc::Receiver<CommitJob>) {
    let forced = super::sync_choice::forced();
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
        let (done, failed) = commit(&core, batch, forced);
        let _cork = core.ctl.cork();
        for (job, r) in done.into_iter().chain(failed) {
            let (id, digest) = (job.spec.id, job.digest);
            core.apply(|st, now| st.committed(id, digest, r, now));
        }
        core.usage.locked().add(&thread_usage().since(&u0));
    }
    // The session is over: directories made since the last batch (or in a session cut short
    // before any) are synced into their parents too, so the next run finds their names
    // durable when it takes them as there already.
    let rest = core.disk.take_unsynced_parents();
    if let Err(e) = sync_parents(&core, &rest) {
        tracing::debug!(error = %e, "syncing the directories made at the session's end");
    }
}

type Decided = Vec<(CommitJob, Result<(), Refusal>)>;

/// One batch: final metadata, one sync for all (`forced`: the way `ZCP_COMMIT_SYNC` fixed),
/// the renames, each directory synced once, and each directory a directory was made in since
/// the last batch. Returns what committed and what failed, each with its result.
fn commit(core: &RxCore, batch: Vec<CommitJob>, forced: Option<Way>) -> (Decided, Decided) {
    let mut steps: Vec<Step> = Vec::new();
    let mut failed: Decided = Vec::new();
    for job in batch {
        let part = core.disk.take(job.spec.id);
        match finalize(&job, part) {
            Ok(part) => steps.push(Step { job, part }),
            Err(r) => failed.push((job, Err(r))),
        }
    }
    // What the batch makes durable: each part file, and each target kept in place (its new
    // mode and mtime).
    let fds: Vec<BorrowedFd<'_>> = steps
        .iter()
        .filter_map(|s| match &s.part {
            Some(p) => Some(p.fd()),
            None if s.job.in_place => s.job.spec.existing.as_ref().map(|e| e.fd.as_fd()),
            None => None,
        })
        .collect();
    let storing = fds.len();
    let began = Instant::now();
    let (synced, way) = match storing {
        0 => (Ok(()), "none"),
        1 => (zcp_engine::fs::fsync_each(&fds, 1), "fsync"),
        _ => {
            let bytes = steps
                .iter()
                .filter(|s| s.part.is_some())
                .map(|s| s.job.spec.plan.size())
                .sum();
            let way = forced.unwrap_or_else(|| {
                super::sync_choice::way(zcp_engine::sys::dirty_bytes(), storing, bytes)
            });
            let r = match way {
                Way::Syncfs => zcp_engine::fs::syncfs(core.disk.root.fd()),
                Way::EachFile => zcp_engine::fs::fsync_each(&fds, FSYNC_THREADS),
            };
            (r, way.name())
        }
    };
    drop(fds);
    if let Err(e) = synced {
        let r = engine_err(e);
        for s in steps.drain(..) {
            let why = Refusal::new(r.code, format!("commit failed: {}", r.message));
            failed.push((s.job, Err(why)));
        }
    }
    // Each directory once (files of one directory share its descriptor).
    let mut dirs: Vec<Arc<OwnedFd>> = Vec::new();
    let mut renamed: Vec<CommitJob> = Vec::new();
    for s in steps {
        let Some(part) = s.part else {
            renamed.push(s.job);
            continue;
        };
        let dir = part.dir().clone();
        // `--backup`: the file it replaces is kept beside it as NAME~, first.
        if core.disk.existing == ExistingMode::Backup
            && let Err(e) = zcp_engine::fs::keep_as_backup(&*dir, &s.job.spec.name)
        {
            let r = engine_err(e);
            let why = Refusal::new(r.code, format!("backup failed: {}", r.message));
            failed.push((s.job, Err(why)));
            continue;
        }
        // Asked never to replace a file (`--ignore-existing`, `--no-clobber`): one that
        // appeared since the file was prepared is not replaced either.
        let renamed_new = match core.disk.existing {
            ExistingMode::Ignore | ExistingMode::Fail => part.rename_to_new(&s.job.spec.name),
            _ => part.rename_to(&s.job.spec.name).map(|()| true),
        };
        match renamed_new {
            Ok(false) => {
                let why = super::existing::appeared(core.disk.existing, &s.job.spec.target);
                failed.push((s.job, Err(why)));
            }
            Ok(true) => {
                if !dirs.iter().any(|d| Arc::ptr_eq(d, &dir)) {
                    dirs.push(dir);
                }
                renamed.push(s.job);
            }
            Err(e) => {
                let r = engine_err(e);
                let why = Refusal::new(r.code, format!("rename failed: {}", r.message));
                failed.push((s.job, Err(why)));
            }
        }
    }
    let synced_at = Instant::now();
    // Each directory's renames, then the names of the directories made since the last batch
    // (in their parents), which a syncfs covers but an fsync of each file does not.
    let made_in = core.disk.take_unsynced_parents();
    let dir_sync = dirs
        .iter()
        .try_for_each(|d| zcp_engine::fs::fsync_dir(&**d))
        .and_then(|()| sync_parents(core, &made_in));
    let parents = match &dir_sync {
        Ok(n) => *n,
        Err(_) => {
            core.disk.give_back_parents(made_in);
            0
        }
    };
    tracing::debug!(
        files = storing,
        how = way,
        sync_ms = (synced_at - began).as_secs_f64() * 1e3,
        rename_ms = synced_at.elapsed().as_secs_f64() * 1e3,
        dirs = dirs.len(),
        parents,
        "commit batch"
    );
    let done = renamed
        .into_iter()
        .map(|job| {
            // Renamed but not durably: say so rather than claim success.
            let r = dir_sync.as_ref().map_err(|e| {
                let why = format!("syncing the directory after the rename failed: {e}");
                Refusal::new(ErrorCode::Io, why)
            });
            (job, r.map(drop))
        })
        .collect();
    (done, failed)
}

/// Syncs each directory something in `made_in` was made in, once, or the whole filesystem
/// when there were too many to remember; returns how many directories.
fn sync_parents(core: &RxCore, made_in: &MadeIn) -> Result<usize, EngineError> {
    if made_in.overflow {
        tracing::debug!("too many directories made since the last batch: syncfs instead");
        zcp_engine::fs::syncfs(core.disk.root.fd())?;
        return Ok(0);
    }
    let mut seen = HashSet::new();
    for (path, existed, _) in &made_in.made {
        let components: Vec<Vec<u8>> = path.split(|b| *b == b'/').map(<[u8]>::to_vec).collect();
        core.disk
            .root
            .sync_made_in(&components, *existed, &mut seen)?;
    }
    Ok(seen.len())
}

/// The file's final metadata, before the batch's sync: the part file gets size, mode and
/// mtime; a target kept in place gets the mode and mtime and the part file is dropped.
fn finalize(job: &CommitJob, part: Option<PartFile>) -> Result<Option<PartFile>, Refusal> {
    let Some(mut part) = part else {
        return Ok(None);
    };
    let spec = &job.spec;
    if job.in_place {
        // The target holds exactly these bytes already: keep it, give it the source's mode
        // and mtime, and drop the part file.
        part.set_keep(false);
        let named = zcp_engine::fs::stat_at(&**part.dir(), &spec.name).map_err(engine_err)?;
        drop(part);
        let Some(existing) = &spec.existing else {
            return Err(Refusal::new(
                ErrorCode::Io,
                format!("'{}' was never hashed; left as it was", spec.target),
            ));
        };
        let fd = &*existing.fd;
        // Offered only with one link; one made since would carry the change elsewhere, and
        // another file put under the name since is not the one whose chunks were proved.
        let meta = zcp_engine::fs::stat_fd(fd).map_err(engine_err)?;
        if named.id != meta.id || meta.size != spec.plan.size() {
            return Err(Refusal::new(
                ErrorCode::Io,
                format!(
                    "'{}' was replaced on the receiver during the transfer; left as it was",
                    spec.target
                ),
            ));
        }
        if meta.nlink != 1 {
            return Err(Refusal::new(
                ErrorCode::Io,
                format!(
                    "'{}' gained another hard link during the transfer; left as it was",
                    spec.target
                ),
            ));
        }
        return zcp_engine::fs::set_mode_and_mtime(fd, spec.mode & 0o777, spec.mtime)
            .map(|()| None)
            .map_err(engine_err);
    }
    let direct = spec.engine == RecvEngine::Direct;
    part.set_final_metadata(spec.plan.size(), spec.mode, spec.mtime, direct)
        .map(|()| Some(part))
        .map_err(engine_err)
}
