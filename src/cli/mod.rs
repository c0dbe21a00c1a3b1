//! The command-line surface: one file per subcommand, shared argument parsers here. Flag
//! letters follow iperf3 where the meaning matches (`-p`, `-i`, `-J`); targets follow scp
//! (`HOST:PATH`, `[v6addr]:PATH`) or are `zcp://` URLs (target.rs).

mod bench;
mod clean;
mod demo;
mod doctor;
mod far_side;
mod filter;
mod generate;
mod get;
mod keygen;
mod ls;
mod monitor;
mod output;
mod rate;
mod raw;
mod recv;
mod send;
mod serve;
mod serve_log;
mod signals;
mod target;
mod transfer;
mod version;

use transfer::TransferArgs;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use zcp_engine::{RecvEngine, SendEngine};
use zcp_session::SessionError;

pub(crate) use target::parse_target;
pub(crate) use version::print_version;

/// `zcp --help`'s examples, each a command line the tests parse.
const EXAMPLES: &str = "\
  zcp demo                                         # try it on loopback: 1 GiB, verified
  zcp send big.h5 dtn2:/data/                      # over ssh: zcp started there for the
                                                   # session, the data sent directly
  zcp send -r -P 4 run42/ alice@dtn2:archive/      # a tree, 4 streams, into ~alice/archive
  zcp get dtn2:/data/run42/big.h5 .                # the other direction
  zcp keygen -o ~/.config/zcp/key                  # a daemon: once; copy the key over
  zcp serve --root /data/incoming                  # ... on the receiving host
  zcp send -r run42/ dtn2::run42/                  # ... and to it, with the key
  zcp clean --older-than 7d /data/incoming         # remove abandoned partial files

Targets: [USER@]HOST:PATH over ssh (relative to the login directory, or absolute), HOST::PATH
or zcp://HOST[:PORT]/PATH to a zcp serve daemon (relative to its --root or exports).
`zcp COMMAND --help` has more examples.";

const EXIT_CODES: &str = "\
0 success; 1 failure (network, I/O, protocol); 2 bad usage;
3 key or authentication problem; 4 the receiver refused the destination;
5 integrity: the data did not verify or the source changed while being sent;
23 partial: some entries arrived and others did not (each is named);
130, 143: stopped by SIGINT (Ctrl-C) or SIGTERM, what is durable kept (zcp serve
exits 0 on the first signal, and 130 or 143 at once on a second).";

/// The closing sections of a help text: `examples` and, if `exit_codes`, the exit codes,
/// headed as clap heads its own sections. The examples' first line comes unindented (a `\`
/// continuation eats the leading spaces) and is given the others' indent here.
fn after_help(examples: &str, exit_codes: bool) -> clap::builder::StyledStr {
    let h = clap::builder::Styles::styled().get_header().to_owned();
    let mut text = format!("{h}Examples:{h:#}\n  {}", examples.trim_start());
    if exit_codes {
        text.push_str(&format!("\n\n{h}Exit codes:{h:#} {EXIT_CODES}"));
    }
    text.into()
}

/// A usage mistake found before any work: exit code 2, with what to fix.
#[derive(Debug)]
pub(crate) struct Usage(pub(crate) String);

impl std::fmt::Display for Usage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Usage {}

/// Fails with a usage mistake (exit code 2).
macro_rules! usage {
    ($($arg:tt)*) => {
        return Err(anyhow::Error::new($crate::cli::Usage(format!($($arg)*))))
    };
}
pub(crate) use usage;

/// Move very large files between Linux hosts with the kernel's zero-copy paths, verified
/// with keyed BLAKE3 and stored durably.
#[derive(Debug, Parser)]
#[command(name = "zcp", version, after_help = after_help(EXAMPLES, true))]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
    /// More output: -v lists every file that arrives and logs info on standard error, -vv
    /// debug, -vvv trace.
    #[arg(
        short = 'v',
        long = "verbose",
        action = clap::ArgAction::Count,
        global = true,
        display_order = 900
    )]
    verbose: u8,
}

