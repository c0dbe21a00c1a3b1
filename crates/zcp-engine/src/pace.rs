//! Rate caps: the kernel's TCP pacing (`SO_MAX_PACING_RATE`) and a token bucket in user space.
//!
//! The kernel spaces a socket's packets at its pacing rate (its own TCP pacing since Linux 4.13,
//! or the `fq` qdisc), so a capped stream leaves no bursts on the wire. It does not pace a
//! connection's first ten segments (`tcp_update_skb_after_send`, as `fq` did not), which on
//! loopback, with 64 KiB segments, lets about 640 KiB per stream through at once: with many slow
//! streams that alone overshoots a cap by far (measured here: 64 streams sharing 200 Mbit/s ran
//! at 397 Mbit/s over 50 MB; benches/results/2026-11-24-vm-limit-rate/kernel-only.md). So the
//! sender engines also draw every byte from a [`Pacer`], a token bucket shared by the streams of
//! a session, whose bursts are bounded: the bucket holds the average, the kernel smooths the
//! packets. Where the kernel cannot pace, the bucket alone holds the cap.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::sync::Locked;

/// `SO_MAX_PACING_RATE` (asm-generic/socket.h; sparc numbers it differently).
#[cfg(not(any(target_arch = "sparc", target_arch = "sparc64")))]
const SO_MAX_PACING_RATE: libc::c_int = 47;
#[cfg(any(target_arch = "sparc", target_arch = "sparc64"))]
const SO_MAX_PACING_RATE: libc::c_int = 0x31;

const NANOS: u128 = 1_000_000_000;

/// A token bucket over bytes, with the time passed in: `rate` bytes per second flow in, at
/// most `burst` are held, and a caller may overdraw (it then waits until the debt is paid).
/// Pure arithmetic, so it can be tested with made-up instants.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    /// Bytes per second, at least 1.
    rate: u64,
    /// Tokens held at most, in byte-nanoseconds (bytes times 10^9).
    cap: i128,
    /// Tokens now, in byte-nanoseconds; negative while overdrawn.
    level: i128,
    /// When `level` was last brought up to date.
    at: Instant,
}

impl TokenBucket {
    /// A full bucket: `rate` bytes per second (at least 1), holding at most `burst` bytes.
    pub fn new(rate: u64, burst: u64, now: Instant) -> TokenBucket {
        let cap = i128::from(burst) * NANOS as i128;
        TokenBucket {
            rate: rate.max(1),
            cap,
            level: cap,
            at: now,
        }
    }

    /// Draws `n` bytes at `now`; returns how long to wait before sending them (zero when the
    /// bucket held enough). Draws at once even when it must wait, so callers on many threads
    /// queue up one after the other.
    pub fn take(&mut self, n: u64, now: Instant) -> Duration {
        if now > self.at {
            let elapsed = now.duration_since(self.at).as_nanos();
            let inflow =
                i128::try_from(u128::from(self.rate).saturating_mul(elapsed)).unwrap_or(i128::MAX);
            self.level = self.level.saturating_add(inflow).min(self.cap);
            self.at = now;
        }
        self.level = self.level.saturating_sub(i128::from(n) * NANOS as i128);
        if self.level >= 0 {
            return Duration::ZERO;
        }
        let debt = self.level.unsigned_abs();
        let nanos = debt.div_ceil(u128::from(self.rate));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
    }

    /// Changes the rate (at least 1 byte per second) from now on; what is held stays.
    pub fn set_rate(&mut self, rate: u64) {
        self.rate = rate.max(1);
    }

    /// Gives back `n` bytes drawn but not sent (a short call).
    pub fn give_back(&mut self, n: u64) {
        self.level = (self.level.saturating_add(i128::from(n) * NANOS as i128)).min(self.cap);
    }
}

/// Shortest call a paced engine makes (below this, calls cost more than they carry).
const MIN_QUANTUM: u64 = 1024;
/// Longest call a paced engine makes.
const MAX_QUANTUM: u64 = 64 << 20;

/// A session's cap in user space: a [`TokenBucket`] shared by its streams, and the size of
/// the calls the engines make under it (about 10 ms of the rate, so the bucket holds the
/// average closely and no call carries a long burst).
#[derive(Debug)]
pub struct Pacer {
    rate: u64,
    quantum: u64,
    bucket: Mutex<TokenBucket>,
}

impl Pacer {
    /// A pacer for `rate` bytes per second over every stream that draws from it.
    pub fn new(rate: u64) -> Pacer {
        let rate = rate.max(1);
        let quantum = (rate / 100).clamp(MIN_QUANTUM, MAX_QUANTUM);
        Pacer {
            rate,
            quantum,
            bucket: Mutex::new(TokenBucket::new(rate, quantum, Instant::now())),
        }
    }

