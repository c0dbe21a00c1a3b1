//! `zcp serve`: the receiver.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Args;
use zcp_session::{AccessConfig, Fanout, Server, ServerConfig, ServerReporter};

use super::serve_log::{self, LogFormat, LogLevel};
use zcp_report::serve_config;

/// `zcp serve --help`'s examples, each a command line the tests parse.
pub(crate) const EXAMPLES: &str = "\
  zcp serve --root /data/incoming                  # all addresses, port 5310, ~/.config/zcp/key
  zcp serve --root /data/incoming --bind 10.0.0.2 -p 6000 --key-file /etc/zcp/key
  zcp serve --root /data/incoming --max-streams 8  # grant each session at most 8 streams
  zcp serve --root /tmp/in -p 0 --once             # any free port; one session, its exit code
  zcp serve --config /etc/zcp/zcp.toml             # exports and named keys; SIGHUP reloads
  zcp serve --check-config --config /etc/zcp/zcp.toml
  zcp serve --config /etc/zcp/zcp.toml --log-format json --transfer-log /var/log/zcp/t.jsonl
  zcp serve --config /etc/zcp/zcp.toml --metrics 127.0.0.1:9310  # Prometheus + status page";

#[derive(Debug, Clone, Args)]
#[command(after_help = super::after_help(EXAMPLES, true))]
pub(crate) struct ServeArgs {
    /// Directory to receive into; nothing is ever written outside it. (Or --config.)
    #[arg(
        long,
        value_name = "DIR",
        required_unless_present = "config",
        conflicts_with = "config"
    )]
    root: Option<PathBuf>,
    /// TOML file naming listen addresses, limits, exports and identities (keys, each with
    /// its access to each export); flags given here override its values. SIGHUP reloads its
    /// exports and identities.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Check the configuration (the --config file, or --root and the key), print what it
    /// serves to whom, and exit: 0 when it is sound, 2 with what to fix otherwise.
    #[arg(long)]
    check_config: bool,
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
    /// Port to listen on (0: any free port, printed on start) [default: 5310].
    #[arg(short = 'p', long)]
    port: Option<u16>,
    /// Pre-shared key file (default: $ZCP_KEY_FILE, then ~/.config/zcp/key).
    #[arg(long, value_name = "FILE", conflicts_with = "config")]
    key_file: Option<PathBuf>,
    /// With --root: let the key's holder push with --delete (remove what the client does
    /// not have inside the trees it sends). A --config file grants it per identity and
    /// export instead, as `read-write-delete`.
    #[arg(long, conflicts_with = "config")]
    allow_delete: bool,
    /// Refuse every session that is not encrypted (the client's --encrypt), before it
    /// stores a byte. A --config file says it as `require_encryption = true`, for the whole
    /// server or per identity.
    #[arg(long, conflicts_with = "config")]
    require_encryption: bool,
    /// Run one session (later clients are refused as busy), then exit; the exit code says
    /// whether it succeeded.
    #[arg(long)]
    once: bool,
    /// Most data streams per session [default: 16].
    #[arg(long, value_name = "N")]
    max_streams: Option<u16>,
    /// Most sessions at once [default: 16].
    #[arg(long, value_name = "N")]
    max_sessions: Option<usize>,
    /// End a session after this many seconds without traffic [default: 60].
    #[arg(long, value_name = "SECONDS")]
    idle_timeout: Option<u64>,
    /// Seconds a new connection has to authenticate [default: 10].
    #[arg(long, value_name = "SECONDS")]
    handshake_timeout: Option<u64>,
    /// Most connections still in their handshake at once; a newer one evicts the one that
    /// got least far, so a full table never refuses a client [default: 4096].
    #[arg(long, value_name = "N")]
    max_pending: Option<usize>,
    /// Most connections in their handshake from one source (an IPv4 address, an IPv6 /64);
    /// beyond it a newer one evicts that source's own [default: 256].
    #[arg(long, value_name = "N")]
    max_pending_per_source: Option<usize>,
    /// Least grave events logged: error, warn, info, debug or trace [default: info, or the
    /// config's log_level]; -v raises it.
    #[arg(long, value_enum, value_name = "LEVEL", hide_possible_values = true)]
    log_level: Option<LogLevel>,
    /// Log lines on standard error: plain (timestamp, level, message), json (one object per
    /// line), journal (a syslog priority prefix per line, no timestamp), or auto: journal
    /// when standard error is journald's stream, else plain [default: auto, or the config's
    /// log_format].
    #[arg(long, value_enum, value_name = "FORMAT", hide_possible_values = true)]
    log_format: Option<LogFormat>,
    /// Append one JSON line per file and per session to FILE, for accounting (or the
    /// config's transfer_log); SIGHUP reopens it, for logrotate.
    #[arg(long, value_name = "FILE")]
    transfer_log: Option<PathBuf>,
    /// Serve Prometheus metrics (/metrics) and a live status page (/) on this address, e.g.
    /// 127.0.0.1:9310 (overrides the config's `metrics`). No authentication: use loopback
    /// or a management network.
    #[arg(long, value_name = "ADDR")]
    metrics: Option<SocketAddr>,
}

