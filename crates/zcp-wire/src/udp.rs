//! `--transport udp`: the datagram that carries a chunk's bytes, and the frames of each
//! stream's side channel (its authenticated TCP data connection).
//!
//! A datagram is a 32-byte [`DatagramHeader`] and its payload: bytes `offset..offset+len` of
//! file `file_id`. The side channel carries, in order, each side's [`UdpFrame::Hello`] (its
//! UDP port; the sender's payload size, the receiver's memory budget), the sender's chunk
//! announcements, "chunk sent" marks and stream end, and the receiver's chunk-ready marks
//! (a chunk's datagrams are sent only after it), NAKs, chunk-done marks and feedback. Every frame is a kind byte, a `u16` body length and the body; every length
//! is bounded before it is used.

use crate::codec::{Reader, Writer};
use crate::{CHUNK_HEADER_LEN, ChunkHeader, ChunkKind, DecodeError};

/// Bytes of a datagram's header.
pub const DATAGRAM_HEADER_LEN: usize = 32;
/// Smallest payload a sender may choose (a datagram that fits any IPv6 path's MTU).
pub const MIN_DATAGRAM_PAYLOAD: u16 = 512;
/// Largest payload a sender may choose: 15 pages, under UDP's 65,507-byte limit.
pub const MAX_DATAGRAM_PAYLOAD: u16 = 61_440;
/// Datagram flag: the payload is a re-sent one (a NAK asked for it).
pub const FLAG_RETRANSMIT: u8 = 1;
/// Chunks a sender may have announced and not yet seen done, per stream (whatever the
/// receiver's budget in bytes).
pub const MAX_OPEN_CHUNKS: usize = 64;
/// Most ranges in one [`UdpFrame::Nak`].
pub const MAX_NAK_RANGES: usize = 128;
/// Largest side-channel frame body.
pub const MAX_UDP_FRAME_BODY: usize = 4 + 8 + 2 + MAX_NAK_RANGES * 8;
/// Bytes before a side-channel frame's body: kind and length.
pub const UDP_FRAME_HEAD: usize = 3;

/// How the data of a session moves (`--transport`), as [`crate::Open::transport`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransportKind {
    /// The data connections carry the bytes.
    #[default]
    Tcp,
    /// UDP datagrams carry the bytes; the data connections are their side channels.
    Udp,
}

impl TransportKind {
    /// Every transport, in the order help texts list them.
    pub const ALL: [TransportKind; 2] = [TransportKind::Tcp, TransportKind::Udp];

    /// How the command line, the wire and reports name it.
    pub fn name(self) -> &'static str {
        match self {
            TransportKind::Tcp => "tcp",
            TransportKind::Udp => "udp",
        }
    }

    /// The transport named `name`, if any.
    pub fn parse(name: &str) -> Option<TransportKind> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }
}

/// How the UDP transport sets its rate (`--udp-mode`), as [`crate::Open::udp_mode`] names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UdpMode {
    /// Starts at the ceiling, cuts by 1/8 on loss (at most once per round trip, never below
    /// what the receiver delivers), and backs off as one-way delay rises over its minimum.
    #[default]
    Fair,
    /// Sends at the rate cap (`--limit-rate`, required), whatever the path: dedicated links.
    Fixed,
}

impl UdpMode {
    /// Every mode, in the order help texts list them.
    pub const ALL: [UdpMode; 2] = [UdpMode::Fair, UdpMode::Fixed];

    /// How the command line, the wire and reports name it.
    pub fn name(self) -> &'static str {
        match self {
            UdpMode::Fair => "fair",
            UdpMode::Fixed => "fixed",
        }
    }

    /// The mode named `name`, if any.
    pub fn parse(name: &str) -> Option<UdpMode> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// The header before a datagram's payload: the session's tag (8 bytes), file id (`u32`),
/// flags (`u8`), a zero byte, payload length (`u16`), file offset (`u64`), and the sender's
/// clock when it left, microseconds (`u64`, only ever compared with itself), big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramHeader {
    /// [`crate::SessionKeys::udp_tag`].
    pub tag: [u8; 8],
    /// The file, as in its `PutFile`.
    pub file_id: u32,
    /// [`FLAG_RETRANSMIT`] or 0.
    pub flags: u8,
    /// Payload bytes after the header.
    pub len: u16,
    /// Where the payload goes in the file.
    pub offset: u64,
    /// The sender's clock, microseconds (for one-way delay: its changes, never its value).
    pub sent_us: u64,
}

