//! `zcp serve --config FILE`: the TOML file, read and checked whole before the server uses it
//! (and again on SIGHUP). Every error names the file, the line and the key to fix.
//!
//! It lives in this library rather than in the binary so that the `config_file` fuzz target
//! can reach [`parse`]; the binary (`src/cli/serve.rs`) calls [`load`] and [`summary`].

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use clap::ValueEnum;
use serde::Deserialize;
use toml::Spanned;
use tracing::Level;
use zcp_session::{AccessConfig, ExportSpec, IdentitySpec, Permission};
use zcp_wire::escape_text;

mod http;
pub use http::HttpSettings;

/// `--log-level`, config `log_level`: the least grave events logged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogLevel {
    /// Failed reloads and transfer-log write errors only.
    Error,
    /// Also refusals, files not committed and failed sessions.
    Warn,
    /// Also each session's start, files and end (the default).
    Info,
    /// Also the roles' own debug output.
    Debug,
    /// Everything.
    Trace,
}

impl LogLevel {
    /// The tracing level.
    pub fn level(self) -> Level {
        match self {
            LogLevel::Error => Level::ERROR,
            LogLevel::Warn => Level::WARN,
            LogLevel::Info => Level::INFO,
            LogLevel::Debug => Level::DEBUG,
            LogLevel::Trace => Level::TRACE,
        }
    }
}

/// `--log-format`, config `log_format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// `journal` when standard error goes to the journal, else `plain`.
    Auto,
    /// Timestamp, level, message.
    Plain,
    /// One JSON object per line.
    Json,
    /// `<N>` priority prefixes, no timestamp (for journald).
    Journal,
}

/// A value of `E` from its name, or an error listing the names (for the config file).
pub fn parse_value<E: ValueEnum>(s: &str) -> Result<E, String> {
    E::from_str(s, false).map_err(|_| {
        let names: Vec<String> = E::value_variants()
            .iter()
            .filter_map(|v| v.to_possible_value().map(|p| p.get_name().to_string()))
            .collect();
        format!("'{}' is not one of {}", s.escape_debug(), names.join(", "))
    })
}

/// The file as written. Unknown keys are errors: a misspelt key is refused, not silently
/// ignored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    listen: Option<Spanned<Vec<Spanned<String>>>>,
    max_streams: Option<Spanned<i64>>,
    max_sessions: Option<Spanned<i64>>,
    idle_timeout: Option<Spanned<i64>>,
    handshake_timeout: Option<Spanned<i64>>,
    max_pending: Option<Spanned<i64>>,
    max_pending_per_source: Option<Spanned<i64>>,
    log_level: Option<Spanned<String>>,
    log_format: Option<Spanned<String>>,
    transfer_log: Option<Spanned<PathBuf>>,
    metrics: Option<Spanned<String>>,
    http: Option<Spanned<http::HttpToml>>,
    #[serde(default)]
    require_encryption: bool,
    #[serde(default)]
    export: BTreeMap<String, Spanned<ExportToml>>,
    #[serde(default)]
    identity: BTreeMap<String, Spanned<IdentityToml>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExportToml {
    path: Spanned<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IdentityToml {
    key_file: Spanned<PathBuf>,
    #[serde(default)]
    access: BTreeMap<String, Spanned<String>>,
    #[serde(default)]
    require_encryption: bool,
}

/// What a config file says, checked: the limits it sets (the command line overrides each)
/// and the exports and identities.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Addresses to listen on.
    pub listen: Option<Vec<SocketAddr>>,
    /// `max_streams`: data streams per session.
    pub max_streams: Option<u16>,
    /// `max_sessions`: sessions at once.
    pub max_sessions: Option<usize>,
    /// `idle_timeout`, seconds.
    pub idle_timeout: Option<u64>,
    /// `handshake_timeout`, seconds.
    pub handshake_timeout: Option<u64>,
    /// `max_pending`: connections in their handshake at once.
    pub max_pending: Option<u64>,
    /// `max_pending_per_source`: of them, from one address (IPv6: one /64).
    pub max_pending_per_source: Option<u64>,
    /// `log_level`.
    pub log_level: Option<LogLevel>,
    /// `log_format`.
    pub log_format: Option<LogFormat>,
    /// The transfer log's path (absolute).
    pub transfer_log: Option<PathBuf>,
    /// Where the metrics and status page listen (off when absent).
    pub metrics: Option<SocketAddr>,
    /// The HTTPS/WebDAV face (`[http]`; off when absent).
    pub http: Option<HttpSettings>,
    /// The exports and identities, checked ([`AccessConfig::check`]).
    pub access: AccessConfig,
    /// Each identity's key file, in identity order (for the summary).
    pub key_files: Vec<PathBuf>,
}

