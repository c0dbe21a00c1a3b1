//! TCP streams, the first data transport: one connection per stream, each chunk a 28-byte
//! header ([`ChunkHeader`]) followed by exactly its bytes (a sparse file's chunk with holes:
//! its extent table ([`Extents`]) and the extents' bytes alone), moved by the sender engine
//! (`sendfile`, `splice`, `rw`, `mmap`) and the receiver engine (`splice`, `direct`, `rw`,
//! `null`, `mem`). A stream ends with an end header. Works over any stream socket: the
//! in-process pair harness runs it over loopback pairs with a fault-injecting relay between.

use crate::error::Refusal;
use std::io::Read;
use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Instant;

use zcp_engine::recv::{ChunkSink, Completion, Sink, Target};
use zcp_engine::send::send_all;
use zcp_engine::sys::thread_usage;
use zcp_engine::{EngineError, FileSender, IoClass, RecvEngine, StreamReceiver, Usage};
use zcp_wire::{
    CHUNK_HEADER_LEN, ChunkHasher, ChunkHeader, ChunkKind, ChunkProof, ErrorCode, Extents,
    MAX_EXTENTS,
};

use super::pace::RateCap;
use super::sealed::{OpenReader, SealWriter};
use super::{Departure, Landing, OutChunk, SendSide, Transport, spawn};
use crate::error::SessionError;
use crate::recv::Placement;

/// The data streams of a session: connected TCP sockets and a byte counter per stream (the
/// streams not connected yet join through [`Transport::land`]).
#[derive(Debug)]
pub(crate) struct TcpStreams {
    socks: Vec<TcpStream>,
    counters: Vec<Arc<AtomicU64>>,
    /// The session's rate cap when this side sends: every stream draws its bytes from it.
    cap: Option<RateCap>,
}

impl TcpStreams {
    /// Streams over `socks`, counting into `counters` (one each).
    pub(crate) fn new(socks: Vec<TcpStream>, counters: Vec<Arc<AtomicU64>>) -> TcpStreams {
        // Streams not here yet join later (a server's push), each with its counter.
        assert!(socks.len() <= counters.len(), "a counter per stream");
        TcpStreams {
            socks,
            counters,
            cap: None,
        }
    }

    /// The streams send under `cap` (already put in force on the sockets).
    pub(crate) fn capped(self, cap: Option<RateCap>) -> TcpStreams {
        TcpStreams { cap, ..self }
    }
}

impl Transport for TcpStreams {
    fn counters(&self) -> Vec<Arc<AtomicU64>> {
        self.counters.clone()
    }

    fn closer(&self) -> Box<dyn Fn() + Send + Sync> {
        let socks: Vec<TcpStream> = (self.socks.iter())
            .filter_map(|s| s.try_clone().ok())
            .collect();
        Box::new(move || {
            for s in &socks {
                let _ = s.shutdown(Shutdown::Both);
            }
        })
    }

    fn send(self: Box<Self>, side: SendSide) -> Result<Vec<JoinHandle<Usage>>, SessionError> {
        let side = Arc::new(side);
        let cap = Arc::new(self.cap);
        let mut threads = Vec::new();
        for (i, (sock, counter)) in self.socks.into_iter().zip(self.counters).enumerate() {
            let (side, cap) = (side.clone(), cap.clone());
            threads.push(spawn(format!("zcp-send-{i}"), move || {
                let cap = cap.as_ref().as_ref();
                if side.keys.encrypted() {
                    send_sealed_stream(i as u16, sock, (&side, cap), &counter)
                } else {
                    send_stream(i as u16, sock, (&side, cap), &counter)
                }
            })?);
        }
        Ok(threads)
    }

    fn take_streams(&mut self) -> Vec<(u16, TcpStream)> {
        (0..).zip(std::mem::take(&mut self.socks)).collect()
    }

    fn land(&self, stream: u16, sock: TcpStream, landing: Arc<dyn Landing>) {
        if let Some(counter) = self.counters.get(usize::from(stream)) {
            land(landing, stream, sock, counter.clone());
        }
    }
}

// ---- sending ----

