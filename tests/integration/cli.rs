//! The command-line surface: keygen, keys, usage errors, demo, and a plain send.

use std::os::unix::fs::PermissionsExt;

use crate::util::*;

#[test]
fn keygen_writes_a_private_key_and_refuses_to_overwrite() {
    let env = Env::new();
    let mode = std::fs::metadata(&env.key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let mut c = zcp();
    c.args(["keygen", "-o"]).arg(&env.key);
    let o = run(c, 10);
    assert_eq!(o.status.code(), Some(3));
    assert!(text(&o.stderr).contains("--force"), "{}", text(&o.stderr));
    let mut c = zcp();
    c.args(["keygen", "--force", "-o"]).arg(&env.key);
    assert!(run(c, 10).status.success());
}

#[test]
fn send_then_receive_a_file_with_the_defaults() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("payload.bin");
    make_dense(&src, 3 << 20, 1);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let o = run(
        send_cmd(srv.port, &env.key, &src, "incoming/", &["-i", "0.2"]),
        60,
    );
    let out = text(&o.stdout);
    assert!(o.status.success(), "{out}\n{}", text(&o.stderr));
    assert!(same_file(&src, &root.join("incoming/payload.bin")));
    for needle in [
        "Interval",
        "Transfer",
        "Bitrate",
        "sent",
        "stored durably and verified",
        "Engines:",
        "CPU:",
    ] {
        assert!(out.contains(needle), "missing {needle:?} in:\n{out}");
    }
    assert!(
        srv.wait_log("stored incoming/payload.bin", 5),
        "{}",
        srv.log()
    );
    assert_eq!(
        tree(&root),
        vec!["incoming", "incoming/payload.bin"],
        "no stray files"
    );
}

#[test]
fn mode_and_mtime_are_kept() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("m.bin");
    make_dense(&src, 5000, 2);
    std::fs::set_permissions(&src, std::fs::Permissions::from_mode(0o640)).unwrap();
    let mtime = std::time::UNIX_EPOCH + std::time::Duration::new(1_500_000_000, 123_456_789);
    std::fs::File::options()
        .write(true)
        .open(&src)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let o = run(
        send_cmd(srv.port, &env.key, &src, "renamed.bin", &["-i", "0"]),
        30,
    );
    assert!(o.status.success(), "{}", text(&o.stderr));
    let m = std::fs::metadata(root.join("renamed.bin")).unwrap();
    assert_eq!(m.permissions().mode() & 0o777, 0o640);
    assert_eq!(m.modified().unwrap(), mtime);
}

#[test]
fn missing_key_names_the_cause_and_writes_nothing() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("f");
    make_dense(&src, 1000, 3);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let home = env.mkdir("home");
    let mut c = zcp();
    c.env("HOME", &home)
        .env_remove("XDG_CONFIG_HOME")
        .args(["send", "-p", &srv.port.to_string()])
        .arg(&src)
        .arg("127.0.0.1::f");
    let o = run(c, 10);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    assert!(text(&o.stderr).contains("no key"), "{}", text(&o.stderr));
    assert!(tree(&root).is_empty());

    // The server refuses to start without one too.
    let mut c = zcp();
    c.env("HOME", &home)
        .env_remove("XDG_CONFIG_HOME")
        .args(["serve", "--root"])
        .arg(&root);
    let o = run(c, 10);
    assert_eq!(o.status.code(), Some(3));
    assert!(text(&o.stderr).contains("no key"));
}

#[test]
fn wrong_key_fails_authentication_and_writes_nothing() {
    let env = Env::new();
    let other = Env::new();
    let root = env.mkdir("root");
    let src = env.path("f");
    make_dense(&src, 100_000, 4);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let o = run(send_cmd(srv.port, &other.key, &src, "f", &[]), 10);
    assert_eq!(o.status.code(), Some(3), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("authentication failed") && err.contains("key"),
        "{err}"
    );
    assert!(tree(&root).is_empty());
    assert!(srv.wait_log("refused", 5), "{}", srv.log());
}

