//! The malicious client: a [`Raw`] session (handshake and frames from `util.rs`) against a
//! real `zcp serve`, and the moves the tests make with it: opening a session with any
//! `Open` ([`base_open`] and struct update), announcing files ([`put_file`], [`pf`]), sending
//! chunks with true or false MACs, finishing, and waiting for the server's answers.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use zcp_wire::{ChunkHeader, ErrorCode, Message, Open, PutFile};

use crate::util::*;

pub use crate::util::base_open;

/// `Open` for one stream of the given direction and chunk size.
pub fn open_message(pull: bool, chunk_size: u64) -> Message {
    Message::Open(Box::new(Open {
        chunk_size,
        ..base_open(pull)
    }))
}

impl Raw {
    /// The handshake, then `open`; the session and the server's answer, whatever it is.
    pub fn open_with(port: u16, psk: zcp_wire::Psk, open: Open) -> (Raw, Message) {
        let mut raw = Raw::authenticate(port, psk);
        raw.send(&Message::Open(Box::new(open)));
        let answer = raw.recv().unwrap();
        (raw, answer)
    }

    /// The handshake, then `open`, which the server must answer with `Opened`.
    pub fn opened(port: u16, psk: zcp_wire::Psk, open: Open) -> Raw {
        match Raw::open_with(port, psk, open) {
            (raw, Message::Opened { .. }) => raw,
            (_, other) => panic!("expected Opened, got {other:?}"),
        }
    }

    /// Asks for `paths` in a pull (each under the server's name for it), then `GetEnd`.
    pub fn get_files(&mut self, paths: &[&[u8]]) {
        for p in paths {
            self.send(&Message::Get {
                path: p.to_vec(),
                dest: Vec::new(),
            });
        }
        self.send(&Message::GetEnd);
    }

    /// Says `FileReady` for file `id` of a pull (its target `want.bin`) on this engine.
    pub fn ready(&mut self, id: u32, engine: &str) {
        self.send(&Message::FileReady {
            file_id: id,
            engine: engine.into(),
            note: String::new(),
            target: b"want.bin".to_vec(),
            resumed: false,
        });
    }

    /// Announces file `id` and waits for its `FileReady` (returned).
    pub fn announce(&mut self, id: u32, dest: &[u8], size: u64, chunk_size: u64) -> Message {
        self.send(&pf(id, dest, size, chunk_size));
        wait_for(
            self,
            10,
            &format!("FileReady {id}"),
            |m| matches!(m, Message::FileReady { file_id, .. } if *file_id == id),
        )
    }

    /// Waits for `n` positive `ChunkAck`s of file `id`.
    pub fn acks(&mut self, id: u32, n: usize) {
        for _ in 0..n {
            wait_for(
                self,
                10,
                "ChunkAck",
                |m| matches!(m, Message::ChunkAck { file_id, ok: true, .. } if *file_id == id),
            );
        }
    }

    /// The file digest of file `id` (`size` bytes in 64 KiB chunks) over these chunk MACs.
    pub fn digest(&self, id: u32, size: u64, macs: &[[u8; 32]]) -> [u8; 32] {
        let mut d = self.est.keys.file_digest(id, size, 65536);
        macs.iter().for_each(|m| d.push(m));
        d.finish()
    }

    /// Sends `FileEnd` for file `id` and waits for `FileCommitted` or `FileFailed`.
    pub fn commit(&mut self, id: u32, digest: [u8; 32]) -> Message {
        self.send(&Message::FileEnd {
            file_id: id,
            digest,
        });
        wait_for(self, 10, "FileCommitted/FileFailed", |m| {
            matches!(
                m,
                Message::FileCommitted { .. } | Message::FileFailed { .. }
            )
        })
    }

    /// Lands chunk `index` of file `id` (`bytes` at `off`) on `stream` with its true MAC and
    /// waits for the receiver's `ChunkAck{ok}`: the chunk is verified and durable.
    pub fn land(&mut self, stream: &mut TcpStream, id: u32, index: u64, off: u64, bytes: &[u8]) {
        stream
            .write_all(&ChunkHeader::data(id, off, bytes.len() as u64).encode())
            .unwrap();
        stream.write_all(bytes).unwrap();
        let mac = mac_of(self, id, off, bytes);
        self.send(&Message::ChunkMac {
            file_id: id,
            index,
            mac,
        });
        wait_for(
            self,
            10,
            &format!("ChunkAck {id}/{index}"),
            |m| matches!(m, Message::ChunkAck { file_id, index: i, ok: true } if *file_id == id && *i == index),
        );
    }
}

