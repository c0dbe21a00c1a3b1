//! What a benchmark found: per-cell statistics, ratios against the read/write baseline,
//! the host and setup, warnings about what a figure cannot mean; rendered as a table, CSV or
//! JSON.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::plan::{OffsetMode, SinkKind};
use crate::seeds::SeedRow;
use crate::side::SideReport;
use crate::stats::{Summary, ratio};
use crate::{BenchError, CacheState, CellSpec, Config, Scenario, size_label};

/// One measured run of a cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Seconds from the connections standing to the receiver's acknowledgement.
    pub seconds: f64,
    /// Bytes moved.
    pub bytes: u64,
    /// The sending process's figures.
    pub sender: SideReport,
    /// The receiving process's figures.
    pub receiver: SideReport,
}

type Metric = (&'static str, fn(&Run) -> f64);

/// Every figure summarised per cell, in the order CSV columns list them.
pub const METRICS: [Metric; 24] = [
    ("gbit_per_second", |r| {
        r.bytes as f64 * 8.0 / r.seconds / 1e9
    }),
    ("seconds", |r| r.seconds),
    ("sender_user", |r| r.sender.user),
    ("sender_sys", |r| r.sender.sys),
    ("sender_cpu", |r| r.sender.user + r.sender.sys),
    ("receiver_user", |r| r.receiver.user),
    ("receiver_sys", |r| r.receiver.sys),
    ("receiver_cpu", |r| r.receiver.user + r.receiver.sys),
    ("sender_voluntary_switches", |r| {
        r.sender.voluntary_switches as f64
    }),
    ("sender_involuntary_switches", |r| {
        r.sender.involuntary_switches as f64
    }),
    ("receiver_voluntary_switches", |r| {
        r.receiver.voluntary_switches as f64
    }),
    ("receiver_involuntary_switches", |r| {
        r.receiver.involuntary_switches as f64
    }),
    ("sender_major_faults", |r| r.sender.major_faults as f64),
    ("sender_minor_faults", |r| r.sender.minor_faults as f64),
    ("receiver_major_faults", |r| r.receiver.major_faults as f64),
    ("receiver_minor_faults", |r| r.receiver.minor_faults as f64),
    ("sender_max_rss_bytes", |r| r.sender.max_rss_bytes as f64),
    ("receiver_max_rss_bytes", |r| {
        r.receiver.max_rss_bytes as f64
    }),
    ("sender_cpu_per_gib", |r| {
        (r.sender.user + r.sender.sys) / (r.bytes.max(1) as f64 / (1u64 << 30) as f64)
    }),
    ("receiver_cpu_per_gib", |r| {
        (r.receiver.user + r.receiver.sys) / (r.bytes.max(1) as f64 / (1u64 << 30) as f64)
    }),
    // The UDP counters of `transport` cells (no figure for the other cells).
    ("udp_sent", |r| udp(r, |u| u.sent)),
    ("udp_lost", |r| udp(r, |u| u.lost)),
    ("udp_resent", |r| udp(r, |u| u.resent)),
    ("udp_receiver_drops", |r| udp(r, |u| u.receiver_drops)),
];

/// A sender's UDP counter, or NaN (no figure) when the run was not over UDP.
fn udp(r: &Run, f: fn(&crate::transport::UdpCounts) -> u64) -> f64 {
    r.sender.udp.as_ref().map_or(f64::NAN, |u| f(u) as f64)
}

/// How a cell compares with its read/write baseline (medians; above 1 means better than
/// read/write).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Ratios {
    /// Read/write's time over this cell's: how many times faster.
    pub speed: Option<f64>,
    /// Read/write's sender CPU seconds over this cell's: how many times less CPU.
    pub sender_cpu: Option<f64>,
    /// The same for system CPU alone (document 001's "3.65x").
    pub sender_sys: Option<f64>,
    /// `transport` cells: the baseline's receiver CPU seconds over this cell's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receiver_cpu: Option<f64>,
}

