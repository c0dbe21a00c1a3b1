//! A hostile or broken peer speaking to a real server: garbage, truncated and oversized frames,
//! forged and replayed data-stream proofs, chunk headers that do not fit the file, bytes that
//! do not match their MAC. The connection is closed, nothing is committed, and the server keeps
//! serving everyone else.

use std::io::Write;
use std::net::{Shutdown, TcpStream};
use std::time::{Duration, Instant};

use zcp_wire::{ChunkHeader, DataClient, ErrorCode, Message, PROTOCOL_VERSION, Role};

use crate::util::*;

fn connect(port: u16) -> TcpStream {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

fn still_serves(srv: &ServerProc, env: &Env) {
    let src = env.path("proof-of-life");
    make_dense(&src, 200_000, 42);
    let o = run(
        send_cmd(srv.port, &env.key, &src, "alive.bin", &["-i", "0"]),
        20,
    );
    assert!(
        o.status.success(),
        "server stopped serving: {}\n{}",
        text(&o.stderr),
        srv.log()
    );
    assert!(same_file(&src, &srv.root.join("alive.bin")));
}

#[test]
fn garbage_truncated_and_oversized_frames_are_refused() {
    let env = Env::new();
    let root = env.mkdir("root");
    let mut srv = ServerProc::start(&root, &env.key, &["--handshake-timeout", "2"]);
    let hello = |role, version| {
        Message::Hello {
            version,
            role,
            nonce: [1; 32],
            identity: (role == Role::Control && version >= 2).then_some([2; 32]),
            share: None,
        }
        .encode_frame()
    };

    let mut cases: Vec<(&str, Vec<u8>)> = vec![
        ("http", b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec()),
        ("truncated header", vec![0, 0]),
        ("truncated body", {
            let mut f = hello(Role::Control, PROTOCOL_VERSION);
            f.truncate(f.len() - 5);
            f
        }),
        ("oversized", vec![0xff, 0xff, 0xff, 0xff, 0x01]),
        ("unknown type", vec![0, 0, 0, 1, 0x77, 0]),
        ("sealed first", vec![0, 0, 0, 0, 0x17]),
        ("bad version", hello(Role::Control, 99)),
    ];
    // A data hello followed by junk instead of a join.
    let mut data_junk = hello(Role::Data, PROTOCOL_VERSION);
    data_junk.extend_from_slice(&[0xde, 0xad, 0xbe, 0xef, 0x00, 0x11, 0x22]);
    cases.push(("data junk", data_junk));

    for (what, bytes) in &cases {
        let mut s = connect(srv.port);
        s.write_all(bytes).unwrap();
        let _ = s.shutdown(Shutdown::Write);
        assert!(
            closes(&mut s, 10),
            "{what}: server kept the connection open"
        );
    }
    // A connection that says nothing is dropped at the handshake deadline...
    let mut silent = connect(srv.port);
    let t = Instant::now();
    // ...while others are served meanwhile.
    still_serves(&srv, &env);
    // Closed at the 2 s deadline; a loaded machine may be late to show it, never early.
    assert!(
        closes(&mut silent, 30),
        "silent connection kept open for {:?}\n{}",
        t.elapsed(),
        srv.log()
    );
    assert!(
        t.elapsed() >= Duration::from_millis(1500),
        "closed too early"
    );
    assert!(srv.alive());
    let log = srv.log();
    assert!(
        log.contains("bad magic") || log.contains("not a zcp"),
        "{log}"
    );
    assert!(log.contains("version"), "{log}");
    assert_eq!(tree(&root), vec!["alive.bin"]);
}

#[test]
fn data_connections_must_prove_their_session() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--max-streams", "2"]);
    let raw = Raw::connect(srv.port, env.psk());

    // A join made with another session's keys.
    let other = Raw::connect(srv.port, env.psk());
    let mut s = connect(srv.port);
    let dc = DataClient::new([3; 32]);
    s.write_all(&dc.hello().encode_frame()).unwrap();
    let ch = read_plain(&mut s).unwrap();
    let forged = dc
        .on_challenge(ch, &other.est.keys, raw.est.session_id, 0)
        .unwrap();
    s.write_all(&forged.encode_frame()).unwrap();
    assert!(matches!(
        read_plain(&mut s).unwrap(),
        Message::Error {
            code: ErrorCode::Auth,
            ..
        }
    ));

    // A valid join replayed on a fresh connection meets a new challenge and fails.
    let mut s = connect(srv.port);
    let dc = DataClient::new([4; 32]);
    s.write_all(&dc.hello().encode_frame()).unwrap();
    let ch = read_plain(&mut s).unwrap();
    let join = dc
        .on_challenge(ch, &raw.est.keys, raw.est.session_id, 0)
        .unwrap();
    s.write_all(&join.encode_frame()).unwrap();
    assert_eq!(read_plain(&mut s).unwrap(), Message::DataAccept);
    let mut replay = connect(srv.port);
    replay.write_all(&dc.hello().encode_frame()).unwrap();
    let _ = read_plain(&mut replay).unwrap();
    replay.write_all(&join.encode_frame()).unwrap();
    assert!(matches!(
        read_plain(&mut replay).unwrap(),
        Message::Error {
            code: ErrorCode::Auth,
            ..
        }
    ));

    // Stream 0 is taken; stream 2 is past the limit of 2.
    assert!(matches!(
        raw.data(srv.port, 0),
        Err(Message::Error {
            code: ErrorCode::Limit,
            ..
        })
    ));
    assert!(matches!(
        raw.data(srv.port, 2),
        Err(Message::Error {
            code: ErrorCode::Limit,
            ..
        })
    ));
    assert!(raw.data(srv.port, 1).is_ok());

    // An unknown session id gets the same answer as a bad proof.
    let mut s = connect(srv.port);
    let dc = DataClient::new([5; 32]);
    s.write_all(&dc.hello().encode_frame()).unwrap();
    let ch = read_plain(&mut s).unwrap();
    let join = dc.on_challenge(ch, &raw.est.keys, [0xAB; 16], 0).unwrap();
    s.write_all(&join.encode_frame()).unwrap();
    assert!(matches!(
        read_plain(&mut s).unwrap(),
        Message::Error {
            code: ErrorCode::Auth,
            ..
        }
    ));
    still_serves(&srv, &env);
}

