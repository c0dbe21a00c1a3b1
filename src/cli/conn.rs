//! The connection flags `send`, `get` and `ls` share, and how a target is reached: over ssh
//! (`[USER@]HOST:PATH`) or a zcp serve daemon (`HOST::PATH`, `zcp://`).

use std::path::PathBuf;

use clap::Args;

use super::{get, key_arg, target, usage};

/// Connection flags shared by `send` and `get`.
#[derive(Debug, Clone, Args)]
pub(crate) struct ConnArgs {
    /// Server port [default: 5310, or the port a zcp:// target names].
    #[arg(short = 'p', long)]
    pub(super) port: Option<u16>,
    /// Pre-shared key file (default: $ZCP_KEY_FILE, then ~/.config/zcp/key).
    #[arg(long, value_name = "FILE")]
    pub(super) key_file: Option<PathBuf>,
    /// Seconds allowed to connect and authenticate.
    #[arg(long, default_value_t = 10, value_name = "SECONDS")]
    pub(super) connect_timeout: u64,
    /// Fail after this many seconds without progress or word from the peer.
    #[arg(long, default_value_t = 60, value_name = "SECONDS")]
    pub(super) idle_timeout: u64,
    /// The program (and its options) that reaches HOST in a `[USER@]HOST:PATH` target, as
    /// rsync's -e: ~/.ssh/config applies [default: ssh].
    #[arg(short = 'e', long, value_name = "CMD")]
    ssh_command: Option<String>,
    /// What runs zcp on the far side of ssh, as rsync's --rsync-path [default: zcp].
    #[arg(long, value_name = "PATH")]
    remote_zcp: Option<String>,
    /// Ports the far side of ssh may listen on (A-B), for firewalls; any by default.
    #[arg(long, value_name = "A-B", value_parser = parse_port_range)]
    port_range: Option<(u16, u16)>,
    /// Over ssh, fail when this host cannot connect to the far side directly (within 5 s)
    /// instead of carrying the session through ssh, slower.
    #[arg(long)]
    no_fallback: bool,
    /// Encrypt the session: data, names and control (AES-256-GCM, keys agreed with X25519
    /// for each session). On by default over ssh; a server that cannot is refused.
    #[arg(long, conflicts_with = "no_encrypt")]
    encrypt: bool,
    /// Send in clear even over ssh (data is still authenticated and verified).
    #[arg(long)]
    no_encrypt: bool,
    /// The note on where a daemon's targets went was printed (once a command, however many
    /// paths it names).
    #[arg(skip)]
    noted: std::cell::Cell<bool>,
}

impl ConnArgs {
    /// Whether to ask for encryption: as the flags say, else over ssh only.
    pub(super) fn encrypts(&self, over_ssh: bool) -> bool {
        self.encrypt || (over_ssh && !self.no_encrypt)
    }
}

/// `--port-range A-B`: 1 <= A <= B.
pub(super) fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let bad = || format!("'{s}' is not a port range: write A-B, 1 <= A <= B <= 65535");
    let (a, b) = s.split_once('-').ok_or_else(bad)?;
    let (a, b): (u16, u16) = (a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
    if a == 0 || a > b {
        return Err(bad());
    }
    Ok((a, b))
}