/// The configuration in force: the file's (if any) with the command line over it.
struct Settings {
    access: AccessConfig,
    key_files: Vec<PathBuf>,
    listen: Option<Vec<SocketAddr>>,
}

/// Reads the exports and identities again: the config file, or `--root` and its key.
fn load_access(a: &ServeArgs) -> anyhow::Result<Settings> {
    settings_of(a, read_config(a)?)
}

/// The config file `--config` names, read and checked (none without `--config`).
fn read_config(a: &ServeArgs) -> anyhow::Result<Option<serve_config::ServeConfig>> {
    a.config
        .as_ref()
        .map(|p| serve_config::load(p).map_err(|m| anyhow::Error::new(super::Usage(m))))
        .transpose()
}

/// The exports, identities and addresses from the file already read, or from `--root`.
fn settings_of(a: &ServeArgs, file: Option<serve_config::ServeConfig>) -> anyhow::Result<Settings> {
    match (file, &a.root) {
        (Some(c), _) => Ok(Settings {
            access: c.access,
            key_files: c.key_files,
            listen: c.listen,
        }),
        (None, Some(root)) => {
            if !root.is_dir() {
                super::usage!(
                    "--root {} is not a directory; give the directory to receive into",
                    root.display()
                );
            }
            let (psk, key_file) = zcp_session::keyfile::load_key(a.key_file.as_deref())?;
            let mut access = AccessConfig::single(root.clone(), psk);
            if a.allow_delete {
                access.allow_delete();
            }
            if a.require_encryption {
                access.require_encryption();
            }
            Ok(Settings {
                access,
                key_files: vec![key_file],
                listen: None,
            })
        }
        (None, None) => super::usage!("give --root DIR or --config FILE"),
    }
}

