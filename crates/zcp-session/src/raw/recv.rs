//! `zcp recv --listen`: one connection's bytes, to its end, into a file beside which they are
//! gathered first (a part file named as a session's are, locked), then synced and renamed
//! into place only after a clean end of stream that meets `--expect-size` and
//! `--expect-blake3`. Anything else (a reset, a timeout, a signal, too many or too few bytes,
//! a digest that differs) removes the part file: nothing appears under the destination.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use zcp_engine::fs::{EntryKind, PartFile, entry_kind, fs_info, fsync_dir, part_key};
use zcp_engine::recv::{ChunkSink, Target, WriteFailure, choose};
use zcp_engine::sync::Locked;
use zcp_engine::sys::{process_usage, set_socket_timeouts, wait_readable};
use zcp_engine::{EngineError, IoClass, RecvEngine, StreamReceiver, io_class};

use super::{TICK, Watch, stopped, stopped_error};
use crate::client::StopFlag;
use crate::error::SessionError;
use crate::event::{Cpu, Event, RawEnd, RawStart, Reporter};

/// Bytes each engine call receives at most before the next piece starts: bounds how much a
/// `splice` read-back or a `direct` chunk holds at once. A multiple of the O_DIRECT alignment.
const PIECE: u64 = 64 << 20;

/// What `zcp recv` takes, into where, and what it holds the bytes to.
#[derive(Debug, Clone)]
pub struct RawRecvOptions {
    /// The file to store the bytes as (its directory must exist).
    pub dest: PathBuf,
    /// The receiver engine to ask for.
    pub engine: RecvEngine,
    /// Bytes per engine call (0: the engine's default).
    pub block_size: u64,
    /// The stream must carry exactly this many bytes.
    pub expect_size: Option<u64>,
    /// The stream's bytes must have this BLAKE3 digest (unkeyed).
    pub expect_blake3: Option<[u8; 32]>,
    /// Replace an existing file at `dest` (and a part file left beside it).
    pub force: bool,
    /// How long to wait for the connection, and for each byte once connected.
    pub timeout: Duration,
    /// Interval between reports; `None` for none.
    pub interval: Option<Duration>,
    /// Set by a signal to stop.
    pub stop: Option<StopFlag>,
}

/// A receiver whose destination was checked (before anyone connects).
#[derive(Debug)]
pub struct RawReceiver {
    o: RawRecvOptions,
    dir: Arc<OwnedFd>,
    name: Vec<u8>,
    shown: String,
    engine: RecvEngine,
    note: Option<String>,
}

/// A destination refused before anything was received.
fn refuse(shown: &str, why: impl std::fmt::Display) -> SessionError {
    SessionError::Usage(format!("destination {shown}: {why}"))
}

impl RawReceiver {
    /// Checks the destination (its directory exists, it is no directory, it is not there
    /// unless `force`) and resolves the engine on its filesystem.
    pub fn prepare(o: RawRecvOptions) -> Result<RawReceiver, SessionError> {
        let shown = zcp_wire::escape(o.dest.as_os_str().as_bytes());
        let bytes = o.dest.as_os_str().as_bytes();
        let name = match o.dest.file_name() {
            Some(n) if !bytes.ends_with(b"/") => n.as_bytes().to_vec(),
            _ => {
                return Err(refuse(
                    &shown,
                    "names a directory; give the file's path (DIR/NAME)",
                ));
            }
        };
        if zcp_engine::fs::is_reserved_name(&name) {
            return Err(refuse(
                &shown,
                "is a name zcp keeps for its own partial files",
            ));
        }
        let parent = match o.dest.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let dir = open_dir(&parent, &shown)?;
        match entry_kind(&dir, &name).map_err(|e| refuse(&shown, e))? {
            EntryKind::Missing => {}
            EntryKind::Dir => {
                return Err(refuse(
                    &shown,
                    "is an existing directory; give the file's path inside it (DIR/NAME)",
                ));
            }
            EntryKind::File | EntryKind::Symlink if o.force => {}
            EntryKind::File | EntryKind::Symlink => {
                return Err(refuse(&shown, "exists; add --force to replace it"));
            }
            EntryKind::Other => {
                return Err(refuse(&shown, "exists and is a device, FIFO or socket"));
            }
        }
        let (engine, note) = if o.engine.stores() {
            let fs = fs_info(&dir).map_err(|e| refuse(&shown, e))?;
            let c = choose(o.engine, dir.as_fd(), &fs);
            (c.engine, c.note)
        } else {
            (o.engine, None)
        };
        Ok(RawReceiver {
            o,
            dir: Arc::new(dir),
            name,
            shown,
            engine,
            note,
        })
    }

