//! `zcp clean`: lists and removes the part files and journals interrupted transfers left
//! beneath a directory. The walk and the removal are zcp-engine's
//! ([`zcp_engine::fs::scan_leftovers`], [`zcp_engine::fs::remove_leftover`]): never through
//! a symlink, only regular files named exactly as a receiver names them, never one a running
//! transfer holds.

use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use serde_json::{Value, json};
use zcp_engine::fs::{Leftover, LeftoverKind, Removal, Root, remove_leftover, scan_leftovers};
use zcp_report::units::size;

pub(crate) const EXAMPLES: &str = "\
  zcp clean /data/incoming                         # list and remove every stale part file
  zcp clean --dry-run /data/incoming               # only list what would be removed
  zcp clean --older-than 7d /data/incoming         # only transfers abandoned a week ago
  zcp clean -J --older-than 12h /data/incoming     # the same as one JSON document

Files a running transfer holds are left alone (\"in use\"); nothing else is ever touched.";

#[derive(Debug, Args)]
#[command(after_help = super::after_help(EXAMPLES, false))]
pub(crate) struct CleanArgs {
    /// Directory to clean (a server's --root): the whole tree beneath it is walked, never
    /// through a symlink.
    #[arg(value_name = "ROOT")]
    root: PathBuf,
    /// Only partial files untouched for longer than this: 90s, 30m, 12h, 7d, 1h30m.
    #[arg(long, value_name = "DURATION", value_parser = parse_age)]
    older_than: Option<Duration>,
    /// List what would be removed; remove nothing.
    #[arg(short = 'n', long)]
    dry_run: bool,
    /// Print one JSON document instead of the text.
    #[arg(short = 'J', long)]
    json: bool,
}

/// `--older-than`: a duration such as `90s`, `30m`, `12h`, `7d` or `1h30m`.
fn parse_age(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("'{s}' is not a duration ({e}); examples: 90s, 30m, 12h, 7d"))
}

/// What became of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Status {
    Removed,
    WouldRemove,
    InUse,
    Newer,
    Changed,
    Failed(String),
}

impl Status {
    fn name(&self) -> &'static str {
        match self {
            Status::Removed => "removed",
            Status::WouldRemove => "would remove",
            Status::InUse => "in use",
            Status::Newer => "newer",
            Status::Changed => "changed",
            Status::Failed(_) => "failed",
        }
    }
}

/// One file found, and what became of it.
struct Item {
    path: String,
    kind: LeftoverKind,
    size: u64,
    allocated: u64,
    age: Duration,
    status: Status,
}

/// The counts the last line (or the JSON's `summary`) gives.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Totals {
    found: u64,
    removed: u64,
    bytes: u64,
    allocated: u64,
    in_use: u64,
    newer: u64,
    changed: u64,
    failed: u64,
}

impl Totals {
    fn add(&mut self, it: &Item) {
        self.found += 1;
        match it.status {
            Status::Removed | Status::WouldRemove => {
                self.removed += 1;
                self.bytes += it.size;
                self.allocated += it.allocated;
            }
            Status::InUse => self.in_use += 1,
            Status::Newer => self.newer += 1,
            Status::Changed => self.changed += 1,
            Status::Failed(_) => self.failed += 1,
        }
    }
}

/// How long ago `mtime` was (zero for a time in the future).
fn age_of(mtime: (i64, u32), now: SystemTime) -> Duration {
    let then = u64::try_from(mtime.0)
        .map(|s| UNIX_EPOCH + Duration::new(s, mtime.1))
        .unwrap_or(UNIX_EPOCH);
    now.duration_since(then).unwrap_or_default()
}

/// `45s`, `12m 5s`, `5h 12m`, `3d 4h`: the two largest units.
fn show_age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// `--older-than` as given back: `7d`, `12h`, `30m`, `90s` (the largest unit that divides it).
fn show_limit(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        _ if d.subsec_nanos() != 0 => humantime::format_duration(d).to_string(),
        _ if s >= 86_400 && s.is_multiple_of(86_400) => format!("{}d", s / 86_400),
        _ if s >= 3600 && s.is_multiple_of(3600) => format!("{}h", s / 3600),
        _ if s >= 60 && s.is_multiple_of(60) => format!("{}m", s / 60),
        _ => format!("{s}s"),
    }
}