impl Cli {
    /// Parses a command line (the program's name first), keeping the order of the filter
    /// flags, which clap's derive alone does not.
    pub(crate) fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::{CommandFactory, FromArgMatches};
        let m = Cli::command().try_get_matches_from(args)?;
        let mut cli = Cli::from_arg_matches(&m)?;
        if let Some((_, sub)) = m.subcommand() {
            let transfer = match &mut cli.command {
                Command::Send(a) => Some(&mut a.transfer),
                Command::Get(a) => Some(&mut a.transfer),
                Command::Demo(a) => Some(&mut a.transfer),
                _ => None,
            };
            if let Some(t) = transfer {
                t.filter.order(sub);
            }
            if let Command::Ls(a) = &mut cli.command {
                a.filter.order(sub);
            }
        }
        Ok(cli)
    }

    /// The log level -v asks for (warnings and errors by default).
    pub(crate) fn log_level(&self) -> tracing::Level {
        match self.verbose {
            0 => tracing::Level::WARN,
            1 => tracing::Level::INFO,
            2 => tracing::Level::DEBUG,
            _ => tracing::Level::TRACE,
        }
    }

    /// The level `-v` asks for, when it was given (`serve`'s `--log-level` stands otherwise).
    pub(crate) fn verbose_given(&self) -> Option<tracing::Level> {
        (self.verbose > 0).then(|| self.log_level())
    }

    /// Whether the command sets up its own log (`serve`: from its flags and config file).
    pub(crate) fn logs_itself(&self) -> bool {
        matches!(self.command, Command::Serve(_))
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the whole job on loopback: server, generated file, transfer, verification, report.
    Demo(demo::DemoArgs),
    /// Write a new random pre-shared key to a file (mode 0600).
    Keygen(keygen::KeygenArgs),
    /// Receive files beneath a root directory (and serve them to `zcp get`).
    Serve(serve::ServeArgs),
    /// Send files and directory trees to a server.
    Send(send::SendArgs),
    /// Fetch files and directory trees from a server.
    Get(get::GetArgs),
    /// List what a server holds beneath paths this key may read, or the exports it may use.
    Ls(ls::LsArgs),
    /// Take one bare TCP stream (nc, a Java client, zcp send --raw) into a file, durably.
    /// No authentication.
    Recv(recv::RecvArgs),
    /// Benchmark the copy mechanisms on this host: the source documents' experiments.
    Bench(bench::BenchArgs),
    /// Inspect this host's tuning for fast transfers (read-only) and print the exact fixes.
    Doctor(doctor::DoctorArgs),
    /// List and remove the partial files (.zcp-*.part, .zcp-*.journal) interrupted transfers
    /// left beneath a directory.
    Clean(clean::CleanArgs),
    /// Write man pages, or print shell completions, generated from these very definitions.
    Generate(generate::GenerateArgs),
    /// One side of one benchmark run (started by `zcp bench`).
    #[command(hide = true)]
    BenchSide(bench::BenchSideArgs),
    /// A chart from a benchmark script's CSV (`benches/udp.sh` runs it).
    #[command(hide = true)]
    BenchChart(bench::BenchChartArgs),
    /// The far side of `zcp send/get HOST:PATH`, started over ssh.
    #[command(hide = true)]
    FarSide(far_side::FarSideArgs),
}

