//! The in-process pair harness (quinn's `Pair` is the model): a sending role and a receiving
//! role in one process, over loopback connections, on a temporary source tree and root, wired
//! exactly as the client and the server wire them (the same [`crate::send::run`] and
//! [`crate::recv::run`], the same TCP transport and engines). A fault hook can flip, stall or
//! cut the bytes of any connection at a given byte, run a trigger there (change or truncate
//! the source), make a chunk's write fail with ENOSPC or EIO, or make reading the source fail;
//! "killing" a side cuts every connection at a byte, and running the pair again restarts
//! from what is on disk.
//!
//! `tests.rs` holds the role tests that use it, `sparse.rs` those of sparse sources,
//! `verify.rs` those of sessions without verification; `campaign.rs` the fault campaign.

mod campaign;
mod crypt;
pub(crate) mod faulty;
mod links;
pub(crate) mod relay;
mod sparse;
mod tests;
mod udp;
mod verify;

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use zcp_engine::fs::Root;
use zcp_engine::{RecvEngine, SendEngine};
use zcp_wire::{Opener, Psk, Sealer, SessionKeys, Side};

use crate::confine::{Requested, Scope};
use crate::conn::{ControlRx, ControlTx, FrameReader};
use crate::control::ControlWriter;
use crate::error::SessionError;
use crate::event::{Failure, FileOutcome, Observer};
use crate::manifest::Walker;
use crate::recv::ReceiverTotals;
use crate::recv::state::RxConfig;
use crate::send::{SenderConfig, SenderTotals};
use crate::transport::Link;
use crate::transport::udp::UdpStats;
use crate::wiring::{Receiver, Sender, Wiring};
use faulty::{DiskFault, Faulty};
use relay::{Cutter, WireFault, link};

/// Which connection of a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Conn {
    /// The control connection, sender to receiver.
    Control,
    /// The control connection, receiver to sender (acknowledgements, commits).
    ControlBack,
    /// A data stream.
    Data(u16),
    /// A data stream, receiver to sender (a UDP stream's side channel: NAKs, done marks).
    DataBack(u16),
}

/// How a pair runs, and where it fails.
#[derive(Debug, Clone)]
pub(crate) struct Opts {
    pub(crate) streams: u16,
    pub(crate) chunk_size: Option<u64>,
    pub(crate) send_engine: SendEngine,
    pub(crate) recv_engine: RecvEngine,
    pub(crate) idle: Duration,
    pub(crate) recursive: bool,
    /// A fault on a connection's sender-to-receiver bytes, at a byte.
    pub(crate) wire: Option<(Conn, u64, WireFault)>,
    /// A fault at the `n`-th chunk read or written.
    pub(crate) disk: Option<(usize, DiskFault)>,
    /// How both roles prove the data (`--verify`).
    pub(crate) verify: zcp_wire::VerifyMode,
    /// `--transport udp` with this configuration (no disk fault then).
    pub(crate) udp: Option<crate::transport::udp::UdpConfig>,
    /// What the receiver does with a file already there.
    pub(crate) existing: zcp_wire::ExistingMode,
    /// `--delete` or its dry run.
    pub(crate) delete: zcp_wire::DeleteMode,
    /// A pull: the sender is the server, walking its export; the receiver the client, taking
    /// only what it asked for.
    pub(crate) pull: bool,
    /// The rate cap (`--limit-rate`), bits per second.
    pub(crate) limit_rate: Option<u64>,
    /// The receiver's data streams join after its role started (a server's push).
    pub(crate) join_late: bool,
    /// The session is encrypted (keys as an X25519 agreement would give them).
    pub(crate) encrypt: bool,
}

impl Default for Opts {
    fn default() -> Opts {
        Opts {
            streams: 2,
            chunk_size: Some(64 << 10),
            send_engine: SendEngine::Sendfile,
            recv_engine: RecvEngine::Auto,
            // Long enough that a disk stalled by other tests (fsync on a shared VM) is not
            // taken for a dead peer; tests of the idle timeout set their own.
            idle: Duration::from_secs(30),
            recursive: true,
            wire: None,
            disk: None,
            verify: zcp_wire::VerifyMode::Blake3,
            udp: None,
            existing: zcp_wire::ExistingMode::Replace,
            delete: zcp_wire::DeleteMode::Off,
            pull: false,
            limit_rate: None,
            join_late: false,
            encrypt: false,
        }
    }
}

