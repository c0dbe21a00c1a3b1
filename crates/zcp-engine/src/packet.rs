//! Link-layer packet sockets (`AF_PACKET`) for the testbed's delay line (`zcp-delay`), a
//! test tool outside zcp proper that forwards whole Ethernet frames between two interfaces.
//!
//! A [`PacketSocket`] is bound to one interface, sees every frame that arrives there (not the
//! ones it sends itself: `PACKET_IGNORE_OUTGOING`), and with `PACKET_VNET_HDR` each frame
//! starts with a 10-byte `virtio_net_hdr` that carries its segmentation offload state, so a
//! GSO super-frame of up to 64 KiB moves as one read and one write and the checksum the
//! sender left to the hardware stays to be filled in. Frames are opaque bytes here: what
//! arrives in one socket can be written to another unchanged.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use rustix::net::{RecvFlags, SendFlags};

/// `PACKET_VNET_HDR` (linux/if_packet.h).
const PACKET_VNET_HDR: libc::c_int = 15;
/// `PACKET_IGNORE_OUTGOING` (linux/if_packet.h, Linux 4.20).
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `PACKET_STATISTICS` (linux/if_packet.h).
const PACKET_STATISTICS: libc::c_int = 6;

/// The length of the `virtio_net_hdr` in front of every frame when `vnet_hdr` is on.
pub const VNET_HDR_LEN: usize = 10;

/// An `AF_PACKET` raw socket bound to one interface, for every protocol (`ETH_P_ALL`).
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
}

/// The kernel's counters of one packet socket since the last read (`PACKET_STATISTICS`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PacketStats {
    /// Frames the socket received.
    pub packets: u64,
    /// Frames dropped because the socket's receive buffer was full.
    pub drops: u64,
}

impl PacketSocket {
    /// Opens a socket on interface `ifname`; `vnet_hdr` prefixes every frame read and written
    /// with a `virtio_net_hdr` ([`VNET_HDR_LEN`] bytes). `buffer` sets both socket buffers
    /// (`SO_RCVBUFFORCE`/`SO_SNDBUFFORCE`, which need `CAP_NET_ADMIN`; without it the
    /// ordinary limit applies). Needs `CAP_NET_RAW`.
    pub fn open(ifname: &str, vnet_hdr: bool, buffer: usize) -> io::Result<PacketSocket> {
        let name = CString::new(ifname)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in interface name"))?;
        // SAFETY: `name` is a valid NUL-terminated string that outlives the call.
        #[allow(unsafe_code)]
        let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
        if index == 0 {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no interface named {ifname}"),
            ));
        }
        let proto = (libc::ETH_P_ALL as u16).to_be();
        // SAFETY: socket(2) with constant arguments; it returns a new descriptor or -1.
        #[allow(unsafe_code)]
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::c_int::from(proto),
            )
        };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `raw` is a descriptor socket(2) just returned, owned by nothing else.
        #[allow(unsafe_code)]
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = PacketSocket { fd };
        // Before binding, so no frame is queued without its header.
        if vnet_hdr {
            s.set_int(libc::SOL_PACKET, PACKET_VNET_HDR, 1)?;
        }
        s.set_int(libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)?;
        let size = libc::c_int::try_from(buffer).unwrap_or(libc::c_int::MAX);
        for (force, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            if s.set_int(libc::SOL_SOCKET, force, size).is_err() {
                s.set_int(libc::SOL_SOCKET, plain, size)?;
            }
        }
        // SAFETY: an all-zero sockaddr_ll is a valid value of the plain C struct.
        #[allow(unsafe_code)]
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = proto;
        addr.sll_ifindex = index as libc::c_int;
        // SAFETY: `addr` is a filled sockaddr_ll and the length passed is its size; the fd is
        // open for the call.
        #[allow(unsafe_code)]
        let rc = unsafe {
            libc::bind(
                s.fd.as_raw_fd(),
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(s)
    }

    fn set_int(&self, level: libc::c_int, opt: libc::c_int, value: libc::c_int) -> io::Result<()> {
        // SAFETY: `value` is a readable c_int and the length passed is its size; the fd is
        // open for the call.
        #[allow(unsafe_code)]
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                level,
                opt,
                (&value as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    }

    /// Reads one frame into `buf` without waiting: `Ok(None)` when none is queued. The length
    /// returned is the frame's whole length, which is more than `buf.len()` when the frame
    /// did not fit (its tail was cut off).
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        match rustix::net::recv(&self.fd, buf, RecvFlags::DONTWAIT | RecvFlags::TRUNC) {
            Ok((_, n)) => Ok(Some(n)),
            Err(rustix::io::Errno::AGAIN) => Ok(None),
            Err(rustix::io::Errno::INTR) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes one frame (with its `virtio_net_hdr` when the socket has them), waiting for
    /// room in the socket's send buffer.
    pub fn send(&self, frame: &[u8]) -> io::Result<()> {
        loop {
            match rustix::net::send(&self.fd, frame, SendFlags::empty()) {
                Ok(_) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The kernel's receive counters since the last call (reading them resets them).
    pub fn stats(&self) -> io::Result<PacketStats> {
        // struct tpacket_stats { unsigned int tp_packets; unsigned int tp_drops; }
        let mut v = [0u32; 2];
        let mut len = std::mem::size_of_val(&v) as libc::socklen_t;
        // SAFETY: `v` is writable and `len` holds its size; the kernel writes at most `len`
        // bytes. The fd is open for the call.
        #[allow(unsafe_code)]
        let rc = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                v.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        // tp_packets counts the dropped frames too.
        Ok(PacketStats {
            packets: u64::from(v[0].saturating_sub(v[1])),
            drops: u64::from(v[1]),
        })
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Waits until `fd` is readable or `timeout` passes (`None`: no limit). `Ok(false)` on a
/// timeout or an interrupting signal.
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Option<std::time::Duration>) -> io::Result<bool> {
    use rustix::event::{PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let ts = timeout.map(|t| Timespec {
        tv_sec: t.as_secs() as _,
        tv_nsec: t.subsec_nanos() as _,
    });
    match rustix::event::poll(&mut fds, ts.as_ref()) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_interface_is_named() {
        let e = PacketSocket::open("zcp-no-such0", true, 1 << 20).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("zcp-no-such0"), "{e}");
    }

    #[test]
    fn loopback_frames_cross_between_two_sockets() {
        // Needs CAP_NET_RAW; without it there is nothing to test here.
        let Ok(rx) = PacketSocket::open("lo", false, 1 << 20) else {
            return;
        };
        let tx = PacketSocket::open("lo", false, 1 << 20).unwrap();
        // An Ethernet frame to and from 00:00:00:00:00:00 with a local experimental
        // ethertype, which no stack on lo consumes.
        let mut frame = vec![0u8; 14 + 46];
        frame[12..14].copy_from_slice(&0x88b5u16.to_be_bytes());
        frame[14..22].copy_from_slice(b"zcp-test");
        tx.send(&frame).unwrap();
        let mut buf = [0u8; 2048];
        let mut seen = false;
        for _ in 0..50 {
            if !wait_readable(rx.as_fd(), Some(std::time::Duration::from_millis(20))).unwrap() {
                continue;
            }
            while let Some(n) = rx.recv(&mut buf).unwrap() {
                if n == frame.len() && buf[..n] == frame[..] {
                    seen = true;
                }
            }
            if seen {
                break;
            }
        }
        assert!(seen, "the frame sent on lo was not read back");
        assert!(rx.stats().unwrap().packets >= 1);
    }
}
