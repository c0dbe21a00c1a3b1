//! `zcp doctor`: inspects a data transfer node's tuning the way document 002 (tuning a
//! 100 Gbit/s DTN) does by hand, and says what to change.
//!
//! Every check reads through one [`HostView`]: files beneath a root directory plus a few
//! non-file probes (ethtool ioctls, the path to a peer, the data directory). For the running
//! host the root is `/`; tests and `zcp doctor --root` use trees of `/proc` and `/sys` instead,
//! so nothing here depends on the machine it runs on. A missing or unreadable input makes its
//! check [`Status::Unknown`] with the reason; it never fails the whole examination.
//!
//! [`examine`] returns a [`Report`]: the target (rate x RTT = bandwidth-delay product), one
//! [`Check`] per finding with the commands that would fix it, a ready `sysctl.conf` snippet and
//! the FreeBSD and macOS socket-buffer equivalents. Nothing here changes the host; the only
//! writes are the data-directory probe's scratch file, removed at once.

#![deny(missing_docs)]

mod cpu;
pub mod host;
mod net;
mod nic;
mod render;
mod storage;
pub mod units;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Serialize;

pub use host::{HostView, Probes};

/// Assumed when neither `--rate` nor a link speed is known: 10 Gbit/s.
pub const DEFAULT_RATE_BPS: u64 = 10_000_000_000;
/// Assumed when neither `--rtt` nor `--peer` is given: 100 ms, document 002's WAN example.
pub const DEFAULT_RTT: Duration = Duration::from_millis(100);
/// The largest value Linux accepts for a socket-buffer sysctl (they are C `int`s).
pub const SYSCTL_INT_MAX: u64 = i32::MAX as u64;

/// What to examine.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The target rate in bits per second (`--rate`); default: the fastest link examined.
    pub rate_bps: Option<u64>,
    /// The round-trip time (`--rtt`); default: measured against `peer`, else [`DEFAULT_RTT`].
    pub rtt: Option<Duration>,
    /// The peer to measure against (`--peer`), as given and as resolved.
    pub peer: Option<(String, SocketAddr)>,
    /// Interfaces to examine (`--interface`); default: the route to the peer, else the
    /// default routes' interfaces, else every interface that is up.
    pub interfaces: Vec<String>,
    /// The data directory (`--path`).
    pub path: PathBuf,
}

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// As recommended.
    Ok,
    /// Differs from the recommendation: the fix commands change it.
    Tune,
    /// For information: nothing to change, or nothing this host lets a user change.
    Info,
    /// Could not be read; the note says why.
    Unknown,
}

impl Status {
    /// The label in the table.
    pub fn label(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Tune => "TUNE",
            Status::Info => "info",
            Status::Unknown => "unknown",
        }
    }
}

/// One finding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// The group it belongs to: `network`, `peer`, `interface eth0`, `cpu`, `storage`.
    pub section: String,
    /// What was checked (`net.core.rmem_max`, `mtu`, `governor`).
    pub name: String,
    /// What the host has.
    pub current: String,
    /// What document 002 and zcp recommend for the target.
    pub recommended: String,
    /// The verdict.
    pub status: Status,
    /// Why (for unknown: what could not be read), or what to keep in mind.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Commands that would bring it to the recommendation (run as root).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub fix: Vec<String>,
}

impl Check {
    fn new(section: &str, name: &str, current: impl Into<String>, status: Status) -> Check {
        Check {
            section: section.to_string(),
            name: name.to_string(),
            current: current.into(),
            recommended: String::new(),
            status,
            note: None,
            fix: Vec::new(),
        }
    }

    fn unknown(section: &str, name: &str, why: impl Into<String>) -> Check {
        Check::new(section, name, "unknown", Status::Unknown).note(why)
    }

    fn want(mut self, recommended: impl Into<String>) -> Check {
        self.recommended = recommended.into();
        self
    }

    fn note(mut self, note: impl Into<String>) -> Check {
        self.note = Some(note.into());
        self
    }

    fn fix(mut self, command: impl Into<String>) -> Check {
        self.fix.push(command.into());
        self
    }
}

/// Where a figure of the target came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// Given on the command line.
    Given,
    /// Measured on this host (link speed, RTT to the peer).
    Measured,
    /// Neither: a default.
    Assumed,
}

/// The target the buffers are sized for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Target {
    /// Bits per second.
    pub rate_bps: u64,
    /// Where the rate came from, in words.
    pub rate_source: Source,
    /// Why that source (e.g. "the link speed of eth0").
    pub rate_why: String,
    /// Round-trip time, microseconds.
    pub rtt_us: u64,
    /// Where the RTT came from.
    pub rtt_source: Source,
    /// Why that source.
    pub rtt_why: String,
    /// Bandwidth-delay product, bytes: rate / 8 x RTT.
    pub bdp_bytes: u64,
}

/// Socket-buffer settings of another system for the same BDP.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OtherOs {
    /// FreeBSD or macOS.
    pub os: String,
    /// Where the lines go.
    pub file: String,
    /// `key = value` lines.
    pub lines: Vec<String>,
}