/// One stream's thread: takes chunks from the shared queue until it closes, then sends the
/// end marker. Reports its end (or its failure) with its CPU time.
fn send_stream(
    stream: u16,
    sock: TcpStream,
    (side, cap): (&SendSide, Option<&RateCap>),
    progress: &AtomicU64,
) -> Usage {
    let pacer = cap.map(|c| c.pacer.clone());
    let headers = AtomicU64::new(0);
    let open = || Ok(FileSender::new(side.engine, side.block).paced(pacer));
    stream_loop(stream, (side, cap), open, |sender, job| match job {
        Some(job) => Ok(Vec::from_iter(send_chunk(
            sender, &sock, side, job, progress, &headers,
        )?)),
        None => send_all(sock.as_fd(), &ChunkHeader::end().encode(), false, &headers)
            .map(|()| Vec::new()),
    })
}

/// One stream's thread in an encrypted session: as [`send_stream`], through the stream's
/// records ([`SealWriter`]).
fn send_sealed_stream(
    stream: u16,
    sock: TcpStream,
    (side, cap): (&SendSide, Option<&RateCap>),
    progress: &AtomicU64,
) -> Usage {
    let open = || SealWriter::start(&sock, &side.keys, stream, cap.map(|c| c.pacer.clone()));
    stream_loop(stream, (side, cap), open, |w, job| match job {
        Some(job) => send_sealed_chunk(w, &sock, side, job, progress),
        None => {
            w.write(&sock, &ChunkHeader::end().encode())?;
            w.flush(&sock).map(|()| Vec::new())
        }
    })
}

/// The loop of a stream's thread: `open`s the stream, takes chunks from the shared queue
/// until it closes, each through `step` (which returns their departures), then `step(None)`
/// ends the stream. Reports the stream's end (or its failure) with its CPU time.
fn stream_loop<S>(
    stream: u16,
    (side, cap): (&SendSide, Option<&RateCap>),
    open: impl FnOnce() -> Result<S, EngineError>,
    mut step: impl FnMut(&mut S, Option<&OutChunk>) -> Result<Vec<Departure>, EngineError>,
) -> Usage {
    let start = thread_usage();
    let sending = |on: bool| {
        if let Some(shares) = cap.and_then(|c| c.shares.as_ref()) {
            shares.sending(usize::from(stream), on);
        }
    };
    let result = (|| -> Result<(), EngineError> {
        let mut state = open()?;
        loop {
            // A stream with nothing to send gives its share of a rate cap to the others.
            let job = match side.chunks.try_pop() {
                Some(job) => job,
                None => {
                    sending(false);
                    match side.chunks.pop() {
                        Some(job) => job,
                        None => break,
                    }
                }
            };
            sending(true);
            super::took(side, &job);
            if job.cancelled.load(Ordering::Relaxed) {
                continue;
            }
            for d in step(&mut state, Some(&job))? {
                (side.report)(d);
            }
        }
        step(&mut state, None).map(|_| ())
    })();
    let usage = thread_usage().since(&start);
    (side.report)(match result {
        Ok(()) => Departure::StreamDone {
            usage,
            end: Instant::now(),
        },
        Err(e) => Departure::StreamFailed {
            stream,
            // Out of descriptors is counted (a server sheds pending connections to make room
            // for the retry) and said so.
            why: Refusal::out_of_descriptors(&e).map_or_else(|| e.to_string(), |r| r.message),
            forged: false,
        },
    });
    usage
}

