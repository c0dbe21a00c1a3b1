//! Small syscall wrappers: resource usage and limits, `TCP_INFO`, random bytes, socket timeouts.
//!
//! Each wrapper is named after its call, takes borrowed file descriptors, and returns values
//! in plain Rust types, so nothing above this crate sees a `libc` struct.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::time::Duration;

/// CPU time and related counters of a thread or a process, from `getrusage(2)`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Time in user mode.
    pub user: Duration,
    /// Time in kernel mode.
    pub sys: Duration,
    /// Peak resident set size in bytes (process-wide even for a thread, as Linux reports it).
    pub max_rss_bytes: u64,
    /// Page faults served without I/O.
    pub minor_faults: u64,
    /// Page faults that needed I/O.
    pub major_faults: u64,
    /// Voluntary context switches (blocked waiting).
    pub voluntary_switches: u64,
    /// Involuntary context switches (preempted).
    pub involuntary_switches: u64,
}

impl Usage {
    /// `self - earlier` for the counters; `max_rss_bytes` keeps `self`'s value.
    pub fn since(&self, earlier: &Usage) -> Usage {
        Usage {
            user: self.user.saturating_sub(earlier.user),
            sys: self.sys.saturating_sub(earlier.sys),
            max_rss_bytes: self.max_rss_bytes,
            minor_faults: self.minor_faults.saturating_sub(earlier.minor_faults),
            major_faults: self.major_faults.saturating_sub(earlier.major_faults),
            voluntary_switches: self
                .voluntary_switches
                .saturating_sub(earlier.voluntary_switches),
            involuntary_switches: self
                .involuntary_switches
                .saturating_sub(earlier.involuntary_switches),
        }
    }

    /// Adds `other`'s counters to `self`; `max_rss_bytes` becomes the larger of the two.
    pub fn add(&mut self, other: &Usage) {
        self.user += other.user;
        self.sys += other.sys;
        self.max_rss_bytes = self.max_rss_bytes.max(other.max_rss_bytes);
        self.minor_faults += other.minor_faults;
        self.major_faults += other.major_faults;
        self.voluntary_switches += other.voluntary_switches;
        self.involuntary_switches += other.involuntary_switches;
    }
}

fn getrusage(who: libc::c_int) -> Usage {
    let mut ru = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `ru` is a valid, writable rusage; `who` is RUSAGE_SELF or RUSAGE_THREAD, both
    // supported on Linux, so the call cannot fail and fills the whole struct.
    #[allow(unsafe_code)]
    let ru = unsafe {
        libc::getrusage(who, ru.as_mut_ptr());
        ru.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, (t.tv_usec as u32) * 1000);
    Usage {
        user: tv(ru.ru_utime),
        sys: tv(ru.ru_stime),
        max_rss_bytes: (ru.ru_maxrss as u64) * 1024,
        minor_faults: ru.ru_minflt as u64,
        major_faults: ru.ru_majflt as u64,
        voluntary_switches: ru.ru_nvcsw as u64,
        involuntary_switches: ru.ru_nivcsw as u64,
    }
}

/// `getrusage(RUSAGE_THREAD)`: the calling thread's usage so far.
pub fn thread_usage() -> Usage {
    getrusage(libc::RUSAGE_THREAD)
}

/// `getrusage(RUSAGE_SELF)`: the whole process's usage so far.
pub fn process_usage() -> Usage {
    getrusage(libc::RUSAGE_SELF)
}

/// What `TCP_INFO` says about a connection, in the units iperf3 prints.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpStats {
    /// Smoothed round-trip time, microseconds.
    pub rtt_us: u32,
    /// Round-trip time variance, microseconds.
    pub rttvar_us: u32,
    /// Congestion window, in segments.
    pub snd_cwnd: u32,
    /// Sender maximum segment size, bytes.
    pub snd_mss: u32,
    /// Segments retransmitted over the connection's life.
    pub total_retrans: u32,
}

/// `getsockopt(fd, IPPROTO_TCP, TCP_INFO)`. `None` where the socket is not TCP.
pub fn tcp_info(fd: impl AsFd) -> Option<TcpStats> {
    let mut info = std::mem::MaybeUninit::<libc::tcp_info>::zeroed();
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `info` is writable for `len` bytes and `len` points to its size; the kernel
    // writes at most `len` bytes and updates `len`. The fd is borrowed, so it stays open.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::getsockopt(
            fd.as_fd().as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            info.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return None;
    }
    // SAFETY: zero-initialised, then (partly) written by the kernel: every field is an
    // integer, for which any bit pattern is valid.
    #[allow(unsafe_code)]
    let info = unsafe { info.assume_init() };
    Some(TcpStats {
        rtt_us: info.tcpi_rtt,
        rttvar_us: info.tcpi_rttvar,
        snd_cwnd: info.tcpi_snd_cwnd,
        snd_mss: info.tcpi_snd_mss,
        total_retrans: info.tcpi_total_retrans,
    })
}

