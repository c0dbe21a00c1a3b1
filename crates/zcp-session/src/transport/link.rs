//! [`Link`]: how a session's data moves, as the client asked in `Open` and the server granted
//! in `Opened` — the one description from which each side builds its end of the transport. No
//! code outside this module asks which kind of transport runs: the chunk size, the rate cap
//! and how it is held, what reports say of it, all come from here.

use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use zcp_wire::Pacing;
use zcp_wire::udp::{TransportKind, UdpMode};

use super::Transport;
use super::pace::{RateCap, planned, planned_for};
use super::tcp::TcpStreams;
use super::udp::{UDP_CHUNK, UdpConfig, UdpStats, UdpStreams};
use crate::event::RateLimit;

/// How reports name the pacing of a rate cap over UDP: each stream's own token bucket.
const UDP_PACING: &str = "user space (UDP, per stream)";

/// How a session's data moves: the transport, its rate control and the rate cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    /// TCP streams, or UDP datagrams with the data connections as side channels
    /// (`--transport`).
    pub kind: TransportKind,
    /// The UDP transport's rate control (`--udp-mode`).
    pub udp_mode: UdpMode,
    /// The cap on all data streams together, bits per second (`--limit-rate`): the sending
    /// side holds it (the server in a pull).
    pub limit_rate: Option<u64>,
    /// The client asks for an encrypted session (`--encrypt`, the default over ssh); on
    /// the server, the session is encrypted.
    pub encrypt: bool,
}

impl Default for Link {
    fn default() -> Link {
        Link {
            kind: TransportKind::Tcp,
            udp_mode: UdpMode::Fair,
            limit_rate: None,
            encrypt: false,
        }
    }
}

/// One end of a link, built over its data connections.
pub(crate) struct Built {
    pub(crate) transport: Box<dyn Transport>,
    /// How this end holds the cap (the sending end; `None` without a cap or when receiving).
    pub(crate) pacing: Pacing,
    /// The cap as reports show it, as this end holds it.
    pub(crate) limit: Option<RateLimit>,
    /// Why the cap is not held as planned, or anything else the user should hear of it.
    pub(crate) note: Option<String>,
}

impl Link {
    /// The cap in bits per second; 0 for none.
    pub(crate) fn rate(&self) -> u64 {
        self.limit_rate.unwrap_or(0)
    }

