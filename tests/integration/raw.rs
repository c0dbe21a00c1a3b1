//! Bare byte streams: `zcp send --raw` and `zcp recv` against each other, against `nc`
//! (netcat-openbsd) in both directions, and against the documents' Java demo pair (a
//! `transferTo` client and a 4 KiB read/write server, and the reverse: a 4 KiB read/write
//! client and a `transferFrom` server), compiled from tests/fixtures/java/ with `javac` once
//! per run. Every test checks the bytes on disk; every child is killed if the test fails.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::util::*;

/// A child process killed (and reaped) when dropped: no test leaves one behind.
pub struct Guard(pub Option<Child>);

impl Guard {
    pub fn spawn(cmd: &mut Command) -> Guard {
        Guard(Some(
            cmd.stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}")),
        ))
    }

    pub fn pid(&self) -> i32 {
        self.0.as_ref().expect("running").id() as i32
    }

    /// Its output, waiting at most `secs` (then it is killed and the test fails).
    pub fn finish(mut self, secs: u64) -> Output {
        wait_output(self.0.take().expect("running"), secs)
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Waits (at most 10 s) for a port number in `file`, written by a listener at start.
pub fn port_from(file: &Path, child: &mut Guard) -> u16 {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(p) = std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            return p;
        }
        if let Some(Ok(Some(status))) = child.0.as_mut().map(Child::try_wait) {
            let o = std::mem::take(&mut child.0)
                .unwrap()
                .wait_with_output()
                .unwrap();
            panic!(
                "the listener exited ({status}) before listening: {}",
                both(&o)
            );
        }
        assert!(Instant::now() < end, "no port in {}", file.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `zcp recv --listen 0 ... DEST` in `dir`, and the port it listens on.
pub fn recv(dir: &Path, dest: &Path, extra: &[&str]) -> (Guard, u16) {
    recv_on("0", dir, dest, extra)
}

/// `zcp recv --listen LISTEN ... DEST`, and the port it listens on.
pub fn recv_on(listen: &str, dir: &Path, dest: &Path, extra: &[&str]) -> (Guard, u16) {
    let pf = dir.join(format!("port-{}", fastrand::u64(..)));
    let mut c = zcp();
    c.args(["recv", "--listen", listen, "--port-file"])
        .arg(&pf)
        .args(extra)
        .arg(dest);
    let mut g = Guard::spawn(&mut c);
    let port = port_from(&pf, &mut g);
    (g, port)
}

/// `zcp send --raw SRC 127.0.0.1:PORT extra`, run to its end.
pub fn send_raw(src: &Path, port: u16, extra: &[&str]) -> Output {
    let mut c = zcp();
    c.args(["send", "--raw"])
        .args(extra)
        .arg(src)
        .arg(format!("127.0.0.1:{port}"));
    run(c, 30)
}

fn hash(path: &Path) -> String {
    blake3::hash(&std::fs::read(path).unwrap())
        .to_hex()
        .to_string()
}

/// The names in `dir` other than the ones given.
fn others(dir: &Path, but: &[&str]) -> Vec<String> {
    tree(dir)
        .into_iter()
        .filter(|n| !but.contains(&n.as_str()) && !n.starts_with("port-"))
        .collect()
}

/// Whether `tool` runs here; if not, says why the test is skipped.
fn have(tool: &str, arg: &str) -> bool {
    let ok = Command::new(tool)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok();
    if !ok {
        skip(&format!("{tool} is not installed (.ci/run installs it)"));
    }
    ok
}

/// OpenBSD's netcat (`nc -N` closes after its input ends), or why not.
fn netcat() -> Option<&'static str> {
    for nc in ["nc.openbsd", "nc"] {
        let o = Command::new(nc).arg("-h").stdin(Stdio::null()).output();
        if o.is_ok_and(|o| both(&o).contains("OpenBSD netcat")) {
            return Some(nc);
        }
    }
    skip("OpenBSD netcat is not installed (.ci/run installs netcat-openbsd)");
    None
}

#[test]
fn send_raw_into_nc_with_every_sender_engine() {
    let Some(nc) = netcat() else {
        return;
    };
    let env = Env::new();
    let src = env.path("src.bin");
    make_dense(&src, (3 << 20) + 4321, 71);
    for engine in ["sendfile", "rw", "mmap", "splice"] {
        let out = env.path(&format!("nc-{engine}"));
        let port = free_port();
        let mut l = Command::new(nc);
        l.args(["-l", "127.0.0.1", &port.to_string()])
            .stdout(std::fs::File::create(&out).unwrap());
        let l = Guard(Some(l.stdin(Stdio::null()).spawn().unwrap()));
        // nc listens a moment after it starts: connect until it does.
        let end = Instant::now() + Duration::from_secs(5);
        let o = loop {
            let o = send_raw(&src, port, &["--engine", engine, "-J"]);
            if o.status.success() || Instant::now() > end {
                break o;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(o.status.success(), "{engine}: {}", both(&o));
        let l = l.finish(10);
        assert!(l.status.success(), "nc: {}", both(&l));
        assert!(same_file(&src, &out), "{engine}: nc stored other bytes");
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(doc["start"]["mode"], "raw");
        assert_eq!(doc["end"]["engine"], engine);
        assert_eq!(doc["end"]["sum"]["bytes"], (3 << 20) + 4321);
    }
}

#[test]
fn recv_takes_nc_into_every_storing_engine() {
    let Some(nc) = netcat() else {
        return;
    };
    let env = Env::new();
    let src = env.path("src.bin");
    make_dense(&src, (5 << 20) + 77, 72);
    for engine in ["auto", "splice", "direct", "rw"] {
        let dest = env.path(&format!("got-{engine}"));
        let (zcp, port) = recv(env.dir.path(), &dest, &["--engine", engine, "-J"]);
        let mut c = Command::new(nc);
        c.args(["-N", "127.0.0.1", &port.to_string()])
            .stdin(std::fs::File::open(&src).unwrap());
        let o = wait_output(
            c.stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap(),
            20,
        );
        assert!(o.status.success(), "nc: {}", both(&o));
        let o = zcp.finish(20);
        assert!(o.status.success(), "{engine}: {}", both(&o));
        assert!(same_file(&src, &dest), "{engine}");
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert_eq!(doc["end"]["blake3"], hash(&src), "{engine}");
        assert_eq!(doc["end"]["stored"], true);
        assert_eq!(doc["start"]["authenticated"], false);
        assert_eq!(doc["start"]["connected"][0]["local_host"], "127.0.0.1");
    }
    assert_eq!(
        others(
            env.dir.path(),
            &[
                "key",
                "src.bin",
                "got-auto",
                "got-splice",
                "got-direct",
                "got-rw"
            ]
        ),
        Vec::<String>::new(),
        "no part file left"
    );
}

#[test]
fn zcp_to_zcp_checked_by_size_and_digest_in_text() {
    let env = Env::new();
    let src = env.path("src.bin");
    make_dense(&src, 2 << 20, 73);
    let dest = env.path("dest.bin");
    let size = (2 << 20).to_string();
    let (zcp, port) = recv(
        env.dir.path(),
        &dest,
        &["--expect-size", &size, "--expect-blake3", &hash(&src)],
    );
    let o = send_raw(&src, port, &["--limit-rate", "1G"]);
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        text(&o.stdout).contains("Rate cap: 1.00 Gbit"),
        "{}",
        text(&o.stdout)
    );
    let r = zcp.finish(20);
    assert!(r.status.success(), "{}", both(&r));
    let out = text(&r.stdout);
    assert!(out.contains(&format!("BLAKE3:   {}", hash(&src))), "{out}");
    assert!(
        out.contains("Checked:  size 2097152 as expected, BLAKE3 as expected"),
        "{out}"
    );
    assert!(
        text(&r.stderr).contains("listening on 127.0.0.1:"),
        "{}",
        text(&r.stderr)
    );
    assert!(same_file(&src, &dest));
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&dest).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o644);
}

