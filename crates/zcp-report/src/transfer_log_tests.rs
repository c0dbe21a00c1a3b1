use super::*;
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
            started: true,
        },
        // Refused after authenticating: no transfer, no line.
        ServerEvent::SessionEnd {
            session: "ff".into(),
            ok: false,
            reason: Some("no export".into()),
            files: 0,
            bytes: 0,
            seconds: 0.0,
            resent_chunks: 0,
            failed: 0,
            started: false,
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
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
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

#[test]
fn reopen_follows_a_rename_and_a_failed_write_does_not_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let log = TransferLog::open(&path).unwrap();
    let evs = events();
    log.event(&evs[0]);
    log.event(&evs[2]);
    std::fs::rename(&path, dir.path().join("t.jsonl.1")).unwrap();
    log.event(&evs[3]);
    log.reopen().unwrap();
    log.event(&evs[6]);
    let old = std::fs::read_to_string(dir.path().join("t.jsonl.1")).unwrap();
    let new = std::fs::read_to_string(&path).unwrap();
    assert_eq!(old.lines().count(), 2, "{old}");
    assert_eq!(new.lines().count(), 1, "{new}");
    assert!(new.contains("\"type\":\"session\""), "{new}");
    // A directory that went away: reopen fails and the old file stays in use.
    std::fs::remove_dir_all(dir.path()).unwrap();
    assert!(log.reopen().is_err());
    log.event(&evs[2]);
}

#[test]
fn a_full_disk_is_reported_once_and_the_server_goes_on() {
    // /dev/full fails every write with ENOSPC.
    let Ok(log) = TransferLog::open(Path::new("/dev/full")) else {
        return;
    };
    let evs = events();
    log.event(&evs[0]);
    log.event(&evs[2]);
    assert!(log.failing.load(Ordering::Relaxed));
    log.event(&evs[3]);
    assert!(log.failing.load(Ordering::Relaxed));
}
