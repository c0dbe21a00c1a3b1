//! Memory a UDP peer can make the other side hold (issue 24, class 2). Each side keeps its
//! chunk buffers — read and announced, in flight, awaiting `Done`, kept for reuse — within its
//! own 128 MiB per session, whatever the peer's `Hello` claims:
//! - a client pulls a sparse 8 GiB file over UDP in 64 MiB chunks, claims a budget of
//!   2^64 − 1 and never answers an announcement with `Ready` (`zcp serve` must not read on);
//! - a server a real `zcp send --transport udp --chunk-size 16M` pushes to does the same;
//! - a client announces chunks of growing sizes and sends each whole, so `zcp serve` would
//!   keep a buffer of every size for reuse;
//! - and over TCP, a client pulls on 16 streams with 64 MiB blocks for the server's `rw`
//!   engine and reads none of them.
//!
//! Each measures the victim's resident memory (`VmRSS` sampled, and `VmHWM`, its peak, so a
//! short spike between samples counts too) and ends its attack as soon as the growth passes
//! the bound (before the fix it climbed by hundreds of MiB a second). The bound is the
//! budget, 128 MiB, and a 32 MiB margin: what else a session allocates beside chunk buffers
//! (the receive batch of 64 × 64 KiB datagrams, thread stacks, side-channel and frame buffers,
//! allocator arenas of the new threads). Measured with the fix: growth of 129 to 133 MiB in
//! the UDP tests, 1 to 5 MiB beside the buffers, and 144 MiB in the TCP one (16 MiB beside
//! them over its 16 streams, not broken down further); before it, each test passed the bound
//! within a second and stopped there (at 160 to 393 MiB, still climbing).

use std::fs::File;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use zcp_wire::udp::{DatagramHeader, UdpFrame};
use zcp_wire::{Accepted, Established, Message, Open, Pacing, PutFile};

use crate::hostile::peer::*;
use crate::util::*;

const MIB: u64 = 1 << 20;
/// The budget each side holds chunk buffers to, per session.
const BUDGET: u64 = 128 * MIB;
/// What a session may allocate beside its chunk buffers (see the module's note).
const MARGIN: u64 = 32 * MIB;

/// `Open` of a UDP session of one stream with chunks of `chunk` bytes.
fn udp_open(pull: bool, chunk: u64, verify: &str) -> Message {
    Message::Open(Box::new(Open {
        recv_engine: "mem".into(),
        chunk_size: chunk,
        verify: verify.into(),
        transport: "udp".into(),
        ..base_open(pull)
    }))
}

/// A sparse file of `size` bytes: no data, so reading it costs no disk.
fn sparse(path: &std::path::Path, size: u64) {
    File::create(path).unwrap().set_len(size).unwrap();
}

