//! Control frames over a blocking TCP stream, and the client's connect-and-authenticate steps.
//!
//! Reading a frame reads its 5-byte header, bounds the length ([`FrameHeader::decode`]) and
//! only then reads the payload, so a peer can never make us allocate more than
//! [`zcp_wire::MAX_PAYLOAD`] bytes per frame.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use zcp_wire::{
    ClientHandshake, DataClient, Established, FrameHeader, HEADER_LEN, Message, Opener, Psk,
    Sealer, SessionId, SessionKeys,
};

use crate::error::{FrameIoError, SessionError};
use zcp_engine::IoClass;

/// Reads one frame: header, then exactly its (bounded) payload.
pub(crate) fn read_frame(r: &mut impl Read) -> Result<(FrameHeader, Vec<u8>), FrameIoError> {
    let mut head = [0u8; HEADER_LEN];
    match r.read_exact(&mut head) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Err(FrameIoError::Closed),
        Err(e) => return Err(e.into()),
    }
    let header = FrameHeader::decode(head)?;
    let mut payload = vec![0u8; header.len];
    r.read_exact(&mut payload).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => FrameIoError::Closed,
        _ => e.into(),
    })?;
    Ok((header, payload))
}

/// Reads one unsealed frame and decodes it.
pub(crate) fn read_plain(r: &mut impl Read) -> Result<Message, FrameIoError> {
    let (h, p) = read_frame(r)?;
    if h.is_sealed() {
        return Err(FrameIoError::Decode(zcp_wire::DecodeError::Malformed(
            "sealed frame before the handshake finished".into(),
        )));
    }
    Ok(Message::decode(h.kind, &p)?)
}

/// The receiving half of an authenticated control connection.
#[derive(Debug)]
pub(crate) struct ControlRx {
    pub(crate) stream: TcpStream,
    pub(crate) opener: Opener,
    pub(crate) reader: FrameReader,
}

impl ControlRx {
    /// The next message, or `None` if the socket's read timeout passed first.
    pub(crate) fn poll(&mut self) -> Result<Option<Message>, FrameIoError> {
        match self.reader.poll(&mut self.stream)? {
            Some((h, p)) => Ok(Some(self.opener.open(h, &p)?)),
            None => Ok(None),
        }
    }
}

/// The sending half of an authenticated control connection.
#[derive(Debug)]
pub(crate) struct ControlTx {
    pub(crate) stream: TcpStream,
    pub(crate) sealer: Sealer,
}

impl ControlTx {
    pub(crate) fn send(&mut self, msg: &Message) -> io::Result<()> {
        let frame = self.sealer.seal(msg);
        self.stream.write_all(&frame)
    }
}

/// Resolves `host` and connects to the first address that answers, all within `timeout`
/// (`--connect-timeout`): a name with several addresses (`localhost`: `::1` and
/// `127.0.0.1`) shares it rather than taking it once for each.
pub(crate) fn connect(host: &str, port: u16, timeout: Duration) -> Result<TcpStream, SessionError> {
    let shown = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let addrs: Vec<SocketAddr> = (host, port)
        .to_socket_addrs()
        .map_err(|e| SessionError::Connect {
            addr: shown.clone(),
            source: io::Error::new(
                io::ErrorKind::NotFound,
                format!("cannot resolve the host name ({e})"),
            ),
        })?
        .collect();
    let mut last = io::Error::new(
        io::ErrorKind::NotFound,
        "the host name resolved to no address",
    );
    let deadline = Instant::now() + timeout;
    let timed_out = || {
        io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "no answer within {} s (--connect-timeout)",
                timeout.as_secs_f64()
            ),
        )
    };
    for a in addrs {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            last = timed_out();
            break;
        }
        match TcpStream::connect_timeout(&a, left) {
            Ok(s) => {
                s.set_nodelay(true).ok();
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => last = timed_out(),
            Err(e) => last = e,
        }
    }
    Err(SessionError::Connect {
        addr: shown,
        source: last,
    })
}

