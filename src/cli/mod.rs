//! The command-line surface: one file per subcommand, shared argument parsers here. Flag
//! letters follow iperf3 where the meaning matches (`-p`, `-i`, `-J`); targets follow scp
//! (`HOST:PATH`, `[v6addr]:PATH`).

mod bench;
mod demo;
mod doctor;
mod get;
mod keygen;
mod rate;
mod send;
mod serve;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use zcp_engine::{RecvEngine, SendEngine};
use zcp_session::SessionError;

const AFTER_HELP: &str = "\
Exit codes: 0 success; 1 failure (network, I/O, protocol); 2 bad usage;
3 key or authentication problem; 4 the receiver refused the destination;
5 integrity: the data did not verify or the source changed while being sent;
23 partial: some entries arrived and others did not (each is named).";

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
#[command(name = "zcp", version, after_help = AFTER_HELP)]
pub(crate) struct Cli {
    #[command(subcommand)]
    command: Command,
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
    /// Benchmark the copy mechanisms on this host: the source documents' experiments.
    Bench(bench::BenchArgs),
    /// Inspect this host's tuning for fast transfers (read-only) and print the exact fixes.
    Doctor(doctor::DoctorArgs),
    /// One side of one benchmark run (started by `zcp bench`).
    #[command(hide = true)]
    BenchSide(bench::BenchSideArgs),
}

