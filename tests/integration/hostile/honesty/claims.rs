//! Claims held to the truth: a receiver's `Progress` never names more bytes than its file
//! has (also after a chunk is sent again), and a peer's `Progress` past a file's size, or
//! past the bytes offered for a resume check, is a protocol error that ends the session with
//! nothing changed.

use std::io::Write;
use std::time::{Duration, Instant};

use zcp_wire::{ChunkHeader, ErrorCode, Message};

use crate::hostile::peer::*;
use crate::util::*;

#[test]
fn progress_past_a_files_size_ends_a_pull() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::write(root.join("want.bin"), vec![1u8; 200_000]).unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, _data) = raw_open(&srv, &env, true);
    let id = next_put(&mut raw);
    raw.send(&Message::Progress {
        file_id: id,
        bytes: 1 << 40,
    });
    let (code, why) = error_from(&mut raw).expect("an Error");
    assert_eq!(code, ErrorCode::Protocol);
    assert!(why.contains("Progress of"), "{why}");
    assert_eq!(tree(&root), ["want.bin"]);
}

/// A receiver counts every write of a chunk into the bytes it reports in `Progress`, also a
/// chunk written again after a MAC mismatch (which an honest sender causes when a source
/// changes under a chunk). Its `Progress` then exceeds the file's size, which the sender
/// treats as a protocol error and ends the session for.
/// SAFE: `Progress` never names more bytes than the file has.
#[test]
fn push_progress_stays_within_the_file_after_a_chunk_is_sent_again() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
    let mut d = raw.data(srv.port, 0).unwrap();
    let body = vec![0x42u8; 1000];
    raw.announce(0, b"p.bin", 1000, 65536);
    // Twice the chunk with a MAC that does not match (as after a source changed under it).
    for _ in 0..2 {
        d.write_all(&ChunkHeader::data(0, 0, 1000).encode())
            .unwrap();
        d.write_all(&body).unwrap();
        raw.send(&Message::ChunkMac {
            file_id: 0,
            index: 0,
            mac: [1; 32],
        });
        wait_for(&mut raw, 10, "ChunkAck not ok", |m| {
            matches!(m, Message::ChunkAck { ok: false, .. })
        });
    }
    // The receiver's keep-alives while the file is open.
    let mut most = 0;
    let t = Instant::now();
    raw.s
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    while t.elapsed() < Duration::from_millis(2500) {
        if let Ok(Message::Progress { file_id: 0, bytes }) = raw.recv_any() {
            most = most.max(bytes);
        }
    }
    // Then the file, honestly: it still arrives.
    let mac = push_chunk(&mut raw, &mut d, 0, &body, 0);
    let digest = raw.digest(0, 1000, &[mac]);
    let a = raw.commit(0, digest);
    assert!(matches!(a, Message::FileCommitted { .. }), "{a:?}");
    assert_eq!(std::fs::read(root.join("p.bin")).unwrap(), body);
    assert!(no_partials(&root, 5));
    assert!(
        most <= 1000,
        "GOT THROUGH: the server reported Progress of {most} bytes for a 1000-byte file \
         (an honest zcp client ends the session on that as a protocol error)"
    );
}

/// `Progress` for a file awaiting `Go` that claims more bytes checked than were offered.
/// SAFE: a protocol error ends the session; the existing target is untouched, nothing of
/// zcp's stays.
#[test]
fn push_progress_past_the_offered_bytes_ends_the_session() {
    let env = Env::new();
    let root = env.mkdir("root");
    let size = 1u64 << 20;
    make_dense(&root.join("t.bin"), size, 11);
    let copy = env.path("t.copy");
    std::fs::copy(root.join("t.bin"), &copy).unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    raw.send(&pf(0, b"t.bin", size, 65536));
    loop {
        match next_raw(&mut raw, Duration::from_secs(8), keepalive) {
            Ok(Some(Message::Have(_))) => {}
            Ok(Some(Message::FileReady { resumed: true, .. })) => break,
            other => panic!("{other:?}"),
        }
    }
    raw.send(&Message::Progress {
        file_id: 0,
        bytes: size + 1,
    });
    let (code, why) = error_from(&mut raw).expect("an Error");
    println!("{code:?}: {why}");
    assert_eq!(code, zcp_wire::ErrorCode::Protocol, "GOT THROUGH: {why}");
    assert!(same_file(&copy, &root.join("t.bin")));
    assert!(no_partials(&root, 10), "{:?}", tree(&root));
}