#[test]
fn key_file_readable_by_others_is_refused() {
    let env = Env::new();
    std::fs::set_permissions(&env.key, std::fs::Permissions::from_mode(0o644)).unwrap();
    let src = env.path("f");
    make_dense(&src, 10, 5);
    let o = run(send_cmd(1, &env.key, &src, "f", &[]), 10);
    assert_eq!(o.status.code(), Some(3));
    assert!(text(&o.stderr).contains("chmod 600"), "{}", text(&o.stderr));
    std::fs::write(&env.key, "not a key\n").unwrap();
    std::fs::set_permissions(&env.key, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = run(send_cmd(1, &env.key, &src, "f", &[]), 10);
    assert_eq!(o.status.code(), Some(3));
    assert!(
        text(&o.stderr).contains("hexadecimal"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn usage_errors_name_what_to_fix() {
    let env = Env::new();
    let src = env.path("f");
    make_dense(&src, 10, 6);
    let cases: &[(&[&str], &str)] = &[
        (&["--engine", "zerocopy"], "unknown sender engine"),
        (&["--recv-engine", "disk"], "unknown receiver engine"),
        (&["--block-size", "12Q"], "unknown unit"),
    ];
    for (args, needle) in cases {
        let o = run(send_cmd(1, &env.key, &src, "f", args), 10);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(
            text(&o.stderr).contains(needle),
            "{args:?}: {}",
            text(&o.stderr)
        );
    }
    let mut c = zcp();
    c.args(["send", "--key-file"])
        .arg(&env.key)
        .arg(&src)
        .arg("no-colon-here");
    let o = run(c, 10);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("HOST:PATH"), "{}", text(&o.stderr));

    // A source that is not there, or is a directory.
    let o = run(send_cmd(1, &env.key, &env.path("missing"), "f", &[]), 10);
    assert_eq!(o.status.code(), Some(1));
    assert!(text(&o.stderr).contains("missing"), "{}", text(&o.stderr));
    let o = run(send_cmd(1, &env.key, env.dir.path(), "f", &[]), 10);
    assert!(
        text(&o.stderr).contains("is a directory"),
        "{}",
        text(&o.stderr)
    );

    // Nobody listening.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let o = run(send_cmd(port, &env.key, &src, "f", &[]), 20);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o.stderr).contains("cannot connect"),
        "{}",
        text(&o.stderr)
    );
}

#[test]
fn demo_runs_end_to_end_and_cleans_up() {
    let env = Env::new();
    let dir = env.mkdir("demo");
    let mut c = zcp();
    c.args(["demo", "--size", "9M", "-i", "0.1", "--dir"])
        .arg(&dir);
    let o = run(c, 120);
    let (out, err) = (text(&o.stdout), text(&o.stderr));
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("stored durably and verified"), "{out}");
    assert!(err.contains("byte-identical"), "{err}");
    assert!(tree(&dir).is_empty(), "demo left files: {:?}", tree(&dir));

    let mut c = zcp();
    c.args([
        "demo",
        "--size",
        "1M",
        "--recv-engine",
        "null",
        "-J",
        "--dir",
    ])
    .arg(&dir);
    let o = run(c, 60);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["end"]["verified"], false);
    assert_eq!(v["end"]["engines"]["receiver"], "null");
}

