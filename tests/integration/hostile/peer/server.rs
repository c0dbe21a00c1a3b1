//! The malicious server: [`Evil`] runs the real server handshake for one `zcp get` (or
//! `zcp send`), answers its `Open` and plays the server's side of the session with any frame
//! in any order; [`answer_open`] is the short form that only answers `Open` and watches what
//! the client does next. The clients it serves are real `zcp` processes ([`get`], [`send`]).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use zcp_wire::crypt::{AEAD_TAG_LEN, RECORD_MAX, RECORD_PREFIX};
use zcp_wire::{
    Accepted, ChunkHeader, Established, Message, Open, Pacing, Psk, PutFile, RecordSealer,
    SessionKeys, SideStats,
};

use crate::util::*;

/// A malicious server with an authenticated session to one `zcp get`.
pub struct Evil {
    pub s: TcpStream,
    pub est: Established,
    pub data: Vec<TcpStream>,
    /// The client's `Get`s: (path, the name it chose).
    pub gets: Vec<(Vec<u8>, Vec<u8>)>,
    /// Data connections that reached us.
    pub joined: usize,
    /// The filter rules the client's `Open` carried.
    pub filters: Vec<String>,
    /// In an encrypted session, what seals data stream 0's records ([`Evil::seal_as`]);
    /// `None`: chunks go in clear.
    pub sealer: Option<RecordSealer>,
}

pub fn read_timeout(s: &TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
}

/// Accepts one connection within `secs`.
pub fn accept_within(l: &TcpListener, secs: u64) -> Option<TcpStream> {
    l.set_nonblocking(true).unwrap();
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        match l.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).unwrap();
                read_timeout(&s);
                return Some(s);
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    None
}

/// A loopback listener for a malicious server, and its port.
pub fn listener() -> (TcpListener, u16) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    (l, port)
}

/// Connections that reached `l` (waiting in its backlog, even if closed since).
pub fn pending(l: &TcpListener) -> usize {
    l.set_nonblocking(true).unwrap();
    std::iter::from_fn(|| l.accept().ok()).count()
}

/// The server's handshake on a control connection accepted from `l` within 10 s: the
/// session's keys, once the welcome (granting `max_streams`) has gone out. Encrypted when
/// the client asks, as an honest server would.
pub fn handshake(l: &TcpListener, psk: &Psk, max_streams: u16) -> (TcpStream, Established) {
    let mut s = accept_within(l, 10).expect("the client connects");
    let hello = read_plain(&mut s).unwrap();
    let offer = zcp_wire::ServerOffer {
        secret: Some([0x77; 32]),
        required: &|_| false,
    };
    let (state, reply, _) = zcp_wire::accept_any(&[psk], hello, [9; 32], &offer).unwrap();
    s.write_all(&reply.encode_frame()).unwrap();
    let Accepted::Control(aw) = state else {
        panic!("expected a control connection")
    };
    let proof = read_plain(&mut s).unwrap();
    let (est, welcome) = aw.on_proof(proof, [0x5a; 16], max_streams).unwrap();
    s.write_all(&welcome).unwrap();
    (s, est)
}

/// The server's side of data connection `d` joining the session `est`: its own handshake,
/// the join proof checked, `DataAccept` sent.
pub fn join(d: &mut TcpStream, psk: &Psk, est: &Established) {
    let hello = read_plain(d).unwrap();
    let (state, reply) = zcp_wire::accept(psk, hello, [8; 32]).unwrap();
    d.write_all(&reply.encode_frame()).unwrap();
    let Accepted::Data(aw) = state else {
        panic!("expected a data connection")
    };
    let req = aw.on_join(read_plain(d).unwrap()).unwrap();
    req.verify(&est.keys).unwrap();
    d.write_all(&Message::DataAccept.encode_frame()).unwrap();
}

