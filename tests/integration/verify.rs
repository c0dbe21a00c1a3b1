//! `--verify none`: explicit, never the default; files and trees arrive exactly and durably
//! and every report calls them unverified; an unknown mode is refused before anything
//! moves; and nothing an unverified session wrote is ever resumed as if it had been proved.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::util::*;

/// `zcp get` of `path` from 127.0.0.1:`port` into `dest`.
fn get_cmd(port: u16, key: &Path, path: &str, dest: &Path, extra: &[&str]) -> Command {
    let mut c = zcp();
    c.args(["get", "-p", &port.to_string(), "--key-file"])
        .arg(key)
        .args(extra)
        .arg(format!("127.0.0.1::{path}"))
        .arg(dest);
    c
}

/// The JSON of an unverified, stored transfer of `files` files.
fn assert_unverified(v: &serde_json::Value, files: u64) {
    assert_eq!(v["start"]["verify_mode"], "none", "{}", v["start"]);
    assert_eq!(v["start"]["verify"], false, "{}", v["start"]);
    let end = &v["end"];
    assert_eq!(end["verify_mode"], "none", "{end}");
    assert_eq!(end["verified"], false, "{end}");
    assert_eq!(end["stored"], true, "{end}");
    assert!(end["digest"].is_null(), "{end}");
    assert_eq!(end["files"]["committed"], files, "{end}");
}

#[test]
fn a_file_sent_without_verification_arrives_exactly_and_every_report_says_unverified() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("src.bin");
    make_dense(&src, 3 << 20, 1);
    let srv = ServerProc::start(&root, &env.key, &[]);

    // The default is verified, and says so.
    let (o, v) = send_json(srv.port, &env.key, &src, "v.bin", &[], 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(v["start"]["verify_mode"], "blake3");
    assert_eq!(v["end"]["verify_mode"], "blake3");
    assert_eq!(v["end"]["verified"], true);

    let none = ["--verify", "none"];
    let (o, v) = send_json(srv.port, &env.key, &src, "n.bin", &none, 30);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &root.join("n.bin")));
    assert_unverified(&v, 1);
    assert!(no_partials(&root, 10), "{:?}", tree(&root));

    // The text: the start and the summary say it, and nothing claims it verified.
    let o = run(
        send_cmd(
            srv.port,
            &env.key,
            &src,
            "t.bin",
            &["-i", "0", "--verify", "none"],
        ),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    let out = text(&o.stdout);
    assert!(
        out.contains("Verify: not verified (--verify none)"),
        "{out}"
    );
    assert!(
        out.contains("stored durably, not verified (--verify none)"),
        "{out}"
    );
    assert!(out.contains("Verified: no (--verify none)"), "{out}");
    assert!(!out.contains("and verified"), "{out}");
    assert!(same_file(&src, &root.join("t.bin")));
    // The server's log says so too.
    assert!(srv.wait_log("t.bin", 10), "{}", srv.log());
    let line = (srv.log().lines())
        .find(|l| l.contains("t.bin"))
        .unwrap_or_default()
        .to_string();
    assert!(line.contains("not verified"), "{line}");
}

