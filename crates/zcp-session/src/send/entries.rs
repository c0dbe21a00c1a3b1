//! Directories, links and directory times awaiting the receiver's answer. A file is counted
//! only when its commit proves it; these have no bytes to prove, so each counts only when the
//! receiver says it made it (`EntryDone`), never when it was sent. Every `MakeDir`,
//! `MakeLink` and `DirTimes` is answered, in the order sent, by `EntryDone` or `EntryFailed`;
//! an answer out of that order, or for nothing sent, is a protocol error, and whatever is
//! still unanswered when the receiver closes the session fails (class `verify`).
//!
//! The answers are a window: the walk (and the directories' times at the end) waits while
//! [`MAX_AWAITED`] entries or [`MAX_AWAITED_BYTES`] of their answers are outstanding. The
//! sender's loop may be writing, not reading, while the receiver answers; answers this few
//! always fit in the sender's socket buffer, so the receiver never blocks writing them while
//! the sender blocks writing to it. A receiver that stops answering holds no more than this.

use std::collections::{HashSet, VecDeque};

use zcp_engine::fs::Meta;

/// Entries sent and not yet answered, at most.
pub(crate) const MAX_AWAITED: usize = 1024;
/// Bytes their answers may take, at most, reckoned as the path and 256 bytes (a frame's
/// header, seal and a short `EntryFailed` message): within a socket's default receive buffer
/// (128 KiB), whatever the sender's loop is doing.
pub(crate) const MAX_AWAITED_BYTES: usize = 96 << 10;

/// What an answer for `path` is reckoned to take.
fn answer_cost(path: &[u8]) -> usize {
    path.len() + 256
}

/// What a path awaits an answer for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Awaited {
    Dir,
    Link,
    /// A directory's mode and times, sent at the end: not an entry of its own.
    Times,
}

impl Awaited {
    /// Whether an answer adds an entry to the count (a directory or a link).
    pub(crate) fn is_entry(self) -> bool {
        self != Awaited::Times
    }

    /// What it is, for a person.
    pub(crate) fn what(self) -> &'static str {
        match self {
            Awaited::Dir => "directory",
            Awaited::Link => "symlink",
            Awaited::Times => "directory's mode and times",
        }
    }
}

/// Directories that failed, remembered (up to this many) so that their times are not sent,
/// nor reported failing again.
const MAX_FAILED_DIRS: usize = 65_536;

/// The queue of entries awaiting an answer, oldest first; the directories whose times are
/// still to be sent.
#[derive(Debug, Default)]
pub(crate) struct Awaiting {
    queue: VecDeque<(Awaited, Vec<u8>)>,
    bytes: usize,
    failed_dirs: HashSet<Vec<u8>>,
    times: VecDeque<(Vec<u8>, Meta)>,
    times_taken: bool,
}

impl Awaiting {
    pub(crate) fn push(&mut self, what: Awaited, path: Vec<u8>) {
        self.bytes += answer_cost(&path);
        self.queue.push_back((what, path));
    }

    /// Whether the walk should wait for answers before it sends another directory or link.
    pub(crate) fn full(&self) -> bool {
        self.queue.len() >= MAX_AWAITED || self.bytes >= MAX_AWAITED_BYTES
    }

    /// The directories whose mode and times go out at the end (taken once; later calls
    /// change nothing).
    pub(crate) fn take_times(&mut self, dirs: Vec<(Vec<u8>, Meta)>) {
        if !self.times_taken {
            self.times_taken = true;
            self.times = dirs.into();
        }
    }

    /// The next directory's times to send, while the window has room; a directory that
    /// failed is passed over (its times could only fail too).
    pub(crate) fn next_times(&mut self) -> Option<(Vec<u8>, Meta)> {
        while !self.full() {
            let (path, meta) = self.times.pop_front()?;
            if self.failed_dirs.contains(&path) {
                continue;
            }
            self.push(Awaited::Times, path.clone());
            return Some((path, meta));
        }
        None
    }

    /// Whether the walk is over: its directories' times were taken.
    pub(crate) fn walk_over(&self) -> bool {
        self.times_taken
    }

    /// Whether every directory's times went out.
    pub(crate) fn times_sent(&self) -> bool {
        self.times_taken && self.times.is_empty()
    }

