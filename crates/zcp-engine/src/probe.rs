//! Read-only host probes for `zcp doctor` that are not files under `/proc` or `/sys`: the
//! ethtool ioctls (ring sizes, offloads), a TCP path probe towards a peer (connect time, path
//! MTU, negotiated segment size) and a data-directory probe (device, filesystem, space,
//! whether O_DIRECT and splice work there).
//!
//! None of them changes the host: the ioctls are the `ETHTOOL_G*` (get) commands, the path
//! probe opens and closes TCP connections, and the directory probe writes one scratch file
//! that it removes.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::fs::FsInfo;

/// `SIOCETHTOOL` sub-commands (linux/ethtool.h): all of them "get".
const ETHTOOL_GRINGPARAM: u32 = 0x10;
const ETHTOOL_GTSO: u32 = 0x1e;
const ETHTOOL_GGSO: u32 = 0x23;
const ETHTOOL_GGRO: u32 = 0x2b;

/// `struct ethtool_ringparam`.
#[repr(C)]
#[derive(Default)]
struct RingParam {
    cmd: u32,
    rx_max_pending: u32,
    rx_mini_max_pending: u32,
    rx_jumbo_max_pending: u32,
    tx_max_pending: u32,
    rx_pending: u32,
    rx_mini_pending: u32,
    rx_jumbo_pending: u32,
    tx_pending: u32,
}

/// `struct ethtool_value`.
#[repr(C)]
#[derive(Default)]
struct EthtoolValue {
    cmd: u32,
    data: u32,
}

/// A NIC's descriptor rings: current and maximum entries (`ethtool -g`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rings {
    /// Receive ring entries in use.
    pub rx: u32,
    /// Largest receive ring the driver allows.
    pub rx_max: u32,
    /// Transmit ring entries in use.
    pub tx: u32,
    /// Largest transmit ring the driver allows.
    pub tx_max: u32,
}

/// Segmentation and receive offloads of an interface (`ethtool -k`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offloads {
    /// Generic receive offload.
    pub gro: bool,
    /// Generic segmentation offload.
    pub gso: bool,
    /// TCP segmentation offload.
    pub tso: bool,
}

/// Runs one `SIOCETHTOOL` request with `data` (whose first `u32` is the command).
fn ethtool<T>(iface: &str, data: &mut T) -> io::Result<()> {
    let name = iface.as_bytes();
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{iface:?} is not an interface name"),
        ));
    }
    let sock = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        None,
    )?;
    // SAFETY: `ifreq` is plain data (a byte array and a union of integers and pointers), for
    // which all-zero is a valid value.
    #[allow(unsafe_code)]
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(name) {
        *dst = *src as libc::c_char;
    }
    req.ifr_ifru.ifru_data = (data as *mut T).cast();
    // SAFETY: `req` is a valid, NUL-terminated `ifreq` whose data pointer points to `data`, a
    // live `#[repr(C)]` ethtool struct of the size the command expects; the kernel writes
    // only within it. Both outlive the call; the socket is open for its duration.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::ioctl(
            sock.as_fd().as_raw_fd(),
            libc::SIOCETHTOOL as _,
            &mut req as *mut libc::ifreq,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// `ETHTOOL_GRINGPARAM` on `iface`: its ring sizes, current and maximum.
pub fn rings(iface: &str) -> io::Result<Rings> {
    let mut p = RingParam {
        cmd: ETHTOOL_GRINGPARAM,
        ..RingParam::default()
    };
    ethtool(iface, &mut p)?;
    Ok(Rings {
        rx: p.rx_pending,
        rx_max: p.rx_max_pending,
        tx: p.tx_pending,
        tx_max: p.tx_max_pending,
    })
}

/// `ETHTOOL_GGRO`, `ETHTOOL_GGSO`, `ETHTOOL_GTSO` on `iface`.
pub fn offloads(iface: &str) -> io::Result<Offloads> {
    let get = |cmd| {
        let mut v = EthtoolValue { cmd, data: 0 };
        ethtool(iface, &mut v).map(|()| v.data != 0)
    };
    Ok(Offloads {
        gro: get(ETHTOOL_GGRO)?,
        gso: get(ETHTOOL_GGSO)?,
        tso: get(ETHTOOL_GTSO)?,
    })
}

/// What a few TCP connections to a peer showed about the path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathProbe {
    /// The shortest connect (SYN to SYN-ACK) of the attempts: one round trip plus the peer's
    /// accept latency.
    pub connect_min: Duration,
    /// The median of the attempts (the upper middle one of an even count).
    pub connect_median: Duration,
    /// The longest one.
    pub connect_max: Duration,
    /// Connections that succeeded.
    pub samples: u32,
    /// The kernel's path MTU towards the peer (`IP_MTU`/`IPV6_MTU`): the route's MTU, or less
    /// where path MTU discovery has learned of a smaller hop.
    pub path_mtu: Option<u32>,
    /// The segment size the connection settled on (`TCP_MAXSEG`): bounded by both our path
    /// MTU and the MSS the peer announced, so it shows the peer's MTU too.
    pub mss: Option<u32>,
    /// Our address on that path (it names the interface the route uses).
    pub local: SocketAddr,
}