    /// Bytes per second.
    pub fn rate(&self) -> u64 {
        self.rate
    }

    /// Most bytes one engine call should move.
    pub fn quantum(&self) -> u64 {
        self.quantum
    }

    /// Waits until `n` bytes may go.
    pub fn take(&self, n: u64) {
        let wait = self.bucket.locked().take(n, Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }

    /// Gives back `n` bytes taken but not sent.
    pub fn give_back(&self, n: u64) {
        self.bucket.locked().give_back(n);
    }
}

/// Sets the socket's `SO_MAX_PACING_RATE` to `rate` bytes per second, as a 64-bit value, and
/// reads it back: a kernel that kept something else (older ones read only 32 bits, and cap
/// the rate at 4 GB/s) is an error, not a silent wrong cap.
pub fn set_max_pacing_rate(sock: BorrowedFd<'_>, rate: u64) -> std::io::Result<()> {
    let value: u64 = rate;
    // SAFETY: `value` is a live u64 and the length passed is its size; the kernel reads at
    // most that many bytes. The fd is borrowed, so it stays open for the call.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_MAX_PACING_RATE,
            (&value as *const u64).cast(),
            std::mem::size_of::<u64>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    match max_pacing_rate(sock) {
        Some(got) if got == rate => Ok(()),
        got => Err(std::io::Error::other(format!(
            "the kernel kept {} for a pacing rate of {rate} bytes/s",
            got.map_or_else(|| "nothing readable".to_string(), |g| g.to_string())
        ))),
    }
}

/// The socket's `SO_MAX_PACING_RATE` in bytes per second, read as a 64-bit value.
pub fn max_pacing_rate(sock: BorrowedFd<'_>) -> Option<u64> {
    let mut value: u64 = 0;
    let mut len = std::mem::size_of::<u64>() as libc::socklen_t;
    // SAFETY: `value` is a writable u64 and `len` holds its size; the kernel writes at most
    // `len` bytes and updates `len`. The fd is borrowed, so it stays open for the call.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_MAX_PACING_RATE,
            (&mut value as *mut u64).cast(),
            &mut len,
        )
    };
    (rc == 0 && len as usize == std::mem::size_of::<u64>()).then_some(value)
}

