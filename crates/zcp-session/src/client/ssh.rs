//! Reaching a host over ssh (`zcp send FILE [USER@]HOST:PATH`): ssh starts zcp on the far
//! side (`zcp far-side`, a server for this one session), this side hands it a fresh session
//! secret over ssh's stdin (never on a command line), and the far side answers the address
//! and port it listens on — the address the ssh connection reached — on its stdout, after
//! whatever login scripts printed. The session then runs as with a daemon, its data flowing
//! directly between the hosts, not through ssh. The far side ends with its one session, or
//! when ssh's channel closes (this side closes its stdin when done).

use std::io::{BufRead, BufReader, Write};
use std::net::{IpAddr, SocketAddr};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, mpsc};
use std::time::{Duration, Instant};

use zcp_wire::{PROTOCOL_VERSION, Psk, escape_text};

use super::Connection;
use crate::error::SessionError;

/// What the far side prints, alone on a line, once it listens: `zcp-ready PROTOCOL ADDR PORT`.
pub const READY: &str = "zcp-ready";
/// What the far side reads first on its stdin: `zcp-secret HEX` (the session's 32-byte key).
pub const SECRET: &str = "zcp-secret";
/// What a session over ssh says of its data: ssh carried the key, not the bytes.
pub(crate) const IN_THE_CLEAR: &str = "over ssh with --no-encrypt: ssh carried the session's \
     key, but zcp leaves the data unencrypted (every byte is proved by keyed MACs, not hidden)";
/// Lines of login-script output before `zcp-ready` that are skipped, at most.
const MAX_NOISE_LINES: usize = 1000;

/// Where the far side's paths start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteRoot {
    /// The login directory (a relative path, as scp takes it).
    Home,
    /// `/` (an absolute path).
    Slash,
}

/// How to reach a host over ssh and start zcp there.
#[derive(Debug, Clone)]
pub struct Ssh {
    /// The ssh program and its options (`--ssh-command`, default `ssh`), as argv.
    pub command: Vec<String>,
    /// `[USER@]HOST`, as ssh takes it (`~/.ssh/config` applies).
    pub destination: String,
    /// What runs zcp there (`--remote-zcp`, default `zcp`): a shell fragment, as rsync's
    /// `--rsync-path` is.
    pub remote_zcp: String,
    /// Where the remote paths start.
    pub root: RemoteRoot,
    /// The far side may delete (`--delete` in a push): it runs as the ssh user, whose
    /// permissions decide.
    pub allow_delete: bool,
    /// Ports the far side may listen on (`--port-range`), for firewalls.
    pub port_range: Option<(u16, u16)>,
    /// When this host cannot connect to the far side directly within 5 s, carry
    /// the session through ssh instead (`false`: `--no-fallback`, an error).
    pub fallback: bool,
    /// Where ssh's and the far side's standard error go, a line at a time as it came (the
    /// caller escapes it before a terminal sees it); `None`: inherited as it is.
    pub stderr: Option<Relay>,
}

/// What takes a line.
pub type LineSink = dyn Fn(&[u8]) + Send + Sync;

/// Takes the lines of ssh's standard error.
#[derive(Clone)]
pub struct Relay(pub Arc<LineSink>);

impl std::fmt::Debug for Relay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Relay")
    }
}

/// How long a direct connection to the far side may take before the session goes through
/// ssh instead (its `--connect-timeout` if shorter).
pub(crate) const DIRECT_WAIT: Duration = Duration::from_secs(5);

/// A started far side: the address it listens on, the session's key, and ssh itself.
pub(crate) struct FarSide {
    child: Child,
    stdin: Option<ChildStdin>,
    pub(crate) addr: SocketAddr,
    pub(crate) psk: Psk,
    /// The session goes through ssh (no direct connection).
    tunnel: Option<super::tunnel::Tunnel>,
}

impl FarSide {
    /// The connection to the far side (or to the tunnel that carries it through ssh), with
    /// `base`'s timeouts.
    pub(crate) fn connection(&self, base: &Connection) -> Connection {
        let at = self.tunnel.as_ref().map_or(self.addr, |t| t.local);
        Connection {
            host: at.ip().to_string(),
            port: at.port(),
            psk: self.psk.clone(),
            ..base.clone()
        }
    }

    /// Whether the session goes through ssh.
    pub(crate) fn tunneled(&self) -> bool {
        self.tunnel.is_some()
    }