/// `VmRSS` and `VmHWM` (peak) of `pid`, bytes.
fn memory(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Side-channel frames as they come, without waiting long for any.
struct Side {
    s: TcpStream,
    buf: Vec<u8>,
}

impl Side {
    fn new(s: TcpStream) -> Side {
        s.set_read_timeout(Some(Duration::from_millis(20))).unwrap();
        Side { s, buf: Vec::new() }
    }

    fn send(&mut self, f: &UdpFrame) {
        self.s.write_all(&f.encode()).unwrap();
    }

    /// The frames that arrived within one short read.
    fn poll(&mut self) -> Vec<UdpFrame> {
        let mut tmp = [0u8; 16 * 1024];
        match self.s.read(&mut tmp) {
            Ok(0) => panic!("the side channel closed"),
            Ok(n) => self.buf.extend_from_slice(&tmp[..n]),
            Err(_) => {}
        }
        let mut out = Vec::new();
        while let Some((f, used)) = UdpFrame::decode(&self.buf).unwrap() {
            self.buf.drain(..used);
            out.push(f);
        }
        out
    }

    /// Frames until one that `want` matches (within 10 s).
    fn until(&mut self, want: impl Fn(&UdpFrame) -> bool) -> UdpFrame {
        let end = Instant::now() + Duration::from_secs(10);
        let mut pending = std::collections::VecDeque::new();
        loop {
            if pending.is_empty() {
                pending.extend(self.poll());
            }
            while let Some(f) = pending.pop_front() {
                if want(&f) {
                    // What came after it stays for the next read.
                    for rest in pending.into_iter().rev() {
                        self.buf.splice(0..0, rest.encode());
                    }
                    return f;
                }
            }
            assert!(
                Instant::now() < end,
                "no such side-channel frame within 10 s"
            );
        }
    }
}

/// The most `pid`'s resident memory grew over `base` while `step` ran, every 50 ms for
/// `secs` (its peak included), stopping early once it passes the bound; and how many
/// chunks `step` saw announced.
fn watch(pid: u32, base: u64, secs: u64, mut step: impl FnMut() -> usize) -> (u64, usize) {
    let end = Instant::now() + Duration::from_secs(secs);
    let (mut grew, mut announced) = (0, 0);
    while Instant::now() < end {
        announced += step();
        let (rss, hwm) = memory(pid);
        grew = grew.max(rss.max(hwm).saturating_sub(base));
        if grew > BUDGET + MARGIN {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (grew, announced)
}

/// Announcements read from `side` now, never answered.
fn announcements(side: &mut Side) -> usize {
    side.poll()
        .iter()
        .filter(|f| matches!(f, UdpFrame::Announce(_)))
        .count()
}

#[test]
fn a_pull_that_never_readies_its_chunks_holds_the_server_to_its_budget() {
    let env = Env::new();
    let root = env.mkdir("root");
    sparse(&root.join("big.bin"), 8 << 30);
    let want: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(root.join("small.bin"), &want).unwrap();
    let mut srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&udp_open(true, 64 * MIB, "blake3"));
    assert!(matches!(raw.recv().unwrap(), Message::Opened { transport, .. } if transport == "udp"));
    raw.send(&Message::Get {
        path: b"big.bin".to_vec(),
        dest: Vec::new(),
    });
    raw.send(&Message::GetEnd);
    let mut side = Side::new(raw.data(srv.port, 0).unwrap());
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    // We are the receiver: our Hello first, claiming all the memory there is.
    side.send(&UdpFrame::Hello {
        port: udp.local_addr().unwrap().port(),
        payload: 0,
        budget: u64::MAX,
    });
    side.until(|f| matches!(f, UdpFrame::Hello { .. }));
    let id = next_put(&mut raw);
    let (base, _) = memory(srv.pid());
    raw.send(&Message::FileReady {
        file_id: id,
        engine: "mem".into(),
        note: String::new(),
        target: b"big.bin".to_vec(),
        resumed: false,
    });
    let (grew, announced) = watch(srv.pid(), base, 3, || announcements(&mut side));
    eprintln!(
        "zcp serve grew by {} KiB; {announced} chunks announced",
        grew >> 10
    );
    assert!(
        grew <= BUDGET + MARGIN,
        "the server grew by {} MiB ({announced} chunks of 64 MiB announced)",
        grew / MIB
    );
    // It read what its budget holds and no more: 128 MiB is two 64 MiB chunks.
    assert!((1..=2).contains(&announced), "{announced} chunks announced");
    drop(side);
    drop(raw);
    // The source is untouched, the server alive, and an honest get works.
    assert_eq!(
        std::fs::metadata(root.join("big.bin")).unwrap().len(),
        8 << 30
    );
    assert!(srv.alive(), "{}", srv.log());
    let out = env.path("got.bin");
    let mut c = zcp();
    c.args(["get", "-p", &srv.port.to_string(), "--key-file"])
        .arg(&env.key)
        .args(["--transport", "udp", "127.0.0.1::small.bin"])
        .arg(&out);
    let o = run(c, 30);
    assert!(o.status.success(), "{}\n{}", both(&o), srv.log());
    assert_eq!(std::fs::read(&out).unwrap(), want);
}

/// A malicious server on `l` for one `zcp send --transport udp`: the handshake, `Opened`
/// with UDP, the data connections joined; the session and its side channels.
fn evil_udp_server(l: &TcpListener, env: &Env) -> (TcpStream, Established, Vec<TcpStream>) {
    let psk = env.psk();
    let mut s = accept_within(l, 10).expect("the client connects");
    let hello = read_plain(&mut s).unwrap();
    let (state, reply) = zcp_wire::accept(&psk, hello, [9; 32]).unwrap();
    s.write_all(&reply.encode_frame()).unwrap();
    let Accepted::Control(aw) = state else {
        panic!("expected a control connection")
    };
    let (mut est, welcome) = aw
        .on_proof(read_plain(&mut s).unwrap(), [0x5a; 16], 16)
        .unwrap();
    s.write_all(&welcome).unwrap();
    let (h, p) = read_msg(&mut s).unwrap();
    let Ok(Message::Open(open)) = est.opener.open(h, &p) else {
        panic!("expected Open")
    };
    assert_eq!(open.transport, "udp");
    s.write_all(&est.sealer.seal(&Message::Opened {
        streams: open.streams,
        idle_ms: 60_000,
        pacing: Pacing::None,
        verify: open.verify.clone(),
        transport: "udp".into(),
        udp_mode: "fair".into(),
    }))
    .unwrap();
    let mut data = Vec::new();
    while data.len() < usize::from(open.streams) {
        let mut d = accept_within(l, 10).expect("a data connection");
        let hello = read_plain(&mut d).unwrap();
        let (state, reply) = zcp_wire::accept(&psk, hello, [8; 32]).unwrap();
        d.write_all(&reply.encode_frame()).unwrap();
        let Accepted::Data(aw) = state else {
            panic!("expected a data connection")
        };
        let req = aw.on_join(read_plain(&mut d).unwrap()).unwrap();
        req.verify(&est.keys).unwrap();
        d.write_all(&Message::DataAccept.encode_frame()).unwrap();
        data.push(d);
    }
    (s, est, data)
}

#[test]
fn a_server_that_never_readies_a_pushed_chunk_holds_the_sender_to_its_budget() {
    let env = Env::new();
    let src = env.path("big.bin");
    sparse(&src, 8 << 30);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = send_cmd(
        l.local_addr().unwrap().port(),
        &env.key,
        &src,
        "big.bin",
        &["--transport", "udp", "--chunk-size", "16M", "-i", "0"],
    );
    let child: Child = c
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut s, mut est, data) = evil_udp_server(&l, &env);
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut sides: Vec<Side> = data.into_iter().map(Side::new).collect();
    for side in &mut sides {
        side.send(&UdpFrame::Hello {
            port: udp.local_addr().unwrap().port(),
            payload: 0,
            budget: u64::MAX,
        });
        side.until(|f| matches!(f, UdpFrame::Hello { .. }));
    }
    let put = loop {
        let (h, p) = read_msg(&mut s).unwrap();
        if let Ok(Message::PutFile(put)) = est.opener.open(h, &p) {
            break put;
        }
    };
    let (base, _) = memory(child.id());
    s.write_all(&est.sealer.seal(&Message::FileReady {
        file_id: put.file_id,
        engine: "rw".into(),
        note: String::new(),
        target: b"big.bin".to_vec(),
        resumed: false,
    }))
    .unwrap();
    let (grew, announced) = watch(child.id(), base, 3, || {
        sides.iter_mut().map(announcements).sum()
    });
    // The server goes away: the send ends, fails, and says so.
    drop(sides);
    drop(s);
    let o = wait_output(child, 30);
    eprintln!(
        "zcp send grew by {} KiB; {announced} chunks announced",
        grew >> 10
    );
    assert!(
        grew <= BUDGET + MARGIN,
        "zcp send grew by {} MiB ({announced} chunks of 16 MiB announced)",
        grew / MIB
    );
    // 128 MiB is eight 16 MiB chunks; it announced what it read.
    assert!((1..=8).contains(&announced), "{announced} chunks announced");
    assert!(!o.status.success(), "{}", both(&o));
    assert!(text(&o.stderr).contains("failed"), "{}", both(&o));
    // The source is untouched.
    assert_eq!(std::fs::metadata(&src).unwrap().len(), 8 << 30);
}

fn gram(tag: [u8; 8], file: u32, offset: u64, payload: &[u8]) -> Vec<u8> {
    let mut d = DatagramHeader {
        tag,
        file_id: file,
        flags: 0,
        len: payload.len() as u16,
        offset,
        sent_us: 1,
    }
    .encode()
    .to_vec();
    d.extend_from_slice(payload);
    d
}

/// Sends chunk `(file, len)` whole: its datagrams (paced so the server's socket keeps up),
/// its `Sent` mark, and whatever it NAKs, until it is `Done`.
fn send_whole(side: &mut Side, udp: &UdpSocket, tag: [u8; 8], file: u32, len: u64) {
    const PAYLOAD: u64 = 61_440;
    let body = vec![0x5a_u8; PAYLOAD as usize];
    let grams = len.div_ceil(PAYLOAD);
    let mut sent = 0u64;
    let mut send = |g: u64| {
        let n = PAYLOAD.min(len - g * PAYLOAD) as usize;
        let _ = udp.send(&gram(tag, file, g * PAYLOAD, &body[..n]));
        // About 1 MiB a millisecond: a socket buffer of any size drains between bursts.
        sent += 1;
        if sent.is_multiple_of(16) {
            std::thread::sleep(Duration::from_millis(1));
        }
    };
    (0..grams).for_each(&mut send);
    side.send(&UdpFrame::Sent {
        file_id: file,
        offset: 0,
    });
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        assert!(Instant::now() < end, "chunk of file {file} never done");
        for f in side.poll() {
            match f {
                UdpFrame::Done { file_id, .. } if file_id == file => return,
                UdpFrame::Nak { ranges, .. } => {
                    for (s, n) in ranges {
                        (u64::from(s)..u64::from(s) + u64::from(n)).for_each(&mut send);
                    }
                }
                _ => {}
            }
        }
    }
}

