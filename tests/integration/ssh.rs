//! Over ssh (`[USER@]HOST:PATH`): a real OpenSSH `sshd` on loopback with throwaway host and
//! user keys (root only, as sshd needs; skipped with a printed reason elsewhere), the client's
//! ssh pointed at it with `-e`, and zcp started there by path (`--remote-zcp`). Stand-ins
//! for ssh (`-e 'sh -c ...'`) play a far side that lies.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;

/// An sshd of its own on a free loopback port; stopped when dropped.
struct Sshd {
    child: Child,
    port: u16,
    /// The user's private key, which sshd's authorized_keys lets in.
    key: PathBuf,
    /// The zcp the far side runs (`--remote-zcp`): a link of this sshd's own to the zcp under
    /// test, so its far sides are told from other tests' running at the same time.
    remote: String,
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sshd {
    /// Starts sshd in `dir` on loopback, or says why it cannot (and skips).
    fn start(dir: &Path) -> Option<Sshd> {
        Sshd::start_at(dir, None, "127.0.0.1")
    }

    /// Starts sshd in `dir`, listening on `addr` inside network namespace `ns` (or here).
    fn start_at(dir: &Path, ns: Option<&str>, addr: &str) -> Option<Sshd> {
        if !is_root() {
            skip("sshd needs root (it logs in as root here)");
            return None;
        }
        let sshd = Path::new("/usr/sbin/sshd");
        if !sshd.exists() || !has("ssh-keygen") || !has("ssh") {
            skip("needs OpenSSH's sshd, ssh and ssh-keygen (apt-get install openssh-server)");
            return None;
        }
        // Privilege separation needs its empty directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let keygen = |path: &Path| {
            let o = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", "", "-f"])
                .arg(path)
                .output()
                .unwrap();
            assert!(o.status.success(), "ssh-keygen: {}", both(&o));
        };
        let (host_key, key) = (dir.join("host_key"), dir.join("id"));
        keygen(&host_key);
        keygen(&key);
        std::fs::copy(dir.join("id.pub"), dir.join("authorized_keys")).unwrap();
        let port = free_port();
        let config = dir.join("sshd_config");
        std::fs::write(
            &config,
            format!(
                "Port {port}\nListenAddress {addr}\nHostKey {}\nPidFile {}\n\
                 AuthorizedKeysFile {}\nPermitRootLogin prohibit-password\n\
                 PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
                 StrictModes no\nPrintMotd no\n",
                host_key.display(),
                dir.join("sshd.pid").display(),
                dir.join("authorized_keys").display()
            ),
        )
        .unwrap();
        let mut c = match ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(sshd);
                c
            }
            None => Command::new(sshd),
        };
        let remote = dir.join("zcp");
        std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_zcp"), &remote).unwrap();
        let remote = remote.display().to_string();
        let child = c
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let s = Sshd {
            child,
            port,
            key,
            remote,
        };
        let until = Instant::now() + Duration::from_secs(10);
        while !listens(ns, port) {
            assert!(Instant::now() < until, "sshd did not listen on {port}");
            std::thread::sleep(Duration::from_millis(50));
        }
        Some(s)
    }

    /// `-e` for this sshd: its port, the user's key, no known-hosts file, no prompts.
    fn ssh_command(&self) -> String {
        format!(
            "ssh -F /dev/null -p {} -i {} -o StrictHostKeyChecking=no \
             -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR",
            self.port,
            self.key.display()
        )
    }
}

/// Whether something listens on TCP `port` (on loopback here, or anywhere in namespace `ns`).
fn listens(ns: Option<&str>, port: u16) -> bool {
    match ns {
        None => std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
        Some(ns) => Command::new("ip")
            .args(["netns", "exec", ns, "ss", "-Hltn"])
            .arg(format!("sport = :{port}"))
            .output()
            .is_ok_and(|o| !o.stdout.is_empty()),
    }
}