#[test]
fn interval_reports_arrive_while_the_data_moves() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("big");
    make_file(&src, 2 << 30, 64 << 20, 5);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (o, v) = send_json(
        srv.port,
        &env.key,
        &src,
        "big",
        &["-i", "0.05", "--recv-engine", "null"],
        120,
    );
    assert!(o.status.success(), "{}", both(&o));
    let secs = v["end"]["sum_sent"]["seconds"].as_f64().unwrap();
    let intervals = v["intervals"].as_array().unwrap();
    // One line per 50 ms while sending, give or take the last partial one and scheduling.
    let want = ((secs / 0.05) as usize / 2).max(2);
    assert!(
        intervals.len() >= want,
        "{} intervals in {secs} s: {}",
        intervals.len(),
        v["intervals"]
    );
    let sum: u64 = intervals
        .iter()
        .map(|i| i["sum"]["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(sum, 2 << 30, "the intervals add up to the file");
}

#[test]
fn every_usage_mistake_exits_2_before_any_work() {
    let env = Env::new();
    let src = env.path("f");
    make_dense(&src, 1000, 1);
    // A listener that counts connections: a usage mistake must never reach it.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.set_nonblocking(true).unwrap();
    let port = probe.local_addr().unwrap().port();
    let send: &[(&[&str], &str, &str)] = &[
        (&["-P", "0"], "f", "1 to 64"),
        (&["-P", "5310"], "f", "the port is -p"),
        (&["--idle-timeout", "0"], "f", "--idle-timeout"),
        (&["--connect-timeout", "0"], "f", "--connect-timeout"),
        (&["--chunk-size", "1000"], "f", "--chunk-size"),
        (&["--chunk-size", "2G"], "f", "--chunk-size"),
        (&["--interval=-1"], "f", "--interval"),
        (&[], "/etc/zcp-test", "absolute"),
        (&[], "a/../../x", ".."),
        (&[], "..", ".."),
    ];
    for (args, dest, needle) in send {
        let o = run(send_cmd(port, &env.key, &src, dest, args), 10);
        assert_eq!(o.status.code(), Some(2), "{args:?} {dest}: {}", both(&o));
        let err = text(&o.stderr);
        assert!(err.contains(needle), "{args:?} {dest}: {err}");
        assert!(!err.contains("peer"), "{args:?} {dest}: {err}");
    }
    let o = run(send_cmd(0, &env.key, &src, "f", &[]), 10);
    assert_eq!(o.status.code(), Some(2), "-p 0: {}", both(&o));
    assert!(text(&o.stderr).contains("-p"), "{}", text(&o.stderr));
    for path in [
        "127.0.0.1::.",
        "127.0.0.1::",
        "127.0.0.1::../x",
        "127.0.0.1::/etc/passwd",
    ] {
        let mut c = zcp();
        c.args(["get", "-p", &port.to_string(), "--key-file"])
            .arg(&env.key)
            .arg(path)
            .arg(env.path("got"));
        let o = run(c, 10);
        assert_eq!(o.status.code(), Some(2), "{path}: {}", both(&o));
        assert!(!env.path("got").exists(), "{path}: nothing is created");
    }
    for (extra, needle) in [
        (&["--root", "/nonexistent/zcp"][..], "--root"),
        (&["--max-streams", "0"][..], "--max-streams"),
        (&["--idle-timeout", "0"][..], "--idle-timeout"),
    ] {
        let mut c = zcp();
        c.args(["serve", "-p", "0", "--bind", "127.0.0.1", "--key-file"])
            .arg(&env.key);
        if extra[0] != "--root" {
            c.arg("--root").arg(env.dir.path());
        }
        c.args(extra);
        let o = run(c, 10);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", both(&o));
        assert!(text(&o.stderr).contains(needle), "{extra:?}: {}", both(&o));
    }
    assert!(
        probe.accept().is_err(),
        "a usage mistake connected to the server"
    );
}

#[test]
fn keygen_makes_missing_directories_private_and_writes_to_stdout() {
    let env = Env::new();
    let key = env.path("home/.config/zcp/key");
    let mut c = zcp();
    c.args(["keygen", "-o"]).arg(&key);
    let o = run(c, 10);
    assert!(o.status.success(), "{}", both(&o));
    for d in ["home", "home/.config", "home/.config/zcp"] {
        let mode = std::fs::metadata(env.path(d)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700, "{d}");
    }
    assert!(zcp_wire::Psk::parse(&std::fs::read_to_string(&key).unwrap()).is_ok());
    let mut c = zcp();
    c.args(["keygen", "-o", "-"]);
    let o = run(c, 10);
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        zcp_wire::Psk::parse(&text(&o.stdout)).is_ok(),
        "{}",
        text(&o.stdout)
    );
    assert!(!env.dir.path().join("-").exists());
}

#[test]
fn a_get_that_cannot_connect_leaves_no_destination_behind() {
    let env = Env::new();
    // A port nothing listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dest = env.path("new/deeper/");
    let mut c = zcp();
    c.args(["get", "-p", &port.to_string(), "--key-file"])
        .arg(&env.key)
        .arg("127.0.0.1::a")
        .arg("127.0.0.1::b")
        .arg(&dest);
    let o = run(c, 20);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        !env.path("new").exists(),
        "a failed get made its destination"
    );
}

