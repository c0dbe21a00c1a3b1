//! `zcp serve --config`: the file and its checks, flags over it, exports in remote paths,
//! named identities and their per-export permissions, SIGHUP reload.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::util::*;

/// Two exports and two identities: `observatory` may write `incoming` and read `archive`;
/// `lab` may read and write `archive` and has no access to `incoming`.
pub struct Site {
    pub env: Env,
    pub incoming: PathBuf,
    pub archive: PathBuf,
    pub observatory: PathBuf,
    pub lab: PathBuf,
    pub config: PathBuf,
}

pub fn keygen(path: &Path) {
    let mut c = zcp();
    c.args(["keygen", "-o"]).arg(path);
    let o = run(c, 10);
    assert!(o.status.success(), "keygen: {}", both(&o));
}

impl Site {
    pub fn new() -> Site {
        let env = Env::new();
        let (incoming, archive) = (env.mkdir("srv/incoming"), env.mkdir("srv/archive"));
        let (observatory, lab) = (env.path("observatory.key"), env.path("lab.key"));
        keygen(&observatory);
        keygen(&lab);
        let config = env.path("zcp.toml");
        let site = Site {
            env,
            incoming,
            archive,
            observatory,
            lab,
            config,
        };
        site.write(&site.text(true));
        site
    }

    /// The config file's text; `lab` is listed only when asked for.
    pub fn text(&self, with_lab: bool) -> String {
        let mut t = format!(
            "listen = [\"127.0.0.1:0\"]\nmax_streams = 8\n\n[export.incoming]\npath = \"{}\"\n\n[export.archive]\npath = \"{}\"\n\n[identity.observatory]\nkey_file = \"{}\"\naccess = {{ incoming = \"write\", archive = \"read\" }}\n",
            self.incoming.display(),
            self.archive.display(),
            self.observatory.display()
        );
        if with_lab {
            t.push_str(&format!(
                "\n[identity.lab]\nkey_file = \"{}\"\naccess = {{ archive = \"read-write\" }}\n",
                self.lab.display()
            ));
        }
        t
    }

    pub fn write(&self, text: &str) {
        std::fs::write(&self.config, text).unwrap();
    }

    pub fn serve(&self) -> ServerProc {
        ServerProc::with_config(&self.config, &self.env.path("srv"), &[])
    }

    pub fn file(&self, name: &str, size: u64) -> PathBuf {
        let p = self.env.path(name);
        make_file(&p, size, 1 << 20, size ^ 7);
        p
    }
}

fn check_config(config: &Path, extra: &[&str]) -> std::process::Output {
    let mut c = zcp();
    c.args(["serve", "--check-config", "--config"])
        .arg(config)
        .args(extra);
    run(c, 10)
}

pub fn get_cmd(port: u16, key: &Path, path: &str, dest: &Path) -> std::process::Command {
    let mut c = zcp();
    c.args(["get", "-q", "-p", &port.to_string(), "--key-file"])
        .arg(key)
        .arg(format!("127.0.0.1::{path}"))
        .arg(dest);
    c
}