/// A session with one file of `size` bytes in 64 KiB chunks and an open data stream.
fn session_with_file(srv: &ServerProc, env: &Env, size: u64) -> (Raw, TcpStream) {
    let mut raw = Raw::connect(srv.port, env.psk());
    match raw.put(0, b"target.bin", size) {
        Message::FileReady { .. } => {}
        other => panic!("{other:?}"),
    }
    let data = raw.data(srv.port, 0).unwrap();
    (raw, data)
}

fn mac(raw: &Raw, offset: u64, bytes: &[u8]) -> [u8; 32] {
    let mut h = raw.est.keys.chunk_hasher(0, offset, bytes.len() as u64);
    h.update(bytes);
    *h.finalize().as_bytes()
}

fn digest(raw: &Raw, size: u64, macs: &[[u8; 32]]) -> [u8; 32] {
    let mut d = raw.est.keys.file_digest(0, size, 65536);
    for m in macs {
        d.push(m);
    }
    d.finish()
}

#[test]
fn chunk_headers_that_do_not_fit_the_file_never_commit() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "3"]);
    let size = 100_000u64;
    let bad: Vec<(&str, ChunkHeader)> = vec![
        ("unaligned offset", ChunkHeader::data(0, 4096, 65536)),
        ("past the end", ChunkHeader::data(0, 131072, 10)),
        ("wrong length", ChunkHeader::data(0, 65536, 65536)),
        ("unknown file", ChunkHeader::data(7, 0, 65536)),
    ];
    for (what, h) in bad {
        let (mut raw, mut data) = session_with_file(&srv, &env, size);
        data.write_all(&h.encode()).unwrap();
        let _ = data.write_all(&vec![0u8; 1000]);
        assert!(closes(&mut data, 10), "{what}: data stream kept open");
        raw.send(&Message::FileEnd {
            file_id: 0,
            digest: [0; 32],
        });
        match raw.recv() {
            Ok(Message::FileFailed { code, .. }) => assert_ne!(code, ErrorCode::Verify, "{what}"),
            other => panic!("{what}: {other:?}"),
        }
        assert!(!root.join("target.bin").exists(), "{what}");
    }

    // The same chunk twice.
    let (mut raw, mut data) = session_with_file(&srv, &env, size);
    let chunk = vec![9u8; 65536];
    for _ in 0..2 {
        let _ = data.write_all(&ChunkHeader::data(0, 0, 65536).encode());
        let _ = data.write_all(&chunk);
    }
    assert!(closes(&mut data, 10));
    raw.send(&Message::FileEnd {
        file_id: 0,
        digest: [0; 32],
    });
    assert!(matches!(raw.recv(), Ok(Message::FileFailed { .. })));

    // A chunk missing: the file is failed once no data arrives within the idle timeout.
    let (mut raw, mut data) = session_with_file(&srv, &env, size);
    data.write_all(&ChunkHeader::data(0, 0, 65536).encode())
        .unwrap();
    data.write_all(&chunk).unwrap();
    data.write_all(&ChunkHeader::end().encode()).unwrap();
    let m0 = mac(&raw, 0, &chunk);
    raw.send(&Message::ChunkMac {
        file_id: 0,
        index: 0,
        mac: m0,
    });
    raw.send(&Message::FileEnd {
        file_id: 0,
        digest: digest(&raw, size, &[m0]),
    });
    // Chunk 0 is acknowledged; the early FileEnd waits for chunk 1, which never comes.
    let mut got = Vec::new();
    loop {
        match raw.recv() {
            Ok(Message::FileFailed { .. }) => break,
            Ok(m @ (Message::ChunkAck { ok: true, .. } | Message::Progress { .. }))
                if got.len() < 20 =>
            {
                got.push(m)
            }
            other => panic!("after {got:?}: {other:?}"),
        }
    }
    // Nothing committed; what was verified may stay beside it for a resume.
    assert!(!root.join("target.bin").exists(), "{:?}", tree(&root));
    still_serves(&srv, &env);
}