    /// Tries the far side directly, for [`DIRECT_WAIT`] at most; when that fails, carries
    /// the session through ssh (unless `--no-fallback`, or over UDP, which ssh cannot
    /// carry). Returns what the user must hear of it.
    pub(crate) fn route(
        &mut self,
        ssh: &Ssh,
        connect_timeout: Duration,
        udp: bool,
    ) -> Result<Option<String>, SessionError> {
        let wait = DIRECT_WAIT.min(connect_timeout);
        let why = match std::net::TcpStream::connect_timeout(&self.addr, wait) {
            Ok(_) => return Ok(None),
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {
                format!("no answer within {} s", wait.as_secs_f64())
            }
            Err(e) => e.to_string(),
        };
        let direct = format!(
            "zcp there listens on {}, the address the ssh connection reached, and this host \
             cannot connect to it ({why})",
            self.addr
        );
        if !ssh.fallback {
            return Err(ssh.fail(
                format!("{direct}; --no-fallback forbids carrying the session through ssh"),
                true,
            ));
        }
        if udp {
            return Err(ssh.fail(
                format!(
                    "{direct}; the UDP transport cannot go through ssh: leave out --transport \
                     udp to carry TCP streams through ssh, or open a port (--port-range)"
                ),
                true,
            ));
        }
        self.tunnel = Some(super::tunnel::Tunnel::start(ssh, self.addr)?);
        Ok(Some(format!(
            "{direct}: THE SESSION GOES THROUGH SSH instead, one ssh connection per zcp \
             connection — slower than the direct path (open a port with --port-range, or \
             --no-fallback to fail instead)"
        )))
    }
}

