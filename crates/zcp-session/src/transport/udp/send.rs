//! A UDP stream's sending side: one thread that reads chunks into memory, announces them,
//! paces their datagrams out (NAKed ones before new ones) and lets each go once the receiver
//! says it is done; and a reader thread for the side channel's NAKs, done marks and feedback.

use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use zcp_engine::pace::TokenBucket;
use zcp_engine::sync::Locked;
use zcp_engine::sys::{tcp_info, thread_usage};
use zcp_engine::udp::{UdpSock, read_at};
use zcp_engine::{EngineError, Usage};
use zcp_wire::crypt::AEAD_TAG_LEN;
use zcp_wire::udp::{DatagramHeader, FLAG_RETRANSMIT, MAX_OPEN_CHUNKS, UdpFrame};
use zcp_wire::{ChunkHeader, DatagramSealer, ErrorCode};

use super::budget::{Share, UDP_BUDGET, cost};
use super::rate::{Feedback, RateControl, uncapped};
use super::side::{self, SideReader, SideWriter, read_hello};
use super::{UdpConfig, UdpStats, bind_beside, connect_peer, micros, payload_for};
use crate::error::Refusal;
use crate::transport::{Departure, OutChunk, SendSide};

/// Datagrams per paced batch.
const BATCH: usize = 64;
/// How long a sender waits for the receiver's Hello.
const HELLO_WAIT: Duration = Duration::from_secs(60);
/// NAK frames held for the sending thread at most (more are dropped: they come again). A
/// NAK of 128 ranges holds about 1 KiB, so a receiver can make a stream hold about 0.5 MiB
/// here beside its share of the budget, 8 MiB over 16 streams.
const MAX_HEARD_NAKS: usize = 512;
/// Buffers of chunks done kept for the next ones, per stream (within its share).
const SPARE: usize = 4;

/// A NAK as heard: the chunk (file, offset) and its ranges.
type Nak = (u32, u64, Vec<(u32, u32)>);

/// What the side channel's reader heard, for the sending thread.
#[derive(Debug, Default)]
struct Heard {
    naks: Vec<Nak>,
    done: Vec<(u32, u64)>,
    ready: Vec<(u32, u64)>,
    feedback: Option<(u64, u64, u32)>,
    closed: Option<Refusal>,
}

#[derive(Debug, Default)]
struct Inbox {
    heard: Mutex<Heard>,
    cv: Condvar,
}

/// A chunk in flight: its bytes, which datagrams went, which the receiver wants again.
struct Flight {
    file: u32,
    index: u64,
    offset: u64,
    buf: Vec<u8>,
    grams: u32,
    /// The receiver placed it: its datagrams may go.
    ready: bool,
    /// The first datagram not yet sent once.
    next: u32,
    /// Datagrams NAKed and not yet re-sent (a bitmap), and how many.
    want: Vec<u64>,
    wanted: u32,
}

impl Flight {
    fn gram(&self, g: u32, payload: usize) -> &[u8] {
        let s = g as usize * payload;
        &self.buf[s..(s + payload).min(self.buf.len())]
    }
}

/// One stream: reports its end (or failure) with its CPU time.
pub(super) fn stream(
    (stream, streams): (u16, u64),
    sock: TcpStream,
    side: &SendSide,
    progress: &AtomicU64,
    cfg: &UdpConfig,
    stats: &UdpStats,
) -> Usage {
    let start = thread_usage();
    let failed = |r: Refusal| {
        (side.report)(Departure::StreamFailed {
            stream,
            forged: r.code == ErrorCode::Verify,
            why: r.message,
        });
    };
    match open((stream, streams), sock, side, progress, cfg, stats) {
        Err(r) => failed(r),
        Ok((mut s, listener)) => match s.drive() {
            Err(r) => {
                // Said before the side channel closes: the receiver then closes the other
                // streams, whose failures must not reach the session before this cause.
                failed(r);
                let _ = s.sock.shutdown(Shutdown::Both);
                let _ = listener.join();
            }
            Ok(()) => {
                // The reader ends when the receiver closes its side (after our End).
                let _ = s.sock.shutdown(Shutdown::Write);
                (side.report)(Departure::StreamDone {
                    usage: thread_usage().since(&start),
                    end: Instant::now(),
                });
            }
        },
    }
    thread_usage().since(&start)
}