/// Runs the command; returns the process exit code.
pub(crate) fn run(cli: Cli) -> i32 {
    let verbose = cli.verbose_given();
    output::files(verbose.is_some());
    let result = match cli.command {
        Command::Demo(a) => demo::run(a),
        Command::Keygen(a) => keygen::run(a),
        Command::Serve(a) => serve::run(a, verbose),
        Command::Send(a) => send::run(a),
        Command::Get(a) => get::run(a),
        Command::Ls(a) => ls::run(a),
        Command::Recv(a) => recv::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Doctor(a) => doctor::run(a),
        Command::Clean(a) => clean::run(a),
        Command::Generate(a) => generate::run(a),
        Command::BenchSide(a) => bench::run_side(a),
        Command::BenchChart(a) => bench::run_chart(a),
        Command::FarSide(a) => far_side::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            let (code, text) = if let Some(s) = e.downcast_ref::<SessionError>() {
                // Its own text already names the cause: `{:#}` would repeat it.
                (s.exit_code(), s.to_string())
            } else if e.downcast_ref::<Usage>().is_some() {
                (zcp_session::exit::USAGE, e.to_string())
            } else {
                (zcp_session::exit::FAILURE, format!("{e:#}"))
            };
            eprintln!("zcp: {}", zcp_wire::escape_text(&text));
            code
        }
    }
}

/// The chosen output format.
enum Output {
    Human(zcp_report::Human<std::io::Stdout>),
    Bar(zcp_report::ProgressReport<zcp_report::Human<std::io::Stdout>>),
    Json(zcp_report::JsonDoc<std::io::Stdout>),
    Stream(zcp_report::JsonStream<std::io::Stdout>),
    Quiet(ErrorsOnly),
}

/// `-q`: entries that failed, on standard error; nothing else.
struct ErrorsOnly;

impl zcp_session::Reporter for ErrorsOnly {
    fn event(&mut self, event: &zcp_session::Event) {
        if let zcp_session::Event::Failed(f) = event {
            eprintln!(
                "zcp: failed: {}: {} [{}]",
                zcp_wire::escape_text(&f.path),
                zcp_wire::escape_text(&f.message),
                f.code
            );
        }
    }
}

impl Output {
    fn reporter(&mut self) -> &mut dyn zcp_session::Reporter {
        match self {
            Output::Human(h) => h,
            Output::Bar(b) => b,
            Output::Json(j) => j,
            Output::Stream(s) => s,
            Output::Quiet(q) => q,
        }
    }

    /// Reports a failure in the output's own format. Returns whether it was reported on
    /// stdout (JSON), so the caller need not repeat it.
    fn fail(&mut self, e: &SessionError, code: i32) -> bool {
        match self {
            Output::Quiet(_) => false,
            Output::Human(h) => {
                h.finish();
                false
            }
            Output::Bar(b) => {
                b.clear();
                b.inner_mut().finish();
                false
            }
            Output::Json(j) => {
                j.fail(&e.to_string(), code);
                true
            }
            Output::Stream(s) => {
                s.fail(&e.to_string(), code);
                true
            }
        }
    }
}

fn parse_send_engine(s: &str) -> Result<SendEngine, String> {
    SendEngine::parse(s).ok_or_else(|| {
        let names: Vec<_> = SendEngine::ALL.iter().map(|e| e.name()).collect();
        format!(
            "unknown sender engine '{s}'; choose one of: {}",
            names.join(", ")
        )
    })
}

fn parse_recv_engine(s: &str) -> Result<RecvEngine, String> {
    RecvEngine::parse(s).ok_or_else(|| {
        let names: Vec<_> = RecvEngine::ALL.iter().map(|e| e.name()).collect();
        format!(
            "unknown receiver engine '{s}'; choose one of: {}",
            names.join(", ")
        )
    })
}

fn parse_transport(s: &str) -> Result<zcp_session::TransportKind, String> {
    use zcp_session::TransportKind as T;
    T::parse(s).ok_or_else(|| {
        let names: Vec<_> = T::ALL.iter().map(|t| t.name()).collect();
        format!(
            "unknown transport '{s}'; choose one of: {}",
            names.join(", ")
        )
    })
}