/// One cell's runs and what they add up to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellResult {
    /// What was run.
    pub spec: CellSpec,
    /// The sender engine that ran.
    pub sender_engine: String,
    /// The receiver engine that ran.
    pub receiver_engine: String,
    /// Why an engine is not the one asked for, if any.
    pub notes: Vec<String>,
    /// Min, median and max of every figure in [`METRICS`].
    pub stats: BTreeMap<String, Summary>,
    /// Against the read/write baseline; `None` until [`Report::new`] pairs the cells, and
    /// for `transport` cells.
    pub vs_rw: Option<Ratios>,
    /// `transport` cells: against the TCP cell with the same stream count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vs_tcp: Option<Ratios>,
    /// The measured runs.
    pub runs: Vec<Run>,
}

impl CellResult {
    /// Summarises `runs` (at least one) of `spec`.
    pub fn new(spec: CellSpec, runs: Vec<Run>) -> CellResult {
        let mut stats = BTreeMap::new();
        for (name, f) in METRICS {
            let values: Vec<f64> = runs.iter().map(f).collect();
            if let Some(s) = Summary::of(&values) {
                stats.insert(name.to_string(), s);
            }
        }
        let join = |f: fn(&Run) -> &str| {
            let mut v: Vec<&str> = runs.iter().map(f).collect();
            v.dedup();
            v.join(",")
        };
        let mut notes: Vec<String> = runs
            .iter()
            .flat_map(|r| [&r.sender.note, &r.receiver.note])
            .flatten()
            .cloned()
            .collect();
        notes.sort();
        notes.dedup();
        CellResult {
            sender_engine: join(|r| &r.sender.engine),
            receiver_engine: join(|r| &r.receiver.engine),
            spec,
            notes,
            stats,
            vs_rw: None,
            vs_tcp: None,
            runs,
        }
    }

    /// The median of a figure of [`METRICS`].
    pub fn median(&self, metric: &str) -> Option<f64> {
        self.stats.get(metric).map(|s| s.median)
    }
}

/// The host the benchmark ran on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Host {
    /// `uname -r`.
    pub kernel: String,
    /// CPUs this process may use.
    pub cpus: usize,
    /// Physical memory, bytes.
    pub mem_total_bytes: u64,
    /// The benchmark directory.
    pub dir: String,
    /// Its filesystem.
    pub fs: String,
    /// Whether that filesystem lives in memory (tmpfs, ramfs).
    pub fs_in_memory: bool,
    /// Free bytes there when the benchmark started.
    pub free_bytes: u64,
}

impl Host {
    /// Looks at this host and at `dir`.
    pub fn probe(dir: &Path) -> Result<Host, BenchError> {
        let root = zcp_engine::fs::Root::open(dir)?;
        let fs = zcp_engine::fs::fs_info(root.fd())?;
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        let mem_total_bytes = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|m| {
                m.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            })
            .map_or(0, |kib| kib * 1024);
        Ok(Host {
            kernel,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            mem_total_bytes,
            dir: dir.display().to_string(),
            fs: fs.name,
            fs_in_memory: fs.in_memory,
            free_bytes: fs.free_bytes,
        })
    }
}

/// How the runs were made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// Measured runs per cell.
    pub repeat: u32,
    /// Warm-up runs per cell, thrown away.
    pub warmup: u32,
    /// The source's page-cache state before each run.
    pub cache: CacheState,
    /// The same, said in words.
    pub cache_statement: String,
    /// The network path.
    pub network: String,
}

/// Everything a benchmark found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// Version of this document's shape.
    pub format: u32,
    /// The host.
    pub host: Host,
    /// How the runs were made.
    pub setup: Setup,
    /// What a figure here cannot mean, on this host and setup.
    pub warnings: Vec<String>,
    /// Every cell, in run order.
    pub cells: Vec<CellResult>,
    /// The documents' published ratios beside the measured ones (with `--seeds`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seeds: Option<Vec<SeedRow>>,
}

