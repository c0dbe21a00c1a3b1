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
        .arg("127.0.0.1:f");
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
