//! Directories, links and directory times awaiting the receiver's answer. A file is counted
//! only when its commit proves it; these have no bytes to prove, so each counts only when the
//! receiver says it made it (`EntryDone`), never when it was sent. Every `MakeDir`,
//! `MakeLink` and `DirTimes` is answered, in the order sent, by `EntryDone` or `EntryFailed`;
//! an answer out of that order, or for nothing sent, is a protocol error, and whatever is
//! still unanswered when the receiver closes the session fails (class `verify`).

use std::collections::VecDeque;

/// Entries sent and not yet answered, at most, before the walk waits for answers: the
/// receiver makes them one after another as they come, so this is never reached by an honest
/// one, and a receiver that stops answering cannot make the sender hold a whole tree's paths.
pub(crate) const MAX_AWAITED: usize = 65_536;

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

/// The queue of entries awaiting an answer, oldest first.
#[derive(Debug, Default)]
pub(crate) struct Awaiting {
    queue: VecDeque<(Awaited, Vec<u8>)>,
}

impl Awaiting {
    pub(crate) fn push(&mut self, what: Awaited, path: Vec<u8>) {
        self.queue.push_back((what, path));
    }

    /// Whether the walk should wait for answers before it sends another directory or link.
    pub(crate) fn full(&self) -> bool {
        self.queue.len() >= MAX_AWAITED
    }

    /// The receiver answered for `path`: it must be the oldest entry awaiting one.
    pub(crate) fn answer(&mut self, path: &[u8]) -> Result<Awaited, String> {
        match self.queue.front() {
            Some((what, p)) if p == path => {
                let what = *what;
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

    /// Everything still unanswered, oldest first.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = (Awaited, Vec<u8>)> + '_ {
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
    fn full_at_the_bound() {
        let mut a = Awaiting::default();
        for i in 0..MAX_AWAITED {
            assert!(!a.full());
            a.push(Awaited::Dir, i.to_string().into_bytes());
        }
        assert!(a.full());
        assert_eq!(a.drain().count(), MAX_AWAITED);
        assert!(!a.full());
    }
}
