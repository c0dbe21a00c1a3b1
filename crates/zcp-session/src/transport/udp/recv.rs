//! A UDP stream's receiving side: one thread polls the side channel and the UDP socket,
//! assembles each announced chunk in an aligned buffer with a bitmap of its datagrams, NAKs
//! the gaps each feedback interval, and hands a whole chunk to the role (its MAC, its write).

use std::net::{Shutdown, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use zcp_engine::AlignedBuf;
use zcp_engine::recv::{RecvEngine, Target, WriteFailure};
use zcp_engine::sys::{tcp_info, thread_usage};
use zcp_engine::udp::{RecvBatch, UdpSock, poll_two, write_chunk};
use zcp_wire::udp::{
    DATAGRAM_HEADER_LEN, DatagramHeader, FLAG_RETRANSMIT, MAX_DATAGRAM_PAYLOAD, MAX_NAK_RANGES,
    MAX_OPEN_CHUNKS, MIN_DATAGRAM_PAYLOAD, UdpFrame,
};
use zcp_wire::{ChunkHeader, ChunkProof, DatagramOpener, ErrorCode, SessionKeys};

use super::budget::{Share, cost};
use super::side::{self, SideReader, SideWriter, read_hello};
use super::{FEEDBACK, UdpStats, bind_beside, connect_peer, micros};
use crate::error::Refusal;
use crate::recv::Placement;
use crate::transport::Landing;

/// NAK frames per chunk per feedback interval at most (the rest wait for the next).
const NAK_FRAMES: usize = 8;
/// Chunk buffers kept for reuse, per stream (within its share).
const SPARE: usize = 4;
/// Receive batches taken per poll before the timers are looked at.
const BATCHES: usize = 32;

/// A chunk being assembled.
struct Assembly {
    file: u32,
    index: u64,
    offset: u64,
    len: u64,
    grams: u32,
    have: Vec<u64>,
    got: u32,
    /// One above the highest datagram seen, and what it was at the last feedback (gaps
    /// below that one are losses, not reordering).
    highest: u32,
    seen_before: u32,
    /// When the sender's "sent" mark came.
    sent_at: Option<Instant>,
    /// When each datagram was last NAKed (milliseconds since the stream began, plus one;
    /// 0: never).
    naked: Vec<u32>,
    buf: AlignedBuf,
    /// What the buffer is charged to the share: the chunk's [`cost`], the most of it that
    /// can hold memory (pages past it were let go when it was taken).
    charge: u64,
    engine: RecvEngine,
    target: Option<Target>,
    verify: bool,
}

impl Assembly {
    fn has(&self, g: u32) -> bool {
        self.have[(g / 64) as usize] & (1 << (g % 64)) != 0
    }
}

/// Receives one UDP stream until its end; reports the end. Runs on the caller's thread.
pub(super) fn land(
    landing: Arc<dyn Landing>,
    sock: TcpStream,
    counter: Arc<AtomicU64>,
    offload: bool,
    stats: &UdpStats,
    stream: usize,
) {
    let usage0 = thread_usage();
    let idle = landing.idle();
    let _ = sock.set_write_timeout(Some(idle));
    let closer: Box<dyn Fn() + Send> = match sock.try_clone() {
        Ok(c) => Box::new(move || {
            let _ = c.shutdown(Shutdown::Both);
        }),
        Err(_) => Box::new(|| {}),
    };
    landing.join(counter.clone(), closer);
    let result = Receiver::start(landing.clone(), sock, counter, offload, stats, stream).and_then(
        |(mut r, mut batch)| {
            let out = r.run(&mut batch);
            if out.is_err() {
                let _ = r.sock.shutdown(Shutdown::Both);
            }
            out
        },
    );
    landing.stream_ended(thread_usage().since(&usage0), result.err(), None);
}

/// The receiving state of one stream.
struct Receiver<'a> {
    landing: Arc<dyn Landing>,
    keys: SessionKeys,
    sock: TcpStream,
    udp: UdpSock,
    reader: SideReader,
    out: SideWriter,
    payload: usize,
    tag: [u8; 8],
    /// Encrypted: opens each datagram (one that fails is refused and counted).
    opener: Option<DatagramOpener>,
    /// What this stream may hold in chunk buffers (open and kept for reuse), its part of
    /// the session's budget; what its `Hello` tells the sender.
    share: Share,
    open: Vec<Assembly>,
    /// Buffers of finished chunks, kept for the next ones (no mapping and page faults per
    /// chunk), each with its charge; at most [`SPARE`].
    spare: Vec<(AlignedBuf, u64)>,
    stats: &'a UdpStats,
    counter: Arc<AtomicU64>,
    stream: usize,
    epoch: Instant,
    /// One-way delay (receiver's clock minus sender's, µs): minimum, and the interval's sum.
    owd_min: i64,
    /// The least one-way delay since the last feedback.
    owd: i64,
    delivered: u64,
    drops: u32,
    last_feedback: Instant,
    last_data: Instant,
    /// When the socket was last found empty: a chunk's tail is NAKed only once the socket
    /// was empty after its "sent" mark (its datagrams may still wait in the socket's queue).
    drained: Instant,
    rtt: Duration,
    rtt_at: Instant,
    idle: Duration,
}