    /// Accepts one connection on `listener` and takes its bytes; the end as reported.
    pub fn run(
        self,
        listener: TcpListener,
        reporter: &mut dyn Reporter,
    ) -> Result<RawEnd, SessionError> {
        let o = &self.o;
        let (sock, remote) = accept(&listener, o.timeout, o.stop.as_ref())?;
        let local = sock.local_addr().map_err(|e| SessionError::Io {
            what: "the connection's address".into(),
            source: e,
        })?;
        // One connection: later ones are refused.
        drop(listener);
        set_socket_timeouts(&sock, Some(o.timeout)).map_err(|e| SessionError::Io {
            what: "setting the socket's timeouts".into(),
            source: e,
        })?;
        let part = self.open_part()?;
        let target = match &part {
            Some(p) => Some(Target {
                file: p.shared_fd(),
                direct: match self.engine {
                    RecvEngine::Direct => Some(Arc::new(p.open_direct().map_err(|e| {
                        SessionError::Engine(EngineError::Sys {
                            call: "open(O_DIRECT)",
                            what: "partial file",
                            source: e.into(),
                        })
                    })?)),
                    _ => None,
                },
            }),
            None => None,
        };
        reporter.event(&Event::RawStart(RawStart {
            direction: "recv",
            local,
            remote,
            path: self.shown.clone(),
            size: o.expect_size,
            engine: self.engine.name().into(),
            engine_note: self.note.clone(),
            limit_rate: None,
        }));
        let usage0 = process_usage();
        let t0 = Instant::now();
        let progress = AtomicU64::new(0);
        let hasher = Arc::new(Mutex::new(blake3::Hasher::new()));
        let watch = Watch {
            sock: &sock,
            progress: &progress,
            total: o.expect_size,
            interval: o.interval,
            stop: o.stop.as_ref(),
            stopped: "before the stream ended; nothing was committed",
        };
        let (bytes, max_rss) = watch.run(reporter, || {
            self.receive(&sock, remote, target.as_ref(), &hasher, &progress)
        })?;
        let digest =
            (self.engine != RecvEngine::Null).then(|| *hasher.locked().finalize().as_bytes());
        let checked = self.check(bytes, digest)?;
        let stored = match part {
            Some(p) => {
                self.commit(p, bytes)?;
                Some(self.shown.clone())
            }
            None => None,
        };
        let usage = process_usage().since(&usage0);
        let end = RawEnd {
            direction: "recv",
            bytes,
            seconds: t0.elapsed().as_secs_f64(),
            engine: self.engine.name().into(),
            blake3: digest.map(hex::encode),
            checked,
            stored,
            cpu: Cpu::new(usage.user, usage.sys),
            max_rss,
            retransmits: 0,
            discarded: 0,
        };
        reporter.event(&Event::RawEnd(end.clone()));
        Ok(end)
    }