fn parse_udp_mode(s: &str) -> Result<zcp_session::UdpMode, String> {
    use zcp_session::UdpMode as M;
    M::parse(s).ok_or_else(|| {
        let names: Vec<_> = M::ALL.iter().map(|m| m.name()).collect();
        format!(
            "unknown UDP mode '{s}'; choose one of: {}",
            names.join(", ")
        )
    })
}

fn parse_verify(s: &str) -> Result<zcp_session::VerifyMode, String> {
    zcp_session::VerifyMode::parse(s).ok_or_else(|| {
        let names: Vec<_> = zcp_session::VerifyMode::ALL
            .iter()
            .map(|m| m.name())
            .collect();
        format!(
            "unknown verify mode '{s}'; choose one of: {}",
            names.join(", ")
        )
    })
}

/// Parses `4096`, `64K`, `1M`, `1G`, `1GiB`, `2T` (binary multiples).
pub(crate) fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size (examples: 4096, 64K, 1M, 4G)"))?;
    let shift = match unit.to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "K" | "KB" | "KIB" => 10,
        "M" | "MB" | "MIB" => 20,
        "G" | "GB" | "GIB" => 30,
        "T" | "TB" | "TIB" => 40,
        _ => {
            return Err(format!(
                "'{s}' has an unknown unit '{unit}' (use K, M, G or T)"
            ));
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("'{s}' is too large"))
}

/// Most data streams one transfer may ask for.
const MAX_STREAMS: u16 = 64;

/// Connection flags shared by `send` and `get`.
#[derive(Debug, Clone, Args)]
struct ConnArgs {
    /// Server port [default: 5310, or the port a zcp:// target names].
    #[arg(short = 'p', long)]
    port: Option<u16>,
    /// Pre-shared key file (default: $ZCP_KEY_FILE, then ~/.config/zcp/key).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Seconds allowed to connect and authenticate.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    connect_timeout: u64,
    /// Fail after this many seconds without progress or word from the peer.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    idle_timeout: u64,
    /// The program (and its options) that reaches HOST in a [USER@]HOST:PATH target, as
    /// rsync's -e: ~/.ssh/config applies [default: ssh].
    #[arg(short = 'e', long, value_name = "CMD")]
    ssh_command: Option<String>,
    /// What runs zcp on the far side of ssh, as rsync's --rsync-path [default: zcp].
    #[arg(long, value_name = "PATH")]
    remote_zcp: Option<String>,
    /// Ports the far side of ssh may listen on (A-B), for firewalls; any by default.
    #[arg(long, value_name = "A-B", value_parser = parse_port_range)]
    port_range: Option<(u16, u16)>,
}

/// `--port-range A-B`: 1 <= A <= B.
fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("'{s}' is not a port range: write A-B, 1 <= A <= B <= 65535");
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let (a, b): (u16, u16) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
    if a == 0 || a > b {
        return Err(bad());
    }
    Ok((a, b))
}