impl<'a> Receiver<'a> {
    fn start(
        landing: Arc<dyn Landing>,
        mut sock: TcpStream,
        counter: Arc<AtomicU64>,
        offload: bool,
        stats: &'a UdpStats,
        stream: usize,
    ) -> Result<(Receiver<'a>, RecvBatch), Refusal> {
        let udp = bind_beside(&sock, offload)?;
        // The session's ledger, lowered to this stream's part of the receive memory.
        let share = stats
            .memory
            .share(1, Some(landing.memory_limit().max(zcp_wire::MIN_CHUNK)));
        let budget = share.limit();
        let port = udp
            .port()
            .map_err(|e| Refusal::new(ErrorCode::Io, e.to_string()))?;
        let keys = landing.keys();
        let (mut reader, mut out) = side::open(&mut sock, &keys, stream as u16, false)?;
        out.frame(
            &mut sock,
            &UdpFrame::Hello {
                port,
                payload: 0,
                budget,
            },
        )?;
        let idle = landing.idle();
        let (peer_port, payload, _) = read_hello(&mut sock, &mut reader, idle)?;
        let opener = match (keys.encrypted(), reader.peer_salt()) {
            (false, _) => None,
            (true, Some(salt)) => {
                let key = keys.datagram_key(stream as u16, salt);
                Some(DatagramOpener::new(&key.expect("encrypted")))
            }
            (true, None) => return Err(Refusal::protocol("a UDP Hello before the salt")),
        };
        if !(MIN_DATAGRAM_PAYLOAD..=MAX_DATAGRAM_PAYLOAD).contains(&payload) {
            return Err(Refusal::protocol(format!(
                "a UDP payload size of {payload} (allowed: \
                 {MIN_DATAGRAM_PAYLOAD}..={MAX_DATAGRAM_PAYLOAD})"
            )));
        }
        connect_peer(&udp, &sock, peer_port)?;
        let _ = sock.set_read_timeout(None);
        *zcp_engine::sync::Locked::locked(&stats.engines) = udp.engines();
        stats.payload.store(u64::from(payload), Ordering::Relaxed);
        let now = Instant::now();
        Ok((
            Receiver {
                tag: keys.udp_tag(),
                keys,
                landing,
                sock,
                udp,
                reader,
                out,
                opener,
                payload: usize::from(payload),
                share,
                open: Vec::new(),
                spare: Vec::new(),
                stats,
                counter,
                stream,
                epoch: now,
                owd_min: i64::MAX,
                owd: i64::MAX,
                delivered: 0,
                drops: 0,
                last_feedback: now,
                last_data: now,
                drained: now,
                rtt: Duration::from_millis(1),
                rtt_at: now,
                idle,
            },
            RecvBatch::new(64),
        ))
    }

    fn run(&mut self, batch: &mut RecvBatch) -> Result<(), Refusal> {
        // Frames that came with the sender's Hello are in the buffer already.
        if self.act_on_frames()? {
            return Ok(());
        }
        loop {
            let wait = FEEDBACK.saturating_sub(self.last_feedback.elapsed());
            let (side, data) = poll_two(self.sock.as_fd(), self.udp.as_fd(), wait);
            if data {
                self.take_datagrams(batch)?;
            } else {
                self.drained = Instant::now();
            }
            if side && self.take_frames()? {
                return Ok(());
            }
            let now = Instant::now();
            if now.duration_since(self.last_feedback) >= FEEDBACK {
                self.feedback(now)?;
            }
            if !self.open.is_empty() && now.duration_since(self.last_data) > self.idle {
                return Err(Refusal::new(
                    ErrorCode::Io,
                    "no UDP data within the idle timeout",
                ));
            }
        }
    }

