//! `zcp doctor`: the read-only tuning advisor (crate `zcp-tune`).

use std::io::Write;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use zcp_session::exit::USAGE;
use zcp_tune::{HostView, Options};

/// `zcp doctor --help`'s examples, each a command line the tests parse.
pub(crate) const EXAMPLES: &str = "\
  zcp doctor                                       # this host; rate from the link, RTT 100 ms
  zcp doctor --rate 100G --rtt 100ms --path /data  # size for 100 Gbit/s at 100 ms; check /data
  zcp doctor --peer dtn2.example.org --write-sysctl 90-zcp.conf
                                                   # measure RTT and MTU to the peer
  zcp doctor -J -I eth0                            # one interface, as JSON";

#[derive(Debug, Args)]
#[command(after_help = super::after_help(EXAMPLES, false))]
pub(crate) struct DoctorArgs {
    /// Target rate in bits per second (100G, 40Gbit, 400M); default: the link speed of the
    /// interfaces examined, else 10G.
    #[arg(long, value_parser = zcp_tune::units::parse_rate, value_name = "RATE")]
    rate: Option<u64>,
    /// Round-trip time to size buffers for (100ms, 0.2s, 500us); default: measured with
    /// --peer, else 100ms.
    #[arg(long, value_parser = zcp_tune::units::parse_rtt, value_name = "RTT", conflicts_with = "peer")]
    rtt: Option<Duration>,
    /// Measure the RTT, path MTU and segment size against this host: a zcp server or any
    /// listening TCP port (HOST, HOST:PORT or `[IPV6]:PORT`; port 5310 by default).
    #[arg(long, value_name = "HOST[:PORT]")]
    peer: Option<String>,
    /// Interface to examine (repeatable, or comma-separated); default: the route to --peer,
    /// else the default routes' interfaces.
    #[arg(
        long = "interface",
        short = 'I',
        value_name = "IF",
        value_delimiter = ','
    )]
    interfaces: Vec<String>,
    /// The data directory to examine (filesystem, device, O_DIRECT, splice).
    #[arg(long, default_value = ".", value_name = "DIR")]
    path: PathBuf,
    /// Print one JSON document instead of the table.
    #[arg(short = 'J', long)]
    json: bool,
    /// Also write the sysctl.conf snippet to FILE (which must not exist yet), to install as
    /// /etc/sysctl.d/90-zcp.conf.
    #[arg(long, value_name = "FILE")]
    write_sysctl: Option<PathBuf>,
    /// Read /proc and /sys beneath DIR instead of this host's (a copy taken from another
    /// host, or a test fixture); the non-file probes come from DIR/probes.json.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
}

/// `HOST`, `HOST:PORT`, `[V6]:PORT` or a bare IPv6 address, resolved to one address.
fn resolve_peer(s: &str) -> Result<SocketAddr, String> {
    let default = zcp_session::DEFAULT_PORT;
    let (host, port) = if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest
            .split_once(']')
            .ok_or_else(|| format!("--peer {s}: missing ']' (write [ADDR]:PORT)"))?;
        match after.strip_prefix(':') {
            Some(p) => (
                h,
                p.parse()
                    .map_err(|_| format!("--peer {s}: bad port {p:?}"))?,
            ),
            None if after.is_empty() => (h, default),
            None => return Err(format!("--peer {s}: expected ':PORT' after ']'")),
        }
    } else if s.matches(':').count() == 1 {
        let (h, p) = s.split_once(':').expect("one colon");
        (
            h,
            p.parse()
                .map_err(|_| format!("--peer {s}: bad port {p:?}"))?,
        )
    } else {
        (s, default)
    };
    if host.is_empty() {
        return Err(format!("--peer {s:?}: no host"));
    }
    (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("--peer {s}: cannot resolve {host}: {e}"))?
        .next()
        .ok_or_else(|| format!("--peer {s}: {host} has no address"))
}

pub(crate) fn run(a: DoctorArgs) -> anyhow::Result<i32> {
    let peer = match &a.peer {
        Some(p) => match resolve_peer(p) {
            Ok(addr) => Some((p.clone(), addr)),
            Err(e) => {
                eprintln!("zcp: {e}");
                return Ok(USAGE);
            }
        },
        None => None,
    };
    let host = match &a.root {
        Some(root) if !root.is_dir() => {
            eprintln!("zcp: --root {}: not a directory", root.display());
            return Ok(USAGE);
        }
        Some(root) => HostView::tree(root),
        None => {
            if !a.path.is_dir() {
                eprintln!(
                    "zcp: --path {}: not a directory; give the directory transfers will write to",
                    a.path.display()
                );
                return Ok(USAGE);
            }
            HostView::live()
        }
    };
    if let Some(f) = &a.write_sysctl
        && (f.exists() || f.is_symlink())
    {
        eprintln!(
            "zcp: --write-sysctl {}: the file exists; remove it or choose another name",
            f.display()
        );
        return Ok(USAGE);
    }
    let opts = Options {
        rate_bps: a.rate,
        rtt: a.rtt,
        peer,
        interfaces: a
            .interfaces
            .iter()
            .filter(|i| !i.is_empty())
            .cloned()
            .collect(),
        path: a.path.clone(),
    };
    let report = match zcp_tune::examine(&host, &opts) {
        Ok(r) => r,
        Err(e @ zcp_tune::Error::NoSuchInterface { .. }) => {
            eprintln!("zcp: {e}");
            return Ok(USAGE);
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(f) = &a.write_sysctl {
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(f)
            .with_context(|| format!("--write-sysctl {}", f.display()))?;
        file.write_all(report.sysctl_conf.as_bytes())
            .and_then(|()| file.sync_all())
            .with_context(|| format!("writing {}", f.display()))?;
        eprintln!(
            "zcp: wrote {}; install it as /etc/sysctl.d/90-zcp.conf and run: sysctl --system",
            f.display()
        );
    }
    let out = if a.json {
        report.to_json() + "\n"
    } else {
        report.to_text()
    };
    std::io::stdout().write_all(out.as_bytes())?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::resolve_peer;

    #[test]
    fn peers() {
        assert_eq!(
            resolve_peer("127.0.0.1").unwrap().to_string(),
            "127.0.0.1:5310"
        );
        assert_eq!(
            resolve_peer("127.0.0.1:80").unwrap().to_string(),
            "127.0.0.1:80"
        );
        assert_eq!(resolve_peer("[::1]:81").unwrap().to_string(), "[::1]:81");
        assert_eq!(resolve_peer("[::1]").unwrap().to_string(), "[::1]:5310");
        assert_eq!(resolve_peer("::1").unwrap().to_string(), "[::1]:5310");
        assert!(
            resolve_peer("127.0.0.1:x")
                .unwrap_err()
                .contains("bad port")
        );
        assert!(resolve_peer("[::1").unwrap_err().contains("missing ']'"));
        assert!(resolve_peer(":80").unwrap_err().contains("no host"));
    }
}
