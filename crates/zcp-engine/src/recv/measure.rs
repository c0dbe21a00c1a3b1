//! `auto` on a filesystem in memory (tmpfs, ramfs): which buffered engine is fastest there is
//! a property of the kernel and the CPU, not of a rule, so it is measured. Each candidate
//! receives the same bytes from a loopback connection into the probe file, hashing them as
//! verification does, in alternating rounds; the best round of each decides. The answer is
//! kept per filesystem for the life of the process (a server measures once per filesystem).
//!
//! On `splice` the kernel copies the socket's pages into the page cache once and a helper
//! thread hashes them back through a mapping; on `rw` one thread reads into a buffer, hashes
//! it while it is in cache and writes it. Which costs less depends on how expensive page
//! faults and mapping teardown are against a second copy, so both are tried.

use std::collections::HashMap;
use std::io::Write;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use super::{ChunkSink, RecvEngine, StreamReceiver, Target};
use crate::sync::Locked;

/// Bytes each round moves.
const ROUND: u64 = 32 << 20;
/// Bytes per chunk within a round.
const CHUNK: u64 = 4 << 20;
/// Rounds per engine (alternating); the best counts. The engines are often within 10% of
/// each other in memory, and one round in three is easily disturbed.
const ROUNDS: usize = 3;
/// How long a stalled round may wait for bytes before the measurement gives up.
const STALL: Duration = Duration::from_secs(5);
/// How long connecting to itself over loopback may take: a working loopback connects in
/// microseconds, one that is down (or filtered) drops the handshake, and `auto` falls back.
const CONNECT: Duration = Duration::from_secs(1);

/// What one engine achieved: bytes per second, its best round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Rate {
    pub(super) engine: RecvEngine,
    pub(super) bytes_per_sec: f64,
}

/// The measured choice for one filesystem, kept for the process.
type Cached = Result<(RecvEngine, String), String>;

fn cache() -> &'static Mutex<HashMap<u64, Cached>> {
    static CACHE: std::sync::OnceLock<Mutex<HashMap<u64, Cached>>> = std::sync::OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// The engine for an in-memory filesystem, measured on `probe` (an empty probe file in it),
/// with how it was decided; or why it could not be measured. `dev` names the filesystem for
/// the cache; `free` is its free space.
pub(super) fn choose_measured(
    dev: u64,
    probe: Probe,
    free: u64,
) -> Result<(RecvEngine, String), String> {
    // One measurement at a time: two sessions starting together would measure each other.
    static ONE: Mutex<()> = Mutex::new(());
    let _one = ONE.locked();
    if let Some(c) = cache().locked().get(&dev) {
        return c.clone();
    }
    let result = if free < 4 * ROUND {
        Err(format!(
            "{free} bytes free, too little to measure ({} needed)",
            4 * ROUND
        ))
    } else {
        measure(probe).map(|rates| {
            let best = pick(&rates);
            let list: Vec<String> = rates
                .iter()
                .map(|r| format!("{} {:.2} GB/s", r.engine.name(), r.bytes_per_sec / 1e9))
                .collect();
            let how = format!(
                "{} (receiving and hashing {} MiB over loopback, best of {ROUNDS})",
                list.join(", "),
                ROUND >> 20
            );
            (best, how)
        })
    };
    cache().locked().insert(dev, result.clone());
    result
}

/// The fastest engine measured (the first candidate on a tie).
pub(super) fn pick(rates: &[Rate]) -> RecvEngine {
    rates
        .iter()
        .fold(None::<Rate>, |best, r| match best {
            Some(b) if b.bytes_per_sec >= r.bytes_per_sec => Some(b),
            _ => Some(*r),
        })
        .map_or(RecvEngine::Splice, |r| r.engine)
}

/// The probe file to measure on, and the same file opened with `O_DIRECT` where that works
/// there (then `direct` is measured too).
pub(super) struct Probe {
    pub(super) file: OwnedFd,
    pub(super) direct: Option<OwnedFd>,
}

