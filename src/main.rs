//! `zcp`: parse the command line, run one command, map its outcome to an exit code.
//!
//! Exit codes: 0 success; 1 failure (network, I/O, protocol); 2 bad usage; 3 key or
//! authentication problem; 4 the receiver refused the destination (path, space, permissions);
//! 5 integrity: the data did not verify or the source changed while being sent.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_max_level(args.log_level())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    // Trees keep hundreds of files open on each side; the default soft limit is too tight.
    zcp_engine::sys::raise_open_files_limit();
    let code = cli::run(args);
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
