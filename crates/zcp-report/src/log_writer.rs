//! The transfer log's writer: one thread owns the file and appends the lines handed to it over
//! a bounded channel, so no session ever waits on the log's disk (a FIFO nobody reads, a hung
//! NFS mount, a slow disk). A line that finds the channel full is dropped and counted; the
//! count is written as a line of its own (`{"type":"dropped","lines":N}`) and warned about on
//! the server's log once there is room. A line that fails half-written (a full disk) is cut
//! off again, so the file only ever holds whole lines. Reopening (SIGHUP) is a request the
//! thread carries out, never the caller.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError, sync_channel};
use std::time::{Duration, Instant, SystemTime};

use serde_json::json;
use zcp_wire::escape_text;

use crate::server_trace::TARGET;

/// Lines waiting for the writer before new ones are dropped.
pub const CAPACITY: usize = 8192;

/// How often an idle writer looks for a reopen request or dropped lines to report.
const TICK: Duration = Duration::from_millis(500);

/// What the writer appends to: a file, or in tests one that fails or blocks.
pub trait LogFile: Send {
    /// The length now (where the next line starts).
    fn end(&mut self) -> io::Result<u64>;
    /// Appends `line` whole (short writes are retried).
    fn append(&mut self, line: &[u8]) -> io::Result<()>;
    /// Cuts the file back to `len` bytes.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
}

impl LogFile for File {
    fn end(&mut self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
    fn append(&mut self, line: &[u8]) -> io::Result<()> {
        self.write_all(line)
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)
    }
}

/// What kind of file `path` is, when it is not a regular one (for errors).
fn not_regular(path: &Path) -> Option<&'static str> {
    let t = std::fs::symlink_metadata(path).ok()?.file_type();
    (!t.is_file()).then(|| kind(t))
}

/// The kind of a file that is not a regular one, in words.
fn kind(t: std::fs::FileType) -> &'static str {
    if t.is_symlink() {
        "a symbolic link"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_socket() {
        "a socket"
    } else {
        "a device"
    }
}

/// The error for a path that is not a regular file.
fn refused(kind: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("it is {kind}, not a regular file"),
    )
}

/// Opens `path` for appending, creating it with mode 0640 (less the umask). It must be a
/// regular file: a symbolic link is not followed, and `O_NONBLOCK` keeps a FIFO without a
/// reader from blocking the open (regular files ignore the flag); the open file is checked.
pub fn open_append(path: &Path) -> io::Result<File> {
    let f = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| not_regular(path).map_or(e, refused))?;
    let t = f.metadata()?.file_type();
    if !t.is_file() {
        return Err(refused(kind(t)));
    }
    Ok(f)
}

/// Why `path` could not be opened for appending (or created), found without opening or
/// creating anything (`zcp serve --check-config`): an existing path must be a regular file
/// the user may write to; a missing one needs a directory the user may write in.
pub fn check(path: &Path) -> Result<(), String> {
    use rustix::fs::{Access, access};
    match std::fs::symlink_metadata(path) {
        Ok(m) if !m.file_type().is_file() => {
            Err(format!("it is {}, not a regular file", kind(m.file_type())))
        }
        Ok(_) => access(path, Access::WRITE_OK)
            .map_err(|e| format!("cannot append to it: {}", std::io::Error::from(e))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let parent = match path.parent() {
                Some(p) if !p.as_os_str().is_empty() => p,
                _ => Path::new("."),
            };
            if !parent.is_dir() {
                return Err(format!(
                    "its directory {} does not exist",
                    escape_text(&parent.display().to_string())
                ));
            }
            access(parent, Access::WRITE_OK).map_err(|e| {
                format!(
                    "cannot create it in {}: {}",
                    escape_text(&parent.display().to_string()),
                    std::io::Error::from(e)
                )
            })
        }
        Err(e) => Err(format!("cannot look at it: {e}")),
    }
}

/// What the writer thread is handed.
enum Msg {
    Line(String),
    /// Open the path again, after the lines before it.
    Reopen,
    /// Answer once everything before it is written.
    Flush(SyncSender<()>),
}

/// What the senders and the writer thread share.
#[derive(Debug, Default)]
struct Shared {
    dropped: AtomicU64,
    reopen: AtomicBool,
    /// Whether the last write failed (reported once until one succeeds).
    failing: AtomicBool,
}

/// The sending side: hands lines to the writer thread without ever waiting.
#[derive(Debug)]
pub struct Writer {
    tx: SyncSender<Msg>,
    shared: Arc<Shared>,
}

