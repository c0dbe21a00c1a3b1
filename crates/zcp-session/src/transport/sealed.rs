//! The record layer of an encrypted session's TCP data streams ([`zcp_wire::crypt`]): the
//! sending stream's [`SealWriter`] and the receiving stream's [`OpenReader`].
//!
//! A stream opens with a 32-byte salt its sender draws at random, which with the stream
//! index picks the stream's key; then records of at most 256 KiB of plaintext. The plaintext
//! is what an unencrypted stream carries. The sender reads each chunk's bytes once, into the
//! record it is filling, hashes them there for the chunk's MAC, and encrypts them in place;
//! each chunk ends a record, so nothing of it waits in a buffer while the stream is idle. The
//! receiver decrypts each record in its buffer and hands the plaintext to the engine, which
//! hashes it there and writes it (`rw` or `direct`: there is no socket to splice from).

use std::io::Read;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use zcp_engine::pace::Pacer;
use zcp_engine::recv::ByteSource;
use zcp_engine::send::send_all;
use zcp_engine::{EngineError, IoClass};
use zcp_wire::crypt::{AEAD_TAG_LEN, RECORD_MAX, RECORD_PREFIX, SALT_LEN};
use zcp_wire::{RecordOpener, RecordSealer, SessionKeys};

/// The sending end of an encrypted data stream.
pub(crate) struct SealWriter {
    sealer: RecordSealer,
    /// `[length prefix][plaintext, `held` bytes][room for the tag]`.
    rec: Vec<u8>,
    held: usize,
    /// Plaintext per record: [`RECORD_MAX`], or a pacer's quantum (a record is drawn from
    /// the rate cap's bucket whole: small ones keep the streams sharing it interleaved).
    limit: usize,
    keys: SessionKeys,
    pacer: Option<Arc<Pacer>>,
    /// Bytes of salt, prefixes and tags sent (not payload).
    overhead: AtomicU64,
}

impl SealWriter {
    /// Opens stream `stream` on `sock`: draws its salt and sends it.
    pub(crate) fn start(
        sock: &TcpStream,
        keys: &SessionKeys,
        stream: u16,
        pacer: Option<Arc<Pacer>>,
    ) -> Result<SealWriter, EngineError> {
        let salt: [u8; SALT_LEN] = zcp_engine::sys::random()
            .map_err(|e| EngineError::Refused(format!("getrandom for a stream salt: {e}")))?;
        let key = keys
            .stream_key(stream, &salt)
            .expect("a SealWriter only in an encrypted session");
        let limit = pacer.as_ref().map_or(RECORD_MAX, |p| {
            usize::try_from(p.quantum()).map_or(RECORD_MAX, |q| q.clamp(1024, RECORD_MAX))
        });
        let w = SealWriter {
            sealer: RecordSealer::new(&key),
            rec: vec![0; RECORD_PREFIX + limit + AEAD_TAG_LEN],
            held: 0,
            limit,
            keys: keys.clone(),
            pacer,
            overhead: AtomicU64::new(0),
        };
        send_all(sock.as_fd(), &salt, true, &w.overhead)?;
        Ok(w)
    }

    /// Room left in the record being filled.
    fn room(&mut self) -> &mut [u8] {
        &mut self.rec[RECORD_PREFIX + self.held..RECORD_PREFIX + self.limit]
    }

    /// Adds `bytes` to the stream, sending each record that fills.
    pub(crate) fn write(&mut self, sock: &TcpStream, mut bytes: &[u8]) -> Result<(), EngineError> {
        while !bytes.is_empty() {
            let room = self.room();
            let n = room.len().min(bytes.len());
            room[..n].copy_from_slice(&bytes[..n]);
            self.held += n;
            bytes = &bytes[n..];
            if self.held == self.limit {
                self.flush(sock)?;
            }
        }
        Ok(())
    }

    /// Adds bytes that `fill` puts straight into the record (a file read): it gets the room
    /// left and returns how much it filled (0: nothing more). Returns that count.
    pub(crate) fn fill(
        &mut self,
        sock: &TcpStream,
        max: usize,
        fill: impl FnOnce(&mut [u8]) -> Result<usize, EngineError>,
    ) -> Result<usize, EngineError> {
        let room = self.room();
        let n = room.len().min(max);
        let got = fill(&mut room[..n])?;
        self.held += got;
        if self.held == self.limit {
            self.flush(sock)?;
        }
        Ok(got)
    }

