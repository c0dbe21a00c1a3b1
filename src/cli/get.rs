//! `zcp get`: pull files and trees from a server.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;
use zcp_session::{GetOptions, get};

use super::{ConnArgs, TransferArgs};

/// `zcp get --help`'s examples, each a command line the tests parse.
pub(crate) const EXAMPLES: &str = "\
  zcp get dtn.example.org:/data/run42/big.h5 .     # over ssh, into the current directory
  zcp get alice@dtn.example.org:run42/big.h5 copy.h5
                                                   # ... from alice's home, a new name
  zcp get -r -P 4 dtn.example.org::archive/run42 restore/
                                                   # from a zcp serve daemon, with the key:
                                                   # a tree, 4 parallel streams
  zcp get -r --delete dtn.example.org::archive/run42 restore/
                                                   # mirror: remove from restore/run42 what
                                                   # the server's run42 no longer has
  zcp get dtn.example.org::a.h5 dtn.example.org::b.h5 in/
                                                   # several paths from one server
  zcp get zcp://[2001:db8::7]:6000/run42/big.h5 .  # a URL: IPv6 address and port";

#[derive(Debug, Args)]
#[command(after_help = super::after_help(EXAMPLES, true))]
pub(crate) struct GetArgs {
    #[command(flatten)]
    conn: ConnArgs,
    #[command(flatten)]
    pub(super) transfer: TransferArgs,
    /// What to fetch: `[USER@]HOST:PATH` over ssh (relative to the login directory, or
    /// absolute), `HOST::PATH` or `zcp://HOST[:PORT]/PATH` from a zcp serve daemon (relative
    /// to its root); several must name the same host, reached the same way.
    #[arg(value_name = "HOST:PATH", required = true)]
    remote: Vec<OsString>,
    /// The local destination: a directory that receives each path (made if missing), or for
    /// one path its new name.
    #[arg(value_name = "DEST", required = true)]
    dest: OsString,
}

pub(crate) fn run(a: GetArgs) -> anyhow::Result<i32> {
    let remote = match one_server(&a.remote) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("zcp: {e}");
            return Ok(zcp_session::exit::USAGE);
        }
    };
    let (conn, ssh, paths) = a.conn.reach_all(&remote)?;
    let mut transfer = a.transfer.transfer()?;
    transfer.link.encrypt = a.conn.encrypts(ssh.is_some());
    if let Some(problem) = transfer.link.problem() {
        super::usage!("{problem}");
    }
    let opts = GetOptions {
        conn,
        transfer,
        paths,
        dest: PathBuf::from(a.dest),
        ssh,
    };
    let mut out = a.transfer.output();
    let r = get(&opts, out.reporter());
    Ok(super::outcome(&mut out, r, "get", &a.transfer))
}

/// What one get fetches, from where.
#[derive(Debug)]
pub(super) struct Remote {
    pub(super) host: String,
    /// The port a zcp:// URL among the targets gave (they must agree).
    pub(super) port: Option<u16>,
    pub(super) paths: Vec<Vec<u8>>,
    /// Over ssh as this login (every target alike), or a daemon.
    pub(super) ssh: Option<String>,
}

/// The one server every remote target names, and their paths.
pub(super) fn one_server(remote: &[OsString]) -> Result<Remote, String> {
    let mut server: Option<(String, Option<u16>, Option<String>)> = None;
    let mut paths = Vec::new();
    for r in remote {
        let t = super::parse_target(r).map_err(|e| format!("invalid HOST:PATH: {e}"))?;
        let (host, port, ssh) =
            server.get_or_insert_with(|| (t.host.clone(), t.port, t.ssh.clone()));
        if *ssh != t.ssh {
            return Err(
                "every HOST:PATH of one command must reach the host the same way: all over ssh \
                 (HOST:PATH, as the same user) or all from a daemon (HOST::PATH, zcp://)"
                    .into(),
            );
        }
        if *host != t.host {
            return Err(format!(
                "every HOST:PATH of one command must name the same host ({} and {})",
                zcp_wire::escape_text(host),
                zcp_wire::escape_text(&t.host)
            ));
        }
        match (*port, t.port) {
            (Some(p), Some(q)) if p != q => {
                return Err(format!(
                    "every zcp:// target of one command must name the same port ({p} and {q})"
                ));
            }
            (None, q) => *port = q,
            _ => {}
        }
        paths.push(t.path);
    }
    let (host, port, ssh) = server.expect("clap requires at least one HOST:PATH");
    Ok(Remote {
        host,
        port,
        paths,
        ssh,
    })
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    use super::super::{Cli, Command};
    use super::*;

    fn parse(args: &[&[u8]]) -> Result<GetArgs, clap::Error> {
        let argv = [&b"zcp"[..], b"get"]
            .into_iter()
            .chain(args.iter().copied())
            .map(|a| OsStr::from_bytes(a).to_os_string());
        match Cli::parse_args(argv)?.command {
            Command::Get(a) => Ok(a),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn remote_paths_then_one_destination() {
        let a = parse(&[b"h:a", b"h:b\xff", b"dest"]).unwrap();
        assert_eq!(a.remote.len(), 2);
        assert_eq!(a.remote[1].as_bytes(), b"h:b\xff");
        assert_eq!(a.dest, "dest");
        let a = parse(&[b"-r", b"h:a", b"."]).unwrap();
        assert_eq!((a.remote.len(), a.dest.as_bytes()), (1, &b"."[..]));
        let e = parse(&[b"h:a"]).unwrap_err();
        assert!(e.to_string().contains("<DEST>"), "{e}");
    }

    #[test]
    fn every_target_of_a_get_names_one_server() {
        let os = |v: &[&str]| v.iter().map(OsString::from).collect::<Vec<_>>();
        let r = one_server(&os(&["h::a", "zcp://h:6000/b", "h::c", "zcp://h/d"])).unwrap();
        assert_eq!((r.host.as_str(), r.port, &r.ssh), ("h", Some(6000), &None));
        let want: Vec<Vec<u8>> = ["a", "b", "c", "d"].map(|p| p.into()).into();
        assert_eq!(r.paths, want);
        assert_eq!(one_server(&os(&["h::a"])).unwrap().port, None);
        let r = one_server(&os(&["u@h:a", "u@h:/b"])).unwrap();
        assert_eq!(r.ssh.as_deref(), Some("u@h"));
        let e = one_server(&os(&["h::a", "g::b"])).unwrap_err();
        assert!(e.contains("same host (h and g)"), "{e}");
        let e = one_server(&os(&["zcp://h:1/a", "h::b", "zcp://h:2/c"])).unwrap_err();
        assert!(e.contains("same port (1 and 2)"), "{e}");
        for mixed in [["h::a", "h:b"], ["h:a", "u@h:b"], ["zcp://h/a", "h:b"]] {
            let e = one_server(&os(&mixed)).unwrap_err();
            assert!(e.contains("the same way"), "{mixed:?}: {e}");
        }
        let e = one_server(&os(&["h::a", "u@h::b"])).unwrap_err();
        assert!(e.contains("invalid HOST:PATH: u@h::b"), "{e}");
    }
}
