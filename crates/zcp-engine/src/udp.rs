//! UDP sockets for `--transport udp`: batches of datagrams out with `sendmmsg(2)` (each
//! message a UDP GSO super-datagram where the kernel offers `UDP_SEGMENT`), in with
//! `recvmmsg(2)` (split by the `UDP_GRO` segment size where the kernel coalesces), the
//! socket's drop counter (`SO_RXQ_OVFL`), the path MTU (`IP_MTU`), and large socket buffers
//! (`SO_RCVBUFFORCE` as root, else as large as `rmem_max` allows). Each offload is probed and
//! falls back; [`UdpSock::engines`] names what is in use.

use std::io::{self, IoSlice};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Duration;

use libc::c_int;

use crate::AlignedBuf;
use crate::recv::{RecvEngine, Target, pwrite_all};
use crate::{EngineError, IoClass};

const UDP_SEGMENT: c_int = 103;
const UDP_GRO: c_int = 104;
const SO_RXQ_OVFL: c_int = 40;
const SO_SNDBUFFORCE: c_int = 32;
const SO_RCVBUFFORCE: c_int = 33;
/// Most segments one GSO send may carry (the kernel's `UDP_MAX_SEGMENTS`).
pub const MAX_GSO_SEGMENTS: usize = 64;
/// Most bytes of one GSO send (its segments' headers and payloads).
const MAX_GSO_BYTES: usize = 65_000;
/// Room for one received datagram, or one GRO-coalesced run of them.
pub const RECV_SLOT: usize = 65_536;
/// Socket buffers asked for, each direction.
pub const SOCKET_BUFFER: usize = 32 << 20;

