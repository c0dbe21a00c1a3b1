//! Receiver engines: moving exactly `len` bytes from a TCP socket into a file at an offset.
//!
//! * `splice` — socket -> pipe -> file with `splice(2)`: no user-space copy; the kernel copies
//!   the socket's pages into the page cache once. Each range has its writeback started at once
//!   ([`crate::fs::start_writeback`]) so the disk works while the network does.
//! * `direct` — `recv(2)` into page-aligned buffers, then (on other threads) hashed and written
//!   with `O_DIRECT`, through a ring of buffers: the network fills one buffer while others are
//!   hashed and written, and the page cache is not touched at all (`recv/direct.rs`).
//! * `rw` — `read(2)` into a buffer, `pwrite(2)` into the page cache: the conventional path.
//! * `null` — socket -> pipe -> `/dev/null`: bytes are dropped without being copied; the
//!   network-only ceiling.
//! * `mem` — `read(2)` into a buffer that is then dropped: "to receiver memory".
//! * `auto` — resolved by [`choose`] per destination filesystem: `direct` where O_DIRECT works
//!   on a disk; on a filesystem in memory, `splice` or `rw`, whichever measures faster there
//!   (`recv/measure.rs`).
//!
//! Verification is pushed, not pulled: the caller hands each chunk a [`ChunkSink`], and the
//! engine feeds it the chunk's bytes where they already are — in the receive buffer for
//! `direct`, `rw` and `mem`, from the page cache through a guarded mapping after the write for
//! `splice` (`recv/readback.rs`) — so hashing never costs an extra copy. `direct` and `splice` feed
//! sinks on their own threads, so one stream's receiving, hashing and writing overlap.
//!
//! A chunk of a sparse file may come as its data extents alone
//! ([`StreamReceiver::receive_sparse`]): its holes are punched in the file first, the engines
//! move only the extents, and its sink is fed zeros for the holes (`recv/holes.rs`).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::pipe::SpliceFlags;

use crate::EngineError;
use crate::buf::AlignedBuf;
use crate::fs::FsInfo;

/// How the receiver moves bytes from the socket to their destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecvEngine {
    /// Pick the fastest engine that works on the destination filesystem.
    Auto,
    /// socket -> pipe -> file with `splice(2)`.
    Splice,
    /// Aligned buffers + `O_DIRECT`, network and disk overlapped.
    Direct,
    /// `read(2)` + `pwrite(2)` through the page cache.
    ReadWrite,
    /// Discard without copying (socket -> pipe -> /dev/null).
    Null,
    /// Read into user memory and discard.
    Mem,
}

impl RecvEngine {
    /// Every receiver engine.
    pub const ALL: [RecvEngine; 6] = [
        RecvEngine::Auto,
        RecvEngine::Splice,
        RecvEngine::Direct,
        RecvEngine::ReadWrite,
        RecvEngine::Null,
        RecvEngine::Mem,
    ];

    /// The engine's command-line name.
    pub fn name(self) -> &'static str {
        match self {
            RecvEngine::Auto => "auto",
            RecvEngine::Splice => "splice",
            RecvEngine::Direct => "direct",
            RecvEngine::ReadWrite => "rw",
            RecvEngine::Null => "null",
            RecvEngine::Mem => "mem",
        }
    }

    /// Parses a command-line name.
    pub fn parse(s: &str) -> Option<RecvEngine> {
        Self::ALL.into_iter().find(|e| e.name() == s)
    }

    /// Whether the engine writes a file (as opposed to discarding the bytes).
    pub fn stores(self) -> bool {
        !matches!(self, RecvEngine::Null | RecvEngine::Mem)
    }

    /// Whether the bytes pass through a user buffer, where they can be hashed for free.
    pub fn sees_bytes(self) -> bool {
        matches!(
            self,
            RecvEngine::Direct | RecvEngine::ReadWrite | RecvEngine::Mem
        )
    }

    /// Bytes per call (per buffer, for `direct`) when the user sets no block size.
    pub fn default_block(self) -> u64 {
        match self {
            RecvEngine::Direct => 4 << 20,
            _ => 1 << 20,
        }
    }
}

/// Why bytes already accepted by an engine could not be written (reported to a
/// [`Completion`] after `receive` returned).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFailure {
    /// Whether the filesystem ran out of space.
    pub no_space: bool,
    /// What happened.
    pub message: String,
}