impl ConnArgs {
    /// How to reach `target`: over ssh (its login, and the far side's root and path) or a
    /// daemon. An old daemon-style call (`-p`/`--key-file` with `HOST:PATH`) is refused,
    /// naming the new form; ssh's flags with a daemon's target too.
    fn reach(
        &self,
        target: &target::Target,
        allow_delete: bool,
    ) -> anyhow::Result<(zcp_session::Connection, Option<zcp_session::Ssh>, Vec<u8>)> {
        let Some(login) = &target.ssh else {
            if self.ssh_command.is_some() || self.remote_zcp.is_some() || self.port_range.is_some()
            {
                usage!(
                    "--ssh-command, --remote-zcp and --port-range are for [USER@]HOST:PATH \
                     targets (one ':'), which go over ssh; this one names a zcp serve daemon"
                );
            }
            let conn = self.connection(target.host.clone(), target.port)?;
            return Ok((conn, None, target.path.clone()));
        };
        if self.port.is_some() || self.key_file.is_some() {
            usage!(
                "{host}:PATH now reaches {host} over ssh, where zcp is started for the session; \
                 -p and --key-file are for a zcp serve daemon: write {host}::PATH or \
                 zcp://{host}:PORT/PATH for the daemon, or leave out -p/--key-file to go over ssh",
                host = zcp_wire::escape_text(&target.host)
            );
        }
        let command = match &self.ssh_command {
            None => vec!["ssh".to_string()],
            Some(c) => match shell_words::split(c) {
                Ok(w) if !w.is_empty() => w,
                Ok(_) => usage!("--ssh-command is empty: name the program, e.g. 'ssh -p 2222'"),
                Err(e) => usage!("--ssh-command: {e}"),
            },
        };
        // Absolute paths start at `/` there, others at the login directory, as scp's do.
        let (root, path) = match target.path.iter().position(|b| *b != b'/') {
            _ if target.path.first() != Some(&b'/') => {
                (zcp_session::RemoteRoot::Home, target.path.clone())
            }
            Some(at) => (zcp_session::RemoteRoot::Slash, target.path[at..].to_vec()),
            None => (zcp_session::RemoteRoot::Slash, b".".to_vec()),
        };
        let ssh = zcp_session::Ssh {
            command,
            destination: login.clone(),
            remote_zcp: self.remote_zcp.clone().unwrap_or_else(|| "zcp".into()),
            root,
            allow_delete,
            port_range: self.port_range,
        };
        // The key and port come from the far side on each try.
        let conn = self.timeouts(
            target.host.clone(),
            0,
            zcp_wire::Psk::from_bytes([0x5a; 32]),
        )?;
        Ok((conn, Some(ssh), path))
    }

    /// [`ConnArgs::reach`] for a get's targets (one host, reached one way). Over ssh their
    /// paths must all be absolute or all relative: the far side has one root.
    fn reach_all(
        &self,
        remote: &get::Remote,
    ) -> anyhow::Result<(
        zcp_session::Connection,
        Option<zcp_session::Ssh>,
        Vec<Vec<u8>>,
    )> {
        let mut paths = Vec::with_capacity(remote.paths.len());
        let mut first: Option<(zcp_session::Connection, Option<zcp_session::Ssh>)> = None;
        for p in &remote.paths {
            let t = target::Target {
                host: remote.host.clone(),
                port: remote.port,
                path: p.clone(),
                ssh: remote.ssh.clone(),
            };
            let (conn, ssh, path) = self.reach(&t, false)?;
            if let (Some((_, Some(a))), Some(b)) = (&first, &ssh)
                && a.root != b.root
            {
                usage!(
                    "over ssh the paths of one get must be all absolute or all relative to the \
                     login directory"
                );
            }
            first.get_or_insert((conn, ssh));
            paths.push(path);
        }
        let (conn, ssh) = first.expect("clap requires at least one HOST:PATH");
        Ok((conn, ssh, paths))
    }

    /// The connection to `host`; `url_port` is the port its zcp:// target named, if any.
    fn connection(
        &self,
        host: String,
        url_port: Option<u16>,
    ) -> anyhow::Result<zcp_session::Connection> {
        let port = match (self.port, url_port) {
            (Some(p), Some(u)) if p != u => {
                usage!("-p {p} and the zcp:// target's port {u} disagree; give the port once")
            }
            (p, u) => u.or(p).unwrap_or(zcp_session::DEFAULT_PORT),
        };
        if port == 0 {
            usage!(
                "-p/--port 0 names no server; give the port zcp serve listens on (default {})",
                zcp_session::DEFAULT_PORT
            );
        }
        let psk = key_arg(&self.key_file)?;
        self.timeouts(host, port, psk)
    }