/// Sends one chunk of an encrypted session: its header (and extent table), then its data,
/// read once into the record being filled, hashed there for the chunk's MAC when the
/// transport proves it (`staged`; a hole is hashed as the zeros it reads as), and encrypted
/// in place. The chunk ends a record. Returns its departures (its proof, then `Sent`), or
/// its source's failure (the stream is kept in step with zeros).
fn send_sealed_chunk(
    w: &mut SealWriter,
    sock: &TcpStream,
    side: &SendSide,
    job: &OutChunk,
    progress: &AtomicU64,
) -> Result<Vec<Departure>, EngineError> {
    let (data, header) = layout(job);
    let mut hasher = (job.staged).then(|| side.keys.chunk_hasher(job.file_id, job.offset, job.len));
    w.write(sock, &header)?;
    let mut at = job.offset;
    let mut result = Ok(());
    for &(start, len) in &data {
        if let Some(h) = hasher.as_mut() {
            hash_zeros(h, start - at);
        }
        result = seal_range(w, sock, job, (start, len), hasher.as_mut(), progress);
        if result.is_err() {
            break;
        }
        at = start + len;
    }
    match result {
        Ok(()) => {}
        Err(e @ (EngineError::SourceShort { .. } | EngineError::SourceChanged(_))) => {
            let mut left = wire_left(job, &data, &e);
            let zeros = &zcp_engine::sparse::ZEROS;
            while left > 0 {
                let n = left.min(zeros.len() as u64) as usize;
                w.write(sock, &zeros[..n])?;
                left -= n as u64;
            }
            w.flush(sock)?;
            return Ok(vec![Departure::SourceFailed {
                file: job.file_id,
                why: e.to_string(),
            }]);
        }
        Err(e) => return Err(e),
    }
    w.flush(sock)?;
    let mut out = Vec::new();
    if let Some(mut h) = hasher {
        hash_zeros(&mut h, job.offset + job.len - at);
        out.push(Departure::Hashed {
            file: job.file_id,
            index: job.index,
            proof: h.finalize(),
        });
    }
    out.push(Departure::Sent {
        file: job.file_id,
        index: job.index,
    });
    Ok(out)
}

/// Feeds `n` zero bytes (a hole) to a chunk's hasher.
fn hash_zeros(h: &mut ChunkHasher, mut n: u64) {
    let zeros = &zcp_engine::sparse::ZEROS;
    while n > 0 {
        let k = n.min(zeros.len() as u64) as usize;
        h.update(&zeros[..k]);
        n -= k as u64;
    }
}

/// Reads `start..start+len` of the chunk's file into the stream's records, hashing it.
fn seal_range(
    w: &mut SealWriter,
    sock: &TcpStream,
    job: &OutChunk,
    (start, len): (u64, u64),
    mut hasher: Option<&mut ChunkHasher>,
    progress: &AtomicU64,
) -> Result<(), EngineError> {
    use std::os::unix::fs::FileExt;
    let end = start + len;
    let mut at = start;
    while at < end {
        let want = usize::try_from(end - at).unwrap_or(usize::MAX);
        let n = w.fill(sock, want, |room| {
            let k = loop {
                match job.file.read_at(room, at) {
                    Ok(k) => break k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(source) => {
                        return Err(EngineError::Sys {
                            call: "pread",
                            what: "source file",
                            source,
                        });
                    }
                }
            };
            if let Some(h) = hasher.as_deref_mut() {
                h.update(&room[..k]);
            }
            Ok(k)
        })?;
        if n == 0 {
            return Err(EngineError::SourceShort { at, expected: end });
        }
        at += n as u64;
        progress.fetch_add(n as u64, Ordering::Relaxed);
    }
    Ok(())
}

/// Sends one chunk: its header, then its bytes — or, for a chunk of a sparse file that has
/// holes, a `Sparse` header, its table of data extents, and those extents' bytes alone. A
/// staged chunk is read once, hashed, and sent (its MAC is reported). Returns the chunk's
/// departure, or its source's failure (the source ended early: the stream is kept in step).
/// An error is the stream's.
fn send_chunk(
    sender: &mut FileSender,
    sock: &TcpStream,
    side: &SendSide,
    job: &OutChunk,
    progress: &AtomicU64,
    headers: &AtomicU64,
) -> Result<Option<Departure>, EngineError> {
    let (data, header) = layout(job);
    let failed = |e: &EngineError| Departure::SourceFailed {
        file: job.file_id,
        why: e.to_string(),
    };
    // Its last byte is in the socket: the sending role may now send its MAC.
    let departed = Departure::Sent {
        file: job.file_id,
        index: job.index,
    };
    if job.staged {
        let mut proof = ChunkProof::default();
        let mut header_sent = false;
        let r = sender.send_staged(
            job.file.as_fd(),
            sock.as_fd(),
            (job.offset, job.len),
            &data,
            |bytes| {
                let mut h = side.keys.chunk_hasher(job.file_id, job.offset, job.len);
                h.update(bytes);
                proof = h.finalize();
                header_sent = true;
                send_all(sock.as_fd(), &header, true, headers)
            },
            progress,
        );
        return match r {
            Ok(()) => {
                (side.report)(Departure::Hashed {
                    file: job.file_id,
                    index: job.index,
                    proof,
                });
                Ok(Some(departed))
            }
            // The file shrank: give it up, keeping the stream in step if its header went out.
            Err(e @ (EngineError::SourceShort { .. } | EngineError::SourceChanged(_))) => {
                if header_sent {
                    pad(sock, wire_left(job, &data, &e), headers)?;
                }
                Ok(Some(failed(&e)))
            }
            Err(e) => Err(e),
        };
    }
    send_all(sock.as_fd(), &header, true, headers)?;
    let sent = data.iter().try_for_each(|&(offset, len)| {
        sender.send(job.file.as_fd(), sock.as_fd(), offset, len, progress)
    });
    match sent {
        Ok(()) => Ok(Some(departed)),
        Err(e @ (EngineError::SourceShort { .. } | EngineError::SourceChanged(_))) => {
            pad(sock, wire_left(job, &data, &e), headers)?;
            Ok(Some(failed(&e)))
        }
        Err(e) => Err(e),
    }
}

