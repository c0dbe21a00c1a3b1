//! `zcp send`: push one file to a server.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use zcp_session::{SendOptions, send_file};

use super::TransferArgs;

#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    /// Server port.
    #[arg(short = 'p', long, default_value_t = zcp_session::DEFAULT_PORT)]
    port: u16,
    /// Pre-shared key file (default: $ZCP_KEY_FILE, then ~/.config/zcp/key).
    #[arg(long, value_name = "FILE")]
    key_file: Option<PathBuf>,
    #[command(flatten)]
    transfer: TransferArgs,
    /// Seconds allowed to connect and authenticate.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    connect_timeout: u64,
    /// Fail after this many seconds without progress or word from the receiver.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    idle_timeout: u64,
    /// The file to send.
    #[arg(value_name = "SRC")]
    source: PathBuf,
    /// Where to: HOST:PATH relative to the server root (HOST:dir/ keeps the source's name).
    #[arg(value_name = "HOST:DEST")]
    target: std::ffi::OsString,
}

pub(crate) fn run(a: SendArgs) -> anyhow::Result<i32> {
    let psk = super::key_arg(&a.key_file)?;
    if a.connect_timeout == 0 || a.idle_timeout == 0 {
        anyhow::bail!("--connect-timeout and --idle-timeout must be above 0");
    }
    let (host, dest) = match super::parse_target(&a.target) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("zcp: invalid HOST:DEST: {e}");
            return Ok(zcp_session::exit::USAGE);
        }
    };
    let opts = SendOptions {
        host,
        port: a.port,
        psk,
        source: a.source,
        dest,
        engine: a.transfer.engine,
        recv_engine: a.transfer.recv_engine,
        block_size: a.transfer.block_size,
        chunk_size: a.transfer.chunk_size,
        interval: a.transfer.interval()?,
        connect_timeout: Duration::from_secs(a.connect_timeout),
        idle_timeout: Duration::from_secs(a.idle_timeout),
    };
    let mut out = a.transfer.output();
    match send_file(&opts, out.reporter()) {
        Ok(_) => Ok(0),
        Err(e) => {
            let code = e.exit_code();
            out.fail(&e);
            eprintln!("zcp: {e}");
            Ok(code)
        }
    }
}