#[test]
fn a_port_in_use_is_said_once_and_a_port_that_is_not_zcp_is_named() {
    let env = Env::new();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let mut c = zcp();
    c.args([
        "serve",
        "--bind",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "--key-file",
    ])
    .arg(&env.key)
    .arg("--root")
    .arg(env.dir.path());
    let o = run(c, 10);
    assert_eq!(o.status.code(), Some(1));
    let err = text(&o.stderr).to_lowercase();
    assert_eq!(err.matches("in use").count(), 1, "{err}");

    // Something else on the port: an SSH banner, with a control character in it.
    let t = std::thread::spawn(move || {
        use std::io::Write;
        if let Ok((mut s, _)) = busy.accept() {
            let _ = s.write_all(b"SSH-2.0-OpenSSH_9.2\x1b[31m\r\n");
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
    });
    let src = env.path("f");
    make_dense(&src, 100, 1);
    let o = run(send_cmd(port, &env.key, &src, "f", &[]), 10);
    t.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    let err = text(&o.stderr);
    assert!(err.contains("is not a zcp server"), "{err}");
    assert!(err.contains("SSH-2.0-OpenSSH_9.2"), "{err}");
    assert!(err.contains("an SSH server answered"), "{err}");
    assert!(!o.stderr.contains(&0x1b), "{err:?}");
}

#[test]
fn a_request_above_the_servers_stream_cap_is_capped_and_said() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("f");
    make_dense(&src, 300_000, 1);
    let srv = ServerProc::start(&root, &env.key, &["--max-streams", "2"]);
    let o = run(
        send_cmd(srv.port, &env.key, &src, "f", &["-P", "8", "-i", "0"]),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        both(&o).contains("the server allows at most 2"),
        "{}",
        both(&o)
    );
    assert!(same_file(&src, &root.join("f")));
}

/// `zcp ARGS`, with colour off whatever the caller's environment says.
fn plain(args: &[&str]) -> std::process::Output {
    let mut c = zcp();
    c.args(args)
        .env("NO_COLOR", "1")
        .env_remove("CLICOLOR_FORCE");
    run(c, 10)
}

#[test]
fn every_help_has_examples_and_the_right_usage_line() {
    for command in [
        "", "send", "get", "ls", "recv", "serve", "demo", "keygen", "bench", "doctor", "clean",
        "generate", "token",
    ] {
        let args: Vec<&str> = [command, "--help"]
            .into_iter()
            .filter(|a| !a.is_empty())
            .collect();
        let o = plain(&args);
        assert!(o.status.success(), "{args:?}: {}", both(&o));
        let help = text(&o.stdout);
        assert!(help.contains("\nExamples:\n  zcp "), "{args:?}:\n{help}");
        let name = if command.is_empty() { "zcp" } else { command };
        insta::assert_snapshot!(format!("help_{name}"), help);
    }
    // `-h` has the examples too, and the exit codes stay where they were.
    let short = text(&plain(&["send", "-h"]).stdout);
    assert!(
        short.contains("Usage: zcp send [OPTIONS] <SRC>... <HOST:DEST>\n"),
        "{short}"
    );
    assert!(short.contains("Examples:"), "{short}");
    assert!(short.contains("Exit codes: 0 success"), "{short}");
    let get = text(&plain(&["get", "-h"]).stdout);
    assert!(
        get.contains("Usage: zcp get [OPTIONS] <HOST:PATH>... <DEST>\n"),
        "{get}"
    );
}

#[test]
fn missing_and_misplaced_paths_are_usage_errors_with_a_tip() {
    let o = plain(&["send", "only-one"]);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    insta::assert_snapshot!("send_missing_target", text(&o.stderr));
    // A path between options: clap reads it as the target; the tip says what to do.
    let o = plain(&["send", "-r", "dir/", "-P", "4", "host:"]);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    let err = text(&o.stderr);
    assert!(
        err.contains("options go before or after SRC... HOST:DEST"),
        "{err}"
    );
    let o = plain(&["get", "h:a", "-r", "dest"]);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("before or after HOST:PATH... DEST"),
        "{}",
        both(&o)
    );
    // No tip where it would not fit.
    let o = plain(&["demo", "stray"]);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(!text(&o.stderr).contains("tip"), "{}", both(&o));
}

