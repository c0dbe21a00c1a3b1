//! The two processes of a `transport` run: a zcp server on loopback that takes exactly one
//! session into the receiver's directory, and `zcp send` of the source file to it. Both read
//! the run's key from the key file the benchmark wrote into its scratch directory (mode
//! 0600; never on a command line).

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zcp_engine::sync::Locked;
use zcp_engine::sys::process_usage;
use zcp_engine::{RecvEngine, SendEngine};
use zcp_session::{
    Collect, Connection, SendOptions, Server, ServerConfig, ServerEvent, ServerReporter,
    TransportKind, UdpMode, VerifyMode,
};

use super::{DEST, Transport, UdpCounts};
use crate::side::{SideReport, SideSpec};
use crate::{BenchError, CellSpec};

fn key(spec: &SideSpec) -> Result<zcp_wire::Psk, BenchError> {
    let path = spec
        .key
        .as_deref()
        .ok_or_else(|| BenchError::Config("a transport side needs the run's key file".into()))?;
    Ok(zcp_session::keyfile::read_key(path)?)
}

fn transport(cell: &CellSpec) -> Result<Transport, BenchError> {
    cell.transport
        .ok_or_else(|| BenchError::Config(format!("{} is not a transport cell", cell.label())))
}

/// What the server side saw of its one session.
#[derive(Debug, Default)]
struct Tally {
    /// Bytes of the files committed, and the receiver engine that ran.
    committed: u64,
    engine: Option<String>,
    /// Why the session or a file failed, or a connection was refused (escaped by the server).
    problems: Vec<String>,
}

#[derive(Debug, Default)]
struct Log(Mutex<Tally>);

impl ServerReporter for Log {
    fn event(&self, event: &ServerEvent) {
        let mut t = self.0.locked();
        match event {
            ServerEvent::FileDone {
                bytes,
                engine,
                stored,
                ..
            } if *stored => {
                t.committed += bytes;
                t.engine = Some(engine.clone());
            }
            ServerEvent::FileFailed { target, reason, .. } => {
                t.problems.push(format!("{target}: {reason}"));
            }
            ServerEvent::Rejected { reason, .. } => t.problems.push(reason.clone()),
            ServerEvent::SessionEnd {
                ok: false, reason, ..
            } => t.problems.push(reason.clone().unwrap_or_default()),
            _ => {}
        }
    }
}

/// The receiving side: binds a server on loopback with the run's directory as its root,
/// prints `{"port":N}`, serves one session and reports what it committed. Its clock and
/// counters start once it listens; the session's handshake is counted.
pub fn serve(spec: &SideSpec, out: &mut dyn Write) -> Result<SideReport, BenchError> {
    transport(&spec.cell)?;
    let log = Arc::new(Log::default());
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
    let server = Server::bind(
        addr,
        ServerConfig::new(spec.path.clone(), key(spec)?),
        log.clone(),
    )?;
    writeln!(out, "{{\"port\":{}}}", server.local_addr().port())
        .and_then(|()| out.flush())
        .map_err(|e| BenchError::io("writing the port", e))?;
    let (start, u0) = (Instant::now(), process_usage());
    let code = server.run(&AtomicBool::new(false), true);
    let t = log.0.locked();
    if code != Some(0) {
        return Err(BenchError::Config(format!(
            "the server's session failed (exit code {code:?}): {}",
            t.problems.join("; ")
        )));
    }
    let engine = t.engine.clone().unwrap_or_else(|| spec.cell.recv.clone());
    Ok(SideReport::new(&engine, None, t.committed, start, &u0))
}

/// The sending side: `zcp send` of the source to the server as `transport.bin`, with the
/// cell's transport, streams and rate cap. Its time is the session's, first byte to last
/// commit; its CPU is the whole process from before it connects.
pub fn send(spec: &SideSpec) -> Result<SideReport, BenchError> {
    let cell = &spec.cell;
    let t = transport(cell)?;
    let engine = SendEngine::parse(&cell.engine)
        .ok_or_else(|| BenchError::Config(format!("unknown sender engine {}", cell.engine)))?;
    let recv_engine = RecvEngine::parse(&cell.recv)
        .ok_or_else(|| BenchError::Config(format!("unknown receiver engine {}", cell.recv)))?;
    let streams = u16::try_from(cell.streams)
        .map_err(|_| BenchError::Config(format!("{} streams are too many", cell.streams)))?;
    let opts = SendOptions {
        conn: Connection {
            host: Ipv4Addr::LOCALHOST.to_string(),
            port: spec.port,
            psk: key(spec)?,
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
        },
        transfer: zcp_session::Transfer {
            engine,
            recv_engine,
            block_size: cell.block,
            chunk_size: None,
            streams,
            recursive: false,
            interval: None,
            retries: 0,
            retry_wait: Duration::ZERO,
            stop: None,
            verify: VerifyMode::Blake3,
            link: zcp_session::Link {
                kind: match t {
                    Transport::Tcp => TransportKind::Tcp,
                    Transport::UdpFair | Transport::UdpFixed => TransportKind::Udp,
                },
                udp_mode: match t {
                    Transport::UdpFixed => UdpMode::Fixed,
                    Transport::Tcp | Transport::UdpFair => UdpMode::Fair,
                },
                limit_rate: cell.limit_bits,
                encrypt: false,
            },
            existing: zcp_wire::ExistingMode::Replace,
            filter: Vec::new(),
            delete: zcp_wire::DeleteMode::Off,
        },
        sources: vec![spec.path.clone()],
        dest: DEST.as_bytes().to_vec(),
        ssh: None,
    };
    let (start, u0) = (Instant::now(), process_usage());
    let s = zcp_session::send(&opts, &mut Collect::default())?;
    if !s.stored || s.failed > 0 || !s.verified {
        return Err(BenchError::Config(format!(
            "the session ended without storing and verifying the file (stored {}, verified {}, {} failed)",
            s.stored, s.verified, s.failed
        )));
    }
    let mut report = SideReport::new(&s.sender_engine, None, s.bytes, start, &u0);
    report.seconds = s.seconds;
    report.udp = s.udp.map(|u| UdpCounts {
        mode: u.mode,
        engines: u.engines,
        payload: u.payload,
        sent: u.sent,
        lost: u.lost,
        resent: u.resent,
        resent_bytes: u.resent_bytes,
        receiver_drops: u.receiver_drops,
        cuts: u.cuts,
    });
    if t != Transport::Tcp && report.udp.is_none() {
        return Err(BenchError::Config(
            "the UDP session reported no datagram counters".into(),
        ));
    }
    Ok(report)
}

/// Checks the file a run committed beneath `dir` and removes it, so the next run sends it
/// whole again (a file already there would be skipped as resumed). The runner calls this.
pub fn take_committed(dir: &Path, cell: &CellSpec) -> Result<(), BenchError> {
    let path = dir.join(DEST);
    let len = std::fs::metadata(&path)
        .map_err(|e| BenchError::io(format!("looking for the committed {}", path.display()), e))?
        .len();
    std::fs::remove_file(&path)
        .map_err(|e| BenchError::io(format!("removing {}", path.display()), e))?;
    if len != cell.size {
        return Err(BenchError::Run {
            cell: cell.label(),
            message: format!("the committed file has {len} bytes of {}", cell.size),
        });
    }
    Ok(())
}
