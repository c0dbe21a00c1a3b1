//! The command-line surface: one file per subcommand, shared argument parsers here. Flag
//! letters follow iperf3 where the meaning matches (`-p`, `-i`, `-J`); targets follow scp
//! (`HOST:PATH`, `[v6addr]:PATH`) or are `zcp://` URLs (target.rs).

mod bench;
mod clean;
mod conn;
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
mod serve_http;
mod serve_log;
mod signals;
mod target;
mod token;
mod transfer;
mod version;

use transfer::TransferArgs;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use zcp_engine::{RecvEngine, SendEngine};
use zcp_session::SessionError;

use conn::ConnArgs;
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
    /// Print a bearer token for `zcp serve`'s HTTPS/WebDAV face (its config's `[http]` section).
    Token(token::TokenArgs),
    /// Fetch files and directory trees from a server.
    Get(get::GetArgs),
    /// List what a host holds beneath paths (over ssh, or on a daemon what this key may read), or a daemon's exports.
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
    /// The far side of `zcp send/get/ls HOST:PATH`, started over ssh.
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
        Command::Token(a) => token::run(a),
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
    const ALL_EXAMPLES: [(&str, &str); 13] = [
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
        ("token", token::EXAMPLES),
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
