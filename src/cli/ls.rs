//! `zcp ls`: what a server holds beneath paths this key may read, or which exports it may use.

use std::ffi::OsString;
use std::io::Write;

use clap::Args;
use zcp_session::{ListOptions, Listed, exit};
use zcp_wire::{ListEntry, ListKind, escape};

use super::ConnArgs;
use super::filter::FilterArgs;

/// `zcp ls --help`'s examples, each a command line the tests parse.
pub(crate) const EXAMPLES: &str = "\
  zcp ls -l dtn.example.org:/data/run42            # over ssh: zcp started there to list
  zcp ls dtn.example.org::                         # the root, or the exports this key may use
  zcp ls -l dtn.example.org::archive/run42         # sizes, modes, times (UTC), link targets
  zcp ls -r --include '*/' --include '*.h5' --exclude '*' dtn.example.org::archive
                                                   # every .h5 file beneath, as a get -r would
  zcp ls -J -r zcp://[2001:db8::7]:6000/run42      # one JSON document";

#[derive(Debug, Args)]
#[command(after_help = super::after_help(EXAMPLES, true))]
pub(crate) struct LsArgs {
    #[command(flatten)]
    conn: ConnArgs,
    /// Long format: type and permissions, size in bytes, modification time (UTC), path, and
    /// a link's target after `->`. For exports: what this key may do in each.
    #[arg(short = 'l', long = "long")]
    long: bool,
    /// Everything beneath each directory, not only what is in it.
    #[arg(short = 'r', long)]
    recursive: bool,
    /// One JSON document instead of lines.
    #[arg(short = 'J', long)]
    json: bool,
    #[command(flatten)]
    pub(super) filter: FilterArgs,
    /// What to list: `[USER@]HOST:PATH` over ssh (relative to the login directory, or
    /// absolute; `HOST:` alone is the login directory), or on a zcp serve daemon
    /// `HOST::PATH`, `[IPV6]::PATH` or `zcp://HOST[:PORT]/PATH` (`HOST::` alone lists the
    /// root, or, on a server with exports, the exports this key may use: then
    /// `HOST::EXPORT/PATH`). Several must name the same server, reached the same way.
    #[arg(value_name = "HOST:PATH", required = true)]
    remote: Vec<OsString>,
}

pub(crate) fn run(a: LsArgs) -> anyhow::Result<i32> {
    let remote = match super::get::one_server(&a.remote) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("zcp: {e}");
            return Ok(exit::USAGE);
        }
    };
    let asked: Vec<String> = match remote.paths.as_slice() {
        [one] if one.as_slice() == b"." => vec![".".into()],
        all => all.iter().map(|p| escape(p)).collect(),
    };
    // Over ssh, paths become relative to the login directory or to `/`.
    let (conn, ssh, paths) = a.conn.reach_all(&remote)?;
    // One `.` alone (`HOST::`, `HOST:`, `HOST:/`): the root, or a daemon's exports.
    let paths = match paths.as_slice() {
        [one] if one.as_slice() == b"." => Vec::new(),
        _ => paths,
    };
    let opts = ListOptions {
        encrypt: a.conn.encrypts(ssh.is_some()),
        conn,
        paths,
        recursive: a.recursive,
        filter: a.filter.rules()?,
        ssh,
    };
    let requests = asked.len() as u64;
    let mut out = Printer::new(&a, asked);
    let listed = zcp_session::list(&opts, &mut |l| out.take(l));
    // What arrived before a failure is written all the same.
    let too_many = out.too_many;
    out.finish()?;
    let outcome = listed?;
    if too_many {
        anyhow::bail!(
            "more than {JSON_MAX} entries: too many for one JSON document; list without -J, \
             or fewer paths at a time"
        );
    }
    Ok(match outcome {
        o if o.failed == 0 && o.incomplete == 0 => exit::OK,
        o if o.failed >= requests => exit::FAILURE,
        _ => exit::PARTIAL,
    })
}

/// Entries one JSON document holds, at most (it is written at the end, so held until then).
const JSON_MAX: usize = 500_000;
/// Notices from the server written, at most (the rest are counted).
const NOTICES_MAX: u64 = 100;

/// Lines held to be sorted before they are written, at most.
const SORT_BATCH: usize = 100_000;