/// What a role told its observer.
#[derive(Debug, Default)]
pub(crate) struct Notes {
    pub(crate) done: Vec<FileOutcome>,
    pub(crate) failures: Vec<Failure>,
    pub(crate) notes: Vec<String>,
    pub(crate) engines: Option<(String, String)>,
    /// What `--delete` removed (or named).
    pub(crate) deleted: Vec<String>,
}

impl Observer for Notes {
    fn engines(&mut self, sender: &str, _: Option<&str>, receiver: &str, _: Option<&str>) {
        self.engines = Some((sender.into(), receiver.into()));
    }

    fn file_done(&mut self, done: FileOutcome) {
        if let Some(f) = &done.failure {
            self.failures.push(f.clone());
        }
        self.done.push(done);
    }

    fn notice(&mut self, failure: Option<Failure>, note: Option<String>) {
        self.failures.extend(failure);
        self.notes.extend(note);
    }

    fn tick(&mut self, _: crate::event::Phase) {}

    fn deleted(&mut self, path: String, _: bool, _: bool) {
        self.deleted.push(path);
    }
}

impl Notes {
    /// Files committed.
    pub(crate) fn committed(&self) -> usize {
        self.done.iter().filter(|d| d.failure.is_none()).count()
    }

    /// Bytes the receiver already held and were not sent again.
    pub(crate) fn skipped(&self) -> u64 {
        self.done
            .iter()
            .filter(|d| d.failure.is_none())
            .map(|d| d.skipped)
            .sum()
    }
}

/// Every file the receiver reports done and verified carries the plain BLAKE3 of its bytes,
/// as `b3sum` would print it, whatever path it took (resumed, kept in place, sparse, over UDP,
/// after a re-sent chunk): checked against the file at `at(path)`, where there is one. The
/// sender reports the same digest for each file it saw committed (its source may have
/// changed since, in a fault trial, so it is held to the receiver's, not to the source).
#[track_caller]
fn check_digests(received: &Notes, sent: &Notes, at: impl Fn(&str) -> PathBuf) {
    let done = |n: &Notes| {
        (n.done.iter())
            .filter(|d| d.failure.is_none() && d.verified)
            .map(|d| (d.path.clone(), d.digest))
            .collect::<Vec<_>>()
    };
    let got = done(received);
    for (path, digest) in &got {
        let Ok(bytes) = std::fs::read(at(path)) else {
            continue;
        };
        assert_eq!(
            *digest,
            *blake3::hash(&bytes).as_bytes(),
            "{path}: the receiver's digest is not the plain BLAKE3 of its bytes"
        );
    }
    for (path, digest) in done(sent) {
        assert!(
            got.iter().any(|(_, d)| *d == digest),
            "{path}: the sender's digest is none the receiver reported"
        );
    }
}

/// How a run of the pair ended.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) sender: Result<SenderTotals, SessionError>,
    pub(crate) receiver: Result<ReceiverTotals, SessionError>,
    pub(crate) sent: Notes,
    pub(crate) received: Notes,
    /// Payload bytes the sender put on the data streams.
    pub(crate) bytes_sent: u64,
    /// Whether the fault asked for fired (its byte or chunk came).
    pub(crate) fired: bool,
    /// Over UDP: what the sending and the receiving side counted.
    pub(crate) udp: Option<(crate::UdpReport, crate::UdpReport)>,
    /// Over UDP: the most chunk-buffer memory the sending and the receiving side held.
    pub(crate) udp_memory: (u64, u64),
    /// The rate cap as the sender held it.
    pub(crate) limit: Option<crate::event::RateLimit>,
}

impl Outcome {
    /// Both roles ended cleanly and nothing failed.
    pub(crate) fn clean(&self) -> bool {
        self.sender.is_ok()
            && self.receiver.is_ok()
            && self.sent.failures.is_empty()
            && self.received.failures.is_empty()
    }

    /// Panics with everything known unless [`Outcome::clean`].
    #[track_caller]
    pub(crate) fn assert_clean(&self) {
        assert!(self.clean(), "{self:#?}");
    }
}

/// A pair's connections through their relays: the control connection and the data streams,
/// each as the sender's end and the receiver's.
struct Links {
    control: (TcpStream, TcpStream),
    data: (Vec<TcpStream>, Vec<TcpStream>),
    relays: Vec<std::thread::JoinHandle<()>>,
}

