//! The cells of a benchmark: which engines, sizes, sinks and stream counts each scenario runs.
//!
//! Every cell has a read/write twin (the same cell with sender engine `rw`), its baseline: a
//! ratio changes one thing only, as document 003/004 asks of a fair comparison.

use serde::{Deserialize, Serialize};
use zcp_engine::{RecvEngine, SendEngine};

use crate::transport::Transport;
use crate::{Config, Scenario, size_label};

/// Sender engines of `sizes`: every one zcp-engine has, read/write first (the baseline).
pub const SIZE_ENGINES: [SendEngine; 4] = [
    SendEngine::ReadWrite,
    SendEngine::Sendfile,
    SendEngine::Mmap,
    SendEngine::Splice,
];

/// Sender engines of `offset`, `sink` and `streams`: the documents' pair.
pub const PAIR: [SendEngine; 2] = [SendEngine::ReadWrite, SendEngine::Sendfile];

/// Bytes re-sent per call by `offset` when no block size is given.
pub const DEFAULT_REGION: u64 = 1 << 20;

/// Where the receiver puts the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SinkKind {
    /// Nothing stored (`mem` reads into a buffer, `null` splices into /dev/null).
    Memory,
    /// Written into the page cache; the clock stops before anything is synced.
    Cache,
    /// Written and `fdatasync`'d before the receiver acknowledges.
    Durable,
}

impl SinkKind {
    /// The name used in labels.
    pub fn name(self) -> &'static str {
        match self {
            SinkKind::Memory => "memory",
            SinkKind::Cache => "cache",
            SinkKind::Durable => "durable",
        }
    }
}

/// How the sender walks the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OffsetMode {
    /// Through the whole file, as a real transfer does.
    Advancing,
    /// The first region again and again until the cell's bytes are sent (what many demos do).
    Fixed,
}

/// One cell: a sender engine, a receiver engine, a sink, a size, a stream count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CellSpec {
    /// The scenario it belongs to.
    pub scenario: Scenario,
    /// The value the scenario varies, as shown: a size, an offset mode, a sink, a count.
    pub param: String,
    /// Sender engine.
    pub engine: String,
    /// Receiver engine asked for (the one that ran is in the results).
    pub recv: String,
    /// Where the receiver puts the bytes.
    pub sink: SinkKind,
    /// Bytes moved per run (the file's size).
    pub size: u64,
    /// How the sender walks the file.
    pub offset: OffsetMode,
    /// For [`OffsetMode::Fixed`]: the bytes re-sent from offset 0 each time.
    pub region: u64,
    /// Bytes per call (0: the engines' defaults).
    pub block: u64,
    /// Parallel TCP streams.
    pub streams: u32,
    /// `transport` cells: how the session moves the data (none for the engine scenarios).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport: Option<Transport>,
    /// `transport` cells: the session's rate cap (`--limit-rate`), bits per second.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bits: Option<u64>,
}

impl CellSpec {
    /// `sizes 64M sendfile`: how progress and errors name the cell.
    pub fn label(&self) -> String {
        let last = self.transport.map_or(self.engine.as_str(), |t| t.name());
        format!("{} {} {last}", self.scenario.name(), self.param)
    }

    /// Whether `other` is this cell's baseline (or this cell itself, when it is the
    /// baseline): its read/write twin, or for a `transport` cell its TCP twin.
    pub fn baseline_is(&self, other: &CellSpec) -> bool {
        if self.transport.is_some() {
            return other.transport == Some(Transport::Tcp)
                && other.scenario == self.scenario
                && other.recv == self.recv
                && other.size == self.size
                && other.streams == self.streams;
        }
        other.transport.is_none()
            && other.engine == SendEngine::ReadWrite.name()
            && other.scenario == self.scenario
            && other.param == self.param
            && other.recv == self.recv
            && other.sink == self.sink
            && other.size == self.size
            && other.offset == self.offset
            && other.streams == self.streams
    }
}

/// The cells `config` asks for, in run order.
pub fn cells(config: &Config) -> Vec<CellSpec> {
    let recv = config.recv_engine.name().to_string();
    let base = |scenario, param: String, engine: SendEngine, size| CellSpec {
        scenario,
        param,
        engine: engine.name().to_string(),
        recv: recv.clone(),
        sink: sink_of(config.recv_engine),
        size,
        offset: OffsetMode::Advancing,
        region: 0,
        block: config.block,
        streams: 1,
        transport: None,
        limit_bits: None,
    };
    let mut out = Vec::new();
    for &scenario in &config.scenarios {
        match scenario {
            Scenario::Sizes => {
                for &size in &config.sizes {
                    for engine in SIZE_ENGINES {
                        out.push(base(scenario, size_label(size), engine, size));
                    }
                }
            }
            Scenario::Offset => {
                let region = if config.block == 0 {
                    DEFAULT_REGION
                } else {
                    config.block
                };
                for mode in [OffsetMode::Fixed, OffsetMode::Advancing] {
                    for engine in PAIR {
                        let name = match mode {
                            OffsetMode::Fixed => "fixed",
                            OffsetMode::Advancing => "advancing",
                        };
                        let mut c = base(scenario, name.into(), engine, config.size);
                        c.offset = mode;
                        c.region = if mode == OffsetMode::Fixed { region } else { 0 };
                        c.block = region;
                        out.push(c);
                    }
                }
            }
            Scenario::Sink => {
                for (sink, r) in SINKS {
                    for engine in PAIR {
                        let param = format!("{}/{}", sink.name(), r.name());
                        let mut c = base(scenario, param, engine, config.size);
                        c.recv = r.name().to_string();
                        c.sink = sink;
                        out.push(c);
                    }
                }
            }
            Scenario::Streams => {
                for &n in &config.streams {
                    for engine in PAIR {
                        let mut c = base(scenario, n.to_string(), engine, config.size);
                        c.streams = n;
                        out.push(c);
                    }
                }
            }
            Scenario::Transport => out.extend(crate::transport::cells(config)),
        }
    }
    out
}