impl From<&EngineError> for WriteFailure {
    fn from(e: &EngineError) -> WriteFailure {
        WriteFailure {
            no_space: e.is_no_space(),
            message: e.to_string(),
        }
    }
}

/// Takes one chunk's bytes, in order, as the engine sees them, and is told when it has seen
/// them all. The session's implementation hashes them into the chunk's MAC.
pub trait ChunkSink: Send {
    /// The next piece of the chunk.
    fn bytes(&mut self, bytes: &[u8]);
    /// Every byte of the chunk was passed to [`ChunkSink::bytes`].
    fn seen_all(self: Box<Self>);
}

/// A chunk's sink.
pub type Sink = Box<dyn ChunkSink>;

/// Told once a chunk's bytes are all written, or that writing them failed. See
/// [`StreamReceiver::receive`] for when it is called.
pub type Completion = Box<dyn FnOnce(Result<(), WriteFailure>) + Send>;

pub use direct::{DIRECT_ALIGN, DIRECT_DEPTH, DIRECT_WRITERS};

mod direct;
#[cfg(test)]
mod eof;
mod holes;
#[cfg(test)]
mod large;
mod measure;
mod readback;
mod stream;

pub(crate) use stream::Pipe;
pub use stream::{ByteSource, StreamReceiver, Target, pwrite_all};

/// The engine a probe settled on for a destination filesystem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice {
    /// The engine that will run.
    pub engine: RecvEngine,
    /// Why it is not the one asked for, or how `auto` decided.
    pub note: Option<String>,
}

/// Resolves `requested` for files received into directory `dir` on the filesystem `fs`.
/// Engines that store are probed on a scratch file in `dir` (created and removed here, so no
/// file being received is touched); one that fails falls back (direct -> splice -> rw) and the
/// note says why. The answer holds for every directory of that filesystem: callers cache it.
pub fn choose(requested: RecvEngine, dir: BorrowedFd<'_>, fs: &FsInfo) -> Choice {
    let choice = |engine, note: Option<String>| Choice { engine, note };
    if !requested.stores() || requested == RecvEngine::ReadWrite {
        return choice(requested, None);
    }
    let scratch = match Scratch::create(dir) {
        Ok(s) => s,
        Err(e) => {
            return choice(
                RecvEngine::ReadWrite,
                Some(format!("cannot probe the destination ({e}); using rw")),
            );
        }
    };
    // Without O_DIRECT: splice if it works here, else rw (and why not splice).
    let buffered = || match probe_splice(scratch.fd.as_fd()) {
        Ok(()) => (RecvEngine::Splice, String::new()),
        Err(e) => (RecvEngine::ReadWrite, format!("; splice fails too ({e})")),
    };
    match requested {
        RecvEngine::Splice => match probe_splice(scratch.fd.as_fd()) {
            Ok(()) => choice(RecvEngine::Splice, None),
            Err(why) => choice(
                RecvEngine::ReadWrite,
                Some(format!(
                    "splice does not work on this {} destination ({why}); using rw",
                    fs.name
                )),
            ),
        },
        RecvEngine::Direct => match probe_direct(&scratch, fs) {
            Ok(()) => choice(RecvEngine::Direct, None),
            Err(why) => {
                let (engine, also) = buffered();
                let note = format!(
                    "direct is unavailable on this {} destination ({why}){also}; using {}",
                    fs.name,
                    engine.name()
                );
                choice(engine, Some(note))
            }
        },
        RecvEngine::Auto if fs.in_memory => {
            let (engine, also) = buffered();
            let why = format!("the destination is {}, which lives in memory", fs.name);
            if engine != RecvEngine::Splice {
                let note = format!("auto chose {}: {why}{also}", engine.name());
                return choice(engine, Some(note));
            }
            let dev = rustix::fs::fstat(dir).map_or(0, |st| st.st_dev);
            let direct = probe_direct(&scratch, fs).is_ok();
            // Timed on an unnamed file, the named one removed first: a process killed while
            // measuring leaves nothing in the destination.
            drop(scratch);
            let measured = measure::Probe::unnamed(dir, direct)
                .and_then(|probe| measure::choose_measured(dev, probe, fs.free_bytes));
            let note = match measured {
                Ok((engine, how)) => {
                    let note = format!(
                        "auto chose {} by measurement: {why}, so the engines were timed there: {how}",
                        engine.name()
                    );
                    return choice(engine, Some(note));
                }
                Err(e) => format!("auto chose splice: {why}; measuring failed ({e})"),
            };
            choice(RecvEngine::Splice, Some(note))
        }
        RecvEngine::Auto => match probe_direct(&scratch, fs) {
            Ok(()) => choice(
                RecvEngine::Direct,
                Some(format!(
                    "auto chose direct: O_DIRECT works on this {} destination",
                    fs.name
                )),
            ),
            Err(why) => {
                let (engine, also) = buffered();
                let note = format!(
                    "auto chose {}: direct is unavailable on this {} destination ({why}){also}",
                    engine.name(),
                    fs.name
                );
                choice(engine, Some(note))
            }
        },
        RecvEngine::ReadWrite | RecvEngine::Null | RecvEngine::Mem => choice(requested, None),
    }
}