#[test]
fn chunks_of_growing_sizes_do_not_make_the_server_keep_every_size() {
    let env = Env::new();
    let root = env.mkdir("root");
    let mut srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&udp_open(false, 0, "none"));
    assert!(matches!(raw.recv().unwrap(), Message::Opened { .. }));
    let mut side = Side::new(raw.data(srv.port, 0).unwrap());
    let UdpFrame::Hello { port, budget, .. } = side.until(|f| matches!(f, UdpFrame::Hello { .. }))
    else {
        unreachable!()
    };
    assert!(budget <= BUDGET, "a budget of {budget} bytes claimed");
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.connect(("127.0.0.1", port)).unwrap();
    side.send(&UdpFrame::Hello {
        port: udp.local_addr().unwrap().port(),
        payload: 61_440,
        budget: 0,
    });
    let tag = raw.est.keys.udp_tag();
    let (base, _) = memory(srv.pid());
    let mut grew = 0;
    // Files of one chunk each, 32, 64, 96 and 128 MiB: each buffer is too small for the
    // next, so a receiver keeping every finished one for reuse holds 320 MiB.
    for (id, mib) in [32u64, 64, 96, 128].into_iter().enumerate() {
        let (id, len) = (id as u32, mib * MIB);
        raw.send(&Message::PutFile(PutFile {
            file_id: id,
            dest: format!("f{id}").into_bytes(),
            name: b"f".to_vec(),
            size: len,
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            chunk_size: 128 * MIB,
            sparse: false,
        }));
        match raw.recv().unwrap() {
            Message::FileReady { .. } => {}
            other => panic!("expected FileReady, got {other:?}"),
        }
        side.send(&UdpFrame::Announce(zcp_wire::ChunkHeader::data(id, 0, len)));
        side.until(|f| matches!(f, UdpFrame::Ready { file_id, .. } if *file_id == id));
        send_whole(&mut side, &udp, tag, id, len);
        let (rss, hwm) = memory(srv.pid());
        grew = rss.max(hwm).saturating_sub(base);
        if grew > BUDGET + MARGIN {
            break;
        }
    }
    eprintln!("zcp serve grew by {} KiB", grew >> 10);
    assert!(
        grew <= BUDGET + MARGIN,
        "the server grew by {} MiB\n{}",
        grew / MIB,
        srv.log()
    );
    side.send(&UdpFrame::End);
    drop(side);
    drop(raw);
    // Nothing was committed (no file was ended), nothing is left, and the server goes on.
    assert!(no_partials(&root, 10), "{:?}", tree(&root));
    assert!(!(0..4).any(|i| root.join(format!("f{i}")).exists()));
    assert!(srv.alive(), "{}", srv.log());
    let src = env.path("honest.bin");
    make_dense(&src, 300_000, 2);
    let o = run(
        send_cmd(srv.port, &env.key, &src, "h.bin", &["--transport", "udp"]),
        30,
    );
    assert!(o.status.success(), "{}\n{}", both(&o), srv.log());
    assert!(same_file(&src, &root.join("h.bin")));
}