    /// Seals and sends what is held (nothing when nothing is).
    pub(crate) fn flush(&mut self, sock: &TcpStream) -> Result<(), EngineError> {
        if self.held == 0 {
            return Ok(());
        }
        let len = RECORD_PREFIX + self.held + AEAD_TAG_LEN;
        let t = Instant::now();
        self.sealer
            .seal(&mut self.rec[..len])
            .map_err(|e| EngineError::Refused(e.to_string()))?;
        self.keys.add_crypto_time(t.elapsed());
        if let Some(p) = &self.pacer {
            // The cap is on what the streams carry: the record's plaintext.
            p.take(self.held as u64);
        }
        self.held = 0;
        send_all(sock.as_fd(), &self.rec[..len], false, &self.overhead)
    }
}

/// The receiving end of an encrypted data stream: decrypts record by record and hands out
/// the plaintext.
pub(crate) struct OpenReader {
    sock: TcpStream,
    opener: RecordOpener,
    keys: SessionKeys,
    /// The current record's ciphertext and tag, then its plaintext at `pos..end`.
    buf: Vec<u8>,
    pos: usize,
    end: usize,
}

/// How a read of `s` failed: a timeout, the peer gone, or the socket's error — never
/// [`EngineError::Refused`], which says the bytes failed authentication (a broken connection
/// is retried; a forged record is not).
fn io_error(s: &TcpStream, e: std::io::Error, (what, want): (&'static str, usize)) -> EngineError {
    match zcp_engine::io_class(&e) {
        IoClass::TimedOut => EngineError::Timeout {
            what,
            secs: s
                .read_timeout()
                .ok()
                .flatten()
                .map_or(0.0, |d| d.as_secs_f64()),
        },
        _ if e.kind() == std::io::ErrorKind::UnexpectedEof => EngineError::Disconnected {
            got: 0,
            want: want as u64,
        },
        _ => EngineError::Sys {
            call: "recv",
            what,
            source: e,
        },
    }
}

impl OpenReader {
    /// Opens the stream: reads its salt (waiting while `wait()` says the session is on, as
    /// between chunks), and picks its key. `Ok(None)`: the stream closed before its salt.
    pub(crate) fn start(
        mut sock: TcpStream,
        keys: &SessionKeys,
        stream: u16,
        wait: &dyn Fn() -> bool,
    ) -> Result<Option<OpenReader>, EngineError> {
        let mut salt = [0u8; SALT_LEN];
        if !read_patiently(&mut sock, &mut salt, wait)? {
            return Ok(None);
        }
        let key = keys
            .stream_key(stream, &salt)
            .expect("an OpenReader only in an encrypted session");
        Ok(Some(OpenReader {
            sock,
            opener: RecordOpener::new(&key),
            keys: keys.clone(),
            buf: vec![0; RECORD_MAX + AEAD_TAG_LEN],
            pos: 0,
            end: 0,
        }))
    }

    /// Reads and opens the next record. `Ok(false)`: the stream ended cleanly between
    /// records. Between records the stream may be quiet as long as `wait()` says.
    fn next_record(&mut self, wait: &dyn Fn() -> bool) -> Result<bool, EngineError> {
        let mut prefix = [0u8; RECORD_PREFIX];
        if !read_patiently(&mut self.sock, &mut prefix, wait)? {
            return Ok(false);
        }
        let n =
            RecordOpener::record_len(prefix).map_err(|e| EngineError::Refused(e.to_string()))?;
        let body = &mut self.buf[..n + AEAD_TAG_LEN];
        self.sock
            .read_exact(body)
            .map_err(|e| io_error(&self.sock, e, ("data stream, inside a record", body.len())))?;
        let t = Instant::now();
        let r = self.opener.open(prefix, body);
        self.keys.add_crypto_time(t.elapsed());
        r.map_err(|e| EngineError::Refused(e.to_string()))?;
        (self.pos, self.end) = (0, n);
        Ok(true)
    }

    /// Reads exactly `out.len()` bytes of plaintext. `Ok(false)`: the stream ended before
    /// the first (cleanly, between records). Before the first byte the stream may be quiet
    /// as long as `wait()` says.
    pub(crate) fn read_exact(
        &mut self,
        out: &mut [u8],
        wait: &dyn Fn() -> bool,
    ) -> Result<bool, EngineError> {
        let mut got = 0;
        while got < out.len() {
            if self.pos == self.end {
                let quiet: &dyn Fn() -> bool = if got == 0 { wait } else { &|| false };
                if !self.next_record(quiet)? {
                    if got == 0 {
                        return Ok(false);
                    }
                    return Err(EngineError::Disconnected {
                        got: got as u64,
                        want: out.len() as u64,
                    });
                }
            }
            let n = (self.end - self.pos).min(out.len() - got);
            out[got..got + n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
            self.pos += n;
            got += n;
        }
        Ok(true)
    }
}

impl ByteSource for OpenReader {
    fn read(&mut self, out: &mut [u8]) -> Result<usize, EngineError> {
        if self.pos == self.end && !self.next_record(&|| false)? {
            return Ok(0);
        }
        let n = (self.end - self.pos).min(out.len());
        out[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` when the stream ended before the first.
/// Before the first byte a timeout is waited out while `wait()` says so; inside, it fails.
fn read_patiently(
    s: &mut TcpStream,
    buf: &mut [u8],
    wait: &dyn Fn() -> bool,
) -> Result<bool, EngineError> {
    let mut got = 0;
    while got < buf.len() {
        match s.read(&mut buf[got..]) {
            Ok(0) if got == 0 => return Ok(false),
            Ok(0) => {
                return Err(EngineError::Disconnected {
                    got: got as u64,
                    want: buf.len() as u64,
                });
            }
            Ok(n) => got += n,
            Err(e) => match zcp_engine::io_class(&e) {
                IoClass::Interrupted => {}
                IoClass::TimedOut if got == 0 && wait() => {}
                _ => return Err(io_error(s, e, ("data stream", buf.len() - got))),
            },
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use zcp_wire::Psk;

    fn keys() -> SessionKeys {
        SessionKeys::derive_encrypted(
            &Psk::from_bytes([3; 32]),
            (&[1; 32], &[2; 32]),
            &[4; 64],
            &[5; 32],
        )
    }

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn a_stream_round_trips_across_record_edges_and_hides_its_bytes() {
        let (a, b) = pair();
        let k = keys();
        let data: Vec<u8> = (0..RECORD_MAX * 2 + 77).map(|i| (i % 251) as u8).collect();
        let sent = data.clone();
        let kk = k.clone();
        let t = std::thread::spawn(move || {
            let mut w = SealWriter::start(&a, &kk, 3, None).unwrap();
            w.write(&a, b"ZCPD-marker").unwrap();
            let mut at = 0;
            while at < sent.len() {
                at += w
                    .fill(&a, sent.len() - at, |room| {
                        let n = room.len().min(sent.len() - at);
                        room[..n].copy_from_slice(&sent[at..at + n]);
                        Ok(n)
                    })
                    .unwrap();
            }
            w.flush(&a).unwrap();
        });
        let mut r = OpenReader::start(b, &k, 3, &|| false).unwrap().unwrap();
        let mut head = [0u8; 11];
        assert!(r.read_exact(&mut head, &|| false).unwrap());
        assert_eq!(&head, b"ZCPD-marker");
        let mut got = vec![0u8; data.len()];
        let mut at = 0;
        while at < got.len() {
            let n = r.read(&mut got[at..]).unwrap();
            assert!(n > 0);
            at += n;
        }
        assert_eq!(got, data);
        t.join().unwrap();
        assert_eq!(r.read(&mut [0; 4]).unwrap(), 0, "clean end between records");
        assert!(k.crypto_time() > std::time::Duration::ZERO);
    }

    #[test]
    fn another_streams_index_or_a_flipped_byte_fails() {
        for (index, flip) in [(4u16, None), (3, Some(40usize))] {
            let (a, b) = pair();
            let k = keys();
            let kk = k.clone();
            let t = std::thread::spawn(move || {
                // Written to a buffer first, so a byte can be flipped on the way.
                let (x, mut y) = pair();
                let mut w = SealWriter::start(&x, &kk, 3, None).unwrap();
                w.write(&x, &[7u8; 1000]).unwrap();
                w.flush(&x).unwrap();
                drop(x);
                let mut wire = Vec::new();
                y.read_to_end(&mut wire).unwrap();
                if let Some(at) = flip {
                    wire[at] ^= 1;
                }
                std::io::Write::write_all(&mut &a, &wire).unwrap();
            });
            let mut r = OpenReader::start(b, &k, index, &|| false).unwrap().unwrap();
            let e = r.read(&mut [0; 100]).unwrap_err();
            assert!(e.to_string().contains("failed authentication"), "{e}");
            t.join().unwrap();
        }
    }
}