/// `getrandom(buf, 0)`: fills `buf` from the kernel's CSPRNG.
pub fn getrandom(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        match rustix::rand::getrandom(&mut buf[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// This process's effective user id.
pub fn euid() -> u32 {
    rustix::process::geteuid().as_raw()
}

/// Asks process `pid` to end (SIGTERM): a child gets to restore what it changed (ssh, a
/// terminal's echo) before a kill.
pub fn terminate(pid: u32) -> io::Result<()> {
    let pid = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).map_err(io::Error::from)
}

/// A fresh random array.
pub fn random<const N: usize>() -> io::Result<[u8; N]> {
    let mut out = [0u8; N];
    getrandom(&mut out)?;
    Ok(out)
}

/// Sets `SO_RCVTIMEO` and `SO_SNDTIMEO`: a blocking call that makes no progress for `t`
/// fails with EAGAIN, which the engine's errno classifier reports as a timeout.
pub fn set_socket_timeouts(fd: impl AsFd, t: Option<Duration>) -> io::Result<()> {
    use rustix::net::sockopt::{Timeout, set_socket_timeout};
    set_socket_timeout(&fd, Timeout::Recv, t)?;
    set_socket_timeout(&fd, Timeout::Send, t)?;
    Ok(())
}

/// The socket's receive timeout, if one is set.
pub fn socket_timeout(fd: impl AsFd) -> Option<Duration> {
    rustix::net::sockopt::socket_timeout(&fd, rustix::net::sockopt::Timeout::Recv)
        .ok()
        .flatten()
}

/// `poll(2)` for readability: whether `fd` became readable within `timeout`.
pub fn wait_readable(fd: impl AsFd, timeout: Duration) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    let ts = Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    matches!(poll(&mut fds, Some(&ts)), Ok(n) if n > 0)
}

/// Waits until any of `fds` is readable, or `timeout`; whether one is.
pub fn wait_any_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec, poll};
    let mut polled: Vec<PollFd<'_>> = fds.iter().map(|f| PollFd::new(f, PollFlags::IN)).collect();
    let ts = Timespec {
        tv_sec: timeout.as_secs() as i64,
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    matches!(poll(&mut polled, Some(&ts)), Ok(n) if n > 0)
}

/// Whether `e` says the process (`EMFILE`) or the system (`ENFILE`) is out of file
/// descriptors.
pub fn is_fd_limit(e: &io::Error) -> bool {
    use rustix::io::Errno;
    e.raw_os_error()
        .map(Errno::from_raw_os_error)
        .is_some_and(|n| n == Errno::MFILE || n == Errno::NFILE)
}

/// The soft limit on open files in force now (`RLIMIT_NOFILE`); `None` when unlimited.
pub fn open_files_limit() -> Option<u64> {
    rustix::process::getrlimit(rustix::process::Resource::Nofile).current
}

/// Raises the soft limit on open files to the hard limit and returns the limit now in force.
///
/// A receiver may hold a thousand part files of one session open, and a server several
/// sessions; Debian's default soft limit of 1024 would fail them with `EMFILE` while the hard
/// limit (usually 524288) allows far more.
pub fn raise_open_files_limit() -> Option<u64> {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let mut l = getrlimit(Resource::Nofile);
    if l.current < l.maximum {
        l.current = l.maximum;
        setrlimit(Resource::Nofile, l).ok()?;
    }
    getrlimit(Resource::Nofile).current
}

/// The process's resident set size now, in bytes (`/proc/self/statm`); `None` where procfs
/// is not mounted. Sampled while a session runs, its maximum is the process's peak during the
/// session — unlike `ru_maxrss`, which is the peak over the process's whole life.
pub fn current_rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

