//! The raw protocol client: a hand-driven session (handshake, sealed frames, data streams)
//! for sending what the real client never would, and the honest `Open` tests start from.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use zcp_wire::{
    ClientHandshake, DataClient, Established, FrameHeader, HEADER_LEN, Message, Psk, PutFile,
};

/// A hand-driven protocol client, for sending what the real client never would.
pub struct Raw {
    pub s: TcpStream,
    pub est: Established,
}

pub fn read_msg(s: &mut TcpStream) -> std::io::Result<(FrameHeader, Vec<u8>)> {
    let mut h = [0u8; HEADER_LEN];
    s.read_exact(&mut h)?;
    let header = FrameHeader::decode(h).map_err(|e| std::io::Error::other(e.to_string()))?;
    let mut p = vec![0u8; header.len];
    s.read_exact(&mut p)?;
    Ok((header, p))
}

pub fn read_plain(s: &mut TcpStream) -> std::io::Result<Message> {
    let (h, p) = read_msg(s)?;
    Message::decode(h.kind, &p).map_err(|e| std::io::Error::other(e.to_string()))
}

/// Whether the peer closes `s` within `secs` (reads until EOF or reset).
pub fn closes(s: &mut TcpStream, secs: u64) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    let mut buf = [0u8; 4096];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        s.set_read_timeout(Some(left)).unwrap();
        match s.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::ConnectionAborted
                ) =>
            {
                return true;
            }
            // A signal delivered to the test process is no answer from the server: read on.
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false;
            }
            Err(e) => panic!("reading for the peer's close: {e}"),
        }
    }
}

/// The `Open` an honest client sends for one stream of the given direction (engines `auto`
/// and `sendfile`, the server's chunk size, no rate cap, BLAKE3, TCP, no export); a test
/// changes what its attack needs with struct update: `Open { rate, ..base_open(true) }`.
pub fn base_open(pull: bool) -> zcp_wire::Open {
    zcp_wire::Open {
        pull,
        recursive: false,
        streams: 1,
        idle_ms: 0,
        recv_engine: "auto".into(),
        send_engine: "sendfile".into(),
        block_size: 0,
        chunk_size: 0,
        rate: 0,
        verify: "blake3".into(),
        transport: "tcp".into(),
        udp_mode: "fair".into(),
        export: String::new(),
        existing: String::new(),
        list: false,
        filters: Vec::new(),
        delete: zcp_wire::DeleteMode::Off,
    }
}

impl Raw {
    /// Authenticates and opens a push session (`splice` receiver, up to 2 streams).
    pub fn connect(port: u16, psk: Psk) -> Raw {
        Self::connect_with(port, psk, "splice", 2)
    }

    /// Authenticates and opens a push session with this receiver engine and stream count.
    pub fn connect_with(port: u16, psk: Psk, engine: &str, streams: u16) -> Raw {
        let mut raw = Self::authenticate(port, psk);
        raw.send(&Message::Open(Box::new(zcp_wire::Open {
            recv_engine: engine.into(),
            streams,
            ..base_open(false)
        })));
        match raw.recv().unwrap() {
            Message::Opened { .. } => raw,
            other => panic!("expected Opened, got {other:?}"),
        }
    }

    /// The handshake alone.
    pub fn authenticate(port: u16, psk: Psk) -> Raw {
        Self::handshake(port, ClientHandshake::new(psk, [7; 32]))
    }

    /// The handshake of an encrypted session (a client that asks for encryption).
    pub fn authenticate_encrypted(port: u16, psk: Psk) -> Raw {
        Self::handshake(port, ClientHandshake::new(psk, [7; 32]).encrypting([8; 32]))
    }

    fn handshake(port: u16, hs: ClientHandshake) -> Raw {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&hs.hello().encode_frame()).unwrap();
        let ch = read_plain(&mut s).unwrap();
        let (proof, aw) = hs.on_challenge(ch).unwrap();
        s.write_all(&proof.encode_frame()).unwrap();
        let (h, p) = read_msg(&mut s).unwrap();
        let est = aw.on_frame(h, &p).unwrap();
        Raw { s, est }
    }

    /// Seals and sends one message. A peer that already closed (it refused an earlier frame
    /// and said why) is not an error here: what it sent before closing is still readable, and
    /// the test asserts on that and on the disk.
    pub fn send(&mut self, m: &Message) {
        let f = self.est.sealer.seal(m);
        match self.s.write_all(&f) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset
                ) => {}
            Err(e) => panic!("send {m:?}: {e}"),
        }
    }

    /// The next message that is not a keep-alive or a positive chunk acknowledgement.
    pub fn recv(&mut self) -> std::io::Result<Message> {
        loop {
            let m = self.recv_any()?;
            if !matches!(
                m,
                Message::Progress { .. } | Message::ChunkAck { ok: true, .. }
            ) {
                return Ok(m);
            }
        }
    }

    /// The next message, whatever it is.
    pub fn recv_any(&mut self) -> std::io::Result<Message> {
        let (h, p) = read_msg(&mut self.s)?;
        self.est
            .opener
            .open(h, &p)
            .map_err(|e| std::io::Error::other(e.to_string()))
    }

    /// Announces a file in 64 KiB chunks; returns the answer (skipping any `Have`).
    pub fn put(&mut self, id: u32, dest: &[u8], size: u64) -> Message {
        self.send(&Message::PutFile(PutFile {
            file_id: id,
            dest: dest.to_vec(),
            name: b"src.bin".to_vec(),
            size,
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            chunk_size: 64 * 1024,
            sparse: false,
        }));
        loop {
            match self.recv().unwrap() {
                Message::Have(_) => continue,
                other => return other,
            }
        }
    }

    /// Opens data stream `index` of this session; returns the stream or the server's refusal.
    // A test helper: the refusal is the whole message, as it came.
    #[allow(clippy::result_large_err)]
    pub fn data(&self, port: u16, index: u16) -> Result<TcpStream, Message> {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let dc = DataClient::new([index as u8 + 1; 32]);
        s.write_all(&dc.hello().encode_frame()).unwrap();
        let ch = read_plain(&mut s).unwrap();
        let join = dc
            .on_challenge(ch, &self.est.keys, self.est.session_id, index)
            .unwrap();
        s.write_all(&join.encode_frame()).unwrap();
        match read_plain(&mut s).unwrap() {
            Message::DataAccept => Ok(s),
            other => Err(other),
        }
    }
}
