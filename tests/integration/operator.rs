//! What an operator expects of the command line: a progress line (in a real pseudo-terminal,
//! and `--progress` in a pipe), `-q` and `-v`, SIGINT/SIGTERM on each side then a resumed
//! run, `--retry` across a server restart, a dual-stack server, timestamped server logs, and
//! the summary naming where a file was stored.

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::util::*;

/// Options that keep a 256 MiB transfer going long enough to interrupt it with small,
/// early-journaled chunks.
const SLOW: &[&str] = &["-i", "0", "--chunk-size", "1M", "--recv-engine", "rw"];

/// [`SLOW`] held to 1 Gbit/s, for a transfer that must still be running when it is cut: 256
/// MiB take about 2 s, however fast the machine (uncapped, a quiet one finished it before a
/// signal sent at its first durable chunk took effect).
const CUT: &[&str] = &[
    "-i",
    "0",
    "--chunk-size",
    "1M",
    "--recv-engine",
    "rw",
    "--limit-rate",
    "1G",
];

#[test]
fn progress_line_in_a_pseudo_terminal() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("src.bin");
    make_dense(&src, 96 << 20, 1);
    let server = ServerProc::start(&root, &env.key, &[]);
    let (mut master, mut slave) = (0, 0);
    // SAFETY: openpty writes two descriptors into the two ints; the other arguments may be
    // null. Each descriptor is owned exactly once below.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty");
    // SAFETY: both are fresh descriptors from openpty, owned by nothing else.
    #[allow(unsafe_code)]
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let child = send_cmd(server.port, &env.key, &src, "dst/", &[])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let reader = std::thread::spawn(move || {
        let mut f = std::fs::File::from(master);
        let mut v = Vec::new();
        // Ends with EIO once the child's end of the terminal is closed.
        let _ = std::io::Read::read_to_end(&mut f, &mut v);
        v
    });
    let o = wait_output(child, 60);
    let terminal = text(&reader.join().unwrap());
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        terminal.contains('%') && terminal.contains("ETA"),
        "{terminal:?}"
    );
    assert!(terminal.contains("of 96.0 MiB"), "{terminal:?}");
    // On a terminal the line takes the interval lines' place; the summary stays.
    let out = text(&o.stdout);
    assert!(!out.contains(" sec ") || out.contains("sent"), "{out}");
    assert!(out.contains("Stored:   dst/src.bin"), "{out}");
}

#[test]
fn progress_lines_in_a_pipe_show_totals_phases_and_files() {
    let env = Env::new();
    let root = env.mkdir("root");
    let tree = env.mkdir("tree");
    for i in 0..5 {
        make_dense(&tree.join(format!("f{i}")), 4 << 20, i);
    }
    let server = ServerProc::start(&root, &env.key, &[]);
    let o = run(
        send_cmd(server.port, &env.key, &tree, "in", &["-r", "--progress"]),
        60,
    );
    assert!(o.status.success(), "{}", both(&o));
    let err = text(&o.stderr);
    let last = err.lines().last().unwrap_or_default();
    assert!(last.starts_with("done"), "{err}");
    assert!(last.contains("20.0 MiB of 20.0 MiB 100%"), "{err}");
    assert!(last.contains("ETA") && last.contains("5/5 files"), "{err}");
    // The same from the other side: a get learns the totals from the server.
    let back = env.path("back");
    let o = run(
        get_cmd(
            server.port,
            &env.key,
            &["in/tree"],
            &back,
            &["-r", "--progress"],
        ),
        60,
    );
    assert!(o.status.success(), "{}", both(&o));
    let err = text(&o.stderr);
    assert!(err.lines().last().unwrap().contains("5/5 files"), "{err}");
    assert!(same_file(&tree.join("f3"), &back.join("f3")));
}