fn set_int(fd: BorrowedFd<'_>, level: c_int, name: c_int, v: c_int) -> io::Result<()> {
    // SAFETY: `v` is a live c_int and the length passed is its size; the kernel only reads
    // it. The fd is borrowed, so it stays open for the call.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw const v).cast(),
            std::mem::size_of::<c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn get_int(fd: BorrowedFd<'_>, level: c_int, name: c_int) -> io::Result<c_int> {
    let mut v: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
    // SAFETY: `v` is writable for `len` bytes and `len` points to its size; the kernel
    // writes at most that much. The fd is borrowed, so it stays open for the call.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw mut v).cast(),
            &raw mut len,
        )
    };
    if rc == 0 {
        Ok(v)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A UDP socket of one stream, bound on one side of its TCP connection's path.
#[derive(Debug)]
pub struct UdpSock {
    sock: UdpSocket,
    gso: bool,
    gro: bool,
    /// The socket's drop counter, as `SO_RXQ_OVFL` last told it.
    drops: u32,
    /// Buffers the kernel granted (send, receive), bytes.
    buffers: (usize, usize),
}

impl UdpSock {
    /// Binds a socket on `ip`, port 0, with large buffers and its drop counter on; with
    /// `offload`, GSO and GRO where the kernel has them.
    pub fn bind(ip: IpAddr, offload: bool) -> io::Result<UdpSock> {
        let sock = UdpSocket::bind(SocketAddr::new(ip, 0))?;
        let fd = sock.as_fd();
        let want = SOCKET_BUFFER as c_int;
        for (force, plain) in [
            (SO_SNDBUFFORCE, libc::SO_SNDBUF),
            (SO_RCVBUFFORCE, libc::SO_RCVBUF),
        ] {
            if set_int(fd, libc::SOL_SOCKET, force, want).is_err() {
                let _ = set_int(fd, libc::SOL_SOCKET, plain, want);
            }
        }
        let _ = set_int(fd, libc::SOL_SOCKET, SO_RXQ_OVFL, 1);
        let gro = offload && set_int(fd, libc::SOL_UDP, UDP_GRO, 1).is_ok();
        let gso = offload && get_int(fd, libc::SOL_UDP, UDP_SEGMENT).is_ok();
        let size = |name| get_int(fd, libc::SOL_SOCKET, name).map_or(0, |v| v as usize / 2);
        let buffers = (size(libc::SO_SNDBUF), size(libc::SO_RCVBUF));
        Ok(UdpSock {
            sock,
            gso,
            gro,
            drops: 0,
            buffers,
        })
    }

    /// The port it is bound to.
    pub fn port(&self) -> io::Result<u16> {
        Ok(self.sock.local_addr()?.port())
    }

    /// Connects it to the peer's socket: the kernel then drops datagrams from any other
    /// address or port before they reach this socket.
    pub fn connect(&self, peer: SocketAddr) -> io::Result<()> {
        self.sock.connect(peer)
    }

    /// The path MTU the kernel holds for the connected peer (`IP_MTU`, `IPV6_MTU`).
    pub fn path_mtu(&self) -> Option<u32> {
        let fd = self.sock.as_fd();
        let v6 = self.sock.local_addr().ok()?.is_ipv6();
        let r = if v6 {
            get_int(fd, libc::IPPROTO_IPV6, libc::IPV6_MTU)
        } else {
            get_int(fd, libc::IPPROTO_IP, libc::IP_MTU)
        };
        r.ok().and_then(|v| u32::try_from(v).ok())
    }

    /// Whether sends are GSO batches, and whether receives take GRO runs.
    pub fn offloads(&self) -> (bool, bool) {
        (self.gso, self.gro)
    }

    /// The socket buffers the kernel granted (send, receive), bytes.
    pub fn buffers(&self) -> (usize, usize) {
        self.buffers
    }

    /// How reports name the engines in use, e.g. `gso+sendmmsg / gro+recvmmsg`.
    pub fn engines(&self) -> String {
        let s = if self.gso { "gso+sendmmsg" } else { "sendmmsg" };
        let r = if self.gro { "gro+recvmmsg" } else { "recvmmsg" };
        format!("{s} / {r}")
    }

    /// Datagrams the socket dropped for want of buffer space, in total (`SO_RXQ_OVFL`).
    pub fn drops(&self) -> u32 {
        self.drops
    }

    /// Gives receives up to `t` to wait (a dead peer cannot block a send forever).
    pub fn set_timeout(&self, t: Duration) -> io::Result<()> {
        self.sock.set_write_timeout(Some(t))?;
        self.sock.set_read_timeout(Some(t))
    }

    /// Sends every datagram of `grams`, each a header and a payload, to the connected peer:
    /// runs of equal size go as GSO super-datagrams, all of them in as few `sendmmsg` calls
    /// as the kernel takes. A GSO send the path refuses turns GSO off and is sent again.
    pub fn send_batch(&mut self, grams: &[(&[u8], &[u8])]) -> Result<(), EngineError> {
        let mut at = 0;
        while at < grams.len() {
            match self.send_some(&grams[at..]) {
                Ok(n) => at += n,
                Err(e) if self.gso && gso_refused(&e) => self.gso = false,
                Err(e) => match crate::io_class(&e) {
                    IoClass::Interrupted => {}
                    // ENOBUFS: the device queue is full; a moment frees it.
                    _ if e.raw_os_error() == Some(libc::ENOBUFS) => {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                    _ => {
                        return Err(EngineError::Sys {
                            call: "sendmmsg",
                            what: "UDP socket",
                            source: e,
                        });
                    }
                },
            }
        }
        Ok(())
    }

    /// One `sendmmsg` over the front of `grams`; how many datagrams went.
    fn send_some(&self, grams: &[(&[u8], &[u8])]) -> io::Result<usize> {
        // Group the datagrams into messages: a GSO run of equal sizes (the last may be
        // shorter), or one datagram each.
        let mut groups: Vec<(usize, usize, u16)> = Vec::new();
        let mut i = 0;
        while i < grams.len() && groups.len() < 64 {
            let size = grams[i].0.len() + grams[i].1.len();
            let mut j = i + 1;
            if self.gso {
                let mut total = size;
                while j < grams.len()
                    && j - i < MAX_GSO_SEGMENTS
                    && total + size <= MAX_GSO_BYTES
                    && grams[j].0.len() + grams[j].1.len() <= size
                {
                    let last = grams[j].0.len() + grams[j].1.len() < size;
                    total += size;
                    j += 1;
                    if last {
                        break;
                    }
                }
            }
            groups.push((i, j, size as u16));
            i = j;
        }
        let mut iov: Vec<IoSlice<'_>> = Vec::with_capacity(2 * i);
        for g in &grams[..i] {
            iov.push(IoSlice::new(g.0));
            iov.push(IoSlice::new(g.1));
        }
        let space = cmsg_space(std::mem::size_of::<u16>());
        let mut control = vec![0u64; groups.len() * space.div_ceil(8)];
        let stride = space.div_ceil(8);
        // SAFETY: every mmsghdr is zeroed (a valid empty header) and then points into `iov`
        // and `control`, which outlive the call and are not moved meanwhile. Each message's
        // iovec range lies inside `iov`; each control buffer is `space` bytes inside
        // `control`, 8-byte aligned, and the cmsg written into it fits (CMSG_SPACE of a u16).
        // IoSlice is ABI-compatible with iovec. The kernel only reads these buffers.
        #[allow(unsafe_code)]
        let sent = unsafe {
            let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(groups.len());
            for (k, &(a, b, seg)) in groups.iter().enumerate() {
                let mut m: libc::mmsghdr = std::mem::zeroed();
                m.msg_hdr.msg_iov = iov.as_ptr().add(2 * a) as *mut libc::iovec;
                m.msg_hdr.msg_iovlen = 2 * (b - a);
                if b - a > 1 {
                    let buf = control.as_mut_ptr().add(k * stride).cast::<u8>();
                    m.msg_hdr.msg_control = buf.cast();
                    m.msg_hdr.msg_controllen = space;
                    let c = libc::CMSG_FIRSTHDR(&raw const m.msg_hdr);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(2) as usize;
                    std::ptr::write_unaligned(libc::CMSG_DATA(c).cast::<u16>(), seg);
                }
                msgs.push(m);
            }
            libc::sendmmsg(
                self.sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                msgs.len() as libc::c_uint,
                0,
            )
        };
        if sent < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(groups
            .iter()
            .take(sent as usize)
            .map(|&(a, b, _)| b - a)
            .sum())
    }

    /// Takes what datagrams are queued now, without waiting, into `batch` (emptied first);
    /// how many messages came (0: none queued). Records the socket's drop counter.
    pub fn recv_batch(&mut self, batch: &mut RecvBatch) -> Result<usize, EngineError> {
        batch.filled = 0;
        let n = batch.slots.len();
        let space = batch.stride * 8;
        let mut iov: Vec<libc::iovec> = batch
            .slots
            .iter_mut()
            .map(|s| libc::iovec {
                iov_base: s.as_mut_ptr().cast(),
                iov_len: s.len(),
            })
            .collect();
        // SAFETY: every mmsghdr is zeroed, then points at one iovec of `iov` (each naming a
        // live slot of `batch`, RECV_SLOT bytes) and at its own `space`-byte, 8-aligned part
        // of `batch.control`; all outlive the call and are not moved meanwhile. The kernel
        // writes at most those lengths. MSG_DONTWAIT: never blocks.
        #[allow(unsafe_code)]
        let (got, msgs) = unsafe {
            let mut msgs: Vec<libc::mmsghdr> = Vec::with_capacity(n);
            for (k, v) in iov.iter_mut().enumerate() {
                let mut m: libc::mmsghdr = std::mem::zeroed();
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
                m.msg_hdr.msg_control = batch.control.as_mut_ptr().add(k * batch.stride).cast();
                m.msg_hdr.msg_controllen = space;
                msgs.push(m);
            }
            let got = libc::recvmmsg(
                self.sock.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            );
            (got, msgs)
        };
        if got < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(EngineError::Sys {
                    call: "recvmmsg",
                    what: "UDP socket",
                    source: e,
                }),
            };
        }
        for (k, m) in msgs.iter().take(got as usize).enumerate() {
            let (seg, drops) = read_cmsgs(&m.msg_hdr);
            if let Some(d) = drops {
                self.drops = self.drops.max(d);
            }
            let truncated = m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            batch.lens[k] = if truncated { 0 } else { m.msg_len as usize };
            batch.segs[k] = seg.map_or(0, usize::from);
        }
        batch.filled = got as usize;
        Ok(batch.filled)
    }
}

