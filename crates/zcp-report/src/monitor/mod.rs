//! What `zcp serve` shows a monitoring system and a person: Prometheus metrics
//! (`GET /metrics`) and a live status page (`GET /`, polling `GET /api/sessions`). This
//! module keeps the state, fed by server events; the binary's HTTP listener only asks it for
//! text.
//!
//! Everything a peer can influence is bounded here: label values from the network are
//! mapped onto known sets (anything else is `other`), texts are escaped
//! ([`zcp_wire::escape_text`]) before they enter the JSON, and the page puts them into its
//! document as text, never as markup.

mod metrics;
mod status;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Instant;

use zcp_engine::sync::Locked;
use zcp_session::{ServerEvent, ServerReporter};
use zcp_wire::escape_text;

use metrics::{Account, Cause, Direction, Engine, Metrics, Outcome};
use status::{Active, RECENT, Recent, Status, Throughput};

/// The status page: one HTML file.
pub const INDEX_HTML: &str = include_str!("page/index.html");
/// The status page's script.
pub const APP_JS: &str = include_str!("page/app.js");
/// The status page's style sheet.
pub const APP_CSS: &str = include_str!("page/app.css");
/// The status page's icon.
pub const FAVICON_SVG: &str = include_str!("page/favicon.svg");

/// Running sessions the monitor follows at most (a server runs far fewer).
const MAX_ACTIVE: usize = 4096;

/// The server's metrics and status, fed by its events (a [`ServerReporter`]).
pub struct Monitor {
    start: Instant,
    inner: Mutex<Inner>,
}

struct Inner {
    metrics: Metrics,
    active: HashMap<String, Active>,
    throughput: Throughput,
    recent: VecDeque<Recent>,
    part_files: i64,
    part_bytes: i64,
}

impl Default for Monitor {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor").finish_non_exhaustive()
    }
}

impl Monitor {
    /// A monitor with no sessions yet; its throughput ring starts now.
    pub fn new() -> Monitor {
        let mut throughput = Throughput::default();
        throughput.advance(0.0);
        Monitor {
            start: Instant::now(),
            inner: Mutex::new(Inner {
                metrics: Metrics::new(),
                active: HashMap::new(),
                throughput,
                recent: VecDeque::new(),
                part_files: 0,
                part_bytes: 0,
            }),
        }
    }

    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// The Prometheus exposition (OpenMetrics text) as of now.
    pub fn metrics_text(&self) -> String {
        self.metrics_text_at(self.now())
    }

    /// The status document (`GET /api/sessions`) as of now.
    pub fn status_json(&self) -> String {
        self.status_json_at(self.now())
    }

    pub(crate) fn metrics_text_at(&self, now: f64) -> String {
        let mut inner = self.inner.locked();
        inner.throughput.advance(now);
        // The ring counts bits per second; the metric is in bytes (base units).
        let rate = inner.throughput.rate() / 8.0;
        inner.metrics.rate.set(rate);
        inner.metrics.text()
    }

    pub(crate) fn status_json_at(&self, now: f64) -> String {
        let mut inner = self.inner.locked();
        inner.throughput.advance(now);
        for a in inner.active.values_mut() {
            a.seconds = round3(now - a.started_at);
        }
        let mut active: Vec<&Active> = inner.active.values().collect();
        active.sort_by(|a, b| a.started_at.total_cmp(&b.started_at));
        let doc = Status {
            uptime: round3(now),
            rate_bps: inner.throughput.rate().round(),
            active,
            sample_seconds: 1,
            samples: inner.throughput.samples(),
            recent: inner.recent.iter().rev().collect(),
        };
        serde_json::to_string(&doc).unwrap_or_else(|_| "{}".into())
    }