/// The sending state of one stream.
struct Sender<'a> {
    stream: usize,
    sock: TcpStream,
    /// The side channel's writing end.
    out: SideWriter,
    udp: UdpSock,
    payload: usize,
    tag: [u8; 8],
    /// Encrypted: seals each datagram, into `sealed` (a batch's payloads and tags).
    sealer: Option<DatagramSealer>,
    sealed: Vec<u8>,
    epoch: Instant,
    side: &'a SendSide,
    stats: &'a UdpStats,
    progress: &'a AtomicU64,
    inbox: Arc<Inbox>,
    flights: Vec<Flight>,
    /// Buffers of chunks done, kept for the next ones (at most [`SPARE`]).
    spare: Vec<Vec<u8>>,
    /// What this stream may hold in chunk buffers (flights and spares, each charged
    /// [`held`] bytes): its part of the session's [`UDP_BUDGET`], lowered to the receiver's
    /// budget if that is less. The receiver's claim never raises it.
    share: Share,
    /// A chunk taken from the queue that waits for room in the share.
    pending: Option<OutChunk>,
    rate: RateControl,
    bucket: TokenBucket,
    rtt: Duration,
    rtt_at: Instant,
    /// Test loss: drop this many in 1000, from this xorshift state.
    loss: Option<(u32, u64)>,
    /// Test corruption of sealed datagrams: this many in 1000, from this xorshift state.
    tamper: Option<(u32, u64)>,
}

/// Greets the receiver on the side channel and readies the stream's sending state, with
/// the thread that listens to the receiver.
fn open<'a>(
    (stream, streams): (u16, u64),
    mut sock: TcpStream,
    side: &'a SendSide,
    progress: &'a AtomicU64,
    cfg: &UdpConfig,
    stats: &'a UdpStats,
) -> Result<(Sender<'a>, std::thread::JoinHandle<()>), Refusal> {
    let (mut reader, mut out) = side::open(&mut sock, &side.keys, stream, true)?;
    let (port, _, claim) = read_hello(&mut sock, &mut reader, HELLO_WAIT)?;
    let udp = bind_beside(&sock, cfg.offload)?;
    connect_peer(&udp, &sock, port)?;
    let _ = udp.set_timeout(Duration::from_secs(30));
    let v6 = sock.local_addr().is_ok_and(|a| a.is_ipv6());
    let mtu = cfg.mtu.or_else(|| udp.path_mtu()).unwrap_or(1500);
    let sealer = out.salt().map(|salt| {
        let key = side.keys.datagram_key(stream, salt);
        DatagramSealer::new(&key.expect("an encrypted session has datagram keys"))
    });
    let trailer = if sealer.is_some() { AEAD_TAG_LEN } else { 0 };
    let payload = payload_for(mtu, v6, trailer);
    let hello = UdpFrame::Hello {
        port: udp
            .port()
            .map_err(|e| Refusal::new(ErrorCode::Io, e.to_string()))?,
        payload,
        budget: 0,
    };
    out.frame(&mut sock, &hello)?;
    let _ = sock.set_read_timeout(None);
    stats.payload.store(u64::from(payload), Ordering::Relaxed);
    *stats.engines.locked() = udp.engines();
    let inbox = Arc::new(Inbox::default());
    let listener = {
        let (inbox, sock) = (inbox.clone(), sock.try_clone());
        let sock = sock.map_err(|e| Refusal::new(ErrorCode::Io, e.to_string()))?;
        crate::transport::spawn(format!("zcp-udp-fb-{stream}"), move || {
            listen(sock, reader, &inbox)
        })
        .map_err(|e| Refusal::new(ErrorCode::Io, e.to_string()))?
    };
    let streams = streams.max(1);
    let ceiling = match cfg.cap {
        0 => uncapped(cfg.mode) / streams,
        cap => cap / streams,
    };
    let rate = RateControl::new(cfg.mode, ceiling);
    let now = Instant::now();
    let s = Sender {
        stream: usize::from(stream),
        bucket: TokenBucket::new(rate.rate(), burst(rate.rate()), now),
        rate,
        udp,
        out,
        payload: usize::from(payload),
        tag: side.keys.udp_tag(),
        sealer,
        sealed: Vec::new(),
        epoch: now,
        side,
        stats,
        progress,
        inbox,
        flights: Vec::new(),
        spare: Vec::new(),
        share: stats.memory.share(streams, Some(claim)),
        pending: None,
        rtt: tcp_info(sock.as_fd()).map_or(Duration::from_millis(1), |i| {
            Duration::from_micros(u64::from(i.rtt_us.max(100)))
        }),
        rtt_at: now,
        loss: cfg.loss.map(|(p, seed)| (p, seed | 1)),
        tamper: cfg.tamper.map(|(p, seed)| (p, seed | 1)),
        sock,
    };
    Ok((s, listener))
}