#[test]
fn check_config_summarizes_and_flags_override_the_file() {
    let site = Site::new();
    let o = check_config(&site.config, &[]);
    let out = text(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    for needle in [
        "export incoming: ",
        "export archive: ",
        "identity observatory",
        "archive read, incoming write",
        "identity lab",
        "archive read-write",
        "listen: 127.0.0.1:0",
        "limits: 8 streams per session, 16 sessions, idle timeout 60 s",
        "configuration OK",
    ] {
        assert!(out.contains(needle), "{needle:?} in {out}");
    }
    // Never a key's bytes.
    for key in [&site.observatory, &site.lab] {
        let k = std::fs::read_to_string(key).unwrap();
        let secret = k.lines().find(|l| !l.starts_with('#')).unwrap().trim();
        assert!(!out.contains(secret), "key material in {out}");
    }
    // The command line over the file.
    let o = check_config(
        &site.config,
        &["--max-streams", "2", "--bind", "127.0.0.2", "-p", "6000"],
    );
    let out = text(&o.stdout);
    assert!(out.contains("limits: 2 streams per session"), "{out}");
    assert!(out.contains("listen: 127.0.0.2:6000"), "{out}");
    // `-p` alone keeps the file's address (127.0.0.1): it never widens the listener.
    let o = check_config(&site.config, &["-p", "6001"]);
    let out = text(&o.stdout);
    assert!(out.contains("listen: 127.0.0.1:6001\n"), "{out}");
    // The file's limit holds for a running server: a client asking for more gets 8.
    let srv = site.serve();
    let src = site.file("big.bin", 1 << 20);
    let (o, v) = send_json(
        srv.port,
        &site.observatory,
        &src,
        "incoming/",
        &["-P", "12"],
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(v["start"]["streams"], 8, "{v}");
    assert!(same_file(&src, &site.incoming.join("big.bin")));
}

#[test]
fn a_bad_config_exits_2_naming_the_key_and_the_line() {
    let site = Site::new();
    let good = site.text(true);
    let cases = [
        // The monitor's address must be an address and port.
        (
            good.replace("max_streams = 8", "metrics = \"localhost\""),
            "metrics",
            2,
        ),
        (
            good.replace(&site.archive.display().to_string(), "srv/archive"),
            "export.archive.path",
            8,
        ),
        (
            good.replace("archive = \"read\"", "archive = \"admin\""),
            "identity.observatory.access.archive",
            12,
        ),
        (
            good.replace("archive = \"read-write\"", "attic = \"read-write\""),
            "identity.lab.access.attic",
            16,
        ),
        (
            good.replace(
                &site.lab.display().to_string(),
                &site.observatory.display().to_string(),
            ),
            "same key",
            11,
        ),
    ];
    for (text_, key, line) in cases {
        site.write(&text_);
        for o in [check_config(&site.config, &[]), {
            // Not only the check: serve itself refuses to start.
            let mut c = zcp();
            c.args(["serve", "--config"]).arg(&site.config);
            run(c, 10)
        }] {
            let err = text(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{key}: {}", both(&o));
            assert!(err.contains(key), "{key} in {err}");
            assert!(err.contains(&format!("line {line}")), "line {line}: {err}");
        }
    }
    // A key file others can read is refused as zcp keygen's rules say.
    site.write(&good);
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&site.lab, std::fs::Permissions::from_mode(0o644)).unwrap();
    let o = check_config(&site.config, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(text(&o.stderr).contains("chmod 600"), "{}", both(&o));
}

#[test]
fn each_identity_may_do_only_what_it_was_granted() {
    let site = Site::new();
    let srv = site.serve();
    std::fs::write(site.archive.join("old.txt"), b"archived\n").unwrap();
    let src = site.file("f.bin", 300_000);
    let send = |key: &Path, dest: &str| run(send_cmd(srv.port, key, &src, dest, &["-q"]), 30);

    // observatory writes incoming, beneath the export's root.
    let o = send(&site.observatory, "incoming/run42/");
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &site.incoming.join("run42/f.bin")));
    assert!(srv.wait_log("identity observatory, export incoming", 5));

    // ...but may not write archive, nor read incoming.
    let o = send(&site.observatory, "archive/");
    assert_eq!(o.status.code(), Some(3), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("zcp: observatory may not write to archive\n"),
        "{}",
        both(&o)
    );
    let got = site.env.path("got");
    let o = run(
        get_cmd(srv.port, &site.observatory, "incoming/run42/f.bin", &got),
        30,
    );
    assert_ne!(o.status.code(), Some(0));
    assert_eq!(o.status.code(), Some(3), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("zcp: observatory may not read from incoming\n"),
        "{}",
        both(&o)
    );
    assert!(!got.exists());
    // It reads archive.
    let o = run(
        get_cmd(srv.port, &site.observatory, "archive/old.txt", &got),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(std::fs::read(&got).unwrap(), b"archived\n");

    // To lab, incoming does not exist: the same answer as an export that is not there.
    let o1 = send(&site.lab, "incoming/x/");
    let o2 = send(&site.lab, "nothing/x/");
    assert_eq!(o1.status.code(), o2.status.code());
    assert_ne!(o1.status.code(), Some(0));
    assert!(text(&o1.stderr).contains("no export 'incoming' on this server"));
    assert_eq!(
        text(&o1.stderr).replace("incoming", "X"),
        text(&o2.stderr).replace("nothing", "X")
    );
    // A path without an export is refused on the client, naming what to give.
    let o = send(&site.lab, ".");
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(text(&o.stderr).contains("HOST:EXPORT/PATH"), "{}", both(&o));
    // lab writes archive, and only there.
    let o = send(&site.lab, "archive/lab/");
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &site.archive.join("lab/f.bin")));
    assert_eq!(tree(&site.incoming), vec!["run42", "run42/f.bin"]);
    assert!(!site.incoming.join("lab").exists());
}