    /// Takes in one event that happened `now` seconds after the monitor's start.
    pub(crate) fn event_at(&self, event: &ServerEvent, now: f64) {
        let mut guard = self.inner.locked();
        let inner = &mut *guard;
        let m = &inner.metrics;
        match event {
            ServerEvent::Leftovers { files, bytes, .. } => {
                inner.part_files = inner.part_files.saturating_add(*files as i64);
                inner.part_bytes = inner.part_bytes.saturating_add(*bytes as i64);
                m.part_files.set(inner.part_files);
                m.part_bytes.set(inner.part_bytes);
            }
            // A client that gave up before asking for anything was refused nothing.
            ServerEvent::SessionRefused { cause, .. } if *cause == zcp_session::CLIENT_GAVE_UP => {}
            ServerEvent::Rejected { cause, .. } | ServerEvent::SessionRefused { cause, .. } => {
                let cause = metrics::cause_name(cause);
                m.refused.get_or_create(&Cause { cause }).inc();
            }
            // Pending handshakes ended: evicted ones count as busy, expired ones as limit,
            // those their peer closed as protocol (as when each was logged on its own), and
            // the refusals not logged one by one as other (their causes went unrecorded).
            ServerEvent::Shed {
                evicted,
                expired,
                gave_up,
                probes,
                refused,
                ..
            } => {
                m.probes.inc_by(*probes);
                let counts = [
                    ("busy", evicted),
                    ("limit", expired),
                    ("protocol", gave_up),
                    ("other", refused),
                ];
                for (cause, n) in counts {
                    if *n > 0 {
                        m.refused.get_or_create(&Cause { cause }).inc_by(*n);
                    }
                }
            }
            ServerEvent::SessionStart { .. } => inner.start(event, now),
            ServerEvent::Engines {
                session,
                sender,
                receiver,
            } => {
                let sender = metrics::engine_name("sender", sender);
                let receiver = metrics::engine_name("receiver", receiver);
                let e = |side, engine| Engine { side, engine };
                m.engines.get_or_create(&e("sender", sender)).inc();
                m.engines.get_or_create(&e("receiver", receiver)).inc();
                if let Some(a) = inner.active.get_mut(session) {
                    a.sender_engine = Some(sender.into());
                    a.receiver_engine = Some(receiver.into());
                }
            }
            ServerEvent::Progress {
                session,
                phase,
                bytes,
                resumed,
                total_bytes,
                files,
                total_files,
                last,
            } => {
                if let Some(a) = inner.active.get_mut(session) {
                    a.phase = known_phase(phase);
                    a.bytes = *bytes;
                    a.total_bytes = *total_bytes;
                    a.files = *files;
                    a.total_files = *total_files;
                    a.last = last.as_deref().map(escape_text);
                    // Resumed bytes did not cross the network: progress, not throughput.
                    let moved = bytes.saturating_sub(*resumed);
                    count(m, &mut inner.throughput, a, moved, now);
                }
            }
            ServerEvent::FileDone {
                session,
                target,
                bytes,
                seconds,
                ..
            } => {
                let a = inner.active.get(session);
                let direction = a.map_or("other", |a| a.direction);
                m.files.get_or_create(&Direction { direction }).inc();
                let r = recent_file(a, now, target, *bytes, *seconds, None);
                push_recent(&mut inner.recent, r);
            }
            ServerEvent::FileFailed {
                session,
                target,
                reason,
                code,
            } => {
                if *code == "verify" {
                    m.verify_failures.inc();
                }
                let a = inner.active.get(session);
                let r = recent_file(a, now, target, 0, 0.0, Some(reason));
                push_recent(&mut inner.recent, r);
            }
            ServerEvent::SessionEnd { .. } => inner.end(event, now),
            ServerEvent::Listening { .. }
            | ServerEvent::Stopping { .. }
            | ServerEvent::Reloaded { .. }
            | ServerEvent::Note { .. } => {}
        }
    }
}

impl Inner {
    /// [`ServerEvent::SessionStart`]: a session to follow.
    fn start(&mut self, event: &ServerEvent, now: f64) {
        let ServerEvent::SessionStart {
            peer,
            session,
            direction,
            streams,
            identity,
            export,
        } = event
        else {
            return;
        };
        if self.active.len() >= MAX_ACTIVE {
            return;
        }
        self.metrics.sessions_active.inc();
        let a = Active {
            session: escape_text(session),
            peer: peer.to_string(),
            identity: metrics::config_name(identity),
            export: metrics::config_name(export),
            direction: if *direction == "pull" { "pull" } else { "push" },
            streams: *streams,
            phase: "connecting",
            bytes: 0,
            total_bytes: None,
            files: 0,
            total_files: None,
            last: None,
            rate_bps: 0.0,
            sender_engine: None,
            receiver_engine: None,
            seconds: 0.0,
            started_at: now,
            counted_at: now,
            counted: 0,
        };
        self.active.insert(session.clone(), a);
    }

