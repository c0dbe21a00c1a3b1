//! One side of one run, in a process of its own (`zcp bench-side SPEC`), so `getrusage`
//! counts that side alone.
//!
//! The receiver binds an ephemeral port on loopback and prints `{"port":N}`; the sender
//! connects every stream, and both start their clocks and counters once the connections
//! stand. The sender sends its ranges with the cell's engine and half-closes each stream;
//! the receiver takes every range with its engine (cut into the chunk sizes a transfer uses),
//! waits for its writes, `fdatasync`s for a durable sink, and only then acknowledges each
//! stream with one byte. The sender's clock stops at the last acknowledgement, so its elapsed
//! time covers the whole transfer including the receiver's storage. Each side ends by
//! printing one [`SideReport`] line. `transport` cells run a zcp session instead
//! ([`crate::transport::side`]).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use zcp_engine::sync::Locked;

use serde::{Deserialize, Serialize};
use zcp_engine::fs::{PartFile, Root};
use zcp_engine::recv::{Target, WriteFailure, choose};
use zcp_engine::sys::{Usage, process_usage};
use zcp_engine::{FileSender, RecvEngine, SendEngine, StreamReceiver};
use zcp_wire::ChunkPlan;

use crate::plan::{SinkKind, ranges};
use crate::{BenchError, CellSpec};

/// Which side a process plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads the file and sends it.
    Send,
    /// Takes the bytes and stores or drops them.
    Recv,
}

/// What a side process is told to do (passed as one JSON argument).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SideSpec {
    /// Which side.
    pub role: Role,
    /// The cell.
    pub cell: CellSpec,
    /// Sender: the source file. Receiver: the directory its file goes in.
    pub path: PathBuf,
    /// Sender: the receiver's port.
    pub port: u16,
    /// `transport` cells: the run's key file (both sides read the key from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<PathBuf>,
}

/// What one side measured, printed as one JSON line at its end.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SideReport {
    /// Engine that ran (after probes and fallbacks).
    pub engine: String,
    /// Why it is not the one asked for, if it is not.
    pub note: Option<String>,
    /// Bytes this side moved.
    pub bytes: u64,
    /// Seconds from the connections standing to the end of this side's work.
    pub seconds: f64,
    /// User CPU seconds.
    pub user: f64,
    /// System CPU seconds.
    pub sys: f64,
    /// Voluntary context switches.
    pub voluntary_switches: u64,
    /// Involuntary context switches.
    pub involuntary_switches: u64,
    /// Page faults that needed I/O.
    pub major_faults: u64,
    /// Page faults served from memory.
    pub minor_faults: u64,
    /// Peak resident set size of the process, bytes.
    pub max_rss_bytes: u64,
    /// `transport` cells over UDP, the sender: its datagram counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp: Option<crate::transport::UdpCounts>,
}

impl SideReport {
    pub(crate) fn new(
        engine: &str,
        note: Option<String>,
        bytes: u64,
        start: Instant,
        u0: &Usage,
    ) -> Self {
        let u = process_usage().since(u0);
        SideReport {
            engine: engine.to_string(),
            note,
            bytes,
            seconds: start.elapsed().as_secs_f64(),
            user: u.user.as_secs_f64(),
            sys: u.sys.as_secs_f64(),
            voluntary_switches: u.voluntary_switches,
            involuntary_switches: u.involuntary_switches,
            major_faults: u.major_faults,
            minor_faults: u.minor_faults,
            max_rss_bytes: u.max_rss_bytes,
            udp: None,
        }
    }
}

/// Runs one side as `spec` says, writing the port line (receiver) and the report line to
/// `out`.
pub fn run_side(spec: &SideSpec, out: &mut dyn Write) -> Result<(), BenchError> {
    let report = match (spec.role, spec.cell.transport.is_some()) {
        (Role::Send, false) => send(spec)?,
        (Role::Recv, false) => receive(spec, out)?,
        (Role::Send, true) => crate::transport::side::send(spec)?,
        (Role::Recv, true) => crate::transport::side::serve(spec, out)?,
    };
    let line = serde_json::to_string(&report).expect("a report serializes");
    writeln!(out, "{line}")
        .and_then(|()| out.flush())
        .map_err(|e| BenchError::io("writing the report", e))
}

