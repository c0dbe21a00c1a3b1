//! The data transport: how chunks cross between the two roles.
//!
//! The sending role queues chunks ([`OutChunk`]) and hears back through its event channel
//! ([`Departure`]); the receiving role answers, for each chunk that arrives, where its bytes go
//! ([`Landing::place`]) and takes the engine's completions ([`Landing::written`],
//! [`Landing::hashed`]). Control (entries, MACs, acknowledgements, commits) never goes through
//! here: it stays on the authenticated control connection. So a transport only moves bytes,
//! and the roles do not know how.
//!
//! [`tcp::TcpStreams`] is the first implementation: one TCP connection per stream, each chunk
//! a 28-byte header and its bytes, moved by the sender and receiver engines;
//! [`udp::UdpStreams`] the second. Which one a session runs, and how its rate cap is held, is
//! a [`Link`]: each side builds its end from it ([`Link::sender`], [`Link::receiver`]).

mod link;
pub(crate) mod pace;
mod sealed;
pub(crate) mod tcp;
pub(crate) mod udp;

pub(crate) use link::Built;
pub use link::Link;

use crate::error::Refusal;
use std::collections::VecDeque;
use std::fs::File;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use zcp_engine::recv::WriteFailure;
use zcp_engine::sync::{Locked, Wakeup};
use zcp_engine::{SendEngine, Usage};
use zcp_wire::{ChunkHeader, ChunkProof, SessionKeys};

use crate::error::SessionError;
use crate::recv::Placement;

/// One chunk for the transport to move: bytes `offset..offset+len` of `file`.
#[derive(Debug)]
pub(crate) struct OutChunk {
    pub(crate) file_id: u32,
    pub(crate) file: Arc<File>,
    pub(crate) index: u64,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    /// A small chunk the transport hashes itself, from the one read of its bytes it makes to
    /// send them, instead of the sending role's hash workers.
    pub(crate) staged: bool,
    /// The file has holes: the chunk goes as its data extents (a `Sparse` chunk) when it
    /// has holes too.
    pub(crate) sparse: bool,
    /// The file was given up: skip the chunk.
    pub(crate) cancelled: Arc<AtomicBool>,
    /// The first chunk queued for a file none of whose bytes moved yet: taking it starts the
    /// file's clock ([`Departure::Began`]).
    pub(crate) first: bool,
}

/// A stream took `job` to send: the file's clock starts with its first chunk.
pub(crate) fn took(side: &SendSide, job: &OutChunk) {
    if job.first {
        (side.report)(Departure::Began { file: job.file_id });
    }
}

/// What the sending side of a transport reports to the sending role.
#[derive(Debug)]
pub(crate) enum Departure {
    /// A staged chunk's proof, computed from the bytes that were sent.
    Hashed {
        file: u32,
        index: u64,
        proof: ChunkProof,
    },
    /// A stream took the file's first chunk: its bytes start moving now (a file announced
    /// long before, behind others in the queue, is timed from here).
    Began { file: u32 },
    /// Every byte of a chunk left: TCP, its last byte written to the socket; UDP, each of
    /// its datagrams sent at least once. Only then does the sending role send its MAC.
    Sent { file: u32, index: u64 },
    /// The source ended or changed under a chunk: the file must be given up.
    SourceFailed { file: u32, why: String },
    /// A stream sent everything and its end marker.
    StreamDone { usage: Usage, end: Instant },
    /// A stream broke; `forged`: what the peer sent on it failed authentication (the
    /// session fails verification, not a connection).
    StreamFailed {
        stream: u16,
        why: String,
        forged: bool,
    },
}

/// How the sending side moves bytes.
pub(crate) struct SendSide {
    pub(crate) engine: SendEngine,
    pub(crate) block: u64,
    /// For staged chunks' MACs.
    pub(crate) keys: SessionKeys,
    pub(crate) chunks: Arc<Queue<OutChunk>>,
    pub(crate) report: Arc<dyn Fn(Departure) + Send + Sync>,
}

/// What the receiving role answers for the data transport.
pub(crate) trait Landing: Send + Sync {
    /// A stream starts: its byte counter, and how to end it at once.
    fn join(&self, counter: Arc<AtomicU64>, closer: Box<dyn Fn() + Send>);
    /// Where the chunk under `header` goes (claimed); waits while its file waits for the
    /// sender's `Go`. An error is a protocol error that closes the stream.
    fn place(&self, header: &ChunkHeader) -> Result<Placement, Refusal>;
    /// A chunk was written, or its write failed.
    fn written(&self, file: u32, index: u64, r: Result<(), WriteFailure>);
    /// The receiver's proof of what a chunk's bytes were (its MAC and chaining value).
    fn hashed(&self, file: u32, index: u64, proof: ChunkProof);
    /// The session's keys, for the MACs.
    fn keys(&self) -> SessionKeys;
    /// A stream ended: its CPU time, why it broke (if it did), and a failure of its engine's
    /// helpers after the last chunk (if any).
    fn stream_ended(&self, usage: Usage, failed: Option<Refusal>, late: Option<String>);
    /// Bytes per engine call (0: each engine's default).
    fn block(&self) -> u64;
    /// Receive-buffer memory per stream: a session's buffers stay within its budget.
    fn memory_limit(&self) -> u64;
    /// How long a stream may sit without data inside a chunk (its socket timeout).
    fn idle(&self) -> Duration;
    /// Whether the session is still on (a quiet stream between chunks keeps waiting).
    fn alive(&self) -> bool;
}