impl FarSide {
    /// Ends ssh now (the far side failed or never answered): asked first (SIGTERM lets ssh
    /// restore a terminal it set up for a password prompt), killed after a second.
    fn kill(&mut self) {
        drop(self.stdin.take());
        let _ = zcp_engine::sys::terminate(self.child.id());
        if wait_for(&mut self.child, Duration::from_secs(1)).is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Drop for FarSide {
    /// Closes ssh's stdin (the far side stops when its channel closes), waits a little for
    /// ssh to exit, then ends it.
    fn drop(&mut self) {
        drop(self.stdin.take());
        if wait_for(&mut self.child, Duration::from_secs(5)).is_none() {
            self.kill();
        }
    }
}

impl Ssh {
    /// The command ssh runs on the far side (one string: ssh hands it to the login shell).
    pub(crate) fn remote_command(&self, idle: Duration) -> String {
        let mut c = format!(
            "{} far-side --root {} --idle-timeout {}",
            self.remote_zcp,
            match self.root {
                RemoteRoot::Home => ".",
                RemoteRoot::Slash => "/",
            },
            idle.as_secs().max(1)
        );
        if self.allow_delete {
            c.push_str(" --allow-delete");
        }
        if let Some((a, b)) = self.port_range {
            c.push_str(&format!(" --port-range {a}-{b}"));
        }
        c
    }

    pub(crate) fn fail(&self, reason: String, retry: bool) -> SessionError {
        SessionError::Ssh {
            host: escape_text(&self.destination),
            reason,
            retry,
        }
    }

    /// Starts zcp on the far side and waits until it listens: three times `timeout` (ssh
    /// logs in, perhaps asking for a password, and starts zcp there).
    pub(crate) fn start(&self, timeout: Duration, idle: Duration) -> Result<FarSide, SessionError> {
        let timeout = timeout.saturating_mul(3);
        let Some((program, options)) = self.command.split_first() else {
            return Err(SessionError::Usage("--ssh-command names no program".into()));
        };
        let secret: [u8; 32] = zcp_engine::sys::random().map_err(|source| SessionError::Io {
            what: "getrandom".into(),
            source,
        })?;
        let mut child = Command::new(program)
            .args(options)
            .arg(&self.destination)
            .arg(self.remote_command(idle))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(match self.stderr {
                Some(_) => Stdio::piped(),
                None => Stdio::inherit(),
            })
            .spawn()
            .map_err(|e| {
                self.fail(
                    format!(
                        "cannot run {}: {e} (install OpenSSH's client, or name another with \
                         --ssh-command)",
                        escape_text(program)
                    ),
                    false,
                )
            })?;
        let mut stdin = child.stdin.take();
        if let Some(s) = &mut stdin {
            // A far side that already ended shows it on its stdout's end, below.
            let _ = writeln!(s, "{SECRET} {}", hex::encode(secret)).and_then(|()| s.flush());
        }
        let lines = read_lines(child.stdout.take());
        if let (Some(relay), Some(err)) = (self.stderr.clone(), child.stderr.take()) {
            relay_lines(err, relay);
        }
        let mut far = FarSide {
            child,
            stdin,
            addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            psk: Psk::from_bytes(secret),
            tunnel: None,
        };
        match self.await_ready(&mut far.child, &lines, timeout) {
            Ok(addr) => {
                far.addr = addr;
                Ok(far)
            }
            Err(e) => {
                far.kill();
                Err(e)
            }
        }
    }

    /// The far side's `zcp-ready` line, past any noise; or why it never came.
    fn await_ready(
        &self,
        child: &mut Child,
        lines: &mpsc::Receiver<String>,
        timeout: Duration,
    ) -> Result<SocketAddr, SessionError> {
        let until = Instant::now() + timeout;
        let mut noise = 0usize;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.trim_end().strip_prefix(READY) {
                        return self.ready(rest);
                    }
                    noise += 1;
                    if noise > MAX_NOISE_LINES {
                        return Err(self.fail(
                            format!(
                                "the far side printed {MAX_NOISE_LINES} lines and no \
                                 '{READY}' (is {} zcp?)",
                                escape_text(&self.remote_zcp)
                            ),
                            false,
                        ));
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(self.fail(
                        format!(
                            "zcp on the far side did not answer within {} s (ssh may be waiting \
                             for a password or a host key answer: set up key login, or raise \
                             --connect-timeout, of which this is three times)",
                            timeout.as_secs()
                        ),
                        true,
                    ));
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => return Err(self.ended(child)),
            }
        }
    }

    /// Parses what follows `zcp-ready`: the protocol, the address and the port.
    fn ready(&self, rest: &str) -> Result<SocketAddr, SessionError> {
        let f: Vec<&str> = rest.split_whitespace().collect();
        let bad = || {
            self.fail(
                format!(
                    "the far side's '{READY}' line is malformed: {}",
                    escape_text(rest)
                ),
                false,
            )
        };
        let [proto, ip, port] = f[..] else {
            return Err(bad());
        };
        let proto: u32 = proto.parse().map_err(|_| bad())?;
        if proto != u32::from(PROTOCOL_VERSION) {
            return Err(self.fail(
                format!(
                    "zcp there speaks protocol {proto} and this one {PROTOCOL_VERSION}: install \
                     the same zcp release on both hosts (or name another with --remote-zcp)"
                ),
                false,
            ));
        }
        let ip: IpAddr = ip.parse().map_err(|_| bad())?;
        let port: u16 = port.parse().map_err(|_| bad())?;
        let nowhere = match ip {
            IpAddr::V4(v4) => v4.is_unspecified() || v4.is_multicast() || v4.is_broadcast(),
            IpAddr::V6(v6) => v6.is_unspecified() || v6.is_multicast(),
        };
        if port == 0 || nowhere {
            return Err(bad());
        }
        Ok(SocketAddr::new(ip, port))
    }

    /// Why the far side ended before it was ready, from ssh's exit status.
    fn ended(&self, child: &mut Child) -> SessionError {
        let status = wait_for(child, Duration::from_secs(5)).and_then(|s| s.code());
        let zcp = escape_text(&self.remote_zcp);
        match status {
            Some(127) => self.fail(
                format!(
                    "zcp was not found there ('{zcp}': command not found): install zcp on that \
                     host (its .deb, or cargo install), or give its path with --remote-zcp"
                ),
                false,
            ),
            Some(126) => self.fail(
                format!("'{zcp}' there cannot be run (not executable): check --remote-zcp"),
                false,
            ),
            Some(2) => self.fail(
                "zcp there refused how it was started (exit status 2): it may be older than \
                 this one; install the same zcp release on both hosts (or name another with \
                 --remote-zcp)"
                    .into(),
                false,
            ),
            Some(255) => self.fail(
                "ssh failed (exit status 255; its own message is above)".into(),
                true,
            ),
            Some(code) => self.fail(
                format!(
                    "zcp there ended with status {code} before it listened (its message is \
                     above)"
                ),
                false,
            ),
            None => self.fail(
                "ssh closed its output before zcp there listened".into(),
                true,
            ),
        }
    }
}

/// Hands each line `err` prints to `relay`, from a thread of its own, until its end.
pub(crate) fn relay_lines(err: std::process::ChildStderr, relay: Relay) {
    let spawned = std::thread::Builder::new()
        .name("zcp-ssh-err".into())
        .spawn(move || {
            let mut r = BufReader::new(err);
            let mut buf = Vec::new();
            while let Ok(1..) = std::io::Read::take(&mut r, 4096).read_until(b'\n', &mut buf) {
                (relay.0)(&buf);
                buf.clear();
            }
        });
    drop(spawned);
}

/// The lines `out` prints, as they come, from a thread of their own (which then drains the
/// rest, so the far side never blocks on a full pipe).
fn read_lines(out: Option<std::process::ChildStdout>) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    if let Some(out) = out {
        let spawned = std::thread::Builder::new()
            .name("zcp-ssh-out".into())
            .spawn(move || {
                let mut r = BufReader::new(out);
                let mut buf = Vec::new();
                // Lines are clipped at 4 KiB: noise cannot grow memory.
                while let Ok(n) = std::io::Read::take(&mut r, 4096).read_until(b'\n', &mut buf) {
                    if n == 0 {
                        return;
                    }
                    let line = String::from_utf8_lossy(&buf).into_owned();
                    buf.clear();
                    let _ = tx.send(line);
                }
            });
        drop(spawned);
    }
    rx
}

