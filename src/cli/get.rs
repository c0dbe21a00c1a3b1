//! `zcp get`: pull files and trees from a server.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;
use zcp_session::{GetOptions, get};

use super::{ConnArgs, TransferArgs};

#[derive(Debug, Args)]
pub(crate) struct GetArgs {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(flatten)]
    transfer: TransferArgs,
    /// HOST:PATH... (relative to the server root, one host) then the local DEST: a directory
    /// that receives each path (made if missing), or for one path its new name.
    #[arg(value_name = "HOST:PATH... DEST", num_args = 2.., required = true)]
    args: Vec<OsString>,
}

pub(crate) fn run(a: GetArgs) -> anyhow::Result<i32> {
    let (dest, remote) = a.args.split_last().expect("clap requires two or more");
    let mut host: Option<String> = None;
    let mut paths = Vec::new();
    for r in remote {
        let (h, p) = match super::parse_target(r) {
            Ok(t) => t,
            Err(e) => {
                eprintln!("zcp: invalid HOST:PATH: {e}");
                return Ok(zcp_session::exit::USAGE);
            }
        };
        if host.as_ref().is_some_and(|known| *known != h) {
            eprintln!(
                "zcp: every HOST:PATH of one get must name the same host ({} and {h})",
                host.unwrap_or_default()
            );
            return Ok(zcp_session::exit::USAGE);
        }
        host = Some(h);
        paths.push(p);
    }
    let opts = GetOptions {
        conn: a.conn.connection(host.expect("at least one remote path"))?,
        transfer: a.transfer.transfer()?,
        paths,
        dest: PathBuf::from(dest),
    };
    let mut out = a.transfer.output();
    let r = get(&opts, out.reporter());
    Ok(super::outcome(&mut out, r, "get", a.transfer.retry))
}