#[test]
fn json_stream_intervals_carry_the_phase_and_totals() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("src.bin");
    make_dense(&src, 32 << 20, 2);
    let server = ServerProc::start(&root, &env.key, &[]);
    let o = run(
        send_cmd(
            server.port,
            &env.key,
            &src,
            "f",
            &["--json-stream", "-i", "0.05"],
        ),
        60,
    );
    assert!(o.status.success(), "{}", both(&o));
    let lines: Vec<serde_json::Value> = text(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let intervals: Vec<&serde_json::Value> =
        lines.iter().filter(|l| l["type"] == "interval").collect();
    assert!(!intervals.is_empty(), "{lines:?}");
    for i in &intervals {
        let p = &i["data"]["progress"];
        assert_eq!(p["total_bytes"], 32 << 20, "{p}");
        assert!(p["phase"].is_string(), "{p}");
    }
    let end = lines.iter().find(|l| l["type"] == "end").unwrap();
    assert_eq!(end["data"]["retries"], 0);
    assert_eq!(end["data"]["target"], "f");
}

#[test]
fn quiet_prints_nothing_and_verbose_logs() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("src.bin");
    make_dense(&src, 1 << 20, 3);
    let server = ServerProc::start(&root, &env.key, &[]);
    let o = run(send_cmd(server.port, &env.key, &src, "q", &["-q"]), 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(both(&o).trim(), "", "-q printed something");
    let o = run(
        send_cmd(server.port, &env.key, &src, "v", &["-q", "-vv"]),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    let err = text(&o.stderr);
    assert!(
        err.contains("INFO") && err.contains("authenticated"),
        "{err}"
    );
    assert!(err.contains("DEBUG") && err.contains("committed"), "{err}");
    // -q still says what failed.
    let o = run(
        send_cmd(server.port, &env.key, &env.path("missing"), "x", &["-q"]),
        30,
    );
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(text(&o.stderr).contains("missing"), "{}", both(&o));
}

/// `-v` lists every file that arrives, rsync-style (name, size, time, rate, proof), and the
/// failures stay theirs; without it only failures are named; `--json-stream` has a `file`
/// line per file with its plain BLAKE3. A get lists the same way.
#[test]
fn verbose_lists_every_file_that_arrives() {
    let env = Env::new();
    let root = env.mkdir("root");
    let dir = env.mkdir("t");
    for (name, size) in [("a", 300_000u64), ("b", 5), ("sub/c", 70_000)] {
        std::fs::create_dir_all(dir.join(name).parent().unwrap()).unwrap();
        make_file(&dir.join(name), size, 1 << 20, size);
    }
    // One destination in the way: that file fails, the others arrive.
    std::fs::create_dir_all(root.join("up/t/b")).unwrap();
    let server = ServerProc::start(&root, &env.key, &[]);
    let files = |out: &str| -> Vec<String> {
        (out.lines())
            .filter(|l| l.starts_with("file:"))
            .map(str::to_string)
            .collect()
    };
    let o = run(
        send_cmd(server.port, &env.key, &dir, "up/", &["-r", "-v", "-i", "0"]),
        30,
    );
    assert_eq!(o.status.code(), Some(23), "{}", both(&o));
    let out = text(&o.stdout);
    let listed = files(&out);
    assert_eq!(listed.len(), 2, "{out}");
    assert!(
        listed.iter().any(|l| l.starts_with("file:     ")
            && l.contains("/t/a 293 KiB in ")
            && l.ends_with(", verified")),
        "{listed:?}"
    );
    assert!(
        listed.iter().any(|l| l.contains("/t/sub/c 68.4 KiB in ")),
        "{listed:?}"
    );
    assert!(out.contains("/t/b: destination"), "{out}");
    assert!(out.contains("Files:    2 committed"), "{out}");
    // Without -v: no file lines.
    let o = run(
        send_cmd(server.port, &env.key, &dir, "up2/", &["-r", "-i", "0"]),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert!(files(&text(&o.stdout)).is_empty(), "{}", text(&o.stdout));
    // The JSON stream: a line per file, with the digest users compare.
    let o = run(
        send_cmd(
            server.port,
            &env.key,
            &dir,
            "up3/",
            &["-r", "--json-stream", "-i", "0"],
        ),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    let lines: Vec<serde_json::Value> = (text(&o.stdout).lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|v: &serde_json::Value| v["type"] == "file")
        .collect();
    assert_eq!(lines.len(), 3, "{}", text(&o.stdout));
    let a = (lines.iter())
        .find(|v| v["data"]["path"].as_str().unwrap().ends_with("/t/a"))
        .unwrap();
    let want = blake3::hash(&std::fs::read(dir.join("a")).unwrap())
        .to_hex()
        .to_string();
    assert_eq!(a["data"]["digest"], want.as_str(), "{a}");
    assert_eq!(a["data"]["bytes"], 300_000, "{a}");
    // A get lists what it fetched.
    let o = run(
        get_cmd(
            server.port,
            &env.key,
            &["up3/t"],
            &env.path("down"),
            &["-r", "-v", "-i", "0"],
        ),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(files(&text(&o.stdout)).len(), 3, "{}", text(&o.stdout));
}

#[test]
fn sigint_stops_the_sender_cleanly_and_the_same_command_resumes() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("src.bin");
    make_dense(&src, 256 << 20, 4);
    let server = ServerProc::start(&root, &env.key, &[]);
    let target = root.join("s.bin");
    for (sig, code) in [(libc::SIGINT, 130), (libc::SIGTERM, 143)] {
        let _ = std::fs::remove_file(&target);
        let child = spawn_send(server.port, &env.key, &src, "s.bin", CUT);
        assert!(wait_journaled(&target, 30), "no chunk became durable");
        signal(child.id(), sig);
        let o = wait_output(child, 30);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(code), "{}", both(&o));
        assert!(err.contains("interrupted"), "{err}");
        assert!(
            err.contains("run the same command again to resume"),
            "{err}"
        );
        // Nothing under the final name; what was durable is kept for the next run.
        assert!(!target.exists());
        // The server logs a client that stopped as such, at info: not a failure of its own.
        let end = Instant::now() + Duration::from_secs(10);
        while !server.log().contains("stopped by the client") && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = server.log();
        let line = log.lines().rfind(|l| l.contains("stopped by the client"));
        assert!(
            line.is_some_and(|l| l.contains(" INFO ") && l.contains("interrupted")),
            "{log}"
        );
        let held = journaled(&target);
        assert!(held > 0);
        let (o, v) = send_json(server.port, &env.key, &src, "s.bin", SLOW, 60);
        assert!(o.status.success(), "{}", both(&o));
        assert!(
            v["end"]["resume"]["bytes_skipped"].as_u64().unwrap() >= held,
            "{v}"
        );
        assert!(same_file(&src, &target));
    }
}

/// With `--verify none` the receiver journals nothing, so a cut send has nothing to resume:
/// the client says so, and that the same command sends everything again, instead of
/// promising a resume.
#[test]
fn a_cut_send_without_verification_promises_no_resume() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("src.bin");
    make_dense(&src, 256 << 20, 6);
    let server = ServerProc::start(&root, &env.key, &[]);
    let mut args = vec!["--verify", "none", "--limit-rate", "400M"];
    args.extend_from_slice(SLOW);
    let child = spawn_send(server.port, &env.key, &src, "n.bin", &args);
    let part = root.join(format!(".zcp-{}.part", zcp_engine::fs::part_key(b"n.bin")));
    let end = Instant::now() + Duration::from_secs(30);
    while std::fs::metadata(&part).map_or(true, |m| m.len() == 0) {
        assert!(Instant::now() < end, "the session never began");
        std::thread::sleep(Duration::from_millis(5));
    }
    signal(child.id(), libc::SIGINT);
    let o = wait_output(child, 30);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(130), "{}", both(&o));
    assert!(err.contains("with --verify none nothing is kept"), "{err}");
    assert!(
        !err.contains("run the same command again to resume"),
        "{err}"
    );
    assert!(!root.join("n.bin").exists());
}