    /// The part file beside the destination (none for `null` and `mem`). One left there by
    /// an interrupted transfer is replaced only with `force`: it may hold a zcp session's
    /// resumable chunks.
    fn open_part(&self) -> Result<Option<PartFile>, SessionError> {
        if !self.engine.stores() {
            return Ok(None);
        }
        let (mut part, existed) = PartFile::open(self.dir.clone(), &part_key(&self.name))?;
        if existed {
            if !self.o.force {
                return Err(refuse(
                    &self.shown,
                    format!(
                        "a partial file of an interrupted transfer to it is there ({}); \
                         remove it with zcp clean, or add --force",
                        part.name()
                    ),
                ));
            }
            part.reset()?;
        }
        Ok(Some(part))
    }

    /// Takes the stream in pieces until it ends (or, with `--expect-size`, until that many
    /// bytes came and then the end); the bytes taken.
    fn receive(
        &self,
        sock: &TcpStream,
        peer: SocketAddr,
        target: Option<&Target>,
        hasher: &Arc<Mutex<blake3::Hasher>>,
        progress: &AtomicU64,
    ) -> Result<u64, SessionError> {
        let failed = |e: EngineError| stream_error(e, peer);
        let mut rx = StreamReceiver::new(self.o.block_size);
        let (done_tx, done_rx) = mpsc::channel::<Result<(), WriteFailure>>();
        let mut at = 0u64;
        let result = loop {
            let want = self.o.expect_size.map_or(PIECE, |n| PIECE.min(n - at));
            if want == 0 {
                break end_after_expected(sock, peer, at);
            }
            let sink = (self.engine != RecvEngine::Null)
                .then(|| Box::new(HashSink(hasher.clone())) as Box<dyn ChunkSink>);
            let tx = done_tx.clone();
            let got = match rx.receive_until_eof(
                self.engine,
                target,
                sock.as_fd(),
                (at, want),
                sink,
                progress,
                Box::new(move |r| {
                    let _ = tx.send(r);
                }),
            ) {
                Ok(n) => n,
                Err(e) => break Err(failed(e)),
            };
            at += got;
            if got < want {
                break Ok(());
            }
        };
        // Every write and every sink, before the bytes are judged.
        let finished = rx.finish();
        result?;
        finished.map_err(failed)?;
        drop(done_tx);
        if let Some(Err(f)) = done_rx.iter().find(Result::is_err) {
            return Err(SessionError::Engine(if f.no_space {
                EngineError::NoSpace(f.message)
            } else {
                EngineError::Path(format!("writing {}: {}", self.shown, f.message))
            }));
        }
        Ok(at)
    }

    /// Holds what arrived to `--expect-size` and `--expect-blake3`; what was checked.
    fn check(&self, bytes: u64, digest: Option<[u8; 32]>) -> Result<Vec<String>, SessionError> {
        let mut checked = Vec::new();
        if let Some(n) = self.o.expect_size {
            if bytes != n {
                return Err(SessionError::Verify(format!(
                    "the stream ended after {bytes} bytes, --expect-size is {n}"
                )));
            }
            checked.push(format!("size {n} as expected"));
        }
        if let Some(want) = self.o.expect_blake3 {
            let Some(got) = digest else {
                return Err(SessionError::Usage(
                    "--expect-blake3 needs an engine that sees the bytes (not null)".into(),
                ));
            };
            if got != want {
                return Err(SessionError::Verify(format!(
                    "BLAKE3 of what arrived is {}, --expect-blake3 is {}",
                    hex::encode(got),
                    hex::encode(want)
                )));
            }
            checked.push("BLAKE3 as expected".into());
        }
        Ok(checked)
    }

    /// Cuts, syncs and renames the part file into place, then syncs the directory.
    fn commit(&self, part: PartFile, bytes: u64) -> Result<(), SessionError> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let mtime = (now.as_secs() as i64, now.subsec_nanos());
        let padded = self.engine == RecvEngine::Direct;
        part.set_final_metadata(bytes, 0o644, mtime, padded)?;
        part.sync()?;
        if let Some(sig) = stopped(self.o.stop.as_ref()) {
            return Err(stopped_error(
                sig,
                "before the file was renamed into place; nothing was committed",
            ));
        }
        if !self.o.force && entry_kind(&*self.dir, &self.name)? != EntryKind::Missing {
            return Err(refuse(
                &self.shown,
                "appeared while the stream was received; add --force to replace it",
            ));
        }
        part.rename_to(&self.name)?;
        fsync_dir(&*self.dir)?;
        Ok(())
    }
}

