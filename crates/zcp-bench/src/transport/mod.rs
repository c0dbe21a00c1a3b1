//! The `transport` scenario (issue 14): the same file moved by zcp's whole session —
//! handshake, keyed BLAKE3 chunk MACs, durable commit — over TCP and over UDP (`fair` mode,
//! and `fixed` mode at `--udp-rate`), at `-P 1` and the other stream counts asked for.
//!
//! Each run is two side processes as in the other scenarios, but the receiver is a zcp server
//! that takes one session ([`side::serve`]) and the sender is `zcp send` in-process
//! ([`side::send`]). Time is the session's own: first byte to last commit. CPU is each
//! process's `getrusage`, handshake included. UDP cells add the sender's datagram counters
//! (sent, lost, re-sent, receiver drops); every cell is compared with its TCP twin (the same
//! stream count). Loopback has no loss and no delay: this measures what each transport costs,
//! not where UDP wins; `benches/udp.sh` runs the delay-line matrix on the namespace testbed.

pub mod side;

use serde::{Deserialize, Serialize};
use zcp_engine::{RecvEngine, SendEngine};

use crate::plan::{CellSpec, OffsetMode, SinkKind};
use crate::report::{CellResult, columns, sig};
use crate::{Config, Scenario, size_label};

/// The name the sender gives the file on the receiver, beneath its scratch directory.
pub const DEST: &str = "transport.bin";

/// How a `transport` cell moves the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// The data connections carry the bytes (the baseline).
    Tcp,
    /// UDP datagrams, `--udp-mode fair`: starts at the ceiling, backs off on loss and delay.
    UdpFair,
    /// UDP datagrams, `--udp-mode fixed`: always at the rate cap.
    UdpFixed,
}

impl Transport {
    /// Every transport, the baseline first.
    pub const ALL: [Transport; 3] = [Transport::Tcp, Transport::UdpFair, Transport::UdpFixed];

    /// How tables and labels name it.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "tcp",
            Transport::UdpFair => "udp-fair",
            Transport::UdpFixed => "udp-fixed",
        }
    }
}

/// What a UDP session's sender counted, as its summary reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UdpCounts {
    /// `fair` or `fixed`.
    pub mode: String,
    /// The socket engines, e.g. `gso+sendmmsg / gro+recvmmsg`.
    pub engines: String,
    /// Payload bytes per datagram.
    pub payload: u64,
    /// Datagrams sent, re-sent ones included.
    pub sent: u64,
    /// Datagrams NAKed as lost.
    pub lost: u64,
    /// Datagrams re-sent.
    pub resent: u64,
    /// Payload bytes re-sent.
    pub resent_bytes: u64,
    /// Datagrams the receiver's sockets dropped for want of buffer, as it reported.
    pub receiver_drops: u64,
    /// Multiplicative rate cuts.
    pub cuts: u64,
}

/// The `transport` cells: every [`Transport`] at each stream count, one file of `--size`,
/// sent with `sendfile` (over TCP) to the receiver engine `zcp send` asks for by default
/// (`auto`), stored and committed.
pub fn cells(config: &Config) -> Vec<CellSpec> {
    let mut out = Vec::new();
    for &n in &config.transport_streams {
        for t in Transport::ALL {
            out.push(CellSpec {
                scenario: Scenario::Transport,
                param: format!("-P {n}"),
                engine: SendEngine::Sendfile.name().to_string(),
                recv: RecvEngine::Auto.name().to_string(),
                sink: SinkKind::Durable,
                size: config.size,
                offset: OffsetMode::Advancing,
                region: 0,
                block: config.block,
                streams: n,
                transport: Some(t),
                limit_bits: (t == Transport::UdpFixed).then_some(config.udp_rate),
            });
        }
    }
    out
}

/// Bits per second as `5 Gbit/s`, `500 Mbit/s`.
fn rate_label(bits: u64) -> String {
    if bits >= 1_000_000_000 {
        format!("{} Gbit/s", sig(bits as f64 / 1e9))
    } else {
        format!("{} Mbit/s", sig(bits as f64 / 1e6))
    }
}

/// The line under the scenario's title.
pub(crate) fn heading(cells: &[&CellResult]) -> String {
    let first = &cells[0].spec;
    let fixed = cells
        .iter()
        .find_map(|c| c.spec.limit_bits)
        .map_or(String::new(), |b| {
            format!("; udp-fixed at {}", rate_label(b))
        });
    format!(
        "  {} per run, {} -> {} (zcp send's defaults), stored and committed durably, keyed BLAKE3{fixed}\n  x tcp, CPU x tcp: the TCP cell with the same -P over this one (above 1: faster, less CPU per GiB)\n",
        size_label(first.size),
        first.engine,
        first.recv,
    )
}