#[test]
fn version_says_protocol_commit_toolchain_kernel_and_engines() {
    let env = Env::new();
    let tmp = env.mkdir("tmp");
    let mut outputs = Vec::new();
    for flag in ["--version", "-V"] {
        let mut c = zcp();
        c.arg(flag).env("TMPDIR", &tmp);
        let started = std::time::Instant::now();
        let o = run(c, 10);
        let took = started.elapsed();
        assert!(o.status.success(), "{flag}: {}", both(&o));
        assert!(
            took < std::time::Duration::from_secs(3),
            "{flag} took {took:?}"
        );
        outputs.push(text(&o.stdout));
    }
    assert_eq!(outputs[0], outputs[1], "-V and --version say the same");
    let out = &outputs[0];
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[0],
        format!("zcp {}", env!("CARGO_PKG_VERSION")),
        "{out}"
    );
    let field = |name: &str| {
        lines
            .iter()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap_or_else(|| panic!("no {name:?} line in:\n{out}"))
    };
    assert_eq!(field("protocol"), zcp_wire::PROTOCOL_VERSION.to_string());
    let commit = field("commit");
    let hash = commit.strip_suffix("-dirty").unwrap_or(commit);
    assert!(
        commit == "unknown"
            || ((7..=40).contains(&hash.len()) && hash.bytes().all(|b| b.is_ascii_hexdigit())),
        "commit {commit:?}"
    );
    assert!(field("built").starts_with("rustc "), "{out}");
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert_eq!(field("kernel"), format!("Linux {}", release.trim()));
    // `rw` works wherever a file can be read.
    assert!(field("sender engines").contains("rw"), "{out}");
    let recv = field("receiver engines");
    assert!(
        recv.contains("rw") && recv.contains("auto chooses"),
        "{out}"
    );
    let probed_in = format!("(probed in {}, ", tmp.canonicalize().unwrap().display());
    assert!(recv.contains(&probed_in), "{out}");
    // Kernel TLS: this kernel's answer, whichever it is, said as such.
    let https = field("https face");
    let ktls = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_ulp")
        .is_ok_and(|u| u.split_whitespace().any(|w| w == "tls"));
    assert!(https.starts_with("TLS in user space (rustls); "), "{out}");
    if ktls {
        assert!(https.ends_with("kernel TLS available, not used"), "{out}");
    } else {
        assert!(https.contains("TCP_ULP tls"), "{out}");
    }
    assert!(tree(&tmp).is_empty(), "the probes left {:?}", tree(&tmp));

    // No usable temporary directory: still a version, the probes say why they did not run.
    let mut c = zcp();
    c.arg("-V").env("TMPDIR", env.path("missing"));
    let o = run(c, 10);
    assert!(o.status.success(), "{}", both(&o));
    let out = text(&o.stdout);
    assert!(out.starts_with("zcp "), "{out}");
    assert_eq!(out.matches("not probed").count(), 2, "{out}");
}

#[test]
fn a_zcp_url_target_transfers_both_ways() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("payload.bin");
    make_dense(&src, 300_000, 7);
    let srv = ServerProc::start(&root, &env.key, &[]);
    // The port comes from the URL (no -p); the path is percent-decoded.
    let mut c = zcp();
    c.args(["send", "-i", "0", "--key-file"])
        .arg(&env.key)
        .arg(&src)
        .arg(format!("zcp://127.0.0.1:{}/in%20box/", srv.port));
    let o = run(c, 30);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &root.join("in box/payload.bin")));
    // The same port given twice is fine; the root alone is `zcp://HOST:PORT`.
    let got = env.mkdir("got");
    let mut c = zcp();
    c.args(["get", "-i", "0", "-p", &srv.port.to_string(), "--key-file"])
        .arg(&env.key)
        .arg(format!("zcp://127.0.0.1:{}/in%20box/payload.bin", srv.port))
        .arg(&got);
    let o = run(c, 30);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &got.join("payload.bin")));
    let mut c = zcp();
    c.args(["send", "-i", "0", "--key-file"])
        .arg(&env.key)
        .arg(&src)
        .arg(format!("zcp://127.0.0.1:{}", srv.port));
    let o = run(c, 30);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &root.join("payload.bin")));
    assert_eq!(tree(&root), ["in box", "in box/payload.bin", "payload.bin"]);
}