/// Bytes the pacing bucket holds at most: about 2 ms of the rate, at least 256 KiB.
fn burst(rate: u64) -> u64 {
    (rate / 500).max(256 << 10)
}

/// Reads the side channel until it ends; hands what it hears to the sending thread.
fn listen(mut sock: TcpStream, mut reader: SideReader, inbox: &Inbox) {
    let close = |r: Refusal| {
        inbox.heard.locked().closed = Some(r);
        inbox.cv.notify_all();
    };
    loop {
        loop {
            let f = match reader.next() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(r) => return close(r),
            };
            tracing::trace!(frame = f.name(), "udp sender heard");
            let mut h = inbox.heard.locked();
            match f {
                UdpFrame::Nak {
                    file_id,
                    offset,
                    ranges,
                } if h.naks.len() < MAX_HEARD_NAKS => h.naks.push((file_id, offset, ranges)),
                UdpFrame::Nak { .. } => {}
                UdpFrame::Done { file_id, offset } if h.done.len() < MAX_HEARD_NAKS => {
                    h.done.push((file_id, offset));
                }
                UdpFrame::Ready { file_id, offset } if h.ready.len() < MAX_HEARD_NAKS => {
                    h.ready.push((file_id, offset));
                }
                UdpFrame::Feedback {
                    delivered,
                    drops,
                    queue_us,
                } => h.feedback = Some((delivered, drops, queue_us)),
                other => {
                    drop(h);
                    return close(Refusal::protocol(format!(
                        "UDP side channel: the receiver sent {}",
                        other.name()
                    )));
                }
            }
            drop(h);
            inbox.cv.notify_all();
        }
        match reader.fill(&mut sock) {
            Ok(true) => {}
            Ok(false) => {
                return close(Refusal::new(
                    ErrorCode::Io,
                    "the receiver closed the UDP side channel",
                ));
            }
            Err(e) => {
                return close(Refusal::new(
                    ErrorCode::Io,
                    format!("UDP side channel: {e}"),
                ));
            }
        }
    }
}