/// The outcome of [`examine`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Report {
    /// The root the host was read beneath (`/` for this host).
    pub root: PathBuf,
    /// The kernel release, where readable.
    pub kernel: Option<String>,
    /// The target rate, RTT and BDP.
    pub target: Target,
    /// Interfaces examined.
    pub interfaces: Vec<String>,
    /// Every finding, in table order.
    pub checks: Vec<Check>,
    /// A `sysctl.conf` snippet setting every network recommendation (never lowering a value
    /// the host already has higher).
    pub sysctl_conf: String,
    /// The socket-buffer settings for FreeBSD and macOS, as document 002 lists them.
    pub other_os: Vec<OtherOs>,
}

impl Report {
    /// Checks with this status.
    pub fn count(&self, status: Status) -> usize {
        self.checks.iter().filter(|c| c.status == status).count()
    }

    /// Every fix command, in table order, each once.
    pub fn fixes(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for c in &self.checks {
            for f in &c.fix {
                if !out.contains(f) {
                    out.push(f.clone());
                }
            }
        }
        out
    }
}

/// Errors in the request itself (exit 2 in the CLI); the host's own gaps are never errors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// `--interface` names no interface of the host.
    NoSuchInterface {
        /// The name given.
        name: String,
        /// The interfaces there are.
        have: Vec<String>,
    },
    /// `--peer` was given but could not be reached.
    Peer(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::NoSuchInterface { name, have } => write!(
                f,
                "--interface {name}: no such interface on this host (it has: {})",
                if have.is_empty() {
                    "none readable".to_string()
                } else {
                    have.join(", ")
                }
            ),
            Error::Peer(why) => write!(
                f,
                "--peer: {why}; check that the peer is listening, or give --rtt instead"
            ),
        }
    }
}

impl std::error::Error for Error {}

/// Examines `host` for `opts`. Only a bad request is an error; anything the host does not
/// show is an unknown check.
pub fn examine(host: &HostView, opts: &Options) -> Result<Report, Error> {
    // The peer first: it gives the RTT and the route's interface.
    let peer = match &opts.peer {
        Some((name, addr)) => Some(
            host.probes()
                .path(*addr)
                .map(|p| (name.clone(), p))
                .map_err(Error::Peer)?,
        ),
        None => None,
    };
    let interfaces = nic::choose(host, &opts.interfaces, opts.peer.as_ref().map(|(_, a)| *a))?;
    let target = target(host, opts, &interfaces, peer.as_ref().map(|(_, p)| p));
    let mut checks = net::stack(host, &target);
    if let Some((name, p)) = &peer {
        checks.extend(net::peer(name, p));
    }
    // CPU before the interfaces: stopping irqbalance comes before pinning IRQs.
    checks.extend(cpu::checks(host));
    if interfaces.is_empty() {
        checks.push(Check::unknown(
            "interfaces",
            "interfaces",
            "no default route and no interface up (or /sys/class/net unreadable); name one with --interface",
        ));
    }
    for iface in &interfaces {
        checks.extend(nic::interface(host, iface, &target));
    }
    checks.extend(storage::checks(host, &opts.path));
    let sysctl_conf = net::sysctl_conf(host, &target);
    let other_os = net::other_os(&target);
    Ok(Report {
        root: host.root().to_path_buf(),
        kernel: host.read("/proc/sys/kernel/osrelease").ok(),
        target,
        interfaces,
        checks,
        sysctl_conf,
        other_os,
    })
}

/// Rate x RTT, each from the command line, the host, or a stated default.
fn target(
    host: &HostView,
    opts: &Options,
    interfaces: &[String],
    peer: Option<&zcp_engine::probe::PathProbe>,
) -> Target {
    let link = interfaces
        .iter()
        .filter_map(|i| nic::speed_mbps(host, i).ok().map(|s| (s, i)))
        .max();
    let (rate_bps, rate_source, rate_why) = match (opts.rate_bps, link) {
        (Some(r), _) => (r, Source::Given, "--rate".to_string()),
        (None, Some((mbps, i))) => (
            mbps * 1_000_000,
            Source::Measured,
            format!("the link speed of {i}"),
        ),
        (None, None) => (
            DEFAULT_RATE_BPS,
            Source::Assumed,
            "no --rate and no link speed reported; give --rate".to_string(),
        ),
    };
    let (rtt, rtt_source, rtt_why) = match (opts.rtt, peer) {
        (Some(r), _) => (r, Source::Given, "--rtt".to_string()),
        (None, Some(p)) => (
            p.connect_min.max(Duration::from_micros(1)),
            Source::Measured,
            format!(
                "the fastest of {} TCP connects to the peer (median {}, slowest {})",
                p.samples,
                units::duration(p.connect_median),
                units::duration(p.connect_max)
            ),
        ),
        (None, None) => (
            DEFAULT_RTT,
            Source::Assumed,
            "no --rtt or --peer; 100 ms is a transcontinental path".to_string(),
        ),
    };
    Target {
        rate_bps,
        rate_source,
        rate_why,
        rtt_us: rtt.as_micros() as u64,
        rtt_source,
        rtt_why,
        bdp_bytes: units::bdp_bytes(rate_bps, rtt),
    }
}

#[cfg(test)]
mod tests;
