//! The malicious server and the helpers every hostile test uses.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use zcp_wire::{
    Accepted, ChunkHeader, ErrorCode, Established, Message, Open, Pacing, Psk, PutFile, SideStats,
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

impl Evil {
    /// Runs the real server handshake for one client, grants `grant` streams (default: what
    /// was asked), accepts the data connections that come within 2 s, and reads the `Get`s.
    pub fn accept(l: &TcpListener, psk: &Psk, grant: Option<u16>) -> Evil {
        let mut s = accept_within(l, 10).expect("the client connects");
        let hello = read_plain(&mut s).unwrap();
        let (state, reply) = zcp_wire::accept(psk, hello, [9; 32]).unwrap();
        s.write_all(&reply.encode_frame()).unwrap();
        let Accepted::Control(aw) = state else {
            panic!("expected a control connection")
        };
        let proof = read_plain(&mut s).unwrap();
        let (est, welcome) = aw.on_proof(proof, [0x5a; 16], 16).unwrap();
        s.write_all(&welcome).unwrap();
        let mut evil = Evil {
            s,
            est,
            data: Vec::new(),
            gets: Vec::new(),
            joined: 0,
        };
        let Message::Open(open) = evil.recv().unwrap() else {
            panic!("expected Open")
        };
        let streams = grant.unwrap_or(open.streams);
        // The pacing an honest server would answer: it holds a pull's cap.
        let pacing = if open.rate != 0 {
            Pacing::Kernel
        } else {
            Pacing::None
        };
        evil.send(&Message::Opened {
            streams,
            idle_ms: 60_000,
            pacing,
            verify: open.verify.clone(),
            transport: "tcp".into(),
            udp_mode: "fair".into(),
        });
        while evil.joined < usize::from(streams) {
            let Some(mut d) = accept_within(l, 2) else {
                break;
            };
            evil.joined += 1;
            let hello = read_plain(&mut d).unwrap();
            let (state, reply) = zcp_wire::accept(psk, hello, [8; 32]).unwrap();
            d.write_all(&reply.encode_frame()).unwrap();
            let Accepted::Data(aw) = state else {
                panic!("expected a data connection")
            };
            let req = aw.on_join(read_plain(&mut d).unwrap()).unwrap();
            req.verify(&evil.est.keys).unwrap();
            d.write_all(&Message::DataAccept.encode_frame()).unwrap();
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
        let f = self.est.sealer.seal(m);
        let _ = self.s.write_all(&f);
    }

    pub fn recv(&mut self) -> std::io::Result<Message> {
        let (h, p) = read_msg(&mut self.s)?;
        self.est
            .opener
            .open(h, &p)
            .map_err(|e| std::io::Error::other(e.to_string()))
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
            let off = i as u64 * 65536;
            let mut h = self.est.keys.chunk_hasher(id, off, c.len() as u64);
            h.update(c);
            let mac = *h.finalize().as_bytes();
            digest.push(&mac);
            let d = &mut self.data[0];
            d.write_all(&ChunkHeader::data(id, off, c.len() as u64).encode())
                .unwrap();
            d.write_all(c).unwrap();
            self.send(&Message::ChunkMac {
                file_id: id,
                index: i as u64,
                mac,
            });
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
        for d in &mut self.data {
            let _ = d.write_all(&ChunkHeader::end().encode());
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

/// `zcp get` of `paths` from the evil server into `dest`, started, not waited for.
pub fn get(port: u16, key: &Path, paths: &[&str], dest: &Path, extra: &[&str]) -> Child {
    let mut c = zcp();
    c.args(["get", "-i", "0", "-p", &port.to_string(), "--key-file"])
        .arg(key)
        .args(extra);
    for p in paths {
        c.arg(format!("127.0.0.1:{p}"));
    }
    c.arg(dest)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// A `zcp get` of `paths` into `dest` with `extra` flags, and the malicious server that
/// accepted it (granting the streams asked for).
pub fn evil_get(env: &Env, paths: &[&str], dest: &Path, extra: &[&str]) -> (Child, Evil) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let child = get(l.local_addr().unwrap().port(), &env.key, paths, dest, extra);
    let evil = Evil::accept(&l, &env.psk(), None);
    (child, evil)
}

/// A destination directory holding things a server must never touch.
pub fn victim_dest(env: &Env) -> std::path::PathBuf {
    let dest = env.mkdir("dest");
    std::fs::create_dir(dest.join("private")).unwrap();
    std::fs::set_permissions(dest.join("private"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(dest.join("keep.txt"), b"secret key material").unwrap();
    std::fs::set_permissions(
        dest.join("keep.txt"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    std::fs::set_permissions(&dest, std::fs::Permissions::from_mode(0o750)).unwrap();
    dest
}

pub fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

pub fn mtime(p: &Path) -> std::time::SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

/// No raw terminal control byte (ESC, BEL, CR) in anything the client printed.
pub fn no_control_bytes(o: &Output) {
    for b in [0x1b_u8, 0x07, b'\r'] {
        assert!(
            !o.stdout.contains(&b) && !o.stderr.contains(&b),
            "raw byte {b:#x} printed: {:?}",
            both(o)
        );
    }
}

/// A `Raw` session of the given direction with one stream joined (a pull gets `want.bin`).
pub fn raw_open(srv: &ServerProc, env: &Env, pull: bool) -> (Raw, TcpStream) {
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&open_message(pull, 65536));
    assert!(matches!(raw.recv().unwrap(), Message::Opened { .. }));
    if pull {
        raw.send(&Message::Get {
            path: b"want.bin".to_vec(),
            dest: Vec::new(),
        });
        raw.send(&Message::GetEnd);
    }
    let data = raw.data(srv.port, 0).unwrap();
    (raw, data)
}

/// A malicious server: authenticates one client on `l`, reads its `Open`, answers with what
/// `reply` makes of it, and returns the `Open` once the client has closed its control
/// connection (or its read timed out: the test then fails on the client's exit).
pub fn answer_open(l: &TcpListener, env: &Env, reply: impl FnOnce(&Open) -> Message) -> Open {
    let psk = env.psk();
    let mut s = accept_within(l, 10).expect("the client connects");
    let hello = read_plain(&mut s).unwrap();
    let (state, welcome_reply) = zcp_wire::accept(&psk, hello, [9; 32]).unwrap();
    s.write_all(&welcome_reply.encode_frame()).unwrap();
    let Accepted::Control(aw) = state else {
        panic!("expected a control connection")
    };
    let (mut est, welcome) = aw
        .on_proof(read_plain(&mut s).unwrap(), [0x5a; 16], 4)
        .unwrap();
    s.write_all(&welcome).unwrap();
    let (h, p) = read_msg(&mut s).unwrap();
    let Ok(Message::Open(open)) = est.opener.open(h, &p) else {
        panic!("expected Open")
    };
    s.write_all(&est.sealer.seal(&reply(&open))).unwrap();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    open
}

/// `Open` for one stream of the given direction and chunk size.
pub fn open_message(pull: bool, chunk_size: u64) -> Message {
    Message::Open(Open {
        pull,
        recursive: false,
        streams: 1,
        idle_ms: 0,
        recv_engine: "auto".into(),
        send_engine: "sendfile".into(),
        block_size: 0,
        chunk_size,
        rate: 0,
        verify: "blake3".into(),
        transport: "tcp".into(),
        udp_mode: "fair".into(),
        export: String::new(),
    })
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
    let mut h = raw.est.keys.chunk_hasher(id, off, c.len() as u64);
    h.update(c);
    let mac = *h.finalize().as_bytes();
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

/// A `PutFile` for file `id` at `dest`: `size` bytes in chunks of `chunk_size`.
pub fn pf(id: u32, dest: &[u8], size: u64, chunk_size: u64) -> Message {
    Message::PutFile(zcp_wire::PutFile {
        file_id: id,
        dest: dest.to_vec(),
        name: Vec::new(),
        size,
        mode: 0o644,
        mtime_sec: 1_000_000,
        mtime_nsec: 0,
        chunk_size,
        sparse: false,
    })
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
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("waiting for {what}: {e}; seen {seen:?}"),
        }
    }
    panic!("no {what} within {secs} s; seen {seen:?}")
}

pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

pub fn rss_of(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("RssAnon:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

/// `VmHWM` (peak resident memory) of `pid`, in KiB.
pub fn peak_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

/// `zcp`'s own files (part files, journals) anywhere below `dir`.
pub fn own_files(dir: &Path) -> Vec<String> {
    tree(dir)
        .into_iter()
        .filter(|p| p.rsplit('/').next().unwrap_or("").starts_with(".zcp-"))
        .collect()
}