/// What to do with one leftover (a part file and its journal, together): keep it when it
/// is newer than `older_than`, else remove it (or, in a dry run, say it would be).
fn decide(
    dir: std::os::fd::BorrowedFd<'_>,
    l: &Leftover,
    older_than: Option<Duration>,
    dry_run: bool,
    now: SystemTime,
) -> Status {
    if older_than.is_some_and(|min| age_of(l.mtime(), now) <= min) {
        return Status::Newer;
    }
    match remove_leftover(dir, l, dry_run) {
        Ok(Removal::Removed) => Status::Removed,
        Ok(Removal::WouldRemove) => Status::WouldRemove,
        Ok(Removal::InUse) => Status::InUse,
        Ok(Removal::Changed) => Status::Changed,
        Err(e) => Status::Failed(e.to_string()),
    }
}

pub(crate) fn run(a: CleanArgs) -> anyhow::Result<i32> {
    let shown_root = zcp_wire::escape(a.root.as_os_str().as_bytes());
    match std::fs::metadata(&a.root) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => super::usage!(
            "{shown_root} is not a directory; give the directory to clean (a server's --root)"
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => super::usage!(
            "{shown_root} does not exist; give the directory to clean (a server's --root)"
        ),
        Err(e) => super::usage!("cannot look at {shown_root}: {e}"),
    }
    let root = match Root::open(&a.root) {
        Ok(r) => r,
        Err(e) => super::usage!("{e}"),
    };
    let now = SystemTime::now();
    let mut totals = Totals::default();
    let mut items = Vec::new();
    let mut failures = Vec::new();
    let end = scan_leftovers(root.fd(), None, |dir, l| {
        let status = decide(dir, &l, a.older_than, a.dry_run, now);
        for (kind, f) in l.files() {
            let mut path = a.root.as_os_str().as_bytes().to_vec();
            if path.last() != Some(&b'/') {
                path.push(b'/');
            }
            path.extend_from_slice(&l.path(kind));
            let it = Item {
                path: zcp_wire::escape(&path),
                kind,
                size: f.size,
                allocated: f.allocated,
                age: age_of(f.mtime, now),
                status: status.clone(),
            };
            totals.add(&it);
            if let Status::Failed(why) = &it.status {
                failures.push(format!("could not remove {}: {why}", it.path));
            }
            if a.json {
                items.push(it);
            } else {
                println!(
                    "{:<12} {:>10} {:>7}  {}",
                    it.status.name(),
                    size(it.size),
                    show_age(it.age),
                    it.path
                );
            }
        }
    });
    for (dir, why) in &end.unreadable {
        let mut path = a.root.as_os_str().as_bytes().to_vec();
        if !dir.is_empty() {
            path.push(b'/');
            path.extend_from_slice(dir);
        }
        failures.push(format!(
            "could not read directory {}: {why}; nothing beneath it was looked at",
            zcp_wire::escape(&path)
        ));
    }
    let code = if failures.is_empty() { 0 } else { 1 };
    if a.json {
        let doc = document(&a, &shown_root, &items, &totals, &end.unreadable, code);
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        println!("{}", summary(&a, &shown_root, &totals));
    }
    for f in &failures {
        eprintln!("zcp: {}", zcp_wire::escape_text(f));
    }
    Ok(code)
}

/// The last line of the text output.
fn summary(a: &CleanArgs, root: &str, t: &Totals) -> String {
    if t.found == 0 {
        return format!("zcp clean: no partial files under {root}");
    }
    let files = |n: u64| format!("{n} file{}", if n == 1 { "" } else { "s" });
    let mut parts = vec![format!(
        "{} {}, {} ({} on disk){}",
        if a.dry_run { "would remove" } else { "removed" },
        files(t.removed),
        size(t.bytes),
        size(t.allocated),
        if a.dry_run { "; nothing removed" } else { "" }
    )];
    if t.in_use > 0 {
        parts.push(format!(
            "{} in use by a running transfer, left alone",
            files(t.in_use)
        ));
    }
    if let (true, Some(d)) = (t.newer > 0, a.older_than) {
        parts.push(format!(
            "{} newer than {}, kept",
            files(t.newer),
            show_limit(d)
        ));
    }
    if t.changed > 0 {
        parts.push(format!(
            "{} changed while looked at, left alone",
            files(t.changed)
        ));
    }
    if t.failed > 0 {
        parts.push(format!("{} could not be removed", files(t.failed)));
    }
    format!("zcp clean: {}", parts.join("; "))
}