impl Sender<'_> {
    fn drive(&mut self) -> Result<(), Refusal> {
        loop {
            self.hear()?;
            if self.resend()? {
                continue;
            }
            // Announce the next chunk as soon as the window has room, so the receiver is
            // ready for it when this one's datagrams are out.
            if self.pending.is_none() && self.flights.len() < MAX_OPEN_CHUNKS {
                self.pending = if self.flights.is_empty() {
                    match self.side.chunks.pop() {
                        Some(job) => Some(job),
                        None => break,
                    }
                } else {
                    self.side.chunks.try_pop()
                };
                if let Some(job) = &self.pending {
                    crate::transport::took(self.side, job);
                }
            }
            if let Some(job) = self.pending.take() {
                self.pending = self.start(job)?;
                if self.pending.is_none() {
                    continue;
                }
            }
            if self.send_new()? {
                continue;
            }
            // Wait for the receiver: a chunk ready or done, a NAK, or feedback.
            let h = self.inbox.heard.locked();
            if h.naks.is_empty() && h.done.is_empty() && h.ready.is_empty() && h.closed.is_none() {
                let _ = self.inbox.cv.wait_timeout(h, super::FEEDBACK);
            }
        }
        self.out.frame(&mut self.sock, &UdpFrame::End)
    }

    /// Takes what the reader heard: done chunks let go (a chunk not yet sent in full cannot
    /// be done: a protocol error), NAKs marked for re-sending (checked
    /// against the chunks in flight), feedback into the rate.
    fn hear(&mut self) -> Result<(), Refusal> {
        let heard = std::mem::take(&mut *self.inbox.heard.locked());
        if let Some(r) = heard.closed {
            return Err(r);
        }
        let now = Instant::now();
        if now.duration_since(self.rtt_at) > Duration::from_millis(100) {
            self.rtt_at = now;
            if let Some(i) = tcp_info(self.sock.as_fd()) {
                self.rtt = Duration::from_micros(u64::from(i.rtt_us.max(100)));
            }
        }
        for (file, offset) in heard.done {
            let done = self
                .flights
                .iter()
                .position(|f| (f.file, f.offset) == (file, offset));
            if let Some(i) = done {
                if self.flights[i].next < self.flights[i].grams {
                    // An honest receiver is done only once every datagram arrived: a chunk
                    // not yet sent in full cannot be done, and letting it go would skip it.
                    return Err(Refusal::protocol(format!(
                        "UDP side channel: Done for a chunk of file {file} at {offset} not \
                         yet sent"
                    )));
                }
                let f = self.flights.remove(i);
                self.keep(f.buf);
            }
        }
        for (file, offset) in heard.ready {
            if let Some(f) = self
                .flights
                .iter_mut()
                .find(|f| (f.file, f.offset) == (file, offset))
            {
                f.ready = true;
            }
        }
        let mut fresh = 0u64;
        for (file, offset, ranges) in heard.naks {
            // A NAK for a chunk already done (or never sent) is stale: nothing to re-send.
            let Some(f) = self
                .flights
                .iter_mut()
                .find(|f| (f.file, f.offset) == (file, offset))
            else {
                continue;
            };
            for (s, n) in ranges {
                if s >= f.grams {
                    return Err(Refusal::protocol(format!(
                        "a NAK for datagram {s} of a chunk of {} datagrams",
                        f.grams
                    )));
                }
                // Only datagrams sent once can be lost.
                for g in s..s.saturating_add(n).min(f.next) {
                    let (w, b) = ((g / 64) as usize, 1u64 << (g % 64));
                    if f.want[w] & b == 0 {
                        f.want[w] |= b;
                        f.wanted += 1;
                        fresh += 1;
                    }
                }
            }
        }
        if fresh > 0 {
            self.stats.lost.fetch_add(fresh, Ordering::Relaxed);
            self.stats
                .lost_bytes
                .fetch_add(fresh * self.payload as u64, Ordering::Relaxed);
            self.rate.on_loss(now, self.rtt);
        }
        if let Some((delivered, drops, queue_us)) = heard.feedback {
            let fb = Feedback {
                delivered,
                drops,
                queue_us,
            };
            self.rate.on_feedback(now, self.rtt, fb);
            let prev = self.stats.drops.load(Ordering::Relaxed);
            if drops > prev {
                // Each stream's receiver counts its own socket; the largest is a floor.
                self.stats.drops.fetch_max(drops, Ordering::Relaxed);
            }
        }
        self.bucket.set_rate(self.rate.rate());
        self.stats.set_rate(self.stream, self.rate.rate());
        self.stats
            .cuts
            .fetch_max(self.rate.cuts(), Ordering::Relaxed);
        Ok(())
    }

    /// Datagrams per batch: about 1 ms of the rate (so a slow rate is not sent in bursts),
    /// 1 to [`BATCH`].
    fn batch(&self) -> usize {
        let per_ms = self.rate.rate() / 1000;
        ((per_ms / self.payload as u64) as usize).clamp(1, BATCH)
    }

    /// Re-sends a batch of NAKed datagrams; whether there were any.
    fn resend(&mut self) -> Result<bool, Refusal> {
        let batch = self.batch();
        let mut picks: Vec<(usize, u32)> = Vec::new();
        for (i, f) in self.flights.iter_mut().enumerate() {
            if f.wanted == 0 {
                continue;
            }
            for w in 0..f.want.len() {
                while f.want[w] != 0 && picks.len() < batch {
                    let b = f.want[w].trailing_zeros();
                    f.want[w] &= !(1u64 << b);
                    f.wanted -= 1;
                    picks.push((i, w as u32 * 64 + b));
                }
                if picks.len() == batch {
                    break;
                }
            }
            if picks.len() == batch {
                break;
            }
        }
        if picks.is_empty() {
            return Ok(false);
        }
        self.transmit(&picks, true)?;
        Ok(true)
    }

    /// Sends the next batch of a chunk's datagrams not yet sent once (and its Sent mark
    /// after the last); whether there was one.
    fn send_new(&mut self) -> Result<bool, Refusal> {
        let batch = self.batch();
        let Some(i) = self
            .flights
            .iter()
            .position(|f| f.ready && f.next < f.grams)
        else {
            return Ok(false);
        };
        let f = &mut self.flights[i];
        let end = f.grams.min(f.next + batch as u32);
        let picks: Vec<(usize, u32)> = (f.next..end).map(|g| (i, g)).collect();
        f.next = end;
        let (done, file, index, offset) = (end == f.grams, f.file, f.index, f.offset);
        self.transmit(&picks, false)?;
        if done {
            // Every datagram went out once: the sending role may now send its MAC.
            (self.side.report)(Departure::Sent { file, index });
            self.out.frame(
                &mut self.sock,
                &UdpFrame::Sent {
                    file_id: file,
                    offset,
                },
            )?;
        }
        Ok(true)
    }

    /// Paces and sends datagrams `picks` (flight, datagram).
    fn transmit(&mut self, picks: &[(usize, u32)], again: bool) -> Result<(), Refusal> {
        // Pace first, then stamp: the one-way delay must not count our own wait.
        let bytes: u64 = picks
            .iter()
            .map(|&(i, g)| self.flights[i].gram(g, self.payload).len() as u64)
            .sum();
        let wait = self.bucket.take(bytes, Instant::now());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
        let now_us = micros(self.epoch);
        let t = Instant::now();
        let mut heads: Vec<[u8; 32]> = Vec::with_capacity(picks.len());
        // Encrypted: where each datagram's payload and tag lie in `sealed`.
        let mut spans: Vec<std::ops::Range<usize>> = Vec::new();
        self.sealed.clear();
        for &(i, g) in picks {
            let f = &self.flights[i];
            let p = f.gram(g, self.payload);
            let h = DatagramHeader {
                tag: self.tag,
                file_id: f.file,
                flags: if again { FLAG_RETRANSMIT } else { 0 },
                len: p.len() as u16,
                offset: f.offset + u64::from(g) * self.payload as u64,
                sent_us: now_us,
            };
            let Some(sealer) = &mut self.sealer else {
                heads.push(h.encode());
                continue;
            };
            let at = self.sealed.len();
            self.sealed.extend_from_slice(p);
            let (head, tag) = sealer
                .seal(h, &mut self.sealed[at..])
                .map_err(|e| Refusal::new(ErrorCode::Io, e.to_string()))?;
            self.sealed.extend_from_slice(&tag);
            let mut head = head;
            if let Some(x) = self.tamper.as_mut().and_then(hit) {
                // Any byte of the datagram: header, ciphertext or tag.
                let n = (head.len() + self.sealed.len() - at) as u64;
                match (x % n) as usize {
                    i if i < head.len() => head[i] ^= 1,
                    i => self.sealed[at + i - head.len()] ^= 1,
                }
            }
            heads.push(head);
            spans.push(at..self.sealed.len());
        }
        if self.sealer.is_some() {
            self.side.keys.add_crypto_time(t.elapsed());
        }
        let mut grams: Vec<(&[u8], &[u8])> = Vec::with_capacity(picks.len());
        for (k, (&(i, g), h)) in picks.iter().zip(&heads).enumerate() {
            let p = match spans.get(k) {
                Some(span) => &self.sealed[span.clone()],
                None => self.flights[i].gram(g, self.payload),
            };
            if self.loss.as_mut().and_then(hit).is_some() {
                continue;
            }
            grams.push((&h[..], p));
        }
        let st = self.stats;
        self.udp
            .send_batch(&grams)
            .map_err(|e: EngineError| Refusal::new(ErrorCode::Io, e.to_string()))?;
        st.sent.fetch_add(picks.len() as u64, Ordering::Relaxed);
        if again {
            st.resent.fetch_add(picks.len() as u64, Ordering::Relaxed);
            st.resent_bytes.fetch_add(bytes, Ordering::Relaxed);
        } else {
            self.progress.fetch_add(bytes, Ordering::Relaxed);
        }
        Ok(())
    }

    /// A buffer for a chunk of `len` bytes within the share: the smallest kept one that
    /// holds it (charged already), else a new one charged now, letting kept ones go to make
    /// room; `None` while the chunks in flight leave no room.
    fn buffer(&mut self, len: usize) -> Option<Vec<u8>> {
        let fits = (self.spare.iter().enumerate())
            .filter(|(_, b)| b.capacity() >= len)
            .min_by_key(|(_, b)| b.capacity())
            .map(|(i, _)| i);
        if let Some(i) = fits {
            return Some(self.spare.swap_remove(i));
        }
        while !self.share.take(cost(len as u64)) {
            let b = self.spare.pop()?;
            self.share.give(held(&b));
        }
        // `vec!` of zeros: exactly `len` of capacity, its pages untouched until read into.
        Some(vec![0; len])
    }

    /// Reads a chunk into memory (hashing a staged one) and announces it; or gives it back
    /// while the receiver's budget or this stream's share has no room for it. A source that
    /// ended early gives the file up; the chunk is never announced.
    fn start(&mut self, job: OutChunk) -> Result<Option<OutChunk>, Refusal> {
        if job.cancelled.load(Ordering::Relaxed) || job.len == 0 {
            return Ok(None);
        }
        let limit = self.share.limit();
        if cost(job.len) > limit {
            return Err(Refusal::new(
                ErrorCode::Limit,
                format!(
                    "a UDP chunk of {} bytes is over the {limit} bytes a stream may hold (the \
                     session's {UDP_BUDGET} over its streams, or the receiver's budget if \
                     less); choose a smaller --chunk-size",
                    job.len
                ),
            ));
        }
        // The receiver's budget counts the chunks announced and not done, in whole pages.
        let window: u64 = self.flights.iter().map(|f| cost(f.buf.len() as u64)).sum();
        if window + cost(job.len) > limit {
            return Ok(Some(job));
        }
        let Some(mut buf) = self.buffer(job.len as usize) else {
            return Ok(Some(job));
        };
        buf.resize(job.len as usize, 0);
        if let Err(e) = read_at(job.file.as_fd(), &mut buf, job.offset) {
            (self.side.report)(Departure::SourceFailed {
                file: job.file_id,
                why: e.to_string(),
            });
            self.keep(buf);
            return Ok(None);
        }
        if job.staged {
            let mut h = self
                .side
                .keys
                .chunk_hasher(job.file_id, job.offset, job.len);
            h.update(&buf);
            (self.side.report)(Departure::Hashed {
                file: job.file_id,
                index: job.index,
                proof: h.finalize(),
            });
        }
        let header = ChunkHeader::data(job.file_id, job.offset, job.len);
        tracing::debug!(
            file = job.file_id,
            offset = job.offset,
            len = job.len,
            "udp announce"
        );
        self.out
            .frame(&mut self.sock, &UdpFrame::Announce(header))?;
        let grams = job.len.div_ceil(self.payload as u64) as u32;
        self.flights.push(Flight {
            file: job.file_id,
            index: job.index,
            offset: job.offset,
            buf,
            grams,
            ready: false,
            next: 0,
            want: vec![0; (grams as usize).div_ceil(64)],
            wanted: 0,
        });
        Ok(None)
    }

    /// A buffer no chunk uses: kept for the next (still charged), or let go.
    fn keep(&mut self, buf: Vec<u8>) {
        if self.spare.len() < SPARE {
            self.spare.push(buf);
        } else {
            self.share.give(held(&buf));
        }
    }
}

/// Tests' seeded, repeatable faults of the path: whether this datagram is hit (`permille`
/// in 1000, from the xorshift64 `state`), and if so a number to pick a byte with.
fn hit((permille, state): &mut (u32, u64)) -> Option<u64> {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    ((*state % 1000) < u64::from(*permille)).then_some(*state / 1000)
}

/// What a chunk buffer is charged: its capacity (not its length) in whole pages.
#[allow(clippy::ptr_arg)]
fn held(buf: &Vec<u8>) -> u64 {
    cost(buf.capacity() as u64)
}
