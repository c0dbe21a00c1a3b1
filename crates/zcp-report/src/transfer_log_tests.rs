use super::*;
use crate::log_writer::LogFile;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

const ID: &str = "00112233445566778899aabbccddeeff";

fn events() -> Vec<ServerEvent> {
    vec![
        ServerEvent::SessionStart {
            peer: "10.0.0.7:40000".parse().unwrap(),
            session: ID.into(),
            direction: "push",
            streams: 4,
            identity: "observatory".into(),
            export: "incoming".into(),
        },
        ServerEvent::Engines {
            session: ID.into(),
            sender: "sendfile".into(),
            receiver: "splice".into(),
        },
        ServerEvent::FileDone {
            session: ID.into(),
            target: "run42/a.dat".into(),
            bytes: 1 << 30,
            skipped: 1 << 29,
            seconds: 0.5,
            engine: "splice".into(),
            verified: true,
            stored: true,
            digest: Some("ab".repeat(32)),
        },
        ServerEvent::FileFailed {
            session: ID.into(),
            target: "'run42/b\\n\"x\\u{1b}[2J'".into(),
            reason: "the data did not verify\n".into(),
            code: "verify",
        },
        ServerEvent::Progress {
            session: ID.into(),
            phase: "sending",
            bytes: 1,
            resumed: 0,
            total_bytes: None,
            files: 1,
            total_files: None,
            last: None,
        },
        ServerEvent::Rejected {
            peer: "10.0.0.8:1".parse().unwrap(),
            reason: "bad key".into(),
            cause: "auth",
        },
        ServerEvent::SessionEnd {
            session: ID.into(),
            ok: false,
            reason: Some("1 entry failed".into()),
            files: 1,
            bytes: 1 << 29,
            seconds: 2.0,
            resent_chunks: 3,
            failed: 0,
            left: 0,
            deleted: 0,
        },
        // Refused after authenticating: a line of its own, with who asked for what (the
        // client's text escaped).
        ServerEvent::SessionRefused {
            session: "ff".into(),
            peer: "10.0.0.9:41000".parse().unwrap(),
            identity: "lab".into(),
            export: Some("incom\x1b[2Jing".into()),
            direction: Some("push"),
            cause: "access",
            reason: "identity 'lab' may not write export 'incom\x1b[2Jing'".into(),
        },
        // Its session forgotten: the line says so with nulls.
        ServerEvent::FileFailed {
            session: ID.into(),
            target: "late".into(),
            reason: "io".into(),
            code: "io",
        },
    ]
}

fn fixed() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_000_000_123)
}

#[test]
fn one_json_line_per_file_and_per_session() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("transfers.jsonl");
    let log = TransferLog::open(&path).unwrap().with_clock(fixed);
    for e in events() {
        log.event(&e);
    }
    assert!(log.flush(WAIT));
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    for l in &lines {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["time"], "2026-11-18T11:06:40.123Z");
        assert!(!l.contains('\u{1b}'), "{l}");
    }
    insta::assert_snapshot!(text);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path).unwrap().permissions());
    assert_eq!(mode & 0o137, 0, "at most 0640: {mode:o}");
}

const WAIT: Duration = Duration::from_secs(10);

#[test]
fn reopen_follows_a_rename_and_a_failed_one_keeps_the_old_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let log = TransferLog::open(&path).unwrap();
    let evs = events();
    log.event(&evs[0]);
    log.event(&evs[2]);
    assert!(log.flush(WAIT));
    std::fs::rename(&path, dir.path().join("t.jsonl.1")).unwrap();
    log.event(&evs[3]);
    log.reopen();
    log.event(&evs[6]);
    assert!(log.flush(WAIT));
    let old = std::fs::read_to_string(dir.path().join("t.jsonl.1")).unwrap();
    let new = std::fs::read_to_string(&path).unwrap();
    assert_eq!(old.lines().count(), 2, "{old}");
    assert_eq!(new.lines().count(), 1, "{new}");
    assert!(new.contains("\"type\":\"session\""), "{new}");
    // A directory that went away: the reopen fails and the old file stays in use.
    let kept = tempfile::NamedTempFile::new().unwrap();
    std::fs::rename(&path, kept.path()).unwrap();
    std::fs::remove_dir_all(dir.path()).unwrap();
    log.reopen();
    log.event(&evs[2]);
    assert!(log.flush(WAIT));
    let text = std::fs::read_to_string(kept.path()).unwrap();
    assert_eq!(text.lines().count(), 2, "{text}");
}