#[test]
fn sigint_stops_a_get_and_the_same_command_resumes() {
    let env = Env::new();
    let root = env.mkdir("root");
    make_dense(&root.join("g.bin"), 256 << 20, 5);
    let server = ServerProc::start(&root, &env.key, &[]);
    let dest = env.path("g.bin");
    let mut args = vec!["--json-stream"];
    args.extend_from_slice(CUT);
    let child = get_cmd(server.port, &env.key, &["g.bin"], &dest, &args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_journaled(&dest, 30), "no chunk became durable");
    signal(child.id(), libc::SIGINT);
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(130), "{}", both(&o));
    // The JSON says the same exit code as the process.
    let last: serde_json::Value =
        serde_json::from_str(text(&o.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "error", "{last}");
    assert_eq!(last["data"]["exit_code"], 130, "{last}");
    assert!(!dest.exists());
    let held = journaled(&dest);
    assert!(held > 0);
    let mut args = vec!["-J"];
    args.extend_from_slice(SLOW);
    let o = run(get_cmd(server.port, &env.key, &["g.bin"], &dest, &args), 60);
    assert!(o.status.success(), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["end"]["resume"]["bytes_skipped"].as_u64().unwrap() >= held,
        "{v}"
    );
    assert!(same_file(&root.join("g.bin"), &dest));
}

