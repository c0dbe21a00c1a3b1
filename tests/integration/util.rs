//! Helpers shared by the integration tests: the `zcp` binary with timeouts, a server process
//! that is always killed, test files, comparisons, and a raw protocol client for sending what
//! the real client never would.

#![allow(dead_code)]

mod raw;
pub use raw::*;

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use zcp_wire::Psk;

pub fn zcp() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_zcp"));
    // Never pick up a key from the environment of whoever runs the tests.
    c.env_remove("ZCP_KEY_FILE");
    c
}

/// Runs `cmd` to completion, killing it after `secs`.
pub fn run(mut cmd: Command, secs: u64) -> Output {
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zcp");
    wait_output(child, secs)
}

/// Waits for a spawned child (stdout/stderr piped), killing it after `secs`.
pub fn wait_output(mut child: Child, secs: u64) -> Output {
    // A pipe the caller already took reads as empty.
    let out = child.stdout.take();
    let err = child.stderr.take();
    let t_out = std::thread::spawn(move || out.map(read_all).unwrap_or_default());
    let t_err = std::thread::spawn(move || err.map(read_all).unwrap_or_default());
    let status = wait_deadline(&mut child, Duration::from_secs(secs));
    Output {
        status,
        stdout: t_out.join().unwrap(),
        stderr: t_err.join().unwrap(),
    }
}

fn read_all(mut r: impl Read) -> Vec<u8> {
    let mut v = Vec::new();
    let _ = r.read_to_end(&mut v);
    v
}

