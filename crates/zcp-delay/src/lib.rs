//! The delay line's logic without I/O: a first-in first-out queue of frames, each released a
//! fixed time after it arrived, bounded in bytes (a frame that does not fit is dropped and
//! counted, as a full router queue would), and the counters the tool reports.
//!
//! The delay is the same for every frame of a direction, so arrival order is release order
//! and one queue per direction is the whole timer: no wheel is needed.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Frames taken in.
    pub frames_in: u64,
    /// Bytes taken in (frames as read, with their offload header).
    pub bytes_in: u64,
    /// Frames released to the far side.
    pub frames_out: u64,
    /// Frames dropped because the queue was full.
    pub dropped_full: u64,
    /// Frames dropped because they were larger than the read buffer.
    pub dropped_truncated: u64,
    /// Frames the far side refused when written (its queue full, too large for its MTU).
    pub send_errors: u64,
    /// The most bytes queued at once.
    pub peak_bytes: u64,
}

/// Frames waiting out their delay, oldest first.
#[derive(Debug)]
pub struct DelayQueue {
    delay: Duration,
    limit_bytes: u64,
    queued_bytes: u64,
    frames: VecDeque<(Instant, Box<[u8]>)>,
    /// What passed through so far.
    pub counters: Counters,
}

impl DelayQueue {
    /// A queue that holds each frame for `delay` and at most `limit_bytes` at once.
    pub fn new(delay: Duration, limit_bytes: u64) -> DelayQueue {
        DelayQueue {
            delay,
            limit_bytes,
            queued_bytes: 0,
            frames: VecDeque::new(),
            counters: Counters::default(),
        }
    }

    /// Takes in a frame that arrived at `now`; `false` (and counted) when it would overflow
    /// the queue.
    pub fn push(&mut self, now: Instant, frame: &[u8]) -> bool {
        let len = frame.len() as u64;
        self.counters.frames_in += 1;
        self.counters.bytes_in += len;
        if self.queued_bytes + len > self.limit_bytes {
            self.counters.dropped_full += 1;
            return false;
        }
        self.queued_bytes += len;
        self.counters.peak_bytes = self.counters.peak_bytes.max(self.queued_bytes);
        self.frames.push_back((now + self.delay, frame.into()));
        true
    }

    /// The oldest frame, if its delay has passed by `now`.
    pub fn pop_due(&mut self, now: Instant) -> Option<Box<[u8]>> {
        if self.frames.front()?.0 > now {
            return None;
        }
        let (_, f) = self.frames.pop_front()?;
        self.queued_bytes -= f.len() as u64;
        self.counters.frames_out += 1;
        Some(f)
    }

    /// How long from `now` until the oldest frame is due: `None` when the queue is empty,
    /// zero when it is already due.
    pub fn next_due(&self, now: Instant) -> Option<Duration> {
        self.frames
            .front()
            .map(|(due, _)| due.saturating_duration_since(now))
    }

    /// Frames waiting.
    pub fn len(&self) -> usize {
        self.frames.len()
    }

    /// Whether no frame is waiting.
    pub fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Bytes waiting.
    pub fn queued_bytes(&self) -> u64 {
        self.queued_bytes
    }
}

/// One line of the stats file for a direction, `key=value` pairs after its name.
pub fn stats_line(name: &str, c: &Counters, queued_bytes: u64, socket_drops: u64) -> String {
    format!(
        "{name} frames_in={} bytes_in={} frames_out={} dropped_full={} dropped_truncated={} send_errors={} socket_drops={socket_drops} queued_bytes={queued_bytes} peak_bytes={}",
        c.frames_in,
        c.bytes_in,
        c.frames_out,
        c.dropped_full,
        c.dropped_truncated,
        c.send_errors,
        c.peak_bytes
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn frames_leave_after_the_delay_in_order() {
        let t0 = Instant::now();
        let mut q = DelayQueue::new(10 * MS, 1 << 20);
        assert!(q.push(t0, b"one"));
        assert!(q.push(t0 + 3 * MS, b"two"));
        assert_eq!(q.next_due(t0), Some(10 * MS));
        assert_eq!(q.pop_due(t0 + 9 * MS), None, "not before its time");
        assert_eq!(q.pop_due(t0 + 10 * MS).as_deref(), Some(&b"one"[..]));
        assert_eq!(q.next_due(t0 + 10 * MS), Some(3 * MS));
        assert_eq!(q.pop_due(t0 + 12 * MS), None);
        assert_eq!(q.pop_due(t0 + 20 * MS).as_deref(), Some(&b"two"[..]));
        assert_eq!(q.next_due(t0 + 20 * MS), None);
        assert!(q.is_empty());
        assert_eq!(q.counters.frames_in, 2);
        assert_eq!(q.counters.frames_out, 2);
        assert_eq!(q.counters.bytes_in, 6);
    }

    #[test]
    fn a_late_reader_gets_everything_due_at_once() {
        let t0 = Instant::now();
        let mut q = DelayQueue::new(5 * MS, 1 << 20);
        for i in 0..10u8 {
            q.push(t0 + u32::from(i) * MS, &[i]);
        }
        assert_eq!(q.next_due(t0 + 100 * MS), Some(Duration::ZERO));
        let out: Vec<u8> = std::iter::from_fn(|| q.pop_due(t0 + 100 * MS))
            .map(|f| f[0])
            .collect();
        assert_eq!(out, (0..10).collect::<Vec<u8>>());
    }

    #[test]
    fn a_full_queue_drops_and_counts_and_takes_again_once_drained() {
        let t0 = Instant::now();
        let mut q = DelayQueue::new(MS, 10);
        assert!(q.push(t0, &[0; 6]));
        assert!(!q.push(t0, &[0; 5]), "6 + 5 bytes exceed 10");
        assert!(q.push(t0, &[0; 4]), "6 + 4 fit exactly");
        assert_eq!(q.queued_bytes(), 10);
        assert_eq!(q.counters.dropped_full, 1);
        assert_eq!(q.counters.peak_bytes, 10);
        assert!(q.pop_due(t0 + MS).is_some());
        assert_eq!(q.queued_bytes(), 4);
        assert!(q.push(t0 + MS, &[0; 5]));
        assert_eq!(q.len(), 2);
        assert_eq!(q.counters.frames_in, 4);
    }

    #[test]
    fn zero_delay_releases_at_once() {
        let t0 = Instant::now();
        let mut q = DelayQueue::new(Duration::ZERO, 100);
        q.push(t0, b"x");
        assert_eq!(q.next_due(t0), Some(Duration::ZERO));
        assert!(q.pop_due(t0).is_some());
    }

    #[test]
    fn the_stats_line_names_every_counter() {
        let c = Counters {
            frames_in: 5,
            bytes_in: 500,
            frames_out: 3,
            dropped_full: 1,
            dropped_truncated: 0,
            send_errors: 1,
            peak_bytes: 300,
        };
        assert_eq!(
            stats_line("a>b", &c, 100, 7),
            "a>b frames_in=5 bytes_in=500 frames_out=3 dropped_full=1 dropped_truncated=0 send_errors=1 socket_drops=7 queued_bytes=100 peak_bytes=300"
        );
    }
}