impl ConnArgs {
    /// How to reach `target`: over ssh (its login, and the far side's root and path) or a
    /// daemon. An old daemon-style call (`-p`/`--key-file` with `HOST:PATH`) is refused,
    /// naming the new form; ssh's flags with a daemon's target too.
    pub(super) fn reach(
        &self,
        target: &target::Target,
        allow_delete: bool,
    ) -> anyhow::Result<(zcp_session::Connection, Option<zcp_session::Ssh>, Vec<u8>)> {
        let Some(login) = &target.ssh else {
            if self.ssh_command.is_some()
                || self.remote_zcp.is_some()
                || self.port_range.is_some()
                || self.no_fallback
            {
                usage!(
                    "--ssh-command, --remote-zcp, --port-range and --no-fallback are for \
                     [USER@]HOST:PATH targets (one ':'), which go over ssh; this one names a \
                     zcp serve daemon"
                );
            }
            let conn = self.connection(target.host.clone(), target.port)?;
            return Ok((conn, None, target.path.clone()));
        };
        self.not_a_daemon_call(&target.host)?;
        let command = match &self.ssh_command {
            None => vec!["ssh".to_string()],
            Some(c) => match shell_words::split(c) {
                Ok(w) if !w.is_empty() => w,
                Ok(_) => usage!("--ssh-command is empty: name the program, e.g. 'ssh -p 2222'"),
                Err(e) => usage!("--ssh-command: {e}"),
            },
        };
        let (root, path) = remote_path(&target.path)?;
        let host = zcp_wire::escape_text(&target.host);
        let ssh = zcp_session::Ssh {
            command,
            destination: login.clone(),
            remote_zcp: self.remote_zcp.clone().unwrap_or_else(|| "zcp".into()),
            root,
            allow_delete,
            port_range: self.port_range,
            fallback: !self.no_fallback,
            // What comes from the far side reaches the terminal escaped, with its host.
            stderr: Some(zcp_session::Relay(std::sync::Arc::new(
                move |line: &[u8]| {
                    let line = line.strip_suffix(b"\n").unwrap_or(line);
                    eprintln!("{host}: {}", zcp_wire::escape(line));
                },
            ))),
        };
        // The key and port come from the far side on each try.
        let conn = self.timeouts(
            target.host.clone(),
            0,
            zcp_wire::Psk::from_bytes([0x5a; 32]),
        )?;
        Ok((conn, Some(ssh), path))
    }

    /// Refuses a one-colon target given with a daemon's key or port (the call that reached a
    /// daemon before ssh came): `-p`, `--key-file` or `$ZCP_KEY_FILE`. With only the default
    /// key file present, says where a daemon's targets went.
    fn not_a_daemon_call(&self, host: &str) -> anyhow::Result<()> {
        let host = zcp_wire::escape_text(host);
        let by = if self.port.is_some() || self.key_file.is_some() {
            Some("-p and --key-file are")
        } else if std::env::var_os("ZCP_KEY_FILE").is_some() {
            Some("$ZCP_KEY_FILE is")
        } else {
            None
        };
        if let Some(by) = by {
            usage!(
                "{host}:PATH now reaches {host} over ssh, where zcp is started for the session; \
                 {by} for a zcp serve daemon: write {host}::PATH or zcp://{host}:PORT/PATH for \
                 the daemon, or leave them out to go over ssh"
            );
        }
        if !self.noted.replace(true)
            && zcp_session::keyfile::default_key_path().is_some_and(|p| p.exists())
        {
            eprintln!(
                "zcp: {host}:PATH goes over ssh (a zcp serve daemon, which your key file is for, \
                 is {host}::PATH)"
            );
        }
        Ok(())
    }

    /// [`ConnArgs::reach`] for a get's targets (one host, reached one way). Over ssh their
    /// paths must all be absolute or all relative: the far side has one root.
    pub(super) fn reach_all(
        &self,
        remote: &get::Remote,
    ) -> anyhow::Result<(
        zcp_session::Connection,
        Option<zcp_session::Ssh>,
        Vec<Vec<u8>>,
    )> {
        let mut paths = Vec::with_capacity(remote.paths.len());
        let mut first: Option<(zcp_session::Connection, Option<zcp_session::Ssh>)> = None;
        for p in &remote.paths {
            let t = target::Target {
                host: remote.host.clone(),
                port: remote.port,
                path: p.clone(),
                ssh: remote.ssh.clone(),
            };
            let (conn, ssh, path) = self.reach(&t, false)?;
            if let (Some((_, Some(a))), Some(b)) = (&first, &ssh)
                && a.root != b.root
            {
                usage!(
                    "over ssh the paths of one command must be all absolute or all relative to the \
                     login directory"
                );
            }
            first.get_or_insert((conn, ssh));
            paths.push(path);
        }
        let (conn, ssh) = first.expect("clap requires at least one HOST:PATH");
        Ok((conn, ssh, paths))
    }