#[test]
fn a_tree_sent_and_a_file_fetched_without_verification_arrive_exactly() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.mkdir("tree");
    std::fs::create_dir_all(src.join("a/b")).unwrap();
    make_dense(&src.join("a/one"), 2 << 20, 2);
    make_dense(&src.join("a/b/two"), 70_000, 3);
    make_dense(&src.join("three"), 1, 4);
    std::fs::write(src.join("empty"), b"").unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let extra = ["-r", "-P", "2", "--verify", "none"];
    let (o, v) = send_json(srv.port, &env.key, &src, "in", &extra, 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_unverified(&v, 4);
    for f in ["a/one", "a/b/two", "three", "empty"] {
        assert!(
            same_file(&src.join(f), &root.join("in/tree").join(f)),
            "{f}"
        );
    }
    assert!(no_partials(&root, 10), "{:?}", tree(&root));

    // A get: the server sends without hashing, the client stores without verifying.
    let dest = env.path("got.bin");
    let o = run(
        get_cmd(
            srv.port,
            &env.key,
            "in/tree/a/one",
            &dest,
            &["-J", "-i", "0", "--verify", "none"],
        ),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_unverified(&v, 1);
    assert!(same_file(&src.join("a/one"), &dest));
}

#[test]
fn an_unknown_verify_mode_is_refused_before_anything_moves() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("src.bin");
    make_dense(&src, 100_000, 5);
    let srv = ServerProc::start(&root, &env.key, &[]);
    for mode in ["bogus", "", "NONE", "blake2"] {
        let o = run(
            send_cmd(srv.port, &env.key, &src, "x.bin", &["--verify", mode]),
            10,
        );
        assert_eq!(o.status.code(), Some(2), "{mode}: {}", both(&o));
        let err = text(&o.stderr);
        assert!(
            err.contains("unknown verify mode") && err.contains("blake3, none"),
            "{mode}: {err}"
        );
        let dest = env.path("got");
        let o = run(
            get_cmd(srv.port, &env.key, "x", &dest, &["--verify", mode]),
            10,
        );
        assert_eq!(o.status.code(), Some(2), "{mode}: {}", both(&o));
        assert!(!dest.exists());
    }
    assert_eq!(
        tree(&root),
        Vec::<String>::new(),
        "nothing reached the server"
    );
    // The help says what none gives up.
    let help = text(&run(send_help(), 10).stdout);
    assert!(help.contains("--verify <MODE>"), "{help}");
    assert!(help.contains("stored as they arrive"), "{help}");
}

fn send_help() -> Command {
    let mut c = zcp();
    c.args(["send", "--help"]);
    c
}

/// Sends SIGINT to a child this test spawned.
fn interrupt(child: &Child) {
    // SAFETY: kill(2) on a child this test spawned; no memory is involved.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    assert_eq!(rc, 0);
}

/// Spawns `zcp send` of `src` to `dest` with `--json-stream` and interval lines, and sends
/// it SIGINT once its progress passes `bytes` (or `until` passed). Returns its exit code.
fn send_until(port: u16, env: &Env, src: &Path, extra: &[&str], bytes: u64) -> Option<i32> {
    let mut args = vec!["--json-stream", "-i", "0.05"];
    args.extend_from_slice(extra);
    let mut child = send_cmd(port, &env.key, src, "r.bin", &args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let lines = BufReader::new(child.stdout.take().unwrap());
    let reader = std::thread::spawn(move || {
        for line in lines.lines().map_while(Result::ok) {
            let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
            if let Some(b) = v["data"]["progress"]["bytes"].as_u64()
                && tx.send(b).is_err()
            {
                break;
            }
        }
    });
    let until = Instant::now() + Duration::from_secs(30);
    while Instant::now() < until {
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(b) if b >= bytes => break,
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            _ => {}
        }
    }
    interrupt(&child);
    let status = wait_deadline(&mut child, Duration::from_secs(30));
    drop(rx);
    let _ = reader.join();
    status.code()
}