/// Seals `m` for the session `est` and writes it to `s` (a write error is the test's to find
/// later: the peer may have gone, which is what some attacks wait for).
pub fn seal_to(s: &mut TcpStream, est: &mut Established, m: &Message) {
    let f = est.sealer.seal(m);
    let _ = s.write_all(&f);
}

/// Reads the next control frame of the session `est` from `s` and opens it.
pub fn open_from(s: &mut TcpStream, est: &mut Established) -> std::io::Result<Message> {
    let (h, p) = read_msg(s)?;
    est.opener
        .open(h, &p)
        .map_err(|e| std::io::Error::other(e.to_string()))
}

/// An `Opened` of `streams` streams with this pacing and verify mode, over TCP.
pub fn opened(streams: u16, pacing: Pacing, verify: &str) -> Message {
    Message::Opened {
        streams,
        idle_ms: 60_000,
        pacing,
        verify: verify.into(),
        transport: "tcp".into(),
        udp_mode: "fair".into(),
    }
}

impl Evil {
    /// Runs the real server handshake for one client, grants `grant` streams (default: what
    /// was asked), accepts the data connections that come within 2 s, and reads the `Get`s.
    pub fn accept(l: &TcpListener, psk: &Psk, grant: Option<u16>) -> Evil {
        let (s, est) = handshake(l, psk, 16);
        let mut evil = Evil {
            s,
            est,
            data: Vec::new(),
            gets: Vec::new(),
            joined: 0,
            filters: Vec::new(),
            sealer: None,
        };
        let Message::Open(open) = evil.recv().unwrap() else {
            panic!("expected Open")
        };
        evil.filters = open.filters.clone();
        let streams = grant.unwrap_or(open.streams);
        // The pacing an honest server would answer: it holds a pull's cap.
        let pacing = if open.rate != 0 {
            Pacing::Kernel
        } else {
            Pacing::None
        };
        evil.send(&opened(streams, pacing, &open.verify));
        while evil.joined < usize::from(streams) {
            let Some(mut d) = accept_within(l, 2) else {
                break;
            };
            evil.joined += 1;
            join(&mut d, psk, &evil.est);
            evil.data.push(d);
        }
        if evil.data.len() == usize::from(streams) {
            loop {
                match evil.recv().unwrap() {
                    Message::Get { path, dest } => evil.gets.push((path, dest)),
                    Message::GetEnd => break,
                    other => panic!("expected Get, got {other:?}"),
                }
            }
        }
        evil
    }

    pub fn send(&mut self, m: &Message) {
        seal_to(&mut self.s, &mut self.est, m);
    }

    pub fn recv(&mut self) -> std::io::Result<Message> {
        open_from(&mut self.s, &mut self.est)
    }

    /// The next message that is not a keep-alive.
    pub fn next(&mut self) -> Message {
        loop {
            match self.recv().unwrap() {
                Message::Progress { .. } => {}
                m => return m,
            }
        }
    }

    /// The client's next message is `EntryDone` for `path`: it made that directory or link
    /// (or set that directory's times).
    pub fn made(&mut self, path: &[u8]) {
        match self.next() {
            Message::EntryDone { path: p } if p == path => {}
            other => panic!("expected EntryDone for {path:?}, got {other:?}"),
        }
    }

    pub fn put(&mut self, id: u32, dest: &[u8], name: &[u8], size: u64) {
        self.send(&Message::PutFile(PutFile {
            file_id: id,
            dest: dest.to_vec(),
            name: name.to_vec(),
            size,
            mode: 0o4755,
            mtime_sec: 1_000_000,
            mtime_nsec: 0,
            chunk_size: 64 * 1024,
            sparse: false,
        }));
    }

    /// The keyed MAC of `bytes` as chunk (`id`, `off`) of this session.
    pub fn mac(&self, id: u32, off: u64, bytes: &[u8]) -> [u8; 32] {
        let mut h = self.est.keys.chunk_hasher(id, off, bytes.len() as u64);
        h.update(bytes);
        *h.finalize().as_bytes()
    }

