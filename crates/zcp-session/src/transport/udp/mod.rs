//! The UDP transport (`--transport udp`): each stream's authenticated TCP data connection
//! stays, as its ordered side channel (chunk announcements, "sent" marks, NAKs, chunk-done
//! marks, feedback, the end); the chunks' bytes go as datagrams ([`DatagramHeader`] and a
//! payload sized to the path MTU) between one UDP socket per stream on each side, each
//! connected to the other, so the kernel drops datagrams from any other address or port.
//!
//! The sender ([`send`]) reads a chunk into memory once, announces it, paces its datagrams
//! out ([`rate::RateControl`]), re-sends what the receiver NAKs before new data, and keeps the
//! chunk until the receiver says it is done, with at most the receiver's memory budget of
//! chunks in flight. Each side holds its chunk buffers to its own 128 MiB per session
//! ([`budget`]), whatever the peer claims. The receiver ([`recv`]) assembles each announced chunk in an aligned
//! buffer with a bitmap of its datagrams, NAKs the gaps every feedback interval (each
//! datagram at most once per round trip), and hands a whole chunk to the role exactly as the
//! TCP transport does: its keyed MAC, then its write by the engine the placement names.
//! Roles, MACs, acknowledgements, journal and commit do not change.

pub(crate) mod budget;
pub(crate) mod rate;
pub(crate) mod recv;
pub(crate) mod send;
mod side;
mod stats;

use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use zcp_engine::Usage;
use zcp_engine::udp::UdpSock;
use zcp_wire::ErrorCode;
use zcp_wire::udp::{DATAGRAM_HEADER_LEN, MAX_DATAGRAM_PAYLOAD, MIN_DATAGRAM_PAYLOAD, UdpMode};

use super::{Landing, SendSide, Transport, spawn};
use crate::error::{Refusal, SessionError};
pub use stats::UdpReport;
pub(crate) use stats::UdpStats;

/// How often the receiver sends feedback and NAKs.
pub(crate) const FEEDBACK: Duration = Duration::from_millis(5);

/// The chunk size a UDP sender picks unless `-c` says: small enough that a receiver holds
/// several per stream within its memory budget.
pub(crate) const UDP_CHUNK: u64 = 4 << 20;

/// How a session's UDP streams run.
#[derive(Debug, Clone)]
pub(crate) struct UdpConfig {
    pub(crate) mode: UdpMode,
    /// The session's rate cap, bytes per second (0: none).
    pub(crate) cap: u64,
    /// Use GSO and GRO where the kernel has them.
    pub(crate) offload: bool,
    /// Take this as the path MTU instead of the kernel's (tests, measurements).
    pub(crate) mtu: Option<u32>,
    /// Tests: the sender drops this many datagrams in 1000 (seeded, deterministic) as a
    /// lossy path would.
    pub(crate) loss: Option<(u32, u64)>,
    /// Tests: in an encrypted session, the sender flips a byte in this many sealed
    /// datagrams in 1000 (seeded), as a path that corrupts them would.
    pub(crate) tamper: Option<(u32, u64)>,
}

impl UdpConfig {
    /// The configuration for `mode` under a cap of `cap` bytes per second, with the
    /// environment's knobs for measurements: `ZCP_UDP_OFFLOAD=off` turns GSO and GRO off,
    /// `ZCP_UDP_MTU=N` sizes datagrams for an MTU of N.
    pub(crate) fn new(mode: UdpMode, cap: u64) -> UdpConfig {
        UdpConfig {
            mode,
            cap,
            offload: std::env::var("ZCP_UDP_OFFLOAD").map_or(true, |v| v != "off"),
            mtu: std::env::var("ZCP_UDP_MTU")
                .ok()
                .and_then(|v| v.parse().ok()),
            loss: None,
            tamper: None,
        }
    }
}

/// A session's UDP streams: their side channels (the data connections) and counters.
pub(crate) struct UdpStreams {
    socks: Vec<TcpStream>,
    counters: Vec<Arc<AtomicU64>>,
    cfg: UdpConfig,
    stats: Arc<UdpStats>,
}

impl UdpStreams {
    /// Streams over the data connections `socks`, counting into `counters` and `stats`.
    pub(crate) fn new(
        socks: Vec<TcpStream>,
        counters: Vec<Arc<AtomicU64>>,
        cfg: UdpConfig,
        stats: Arc<UdpStats>,
    ) -> UdpStreams {
        // Streams not here yet join later (a server's push), each with its counter.
        assert!(socks.len() <= counters.len(), "a counter per stream");
        UdpStreams {
            socks,
            counters,
            cfg,
            stats,
        }
    }
}