#[test]
fn what_is_not_a_regular_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    rustix_mkfifo(&fifo);
    let e = TransferLog::open(&fifo).unwrap_err();
    assert!(e.to_string().contains("a FIFO, not a regular file"), "{e}");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(dir.path().join("real"), &link).unwrap();
    let e = TransferLog::open(&link).unwrap_err();
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert!(!dir.path().join("real").exists());
    let e = TransferLog::open(dir.path()).unwrap_err();
    assert!(e.to_string().contains("directory"), "{e}");
    let e = TransferLog::open(Path::new("/dev/full")).unwrap_err();
    assert!(e.to_string().contains("a device"), "{e}");
}

fn rustix_mkfifo(p: &Path) {
    let o = std::process::Command::new("mkfifo")
        .arg(p)
        .output()
        .unwrap();
    assert!(o.status.success());
}

/// A file whose writes fail with ENOSPC half-way through the line while `full` is set.
struct Filling {
    file: std::fs::File,
    full: Arc<AtomicBool>,
}

impl LogFile for Filling {
    fn end(&mut self) -> std::io::Result<u64> {
        self.file.end()
    }
    fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.full.load(Ordering::Relaxed) {
            self.file.append(&line[..line.len() / 2])?;
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        self.file.append(line)
    }
    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        self.file.truncate(len)
    }
}

#[test]
fn a_write_that_fails_half_way_is_cut_off_and_the_next_line_is_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let full = Arc::new(AtomicBool::new(false));
    let file = Filling {
        file: crate::log_writer::open_append(&path).unwrap(),
        full: full.clone(),
    };
    let log = TransferLog::with_file(&path, Box::new(file), 16).unwrap();
    let evs = events();
    log.event(&evs[0]);
    log.event(&evs[2]);
    assert!(log.flush(WAIT));
    full.store(true, Ordering::Relaxed);
    log.event(&evs[2]);
    log.event(&evs[3]);
    assert!(log.flush(WAIT));
    assert!(log.writer.failing());
    assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 1);
    full.store(false, Ordering::Relaxed);
    log.event(&evs[6]);
    assert!(log.flush(WAIT));
    assert!(!log.writer.failing());
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {text}")))
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert_eq!(lines[1]["type"], "session", "{text}");
}

/// A file whose first write waits until `gate` opens (its sender is dropped), telling
/// `entered` when it starts waiting.
struct Stuck {
    file: std::fs::File,
    gate: Option<std::sync::mpsc::Receiver<()>>,
    entered: std::sync::mpsc::SyncSender<()>,
}

impl LogFile for Stuck {
    fn end(&mut self) -> std::io::Result<u64> {
        self.file.end()
    }
    fn append(&mut self, line: &[u8]) -> std::io::Result<()> {
        if let Some(gate) = self.gate.take() {
            let _ = self.entered.send(());
            let _ = gate.recv_timeout(WAIT);
        }
        self.file.append(line)
    }
    fn truncate(&mut self, len: u64) -> std::io::Result<()> {
        self.file.truncate(len)
    }
}

#[test]
fn a_stuck_disk_drops_and_counts_lines_and_never_blocks_a_session() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let (open, gate) = std::sync::mpsc::sync_channel(1);
    let (entered, started) = std::sync::mpsc::sync_channel(1);
    let file = Stuck {
        file: crate::log_writer::open_append(&path).unwrap(),
        gate: Some(gate),
        entered,
    };
    let log = TransferLog::with_file(&path, Box::new(file), 2).unwrap();
    let evs = events();
    log.event(&evs[2]);
    started.recv_timeout(WAIT).unwrap();
    // The writer is stuck on the first line; two fit in the queue, five are dropped.
    let t0 = std::time::Instant::now();
    for _ in 0..7 {
        log.event(&evs[2]);
    }
    // A reopen request does not wait either.
    log.reopen();
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_eq!(log.writer.dropped(), 5);
    assert!(!log.flush(Duration::from_millis(50)));
    drop(open);
    assert!(log.flush(WAIT));
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {text}")))
        .collect();
    // The count is written as soon as the writer is free again.
    assert_eq!(lines.len(), 4, "{text}");
    let files = lines.iter().filter(|l| l["type"] == "file").count();
    assert_eq!(files, 3, "{text}");
    assert_eq!(lines[1]["type"], "dropped", "{text}");
    assert_eq!(lines[1]["lines"], 5, "{text}");
    assert_eq!(log.writer.dropped(), 0);
}