/// A `Raw` session of the given direction with one stream joined (a pull gets `want.bin`).
pub fn raw_open(srv: &ServerProc, env: &Env, pull: bool) -> (Raw, TcpStream) {
    let mut raw = Raw::opened(
        srv.port,
        env.psk(),
        Open {
            chunk_size: 65536,
            ..base_open(pull)
        },
    );
    if pull {
        raw.get_files(&[b"want.bin"]);
    }
    let data = raw.data(srv.port, 0).unwrap();
    (raw, data)
}

/// The id of the next file the server announces (a pull), skipping anything else.
pub fn next_put(raw: &mut Raw) -> u32 {
    loop {
        if let Message::PutFile(p) = raw.recv().unwrap() {
            return p.file_id;
        }
    }
}

/// Sends chunk `i` of `body` (64 KiB chunks) with its MAC.
pub fn push_chunk(raw: &mut Raw, data: &mut TcpStream, id: u32, body: &[u8], i: usize) -> [u8; 32] {
    let c = body.chunks(65536).nth(i).unwrap();
    let off = i as u64 * 65536;
    let mac = mac_of(raw, id, off, c);
    data.write_all(&ChunkHeader::data(id, off, c.len() as u64).encode())
        .unwrap();
    data.write_all(c).unwrap();
    raw.send(&Message::ChunkMac {
        file_id: id,
        index: i as u64,
        mac,
    });
    mac
}

/// Pushes `body` as file `id` named `dest` over `data` (64 KiB chunks), honestly; the answer.
pub fn push_whole(
    raw: &mut Raw,
    data: &mut TcpStream,
    id: u32,
    dest: &[u8],
    body: &[u8],
) -> Message {
    raw.send(&pf(id, dest, body.len() as u64, 65536));
    loop {
        match raw.recv().unwrap() {
            Message::FileReady { resumed, .. } => {
                if resumed {
                    // Offered what is there already: start over, as an honest sender does
                    // when it does not check.
                    raw.send(&Message::Go {
                        file_id: id,
                        restart: true,
                    });
                }
                break;
            }
            Message::Have(_) => {}
            other => return other,
        }
    }
    let n = body.len().div_ceil(65536);
    let mut d = raw.est.keys.file_digest(id, body.len() as u64, 65536);
    for i in 0..n {
        let mac = push_chunk(raw, data, id, body, i);
        d.push(&mac);
    }
    if n > 1 {
        let mut acks = 0;
        while acks < n {
            match raw.recv_any().unwrap() {
                Message::ChunkAck { ok: true, .. } => acks += 1,
                Message::Progress { .. } => {}
                other => return other,
            }
        }
    }
    raw.send(&Message::FileEnd {
        file_id: id,
        digest: d.finish(),
    });
    loop {
        match raw.recv_any().unwrap() {
            Message::Progress { .. } | Message::ChunkAck { .. } => {}
            m => return m,
        }
    }
}

