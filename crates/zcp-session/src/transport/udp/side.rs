//! A UDP stream's side channel: its data connection, carrying [`UdpFrame`]s both ways.
//!
//! In an encrypted session each side opens its direction with a 32-byte salt it draws at
//! random, then sends its frames as records ([`zcp_wire::crypt`]) under the key of its
//! direction ([`SessionKeys::side_key`]); the sender's salt also picks the key of the
//! stream's datagrams ([`SessionKeys::datagram_key`]). A record that fails to open ends the
//! stream as failing verification: the side channel is TCP, so nothing on it is lost or
//! reordered, and a record that does not open was altered.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use zcp_wire::crypt::{AEAD_TAG_LEN, RECORD_MAX, RECORD_PREFIX, SALT_LEN};
use zcp_wire::udp::UdpFrame;
use zcp_wire::{ErrorCode, RecordOpener, RecordSealer, SessionKeys, escape_text};

use crate::error::Refusal;

/// Opens stream `stream`'s side channel on `sock` for the sender of the data (`sender`) or
/// its receiver: in an encrypted session, draws this direction's salt and sends it.
pub(crate) fn open(
    sock: &mut TcpStream,
    keys: &SessionKeys,
    stream: u16,
    sender: bool,
) -> Result<(SideReader, SideWriter), Refusal> {
    if !keys.encrypted() {
        return Ok((SideReader::default(), SideWriter::default()));
    }
    let salt: [u8; SALT_LEN] = zcp_engine::sys::random().map_err(|e| {
        Refusal::new(
            ErrorCode::Io,
            format!("getrandom for a side channel salt: {e}"),
        )
    })?;
    let key = keys
        .side_key(stream, sender, &salt)
        .expect("an encrypted session has side keys");
    sock.write_all(&salt)
        .map_err(|e| Refusal::new(ErrorCode::Io, format!("UDP side channel: {e}")))?;
    let reader = SideReader {
        buf: Vec::new(),
        at: 0,
        sealed: Some(Opening {
            raw: Vec::new(),
            opener: None,
            salt: None,
            keys: keys.clone(),
            stream,
            from_sender: !sender,
        }),
    };
    let writer = SideWriter {
        sealed: Some((RecordSealer::new(&key), keys.clone(), salt)),
    };
    Ok((reader, writer))
}

/// What an encrypted side channel's reader holds before the plaintext.
#[derive(Debug)]
struct Opening {
    /// Bytes read and not yet opened: the peer's salt, then whole and partial records.
    raw: Vec<u8>,
    opener: Option<RecordOpener>,
    salt: Option<[u8; SALT_LEN]>,
    keys: SessionKeys,
    stream: u16,
    /// Whether the peer is the sender of the data (the direction of its key).
    from_sender: bool,
}

impl Opening {
    /// Opens every whole record read so far into `plain`.
    fn open_into(&mut self, plain: &mut Vec<u8>) -> Result<(), Refusal> {
        if self.opener.is_none() {
            let Some(salt) = self.raw.get(..SALT_LEN) else {
                return Ok(());
            };
            let salt: [u8; SALT_LEN] = salt.try_into().expect("a salt's length");
            let key = (self.keys)
                .side_key(self.stream, self.from_sender, &salt)
                .expect("an encrypted session has side keys");
            self.opener = Some(RecordOpener::new(&key));
            self.salt = Some(salt);
            self.raw.drain(..SALT_LEN);
        }
        let opener = self.opener.as_mut().expect("opened above");
        let t = Instant::now();
        let mut used = 0;
        while let Some(prefix) = self.raw.get(used..used + RECORD_PREFIX) {
            let prefix: [u8; RECORD_PREFIX] = prefix.try_into().expect("a prefix's length");
            // On TCP nothing is lost or reordered: a length out of bounds was altered.
            let n = RecordOpener::record_len(prefix)
                .map_err(|e| Refusal::new(ErrorCode::Verify, format!("UDP side channel: {e}")))?;
            let at = used + RECORD_PREFIX;
            let Some(body) = self.raw.get_mut(at..at + n + AEAD_TAG_LEN) else {
                break;
            };
            opener
                .open(prefix, body)
                .map_err(|e| Refusal::new(ErrorCode::Verify, format!("UDP side channel: {e}")))?;
            plain.extend_from_slice(&body[..n]);
            used = at + n + AEAD_TAG_LEN;
        }
        self.raw.drain(..used);
        self.keys.add_crypto_time(t.elapsed());
        Ok(())
    }
}

