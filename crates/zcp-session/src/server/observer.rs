//! A session's observer on the server: turns its role's reports into [`ServerEvent`]s (the
//! peer's words clipped, notices capped), keeps what the exit code needs, and accounts for a
//! session refused before it started.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use zcp_wire::escape_text;

use crate::error::SessionError;
use crate::event::{Failure, FileOutcome, Observer, ServerEvent, ServerReporter};

/// Notices (failed files, refusals, the peer's own notes) logged per session; past this they
/// are counted, and the count is logged when the session ends. A peer cannot flood the log.
const MAX_LOGGED_NOTICES: u64 = 100;
/// Characters of one peer text (a path, a reason) a log line shows at most.
const MAX_LOGGED_TEXT: usize = 300;

/// `text` cut to [`MAX_LOGGED_TEXT`] characters, saying how much was left out.
pub(super) fn clip(text: String) -> String {
    match text.char_indices().nth(MAX_LOGGED_TEXT) {
        None => text,
        Some((at, _)) => format!("{}... ({} bytes more)", &text[..at], text.len() - at),
    }
}

/// Who opened a session and what it asked for.
pub(super) struct Asked {
    pub(super) peer: SocketAddr,
    pub(super) identity: String,
    pub(super) export: Option<String>,
    pub(super) direction: Option<&'static str>,
    /// Refused the export or the direction it asked for (counted as `access`).
    pub(super) access_refused: bool,
    /// Told "no export" of an export that exists, but not for this identity.
    pub(super) hidden: bool,
}

/// Turns a role's reports into server events, and keeps what the session's exit code needs.
pub(super) struct ServerObserver<'a> {
    pub(super) reporter: &'a dyn ServerReporter,
    pub(super) session: String,
    pub(super) files: u64,
    /// Failure classes of the entries that failed, in order (the first few), and the first
    /// integrity failure however late it came: what the session's exit code needs.
    pub(super) failures: Vec<&'static str>,
    /// Notices so far, logged or not.
    pub(super) notices: u64,
    /// Entries that failed, logged or not.
    pub(super) failed_files: u64,
    /// `--ignore-existing` (or a quick check): a file refused as already there (class
    /// `exists`) was left as the client asked: logged, counted here, not as a failure.
    pub(super) ignore_existing: bool,
    pub(super) left_existing: u64,
    /// Entries removed under `--delete` (each logged, as is each a dry run names).
    pub(super) deleted: u64,
    /// Whether the session was granted and started (its `SessionStart` went out).
    pub(super) started: bool,
    /// Who asked, and for what once its `Open` said: what a refusal is logged with.
    pub(super) asked: Asked,
    /// Set when the server is stopping.
    pub(super) shutdown: &'a std::sync::atomic::AtomicBool,
    /// Payload bytes moved so far, once the role runs; bytes resumed rather than sent.
    pub(super) moved: Option<Box<dyn Fn() -> u64 + Send>>,
    pub(super) skipped: u64,
    /// What the sender counted (a pull), the last file committed, the last `Progress`.
    pub(super) plan: Option<(u64, u64)>,
    pub(super) last: Option<String>,
    pub(super) progress_at: Option<Instant>,
}

/// How often a running session's [`ServerEvent::Progress`] goes out.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

impl ServerObserver<'_> {
    /// The session ended: what was not logged is counted.
    pub(super) fn finish(&mut self) {
        if self.notices > MAX_LOGGED_NOTICES {
            self.reporter.event(&ServerEvent::Note {
                session: self.session.clone(),
                message: format!(
                    "{} more notices in this session not logged",
                    self.notices - MAX_LOGGED_NOTICES
                ),
            });
        }
    }

    /// Whether `failure` is a file left as it was at the client's asking (and counts it).
    fn left(&mut self, failure: Option<&Failure>) -> bool {
        let left = self.ignore_existing
            && failure.is_some_and(|f| f.code == zcp_wire::ErrorCode::Exists.name());
        self.left_existing += u64::from(left);
        left
    }

    pub(super) fn failed(&mut self, code: &'static str) {
        self.failed_files += 1;
        let integrity = |c: &str| matches!(c, "verify" | "source-changed");
        if self.failures.len() < 64
            || (integrity(code) && !self.failures.iter().any(|c| integrity(c)))
        {
            self.failures.push(code);
        }
    }
}

