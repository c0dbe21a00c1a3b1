//! Readiness for many sockets on one thread: an `epoll(7)` instance, each descriptor tagged
//! with the caller's token.
//!
//! The server waits on its listeners and on every connection still in its handshake here, so
//! a pending connection costs a descriptor and a few hundred bytes, never a thread. Level
//! triggered: a descriptor with unread bytes is reported again on the next wait, so a caller
//! that reads only part of what waits loses nothing.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use rustix::event::{Timespec, epoll};

/// What a wait found for one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ready {
    /// The token the descriptor was added with.
    pub token: u64,
    /// Bytes (or a connection, for a listener) wait to be read.
    pub readable: bool,
    /// The peer hung up or the socket has an error: a read will say which.
    pub closed: bool,
}

/// An epoll instance.
pub struct Poller {
    fd: OwnedFd,
    /// Most events per wait. (The event buffer is made per wait: rustix's `Event` holds a
    /// pointer-sized union, which would make the poller neither `Send` nor `Sync`.)
    batch: usize,
}

impl std::fmt::Debug for Poller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Poller")
            .field("fd", &self.fd)
            .finish_non_exhaustive()
    }
}

impl Poller {
    /// A new instance that reports at most `batch` descriptors per wait.
    pub fn new(batch: usize) -> io::Result<Poller> {
        Ok(Poller {
            fd: epoll::create(epoll::CreateFlags::CLOEXEC)?,
            batch: batch.max(1),
        })
    }

    /// Watches `fd` for readability under `token`.
    pub fn add(&self, fd: impl AsFd, token: u64) -> io::Result<()> {
        let flags = epoll::EventFlags::IN | epoll::EventFlags::RDHUP;
        Ok(epoll::add(
            &self.fd,
            fd,
            epoll::EventData::new_u64(token),
            flags,
        )?)
    }

    /// Stops watching `fd` (closing it would too, but only once every duplicate is closed).
    pub fn remove(&self, fd: impl AsFd) -> io::Result<()> {
        Ok(epoll::delete(&self.fd, fd)?)
    }

    /// Waits at most `timeout` (rounded up to a millisecond) for any descriptor to become
    /// ready; what it found goes to `out` (cleared first). An interrupted wait finds nothing.
    pub fn wait(&self, timeout: Duration, out: &mut Vec<Ready>) -> io::Result<()> {
        out.clear();
        let mut events = Vec::with_capacity(self.batch);
        let ts = Timespec {
            tv_sec: timeout.as_secs().min(i32::MAX as u64 / 1000) as i64,
            tv_nsec: i64::from(timeout.subsec_nanos()),
        };
        match epoll::wait(
            &self.fd,
            rustix::buffer::spare_capacity(&mut events),
            Some(&ts),
        ) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
        for e in &events {
            let flags = e.flags;
            out.push(Ready {
                token: e.data.u64(),
                readable: flags.contains(epoll::EventFlags::IN),
                closed: flags.intersects(
                    epoll::EventFlags::HUP | epoll::EventFlags::RDHUP | epoll::EventFlags::ERR,
                ),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn reports_readable_listeners_and_sockets_by_token() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = Poller::new(8).unwrap();
        p.add(&l, 7).unwrap();
        let mut out = Vec::new();
        p.wait(Duration::from_millis(10), &mut out).unwrap();
        assert!(out.is_empty(), "{out:?}");
        let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        p.wait(Duration::from_secs(5), &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].token, out[0].readable), (7, true));
        let (s, _) = l.accept().unwrap();
        p.add(&s, 9).unwrap();
        c.write_all(b"x").unwrap();
        p.wait(Duration::from_secs(5), &mut out).unwrap();
        assert_eq!(
            out,
            [Ready {
                token: 9,
                readable: true,
                closed: false
            }]
        );
        drop(c);
        p.wait(Duration::from_secs(5), &mut out).unwrap();
        assert!(out[0].closed, "{out:?}");
        p.remove(&s).unwrap();
        p.wait(Duration::from_millis(10), &mut out).unwrap();
        assert!(out.is_empty(), "{out:?}");
    }
}
