//! Memory a peer with the key can make the other side hold: control frames queued while a
//! role is stuck writing (on `zcp serve`, pushing and pulling, and on `zcp get`), the
//! `direct` engine's rings and the `rw`/`mem` engines' buffers of the peer's block size, and
//! the bookkeeping of one deep `MakeDir`. Each test measures the victim's resident memory.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use zcp_wire::{ChunkHeader, ErrorCode, Message, Open};

use crate::hostile::peer::*;
use crate::util::*;

/// A client that never reads its control connection makes the server's loop block on a
/// write (up to the idle timeout); meanwhile the reader thread queues every frame the client
/// sends in an unbounded channel. SAFE: server RSS stays bounded (< 256 MiB growth).
#[test]
fn push_control_flood_while_the_server_is_stuck_writing() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "30"]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
    let _d = raw.data(srv.port, 0).unwrap();
    let pid = srv.pid();
    // Replies the client never reads: refused MakeDirs each answered with EntryFailed.
    let (sent, grown) = flood(
        &mut raw.s,
        &mut raw.est.sealer,
        &Message::MakeDir {
            path: b".".to_vec(),
            top: false,
        },
        200_000,
        &|| rss_of(pid),
    );
    eprintln!("sent {sent} MiB; server grew {grown} MiB");
    assert!(
        grown < 256,
        "GOT THROUGH: server RSS grew by {grown} MiB from control frames it had not handled"
    );
}

/// Stalls the peer's role loop (`stall` frames, each answered, never read), then sends big
/// Notices until `rss()` grew by 1 GiB or 1.2 GiB went out. Returns (sent MiB, grown MiB).
fn flood(
    s: &mut TcpStream,
    sealer: &mut zcp_wire::Sealer,
    stall: &Message,
    n_stall: usize,
    rss: &dyn Fn() -> u64,
) -> (u64, u64) {
    let before = rss();
    let mut frames = Vec::new();
    for _ in 0..n_stall {
        frames.extend_from_slice(&sealer.seal(stall));
    }
    s.set_write_timeout(Some(Duration::from_secs(1))).unwrap();
    let _ = s.write_all(&frames);
    let notice = Message::Notice {
        message: "n".repeat(60_000),
    };
    let t = Instant::now();
    let mut sent = 0u64;
    let mut grown = 0;
    while sent < (1200 << 20) && t.elapsed() < Duration::from_secs(6) {
        let mut batch = Vec::new();
        for _ in 0..64 {
            batch.extend_from_slice(&sealer.seal(&notice));
        }
        if s.write_all(&batch).is_err() {
            break;
        }
        sent += batch.len() as u64;
        grown = rss().saturating_sub(before);
        if grown > 1 << 20 {
            break;
        }
    }
    (sent >> 20, grown >> 10)
}

/// The same flood against `zcp get` by a malicious server: the client's reader thread
/// queues every frame while its loop is stuck writing EntryFailed answers nobody reads.
#[test]
fn pull_control_flood_grows_the_client() {
    let env = Env::new();
    let (l, port) = listener();
    let dest = env.mkdir("dest");
    let mut child = get(
        port,
        &env.key,
        &["want.txt"],
        &dest,
        &["--idle-timeout", "30"],
    );
    // Drain the client's output so only the network can stall it.
    let out = child.stdout.take().unwrap();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || std::io::copy(&mut { out }, &mut std::io::sink()));
    std::thread::spawn(move || std::io::copy(&mut { err }, &mut std::io::sink()));
    let mut evil = Evil::accept(&l, &env.psk(), None);
    let pid = child.id();
    let (sent, grown) = flood(
        &mut evil.s,
        &mut evil.est.sealer,
        &Message::MakeDir {
            path: b"not-asked".to_vec(),
            top: false,
        },
        200_000,
        &|| rss_of(pid),
    );
    let _ = child.kill();
    let _ = child.wait();
    eprintln!("sent {sent} MiB; client grew {grown} MiB");
    assert_eq!(tree(&dest), Vec::<String>::new());
    assert!(
        grown < 256,
        "GOT THROUGH: zcp get grew by {grown} MiB from queued control frames"
    );
}