fn send(spec: &SideSpec) -> Result<SideReport, BenchError> {
    let cell = &spec.cell;
    let asked = SendEngine::parse(&cell.engine)
        .ok_or_else(|| BenchError::Config(format!("unknown sender engine {}", cell.engine)))?;
    let file = std::fs::File::open(&spec.path)
        .map_err(|e| BenchError::io(format!("opening {}", spec.path.display()), e))?;
    let (engine, note) = asked.probe(file.as_fd(), cell.size);
    let mut socks = Vec::new();
    for _ in 0..cell.streams.max(1) {
        let s = TcpStream::connect((Ipv4Addr::LOCALHOST, spec.port))
            .map_err(|e| BenchError::io(format!("connecting to port {}", spec.port), e))?;
        socks.push(s);
    }
    let (start, u0) = (Instant::now(), process_usage());
    let progress = AtomicU64::new(0);
    let file = &file;
    let progress_ref = &progress;
    std::thread::scope(|scope| -> Result<(), BenchError> {
        let workers: Vec<_> = socks
            .into_iter()
            .zip(ranges(cell.size, cell.streams))
            .map(|(mut sock, (offset, len))| {
                scope.spawn(move || -> Result<(), BenchError> {
                    let mut fs = FileSender::new(engine, cell.block);
                    if cell.region > 0 {
                        // Fixed offset: the same region from offset 0, again and again.
                        let mut sent = 0;
                        while sent < len {
                            let n = cell.region.min(len - sent);
                            fs.send(file.as_fd(), sock.as_fd(), 0, n, progress_ref)?;
                            sent += n;
                        }
                    } else {
                        fs.send(file.as_fd(), sock.as_fd(), offset, len, progress_ref)?;
                    }
                    zcp_engine::send::shutdown_write(&sock);
                    let mut ack = [0u8; 1];
                    match sock.read(&mut ack) {
                        Ok(1) => Ok(()),
                        Ok(_) => Err(BenchError::Config(
                            "the receiver closed the stream without acknowledging".into(),
                        )),
                        Err(e) => Err(BenchError::io("waiting for the acknowledgement", e)),
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().expect("a sender thread panicked")?;
        }
        Ok(())
    })?;
    let bytes = progress.into_inner();
    Ok(SideReport::new(engine.name(), note, bytes, start, &u0))
}

fn receive(spec: &SideSpec, out: &mut dyn Write) -> Result<SideReport, BenchError> {
    let cell = &spec.cell;
    let asked = RecvEngine::parse(&cell.recv)
        .ok_or_else(|| BenchError::Config(format!("unknown receiver engine {}", cell.recv)))?;
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| BenchError::io("binding a loopback port", e))?;
    let port = listener
        .local_addr()
        .map_err(|e| BenchError::io("reading the bound port", e))?
        .port();

    // The destination, prepared as a transfer prepares it: a preallocated partial file
    // beside where the target would go, removed when this process is done with it.
    let (engine, note, part) = if asked.stores() {
        let root = Root::open(&spec.path)?;
        let dir = Arc::new(root.open_dir(&[], false)?);
        let info = zcp_engine::fs::fs_info(&*dir)?;
        let choice = choose(asked, dir.as_fd(), &info);
        let key = format!("bench-{}", std::process::id());
        let (part, _) = PartFile::open(dir, &key)?;
        part.preallocate(cell.size)?;
        (choice.engine, choice.note, Some(part))
    } else {
        (asked, None, None)
    };
    let target = match &part {
        None => None,
        Some(p) => Some(Target {
            file: p.shared_fd(),
            direct: if engine == RecvEngine::Direct {
                Some(Arc::new(p.open_direct().map_err(|e| {
                    BenchError::io("opening the destination with O_DIRECT", e.into())
                })?))
            } else {
                None
            },
        }),
    };

    writeln!(out, "{{\"port\":{port}}}")
        .and_then(|()| out.flush())
        .map_err(|e| BenchError::io("writing the port", e))?;
    let mut socks = Vec::new();
    for _ in 0..cell.streams.max(1) {
        let (s, _) = listener
            .accept()
            .map_err(|e| BenchError::io("accepting a stream", e))?;
        socks.push(s);
    }
    let (start, u0) = (Instant::now(), process_usage());
    let progress = AtomicU64::new(0);
    let failure: Arc<Mutex<Option<String>>> = Arc::default();
    let (target, progress_ref) = (&target, &progress);
    let socks = std::thread::scope(|scope| -> Result<Vec<TcpStream>, BenchError> {
        let workers: Vec<_> = socks
            .into_iter()
            .zip(ranges(cell.size, cell.streams))
            .map(|(sock, (offset, len))| {
                let failure = failure.clone();
                scope.spawn(move || -> Result<TcpStream, BenchError> {
                    let mut r = StreamReceiver::new(cell.block);
                    // Cut into the chunks a transfer of this file would use, so write-behind
                    // and read-back run as they do in `zcp send`.
                    let chunk = ChunkPlan::default_chunk_size(cell.size).max(1);
                    let mut at = 0;
                    while at < len {
                        let n = chunk.min(len - at);
                        let failure = failure.clone();
                        let done = Box::new(move |res: Result<(), WriteFailure>| {
                            if let Err(e) = res {
                                *failure.locked() = Some(e.message);
                            }
                        });
                        r.receive(
                            engine,
                            target.as_ref(),
                            sock.as_fd(),
                            offset + at,
                            n,
                            None,
                            progress_ref,
                            done,
                        )?;
                        at += n;
                    }
                    r.finish()?;
                    Ok(sock)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("a receiver thread panicked"))
            .collect()
    })?;
    if let Some(message) = failure.locked().take() {
        return Err(BenchError::Config(format!("writing failed: {message}")));
    }
    if cell.sink == SinkKind::Durable
        && let Some(p) = &part
    {
        p.sync_data()?;
    }
    for mut s in socks {
        s.write_all(b"k")
            .map_err(|e| BenchError::io("acknowledging", e))?;
    }
    let bytes = progress.into_inner();
    let report = SideReport::new(engine.name(), note, bytes, start, &u0);
    drop(part);
    Ok(report)
}
