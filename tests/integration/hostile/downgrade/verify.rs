//! The verify mode from the network: a client's `Open.verify` (an unknown mode, or `none`
//! with bytes that match nothing and frames an unverified session never sends) against
//! `zcp serve`, and a server whose `Opened` names another mode than the client asked for.
//! Without verification the receiver stores what it is sent — that is what `none` means —
//! but every bound holds: paths beneath the root, chunks within the plan, nothing under a
//! final name before its file is complete, and the server goes on.

use std::io::Write;
use std::net::TcpListener;

use zcp_wire::{ChunkHeader, ErrorCode, Message, Open, Pacing};

use crate::hostile::peer::*;
use crate::util::*;

fn open(verify: &str) -> Open {
    Open {
        verify: verify.into(),
        ..base_open(false)
    }
}

/// A push session that asked for `verify`, its one data stream joined.
fn session(srv: &ServerProc, env: &Env, verify: &str) -> (Raw, std::net::TcpStream) {
    let (raw, opened) = Raw::open_with(srv.port, env.psk(), open(verify));
    match opened {
        Message::Opened { verify: v, .. } => assert_eq!(v, verify, "the mode is repeated"),
        other => panic!("expected Opened, got {other:?}"),
    }
    let data = raw.data(srv.port, 0).unwrap();
    (raw, data)
}

/// An honest push of a small file still works: the server survived.
fn server_serves(srv: &ServerProc, env: &Env, root: &std::path::Path) {
    let src = env.path("honest.bin");
    make_dense(&src, 200_000, 9);
    let o = run(send_cmd(srv.port, &env.key, &src, "honest.bin", &[]), 30);
    assert!(o.status.success(), "{}\n{}", both(&o), srv.log());
    assert!(same_file(&src, &root.join("honest.bin")));
}

#[test]
fn an_unknown_verify_mode_is_refused_by_name_and_the_server_goes_on() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    for mode in ["crc32", "", "NONE", "\x1b]0;owned\x07none"] {
        let mut raw = Raw::authenticate(srv.port, env.psk());
        raw.send(&Message::Open(Box::new(open(mode))));
        let (code, why) = error_from(&mut raw).expect("an Error");
        assert_eq!(code, ErrorCode::Protocol, "{mode:?}: {why}");
        assert!(
            why.contains("unknown verify mode") && why.contains("(known: blake3, none)"),
            "{mode:?}: {why}"
        );
        // No data stream joins a session that was never opened.
        assert!(raw.data(srv.port, 0).is_err(), "{mode:?}");
    }
    let log = srv.log();
    assert!(log.contains("unknown verify mode"), "{log}");
    assert!(!log.contains('\x1b') && !log.contains('\x07'), "{log:?}");
    assert_eq!(tree(&root), Vec::<String>::new());
    server_serves(&srv, &env, &root);
}

