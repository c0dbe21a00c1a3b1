//! A UDP stream's sending rate, without I/O: the receiver's feedback and the sender's NAKs
//! go in with the time and the round trip, the rate comes out.
//!
//! `fair` runs in two phases.
//!
//! **Startup** begins at [`INITIAL`] (or the ceiling, if lower) and doubles once per round
//! trip (at least [`STARTUP_STEP`] apart) while the receiver takes at least 5/8 of the rate.
//! It ends when the queueing delay passes [`TARGET_QUEUE`] or the receiver takes less: the
//! rate becomes what the receiver delivers, the path's rate, measured. It does not end on
//! loss: random loss says nothing of the path's rate, and a filling queue delays first.
//!
//! **Steady**, with a target queueing delay of [`TARGET_QUEUE`] or half the path's round trip
//! if longer, and each cut at most once per round trip:
//! - queueing delay over the target: cut to 7/8 of what the receiver delivers (a queue
//!   builds: sending more only lengthens it) — unless the queue has not fallen below the
//!   target for [`STANDING_WINDOW`] or eight round trips, whichever is longer: then it is
//!   another flow's standing queue (a TCP flow that fills the buffer), and yielding to it
//!   would only starve this one;
//! - a loss while the queue is over half the target, or while the receiver takes less than
//!   3/4 of the rate (a shallow buffer overflowing; random loss of a few percent stays
//!   above): cut 1/8 (UDT's step), never below what the receiver delivers; a loss with an empty queue and full delivery is random (a bad
//!   link) and is only re-sent;
//! - otherwise grow by 1/32 per round trip, to at most twice what the receiver delivers.
//!
//! Receiver socket drops (`SO_RXQ_OVFL`) are flow control, not congestion: the rate is held
//! at what the receiver delivers, without a cut. `fixed`: the ceiling, always.

use std::time::{Duration, Instant};

use zcp_wire::udp::UdpMode;

/// The queueing delay `fair` mode aims below, microseconds: above it, it backs off.
pub(crate) const TARGET_QUEUE: u32 = 4_000;
/// A cut takes 1/CUT of the rate (UDT's step).
const CUT: u64 = 8;
/// Growth per round trip: 1/GROW of the rate.
const GROW: u64 = 32;
/// Lowest rate, bytes per second (1 Mbit/s).
pub(crate) const MIN_RATE: u64 = 125_000;
/// `fair`'s first rate, bytes per second (100 Mbit/s), doubled each round trip in startup.
pub(crate) const INITIAL: u64 = 100_000_000 / 8;

/// The ceiling without `--limit-rate`, over the session, bytes per second: `fixed` blasts at
/// 10 Gbit/s; `fair` finds the path's rate in startup, up to 100 Gbit/s.
pub(crate) fn uncapped(mode: UdpMode) -> u64 {
    match mode {
        UdpMode::Fixed => 10_000_000_000 / 8,
        UdpMode::Fair => 100_000_000_000 / 8,
    }
}

/// One stream's rate state.
#[derive(Debug, Clone)]
pub(crate) struct RateControl {
    mode: UdpMode,
    ceiling: u64,
    rate: u64,
    /// What the receiver delivers, bytes per second, averaged.
    delivered: u64,
    /// The least queueing delay over the last several round trips: when even that stands
    /// over the target, the queue is not this stream's (see `on_feedback`).
    standing: MinFilter,
    startup: bool,
    /// The last step that waits a round trip for its effect (a doubling or a cut).
    last_step: Option<Instant>,
    last_grow: Option<Instant>,
    cuts: u64,
    /// The queueing delay of the last feedback, microseconds.
    queue_us: u32,
    drops: u64,
    /// The least round trip seen: the path's own, without a queue.
    base_rtt: Option<Duration>,
}

impl RateControl {
    /// A stream's control, sending at most `ceiling` bytes per second.
    pub(crate) fn new(mode: UdpMode, ceiling: u64) -> RateControl {
        let ceiling = ceiling.max(MIN_RATE);
        let fair = mode == UdpMode::Fair;
        RateControl {
            mode,
            ceiling,
            rate: if fair { INITIAL.min(ceiling) } else { ceiling },
            delivered: 0,
            standing: MinFilter::default(),
            startup: fair,
            last_step: None,
            last_grow: None,
            cuts: 0,
            queue_us: 0,
            drops: 0,
            base_rtt: None,
        }
    }

    /// Bytes per second now.
    pub(crate) fn rate(&self) -> u64 {
        self.rate
    }

    /// Multiplicative cuts so far.
    pub(crate) fn cuts(&self) -> u64 {
        self.cuts
    }