/// Waits for `child`, killing it at the deadline (and failing the test then).
pub fn wait_deadline(child: &mut Child, limit: Duration) -> ExitStatus {
    let end = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().expect("try_wait") {
            return s;
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("zcp did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// stdout and stderr together: per-entry failures are reported on stdout, the exit reason on
/// stderr.
pub fn both(o: &Output) -> String {
    format!("{}{}", text(&o.stdout), text(&o.stderr))
}

/// A scratch directory with a key made by `zcp keygen`.
pub struct Env {
    pub dir: tempfile::TempDir,
    pub key: PathBuf,
}

impl Env {
    pub fn new() -> Env {
        Self::in_dir(&std::env::temp_dir())
    }

    pub fn in_dir(base: &Path) -> Env {
        let dir = tempfile::Builder::new()
            .prefix("zcp-test-")
            .tempdir_in(base)
            .unwrap();
        let key = dir.path().join("key");
        let mut c = zcp();
        c.args(["keygen", "-o"]).arg(&key);
        let o = run(c, 10);
        assert!(o.status.success(), "keygen: {}", text(&o.stderr));
        Env { dir, key }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn mkdir(&self, name: &str) -> PathBuf {
        let p = self.path(name);
        std::fs::create_dir_all(&p).unwrap();
        p
    }

    pub fn psk(&self) -> Psk {
        Psk::parse(&std::fs::read_to_string(&self.key).unwrap()).unwrap()
    }
}

/// A `zcp serve` process on 127.0.0.1 with an ephemeral port; killed when dropped.
pub struct ServerProc {
    child: Child,
    pub port: u16,
    pub root: PathBuf,
    log: Arc<Mutex<String>>,
}

impl ServerProc {
    pub fn start(root: &Path, key: &Path, extra: &[&str]) -> ServerProc {
        let mut c = zcp();
        c.args(["serve", "--bind", "127.0.0.1"]);
        Self::spawn(c, root, key, extra)
    }

    /// `cmd` (a `zcp` or `ip netns exec NS zcp` command with `serve` and its bind address
    /// already given) on an ephemeral port, unless `extra` names one with `-p`.
    pub fn spawn(mut cmd: Command, root: &Path, key: &Path, extra: &[&str]) -> ServerProc {
        if !extra.contains(&"-p") {
            cmd.args(["-p", "0"]);
        }
        cmd.arg("--root").arg(root).arg("--key-file").arg(key);
        Self::launch(cmd, root, extra)
    }

    /// `zcp serve --config FILE` on 127.0.0.1 (the file's `listen` unless `extra` names an
    /// address); `root` is only what [`ServerProc::root`] returns.
    pub fn with_config(config: &Path, root: &Path, extra: &[&str]) -> ServerProc {
        let mut c = zcp();
        c.arg("serve").arg("--config").arg(config);
        Self::launch(c, root, extra)
    }

    fn launch(mut cmd: Command, root: &Path, extra: &[&str]) -> ServerProc {
        let mut child = cmd
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn zcp serve");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let l = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line.clone());
                l.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        let l = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                l.lock().unwrap().push_str(&format!("{line}\n"));
            }
        });
        let line = match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("server did not start: {}", log.lock().unwrap());
            }
        };
        let addr = line
            .split("listening on ")
            .nth(1)
            .and_then(|r| r.split(',').next())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        let port = addr.rsplit(':').next().unwrap().parse().unwrap();
        ServerProc {
            child,
            port,
            root: root.to_path_buf(),
            log,
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's resident memory now, in KiB (`VmRSS`).
    pub fn rss_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server is running");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS in /proc/PID/status")
    }

    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits for the server to exit by itself (`--once`), up to `secs`; its exit code.
    pub fn exit_code(&mut self, secs: u64) -> Option<i32> {
        wait_deadline(&mut self.child, Duration::from_secs(secs)).code()
    }

    /// Waits until the log holds `needle`, up to `secs`.
    pub fn wait_log(&self, needle: &str, secs: u64) -> bool {
        let end = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < end {
            if self.log().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for ServerProc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `zcp send` with the key, to 127.0.0.1:`port`.
pub fn send_cmd(port: u16, key: &Path, src: &Path, dest: &str, extra: &[&str]) -> Command {
    let mut c = zcp();
    c.args(["send", "-p", &port.to_string(), "--key-file"])
        .arg(key)
        .args(extra)
        .arg(src)
        .arg(format!("127.0.0.1::{dest}"));
    c
}

/// `zcp ls` with `extra` flags of `paths` (each `127.0.0.1::PATH`) on the server at `port`.
pub fn ls_cmd(port: u16, key: &Path, extra: &[&str], paths: &[&str]) -> Command {
    let mut c = zcp();
    c.args(["ls", "-p", &port.to_string(), "--key-file"])
        .arg(key)
        .args(extra)
        .args(paths.iter().map(|p| format!("127.0.0.1::{p}")));
    c
}

/// `zcp get -J` of `path` from the server on `port` into `dest`.
pub fn get_json(
    port: u16,
    key: &Path,
    path: &str,
    dest: &Path,
    extra: &[&str],
    secs: u64,
) -> (Output, serde_json::Value) {
    let mut c = zcp();
    c.args([
        "get",
        "-J",
        "-i",
        "0",
        "-p",
        &port.to_string(),
        "--key-file",
    ])
    .arg(key)
    .args(extra)
    .arg(format!("127.0.0.1::{path}"))
    .arg(dest);
    let o = run(c, secs);
    let v = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("bad JSON ({e}): {}", both(&o)));
    (o, v)
}

/// Runs a send with `-J` and parses the document.
pub fn send_json(
    port: u16,
    key: &Path,
    src: &Path,
    dest: &str,
    extra: &[&str],
    secs: u64,
) -> (Output, serde_json::Value) {
    let mut args = vec!["-J"];
    if !extra.contains(&"-i") {
        args.extend_from_slice(&["-i", "0"]);
    }
    args.extend_from_slice(extra);
    let o = run(send_cmd(port, key, src, dest, &args), secs);
    let v = serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "bad JSON ({e}); stdout: {} stderr: {}",
            text(&o.stdout),
            text(&o.stderr)
        )
    });
    (o, v)
}

/// A file of `size` bytes whose content depends on the offset: random 64 KiB blocks at the
/// start, every `stride` bytes and at the end; zeros elsewhere. The zeros are allocated
/// (`fallocate`: unwritten extents, nothing written): large files are cheap to make, and a
/// file without holes is sent in full, so the tests of large transfers move their full size.
/// (Where `fallocate` is not supported the zeros are holes.)
pub fn make_file(path: &Path, size: u64, stride: u64, seed: u64) {
    let f = File::create(path).unwrap();
    if size == 0 || rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::empty(), 0, size).is_err()
    {
        f.set_len(size).unwrap();
    }
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut block = vec![0u8; 64 * 1024];
    let mut fill = |f: &File, off: u64| {
        if off >= size {
            return;
        }
        for b in block.iter_mut() {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            *b = state as u8;
        }
        let n = (size - off).min(block.len() as u64) as usize;
        f.write_all_at(&block[..n], off).unwrap();
    };
    let mut off = 0;
    while off < size {
        fill(&f, off);
        off += stride.max(1);
    }
    if size > 0 {
        fill(&f, size.saturating_sub(64 * 1024));
        fill(&f, size - 1);
    }
}

/// A file of `size` random bytes (dense).
pub fn make_dense(path: &Path, size: u64, seed: u64) {
    make_file(path, size, 64 * 1024, seed);
}

