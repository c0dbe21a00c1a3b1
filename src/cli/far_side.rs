//! `zcp far-side` (hidden): the far side of `zcp send/get/ls [USER@]HOST:PATH`, started by ssh.
//! It reads the session's secret from its stdin (`zcp-secret HEX`: never on a command line,
//! where `ps` would show it), listens on the address the ssh connection reached
//! (`$SSH_CONNECTION`'s third field) at a port of its choosing (or of `--port-range`), says
//! so on its stdout (`zcp-ready PROTOCOL ADDR PORT`), and serves that one session beneath
//! its root as the ssh user. It exits when the session ends or when its stdin closes (the
//! client or ssh went away); its warnings and errors go to stderr, which ssh hands the client
//! (which shows them escaped).

use std::io::{BufRead, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use zcp_session::{AccessConfig, READY, SECRET, Server, ServerConfig};

use super::serve_log::{LogFormat, LogLevel};

/// How long the client may take to send the secret, and then to connect.
const WAIT: Duration = Duration::from_secs(30);

#[derive(Debug, Args)]
pub(crate) struct FarSideArgs {
    /// Where paths start: `.` (the login directory) or `/`.
    #[arg(long)]
    root: PathBuf,
    /// The session may delete (`--delete`): the ssh user's permissions decide.
    #[arg(long)]
    allow_delete: bool,
    /// Ports to listen on, A-B (the first free one); any by default.
    #[arg(long, value_name = "A-B", value_parser = super::conn::parse_port_range)]
    port_range: Option<(u16, u16)>,
    /// Seconds without progress before the session fails.
    #[arg(long, default_value_t = 60)]
    idle_timeout: u64,
}

pub(crate) fn run(a: FarSideArgs) -> anyhow::Result<i32> {
    super::serve_log::install(LogLevel::Warn, None, LogFormat::Plain);
    let secret = read_secret()?;
    let ip = listen_ip()?;
    let mut access = AccessConfig::single(a.root.clone(), secret);
    if a.allow_delete {
        access.allow_delete();
    }
    let mut cfg = ServerConfig::with_access(access);
    cfg.idle_timeout = Duration::from_secs(a.idle_timeout.max(1));
    cfg.handshake_timeout = WAIT;
    // The root may be `/`: no walk of it at start. The session runs as the ssh user, who
    // reaches what a symlinked directory reaches anyway: followed, as scp follows it.
    cfg.count_leftovers = false;
    cfg.follow_dir_links = true;
    let log: Arc<dyn zcp_session::ServerReporter> =
        Arc::new(zcp_report::ServerTrace::new(std::io::sink(), false));
    let server = bind(ip, a.port_range, cfg, log)?;
    let port = server.local_addr().port();
    let mut out = std::io::stdout().lock();
    writeln!(out, "{READY} {} {ip} {port}", zcp_wire::PROTOCOL_VERSION)?;
    out.flush()?;
    drop(out);
    let stop = Arc::new(AtomicBool::new(false));
    watch_stdin(stop.clone());
    Ok(server
        .run(&stop, true)
        .unwrap_or(zcp_session::exit::FAILURE))
}

/// The first line on stdin: `zcp-secret` and 64 hex digits.
fn read_secret() -> anyhow::Result<zcp_wire::Psk> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("zcp-secret".into())
        .spawn(move || {
            let mut line = String::new();
            let r = std::io::stdin().lock().read_line(&mut line);
            let _ = tx.send(r.map(|_| line));
        })?;
    let line = rx.recv_timeout(WAIT).map_err(|_| {
        anyhow::anyhow!(
            "no session secret on stdin within {} s: ssh must pass stdin through (no -n, no \
             StdinNull, no login script that reads it)",
            WAIT.as_secs()
        )
    })??;
    let hex = line
        .trim_end()
        .strip_prefix(SECRET)
        .map(str::trim)
        .ok_or_else(|| {
            anyhow::anyhow!(
                "no session secret on stdin (zcp far-side is started by `zcp send/get/ls \
                 HOST:PATH` over ssh, which passes it there; not by hand, and not through an ssh \
                 that gives it no stdin, such as ssh -n)"
            )
        })?;
    zcp_wire::Psk::parse(hex).map_err(|e| anyhow::anyhow!("the session secret: {e}"))
}

/// The address the ssh connection reached: `$SSH_CONNECTION`'s third field.
fn listen_ip() -> anyhow::Result<IpAddr> {
    let conn = std::env::var("SSH_CONNECTION").map_err(|_| {
        anyhow::anyhow!(
            "$SSH_CONNECTION is not set: zcp far-side runs under sshd, started by \
             `zcp send/get/ls HOST:PATH` (a --ssh-command that is not ssh must set it)"
        )
    })?;
    conn.split_whitespace()
        .nth(2)
        .and_then(|ip| ip.parse().ok())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "$SSH_CONNECTION ('{}') names no server address",
                zcp_wire::escape_text(&conn)
            )
        })
}

/// Listens on `ip`, at the first free port of `range` (any without one).
fn bind(
    ip: IpAddr,
    range: Option<(u16, u16)>,
    cfg: ServerConfig,
    log: Arc<dyn zcp_session::ServerReporter>,
) -> anyhow::Result<Server> {
    let Some((first, last)) = range else {
        return Ok(Server::bind(SocketAddr::new(ip, 0), cfg, log)?);
    };
    let mut last_error = None;
    for port in first..=last {
        match Server::bind(SocketAddr::new(ip, port), cfg.clone(), log.clone()) {
            Ok(s) => return Ok(s),
            Err(e) => last_error = Some(e),
        }
    }
    let why = last_error.map_or_else(String::new, |e| format!(" (the last: {e})"));
    anyhow::bail!("no free port in {first}-{last} on {ip}{why}: widen --port-range")
}

/// Sets `stop` once stdin reaches its end: ssh's channel closed, so the client is gone (or
/// done with this side).
fn watch_stdin(stop: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new()
        .name("zcp-stdin".into())
        .spawn(move || {
            // Anything more the client writes is ignored; only the end counts.
            let mut buf = [0u8; 256];
            let mut stdin = std::io::stdin().lock();
            while let Ok(1..) = std::io::Read::read(&mut stdin, &mut buf) {}
            stop.store(true, Ordering::Relaxed);
        });
    if spawned.is_err() {
        // Without the watcher the session still ends with its client, or its idle timeout.
        tracing::warn!("cannot watch stdin: this side ends with its session alone");
    }
}