/// What of `job` goes on the stream — its data ranges (absolute), the whole chunk unless
/// it is a sparse file's chunk with holes — and the header (and extent table) before them.
fn layout(job: &OutChunk) -> (Vec<(u64, u64)>, Vec<u8>) {
    let whole = || {
        let h = ChunkHeader::data(job.file_id, job.offset, job.len).encode();
        (vec![(job.offset, job.len)], h.to_vec())
    };
    if !job.sparse {
        return whole();
    }
    let data = zcp_engine::sparse::data_extents(&*job.file, job.offset, job.len, 0, MAX_EXTENTS);
    if data == [(job.offset, job.len)] {
        return whole();
    }
    let relative = data.iter().map(|&(s, n)| (s - job.offset, n)).collect();
    match Extents::new(relative, job.len) {
        Ok(table) => {
            let mut h = ChunkHeader::sparse(job.file_id, job.offset, job.len)
                .encode()
                .to_vec();
            h.extend_from_slice(&table.encode());
            (data, h)
        }
        // Cannot happen (the extents are made to fit); sent whole, it is still right.
        Err(_) => whole(),
    }
}

/// After a short read of `job`'s source (error `e`): the bytes of `data` the stream still
/// owes.
fn wire_left(job: &OutChunk, data: &[(u64, u64)], e: &EngineError) -> u64 {
    let at = match e {
        EngineError::SourceShort { at, .. } => *at,
        _ => job.offset,
    };
    data.iter()
        .map(|&(s, n)| (s + n).saturating_sub(at.max(s)))
        .sum()
}

/// After a short read of a source: the header promised `left` more bytes, so keep the
/// stream in step with zeros (the chunk's MAC cannot match them).
fn pad(sock: &TcpStream, mut left: u64, headers: &AtomicU64) -> Result<(), EngineError> {
    let zeros = &zcp_engine::sparse::ZEROS;
    while left > 0 {
        let n = left.min(zeros.len() as u64) as usize;
        send_all(sock.as_fd(), &zeros[..n], false, headers)?;
        left -= n as u64;
    }
    Ok(())
}

// ---- receiving ----