    /// A connection to `host:port` with `psk` and the timeouts asked for.
    fn timeouts(
        &self,
        host: String,
        port: u16,
        psk: zcp_wire::Psk,
    ) -> anyhow::Result<zcp_session::Connection> {
        if self.connect_timeout == 0 {
            usage!("--connect-timeout must be at least 1 second");
        }
        if self.idle_timeout == 0 {
            usage!("--idle-timeout must be at least 1 second");
        }
        Ok(zcp_session::Connection {
            host,
            port,
            psk,
            connect_timeout: std::time::Duration::from_secs(self.connect_timeout),
            idle_timeout: std::time::Duration::from_secs(self.idle_timeout),
        })
    }
}

/// Reports a finished transfer's outcome as an exit code: 0 only when every entry arrived.
fn outcome(
    out: &mut Output,
    r: Result<zcp_session::Summary, SessionError>,
    what: &str,
    t: &TransferArgs,
) -> i32 {
    // With --verify none nothing is journaled: there is no resume to promise.
    let resumes = t.verify != zcp_session::VerifyMode::None;
    match r {
        Ok(s) if s.failed == 0 => 0,
        Ok(s) => {
            // Failures past the kept list count as plain failures.
            let unlisted = (s.failed as usize > s.failures.len()).then_some("internal");
            let code = zcp_session::exit::for_failures(
                s.failures.iter().map(|f| f.code).chain(unlisted),
                s.files + s.entries > 0,
            );
            let first = s
                .failures
                .first()
                .map(|f| format!("; first: {}: {}", f.path, f.message))
                .unwrap_or_default();
            eprintln!(
                "zcp: {what}: {} entr{} did not arrive{}",
                s.failed,
                if s.failed == 1 { "y" } else { "ies" },
                zcp_wire::escape_text(&first)
            );
            code
        }
        Err(e) => {
            // Stopped by a signal (even while connecting): 128 + its number.
            let code = signals::caught().map_or(e.exit_code(), |s| 128 + s);
            out.fail(&e, code);
            eprintln!("zcp: {}", zcp_wire::escape_text(&e.to_string()));
            if !resumes && (e.retryable() || matches!(e, SessionError::Stopped { .. })) {
                eprintln!(
                    "zcp: with --verify none nothing is kept for a resume: the same command \
                     sends everything again (leave --verify at blake3 to resume)"
                );
            } else if let SessionError::Stopped { durable, .. } = e {
                let held = durable.map_or(String::new(), |d| {
                    format!(
                        "{} verified and durable on the receiver; ",
                        zcp_report::units::size(d)
                    )
                });
                eprintln!(
                    "zcp: {held}run the same command again to resume (only what is missing \
                     is sent)"
                );
            } else if let SessionError::Connect { source, .. } = &e {
                // No connection, so nothing was sent: there is nothing to resume.
                eprintln!("zcp: nothing was sent; {}", connect_hint(source.kind()));
            } else if e.retryable() {
                eprintln!(
                    "zcp: what the receiver verified is kept: run the same command again to \
                     resume{}",
                    if t.retry > 0 {
                        ""
                    } else {
                        " (or add --retry N)"
                    }
                );
            }
            code
        }
    }
}

/// What to check when no connection could be made, by why.
fn connect_hint(kind: std::io::ErrorKind) -> String {
    use std::io::ErrorKind as K;
    let port = zcp_session::DEFAULT_PORT;
    match kind {
        K::ConnectionRefused => format!(
            "nothing listens at that address: is `zcp serve` running on that host, and is the \
             port right (-p; the default is {port})?"
        ),
        K::TimedOut => "check the host name, the port (-p) and any firewall between; \
                        --connect-timeout waits longer"
            .into(),
        K::NotFound => "check the host name".into(),
        K::HostUnreachable | K::NetworkUnreachable => {
            "check the host name and this host's network route to it".into()
        }
        _ => format!(
            "check that `zcp serve` runs on that host and the port (-p; the default is {port})"
        ),
    }
}