impl Report {
    /// Pairs every cell with its read/write baseline and works out the warnings.
    pub fn new(config: &Config, host: Host, mut cells: Vec<CellResult>) -> Report {
        let ratios: Vec<Option<Ratios>> = cells
            .iter()
            .map(|c| {
                let base = cells.iter().find(|b| c.spec.baseline_is(&b.spec))?;
                let r = |m: &str, flip: bool| {
                    let (a, b) = (c.median(m)?, base.median(m)?);
                    if flip { ratio(b, a) } else { ratio(a, b) }
                };
                let tcp = c.spec.transport.is_some();
                Some(Ratios {
                    speed: r("seconds", true),
                    sender_cpu: r("sender_cpu", true),
                    sender_sys: r("sender_sys", true),
                    receiver_cpu: if tcp { r("receiver_cpu", true) } else { None },
                })
            })
            .collect();
        for (c, r) in cells.iter_mut().zip(ratios) {
            if c.spec.transport.is_some() {
                c.vs_tcp = r;
            } else {
                c.vs_rw = r;
            }
        }
        let network = if cells.iter().any(|c| c.spec.transport.is_some()) {
            "TCP (and UDP for transport) over loopback (127.0.0.1): no NIC"
        } else {
            "TCP over loopback (127.0.0.1): no NIC"
        };
        let warnings = warnings(config, &host, &cells);
        Report {
            format: 1,
            setup: Setup {
                repeat: config.repeat,
                warmup: config.warmup,
                cache: config.cache,
                cache_statement: config.cache.statement().to_string(),
                network: network.into(),
            },
            host,
            warnings,
            cells,
            seeds: None,
        }
    }

    /// Adds the documents' published ratios beside the measured ones.
    pub fn with_seeds(mut self) -> Report {
        self.seeds = Some(crate::seeds::compare(&self.cells));
        self
    }

    /// The JSON document.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serializes")
    }

    /// One CSV row per cell: what it is, min/median/max of every figure, the ratios.
    pub fn to_csv(&self) -> String {
        let mut w = csv::Writer::from_writer(Vec::new());
        let mut header: Vec<String> = [
            "scenario",
            "param",
            "engine",
            "recv",
            "engine_ran",
            "recv_ran",
            "sink",
            "size_bytes",
            "streams",
            "offset",
            "region_bytes",
            "block_bytes",
            "runs",
            "cache",
        ]
        .map(String::from)
        .to_vec();
        for (m, _) in METRICS {
            for s in ["min", "median", "max"] {
                header.push(format!("{m}_{s}"));
            }
        }
        header.extend(
            [
                "speed_vs_rw",
                "sender_cpu_vs_rw",
                "sender_sys_vs_rw",
                "speed_vs_tcp",
                "sender_cpu_vs_tcp",
                "receiver_cpu_vs_tcp",
            ]
            .map(String::from),
        );
        w.write_record(&header).expect("writing to memory");
        for c in &self.cells {
            let s = &c.spec;
            let mut row = vec![
                s.scenario.name().to_string(),
                s.param.clone(),
                s.engine.clone(),
                s.recv.clone(),
                c.sender_engine.clone(),
                c.receiver_engine.clone(),
                s.sink.name().to_string(),
                s.size.to_string(),
                s.streams.to_string(),
                offset_name(s.offset).to_string(),
                s.region.to_string(),
                s.block.to_string(),
                c.runs.len().to_string(),
                format!("{:?}", self.setup.cache).to_lowercase(),
            ];
            for (m, _) in METRICS {
                match c.stats.get(m) {
                    Some(x) => row.extend([x.min, x.median, x.max].map(|v| v.to_string())),
                    None => row.extend(["", "", ""].map(String::from)),
                }
            }
            let (r, t) = (c.vs_rw.unwrap_or_default(), c.vs_tcp.unwrap_or_default());
            for v in [
                r.speed,
                r.sender_cpu,
                r.sender_sys,
                t.speed,
                t.sender_cpu,
                t.receiver_cpu,
            ] {
                row.push(v.map(|v| format!("{v:.4}")).unwrap_or_default());
            }
            w.write_record(&row).expect("writing to memory");
        }
        String::from_utf8(w.into_inner().expect("flushing to memory")).expect("CSV of UTF-8")
    }

    /// The readable tables, one per scenario, then the warnings (and the seeds, if any).
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let h = &self.host;
        let _ = writeln!(
            out,
            "zcp bench: Linux {}, {} CPUs, {} GiB RAM; files in {} ({})",
            h.kernel,
            h.cpus,
            h.mem_total_bytes >> 30,
            h.dir,
            h.fs
        );
        let _ = writeln!(
            out,
            "{}; {} run(s) per cell after {} warm-up(s), median [min-max]; source page cache {}",
            self.setup.network, self.setup.repeat, self.setup.warmup, self.setup.cache_statement
        );
        let mut scenarios: Vec<Scenario> = Vec::new();
        for c in &self.cells {
            if !scenarios.contains(&c.spec.scenario) {
                scenarios.push(c.spec.scenario);
            }
        }
        for s in scenarios {
            let cells: Vec<&CellResult> =
                self.cells.iter().filter(|c| c.spec.scenario == s).collect();
            let _ = writeln!(out, "\n{}: {}", s.name(), s.what());
            let first = &cells[0].spec;
            let _ = match s {
                Scenario::Sizes => writeln!(out, "  receiver {}", first.recv),
                Scenario::Offset => writeln!(
                    out,
                    "  {} per run, receiver {}; fixed re-sends the first {} each call",
                    size_label(first.size),
                    first.recv,
                    size_label(cells.iter().map(|c| c.spec.region).max().unwrap_or(0))
                ),
                Scenario::Sink => writeln!(
                    out,
                    "  {} per run; memory: nothing stored; cache: written, not synced; durable: fdatasync'd before the acknowledgement",
                    size_label(first.size)
                ),
                Scenario::Streams => writeln!(
                    out,
                    "  {} per run, split evenly over the streams; receiver {}",
                    size_label(first.size),
                    first.recv
                ),
                Scenario::Transport => {
                    out.push_str(&crate::transport::heading(&cells));
                    out.push_str(&crate::transport::table(&cells));
                    continue;
                }
            };
            out.push_str(&table(s, &cells));
        }
        if !self.warnings.is_empty() {
            out.push_str("\nwarnings:\n");
            for w in &self.warnings {
                let _ = writeln!(out, "  - {w}");
            }
        }
        let notes: Vec<String> = self
            .cells
            .iter()
            .flat_map(|c| {
                c.notes
                    .iter()
                    .map(move |n| format!("{}: {n}", c.spec.label()))
            })
            .collect();
        if !notes.is_empty() {
            out.push_str("\nengine notes:\n");
            for n in notes {
                let _ = writeln!(out, "  - {n}");
            }
        }
        if let Some(seeds) = &self.seeds {
            out.push('\n');
            out.push_str(&crate::seeds::table(seeds));
        }
        out
    }
}