#[test]
fn a_write_only_identity_learns_nothing_of_what_is_there() {
    let site = Site::new();
    let srv = site.serve();
    let src = site.file("f.bin", 3 << 20);
    // A read-write identity sending the same file again sends nothing: the target is
    // hashed and offered (the "existing target" check).
    let (o, v) = send_json(srv.port, &site.lab, &src, "archive/", &[], 30);
    assert!(o.status.success(), "{}", both(&o));
    let (o, v2) = send_json(srv.port, &site.lab, &src, "archive/", &[], 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(v["end"]["resume"]["bytes_skipped"], 0, "{v}");
    assert_eq!(v2["end"]["resume"]["bytes_skipped"], 3 << 20, "{v2}");
    // Its rate is of bytes moved: none (it reported tens of Gbit/s for nothing sent).
    assert_eq!(v2["end"]["sum"]["bytes"], 3 << 20, "{v2}");
    assert_eq!(v2["end"]["sum"]["bytes_moved"], 0, "{v2}");
    assert_eq!(v2["end"]["sum"]["bits_per_second"], 0.0, "{v2}");
    let o = run(send_cmd(srv.port, &site.lab, &src, "archive/", &[]), 30);
    assert!(o.status.success(), "{}", both(&o));
    let out = text(&o.stdout);
    let stored = out
        .lines()
        .find(|l| l.contains("stored durably"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        stored.contains(" 0 Bytes ")
            && stored.contains("0.00 bits/sec")
            && stored.contains("(and 3.00 MBytes resumed, not sent)"),
        "{stored}"
    );
    // A write-only one is offered nothing of a file already there: it goes whole, every time.
    for _ in 0..2 {
        let (o, v) = send_json(srv.port, &site.observatory, &src, "incoming/", &[], 30);
        assert!(o.status.success(), "{}", both(&o));
        assert_eq!(v["end"]["resume"]["bytes_skipped"], 0, "{v}");
        assert!(same_file(&src, &site.incoming.join("f.bin")));
    }
    // Nor may it list or stat: a pull of a directory, or of a file, is refused before
    // anything is looked at, the same for what is there and what is not.
    let got = site.env.path("got");
    let mut errs = Vec::new();
    for path in ["incoming/f.bin", "incoming/missing.bin", "incoming/."] {
        let mut c = get_cmd(srv.port, &site.observatory, path, &got);
        c.arg("-r");
        let o = run(c, 30);
        assert_eq!(o.status.code(), Some(3), "{path}: {}", both(&o));
        errs.push(text(&o.stderr));
    }
    assert!(errs.iter().all(|e| e == &errs[0]), "{errs:?}");
    assert!(!got.exists());
    // What is in the way of a write is not named either: a directory, a symlink and a FIFO
    // are refused in the same words.
    std::fs::create_dir(site.incoming.join("d")).unwrap();
    std::os::unix::fs::symlink("f.bin", site.incoming.join("l")).unwrap();
    mkfifo(&site.incoming.join("p"));
    let mut why = Vec::new();
    for name in ["d", "l", "p"] {
        let src = site.file(name, 4096);
        let (o, v) = send_json(srv.port, &site.observatory, &src, "incoming/", &[], 30);
        assert!(!o.status.success(), "{name}: {}", both(&o));
        let m = v["end"]["files"]["failures"][0]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(m.contains("is in the way"), "{name}: {v}");
        why.push(m.replace(&format!("'{name}'"), "'NAME'"));
    }
    assert!(why.iter().all(|w| w == &why[0]), "{why:?}");
    assert!(site.incoming.join("d").is_dir());
    assert!(site.incoming.join("l").is_symlink());
}

/// A write-only identity's push cut midway resumes: the same command sends only what was not
/// durable yet. SAFE: it resumes the part files of its own sessions only: a part file left at
/// the same name by another identity (here `lab`, also write-only there) is emptied and the
/// file sent whole, and neither the offer nor the summary tells it what was there.
#[test]
fn a_write_only_identity_resumes_its_own_part_files_only() {
    let site = Site::new();
    let mut t = site.text(false);
    t.push_str(&format!(
        "\n[identity.lab]\nkey_file = \"{}\"\naccess = {{ incoming = \"write\" }}\n",
        site.lab.display()
    ));
    site.write(&t);
    let srv = site.serve();
    let src = site.file("big.bin", 64 << 20);
    let target = site.incoming.join("big.bin");
    let slow = ["-i", "0", "--chunk-size", "1M", "--limit-rate", "160M"];
    let part = site.incoming.join(format!(
        ".zcp-{}.journal",
        zcp_engine::fs::part_key(b"big.bin")
    ));
    let journal = || {
        let j = std::fs::read(&part).ok()?;
        zcp_wire::journal::decode_journal(&j).ok()
    };
    // Cuts a push by `key` once a chunk of its own session is durable (the journal's last
    // session is a new one, with a chunk).
    let cut = |key: &Path| {
        let before = journal().and_then(|j| j.sessions.last().copied());
        let child = spawn_send(srv.port, key, &src, "incoming/", &slow);
        let end = std::time::Instant::now() + Duration::from_secs(30);
        let own = || {
            journal().is_some_and(|j| {
                let last = j.sessions.len().wrapping_sub(1) as u16;
                j.sessions.last().copied() != before && j.chunks.iter().any(|c| c.session == last)
            })
        };
        while !own() {
            assert!(std::time::Instant::now() < end, "no chunk became durable");
            std::thread::sleep(Duration::from_millis(2));
        }
        signal(child.id(), libc::SIGINT);
        let o = wait_output(child, 30);
        assert_eq!(o.status.code(), Some(130), "{}", both(&o));
        assert!(!target.exists());
        let held = journaled(&target);
        assert!(held > 0 && held < 64 << 20, "{held}");
        (o, held)
    };
    // The same command (without the cap) completes, sending only what was not held.
    let resumed = |held: u64| {
        let args = ["--chunk-size", "1M"];
        let (o, v) = send_json(srv.port, &site.observatory, &src, "incoming/", &args, 60);
        assert!(o.status.success(), "{}", both(&o));
        let skipped = v["end"]["resume"]["bytes_skipped"].as_u64().unwrap();
        assert!(skipped >= held, "{held} held: {v}");
        assert!(same_file(&src, &target));
    };
    // Its own part file: resumed.
    let (o, held) = cut(&site.observatory);
    let err = text(&o.stderr);
    assert!(
        err.contains("run the same command again to resume"),
        "{err}"
    );
    resumed(held);
    // Another identity's part file at the same name: not resumed but emptied, so the journal
    // of the next cut names one session, the observatory's own (resumed, it would name lab's
    // first); and that one resumes.
    std::fs::remove_file(&target).unwrap();
    cut(&site.lab);
    let (_, held) = cut(&site.observatory);
    let sessions = journal().unwrap().sessions;
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    resumed(held);
    assert_eq!(journaled(&target), 0);
}

/// Waits for `child` up to `secs`; its output.
fn finish(child: std::process::Child, secs: u64) -> std::process::Output {
    wait_output(child, secs)
}

#[test]
fn sighup_reloads_identities_without_dropping_a_running_session() {
    let site = Site::new();
    site.write(&site.text(false));
    let srv = site.serve();
    let small = site.file("small.bin", 10_000);
    let o = run(
        send_cmd(srv.port, &site.lab, &small, "archive/", &["-q"]),
        30,
    );
    assert_eq!(o.status.code(), Some(3), "lab is unknown: {}", both(&o));

    // A session that runs across the reload: ~2 s at 2 Mbit/s.
    let big = site.file("big.bin", 500_000);
    let running = send_cmd(
        srv.port,
        &site.observatory,
        &big,
        "incoming/",
        &["-q", "--limit-rate", "2M"],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::piped())
    .spawn()
    .unwrap();
    assert!(srv.wait_log("identity observatory, export incoming", 10));

    // The new file drops observatory's access to incoming and adds lab.
    let reloaded = site.text(true).replace("incoming = \"write\", ", "");
    site.write(&reloaded);
    hangup(&srv);
    assert!(srv.wait_log("configuration reloaded", 10), "{}", srv.log());
    let o = run(
        send_cmd(srv.port, &site.lab, &small, "archive/", &["-q"]),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&small, &site.archive.join("small.bin")));
    // The running session keeps what it started with, and completes.
    let o = finish(running, 30);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&big, &site.incoming.join("big.bin")));
    // A new one uses the new file: observatory no longer sees incoming.
    let o = run(
        send_cmd(srv.port, &site.observatory, &small, "incoming/", &["-q"]),
        30,
    );
    assert!(
        text(&o.stderr).contains("no export 'incoming'"),
        "{}",
        both(&o)
    );

    // A broken file on reload is logged, and the previous configuration stays.
    site.write(&format!("{reloaded}\nbogus = 1\n"));
    hangup(&srv);
    assert!(
        srv.wait_log(
            "reload failed, the previous configuration stays in force",
            10
        ),
        "{}",
        srv.log()
    );
    assert!(srv.log().contains("bogus"), "{}", srv.log());
    let o = run(
        send_cmd(srv.port, &site.lab, &small, "archive/again/", &["-q"]),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&small, &site.archive.join("again/small.bin")));
}