/// Whether O_DIRECT and splice each work for files in directory `dir` on filesystem `fs`,
/// tried on one scratch file (created and removed here): each is `Err` with the reason when
/// it does not, or when the probe file cannot be created.
pub fn probe_engines(dir: BorrowedFd<'_>, fs: &FsInfo) -> (Result<(), String>, Result<(), String>) {
    match Scratch::create(dir) {
        Ok(scratch) => (probe_direct(&scratch, fs), probe_splice(scratch.fd.as_fd())),
        Err(e) => (Err(e.clone()), Err(e)),
    }
}

/// A probe file, removed when dropped.
struct Scratch<'a> {
    dir: BorrowedFd<'a>,
    name: String,
    fd: OwnedFd,
}

impl<'a> Scratch<'a> {
    fn create(dir: BorrowedFd<'a>) -> Result<Scratch<'a>, String> {
        let tag: [u8; 8] = crate::sys::random().map_err(|e| format!("getrandom: {e}"))?;
        let name = format!(".zcp-probe-{}", hex::encode(tag));
        let fd = rustix::fs::openat(
            dir,
            name.as_str(),
            rustix::fs::OFlags::RDWR
                | rustix::fs::OFlags::CREATE
                | rustix::fs::OFlags::EXCL
                | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .map_err(|e| format!("creating a probe file: {}", std::io::Error::from(e)))?;
        Ok(Scratch { dir, name, fd })
    }
}

impl Drop for Scratch<'_> {
    fn drop(&mut self) {
        let _ = rustix::fs::unlinkat(self.dir, self.name.as_str(), rustix::fs::AtFlags::empty());
    }
}

/// Opens the scratch file with O_DIRECT and writes one aligned block.
fn probe_direct(scratch: &Scratch<'_>, fs: &FsInfo) -> Result<(), String> {
    if let Some((mem, off)) = fs.dio_align
        && (u64::from(mem) > DIRECT_ALIGN || u64::from(off) > DIRECT_ALIGN)
    {
        return Err(format!(
            "it needs {off}-byte offsets and {mem}-byte buffers, above zcp's {DIRECT_ALIGN}"
        ));
    }
    let fd = rustix::fs::openat(
        scratch.dir,
        scratch.name.as_str(),
        rustix::fs::OFlags::WRONLY | rustix::fs::OFlags::DIRECT | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .map_err(|e| format!("open(O_DIRECT): {}", std::io::Error::from(e)))?;
    let block = AlignedBuf::new(DIRECT_ALIGN as usize);
    match rustix::io::pwrite(&fd, &block, 0) {
        Ok(n) if n == block.len() => Ok(()),
        Ok(n) => Err(format!("O_DIRECT probe wrote {n} of {} bytes", block.len())),
        Err(e) => Err(format!("pwrite(O_DIRECT): {}", std::io::Error::from(e))),
    }
}

/// Splices one byte from a pipe into the scratch file.
fn probe_splice(file: BorrowedFd<'_>) -> Result<(), String> {
    let (r, w) = rustix::pipe::pipe().map_err(|e| format!("pipe: {e}"))?;
    rustix::io::write(&w, b"\0").map_err(|e| format!("write(pipe): {e}"))?;
    let mut off = 0u64;
    match rustix::pipe::splice(&r, None, file, Some(&mut off), 1, SpliceFlags::empty()) {
        Ok(1) => Ok(()),
        Ok(n) => Err(format!("splice moved {n} bytes")),
        Err(e) => Err(format!("splice(pipe -> file): {}", std::io::Error::from(e))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::fs_info;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    #[test]
    fn choose_explains_every_decision_and_leaves_nothing_behind() {
        let d = tempfile::tempdir().unwrap();
        let dir = rustix::fs::open(
            d.path(),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::DIRECTORY,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        let fs = fs_info(&dir).unwrap();

        let c = choose(RecvEngine::Auto, dir.as_fd(), &fs);
        let note = c.note.unwrap();
        assert!(
            note.starts_with(&format!("auto chose {}", c.engine.name())),
            "{note}"
        );

        let mem = FsInfo {
            in_memory: true,
            name: "tmpfs".into(),
            ..fs.clone()
        };
        // In memory: whichever engine measured fastest, every rate in the note; direct
        // is timed too where O_DIRECT opens (tmpfs since Linux 6.6, and this test's own
        // directory), and may win.
        let c = choose(RecvEngine::Auto, dir.as_fd(), &mem);
        let note = c.note.clone().unwrap();
        assert!(
            matches!(c.engine, RecvEngine::Splice | RecvEngine::ReadWrite)
                || (c.engine == RecvEngine::Direct && note.contains("direct ")),
            "{c:?}"
        );
        assert!(
            note.starts_with(&format!("auto chose {} by measurement", c.engine.name()))
                && note.contains("lives in memory")
                && note.contains("splice ")
                && note.contains("rw ")
                && note.contains("GB/s"),
            "{note}"
        );

        // A filesystem whose O_DIRECT alignment zcp's chunks cannot meet.
        let strict = FsInfo {
            dio_align: Some((65536, 65536)),
            ..fs.clone()
        };
        let c = choose(RecvEngine::Direct, dir.as_fd(), &strict);
        assert_eq!(c.engine, RecvEngine::Splice);
        let note = c.note.unwrap();
        assert!(
            note.contains("65536-byte") && note.ends_with("using splice"),
            "{note}"
        );
        let c = choose(RecvEngine::Auto, dir.as_fd(), &strict);
        assert!(
            c.note
                .unwrap()
                .starts_with("auto chose splice: direct is unavailable")
        );

        for e in [RecvEngine::Null, RecvEngine::Mem, RecvEngine::ReadWrite] {
            assert_eq!(
                choose(e, dir.as_fd(), &fs),
                Choice {
                    engine: e,
                    note: None
                }
            );
        }
        assert_eq!(
            std::fs::read_dir(d.path()).unwrap().count(),
            0,
            "probe files removed"
        );
    }

    #[test]
    fn a_failed_write_drops_its_chunk_and_the_stream_goes_on() {
        use std::io::Write;
        use std::sync::mpsc;
        let d = tempfile::tempdir().unwrap();
        for engine in [RecvEngine::ReadWrite, RecvEngine::Splice] {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut tx = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (rx, _) = l.accept().unwrap();
            let a: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
            let b: Vec<u8> = (0..100_000u32).map(|i| (i % 241) as u8).collect();
            let (a2, b2) = (a.clone(), b.clone());
            let writer = std::thread::spawn(move || {
                tx.write_all(&a2).unwrap();
                tx.write_all(&b2).unwrap();
            });
            // A descriptor open read-only: every write to it fails (EBADF).
            let ro = d.path().join("ro");
            std::fs::write(&ro, b"").unwrap();
            let bad = Target {
                file: Arc::new(std::fs::File::open(&ro).unwrap().into()),
                direct: None,
            };
            let okp = d.path().join(format!("ok-{}", engine.name()));
            let good = Target {
                file: Arc::new(std::fs::File::create(&okp).unwrap().into()),
                direct: None,
            };
            let mut r = StreamReceiver::new(64 * 1024);
            let progress = AtomicU64::new(0);
            let (dtx, drx) = mpsc::channel();
            for (t, len) in [(&bad, a.len()), (&good, b.len())] {
                let dtx = dtx.clone();
                r.receive(
                    engine,
                    Some(t),
                    rx.as_fd(),
                    0,
                    len as u64,
                    None,
                    &progress,
                    Box::new(move |res| dtx.send(res.is_ok()).unwrap()),
                )
                .unwrap_or_else(|e| panic!("{}: {e}", engine.name()));
            }
            r.finish().unwrap();
            writer.join().unwrap();
            assert_eq!(
                drx.try_iter().collect::<Vec<_>>(),
                [false, true],
                "{}",
                engine.name()
            );
            assert_eq!(std::fs::read(&okp).unwrap(), b, "{}", engine.name());
            assert_eq!(progress.load(Ordering::Relaxed), 400_000);
        }
    }
}