/// Whether two files have the same bytes.
pub fn same_file(a: &Path, b: &Path) -> bool {
    let (fa, fb) = (File::open(a).unwrap(), File::open(b).unwrap());
    let len = fa.metadata().unwrap().len();
    if len != fb.metadata().unwrap().len() {
        return false;
    }
    let (mut x, mut y) = (vec![0u8; 8 << 20], vec![0u8; 8 << 20]);
    let mut off = 0;
    while off < len {
        let n = (len - off).min(x.len() as u64) as usize;
        fa.read_exact_at(&mut x[..n], off).unwrap();
        fb.read_exact_at(&mut y[..n], off).unwrap();
        if x[..n] != y[..n] {
            return false;
        }
        off += n as u64;
    }
    true
}

/// Every path below `dir`, relative, sorted, with its exact bytes.
pub fn tree_paths(dir: &Path) -> Vec<PathBuf> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let p = e.path();
                out.push(p.strip_prefix(base).unwrap().to_path_buf());
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    walk(base, &p, out);
                }
            }
        }
    }
    let mut v = Vec::new();
    walk(dir, dir, &mut v);
    v.sort();
    v
}

/// Every path below `dir`, relative, sorted.
pub fn tree(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
        if let Ok(rd) = std::fs::read_dir(dir) {
            for e in rd.flatten() {
                let p = e.path();
                out.push(p.strip_prefix(base).unwrap().to_string_lossy().into_owned());
                if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                    walk(base, &p, out);
                }
            }
        }
    }
    let mut v = Vec::new();
    walk(dir, dir, &mut v);
    v.sort();
    v
}