#[test]
fn unverified_bytes_that_match_nothing_are_stored_as_sent_within_every_bound() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::write(env.path("outside"), b"never touched").unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, mut data) = session(&srv, &env, "none");

    // A file of four chunks whose bytes no source has, and no MAC or digest at all (a zero
    // digest is what an honest sender sends; this one sends another): stored exactly as
    // sent, reported unverified.
    let body: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
    assert!(matches!(
        raw.put(0, b"x.bin", body.len() as u64),
        Message::FileReady { resumed: false, .. }
    ));
    for (i, c) in body.chunks(65536).enumerate() {
        let off = i as u64 * 65536;
        data.write_all(&ChunkHeader::data(0, off, c.len() as u64).encode())
            .unwrap();
        data.write_all(c).unwrap();
    }
    // Each chunk counts once written and synced: acknowledged without any MAC.
    raw.acks(0, 4);
    match raw.commit(0, [0xab; 32]) {
        Message::FileCommitted {
            verified, stored, ..
        } => assert!(!verified && stored),
        other => panic!("expected FileCommitted, got {other:?}"),
    }
    assert_eq!(std::fs::read(root.join("x.bin")).unwrap(), body);

    // Paths still stay beneath the root.
    for (id, dest) in [(1u32, &b"../outside"[..]), (2, b"/etc/passwd")] {
        match raw.put(id, dest, 10) {
            Message::FileFailed { code, .. } => assert_eq!(code, ErrorCode::BadPath),
            other => panic!("{}: expected FileFailed, got {other:?}", text(dest)),
        }
    }

    // A chunk that breaks the plan still closes its stream before a byte lands, and the file
    // never gets its name.
    assert!(matches!(
        raw.put(3, b"y.bin", 200_000),
        Message::FileReady { .. }
    ));
    data.write_all(&ChunkHeader::data(3, 100, 65536).encode())
        .unwrap();
    let _ = data.write_all(&[0x55; 65536]);
    assert!(closes(&mut data, 10), "the data stream stays open");
    raw.send(&Message::FileEnd {
        file_id: 3,
        digest: [0; 32],
    });
    wait_for(&mut raw, 10, "FileFailed", |m| {
        matches!(m, Message::FileFailed { file_id: 3, .. })
    });
    assert!(srv.wait_log("not a chunk boundary", 10), "{}", srv.log());
    drop(data);
    drop(raw);
    assert!(no_partials(&root, 10), "{:?}", tree(&root));
    assert_eq!(tree(&root), ["x.bin"]);
    assert_eq!(
        std::fs::read(env.path("outside")).unwrap(),
        b"never touched"
    );
    server_serves(&srv, &env, &root);
}

#[test]
fn a_mac_in_a_session_without_verification_ends_it_with_nothing_committed() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, mut data) = session(&srv, &env, "none");
    let body = vec![0x42u8; 200_000];
    assert!(matches!(
        raw.put(0, b"m.bin", body.len() as u64),
        Message::FileReady { .. }
    ));
    let c = &body[..65536];
    data.write_all(&ChunkHeader::data(0, 0, 65536).encode())
        .unwrap();
    data.write_all(c).unwrap();
    // A MAC the session never asked for: a protocol error, said, and the session ends.
    let mac = mac_of(&raw, 0, 0, c);
    raw.send(&Message::ChunkMac {
        file_id: 0,
        index: 0,
        mac,
    });
    let (code, why) = error_from(&mut raw).expect("an Error");
    assert_eq!(code, ErrorCode::Protocol, "{why}");
    assert!(why.contains("does not verify"), "{why}");
    drop(data);
    drop(raw);
    assert!(no_partials(&root, 10), "{:?}", tree(&root));
    assert_eq!(tree(&root), Vec::<String>::new());
    server_serves(&srv, &env, &root);
}

/// A malicious server: answers a `zcp get`'s `Open` with `verify`; returns what the client
/// asked for.
fn answer_with(l: &TcpListener, env: &Env, verify: &str) -> String {
    answer_open(l, env, |_| opened(1, Pacing::None, verify)).verify
}

#[test]
fn a_server_answering_another_verify_mode_is_refused_before_any_stream() {
    let env = Env::new();
    // (what the client asks for, what the server answers)
    let cases = [
        ("blake3", "none"),
        ("none", "blake3"),
        ("blake3", ""),
        ("blake3", "\x1b[2Jnone"),
    ];
    for (asked, answered) in cases {
        let dest = victim_dest(&env);
        let (l, port) = listener();
        let extra = ["--verify", asked];
        let child = get(port, &env.key, &["want.bin"], &dest.join("got"), &extra);
        let heard = answer_with(&l, &env, answered);
        assert_eq!(heard, asked, "the client says what it wants");
        let o = wait_output(child, 20);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{asked}/{answered:?}: {}",
            both(&o)
        );
        let err = text(&o.stderr);
        assert!(
            err.contains("verify mode") && err.contains(&format!("a request for '{asked}'")),
            "{err}"
        );
        no_control_bytes(&o);
        // No data stream was opened, and nothing of the user's was touched or added.
        l.set_nonblocking(true).unwrap();
        assert!(l.accept().is_err(), "a data stream connected");
        assert_eq!(tree(&dest), ["keep.txt", "private"], "{asked}/{answered:?}");
        std::fs::remove_dir_all(&dest).unwrap();
    }
}
