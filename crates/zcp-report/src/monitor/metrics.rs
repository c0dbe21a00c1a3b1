//! The Prometheus metrics: one registry, its families, and the label values a peer can
//! influence mapped onto small known sets.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use zcp_engine::{RecvEngine, SendEngine};

/// A session's outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Outcome {
    pub(crate) outcome: &'static str,
}

/// Where bytes went: an export and an identity from the operator's configuration.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Account {
    pub(crate) export: String,
    pub(crate) identity: String,
}

/// A session's direction.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Direction {
    pub(crate) direction: &'static str,
}

/// Why a connection was refused.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Cause {
    pub(crate) cause: &'static str,
}

/// An engine on one side.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(crate) struct Engine {
    pub(crate) side: &'static str,
    pub(crate) engine: &'static str,
}

/// Every metric the server exports.
pub(crate) struct Metrics {
    pub(crate) registry: Registry,
    pub(crate) sessions_active: Gauge,
    pub(crate) sessions: Family<Outcome, Counter>,
    pub(crate) received: Family<Account, Counter>,
    pub(crate) sent: Family<Account, Counter>,
    pub(crate) files: Family<Direction, Counter>,
    pub(crate) resent_chunks: Counter,
    pub(crate) verify_failures: Counter,
    pub(crate) refused: Family<Cause, Counter>,
    pub(crate) probes: Counter,
    pub(crate) engines: Family<Engine, Counter>,
    pub(crate) rate: Gauge<f64, AtomicU64>,
    pub(crate) part_files: Gauge,
    pub(crate) part_bytes: Gauge,
}

impl Metrics {
    pub(crate) fn new() -> Metrics {
        let mut m = Metrics {
            registry: Registry::default(),
            sessions_active: Gauge::default(),
            sessions: Family::default(),
            received: Family::default(),
            sent: Family::default(),
            files: Family::default(),
            resent_chunks: Counter::default(),
            verify_failures: Counter::default(),
            refused: Family::default(),
            probes: Counter::default(),
            engines: Family::default(),
            rate: Gauge::default(),
            part_files: Gauge::default(),
            part_bytes: Gauge::default(),
        };
        // Both outcomes exist from the start, so a rate() over them has a zero to begin at.
        for outcome in ["ok", "failed"] {
            let _ = m.sessions.get_or_create(&Outcome { outcome });
        }
        let r = &mut m.registry;
        r.register(
            "zcp_sessions_active",
            "Sessions running now",
            m.sessions_active.clone(),
        );
        r.register(
            "zcp_sessions",
            "Sessions ended, by outcome (ok: closed cleanly; failed: ended early or failed)",
            m.sessions.clone(),
        );
        r.register_with_unit(
            "zcp_received",
            "Payload bytes received by pushes (not those resumed), by export and identity",
            Unit::Bytes,
            m.received.clone(),
        );
        r.register_with_unit(
            "zcp_sent",
            "Payload bytes sent by pulls, by export and identity",
            Unit::Bytes,
            m.sent.clone(),
        );
        r.register(
            "zcp_files_committed",
            "Files verified and committed (push: stored here; pull: sent and committed by the client)",
            m.files.clone(),
        );
        r.register(
            "zcp_resent_chunks",
            "Chunks sent again after their verification failed",
            m.resent_chunks.clone(),
        );
        r.register(
            "zcp_verify_failures",
            "Files that failed verification",
            m.verify_failures.clone(),
        );
        r.register(
            "zcp_refused_connections",
            "Connections refused, by cause (auth, busy, protocol, version, access, ...)",
            m.refused.clone(),
        );
        r.register(
            "zcp_probe_connections",
            "Connections closed by their peer without sending a byte (zcp doctor --peer, \
             health checks, port scans): not refusals",
            m.probes.clone(),
        );
        r.register(
            "zcp_engines_chosen",
            "Engines chosen for sessions, by side (sender, receiver) and engine",
            m.engines.clone(),
        );
        // Bytes, not bits: Prometheus names carry base units (promtool's lint says so).
        r.register_with_unit(
            "zcp_rate",
            "Throughput of all sessions over the last 5 seconds",
            Unit::Other("bytes_per_second".into()),
            m.rate.clone(),
        );
        r.register(
            "zcp_part_files_pending",
            "Part files and journals of interrupted transfers found under the roots at start",
            m.part_files.clone(),
        );
        r.register_with_unit(
            "zcp_part_files_pending",
            "Disk space the part files and journals found at start take",
            Unit::Bytes,
            m.part_bytes.clone(),
        );
        m
    }

    /// The exposition in Prometheus's text format (version 0.0.4).
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        prometheus_text(&out)
    }
}

/// The Prometheus text format (0.0.4) of an OpenMetrics exposition, which is what
/// `prometheus-client` writes: a counter family takes its samples' `_total` name in its
/// `HELP` and `TYPE` lines, and the `UNIT` and `EOF` lines (OpenMetrics only) go. Every
/// Prometheus reads this format, and `promtool check metrics` checks it.
pub(crate) fn prometheus_text(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line.starts_with("# UNIT ") || line == "# EOF" {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                let total = if counters.contains(&name) {
                    "_total"
                } else {
                    ""
                };
                out.push_str(&format!("{prefix}{name}{total} {tail}\n"));
            }
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

/// The label value for a name from the operator's configuration: itself when it is made of
/// the characters a config name may hold, else `other`.
pub(crate) fn config_name(name: &str) -> String {
    let safe = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if safe { name.into() } else { "other".into() }
}

/// The label value for an engine name on `side`: one of zcp_engine's names, else `other`.
pub(crate) fn engine_name(side: &str, name: &str) -> &'static str {
    let known = if side == "sender" {
        SendEngine::parse(name).map(SendEngine::name)
    } else {
        RecvEngine::parse(name).map(RecvEngine::name)
    };
    known.unwrap_or("other")
}

/// The label value for a refusal's cause: an [`zcp_wire::ErrorCode`] name or `access`, else
/// `other`.
pub(crate) fn cause_name(cause: &str) -> &'static str {
    if cause == "access" {
        return "access";
    }
    zcp_wire::ErrorCode::from_name(cause).map_or("other", zcp_wire::ErrorCode::name)
}
