//! `zcp recv --listen [ADDR:]PORT DEST`: take one bare TCP stream (what `nc`, a Java
//! `transferTo` client or `zcp send --raw` sends) into a file, durably.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener, ToSocketAddrs};
use std::path::PathBuf;

use clap::Args;
use zcp_engine::RecvEngine;
use zcp_session::raw::{RawReceiver, RawRecvOptions};

use super::output::OutputArgs;
use super::usage;

/// `zcp recv --help`'s examples, each a command line the tests parse.
pub(crate) const EXAMPLES: &str = "\
  zcp recv --listen 9000 big.h5                    # on 127.0.0.1:9000; then, elsewhere on this
                                                   # host: nc -N 127.0.0.1 9000 < big.h5
  zcp recv --listen 0.0.0.0:9000 --expect-size 4G big.h5
                                                   # from other hosts; exactly 4 GiB or nothing
  zcp recv --listen 9000 --expect-blake3 af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262 big.h5
                                                   # only if the bytes hash to this (b3sum)
  zcp recv --listen 0 --port-file port.txt -J big.h5
                                                   # any free port, written to port.txt

No authentication: anyone who reaches the port can send the file's bytes. On a network you do
not trust, use zcp serve and zcp send (keyed, every chunk verified) instead.";

#[derive(Debug, Args)]
#[command(after_help = super::after_help(EXAMPLES, true))]
pub(crate) struct RecvArgs {
    /// Where to listen: PORT (on 127.0.0.1), or ADDR:PORT (`[IPV6]:PORT`) to take connections
    /// from elsewhere; port 0 picks a free one (printed, and written to --port-file).
    #[arg(long, value_name = "[ADDR:]PORT")]
    listen: String,
    /// The file to store the stream as. Its directory must exist; an existing file is
    /// replaced only with --force; a directory is refused.
    #[arg(value_name = "DEST")]
    dest: PathBuf,
    /// Receiver engine: auto, splice, direct (O_DIRECT), rw, null (discard, no copy) or mem
    /// (read into memory and discard).
    #[arg(long, default_value = "auto", value_parser = super::parse_recv_engine)]
    engine: RecvEngine,
    /// Bytes per read/splice call (suffixes K, M, G); 0 lets the engine choose.
    #[arg(long, default_value = "0", value_parser = super::parse_size, value_name = "BYTES")]
    block_size: u64,
    /// Fail, storing nothing, unless the stream carries exactly this many bytes (suffixes
    /// K, M, G, T: powers of 1024).
    #[arg(long, value_parser = super::parse_size, value_name = "BYTES")]
    expect_size: Option<u64>,
    /// Fail, storing nothing, unless the stream's bytes have this BLAKE3 digest (64 hex
    /// digits, as b3sum prints).
    #[arg(long, value_name = "HEX", value_parser = parse_blake3)]
    expect_blake3: Option<[u8; 32]>,
    /// Replace DEST if it exists (and a partial file an interrupted transfer left beside it).
    #[arg(long)]
    force: bool,
    /// Seconds to wait for the connection, and then for each byte (fractions allowed); the
    /// stream fails (and stores nothing) after this long without one.
    #[arg(long, default_value_t = 60.0, value_name = "SECONDS")]
    timeout: f64,
    /// Write the port listened on to FILE (for scripts that listen on port 0).
    #[arg(long, value_name = "FILE")]
    port_file: Option<PathBuf>,
    #[command(flatten)]
    out: OutputArgs,
}

fn parse_blake3(s: &str) -> Result<[u8; 32], String> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(s.trim(), &mut out).map_err(|_| {
        format!("'{s}' is not a BLAKE3 digest: give 64 hex digits (as b3sum prints)")
    })?;
    Ok(out)
}

/// `PORT` (loopback), `ADDR:PORT` or `[IPV6]:PORT`.
fn listen_addr(s: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port));
    }
    if let Ok(a) = s.parse::<SocketAddr>() {
        return Ok(a);
    }
    match s.to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(a)) => Ok(a),
        _ => usage!(
            "--listen {}: give PORT (on 127.0.0.1), ADDR:PORT or [IPV6]:PORT",
            zcp_wire::escape_text(s)
        ),
    }
}

pub(crate) fn run(a: RecvArgs) -> anyhow::Result<i32> {
    let addr = listen_addr(&a.listen)?;
    if !a.timeout.is_finite() || !(0.01..=86_400.0).contains(&a.timeout) {
        usage!("--timeout takes 0.01 to 86400 seconds, got {}", a.timeout);
    }
    if a.expect_blake3.is_some() && a.engine == RecvEngine::Null {
        usage!("--expect-blake3 needs the bytes hashed: the null engine never reads them");
    }
    let opts = RawRecvOptions {
        dest: a.dest.clone(),
        engine: a.engine,
        block_size: a.block_size,
        expect_size: a.expect_size,
        expect_blake3: a.expect_blake3,
        force: a.force,
        timeout: std::time::Duration::from_secs_f64(a.timeout),
        interval: a.out.interval()?,
        stop: Some(super::signals::stop_on_signals()),
    };
    let mut out = a.out.output();
    // The destination is checked before anyone can connect.
    let receiver = match RawReceiver::prepare(opts) {
        Ok(r) => r,
        Err(e) => return Ok(super::raw_outcome(&mut out, Err(e))),
    };
    let listener =
        TcpListener::bind(addr).map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let bound = listener.local_addr()?;
    if let Some(f) = &a.port_file {
        std::fs::write(f, format!("{}\n", bound.port()))
            .map_err(|e| anyhow::anyhow!("cannot write --port-file {}: {e}", f.display()))?;
    }
    if !a.out.quiet {
        eprintln!(
            "zcp: listening on {bound} for one bare TCP stream (no authentication: anyone \
             who reaches the port may send)"
        );
    }
    let r = receiver.run(listener, out.reporter());
    Ok(super::raw_outcome(&mut out, r.map(|_| ())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_forms_default_to_loopback() {
        assert_eq!(listen_addr("9000").unwrap().to_string(), "127.0.0.1:9000");
        assert_eq!(listen_addr("0").unwrap().to_string(), "127.0.0.1:0");
        assert_eq!(listen_addr("0.0.0.0:9").unwrap().to_string(), "0.0.0.0:9");
        assert_eq!(listen_addr("[::1]:9").unwrap().to_string(), "[::1]:9");
        assert!(listen_addr("nine").is_err());
    }

    #[test]
    fn digests_are_64_hex_digits() {
        let h = blake3::hash(b"x");
        assert_eq!(parse_blake3(&h.to_hex()).unwrap(), *h.as_bytes());
        assert!(parse_blake3("abc").unwrap_err().contains("64 hex digits"));
    }
}