/// The `-J` document.
fn document(
    a: &CleanArgs,
    root: &str,
    items: &[Item],
    t: &Totals,
    unreadable: &[(Vec<u8>, String)],
    code: i32,
) -> Value {
    let files: Vec<Value> = items
        .iter()
        .map(|it| {
            let mut v = json!({
                "path": it.path,
                "kind": match it.kind {
                    LeftoverKind::Part => "part",
                    LeftoverKind::Journal => "journal",
                },
                "size": it.size,
                "allocated": it.allocated,
                "age_seconds": it.age.as_secs(),
                "status": it.status.name().replace(' ', "-"),
            });
            if let Status::Failed(why) = &it.status {
                v["error"] = json!(zcp_wire::escape_text(why));
            }
            v
        })
        .collect();
    let unreadable: Vec<Value> = unreadable
        .iter()
        .map(|(p, why)| json!({"path": zcp_wire::escape(p), "error": why}))
        .collect();
    json!({
        "root": root,
        "dry_run": a.dry_run,
        "older_than_seconds": a.older_than.map(|d| d.as_secs()),
        "files": files,
        "unreadable": unreadable,
        "summary": {
            "found": t.found,
            "removed": t.removed,
            "bytes": t.bytes,
            "allocated": t.allocated,
            "in_use": t.in_use,
            "newer": t.newer,
            "changed": t.changed,
            "failed": t.failed,
        },
        "exit_code": code,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_ages() {
        assert_eq!(parse_age("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_age("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse_age("12h"), Ok(Duration::from_secs(12 * 3600)));
        assert_eq!(parse_age("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_age("1h30m"), Ok(Duration::from_secs(5400)));
        for bad in ["", "7", "7x", "-1d", "d7", "1.5.2h"] {
            let e = parse_age(bad).unwrap_err();
            assert!(e.contains("examples: 90s"), "{bad}: {e}");
        }
        assert_eq!(show_age(Duration::from_secs(45)), "45s");
        assert_eq!(show_age(Duration::from_secs(725)), "12m 5s");
        assert_eq!(show_age(Duration::from_secs(5 * 3600 + 720)), "5h 12m");
        assert_eq!(
            show_age(Duration::from_secs(3 * 86_400 + 4 * 3600)),
            "3d 4h"
        );
        assert_eq!(show_limit(Duration::from_secs(7 * 86_400)), "7d");
        assert_eq!(show_limit(Duration::from_secs(5400)), "90m");
        assert_eq!(show_limit(Duration::from_secs(90)), "90s");
        assert_eq!(show_limit(Duration::from_millis(1500)), "1s 500ms");
        let now = UNIX_EPOCH + Duration::from_secs(1000);
        assert_eq!(age_of((400, 0), now), Duration::from_secs(600));
        assert_eq!(age_of((2000, 0), now), Duration::ZERO, "a future mtime");
        assert_eq!(age_of((-5, 0), now), Duration::from_secs(1000));
    }

    #[test]
    fn totals_count_what_was_removed_and_what_was_left() {
        let mut t = Totals::default();
        for (status, size) in [
            (Status::Removed, 10),
            (Status::Removed, 5),
            (Status::InUse, 100),
            (Status::Newer, 100),
            (Status::Failed("EPERM".into()), 100),
        ] {
            t.add(&Item {
                path: String::new(),
                kind: LeftoverKind::Part,
                size,
                allocated: size * 2,
                age: Duration::ZERO,
                status,
            });
        }
        let want = Totals {
            found: 5,
            removed: 2,
            bytes: 15,
            allocated: 30,
            in_use: 1,
            newer: 1,
            changed: 0,
            failed: 1,
        };
        assert_eq!(t, want);
    }
}