fn offset_name(o: OffsetMode) -> &'static str {
    match o {
        OffsetMode::Advancing => "advancing",
        OffsetMode::Fixed => "fixed",
    }
}

/// Three significant digits (more for small numbers' leading zeros), no exponent.
pub(crate) fn sig(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let digits = (2 - x.abs().log10().floor() as i32).clamp(0, 9) as usize;
    format!("{x:.digits$}")
}

fn table(scenario: Scenario, cells: &[&CellResult]) -> String {
    let param = match scenario {
        Scenario::Sizes => "size",
        Scenario::Offset => "offset",
        Scenario::Sink => "sink",
        Scenario::Streams | Scenario::Transport => "streams",
    };
    let header = [
        param,
        "engine",
        "recv",
        "Gbit/s",
        "[min-max]",
        "time s",
        "x rw",
        "snd CPU s usr+sys",
        "CPU x rw",
        "rcv CPU s",
        "snd csw vol/inv",
        "snd faults maj/min",
        "RSS MiB snd/rcv",
    ];
    let med = |c: &CellResult, m: &str| c.median(m).unwrap_or(f64::NAN);
    let int = |c: &CellResult, m: &str| format!("{:.0}", med(c, m));
    let rows: Vec<Vec<String>> = cells
        .iter()
        .map(|c| {
            let g = c.stats.get("gbit_per_second");
            let r = c.vs_rw;
            let shown = |asked: &str, ran: &str| {
                if asked == ran {
                    ran.to_string()
                } else {
                    format!("{asked}->{ran}")
                }
            };
            vec![
                c.spec.param.clone(),
                shown(&c.spec.engine, &c.sender_engine),
                shown(&c.spec.recv, &c.receiver_engine),
                g.map_or("-".into(), |g| sig(g.median)),
                g.map_or("-".into(), |g| format!("[{}-{}]", sig(g.min), sig(g.max))),
                sig(med(c, "seconds")),
                r.and_then(|r| r.speed)
                    .map_or("-".into(), |v| format!("{v:.2}")),
                format!(
                    "{}+{}",
                    sig(med(c, "sender_user")),
                    sig(med(c, "sender_sys"))
                ),
                r.and_then(|r| r.sender_cpu)
                    .map_or("-".into(), |v| format!("{v:.2}")),
                sig(med(c, "receiver_cpu")),
                format!(
                    "{}/{}",
                    int(c, "sender_voluntary_switches"),
                    int(c, "sender_involuntary_switches")
                ),
                format!(
                    "{}/{}",
                    int(c, "sender_major_faults"),
                    int(c, "sender_minor_faults")
                ),
                format!(
                    "{:.0}/{:.0}",
                    med(c, "sender_max_rss_bytes") / 1048576.0,
                    med(c, "receiver_max_rss_bytes") / 1048576.0
                ),
            ]
        })
        .collect();
    columns(&header, &rows)
}

