//! What an installed zcp is made of besides the binary: `zcp generate man` and `zcp generate
//! completions`, the systemd unit (checked with `systemd-analyze verify`) and its `Type=notify`
//! handshake (`READY=1`, `STOPPING=1` over `$NOTIFY_SOCKET`). The Debian package itself is
//! built, installed and purged by `.ci/run` (packaging/check-deb.sh), not here: it needs root
//! and changes the machine.

use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::util::*;

/// The subcommands `zcp --help` lists (hidden ones are not listed).
fn listed_subcommands() -> Vec<String> {
    let mut c = zcp();
    c.arg("--help");
    let help = text(&run(c, 10).stdout);
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split_whitespace().next().unwrap().to_owned())
        .filter(|c| c != "help")
        .collect()
}

fn has(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// `zcp generate man DIR` writes zcp.1 and a page per listed subcommand (and per subcommand
/// of theirs), nothing for hidden commands, each page one that groff formats without a
/// warning and that `man -l` renders with the command's options.
#[test]
fn generate_man_writes_a_page_per_subcommand_that_man_renders() {
    let env = Env::new();
    let dir = env.mkdir("man1");
    let mut c = zcp();
    c.args(["generate", "man"]).arg(&dir);
    let o = run(c, 20);
    assert!(o.status.success(), "{}", both(&o));
    let listed = listed_subcommands();
    assert!(listed.len() >= 10, "{listed:?}");
    let mut expected: Vec<String> = listed.iter().map(|c| format!("zcp-{c}.1")).collect();
    expected.push("zcp.1".into());
    expected.push("zcp-generate-man.1".into());
    expected.push("zcp-generate-completions.1".into());
    expected.sort();
    assert_eq!(files_in(&dir), expected, "{}", both(&o));
    assert!(text(&o.stderr).contains(&format!("wrote {} man pages", expected.len())));
    for name in &expected {
        let page = std::fs::read_to_string(dir.join(name)).unwrap();
        let mode = std::fs::metadata(dir.join(name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o644, "{name}");
        assert!(
            page.contains(".SH NAME") && page.contains(".SH SYNOPSIS"),
            "{name}"
        );
        assert!(!page.contains("bench\\-side") && !page.contains("bench\\-chart"));
    }
    if has("groff") {
        for name in &expected {
            let mut c = Command::new("groff");
            c.args(["-man", "-ww", "-z"]).arg(dir.join(name));
            let o = run(c, 20);
            assert!(
                o.status.success() && o.stderr.is_empty(),
                "{name}: {}",
                both(&o)
            );
        }
    } else {
        skip("groff is not installed: man pages checked for their sections only");
    }
    if has("man") {
        let mut c = Command::new("man");
        c.arg("-l")
            .arg(dir.join("zcp-serve.1"))
            .env("MANWIDTH", "100");
        let o = run(c, 20);
        let page = text(&o.stdout);
        assert!(o.status.success(), "{}", both(&o));
        for needle in ["zcp-serve", "--max-streams", "EXAMPLES", "EXIT STATUS"] {
            assert!(page.contains(needle), "{needle} not in:\n{page}");
        }
    } else {
        skip("man (man-db) is not installed: zcp-serve.1 not rendered with man -l");
    }
}

/// DIR must be an existing directory zcp can write to; otherwise exit 2 with what to fix,
/// and nothing is left behind.
#[test]
fn generate_man_refuses_what_is_not_a_writable_directory() {
    let env = Env::new();
    let missing = env.path("missing");
    let file = env.path("file");
    std::fs::write(&file, b"x").unwrap();
    for (dir, says) in [(&missing, "does not exist"), (&file, "is not a directory")] {
        let mut c = zcp();
        c.args(["generate", "man"]).arg(dir);
        let o = run(c, 10);
        assert_eq!(o.status.code(), Some(2), "{}", both(&o));
        let err = text(&o.stderr);
        assert!(err.contains(&format!("{} {says}", dir.display())), "{err}");
        assert!(err.contains("give an existing directory"), "{err}");
    }
    assert!(!missing.exists());
    assert_eq!(std::fs::read(&file).unwrap(), b"x");

    // A directory this user cannot write: as root, zcp runs as nobody (root writes anywhere).
    let ro = env.mkdir("ro");
    let mut c = if is_root() {
        std::fs::set_permissions(env.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_zcp"));
        c
    } else {
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        zcp()
    };
    c.args(["generate", "man"]).arg(&ro);
    let o = run(c, 10);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    let err = text(&o.stderr);
    assert!(
        err.contains(&format!("cannot write {}", ro.display())),
        "{err}"
    );
    assert!(err.contains("give a directory you can write to"), "{err}");
    assert!(files_in(&ro).is_empty(), "{:?}", files_in(&ro));
}

fn completions(shell: &str) -> String {
    let mut c = zcp();
    c.args(["generate", "completions", shell]);
    let o = run(c, 10);
    assert!(o.status.success(), "{shell}: {}", both(&o));
    text(&o.stdout)
}

/// Every shell clap_complete knows gets a script naming every listed subcommand and no hidden
/// one; bash accepts its script (`bash -n`) and completing `zcp se` with it offers exactly
/// send and serve; `zcp serve --ma` offers serve's --max-* flags. An unknown shell is refused
/// with the known ones named.
#[test]
fn generate_completions_for_every_shell_and_refuse_unknown_ones() {
    let listed = listed_subcommands();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = completions(shell);
        for sub in &listed {
            assert!(script.contains(sub.as_str()), "{shell}: no {sub}");
        }
        for hidden in ["bench-side", "bench-chart"] {
            assert!(!script.contains(hidden), "{shell}: offers hidden {hidden}");
        }
    }
    let env = Env::new();
    let bash = env.path("zcp.bash");
    std::fs::write(&bash, completions("bash")).unwrap();
    let mut c = Command::new("bash");
    c.arg("-n").arg(&bash);
    let o = run(c, 10);
    assert!(o.status.success(), "bash -n: {}", both(&o));
    let complete = |words: &str| {
        let script = format!(
            "source '{}'; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); \
             COMP_LINE='{words}'; COMP_POINT=${{#COMP_LINE}}; \
             _zcp zcp \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            bash.display()
        );
        let mut c = Command::new("bash");
        c.args(["--norc", "-c", &script]);
        let o = run(c, 10);
        assert!(o.status.success(), "{words}: {}", both(&o));
        let mut got: Vec<String> = text(&o.stdout).lines().map(str::to_owned).collect();
        got.sort();
        got
    };
    assert_eq!(complete("zcp se"), ["send", "serve"]);
    assert_eq!(
        complete("zcp serve --ma"),
        [
            "--max-pending",
            "--max-pending-per-source",
            "--max-sessions",
            "--max-streams"
        ]
    );
    for (shell, check) in [("zsh", ["-n"]), ("fish", ["--no-execute"])] {
        if has(shell) {
            let f = env.path(shell);
            std::fs::write(&f, completions(shell)).unwrap();
            let mut c = Command::new(shell);
            c.args(check).arg(&f);
            let o = run(c, 10);
            assert!(o.status.success(), "{shell}: {}", both(&o));
        } else {
            skip(&format!(
                "{shell} is not installed: its completion script not syntax-checked"
            ));
        }
    }

    let mut c = zcp();
    c.args(["generate", "completions", "tcsh"]);
    let o = run(c, 10);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    let err = text(&o.stderr);
    assert!(err.contains("'tcsh'"), "{err}");
    assert!(err.contains("bash, elvish, fish, powershell, zsh"), "{err}");
    assert!(o.stdout.is_empty());
}

fn packaging(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("packaging")
        .join(name)
}

/// `systemd-analyze verify` on a copy of `unit` whose ExecStart runs the binary under test
/// (verify wants the command to exist) and with zcp's man pages on MANPATH (it checks the
/// unit's `Documentation=man:` pages).
fn verify_unit(env: &Env, unit: &str) -> std::process::Output {
    let man1 = env.path("man/man1");
    if !man1.exists() {
        std::fs::create_dir_all(&man1).unwrap();
        let mut c = zcp();
        c.args(["generate", "man"]).arg(&man1);
        assert!(run(c, 20).status.success());
    }
    let copy = env.path("zcp.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/bin/zcp ", &format!("{} ", env!("CARGO_BIN_EXE_zcp"))),
    )
    .unwrap();
    let mut c = Command::new("systemd-analyze");
    c.arg("verify").arg(&copy).env("MANPATH", env.path("man"));
    run(c, 30)
}

/// packaging/zcp.service passes `systemd-analyze verify` (and a broken copy of it does not:
/// the check can fail), and keeps the settings the service relies on.
#[test]
fn unit_file_verifies() {
    let unit = std::fs::read_to_string(packaging("zcp.service")).unwrap();
    for line in [
        "Type=notify",
        "ExecStart=/usr/bin/zcp serve --config /etc/zcp/zcp.toml",
        "User=zcp",
        "KillSignal=SIGTERM",
        "ProtectSystem=strict",
        "ReadWritePaths=/var/lib/zcp/incoming /var/log/zcp",
        "LogsDirectory=zcp",
        "ExecReload=/bin/kill -HUP $MAINPID",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "CapabilityBoundingSet=",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX",
        "SystemCallFilter=@system-service",
    ] {
        assert!(unit.lines().any(|l| l == line), "{line} not in the unit");
    }
    // The drain (10 s) fits in the stop timeout.
    let stop: u64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("TimeoutStopSec="))
        .and_then(|v| v.trim_end_matches('s').parse().ok())
        .expect("TimeoutStopSec=Ns");
    assert!(stop > 10, "TimeoutStopSec={stop}");
    let config = std::fs::read_to_string(packaging("zcp.toml")).unwrap();
    for line in [
        "[export.incoming]",
        "path = \"/var/lib/zcp/incoming\"",
        "key_file = \"/etc/zcp/keys/default.key\"",
        "transfer_log = \"/var/log/zcp/transfers.jsonl\"",
    ] {
        assert!(config.lines().any(|l| l == line), "{line} not in zcp.toml");
    }
    assert!(config.contains("zcp keygen -o /etc/zcp/keys/default.key"));

    if !has("systemd-analyze") {
        skip("systemd-analyze (systemd) is not installed: packaging/zcp.service not verified");
        return;
    }
    let env = Env::new();
    let o = verify_unit(&env, &unit);
    assert!(o.status.success(), "{}", both(&o));
    assert!(o.stderr.is_empty(), "{}", both(&o));
    let broken = unit.replace("Type=notify", "Type=notifyy");
    let o = verify_unit(&env, &broken);
    assert!(text(&o.stderr).contains("notifyy"), "{}", both(&o));
}