/// The server's next `Error`, skipping the rest; `None` if it closed without one.
pub fn error_from(raw: &mut Raw) -> Option<(ErrorCode, String)> {
    for _ in 0..1000 {
        match raw.recv_any() {
            Ok(Message::Error { code, message }) => return Some((code, message)),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

/// A `PutFile` for file `id` at `dest`: `size` bytes in chunks of `chunk_size`, mode 0644,
/// mtime 1,000,000 s; a test changes what its attack needs with struct update.
pub fn put_file(id: u32, dest: &[u8], size: u64, chunk_size: u64) -> PutFile {
    PutFile {
        file_id: id,
        dest: dest.to_vec(),
        name: Vec::new(),
        size,
        mode: 0o644,
        mtime_sec: 1_000_000,
        mtime_nsec: 0,
        chunk_size,
        sparse: false,
    }
}

/// [`put_file`] as a message.
pub fn pf(id: u32, dest: &[u8], size: u64, chunk_size: u64) -> Message {
    Message::PutFile(put_file(id, dest, size, chunk_size))
}

/// Sends `m`, then a `PutFile` the receiver refuses at once (chunk size 1), and waits for
/// that refusal: everything before it has been handled.
pub fn sync_after(raw: &mut Raw, m: &Message, id: u32) {
    raw.send(m);
    raw.send(&pf(id, b"sync.bin", 1, 1));
    loop {
        match raw.recv().unwrap() {
            Message::FileFailed { file_id, .. } if file_id == id => return,
            _ => {}
        }
    }
}

/// Ends a push session from the Raw side as an honest client would: stream end markers,
/// `Finish`, the receiver's `Stats`, ours. Returns whether the receiver's Stats came.
pub fn raw_finish(raw: &mut Raw, data: &mut [TcpStream]) -> bool {
    for d in data.iter_mut() {
        let _ = d.write_all(&ChunkHeader::end().encode());
    }
    raw.send(&Message::Finish);
    let end = Instant::now() + Duration::from_secs(10);
    while Instant::now() < end {
        match raw.recv_any() {
            Ok(Message::Stats(_)) => {
                raw.send(&Message::Stats(zcp_wire::SideStats::default()));
                return true;
            }
            Ok(_) => {}
            Err(_) => return false,
        }
    }
    false
}

/// The keyed MAC of `bytes` as chunk (`id`, `off`) of this session.
pub fn mac_of(raw: &Raw, id: u32, off: u64, bytes: &[u8]) -> [u8; 32] {
    let mut h = raw.est.keys.chunk_hasher(id, off, bytes.len() as u64);
    h.update(bytes);
    *h.finalize().as_bytes()
}

/// Reads frames until `want` matches one (returned); panics after `secs` with what came.
pub fn wait_for(raw: &mut Raw, secs: u64, what: &str, want: impl Fn(&Message) -> bool) -> Message {
    let end = Instant::now() + Duration::from_secs(secs);
    let mut seen = Vec::new();
    raw.s
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    while Instant::now() < end {
        match raw.recv_any() {
            Ok(m) if want(&m) => return m,
            Ok(m) => seen.push(format!("{m:?}").chars().take(200).collect::<String>()),
            Err(e) if timed_out(&e) => {}
            Err(e) => panic!("waiting for {what}: {e}; seen {seen:?}"),
        }
    }
    panic!("no {what} within {secs} s; seen {seen:?}")
}

/// Whether a read failed only because its timeout ran out.
pub fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

/// What the peer said next within `limit`, skipping what `skip` matches; `None` when it
/// closed (or said `Error`) first, or the time ran out (then `Err(())`).
pub fn next_raw(
    raw: &mut Raw,
    limit: Duration,
    skip: impl Fn(&Message) -> bool,
) -> Result<Option<Message>, ()> {
    let end = Instant::now() + limit;
    raw.s
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    while Instant::now() < end {
        match raw.recv_any() {
            Ok(Message::Error { .. }) => return Ok(None),
            Ok(m) if skip(&m) => {}
            Ok(m) => return Ok(Some(m)),
            Err(e) if timed_out(&e) => {}
            Err(_) => return Ok(None),
        }
    }
    Err(())
}

/// The server's keep-alives and positive acknowledgements: what [`next_raw`] skips.
pub fn keepalive(m: &Message) -> bool {
    matches!(
        m,
        Message::Progress { .. } | Message::ChunkAck { ok: true, .. }
    )
}

/// Sends what `make(turn)` makes every `every` until the peer closes the control connection
/// (or says `Error`) or `limit` passes. Returns whether it closed, and how long the session
/// lived.
pub fn chatter_until_closed(
    raw: &mut Raw,
    limit: Duration,
    every: Duration,
    mut make: impl FnMut(u64) -> Option<Message>,
) -> (bool, Duration) {
    let t = Instant::now();
    let mut turn = 0;
    raw.s.set_read_timeout(Some(every)).unwrap();
    while t.elapsed() < limit {
        if let Some(m) = make(turn) {
            raw.send(&m);
        }
        turn += 1;
        match raw.recv_any() {
            Ok(Message::Error { .. }) => return (true, t.elapsed()),
            Ok(_) => {}
            Err(e) if timed_out(&e) => {}
            Err(_) => return (true, t.elapsed()),
        }
    }
    (false, t.elapsed())
}