/// The flood against the server's *sending* role (a pull), stalled by not reading anything
/// (control or data) while the server sends a large file; the server's log goes nowhere.
#[test]
fn pull_server_control_flood() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::File::create(root.join("want.bin"))
        .unwrap()
        .set_len(8 << 30)
        .unwrap();
    let port = listener().1;
    let mut child = zcp()
        .args([
            "serve",
            "--bind",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "--root",
        ])
        .arg(&root)
        .arg("--key-file")
        .arg(&env.key)
        .args(["--idle-timeout", "30"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let pid = child.id();
    let mut raw = Raw::opened(
        port,
        env.psk(),
        Open {
            chunk_size: 64 << 20,
            ..base_open(true)
        },
    );
    raw.get_files(&[b"want.bin"]);
    let _data = raw.data(port, 0).unwrap();
    let id = next_put(&mut raw);
    raw.ready(id, "rw");
    // EntryFailed is logged (to /dev/null here) and never answered: the loop is only as
    // fast as its log; Notices go on behind it.
    let big = "e".repeat(1000);
    let (sent, grown) = flood(
        &mut raw.s,
        &mut raw.est.sealer,
        &Message::EntryFailed {
            path: b"x".to_vec(),
            code: ErrorCode::Io,
            message: big,
        },
        1,
        &|| rss_of(pid),
    );
    let _ = child.kill();
    let _ = child.wait();
    eprintln!("sent {sent} MiB; server grew {grown} MiB");
    assert!(
        grown < 256,
        "GOT THROUGH: serve (pull) grew by {grown} MiB from queued control frames"
    );
}

/// Memory per session: the `direct` ring allocates six buffers of the client's block size
/// per stream, zeroed (so resident) when the stream's first chunk arrives. A client asking
/// for 64 MiB blocks pins 384 MiB of server memory per stream with one 64 KiB chunk: with
/// the default 16 streams and 16 sessions, about 96 GiB.
/// SAFE: four streams with one small chunk each grow the server by less than 256 MiB.
#[test]
fn push_direct_rings_pin_server_memory_per_stream() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    const STREAMS: u16 = 4;
    let mut raw = Raw::opened(
        srv.port,
        env.psk(),
        Open {
            streams: STREAMS,
            recv_engine: "direct".into(),
            block_size: 64 << 20,
            ..base_open(false)
        },
    );
    let mut data: Vec<TcpStream> = (0..STREAMS)
        .map(|i| raw.data(srv.port, i).unwrap())
        .collect();
    let before = srv.rss_kib();
    let body = vec![0x61u8; usize::from(STREAMS) * 65536];
    raw.announce(0, b"m.bin", body.len() as u64, 65536);
    for (i, d) in data.iter_mut().enumerate() {
        push_chunk(&mut raw, d, 0, &body, i);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let after = srv.rss_kib();
    let grown = after.saturating_sub(before) >> 10;
    eprintln!("server RSS {before} KiB -> {after} KiB (+{grown} MiB) for 256 KiB of data");
    // The file itself arrives.
    let macs: Vec<[u8; 32]> = body
        .chunks(65536)
        .enumerate()
        .map(|(i, c)| mac_of(&raw, 0, i as u64 * 65536, c))
        .collect();
    let digest = raw.digest(0, body.len() as u64, &macs);
    let a = raw.commit(0, digest);
    assert!(matches!(a, Message::FileCommitted { .. }), "{a:?}");
    assert_eq!(std::fs::read(root.join("m.bin")).unwrap(), body);
    assert!(
        grown < 256,
        "GOT THROUGH: {STREAMS} streams with one 64 KiB chunk each grew the server by \
         {grown} MiB (64 MiB blocks x 6 ring buffers per stream)"
    );
}

/// One `MakeDir` of a 4 KiB path of 2047 one-byte components ("a/a/.../a"). The receiver
/// records every directory it made as a list of its components, each prefix copied whole:
/// 2047 * 2048 / 2 = 2.1 million small allocations (about 120 MiB) for one 4 KiB frame, and
/// again for every such frame (on a pulling client, from a malicious server, the same).
/// SAFE: one 4 KiB frame costs the receiver well under 64 MiB of memory.
#[test]
fn one_deep_makedir_costs_the_receiver_o_depth_squared_memory() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    sync_after(
        &mut raw,
        &Message::Notice {
            message: "hi".into(),
        },
        0,
    );
    let before = peak_kib(srv.pid());
    let deep = vec!["a"; 2047].join("/").into_bytes();
    assert!(deep.len() <= 4096);
    let t = Instant::now();
    sync_after(
        &mut raw,
        &Message::MakeDir {
            path: deep,
            top: false,
        },
        1,
    );
    let took = t.elapsed();
    let after = peak_kib(srv.pid());
    let grown = after.saturating_sub(before) / 1024;
    println!("one deep MakeDir: server peak RSS +{grown} MiB, {took:?}");
    assert!(root.join("a/a/a").is_dir(), "the directories were made");
    assert!(
        grown < 64,
        "GOT THROUGH: one 4 KiB MakeDir grew the server's peak memory by {grown} MiB"
    );
}