/// Waits until no `.zcp-*.part` file is left below `dir`.
pub fn no_partials(dir: &Path, secs: u64) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    loop {
        if !tree(dir)
            .iter()
            .any(|p| p.contains(".zcp-") && p.ends_with(".part"))
        {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A loopback TCP proxy in front of a server that flips one byte, once: the byte at offset
/// `at` of the client-to-server bytes of the `conn`-th connection (0 is the control
/// connection, 1 the first data stream). Everything else passes unchanged. Stops when dropped.
pub struct FlipProxy {
    pub port: u16,
    stop: Arc<std::sync::atomic::AtomicBool>,
    done: Arc<std::sync::atomic::AtomicBool>,
}

impl FlipProxy {
    pub fn start(server: u16, conn: usize, at: u64) -> FlipProxy {
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicBool::new(false));
        let (st, dn) = (stop.clone(), done.clone());
        std::thread::spawn(move || {
            let mut n = 0usize;
            let end = Instant::now() + Duration::from_secs(120);
            while !st.load(Ordering::Relaxed) && Instant::now() < end {
                let Ok((c, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                c.set_nonblocking(false).unwrap();
                let s = TcpStream::connect(("127.0.0.1", server)).unwrap();
                let flip = (n == conn).then(|| (at, dn.clone()));
                n += 1;
                let (c2, s2) = (c.try_clone().unwrap(), s.try_clone().unwrap());
                std::thread::spawn(move || pump(c, s, flip));
                std::thread::spawn(move || pump(s2, c2, None));
            }
        });
        FlipProxy { port, stop, done }
    }

    pub fn flipped(&self) -> bool {
        self.done.load(std::sync::atomic::Ordering::Relaxed)
    }
}

fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    flip: Option<(u64, Arc<std::sync::atomic::AtomicBool>)>,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut pos = 0u64;
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some((at, done)) = &flip
            && *at >= pos
            && *at < pos + n as u64
            && !done.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            buf[(*at - pos) as usize] ^= 0x01;
        }
        pos += n as u64;
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(std::net::Shutdown::Write);
}

impl Drop for FlipProxy {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A test skipped for want of a tool or a privilege that `.ci/run` provides (root, a package
/// it installs): says why, and notes it in the file `$ZCP_SKIP_LOG` names, with the test's
/// name, so that CI fails when anything was skipped there. (A host without a capability —
/// IPv6, O_DIRECT on its filesystem, a qdisc the kernel lacks — says so with `eprintln!`
/// and is not noted: CI cannot install those.)
pub fn skip(reason: &str) {
    eprintln!("skipped: {reason}");
    if let Some(log) = std::env::var_os("ZCP_SKIP_LOG") {
        let test = std::thread::current().name().unwrap_or("?").to_string();
        let line = format!("{test}: {reason}\n");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log);
        if let Ok(mut f) = f {
            let _ = std::io::Write::write_all(&mut f, line.as_bytes());
        }
    }
}

/// Whether `tool` is on `PATH`.
pub fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// Whether the tests run as root (mounts, namespaces).
pub fn is_root() -> bool {
    // The Uid line of /proc/self/status: real uid first.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .map(|l| l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false)
}

/// A small tmpfs mounted for the test and unmounted when dropped.
pub struct SmallFs(std::path::PathBuf);

impl SmallFs {
    pub fn mount(at: &Path, size: &str) -> Option<SmallFs> {
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "zcp-test"])
            .arg(at)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        ok.then(|| SmallFs(at.to_path_buf()))
    }

    /// [`SmallFs::mount`] for a test that needs it: `None`, with the reason printed, when not
    /// root (the test then returns, skipped). As root the fixture must work: a mount that
    /// fails panics, so a broken fixture never passes as "skipped".
    pub fn for_test(at: &Path, size: &str) -> Option<SmallFs> {
        if !is_root() {
            skip("mounting a small filesystem needs root");
            return None;
        }
        let fs = SmallFs::mount(at, size);
        assert!(
            fs.is_some(),
            "running as root, but a {size} tmpfs could not be mounted at {}",
            at.display()
        );
        fs
    }

    /// Grows (or shrinks) the filesystem in place, keeping its files.
    pub fn resize(&self, size: &str) -> bool {
        std::process::Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(&self.0)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

/// The slow path (4 KiB read/write calls into the page cache), so a kill lands mid-file.
pub const SLOW: [&str; 8] = [
    "--engine",
    "rw",
    "--recv-engine",
    "rw",
    "--block-size",
    "4K",
    "--chunk-size",
    "16M",
];

/// Durable bytes the journal beside `target` holds (0 without one).
pub fn journaled(target: &Path) -> u64 {
    let name = target.file_name().unwrap().as_encoded_bytes();
    let key = zcp_engine::fs::part_key(name);
    let Ok(bytes) = std::fs::read(target.with_file_name(format!(".zcp-{key}.journal"))) else {
        return 0;
    };
    let Ok(j) = zcp_wire::journal::decode_journal(&bytes) else {
        return 0;
    };
    let Ok(plan) = zcp_wire::ChunkPlan::new(j.header.size, j.header.chunk_size) else {
        return 0;
    };
    let chunks: std::collections::HashSet<u64> = j.chunks.iter().map(|c| c.index).collect();
    chunks.iter().map(|i| plan.chunk(*i).1).sum()
}

/// Waits (at most `secs`) until the receiver made at least one chunk of `target` durable.
pub fn wait_journaled(target: &Path, secs: u64) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if journaled(target) > 0 {
            return true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    false
}

/// Sends `sig` to a process.
pub fn signal(pid: u32, sig: i32) {
    // SAFETY: kill(2) on a child this test spawned; no memory is involved.
    #[allow(unsafe_code)]
    let rc = unsafe { libc::kill(pid as i32, sig) };
    assert_eq!(rc, 0, "kill {pid} {sig}");
}

/// A sender of `src` to `dest`, spawned with its output piped.
pub fn spawn_send(port: u16, key: &Path, src: &Path, dest: &str, extra: &[&str]) -> Child {
    send_cmd(port, key, src, dest, extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn zcp send")
}

/// `mkfifo path`, checked: a FIFO is there afterwards.
pub fn mkfifo(p: &Path) {
    use std::os::unix::fs::FileTypeExt;
    let o = Command::new("mkfifo").arg(p).output().unwrap();
    assert!(o.status.success(), "mkfifo {}: {}", p.display(), both(&o));
    assert!(p.symlink_metadata().unwrap().file_type().is_fifo());
}

/// A free TCP port on 127.0.0.1:: the kernel hands one out and the listener lets it go (free
/// for the test only in that sense).
/// A port on 127.0.0.1 that refuses connections for as long as the returned socket lives: it
/// is bound but never listens, so no other test can take it meanwhile (a port found free and
/// let go may be bound by a test running beside this one).
pub fn refusing_port() -> (std::os::fd::OwnedFd, u16) {
    use rustix::net::{AddressFamily, SocketType};
    let fd = rustix::net::socket(AddressFamily::INET, SocketType::STREAM, None).unwrap();
    let any: std::net::SocketAddr = "127.0.0.1:0".parse().unwrap();
    rustix::net::bind(&fd, &any).unwrap();
    let bound = std::net::SocketAddr::try_from(rustix::net::getsockname(&fd).unwrap()).unwrap();
    (fd, bound.port())
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}
