//! How the committer makes a batch of files durable: one `syncfs`, or an `fsync` of each file
//! on a few threads.
//!
//! `syncfs` is one call for the whole batch and, where zcp's files are most of what the
//! filesystem has to write, the cheaper: 0.07–0.08 ms a file against 0.16–0.19 for the
//! `fsync`s (1,500 files of 4–64 KiB into ext4 on the project's VM). But it also waits for
//! every other dirty page on that filesystem: with 3 GB of another writer's data dirty, the
//! same batches took 1.2–1.4 ms a file with `syncfs` and 0.13–0.18 with the `fsync`s
//! (benches/results/2026-12-07-vm/commit-sync/). The first `syncfs` pays for the whole
//! backlog, so timing the two ways as they go cannot avoid it; the host's dirty page count
//! ([`zcp_engine::sys::dirty_bytes`], read before each batch) can. It is host-wide, so dirty
//! data on another filesystem also turns `syncfs` off, which costs at most the `fsync`s'
//! 0.1 ms a file. `ZCP_COMMIT_SYNC=syncfs` or `=each` in the receiver's environment fixes the
//! way instead ([`forced`]), for measurements and tests.

/// One of the two ways of making a batch durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Way {
    /// One `syncfs` of the destination's filesystem.
    Syncfs,
    /// `fsync` of each file, on up to [`FSYNC_THREADS`] threads.
    EachFile,
}

impl Way {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Way::Syncfs => "syncfs",
            Way::EachFile => "fsync of each file",
        }
    }
}

/// `fsync`s in flight at once for [`Way::EachFile`]: enough for the journal to commit many
/// together; each thread mostly waits on the disk.
pub(crate) const FSYNC_THREADS: usize = 8;

/// Dirty bytes beyond the batch's own that `syncfs` may wait for regardless of the batch's
/// size: at the 1–2 GB/s this VM's disk writes, 32 MiB is about what `fsync`s of a few
/// hundred files cost more than one `syncfs`.
const SLACK: u64 = 32 << 20;
/// And per file of the batch: each file's `fsync` costs about 0.1 ms more than its share of
/// a `syncfs`, the time to write back about 128 KiB more.
const PER_FILE: u64 = 128 << 10;

/// The way `ZCP_COMMIT_SYNC` fixes (`syncfs` or `each`), if any.
pub(crate) fn forced() -> Option<Way> {
    match std::env::var("ZCP_COMMIT_SYNC").as_deref() {
        Ok("syncfs") => Some(Way::Syncfs),
        Ok("each") => Some(Way::EachFile),
        _ => None,
    }
}

/// The way for a batch of `files` files holding `bytes` bytes, when the host has `dirty`
/// bytes dirty or under writeback (`None`: unknown, and `syncfs` is kept).
pub(crate) fn way(dirty: Option<u64>, files: usize, bytes: u64) -> Way {
    let Some(dirty) = dirty else {
        return Way::Syncfs;
    };
    let others = dirty.saturating_sub(bytes);
    if others > SLACK.saturating_add(PER_FILE.saturating_mul(files as u64)) {
        Way::EachFile
    } else {
        Way::Syncfs
    }
}

/// Bytes of paths the receiver remembers between two batches (each counted with 64 bytes of
/// its own keeping), at most, and directories made: past either, a batch syncs the whole
/// filesystem instead, so a client that makes many directories and commits no file cannot
/// grow the list, or the syncs a batch makes, without bound.
pub(crate) const MAX_MADE_BYTES: usize = 1 << 20;
pub(crate) const MAX_MADE_DIRS: usize = 4096;

/// The directories made since the committer last synced their parents: a new directory's name
/// is durable only once its parent is synced. Each as the path it was made for
/// (components joined by `/`, as the receiver's directory cache keys them) and how many of
/// its leading components were there already: one copy of the path, however deep, so a
/// deep path costs its length and not its length squared.
#[derive(Debug, Default)]
pub(crate) struct MadeIn {
    /// Each path, how many of its components were there already, how many were made.
    pub(crate) made: Vec<(Vec<u8>, usize, usize)>,
    bytes: usize,
    dirs: usize,
    /// More than [`MAX_MADE_BYTES`] were noted: the whole filesystem is to be synced instead.
    pub(crate) overflow: bool,
}