impl Writer {
    /// Starts the thread writing to `file` (opened from `path`), with room for `capacity`
    /// lines in between.
    pub fn spawn(path: PathBuf, file: Box<dyn LogFile>, capacity: usize) -> io::Result<Writer> {
        let (tx, rx) = sync_channel(capacity);
        let shared = Arc::new(Shared::default());
        let mut thread = Thread {
            path,
            file,
            shared: shared.clone(),
        };
        std::thread::Builder::new()
            .name("zcp-transfer-log".into())
            .spawn(move || thread.run(rx))?;
        Ok(Writer { tx, shared })
    }

    /// Queues `line` (with its newline); drops and counts it when the queue is full.
    pub fn send(&self, line: String) {
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) =
            self.tx.try_send(Msg::Line(line))
        {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Asks the thread to open the path again (its failure is logged by the thread): after
    /// the lines queued so far, or, when the queue is full, as soon as the thread gets to it.
    pub fn reopen(&self) {
        if self.tx.try_send(Msg::Reopen).is_err() {
            self.shared.reopen.store(true, Ordering::Relaxed);
        }
    }

    /// Waits up to `timeout` for every line queued so far to be written; whether they were.
    pub fn flush(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        let (ack, done) = sync_channel(1);
        let mut msg = Msg::Flush(ack);
        loop {
            match self.tx.try_send(msg) {
                Ok(()) => break,
                Err(TrySendError::Full(m)) if Instant::now() < end => {
                    msg = m;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(_) => return false,
            }
        }
        done.recv_timeout(end.saturating_duration_since(Instant::now()))
            .is_ok()
    }

    /// Lines dropped and not yet reported.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Whether the last write failed.
    pub fn failing(&self) -> bool {
        self.shared.failing.load(Ordering::Relaxed)
    }
}

/// The writer thread's side.
struct Thread {
    path: PathBuf,
    file: Box<dyn LogFile>,
    shared: Arc<Shared>,
}

impl Thread {
    fn run(&mut self, rx: Receiver<Msg>) {
        loop {
            match rx.recv_timeout(TICK) {
                Ok(Msg::Line(l)) => {
                    self.write(l.as_bytes());
                }
                Ok(Msg::Flush(ack)) => {
                    self.catch_up();
                    let _ = ack.send(());
                }
                Ok(Msg::Reopen) => self.shared.reopen.store(true, Ordering::Relaxed),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.catch_up();
                    return;
                }
            }
            self.catch_up();
        }
    }

    /// Carries out a reopen request and reports lines dropped since the last look.
    fn catch_up(&mut self) {
        if self.shared.reopen.swap(false, Ordering::Relaxed) {
            match open_append(&self.path) {
                Ok(f) => self.file = Box::new(f),
                Err(e) => tracing::error!(
                    target: TARGET,
                    "zcp: cannot reopen the transfer log {}: {e}; still writing to the file open before",
                    self.shown()
                ),
            }
        }
        let n = self.shared.dropped.swap(0, Ordering::Relaxed);
        if n == 0 {
            return;
        }
        let time = humantime::format_rfc3339_millis(SystemTime::now()).to_string();
        let line = json!({"time": time, "type": "dropped", "lines": n}).to_string() + "\n";
        if self.write(line.as_bytes()) {
            tracing::warn!(
                target: TARGET,
                "zcp: transfer log {}: {n} lines dropped, its disk did not keep up (sessions never wait for it)",
                self.shown()
            );
        } else {
            // Counted again, for the next line that can be written.
            self.shared.dropped.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// Appends one line whole, or nothing: a write that fails part-way is cut off again.
    /// Whether it was written.
    fn write(&mut self, line: &[u8]) -> bool {
        let result = self.file.end().and_then(|len| {
            self.file
                .append(line)
                .map_err(|e| match self.file.truncate(len) {
                    Ok(()) => e,
                    Err(t) => io::Error::new(
                        e.kind(),
                        format!("{e}; cutting the partial line off failed too: {t}"),
                    ),
                })
        });
        match result {
            Ok(()) => {
                self.shared.failing.store(false, Ordering::Relaxed);
                true
            }
            Err(e) => {
                if !self.shared.failing.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        target: TARGET,
                        "zcp: transfer log {}: {e}; its lines are lost until a write succeeds (SIGHUP reopens it)",
                        self.shown()
                    );
                }
                false
            }
        }
    }

    fn shown(&self) -> String {
        escape_text(&self.path.display().to_string())
    }
}