/// Writes what arrives: each path's lines sorted by path (in batches of [`SORT_BATCH`]), or
/// the JSON document at the end (entries in the same order).
struct Printer {
    long: bool,
    json: bool,
    asked: Vec<String>,
    /// The path whose heading was printed last (several paths: `PATH:` before each
    /// directory's entries, as ls does).
    shown: Option<usize>,
    /// The current path's lines, by their path beneath it, to be sorted.
    pending: Vec<(Vec<u8>, String)>,
    /// The JSON entries: (path asked for, path beneath it, entry).
    /// Each serialised at once: a few hundred bytes an entry, not a `Value`'s kilobytes.
    doc: Vec<(usize, Vec<u8>, String)>,
    failures: Vec<serde_json::Value>,
    out: std::io::BufWriter<std::io::Stdout>,
    broken: Option<std::io::Error>,
    notices: u64,
    /// More entries came than one JSON document holds: the rest are dropped.
    too_many: bool,
}

impl Printer {
    fn new(a: &LsArgs, asked: Vec<String>) -> Printer {
        Printer {
            long: a.long,
            json: a.json,
            asked,
            shown: None,
            pending: Vec::new(),
            doc: Vec::new(),
            failures: Vec::new(),
            out: std::io::BufWriter::new(std::io::stdout()),
            broken: None,
            notices: 0,
            too_many: false,
        }
    }

    fn take(&mut self, l: Listed<'_>) {
        match l {
            Listed::Failed {
                request,
                rel,
                message,
            } => {
                self.flush();
                let path = match rel.is_empty() {
                    true => self.asked[request].clone(),
                    false => {
                        let asked = self.asked[request].trim_end_matches('/');
                        format!("{asked}/{}", escape(rel))
                    }
                };
                eprintln!("zcp: ls: {path}: {message}");
                let v = serde_json::json!({"path": path, "message": message});
                self.failures.push(v);
            }
            Listed::Notice(m) => {
                self.notices += 1;
                if self.notices <= NOTICES_MAX {
                    eprintln!("zcp: ls: note: {m}");
                }
            }
            Listed::Export {
                name,
                read,
                write,
                delete,
            } => {
                let access = match (read, write) {
                    _ if delete => "read-write-delete",
                    (true, true) => "read-write",
                    (true, false) => "read",
                    _ => "write",
                };
                let name = escape(name);
                let line = match (self.json, self.long) {
                    (true, _) => {
                        let v = serde_json::json!({"export": name, "access": access});
                        self.keep(0, name.into_bytes(), v);
                        return;
                    }
                    (false, true) => format!("{access:<17}  {name}/"),
                    (false, false) => format!("{name}/"),
                };
                self.hold(name.into_bytes(), line);
            }
            Listed::Entry {
                request,
                rel,
                entry,
            } => self.entry(request, rel, entry),
        }
    }

    fn entry(&mut self, request: usize, rel: &[u8], e: &ListEntry) {
        let asked = self.asked[request].clone();
        if self.json {
            let mut v = serde_json::json!({
                "request": asked,
                "path": if rel.is_empty() { ".".into() } else { escape(rel) },
                "type": e.kind.name(),
                "size": e.size,
                "mode": format!("{:04o}", e.mode & 0o7777),
                "mtime": mtime(e),
            });
            if e.kind == ListKind::Link {
                v["target"] = escape(&e.target).into();
            }
            self.keep(request, rel.to_vec(), v);
            return;
        }
        // A directory asked for is shown by what is in it; anything else by its own line.
        if rel.is_empty() {
            self.flush();
            if e.kind == ListKind::Dir {
                if self.asked.len() > 1 {
                    let gap = if self.shown.is_some() { "\n" } else { "" };
                    self.line(format!("{gap}{asked}:"));
                }
                self.shown = Some(request);
                return;
            }
            let name = asked;
            self.line(self.format(e, &name));
            return;
        }
        let name = escape(rel);
        self.hold(rel.to_vec(), self.format(e, &name));
    }

    /// Keeps an entry of the JSON document, up to [`JSON_MAX`].
    fn keep(&mut self, request: usize, rel: Vec<u8>, v: serde_json::Value) {
        match self.doc.len() < JSON_MAX {
            true => self.doc.push((request, sort_key(rel), v.to_string())),
            false => self.too_many = true,
        }
    }

    /// Holds a line of the current path's listing, to be written sorted.
    fn hold(&mut self, key: Vec<u8>, line: String) {
        self.pending.push((sort_key(key), line));
        if self.pending.len() >= SORT_BATCH {
            self.flush();
        }
    }

    /// Writes the held lines, sorted by path.
    fn flush(&mut self) {
        let mut lines = std::mem::take(&mut self.pending);
        lines.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        for (_, line) in lines {
            self.line(line);
        }
    }