    /// [`ServerEvent::SessionEnd`]: its outcome counted, its bytes topped up, and it joins
    /// the recent ones.
    fn end(&mut self, event: &ServerEvent, now: f64) {
        let ServerEvent::SessionEnd {
            session,
            ok,
            reason,
            files,
            bytes,
            seconds,
            resent_chunks,
            ..
        } = event
        else {
            return;
        };
        let m = &self.metrics;
        let outcome = if *ok { "ok" } else { "failed" };
        m.sessions.get_or_create(&Outcome { outcome }).inc();
        m.resent_chunks.inc_by(*resent_chunks);
        let Some(mut a) = self.active.remove(session) else {
            return;
        };
        m.sessions_active.dec();
        count(m, &mut self.throughput, &mut a, *bytes, now);
        let r = Recent {
            kind: "session",
            at: round3(now),
            session: a.session,
            direction: a.direction,
            identity: a.identity,
            export: a.export,
            name: a.peer,
            bytes: *bytes,
            files: *files,
            seconds: round3(*seconds),
            outcome,
            reason: reason.as_deref().map(escape_text),
            count: 1,
        };
        push_recent(&mut self.recent, r);
    }
}

impl ServerReporter for Monitor {
    fn event(&self, event: &ServerEvent) {
        self.event_at(event, self.now());
    }
}

/// Counts a session's bytes up to `bytes` (its running total): into its byte counter, the
/// throughput ring, and its own rate.
fn count(m: &Metrics, throughput: &mut Throughput, a: &mut Active, bytes: u64, now: f64) {
    let delta = bytes.saturating_sub(a.counted);
    let account = Account {
        export: a.export.clone(),
        identity: a.identity.clone(),
    };
    let family = if a.direction == "pull" {
        &m.sent
    } else {
        &m.received
    };
    family.get_or_create(&account).inc_by(delta);
    throughput.add(a.counted_at, now, delta);
    let dt = now - a.counted_at;
    if dt > 0.05 {
        a.rate_bps = (delta as f64 * 8.0 / dt).round();
    }
    a.counted = a.counted.max(bytes);
    a.counted_at = now;
}

/// A finished (or failed, with `reason`) file of the session `a`, if known.
fn recent_file(
    a: Option<&Active>,
    now: f64,
    target: &str,
    bytes: u64,
    seconds: f64,
    reason: Option<&str>,
) -> Recent {
    Recent {
        kind: "file",
        at: round3(now),
        session: a.map(|a| a.session.clone()).unwrap_or_default(),
        direction: a.map_or("other", |a| a.direction),
        identity: a.map(|a| a.identity.clone()).unwrap_or_default(),
        export: a.map(|a| a.export.clone()).unwrap_or_default(),
        name: escape_text(target),
        bytes,
        files: u64::from(reason.is_none()),
        seconds: round3(seconds),
        outcome: if reason.is_none() { "ok" } else { "failed" },
        reason: reason.map(escape_text),
        count: 1,
    }
}

fn push_recent(recent: &mut VecDeque<Recent>, r: Recent) {
    // One tree's small files make one row, not the whole table.
    if recent.back_mut().is_some_and(|last| last.absorb(&r)) {
        return;
    }
    if recent.len() >= RECENT {
        recent.pop_front();
    }
    recent.push_back(r);
}

/// A phase name from the session layer, as one of the names it has.
fn known_phase(phase: &str) -> &'static str {
    [
        "connecting",
        "checking",
        "sending",
        "verifying and syncing",
        "committing",
        "done",
    ]
    .into_iter()
    .find(|p| *p == phase)
    .unwrap_or("other")
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}