impl Links {
    /// The connections `o` asks for, its wire fault on the one it names.
    fn new(o: &Opts, cutter: &Cutter) -> Links {
        let fault_on = |c: Conn| {
            o.wire
                .as_ref()
                .filter(|(on, _, _)| *on == c)
                .map(|(_, at, f)| (*at, f.clone()))
        };
        let back = fault_on(Conn::ControlBack);
        let (c_s, c_r, mut relays) = link(fault_on(Conn::Control), back, cutter);
        let (mut s_socks, mut r_socks) = (Vec::new(), Vec::new());
        for i in 0..o.streams {
            let (s, r, t) = link(fault_on(Conn::Data(i)), fault_on(Conn::DataBack(i)), cutter);
            for sock in [&s, &r] {
                let _ = zcp_engine::sys::set_socket_timeouts(sock, Some(o.idle));
            }
            s_socks.push(s);
            r_socks.push(r);
            relays.extend(t);
        }
        Links {
            control: (c_s, c_r),
            data: (s_socks, r_socks),
            relays,
        }
    }
}

/// A source tree and a receiver root in one temporary directory, and a key.
pub(crate) struct Pair {
    pub(crate) dir: tempfile::TempDir,
    pub(crate) psk: Psk,
    runs: AtomicU64,
}

impl Pair {
    pub(crate) fn new() -> Pair {
        let dir = tempfile::Builder::new()
            .prefix("zcp-pair-")
            .tempdir()
            .expect("tempdir");
        std::fs::create_dir(dir.path().join("src")).expect("src");
        std::fs::create_dir(dir.path().join("dst")).expect("dst");
        Pair {
            dir,
            psk: Psk::from_bytes([0x5a; 32]),
            runs: AtomicU64::new(0),
        }
    }

    pub(crate) fn src(&self, rel: &str) -> PathBuf {
        self.dir.path().join("src").join(rel)
    }

    pub(crate) fn dst(&self, rel: &str) -> PathBuf {
        self.dir.path().join("dst").join(rel)
    }

    /// Writes source file `rel` (parents made) with `len` bytes made from `seed`.
    pub(crate) fn file(&self, rel: &str, len: usize, seed: u64) -> Vec<u8> {
        let bytes = pseudo_random(len, seed);
        let p = self.src(rel);
        std::fs::create_dir_all(p.parent().expect("in src")).expect("parents");
        std::fs::write(&p, &bytes).expect("write source");
        bytes
    }