/// An authenticated control connection, split into halves.
#[derive(Debug)]
pub(crate) struct ClientSession {
    pub(crate) tx: ControlTx,
    pub(crate) rx: ControlRx,
    pub(crate) keys: SessionKeys,
    pub(crate) session_id: SessionId,
    pub(crate) max_streams: u16,
    /// The server has named exports: the first component of a remote path names one.
    pub(crate) exports: bool,
    pub(crate) nonces: (zcp_wire::Nonce, zcp_wire::Nonce),
    pub(crate) peer: SocketAddr,
    pub(crate) local: SocketAddr,
}

/// Runs the client side of the control handshake on a connected stream; with `share` (32
/// fresh random bytes for an ephemeral key), asks for encryption and accepts nothing less.
pub(crate) fn authenticate(
    mut stream: TcpStream,
    psk: Psk,
    nonce: zcp_wire::Nonce,
    share: Option<[u8; 32]>,
) -> Result<ClientSession, SessionError> {
    let peer = stream.peer_addr().map_err(|source| SessionError::Io {
        what: "control connection".into(),
        source,
    })?;
    let local = stream.local_addr().map_err(|source| SessionError::Io {
        what: "control connection".into(),
        source,
    })?;
    let shown = peer.to_string();
    let mut hs = ClientHandshake::new(psk, nonce);
    if let Some(secret) = share {
        hs = hs.encrypting(secret);
    }
    let io_err = |e: FrameIoError| e.into_session(&shown);
    stream
        .write_all(&hs.hello().encode_frame())
        .map_err(|e| io_err(e.into()))?;
    // What the peer sends first, kept to say what it is if it is not a zcp server (an SSH
    // or HTTP server on the port given).
    let mut first = [0u8; 40];
    let seen = stream.peek(&mut first).unwrap_or(0);
    let challenge = read_plain(&mut stream).map_err(|e| match e {
        FrameIoError::Decode(_) if seen > 0 => SessionError::NotZcp {
            addr: shown.clone(),
            sent: format!(
                "{}{}",
                zcp_wire::escape(&first[..seen]).trim_matches('\''),
                if seen == first.len() { "…" } else { "" }
            ),
        },
        other => io_err(other),
    })?;
    let (proof, await_welcome) = match hs.on_challenge(challenge) {
        Ok(x) => x,
        Err(e) => {
            // Tell the server why we hang up, so its log names the cause too.
            let _ = stream.write_all(
                &Message::Error {
                    code: e.code(),
                    message: format!("client refused the handshake: {e}"),
                }
                .encode_frame(),
            );
            return Err(SessionError::from_handshake(&shown, e));
        }
    };
    stream
        .write_all(&proof.encode_frame())
        .map_err(|e| io_err(e.into()))?;
    let (h, p) = read_frame(&mut stream).map_err(io_err)?;
    let Established {
        keys,
        session_id,
        sealer,
        opener,
        client_nonce,
        server_nonce,
        max_streams,
        exports,
    } = await_welcome
        .on_frame(h, &p)
        .map_err(|e| SessionError::from_handshake(&shown, e))?;
    let read_half = stream.try_clone().map_err(|source| SessionError::Io {
        what: "control connection".into(),
        source,
    })?;
    Ok(ClientSession {
        tx: ControlTx { stream, sealer },
        rx: ControlRx {
            stream: read_half,
            opener,
            reader: FrameReader::default(),
        },
        keys,
        session_id,
        max_streams,
        exports,
        nonces: (client_nonce, server_nonce),
        peer,
        local,
    })
}

