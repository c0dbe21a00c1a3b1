//! What a UDP session's streams counted, shared with the reports.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use zcp_engine::sync::Locked;
use zcp_wire::udp::UdpMode;

use super::budget::Ledger;

/// Counters of one side's UDP streams together (atomics: each stream adds its own).
#[derive(Debug, Default)]
pub(crate) struct UdpStats {
    /// Datagrams sent, re-sent ones included (sender).
    pub(crate) sent: AtomicU64,
    /// Datagrams re-sent, and their payload bytes (sender; the receiver counts those that
    /// came flagged as re-sent).
    pub(crate) resent: AtomicU64,
    pub(crate) resent_bytes: AtomicU64,
    /// Datagrams NAKed: lost on the way (both sides).
    pub(crate) lost: AtomicU64,
    /// Payload bytes NAKed (both sides).
    pub(crate) lost_bytes: AtomicU64,
    /// Datagrams taken into a chunk (receiver).
    pub(crate) received: AtomicU64,
    /// Datagrams the receiver's sockets dropped (`SO_RXQ_OVFL`), as its feedback says.
    pub(crate) drops: AtomicU64,
    /// Datagrams refused by the receiver: another session's tag, malformed, for a chunk not
    /// announced, outside their chunk or of the wrong length.
    pub(crate) rejected: AtomicU64,
    /// Datagrams that arrived twice (receiver).
    pub(crate) duplicates: AtomicU64,
    /// Multiplicative rate cuts (sender).
    pub(crate) cuts: AtomicU64,
    /// Each stream's rate now, bytes per second (sender; the receiver: what it delivers).
    pub(crate) rates: Mutex<Vec<u64>>,
    /// The offload engines in use, e.g. `gso+sendmmsg / gro+recvmmsg`.
    pub(crate) engines: Mutex<String>,
    /// Payload bytes per datagram.
    pub(crate) payload: AtomicU64,
    /// The chunk-buffer memory this side's streams hold, together ([`Ledger`]).
    pub(crate) memory: Arc<Ledger>,
}

/// What the UDP transport reports in interval lines and the summary.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UdpReport {
    /// `fair` or `fixed`.
    pub mode: String,
    /// The socket engines in use, e.g. `gso+sendmmsg / gro+recvmmsg`.
    pub engines: String,
    /// Payload bytes per datagram.
    pub payload: u64,
    /// Datagrams sent (re-sent ones included); 0 on the receiving side, which does not see them.
    pub sent: u64,
    /// Datagrams taken into chunks (the receiving side).
    pub received: u64,
    /// Datagrams NAKed as lost.
    pub lost: u64,
    /// Payload bytes NAKed as lost.
    pub lost_bytes: u64,
    /// Datagrams re-sent.
    pub resent: u64,
    /// Payload bytes re-sent.
    pub resent_bytes: u64,
    /// Datagrams the receiver's sockets dropped for want of buffer (`SO_RXQ_OVFL`).
    pub receiver_drops: u64,
    /// Datagrams the receiver refused (other sources' tags, out of range, unannounced).
    pub rejected: u64,
    /// Datagrams that arrived twice.
    pub duplicates: u64,
    /// The sending rate now over all streams, bits per second (the receiving side: what it
    /// delivered over the last feedback interval).
    pub rate_bits: u64,
    /// Multiplicative rate cuts on loss.
    pub cuts: u64,
}

impl UdpStats {
    /// A stream's slot for its rate.
    pub(crate) fn set_rate(&self, stream: usize, bytes_per_sec: u64) {
        let mut r = self.rates.locked();
        if r.len() <= stream {
            r.resize(stream + 1, 0);
        }
        r[stream] = bytes_per_sec;
    }

    /// The counters now.
    pub(crate) fn report(&self, mode: UdpMode) -> UdpReport {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        UdpReport {
            mode: mode.name().into(),
            engines: self.engines.locked().clone(),
            payload: get(&self.payload),
            sent: get(&self.sent),
            received: get(&self.received),
            lost: get(&self.lost),
            lost_bytes: get(&self.lost_bytes),
            resent: get(&self.resent),
            resent_bytes: get(&self.resent_bytes),
            receiver_drops: get(&self.drops),
            rejected: get(&self.rejected),
            duplicates: get(&self.duplicates),
            rate_bits: self.rates.locked().iter().sum::<u64>() * 8,
            cuts: get(&self.cuts),
        }
    }
}