/// Feeds a piece's bytes, in order, into the stream's one hasher.
struct HashSink(Arc<Mutex<blake3::Hasher>>);

impl ChunkSink for HashSink {
    fn bytes(&mut self, bytes: &[u8]) {
        self.0.locked().update(bytes);
    }
    fn seen_all(self: Box<Self>) {}
}

/// Opens the destination's directory, or says what to fix.
fn open_dir(parent: &Path, shown: &str) -> Result<OwnedFd, SessionError> {
    let dir = zcp_wire::escape(parent.as_os_str().as_bytes());
    let f = std::fs::File::open(parent).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => refuse(
            shown,
            format!("its directory {dir} does not exist; create it first (mkdir -p {dir})"),
        ),
        _ => refuse(shown, format!("cannot open its directory {dir}: {e}")),
    })?;
    let meta = f.metadata().map_err(|e| refuse(shown, e))?;
    if !meta.is_dir() {
        return Err(refuse(shown, format!("{dir} is not a directory")));
    }
    Ok(f.into())
}

/// Waits for one connection, at most `timeout`, watching the stop flag.
fn accept(
    listener: &TcpListener,
    timeout: Duration,
    stop: Option<&StopFlag>,
) -> Result<(TcpStream, SocketAddr), SessionError> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(sig) = stopped(stop) {
            return Err(stopped_error(
                sig,
                "while waiting for a connection; nothing was received",
            ));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(SessionError::Connection {
                peer: listener
                    .local_addr()
                    .map_or_else(|_| "the listener".into(), |a| a.to_string()),
                reason: format!(
                    "no connection within {} s (--timeout)",
                    timeout.as_secs_f64()
                ),
            });
        }
        if !wait_readable(listener, left.min(TICK)) {
            continue;
        }
        match listener.accept() {
            Ok(c) => return Ok(c),
            Err(e) if io_class(&e) == IoClass::Interrupted => {}
            Err(e) => {
                return Err(SessionError::Io {
                    what: "accepting the connection".into(),
                    source: e,
                });
            }
        }
    }
}

/// After `at` bytes, all `--expect-size` asked for: the stream must end here.
fn end_after_expected(sock: &TcpStream, peer: SocketAddr, at: u64) -> Result<(), SessionError> {
    let mut one = [0u8; 1];
    loop {
        return match (&*sock).read(&mut one) {
            Ok(0) => Ok(()),
            Ok(_) => Err(SessionError::Verify(format!(
                "more than --expect-size ({at} bytes) arrived"
            ))),
            Err(e) => match io_class(&e) {
                IoClass::Interrupted => continue,
                IoClass::TimedOut => Err(SessionError::Connection {
                    peer: peer.to_string(),
                    reason: format!(
                        "all {at} bytes arrived, but the peer did not close the connection \
                         (a bare stream ends with the sender's close: with nc, use -N)"
                    ),
                }),
                IoClass::Failed => Err(SessionError::Connection {
                    peer: peer.to_string(),
                    reason: format!("{e} after {at} bytes"),
                }),
            },
        };
    }
}

/// A failed receive, named: the connection (reset, stalled) or the destination.
fn stream_error(e: EngineError, peer: SocketAddr) -> SessionError {
    match e {
        EngineError::Timeout { secs, .. } => SessionError::Connection {
            peer: peer.to_string(),
            reason: format!("nothing arrived for {secs} s (peer stalled or gone; --timeout)"),
        },
        EngineError::Sys {
            what: "socket",
            call,
            source,
        } => SessionError::Connection {
            peer: peer.to_string(),
            reason: format!("{call}: {source}"),
        },
        other => SessionError::Engine(other),
    }
}