impl MadeIn {
    /// Notes `path`, of which `made` directories were made (its last ones).
    pub(crate) fn add(&mut self, path: Vec<u8>, existed: usize, made: usize) {
        if self.overflow {
            return;
        }
        let bytes = self.bytes + path.len() + 64;
        let dirs = self.dirs + made;
        if bytes > MAX_MADE_BYTES || dirs > MAX_MADE_DIRS {
            *self = MadeIn {
                overflow: true,
                ..MadeIn::default()
            };
            return;
        }
        (self.bytes, self.dirs) = (bytes, dirs);
        self.made.push((path, existed, made));
    }

    /// Takes back what a failed batch could not sync.
    pub(crate) fn merge(&mut self, other: MadeIn) {
        if other.overflow {
            *self = MadeIn {
                overflow: true,
                ..MadeIn::default()
            };
        }
        for (p, e, n) in other.made {
            self.add(p, e, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn made_in_is_bounded_and_overflows_into_a_whole_sync() {
        // By bytes: 4 KiB paths of one directory each.
        let mut m = MadeIn::default();
        let path = vec![b'a'; 4096];
        let fit = MAX_MADE_BYTES / (4096 + 64);
        for _ in 0..fit {
            m.add(path.clone(), 0, 1);
        }
        assert_eq!(m.made.len(), fit);
        assert!(!m.overflow);
        m.add(path.clone(), 0, 1);
        assert!(m.overflow && m.made.is_empty());
        m.add(b"c".to_vec(), 0, 1);
        assert!(m.made.is_empty(), "stays a whole sync until taken");
        // By directories: one deep path of 2047 made, then another.
        let mut m = MadeIn::default();
        m.add(b"deep".to_vec(), 0, 2047);
        m.add(b"deeper".to_vec(), 0, 2047);
        assert!(!m.overflow);
        m.add(b"x".to_vec(), 3, 3);
        assert!(m.overflow, "{} directories", 2047 * 2 + 3);
        // A failed batch's list comes back, overflow and all.
        let mut fresh = MadeIn::default();
        fresh.add(b"d".to_vec(), 0, 1);
        fresh.merge(m);
        assert!(fresh.overflow && fresh.made.is_empty());
        let mut a = MadeIn::default();
        a.add(b"e".to_vec(), 0, 1);
        let mut b = MadeIn::default();
        b.add(b"f/g".to_vec(), 1, 1);
        a.merge(b);
        assert_eq!(a.made, [(b"e".to_vec(), 0, 1), (b"f/g".to_vec(), 1, 1)]);
        assert_eq!(a.dirs, 2);
    }

    #[test]
    fn syncfs_while_the_batch_is_most_of_what_is_dirty() {
        assert_eq!(way(Some(0), 256, 8 * MIB), Way::Syncfs);
        // The batch's own bytes do not count against it.
        assert_eq!(way(Some(500 * MIB), 256, 480 * MIB), Way::Syncfs);
        assert_eq!(way(Some(30 * MIB), 2, MIB), Way::Syncfs);
        assert_eq!(way(None, 256, MIB), Way::Syncfs, "unknown: as before");
    }

    #[test]
    fn each_file_behind_other_writers_dirty_data() {
        assert_eq!(way(Some(3 << 30), 256, 8 * MIB), Way::EachFile);
        assert_eq!(way(Some(30 * MIB), 2, MIB), Way::Syncfs);
        assert_eq!(way(Some(60 * MIB), 2, MIB), Way::EachFile);
        // The threshold grows with the batch: 256 files allow 32 MiB more.
        assert_eq!(way(Some(60 * MIB), 256, MIB), Way::Syncfs);
        assert_eq!(way(Some(u64::MAX), usize::MAX, u64::MAX), Way::Syncfs);
        assert_eq!(way(Some(u64::MAX), usize::MAX, 0), Way::Syncfs);
    }
}