fn hangup(srv: &ServerProc) {
    // kill(1) by pid: the server this test started.
    let o = std::process::Command::new("kill")
        .args(["-HUP", &srv.pid().to_string()])
        .output()
        .unwrap();
    assert!(o.status.success());
    std::thread::sleep(Duration::from_millis(100));
}

#[test]
fn the_root_shorthand_is_one_export_and_reloads_its_key() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    assert!(srv.wait_log(&format!("root {}", root.display()), 5));
    let src = env.path("a.bin");
    make_file(&src, 100_000, 1 << 20, 3);
    let o = run(send_cmd(srv.port, &env.key, &src, "sub/", &["-q"]), 30);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &root.join("sub/a.bin")));
    assert!(srv.wait_log("identity default, export root", 5));
    // A new key in the same file, SIGHUP: the old key no longer opens a session.
    let old = env.path("old.key");
    std::fs::copy(&env.key, &old).unwrap();
    std::fs::remove_file(&env.key).unwrap();
    keygen(&env.key);
    hangup(&srv);
    assert!(srv.wait_log("configuration reloaded", 10), "{}", srv.log());
    let o = run(send_cmd(srv.port, &old, &src, "x/", &["-q"]), 30);
    assert_eq!(o.status.code(), Some(3), "{}", both(&o));
    let o = run(send_cmd(srv.port, &env.key, &src, "x/", &["-q"]), 30);
    assert!(o.status.success(), "{}", both(&o));
}