/// Compiles the Java fixtures once per run into a directory that lives as long as the run;
/// `None` (with the reason printed) where there is no JDK.
fn java_classes() -> Option<&'static Path> {
    static CLASSES: OnceLock<Option<tempfile::TempDir>> = OnceLock::new();
    CLASSES
        .get_or_init(|| {
            if !have("javac", "-version") {
                return None;
            }
            let dir = tempfile::tempdir().unwrap();
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/java");
            let files: Vec<PathBuf> = std::fs::read_dir(&src)
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "java"))
                .collect();
            let mut c = Command::new("javac");
            c.arg("-d").arg(dir.path()).args(&files);
            let o = run(c, 60);
            assert!(o.status.success(), "javac: {}", both(&o));
            Some(dir)
        })
        .as_ref()
        .map(|d| d.path())
}

fn java(classes: &Path, class: &str, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Command {
    let mut c = Command::new("java");
    // A small heap and no JIT tiers beyond the first: the JVM starts faster.
    c.args(["-Xshare:auto", "-XX:TieredStopAtLevel=1", "-Xmx64m", "-cp"])
        .arg(classes)
        .arg(class);
    for a in args {
        c.arg(a);
    }
    c
}

#[test]
fn send_raw_into_the_java_servers() {
    let Some(classes) = java_classes() else {
        return;
    };
    let env = Env::new();
    let src = env.path("src.bin");
    make_dense(&src, (4 << 20) + 999, 74);
    for server in ["TransferToServer", "TransferFromServer"] {
        let out = env.path(&format!("{server}.out"));
        let pf = env.path(&format!("{server}.port"));
        let mut g = Guard::spawn(&mut java(classes, server, &[&pf, &out]));
        let port = port_from(&pf, &mut g);
        let o = send_raw(&src, port, &[]);
        assert!(o.status.success(), "{server}: {}", both(&o));
        let j = g.finish(20);
        assert!(j.status.success(), "{server}: {}", both(&j));
        assert!(same_file(&src, &out), "{server} stored other bytes");
    }
}

#[test]
fn recv_takes_the_java_clients() {
    let Some(classes) = java_classes() else {
        return;
    };
    let env = Env::new();
    let src = env.path("src.bin");
    make_dense(&src, (4 << 20) + 1001, 75);
    for client in ["TransferToClient", "ReadWriteClient"] {
        let dest = env.path(&format!("{client}.out"));
        let (zcp, port) = recv(env.dir.path(), &dest, &["--expect-blake3", &hash(&src)]);
        let p = port.to_string();
        let j = run(java(classes, client, &[&"127.0.0.1", &p, &src]), 20);
        assert!(j.status.success(), "{client}: {}", both(&j));
        let o = zcp.finish(20);
        assert!(o.status.success(), "{client}: {}", both(&o));
        assert!(same_file(&src, &dest), "{client}");
    }
}

/// Runs `zcp recv` into `dest` while `peer` plays the sender; returns recv's output.
fn recv_from(dir: &Path, dest: &Path, extra: &[&str], peer: impl FnOnce(TcpStream)) -> Output {
    let (zcp, port) = recv(dir, dest, extra);
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    peer(s);
    zcp.finish(20)
}

#[test]
fn a_stream_that_ends_short_of_expect_size_leaves_nothing() {
    let env = Env::new();
    let dest = env.path("dest.bin");
    let o = recv_from(env.dir.path(), &dest, &["--expect-size", "1M"], |mut s| {
        s.write_all(&[7u8; 300_000]).unwrap();
    });
    assert_eq!(o.status.code(), Some(5), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("ended after 300000 bytes, --expect-size is 1048576"),
        "{}",
        both(&o)
    );
    assert_eq!(others(env.dir.path(), &["key"]), Vec::<String>::new());
}

#[test]
fn a_wrong_digest_commits_nothing_and_keeps_the_old_file() {
    let env = Env::new();
    let dest = env.path("dest.bin");
    std::fs::write(&dest, b"old").unwrap();
    let wrong = blake3::hash(b"something else").to_hex().to_string();
    let o = recv_from(
        env.dir.path(),
        &dest,
        &["--force", "--expect-blake3", &wrong, "-J"],
        |mut s| s.write_all(&[1u8; 100_000]).unwrap(),
    );
    assert_eq!(o.status.code(), Some(5), "{}", both(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["exit_code"], 5);
    assert!(doc["error"].as_str().unwrap().contains("--expect-blake3"));
    assert_eq!(std::fs::read(&dest).unwrap(), b"old");
    assert_eq!(
        others(env.dir.path(), &["key", "dest.bin"]),
        Vec::<String>::new()
    );
}

#[test]
fn a_reset_connection_leaves_nothing() {
    let env = Env::new();
    let dest = env.path("dest.bin");
    let o = recv_from(env.dir.path(), &dest, &[], |mut s| {
        s.write_all(&[3u8; 500_000]).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        // SO_LINGER 0: close sends RST, not FIN.
        rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO)).unwrap();
    });
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(text(&o.stderr).contains("reset"), "{}", both(&o));
    assert_eq!(others(env.dir.path(), &["key"]), Vec::<String>::new());
}