    /// The queueing delay to stay below, microseconds: [`TARGET_QUEUE`], or half the path's
    /// round trip when that is longer (see the module's note on sharing).
    fn target(&self) -> u32 {
        let half = self.base_rtt.map_or(0, |r| r.as_micros() / 2);
        TARGET_QUEUE.max(half.min(u128::from(u32::MAX)) as u32)
    }

    /// Whether the last step is less than a round trip old (its effect not yet seen).
    fn waiting(&self, now: Instant, rtt: Duration) -> bool {
        self.last_step.is_some_and(|t| now.duration_since(t) < rtt)
    }

    /// Leaves startup at the rate the receiver delivers.
    fn end_startup(&mut self, now: Instant) {
        self.startup = false;
        self.last_step = Some(now);
        if self.delivered > 0 {
            self.rate = self.delivered.clamp(MIN_RATE, self.ceiling);
        }
    }

    /// The receiver NAKed datagrams it had not NAKed before: a loss.
    pub(crate) fn on_loss(&mut self, now: Instant, rtt: Duration) {
        if self.mode == UdpMode::Fixed {
            return;
        }
        if self.startup {
            // Startup ends on delay or on a full path, not on loss: random loss is no sign
            // of the path's rate, and what a full queue drops it delays first.
            return;
        }
        if self.waiting(now, rtt) {
            return;
        }
        // A loss with an empty queue, while the receiver takes nearly all that is sent, is
        // random (a bad link), not congestion: re-sent, not cut for. A queue that overflows
        // delays first; a shallow one that drops without delay shows as a delivery rate
        // below the sending rate.
        let queued = self.queue_us > self.target() / 2;
        let short = self.delivered < self.rate - self.rate / 4;
        if !queued && !short {
            return;
        }
        self.last_step = Some(now);
        self.cuts += 1;
        self.rate = (self.rate - self.rate / CUT)
            .max(self.delivered)
            .max(MIN_RATE);
    }

    /// The receiver's feedback at `now`: what it delivered (bytes per second), its socket's
    /// drops in total, and the mean queueing delay it saw (microseconds); `lossy`: a loss
    /// since the last feedback.
    pub(crate) fn on_feedback(&mut self, now: Instant, rtt: Duration, fb: Feedback) {
        // Averaged over about four feedbacks: one 5 ms figure swings both ways (a late
        // thread, a batch of GRO segments landing together).
        self.delivered = match self.delivered {
            0 => fb.delivered,
            d => d - d / 4 + fb.delivered / 4,
        }
        .min(self.ceiling);
        let dropped = fb.drops > self.drops;
        self.drops = self.drops.max(fb.drops);
        self.queue_us = fb.queue_us;
        self.base_rtt = Some(self.base_rtt.map_or(rtt, |b| b.min(rtt)));
        let target = self.target();
        if self.mode == UdpMode::Fixed {
            return;
        }
        if dropped {
            // Flow control: the receiver cannot take more than it delivers.
            self.rate = self.rate.min(self.delivered.max(MIN_RATE));
            self.startup = false;
            return;
        }
        if self.startup {
            // The fixed target, not the round trip's: a doubling overshoots for a round trip
            // before its feedback arrives.
            if fb.queue_us > TARGET_QUEUE {
                self.end_startup(now);
            } else if !self.waiting(now, rtt.max(STARTUP_STEP)) {
                if self.delivered >= self.rate / 8 * 5 {
                    self.last_step = Some(now);
                    self.rate = self.rate.saturating_mul(2).min(self.ceiling);
                } else if self.delivered > 0 {
                    // The path no longer carries what is sent: it is full.
                    self.end_startup(now);
                }
                // Nothing delivered yet: the sender had nothing to send (its first chunks
                // still being read); wait.
            }
            return;
        }
        let least =
            self.standing
                .update(now, (rtt * 8).max(STANDING_WINDOW), u64::from(fb.queue_us));
        let held = self.standing.full() && least > u64::from(target);
        if fb.queue_us > target && !held {
            if !self.waiting(now, rtt) {
                self.last_step = Some(now);
                let base = self.rate.min(self.delivered);
                self.rate = (base - base / CUT).max(MIN_RATE);
            }
        } else {
            // Also after a loss: under random loss there is one every round trip, and a
            // rate that grew only without loss would only fall.
            // 1/grow per round trip, in steps of the feedback interval.
            let since = self
                .last_grow
                .map_or(Duration::ZERO, |t| now.duration_since(t));
            let step =
                (self.rate / GROW) as u128 * since.min(rtt).as_micros() / rtt.as_micros().max(1);
            // Never more than twice what the receiver takes: a rate grown while there was
            // little to send would burst into the bottleneck's queue.
            let cap = self.delivered.saturating_mul(2).max(INITIAL);
            self.rate = (self.rate + step as u64 + MIN_RATE / 8)
                .min(cap.max(self.rate))
                .min(self.ceiling);
        }
        self.last_grow = Some(now);
    }
}