/// Receives one data stream until its end marker, landing each chunk through `landing`;
/// reports the end. Runs on the caller's thread (the server's connection thread in a push).
fn land(landing: Arc<dyn Landing>, stream: u16, mut sock: TcpStream, counter: Arc<AtomicU64>) {
    let usage0 = thread_usage();
    let idle = landing.idle();
    let _ = sock.set_read_timeout(Some(idle));
    let _ = sock.set_write_timeout(Some(idle));
    let closer: Box<dyn Fn() + Send> = match sock.try_clone() {
        Ok(c) => Box::new(move || {
            let _ = c.shutdown(Shutdown::Both);
        }),
        Err(_) => Box::new(|| {}),
    };
    landing.join(counter.clone(), closer);
    let mut rx = StreamReceiver::new(landing.block()).limit_memory(landing.memory_limit());
    let result = if landing.keys().encrypted() {
        receive_sealed(&landing, stream, &sock, &mut rx, &counter)
    } else {
        receive_chunks(&landing, &mut Wire::Plain(&mut sock), &mut rx, &counter)
    };
    let mut usage = Usage::default();
    // A write or hash of this stream's helpers that failed late fails what is open.
    let late = match rx.finish() {
        Ok(u) => {
            usage.add(&u);
            None
        }
        Err(e) => Some(e.to_string()),
    };
    if result.is_err() {
        let _ = sock.shutdown(Shutdown::Both);
    }
    usage.add(&thread_usage().since(&usage0));
    landing.stream_ended(usage, result.err(), late);
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` when the stream ended before the first.
/// Between chunks a stream may be quiet for as long as its session lives (the sender waits
/// for the receiver to hash a large target, or for a `Go`): the session's idle clock, not
/// the socket's timeout, ends a silent session, and closes its streams. Inside a header, a
/// timeout is a stuck peer.
fn read_header(
    landing: &Arc<dyn Landing>,
    s: &mut TcpStream,
    buf: &mut [u8],
) -> Result<bool, Refusal> {
    let io = |m: String| Refusal::new(ErrorCode::Io, m);
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => return Err(io("the data stream ended inside a chunk header".into())),
            Ok(n) => got += n,
            Err(e) => match zcp_engine::io_class(&e) {
                IoClass::Interrupted => {}
                IoClass::TimedOut if got == 0 && landing.alive() => {}
                IoClass::TimedOut => {
                    return Err(io("no data on the stream within the idle timeout".into()));
                }
                IoClass::Failed => return Err(io(format!("data stream: {e}"))),
            },
        }
    }
    Ok(true)
}

/// A data stream as the receiving loop reads it: the socket itself, or an encrypted
/// stream's plaintext.
enum Wire<'a> {
    Plain(&'a mut TcpStream),
    Sealed(&'a mut OpenReader),
}

impl Wire<'_> {
    /// Reads a chunk header (see [`read_header`]).
    fn header(&mut self, landing: &Arc<dyn Landing>, buf: &mut [u8]) -> Result<bool, Refusal> {
        match self {
            Wire::Plain(s) => read_header(landing, s, buf),
            Wire::Sealed(r) => r
                .read_exact(buf, &|| landing.alive())
                .map_err(|e| Refusal::stream(&e)),
        }
    }

    /// Reads exactly `buf.len()` bytes inside a chunk (its extent table).
    fn exact(&mut self, buf: &mut [u8]) -> Result<(), Refusal> {
        let io = |m: String| {
            Refusal::new(
                ErrorCode::Io,
                format!("data stream, inside a chunk's extent table: {m}"),
            )
        };
        match self {
            Wire::Plain(s) => s.read_exact(buf).map_err(|e| io(e.to_string())),
            Wire::Sealed(r) => match r.read_exact(buf, &|| false) {
                Ok(true) => Ok(()),
                Ok(false) => Err(io("the stream ended".into())),
                // A record that failed authentication fails verification, not I/O.
                Err(e @ EngineError::Refused(_)) => Err(Refusal::stream(&e)),
                Err(e) => Err(io(e.to_string())),
            },
        }
    }

    /// Moves a chunk's data through the engine.
    #[allow(clippy::too_many_arguments)]
    fn receive(
        &mut self,
        rx: &mut StreamReceiver,
        (engine, target): (RecvEngine, Option<&Target>),
        chunk: (u64, u64),
        data: &[(u64, u64)],
        sink: Option<Sink>,
        counter: &AtomicU64,
        done: Completion,
    ) -> Result<(), EngineError> {
        match self {
            Wire::Plain(s) => {
                rx.receive_sparse(engine, target, s.as_fd(), chunk, data, sink, counter, done)
            }
            Wire::Sealed(r) => {
                rx.receive_from(engine, target, *r, chunk, data, sink, counter, done)
            }
        }
    }
}

/// The receiving loop of an encrypted stream: opens it (its salt), then as
/// [`receive_chunks`] over its plaintext.
fn receive_sealed(
    landing: &Arc<dyn Landing>,
    stream: u16,
    sock: &TcpStream,
    rx: &mut StreamReceiver,
    counter: &AtomicU64,
) -> Result<(), Refusal> {
    let sock = sock
        .try_clone()
        .map_err(|e| Refusal::new(ErrorCode::Io, format!("data stream: {e}")))?;
    let opened = OpenReader::start(sock, &landing.keys(), stream, &|| landing.alive());
    match opened.map_err(|e| Refusal::stream(&e))? {
        Some(mut r) => receive_chunks(landing, &mut Wire::Sealed(&mut r), rx, counter),
        None => Err(Refusal::new(
            ErrorCode::Io,
            "the data stream closed before its end marker",
        )),
    }
}

fn receive_chunks(
    landing: &Arc<dyn Landing>,
    wire: &mut Wire<'_>,
    rx: &mut StreamReceiver,
    counter: &AtomicU64,
) -> Result<(), Refusal> {
    let proto = |m: String| Refusal::new(ErrorCode::Protocol, m);
    loop {
        let mut hb = [0u8; CHUNK_HEADER_LEN];
        if !wire.header(landing, &mut hb)? {
            return Err(Refusal::new(
                ErrorCode::Io,
                "the data stream closed before its end marker",
            ));
        }
        let h = ChunkHeader::decode(&hb).map_err(|e| proto(e.to_string()))?;
        // The chunk's data on the stream: all of it, or a sparse chunk's extents.
        let data = match h.kind {
            ChunkKind::End => return Ok(()),
            ChunkKind::Data if h.len == 0 => Vec::new(),
            ChunkKind::Data => vec![(h.offset, h.len)],
            ChunkKind::Sparse => read_extents(wire, &h)?,
        };
        let chunk = (h.offset, h.len);
        let r = match landing.place(&h)? {
            Placement::Land {
                file,
                index,
                engine,
                target,
                verify,
            } => {
                let sink: Option<Sink> = if verify {
                    Some(Box::new(MacSink {
                        hasher: landing.keys().chunk_hasher(file, h.offset, h.len),
                        landing: landing.clone(),
                        file,
                        index,
                    }))
                } else {
                    // `--verify none`, or the null engine that never sees the bytes:
                    // nothing to hash; the chunk counts once written.
                    landing.hashed(file, index, ChunkProof::default());
                    None
                };
                let done = completion(landing, file, index);
                let t = target.as_ref();
                wire.receive(rx, (engine, t), chunk, &data, sink, counter, done)
            }
            // The file was given up; its chunks still in flight are read and dropped.
            Placement::Drop | Placement::Wait => wire.receive(
                rx,
                (RecvEngine::Mem, None),
                chunk,
                &data,
                None,
                counter,
                Box::new(|_| {}),
            ),
        };
        r.map_err(|e| Refusal::stream(&e))?;
    }
}

/// Reads a sparse chunk's extent table (bounded before it is read) and checks it against
/// the chunk: its data extents, absolute. A table that breaks a rule is a protocol error.
fn read_extents(wire: &mut Wire<'_>, h: &ChunkHeader) -> Result<Vec<(u64, u64)>, Refusal> {
    let proto = |m: String| Refusal::new(ErrorCode::Protocol, m);
    let mut read = |buf: &mut [u8]| wire.exact(buf);
    let mut count = [0u8; 4];
    read(&mut count)?;
    let mut table = vec![0u8; Extents::table_len(count).map_err(|e| proto(e.to_string()))?];
    read(&mut table)?;
    let extents = Extents::decode(&table, h.len).map_err(|e| proto(e.to_string()))?;
    extents
        .as_slice()
        .iter()
        .map(|&(s, n)| match h.offset.checked_add(s + n) {
            Some(_) => Ok((h.offset + s, n)),
            None => Err(proto(format!("chunk offset {} overflows", h.offset))),
        })
        .collect()
}

/// The engine's completion of a chunk: written, or failed (the file fails, the stream goes on).
fn completion(landing: &Arc<dyn Landing>, file: u32, index: u64) -> Completion {
    let landing = landing.clone();
    Box::new(move |r| landing.written(file, index, r))
}

/// Hashes a chunk's bytes, as the engine feeds them, into the chunk's proof.
struct MacSink {
    hasher: ChunkHasher,
    landing: Arc<dyn Landing>,
    file: u32,
    index: u64,
}

impl ChunkSink for MacSink {
    fn bytes(&mut self, bytes: &[u8]) {
        self.hasher.update(bytes);
    }

    fn seen_all(self: Box<Self>) {
        self.landing
            .hashed(self.file, self.index, self.hasher.finalize());
    }
}