/// Reads and checks `path`; the error says what to fix, where.
pub fn load(path: &Path) -> Result<ServeConfig, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| escape_text(&format!("config file {}: {e}", path.display())))?;
    parse(&text, path)
}

/// Checks the text of a config file read from `path`. The error is escaped
/// ([`escape_text`]): it quotes names, paths and values from the file, and a control
/// character among them must not reach the terminal or the journal.
pub fn parse(text: &str, path: &Path) -> Result<ServeConfig, String> {
    check(text, path).map_err(|m| escape_text(&m))
}

/// [`parse`], its error not yet escaped.
fn check(text: &str, path: &Path) -> Result<ServeConfig, String> {
    let file: FileToml = toml::from_str(text).map_err(|e| toml_error(text, path, &e))?;
    let err = |at: usize, key: &str, what: String| {
        format!(
            "config file {} line {}: {key}: {what}",
            path.display(),
            line_of(text, at)
        )
    };
    let listen = match &file.listen {
        None => None,
        Some(l) if l.get_ref().is_empty() => {
            return Err(err(
                l.span().start,
                "listen",
                "give at least one address, e.g. [\"[::]:5310\"]".into(),
            ));
        }
        Some(l) => Some(
            l.get_ref()
                .iter()
                .map(|a| {
                    a.get_ref().parse::<SocketAddr>().map_err(|_| {
                        err(
                            a.span().start,
                            "listen",
                            format!(
                                "'{}' is not an address and port (e.g. \"[::]:5310\" or \"10.0.0.2:5310\")",
                                a.get_ref().escape_debug()
                            ),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
    };
    let metrics = match &file.metrics {
        None => None,
        Some(m) => Some(m.get_ref().parse::<SocketAddr>().map_err(|_| {
            err(
                m.span().start,
                "metrics",
                format!(
                    "'{}' is not an address and port (e.g. \"127.0.0.1:9310\")",
                    m.get_ref().escape_debug()
                ),
            )
        })?),
    };
    let number = |v: &Option<Spanned<i64>>, key: &str, max: u64| -> Result<Option<u64>, String> {
        match v {
            None => Ok(None),
            Some(n) if *n.get_ref() >= 1 && (*n.get_ref() as u64) <= max => {
                Ok(Some(*n.get_ref() as u64))
            }
            Some(n) => Err(err(
                n.span().start,
                key,
                format!("{} is not between 1 and {max}", n.get_ref()),
            )),
        }
    };
    let max_streams = number(&file.max_streams, "max_streams", u64::from(u16::MAX))?;
    let max_sessions = number(&file.max_sessions, "max_sessions", 1 << 20)?;
    let idle_timeout = number(&file.idle_timeout, "idle_timeout", 86_400 * 365)?;
    let handshake_timeout = number(&file.handshake_timeout, "handshake_timeout", 3600)?;
    let max_pending = number(&file.max_pending, "max_pending", 1 << 20)?;
    let max_pending_per_source = number(
        &file.max_pending_per_source,
        "max_pending_per_source",
        1 << 20,
    )?;
    let (log_level, log_format, transfer_log) = log_keys(&file, &err)?;
    let http = file
        .http
        .as_ref()
        .map(|h| http::http_keys(h, &err))
        .transpose()?;

    let mut exports = Vec::new();
    for (name, e) in &file.export {
        let key = format!("export.{name}");
        zcp_session::check_name(name).map_err(|m| err(e.span().start, &key, m))?;
        let p = &e.get_ref().path;
        let key = format!("{key}.path");
        if !p.get_ref().is_absolute() {
            let m = format!("'{}' is not an absolute path", p.get_ref().display());
            return Err(err(p.span().start, &key, m));
        }
        if !p.get_ref().is_dir() {
            let m = format!(
                "'{}' is not a directory (create it, or fix the path)",
                p.get_ref().display()
            );
            return Err(err(p.span().start, &key, m));
        }
        // The path as given must be the directory itself: a symbolic link on the way (or a
        // `..`) would be resolved again at each start and reload, so whoever can replace the
        // link moves the export.
        match std::fs::canonicalize(p.get_ref()) {
            Ok(real) if real == *p.get_ref() => {}
            Ok(real) => {
                let m = format!(
                    "'{}' leads through a symbolic link or '..' to '{}': name that directory itself",
                    p.get_ref().display(),
                    real.display()
                );
                return Err(err(p.span().start, &key, m));
            }
            Err(e) => {
                let m = format!("'{}': {e}", p.get_ref().display());
                return Err(err(p.span().start, &key, m));
            }
        }
        // Exports must not nest: each key's access to one would reach the other's files.
        if let Some(other) = exports.iter().find(|o: &&ExportSpec| {
            o.path.starts_with(p.get_ref()) || p.get_ref().starts_with(&o.path)
        }) {
            let m = format!(
                "'{}' and export.{}'s '{}' overlap (one holds the other): exports must be \
                 separate directories, or access to one reaches the other's files",
                p.get_ref().display(),
                other.name,
                other.path.display()
            );
            return Err(err(p.span().start, &key, m));
        }
        exports.push(ExportSpec {
            name: name.clone(),
            path: p.get_ref().clone(),
        });
    }
    if exports.is_empty() {
        return Err(format!(
            "config file {}: no export: add at least one [export.NAME] with a path",
            path.display()
        ));
    }
    let mut identities: Vec<IdentitySpec> = Vec::new();
    let mut key_files = Vec::new();
    for (name, i) in &file.identity {
        let key = format!("identity.{name}");
        zcp_session::check_name(name).map_err(|m| err(i.span().start, &key, m))?;
        let kf = &i.get_ref().key_file;
        let psk = zcp_session::keyfile::read_key(kf.get_ref())
            .map_err(|e| err(kf.span().start, &format!("{key}.key_file"), e.to_string()))?;
        if let Some(other) = identities.iter().find(|o| o.psk == psk) {
            let m = format!(
                "holds the same key as identity '{}': give each identity its own key (zcp keygen)",
                other.name
            );
            return Err(err(kf.span().start, &format!("{key}.key_file"), m));
        }
        let mut access = BTreeMap::new();
        for (export, perm) in &i.get_ref().access {
            let at = perm.span().start;
            let akey = format!("{key}.access.{export}");
            if !file.export.contains_key(export) {
                return Err(err(at, &akey, "names no [export.NAME] in this file".into()));
            }
            let p = Permission::parse(perm.get_ref()).ok_or_else(|| {
                let m = format!(
                    "'{}' is not read, write, read-write or read-write-delete",
                    perm.get_ref().escape_debug()
                );
                err(at, &akey, m)
            })?;
            access.insert(export.clone(), p);
        }
        identities.push(IdentitySpec {
            name: name.clone(),
            psk,
            access,
            require_encryption: file.require_encryption || i.get_ref().require_encryption,
        });
        key_files.push(kf.get_ref().clone());
    }
    let access = AccessConfig {
        named: true,
        exports,
        identities,
    };
    access
        .check()
        .map_err(|m| format!("config file {}: {m}", path.display()))?;
    Ok(ServeConfig {
        listen,
        max_streams: max_streams.map(|n| n as u16),
        max_sessions: max_sessions.map(|n| n as usize),
        idle_timeout,
        handshake_timeout,
        max_pending,
        max_pending_per_source,
        log_level,
        log_format,
        transfer_log,
        metrics,
        http,
        access,
        key_files,
    })
}

/// TOML's own error (a syntax error, an unknown key, a value of the wrong type) with the file,
/// the line and, when the line sets one, the key.
fn toml_error(text: &str, path: &Path, e: &toml::de::Error) -> String {
    let line = e.span().map(|s| line_of(text, s.start));
    let at = line.map(|l| format!(" line {l}")).unwrap_or_default();
    // A value of the wrong type: its message names the type, the line names the key.
    let key = line
        .and_then(|l| text.lines().nth(l - 1))
        .and_then(|l| l.split_once('='))
        .map(|(k, _)| k.trim())
        .filter(|k| !k.is_empty() && !k.starts_with(['[', '#']) && !e.message().contains(k))
        .map(|k| format!("{}: ", k.escape_debug()))
        .unwrap_or_default();
    format!(
        "config file {}{at}: {key}{}",
        path.display(),
        e.message().trim_end()
    )
}

/// Makes an error from a byte offset, the key and what is wrong.
pub(crate) type Err<'a> = &'a dyn Fn(usize, &str, String) -> String;

/// A file's `log_level`, `log_format` and `transfer_log`.
type LogKeys = (Option<LogLevel>, Option<LogFormat>, Option<PathBuf>);

/// The file's `log_level`, `log_format` and `transfer_log`, checked.
fn log_keys(file: &FileToml, err: Err<'_>) -> Result<LogKeys, String> {
    let log_level = file
        .log_level
        .as_ref()
        .map(|v| parse_value(v.get_ref()).map_err(|m| err(v.span().start, "log_level", m)))
        .transpose()?;
    let log_format = file
        .log_format
        .as_ref()
        .map(|v| parse_value(v.get_ref()).map_err(|m| err(v.span().start, "log_format", m)))
        .transpose()?;
    let transfer_log = match &file.transfer_log {
        Some(t) if !t.get_ref().is_absolute() => {
            let m = format!(
                "'{}' is not an absolute path (e.g. \"/var/log/zcp/transfers.jsonl\")",
                t.get_ref().display()
            );
            return Err(err(t.span().start, "transfer_log", m));
        }
        t => t.as_ref().map(|t| t.get_ref().clone()),
    };

    Ok((log_level, log_format, transfer_log))
}

/// The 1-based line of byte offset `at` in `text`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// `serve --check-config`'s summary: names, paths and access, never a key's bytes.
pub fn summary(access: &AccessConfig, key_files: &[PathBuf]) -> String {
    let mut out = String::new();
    for e in &access.exports {
        if access.named {
            out.push_str(&format!("export {}: {}\n", e.name, e.path.display()));
        } else {
            out.push_str(&format!("root: {}\n", e.path.display()));
        }
    }
    for (i, id) in access.identities.iter().enumerate() {
        let grants: Vec<String> = id
            .access
            .iter()
            .map(|(e, p)| format!("{e} {}", p.name()))
            .collect();
        let file = key_files
            .get(i)
            .map(|f| format!(" (key file {})", f.display()))
            .unwrap_or_default();
        out.push_str(&format!(
            "identity {}{file}: {}{}\n",
            id.name,
            if grants.is_empty() {
                "no access".to_string()
            } else {
                grants.join(", ")
            },
            if id.require_encryption {
                "; encryption required"
            } else {
                ""
            }
        ));
    }
    // Names and paths come from the operator's file, but still never drive a terminal.
    out.lines()
        .map(|l| format!("{}\n", escape_text(l)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    struct Fixture {
        dir: tempfile::TempDir,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            for d in ["in", "arch"] {
                std::fs::create_dir(dir.path().join(d)).unwrap();
            }
            for (k, b) in [("a.key", 1u8), ("b.key", 2), ("same.key", 1)] {
                let p = dir.path().join(k);
                let psk = zcp_wire::Psk::from_bytes(std::array::from_fn(|i| {
                    b.wrapping_mul(31) ^ i as u8
                }));
                std::fs::write(&p, psk.to_file_text()).unwrap();
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
            }
            Fixture { dir }
        }

        fn p(&self, name: &str) -> String {
            self.dir.path().join(name).display().to_string()
        }

        fn good(&self) -> String {
            format!(
                "listen = [\"127.0.0.1:5310\", \"[::1]:5311\"]\nmax_streams = 4\nidle_timeout = 30\n\n[export.incoming]\npath = \"{}\"\n\n[export.archive]\npath = \"{}\"\n\n[identity.observatory]\nkey_file = \"{}\"\naccess = {{ incoming = \"write\", archive = \"read\" }}\n\n[identity.lab]\nkey_file = \"{}\"\naccess = {{ archive = \"read-write\" }}\n",
                self.p("in"),
                self.p("arch"),
                self.p("a.key"),
                self.p("b.key")
            )
        }

        fn parse(&self, text: &str) -> Result<ServeConfig, String> {
            parse(text, Path::new("/etc/zcp/zcp.toml"))
        }
    }

    #[test]
    fn encryption_is_required_for_the_server_or_per_identity() {
        let f = Fixture::new();
        let c = f.parse(&f.good()).unwrap();
        assert!(c.access.identities.iter().all(|i| !i.require_encryption));
        let one = f.good().replace(
            "[identity.lab]\n",
            "[identity.lab]\nrequire_encryption = true\n",
        );
        let c = f.parse(&one).unwrap();
        let req: Vec<(&str, bool)> = (c.access.identities.iter())
            .map(|i| (i.name.as_str(), i.require_encryption))
            .collect();
        assert_eq!(req, [("lab", true), ("observatory", false)]);
        assert!(
            summary(&c.access, &c.key_files).contains("archive read-write; encryption required")
        );
        let all = f
            .good()
            .replace("max_streams = 4", "require_encryption = true");
        let c = f.parse(&all).unwrap();
        assert!(c.access.identities.iter().all(|i| i.require_encryption));
        // A value that is not a boolean is refused, by name.
        let bad = f
            .good()
            .replace("max_streams = 4", "require_encryption = \"yes\"");
        assert!(f.parse(&bad).unwrap_err().contains("require_encryption"));
    }

    #[test]
    fn a_good_file_parses_whole() {
        let f = Fixture::new();
        let c = f.parse(&f.good()).unwrap();
        assert_eq!(c.listen.as_ref().unwrap().len(), 2);
        assert_eq!(c.max_streams, Some(4));
        assert_eq!(c.max_sessions, None);
        assert_eq!(c.idle_timeout, Some(30));
        assert_eq!(c.metrics, None);
        let with = f
            .good()
            .replace("max_streams = 4", "metrics = \"127.0.0.1:9310\"");
        assert_eq!(
            f.parse(&with).unwrap().metrics,
            Some("127.0.0.1:9310".parse().unwrap())
        );
        assert_eq!(
            (c.log_level, c.log_format, c.transfer_log),
            (None, None, None)
        );
        let logs = f.good().replace(
            "idle_timeout = 30",
            "log_level = \"warn\"\nlog_format = \"json\"\ntransfer_log = \"/var/log/zcp/t.jsonl\"",
        );
        let c = f.parse(&logs).unwrap();
        assert_eq!(c.log_level, Some(LogLevel::Warn));
        assert_eq!(c.log_format, Some(LogFormat::Json));
        assert_eq!(c.transfer_log, Some(PathBuf::from("/var/log/zcp/t.jsonl")));
        assert_eq!(c.access.exports.len(), 2);
        let obs = &c.access.identities[1];
        assert_eq!(obs.name, "observatory");
        assert_eq!(obs.access["incoming"], Permission::Write);
        assert_eq!(obs.access["archive"], Permission::Read);
        let s = summary(&c.access, &c.key_files);
        assert!(s.contains("identity observatory"), "{s}");
        assert!(s.contains("archive read, incoming write"), "{s}");
        assert!(!s.contains(&"01".repeat(8)), "no key bytes: {s}");
    }

    /// The error for `good` with `from` replaced by `to`, which must name `key` and `line`.
    fn refused(f: &Fixture, from: &str, to: &str, key: &str, line: usize) -> String {
        let text = f.good().replace(from, to);
        assert_ne!(text, f.good(), "{from} is in the file");
        let e = f.parse(&text).unwrap_err();
        assert!(e.contains(key), "{key} in {e}");
        assert!(e.contains(&format!("line {line}")), "line {line} in {e}");
        e
    }

    #[test]
    fn every_error_names_the_key_and_line() {
        let f = Fixture::new();
        refused(&f, "max_streams = 4", "max_streams = 0", "max_streams", 2);
        let e = refused(
            &f,
            "max_streams = 4",
            "log_level = \"loud\"",
            "log_level",
            2,
        );
        assert!(e.contains("error, warn, info, debug, trace"), "{e}");
        let e = refused(
            &f,
            "max_streams = 4",
            "log_format = \"xml\"",
            "log_format",
            2,
        );
        assert!(e.contains("auto, plain, json, journal"), "{e}");
        let e = refused(&f, "max_streams = 4", "log_format = 7", "log_format", 2);
        assert!(e.contains("expected a string"), "{e}");
        let e = refused(
            &f,
            "max_streams = 4",
            "transfer_log = \"t.jsonl\"",
            "transfer_log",
            2,
        );
        assert!(e.contains("not an absolute path"), "{e}");
        refused(
            &f,
            "max_streams = 4",
            "metric = \"127.0.0.1:9310\"",
            "metric",
            2,
        );
        refused(
            &f,
            "max_streams = 4",
            "metrics = \"localhost\"",
            "metrics",
            2,
        );
        refused(&f, "\"[::1]:5311\"", "\"somewhere\"", "listen", 1);
        let e = refused(&f, &f.p("in"), "relative/in", "export.incoming.path", 6);
        assert!(e.contains("not an absolute path"), "{e}");
        let e = refused(&f, &f.p("in"), &f.p("missing"), "export.incoming.path", 6);
        assert!(e.contains("not a directory"), "{e}");
        // Nested or the same directory twice: access to one would reach the other's files.
        std::fs::create_dir(f.dir.path().join("arch/sub")).unwrap();
        let e = refused(&f, &f.p("in"), &f.p("arch/sub"), "export.incoming.path", 6);
        assert!(e.contains("overlap"), "{e}");
        let e = refused(&f, &f.p("in"), &f.p("arch"), "export.incoming.path", 6);
        assert!(e.contains("overlap"), "{e}");
        // A symbolic link (or `..`) on the way: resolved anew at each reload.
        std::os::unix::fs::symlink(f.dir.path().join("in"), f.dir.path().join("link")).unwrap();
        let e = refused(&f, &f.p("in"), &f.p("link"), "export.incoming.path", 6);
        assert!(e.contains("symbolic link"), "{e}");
        let e = refused(
            &f,
            &f.p("in"),
            &f.p("arch/../in"),
            "export.incoming.path",
            6,
        );
        assert!(e.contains("symbolic link or '..'"), "{e}");
        let e = refused(
            &f,
            "archive = \"read\"",
            "archive = \"rw\"",
            "access.archive",
            13,
        );
        assert!(
            e.contains("read, write, read-write or read-write-delete"),
            "{e}"
        );
        let e = refused(
            &f,
            "archive = \"read\"",
            "elsewhere = \"read\"",
            "elsewhere",
            13,
        );
        assert!(e.contains("names no [export.NAME]"), "{e}");
        let e = refused(
            &f,
            &f.p("b.key"),
            &f.p("same.key"),
            "identity.observatory",
            12,
        );
        assert!(e.contains("same key"), "{e}");
        refused(
            &f,
            &f.p("b.key"),
            &f.p("none.key"),
            "identity.lab.key_file",
            16,
        );
        // A key others may read is refused as `zcp keygen`'s rules say.
        std::fs::set_permissions(
            f.dir.path().join("b.key"),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let e = f.parse(&f.good()).unwrap_err();
        assert!(e.contains("chmod 600"), "{e}");
        assert!(e.contains("line 16"), "{e}");
    }

    #[test]
    fn config_values_are_named_in_their_errors() {
        assert_eq!(parse_value::<LogLevel>("warn"), Ok(LogLevel::Warn));
        assert_eq!(parse_value::<LogFormat>("journal"), Ok(LogFormat::Journal));
        let e = parse_value::<LogLevel>("loud").unwrap_err();
        assert_eq!(e, "'loud' is not one of error, warn, info, debug, trace");
        assert!(
            parse_value::<LogFormat>("xml")
                .unwrap_err()
                .contains("auto, plain, json, journal")
        );
    }

    // See: issue 24 (the config_file fuzz target's invariant, on a hand-written seed).
    #[test]
    fn no_control_character_from_the_file_reaches_an_error() {
        let f = Fixture::new();
        for (from, to) in [
            ("[export.archive]", "[export.\"a\\u001b[2J\"]"),
            ("max_streams = 4", "transfer_log = \"\\u001b]0;x\\u0007\""),
            ("max_streams = 4", "metrics = \"\\u202e1.2.3.4:5\""),
        ] {
            let text = f.good().replace(from, to);
            assert_ne!(text, f.good());
            let e = f.parse(&text).unwrap_err();
            assert!(!e.contains(['\u{1b}', '\u{7}', '\u{202e}']), "{e:?}");
            assert!(e.contains("\\u{1b}") || e.contains("\\u{202e}"), "{e:?}");
        }
        let bad = f.dir.path().join("in\u{1b}[2J");
        let e = f.parse(&f.good().replace(&f.p("in"), bad.to_str().unwrap()));
        assert!(!e.unwrap_err().contains('\u{1b}'));
    }

    #[test]
    fn names_must_be_safe_and_both_tables_present() {
        let f = Fixture::new();
        let e = refused(&f, "[export.archive]", "[export.\"..\"]", "export...", 8);
        assert!(e.contains("not a usable name"), "{e}");
        refused(&f, "[export.archive]", "[export.\"a/b\"]", "export.a/b", 8);
        let only_exports = f.good().split("[identity").next().unwrap().to_string();
        let e = f.parse(&only_exports).unwrap_err();
        assert!(e.contains("no identity"), "{e}");
        let e = f.parse("listen = [\"127.0.0.1:1\"]\n").unwrap_err();
        assert!(e.contains("no export"), "{e}");
    }
}
