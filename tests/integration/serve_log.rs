//! `zcp serve`'s logs: `--log-level`, `--log-format` (plain, json, journal, auto) and the JSON
//! transfer log (`--transfer-log`, config `transfer_log`), reopened on SIGHUP.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::*;

/// A file of `size` bytes in `env`.
fn file(env: &Env, name: &str, size: u64) -> std::path::PathBuf {
    let p = env.path(name);
    make_file(&p, size, 1 << 20, size ^ 11);
    p
}

/// A send with a key the server does not know: refused (exit 3).
fn refused_send(srv: &ServerProc, env: &Env, src: &Path) {
    let wrong = env.path("wrong.key");
    if !wrong.exists() {
        let mut c = zcp();
        c.args(["keygen", "-o"]).arg(&wrong);
        assert!(run(c, 10).status.success());
    }
    let o = run(send_cmd(srv.port, &wrong, src, "no/", &["-q"]), 30);
    assert_eq!(o.status.code(), Some(3), "{}", both(&o));
}

/// The server's log lines that are not its listening line.
fn log_lines(srv: &ServerProc) -> Vec<String> {
    srv.log()
        .lines()
        .filter(|l| !l.contains("listening on"))
        .map(str::to_string)
        .collect()
}

#[test]
fn json_lines_parse_and_carry_the_sessions_fields() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--log-format", "json"]);
    let src = file(&env, "a.bin", 50_000);
    let o = run(send_cmd(srv.port, &env.key, &src, "x/", &["-q"]), 30);
    assert!(o.status.success(), "{}", both(&o));
    assert!(srv.wait_log("finished: 1 file", 10), "{}", srv.log());
    let lines = log_lines(&srv);
    assert!(lines.len() >= 3, "{lines:?}");
    let docs: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    for d in &docs {
        assert!(
            humantime::parse_rfc3339(d["timestamp"].as_str().unwrap()).is_ok(),
            "{d}"
        );
        assert_eq!(d["target"], "zcp::server", "{d}");
    }
    let stored = docs
        .iter()
        .find(|d| d["fields"]["path"] == "x/a.bin")
        .unwrap_or_else(|| panic!("no line for x/a.bin: {lines:?}"));
    let f = &stored["fields"];
    assert_eq!(stored["level"], "INFO");
    assert_eq!(f["identity"], "default");
    assert_eq!(f["export"], "root");
    assert_eq!(f["direction"], "push");
    assert_eq!(f["bytes"], 50_000);
    assert_eq!(f["session"].as_str().unwrap().len(), 32, "{f}");
    assert!(
        f["message"].as_str().unwrap().contains("stored x/a.bin"),
        "{f}"
    );
}

#[test]
fn log_level_warn_hides_sessions_and_shows_refusals() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--log-level", "warn"]);
    let src = file(&env, "a.bin", 10_000);
    let o = run(send_cmd(srv.port, &env.key, &src, "x/", &["-q"]), 30);
    assert!(o.status.success(), "{}", both(&o));
    refused_send(&srv, &env, &src);
    assert!(srv.wait_log("refused", 10), "{}", srv.log());
    let lines = log_lines(&srv);
    assert_eq!(lines.len(), 1, "{lines:?}");
    let mut words = lines[0].split_whitespace();
    let stamp = words.next().unwrap();
    assert!(humantime::parse_rfc3339(stamp).is_ok(), "{lines:?}");
    assert_eq!(words.next(), Some("WARN"), "{lines:?}");
    assert!(lines[0].contains("zcp: refused 127.0.0.1:"), "{lines:?}");
}

#[test]
fn journal_lines_have_priorities_and_no_timestamps() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--log-format", "journal"]);
    let src = file(&env, "a.bin", 10_000);
    let o = run(send_cmd(srv.port, &env.key, &src, "x/", &["-q"]), 30);
    assert!(o.status.success(), "{}", both(&o));
    refused_send(&srv, &env, &src);
    assert!(srv.wait_log("refused", 10), "{}", srv.log());
    let log = srv.log();
    assert!(log.contains("<6>zcp: listening on 127.0.0.1:"), "{log}");
    assert!(log.contains("<6>zcp: session "), "{log}");
    assert!(log.contains("<4>zcp: refused "), "{log}");
    for l in log.lines() {
        let p = l.strip_prefix('<').and_then(|r| r.split_once('>'));
        assert!(
            p.is_some_and(|(n, _)| n.parse::<u8>().is_ok_and(|n| n <= 7)),
            "{l}"
        );
        assert!(!l.contains("2026-") && !l.contains("Z INFO"), "{l}");
    }
}