    /// The file digest of file `id` (`size` bytes in 64 KiB chunks) over these chunk MACs.
    pub fn digest(&self, id: u32, size: u64, macs: &[[u8; 32]]) -> [u8; 32] {
        let mut d = self.est.keys.file_digest(id, size, 65536);
        macs.iter().for_each(|m| d.push(m));
        d.finish()
    }

    /// Writes `bytes` as chunk (`id`, `off`) on data stream 0, header first (in records,
    /// after [`Evil::seal_as`]).
    pub fn chunk(&mut self, id: u32, off: u64, bytes: &[u8]) -> std::io::Result<()> {
        let d = &mut self.data[0];
        let head = ChunkHeader::data(id, off, bytes.len() as u64).encode();
        let Some(sealer) = &mut self.sealer else {
            d.write_all(&head)?;
            return d.write_all(bytes);
        };
        let plain = [&head[..], bytes].concat();
        for piece in plain.chunks(RECORD_MAX) {
            d.write_all(&record(sealer, piece))?;
        }
        Ok(())
    }

    /// From now on, data stream 0 carries records sealed under the key of stream `stream` of
    /// the session `keys` (an honest server: this session's, stream 0); its salt goes first.
    pub fn seal_as(&mut self, keys: &SessionKeys, stream: u16) {
        let salt = [0x3c; 32];
        self.data[0].write_all(&salt).unwrap();
        self.sealer = Some(RecordSealer::new(&keys.stream_key(stream, &salt).unwrap()));
    }

    /// Sends chunk `index` (`bytes` at `off`) of file `id` on stream 0 with its true MAC;
    /// returns the MAC.
    pub fn send_chunk(&mut self, id: u32, index: u64, off: u64, bytes: &[u8]) -> [u8; 32] {
        let mac = self.mac(id, off, bytes);
        self.chunk(id, off, bytes).unwrap();
        self.send(&Message::ChunkMac {
            file_id: id,
            index,
            mac,
        });
        mac
    }

    /// Sends a whole file correctly (64 KiB chunks on stream 0); the client's last answer.
    pub fn send_file(&mut self, id: u32, dest: &[u8], bytes: &[u8]) -> Message {
        let size = bytes.len() as u64;
        self.put(id, dest, b"", size);
        match self.next() {
            Message::FileReady { resumed: false, .. } => {}
            other => return other,
        }
        let mut digest = self.est.keys.file_digest(id, size, 65536);
        let chunks: Vec<&[u8]> = bytes.chunks(65536).collect();
        for (i, c) in chunks.iter().enumerate() {
            let mac = self.send_chunk(id, i as u64, i as u64 * 65536, c);
            digest.push(&mac);
        }
        if chunks.len() > 1 {
            for _ in 0..chunks.len() {
                match self.next() {
                    Message::ChunkAck { ok: true, .. } => {}
                    other => return other,
                }
            }
        }
        self.send(&Message::FileEnd {
            file_id: id,
            digest: digest.finish(),
        });
        self.next()
    }

    /// Ends the session as a real server would: stream ends, `Finish`, `Stats` both ways.
    pub fn finish(&mut self) {
        let end = ChunkHeader::end().encode();
        for (i, d) in self.data.iter_mut().enumerate() {
            match (&mut self.sealer, i) {
                // Stream 0 of an encrypted session: its end marker in a record.
                (Some(sealer), 0) => {
                    let _ = d.write_all(&record(sealer, &end));
                }
                _ => {
                    let _ = d.write_all(&end);
                }
            }
        }
        self.send(&Message::Finish);
        let end = Instant::now() + Duration::from_secs(10);
        while Instant::now() < end {
            match self.recv() {
                Ok(Message::Stats(_)) => {
                    self.send(&Message::Stats(SideStats::default()));
                    return;
                }
                Ok(_) => {}
                Err(_) => return,
            }
        }
    }
}