impl Transport for UdpStreams {
    fn counters(&self) -> Vec<Arc<AtomicU64>> {
        self.counters.clone()
    }

    fn closer(&self) -> Box<dyn Fn() + Send + Sync> {
        let socks: Vec<TcpStream> = self
            .socks
            .iter()
            .filter_map(|s| s.try_clone().ok())
            .collect();
        Box::new(move || {
            for s in &socks {
                let _ = s.shutdown(Shutdown::Both);
            }
        })
    }

    fn send(self: Box<Self>, side: SendSide) -> Result<Vec<JoinHandle<Usage>>, SessionError> {
        let side = Arc::new(side);
        let mut threads = Vec::new();
        let n = self.socks.len() as u64;
        for (i, (sock, counter)) in self.socks.into_iter().zip(self.counters).enumerate() {
            let (side, cfg, stats) = (side.clone(), self.cfg.clone(), self.stats.clone());
            threads.push(spawn(format!("zcp-udp-send-{i}"), move || {
                send::stream((i as u16, n), sock, &side, &counter, &cfg, &stats)
            })?);
        }
        Ok(threads)
    }

    fn take_streams(&mut self) -> Vec<(u16, TcpStream)> {
        (0..).zip(std::mem::take(&mut self.socks)).collect()
    }

    fn land(&self, stream: u16, sock: TcpStream, landing: Arc<dyn Landing>) {
        let i = usize::from(stream);
        if let Some(counter) = self.counters.get(i) {
            let (offload, stats) = (self.cfg.offload, &self.stats);
            recv::land(landing, sock, counter.clone(), offload, stats, i);
        }
    }

    fn udp(&self) -> Option<Arc<UdpStats>> {
        Some(self.stats.clone())
    }
}

/// Payload bytes per datagram for a path of `mtu` bytes: what is left after the IP, UDP and
/// datagram headers and the `trailer` (an encrypted datagram's tag), in whole pages once
/// that is a page or more (so payloads land on page boundaries of the chunk: 8192 at MTU
/// 9000), 1440 at 1500 over IPv4 in clear.
pub(crate) fn payload_for(mtu: u32, v6: bool, trailer: usize) -> u16 {
    let ip = if v6 { 40 } else { 20 };
    let room = (mtu as usize).saturating_sub(ip + 8 + DATAGRAM_HEADER_LEN + trailer);
    let room = if room >= 4096 {
        room / 4096 * 4096
    } else {
        room
    };
    room.clamp(
        usize::from(MIN_DATAGRAM_PAYLOAD),
        usize::from(MAX_DATAGRAM_PAYLOAD),
    ) as u16
}

/// Binds this stream's UDP socket on the local address of its data connection.
pub(crate) fn bind_beside(sock: &TcpStream, offload: bool) -> Result<UdpSock, Refusal> {
    let ip: IpAddr = sock
        .local_addr()
        .map_err(|e| Refusal::new(ErrorCode::Io, format!("data connection address: {e}")))?
        .ip();
    UdpSock::bind(ip, offload).map_err(|e| {
        let what = format!("binding a UDP socket on {ip}: {e}");
        Refusal::short_of_descriptors(&e, &what).unwrap_or(Refusal::new(ErrorCode::Io, what))
    })
}

/// Connects `udp` to the peer's UDP `port` on the far address of the data connection.
pub(crate) fn connect_peer(udp: &UdpSock, sock: &TcpStream, port: u16) -> Result<(), Refusal> {
    let peer = sock
        .peer_addr()
        .map_err(|e| Refusal::new(ErrorCode::Io, format!("data connection peer: {e}")))?;
    if port == 0 {
        return Err(Refusal::protocol("the peer's UDP Hello names port 0"));
    }
    udp.connect(SocketAddr::new(peer.ip(), port))
        .map_err(|e| Refusal::new(ErrorCode::Io, format!("connecting the UDP socket: {e}")))
}

/// Microseconds since `epoch` (a stream's own clock for one-way delay).
pub(crate) fn micros(epoch: Instant) -> u64 {
    epoch.elapsed().as_micros() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_fit_the_mtu_and_pages() {
        assert_eq!(payload_for(1500, false, 0), 1440);
        assert_eq!(payload_for(1500, true, 0), 1420);
        assert_eq!(payload_for(1500, false, 16), 1424);
        assert_eq!(payload_for(9000, false, 16), 8192);
        assert_eq!(payload_for(65536, false, 16), 61_440);
        assert_eq!(payload_for(100, false, 0), 512);
    }
}