/// Opens data stream `stream` of the session at `peer` and proves it belongs there.
pub(crate) fn open_data(
    peer: SocketAddr,
    keys: &SessionKeys,
    session_id: SessionId,
    stream_index: u16,
    nonce: zcp_wire::Nonce,
    timeout: Duration,
) -> Result<TcpStream, SessionError> {
    let shown = peer.to_string();
    let io_err = |e: FrameIoError| e.into_session(&shown);
    // The session's control connection is up: a data stream that cannot connect is a
    // broken session (its files may be part-sent), not a server that was never reached.
    let mut s =
        TcpStream::connect_timeout(&peer, timeout).map_err(|e| SessionError::Connection {
            peer: shown.clone(),
            reason: format!("data stream {stream_index}: cannot connect: {e}"),
        })?;
    s.set_nodelay(true).ok();
    s.set_read_timeout(Some(timeout)).ok();
    let dc = DataClient::new(nonce);
    s.write_all(&dc.hello().encode_frame())
        .map_err(|e| io_err(e.into()))?;
    let challenge = read_plain(&mut s).map_err(io_err)?;
    let join = dc
        .on_challenge(challenge, keys, session_id, stream_index)
        .map_err(|e| SessionError::from_handshake(&shown, e))?;
    s.write_all(&join.encode_frame())
        .map_err(|e| io_err(e.into()))?;
    let answer = read_plain(&mut s).map_err(io_err)?;
    DataClient::on_accept(answer).map_err(|e| SessionError::from_handshake(&shown, e))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_frame_bounds_before_allocating() {
        // A header announcing 4 GiB: refused from the 5 header bytes alone.
        let mut r: &[u8] = &[0xff, 0xff, 0xff, 0xff, 0x03];
        assert!(matches!(read_frame(&mut r), Err(FrameIoError::Decode(_))));
        let mut r: &[u8] = &[];
        assert!(matches!(read_frame(&mut r), Err(FrameIoError::Closed)));
        let mut r: &[u8] = &[0, 0, 0, 32, 0x03, 1, 2];
        assert!(matches!(read_frame(&mut r), Err(FrameIoError::Closed)));
        let f = Message::Proof { proof: [1; 32] }.encode_frame();
        let mut r: &[u8] = &f;
        assert_eq!(
            read_plain(&mut r).unwrap(),
            Message::Proof { proof: [1; 32] }
        );
    }
}

/// Reads frames from a connection that may be polled with a short `SO_RCVTIMEO` (to check
/// liveness between reads) without losing a frame that arrived in pieces. Each read takes
/// whatever the socket holds, up to [`READ_BUF`] bytes, so a burst of small frames costs one
/// system call rather than two per frame; the buffer is fixed, whatever a header claims.
#[derive(Debug, Default)]
pub(crate) struct FrameReader {
    buf: Vec<u8>,
    /// Unconsumed bytes are `buf[pos..end]`.
    pos: usize,
    end: usize,
}

/// The reader's buffer: two of the largest frames.
pub(crate) const READ_BUF: usize = 2 * (HEADER_LEN + zcp_wire::MAX_PAYLOAD);

impl FrameReader {
    /// Reads what is available. Returns a whole frame, or `None` when the read timed out
    /// first; a partial frame is kept for the next call.
    pub(crate) fn poll(
        &mut self,
        r: &mut impl Read,
    ) -> Result<Option<(FrameHeader, Vec<u8>)>, FrameIoError> {
        loop {
            let avail = self.end - self.pos;
            if avail >= HEADER_LEN {
                let head: [u8; HEADER_LEN] = self.buf[self.pos..self.pos + HEADER_LEN]
                    .try_into()
                    .expect("5 bytes");
                let header = FrameHeader::decode(head)?;
                let need = HEADER_LEN + header.len;
                if avail >= need {
                    let payload = self.buf[self.pos + HEADER_LEN..self.pos + need].to_vec();
                    self.pos += need;
                    if self.pos == self.end {
                        (self.pos, self.end) = (0, 0);
                    }
                    return Ok(Some((header, payload)));
                }
            }
            if self.buf.is_empty() {
                self.buf = vec![0u8; READ_BUF];
            }
            if self.pos > 0 && self.buf.len() - self.pos < HEADER_LEN + zcp_wire::MAX_PAYLOAD {
                // Not room for the largest frame after `pos`: move the partial one down.
                self.buf.copy_within(self.pos..self.end, 0);
                (self.pos, self.end) = (0, avail);
            }
            match r.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err(FrameIoError::Closed),
                Ok(n) => self.end += n,
                Err(e) => match zcp_engine::io_class(&e) {
                    IoClass::Interrupted => {}
                    IoClass::TimedOut => return Ok(None),
                    IoClass::Failed => return Err(e.into()),
                },
            }
        }
    }
}