    /// Whether destination `rel` holds exactly what source `rel` holds.
    pub(crate) fn same(&self, rel: &str) -> bool {
        match (std::fs::read(self.src(rel)), std::fs::read(self.dst(rel))) {
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }

    /// Sends `sources` (relative to the source tree) into `dest` beneath the root, as
    /// `zcp send` would, with `o`'s engines and faults; or, with `o.pull`, fetches them from
    /// the source tree as a server's export into `dest` as `zcp get -r` would.
    pub(crate) fn push(&self, sources: &[&str], dest: &str, o: &Opts) -> Outcome {
        let n = self.runs.fetch_add(1, Ordering::Relaxed);
        // Fresh nonces per run, as every real session has.
        let mut nonces = ([0u8; 32], [0u8; 32]);
        nonces.0[..8].copy_from_slice(&n.to_le_bytes());
        nonces.1[..8].copy_from_slice(&(n ^ u64::MAX).to_le_bytes());
        let keys = match o.encrypt {
            false => SessionKeys::derive(&self.psk, &nonces.0, &nonces.1),
            // What an agreement gives: a secret fresh per session.
            true => SessionKeys::derive_encrypted(
                &self.psk,
                (&nonces.0, &nonces.1),
                &[nonces.0, nonces.1].concat(),
                &nonces.1,
            ),
        };
        let cutter = Cutter::new(matches!(o.wire, Some((_, _, WireFault::CutAll))));
        let Links {
            control: (c_s, c_r),
            data: (s_socks, r_socks),
            relays,
        } = Links::new(o, &cutter);
        let counters = |n: u16| {
            (0..n)
                .map(|_| Arc::new(AtomicU64::new(0)))
                .collect::<Vec<_>>()
        };
        let s_counters = counters(o.streams);
        // The sender is the client in a push, the server in a pull.
        let (s_side, r_side) = match o.pull {
            false => (Side::Client, Side::Server),
            true => (Side::Server, Side::Client),
        };
        let link_of = Link {
            kind: match o.udp {
                Some(_) => zcp_wire::udp::TransportKind::Udp,
                None => zcp_wire::udp::TransportKind::Tcp,
            },
            udp_mode: o
                .udp
                .as_ref()
                .map_or(zcp_wire::udp::UdpMode::Fair, |c| c.mode),
            limit_rate: o.limit_rate,
            encrypt: o.encrypt,
        };
        let wiring = |c: &TcpStream, side: Side, data: Vec<TcpStream>, counters| Wiring {
            ctl: Arc::new(control_tx(c, &keys, side)),
            rx: control_rx(c.try_clone().expect("clone"), &keys, side),
            keys: keys.clone(),
            nonces,
            link: link_of,
            data,
            counters,
            udp: o.udp.clone(),
        };
        let faulty = |fired: &Arc<std::sync::atomic::AtomicBool>| {
            let (fault, fired) = (o.disk, fired.clone());
            move |inner| -> Box<dyn crate::transport::Transport> {
                Box::new(Faulty {
                    inner,
                    fault,
                    fired,
                    landing: Default::default(),
                })
            }
        };
        let (tops, scope, root) = self.tops(sources, dest, o);
        let sender = wiring(&c_s, s_side, s_socks, s_counters.clone())
            .wire(self.sender(o, tops, &link_of))
            .wrap(faulty(&cutter.fired));
        // Streams that join while the role runs, each landing on a thread of its own, as
        // on a server taking a push; or handed over at the start, as a pulling client does.
        let late: Arc<std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>> = Arc::default();
        let (r_socks, joins) = match o.join_late {
            false => (r_socks, None),
            true => (Vec::new(), Some(join_later(r_socks, late.clone()))),
        };
        let receiver = wiring(&c_r, r_side, r_socks, counters(o.streams))
            .wire(Receiver {
                cfg: RxConfig {
                    requested: o.recv_engine,
                    block: 0,
                    idle: o.idle,
                    sender_engine: o.send_engine.name().into(),
                    verify: o.verify,
                    existing: o.existing,
                    delete: (o.delete, Arc::default()),
                },
                root: Arc::new(Root::open(&root).expect("the root opens")),
                scope,
                joins,
            })
            .wrap(faulty(&cutter.fired));
        drop((c_s, c_r));
        let udp_stats = (sender.udp(), receiver.udp());
        let limit = sender.limit();
        let sender = std::thread::spawn(move || {
            let mut notes = Notes::default();
            let r = sender.run(&mut notes).map(|(t, _)| t);
            (r, notes)
        });
        let receiver = std::thread::spawn(move || {
            let mut notes = Notes::default();
            let r = receiver.run(&mut notes).map(|(t, _)| t);
            (r, notes)
        });
        let (sender, sent) = sender.join().expect("the sending role does not panic");
        let (receiver, received) = receiver.join().expect("the receiving role does not panic");
        for t in std::mem::take(&mut *late.lock().expect("not poisoned")) {
            let _ = t.join();
        }
        let fired = cutter.fired.load(Ordering::Relaxed);
        cutter.cut();
        for t in relays {
            let _ = t.join();
        }
        check_digests(&received, &sent, |p| root.join(p));
        let mode = link_of.udp_mode;
        let report = |s: &Option<Arc<UdpStats>>| s.as_ref().map(|s| s.report(mode));
        let peak = |s: &Option<Arc<UdpStats>>| s.as_ref().map_or(0, |s| s.memory.peak());
        Outcome {
            fired,
            sender,
            receiver,
            sent,
            received,
            bytes_sent: s_counters.iter().map(|c| c.load(Ordering::Relaxed)).sum(),
            udp: report(&udp_stats.0).zip(report(&udp_stats.1)),
            udp_memory: (peak(&udp_stats.0), peak(&udp_stats.1)),
            limit,
        }
    }

    /// The sending role as `o` asks; in a pull holding the cap as a server plans it for
    /// `Opened`.
    fn sender(&self, o: &Opts, tops: Vec<crate::manifest::Top>, link: &Link) -> Sender {
        Sender {
            cfg: SenderConfig {
                engine: o.send_engine,
                block: 0,
                chunk_size: o.chunk_size,
                idle: o.idle,
                verify: o.verify,
                delete: o.delete,
                recv_engine: o.recv_engine,
            },
            walker: Walker::new(tops, o.recursive),
            psk: self.psk.clone(),
            peer: "the receiver".into(),
            plan: o.pull.then(|| link.plan(usize::from(o.streams), None)),
        }
    }

    /// Where the sender's walk starts, what the receiver may touch and its root: a push's
    /// sources walked from the source tree into `dest` beneath the root; a pull's paths
    /// resolved beneath the source tree as a server resolves a `get`'s, each under its own
    /// name in `dest` (the client's root).
    fn tops(
        &self,
        sources: &[&str],
        dest: &str,
        o: &Opts,
    ) -> (Vec<crate::manifest::Top>, Scope, PathBuf) {
        if !o.pull {
            let sources: Vec<PathBuf> = sources.iter().map(|s| self.src(s)).collect();
            let (tops, _) = crate::client::send_tops(&sources, dest.as_bytes());
            return (tops, Scope::push(), self.dst(""));
        }
        let root = Arc::new(Root::open(&self.src("")).expect("the source root opens"));
        std::fs::create_dir_all(self.dst(dest)).expect("the destination");
        let mut names = Vec::new();
        let tops = sources
            .iter()
            .map(|s| {
                let name = Path::new(s).file_name().expect("a name").as_encoded_bytes();
                names.push(name.to_vec());
                crate::server::get_top(&root, s.as_bytes(), name).expect("a path to get")
            })
            .collect();
        let scope = Scope::pull(Requested {
            names,
            recursive: o.recursive,
            filter: Arc::default(),
        });
        (tops, scope, self.dst(dest))
    }

    /// Every regular file beneath the root whose name is final (not a part file or journal),
    /// relative to the root.
    pub(crate) fn finals(&self) -> Vec<String> {
        let mut out = Vec::new();
        walk(&self.dst(""), &self.dst(""), &mut out);
        out.sort();
        out
    }

    /// Bytes the journal beside destination `rel` holds as durable (0 without one).
    pub(crate) fn journaled(&self, rel: &str) -> u64 {
        let name = self.dst(rel);
        let name = name.file_name().expect("a file").as_encoded_bytes();
        let key = zcp_engine::fs::part_key(name);
        let journal = self.dst(rel).with_file_name(format!(".zcp-{key}.journal"));
        let Ok(bytes) = std::fs::read(journal) else {
            return 0;
        };
        let Ok(j) = zcp_wire::journal::decode_journal(&bytes) else {
            return 0;
        };
        let Ok(plan) = zcp_wire::ChunkPlan::new(j.header.size, j.header.chunk_size) else {
            return 0;
        };
        let chunks: std::collections::HashSet<u64> = j.chunks.iter().map(|c| c.index).collect();
        chunks.iter().map(|i| plan.chunk(*i).1).sum()
    }

    /// Part files and journals beneath the root.
    pub(crate) fn partials(&self) -> Vec<String> {
        let mut out = Vec::new();
        walk_all(&self.dst(""), &self.dst(""), &mut out);
        out.retain(|p| {
            let name = Path::new(p).file_name().expect("a name").as_encoded_bytes();
            zcp_engine::fs::is_reserved_name(name)
        });
        out
    }
}

/// Hands `socks` to the receiving role once it runs, each landing on a thread of its own
/// (kept in `late`), as a server's connection threads land a push's streams.
fn join_later(
    socks: Vec<TcpStream>,
    late: Arc<std::sync::Mutex<Vec<std::thread::JoinHandle<()>>>>,
) -> crate::transport::Joins {
    Box::new(move |lander| {
        for (i, sock) in (0..).zip(socks) {
            let lander = lander.clone();
            let t = std::thread::spawn(move || lander.land(i, sock));
            late.lock().expect("not poisoned").push(t);
        }
    })
}

fn control_tx(s: &TcpStream, keys: &SessionKeys, side: Side) -> ControlWriter {
    ControlWriter::new(ControlTx {
        stream: s.try_clone().expect("clone"),
        sealer: Sealer::new(keys, side),
    })
}

fn control_rx(s: TcpStream, keys: &SessionKeys, side: Side) -> ControlRx {
    let _ = s.set_read_timeout(Some(Duration::from_millis(250)));
    ControlRx {
        stream: s,
        opener: Opener::new(keys, side),
        reader: FrameReader::default(),
    }
}

fn walk_all(root: &Path, dir: &Path, out: &mut Vec<String>) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        let rel = p.strip_prefix(root).expect("beneath").display().to_string();
        match e.file_type() {
            Ok(t) if t.is_dir() => walk_all(root, &p, out),
            _ => out.push(rel),
        }
    }
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let mut all = Vec::new();
    walk_all(root, dir, &mut all);
    out.extend(all.into_iter().filter(|p| {
        let name = Path::new(p).file_name().expect("a name").as_encoded_bytes();
        !zcp_engine::fs::is_reserved_name(name)
    }));
}

/// `len` bytes that depend on `seed` (BLAKE3 as a stream), so files differ chunk by chunk.
pub(crate) fn pseudo_random(len: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; len];
    blake3::Hasher::new()
        .update(&seed.to_le_bytes())
        .finalize_xof()
        .fill(&mut out);
    out
}
