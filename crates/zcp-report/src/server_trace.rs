//! The server's log as [`tracing`] events (`zcp serve`): one event per server event, target
//! [`TARGET`], with the same escaped line as [`crate::ServerLog`] for its message and the
//! session's facts as fields (`session`, `peer`, `identity`, `export`, `direction`, `path`,
//! `bytes`, `files`, `code`, `digest`), so a JSON subscriber writes them as data. Where the
//! lines go, with what timestamp and prefix, is the subscriber's business.

use std::io::Write;
use std::sync::Mutex;

use tracing::Level;
use zcp_engine::sync::Locked;
use zcp_session::{ServerEvent, ServerReporter};

use crate::server::message;
use crate::sessions::Sessions;

/// The target of the server's log events (`--log-level` filters them, and the plain and
/// journal formats print their message alone).
pub const TARGET: &str = "zcp::server";

/// Turns server events into tracing events; the listening line goes to `out` instead, as
/// plain text (scripts read the port from it), after an RFC 3339 timestamp or, for journald,
/// a `<6>` priority.
#[derive(Debug)]
pub struct ServerTrace<O: Write + Send> {
    out: Mutex<O>,
    journal: bool,
    sessions: Sessions,
}

impl<O: Write + Send> ServerTrace<O> {
    /// A log writing the listening line to `out` (for journald when `journal`) and the rest
    /// to the tracing subscriber.
    pub fn new(out: O, journal: bool) -> Self {
        ServerTrace {
            out: Mutex::new(out),
            journal,
            sessions: Sessions::default(),
        }
    }
}

/// How grave an event is: a failed reload is an error; a refusal, a file not committed, a
/// failed session or partial files found at start are warnings; the rest is information.
pub fn level(event: &ServerEvent) -> Level {
    match event {
        ServerEvent::Reloaded { ok: false, .. } => Level::ERROR,
        ServerEvent::SessionEnd {
            ok: false,
            reason: Some(r),
            ..
        } if r.starts_with(zcp_session::STOPPED_BY_CLIENT) => Level::INFO,
        // Probes alone (zcp doctor, health checks) are no warning.
        ServerEvent::Shed {
            evicted: 0,
            expired: 0,
            gave_up: 0,
            refused: 0,
            descriptors: 0,
            ..
        } => Level::INFO,
        ServerEvent::SessionRefused { cause, .. } if *cause == zcp_session::CLIENT_GAVE_UP => {
            Level::INFO
        }
        ServerEvent::Rejected { .. }
        | ServerEvent::SessionRefused { .. }
        | ServerEvent::Shed { .. }
        | ServerEvent::FileFailed { .. }
        | ServerEvent::Leftovers { .. }
        | ServerEvent::SessionEnd { ok: false, .. } => Level::WARN,
        ServerEvent::Progress { .. } => Level::DEBUG,
        _ => Level::INFO,
    }
}

/// One event at a level chosen at run time (tracing's macros want a constant one).
macro_rules! at_level {
    ($level:expr, $($rest:tt)*) => {
        match $level {
            Level::ERROR => tracing::event!(target: TARGET, Level::ERROR, $($rest)*),
            Level::WARN => tracing::event!(target: TARGET, Level::WARN, $($rest)*),
            Level::INFO => tracing::event!(target: TARGET, Level::INFO, $($rest)*),
            Level::DEBUG => tracing::event!(target: TARGET, Level::DEBUG, $($rest)*),
            _ => tracing::event!(target: TARGET, Level::TRACE, $($rest)*),
        }
    };
}

/// Whether an event at `level` would be logged (so a filtered one is not even built).
fn enabled(level: Level) -> bool {
    match level {
        Level::ERROR => tracing::enabled!(target: TARGET, Level::ERROR),
        Level::WARN => tracing::enabled!(target: TARGET, Level::WARN),
        Level::INFO => tracing::enabled!(target: TARGET, Level::INFO),
        Level::DEBUG => tracing::enabled!(target: TARGET, Level::DEBUG),
        _ => tracing::enabled!(target: TARGET, Level::TRACE),
    }
}

impl<O: Write + Send> ServerReporter for ServerTrace<O> {
    fn event(&self, event: &ServerEvent) {
        if let ServerEvent::Listening { .. } = event {
            let line = if self.journal {
                format!("<6>{}\n", message(event, None))
            } else {
                format!(
                    "{} {}\n",
                    humantime::format_rfc3339_millis(std::time::SystemTime::now()),
                    message(event, None)
                )
            };
            let mut out = self.out.locked();
            let _ = out.write_all(line.as_bytes());
            let _ = out.flush();
            return;
        }
        let ctx = self.sessions.observe(event);
        // Progress is for the metrics and the status page; the log has the files and the end.
        let level = level(event);
        if matches!(event, ServerEvent::Progress { .. }) || !enabled(level) {
            return;
        }
        let text = message(event, ctx.as_ref());
        let esc = |s: &str| zcp_wire::escape_text(s);
        let (mut path, mut bytes, mut files, mut code, mut digest) = (None, None, None, None, None);
        let mut session = None;
        let mut peer = ctx.as_ref().map(|c| c.peer.to_string());
        match event {
            ServerEvent::Rejected { peer: p, cause, .. } => {
                peer = Some(p.to_string());
                code = Some(*cause);
            }
            ServerEvent::SessionRefused {
                session: s,
                peer: p,
                cause,
                ..
            } => {
                session = Some(s.as_str());
                peer = Some(p.to_string());
                code = Some(*cause);
            }
            ServerEvent::SessionStart { session: s, .. }
            | ServerEvent::Engines { session: s, .. }
            | ServerEvent::Note { session: s, .. } => session = Some(s.as_str()),
            ServerEvent::FileDone {
                session: s,
                target,
                bytes: b,
                digest: d,
                ..
            } => {
                session = Some(s.as_str());
                path = Some(target.as_str());
                bytes = Some(*b);
                digest = d.as_deref();
            }
            ServerEvent::FileFailed {
                session: s,
                target,
                code: c,
                ..
            } => {
                session = Some(s.as_str());
                path = Some(target.as_str());
                code = Some(*c);
            }
            ServerEvent::SessionEnd {
                session: s,
                files: f,
                bytes: b,
                ..
            } => {
                session = Some(s.as_str());
                files = Some(*f);
                bytes = Some(*b);
            }
            _ => {}
        }
        let mut identity = ctx.as_ref().map(|c| esc(&c.identity));
        let mut export = ctx.as_ref().map(|c| esc(&c.export));
        let mut direction = ctx.as_ref().map(|c| c.direction);
        if let ServerEvent::SessionRefused {
            identity: i,
            export: e,
            direction: d,
            ..
        } = event
        {
            identity = Some(esc(i));
            export = e.as_deref().map(esc);
            direction = *d;
        }
        at_level!(
            level, session, peer, identity, export, direction, path, bytes, files, code, digest,
            "{text}"
        );
    }
}