/// The scenario's table: throughput, CPU per GiB on each side, the UDP counters, the ratios
/// against TCP.
pub(crate) fn table(cells: &[&CellResult]) -> String {
    let header = [
        "-P",
        "transport",
        "Gbit/s",
        "[min-max]",
        "time s",
        "x tcp",
        "snd CPU s/GiB",
        "rcv CPU s/GiB",
        "CPU x tcp snd/rcv",
        "datagrams sent/lost/re-sent",
        "rcv drops",
        "RSS MiB snd/rcv",
        "engines",
    ];
    let med = |c: &CellResult, m: &str| c.median(m);
    let or_dash = |v: Option<f64>, f: &dyn Fn(f64) -> String| v.map_or("-".to_string(), f);
    let ratio = |v: Option<f64>| or_dash(v, &|v| format!("{v:.2}"));
    let count = |c: &CellResult, m: &str| or_dash(med(c, m), &|v| format!("{v:.0}"));
    let rows: Vec<Vec<String>> = cells
        .iter()
        .map(|c| {
            let g = c.stats.get("gbit_per_second");
            let r = c.vs_tcp;
            let udp = c.runs.first().and_then(|r| r.sender.udp.as_ref());
            vec![
                c.spec.param.clone(),
                c.spec.transport.map_or("-", Transport::name).to_string(),
                g.map_or("-".into(), |g| sig(g.median)),
                g.map_or("-".into(), |g| format!("[{}-{}]", sig(g.min), sig(g.max))),
                or_dash(med(c, "seconds"), &sig),
                ratio(r.and_then(|r| r.speed)),
                or_dash(med(c, "sender_cpu_per_gib"), &sig),
                or_dash(med(c, "receiver_cpu_per_gib"), &sig),
                format!(
                    "{}/{}",
                    ratio(r.and_then(|r| r.sender_cpu)),
                    ratio(r.and_then(|r| r.receiver_cpu))
                ),
                if udp.is_some() {
                    format!(
                        "{}/{}/{}",
                        count(c, "udp_sent"),
                        count(c, "udp_lost"),
                        count(c, "udp_resent")
                    )
                } else {
                    "-".into()
                },
                if udp.is_some() {
                    count(c, "udp_receiver_drops")
                } else {
                    "-".into()
                },
                format!(
                    "{:.0}/{:.0}",
                    med(c, "sender_max_rss_bytes").unwrap_or(f64::NAN) / 1048576.0,
                    med(c, "receiver_max_rss_bytes").unwrap_or(f64::NAN) / 1048576.0
                ),
                // Over UDP the sender reads chunks into memory: its socket engines tell.
                match udp {
                    Some(u) => format!("{}, {} B -> {}", u.engines, u.payload, c.receiver_engine),
                    None => format!("{} -> {}", c.sender_engine, c.receiver_engine),
                },
            ]
        })
        .collect();
    columns(&header, &rows)
}