impl Observer for ServerObserver<'_> {
    fn deleted(&mut self, path: String, dir: bool, dry_run: bool) {
        let what = if dir { "directory" } else { "entry" };
        let pull = self.asked.direction == Some("pull");
        let message = match (dry_run, pull) {
            (true, false) => format!("would delete {what} {path} (--delete-dry-run)"),
            (false, false) => format!("deleted {what} {path} (--delete)"),
            (true, true) => format!("the client would delete its {what} {path} (--delete-dry-run)"),
            (false, true) => format!("the client deleted its {what} {path} (--delete)"),
        };
        if pull {
            // The client's word about its own copy: logged as a notice is, within the cap, so
            // a client that may only read cannot fill the server's log.
            return self.notice(None, Some(message));
        }
        // What this server removed: every one logged, never capped, and counted.
        self.deleted += u64::from(!dry_run);
        self.reporter.event(&ServerEvent::Note {
            session: self.session.clone(),
            message,
        });
    }

    fn engines(&mut self, sender: &str, _: Option<&str>, receiver: &str, _: Option<&str>) {
        self.reporter.event(&ServerEvent::Engines {
            session: self.session.clone(),
            sender: sender.to_string(),
            receiver: receiver.to_string(),
        });
    }

    fn file_done(&mut self, d: FileOutcome) {
        // A file left at the client's asking is logged (the transfer log accounts for every
        // file a session named) but is no failure of the session.
        let left = self.left(d.failure.as_ref());
        match d.failure {
            None => {
                self.files += 1;
                self.skipped += d.skipped;
                // Whole: a path is at most 4096 bytes, and the transfer log must name the file.
                let target = d.path;
                self.last = Some(target.clone());
                self.reporter.event(&ServerEvent::FileDone {
                    session: self.session.clone(),
                    target,
                    bytes: d.bytes,
                    skipped: d.skipped,
                    seconds: d.seconds,
                    engine: d.engine,
                    verified: d.verified,
                    stored: d.stored,
                    digest: d.verified.then(|| hex::encode(d.digest)),
                });
            }
            Some(f) => {
                // One event per announced file, as for a file committed: never capped (the
                // transfer log accounts for each); the peer's words in it are clipped.
                if !left {
                    self.failed(f.code);
                }
                self.reporter.event(&ServerEvent::FileFailed {
                    session: self.session.clone(),
                    target: if f.path.is_empty() {
                        d.path
                    } else {
                        clip(f.path)
                    },
                    reason: clip(f.message),
                    code: f.code,
                })
            }
        }
    }

    fn notice(&mut self, failure: Option<Failure>, note: Option<String>) {
        if let Some(f) = &failure
            && !self.left(Some(f))
        {
            self.failed(f.code);
        }
        self.notices += 1;
        if self.notices > MAX_LOGGED_NOTICES {
            return;
        }
        if let Some(f) = failure {
            self.reporter.event(&ServerEvent::FileFailed {
                session: self.session.clone(),
                target: clip(f.path),
                reason: clip(f.message),
                code: f.code,
            });
        }
        if let Some(message) = note {
            self.reporter.event(&ServerEvent::Note {
                session: self.session.clone(),
                message: clip(message),
            });
        }
    }

    fn tick(&mut self, phase: crate::event::Phase) {
        let now = Instant::now();
        if self.progress_at.is_some_and(|at| now < at + PROGRESS_EVERY) {
            return;
        }
        self.progress_at = Some(now);
        let moved = self.moved.as_ref().map_or(0, |m| m());
        self.reporter.event(&ServerEvent::Progress {
            session: self.session.clone(),
            phase: phase.name(),
            bytes: moved + self.skipped,
            resumed: self.skipped,
            total_bytes: self.plan.map(|p| p.1),
            files: self.files,
            total_files: self.plan.map(|p| p.0),
            last: self.last.clone(),
        });
    }

    fn plan(&mut self, files: u64, bytes: u64) {
        self.plan = Some((files, bytes));
    }

    fn stop(&self) -> Option<String> {
        self.shutdown
            .load(Ordering::Relaxed)
            .then(|| "the server is shutting down".to_string())
    }
}

impl ServerObserver<'_> {
    /// The event for a session refused before it started (`error`: why, when known), with
    /// who asked for what.
    pub(super) fn refusal(&self, error: Option<&SessionError>) -> ServerEvent {
        let (cause, reason) = match error {
            Some(SessionError::Refusing { code, message }) => (code.name(), escape_text(message)),
            // The client's own `Error` before it opened anything: it gave up.
            Some(SessionError::Refused { message, .. }) => {
                (crate::event::CLIENT_GAVE_UP, escape_text(message))
            }
            Some(e @ SessionError::Protocol { .. }) => ("protocol", escape_text(&e.to_string())),
            Some(e) => ("other", escape_text(&e.to_string())),
            None => ("other", "the session ended before it started".into()),
        };
        let a = &self.asked;
        let cause = if a.access_refused { "access" } else { cause };
        let reason = clip(reason);
        let reason = if a.hidden {
            format!(
                "{reason} (the client is told the same as for a missing export; this one \
                 exists, but identity '{}' has no access to it)",
                escape_text(&a.identity)
            )
        } else {
            reason
        };
        ServerEvent::SessionRefused {
            session: self.session.clone(),
            peer: a.peer,
            identity: a.identity.clone(),
            export: a.export.clone(),
            direction: a.direction,
            cause,
            reason,
        }
    }
}