#[test]
fn sigterm_drains_the_server_and_a_retry_resumes_after_its_restart() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("src.bin");
    make_dense(&src, 256 << 20, 6);
    let mut server = ServerProc::start(&root, &env.key, &[]);
    let port = server.port;
    let target = root.join("r.bin");
    // Without --retry: the client hears why, and how to resume.
    let child = spawn_send(port, &env.key, &src, "r.bin", CUT);
    assert!(wait_journaled(&target, 30), "no chunk became durable");
    let t = Instant::now();
    signal(server.pid(), libc::SIGTERM);
    assert_eq!(server.exit_code(15), Some(0), "{}", server.log());
    assert!(t.elapsed() < Duration::from_secs(12));
    assert!(server.log().contains("shutting down"), "{}", server.log());
    let o = wait_output(child, 30);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(err.contains("the server is shutting down"), "{err}");
    assert!(
        err.contains("run the same command again to resume"),
        "{err}"
    );
    assert!(!target.exists() && journaled(&target) > 0);

    // With --retry: the server goes away mid-transfer and comes back on the same port. A
    // target of its own, so that the first durable chunk awaited is this transfer's (the
    // journal left above would let the signal come only after a resume that could finish
    // first).
    let server = ServerProc::start(&root, &env.key, &["-p", &port.to_string()]);
    let target = root.join("r2.bin");
    let mut args = vec!["-J", "--retry", "8", "--retry-wait", "0.2"];
    args.extend_from_slice(CUT);
    let child = spawn_send(port, &env.key, &src, "r2.bin", &args);
    assert!(wait_journaled(&target, 30), "no chunk became durable");
    let mut server = server;
    signal(server.pid(), libc::SIGTERM);
    assert_eq!(server.exit_code(15), Some(0));
    let _back = ServerProc::start(&root, &env.key, &["-p", &port.to_string()]);
    let o = wait_output(child, 90);
    assert!(o.status.success(), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["end"]["retries"].as_u64().unwrap() >= 1, "{v}");
    assert!(
        v["end"]["resume"]["bytes_skipped"].as_u64().unwrap() > 0,
        "{v}"
    );
    // Why the first try ended: the server's word, or the stream it closed (whichever the
    // client heard first).
    assert!(v["retries"][0]["reason"].is_string(), "{v}");
    assert!(same_file(&src, &target));
}