/// The sinks of `sink`, with the receiver engine of each.
pub const SINKS: [(SinkKind, RecvEngine); 7] = [
    (SinkKind::Memory, RecvEngine::Mem),
    (SinkKind::Memory, RecvEngine::Null),
    (SinkKind::Cache, RecvEngine::ReadWrite),
    (SinkKind::Cache, RecvEngine::Splice),
    (SinkKind::Durable, RecvEngine::ReadWrite),
    (SinkKind::Durable, RecvEngine::Splice),
    (SinkKind::Durable, RecvEngine::Direct),
];

/// The sink a receiver engine given for `sizes`, `offset` and `streams` implies: engines
/// that store write into the page cache (or, for `direct`, past it) without a sync.
fn sink_of(r: RecvEngine) -> SinkKind {
    if r.stores() {
        SinkKind::Cache
    } else {
        SinkKind::Memory
    }
}

/// The byte ranges of `streams` parallel streams over `size` bytes: contiguous, in order,
/// each starting on a 4 KiB boundary (O_DIRECT needs aligned offsets), together exactly
/// `[0, size)`. A stream may get nothing when the file is tiny.
pub fn ranges(size: u64, streams: u32) -> Vec<(u64, u64)> {
    let n = u64::from(streams.max(1));
    let share = size.div_ceil(n).div_ceil(4096) * 4096;
    (0..n)
        .map(|i| {
            let start = (i * share).min(size);
            let end = ((i + 1) * share).min(size);
            (start, end - start)
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::path::PathBuf;
    use std::time::Duration;

    pub(crate) fn config(scenarios: &[Scenario]) -> Config {
        Config {
            scenarios: scenarios.to_vec(),
            sizes: vec![1024, 64 << 20],
            size: 1 << 20,
            streams: vec![1, 4],
            transport_streams: vec![1, 4],
            udp_rate: 5_000_000_000,
            repeat: 3,
            warmup: 1,
            cache: crate::CacheState::Warm,
            block: 0,
            recv_engine: RecvEngine::Mem,
            dir: PathBuf::from("/nonexistent"),
            exe: PathBuf::from("/nonexistent"),
            run_timeout: Duration::from_secs(1),
        }
    }

    #[test]
    fn every_cell_has_exactly_one_read_write_baseline() {
        let cells = cells(&config(&Scenario::ALL));
        assert_eq!(cells.len(), 2 * 4 + 2 * 2 + 7 * 2 + 2 * 2);
        for c in &cells {
            let n = cells.iter().filter(|o| c.baseline_is(o)).count();
            assert_eq!(n, 1, "{}", c.label());
        }
    }

    #[test]
    fn offset_cells_resend_one_region_or_advance() {
        let cells = cells(&config(&[Scenario::Offset]));
        let fixed: Vec<_> = cells
            .iter()
            .filter(|c| c.offset == OffsetMode::Fixed)
            .collect();
        assert_eq!(fixed.len(), 2);
        assert!(fixed.iter().all(|c| c.region == DEFAULT_REGION));
        assert!(
            cells
                .iter()
                .filter(|c| c.offset == OffsetMode::Advancing)
                .all(|c| c.region == 0)
        );
    }

    #[test]
    fn sink_cells_pair_each_sink_with_its_receiver() {
        let cells = cells(&config(&[Scenario::Sink]));
        let params: Vec<_> = cells.iter().map(|c| c.param.as_str()).collect();
        assert!(params.contains(&"durable/direct"));
        assert!(params.contains(&"memory/null"));
        for c in &cells {
            assert!(c.param.starts_with(c.sink.name()));
            assert!(c.param.ends_with(&c.recv));
        }
    }

    #[test]
    fn ranges_cover_the_file_exactly_on_aligned_starts() {
        for size in [0u64, 1, 4095, 4096, 4097, 10 << 20, (10 << 20) + 3] {
            for n in 1..=8 {
                let r = ranges(size, n);
                assert_eq!(r.len(), n as usize);
                let mut at = 0;
                for &(start, len) in &r {
                    assert_eq!(start, at);
                    assert!(start % 4096 == 0 || len == 0);
                    at += len;
                }
                assert_eq!(at, size, "size {size} streams {n}");
            }
        }
    }
}