impl DatagramHeader {
    /// Encodes the header.
    pub fn encode(&self) -> [u8; DATAGRAM_HEADER_LEN] {
        let mut b = [0u8; DATAGRAM_HEADER_LEN];
        b[..8].copy_from_slice(&self.tag);
        b[8..12].copy_from_slice(&self.file_id.to_be_bytes());
        b[12] = self.flags;
        b[14..16].copy_from_slice(&self.len.to_be_bytes());
        b[16..24].copy_from_slice(&self.offset.to_be_bytes());
        b[24..32].copy_from_slice(&self.sent_us.to_be_bytes());
        b
    }

    /// Decodes the header of a whole datagram `d`: refuses one shorter than its header,
    /// unknown flags, a nonzero reserved byte, and a length other than what follows it.
    /// Whether the tag and the range belong to the session is the caller's check.
    pub fn decode(d: &[u8]) -> Result<DatagramHeader, DecodeError> {
        Self::decode_with(d, 0)
    }

    /// Decodes the header of a whole datagram of an encrypted session, whose payload is
    /// followed by its [`crate::crypt::AEAD_TAG_LEN`]-byte tag; checked as
    /// [`DatagramHeader::decode`] checks, nothing of it trusted until
    /// [`crate::DatagramOpener::open`] has checked the tag.
    pub fn decode_sealed(d: &[u8]) -> Result<DatagramHeader, DecodeError> {
        Self::decode_with(d, crate::crypt::AEAD_TAG_LEN)
    }

    /// Decodes a header whose payload is followed by `trailer` bytes.
    fn decode_with(d: &[u8], trailer: usize) -> Result<DatagramHeader, DecodeError> {
        if d.len() < DATAGRAM_HEADER_LEN + trailer {
            return Err(DecodeError::Truncated {
                needed: DATAGRAM_HEADER_LEN + trailer - d.len(),
            });
        }
        let b = &d[..DATAGRAM_HEADER_LEN];
        let u64_at = |i: usize| u64::from_be_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let h = DatagramHeader {
            tag: b[..8].try_into().expect("8 bytes"),
            file_id: u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")),
            flags: b[12],
            len: u16::from_be_bytes([b[14], b[15]]),
            offset: u64_at(16),
            sent_us: u64_at(24),
        };
        if h.flags & !FLAG_RETRANSMIT != 0 || b[13] != 0 {
            return Err(DecodeError::Malformed(format!(
                "datagram has unknown flags {:#x}/{:#x}",
                h.flags, b[13]
            )));
        }
        let carried = d.len() - DATAGRAM_HEADER_LEN - trailer;
        if usize::from(h.len) != carried {
            return Err(DecodeError::Malformed(format!(
                "datagram says {} payload bytes and carries {carried}",
                h.len
            )));
        }
        if h.offset.checked_add(u64::from(h.len)).is_none() {
            return Err(DecodeError::Malformed("datagram offset overflows".into()));
        }
        Ok(h)
    }
}

/// A frame on a UDP stream's side channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UdpFrame {
    /// Each side's first frame: its UDP port; the sender's datagram payload size (0 from the
    /// receiver); the receiver's memory budget for announced chunks, bytes (0 from the sender).
    Hello {
        /// The UDP port the side bound, on the address of this TCP connection.
        port: u16,
        /// Payload bytes per datagram (sender).
        payload: u16,
        /// Bytes of announced, unfinished chunks the receiver holds at most, each counted in
        /// whole 4096-byte pages (receiver). A claim only ever lowers what the sender holds:
        /// it keeps to its own budget whatever this says.
        budget: u64,
    },
    /// Sender: a chunk's datagrams follow (a `Data` chunk header).
    Announce(ChunkHeader),
    /// Sender: every datagram of this chunk was sent once.
    Sent {
        /// The file.
        file_id: u32,
        /// The chunk's offset.
        offset: u64,
    },
    /// Sender: no more chunks on this stream.
    End,
    /// Receiver: the datagrams of these ranges of the chunk are missing; ranges are
    /// `(first datagram, count)` in payload-size units from the chunk's start.
    Nak {
        /// The file.
        file_id: u32,
        /// The chunk's offset.
        offset: u64,
        /// At most [`MAX_NAK_RANGES`].
        ranges: Vec<(u32, u32)>,
    },
    /// Receiver: the chunk arrived whole (its bytes are hashed and written).
    Done {
        /// The file.
        file_id: u32,
        /// The chunk's offset.
        offset: u64,
    },
    /// Receiver: the chunk is placed (its buffer is ready): its datagrams may come.
    Ready {
        /// The file.
        file_id: u32,
        /// The chunk's offset.
        offset: u64,
    },
    /// Receiver, each feedback interval: what it delivers and sees.
    Feedback {
        /// Payload bytes per second accepted since the last feedback.
        delivered: u64,
        /// Datagrams the receiver's socket dropped (`SO_RXQ_OVFL`), in total.
        drops: u64,
        /// The least one-way delay since the last feedback above the least of the session,
        /// microseconds.
        queue_us: u32,
    },
}

