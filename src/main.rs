//! `zcp`: parse the command line, run one command, map its outcome to an exit code.
//!
//! Exit codes: 0 success; 1 failure (network, I/O, protocol); 2 bad usage; 3 key or
//! authentication problem; 4 the receiver refused the destination (path, space, permissions);
//! 5 integrity: the data did not verify or the source changed while being sent.

mod cli;

use std::process::ExitCode;

use clap::error::{ContextKind, ContextValue, ErrorKind};

fn main() -> ExitCode {
    let args = match cli::Cli::parse_args(std::env::args_os()) {
        Ok(args) => args,
        // `-V`/`--version`: more than clap's one line, probed only when asked for.
        Err(e) if e.kind() == ErrorKind::DisplayVersion => {
            cli::print_version();
            return ExitCode::SUCCESS;
        }
        Err(e) => with_tip(e).exit(),
    };
    // `zcp serve` installs its own once its config file is read (--log-level, --log-format).
    if !args.logs_itself() {
        tracing_subscriber::fmt()
            .with_max_level(args.log_level())
            .with_writer(std::io::stderr)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .init();
    }
    // Trees keep hundreds of files open on each side; the default soft limit is too tight.
    zcp_engine::sys::raise_open_files_limit();
    let code = cli::run(args);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// clap's error, with a tip where its own words mislead: `send` and `get` take their paths
/// together, so a path after an option that split them is "unexpected".
fn with_tip(mut e: clap::Error) -> clap::Error {
    let paths = match std::env::args_os().nth(1) {
        Some(c) if c == "send" => "SRC... HOST:DEST",
        Some(c) if c == "get" => "HOST:PATH... DEST",
        _ => return e,
    };
    let stray = match e.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(a)) => !a.starts_with('-'),
        _ => false,
    };
    if e.kind() == ErrorKind::UnknownArgument && stray {
        let tip = format!("options go before or after {paths}, not between them");
        e.insert(
            ContextKind::Suggested,
            ContextValue::StyledStrs(vec![tip.into()]),
        );
    }
    e
}
