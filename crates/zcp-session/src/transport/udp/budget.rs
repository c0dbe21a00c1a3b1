//! The memory one side of a UDP session holds in chunk buffers: a [`Ledger`] per session
//! (shared by all its streams) and a [`Share`] of it per stream, which every chunk buffer is
//! charged to while it exists — read and awaiting the receiver's `Ready`, in flight, awaiting
//! `Done`, or kept for reuse — and given back when it is dropped.
//!
//! Why shares of one ledger rather than one pool the streams draw from: a stream waiting for
//! room another stream holds (in buffers kept for reuse, or in chunks a stalled peer never
//! finishes) could wait forever; with a fixed share each stream always has room for one
//! chunk once it lets its own buffers go, and the shares add up to the session's budget.
//! The ledger adds the shares' charges and refuses any that would pass the session's limit,
//! so the bound holds even if a share were ever sized wrongly.
//!
//! What the peer says only ever lowers a share: a receiver's `Hello` budget below this
//! side's own share makes the sender keep to it; one above it (up to 2^64 − 1) changes
//! nothing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of chunk buffers one side of a UDP session holds at most, over all its streams:
/// the same 128 MiB as a receiving session's receive buffers over TCP
/// ([`crate::recv::BUFFER_BUDGET`]), for either side, whatever the peer's `Hello` claims.
/// Enough for the 4 MiB default chunks to keep about 30 chunks in flight per session (a
/// 100 ms round trip at about 10 Gbit/s); a peer that stalls (never `Ready`, never `Done`)
/// pins at most this much.
pub(crate) const UDP_BUDGET: u64 = crate::recv::BUFFER_BUDGET;

/// Bytes a chunk of `len` bytes costs: its length in whole pages (the receiver's buffers
/// are page-aligned mappings). Both sides count chunks this way against the receiver's
/// budget, so a sender keeping to it is never refused.
pub(crate) fn cost(len: u64) -> u64 {
    len.div_ceil(4096).saturating_mul(4096)
}

/// A session's chunk-buffer memory on one side: its limit and what its streams hold now.
#[derive(Debug)]
pub(crate) struct Ledger {
    limit: u64,
    held: AtomicU64,
    peak: AtomicU64,
}

impl Default for Ledger {
    fn default() -> Ledger {
        Ledger::new(UDP_BUDGET)
    }
}

impl Ledger {
    /// A ledger of `limit` bytes.
    pub(crate) fn new(limit: u64) -> Ledger {
        Ledger {
            limit,
            held: AtomicU64::new(0),
            peak: AtomicU64::new(0),
        }
    }

    /// The session's limit.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes held now, over all streams.
    #[cfg(test)]
    pub(crate) fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// The most held at once.
    pub(crate) fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// One stream's share, of `streams`: the limit over the streams, lowered to what the
    /// peer claims (`peer`), never raised by it.
    pub(crate) fn share(self: &Arc<Self>, streams: u64, peer: Option<u64>) -> Share {
        let own = self.limit / streams.max(1);
        Share {
            ledger: self.clone(),
            limit: peer.map_or(own, |p| p.min(own)),
            held: 0,
        }
    }

    fn take(&self, n: u64) -> bool {
        let mut now = self.held.load(Ordering::Relaxed);
        loop {
            let Some(next) = now.checked_add(n).filter(|&x| x <= self.limit) else {
                return false;
            };
            match self
                .held
                .compare_exchange_weak(now, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    self.peak.fetch_max(next, Ordering::Relaxed);
                    return true;
                }
                Err(seen) => now = seen,
            }
        }
    }

    fn give(&self, n: u64) {
        self.held.fetch_sub(n, Ordering::AcqRel);
    }
}

/// One stream's part of a [`Ledger`]: what it may hold and holds. Gives everything back
/// when dropped (the stream ended, however).
#[derive(Debug)]
pub(crate) struct Share {
    ledger: Arc<Ledger>,
    limit: u64,
    held: u64,
}

impl Share {
    /// Bytes this stream may hold.
    pub(crate) fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes this stream holds now.
    pub(crate) fn held(&self) -> u64 {
        self.held
    }

    /// Charges `n` bytes if both this share and the session have room; whether it did.
    pub(crate) fn take(&mut self, n: u64) -> bool {
        if self.held.checked_add(n).is_none_or(|x| x > self.limit) || !self.ledger.take(n) {
            return false;
        }
        self.held += n;
        true
    }

    /// Gives back `n` bytes charged before.
    pub(crate) fn give(&mut self, n: u64) {
        let n = n.min(self.held);
        self.held -= n;
        self.ledger.give(n);
    }
}

impl Drop for Share {
    fn drop(&mut self) {
        self.ledger.give(self.held);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peer_claim_only_lowers_a_share() {
        let l = Arc::new(Ledger::new(128 << 20));
        assert_eq!(l.share(1, Some(u64::MAX)).limit(), 128 << 20);
        assert_eq!(l.share(4, Some(u64::MAX)).limit(), 32 << 20);
        assert_eq!(l.share(1, Some(1 << 20)).limit(), 1 << 20);
        assert_eq!(l.share(16, None).limit(), 8 << 20);
        assert_eq!(l.share(0, None).limit(), 128 << 20, "no streams: one");
    }

    #[test]
    fn shares_hold_to_their_limit_and_the_session_to_its() {
        let l = Arc::new(Ledger::new(100));
        let mut a = l.share(2, None);
        let mut b = l.share(2, Some(u64::MAX));
        assert!(a.take(50));
        assert!(!a.take(1), "a's share is full");
        assert!(b.take(30));
        assert!(!b.take(21));
        assert!(!b.take(u64::MAX), "no overflow");
        assert_eq!((l.held(), a.held(), b.held()), (80, 50, 30));
        a.give(20);
        assert!(b.take(20));
        assert_eq!(l.held(), 80);
        drop(b);
        assert_eq!(l.held(), 30, "a dropped share gives all back");
        a.give(1000);
        assert_eq!((l.held(), a.held()), (0, 0), "never more than it holds");
        assert_eq!(l.peak(), 80);
    }

    #[test]
    fn the_session_limit_holds_whatever_the_shares_say() {
        // Shares sized past the ledger (as a wrong split would be) still stop at its limit.
        let l = Arc::new(Ledger::new(100));
        let mut shares: Vec<Share> = (0..3).map(|_| l.share(1, None)).collect();
        assert!(shares[0].take(60));
        assert!(shares[1].take(40));
        assert!(!shares[2].take(1));
        assert_eq!(l.held(), 100);
    }

    #[test]
    fn many_threads_never_pass_the_limit() {
        let l = Arc::new(Ledger::new(1 << 20));
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let l = l.clone();
                std::thread::spawn(move || {
                    let mut s = l.share(1, None);
                    for i in 0..10_000u64 {
                        if s.take(4096 * (1 + i % 7)) {
                            assert!(l.held() <= l.limit());
                            s.give(4096 * (1 + i % 7));
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(l.held(), 0);
        assert!(l.peak() <= 1 << 20);
    }

    #[test]
    fn chunks_cost_whole_pages() {
        assert_eq!(cost(1), 4096);
        assert_eq!(cost(4096), 4096);
        assert_eq!(cost(65_537), 69_632);
        assert_eq!(cost(u64::MAX), u64::MAX, "saturates, never wraps");
    }
}