    /// The connection to `host`; `url_port` is the port its zcp:// target named, if any.
    pub(super) fn connection(
        &self,
        host: String,
        url_port: Option<u16>,
    ) -> anyhow::Result<zcp_session::Connection> {
        let port = match (self.port, url_port) {
            (Some(p), Some(u)) if p != u => {
                usage!("-p {p} and the zcp:// target's port {u} disagree; give the port once")
            }
            (p, u) => u.or(p).unwrap_or(zcp_session::DEFAULT_PORT),
        };
        if port == 0 {
            usage!(
                "-p/--port 0 names no server; give the port zcp serve listens on (default {})",
                zcp_session::DEFAULT_PORT
            );
        }
        let psk = key_arg(&self.key_file)?;
        self.timeouts(host, port, psk)
    }

    /// A connection to `host:port` with `psk` and the timeouts asked for.
    fn timeouts(
        &self,
        host: String,
        port: u16,
        psk: zcp_wire::Psk,
    ) -> anyhow::Result<zcp_session::Connection> {
        if self.connect_timeout == 0 {
            usage!("--connect-timeout must be at least 1 second");
        }
        if self.idle_timeout == 0 {
            usage!("--idle-timeout must be at least 1 second");
        }
        Ok(zcp_session::Connection {
            host,
            port,
            psk,
            connect_timeout: std::time::Duration::from_secs(self.connect_timeout),
            idle_timeout: std::time::Duration::from_secs(self.idle_timeout),
        })
    }
}

/// Where a remote path starts there, and the path beneath that start, as scp takes it: an
/// absolute path at `/`, `~/PATH` and any other at the login directory. `~USER` and `..`
/// (which the far side would refuse as leaving its root) are refused here, naming the fix.
fn remote_path(path: &[u8]) -> anyhow::Result<(zcp_session::RemoteRoot, Vec<u8>)> {
    use zcp_session::RemoteRoot::{Home, Slash};
    let shown = zcp_wire::escape(path);
    let (root, rest) = match path {
        [b'/', ..] => {
            let at = path.iter().position(|b| *b != b'/').unwrap_or(path.len());
            (Slash, &path[at..])
        }
        [b'~'] => (Home, &b""[..]),
        [b'~', b'/', rest @ ..] => (Home, rest),
        [b'~', ..] => usage!(
            "{shown}: another user's home (~USER) is not reached this way: write its absolute \
             path, or log in as that user (USER@HOST:PATH)"
        ),
        _ => (Home, path),
    };
    if rest.split(|b| *b == b'/').any(|c| c == b"..") {
        usage!("{shown}: '..' is not followed over ssh: write the absolute path instead");
    }
    let rest = if rest.iter().all(|b| *b == b'/') {
        b".".to_vec()
    } else {
        rest.to_vec()
    };
    Ok((root, rest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcp_session::RemoteRoot::{Home, Slash};

    #[test]
    fn remote_paths_start_where_scp_starts_them() {
        let p = |s: &str| remote_path(s.as_bytes()).map_err(|e| e.to_string());
        assert_eq!(p("/data/x").unwrap(), (Slash, b"data/x".to_vec()));
        assert_eq!(p("//data/").unwrap(), (Slash, b"data/".to_vec()));
        assert_eq!(p("/").unwrap(), (Slash, b".".to_vec()));
        assert_eq!(p("run42/").unwrap(), (Home, b"run42/".to_vec()));
        assert_eq!(p(".").unwrap(), (Home, b".".to_vec()));
        assert_eq!(p("~/run42").unwrap(), (Home, b"run42".to_vec()));
        assert_eq!(p("~").unwrap(), (Home, b".".to_vec()));
        assert_eq!(p("~/").unwrap(), (Home, b".".to_vec()));
        assert!(p("~bob/x").unwrap_err().contains("~USER"));
        assert!(p("../x").unwrap_err().contains("absolute path"));
        assert!(p("/data/../etc").unwrap_err().contains("absolute path"));
        assert_eq!(p("a..b/x").unwrap(), (Home, b"a..b/x".to_vec()));
    }
}