/// The same class over TCP: a pull's client chooses the block size of the server's sending
/// engine, which sizes the `rw` engine's buffer on every stream. 16 streams of 64 MiB
/// blocks were 1 GiB of the server's memory; they are held to 128 MiB per session.
#[test]
fn a_pull_asking_for_huge_blocks_on_every_stream_holds_the_server_to_its_budget() {
    let env = Env::new();
    let root = env.mkdir("root");
    // Allocated, not sparse (over TCP a hole crosses as a few bytes and is never read), and
    // written nowhere: reading it costs no disk either.
    make_file(&root.join("big.bin"), 2 << 30, 1 << 30, 3);
    let mut srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&Message::Open(Box::new(Open {
        streams: 16,
        recv_engine: "mem".into(),
        send_engine: "rw".into(),
        block_size: (64 * MIB) as u32,
        chunk_size: 64 * MIB,
        ..base_open(true)
    })));
    let Message::Opened { streams, .. } = raw.recv().unwrap() else {
        panic!("expected Opened")
    };
    raw.send(&Message::Get {
        path: b"big.bin".to_vec(),
        dest: Vec::new(),
    });
    raw.send(&Message::GetEnd);
    // Every stream joins, and none is ever read: each sender blocks with its buffer full.
    let data: Vec<TcpStream> = (0..streams)
        .map(|i| raw.data(srv.port, i).unwrap())
        .collect();
    let id = next_put(&mut raw);
    let (base, _) = memory(srv.pid());
    raw.send(&Message::FileReady {
        file_id: id,
        engine: "mem".into(),
        note: String::new(),
        target: b"big.bin".to_vec(),
        resumed: false,
    });
    let (grew, _) = watch(srv.pid(), base, 3, || 0);
    eprintln!(
        "zcp serve grew by {} KiB over {streams} streams",
        grew >> 10
    );
    assert!(
        grew <= BUDGET + MARGIN,
        "the server grew by {} MiB over {streams} streams",
        grew / MIB
    );
    drop(data);
    drop(raw);
    assert_eq!(
        std::fs::metadata(root.join("big.bin")).unwrap().len(),
        2 << 30
    );
    assert!(srv.alive(), "{}", srv.log());
}
