//! `zcp serve`: the receiver.

use std::net::{IpAddr, SocketAddr};
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
    /// Address to listen on.
    #[arg(long, default_value = "0.0.0.0", value_name = "ADDR")]
    bind: IpAddr,
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
    let server = Server::bind(SocketAddr::new(a.bind, a.port), cfg, log)?;
    let stop = AtomicBool::new(false);
    // With --once, the session's own exit code: 0 only when every entry arrived.
    Ok(server.run(&stop, a.once).unwrap_or(zcp_session::exit::OK))
}
