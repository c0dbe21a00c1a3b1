//! The transfer log (`zcp serve --transfer-log FILE`, config `transfer_log`): one JSON line per
//! file committed or failed, one per session that ended and one per session refused after its
//! client authenticated, for accounting (as GridFTP's
//! transfer log). The lines go to one writer thread ([`crate::log_writer`]) that alone
//! appends to the file, opened `O_APPEND`, whole line after whole line, so concurrent
//! sessions never interleave within a line and never wait for the disk; a line that finds the
//! writer's queue full is dropped and counted. [`TransferLog::reopen`] (on SIGHUP) lets
//! logrotate move the file away. A write that fails is cut off, reported once on the server's
//! log and never stops the server.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde_json::{Value, json};
use zcp_session::{ServerEvent, ServerReporter};
use zcp_wire::escape_text;

use crate::log_writer::{self, LogFile, Writer};
use crate::sessions::{SessionInfo, Sessions};
use crate::units::bits_per_second;

/// Appends one JSON line per file and per session to a file.
pub struct TransferLog {
    path: PathBuf,
    writer: Writer,
    sessions: Sessions,
    clock: Box<dyn Fn() -> SystemTime + Send + Sync>,
}

impl std::fmt::Debug for TransferLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransferLog")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl TransferLog {
    /// Opens (or creates) the log at `path`, which must be a regular file (see
    /// [`log_writer::open_append`]), and starts its writer thread.
    pub fn open(path: &Path) -> std::io::Result<TransferLog> {
        let file = log_writer::open_append(path)?;
        TransferLog::with_file(path, Box::new(file), log_writer::CAPACITY)
    }

    /// The log writing to `file` (opened from `path`), with room for `capacity` lines queued.
    pub fn with_file(
        path: &Path,
        file: Box<dyn LogFile>,
        capacity: usize,
    ) -> std::io::Result<TransferLog> {
        Ok(TransferLog {
            path: path.to_path_buf(),
            writer: Writer::spawn(path.to_path_buf(), file, capacity)?,
            sessions: Sessions::default(),
            clock: Box::new(SystemTime::now),
        })
    }

    /// The same log with another clock for the `time` field (for tests).
    pub fn with_clock(mut self, clock: impl Fn() -> SystemTime + Send + Sync + 'static) -> Self {
        self.clock = Box::new(clock);
        self
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Has the writer open the path again and write there from now on (after logrotate
    /// renamed the file); never waits. On an error (logged by the writer) the file open until
    /// now stays in use.
    pub fn reopen(&self) {
        self.writer.reopen();
    }

    /// Waits up to `timeout` for the lines queued so far to be written (at exit); whether
    /// they were.
    pub fn flush(&self, timeout: Duration) -> bool {
        self.writer.flush(timeout)
    }

    /// The line (without its newline) `event` makes, if any, taking it into account.
    pub fn record(&self, event: &ServerEvent) -> Option<String> {
        let ctx = self.sessions.observe(event);
        let time = humantime::format_rfc3339_millis((self.clock)()).to_string();
        let v = match event {
            ServerEvent::FileDone {
                session,
                target,
                bytes,
                skipped,
                seconds,
                verified,
                digest,
                ..
            } => {
                let mut v = common(&time, "file", session, ctx.as_ref());
                v["path"] = json!(escape_text(target));
                v["bytes"] = json!(bytes);
                v["skipped"] = json!(skipped);
                v["seconds"] = json!(seconds);
                v["rate_bps"] = json!(rate(*bytes - (*skipped).min(*bytes), *seconds));
                v["verified"] = json!(verified);
                v["outcome"] = json!("ok");
                v["code"] = Value::Null;
                v["reason"] = Value::Null;
                v["digest"] = json!(digest);
                v
            }
            ServerEvent::FileFailed {
                session,
                target,
                reason,
                code,
            } => {
                let mut v = common(&time, "file", session, ctx.as_ref());
                v["path"] = json!(escape_text(target));
                for k in ["bytes", "skipped", "seconds", "rate_bps", "digest"] {
                    v[k] = Value::Null;
                }
                v["verified"] = json!(false);
                v["outcome"] = json!("failed");
                v["code"] = json!(code);
                v["reason"] = json!(escape_text(reason));
                v
            }
            ServerEvent::SessionEnd {
                session,
                ok,
                reason,
                files,
                bytes,
                seconds,
                resent_chunks,
                failed,
                left,
                deleted,
            } => {
                let mut v = common(&time, "session", session, ctx.as_ref());
                v["files"] = json!(files);
                v["bytes"] = json!(bytes);
                v["seconds"] = json!(seconds);
                v["rate_bps"] = json!(rate(*bytes, *seconds));
                v["resent_chunks"] = json!(resent_chunks);
                v["failed_files"] = json!(failed);
                v["left_existing"] = json!(left);
                v["deleted"] = json!(deleted);
                v["outcome"] = json!(if *ok { "ok" } else { "failed" });
                v["reason"] = json!(reason.as_deref().map(escape_text));
                v
            }
            // A client that gave up before asking for anything: no transfer, no refusal.
            ServerEvent::SessionRefused { cause, .. } if *cause == zcp_session::CLIENT_GAVE_UP => {
                return None;
            }
            ServerEvent::SessionRefused {
                session,
                peer,
                identity,
                export,
                direction,
                cause,
                reason,
            } => json!({
                "time": time,
                "type": "refused",
                "session": escape_text(session),
                "identity": escape_text(identity),
                "peer": peer.to_string(),
                "export": export.as_deref().map(escape_text),
                "direction": direction,
                "outcome": "refused",
                "code": cause,
                "reason": escape_text(reason),
            }),
            _ => return None,
        };
        Some(v.to_string())
    }
}

/// Bits per second, whole.
fn rate(bytes: u64, seconds: f64) -> u64 {
    bits_per_second(bytes, seconds).round() as u64
}

/// The fields every line has: when, what, which session, whose, from where, which export,
/// which way, with which engines (`null` where the session is not known).
fn common(time: &str, kind: &str, session: &str, ctx: Option<&SessionInfo>) -> Value {
    json!({
        "time": time,
        "type": kind,
        "session": escape_text(session),
        "identity": ctx.map(|c| escape_text(&c.identity)),
        "peer": ctx.map(|c| c.peer.to_string()),
        "export": ctx.map(|c| escape_text(&c.export)),
        "direction": ctx.map(|c| c.direction),
        "engines": ctx.and_then(|c| c.engines.as_ref()).map(|(s, r)| json!({
            "sender": escape_text(s),
            "receiver": escape_text(r),
        })),
    })
}

impl ServerReporter for TransferLog {
    fn event(&self, event: &ServerEvent) {
        if let Some(mut line) = self.record(event) {
            line.push('\n');
            self.writer.send(line);
        }
    }
}

#[cfg(test)]
#[path = "transfer_log_tests.rs"]
mod tests;