/// A side channel's incoming frames: bytes read from the data connection (opened, in an
/// encrypted session), cut into frames.
#[derive(Debug, Default)]
pub(crate) struct SideReader {
    buf: Vec<u8>,
    /// Where the next frame starts in `buf` (taken frames are let go in one move when more
    /// bytes are needed, not one by one).
    at: usize,
    sealed: Option<Opening>,
}

impl SideReader {
    /// One `read(2)` from `sock` into the buffer; `Ok(false)` at the end of the stream.
    pub(crate) fn fill(&mut self, sock: &mut TcpStream) -> std::io::Result<bool> {
        let mut tmp = [0u8; 16 * 1024];
        let n = sock.read(&mut tmp)?;
        match &mut self.sealed {
            Some(s) => s.raw.extend_from_slice(&tmp[..n]),
            None => self.buf.extend_from_slice(&tmp[..n]),
        }
        Ok(n > 0)
    }

    /// The next whole frame in the buffer, if any; a malformed one is a protocol error, a
    /// record that fails to open a failure of verification.
    pub(crate) fn next(&mut self) -> Result<Option<UdpFrame>, Refusal> {
        if let Some(s) = &mut self.sealed {
            s.open_into(&mut self.buf)?;
        }
        match UdpFrame::decode(&self.buf[self.at..]) {
            Ok(Some((f, used))) => {
                self.at += used;
                Ok(Some(f))
            }
            Ok(None) => {
                self.buf.drain(..self.at);
                self.at = 0;
                Ok(None)
            }
            Err(e) => Err(Refusal::protocol(format!("UDP side channel: {e}"))),
        }
    }

    /// The salt the peer opened its direction with (encrypted, once it came).
    pub(crate) fn peer_salt(&self) -> Option<&[u8; SALT_LEN]> {
        self.sealed.as_ref()?.salt.as_ref()
    }
}

/// A side channel's outgoing frames: written as they are, or sealed into records.
#[derive(Debug, Default)]
pub(crate) struct SideWriter {
    sealed: Option<(RecordSealer, SessionKeys, [u8; SALT_LEN])>,
}

impl SideWriter {
    /// The salt this direction opened with (encrypted).
    pub(crate) fn salt(&self) -> Option<&[u8; SALT_LEN]> {
        self.sealed.as_ref().map(|s| &s.2)
    }

    /// Writes one frame.
    pub(crate) fn frame(&mut self, sock: &mut TcpStream, f: &UdpFrame) -> Result<(), Refusal> {
        self.frames(sock, std::slice::from_ref(f))
    }

    /// Writes frames in one go (in as few records as they fit).
    pub(crate) fn frames(&mut self, sock: &mut TcpStream, fs: &[UdpFrame]) -> Result<(), Refusal> {
        let plain: Vec<u8> = fs.iter().flat_map(UdpFrame::encode).collect();
        let io = |e: std::io::Error| Refusal::new(ErrorCode::Io, format!("UDP side channel: {e}"));
        let Some((sealer, keys, _)) = &mut self.sealed else {
            return sock.write_all(&plain).map_err(io);
        };
        let t = Instant::now();
        let mut out = Vec::with_capacity(plain.len() + RECORD_PREFIX + AEAD_TAG_LEN);
        for piece in plain.chunks(RECORD_MAX) {
            let at = out.len();
            out.extend_from_slice(&[0; RECORD_PREFIX]);
            out.extend_from_slice(piece);
            out.extend_from_slice(&[0; AEAD_TAG_LEN]);
            sealer
                .seal(&mut out[at..])
                .map_err(|e| Refusal::new(ErrorCode::Io, format!("UDP side channel: {e}")))?;
        }
        keys.add_crypto_time(t.elapsed());
        sock.write_all(&out).map_err(io)
    }
}