/// A server killed mid-transfer that never comes back: the retry cannot connect, but the
/// first try moved data the server holds, so the client says to resume, not "nothing was
/// sent".
#[test]
fn a_retry_that_cannot_reconnect_after_data_moved_says_to_resume() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("src.bin");
    make_dense(&src, 256 << 20, 8);
    let mut server = ServerProc::start(&root, &env.key, &[]);
    let target = root.join("k.bin");
    let mut args = vec!["--retry", "1", "--retry-wait", "0.2"];
    args.extend_from_slice(CUT);
    let child = spawn_send(server.port, &env.key, &src, "k.bin", &args);
    assert!(wait_journaled(&target, 30), "no chunk became durable");
    signal(server.pid(), libc::SIGKILL);
    let _ = server.exit_code(10);
    let o = wait_output(child, 60);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(err.contains("cannot connect again after 1 try"), "{err}");
    assert!(
        err.contains("run the same command again to resume"),
        "{err}"
    );
    assert!(!err.contains("nothing was sent"), "{err}");
    assert!(!target.exists() && journaled(&target) > 0);
}

#[test]
fn retry_gives_up_after_n_tries_and_skips_what_cannot_mend() {
    let env = Env::new();
    let src = env.path("src.bin");
    make_dense(&src, 1 << 20, 7);
    // Nothing listens on this port: connecting fails each time.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = Instant::now();
    let o = run(
        send_cmd(
            port,
            &env.key,
            &src,
            "x",
            &["--retry", "2", "--retry-wait", "0.1"],
        ),
        30,
    );
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    let out = text(&o.stdout);
    assert!(
        out.contains("attempt 2 of 3") && out.contains("attempt 3 of 3"),
        "{out}"
    );
    // 0.1 s, then 0.2 s: backoff.
    assert!(t.elapsed() >= Duration::from_millis(300));
    // A wrong key is not retried.
    let root = env.mkdir("root");
    let other = env.path("other.key");
    assert!(
        run(
            {
                let mut c = zcp();
                c.args(["keygen", "--output"]).arg(&other);
                c
            },
            10
        )
        .status
        .success()
    );
    let server = ServerProc::start(&root, &other, &[]);
    let o = run(
        send_cmd(server.port, &env.key, &src, "x", &["--retry", "3"]),
        30,
    );
    assert_eq!(o.status.code(), Some(3), "{}", both(&o));
    assert!(!text(&o.stdout).contains("attempt 2"), "{}", both(&o));
}

#[test]
fn the_server_listens_on_both_families_by_default_and_on_one_with_4_or_6() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("src.bin");
    make_dense(&src, 1 << 20, 8);
    let mut c = zcp();
    c.arg("serve");
    let server = ServerProc::spawn(c, &root, &env.key, &[]);
    if !server.log().contains("listening on [::]") {
        eprintln!("skipped: this host has no IPv6 ({})", server.log());
        return;
    }
    let to = |host: &str, port: u16, name: &str| {
        let mut c = zcp();
        c.args(["send", "-i", "0", "-p", &port.to_string(), "--key-file"])
            .arg(&env.key)
            .arg(&src)
            .arg(format!("{host}::{name}"));
        run(c, 30)
    };
    assert!(to("[::1]", server.port, "six").status.success());
    assert!(to("127.0.0.1", server.port, "four").status.success());
    assert!(same_file(&src, &root.join("six")) && same_file(&src, &root.join("four")));
    // The log: RFC 3339 timestamps, the peer and direction on each session line.
    let log = server.log();
    let line = log.lines().find(|l| l.contains("stored six")).unwrap();
    let stamp = line.split(' ').next().unwrap();
    assert!(
        stamp.len() >= 20 && stamp.ends_with('Z') && stamp.contains('T'),
        "{line}"
    );
    assert!(line.contains("(push from [::1]:"), "{line}");
    // A pull is logged as sent.
    let o = run(
        get_cmd(server.port, &env.key, &["six"], &env.path("back"), &[]),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        server.wait_log("sent (stored by the client) six", 10),
        "{}",
        server.log()
    );

    for (flag, ok, refused) in [("-4", "127.0.0.1", "[::1]"), ("-6", "[::1]", "127.0.0.1")] {
        let mut c = zcp();
        c.args(["serve", flag]);
        let s = ServerProc::spawn(c, &root, &env.key, &[]);
        assert!(to(ok, s.port, "ok").status.success(), "{flag}");
        let o = to(refused, s.port, "no");
        assert_eq!(o.status.code(), Some(1), "{flag}: {}", both(&o));
        assert!(text(&o.stderr).contains("cannot connect"), "{}", both(&o));
    }
}