/// What the scenario's figures cannot mean.
pub(crate) const WARNING: &str = "Loopback has no loss and no delay: the transport cells measure what each transport costs, not the long lossy paths UDP is for; benches/udp.sh runs TCP and UDP through a delay line with injected loss on a namespace testbed (root needed).";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan;
    use crate::report::tests::side;
    use crate::report::{Report, Run};

    #[test]
    fn every_transport_runs_at_every_stream_count_against_its_tcp_twin() {
        let mut config = plan::tests::config(&[Scenario::Transport]);
        config.transport_streams = vec![1, 4];
        config.udp_rate = 3_000_000_000;
        let cells = plan::cells(&config);
        assert_eq!(cells.len(), 2 * 3);
        for c in &cells {
            assert_eq!(c.scenario, Scenario::Transport);
            assert_eq!(c.size, config.size);
            assert_eq!(c.sink, SinkKind::Durable, "a session commits durably");
            assert_eq!(c.param, format!("-P {}", c.streams));
            let t = c.transport.expect("every cell names its transport");
            assert_eq!(
                c.limit_bits,
                (t == Transport::UdpFixed).then_some(3_000_000_000),
                "only fixed mode is capped, at --udp-rate"
            );
            let twins: Vec<_> = cells.iter().filter(|o| c.baseline_is(o)).collect();
            assert_eq!(twins.len(), 1, "{}", c.label());
            assert_eq!(twins[0].transport, Some(Transport::Tcp));
            assert_eq!(twins[0].streams, c.streams);
        }
        let labels: Vec<String> = cells.iter().map(CellSpec::label).collect();
        assert_eq!(labels[0], "transport -P 1 tcp");
        assert_eq!(labels[5], "transport -P 4 udp-fixed");
        // The engine scenarios' cells never take a transport cell as their baseline.
        let mut both = plan::tests::config(&[Scenario::Streams, Scenario::Transport]);
        both.streams = vec![1];
        let all = plan::cells(&both);
        for c in all.iter().filter(|c| c.transport.is_none()) {
            assert_eq!(all.iter().filter(|o| c.baseline_is(o)).count(), 1);
        }
    }

    /// A report as `zcp bench transport --size 64M` on a fixed made-up host would give it:
    /// UDP a little slower than TCP and dearer in CPU, fixed mode losing a few datagrams.
    pub(crate) fn sample() -> Report {
        let mut config = plan::tests::config(&[Scenario::Transport]);
        config.size = 64 << 20;
        let cells = plan::cells(&config)
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                let t = spec.transport.unwrap();
                let cost = if t == Transport::Tcp { 1.0 } else { 1.5 };
                let runs = (0..3)
                    .map(|j| {
                        let k = cost * (1.0 + 0.1 * j as f64) * (1.0 + i as f64 / 10.0);
                        let mut sender = side("sendfile", k);
                        let mut receiver = side("direct", k * 0.8);
                        sender.bytes = spec.size;
                        receiver.bytes = spec.size;
                        if t != Transport::Tcp {
                            let lost = if t == Transport::UdpFixed { 12 + j } else { 0 };
                            sender.udp = Some(UdpCounts {
                                mode: if t == Transport::UdpFixed {
                                    "fixed"
                                } else {
                                    "fair"
                                }
                                .into(),
                                engines: "gso+sendmmsg / gro+recvmmsg".into(),
                                payload: 61_440,
                                sent: 1093 + lost,
                                lost,
                                resent: lost,
                                resent_bytes: lost * 61_440,
                                receiver_drops: lost / 2,
                                cuts: 0,
                            });
                        }
                        Run {
                            seconds: sender.seconds,
                            bytes: spec.size,
                            sender,
                            receiver,
                        }
                    })
                    .collect();
                CellResult::new(spec, runs)
            })
            .collect();
        let host = crate::report::tests::sample().host;
        Report::new(&config, host, cells)
    }

    #[test]
    fn each_cell_is_compared_with_its_tcp_twin() {
        let r = sample();
        for c in &r.cells {
            assert_eq!(c.vs_rw, None, "{}", c.spec.label());
            let v = c.vs_tcp.expect("every cell has a TCP twin");
            let tcp = r
                .cells
                .iter()
                .find(|b| c.spec.baseline_is(&b.spec))
                .unwrap();
            let want = |m: &str| tcp.median(m).unwrap() / c.median(m).unwrap();
            assert!((v.speed.unwrap() - want("seconds")).abs() < 1e-12);
            assert!((v.receiver_cpu.unwrap() - want("receiver_cpu")).abs() < 1e-12);
            let udp = c.spec.transport != Some(Transport::Tcp);
            assert_eq!(c.stats.contains_key("udp_sent"), udp, "{}", c.spec.label());
        }
        assert!(r.warnings.iter().any(|w| w.contains("benches/udp.sh")));
        let svg = crate::plot::svg(&r).unwrap();
        assert!(svg.contains("transport: Gbit/s"));
        for t in Transport::ALL {
            assert!(
                svg.contains(&format!("\n{}\n</text>", t.name())),
                "legend names {t:?}"
            );
        }
    }

    #[test]
    fn table_snapshot() {
        insta::assert_snapshot!(sample().to_table());
    }

    #[test]
    fn json_snapshot() {
        insta::assert_snapshot!(sample().to_json());
    }

    #[test]
    fn json_reads_back_as_the_same_report() {
        let r = sample();
        let back: Report = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn rates_read_as_people_write_them() {
        assert_eq!(rate_label(5_000_000_000), "5.00 Gbit/s");
        assert_eq!(rate_label(500_000_000), "500 Mbit/s");
    }
}
