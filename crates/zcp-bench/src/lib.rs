//! `zcp bench`: the copy-mechanism benchmark that reproduces the source documents'
//! experiments on the user's own host, through the very engines transfers run
//! (`zcp-engine`'s [`SendEngine`](zcp_engine::SendEngine) and
//! [`StreamReceiver`](zcp_engine::StreamReceiver)).
//!
//! A benchmark is a list of cells ([`plan`]); each cell is run `warmup + repeat` times. Every
//! run is two fresh processes of the `zcp` binary (`zcp bench-side`, see [`side`]): a
//! receiver listening on loopback and a sender connecting to it, so each side's CPU time,
//! context switches, page faults and peak RSS are its own, as `getrusage` reports them for a
//! process (document 001, Fig. 3). [`run()`] drives the runs and pushes [`Event`]s to the
//! caller; it never prints. [`report`] turns the runs into statistics ([`stats`]), ratios
//! against the read/write baseline, warnings, and the table, CSV and JSON outputs; [`plot`]
//! draws the documents' charts as SVG; [`seeds`] holds the figures the documents published.
//! [`udp_chart`] draws the chart of `benches/udp.sh` from its CSV. [`transport`] is the
//! scenario that runs zcp's whole session over TCP and over UDP instead of bare engines.

#![deny(missing_docs)]

pub mod plan;
pub mod plot;
pub mod report;
pub mod run;
pub mod seeds;
pub mod side;
pub mod stats;
pub mod transport;
pub mod udp_chart;

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use plan::{CellSpec, OffsetMode, SinkKind};
pub use report::Report;
pub use run::{Event, run};

/// One experiment of the benchmark, runnable alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scenario {
    /// File -> TCP loopback -> receiver, per sender engine and file size (documents 001,
    /// 003/004).
    Sizes,
    /// Re-sending one region vs advancing through the file (document 000, Table 2).
    Offset,
    /// Into receiver memory, the page cache, durable storage (document 000, Figs. 12-15).
    Sink,
    /// 1..N parallel streams (document 002, Fig. 6).
    Streams,
    /// zcp's whole session (handshake, chunk MACs, durable commit) over TCP and over UDP
    /// (issue 14); opt-in by name.
    Transport,
}

impl Scenario {
    /// Every scenario, in the order they run.
    pub const ALL: [Scenario; 4] = [
        Scenario::Sizes,
        Scenario::Offset,
        Scenario::Sink,
        Scenario::Streams,
    ];

    /// Scenarios that run only when named (`zcp bench transport`): they would lengthen the
    /// default run by more than a minute.
    pub const OPT_IN: [Scenario; 1] = [Scenario::Transport];

    /// The scenario's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Sizes => "sizes",
            Scenario::Offset => "offset",
            Scenario::Sink => "sink",
            Scenario::Streams => "streams",
            Scenario::Transport => "transport",
        }
    }

    /// Parses a command-line name (of [`Scenario::ALL`] or [`Scenario::OPT_IN`]).
    pub fn parse(s: &str) -> Option<Scenario> {
        Self::ALL
            .into_iter()
            .chain(Self::OPT_IN)
            .find(|x| x.name() == s)
    }

    /// One line on what the scenario measures.
    pub fn what(self) -> &'static str {
        match self {
            Scenario::Sizes => "file -> TCP loopback -> receiver, per sender engine and file size",
            Scenario::Offset => {
                "the same region re-sent (fixed offset) vs advancing through the file"
            }
            Scenario::Sink => {
                "into receiver memory, into the page cache, into durable storage, per receiver engine"
            }
            Scenario::Streams => "parallel TCP streams, each sending its share of one file",
            Scenario::Transport => {
                "zcp's whole session (handshake, chunk MACs, durable commit) over TCP and over UDP"
            }
        }
    }
}

/// The state of the source file's pages before each run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheState {
    /// Read whole into the page cache before each run.
    Warm,
    /// Dropped from the page cache (`posix_fadvise(DONTNEED)` on the clean file) before
    /// each run: allowed for any user who can open the file, no root needed.
    Cold,
}

impl CacheState {
    /// How the report states it.
    pub fn statement(self) -> &'static str {
        match self {
            CacheState::Warm => {
                "warm (the source is read whole into the page cache before each run)"
            }
            CacheState::Cold => {
                "cold (the source's pages are dropped with posix_fadvise(DONTNEED) before each run)"
            }
        }
    }
}

/// What to run and where.
#[derive(Debug, Clone)]
pub struct Config {
    /// Scenarios to run, in this order.
    pub scenarios: Vec<Scenario>,
    /// File sizes of `sizes`.
    pub sizes: Vec<u64>,
    /// File size of `offset`, `sink` and `streams`.
    pub size: u64,
    /// Stream counts of `streams`.
    pub streams: Vec<u32>,
    /// Stream counts (`-P`) of `transport`.
    pub transport_streams: Vec<u32>,
    /// The rate cap of `transport`'s UDP fixed-mode cells, bits per second.
    pub udp_rate: u64,
    /// Measured runs per cell.
    pub repeat: u32,
    /// Runs per cell before the measured ones, thrown away.
    pub warmup: u32,
    /// Page-cache state of the source before each run.
    pub cache: CacheState,
    /// Bytes per call (0: each engine's default; `offset` re-sends 1 MiB regions then).
    pub block: u64,
    /// Receiver engine of `sizes`, `offset` and `streams`.
    pub recv_engine: zcp_engine::RecvEngine,
    /// Directory for the source files and the receiver's files (a scratch directory is made
    /// inside and removed afterwards).
    pub dir: PathBuf,
    /// The `zcp` executable that runs each side.
    pub exe: PathBuf,
    /// Longest a single run may take before the benchmark gives up on it.
    pub run_timeout: Duration,
}

/// Why a benchmark could not run or finish.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The configuration asks for something impossible.
    #[error("{0}")]
    Config(String),
    /// Preparing files or directories failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: std::io::Error,
    },
    /// A side of a run failed.
    #[error("{cell}: {message}")]
    Run {
        /// The cell's label.
        cell: String,
        /// What went wrong, with the side's own message.
        message: String,
    },
    /// An engine call failed (inside a side process).
    #[error(transparent)]
    Engine(#[from] zcp_engine::EngineError),
    /// A session failed (inside a side process of `transport`).
    #[error(transparent)]
    Session(#[from] zcp_session::SessionError),
}

impl BenchError {
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> BenchError {
        BenchError::Io {
            what: what.into(),
            source,
        }
    }
}

/// `1K`, `64M`, `1G`: sizes as the documents write them (powers of 1024); exact bytes when
/// the size is not a whole number of units.
pub fn size_label(n: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{}{unit}", n >> shift);
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_labelled_as_the_documents_write_them() {
        assert_eq!(size_label(1024), "1K");
        assert_eq!(size_label(64 << 20), "64M");
        assert_eq!(size_label(1 << 30), "1G");
        assert_eq!(size_label(1000), "1000");
        assert_eq!(size_label((1 << 20) + 1), "1048577");
        assert_eq!(size_label(0), "0");
    }

    #[test]
    fn scenario_names_round_trip() {
        for s in Scenario::ALL.into_iter().chain(Scenario::OPT_IN) {
            assert_eq!(Scenario::parse(s.name()), Some(s));
        }
        assert!(!Scenario::ALL.contains(&Scenario::Transport));
        assert_eq!(Scenario::parse("size"), None);
    }
}
