//! `zcp send --raw SRC HOST:PORT`: one regular file's bytes, nothing else, to any TCP
//! listener. No key and no protocol, so the flags that belong to zcp's own sessions are
//! refused with what to use instead.

use std::ffi::OsString;
use std::path::PathBuf;

use zcp_session::raw::{RawSendOptions, send_raw};

use super::{ConnArgs, TransferArgs, usage};

/// `HOST:PORT` or `[IPV6]:PORT` as `--raw` takes it.
pub(crate) fn parse_host_port(arg: &std::ffi::OsStr) -> anyhow::Result<(String, u16)> {
    let shown = zcp_wire::escape(arg.as_encoded_bytes());
    let t = match super::parse_target(arg) {
        Ok(t) if t.port.is_none() => t,
        Ok(_) => usage!("{shown}: --raw takes HOST:PORT, not a zcp:// URL"),
        Err(e) => usage!("{e}"),
    };
    if let Some(login) = t.ssh.as_deref().filter(|l| l.contains('@')) {
        let user = &login[..login.rfind('@').unwrap_or(0)];
        usage!(
            "{shown}: --raw sends to a bare listener, which has no user names: leave out '{}@'",
            zcp_wire::escape(user.as_bytes())
        );
    }
    let port = std::str::from_utf8(&t.path)
        .ok()
        .and_then(|p| p.parse::<u16>().ok())
        .filter(|&p| p != 0);
    match port {
        Some(p) => Ok((t.host, p)),
        None => usage!(
            "{shown}: --raw sends to HOST:PORT (a port from 1 to 65535, e.g. \
             dtn.example.org:9000), not to a path"
        ),
    }
}

/// Runs `zcp send --raw`.
pub(crate) fn run(
    conn: &ConnArgs,
    transfer: &TransferArgs,
    sources: &[OsString],
    target: &std::ffi::OsStr,
) -> anyhow::Result<i32> {
    let refused = [
        (
            transfer.recursive,
            "-r",
            "a bare stream carries one file's bytes",
        ),
        (
            transfer.streams != 1,
            "-P",
            "a bare stream is one connection",
        ),
        (transfer.retry > 0, "--retry", "a bare stream cannot resume"),
        (
            conn.key_file.is_some(),
            "--key-file",
            "a bare stream has no key",
        ),
        (conn.port.is_some(), "-p", "the port goes in HOST:PORT"),
        (
            conn.encrypts(false),
            "--encrypt",
            "a bare stream is never encrypted (its listener is nc, Java or zcp recv): send to a zcp session instead",
        ),
        (
            transfer.chunk_size.is_some(),
            "--chunk-size",
            "a bare stream has no chunks",
        ),
        (
            transfer.verify != zcp_session::VerifyMode::Blake3,
            "--verify",
            "nothing is verified on a bare stream",
        ),
        (
            transfer.recv_engine != zcp_engine::RecvEngine::Auto,
            "--recv-engine",
            "the listener chooses how it receives",
        ),
        (
            transfer.transport != zcp_session::TransportKind::Tcp,
            "--transport",
            "a bare stream is one TCP connection",
        ),
    ];
    if let Some((_, flag, why)) = refused.iter().find(|r| r.0) {
        usage!(
            "--raw does not take {flag}: {why} (send to a zcp server, without --raw, for \
             trees, parallel streams, resume and verification)"
        );
    }
    let [source] = sources else {
        usage!(
            "--raw sends one file, got {} sources; a bare stream carries one file's bytes",
            sources.len()
        );
    };
    let (host, port) = parse_host_port(target)?;
    if conn.connect_timeout == 0 || conn.idle_timeout == 0 {
        usage!("--connect-timeout and --idle-timeout must be at least 1 second");
    }
    let opts = RawSendOptions {
        source: PathBuf::from(source),
        host,
        port,
        engine: transfer.engine,
        block_size: transfer.block_size,
        limit_rate: transfer.limit_rate,
        connect_timeout: std::time::Duration::from_secs(conn.connect_timeout),
        idle_timeout: std::time::Duration::from_secs(conn.idle_timeout),
        interval: transfer.interval()?,
        stop: Some(super::signals::stop_on_signals()),
    };
    let mut out = transfer.output();
    let r = send_raw(&opts, out.reporter());
    Ok(super::raw_outcome(&mut out, r.map(|_| ())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_forms() {
        let p = |s: &str| parse_host_port(std::ffi::OsStr::new(s)).map_err(|e| e.to_string());
        assert_eq!(p("h:9000").unwrap(), ("h".into(), 9000));
        assert_eq!(p("[::1]:9").unwrap(), ("::1".into(), 9));
        assert!(p("h:dir/").unwrap_err().contains("HOST:PORT"));
        assert!(p("h:0").is_err());
        assert!(p("h:70000").is_err());
        assert!(p("zcp://h:9/x").unwrap_err().contains("not a zcp:// URL"));
        // A user is never dropped silently: a bare listener has none.
        assert!(
            p("alice@h:9000")
                .unwrap_err()
                .contains("leave out 'alice@'")
        );
    }
}