/// A data transport: both directions, behind one trait.
pub(crate) trait Transport: Send + Sync {
    /// Each stream's payload byte counter.
    fn counters(&self) -> Vec<Arc<AtomicU64>>;
    /// Something that ends every stream at once (the session failed).
    fn closer(&self) -> Box<dyn Fn() + Send + Sync>;
    /// Sending: moves every chunk queued until the queue closes (then ends each stream),
    /// reporting through `side.report`. The threads end with their CPU time.
    fn send(self: Box<Self>, side: SendSide) -> Result<Vec<JoinHandle<Usage>>, SessionError>;
    /// Receiving: the data connections connected now, by stream index, for [`receive`] to
    /// land each on a thread of its own.
    fn take_streams(&mut self) -> Vec<(u16, TcpStream)>;
    /// Receiving: lands every chunk that arrives on stream `stream` (over `sock`) through
    /// `landing` until the stream ends, on the calling thread.
    fn land(&self, stream: u16, sock: TcpStream, landing: Arc<dyn Landing>);
    /// The UDP transport's counters, for reports (none for other kinds).
    fn udp(&self) -> Option<Arc<udp::UdpStats>> {
        None
    }
}

/// Lands a data connection that joins a receiving session while its role runs (a server's
/// push: each stream joins on a connection of its own, handed over on that connection's
/// thread).
#[derive(Clone)]
pub(crate) struct Lander {
    transport: Arc<dyn Transport>,
    landing: Arc<dyn Landing>,
}

impl Lander {
    /// Lands stream `stream` over `sock` until it ends, on the calling thread.
    pub(crate) fn land(&self, stream: u16, sock: TcpStream) {
        self.transport.land(stream, sock, self.landing.clone());
    }
}

/// Where a receiving role hands its [`Lander`] once its streams may land.
pub(crate) type Joins = Box<dyn FnOnce(Lander) + Send>;

/// Lands each stream connected now on a thread of its own, and hands `joins` (if any) a
/// [`Lander`] for those that join later.
pub(crate) fn receive(
    mut transport: Box<dyn Transport>,
    landing: Arc<dyn Landing>,
    joins: Option<Joins>,
) -> Result<Vec<JoinHandle<()>>, SessionError> {
    let now = transport.take_streams();
    let transport: Arc<dyn Transport> = Arc::from(transport);
    let mut threads = Vec::new();
    for (i, sock) in now {
        let (t, l) = (transport.clone(), landing.clone());
        threads.push(spawn(format!("zcp-recv-{i}"), move || t.land(i, sock, l))?);
    }
    if let Some(joins) = joins {
        joins(Lander { transport, landing });
    }
    Ok(threads)
}

/// A shared work queue: jobs in FIFO order, closed once no more will come.
#[derive(Debug)]
pub(crate) struct Queue<T> {
    items: Mutex<(VecDeque<T>, bool)>,
    cv: Wakeup,
}

impl<T> Queue<T> {
    pub(crate) fn new() -> Arc<Queue<T>> {
        Arc::new(Queue {
            items: Mutex::new((VecDeque::new(), false)),
            cv: Wakeup::default(),
        })
    }

    pub(crate) fn push(&self, item: T) {
        self.items.locked().0.push_back(item);
        self.cv.notify_one();
    }

    /// No more items will come: [`Queue::pop`] returns `None` once the rest are taken.
    pub(crate) fn close(&self) {
        self.items.locked().1 = true;
        self.cv.notify_all();
    }

    /// The next item if one is there now.
    pub(crate) fn try_pop(&self) -> Option<T> {
        self.items.locked().0.pop_front()
    }

    /// The next item; `None` once closed and empty.
    pub(crate) fn pop(&self) -> Option<T> {
        let mut g = self.items.locked();
        loop {
            if let Some(item) = g.0.pop_front() {
                return Some(item);
            }
            if g.1 {
                return None;
            }
            g = self.cv.wait(g);
        }
    }
}

/// Spawns a named thread; a failure to is a session error.
pub(crate) fn spawn<T: Send + 'static>(
    name: String,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<JoinHandle<T>, SessionError> {
    std::thread::Builder::new()
        .name(name)
        .spawn(f)
        .map_err(|source| SessionError::Io {
            what: "spawning a thread".into(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_hands_out_in_order_then_ends_once_closed() {
        let q = Queue::new();
        let (q2, t) = (q.clone(), Arc::new(Mutex::new(Vec::new())));
        let t2 = t.clone();
        let h = std::thread::spawn(move || {
            while let Some(i) = q2.pop() {
                t2.locked().push(i);
            }
        });
        for i in 0..100 {
            q.push(i);
        }
        q.close();
        h.join().unwrap();
        assert_eq!(*t.locked(), (0..100).collect::<Vec<_>>());
    }
}