/// Whether `tool` is on the PATH.
fn has(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// `zcp ARGS` reaching 127.0.0.1 through `sshd`.
fn over_ssh<S: AsRef<std::ffi::OsStr>>(sshd: &Sshd, command: &str, args: &[S]) -> Command {
    let mut c = zcp();
    c.arg(command)
        .args(["-e", &sshd.ssh_command(), "--remote-zcp", &sshd.remote])
        .args(args);
    c
}

/// Far sides still running that run `remote` (none once a transfer ended).
fn far_sides(remote: &str) -> usize {
    let o = Command::new("pgrep")
        .args(["-f", &format!("{remote} far-side")])
        .output()
        .unwrap();
    text(&o.stdout).lines().count()
}

/// No far side running `remote` left, within a few seconds (ssh and sshd tear down after
/// the client).
fn no_far_side_left(remote: &str) {
    let until = Instant::now() + Duration::from_secs(10);
    while far_sides(remote) > 0 {
        assert!(Instant::now() < until, "a far side is still running");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn files_and_trees_go_both_ways_over_ssh_and_nothing_stays_running() {
    let env = Env::new();
    let Some(sshd) = Sshd::start(env.dir.path()) else {
        return;
    };
    let there = env.mkdir("there");
    let src = env.path("big.bin");
    make_dense(&src, 5 << 20, 1);
    for i in 0..5 {
        let f = env.path(&format!("tree/d{}/f{i}", i % 2));
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        make_dense(&f, 70_000 * i, i);
    }
    let target = |p: &str| format!("127.0.0.1:{}/{p}", there.display());
    let path = |p: PathBuf| p.display().to_string();

    let args = ["-P".into(), "2".into(), path(src.clone()), target("in/")];
    let o = run(over_ssh(&sshd, "send", &args), 60);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &there.join("in/big.bin")));
    let args = [
        "-r".into(),
        "-J".into(),
        path(env.path("tree")),
        target("in/"),
    ];
    let o = run(over_ssh(&sshd, "send", &args), 60);
    assert!(o.status.success(), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["end"]["files"]["committed"], 5, "{v}");
    // Over ssh a session is encrypted unless asked not to be.
    assert_eq!(v["end"]["encryption"]["cipher"], "AES-256-GCM", "{v}");
    for i in 0..5 {
        let rel = format!("tree/d{}/f{i}", i % 2);
        assert!(
            same_file(&env.path(&rel), &there.join("in").join(&rel)),
            "{rel}"
        );
    }

    // Mirroring, over UDP (encrypted, as over ssh by default): what the source no longer
    // has goes there too.
    std::fs::remove_file(env.path("tree/d0/f2")).unwrap();
    let args = [
        "-r".into(),
        "--delete".into(),
        "--transport".into(),
        "udp".into(),
        path(env.path("tree")),
        target("in/"),
    ];
    let o = run(over_ssh(&sshd, "send", &args), 60);
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        both(&o).contains("encrypted with AES-256-GCM"),
        "{}",
        both(&o)
    );
    assert!(!both(&o).contains("unencrypted"), "{}", both(&o));
    assert!(!there.join("in/tree/d0/f2").exists(), "{}", both(&o));
    assert!(there.join("in/tree/d0/f4").exists());
    // An absolute path through a symlinked directory (`/scratch` -> `/gpfs/scratch`) is
    // followed, as scp follows it: the far side runs as the user.
    std::os::unix::fs::symlink(&there, env.path("scratch")).unwrap();
    let via_link = format!("127.0.0.1:{}/in/linked.bin", env.path("scratch").display());
    let o = run(over_ssh(&sshd, "send", &[path(src.clone()), via_link]), 60);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &there.join("in/linked.bin")));
    let back = env.path("back");
    let args = [
        "-r".into(),
        "-P".into(),
        "3".into(),
        target("in/big.bin"),
        target("in/tree"),
        path(back.clone()),
    ];
    let o = run(over_ssh(&sshd, "get", &args), 60);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &back.join("big.bin")));
    assert!(same_file(&env.path("tree/d1/f3"), &back.join("tree/d1/f3")));
    assert!(!back.join("tree/d0/f2").exists());
    no_far_side_left(&sshd.remote);
}