    /// What makes this link unusable, said as its fix: `fixed` without a rate cap would
    /// send at an unbounded rate.
    pub fn problem(&self) -> Option<&'static str> {
        (self.kind == TransportKind::Udp && self.udp_mode == UdpMode::Fixed && self.rate() == 0)
            .then_some("--udp-mode fixed sends at the rate cap: give --limit-rate")
    }

    /// The chunk size a sender uses: the one asked for (`-c`), else over UDP one small
    /// enough that a receiver holds several per stream within its memory budget (`None`:
    /// one per file from its size).
    pub(crate) fn chunk_size(&self, asked: Option<u64>) -> Option<u64> {
        match self.kind {
            TransportKind::Udp => Some(asked.unwrap_or(UDP_CHUNK)),
            TransportKind::Tcp => asked,
        }
    }

    /// How the sending side will hold the cap over `streams` whose path has segments of
    /// `mss` bytes (when known), and why not in the kernel where it cannot: TCP streams in
    /// the kernel where it paces them smoothly, UDP streams each in user space.
    pub(crate) fn plan(&self, streams: usize, mss: Option<u32>) -> (Pacing, Option<String>) {
        match (self.kind, self.rate()) {
            (_, 0) => (Pacing::None, None),
            (TransportKind::Tcp, rate) => planned(rate, streams, mss),
            (TransportKind::Udp, _) => (Pacing::User, None),
        }
    }

    /// The cap as reports show it, held with `pacing` (what the sending side said).
    pub(crate) fn limit(&self, pacing: Pacing) -> Option<RateLimit> {
        let bits = self.limit_rate.filter(|b| *b > 0)?;
        Some(RateLimit {
            bits_per_second: bits,
            pacing: match self.kind {
                TransportKind::Udp => UDP_PACING.into(),
                TransportKind::Tcp => pacing.name().into(),
            },
        })
    }

    /// The sending end over the connected data streams `socks` (each counting into its
    /// counter) with the cap in force: TCP's as `plan` says (planned from the sockets when
    /// `None`), UDP's in each stream's own bucket; UDP streams run with `udp`'s knobs where
    /// given (tests: loss, MTU).
    pub(crate) fn sender(
        &self,
        socks: Vec<TcpStream>,
        counters: Vec<Arc<AtomicU64>>,
        plan: Option<(Pacing, Option<String>)>,
        udp: Option<UdpConfig>,
    ) -> Built {
        match self.kind {
            TransportKind::Tcp => {
                let rate = self.rate();
                let plan = plan.unwrap_or_else(|| planned_for(rate, &socks));
                let cap = RateCap::apply(rate, plan, &socks);
                let pacing = cap.as_ref().map_or(Pacing::None, |c| c.pacing);
                Built {
                    limit: cap.as_ref().map(RateCap::limit),
                    note: cap.as_ref().and_then(|c| c.note.clone()),
                    pacing,
                    transport: Box::new(TcpStreams::new(socks, counters).capped(cap)),
                }
            }
            TransportKind::Udp => Built {
                pacing: self.plan(socks.len(), None).0,
                limit: self.limit(Pacing::User),
                note: None,
                transport: self.udp(socks, counters, udp),
            },
        }
    }

    /// The receiving end over the connected data streams `socks`.
    pub(crate) fn receiver(
        &self,
        socks: Vec<TcpStream>,
        counters: Vec<Arc<AtomicU64>>,
        udp: Option<UdpConfig>,
    ) -> Built {
        Built {
            transport: match self.kind {
                TransportKind::Tcp => Box::new(TcpStreams::new(socks, counters)),
                TransportKind::Udp => self.udp(socks, counters, udp),
            },
            pacing: Pacing::None,
            limit: None,
            note: None,
        }
    }

    fn udp(
        &self,
        socks: Vec<TcpStream>,
        counters: Vec<Arc<AtomicU64>>,
        knobs: Option<UdpConfig>,
    ) -> Box<dyn Transport> {
        let (mode, cap) = (self.udp_mode, self.rate() / 8);
        let cfg = match knobs {
            Some(k) => UdpConfig { mode, cap, ..k },
            None => UdpConfig::new(mode, cap),
        };
        Box::new(UdpStreams::new(
            socks,
            counters,
            cfg,
            Arc::new(UdpStats::default()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp(mode: UdpMode, limit_rate: Option<u64>) -> Link {
        Link {
            kind: TransportKind::Udp,
            udp_mode: mode,
            limit_rate,
            encrypt: false,
        }
    }

    #[test]
    fn fixed_udp_needs_a_cap_and_nothing_else_does() {
        assert!(udp(UdpMode::Fixed, None).problem().is_some());
        assert!(udp(UdpMode::Fixed, Some(0)).problem().is_some());
        assert_eq!(udp(UdpMode::Fixed, Some(1_000_000)).problem(), None);
        assert_eq!(udp(UdpMode::Fair, None).problem(), None);
        let encrypted = Link {
            encrypt: true,
            ..udp(UdpMode::Fair, None)
        };
        assert_eq!(encrypted.problem(), None);
        let tcp = Link {
            udp_mode: UdpMode::Fixed,
            ..Link::default()
        };
        assert_eq!(tcp.problem(), None);
    }

    #[test]
    fn udp_picks_a_chunk_size_tcp_leaves_it_to_the_file() {
        assert_eq!(udp(UdpMode::Fair, None).chunk_size(None), Some(UDP_CHUNK));
        assert_eq!(
            udp(UdpMode::Fair, None).chunk_size(Some(1 << 20)),
            Some(1 << 20)
        );
        assert_eq!(Link::default().chunk_size(None), None);
        assert_eq!(Link::default().chunk_size(Some(1 << 20)), Some(1 << 20));
    }

    #[test]
    fn a_udp_cap_is_held_per_stream_in_user_space_and_said_so() {
        let l = udp(UdpMode::Fair, Some(8_000_000));
        assert_eq!(l.plan(4, Some(1448)), (Pacing::User, None));
        assert_eq!(l.limit(Pacing::Kernel).unwrap().pacing, UDP_PACING);
        assert_eq!(udp(UdpMode::Fair, None).plan(4, None), (Pacing::None, None));
        assert_eq!(udp(UdpMode::Fair, None).limit(Pacing::User), None);
        let tcp = Link {
            limit_rate: Some(8_000_000),
            ..Link::default()
        };
        assert_eq!(tcp.limit(Pacing::Kernel).unwrap().pacing, "kernel");
    }

    #[test]
    fn under_udp_the_side_channels_are_not_paced() {
        let (a, b) = (
            std::net::TcpListener::bind("127.0.0.1:0").unwrap(),
            std::net::TcpStream::connect,
        );
        let s = b(a.local_addr().unwrap()).unwrap();
        let _peer = a.accept().unwrap();
        let fd = std::os::fd::AsFd::as_fd(&s);
        let before = zcp_engine::pace::max_pacing_rate(fd).unwrap();
        let built = udp(UdpMode::Fair, Some(8_000_000)).sender(
            vec![s.try_clone().unwrap()],
            vec![Arc::default()],
            None,
            None,
        );
        assert_eq!(built.pacing, Pacing::User);
        assert_eq!(zcp_engine::pace::max_pacing_rate(fd).unwrap(), before);
        assert!(built.transport.udp().is_some());
    }
}