#[test]
fn a_flipped_byte_is_caught_and_only_that_chunk_is_sent_again() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::write(root.join("target.bin"), b"previous").unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let size = 100_000u64;
    let (mut raw, mut data) = session_with_file(&srv, &env, size);
    let good: Vec<u8> = (0..size).map(|i| (i % 253) as u8).collect();
    let mut bad = good.clone();
    bad[70_000] ^= 0x20;
    let chunk = |off: u64| (off as usize, (off + 65536).min(size) as usize);
    let mut macs = Vec::new();
    for (i, off) in [0u64, 65536].into_iter().enumerate() {
        let (a, b) = chunk(off);
        data.write_all(&ChunkHeader::data(0, off, (b - a) as u64).encode())
            .unwrap();
        data.write_all(&bad[a..b]).unwrap();
        let m = mac(&raw, off, &good[a..b]);
        raw.send(&Message::ChunkMac {
            file_id: 0,
            index: i as u64,
            mac: m,
        });
        macs.push(m);
    }
    // Chunk 0 is acknowledged; chunk 1 is refused and forgotten.
    let mut acks = Vec::new();
    while acks.len() < 2 {
        match raw.recv_any().unwrap() {
            Message::ChunkAck { index, ok, .. } => acks.push((index, ok)),
            Message::Progress { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    acks.sort();
    assert_eq!(acks, vec![(0, true), (1, false)]);
    // Sent again, correctly, with its MAC again: acknowledged, and the file commits right.
    let (a, b) = chunk(65536);
    data.write_all(&ChunkHeader::data(0, 65536, (b - a) as u64).encode())
        .unwrap();
    data.write_all(&good[a..b]).unwrap();
    raw.send(&Message::ChunkMac {
        file_id: 0,
        index: 1,
        mac: macs[1],
    });
    loop {
        match raw.recv_any().unwrap() {
            Message::ChunkAck {
                index: 1, ok: true, ..
            } => break,
            Message::Progress { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    data.write_all(&ChunkHeader::end().encode()).unwrap();
    raw.send(&Message::FileEnd {
        file_id: 0,
        digest: digest(&raw, size, &macs),
    });
    assert!(matches!(
        raw.recv().unwrap(),
        Message::FileCommitted {
            verified: true,
            stored: true,
            ..
        }
    ));
    assert_eq!(std::fs::read(root.join("target.bin")).unwrap(), good);
    assert!(no_partials(&root, 10));
}

#[test]
fn the_real_sender_recovers_from_a_corrupted_data_stream() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let src = env.path("src");
    make_dense(&src, 4 << 20, 3);
    // Flip one payload byte on the first data connection, well inside the first chunk.
    let proxy = FlipProxy::start(srv.port, 1, 100_000);
    let (o, v) = send_json(
        proxy.port,
        &env.key,
        &src,
        "out.bin",
        &["--chunk-size", "1M"],
        60,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert!(proxy.flipped(), "the proxy flipped nothing");
    assert_eq!(v["end"]["resume"]["chunks_resent"], 1, "{v}");
    assert!(same_file(&src, &root.join("out.bin")));
    assert!(no_partials(&root, 10));
}

#[test]
fn a_tampered_control_frame_ends_the_session() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::connect(srv.port, env.psk());
    let mut frame = raw.est.sealer.seal(&Message::Finish);
    let last = frame.len() - 1;
    frame[last] ^= 1;
    raw.s.write_all(&frame).unwrap();
    assert!(closes(&mut raw.s, 10));
    assert!(srv.wait_log("failed authentication", 5), "{}", srv.log());
    still_serves(&srv, &env);
}