/// `zcp ls` over ssh lists where scp would look: an absolute path, one beneath the login
/// directory and the login directory itself (`HOST:`); short, long, recursive and JSON; a
/// missing path is named with exit 1 and the present one still listed (exit 23); zcp there,
/// started for the listing, is gone afterwards.
#[test]
fn ls_over_ssh_lists_absolute_and_home_paths() {
    let env = Env::new();
    let Some(sshd) = Sshd::start(env.dir.path()) else {
        return;
    };
    let there = env.mkdir("there");
    std::fs::create_dir_all(there.join("run/sub")).unwrap();
    std::fs::write(there.join("run/b.h5"), b"hello").unwrap();
    std::fs::write(there.join("run/a.txt"), b"x").unwrap();
    std::fs::write(there.join("run/sub/c.h5"), b"yy").unwrap();
    let abs = |p: &str| format!("127.0.0.1:{}/{p}", there.display());
    let ls = |args: &[String]| run(over_ssh(&sshd, "ls", args), 60);
    let o = ls(&[abs("run")]);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(text(&o.stdout), "a.txt\nb.h5\nsub/\n", "{}", both(&o));
    let o = ls(&["-r".into(), abs("run")]);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(
        text(&o.stdout),
        "a.txt\nb.h5\nsub/\nsub/c.h5\n",
        "{}",
        both(&o)
    );
    let o = ls(&["-l".into(), abs("run/b.h5")]);
    assert!(o.status.success(), "{}", both(&o));
    let out = text(&o.stdout);
    let tail = format!(" {}/run/b.h5\n", there.display());
    assert!(
        out.starts_with("-rw") && out.ends_with(&tail),
        "{}",
        both(&o)
    );
    assert!(out.contains(" 5 "), "{out}");
    // JSON, and one path missing: named, the other listed, exit 23.
    let o = ls(&["-J".into(), abs("run/sub"), abs("gone")]);
    assert_eq!(o.status.code(), Some(23), "{}", both(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let paths: Vec<&str> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, [".", "c.h5"], "{v}");
    assert!(
        v["failures"][0]["path"]
            .as_str()
            .unwrap()
            .ends_with("/gone"),
        "{v}"
    );
    let o = ls(&[abs("gone")]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("gone: no such file or directory"),
        "{}",
        both(&o)
    );
    // Encrypted unless asked not to; in clear, said so.
    assert!(!both(&o).contains("--no-encrypt"), "{}", both(&o));
    let o = ls(&["--no-encrypt".into(), abs("run/")]);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(text(&o.stdout), "a.txt\nb.h5\nsub/\n", "{}", both(&o));
    assert!(text(&o.stderr).contains("--no-encrypt"), "{}", both(&o));
    // Beneath the login directory, and the login directory itself.
    let home = PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()));
    let name = format!("zcp-ssh-ls-{}", std::process::id());
    std::fs::create_dir_all(home.join(&name)).unwrap();
    std::fs::write(home.join(&name).join("x.bin"), b"x").unwrap();
    let rel = ls(&[format!("127.0.0.1:{name}")]);
    let tilde = ls(&[format!("127.0.0.1:~/{name}/")]);
    let login = ls(&["127.0.0.1:".into()]);
    let _ = std::fs::remove_dir_all(home.join(&name));
    for o in [&rel, &tilde] {
        assert!(o.status.success(), "{}", both(o));
        assert_eq!(text(&o.stdout), "x.bin\n", "{}", both(o));
    }
    assert!(login.status.success(), "{}", both(&login));
    assert!(
        text(&login.stdout).lines().any(|l| l == format!("{name}/")),
        "{}",
        both(&login)
    );
    no_far_side_left(&sshd.remote);
}