/// Bytes of the page cache that are dirty or being written back, host-wide (`Dirty` plus
/// `Writeback` of `/proc/meminfo`); `None` where procfs is not mounted.
pub fn dirty_bytes() -> Option<u64> {
    parse_dirty(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

fn parse_dirty(meminfo: &str) -> Option<u64> {
    let kib = |name: &str| -> Option<u64> {
        let line = meminfo.lines().find(|l| l.starts_with(name))?;
        line[name.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    Some((kib("Dirty:")? + kib("Writeback:")?) * 1024)
}

/// The peak of [`current_rss_bytes`] over a stretch of time (a session), sampled at most
/// every 100 ms.
#[derive(Debug, Default)]
pub struct RssPeak {
    peak: u64,
    last: Option<std::time::Instant>,
}

impl RssPeak {
    /// Samples the RSS now unless a sample was taken in the last 100 ms; returns the peak.
    pub fn sample(&mut self) -> u64 {
        let now = std::time::Instant::now();
        if self
            .last
            .is_none_or(|t| now.duration_since(t) >= Duration::from_millis(100))
        {
            self.last = Some(now);
            self.peak = self.peak.max(current_rss_bytes().unwrap_or(0));
        }
        self.peak
    }
}

/// Whether `e` says the host has no IPv6 (the family is not supported, or `::` cannot be
/// bound).
pub fn is_no_ipv6(e: &io::Error) -> bool {
    use rustix::io::Errno;
    e.raw_os_error()
        .map(Errno::from_raw_os_error)
        .is_some_and(|n| n == Errno::AFNOSUPPORT || n == Errno::ADDRNOTAVAIL)
}

/// A TCP listener on `addr`. For an IPv6 address, `v6only` sets `IPV6_V6ONLY` explicitly:
/// `false` makes `[::]` dual-stack (IPv4 clients arrive as `::ffff:a.b.c.d`) whatever the
/// host's `net.ipv6.bindv6only` says; `true` refuses IPv4. Ignored for IPv4 addresses.
pub fn listen_tcp(addr: std::net::SocketAddr, v6only: bool) -> io::Result<std::net::TcpListener> {
    use rustix::net::{AddressFamily, SocketType, bind, ipproto, listen, socket, sockopt};
    let family = if addr.is_ipv6() {
        AddressFamily::INET6
    } else {
        AddressFamily::INET
    };
    let fd = socket(family, SocketType::STREAM, Some(ipproto::TCP))?;
    sockopt::set_socket_reuseaddr(&fd, true)?;
    if addr.is_ipv6() {
        sockopt::set_ipv6_v6only(&fd, v6only)?;
    }
    bind(&fd, &addr)?;
    listen(&fd, 1024)?;
    Ok(std::net::TcpListener::from(fd))
}

/// Whether this kernel offers kernel TLS (`setsockopt(TCP_ULP, "tls")`), which would let a TLS
/// connection send a file's pages with `sendfile`. Probed on a fresh, unconnected TCP socket:
/// `ENOENT` means no `tls` upper-layer protocol (not built, or its module not loadable);
/// `ENOTCONN` means the kernel has it (it only attaches to a connected socket). `Err` says why
/// not, for the start line and `--version`.
pub fn ktls_available() -> Result<(), String> {
    use std::os::fd::AsRawFd;
    let sock = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::STREAM,
        None,
    )
    .map_err(|e| format!("no TCP socket to probe with: {e}"))?;
    let name = b"tls";
    // SAFETY: `name` is a live byte array and the length passed is its size; the kernel only
    // reads it. `sock` is owned here and open for the call.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_ULP,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    let err = std::io::Error::last_os_error();
    match (rc, err.raw_os_error()) {
        (0, _) => Ok(()),
        (_, Some(libc::ENOTCONN)) => Ok(()),
        (_, Some(libc::ENOENT)) => {
            Err("this kernel has no kernel TLS (TCP_ULP tls: ENOENT)".into())
        }
        _ => Err(format!(
            "kernel TLS could not be probed (TCP_ULP tls: {err})"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_usage_counts_work() {
        let before = thread_usage();
        // Spin for wall time, not iterations: CPU accounting may be tick-based (4 ms), and an
        // optimised loop of fixed length can finish inside one tick.
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed() < Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        let d = thread_usage().since(&before);
        assert!(d.user + d.sys >= Duration::from_millis(20), "{d:?}");
        assert!(process_usage().max_rss_bytes > 0);
        assert!(current_rss_bytes().is_some_and(|r| r > 0));
    }

    #[test]
    fn the_open_files_limit_ends_at_the_hard_limit() {
        let hard = rustix::process::getrlimit(rustix::process::Resource::Nofile).maximum;
        let now = raise_open_files_limit();
        assert_eq!(now, hard.or(now), "soft limit {now:?}, hard {hard:?}");
        assert!(now.is_none_or(|n| n >= 64));
    }

    #[test]
    fn tcp_info_on_loopback_and_not_on_a_file() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let info = tcp_info(&c).expect("TCP_INFO on a TCP socket");
        assert!(info.snd_mss > 0);
        let f = std::fs::File::open("/proc/self/status").unwrap();
        assert!(tcp_info(&f).is_none());
    }

    #[test]
    fn dual_stack_listener_takes_ipv4_and_v6only_refuses_it() {
        use std::net::{Ipv6Addr, SocketAddr, TcpStream};
        let any6 = SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0));
        let Ok(dual) = listen_tcp(any6, false) else {
            eprintln!("skipped: this host has no IPv6");
            return;
        };
        let port = dual.local_addr().unwrap().port();
        TcpStream::connect(("127.0.0.1", port)).expect("IPv4 reaches [::]");
        TcpStream::connect(("::1", port)).expect("IPv6 reaches [::]");
        let only6 = listen_tcp(any6, true).unwrap();
        let port = only6.local_addr().unwrap().port();
        assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
        TcpStream::connect(("::1", port)).expect("IPv6 reaches a v6-only [::]");
    }

    #[test]
    fn random_is_random() {
        let a: [u8; 32] = random().unwrap();
        let b: [u8; 32] = random().unwrap();
        assert_ne!(a, b);
    }

    #[test]
    fn dirty_bytes_adds_dirty_and_writeback() {
        let m = "MemFree:        1000 kB\nDirty:            12 kB\nWriteback:         3 kB\n\
                 WritebackTmp:      7 kB\n";
        assert_eq!(parse_dirty(m), Some(15 * 1024));
        assert_eq!(parse_dirty("Dirty: 12 kB\n"), None);
        assert!(dirty_bytes().is_some(), "procfs is mounted here");
    }
}
