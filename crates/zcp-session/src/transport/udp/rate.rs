//! A UDP stream's sending rate, without I/O: the receiver's feedback and the sender's NAKs
//! go in with the time, the rate comes out.
//!
//! `fair`: start at the ceiling; on loss, cut by 1/8 (UDT's step) at most once per round
//! trip, never below what the receiver delivers; when the receiver's socket drops datagrams
//! (`SO_RXQ_OVFL`: flow control, not congestion) hold the rate at what it delivers, without
//! counting a cut; when the one-way delay stands above its minimum by more than
//! [`TARGET_QUEUE`] (a queue is building at a bottleneck), back off in proportion; otherwise
//! grow by 1/32 per feedback. `fixed`: the ceiling, always.

use std::time::{Duration, Instant};

use zcp_wire::udp::UdpMode;

/// The queueing delay `fair` mode aims for, microseconds: above it, it backs off.
pub(crate) const TARGET_QUEUE: u32 = 4_000;
/// Lowest rate, bytes per second (1 Mbit/s).
pub(crate) const MIN_RATE: u64 = 125_000;
/// The start without a cap: 10 Gbit/s over the session, bytes per second.
pub(crate) const START: u64 = 10_000_000_000 / 8;

/// One stream's rate state.
#[derive(Debug, Clone)]
pub(crate) struct RateControl {
    mode: UdpMode,
    ceiling: u64,
    rate: u64,
    delivered: u64,
    last_cut: Option<Instant>,
    cuts: u64,
    drops: u64,
}

impl RateControl {
    /// A stream's control, sending at most `ceiling` bytes per second.
    pub(crate) fn new(mode: UdpMode, ceiling: u64) -> RateControl {
        let ceiling = ceiling.max(MIN_RATE);
        RateControl {
            mode,
            ceiling,
            rate: ceiling,
            delivered: 0,
            last_cut: None,
            cuts: 0,
            drops: 0,
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

    /// The receiver NAKed datagrams it had not NAKed before: a loss.
    pub(crate) fn on_loss(&mut self, now: Instant, rtt: Duration) {
        if self.mode == UdpMode::Fixed {
            return;
        }
        if self.last_cut.is_some_and(|t| now.duration_since(t) < rtt) {
            return;
        }
        self.last_cut = Some(now);
        self.cuts += 1;
        self.rate = (self.rate - self.rate / 8)
            .max(self.delivered)
            .max(MIN_RATE);
    }

    /// The receiver's feedback: what it delivered (bytes per second), its socket's drops in
    /// total, and the mean queueing delay it saw (microseconds); `lossy`: a loss since the
    /// last feedback.
    pub(crate) fn on_feedback(&mut self, delivered: u64, drops: u64, queue_us: u32, lossy: bool) {
        self.delivered = delivered.min(self.ceiling);
        let dropped = drops > self.drops;
        self.drops = self.drops.max(drops);
        if self.mode == UdpMode::Fixed {
            return;
        }
        if dropped {
            // Flow control: the receiver cannot take more than it delivers.
            self.rate = self.rate.min(self.delivered.max(MIN_RATE));
        } else if queue_us > TARGET_QUEUE {
            // Queueing delay over the target: back off in proportion to the excess, by at
            // most a quarter per feedback.
            let excess = u64::from(queue_us - TARGET_QUEUE);
            let step = (self.rate / 4).min(self.rate * excess / (u64::from(TARGET_QUEUE) * 8));
            self.rate = (self.rate - step).max(MIN_RATE);
        } else if !lossy {
            self.rate = (self.rate + self.rate / 32 + MIN_RATE).min(self.ceiling);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_loss_cuts_an_eighth_once_per_round_trip_and_never_below_delivery() {
        let t0 = Instant::now();
        let mut r = RateControl::new(UdpMode::Fair, 800_000_000);
        r.on_loss(t0, 10 * MS);
        assert_eq!(r.rate(), 700_000_000);
        r.on_loss(t0 + 5 * MS, 10 * MS);
        assert_eq!((r.rate(), r.cuts()), (700_000_000, 1), "once per RTT");
        r.on_feedback(690_000_000, 0, 0, true);
        r.on_loss(t0 + 11 * MS, 10 * MS);
        assert_eq!(
            r.rate(),
            690_000_000,
            "not below what the receiver delivers"
        );
        assert_eq!(r.cuts(), 2);
    }

    #[test]
    fn receiver_drops_hold_the_rate_at_delivery_without_a_cut() {
        let mut r = RateControl::new(UdpMode::Fair, 1_000_000_000);
        r.on_feedback(300_000_000, 10, 0, false);
        assert_eq!((r.rate(), r.cuts()), (300_000_000, 0));
        // No new drops, no loss: it grows again, to the ceiling at most.
        for _ in 0..200 {
            r.on_feedback(300_000_000, 10, 0, false);
        }
        assert_eq!(r.rate(), 1_000_000_000);
    }

    #[test]
    fn fair_backs_off_on_queueing_delay_and_fixed_holds_the_ceiling() {
        let mut r = RateControl::new(UdpMode::Fair, 1_000_000_000);
        r.on_feedback(900_000_000, 0, TARGET_QUEUE * 3, false);
        assert!(r.rate() < 800_000_000, "{}", r.rate());
        let mut f = RateControl::new(UdpMode::Fixed, 1_000_000_000);
        f.on_loss(Instant::now(), MS);
        f.on_feedback(1000, 50, TARGET_QUEUE * 10, true);
        assert_eq!((f.rate(), f.cuts()), (1_000_000_000, 0));
    }
}