#[test]
fn login_noise_is_skipped_and_a_relative_path_starts_at_the_home_directory() {
    let env = Env::new();
    let Some(sshd) = Sshd::start(env.dir.path()) else {
        return;
    };
    let src = env.path("f.bin");
    make_dense(&src, 300_000, 2);
    // What a login script might print before zcp's first line.
    let noisy = format!(
        "echo 'Welcome to the cluster'; echo; printf 'motd\\n'; {}",
        sshd.remote
    );
    let home = PathBuf::from(std::env::var("HOME").unwrap_or_else(|_| "/root".into()));
    let name = format!("zcp-ssh-test-{}", std::process::id());
    let mut c = zcp();
    c.args(["send", "-e", &sshd.ssh_command(), "--remote-zcp", &noisy])
        .arg(&src)
        .arg(format!("127.0.0.1:~/{name}/"));
    let o = run(c, 60);
    let landed = home.join(&name).join("f.bin");
    let ok = same_file(&src, &landed);
    let _ = std::fs::remove_dir_all(home.join(&name));
    assert!(o.status.success(), "{}", both(&o));
    assert!(ok, "not in {}", landed.display());
    assert!(!text(&o.stdout).contains("Welcome"), "{}", both(&o));
    no_far_side_left(&sshd.remote);
}

#[test]
fn what_keeps_the_far_side_from_starting_is_said_with_its_fix() {
    let env = Env::new();
    let Some(sshd) = Sshd::start(env.dir.path()) else {
        return;
    };
    let src = env.path("f.bin");
    make_dense(&src, 1000, 3);
    let there = env.mkdir("there");
    let target = format!("127.0.0.1:{}/", there.display());
    // zcp is not there.
    let mut c = zcp();
    c.args(["send", "-e", &sshd.ssh_command()])
        .args(["--remote-zcp", "/nonexistent/zcp"])
        .arg(&src)
        .arg(&target);
    let o = run(c, 60);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(text(&o.stderr).contains("install zcp"), "{}", both(&o));
    // ssh cannot reach the host: its own message, then ours.
    let (_held, closed) = refusing_port();
    let mut c = zcp();
    c.args(["send", "-e"])
        .arg(
            sshd.ssh_command()
                .replace(&format!("-p {}", sshd.port), &format!("-p {closed}")),
        )
        .args(["--remote-zcp", &sshd.remote])
        .arg(&src)
        .arg(&target);
    let o = run(c, 60);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    let err = text(&o.stderr);
    assert!(
        err.contains("ssh failed") && err.contains("Connection refused"),
        "{err}"
    );
    assert_eq!(std::fs::read_dir(&there).unwrap().count(), 0);
}

#[test]
fn a_daemon_style_call_with_one_colon_is_refused_naming_the_new_form() {
    let env = Env::new();
    let src = env.path("f.bin");
    make_dense(&src, 10, 4);
    for flags in [&["-p", "5310"][..], &["--key-file", "/nonexistent/key"]] {
        let mut c = zcp();
        c.arg("send")
            .args(flags)
            .arg(&src)
            .arg("dtn.invalid:run42/");
        let o = run(c, 10);
        assert_eq!(o.status.code(), Some(2), "{flags:?}: {}", both(&o));
        let err = text(&o.stderr);
        assert!(
            err.contains("dtn.invalid::PATH") && err.contains("over ssh"),
            "{err}"
        );
    }
    // A daemon's key from the environment counts as asking for the daemon.
    let mut c = zcp();
    c.env("ZCP_KEY_FILE", "/nonexistent/key")
        .arg("send")
        .arg(&src)
        .arg("dtn.invalid:run42/");
    let o = run(c, 10);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(text(&o.stderr).contains("$ZCP_KEY_FILE"), "{}", both(&o));
    // Paths ssh would take but the far side could not: refused before ssh runs.
    for (target, says) in [
        ("dtn.invalid:../x", "absolute path"),
        ("dtn.invalid:~bob/x", "~USER"),
        ("h;id:x", "host name"),
    ] {
        let mut c = zcp();
        c.args(["send", "-e", "/nonexistent/ssh"])
            .arg(&src)
            .arg(target);
        let o = run(c, 10);
        assert_eq!(o.status.code(), Some(2), "{target}: {}", both(&o));
        assert!(text(&o.stderr).contains(says), "{target}: {}", both(&o));
    }
    let mut c = zcp();
    c.args(["get", "--ssh-command", "ssh", "dtn.invalid::x", "."]);
    let o = run(c, 10);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(text(&o.stderr).contains("over ssh"), "{}", both(&o));
    // With only the default key file present, where a daemon's targets went is said once,
    // however many paths there are.
    let home = env.mkdir("home");
    std::fs::create_dir_all(home.join(".config/zcp")).unwrap();
    std::fs::copy(&env.key, home.join(".config/zcp/key")).unwrap();
    let mut c = zcp();
    c.env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .args(["ls", "-e", "false", "dtn.invalid:a", "dtn.invalid:b"]);
    let o = run(c, 10);
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    let said = text(&o.stderr).matches("dtn.invalid::PATH").count();
    assert_eq!(said, 1, "{}", both(&o));
}