/// Reads frames until the peer's `Hello` (within `idle`); anything else first is a
/// protocol error.
pub(crate) fn read_hello(
    sock: &mut TcpStream,
    reader: &mut SideReader,
    idle: Duration,
) -> Result<(u16, u16, u64), Refusal> {
    let until = Instant::now() + idle;
    let _ = sock.set_read_timeout(Some(idle));
    loop {
        match reader.next()? {
            Some(UdpFrame::Hello {
                port,
                payload,
                budget,
            }) => return Ok((port, payload, budget)),
            Some(other) => {
                return Err(Refusal::protocol(format!(
                    "UDP side channel: expected Hello, got {}",
                    escape_text(other.name())
                )));
            }
            None => {}
        }
        if Instant::now() > until {
            return Err(Refusal::new(ErrorCode::Io, "no UDP Hello from the peer"));
        }
        match reader.fill(sock) {
            Ok(true) => {}
            Ok(false) => {
                return Err(Refusal::new(
                    ErrorCode::Io,
                    "the data connection closed before the UDP Hello",
                ));
            }
            Err(e) => return Err(Refusal::new(ErrorCode::Io, format!("UDP Hello: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (a, l.accept().unwrap().0)
    }

    fn keys(agreed: u8) -> SessionKeys {
        let psk = zcp_wire::Psk::from_bytes([1; 32]);
        SessionKeys::derive_encrypted(&psk, (&[2; 32], &[3; 32]), &[4; 64], &[agreed; 32])
    }

    #[test]
    fn frames_cross_sealed_both_ways_and_tampering_is_a_verify_failure() {
        let (mut a, mut b) = pair();
        let k = keys(5);
        let (_ra, mut wa) = open(&mut a, &k, 2, true).unwrap();
        let (mut rb, _wb) = open(&mut b, &k, 2, false).unwrap();
        let big = UdpFrame::Nak {
            file_id: 1,
            offset: 0,
            ranges: vec![(1, 2); 128],
        };
        // More than one record's worth in one write.
        let many = vec![big.clone(); RECORD_MAX / 1000 + 5];
        wa.frames(&mut a, &many).unwrap();
        wa.frame(&mut a, &UdpFrame::End).unwrap();
        let _ = b.set_read_timeout(Some(Duration::from_secs(10)));
        let mut got = Vec::new();
        while got.last() != Some(&UdpFrame::End) {
            match rb.next().unwrap() {
                Some(f) => got.push(f),
                None => assert!(rb.fill(&mut b).unwrap()),
            }
        }
        assert_eq!(got.len(), many.len() + 1);
        assert_eq!(rb.peer_salt(), wa.salt());
        // Reflected: the sender's own direction, under its own salt, sent back to it.
        let (mut c, mut d) = pair();
        let (mut rc, _) = open(&mut c, &k, 2, true).unwrap();
        let _ = c.set_read_timeout(Some(Duration::from_secs(10)));
        let salt = *wa.salt().unwrap();
        d.write_all(&salt).unwrap();
        let mut rec = vec![0; RECORD_PREFIX + 3 + AEAD_TAG_LEN];
        rec[RECORD_PREFIX..RECORD_PREFIX + 3].copy_from_slice(&UdpFrame::End.encode());
        let mut sealer = RecordSealer::new(&k.side_key(2, true, &salt).unwrap());
        sealer.seal(&mut rec).unwrap();
        d.write_all(&rec).unwrap();
        let refused = loop {
            match rc.next() {
                Ok(None) => assert!(rc.fill(&mut c).unwrap()),
                Ok(Some(f)) => panic!("a reflected record opened as {f:?}"),
                Err(r) => break r,
            }
        };
        assert_eq!(refused.code, ErrorCode::Verify, "{}", refused.message);
    }

    #[test]
    fn in_clear_nothing_is_added() {
        let (mut a, mut b) = pair();
        let k = SessionKeys::derive(&zcp_wire::Psk::from_bytes([1; 32]), &[2; 32], &[3; 32]);
        let (_, mut w) = open(&mut a, &k, 0, true).unwrap();
        assert!(w.salt().is_none());
        w.frame(&mut a, &UdpFrame::End).unwrap();
        let mut raw = [0u8; 3];
        std::io::Read::read_exact(&mut b, &mut raw).unwrap();
        assert_eq!(raw.to_vec(), UdpFrame::End.encode());
    }
}