    /// Reads the side channel once and acts on its whole frames; `true` at its end.
    fn take_frames(&mut self) -> Result<bool, Refusal> {
        let io = |m: String| Refusal::new(ErrorCode::Io, m);
        match self.reader.fill(&mut self.sock) {
            Ok(true) => {}
            Ok(false) => return Err(io("the UDP side channel closed before its end".into())),
            Err(e) => match zcp_engine::io_class(&e) {
                zcp_engine::IoClass::Interrupted => return Ok(false),
                _ => return Err(io(format!("UDP side channel: {e}"))),
            },
        }
        self.act_on_frames()
    }

    /// Acts on the whole frames in the buffer; `true` at the stream's end.
    fn act_on_frames(&mut self) -> Result<bool, Refusal> {
        while let Some(f) = self.reader.next()? {
            tracing::debug!(
                frame = f.name(),
                open = self.open.len(),
                "udp receiver heard"
            );
            match f {
                UdpFrame::Announce(h) => self.announce(&h)?,
                UdpFrame::Sent { file_id, offset } => {
                    if let Some(a) = self
                        .open
                        .iter_mut()
                        .find(|a| (a.file, a.offset) == (file_id, offset))
                    {
                        a.sent_at = Some(Instant::now());
                    }
                }
                UdpFrame::End if self.open.is_empty() => return Ok(true),
                UdpFrame::End => {
                    return Err(Refusal::protocol(format!(
                        "the UDP stream ended with {} chunks unfinished",
                        self.open.len()
                    )));
                }
                other => {
                    return Err(Refusal::protocol(format!(
                        "UDP side channel: the sender sent {}",
                        other.name()
                    )));
                }
            }
        }
        Ok(false)
    }

    /// A chunk announced: placed by the role (checked against its file's plan, claimed),
    /// then held in memory within the budget. A chunk of a file given up is done at once.
    fn announce(&mut self, h: &ChunkHeader) -> Result<(), Refusal> {
        // Chunks count in whole pages, as the sender counts them.
        let held: u64 = self.open.iter().map(|a| cost(a.len)).sum();
        if self.open.len() >= MAX_OPEN_CHUNKS {
            return Err(Refusal::protocol(format!(
                "more than {MAX_OPEN_CHUNKS} UDP chunks announced and unfinished on a stream"
            )));
        }
        let budget = self.share.limit();
        if held.saturating_add(cost(h.len)) > budget {
            return Err(Refusal::new(
                ErrorCode::Limit,
                format!(
                    "a UDP chunk of {} bytes over the receiver's budget of {budget} bytes per \
                     stream ({held} held; choose a smaller -c)",
                    h.len
                ),
            ));
        }
        match self.landing.place(h)? {
            Placement::Land {
                file,
                index,
                engine,
                target,
                verify,
            } => {
                if !verify {
                    self.landing.hashed(file, index, ChunkProof::default());
                }
                let grams = h.len.div_ceil(self.payload as u64) as u32;
                let (buf, charge) = self.buffer(h.len)?;
                self.open.push(Assembly {
                    file,
                    index,
                    offset: h.offset,
                    len: h.len,
                    grams,
                    have: vec![0; (grams as usize).div_ceil(64)],
                    got: 0,
                    highest: 0,
                    seen_before: 0,
                    sent_at: None,
                    naked: vec![0; grams as usize],
                    buf,
                    charge,
                    engine,
                    target,
                    verify,
                });
                self.last_data = Instant::now();
                self.out.frame(
                    &mut self.sock,
                    &UdpFrame::Ready {
                        file_id: h.file_id,
                        offset: h.offset,
                    },
                )
            }
            Placement::Drop | Placement::Wait => self.out.frame(
                &mut self.sock,
                &UdpFrame::Done {
                    file_id: h.file_id,
                    offset: h.offset,
                },
            ),
        }
    }