/// The socket's TCP maximum segment size (`TCP_MAXSEG`), where it has one.
pub fn tcp_max_segment(sock: BorrowedFd<'_>) -> Option<u32> {
    let mut value: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `value` is a writable `c_int` and `len` holds its size; the kernel writes at most
    // `len` bytes. The fd is borrowed, so it stays open for the call.
    #[allow(unsafe_code)]
    let rc = unsafe {
        libc::getsockopt(
            sock.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_MAXSEG,
            (&mut value as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0 && value > 0).then_some(value as u32)
}

/// Whether this kernel paces TCP sockets by `SO_MAX_PACING_RATE` without help: Linux 4.13 or
/// later (its own TCP pacing; before, only under the `fq` qdisc), and a TCP socket that takes
/// a 64-bit rate above 4 GB/s and reads it back. Probed once per process; `Err` says why not.
pub fn kernel_pacing() -> Result<(), String> {
    static PROBE: OnceLock<Result<(), String>> = OnceLock::new();
    PROBE.get_or_init(probe_kernel_pacing).clone()
}

fn probe_kernel_pacing() -> Result<(), String> {
    let uname = rustix::system::uname();
    let release = uname.release().to_string_lossy().into_owned();
    match kernel_version(&release) {
        Some(v) if v >= (4, 13) => {}
        Some(_) => {
            return Err(format!(
                "kernel {release} paces TCP only under the fq qdisc (its own pacing came in 4.13)"
            ));
        }
        None => return Err(format!("kernel release '{release}' not understood")),
    }
    let sock = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::STREAM,
        None,
    )
    .map_err(|e| format!("socket: {}", std::io::Error::from(e)))?;
    set_max_pacing_rate(sock.as_fd(), (5 << 30) + 12_345)
        .map_err(|e| format!("SO_MAX_PACING_RATE: {e}"))
}

/// `(major, minor)` of a kernel release such as `6.8.0-45-generic`.
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_bucket_lets_its_burst_go_then_holds_the_rate() {
        let t0 = Instant::now();
        // 1 MB/s, 10 KB held at most.
        let mut b = TokenBucket::new(1_000_000, 10_000, t0);
        assert_eq!(b.take(10_000, t0), Duration::ZERO);
        // Empty now: 5 KB more is 5 ms of debt.
        assert_eq!(b.take(5_000, t0), 5 * MS);
        // A second caller at the same instant queues behind the first.
        assert_eq!(b.take(5_000, t0), 10 * MS);
        // Once the debt is paid, the next draw waits only for itself.
        assert_eq!(b.take(1_000, t0 + 10 * MS), MS);
    }

    #[test]
    fn a_pause_refills_no_more_than_the_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(1_000_000, 10_000, t0);
        assert_eq!(b.take(10_000, t0), Duration::ZERO);
        // An hour idle buys 10 KB, not 3.6 GB.
        let later = t0 + Duration::from_secs(3600);
        assert_eq!(b.take(10_000, later), Duration::ZERO);
        assert_eq!(b.take(1_000, later), MS);
    }

    #[test]
    fn given_back_bytes_are_drawn_again_and_the_average_holds_over_any_pattern() {
        let t0 = Instant::now();
        let rate = 25_000_000; // 200 Mbit/s
        let mut b = TokenBucket::new(rate, 250_000, t0);
        // A sender that draws uneven calls, gives part of some back, and sleeps exactly as
        // told: over 2 s of its clock it moves rate x 2 s plus at most one burst.
        let (mut now, mut sent) = (t0, 0u64);
        let mut i = 0u64;
        while now < t0 + Duration::from_secs(2) {
            let want = 1 + (i * 7919) % 400_000;
            now += b.take(want, now);
            let short = if i.is_multiple_of(5) { want / 3 } else { 0 };
            b.give_back(short);
            sent += want - short;
            i += 1;
        }
        let secs = now.duration_since(t0).as_secs_f64();
        let allowed = rate as f64 * secs + 250_000.0 + 400_000.0;
        assert!(sent as f64 <= allowed, "{sent} > {allowed}");
        assert!(
            sent as f64 >= rate as f64 * secs * 0.99,
            "{sent} over {secs} s"
        );
    }

    #[test]
    fn extreme_rates_and_sizes_neither_overflow_nor_stall() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(u64::MAX, u64::MAX, t0);
        assert_eq!(b.take(u64::MAX, t0), Duration::ZERO);
        b.give_back(u64::MAX);
        let mut slow = TokenBucket::new(0, 0, t0);
        // Rate 0 is taken as 1 byte/s: a wait, not a division by zero.
        assert_eq!(slow.take(2, t0), Duration::from_secs(2));
        assert!(slow.take(u64::MAX, t0 + Duration::from_secs(3600)) > Duration::from_secs(1));
    }

    #[test]
    fn a_pacer_sizes_its_calls_to_about_ten_milliseconds() {
        assert_eq!(Pacer::new(25_000_000).quantum(), 250_000);
        assert_eq!(Pacer::new(12_500).quantum(), MIN_QUANTUM);
        assert_eq!(Pacer::new(u64::MAX).quantum(), MAX_QUANTUM);
    }

    #[test]
    fn a_pacer_holds_a_rate_on_the_real_clock() {
        // 10 MB/s, bursts of 100 KB: 1 MB in 10 KB calls takes at least 90 ms.
        let p = Pacer::new(10_000_000);
        let t0 = Instant::now();
        for _ in 0..100 {
            p.take(10_000);
        }
        let took = t0.elapsed();
        assert!(took >= Duration::from_millis(89), "{took:?}");
        assert!(took < Duration::from_secs(5), "{took:?}");
    }

    #[test]
    fn a_connected_socket_has_a_segment_size_and_a_file_none() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let mss = tcp_max_segment(s.as_fd()).unwrap();
        assert!((500..=65_535).contains(&mss), "{mss}");
        let f = tempfile::tempfile().unwrap();
        assert_eq!(tcp_max_segment(f.as_fd()), None);
    }

    #[test]
    fn kernel_releases() {
        assert_eq!(kernel_version("6.8.0-45-generic"), Some((6, 8)));
        assert_eq!(kernel_version("4.13.0"), Some((4, 13)));
        assert_eq!(kernel_version("5.15"), Some((5, 15)));
        assert_eq!(kernel_version("junk"), None);
    }

    #[test]
    fn the_socket_option_is_set_and_read_back_as_64_bits() {
        // Where the kernel paces (every kernel this project runs on), a rate above 4 GB/s
        // reads back whole; elsewhere the probe says why.
        match kernel_pacing() {
            Ok(()) => {
                let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
                let s = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
                set_max_pacing_rate(s.as_fd(), 6 << 30).unwrap();
                assert_eq!(max_pacing_rate(s.as_fd()), Some(6 << 30));
            }
            Err(why) => assert!(!why.is_empty()),
        }
    }
}