/// Connects to `peer` up to `tries` times (each bounded by `timeout`), closing each connection
/// at once without sending anything, and reads the path's MTU and segment size from the last.
pub fn probe_path(peer: SocketAddr, tries: u32, timeout: Duration) -> io::Result<PathProbe> {
    let mut times = Vec::new();
    let mut last = None;
    let mut error = None;
    for _ in 0..tries.max(1) {
        let start = Instant::now();
        match TcpStream::connect_timeout(&peer, timeout) {
            Ok(s) => {
                times.push(start.elapsed());
                last = Some(s);
            }
            Err(e) => error = Some(e),
        }
    }
    let Some(stream) = last else {
        return Err(error.unwrap_or_else(|| io::Error::other("no connection attempted")));
    };
    let (level, opt) = if peer.is_ipv4() {
        (libc::IPPROTO_IP, libc::IP_MTU)
    } else {
        (libc::IPPROTO_IPV6, libc::IPV6_MTU)
    };
    times.sort();
    Ok(PathProbe {
        connect_min: times.iter().copied().min().unwrap_or_default(),
        connect_median: times.get(times.len() / 2).copied().unwrap_or_default(),
        connect_max: times.iter().copied().max().unwrap_or_default(),
        samples: times.len() as u32,
        path_mtu: getsockopt_u32(&stream, level, opt),
        mss: getsockopt_u32(&stream, libc::IPPROTO_TCP, libc::TCP_MAXSEG),
        local: stream.local_addr()?,
    })
}

/// An integer socket option; `None` when the kernel refuses it.
fn getsockopt_u32(fd: impl AsFd, level: libc::c_int, opt: libc::c_int) -> Option<u32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` is a writable `c_int` and `len` holds its size; the kernel writes at most
    // `len` bytes. The fd is borrowed, so it stays open for the call.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            level,
            opt,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0 && value > 0).then_some(value as u32)
}

/// The data directory as the storage checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirProbe {
    /// The directory with symlinks resolved.
    pub path: PathBuf,
    /// `major:minor` of the device holding it (`st_dev`), as `/proc/self/mountinfo` and
    /// `/sys/dev/block` name devices.
    pub dev: (u32, u32),
    /// Filesystem, in-memory flag and free space.
    pub fs: FsInfo,
    /// The filesystem's size in bytes.
    pub total_bytes: u64,
    /// Whether an O_DIRECT write of one aligned block works there (else why not).
    pub direct: Result<(), String>,
    /// Whether splicing from a pipe into a file there works (else why not).
    pub splice: Result<(), String>,
}

/// Probes directory `dir` (see [`DirProbe`]); the scratch file it writes is removed again.
pub fn probe_dir(dir: &Path) -> io::Result<DirProbe> {
    let path = std::fs::canonicalize(dir)?;
    let fd = rustix::fs::open(
        &path,
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    let st = rustix::fs::fstat(&fd)?;
    let vfs = rustix::fs::fstatvfs(&fd)?;
    let fs = crate::fs::fs_info(&fd).map_err(|e| io::Error::other(e.to_string()))?;
    let (direct, splice) = crate::recv::probe_engines(fd.as_fd(), &fs);
    Ok(DirProbe {
        path,
        dev: (rustix::fs::major(st.st_dev), rustix::fs::minor(st.st_dev)),
        total_bytes: vfs.f_blocks.saturating_mul(vfs.f_frsize),
        fs,
        direct,
        splice,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ethtool_refuses_bad_names_before_any_syscall() {
        for bad in ["", "a-name-longer-than-ifnamsiz", "nul\0name"] {
            let e = rings(bad).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn loopback_has_no_rings_but_reports_offloads() {
        // `lo` exists in every network namespace; it has no rings (EOPNOTSUPP) but answers
        // the offload queries.
        assert!(rings("lo").is_err());
        let off = offloads("lo").unwrap();
        assert!(off.gso, "lo does GSO");
    }

    #[test]
    fn probes_a_directory() {
        let dir = tempfile::tempdir().unwrap();
        let p = probe_dir(dir.path()).unwrap();
        assert!(p.total_bytes >= p.fs.free_bytes);
        assert!(p.splice.is_ok() || p.fs.name != "ext4", "{p:?}");
        assert_eq!(
            std::fs::read_dir(dir.path()).unwrap().count(),
            0,
            "probe file removed"
        );
    }

    #[test]
    fn probes_a_loopback_path() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let p = probe_path(addr, 3, Duration::from_secs(2)).unwrap();
        assert_eq!(p.samples, 3);
        assert!(p.connect_min <= p.connect_median && p.connect_median <= p.connect_max);
        assert!(p.path_mtu.unwrap() >= 1280, "{p:?}");
        assert!(p.mss.unwrap() > 500, "{p:?}");
        assert!(p.local.ip().is_loopback());
    }

    #[test]
    fn path_probe_to_a_closed_port_fails() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        assert!(probe_path(addr, 2, Duration::from_secs(1)).is_err());
    }
}