#[test]
fn a_far_side_that_points_elsewhere_or_talks_nonsense_stores_nothing() {
    // A far side (a stand-in for ssh) that names a real zcp server holding another key: the
    // session secret does not open it, so nothing moves; and one that prints garbage then
    // nothing: given up on within the timeout. A listing learns nothing from either.
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let src = env.path("f.bin");
    make_dense(&src, 100_000, 5);
    let elsewhere = format!(
        "cat >/dev/null & echo 'zcp-ready {} 127.0.0.1 {}'; wait",
        zcp_wire::PROTOCOL_VERSION,
        srv.port
    );
    // Garbage on stdout, and on stderr escape sequences that would clear a terminal.
    let garbage = "printf '\\033[2J\\033]0;owned\\007\\n' >&2; head -c 3000 /dev/urandom \
                   | tr -d '\\n'; echo; exec sleep 30";
    for (script, says) in [
        (elsewhere.as_str(), "authentication"),
        (garbage, "did not answer"),
    ] {
        for command in ["send", "ls"] {
            let mut c = zcp();
            c.args([command, "--connect-timeout", "1", "-e"])
                .arg(format!("sh -c {}", shell_quote(script)));
            if command == "send" {
                c.arg(&src);
            }
            c.arg("far.invalid:x/");
            let o = run(c, 60);
            assert_ne!(o.status.code(), Some(0), "{command} {script}: {}", both(&o));
            assert!(
                text(&o.stderr).contains(says),
                "{command} {script}: {}",
                both(&o)
            );
            // Nothing from the network reaches the terminal unescaped; nothing is listed.
            assert!(!o.stderr.contains(&0x1b), "{command} {script}");
            assert!(o.stdout.is_empty() || command == "send", "{}", both(&o));
        }
    }
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0);
}

/// `s` in single quotes for `sh`.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