/// Whether a GSO send failed because the path cannot segment (so plain sends may work).
fn gso_refused(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EIO | libc::EINVAL | libc::EOPNOTSUPP)
    )
}

fn cmsg_space(data: usize) -> usize {
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    #[allow(unsafe_code)]
    unsafe {
        libc::CMSG_SPACE(data as u32) as usize
    }
}

/// The GRO segment size and the drop counter among a received message's control messages.
fn read_cmsgs(h: &libc::msghdr) -> (Option<u16>, Option<u32>) {
    let (mut seg, mut drops) = (None, None);
    // SAFETY: `h` was filled by recvmmsg: its control pointer and (kernel-set) length
    // describe initialised bytes of a live buffer; CMSG_FIRSTHDR/NXTHDR stay inside them,
    // and each read is of a value the kernel wrote whole (read unaligned).
    #[allow(unsafe_code)]
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            let data = libc::CMSG_DATA(c);
            match ((*c).cmsg_level, (*c).cmsg_type) {
                (libc::SOL_UDP, UDP_GRO) => {
                    // The kernel gives the segment size as an int.
                    let v = std::ptr::read_unaligned(data.cast::<c_int>());
                    seg = u16::try_from(v).ok();
                }
                (libc::SOL_SOCKET, SO_RXQ_OVFL) => {
                    drops = Some(std::ptr::read_unaligned(data.cast::<u32>()));
                }
                _ => {}
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    (seg, drops)
}

/// Room for a batch of received messages and their control data.
#[derive(Debug)]
pub struct RecvBatch {
    slots: Vec<Vec<u8>>,
    lens: Vec<usize>,
    segs: Vec<usize>,
    control: Vec<u64>,
    stride: usize,
    filled: usize,
}

impl RecvBatch {
    /// Room for `n` messages of up to [`RECV_SLOT`] bytes each.
    pub fn new(n: usize) -> RecvBatch {
        let stride = (cmsg_space(4) + cmsg_space(4)).div_ceil(8);
        RecvBatch {
            slots: (0..n).map(|_| vec![0u8; RECV_SLOT]).collect(),
            lens: vec![0; n],
            segs: vec![0; n],
            control: vec![0; n * stride],
            stride,
            filled: 0,
        }
    }

    /// Each datagram of the last receive, as [`RecvBatch::datagrams`], to change in place
    /// (an encrypted one is decrypted where it lies).
    pub fn datagrams_mut(&mut self) -> impl Iterator<Item = &mut [u8]> {
        let (lens, segs) = (&self.lens, &self.segs);
        (self.slots.iter_mut().take(self.filled).enumerate()).flat_map(move |(k, s)| {
            let d = &mut s[..lens[k]];
            let seg = match segs[k] {
                0 => d.len().max(1),
                seg => seg,
            };
            d.chunks_mut(seg)
        })
    }

    /// Each datagram of the last receive, a GRO run split at its segment size; a truncated
    /// message is left out.
    pub fn datagrams(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.filled).flat_map(move |k| {
            let d = &self.slots[k][..self.lens[k]];
            let seg = if self.segs[k] == 0 {
                d.len().max(1)
            } else {
                self.segs[k]
            };
            d.chunks(seg)
        })
    }
}