/// The exit code of a bare byte stream (`send --raw`, `recv`), its failure reported.
fn raw_outcome(out: &mut Output, r: Result<(), SessionError>) -> i32 {
    match r {
        Ok(()) => 0,
        Err(e) => {
            let code = signals::caught().map_or(e.exit_code(), |s| 128 + s);
            out.fail(&e, code);
            eprintln!("zcp: {}", zcp_wire::escape_text(&e.to_string()));
            code
        }
    }
}

/// `--key-file` as given, else the environment and the default location.
fn key_arg(path: &Option<PathBuf>) -> Result<zcp_wire::Psk, SessionError> {
    zcp_session::keyfile::load_key(path.as_deref()).map(|(k, _)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("1GiB"), Ok(1 << 30));
        assert_eq!(parse_size("2t"), Ok(2 << 40));
        assert!(parse_size("1.5G").is_err());
        assert!(parse_size("12Q").unwrap_err().contains("unknown unit"));
        assert!(
            parse_size("99999999999T")
                .unwrap_err()
                .contains("too large")
        );
    }

    /// `(command, examples)` for every help text that has examples.
    const ALL_EXAMPLES: [(&str, &str); 12] = [
        ("", EXAMPLES),
        ("demo", demo::EXAMPLES),
        ("keygen", keygen::EXAMPLES),
        ("serve", serve::EXAMPLES),
        ("send", send::EXAMPLES),
        ("get", get::EXAMPLES),
        ("ls", ls::EXAMPLES),
        ("bench", bench::EXAMPLES),
        ("doctor", doctor::EXAMPLES),
        ("clean", clean::EXAMPLES),
        ("recv", recv::EXAMPLES),
        ("generate", generate::EXAMPLES),
    ];

    /// The words of one example line, as a shell would split them (single quotes only),
    /// without its `# comment`.
    fn words(line: &str) -> Vec<String> {
        let command = line.split(" #").next().unwrap_or_default();
        let mut words = Vec::new();
        let (mut word, mut quoted, mut any) = (String::new(), false, false);
        for c in command.chars() {
            match c {
                '\'' => (quoted, any) = (!quoted, true),
                c if c.is_whitespace() && !quoted => {
                    if any {
                        words.push(std::mem::take(&mut word));
                    }
                    any = false;
                }
                c => {
                    word.push(c);
                    any = true;
                }
            }
        }
        assert!(!quoted, "unbalanced quote in {line:?}");
        if any {
            words.push(word);
        }
        words
    }

    #[test]
    fn every_example_is_a_command_line_zcp_accepts() {
        let mut seen = 0;
        for (command, examples) in ALL_EXAMPLES {
            let mut own = 0;
            for line in examples
                .lines()
                .filter(|l| l.trim_start().starts_with("zcp "))
            {
                let args = words(line);
                assert!(
                    command.is_empty() || args[1] == command,
                    "{command}: {line:?} belongs to another command"
                );
                let cli = Cli::parse_args(&args)
                    .unwrap_or_else(|e| panic!("{line:?} does not parse:\n{e}"));
                // The targets, too: an example never shows a spelling zcp refuses.
                match &cli.command {
                    Command::Send(_) => {
                        parse_target(std::ffi::OsStr::new(args.last().unwrap())).unwrap();
                    }
                    Command::Get(_) => {
                        for t in &args[2..args.len() - 1] {
                            if !t.starts_with('-') && t.contains(':') {
                                parse_target(std::ffi::OsStr::new(t)).unwrap();
                            }
                        }
                    }
                    _ => {}
                }
                own += 1;
            }
            assert!(own >= 3, "{command}: {own} examples");
            seen += own;
        }
        assert!(seen >= 30, "{seen} examples");
    }

    #[test]
    fn example_words_split_as_a_shell_would() {
        assert_eq!(
            words("  zcp send  a '[::1]:b c'   # comment"),
            ["zcp", "send", "a", "[::1]:b c"]
        );
        assert_eq!(words("zcp x ''"), ["zcp", "x", ""]);
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
