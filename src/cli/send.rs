//! `zcp send`: push files and trees to a server.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;
use zcp_session::{SendOptions, send};

use super::{ConnArgs, TransferArgs};

/// `zcp send --help`'s examples, each a command line the tests parse.
pub(crate) const EXAMPLES: &str = "\
  zcp send big.h5 dtn.example.org:/data/run42/     # over ssh: stores /data/run42/big.h5
  zcp send big.h5 alice@dtn.example.org:run42/a.h5 # ... as alice, in her home, a new name
  zcp send -e 'ssh -p 2222' --remote-zcp /opt/zcp/bin/zcp big.h5 dtn.example.org:run42/
                                                   # another ssh port, zcp not on the PATH
  zcp send -r -P 4 run42/ obs/ dtn.example.org::archive
                                                   # to a zcp serve daemon, with the key:
                                                   # two trees, 4 parallel streams
  zcp send -r --delete-dry-run run42 dtn.example.org::archive/
                                                   # what --delete would remove there
  zcp send -r --delete run42 dtn.example.org::archive/
                                                   # mirror: remove what run42 no longer has
  zcp send --key-file ~/keys/dtn.key -p 6000 big.h5 dtn.example.org::
                                                   # another key and port; into the root
  zcp send big.h5 zcp://dtn.example.org:6000/run42/
                                                   # the same target as a URL
  zcp send big.h5 '[2001:db8::7]::run42/'          # an IPv6 address goes in brackets
  zcp send -J big.h5 dtn.example.org::run42/       # the report as one JSON document
  zcp send -q --retry 5 big.h5 dtn.example.org:run42/
                                                   # for cron: errors only; runs ssh again,
                                                   # reconnects and resumes up to 5 times
  zcp send --raw big.h5 dtn.example.org:9000       # the bare bytes to any listener (nc -l):
                                                   # no key, nothing verified
  zcp send --transport udp -P 4 big.h5 dtn.example.org::run42/
                                                   # paced UDP datagrams: a long, lossy path

Interrupted (Ctrl-C, a lost connection)? Run the same command again: chunks the server verified
and stored are not sent again.";

#[derive(Debug, Args)]
#[command(after_help = super::after_help(EXAMPLES, true))]
pub(crate) struct SendArgs {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(flatten)]
    pub(super) transfer: TransferArgs,
    /// Send one regular file's bytes, nothing else, to any TCP listener at HOST:PORT
    /// (nc -l, a Java server): no key, no protocol, so nothing is authenticated, verified or
    /// resumed, and the listener decides where the bytes go. --engine and --limit-rate
    /// apply; -r, -P, --retry and --key-file do not. Fails when the peer closes or resets
    /// the connection before taking every byte.
    #[arg(long)]
    raw: bool,
    /// Files (and with -r directories) to send.
    #[arg(value_name = "SRC", required = true)]
    sources: Vec<OsString>,
    /// Where they go: `[USER@]HOST:DEST` over ssh (DEST relative to the login directory, or
    /// absolute), `HOST::DEST` or `zcp://HOST[:PORT]/DEST` to a zcp serve daemon (relative to
    /// its root). One file: DEST may name the file, or a directory (DEST/ or existing) that
    /// receives it. Several sources or -r: DEST is a directory, made if missing; each source
    /// lands inside. With --raw: HOST:PORT of any TCP listener.
    #[arg(value_name = "HOST:DEST", required = true)]
    target: OsString,
}

pub(crate) fn run(a: SendArgs) -> anyhow::Result<i32> {
    if a.raw {
        return super::raw::run(&a.conn, &a.transfer, &a.sources, &a.target);
    }
    let target = match super::parse_target(&a.target) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("zcp: invalid HOST:DEST: {e}");
            return Ok(zcp_session::exit::USAGE);
        }
    };
    let mut transfer = a.transfer.transfer()?;
    let (conn, ssh, dest) = a.conn.reach(&target, transfer.delete.prunes())?;
    transfer.link.encrypt = a.conn.encrypts(ssh.is_some());
    if let Some(problem) = transfer.link.problem() {
        super::usage!("{problem}");
    }
    let opts = SendOptions {
        conn,
        transfer,
        sources: a.sources.iter().map(PathBuf::from).collect(),
        dest,
        ssh,
    };
    let mut out = a.transfer.output();
    let r = send(&opts, out.reporter());
    Ok(super::outcome(&mut out, r, "send", &a.transfer))
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    use super::super::{Cli, Command};
    use super::*;

    fn parse(args: &[&[u8]]) -> Result<SendArgs, clap::Error> {
        let argv = [&b"zcp"[..], b"send"]
            .into_iter()
            .chain(args.iter().copied())
            .map(|a| OsStr::from_bytes(a).to_os_string());
        match Cli::parse_args(argv)?.command {
            Command::Send(a) => Ok(a),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn sources_then_one_target() {
        let a = parse(&[b"a", b"b", b"host:d"]).unwrap();
        assert_eq!(a.sources, ["a", "b"]);
        assert_eq!(a.target, "host:d");
        let a = parse(&[b"-r", b"-P", b"4", b"dir/", b"host:"]).unwrap();
        assert_eq!((a.sources.len(), a.target.as_bytes()), (1, &b"host:"[..]));
        // Options may follow the positionals; `--` ends the options.
        let a = parse(&[b"a", b"h:d", b"-P", b"2"]).unwrap();
        assert_eq!((a.sources, a.transfer.streams), (vec!["a".into()], 2));
        let a = parse(&[b"--", b"-odd", b"h:d"]).unwrap();
        assert_eq!(a.sources, ["-odd"]);
        // Names need not be UTF-8.
        let a = parse(&[b"odd\xffname", b"h:d\xfe"]).unwrap();
        assert_eq!(a.sources[0].as_bytes(), b"odd\xffname");
        assert_eq!(a.target.as_bytes(), b"h:d\xfe");
    }

    #[test]
    fn options_between_the_paths_are_refused() {
        // clap takes the path before an option for the target; main adds a tip.
        for args in [
            &[&b"-r"[..], b"dir/", b"-P", b"4", b"host:"][..],
            &[b"a", b"-P", b"4", b"b", b"host:d"],
        ] {
            let e = parse(args).unwrap_err();
            assert_eq!(e.kind(), clap::error::ErrorKind::UnknownArgument);
        }
    }

    #[test]
    fn a_source_and_a_target_are_both_required() {
        use clap::error::ErrorKind;
        let e = parse(&[b"h:d"]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MissingRequiredArgument);
        assert!(e.to_string().contains("<HOST:DEST>"), "{e}");
        let e = parse(&[]).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::MissingRequiredArgument);
        assert!(e.to_string().contains("<SRC>..."), "{e}");
    }
}