#[test]
fn targets_other_tools_read_differently_are_refused_before_any_work() {
    let env = Env::new();
    let src = env.path("f");
    make_dense(&src, 1000, 8);
    // A listener that counts connections: a refused target must never reach it.
    let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    probe.set_nonblocking(true).unwrap();
    let port = probe.local_addr().unwrap().port();
    let p = port.to_string();
    let cases: Vec<(String, &str)> = vec![
        ("alice@127.0.0.1::x".into(), "write 127.0.0.1::x"),
        // The old daemon-style call: HOST:PATH now goes over ssh.
        ("127.0.0.1:module/x".into(), "write 127.0.0.1::PATH"),
        ("fe80::1:x".into(), "write [fe80::1]:x"),
        ("::1:x".into(), "write [::1]:x"),
        (format!("zcp://alice@127.0.0.1:{p}/x"), "no user names"),
        ("rsync://127.0.0.1/m".into(), "zcp://HOST[:PORT]/PATH"),
        (format!("zcp://127.0.0.1:{p}/a?b"), "%3F"),
        (format!("zcp://127.0.0.1:{p}/100%"), "%25"),
        (format!("zcp://127.0.0.1:{p}/a%2F..%2F..%2Fx"), ".."),
        (format!("zcp://127.0.0.1:{p}//etc/x"), "absolute"),
        (format!("zcp://127.0.0.1:{p}/nul%00x"), "NUL"),
        ("zcp://127.0.0.1:0/x".into(), "not a port"),
    ];
    for (target, needle) in &cases {
        let mut c = zcp();
        c.args(["send", "--key-file"])
            .arg(&env.key)
            .arg(&src)
            .arg(target);
        let o = run(c, 10);
        assert_eq!(o.status.code(), Some(2), "{target}: {}", both(&o));
        assert!(text(&o.stderr).contains(needle), "{target}: {}", both(&o));
    }
    // -p and the URL's port disagree.
    let mut c = zcp();
    c.args(["send", "-p", "1", "--key-file"])
        .arg(&env.key)
        .arg(&src)
        .arg(format!("zcp://127.0.0.1:{p}/x"));
    let o = run(c, 10);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(text(&o.stderr).contains("disagree"), "{}", both(&o));
    // A get whose URLs name two ports.
    let mut c = zcp();
    c.args(["get", "--key-file"])
        .arg(&env.key)
        .arg(format!("zcp://127.0.0.1:{p}/a"))
        .arg("zcp://127.0.0.1:2/b")
        .arg(env.path("got"));
    let o = run(c, 10);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(text(&o.stderr).contains("same port"), "{}", both(&o));
    assert!(!env.path("got").exists());
    assert!(
        probe.accept().is_err(),
        "a refused target connected to the server"
    );
}

/// No server at the port (a stopped server, a wrong `-p`): the client says nothing was sent
/// and what to check, for `send` and `get`, and never that running it again resumes.
#[test]
fn a_refused_connection_says_what_to_check_not_resume() {
    let env = Env::new();
    let src = env.path("f");
    make_dense(&src, 10, 6);
    let port = free_port();
    let mut get = zcp();
    get.args(["get", "-p", &port.to_string(), "--key-file"])
        .arg(&env.key)
        .arg("127.0.0.1::f")
        .arg(env.path("back"));
    for (what, c) in [
        ("send", send_cmd(port, &env.key, &src, "f", &[])),
        ("get", get),
    ] {
        let o = run(c, 10);
        assert_eq!(o.status.code(), Some(1), "{what}: {}", both(&o));
        let err = text(&o.stderr);
        assert!(
            err.contains("cannot connect to 127.0.0.1:"),
            "{what}: {err}"
        );
        assert!(err.contains("nothing was sent"), "{what}: {err}");
        assert!(err.contains("is `zcp serve` running"), "{what}: {err}");
        assert!(!err.contains("resume"), "{what}: {err}");
    }
    assert!(!env.path("back").exists());
}

/// `get` of a name the server never had: the entry fails saying so ("no such file or
/// directory on the server"), not that it vanished; exit 1, nothing stored.
#[test]
fn a_get_of_a_name_never_there_says_so() {
    let env = Env::new();
    let root = env.mkdir("root");
    let dest = env.mkdir("dest");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut c = zcp();
    c.args(["get", "-p", &srv.port.to_string(), "--key-file"])
        .arg(&env.key)
        .arg("127.0.0.1::nothere")
        .arg(&dest);
    let o = run(c, 20);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    let err = text(&o.stderr);
    assert!(
        err.contains("nothere: no such file or directory on the server"),
        "{err}"
    );
    assert!(!err.contains("vanished"), "{err}");
    assert!(tree(&dest).is_empty());
}