/// `plain` as one record of an encrypted data stream.
fn record(sealer: &mut RecordSealer, plain: &[u8]) -> Vec<u8> {
    let mut r = vec![0u8; RECORD_PREFIX];
    r.extend_from_slice(plain);
    r.extend_from_slice(&[0; AEAD_TAG_LEN]);
    sealer.seal(&mut r).unwrap();
    r
}

/// An [`Evil`] making moves on a thread of its own (see [`Evil::chatter`]).
pub struct Chatter {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<Evil>,
}

impl Evil {
    /// Makes move `turn(evil, i)` for `i` in `0..turns`, `every` apart, on a thread of its
    /// own (while the test waits for the client) until [`Chatter::stop`].
    pub fn chatter(
        self,
        turns: u32,
        every: Duration,
        mut turn: impl FnMut(&mut Evil, u32) + Send + 'static,
    ) -> Chatter {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            let mut evil = self;
            std::thread::spawn(move || {
                for i in 0..turns {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    turn(&mut evil, i);
                    std::thread::sleep(every);
                }
                evil
            })
        };
        Chatter { stop, thread }
    }
}

impl Chatter {
    /// Stops the moves; the server, for the rest of the test.
    pub fn stop(self) -> Evil {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// `zcp get` of `paths` from the evil server into `dest`, started, not waited for.
pub fn get(port: u16, key: &Path, paths: &[&str], dest: &Path, extra: &[&str]) -> Child {
    let mut c = zcp();
    c.args(["get", "-i", "0", "-p", &port.to_string(), "--key-file"])
        .arg(key)
        .args(extra);
    for p in paths {
        c.arg(format!("127.0.0.1::{p}"));
    }
    c.arg(dest)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `zcp ls` of `paths` on the evil server, started, not waited for.
pub fn ls(port: u16, key: &Path, paths: &[&str], extra: &[&str]) -> Child {
    ls_cmd(port, key, extra, paths)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A `zcp ls` of `paths` and the malicious server that accepted it (granting no streams,
/// as a listing asks), its `Get`s read.
pub fn evil_ls(env: &Env, paths: &[&str], extra: &[&str]) -> (Child, Evil) {
    let (l, port) = listener();
    let child = ls(port, &env.key, paths, extra);
    let evil = Evil::accept(&l, &env.psk(), Some(0));
    (child, evil)
}

/// `zcp send -i 0` of `src` to the evil server's `dest`, started, not waited for.
pub fn send(port: u16, key: &Path, src: &Path, dest: &str, extra: &[&str]) -> Child {
    let mut args = vec!["-i", "0"];
    args.extend_from_slice(extra);
    send_cmd(port, key, src, dest, &args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A `zcp get` of `paths` into `dest` with `extra` flags, and the malicious server that
/// accepted it (granting the streams asked for).
pub fn evil_get(env: &Env, paths: &[&str], dest: &Path, extra: &[&str]) -> (Child, Evil) {
    evil_get_granting(env, paths, dest, extra, None)
}

/// [`evil_get`], the server granting `grant` streams whatever the client asked for.
pub fn evil_get_granting(
    env: &Env,
    paths: &[&str],
    dest: &Path,
    extra: &[&str],
    grant: Option<u16>,
) -> (Child, Evil) {
    let (l, port) = listener();
    let child = get(port, &env.key, paths, dest, extra);
    let evil = Evil::accept(&l, &env.psk(), grant);
    (child, evil)
}

/// A malicious server: authenticates one client on `l`, reads its `Open`, answers with what
/// `reply` makes of it, and returns the `Open` once the client has closed its control
/// connection (or its read timed out: the test then fails on the client's exit).
pub fn answer_open(l: &TcpListener, env: &Env, reply: impl FnOnce(&Open) -> Message) -> Open {
    let (mut s, mut est) = handshake(l, &env.psk(), 4);
    let (h, p) = read_msg(&mut s).unwrap();
    let Ok(Message::Open(open)) = est.opener.open(h, &p) else {
        panic!("expected Open")
    };
    s.write_all(&est.sealer.seal(&reply(&open))).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    *open
}
