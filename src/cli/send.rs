//! `zcp send`: push files and trees to a server.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;
use zcp_session::{SendOptions, send};

use super::{ConnArgs, TransferArgs};

#[derive(Debug, Args)]
pub(crate) struct SendArgs {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(flatten)]
    transfer: TransferArgs,
    /// Files (and with -r directories) to send, then HOST:DEST, relative to the server root.
    /// One file: DEST may name the file, or a directory (DEST/ or existing) that receives it.
    /// Several sources or -r: DEST is a directory, made if missing; each source lands inside.
    #[arg(value_name = "SRC... HOST:DEST", num_args = 2.., required = true)]
    args: Vec<OsString>,
}

pub(crate) fn run(a: SendArgs) -> anyhow::Result<i32> {
    let (target, sources) = a.args.split_last().expect("clap requires two or more");
    let (host, dest) = match super::parse_target(target) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("zcp: invalid HOST:DEST: {e}");
            return Ok(zcp_session::exit::USAGE);
        }
    };
    let opts = SendOptions {
        conn: a.conn.connection(host)?,
        transfer: a.transfer.transfer()?,
        sources: sources.iter().map(PathBuf::from).collect(),
        dest,
    };
    let mut out = a.transfer.output();
    let r = send(&opts, out.reporter());
    Ok(super::outcome(&mut out, r, "send", a.transfer.retry))
}