/// The child's exit status once it exits within `limit`; `None` if it does not.
pub(crate) fn wait_for(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let until = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(s)) => return Some(s),
            Ok(None) if Instant::now() < until => std::thread::sleep(Duration::from_millis(20)),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ssh(command: &[&str], remote_zcp: &str) -> Ssh {
        Ssh {
            command: command.iter().map(|s| s.to_string()).collect(),
            destination: "somewhere".into(),
            remote_zcp: remote_zcp.into(),
            root: RemoteRoot::Home,
            allow_delete: false,
            port_range: None,
            fallback: true,
            stderr: None,
        }
    }

    /// A stand-in for ssh: `sh -c SCRIPT somewhere REMOTE` runs SCRIPT with the destination
    /// and the remote command as its arguments.
    fn fake(script: &str) -> Ssh {
        ssh(&["sh", "-c", script], "zcp")
    }

    fn start(s: &Ssh) -> Result<FarSide, SessionError> {
        s.start(Duration::from_secs(5), Duration::from_secs(5))
    }

    #[test]
    fn the_remote_command_says_where_paths_start_and_what_is_allowed() {
        let mut s = ssh(&["ssh"], "/opt/zcp/bin/zcp");
        assert_eq!(
            s.remote_command(Duration::from_secs(60)),
            "/opt/zcp/bin/zcp far-side --root . --idle-timeout 60"
        );
        s.root = RemoteRoot::Slash;
        s.allow_delete = true;
        s.port_range = Some((50000, 50010));
        assert_eq!(
            s.remote_command(Duration::from_secs(9)),
            "/opt/zcp/bin/zcp far-side --root / --idle-timeout 9 --allow-delete --port-range 50000-50010"
        );
    }

    #[test]
    fn noise_before_the_ready_line_is_skipped_and_the_secret_comes_on_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let got = dir.path().join("secret");
        let script = format!(
            "read s; echo \"$s\" > {}; echo 'Welcome!'; echo; echo '{READY} {PROTOCOL_VERSION} 127.0.0.1 4242'; cat >/dev/null",
            got.display()
        );
        let far = start(&fake(&script)).unwrap();
        assert_eq!(far.addr, "127.0.0.1:4242".parse().unwrap());
        let secret = std::fs::read_to_string(&got).unwrap();
        let hex = secret.trim().strip_prefix("zcp-secret ").unwrap();
        assert_eq!(hex.len(), 64);
        assert_eq!(
            Psk::parse(hex).unwrap().to_file_text(),
            far.psk.to_file_text()
        );
        // Dropping it closes stdin: the stand-in's `cat` ends, and so does it.
        drop(far);
    }

    #[test]
    fn why_the_far_side_never_listened_is_said_with_its_fix() {
        let cases = [
            ("exit 127", "install zcp on that host"),
            ("exit 126", "cannot be run"),
            ("exit 255", "ssh failed"),
            ("exit 3", "ended with status 3"),
            (
                &*format!("echo '{READY} 999 127.0.0.1 1'"),
                "speaks protocol 999",
            ),
            (
                &*format!("echo '{READY} {PROTOCOL_VERSION} nowhere 1'"),
                "malformed",
            ),
            (
                &*format!("echo '{READY} {PROTOCOL_VERSION} 0.0.0.0 7'"),
                "malformed",
            ),
            (
                &*format!("echo '{READY} {PROTOCOL_VERSION} 224.0.0.1 7'"),
                "malformed",
            ),
            (
                &*format!("echo '{READY} {PROTOCOL_VERSION} :: 7'"),
                "malformed",
            ),
            ("exit 2", "older than this one"),
        ];
        for (script, says) in cases {
            let e = start(&fake(script)).err().expect(script).to_string();
            assert!(e.contains(says), "{script}: {e}");
            assert!(e.contains("somewhere"), "{script}: names the host: {e}");
        }
        let e = start(&ssh(&["/nonexistent/ssh"], "zcp")).err().unwrap();
        assert!(e.to_string().contains("--ssh-command"), "{e}");
        assert!(!e.retryable());
        assert!(start(&fake("exit 255")).err().unwrap().retryable());
    }

    #[test]
    fn a_far_side_that_never_answers_is_given_up_on() {
        let t0 = Instant::now();
        let s = fake("sleep 30");
        let e = s
            .start(Duration::from_millis(300), Duration::from_secs(5))
            .err()
            .unwrap();
        assert!(e.to_string().contains("did not answer"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(10));
    }
}
