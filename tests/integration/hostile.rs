//! The hostile-peer harness: a malicious *server* that holds the key and answers `zcp get`
//! ([`Evil`]), and a malicious *client* ([`Raw`], extended here) against a real `zcp serve`.
//! Both are built on zcp-wire and send any frame in any order. Every test asserts what is on
//! disk afterwards, not only the exit code.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use zcp_wire::{
    Accepted, ChunkHeader, ErrorCode, Established, Have, Message, Open, Psk, PutFile, SideStats,
};

use crate::util::*;

/// A malicious server with an authenticated session to one `zcp get`.
struct Evil {
    s: TcpStream,
    est: Established,
    data: Vec<TcpStream>,
    /// The client's `Get`s: (path, the name it chose).
    gets: Vec<(Vec<u8>, Vec<u8>)>,
    /// Data connections that reached us.
    joined: usize,
}

fn read_timeout(s: &TcpStream) {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
}

/// Accepts one connection within `secs`.
fn accept_within(l: &TcpListener, secs: u64) -> Option<TcpStream> {
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
    fn accept(l: &TcpListener, psk: &Psk, grant: Option<u16>) -> Evil {
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
        evil.send(&Message::Opened {
            streams,
            idle_ms: 60_000,
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

    fn send(&mut self, m: &Message) {
        let f = self.est.sealer.seal(m);
        let _ = self.s.write_all(&f);
    }

    fn recv(&mut self) -> std::io::Result<Message> {
        let (h, p) = read_msg(&mut self.s)?;
        self.est
            .opener
            .open(h, &p)
            .map_err(|e| std::io::Error::other(e.to_string()))
    }

    /// The next message that is not a keep-alive.
    fn next(&mut self) -> Message {
        loop {
            match self.recv().unwrap() {
                Message::Progress { .. } => {}
                m => return m,
            }
        }
    }

    fn put(&mut self, id: u32, dest: &[u8], name: &[u8], size: u64) {
        self.send(&Message::PutFile(PutFile {
            file_id: id,
            dest: dest.to_vec(),
            name: name.to_vec(),
            size,
            mode: 0o4755,
            mtime_sec: 1_000_000,
            mtime_nsec: 0,
            chunk_size: 64 * 1024,
        }));
    }

    /// Sends a whole file correctly (64 KiB chunks on stream 0); the client's last answer.
    fn send_file(&mut self, id: u32, dest: &[u8], bytes: &[u8]) -> Message {
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
    fn finish(&mut self) {
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
fn get(port: u16, key: &Path, paths: &[&str], dest: &Path, extra: &[&str]) -> Child {
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

/// A destination directory holding things a server must never touch.
fn victim_dest(env: &Env) -> std::path::PathBuf {
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

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn mtime(p: &Path) -> std::time::SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

/// No raw terminal control byte (ESC, BEL, CR) in anything the client printed.
fn no_control_bytes(o: &Output) {
    for b in [0x1b_u8, 0x07, b'\r'] {
        assert!(
            !o.stdout.contains(&b) && !o.stderr.contains(&b),
            "raw byte {b:#x} printed: {:?}",
            both(o)
        );
    }
}

#[test]
fn a_benign_pull_through_the_harness_stores_the_file() {
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let dest = env.mkdir("dest");
    let child = get(
        l.local_addr().unwrap().port(),
        &env.key,
        &["want.txt"],
        &dest.join("got.txt"),
        &[],
    );
    let mut evil = Evil::accept(&l, &env.psk(), None);
    assert_eq!(evil.gets, vec![(b"want.txt".to_vec(), b"got.txt".to_vec())]);
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    assert!(matches!(
        evil.send_file(0, b"got.txt", &body),
        Message::FileCommitted { verified: true, .. }
    ));
    evil.finish();
    let o = wait_output(child, 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(std::fs::read(dest.join("got.txt")).unwrap(), body);
    assert_eq!(mode(&dest.join("got.txt")), 0o755, "setuid dropped");
    assert_eq!(tree(&dest), vec!["got.txt"]);
}

#[test]
fn get_writes_only_what_it_asked_for() {
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let dest = victim_dest(&env);
    let (priv_mtime, dest_mtime) = (mtime(&dest.join("private")), mtime(&dest));
    let child = get(
        l.local_addr().unwrap().port(),
        &env.key,
        &["want.txt"],
        &dest,
        &[],
    );
    let mut evil = Evil::accept(&l, &env.psk(), None);
    assert_eq!(
        evil.gets,
        vec![(b"want.txt".to_vec(), b"want.txt".to_vec())]
    );
    // Files the client never asked for, and a lone file redirected under a name of the
    // server's choosing.
    let planted: [(&[u8], &[u8]); 6] = [
        (b".ssh/authorized_keys", b""),
        (b"other.txt", b""),
        (b"want.txt/x", b""),
        (b"private/x", b""),
        (b"esc\x1b[31mape", b""),
        (b"want.txt", b"planted"),
    ];
    for (i, (d, n)) in planted.iter().enumerate() {
        evil.put(10 + i as u32, d, n, 5);
        match evil.next() {
            Message::FileFailed { code, message, .. } => {
                assert_eq!(code, ErrorCode::BadPath, "{d:?}: {message}");
            }
            other => panic!("{d:?}: expected FileFailed, got {other:?}"),
        }
    }
    // The existing, unrequested file: no Have (no oracle), and nothing changes.
    evil.put(20, b"keep.txt", b"", 19);
    assert!(matches!(evil.next(), Message::FileFailed { .. }));
    // Links, directories and times outside what was asked for, and on the root itself.
    for m in [
        Message::MakeLink {
            path: b"evil".to_vec(),
            target: b"/etc/passwd".to_vec(),
        },
        Message::MakeDir {
            path: b"newdir".to_vec(),
        },
        Message::MakeDir {
            path: b".".to_vec(),
        },
        Message::DirTimes {
            path: b".".to_vec(),
            mode: 0o777,
            mtime_sec: 0,
            mtime_nsec: 0,
        },
        Message::DirTimes {
            path: b"private/".to_vec(),
            mode: 0o777,
            mtime_sec: 0,
            mtime_nsec: 0,
        },
    ] {
        evil.send(&m);
        assert!(matches!(evil.next(), Message::EntryFailed { .. }), "{m:?}");
    }
    let body = b"the file that was asked for".to_vec();
    assert!(matches!(
        evil.send_file(1, b"want.txt", &body),
        Message::FileCommitted { .. }
    ));
    evil.finish();
    let o = wait_output(child, 30);
    // Some entries arrived and others did not: partial.
    assert_eq!(o.status.code(), Some(23), "{}", both(&o));
    assert!(both(&o).contains("not asked for"), "{}", both(&o));
    assert!(both(&o).contains("esc\\u{1b}[31mape"), "{}", both(&o));
    no_control_bytes(&o);
    assert_eq!(tree(&dest), vec!["keep.txt", "private", "want.txt"]);
    assert_eq!(std::fs::read(dest.join("want.txt")).unwrap(), body);
    assert_eq!(
        std::fs::read(dest.join("keep.txt")).unwrap(),
        b"secret key material"
    );
    assert_eq!(mode(&dest.join("keep.txt")), 0o600);
    assert_eq!(mode(&dest.join("private")), 0o700);
    assert_eq!(mtime(&dest.join("private")), priv_mtime);
    assert_eq!(mode(&dest), 0o750);
    assert!(mtime(&dest) >= dest_mtime);
}

#[test]
fn get_r_accepts_only_entries_beneath_the_requested_directory() {
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let dest = victim_dest(&env);
    let child = get(
        l.local_addr().unwrap().port(),
        &env.key,
        &["data/run42"],
        &dest,
        &["-r"],
    );
    let mut evil = Evil::accept(&l, &env.psk(), None);
    assert_eq!(evil.gets[0].1, b"run42");
    for path in [&b"run42"[..], b"run42/sub"] {
        evil.send(&Message::MakeDir {
            path: path.to_vec(),
        });
    }
    for path in [&b"run42x"[..], b"private/sub"] {
        evil.send(&Message::MakeDir {
            path: path.to_vec(),
        });
        assert!(
            matches!(evil.next(), Message::EntryFailed { .. }),
            "{path:?}"
        );
    }
    assert!(matches!(
        evil.send_file(1, b"run42/sub/a.bin", &[7u8; 70_000]),
        Message::FileCommitted { .. }
    ));
    evil.put(2, b"run42x/b.bin", b"", 3);
    assert!(matches!(evil.next(), Message::FileFailed { .. }));
    // Times with special bits on a directory it made: permission bits only.
    evil.send(&Message::DirTimes {
        path: b"run42".to_vec(),
        mode: 0o7777,
        mtime_sec: 1_000_000,
        mtime_nsec: 0,
    });
    evil.send(&Message::DirTimes {
        path: b"private".to_vec(),
        mode: 0o777,
        mtime_sec: 0,
        mtime_nsec: 0,
    });
    assert!(matches!(evil.next(), Message::EntryFailed { .. }));
    evil.finish();
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(23), "{}", both(&o));
    assert_eq!(
        tree(&dest),
        vec![
            "keep.txt",
            "private",
            "run42",
            "run42/sub",
            "run42/sub/a.bin"
        ]
    );
    assert_eq!(
        mode(&dest.join("run42")),
        0o777,
        "no setuid, setgid or sticky"
    );
    assert_eq!(mode(&dest.join("private")), 0o700);
}

#[test]
fn texts_from_a_hostile_server_never_reach_the_terminal_raw() {
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let dest = env.mkdir("dest");
    let child = get(l.local_addr().unwrap().port(), &env.key, &["f"], &dest, &[]);
    let mut evil = Evil::accept(&l, &env.psk(), None);
    let nasty = "\x1b[2J\x07\rzcp: get: done\nzcp: forged line";
    evil.send(&Message::Notice {
        message: nasty.into(),
    });
    evil.send(&Message::EntryFailed {
        path: b"\x1b]0;title\x07".to_vec(),
        code: ErrorCode::Io,
        message: nasty.into(),
    });
    evil.send(&Message::Error {
        code: ErrorCode::Internal,
        message: nasty.into(),
    });
    let o = wait_output(child, 30);
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    no_control_bytes(&o);
    assert!(!text(&o.stderr).contains("\nzcp: forged"), "{}", both(&o));
    assert!(both(&o).contains("\\u{1b}[2J"), "{}", both(&o));
    assert_eq!(tree(&dest), Vec::<String>::new());
}

#[test]
fn more_streams_than_asked_for_opens_none() {
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let dest = env.mkdir("dest");
    let child = get(
        l.local_addr().unwrap().port(),
        &env.key,
        &["f"],
        &dest,
        &["-P", "1"],
    );
    let evil = Evil::accept(&l, &env.psk(), Some(200));
    assert_eq!(evil.joined, 0, "the client opened data connections");
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        both(&o).contains("more than the 1 asked for"),
        "{}",
        both(&o)
    );
}

#[test]
fn chatter_does_not_keep_a_pull_alive() {
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let dest = env.mkdir("dest");
    let t = Instant::now();
    let child = get(
        l.local_addr().unwrap().port(),
        &env.key,
        &["f"],
        &dest,
        &["--idle-timeout", "2"],
    );
    let mut evil = Evil::accept(&l, &env.psk(), None);
    evil.put(0, b"f", b"", 1 << 20);
    assert!(matches!(evil.next(), Message::FileReady { .. }));
    // Notices forever (bounded here: until the client is gone, or 15 s), never a byte.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let chatter = {
        let done = done.clone();
        std::thread::spawn(move || {
            for _ in 0..150 {
                if done.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                evil.send(&Message::Notice {
                    message: "still here".into(),
                });
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let o = wait_output(child, 30);
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    chatter.join().unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(both(&o).contains("no progress"), "{}", both(&o));
    assert!(t.elapsed() < Duration::from_secs(9), "{:?}", t.elapsed());
    assert!(no_partials(&dest, 5));
}

// ---- a hostile client against a real server ----

/// A `Raw` session of the given direction with one stream joined.
fn raw_open(srv: &ServerProc, env: &Env, pull: bool) -> (Raw, TcpStream) {
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&Message::Open(Open {
        pull,
        recursive: false,
        streams: 1,
        idle_ms: 0,
        recv_engine: "auto".into(),
        send_engine: "sendfile".into(),
        block_size: 0,
        chunk_size: 65536,
    }));
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

/// Sends chunk `i` of `body` (64 KiB chunks) with its MAC.
fn push_chunk(raw: &mut Raw, data: &mut TcpStream, id: u32, body: &[u8], i: usize) -> [u8; 32] {
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
fn error_from(raw: &mut Raw) -> Option<(ErrorCode, String)> {
    for _ in 0..1000 {
        match raw.recv_any() {
            Ok(Message::Error { code, message }) => return Some((code, message)),
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

#[test]
fn go_restart_for_a_file_never_offered_commits_nothing() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, mut data) = raw_open(&srv, &env, false);
    let body = vec![0xabu8; 131072];
    raw.send(&Message::PutFile(PutFile {
        file_id: 0,
        dest: b"t.bin".to_vec(),
        name: Vec::new(),
        size: body.len() as u64,
        mode: 0o644,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size: 65536,
    }));
    assert!(matches!(
        raw.recv().unwrap(),
        Message::FileReady { resumed: false, .. }
    ));
    let macs = [
        push_chunk(&mut raw, &mut data, 0, &body, 0),
        push_chunk(&mut raw, &mut data, 0, &body, 1),
    ];
    let mut acks = 0;
    while acks < 2 {
        if let Message::ChunkAck { ok: true, .. } = raw.recv_any().unwrap() {
            acks += 1;
        }
    }
    raw.send(&Message::Go {
        file_id: 0,
        restart: true,
    });
    let mut d = raw.est.keys.file_digest(0, body.len() as u64, 65536);
    macs.iter().for_each(|m| d.push(m));
    raw.send(&Message::FileEnd {
        file_id: 0,
        digest: d.finish(),
    });
    let (code, why) = error_from(&mut raw).expect("an Error frame before the close");
    assert_eq!(code, ErrorCode::Protocol);
    assert!(why.contains("not offered"), "{why}");
    assert!(srv.wait_log("not offered", 5), "{}", srv.log());
    // Never an all-zero (or any) file under the final name; the verified chunks stay.
    assert!(!root.join("t.bin").exists(), "{:?}", tree(&root));
}

#[test]
fn a_resume_cut_before_go_keeps_the_part_file_and_journal() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let body: Vec<u8> = (0..196_608u32).map(|i| (i % 241) as u8).collect();
    let put = |raw: &mut Raw| {
        raw.send(&Message::PutFile(PutFile {
            file_id: 0,
            dest: b"r.bin".to_vec(),
            name: Vec::new(),
            size: body.len() as u64,
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            chunk_size: 65536,
        }))
    };
    {
        let (mut raw, mut data) = raw_open(&srv, &env, false);
        put(&mut raw);
        assert!(matches!(raw.recv().unwrap(), Message::FileReady { .. }));
        push_chunk(&mut raw, &mut data, 0, &body, 0);
        loop {
            if let Message::ChunkAck { ok: true, .. } = raw.recv_any().unwrap() {
                break;
            }
        }
    }
    let parts = |root: &Path| {
        let mut v: Vec<String> = tree(root)
            .into_iter()
            .filter(|n| n.starts_with(".zcp-"))
            .map(|n| n.rsplit('.').next().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    let end = Instant::now() + Duration::from_secs(10);
    while parts(&root) != ["journal", "part"] && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(parts(&root), ["journal", "part"], "{:?}", tree(&root));
    {
        // Offered for resume, then cut off before Go.
        let (mut raw, _data) = raw_open(&srv, &env, false);
        put(&mut raw);
        let mut haves = 0;
        loop {
            match raw.recv().unwrap() {
                Message::Have(_) => haves += 1,
                Message::FileReady { resumed, .. } => {
                    assert!(resumed);
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(haves > 0);
    }
    let end = Instant::now() + Duration::from_secs(10);
    while srv.log().matches(" failed: ").count() < 2 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(srv.log().matches(" failed: ").count(), 2, "{}", srv.log());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(parts(&root), ["journal", "part"], "{:?}", tree(&root));
    // And a real sender resumes from it.
    let src = env.path("src");
    std::fs::write(&src, &body).unwrap();
    let (o, v) = send_json(
        srv.port,
        &env.key,
        &src,
        "r.bin",
        &["--chunk-size", "64K"],
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(v["end"]["resume"]["bytes_skipped"], 65536, "{v}");
    assert!(same_file(&src, &root.join("r.bin")));
}

#[test]
fn have_floods_end_a_pull_session_and_the_server_serves_on() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::write(root.join("want.bin"), vec![1u8; 200_000]).unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    type Entries = Vec<(u64, [u8; 32])>;
    let cases: [(&str, Entries); 3] = [
        ("duplicate", vec![(0, [0; 32]), (0, [0; 32])]),
        ("out of range", vec![(4, [0; 32])]),
        (
            "more than the chunks",
            (0..1500).map(|i| (i, [0; 32])).collect(),
        ),
    ];
    for (what, entries) in cases {
        let (mut raw, _data) = raw_open(&srv, &env, true);
        let id = loop {
            match raw.recv().unwrap() {
                Message::PutFile(p) => break p.file_id,
                _ => continue,
            }
        };
        for _ in 0..50 {
            raw.send(&Message::Have(Have {
                file_id: id,
                client_nonce: [1; 32],
                server_nonce: [2; 32],
                old_file_id: 0,
                entries: entries.clone(),
            }));
        }
        let (code, why) = error_from(&mut raw).expect(what);
        assert_eq!(code, ErrorCode::Protocol, "{what}: {why}");
        assert!(
            why.contains("Have") || why.contains("chunk"),
            "{what}: {why}"
        );
    }
    // A Have for a file never announced, and after its FileReady: refused as well.
    let (mut raw, _data) = raw_open(&srv, &env, true);
    raw.send(&Message::Have(Have {
        file_id: 77,
        client_nonce: [1; 32],
        server_nonce: [2; 32],
        old_file_id: 0,
        entries: vec![(0, [0; 32])],
    }));
    let (_, why) = error_from(&mut raw).expect("unknown file");
    assert!(why.contains("unknown file"), "{why}");
    assert_eq!(tree(&root), vec!["want.bin"]);
    let src = env.path("alive");
    make_dense(&src, 100_000, 3);
    let o = run(
        send_cmd(srv.port, &env.key, &src, "alive", &["-i", "0"]),
        20,
    );
    assert!(o.status.success(), "{}", both(&o));
}

#[test]
fn a_hostile_client_can_neither_chmod_the_root_nor_forge_log_lines_nor_idle_forever() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::create_dir(root.join("private")).unwrap();
    std::fs::set_permissions(root.join("private"), std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o755)).unwrap();
    let root_mtime = mtime(&root);
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    let nasty = "\x1b[31mred\x07\r\nzcp: session 0000000000000000 finished: 9 files";
    for m in [
        Message::DirTimes {
            path: b".".to_vec(),
            mode: 0o777,
            mtime_sec: 0,
            mtime_nsec: 0,
        },
        Message::DirTimes {
            path: b"private".to_vec(),
            mode: 0o7777,
            mtime_sec: 0,
            mtime_nsec: 0,
        },
        Message::MakeDir {
            path: b"./".to_vec(),
        },
        Message::MakeLink {
            path: b".".to_vec(),
            target: b"/".to_vec(),
        },
        Message::Notice {
            message: nasty.into(),
        },
        Message::EntryFailed {
            path: nasty.as_bytes().to_vec(),
            code: ErrorCode::Io,
            message: nasty.into(),
        },
    ] {
        raw.send(&m);
    }
    // Only chatter from here on: the session ends at the idle timeout all the same.
    let t = Instant::now();
    let mut closed = false;
    let chatter = [
        Message::Notice {
            message: "chatter".into(),
        },
        Message::Finish,
        Message::EntryFailed {
            path: b"x".to_vec(),
            code: ErrorCode::Io,
            message: "again".into(),
        },
        Message::FileAbort {
            file_id: 1234,
            code: ErrorCode::Io,
            message: "nothing".into(),
        },
    ];
    let mut turn = 0;
    while t.elapsed() < Duration::from_secs(10) {
        raw.send(&chatter[turn % chatter.len()]);
        turn += 1;
        raw.s
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        match raw.recv_any() {
            Ok(Message::Error { .. }) => {}
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    assert!(closed, "chatter kept the session open");
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    assert!(srv.wait_log("no progress", 5), "{}", srv.log());
    assert_eq!(mode(&root), 0o755);
    assert_eq!(mtime(&root), root_mtime);
    assert_eq!(mode(&root.join("private")), 0o700);
    let log = srv.log();
    for b in ['\x1b', '\x07', '\r'] {
        assert!(!log.contains(b), "raw {b:?} in the log: {log:?}");
    }
    assert!(
        !log.lines()
            .any(|l| l.starts_with("zcp: session 0000000000000000")),
        "{log}"
    );
    assert!(log.contains("\\u{1b}[31mred"), "{log}");
    assert_eq!(tree(&root), vec!["private"]);
}

#[test]
fn protocol_errors_are_said_and_logged() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    raw.send(&Message::ChunkMac {
        file_id: 99,
        index: 0,
        mac: [0; 32],
    });
    let (code, why) = error_from(&mut raw).expect("an Error frame");
    assert_eq!(code, ErrorCode::Protocol);
    assert!(why.contains("unknown file 99"), "{why}");
    assert!(srv.wait_log("unknown file 99", 5), "{}", srv.log());
    // A chunk header that does not fit its file: the stream closes, the log says why.
    let (mut raw, mut data) = raw_open(&srv, &env, false);
    raw.send(&Message::PutFile(PutFile {
        file_id: 0,
        dest: b"x.bin".to_vec(),
        name: Vec::new(),
        size: 100_000,
        mode: 0o644,
        mtime_sec: 0,
        mtime_nsec: 0,
        chunk_size: 65536,
    }));
    assert!(matches!(raw.recv().unwrap(), Message::FileReady { .. }));
    data.write_all(&ChunkHeader::data(0, 4096, 65536).encode())
        .unwrap();
    assert!(closes(&mut data, 10));
    assert!(srv.wait_log("data stream", 5), "{}", srv.log());
    assert!(!root.join("x.bin").exists());
}

#[test]
fn escapes_planted_links_and_replays_from_a_server_are_refused() {
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let dest = env.mkdir("dest");
    let outside = env.mkdir("outside");
    std::fs::write(outside.join("victim"), b"original").unwrap();
    // A link planted where the requested file goes: never followed, never replaced.
    std::os::unix::fs::symlink(outside.join("victim"), dest.join("want.txt")).unwrap();
    let child = get(
        l.local_addr().unwrap().port(),
        &env.key,
        &["want.txt", "tree"],
        &dest,
        &["-r"],
    );
    let mut evil = Evil::accept(&l, &env.psk(), None);
    for (i, d) in [
        &b"../escape"[..],
        b"/etc/zcp-evil",
        b"tree/../../x",
        b"want.txt",
    ]
    .iter()
    .enumerate()
    {
        evil.put(i as u32, d, b"", 8);
        assert!(matches!(evil.next(), Message::FileFailed { .. }), "{d:?}");
    }
    evil.send(&Message::MakeLink {
        path: b"../link".to_vec(),
        target: b"/".to_vec(),
    });
    assert!(matches!(evil.next(), Message::EntryFailed { .. }));
    // A link inside the requested tree, then a file through it: the link is stored as a
    // link, the file through it is refused.
    evil.send(&Message::MakeDir {
        path: b"tree".to_vec(),
    });
    evil.send(&Message::MakeLink {
        path: b"tree/out".to_vec(),
        target: outside.to_str().unwrap().as_bytes().to_vec(),
    });
    evil.put(10, b"tree/out/victim", b"", 8);
    assert!(matches!(evil.next(), Message::FileFailed { .. }));
    // A sealed frame sent twice: the replay ends the session.
    let frame = evil.est.sealer.seal(&Message::Notice {
        message: "once".into(),
    });
    evil.s.write_all(&frame).unwrap();
    evil.s.write_all(&frame).unwrap();
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert_eq!(std::fs::read(outside.join("victim")).unwrap(), b"original");
    assert_eq!(tree(&outside), vec!["victim"]);
    assert!(
        std::fs::symlink_metadata(dest.join("want.txt"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        std::fs::symlink_metadata(dest.join("tree/out"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(tree(&dest), vec!["tree", "tree/out", "want.txt"]);
    assert!(!env.dir.path().join("escape").exists());
    assert!(!Path::new("/etc/zcp-evil").exists());
}