/// `--log-format auto` (the default) writes journal lines when `$JOURNAL_STREAM` names
/// stderr's device and inode, and plain lines when it names something else.
#[test]
fn auto_follows_journal_stream() {
    let env = Env::new();
    let root = env.mkdir("root");
    for matching in [true, false] {
        let err_path = env.path(&format!("stderr-{matching}"));
        let err = std::fs::File::create(&err_path).unwrap();
        let m = err.metadata().unwrap();
        let ino = if matching { m.ino() } else { m.ino() + 1 };
        let mut c = zcp();
        c.args([
            "serve",
            "--bind",
            "127.0.0.1",
            "-p",
            "0",
            "--once",
            "--root",
        ])
        .arg(&root)
        .arg("--key-file")
        .arg(&env.key)
        .env("JOURNAL_STREAM", format!("{}:{ino}", m.dev()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(err);
        let mut child = c.spawn().unwrap();
        let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut first = String::new();
        std::io::BufRead::read_line(&mut out, &mut first).unwrap();
        let port: u16 = first
            .split("listening on 127.0.0.1:")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .and_then(|p| p.parse().ok())
            .unwrap_or_else(|| {
                let _ = child.kill();
                panic!("no port in {first:?}")
            });
        let src = file(&env, "a.bin", 1000);
        let o = run(
            send_cmd(port, &env.key, &src, &format!("{matching}/"), &["-q"]),
            30,
        );
        assert!(o.status.success(), "{}", both(&o));
        assert!(wait_deadline(&mut child, Duration::from_secs(10)).success());
        let log = std::fs::read_to_string(&err_path).unwrap();
        assert!(log.contains("zcp: session "), "{log}");
        let journal = log.lines().all(|l| l.starts_with("<6>"));
        assert_eq!(journal, matching, "{log}");
        assert_eq!(first.starts_with("<6>zcp: listening"), matching, "{first}");
    }
}

/// The transfer log's lines, parsed (every line must be JSON).
fn transfer_lines(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    assert!(text.is_empty() || text.ends_with('\n'), "{text}");
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

/// Waits until `path` holds `n` lines, up to `secs`.
fn wait_lines(path: &Path, n: usize, secs: u64) -> Vec<Value> {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        let v = transfer_lines(path);
        if v.len() >= n || Instant::now() > end {
            return v;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A tree of 6 files of 4 MiB, pushed then pulled under a 200 Mbit/s cap: every file is
/// announced at the start, but each is timed from when its bytes began to move, so each
/// file's `seconds` in the transfer log is about its own share of the session (1/6), and its
/// rate about the cap. They were timed from the announcement: in a pull the last file's
/// seconds were the whole session's, and the rates fell from the cap to a sixth of it.
#[test]
fn each_file_is_timed_from_its_first_byte_not_its_announcement() {
    let env = Env::new();
    let root = env.mkdir("root");
    let tl = env.path("transfers.jsonl");
    let tl_arg = tl.to_str().unwrap().to_string();
    let srv = ServerProc::start(&root, &env.key, &["--transfer-log", &tl_arg]);
    let dir = env.mkdir("t");
    for i in 0..6 {
        make_file(&dir.join(format!("f{i}")), 4 << 20, 1 << 20, i);
    }
    let cap = ["-q", "-r", "--limit-rate", "200M", "--chunk-size", "1M"];
    let o = run(send_cmd(srv.port, &env.key, &dir, "up/", &cap), 60);
    assert!(o.status.success(), "{}", both(&o));
    let mut get = zcp();
    get.args(["get", "-p", &srv.port.to_string(), "--key-file"])
        .arg(&env.key)
        .args(cap)
        .arg("127.0.0.1::up/t")
        .arg(env.path("down"));
    let o = run(get, 60);
    assert!(o.status.success(), "{}", both(&o));
    let lines = wait_lines(&tl, 14, 10);
    for direction in ["push", "pull"] {
        let of = |kind: &str| {
            (lines.iter())
                .filter(|l| l["type"] == kind && l["direction"] == direction)
                .collect::<Vec<_>>()
        };
        let (files, session) = (of("file"), of("session"));
        assert_eq!(
            (files.len(), session.len()),
            (6, 1),
            "{direction}: {lines:?}"
        );
        let whole = session[0]["seconds"].as_f64().unwrap();
        let longest = (files.iter())
            .map(|f| f["seconds"].as_f64().unwrap())
            .fold(0.0, f64::max);
        assert!(
            longest < whole / 2.0,
            "{direction}: a file took {longest} s of a {whole} s session: {files:?}"
        );
    }
}

#[test]
fn the_transfer_log_has_a_line_per_file_and_session_and_is_reopened_on_sighup() {
    let env = Env::new();
    let root = env.mkdir("root");
    let tl = env.path("transfers.jsonl");
    let tl_arg = tl.to_str().unwrap().to_string();
    let srv = ServerProc::start(&root, &env.key, &["--transfer-log", &tl_arg]);
    let dir = env.mkdir("run");
    for (name, size) in [("a", 1000u64), ("b", 70_000), ("c", 5)] {
        make_file(&dir.join(name), size, 1 << 20, size);
    }
    // A directory where c goes: that file fails, the others are committed.
    std::fs::create_dir_all(root.join("x/run/c")).unwrap();
    let o = run(send_cmd(srv.port, &env.key, &dir, "x/", &["-q", "-r"]), 30);
    assert_eq!(o.status.code(), Some(23), "{}", both(&o));
    let lines = wait_lines(&tl, 4, 10);
    assert_eq!(lines.len(), 4, "{lines:?}");
    let files: Vec<&Value> = lines.iter().filter(|l| l["type"] == "file").collect();
    assert_eq!(files.len(), 3, "{lines:?}");
    let session = &lines[3];
    assert_eq!(session["type"], "session", "{session}");
    assert_eq!(session["files"], 2);
    assert_eq!(session["bytes"], 71_000);
    assert_eq!(session["identity"], "default");
    assert_eq!(
        session["peer"].as_str().unwrap().split(':').next(),
        Some("127.0.0.1")
    );
    for f in &files {
        assert_eq!(f["session"], session["session"]);
        assert_eq!(f["export"], "root");
        assert_eq!(f["direction"], "push");
        let ok = f["path"] != "x/run/c";
        assert_eq!(f["outcome"], if ok { "ok" } else { "failed" }, "{f}");
        if ok {
            let name = f["path"].as_str().unwrap().strip_prefix("x/run/").unwrap();
            let on_disk = std::fs::metadata(root.join("x/run").join(name))
                .unwrap()
                .len();
            assert_eq!(f["bytes"], on_disk, "{f}");
            assert_eq!(f["digest"].as_str().unwrap().len(), 64, "{f}");
            assert!(f["engines"]["receiver"].is_string(), "{f}");
        } else {
            assert_eq!(f["code"], "bad-path", "{f}");
        }
    }
    // logrotate: the file is renamed, SIGHUP, and the next lines go to a new file.
    let rotated = env.path("transfers.jsonl.1");
    std::fs::rename(&tl, &rotated).unwrap();
    let o = Command::new("kill")
        .args(["-HUP", &srv.pid().to_string()])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(srv.wait_log("configuration reloaded", 10), "{}", srv.log());
    let one = file(&env, "one.bin", 300_000);
    let (o, doc) = send_json(srv.port, &env.key, &one, "y/", &[], 30);
    assert!(o.status.success(), "{}", both(&o));
    let lines = wait_lines(&tl, 2, 10);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0]["path"], "y/one.bin");
    assert_eq!(lines[0]["bytes"], 300_000);
    assert_eq!(lines[0]["digest"], doc["end"]["digest"], "{doc}");
    assert!(doc["end"]["digest"].is_string(), "{doc}");
    assert_eq!(lines[1]["type"], "session");
    assert_eq!(transfer_lines(&rotated).len(), 4);
    let mode = std::fs::metadata(&tl).unwrap().mode() & 0o777;
    assert_eq!(mode & !0o640, 0, "{mode:o}");
}

#[test]
fn bad_log_values_exit_2_naming_the_flag_or_key() {
    let env = Env::new();
    let root = env.mkdir("root");
    let serve = |extra: &[&str]| {
        let mut c = zcp();
        c.args(["serve", "--bind", "127.0.0.1", "-p", "0", "--root"])
            .arg(&root)
            .arg("--key-file")
            .arg(&env.key)
            .args(extra);
        run(c, 10)
    };
    let o = serve(&["--log-level", "loud"]);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(text(&o.stderr).contains("--log-level"), "{}", both(&o));
    let o = serve(&["--log-format", "xml"]);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(text(&o.stderr).contains("--log-format"), "{}", both(&o));
    let missing = env.path("no/such/dir/t.jsonl");
    let o = serve(&["--transfer-log", missing.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(text(&o.stderr).contains("--transfer-log"), "{}", both(&o));
    assert!(!missing.exists());

    let key = env.key.display();
    let base = format!(
        "listen = [\"127.0.0.1:0\"]\n[export.in]\npath = \"{}\"\n[identity.a]\nkey_file = \"{key}\"\naccess = {{ in = \"write\" }}\n",
        root.display()
    );
    let config = env.path("zcp.toml");
    for (line, key) in [
        ("log_level = \"loud\"", "log_level"),
        ("log_format = 7", "log_format"),
        (
            &*format!("transfer_log = \"{}\"", missing.display()),
            "transfer_log",
        ),
    ] {
        std::fs::write(&config, format!("{line}\n{base}")).unwrap();
        let mut c = zcp();
        c.arg("serve").arg("--config").arg(&config);
        let o = run(c, 10);
        assert_eq!(o.status.code(), Some(2), "{line}: {}", both(&o));
        assert!(text(&o.stderr).contains(key), "{line}: {}", both(&o));
    }
}

#[test]
fn log_level_error_hides_warnings_and_shows_a_failed_reload() {
    let env = Env::new();
    let root = env.mkdir("root");
    let key = env.path("server.key");
    std::fs::copy(&env.key, &key).unwrap();
    let srv = ServerProc::start(&root, &key, &["--log-level", "error"]);
    let src = file(&env, "a.bin", 10_000);
    refused_send(&srv, &env, &src);
    // The key file broken: the reload fails, an error.
    std::fs::write(&key, "not a key\n").unwrap();
    let o = Command::new("kill")
        .args(["-HUP", &srv.pid().to_string()])
        .output()
        .unwrap();
    assert!(o.status.success());
    assert!(srv.wait_log("reload failed", 10), "{}", srv.log());
    let lines = log_lines(&srv);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(lines[0].contains(" ERROR "), "{lines:?}");
    assert!(!srv.log().contains("refused"), "{}", srv.log());
}

#[test]
fn a_fifo_transfer_log_is_refused_at_once_not_waited_on() {
    let env = Env::new();
    let root = env.mkdir("root");
    let fifo = env.path("t.fifo");
    mkfifo(&fifo);
    let t0 = Instant::now();
    let mut c = zcp();
    c.args(["serve", "--bind", "127.0.0.1", "-p", "0", "--root"])
        .arg(&root)
        .arg("--key-file")
        .arg(&env.key)
        .arg("--transfer-log")
        .arg(&fifo);
    let o = run(c, 10);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let err = text(&o.stderr);
    assert!(
        err.contains("--transfer-log") && err.contains("FIFO"),
        "{err}"
    );
    assert!(!text(&o.stdout).contains("listening"), "{}", both(&o));
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

#[test]
fn check_config_tries_the_transfer_log_without_creating_it() {
    let env = Env::new();
    let root = env.mkdir("root");
    let fifo = env.path("t.fifo");
    mkfifo(&fifo);
    let config = env.path("zcp.toml");
    let check = |tl: &Path| {
        std::fs::write(
            &config,
            format!(
                "transfer_log = \"{}\"\nlisten = [\"127.0.0.1:0\"]\n[export.in]\npath = \"{}\"\n\
                 [identity.a]\nkey_file = \"{}\"\naccess = {{ in = \"write\" }}\n",
                tl.display(),
                root.display(),
                env.key.display()
            ),
        )
        .unwrap();
        let mut c = zcp();
        c.args(["serve", "--check-config", "--config"]).arg(&config);
        run(c, 10)
    };
    let fresh = env.path("logs/t.jsonl");
    std::fs::create_dir(env.path("logs")).unwrap();
    let o = check(&fresh);
    assert!(o.status.success(), "{}", both(&o));
    assert!(text(&o.stdout).contains("configuration OK"), "{}", both(&o));
    assert!(!fresh.exists(), "--check-config created the transfer log");
    for bad in [
        env.path("no/such/dir/t.jsonl"),
        fifo.clone(),
        env.path("logs"),
    ] {
        let o = check(&bad);
        assert_eq!(o.status.code(), Some(2), "{}: {}", bad.display(), both(&o));
        assert!(text(&o.stderr).contains("transfer_log"), "{}", both(&o));
        assert!(
            !text(&o.stdout).contains("configuration OK"),
            "{}",
            both(&o)
        );
    }
    assert!(!env.path("no").exists());
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
}