#[cfg(test)]
mod reader_tests {
    use super::*;

    /// Hands out bytes a few at a time, with a timeout between pieces.
    struct Trickle {
        data: Vec<u8>,
        pos: usize,
        tick: bool,
    }

    impl Read for Trickle {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.tick = !self.tick;
            if self.tick {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(3).min(self.data.len() - self.pos);
            buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    #[test]
    fn frames_survive_timeouts_mid_frame() {
        let mut data = Message::Proof { proof: [7; 32] }.encode_frame();
        data.extend(Message::DataAccept.encode_frame());
        let mut t = Trickle {
            data,
            pos: 0,
            tick: false,
        };
        let mut fr = FrameReader::default();
        let mut got = Vec::new();
        for _ in 0..200 {
            match fr.poll(&mut t) {
                Ok(Some((h, p))) => got.push(Message::decode(h.kind, &p).unwrap()),
                Ok(None) => {}
                Err(FrameIoError::Closed) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(
            got,
            vec![Message::Proof { proof: [7; 32] }, Message::DataAccept]
        );
    }

    /// Hands out bytes in pieces of varying size, up to `max`.
    struct Pieces {
        data: Vec<u8>,
        pos: usize,
        max: usize,
        step: usize,
    }

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.step = (self.step * 7 + 13) % self.max + 1;
            let n = buf.len().min(self.step).min(self.data.len() - self.pos);
            buf[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    #[test]
    fn bursts_of_frames_of_every_size_come_out_whole_and_in_order() {
        // Raw frames (kind 0x03) whose payloads run from empty to the largest allowed, so
        // frames straddle the buffer's end and the partial one is moved down.
        let sizes: Vec<usize> = (0..40)
            .map(|i| match i % 4 {
                0 => 0,
                1 => i * 997,
                2 => zcp_wire::MAX_PAYLOAD,
                _ => zcp_wire::MAX_PAYLOAD - i,
            })
            .collect();
        let mut data = Vec::new();
        for (i, n) in sizes.iter().enumerate() {
            data.extend((*n as u32).to_be_bytes());
            data.push(0x03);
            data.extend(std::iter::repeat_n(i as u8, *n));
        }
        for max in [1, 7, 4096, READ_BUF] {
            let mut r = Pieces {
                data: data.clone(),
                pos: 0,
                max,
                step: 0,
            };
            let mut fr = FrameReader::default();
            for (i, n) in sizes.iter().enumerate() {
                let (h, p) = loop {
                    if let Some(f) = fr.poll(&mut r).unwrap() {
                        break f;
                    }
                };
                assert_eq!(
                    (h.len, p.len()),
                    (*n, *n),
                    "frame {i}, reads of up to {max}"
                );
                assert!(p.iter().all(|b| *b == i as u8), "frame {i}");
            }
            assert!(matches!(fr.poll(&mut r), Err(FrameIoError::Closed)));
            assert_eq!(fr.buf.len(), READ_BUF);
        }
    }

    #[test]
    fn oversized_header_is_refused_before_allocation() {
        let mut r: &[u8] = &[0x7f, 0xff, 0xff, 0xff, 0x03];
        let mut fr = FrameReader::default();
        assert!(matches!(fr.poll(&mut r), Err(FrameIoError::Decode(_))));
        assert!(fr.buf.len() <= READ_BUF);
    }
}