/// The least time between two doublings in startup: about four feedbacks, so the averaged
/// delivery rate shows the last one.
const STARTUP_STEP: Duration = Duration::from_millis(20);

/// The shortest window over which a queue that never drains below the target counts as
/// held by another flow.
const STANDING_WINDOW: Duration = Duration::from_millis(100);

/// The least of the values seen in the current window and the one before.
#[derive(Debug, Clone, Copy, Default)]
struct MinFilter {
    cur: Option<u64>,
    prev: Option<u64>,
    since: Option<Instant>,
}

impl MinFilter {
    fn pick(a: Option<u64>, b: u64) -> u64 {
        a.map_or(b, |a| a.min(b))
    }

    /// Takes `v` at `now`; returns the least over the last one to two windows.
    fn update(&mut self, now: Instant, window: Duration, v: u64) -> u64 {
        match self.since {
            Some(t) if now.duration_since(t) < window => {}
            _ => {
                self.prev = self.cur.take();
                self.since = Some(now);
            }
        }
        let cur = Self::pick(self.cur, v);
        self.cur = Some(cur);
        Self::pick(self.prev, cur)
    }

    /// Whether a whole window has passed (the value covers at least one).
    fn full(&self) -> bool {
        self.prev.is_some()
    }
}

/// One feedback from the receiver.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Feedback {
    /// Bytes per second the receiver took since its last feedback.
    pub(crate) delivered: u64,
    /// Its socket's drops so far.
    pub(crate) drops: u64,
    /// The least one-way delay of the interval above the least seen, microseconds.
    pub(crate) queue_us: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);
    const RTT: Duration = Duration::from_millis(10);

    fn fb(delivered: u64, queue_us: u32) -> Feedback {
        Feedback {
            delivered,
            drops: 0,
            queue_us,
        }
    }

    /// A fair control past startup at `rate`, delivering it, at time `t0`.
    fn steady(rate: u64, t0: Instant) -> RateControl {
        let mut r = RateControl::new(UdpMode::Fair, 10 * rate);
        r.startup = false;
        r.rate = rate;
        r.on_feedback(t0, RTT, fb(rate, 0));
        r
    }

    #[test]
    fn startup_doubles_per_round_trip_only_while_the_path_keeps_up() {
        let t0 = Instant::now();
        let mut r = RateControl::new(UdpMode::Fair, 1_000_000_000);
        assert_eq!(r.rate(), INITIAL);
        // Nothing delivered yet (the first chunks still being read): no doubling.
        r.on_feedback(t0, RTT, fb(0, 0));
        assert_eq!(r.rate(), INITIAL);
        r.on_feedback(t0 + 5 * MS, RTT, fb(INITIAL, 0));
        assert_eq!(r.rate(), 2 * INITIAL);
        // Within STARTUP_STEP of the doubling: wait for its effect.
        r.on_feedback(t0 + 10 * MS, RTT, fb(2 * INITIAL, 0));
        assert_eq!(r.rate(), 2 * INITIAL);
        r.on_feedback(t0 + 30 * MS, RTT, fb(2 * INITIAL, 0));
        assert_eq!(r.rate(), 4 * INITIAL);
        // A loss does not end startup.
        r.on_loss(t0 + 31 * MS, RTT);
        assert!(r.startup && r.cuts() == 0);
        // The receiver takes less than 5/8 of the rate: the path is full; the rate becomes
        // what it delivers (averaged).
        for i in 0..8 {
            r.on_feedback(t0 + (55 + i) * MS, RTT, fb(3 * INITIAL / 2, 0));
        }
        assert!(!r.startup);
        let d = r.rate();
        assert!(d < 2 * INITIAL && d > INITIAL, "{d}");
    }

    #[test]
    fn startup_ends_on_queueing_delay_at_what_is_delivered() {
        let t0 = Instant::now();
        let mut r = RateControl::new(UdpMode::Fair, 1_000_000_000);
        r.on_feedback(t0, RTT, fb(INITIAL, TARGET_QUEUE + 1));
        assert!(!r.startup);
        assert_eq!(r.rate(), INITIAL);
    }

    #[test]
    fn congestion_loss_cuts_an_eighth_once_per_round_trip_never_below_delivery() {
        let t0 = Instant::now();
        let mut r = steady(800_000_000, t0);
        // A loss with a queue over half the target (5 ms) is congestion.
        r.on_feedback(t0 + MS, RTT, fb(800_000_000, 2_501));
        r.on_loss(t0 + 2 * MS, RTT);
        assert_eq!(
            (r.rate(), r.cuts()),
            (800_000_000, 1),
            "floored at delivery"
        );
        r.rate = 1_000_000_000;
        r.on_loss(t0 + 5 * MS, RTT);
        assert_eq!((r.rate(), r.cuts()), (1_000_000_000, 1), "once per RTT");
        r.on_loss(t0 + 13 * MS, RTT);
        assert_eq!((r.rate(), r.cuts()), (875_000_000, 2));
    }

    #[test]
    fn random_loss_with_an_empty_queue_and_full_delivery_is_not_cut_for() {
        let t0 = Instant::now();
        let mut r = steady(800_000_000, t0);
        let before = r.rate();
        for i in 1..50u32 {
            r.on_loss(t0 + i * 5 * MS, RTT);
            // 5% random loss: the receiver takes 95% of what is sent.
            r.on_feedback(t0 + i * 5 * MS, RTT, fb(r.rate() / 20 * 19, 100));
        }
        assert_eq!(r.cuts(), 0);
        assert!(
            r.rate() > before,
            "it still grows: {} vs {before}",
            r.rate()
        );
        // Delivery well below the rate (a shallow buffer dropping): a cut.
        r.on_feedback(t0 + 300 * MS, RTT, fb(r.rate() / 4, 100));
        r.on_feedback(t0 + 305 * MS, RTT, fb(r.rate() / 4, 100));
        r.on_loss(t0 + 306 * MS, RTT);
        assert_eq!(r.cuts(), 1);
    }

    #[test]
    fn queueing_delay_cuts_below_delivery_and_growth_is_per_round_trip() {
        let t0 = Instant::now();
        let mut r = steady(1_000_000_000, t0);
        r.on_feedback(t0 + 20 * MS, RTT, fb(1_000_000_000, TARGET_QUEUE * 3));
        assert_eq!(r.rate(), 875_000_000);
        // Once per round trip.
        r.on_feedback(t0 + 25 * MS, RTT, fb(1_000_000_000, TARGET_QUEUE * 3));
        assert_eq!(r.rate(), 875_000_000);
        // No queue: 1/32 per round trip, in feedback steps.
        let mut t = t0 + 30 * MS;
        r.on_feedback(t, RTT, fb(875_000_000, 0));
        let start = r.rate();
        for _ in 0..2 {
            t += 5 * MS;
            r.on_feedback(t, RTT, fb(875_000_000, 0));
        }
        let grown = r.rate() - start;
        assert!(
            (start / 40..start / 25).contains(&grown),
            "{grown} of {start}"
        );
    }

    #[test]
    fn growth_stops_at_twice_what_is_delivered() {
        let t0 = Instant::now();
        let mut r = steady(400_000_000, t0);
        r.delivered = 200_000_000;
        let before = r.rate();
        for i in 1..400u32 {
            r.on_feedback(t0 + i * 5 * MS, RTT, fb(200_000_000, 0));
        }
        assert_eq!(r.rate(), before);
    }

    #[test]
    fn a_queue_that_never_drains_is_another_flows_and_not_yielded_to() {
        let t0 = Instant::now();
        let mut r = steady(500_000_000, t0);
        assert_eq!(r.target(), 5_000, "half the 10 ms round trip");
        let mut t = t0;
        let mut low = r.rate();
        for _ in 0..200 {
            t += 5 * MS;
            r.on_feedback(t, RTT, fb(r.rate(), 30_000));
            low = low.min(r.rate());
        }
        assert!(low < 500_000_000, "it yielded first");
        assert!(r.rate() > low * 2, "then grew: {} from {low}", r.rate());
    }

    #[test]
    fn the_target_is_half_a_long_round_trip() {
        let t0 = Instant::now();
        let mut r = steady(500_000_000, t0);
        r.on_feedback(t0 + MS, 50 * MS, fb(500_000_000, 0));
        assert_eq!(r.target(), 5_000, "base RTT is the least seen (10 ms)");
        let mut r = RateControl::new(UdpMode::Fair, 1 << 30);
        r.on_feedback(t0, 50 * MS, fb(0, 0));
        assert_eq!(r.target(), 25_000);
    }

    #[test]
    fn receiver_drops_hold_the_rate_at_delivery_without_a_cut() {
        let t0 = Instant::now();
        let mut r = steady(1_000_000_000, t0);
        let d = Feedback {
            delivered: 300_000_000,
            drops: 10,
            queue_us: 0,
        };
        r.on_feedback(t0 + MS, RTT, d);
        assert_eq!(r.cuts(), 0);
        assert!(r.rate() < 1_000_000_000, "{}", r.rate());
    }

    #[test]
    fn fixed_holds_the_ceiling() {
        let mut f = RateControl::new(UdpMode::Fixed, 1_000_000_000);
        f.on_loss(Instant::now(), MS);
        let d = Feedback {
            delivered: 1000,
            drops: 50,
            queue_us: TARGET_QUEUE * 10,
        };
        f.on_feedback(Instant::now(), RTT, d);
        assert_eq!((f.rate(), f.cuts()), (1_000_000_000, 0));
    }
}