/// Runs the command; returns the process exit code.
pub(crate) fn run(cli: Cli) -> i32 {
    let result = match cli.command {
        Command::Demo(a) => demo::run(a),
        Command::Keygen(a) => keygen::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Send(a) => send::run(a),
        Command::Get(a) => get::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Doctor(a) => doctor::run(a),
        Command::BenchSide(a) => bench::run_side(a),
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

/// Engine and transfer-shape flags shared by `send` and `demo`.
#[derive(Debug, Clone, Args)]
struct TransferArgs {
    /// Sender engine: sendfile, rw (read/write), mmap or splice (file -> pipe -> socket).
    #[arg(long, default_value = "sendfile", value_parser = parse_send_engine)]
    engine: SendEngine,
    /// Receiver engine: auto, splice, direct (O_DIRECT), rw, null (discard, no copy) or mem
    /// (read into memory and discard).
    #[arg(long, default_value = "auto", value_parser = parse_recv_engine)]
    recv_engine: RecvEngine,
    /// Bytes per read/write/sendfile/splice call on both sides (suffixes K, M, G); 0 lets each
    /// engine choose.
    #[arg(long, default_value = "0", value_parser = parse_size, value_name = "BYTES")]
    block_size: u64,
    /// Chunk size (suffixes K, M, G): the unit of verification, resume and scheduling over
    /// streams; default grows with the file.
    #[arg(long, value_parser = parse_size, value_name = "BYTES")]
    chunk_size: Option<u64>,
    /// Parallel data streams (TCP connections, 1 to 64); chunks of every file are spread over
    /// them. (The port is -p.)
    #[arg(short = 'P', long = "parallel", default_value_t = 1, value_name = "N")]
    streams: u16,
    /// Descend into directories: send (or get) whole trees.
    #[arg(short = 'r', long)]
    recursive: bool,
    /// Seconds between interval reports; 0 for none.
    #[arg(short = 'i', long, default_value = "1", value_name = "SECONDS")]
    interval: f64,
    /// Print one JSON document at the end instead of the text report.
    #[arg(short = 'J', long, conflicts_with = "json_stream")]
    json: bool,
    /// Print one JSON object per line as events happen.
    #[arg(long)]
    json_stream: bool,
    /// Cap the transfer at RATE bits per second over all streams, as iperf3's -b: 500M, 2G,
    /// 1.5G (K, M, G, T are powers of 1000). In a get the server holds the cap.
    #[arg(long, value_name = "RATE", value_parser = rate::parse_rate)]
    limit_rate: Option<u64>,
}

impl TransferArgs {
    /// The session's transfer settings.
    fn transfer(&self) -> anyhow::Result<zcp_session::Transfer> {
        if self.streams == 0 {
            usage!("-P/--parallel takes 1 to {MAX_STREAMS} streams, got 0");
        }
        if self.streams > MAX_STREAMS {
            usage!(
                "-P/--parallel takes 1 to {MAX_STREAMS} streams, got {}; the port is -p (lowercase)",
                self.streams
            );
        }
        if let Some(cs) = self.chunk_size
            && let Err(e) = zcp_wire::ChunkPlan::new(0, cs)
        {
            usage!("--chunk-size {cs}: {e}");
        }
        Ok(zcp_session::Transfer {
            engine: self.engine,
            recv_engine: self.recv_engine,
            block_size: self.block_size,
            chunk_size: self.chunk_size,
            streams: self.streams,
            recursive: self.recursive,
            interval: self.interval()?,
            limit_rate: self.limit_rate,
        })
    }

    fn interval(&self) -> anyhow::Result<Option<std::time::Duration>> {
        if !self.interval.is_finite() || self.interval < 0.0 {
            usage!(
                "-i/--interval takes a number of seconds >= 0, got {}",
                self.interval
            );
        }
        Ok((self.interval > 0.0)
            .then(|| std::time::Duration::from_secs_f64(self.interval.max(0.01))))
    }

    /// The reporter the output flags ask for, writing to stdout.
    fn output(&self) -> Output {
        if self.json {
            Output::Json(zcp_report::JsonDoc::new(std::io::stdout()))
        } else if self.json_stream {
            Output::Stream(zcp_report::JsonStream::new(std::io::stdout()))
        } else {
            Output::Human(zcp_report::Human::new(std::io::stdout()))
        }
    }
}

/// The chosen output format.
enum Output {
    Human(zcp_report::Human<std::io::Stdout>),
    Json(zcp_report::JsonDoc<std::io::Stdout>),
    Stream(zcp_report::JsonStream<std::io::Stdout>),
}

impl Output {
    fn reporter(&mut self) -> &mut dyn zcp_session::Reporter {
        match self {
            Output::Human(h) => h,
            Output::Json(j) => j,
            Output::Stream(s) => s,
        }
    }

    /// Reports a failure in the output's own format. Returns whether it was reported on
    /// stdout (JSON), so the caller need not repeat it.
    fn fail(&mut self, e: &SessionError) -> bool {
        match self {
            Output::Human(_) => false,
            Output::Json(j) => {
                j.fail(&e.to_string(), e.exit_code());
                true
            }
            Output::Stream(s) => {
                s.fail(&e.to_string(), e.exit_code());
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

/// `HOST:PATH` or `[IPV6]:PATH`, as scp writes them. `HOST:` alone means the server root.
/// The path keeps its exact bytes (Linux names need not be UTF-8); the host must be text.
pub(crate) fn parse_target(arg: &std::ffi::OsStr) -> Result<(String, Vec<u8>), String> {
    use std::os::unix::ffi::OsStrExt;
    let raw = arg.as_bytes();
    let shown = zcp_wire::escape(raw);
    let (host, path) = if let Some(rest) = raw.strip_prefix(b"[") {
        let close = rest
            .iter()
            .position(|b| *b == b']')
            .ok_or_else(|| format!("{shown}: an IPv6 address needs a closing ']'"))?;
        let path = rest[close + 1..]
            .strip_prefix(b":")
            .ok_or_else(|| format!("{shown}: expected ':' after ']' (write [ADDR]:PATH)"))?;
        (&rest[..close], path)
    } else {
        let colon = raw
            .iter()
            .position(|b| *b == b':')
            .ok_or_else(|| format!("{shown} is not HOST:PATH (write host:dir/ or host:file)"))?;
        (&raw[..colon], &raw[colon + 1..])
    };
    let host = std::str::from_utf8(host).map_err(|_| format!("{shown}: the host is not text"))?;
    if host.is_empty() {
        return Err(format!("{shown} has no host before ':'"));
    }
    let path = if path.is_empty() { b"." } else { path };
    Ok((host.to_string(), path.to_vec()))
}

/// Most data streams one transfer may ask for.
const MAX_STREAMS: u16 = 64;

/// Connection flags shared by `send` and `get`.
#[derive(Debug, Clone, Args)]
struct ConnArgs {
    /// Server port.
    #[arg(short = 'p', long, default_value_t = zcp_session::DEFAULT_PORT)]
    port: u16,
    /// Pre-shared key file (default: $ZCP_KEY_FILE, then ~/.config/zcp/key).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    /// Seconds allowed to connect and authenticate.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    connect_timeout: u64,
    /// Fail after this many seconds without progress or word from the peer.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    idle_timeout: u64,
}

impl ConnArgs {
    fn connection(&self, host: String) -> anyhow::Result<zcp_session::Connection> {
        if self.port == 0 {
            usage!(
                "-p/--port 0 names no server; give the port zcp serve listens on (default {})",
                zcp_session::DEFAULT_PORT
            );
        }
        if self.connect_timeout == 0 {
            usage!("--connect-timeout must be at least 1 second");
        }
        if self.idle_timeout == 0 {
            usage!("--idle-timeout must be at least 1 second");
        }
        let psk = key_arg(&self.key_file)?;
        Ok(zcp_session::Connection {
            host,
            port: self.port,
            psk,
            connect_timeout: std::time::Duration::from_secs(self.connect_timeout),
            idle_timeout: std::time::Duration::from_secs(self.idle_timeout),
        })
    }
}

/// Reports a finished transfer's outcome as an exit code: 0 only when every entry arrived.
fn outcome(out: &mut Output, r: Result<zcp_session::Summary, SessionError>, what: &str) -> i32 {
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
            let code = e.exit_code();
            out.fail(&e);
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

    #[test]
    fn targets() {
        use std::os::unix::ffi::OsStrExt;
        let t = |s: &[u8]| parse_target(std::ffi::OsStr::from_bytes(s));
        assert_eq!(t(b"host:dir/f"), Ok(("host".into(), b"dir/f".to_vec())));
        assert_eq!(t(b"[::1]:x"), Ok(("::1".into(), b"x".to_vec())));
        assert_eq!(t(b"h:"), Ok(("h".into(), b".".to_vec())));
        assert_eq!(t(b"h:a:b"), Ok(("h".into(), b"a:b".to_vec())));
        assert_eq!(
            t(b"h:odd\xffname"),
            Ok(("h".into(), b"odd\xffname".to_vec()))
        );
        assert!(t(b"nocolon").is_err());
        assert!(t(b":x").is_err());
        assert!(t(b"[::1]x").is_err());
    }

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