/// Round 3 capped the `direct` rings at 128 MiB per session. The `rw` and `mem` engines keep
/// a buffer of the client's block size per stream (up to 64 MiB) and `read` into it as much
/// as the socket holds, so its pages fill up to the socket's receive buffer (32 MiB here;
/// more where `zcp doctor`'s advice raised `tcp_rmem` for a long fat path, up to the whole
/// 64 MiB block). A key holder asking for `mem` (or `rw`), 64 MiB blocks and 64 MiB chunks
/// on 16 streams and sending fast makes one session hold 200-270 MiB (measured), for the
/// session's life; 16 sessions several GiB, against the 2 GiB the direct rings are held to.
/// SAFE: the session's receive buffers stay within the 128 MiB the direct rings get.
#[test]
fn rw_and_mem_receive_buffers_escape_the_sessions_memory_budget() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    const STREAMS: u16 = 16;
    const CHUNK: u64 = 64 << 20;
    const PER_STREAM: u64 = 2;
    let mut raw = Raw::opened(
        srv.port,
        env.psk(),
        Open {
            streams: STREAMS,
            recv_engine: "mem".into(),
            block_size: 64 << 20,
            ..base_open(false)
        },
    );
    let data: Vec<TcpStream> = (0..STREAMS)
        .map(|i| raw.data(srv.port, i).unwrap())
        .collect();
    let before = peak_kib(srv.pid());
    let size = u64::from(STREAMS) * PER_STREAM * CHUNK;
    raw.send(&pf(0, b"m.bin", size, CHUNK));
    assert!(matches!(raw.recv().unwrap(), Message::FileReady { .. }));
    let writers: Vec<_> = data
        .into_iter()
        .enumerate()
        .map(|(i, mut d)| {
            std::thread::spawn(move || {
                let zeros = vec![0u8; 8 << 20];
                for k in 0..PER_STREAM {
                    let index = k * u64::from(STREAMS) + i as u64;
                    d.write_all(&ChunkHeader::data(0, index * CHUNK, CHUNK).encode())
                        .unwrap();
                    for _ in 0..CHUNK / zeros.len() as u64 {
                        d.write_all(&zeros).unwrap();
                    }
                }
                d
            })
        })
        .collect();
    let data: Vec<TcpStream> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    std::thread::sleep(Duration::from_millis(500));
    let grown = peak_kib(srv.pid()).saturating_sub(before) >> 10;
    println!("{STREAMS} mem streams, 64 MiB blocks: server peak RSS +{grown} MiB");
    drop(data);
    assert!(
        grown < 160,
        "GOT THROUGH: one session's {STREAMS} mem streams grew the server by {grown} MiB, \
         past the 128 MiB a session's direct rings may take"
    );
}
