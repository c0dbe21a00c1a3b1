//! The fallback through ssh: when this host cannot connect to the far side directly (a
//! firewall lets only ssh in), each of the session's connections goes through an ssh of its
//! own (`ssh -W ADDR:PORT`, as a `ProxyJump` does), from a listener on 127.0.0.1 here. Slower
//! than the direct path (ssh copies and encrypts every byte again), and said so. The listener
//! carries only connections of this user (the owner of the connecting socket, from
//! `/proc/net/tcp`): another user of this host gets no ssh login in our name.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use zcp_engine::sync::Locked;

use super::ssh::{Ssh, relay_lines};
use crate::error::SessionError;

/// The most connections a tunnel carries (a session's control connection and its streams,
/// with room for a retry's): past it, a connection is refused.
const MAX_TUNNELED: usize = 80;

/// A listener on 127.0.0.1 whose every connection is carried through ssh to the far side.
pub(crate) struct Tunnel {
    /// Where the session connects instead of the far side.
    pub(crate) local: SocketAddr,
    stop: Arc<AtomicBool>,
    children: Arc<Mutex<Vec<Child>>>,
    accept: Option<JoinHandle<()>>,
}

impl Tunnel {
    /// Listens on 127.0.0.1 and carries each connection to `far` through `ssh -W`.
    pub(crate) fn start(ssh: &Ssh, far: SocketAddr) -> Result<Tunnel, SessionError> {
        let io = |source| SessionError::Io {
            what: "the listener of the fallback through ssh".into(),
            source,
        };
        let l = TcpListener::bind(("127.0.0.1", 0)).map_err(io)?;
        l.set_nonblocking(true).map_err(io)?;
        let local = l.local_addr().map_err(io)?;
        let stop = Arc::new(AtomicBool::new(false));
        let children: Arc<Mutex<Vec<Child>>> = Arc::default();
        let (s, st, ch) = (ssh.clone(), stop.clone(), children.clone());
        let accept = std::thread::Builder::new()
            .name("zcp-tunnel".into())
            .spawn(move || accept_loop(&l, &s, far, (&st, &ch)))
            .map_err(io)?;
        Ok(Tunnel {
            local,
            stop,
            children,
            accept: Some(accept),
        })
    }
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        for mut c in std::mem::take(&mut *self.children.locked()) {
            end(&mut c);
        }
    }
}

fn accept_loop(
    l: &TcpListener,
    ssh: &Ssh,
    far: SocketAddr,
    (stop, children): (&AtomicBool, &Mutex<Vec<Child>>),
) {
    let mut carried = 0;
    let me = zcp_engine::sys::euid();
    while !stop.load(Ordering::Relaxed) {
        match l.accept() {
            Ok((sock, peer)) if carried < MAX_TUNNELED && owner(&sock, peer) == Some(me) => {
                carried += 1;
                if let Some(child) = carry(ssh, far, sock) {
                    children.locked().push(child);
                }
            }
            // Another user's, or past the bound: closed unanswered.
            Ok(_) => {}
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// Ends an ssh of the tunnel: asked first, killed after a second.
fn end(c: &mut Child) {
    let _ = zcp_engine::sys::terminate(c.id());
    if super::ssh::wait_for(c, Duration::from_secs(1)).is_none() {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// The user that owns the socket at `peer` connected to `sock` (IPv4 loopback), from
/// `/proc/net/tcp`.
fn owner(sock: &TcpStream, peer: SocketAddr) -> Option<u32> {
    let (SocketAddr::V4(peer), Ok(SocketAddr::V4(local))) = (peer, sock.local_addr()) else {
        return None;
    };
    // The connecting socket's line: its local address is our peer, its remote ours.
    let hex = |a: std::net::SocketAddrV4| {
        format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(a.ip().octets()),
            a.port()
        )
    };
    let (want_local, want_remote) = (hex(peer), hex(local));
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        (f.get(1) == Some(&want_local.as_str()) && f.get(2) == Some(&want_remote.as_str()))
            .then(|| f.get(7)?.parse().ok())
            .flatten()
    })
}

/// Starts `ssh -W far` for `sock` and pumps the bytes both ways; the child, to end later.
fn carry(ssh: &Ssh, far: SocketAddr, sock: TcpStream) -> Option<Child> {
    let (program, options) = ssh.command.split_first()?;
    let target = match far {
        SocketAddr::V4(a) => format!("{}:{}", a.ip(), a.port()),
        SocketAddr::V6(a) => format!("[{}]:{}", a.ip(), a.port()),
    };
    let mut child = Command::new(program)
        .args(options)
        .args(["-W", &target])
        .arg(&ssh.destination)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(match ssh.stderr {
            Some(_) => Stdio::piped(),
            None => Stdio::inherit(),
        })
        .spawn()
        .ok()?;
    if let (Some(relay), Some(err)) = (ssh.stderr.clone(), child.stderr.take()) {
        relay_lines(err, relay);
    }
    let pipes = (
        child.stdin.take(),
        child.stdout.take(),
        sock.try_clone().ok(),
    );
    let (Some(mut to_ssh), Some(mut from_ssh), Some(mut up)) = pipes else {
        end(&mut child);
        return None;
    };
    let mut down = sock;
    // Each direction on a thread of its own; either end closing ends its direction.
    let a = std::thread::Builder::new()
        .name("zcp-tunnel-up".into())
        .spawn(move || {
            let _ = pump(&mut up, &mut to_ssh);
            let _ = up.shutdown(std::net::Shutdown::Read);
        });
    let b = std::thread::Builder::new()
        .name("zcp-tunnel-down".into())
        .spawn(move || {
            let _ = pump(&mut from_ssh, &mut down);
            let _ = down.shutdown(std::net::Shutdown::Both);
        });
    drop((a, b));
    Some(child)
}

/// Copies `from` to `to` until `from` ends.
fn pump(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<()> {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        to.write_all(&buf[..n])?;
        to.flush()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_of_a_loopback_connection_is_found() {
        let l = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (s, peer) = l.accept().unwrap();
        assert_eq!(peer, c.local_addr().unwrap());
        assert_eq!(owner(&s, peer), Some(zcp_engine::sys::euid()));
        // A peer that is not there has no owner.
        let gone = SocketAddr::from(([127, 0, 0, 1], 1));
        assert_eq!(owner(&s, gone), None);
    }
}