/// A datagram socket standing in for systemd's notification socket.
struct NotifySocket {
    sock: UnixDatagram,
    path: PathBuf,
}

impl NotifySocket {
    fn new(env: &Env) -> NotifySocket {
        let path = env.path("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        NotifySocket { sock, path }
    }

    /// The next message, or None after 10 s.
    fn next(&self) -> Option<String> {
        let mut buf = [0u8; 4096];
        let n = self.sock.recv(&mut buf).ok()?;
        Some(String::from_utf8_lossy(&buf[..n]).into_owned())
    }
}

/// A child process killed when dropped (a failing test leaves no server behind).
struct Spawned(Option<std::process::Child>);

impl Drop for Spawned {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Under `Type=notify`: `READY=1` comes once the port accepts connections, `STOPPING=1` when
/// SIGTERM starts the drain, and zcp then exits 0. A server that cannot start sends nothing.
#[test]
fn serve_notifies_systemd_when_ready_and_when_stopping() {
    let env = Env::new();
    let root = env.mkdir("root");
    let notify = NotifySocket::new(&env);
    let port = free_port();
    let mut c = zcp();
    c.args([
        "serve",
        "--bind",
        "127.0.0.1",
        "-p",
        &port.to_string(),
        "--root",
    ])
    .arg(&root)
    .arg("--key-file")
    .arg(&env.key)
    .env("NOTIFY_SOCKET", &notify.path);
    let mut srv = Spawned(Some(
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    let ready = notify.next().expect("READY=1 within 10 s");
    assert_eq!(ready, "READY=1\n");
    // Ready means accepting: a connection right now succeeds.
    TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_secs(2))
        .expect("connect right after READY=1");
    let pid = srv.0.as_ref().unwrap().id() as libc::pid_t;
    // SAFETY: kill(2) on the server this test spawned and has not reaped; no memory involved.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(pid, libc::SIGTERM) };
    assert_eq!(rc, 0);
    let stopping = notify.next().expect("STOPPING=1 within 10 s");
    assert_eq!(stopping, "STOPPING=1\n");
    let o = wait_output(srv.0.take().unwrap(), 15);
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));

    // A root that does not exist: exit 2 and not a word to systemd.
    let mut c = zcp();
    c.args(["serve", "--bind", "127.0.0.1", "-p", "0", "--root"])
        .arg(env.path("missing"))
        .arg("--key-file")
        .arg(&env.key)
        .env("NOTIFY_SOCKET", &notify.path);
    let o = run(c, 10);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    notify.sock.set_nonblocking(true).unwrap();
    assert_eq!(
        notify.next(),
        None,
        "a server that did not start said something"
    );
}