mod kind {
    pub(super) const HELLO: u8 = 1;
    pub(super) const ANNOUNCE: u8 = 2;
    pub(super) const SENT: u8 = 3;
    pub(super) const END: u8 = 4;
    pub(super) const NAK: u8 = 5;
    pub(super) const DONE: u8 = 6;
    pub(super) const FEEDBACK: u8 = 7;
    pub(super) const READY: u8 = 8;
}

impl UdpFrame {
    /// How errors name it.
    pub fn name(&self) -> &'static str {
        match self {
            UdpFrame::Hello { .. } => "Hello",
            UdpFrame::Announce(_) => "Announce",
            UdpFrame::Sent { .. } => "Sent",
            UdpFrame::End => "End",
            UdpFrame::Nak { .. } => "Nak",
            UdpFrame::Done { .. } => "Done",
            UdpFrame::Ready { .. } => "Ready",
            UdpFrame::Feedback { .. } => "Feedback",
        }
    }

    /// Encodes the frame: kind, body length, body.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = Writer::default();
        let k = match self {
            UdpFrame::Hello {
                port,
                payload,
                budget,
            } => {
                w.u16(*port).u16(*payload).u64(*budget);
                kind::HELLO
            }
            UdpFrame::Announce(h) => {
                w.raw(&h.encode());
                kind::ANNOUNCE
            }
            UdpFrame::Sent { file_id, offset } => {
                w.u32(*file_id).u64(*offset);
                kind::SENT
            }
            UdpFrame::End => kind::END,
            UdpFrame::Nak {
                file_id,
                offset,
                ranges,
            } => {
                let ranges = &ranges[..ranges.len().min(MAX_NAK_RANGES)];
                w.u32(*file_id).u64(*offset).u16(ranges.len() as u16);
                for &(s, n) in ranges {
                    w.u32(s).u32(n);
                }
                kind::NAK
            }
            UdpFrame::Done { file_id, offset } => {
                w.u32(*file_id).u64(*offset);
                kind::DONE
            }
            UdpFrame::Ready { file_id, offset } => {
                w.u32(*file_id).u64(*offset);
                kind::READY
            }
            UdpFrame::Feedback {
                delivered,
                drops,
                queue_us,
            } => {
                w.u64(*delivered).u64(*drops).u32(*queue_us);
                kind::FEEDBACK
            }
        };
        let mut out = Vec::with_capacity(UDP_FRAME_HEAD + w.buf.len());
        out.push(k);
        out.extend_from_slice(&(w.buf.len() as u16).to_be_bytes());
        out.extend_from_slice(&w.buf);
        out
    }

    /// Decodes the first frame in `buf`: `Ok(None)` while it is incomplete, else the frame
    /// and the bytes it took. A body over [`MAX_UDP_FRAME_BODY`], an unknown kind, an
    /// announcement of anything but a data chunk, a NAK with no range or too many, a range
    /// that is empty or overflows, and trailing bytes are refused.
    pub fn decode(buf: &[u8]) -> Result<Option<(UdpFrame, usize)>, DecodeError> {
        if buf.len() < UDP_FRAME_HEAD {
            return Ok(None);
        }
        let len = usize::from(u16::from_be_bytes([buf[1], buf[2]]));
        if len > MAX_UDP_FRAME_BODY {
            return Err(DecodeError::TooLarge {
                len: len as u64,
                max: MAX_UDP_FRAME_BODY as u64,
            });
        }
        let Some(body) = buf.get(UDP_FRAME_HEAD..UDP_FRAME_HEAD + len) else {
            return Ok(None);
        };
        let mut r = Reader::new(body);
        let f = match buf[0] {
            kind::HELLO => UdpFrame::Hello {
                port: r.u16()?,
                payload: r.u16()?,
                budget: r.u64()?,
            },
            kind::ANNOUNCE => {
                let h = ChunkHeader::decode(&r.array::<CHUNK_HEADER_LEN>()?)?;
                if h.kind != ChunkKind::Data || h.len == 0 {
                    return Err(DecodeError::Malformed(
                        "a UDP stream announces only non-empty data chunks".into(),
                    ));
                }
                UdpFrame::Announce(h)
            }
            kind::SENT => UdpFrame::Sent {
                file_id: r.u32()?,
                offset: r.u64()?,
            },
            kind::END => UdpFrame::End,
            kind::NAK => decode_nak(&mut r)?,
            kind::DONE => UdpFrame::Done {
                file_id: r.u32()?,
                offset: r.u64()?,
            },
            kind::READY => UdpFrame::Ready {
                file_id: r.u32()?,
                offset: r.u64()?,
            },
            kind::FEEDBACK => UdpFrame::Feedback {
                delivered: r.u64()?,
                drops: r.u64()?,
                queue_us: r.u32()?,
            },
            k => {
                return Err(DecodeError::Malformed(format!(
                    "unknown UDP side-channel frame kind {k}"
                )));
            }
        };
        r.finish("UDP side-channel frame")?;
        Ok(Some((f, UDP_FRAME_HEAD + len)))
    }
}