/// `poll(2)` on two descriptors for up to `timeout`: whether each is readable (an error or
/// hang-up counts: the next read says which).
pub fn poll_two(a: BorrowedFd<'_>, b: BorrowedFd<'_>, timeout: Duration) -> (bool, bool) {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [
        PollFd::new(&a, PollFlags::IN),
        PollFd::new(&b, PollFlags::IN),
    ];
    let ts = Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    if !matches!(poll(&mut fds, Some(&ts)), Ok(n) if n > 0) {
        return (false, false);
    }
    let ready = |f: &PollFd<'_>| !f.revents().is_empty();
    (ready(&fds[0]), ready(&fds[1]))
}

impl AsFd for UdpSock {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

/// Reads all of `buf` from `file` at `offset` (`pread(2)`); a file that ends first is
/// [`EngineError::SourceShort`].
pub fn read_at(file: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> Result<(), EngineError> {
    let mut got = 0;
    while got < buf.len() {
        let at = offset + got as u64;
        match rustix::io::pread(file, &mut buf[got..], at) {
            Ok(0) => {
                return Err(EngineError::SourceShort {
                    at,
                    expected: offset + buf.len() as u64,
                });
            }
            Ok(n) => got += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => {
                return Err(EngineError::Sys {
                    call: "pread",
                    what: "source file",
                    source: e.into(),
                });
            }
        }
    }
    Ok(())
}

/// Writes a whole chunk assembled in memory with the engine its placement names: `direct`
/// from the aligned buffer with `O_DIRECT` (the last block padded with zeros; the commit
/// cuts the file to its size), `null`/`mem` nothing, the others `pwrite(2)`.
pub fn write_chunk(
    engine: RecvEngine,
    target: Option<&Target>,
    offset: u64,
    buf: &AlignedBuf,
    len: usize,
) -> Result<(), EngineError> {
    let Some(t) = target.filter(|_| engine.stores()) else {
        return Ok(());
    };
    match (&t.direct, engine) {
        (Some(d), RecvEngine::Direct) => {
            let padded = len.div_ceil(4096) * 4096;
            pwrite_all(d.as_fd(), &buf[..padded], offset)
        }
        _ => pwrite_all(t.file.as_fd(), &buf[..len], offset),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn pair(offload: bool) -> (UdpSock, UdpSock) {
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let a = UdpSock::bind(lo, offload).unwrap();
        let b = UdpSock::bind(lo, offload).unwrap();
        a.connect(SocketAddr::new(lo, b.port().unwrap())).unwrap();
        b.connect(SocketAddr::new(lo, a.port().unwrap())).unwrap();
        (a, b)
    }

    fn round_trip(offload: bool) {
        let (mut a, mut b) = pair(offload);
        let payload: Vec<u8> = (0..200 * 1000).map(|i| (i % 251) as u8).collect();
        let heads: Vec<[u8; 4]> = (0..200u32).map(|i| i.to_be_bytes()).collect();
        // 199 datagrams of 1004 bytes and a short last one.
        let mut grams: Vec<(&[u8], &[u8])> = (0..199)
            .map(|i| (&heads[i][..], &payload[i * 1000..(i + 1) * 1000]))
            .collect();
        grams.push((&heads[199][..], &payload[199_000..199_500]));
        a.send_batch(&grams).unwrap();
        let mut batch = RecvBatch::new(16);
        let mut got = Vec::new();
        for _ in 0..2000 {
            b.recv_batch(&mut batch).unwrap();
            let seen: Vec<Vec<u8>> = batch.datagrams().map(<[u8]>::to_vec).collect();
            let changeable: Vec<Vec<u8>> = batch.datagrams_mut().map(|d| d.to_vec()).collect();
            assert_eq!(seen, changeable, "both views cut the batch alike");
            got.extend(seen);
            if got.len() == grams.len() {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(got.len(), grams.len(), "every datagram over loopback");
        for (g, d) in grams.iter().zip(&got) {
            assert_eq!(&d[..4], g.0);
            assert_eq!(&d[4..], g.1);
        }
        assert!(a.engines().contains("sendmmsg"));
    }

    #[test]
    fn datagrams_cross_loopback_with_and_without_offloads() {
        round_trip(true);
        round_trip(false);
    }

    #[test]
    fn a_connected_socket_takes_nothing_from_another_source() {
        let (_a, mut b) = pair(false);
        let lo = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let stranger = UdpSocket::bind((lo, 0)).unwrap();
        stranger
            .send_to(b"spoofed", (lo, b.port().unwrap()))
            .unwrap();
        std::thread::sleep(Duration::from_millis(20));
        let mut batch = RecvBatch::new(4);
        assert_eq!(b.recv_batch(&mut batch).unwrap(), 0);
    }
}