/// Left-aligned columns, two spaces apart.
pub(crate) fn columns(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, cell) in width.iter_mut().zip(r) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let mut l = String::from("  ");
        for (i, (cell, w)) in cells.iter().zip(&width).enumerate() {
            if i + 1 == cells.len() {
                l.push_str(cell);
            } else {
                let _ = write!(l, "{cell:<w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header.to_vec());
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
    out
}

fn warnings(config: &Config, host: &Host, cells: &[CellResult]) -> Vec<String> {
    let mut w = vec![
        "Loopback has no NIC and no DMA: the receiver copies every byte out of the socket, which on a real NIC the hardware would have delivered, so sender engines differ here more in CPU per byte than in time; MSG_ZEROCOPY would copy on loopback too. A veth pair behaves the same.".to_string(),
    ];
    if host.fs_in_memory {
        w.push(format!(
            "{} is on {}, which lives in memory: it is not a disk, so the cache, durable and direct sinks measure memory copies (O_DIRECT falls back there).",
            host.dir, host.fs
        ));
    }
    let largest = cells.iter().map(|c| c.spec.size).max().unwrap_or(0);
    if config.cache == CacheState::Warm && largest > 0 && largest < host.mem_total_bytes {
        w.push(format!(
            "Every source file (up to {}) fits in the page cache ({} GiB of RAM) and is read warm: the sender reads memory, not the disk. --cache cold drops the source's pages before each run.",
            size_label(largest),
            host.mem_total_bytes >> 30
        ));
    }
    if cells
        .iter()
        .any(|c| c.spec.sink == SinkKind::Cache && c.spec.scenario == Scenario::Sink)
        && largest < host.mem_total_bytes
    {
        w.push(
            "The cache sink stops the clock before writeback (rw) or while it runs (splice starts writeback per chunk and waits for it, as transfers do): only the durable cells include the disk.".into(),
        );
    }
    if config.repeat < 3 {
        w.push(format!(
            "--repeat {}: with fewer than 3 runs per cell, min/median/max say little about the spread.",
            config.repeat
        ));
    }
    let most = cells.iter().map(|c| c.spec.streams).max().unwrap_or(1);
    if most as usize > host.cpus {
        w.push(format!(
            "Up to {most} streams on {} CPUs: streams, senders and receivers share the cores, so adding streams cannot add CPU here.",
            host.cpus
        ));
    }
    if cells.iter().any(|c| c.spec.transport.is_some()) {
        w.push(crate::transport::WARNING.into());
    }
    if cells.iter().any(|c| c.spec.size < (1 << 20)) {
        w.push(
            "Cells under 1 MiB last microseconds: connection set-up and thread wake-ups weigh more than the copy mechanism in them.".into(),
        );
    }
    let noisy: Vec<String> = cells
        .iter()
        .filter(|c| c.runs.len() > 1 && c.spec.size >= (1 << 20))
        .filter(|c| c.stats.get("seconds").is_some_and(|s| s.spread() > 0.25))
        .map(|c| c.spec.label())
        .collect();
    if !noisy.is_empty() {
        w.push(format!(
            "{} cell(s) spread over more than 25% between runs ({}): a shared or busy host; compare cells of one run only, or raise --repeat.",
            noisy.len(),
            noisy.join(", ")
        ));
    }
    w
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::plan;

    /// A side report with figures derived from `k`, so every cell differs.
    pub(crate) fn side(engine: &str, k: f64) -> SideReport {
        SideReport {
            engine: engine.into(),
            note: None,
            bytes: 64 << 20,
            seconds: 0.05 * k,
            user: 0.001 * k,
            sys: 0.02 * k,
            voluntary_switches: (10.0 * k) as u64,
            involuntary_switches: (3.0 * k) as u64,
            major_faults: 0,
            minor_faults: (100.0 * k) as u64,
            max_rss_bytes: 4 << 20,
            udp: None,
        }
    }

    /// A report as `zcp bench sizes offset` on a fixed made-up host would give it.
    pub(crate) fn sample() -> Report {
        let mut config = plan::tests::config(&[Scenario::Sizes, Scenario::Offset]);
        config.sizes = vec![256 << 10, 64 << 20];
        config.size = 64 << 20;
        config.repeat = 3;
        let cells = plan::cells(&config)
            .into_iter()
            .enumerate()
            .map(|(i, spec)| {
                let slow = if spec.engine == "rw" { 2.0 } else { 1.0 };
                let runs = (0..3)
                    .map(|j| {
                        let k = slow * (1.0 + 0.1 * j as f64) * (1.0 + i as f64 / 10.0);
                        let mut sender = side(&spec.engine, k);
                        let mut receiver = side(&spec.recv, k * 0.5);
                        sender.bytes = spec.size;
                        receiver.bytes = spec.size;
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
        let host = Host {
            kernel: "6.1.0-test".into(),
            cpus: 2,
            mem_total_bytes: 24 << 30,
            dir: "/var/tmp".into(),
            fs: "ext4".into(),
            fs_in_memory: false,
            free_bytes: 100 << 30,
        };
        Report::new(&config, host, cells)
    }

    #[test]
    fn ratios_pair_each_cell_with_its_read_write_twin() {
        let r = sample();
        for c in &r.cells {
            let v = c.vs_rw.expect("every cell has a baseline");
            if c.spec.engine == "rw" {
                assert_eq!(v.speed, Some(1.0));
            } else {
                let base = r
                    .cells
                    .iter()
                    .find(|b| c.spec.baseline_is(&b.spec))
                    .unwrap();
                let want = base.median("seconds").unwrap() / c.median("seconds").unwrap();
                assert!((v.speed.unwrap() - want).abs() < 1e-12);
            }
        }
    }

    #[test]
    fn medians_sit_between_min_and_max() {
        for c in sample().cells {
            for (name, s) in &c.stats {
                assert!(s.min <= s.median && s.median <= s.max, "{name}");
            }
        }
    }

    #[test]
    fn warnings_name_what_the_setup_cannot_show() {
        let r = sample();
        let all = r.warnings.join("\n");
        assert!(all.contains("Loopback has no NIC"), "{all}");
        assert!(all.contains("fits in the page cache"), "{all}");
        assert!(all.contains("under 1 MiB"), "{all}");
        assert!(!all.contains("lives in memory"), "{all}");
        let mut config = plan::tests::config(&[Scenario::Streams]);
        config.repeat = 1;
        config.streams = vec![8];
        let host = Host {
            fs: "tmpfs".into(),
            fs_in_memory: true,
            ..r.host.clone()
        };
        let cells: Vec<CellResult> = plan::cells(&config)
            .into_iter()
            .map(|s| CellResult::new(s, r.cells[0].runs[..1].to_vec()))
            .collect();
        let all = Report::new(&config, host, cells).warnings.join("\n");
        assert!(all.contains("tmpfs, which lives in memory"), "{all}");
        assert!(all.contains("--repeat 1"), "{all}");
        assert!(all.contains("8 streams on 2 CPUs"), "{all}");
    }

    #[test]
    fn table_snapshot() {
        insta::assert_snapshot!(sample().to_table());
    }

    #[test]
    fn csv_snapshot() {
        insta::assert_snapshot!(sample().to_csv());
    }

    #[test]
    fn json_snapshot() {
        insta::assert_snapshot!(sample().to_json());
    }

    #[test]
    fn json_reads_back_as_the_same_report() {
        let r = sample().with_seeds();
        let back: Report = serde_json::from_str(&r.to_json()).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn numbers_keep_three_significant_digits() {
        assert_eq!(sig(12.345), "12.3");
        assert_eq!(sig(0.0012345), "0.00123");
        assert_eq!(sig(1234.6), "1235");
        assert_eq!(sig(0.0), "0");
    }
}