fn decode_nak(r: &mut Reader<'_>) -> Result<UdpFrame, DecodeError> {
    let file_id = r.u32()?;
    let offset = r.u64()?;
    let count = usize::from(r.u16()?);
    if count == 0 || count > MAX_NAK_RANGES {
        return Err(DecodeError::Malformed(format!(
            "a NAK with {count} ranges (1..={MAX_NAK_RANGES})"
        )));
    }
    let mut ranges = Vec::with_capacity(count);
    for _ in 0..count {
        let (s, n) = (r.u32()?, r.u32()?);
        if n == 0 || s.checked_add(n).is_none() {
            return Err(DecodeError::Malformed(format!(
                "a NAK range of {n} datagrams at {s}"
            )));
        }
        ranges.push((s, n));
    }
    Ok(UdpFrame::Nak {
        file_id,
        offset,
        ranges,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(len: u16) -> DatagramHeader {
        DatagramHeader {
            tag: *b"tagtag01",
            file_id: 7,
            flags: FLAG_RETRANSMIT,
            len,
            offset: 1 << 40,
            sent_us: 123_456,
        }
    }

    #[test]
    fn a_datagram_header_round_trips_and_checks_its_length() {
        let h = header(5);
        let mut d = h.encode().to_vec();
        d.extend_from_slice(b"hello");
        assert_eq!(DatagramHeader::decode(&d), Ok(h));
        assert!(DatagramHeader::decode(&d[..d.len() - 1]).is_err());
        assert!(DatagramHeader::decode(&d[..10]).is_err());
        let mut bad = d.clone();
        bad[12] = 0x80;
        assert!(DatagramHeader::decode(&bad).is_err());
        let mut bad = d.clone();
        bad[13] = 1;
        assert!(DatagramHeader::decode(&bad).is_err());
        let mut over = header(5);
        over.offset = u64::MAX - 2;
        let mut d = over.encode().to_vec();
        d.extend_from_slice(b"hello");
        assert!(DatagramHeader::decode(&d).is_err());
    }

    #[test]
    fn every_frame_round_trips_and_waits_for_its_end() {
        let frames = [
            UdpFrame::Hello {
                port: 4000,
                payload: 1440,
                budget: 0,
            },
            UdpFrame::Announce(ChunkHeader::data(3, 4096, 8192)),
            UdpFrame::Sent {
                file_id: 3,
                offset: 4096,
            },
            UdpFrame::End,
            UdpFrame::Nak {
                file_id: 3,
                offset: 4096,
                ranges: vec![(0, 2), (9, 1)],
            },
            UdpFrame::Done {
                file_id: 3,
                offset: 4096,
            },
            UdpFrame::Ready {
                file_id: 3,
                offset: 4096,
            },
            UdpFrame::Feedback {
                delivered: 1 << 30,
                drops: 5,
                queue_us: 700,
            },
        ];
        for f in frames {
            let b = f.encode();
            assert_eq!(UdpFrame::decode(&b), Ok(Some((f.clone(), b.len()))));
            for cut in 0..b.len() {
                assert_eq!(UdpFrame::decode(&b[..cut]), Ok(None), "{f:?} cut at {cut}");
            }
        }
    }

    #[test]
    fn bad_frames_are_refused() {
        let nak = |ranges: Vec<(u32, u32)>| {
            UdpFrame::Nak {
                file_id: 1,
                offset: 0,
                ranges,
            }
            .encode()
        };
        assert!(UdpFrame::decode(&nak(vec![])).is_err());
        assert!(UdpFrame::decode(&nak(vec![(1, 0)])).is_err());
        assert!(UdpFrame::decode(&nak(vec![(u32::MAX, 2)])).is_err());
        let end = UdpFrame::Announce(ChunkHeader::end()).encode();
        assert!(UdpFrame::decode(&end).is_err());
        assert!(UdpFrame::decode(&[99, 0, 0]).is_err());
        assert!(UdpFrame::decode(&[kind::END, 0, 1, 0]).is_err());
        assert!(UdpFrame::decode(&[kind::NAK, 0xff, 0xff]).is_err());
        // More ranges than a NAK may carry are cut when encoded.
        let many = nak((0..300).map(|i| (i * 2, 1)).collect());
        match UdpFrame::decode(&many) {
            Ok(Some((UdpFrame::Nak { ranges, .. }, _))) => assert_eq!(ranges.len(), MAX_NAK_RANGES),
            other => panic!("{other:?}"),
        }
    }
}