#[test]
fn a_peer_that_closes_with_bytes_unread_fails_the_send() {
    let env = Env::new();
    let src = env.path("src.bin");
    make_dense(&src, 16 << 20, 76);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let peer = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut buf = vec![0u8; 100_000];
        std::io::Read::read_exact(&mut s, &mut buf).unwrap();
        // Closed with bytes unread: the kernel answers with RST.
    });
    let o = send_raw(&src, port, &[]);
    peer.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(text(&o.stderr).contains("not every byte"), "{}", both(&o));
}

#[test]
fn recv_listens_on_loopback_unless_told_and_refuses_bad_destinations() {
    let env = Env::new();
    // An address other than loopback only when given (both wait out --timeout together).
    let (any, port) = recv_on(
        "0.0.0.0:0",
        env.dir.path(),
        &env.path("a"),
        &["--timeout", "0.3"],
    );
    let mut c = zcp();
    c.args(["recv", "--listen", "0", "--timeout", "0.3"])
        .arg(env.path("b"));
    let o = Guard::spawn(&mut c).finish(10);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("listening on 127.0.0.1:"),
        "{}",
        both(&o)
    );
    assert!(
        text(&o.stderr).contains("no connection within 0.3 s"),
        "{}",
        both(&o)
    );
    let o = any.finish(10);
    assert!(
        text(&o.stderr).contains(&format!("listening on 0.0.0.0:{port}")),
        "{}",
        both(&o)
    );
    // Refused before listening: an existing file, a directory, a missing directory.
    std::fs::write(env.path("exists"), b"keep").unwrap();
    for (dest, why) in [
        (env.path("exists"), "exists; add --force to replace it"),
        (env.dir.path().to_path_buf(), "is an existing directory"),
        (env.path("missing/x"), "does not exist; create it first"),
    ] {
        let mut c = zcp();
        c.args(["recv", "--listen", "0"]).arg(&dest);
        let o = run(c, 10);
        assert_eq!(o.status.code(), Some(2), "{}", both(&o));
        assert!(text(&o.stderr).contains(why), "{}", both(&o));
        assert!(!text(&o.stderr).contains("listening"), "{}", both(&o));
    }
    assert_eq!(std::fs::read(env.path("exists")).unwrap(), b"keep");
    assert_eq!(
        others(env.dir.path(), &["key", "exists"]),
        Vec::<String>::new()
    );
}

