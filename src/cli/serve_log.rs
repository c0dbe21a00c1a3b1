//! `zcp serve`'s log: the tracing subscriber its `--log-level` and `--log-format` (or the
//! config file's `log_level` and `log_format`) choose, installed once the file is read.
//!
//! - `plain`: an RFC 3339 UTC timestamp, the level and the message, one line per event.
//! - `json`: one JSON object per line (timestamp, level, fields, target).
//! - `journal`: no timestamp (journald adds its own) and an `<N>` syslog priority in front of
//!   each line (sd-daemon(3)), which journald turns into the entry's priority.
//! - `auto`: `journal` when standard error is the journal's stream (`$JOURNAL_STREAM` names
//!   its device and inode, systemd.exec(5)), `plain` otherwise.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use clap::ValueEnum;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;
use zcp_report::TransferLog;
use zcp_wire::escape_text;

use zcp_report::serve_config::ServeConfig;
pub(crate) use zcp_report::serve_config::{LogFormat, LogLevel};

/// What to do about a transfer log that cannot be opened.
const HINT: &str = "name a regular file, or a new one in an existing directory, that the user \
                    running zcp may write to";

/// The log settings in force: the command line over the config file over the defaults.
#[derive(Debug, Clone)]
pub(crate) struct Logs {
    pub(crate) level: LogLevel,
    pub(crate) format: LogFormat,
    /// The transfer log's path and the flag or key that named it (for errors).
    transfer_log: Option<(&'static str, PathBuf)>,
}

impl Logs {
    /// The flags' values over the file's.
    pub(crate) fn pick(
        level: Option<LogLevel>,
        format: Option<LogFormat>,
        transfer_log: Option<&Path>,
        file: Option<&ServeConfig>,
    ) -> Logs {
        let from_file = file.and_then(|c| c.transfer_log.as_deref());
        Logs {
            level: level
                .or(file.and_then(|c| c.log_level))
                .unwrap_or(LogLevel::Info),
            format: format
                .or(file.and_then(|c| c.log_format))
                .unwrap_or(LogFormat::Auto),
            transfer_log: match (transfer_log, from_file) {
                (Some(p), _) => Some(("--transfer-log", p.to_path_buf())),
                (None, Some(p)) => Some(("transfer_log", p.to_path_buf())),
                (None, None) => None,
            },
        }
    }

    /// `--check-config`'s line about them.
    pub(crate) fn summary(&self) -> String {
        let name = |v: Option<clap::builder::PossibleValue>| {
            v.map(|p| p.get_name().to_string()).unwrap_or_default()
        };
        format!(
            "logs: level {}, format {}; transfer log {}",
            name(self.level.to_possible_value()),
            name(self.format.to_possible_value()),
            self.transfer_log
                .as_ref()
                .map_or("off".into(), |(_, p)| escape_text(&p.display().to_string()))
        )
    }

    /// The transfer log, opened for appending (none when not asked for); an error names the
    /// flag or key to fix (exit 2).
    pub(crate) fn open_transfer_log(&self) -> anyhow::Result<Option<Arc<TransferLog>>> {
        let Some((key, path)) = &self.transfer_log else {
            return Ok(None);
        };
        match TransferLog::open(path) {
            Ok(t) => Ok(Some(Arc::new(t))),
            Err(e) => super::usage!(
                "{key} {}: cannot open it for appending: {e} ({HINT})",
                escape_text(&path.display().to_string())
            ),
        }
    }

    /// `--check-config`: whether the transfer log could be opened, without creating it. An
    /// existing path must be a regular file the user may append to; a missing one needs a
    /// directory the user may write in. An error names the flag or key to fix (exit 2).
    pub(crate) fn check_transfer_log(&self) -> anyhow::Result<()> {
        let Some((key, path)) = &self.transfer_log else {
            return Ok(());
        };
        if let Err(why) = zcp_report::log_writer::check(path) {
            super::usage!(
                "{key} {}: {why} ({HINT})",
                escape_text(&path.display().to_string())
            );
        }
        Ok(())
    }
}

/// Installs the subscriber for `zcp serve`: `level` (raised by `-v` to `verbose` when `-v`
/// was given and asks for more) in `format`, on standard error. Returns whether the lines are
/// journald's.
pub(crate) fn install(level: LogLevel, verbose: Option<Level>, format: LogFormat) -> bool {
    let max = verbose.map_or(level.level(), |v| level.level().max(v));
    let format = match format {
        LogFormat::Auto if stderr_is_journal() => LogFormat::Journal,
        LogFormat::Auto => LogFormat::Plain,
        f => f,
    };
    let builder = tracing_subscriber::fmt()
        .with_max_level(max)
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .with_current_span(false)
            .with_span_list(false)
            .try_init(),
        f => builder
            .event_format(Lines {
                journal: f == LogFormat::Journal,
            })
            .try_init(),
    };
    format == LogFormat::Journal
}

/// Whether standard error is the stream systemd connected to the journal: `$JOURNAL_STREAM`
/// is `DEVICE:INODE` of it (a redirect to a file inherits the variable, so it is compared).
fn stderr_is_journal() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    journal_stream_matches(&v.to_string_lossy(), stderr_id())
}

/// The device and inode of standard error, if it can be looked at.
fn stderr_id() -> Option<(u64, u64)> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let fd = std::io::stderr().as_fd().try_clone_to_owned().ok()?;
    let m = std::fs::File::from(fd).metadata().ok()?;
    Some((m.dev(), m.ino()))
}

/// Whether `$JOURNAL_STREAM`'s `DEVICE:INODE` names `id`.
fn journal_stream_matches(var: &str, id: Option<(u64, u64)>) -> bool {
    let parsed = var
        .split_once(':')
        .and_then(|(d, i)| Some((d.parse::<u64>().ok()?, i.parse::<u64>().ok()?)));
    parsed.is_some() && parsed == id
}

/// The syslog priority journald reads from a `<N>` prefix (sd-daemon(3)).
fn priority(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        _ => 7,
    }
}

/// The `plain` and `journal` formats: the server's events by their message alone (their
/// fields are the message's facts); other targets' events with their target and fields.
struct Lines {
    journal: bool,
}

impl<S, N> FormatEvent<S, N> for Lines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut w: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        if self.journal {
            write!(w, "<{}>", priority(meta.level()))?;
        } else {
            write!(
                w,
                "{} {:>5} ",
                humantime::format_rfc3339_millis(SystemTime::now()),
                meta.level()
            )?;
        }
        if meta.target() == zcp_report::LOG_TARGET {
            let mut m = Message(String::new());
            event.record(&mut m);
            w.write_str(&m.0)?;
        } else {
            write!(w, "{}: ", meta.target())?;
            ctx.field_format().format_fields(w.by_ref(), event)?;
        }
        writeln!(w)
    }
}

/// The `message` field of an event.
struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_stream_must_name_stderr_itself() {
        assert!(journal_stream_matches("8:1234", Some((8, 1234))));
        assert!(!journal_stream_matches("8:1234", Some((8, 1235))));
        assert!(!journal_stream_matches("8:1234", None));
        assert!(!journal_stream_matches("garbage", None));
        assert!(!journal_stream_matches("", Some((0, 0))));
    }

    #[test]
    fn priorities_follow_syslog() {
        assert_eq!(priority(&Level::ERROR), 3);
        assert_eq!(priority(&Level::WARN), 4);
        assert_eq!(priority(&Level::INFO), 6);
        assert_eq!(priority(&Level::TRACE), 7);
    }
}