    fn format(&self, e: &ListEntry, name: &str) -> String {
        let slash = if e.kind == ListKind::Dir { "/" } else { "" };
        if !self.long {
            return format!("{name}{slash}");
        }
        let kind = match e.kind {
            ListKind::Dir => 'd',
            ListKind::Link => 'l',
            ListKind::File => '-',
            ListKind::Other | ListKind::Export => '?',
        };
        let target = match e.kind {
            ListKind::Link => format!(" -> {}", escape(&e.target)),
            _ => String::new(),
        };
        format!(
            "{kind}{} {:>14} {} {name}{slash}{target}",
            permissions(e.mode),
            e.size,
            mtime(e)
        )
    }

    fn line(&mut self, text: String) {
        if self.broken.is_none()
            && let Err(e) = writeln!(self.out, "{text}")
        {
            self.broken = Some(e);
        }
    }

    fn finish(mut self) -> anyhow::Result<()> {
        self.flush();
        if self.json && !self.too_many {
            let mut doc = std::mem::take(&mut self.doc);
            doc.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
            // One entry a line, in one document.
            let entries: Vec<String> = doc.into_iter().map(|(_, _, v)| v).collect();
            let failures = serde_json::to_string(&self.failures)?;
            let text = format!(
                "{{\"entries\": [\n{}\n],\n\"failures\": {failures}}}",
                entries.join(",\n")
            );
            self.line(text);
        }
        if self.notices > NOTICES_MAX {
            let more = self.notices - NOTICES_MAX;
            eprintln!("zcp: ls: {more} more notes from the server not shown");
        }
        if let Some(e) = self.broken.take() {
            return Err(e.into());
        }
        self.out.flush()?;
        Ok(())
    }
}

/// How paths sort: by component, so that a directory's entries follow it (`a`, `a/x`, `a-b`).
fn sort_key(mut path: Vec<u8>) -> Vec<u8> {
    for b in &mut path {
        if *b == b'/' {
            *b = 0;
        }
    }
    path
}

/// `rwxr-x---` and the special bits as ls shows them.
fn permissions(mode: u32) -> String {
    let bit = |m: u32, c: char| if mode & m != 0 { c } else { '-' };
    let exec =
        |x: u32, special: u32, on: char, off: char| match (mode & x != 0, mode & special != 0) {
            (true, true) => on,
            (false, true) => off,
            (true, false) => 'x',
            (false, false) => '-',
        };
    [
        bit(0o400, 'r'),
        bit(0o200, 'w'),
        exec(0o100, 0o4000, 's', 'S'),
        bit(0o040, 'r'),
        bit(0o020, 'w'),
        exec(0o010, 0o2000, 's', 'S'),
        bit(0o004, 'r'),
        bit(0o002, 'w'),
        exec(0o001, 0o1000, 't', 'T'),
    ]
    .iter()
    .collect()
}

/// The modification time, RFC 3339 in UTC to the second (`-` when out of range).
fn mtime(e: &ListEntry) -> String {
    // RFC 3339 ends with year 9999 (humantime fails past it): a server's word, so bounded.
    let Some(secs) = u64::try_from(e.mtime_sec)
        .ok()
        .filter(|s| *s < 253_402_300_800)
    else {
        return "-".into();
    };
    let t = std::time::UNIX_EPOCH.checked_add(std::time::Duration::from_secs(secs));
    match t {
        Some(t) => humantime::format_rfc3339_seconds(t).to_string(),
        None => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_read_as_ls_shows_them() {
        assert_eq!(permissions(0o755), "rwxr-xr-x");
        assert_eq!(permissions(0o640), "rw-r-----");
        assert_eq!(permissions(0o4755), "rwsr-xr-x");
        assert_eq!(permissions(0o2644), "rw-r-Sr--");
        assert_eq!(permissions(0o1777), "rwxrwxrwt");
    }

    #[test]
    fn times_are_utc_to_the_second() {
        let e = |mtime_sec| ListEntry {
            path: Vec::new(),
            kind: ListKind::File,
            size: 0,
            mode: 0,
            mtime_sec,
            mtime_nsec: 5,
            target: Vec::new(),
            head: false,
        };
        assert_eq!(mtime(&e(1_000_000_000)), "2001-09-09T01:46:40Z");
        assert_eq!(mtime(&e(-1)), "-");
        assert_eq!(mtime(&e(i64::MAX)), "-");
        assert_eq!(mtime(&e(253_402_300_799)), "9999-12-31T23:59:59Z");
        assert_eq!(mtime(&e(253_402_300_800)), "-");
    }
}