#[test]
fn sigint_mid_stream_leaves_nothing() {
    let env = Env::new();
    let dest = env.path("dest.bin");
    let (zcp, port) = recv(env.dir.path(), &dest, &[]);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(&[5u8; 1 << 20]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: a plain kill(2) of our own child.
    #[allow(unsafe_code)]
    let r = unsafe { libc::kill(zcp.pid(), libc::SIGINT) };
    assert_eq!(r, 0);
    let o = zcp.finish(10);
    assert_eq!(o.status.code(), Some(130), "{}", both(&o));
    assert_eq!(others(env.dir.path(), &["key"]), Vec::<String>::new());
}

#[test]
fn send_raw_refuses_what_a_bare_stream_cannot_carry() {
    let env = Env::new();
    let port = free_port();
    for (args, code, why) in [
        (vec!["-r", "x"], 2, "does not take -r"),
        (vec!["-P", "2", "x"], 2, "does not take -P"),
        (
            vec!["--transport", "udp", "x"],
            2,
            "does not take --transport",
        ),
        (vec!["a", "b"], 2, "one file"),
    ] {
        let mut c = zcp();
        c.current_dir(env.dir.path())
            .args(["send", "--raw"])
            .args(&args)
            .arg(format!("127.0.0.1:{port}"));
        let o = run(c, 10);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", both(&o));
        assert!(text(&o.stderr).contains(why), "{args:?}: {}", both(&o));
    }
    let o = send_raw(env.dir.path(), port, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(text(&o.stderr).contains("is a directory"), "{}", both(&o));
}

#[test]
fn sigint_stops_send_raw_and_says_not_every_byte_went() {
    let env = Env::new();
    let src = env.path("src.bin");
    make_dense(&src, 16 << 20, 77);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let reader = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        let mut got = Vec::new();
        let _ = std::io::Read::read_to_end(&mut s, &mut got);
        got.len()
    });
    // 40 Mbit/s: 16 MiB take over 3 s.
    let mut c = zcp();
    c.args(["send", "--raw", "--limit-rate", "40M"])
        .arg(&src)
        .arg(format!("127.0.0.1:{port}"));
    let g = Guard::spawn(&mut c);
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: a plain kill(2) of our own child.
    #[allow(unsafe_code)]
    let r = unsafe { libc::kill(g.pid(), libc::SIGINT) };
    assert_eq!(r, 0);
    let o = g.finish(10);
    assert_eq!(o.status.code(), Some(130), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("interrupted (SIGINT) before every byte was sent"),
        "{}",
        both(&o)
    );
    assert!(reader.join().unwrap() < 16 << 20);
}