#[test]
fn a_verified_session_never_resumes_what_an_unverified_one_wrote() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("src.bin");
    let size: u64 = 128 << 20;
    make_dense(&src, size, 6);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let target = root.join("r.bin");
    // Capped, with small chunks journaled one by one: slow enough to interrupt mid-file.
    let slow = [
        "--chunk-size",
        "1M",
        "--recv-engine",
        "rw",
        "--limit-rate",
        "400M",
    ];

    // 1. Verified, interrupted early: what it proved is journaled.
    assert_eq!(send_until(srv.port, &env, &src, &slow, 8 << 20), Some(130));
    assert!(!target.exists());
    let proved = journaled(&target);
    assert!(proved > 0 && proved < size / 2, "{proved}");

    // 2. Unverified, interrupted further on: it keeps the proved chunks (its sender proves
    // them first) and writes more, but journals none of what it wrote.
    let mut none = slow.to_vec();
    none.extend_from_slice(&["--verify", "none"]);
    let code = send_until(srv.port, &env, &src, &none, proved + (32 << 20));
    assert_eq!(code, Some(130));
    assert!(!target.exists(), "nothing unverified under the final name");
    assert_eq!(journaled(&target), proved, "no record of unverified chunks");
    let key = zcp_engine::fs::part_key(b"r.bin");
    let part = std::fs::read(root.join(format!(".zcp-{key}.part"))).unwrap();
    let source = std::fs::read(&src).unwrap();
    let held = (part.chunks(1 << 20).zip(source.chunks(1 << 20)))
        .filter(|(a, b)| a == b)
        .count() as u64;
    assert!(
        held << 20 > proved + (16 << 20),
        "the unverified session wrote past what was proved: {held} MiB"
    );

    // 3. Verified again: only the proved chunks are resumed; the rest is sent again.
    let (o, v) = send_json(srv.port, &env.key, &src, "r.bin", &slow[..4], 60);
    assert!(o.status.success(), "{}", both(&o));
    let end = &v["end"];
    assert_eq!(end["resume"]["bytes_skipped"], proved, "{end}");
    assert_eq!(end["sum_sent"]["bytes"], size - proved, "{end}");
    assert_eq!(end["verified"], true, "{end}");
    assert!(same_file(&src, &target));
    assert!(no_partials(&root, 10), "{:?}", tree(&root));
}

/// The digest users compare is the file's plain BLAKE3 (what `b3sum` prints), the same on
/// every transfer of the same bytes: a send, two gets (each its own session and keys), the
/// server's transfer log for all three, and the text summary, for a file of several chunks
/// and one of a single chunk. It was keyed per session: each transfer showed another.
#[test]
fn the_digest_is_the_plain_blake3_on_every_transfer() {
    let env = Env::new();
    let root = env.mkdir("root");
    let tl = env.path("transfers.jsonl");
    let tl_arg = tl.to_str().unwrap().to_string();
    let srv = ServerProc::start(&root, &env.key, &["--transfer-log", &tl_arg]);
    for (name, size, chunk) in [
        ("multi.bin", (5 << 20) + 12_345, "1M"),
        ("one.bin", 60_000, "64K"),
    ] {
        let src = env.path(name);
        make_dense(&src, size, 7);
        let want = blake3::hash(&std::fs::read(&src).unwrap())
            .to_hex()
            .to_string();
        let cs = ["--chunk-size", chunk];
        let (o, v) = send_json(srv.port, &env.key, &src, name, &cs, 30);
        assert!(o.status.success(), "{}", both(&o));
        assert_eq!(v["end"]["digest"], want.as_str(), "send {name}");
        for round in 0..2 {
            let dest = env.path(&format!("got-{round}-{name}"));
            let o = run(
                get_cmd(srv.port, &env.key, name, &dest, &["-J", "-i", "0"]),
                30,
            );
            assert!(o.status.success(), "{}", both(&o));
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(v["end"]["digest"], want.as_str(), "get {round} {name}");
            assert!(same_file(&src, &dest));
        }
        let o = run(send_cmd(srv.port, &env.key, &src, "again.bin", &cs), 30);
        assert!(o.status.success(), "{}", both(&o));
        let line = format!("BLAKE3 {want} (as b3sum prints it)");
        assert!(text(&o.stdout).contains(&line), "{}", text(&o.stdout));
        // The server's transfer log: the push, both pulls and the second push.
        let end = Instant::now() + Duration::from_secs(10);
        let digests = loop {
            let log = std::fs::read_to_string(&tl).unwrap_or_default();
            let d: Vec<String> = (log.lines())
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|l| l["type"] == "file" && l["bytes"] == size)
                .map(|l| l["digest"].as_str().unwrap_or_default().to_string())
                .collect();
            if d.len() >= 4 || Instant::now() > end {
                break d;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(digests, vec![want.clone(); 4], "{name}");
    }
}