    /// The receiver answered for `path`: it must be the oldest entry awaiting one.
    pub(crate) fn answer(&mut self, path: &[u8]) -> Result<Awaited, String> {
        match self.queue.front() {
            Some((what, p)) if p == path => {
                let what = *what;
                self.bytes -= answer_cost(path);
                self.queue.pop_front();
                Ok(what)
            }
            Some((what, p)) => Err(format!(
                "an answer for '{}' where the {} '{}' was next",
                zcp_wire::escape(path),
                what.what(),
                zcp_wire::escape(p)
            )),
            None => Err(format!(
                "an answer for '{}', which awaited none",
                zcp_wire::escape(path)
            )),
        }
    }

    /// The receiver failed `what` at `path` (already answered): whether it is a failure of
    /// its own to report. A directory's times failing after the directory itself failed are
    /// not: the directory's failure said it.
    pub(crate) fn failed(&mut self, what: Awaited, path: &[u8]) -> bool {
        match what {
            Awaited::Dir => {
                if self.failed_dirs.len() < MAX_FAILED_DIRS {
                    self.failed_dirs.insert(path.to_vec());
                }
                true
            }
            Awaited::Times => !self.failed_dirs.contains(path),
            Awaited::Link => true,
        }
    }

    /// Everything still unanswered, oldest first.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (Awaited, Vec<u8>)> + '_ {
        self.bytes = 0;
        self.queue.drain(..)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_come_in_order_or_not_at_all() {
        let mut a = Awaiting::default();
        a.push(Awaited::Dir, b"d".to_vec());
        a.push(Awaited::Link, b"d/l".to_vec());
        a.push(Awaited::Times, b"d".to_vec());
        // Out of order: refused, and the queue is unchanged.
        let e = a.answer(b"d/l").unwrap_err();
        assert!(e.contains("the directory 'd' was next"), "{e}");
        assert_eq!(a.answer(b"d"), Ok(Awaited::Dir));
        assert_eq!(a.answer(b"d/l"), Ok(Awaited::Link));
        // The same path again answers its times.
        assert_eq!(a.answer(b"d"), Ok(Awaited::Times));
        let e = a.answer(b"d").unwrap_err();
        assert!(e.contains("awaited none"), "{e}");
        assert_eq!(a.drain().count(), 0);
    }

    #[test]
    fn a_name_from_the_peer_is_escaped_in_the_refusal() {
        let mut a = Awaiting::default();
        a.push(Awaited::Dir, b"d".to_vec());
        let e = a.answer(b"\x1b[2J").unwrap_err();
        assert!(!e.contains('\x1b'), "{e:?}");
    }

    #[test]
    fn a_failed_directorys_times_are_not_a_failure_of_their_own() {
        let mut a = Awaiting::default();
        assert!(a.failed(Awaited::Dir, b"d"));
        assert!(!a.failed(Awaited::Times, b"d"));
        assert!(a.failed(Awaited::Times, b"e"));
        assert!(a.failed(Awaited::Link, b"d"));
    }

    #[test]
    fn full_at_the_bounds_of_count_and_bytes() {
        let mut a = Awaiting::default();
        let mut n = 0;
        while !a.full() {
            a.push(Awaited::Dir, vec![b'd'; 1]);
            n += 1;
        }
        assert_eq!(n, MAX_AWAITED_BYTES.div_ceil(257).min(MAX_AWAITED));
        assert_eq!(a.answer(b"d"), Ok(Awaited::Dir));
        assert!(!a.full());
        assert_eq!(a.drain().count(), n - 1);
        assert!(!a.full());
        // Long paths fill it sooner.
        a.push(Awaited::Dir, vec![b'p'; MAX_AWAITED_BYTES]);
        assert!(a.full());
    }

    #[test]
    fn times_go_out_in_the_window_and_never_for_a_failed_directory() {
        let meta = Meta {
            kind: zcp_engine::fs::EntryKind::Dir,
            size: 0,
            mode: 0o755,
            mtime: (1, 0),
            ctime: (1, 0),
            id: (1, 1),
            nlink: 2,
            allocated: 0,
            other: "",
        };
        let mut a = Awaiting::default();
        assert!(a.failed(Awaited::Dir, b"bad"));
        a.take_times(vec![(b"ok".to_vec(), meta), (b"bad".to_vec(), meta)]);
        a.take_times(vec![(b"again".to_vec(), meta)]);
        assert_eq!(a.next_times().map(|t| t.0), Some(b"ok".to_vec()));
        assert!(a.next_times().is_none());
        assert!(a.times_sent());
        assert_eq!(a.answer(b"ok"), Ok(Awaited::Times));
    }
}