    /// Takes the datagrams queued on the socket; finishes chunks they complete.
    fn take_datagrams(&mut self, batch: &mut RecvBatch) -> Result<(), Refusal> {
        for _ in 0..BATCHES {
            let n = self
                .udp
                .recv_batch(batch)
                .map_err(|e| Refusal::stream(&e))?;
            if n == 0 {
                self.drained = Instant::now();
                break;
            }
            let now_us = micros(self.epoch) as i64;
            let t = Instant::now();
            for d in batch.datagrams_mut() {
                self.accept(d, now_us);
            }
            if self.opener.is_some() {
                self.keys.add_crypto_time(t.elapsed());
            }
        }
        let drops = self.udp.drops();
        if drops > self.drops {
            let new = u64::from(drops - self.drops);
            self.stats.drops.fetch_add(new, Ordering::Relaxed);
            self.drops = drops;
        }
        while let Some(i) = self.open.iter().position(|a| a.got == a.grams) {
            let a = self.open.swap_remove(i);
            self.finish(a)?;
        }
        Ok(())
    }

    /// One datagram: taken into its chunk, or refused and counted (never written). In an
    /// encrypted session it is opened in place once its header (checked here before it is
    /// trusted, so strays and duplicates cost no decryption) names a slot still empty; one
    /// that does not open (altered, or not the sender's) is refused like a stray, and its
    /// bytes come again when NAKed.
    fn accept(&mut self, d: &mut [u8], now_us: i64) {
        let st = self.stats;
        let reject = || {
            st.rejected.fetch_add(1, Ordering::Relaxed);
        };
        let h = match &self.opener {
            Some(_) => DatagramHeader::decode_sealed(d),
            None => DatagramHeader::decode(d).and_then(|h| match h.tag == self.tag {
                true => Ok(h),
                false => Err(zcp_wire::DecodeError::Malformed("another session".into())),
            }),
        };
        let Ok(h) = h else {
            return reject();
        };
        let p = self.payload as u64;
        let Some(a) = self
            .open
            .iter_mut()
            .find(|a| a.file == h.file_id && h.offset >= a.offset && h.offset - a.offset < a.len)
        else {
            return reject();
        };
        let rel = h.offset - a.offset;
        let len = u64::from(h.len);
        if rel % p != 0 || len != p.min(a.len - rel) {
            return reject();
        }
        let g = (rel / p) as u32;
        if a.has(g) {
            st.duplicates.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if let Some(o) = &self.opener
            && o.open(d).is_err()
        {
            return reject();
        }
        let at = rel as usize;
        a.buf[at..at + h.len as usize].copy_from_slice(&d[DATAGRAM_HEADER_LEN..][..h.len as usize]);
        a.have[(g / 64) as usize] |= 1 << (g % 64);
        a.got += 1;
        a.highest = a.highest.max(g + 1);
        self.counter.fetch_add(len, Ordering::Relaxed);
        self.delivered += len;
        st.received.fetch_add(1, Ordering::Relaxed);
        if h.flags & FLAG_RETRANSMIT != 0 {
            st.resent.fetch_add(1, Ordering::Relaxed);
            st.resent_bytes.fetch_add(len, Ordering::Relaxed);
        }
        let owd = now_us.wrapping_sub(h.sent_us as i64);
        self.owd_min = self.owd_min.min(owd);
        self.owd = self.owd.min(owd);
        self.last_data = Instant::now();
    }

    /// A buffer for a chunk of `len` bytes and its charge: the smallest kept one that holds
    /// it, its pages past the chunk let go (so a chunk never holds what a larger one
    /// wrote), else a new one; charged to the share, letting kept buffers go to make room.
    /// The announcement was checked against the share, so room is always found once every
    /// kept buffer is gone; the session's ledger refuses it if not.
    fn buffer(&mut self, len: u64) -> Result<(AlignedBuf, u64), Refusal> {
        let need = cost(len);
        let fits = (self.spare.iter().enumerate())
            .filter(|(_, (b, _))| b.len() as u64 >= need)
            .min_by_key(|(_, (b, _))| b.len())
            .map(|(i, _)| i);
        let (buf, had) = match fits {
            Some(i) => {
                let (mut b, had) = self.spare.swap_remove(i);
                if had > need {
                    b.release_from(need as usize);
                    self.share.give(had - need);
                }
                (Some(b), had.min(need))
            }
            None => (None, 0),
        };
        while !self.share.take(need - had) {
            let Some((_, c)) = self.spare.pop() else {
                self.share.give(had);
                return Err(Refusal::new(
                    ErrorCode::Limit,
                    format!(
                        "a UDP chunk of {len} bytes finds no room in the session's receive \
                         memory ({} of {} bytes held)",
                        self.share.held(),
                        self.share.limit()
                    ),
                ));
            };
            self.share.give(c);
        }
        Ok((buf.unwrap_or_else(|| AlignedBuf::new(len as usize)), need))
    }

    /// A whole chunk: its MAC to the role, its bytes written, and the sender told.
    fn finish(&mut self, mut a: Assembly) -> Result<(), Refusal> {
        let len = a.len as usize;
        // O_DIRECT writes whole blocks: the last one's tail is zeros, not an earlier chunk's.
        let padded = len.div_ceil(4096) * 4096;
        a.buf[len..padded].fill(0);
        if a.verify {
            let mut h = self.keys.chunk_hasher(a.file, a.offset, a.len);
            h.update(&a.buf[..len]);
            self.landing.hashed(a.file, a.index, h.finalize());
        }
        let r = write_chunk(a.engine, a.target.as_ref(), a.offset, &a.buf, len);
        self.landing.written(
            a.file,
            a.index,
            r.as_ref().map(|_| ()).map_err(WriteFailure::from),
        );
        if self.spare.len() < SPARE {
            self.spare.push((a.buf, a.charge));
        } else {
            self.share.give(a.charge);
        }
        self.out.frame(
            &mut self.sock,
            &UdpFrame::Done {
                file_id: a.file,
                offset: a.offset,
            },
        )
    }

    /// Each feedback interval: the gaps of each chunk NAKed (each datagram at most once per
    /// round trip), and what was delivered.
    fn feedback(&mut self, now: Instant) -> Result<(), Refusal> {
        if now.duration_since(self.rtt_at) > Duration::from_millis(100) {
            self.rtt_at = now;
            if let Some(i) = tcp_info(self.sock.as_fd()) {
                self.rtt = Duration::from_micros(u64::from(i.rtt_us + 4 * i.rttvar_us));
            }
        }
        let guard = (self.rtt + FEEDBACK).max(4 * FEEDBACK).as_millis() as u32;
        let now_ms = now.duration_since(self.epoch).as_millis() as u32 + 1;
        let mut frames = Vec::new();
        let (mut lost, mut lost_bytes) = (0u64, 0u64);
        for a in &mut self.open {
            let drained = self.drained;
            let tail = a.sent_at.is_some_and(|t| drained >= t + FEEDBACK);
            let limit = if tail { a.grams } else { a.seen_before };
            a.seen_before = a.highest;
            let mut ranges: Vec<(u32, u32)> = Vec::new();
            let mut g = 0;
            while g < limit {
                if a.have[(g / 64) as usize] == u64::MAX {
                    g = (g / 64 + 1) * 64;
                    continue;
                }
                let gi = g as usize;
                if !a.has(g) && (a.naked[gi] == 0 || now_ms - a.naked[gi] >= guard) {
                    a.naked[gi] = now_ms;
                    lost += 1;
                    lost_bytes +=
                        (a.len - u64::from(g) * self.payload as u64).min(self.payload as u64);
                    let full = ranges.len() == MAX_NAK_RANGES * NAK_FRAMES;
                    match ranges.last_mut() {
                        Some((s, n)) if *s + *n == g => *n += 1,
                        _ if full => {
                            // No room: NAKed next interval.
                            a.naked[gi] = 0;
                            break;
                        }
                        _ => ranges.push((g, 1)),
                    }
                }
                g += 1;
            }
            for part in ranges.chunks(MAX_NAK_RANGES) {
                frames.push(UdpFrame::Nak {
                    file_id: a.file,
                    offset: a.offset,
                    ranges: part.to_vec(),
                });
            }
        }
        self.stats.lost.fetch_add(lost, Ordering::Relaxed);
        self.stats
            .lost_bytes
            .fetch_add(lost_bytes, Ordering::Relaxed);
        let elapsed = now.duration_since(self.last_feedback).as_micros().max(1) as u64;
        let delivered = self.delivered.saturating_mul(1_000_000) / elapsed;
        // The least delay of the interval: a standing queue delays every datagram, while a
        // late wake-up of this thread delays only some.
        let queue_us = match self.owd {
            i64::MAX => 0,
            least => least
                .saturating_sub(self.owd_min)
                .clamp(0, i64::from(u32::MAX)) as u32,
        };
        frames.push(UdpFrame::Feedback {
            delivered,
            drops: u64::from(self.drops),
            queue_us,
        });
        self.stats.set_rate(self.stream, delivered);
        self.delivered = 0;
        self.owd = i64::MAX;
        self.last_feedback = now;
        self.out.frames(&mut self.sock, &frames)
    }
}