pub(crate) fn run(a: ServeArgs, verbose: Option<tracing::Level>) -> anyhow::Result<i32> {
    // SIGHUP's handler first: a reload racing the start (`systemctl reload` right after
    // `start`) must not kill the server with the signal's default action.
    let _ = super::signals::on_hangup();
    // Read once: the limits below and the exports and identities come from one version of
    // the file.
    let file = read_config(&a)?;
    // The command line over the file over the defaults.
    let pick =
        |flag: Option<u64>, file: Option<u64>, default: u64| flag.or(file).unwrap_or(default);
    let f = file.as_ref();
    let max_streams = pick(
        a.max_streams.map(u64::from),
        f.and_then(|c| c.max_streams).map(u64::from),
        16,
    );
    let max_sessions = pick(
        a.max_sessions.map(|n| n as u64),
        f.and_then(|c| c.max_sessions).map(|n| n as u64),
        16,
    );
    let idle_timeout = pick(a.idle_timeout, f.and_then(|c| c.idle_timeout), 60);
    let handshake_timeout = pick(a.handshake_timeout, f.and_then(|c| c.handshake_timeout), 10);
    let max_pending = pick(
        a.max_pending.map(|n| n as u64),
        f.and_then(|c| c.max_pending),
        zcp_session::DEFAULT_MAX_PENDING as u64,
    );
    let max_pending_per_source = pick(
        a.max_pending_per_source.map(|n| n as u64),
        f.and_then(|c| c.max_pending_per_source),
        zcp_session::DEFAULT_MAX_PENDING_PER_SOURCE as u64,
    );
    let metrics = a.metrics.or(f.and_then(|c| c.metrics));
    let http = f.and_then(|c| c.http.clone());
    for (flag, v) in [
        ("--max-streams", max_streams),
        ("--max-sessions", max_sessions),
        ("--idle-timeout", idle_timeout),
        ("--handshake-timeout", handshake_timeout),
        ("--max-pending", max_pending),
        ("--max-pending-per-source", max_pending_per_source),
    ] {
        if v == 0 {
            super::usage!("{flag} must be at least 1");
        }
    }
    let logs = serve_log::Logs::pick(a.log_level, a.log_format, a.transfer_log.as_deref(), f);
    let journal = serve_log::install(logs.level, verbose, logs.format);
    let settings = settings_of(&a, file)?;
    let listen = listen_addrs(&a, settings.listen.clone());
    if a.check_config {
        print!(
            "{}",
            serve_config::summary(&settings.access, &settings.key_files)
        );
        let shown: Vec<String> = match &listen {
            Some(l) => l.iter().map(ToString::to_string).collect(),
            None => vec![format!(
                "[::]:{}",
                a.port.unwrap_or(zcp_session::DEFAULT_PORT)
            )],
        };
        println!("listen: {}", shown.join(", "));
        println!(
            "limits: {max_streams} streams per session, {max_sessions} sessions, idle timeout {idle_timeout} s, handshake timeout {handshake_timeout} s"
        );
        println!(
            "pending handshakes: at most {max_pending}, {max_pending_per_source} per source (newer ones evict older)"
        );
        println!("{}", logs.summary());
        match metrics {
            Some(m) => println!("metrics: http://{m}/metrics, status page http://{m}/"),
            None => println!("metrics: off"),
        }
        match &http {
            Some(h) => {
                super::serve_http::check(h)?;
                println!("{}", super::serve_http::describe(h));
            }
            None => println!("http: off"),
        }
        logs.check_transfer_log()?;
        println!("configuration OK");
        return Ok(zcp_session::exit::OK);
    }
    let mut cfg = ServerConfig::with_access(settings.access);
    cfg.max_streams = max_streams as u16;
    cfg.max_sessions = max_sessions as usize;
    cfg.idle_timeout = Duration::from_secs(idle_timeout);
    cfg.handshake_timeout = Duration::from_secs(handshake_timeout);
    cfg.max_pending = max_pending as usize;
    cfg.max_pending_per_source = max_pending_per_source as usize;
    let transfer_log = logs.open_transfer_log()?;
    // Every event goes to each of these, in order.
    let mut reporters: Vec<Arc<dyn ServerReporter>> = vec![Arc::new(zcp_report::ServerTrace::new(
        std::io::stdout(),
        journal,
    ))];
    let at_exit = transfer_log.clone();
    if let Some(t) = &transfer_log {
        reporters.push(t.clone());
    }
    // The monitor's address is bound before the server's: a bad one stops the start.
    if let Some(addr) = metrics {
        let listener = super::monitor::bind(addr)?;
        let monitor = Arc::new(zcp_report::Monitor::new());
        let shown = listener.local_addr().unwrap_or(addr);
        super::monitor::spawn(listener, monitor.clone())?;
        eprintln!(
            "zcp: metrics at http://{shown}/metrics, status page at http://{shown}/ \
             (no authentication: keep it on loopback or a management network)"
        );
        reporters.push(monitor);
    }
    let log: Arc<dyn ServerReporter> = Arc::new(Fanout(reporters));
    cfg.v6only = a.ipv6;
    let face = http.as_ref().map(super::serve_http::bind).transpose()?;
    let server = match listen {
        Some(addrs) => Server::bind_all(&addrs, cfg, log)?,
        None => bind_default(&a, cfg, log)?,
    };
    if let Some(face) = face {
        super::serve_http::start(face, &server)?;
    }
    // SIGINT or SIGTERM: accept nothing more, end the running sessions (their clients are
    // told, and what is durable stays for a resume), exit 0. A second signal exits at once.
    // SIGHUP: the exports and identities (and their keys) are read again.
    let caught = super::signals::stop_on_signals();
    let hangup = super::signals::on_hangup();
    // Under systemd (Type=notify): ready once listening, so units ordered after zcp start
    // when it accepts connections. Without $NOTIFY_SOCKET this does nothing.
    super::signals::notify_systemd(sd_notify::NotifyState::Ready);
    let stop = Arc::new(AtomicBool::new(false));
    {
        let stop = stop.clone();
        let reloader = server.reloader();
        let a = a.clone();
        std::thread::Builder::new()
            .name("zcp-signals".into())
            .spawn(move || {
                while caught.load(Ordering::Relaxed) == 0 {
                    if hangup.swap(false, Ordering::Relaxed) {
                        // logrotate moved it away: a new file at the path (before the
                        // reload's line, which tells that SIGHUP was handled).
                        if let Some(t) = &transfer_log {
                            t.reopen();
                        }
                        match load_access(&a) {
                            Ok(s) => {
                                // The error, if any, is reported by the reloader.
                                let _ = reloader.reload(&s.access);
                            }
                            Err(e) => reloader.failed(&format!("{e:#}")),
                        }
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                super::signals::notify_systemd(sd_notify::NotifyState::Stopping);
                stop.store(true, Ordering::Relaxed);
            })?;
    }
    // With --once, the session's own exit code: 0 only when every entry arrived.
    let code = server.run(&stop, a.once).unwrap_or(zcp_session::exit::OK);
    // The transfer log's last lines, unless its disk hangs.
    if let Some(t) = at_exit {
        t.flush(Duration::from_secs(2));
    }
    Ok(code)
}

/// The addresses to listen on when the command line or the file names them: `--bind`, `-4`
/// or `-6` replace the file's `listen`; `-p` alone keeps its addresses with the new port
/// (never widening a listener the file keeps to one address).
fn listen_addrs(a: &ServeArgs, file: Option<Vec<SocketAddr>>) -> Option<Vec<SocketAddr>> {
    let port = a.port.unwrap_or(zcp_session::DEFAULT_PORT);
    match (a.bind, a.ipv4, a.ipv6, a.port) {
        (Some(ip), ..) => Some(vec![SocketAddr::new(ip, port)]),
        (None, true, ..) => Some(vec![(Ipv4Addr::UNSPECIFIED, port).into()]),
        (None, false, true, _) => None,
        (None, false, false, Some(p)) => file.map(|l| {
            let mut out: Vec<SocketAddr> = Vec::new();
            for mut s in l {
                s.set_port(p);
                // One address on two ports in the file is one listener on this port.
                if !out.contains(&s) {
                    out.push(s);
                }
            }
            out
        }),
        (None, false, false, None) => file,
    }
}

/// `[::]` (dual-stack) on the port, or 0.0.0.0 where the host has no IPv6.
fn bind_default(
    a: &ServeArgs,
    cfg: ServerConfig,
    log: Arc<dyn ServerReporter>,
) -> anyhow::Result<Server> {
    let port = a.port.unwrap_or(zcp_session::DEFAULT_PORT);
    match Server::bind(
        (Ipv6Addr::UNSPECIFIED, port).into(),
        cfg.clone(),
        log.clone(),
    ) {
        Ok(s) => Ok(s),
        // No IPv6 on this host: IPv4 alone, unless -6 asked for IPv6.
        Err(e) if !a.ipv6 && no_ipv6(&e) => {
            eprintln!("zcp: this host has no IPv6; listening on IPv4 only");
            Ok(Server::bind(
                (Ipv4Addr::UNSPECIFIED, port).into(),
                cfg,
                log,
            )?)
        }
        Err(e) => Err(e.into()),
    }
}

/// Whether binding failed because the host has no IPv6.
fn no_ipv6(e: &zcp_session::SessionError) -> bool {
    use std::error::Error;
    e.source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .is_some_and(zcp_engine::sys::is_no_ipv6)
}