/// `zcp get` of `paths` from 127.0.0.1:`port` into `dest`.
fn get_cmd(
    port: u16,
    key: &Path,
    paths: &[&str],
    dest: &Path,
    extra: &[&str],
) -> std::process::Command {
    let mut c = zcp();
    c.args(["get", "-p", &port.to_string(), "--key-file"])
        .arg(key)
        .args(extra);
    for p in paths {
        c.arg(format!("127.0.0.1::{p}"));
    }
    c.arg(dest);
    c
}

#[test]
fn a_signal_stops_a_retry_loop_at_once_and_serve_once_reports_its_cut_session() {
    let env = Env::new();
    let src = env.path("src.bin");
    make_dense(&src, 1 << 20, 9);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = spawn_send(
        port,
        &env.key,
        &src,
        "x",
        &["-q", "--retry", "100000", "--retry-wait", "0"],
    );
    std::thread::sleep(Duration::from_millis(500));
    let t = Instant::now();
    signal(child.id(), libc::SIGINT);
    let o = wait_output(child, 10);
    assert_eq!(o.status.code(), Some(130), "{}", both(&o));
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    // -q: no log lines, only the error and the hint.
    assert!(text(&o.stderr).lines().count() <= 3, "{}", both(&o));

    // serve --once stopped while its one session runs: that session did not succeed.
    let root = env.mkdir("root");
    let big = env.path("big.bin");
    make_dense(&big, 256 << 20, 10);
    let mut server = ServerProc::start(&root, &env.key, &["--once"]);
    let child = spawn_send(server.port, &env.key, &big, "b.bin", CUT);
    assert!(
        wait_journaled(&root.join("b.bin"), 30),
        "no chunk became durable"
    );
    signal(server.pid(), libc::SIGTERM);
    assert_eq!(server.exit_code(15), Some(1), "{}", server.log());
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(!root.join("b.bin").exists());
}

#[test]
fn counting_a_wide_tree_holds_no_more_descriptors_than_its_depth() {
    if std::process::Command::new("prlimit")
        .arg("--version")
        .output()
        .is_err()
    {
        skip("prlimit (util-linux) is not installed");
        return;
    }
    let env = Env::new();
    let root = env.mkdir("root");
    let tree = env.mkdir("wide");
    // Many directories side by side (cheap to send: no file in them but the last).
    for i in 0..2500 {
        std::fs::create_dir(tree.join(format!("d{i}"))).unwrap();
    }
    std::fs::write(tree.join("d2499/f"), b"x").unwrap();
    let server = ServerProc::start(&root, &env.key, &[]);
    // 1024 descriptors in all, soft and hard: the walk (at most 768 files open) and the
    // count together must fit.
    let mut c = std::process::Command::new("prlimit");
    c.arg("--nofile=1024:1024").arg(env!("CARGO_BIN_EXE_zcp"));
    c.env_remove("ZCP_KEY_FILE")
        .args([
            "send",
            "-r",
            "-i",
            "0",
            "-p",
            &server.port.to_string(),
            "--key-file",
        ])
        .arg(&env.key)
        .arg(&tree)
        .arg("127.0.0.1::in");
    let o = run(c, 60);
    assert!(o.status.success(), "{}", both(&o));
    assert!(root.join("in/wide/d2499/f").exists());
}