#[test]
fn with_only_ssh_let_through_the_session_goes_through_ssh_and_says_so() {
    use crate::netns::{ADDR_B, Testbed};
    let env = Env::new();
    if !is_root() || !has("nft") {
        return skip("needs root and nft (nftables) to let only ssh through");
    }
    let Some(tb) = Testbed::up(1500, 1500, None) else {
        return;
    };
    let ns_b = format!("{}-b", tb.name);
    let Some(sshd) = Sshd::start_at(env.dir.path(), Some(&ns_b), ADDR_B) else {
        return;
    };
    // Host b lets nothing in from the link but ssh: zcp there listens, unreachable.
    let rules = env.path("only-ssh.nft");
    std::fs::write(
        &rules,
        format!(
            "table inet zcpfb {{\n chain input {{\n  type filter hook input priority 0; policy accept;\n  iifname \"zcpb\" tcp dport != {} drop\n }}\n}}\n",
            sshd.port
        ),
    )
    .unwrap();
    let o = run(
        {
            let mut c = Command::new("ip");
            c.args(["netns", "exec", &ns_b, "nft", "-f"]).arg(&rules);
            c
        },
        10,
    );
    assert!(o.status.success(), "nft: {}", both(&o));
    let there = env.mkdir("there");
    let src = env.path("big.bin");
    make_dense(&src, 3 << 20, 4);
    let target = |p: &str| format!("{ADDR_B}:{}/{p}", there.display());
    let zcp_in_a = |command: &str, args: &[String]| {
        let ssh = sshd.ssh_command();
        let mut all: Vec<&str> = vec![command, "-e", &ssh, "--remote-zcp", &sshd.remote];
        all.extend(["--connect-timeout", "2", "-i", "0"]);
        all.extend(args.iter().map(String::as_str));
        let mut c = tb.zcp('a', &[]);
        c.args(all);
        run(c, 90)
    };
    let send = |extra: &[&str], dest: &str| {
        let mut a: Vec<String> = vec!["-P".into(), "2".into()];
        a.extend(extra.iter().map(|s| s.to_string()));
        a.extend([src.display().to_string(), target(dest)]);
        zcp_in_a("send", &a)
    };
    // --no-fallback: an error that names the flag, and nothing there.
    let o = send(&["--no-fallback"], "refused.bin");
    assert!(!o.status.success(), "{}", both(&o));
    assert!(text(&o.stderr).contains("--no-fallback"), "{}", both(&o));
    assert!(!there.join("refused.bin").exists());
    // The fallback: through ssh, loudly, encrypted as ever, whole.
    let o = send(&[], "through.bin");
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &there.join("through.bin")));
    let said = both(&o);
    assert!(said.contains("GOES THROUGH SSH"), "{said}");
    assert!(said.contains("through ssh, the session reached"), "{said}");
    assert!(
        text(&o.stdout).contains("encrypted with AES-256-GCM"),
        "{}",
        both(&o)
    );
    // And back, pulled through ssh.
    let back = env.path("back.bin");
    let o = zcp_in_a("get", &[target("through.bin"), back.display().to_string()]);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &back));
    // A listing goes through ssh too, and says so.
    let o = run(
        {
            let ssh = sshd.ssh_command();
            let mut c = tb.zcp('a', &[]);
            c.args(["ls", "-e", &ssh, "--remote-zcp", &sshd.remote])
                .args(["--connect-timeout", "2", &target("")]);
            c
        },
        90,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        text(&o.stdout).lines().any(|l| l == "through.bin"),
        "{}",
        both(&o)
    );
    assert!(both(&o).contains("GOES THROUGH SSH"), "{}", both(&o));
    // UDP cannot go through ssh: said, not attempted.
    let o = send(&["--transport", "udp", "--no-encrypt"], "udp.bin");
    assert!(!o.status.success(), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("cannot go through ssh"),
        "{}",
        both(&o)
    );
    let remote = sshd.remote.clone();
    drop(sshd);
    no_far_side_left(&remote);
}

#[test]
fn the_far_side_listens_in_the_port_range_asked_for() {
    let env = Env::new();
    let Some(sshd) = Sshd::start(env.dir.path()) else {
        return;
    };
    let there = env.mkdir("there");
    let src = env.path("f.bin");
    make_dense(&src, 100_000, 2);
    // Below the kernel's ephemeral ports (32768 and up), where other tests' free ports come
    // from: the far side takes none of theirs.
    let low = 21_000 + (std::process::id() % 7_000) as u16;
    let range = format!("{low}-{}", low + 20);
    let args = [
        "-J".to_string(),
        "-i".into(),
        "0".into(),
        "--port-range".into(),
        range.clone(),
        src.display().to_string(),
        format!("127.0.0.1:{}/f.bin", there.display()),
    ];
    let o = run(over_ssh(&sshd, "send", &args), 60);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &there.join("f.bin")));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let port = v["start"]["connected"][0]["remote_port"].as_u64().unwrap();
    assert!(
        (u64::from(low)..=u64::from(low) + 20).contains(&port),
        "port {port} outside {range}"
    );
    no_far_side_left(&sshd.remote);
}
