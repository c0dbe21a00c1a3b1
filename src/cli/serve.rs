//! `zcp serve`: the receiver.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use clap::Args;
use zcp_session::{Server, ServerConfig};

/// `zcp serve --help`'s examples, each a command line the tests parse.
pub(crate) const EXAMPLES: &str = "\
  zcp serve --root /data/incoming                  # all addresses, port 5310, ~/.config/zcp/key
  zcp serve --root /data/incoming --bind 10.0.0.2 -p 6000 --key-file /etc/zcp/key
  zcp serve --root /data/incoming --max-streams 8  # grant each session at most 8 streams
  zcp serve --root /tmp/in -p 0 --once             # any free port; one session, its exit code";

#[derive(Debug, Args)]
#[command(after_help = super::after_help(EXAMPLES, true))]
pub(crate) struct ServeArgs {
    /// Directory to receive into; nothing is ever written outside it.
    #[arg(long, value_name = "DIR")]
    root: PathBuf,
    #[arg(
        long,
        value_name = "ADDR",
        conflicts_with_all = ["ipv4", "ipv6"],
        help = "Address to listen on (default: [::], IPv6 and IPv4 alike; 0.0.0.0 where the \
                host has no IPv6)"
    )]
    bind: Option<IpAddr>,
    /// Listen on IPv4 only (0.0.0.0).
    #[arg(short = '4', long = "ipv4", conflicts_with = "ipv6")]
    ipv4: bool,
    #[arg(
        short = '6',
        long = "ipv6",
        help = "Listen on IPv6 only ([::] with IPV6_V6ONLY)"
    )]
    ipv6: bool,
    /// Port to listen on (0: any free port, printed on start).
    #[arg(short = 'p', long, default_value_t = zcp_session::DEFAULT_PORT)]
    port: u16,
    /// Pre-shared key file (default: $ZCP_KEY_FILE, then ~/.config/zcp/key).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Run one session (later clients are refused as busy), then exit; the exit code says
    /// whether it succeeded.
    #[arg(long)]
    once: bool,
    /// Most data streams per session.
    #[arg(long, default_value_t = 16, value_name = "N")]
    max_streams: u16,
    /// Most sessions at once.
    #[arg(long, default_value_t = 16, value_name = "N")]
    max_sessions: usize,
    /// End a session after this many seconds without traffic.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    idle_timeout: u64,
    /// Seconds a new connection has to authenticate.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    handshake_timeout: u64,
}

pub(crate) fn run(a: ServeArgs) -> anyhow::Result<i32> {
    if !a.root.is_dir() {
        super::usage!(
            "--root {} is not a directory; give the directory to receive into",
            a.root.display()
        );
    }
    for (flag, v) in [
        ("--max-streams", u64::from(a.max_streams)),
        ("--max-sessions", a.max_sessions as u64),
        ("--idle-timeout", a.idle_timeout),
        ("--handshake-timeout", a.handshake_timeout),
    ] {
        if v == 0 {
            super::usage!("{flag} must be at least 1");
        }
    }
    let psk = super::key_arg(&a.key_file)?;
    let mut cfg = ServerConfig::new(a.root.clone(), psk);
    cfg.max_streams = a.max_streams;
    cfg.max_sessions = a.max_sessions;
    cfg.idle_timeout = Duration::from_secs(a.idle_timeout);
    cfg.handshake_timeout = Duration::from_secs(a.handshake_timeout);
    let log = Arc::new(zcp_report::ServerLog::new(
        std::io::stdout(),
        std::io::stderr(),
    ));
    cfg.v6only = a.ipv6;
    let server = match (a.bind, a.ipv4) {
        (Some(ip), _) => Server::bind(SocketAddr::new(ip, a.port), cfg, log)?,
        (None, true) => Server::bind((Ipv4Addr::UNSPECIFIED, a.port).into(), cfg, log)?,
        (None, false) => {
            match Server::bind(
                (Ipv6Addr::UNSPECIFIED, a.port).into(),
                cfg.clone(),
                log.clone(),
            ) {
                Ok(s) => s,
                // No IPv6 on this host: IPv4 alone, unless -6 asked for IPv6.
                Err(e) if !a.ipv6 && no_ipv6(&e) => {
                    eprintln!("zcp: this host has no IPv6; listening on IPv4 only");
                    Server::bind((Ipv4Addr::UNSPECIFIED, a.port).into(), cfg, log)?
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    // SIGINT or SIGTERM: accept nothing more, end the running sessions (their clients are
    // told, and what is durable stays for a resume), exit 0. A second signal exits at once.
    let caught = super::signals::stop_on_signals();
    // Under systemd (Type=notify): ready once listening, so units ordered after zcp start
    // when it accepts connections. Without $NOTIFY_SOCKET this does nothing.
    super::signals::notify_systemd(sd_notify::NotifyState::Ready);
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("zcp-signals".into())
            .spawn(move || {
                while caught.load(std::sync::atomic::Ordering::Relaxed) == 0 {
                    std::thread::sleep(Duration::from_millis(50));
                }
                super::signals::notify_systemd(sd_notify::NotifyState::Stopping);
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
            })?;
    }
    // With --once, the session's own exit code: 0 only when every entry arrived.
    Ok(server.run(&stop, a.once).unwrap_or(zcp_session::exit::OK))
}

/// Whether binding failed because the host has no IPv6.
fn no_ipv6(e: &zcp_session::SessionError) -> bool {
    use std::error::Error;
    e.source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .is_some_and(zcp_engine::sys::is_no_ipv6)
}