impl Probe {
    /// An unnamed file in `dir` (`O_TMPFILE`): it has no name in the destination, so a
    /// process that dies while measuring (32 MiB at a time) leaves nothing behind. With
    /// `direct`, the same file is opened again with `O_DIRECT` (through `/proc/self/fd`)
    /// where that works.
    pub(super) fn unnamed(dir: BorrowedFd<'_>, direct: bool) -> Result<Probe, String> {
        use rustix::fs::{Mode, OFlags, openat};
        let file = openat(
            dir,
            ".",
            OFlags::TMPFILE | OFlags::RDWR | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(|e| {
            let e = std::io::Error::from(e);
            format!("an unnamed probe file (O_TMPFILE): {e}")
        })?;
        let direct = direct
            .then(|| {
                let path = format!("/proc/self/fd/{}", file.as_raw_fd());
                let flags = OFlags::RDWR | OFlags::DIRECT | OFlags::CLOEXEC;
                openat(rustix::fs::CWD, path.as_str(), flags, Mode::empty()).ok()
            })
            .flatten();
        Ok(Probe { file, direct })
    }
}

/// Every candidate's best rate on `probe`: splice, rw, and direct where it opened.
fn measure(probe: Probe) -> Result<Vec<Rate>, String> {
    let target = Target {
        file: Arc::new(probe.file),
        direct: probe.direct.map(Arc::new),
    };
    let mut candidates = vec![RecvEngine::Splice, RecvEngine::ReadWrite];
    if target.direct.is_some() {
        candidates.push(RecvEngine::Direct);
    }
    // One receiver per engine for every round, as a stream keeps its engine's pipe, ring,
    // buffers and threads for every chunk: the first round pays for making them, the best
    // round is the engine at work.
    let mut receivers: Vec<StreamReceiver> =
        candidates.iter().map(|_| StreamReceiver::new(0)).collect();
    let mut best = vec![0f64; candidates.len()];
    for _ in 0..ROUNDS {
        for (i, &engine) in candidates.iter().enumerate() {
            let secs = round(engine, &mut receivers[i], &target)?;
            best[i] = best[i].max((ROUND - CHUNK) as f64 / secs.max(1e-9));
        }
    }
    for r in receivers {
        r.finish().map_err(|e| e.to_string())?;
    }
    Ok(candidates
        .into_iter()
        .zip(best)
        .map(|(engine, bytes_per_sec)| Rate {
            engine,
            bytes_per_sec,
        })
        .collect())
}

/// One round: [`ROUND`] bytes from a loopback connection into `target` through `r` with
/// `engine`, hashed (the file is emptied after, as a filesystem in memory is not
/// preallocated). Returns the seconds taken.
fn round(engine: RecvEngine, r: &mut StreamReceiver, target: &Target) -> Result<f64, String> {
    let file = target.file.as_fd();
    let sys = |what: &str, e: rustix::io::Errno| format!("{what}: {}", std::io::Error::from(e));
    let (feed, sock) = loopback_pair()?;
    let feeder = std::thread::Builder::new()
        .name("zcp-measure".into())
        .spawn(move || -> std::io::Result<()> {
            let mut s = feed;
            s.set_write_timeout(Some(STALL))?;
            let block: Vec<u8> = (0..1u32 << 20).map(|i| (i * 2_654_435_761) as u8).collect();
            let mut left = ROUND;
            while left > 0 {
                let n = left.min(block.len() as u64) as usize;
                s.write_all(&block[..n])?;
                left -= n as u64;
            }
            Ok(())
        })
        .map_err(|e| format!("thread: {e}"))?;
    let result = receive(engine, r, target, sock);
    let fed = feeder.join();
    rustix::fs::ftruncate(file, 0).map_err(|e| sys("ftruncate", e))?;
    let secs = result?;
    match fed {
        Ok(Ok(())) => Ok(secs),
        Ok(Err(e)) => Err(format!("loopback: {e}")),
        Err(_) => Err("the measuring thread panicked".into()),
    }
}

/// A connected loopback pair: (the feeder's end, the receiving end). The measuring thread
/// connects before it accepts, so a loopback that cannot connect (down in a namespace,
/// filtered) fails here within [`CONNECT`] instead of leaving `accept` waiting for good; a
/// stranger that connects to the port first is turned away, not measured.
fn loopback_pair() -> Result<(TcpStream, TcpStream), String> {
    let lo = |e: std::io::Error| format!("loopback 127.0.0.1: {e}");
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(lo)?;
    let addr = listener.local_addr().map_err(lo)?;
    let feed = TcpStream::connect_timeout(&addr, CONNECT).map_err(lo)?;
    let me = feed.local_addr().map_err(lo)?;
    listener.set_nonblocking(true).map_err(lo)?;
    let until = Instant::now() + CONNECT;
    loop {
        match listener.accept() {
            Ok((sock, peer)) if peer == me => {
                sock.set_nonblocking(false).map_err(lo)?;
                return Ok((feed, sock));
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= until {
                    return Err(format!(
                        "loopback 127.0.0.1: its own connection was not accepted within {} s",
                        CONNECT.as_secs()
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => return Err(lo(e)),
        }
    }
}

/// Receives the round from `sock` into `target` with `engine`; returns the seconds from the
/// first chunk's completion to the last's (every byte written and hashed).
fn receive(
    engine: RecvEngine,
    r: &mut StreamReceiver,
    target: &Target,
    sock: TcpStream,
) -> Result<f64, String> {
    sock.set_read_timeout(Some(STALL))
        .map_err(|e| format!("loopback: {e}"))?;
    let progress = AtomicU64::new(0);
    let (tx, rx) = mpsc::channel();
    let start = Instant::now();
    let mut offset = 0;
    while offset < ROUND {
        let tx = tx.clone();
        r.receive(
            engine,
            Some(target),
            sock.as_fd(),
            offset,
            CHUNK,
            Some(Box::new(Hashing(blake3::Hasher::new_keyed(&[7; 32])))),
            &progress,
            Box::new(move |res| {
                let _ = tx.send((Instant::now(), res.err().map(|f| f.message)));
            }),
        )
        .map_err(|e| e.to_string())?;
        offset += CHUNK;
    }
    drop(tx);
    // The engine's steady rate: the time between the first chunk's completion and the last
    // one's, for the chunks in between. A pipeline's filling and draining (a ring of 4 MiB
    // buffers, a read-back one chunk behind) fall outside it, as they do in a long transfer.
    let (mut first, mut last) = (None::<Instant>, start);
    for _ in 0..ROUND / CHUNK {
        match rx.recv_timeout(STALL) {
            Ok((at, None)) => {
                first = Some(first.map_or(at, |f| f.min(at)));
                last = last.max(at);
            }
            Ok((_, Some(why))) => return Err(why),
            Err(_) => return Err("a measured chunk was never completed".into()),
        }
    }
    Ok(last
        .saturating_duration_since(first.unwrap_or(start))
        .as_secs_f64())
}

/// Hashes what it is fed, as a chunk's verification does.
struct Hashing(blake3::Hasher);

impl ChunkSink for Hashing {
    fn bytes(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
    fn seen_all(self: Box<Self>) {
        std::hint::black_box(self.0.finalize());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pick_takes_the_fastest_and_the_first_on_a_tie() {
        let r = |engine, bytes_per_sec| Rate {
            engine,
            bytes_per_sec,
        };
        let (s, w) = (RecvEngine::Splice, RecvEngine::ReadWrite);
        assert_eq!(pick(&[r(s, 1.0e9), r(w, 2.0e9)]), w);
        assert_eq!(pick(&[r(s, 2.0e9), r(w, 1.0e9)]), s);
        assert_eq!(pick(&[r(s, 1.0e9), r(w, 1.0e9)]), s);
        assert_eq!(pick(&[]), s);
    }

    #[test]
    fn a_measurement_moves_every_byte_and_leaves_the_file_empty() {
        let d = tempfile::tempdir().unwrap();
        let f = std::fs::File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(d.path().join("probe"))
            .unwrap();
        let probe = Probe {
            file: f.as_fd().try_clone_to_owned().unwrap(),
            direct: None,
        };
        let rates = measure(probe).unwrap();
        assert_eq!(
            rates.iter().map(|r| r.engine).collect::<Vec<_>>(),
            [RecvEngine::Splice, RecvEngine::ReadWrite]
        );
        for r in &rates {
            // 32 MiB in under 5 s each at the very least, or the round would have failed.
            assert!(r.bytes_per_sec > 3.0e6, "{r:?}");
        }
        assert_eq!(f.metadata().unwrap().len(), 0);
    }

    #[test]
    fn the_probe_file_has_no_name_so_a_killed_measurement_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let dir = std::fs::File::open(d.path()).unwrap();
        let probe = Probe::unnamed(dir.as_fd(), true).unwrap();
        // Nothing in the directory while it is measured on, so nothing if the process dies.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        let (f, st) = (&probe.file, rustix::fs::fstat(&probe.file).unwrap());
        assert_eq!(
            st.st_dev,
            rustix::fs::fstat(&dir).unwrap().st_dev,
            "same filesystem"
        );
        rustix::io::pwrite(f, b"zcp", 0).unwrap();
        if let Some(direct) = &probe.direct {
            // The same file again (with O_DIRECT): what one writes the other sees.
            assert_eq!(rustix::fs::fstat(direct).unwrap().st_ino, st.st_ino);
        }
        let rates = measure(probe).unwrap();
        assert_eq!(rates[0].engine, RecvEngine::Splice);
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
    }

    #[test]
    fn the_loopback_pair_is_connected_end_to_end() {
        use std::io::Read;
        let (mut feed, mut sock) = loopback_pair().unwrap();
        assert_eq!(feed.local_addr().unwrap(), sock.peer_addr().unwrap());
        feed.write_all(b"zcp").unwrap();
        let mut got = [0; 3];
        sock.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"zcp");
    }

    #[test]
    fn too_little_space_is_not_measured_and_the_answer_is_kept() {
        let d = tempfile::tempdir().unwrap();
        let f = std::fs::File::create(d.path().join("probe")).unwrap();
        // A device number no real filesystem has, so other tests' answers are not seen.
        let dev = u64::MAX - 7;
        let probe = || Probe {
            file: f.as_fd().try_clone_to_owned().unwrap(),
            direct: None,
        };
        let e = choose_measured(dev, probe(), 1 << 20).unwrap_err();
        assert!(e.contains("too little to measure"), "{e}");
        // Kept for the process: asked again with room, the same answer, no second try.
        assert_eq!(choose_measured(dev, probe(), u64::MAX), Err(e));
        assert_eq!(f.metadata().unwrap().len(), 0);
    }
}
