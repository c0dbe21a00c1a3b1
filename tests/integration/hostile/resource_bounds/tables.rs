//! What a peer with the key can make the other side keep per session: chunk tables (files
//! of the most chunks, the session's limit, a chunk plan past the per-file limit), offered
//! chunks (`Have`) held to a byte budget however they are split, and floods of `Have`s that
//! break the rules. Each ends the file or the session; the server serves on.

use std::io::Write;
use std::time::{Duration, Instant};

use zcp_wire::{ErrorCode, Have, Message, Open, PutFile};

use crate::hostile::peer::*;
use crate::util::*;

/// A sparse file of `size` bytes (no data blocks).
fn sparse(path: &std::path::Path, size: u64) {
    std::fs::File::create(path).unwrap().set_len(size).unwrap();
}

#[test]
fn a_client_cannot_make_the_server_hold_chunk_tables_past_the_session_limit() {
    // The null engine stores nothing and preallocates nothing: only the bookkeeping grows.
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "null", 1);
    let before = srv.rss_kib();
    let put = |raw: &mut Raw, id: u32| {
        raw.send(&Message::PutFile(PutFile {
            mtime_sec: 0,
            ..put_file(id, format!("f{id}").as_bytes(), 16 << 30, 64 << 10)
        }));
        raw.recv().unwrap()
    };
    // 16 GiB in 64 KiB chunks: 2^18 chunks, the most one file may have. Two fill the
    // session's 2^19; every file after that is refused until one is done.
    let answers: Vec<Message> = (0..6u32).map(|id| put(&mut raw, id)).collect();
    for (id, a) in answers.iter().enumerate() {
        match (id, a) {
            (0 | 1, Message::FileReady { .. }) => {}
            (2.., Message::FileFailed { code, message, .. }) => {
                assert_eq!(*code, ErrorCode::Limit, "{message}");
                assert!(message.contains("session's limit"), "{message}");
            }
            other => panic!("{other:?}"),
        }
    }
    let grown = srv.rss_kib().saturating_sub(before);
    // Two files' tables (about 35 MiB) and no more.
    assert!(grown < 64 << 10, "the server grew by {grown} KiB");
    // A file given up leaves the count: the next one of the same plan fits again, and only
    // one (the receiver counts the open files' chunks as they open and close).
    raw.send(&Message::FileAbort {
        file_id: 0,
        code: ErrorCode::Io,
        message: "given up".into(),
    });
    assert!(
        matches!(put(&mut raw, 6), Message::FileReady { file_id: 6, .. }),
        "room again after a file was given up"
    );
    assert!(
        matches!(
            put(&mut raw, 7),
            Message::FileFailed {
                file_id: 7,
                code: ErrorCode::Limit,
                ..
            }
        ),
        "and no more than that"
    );
    assert_eq!(tree(&root), Vec::<String>::new());
}

#[test]
fn offers_are_held_to_a_byte_budget_however_they_are_split() {
    let env = Env::new();
    let root = env.mkdir("root");
    sparse(&root.join("want.bin"), 16 << 30);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, _data) = raw_open(&srv, &env, true);
    let id = next_put(&mut raw);
    let before = srv.rss_kib();
    // One entry per Have: the most a message costs per chunk offered. 2^18 of them would
    // be every chunk once (allowed by the per-chunk rule) and about 45 MiB held.
    let mut frames = Vec::new();
    for index in 0..(1u64 << 18) {
        frames.extend_from_slice(&raw.est.sealer.seal(&Message::Have(Have {
            file_id: id,
            client_nonce: [1; 32],
            server_nonce: [2; 32],
            old_file_id: 0,
            entries: vec![(index, [0; 32])],
        })));
        if frames.len() > 1 << 20 {
            if raw.s.write_all(&frames).is_err() {
                break;
            }
            frames.clear();
        }
    }
    let _ = raw.s.write_all(&frames);
    let end = Instant::now() + Duration::from_secs(20);
    let said = loop {
        match raw.recv_any() {
            Ok(Message::Error { code, message }) => break Some((code, message)),
            Ok(_) if Instant::now() < end => {}
            _ => break None,
        }
    };
    let (code, why) = said.expect("an Error before the close");
    assert_eq!(code, ErrorCode::Protocol);
    assert!(why.contains("MiB of offered chunks"), "{why}");
    let grown = srv.rss_kib().saturating_sub(before);
    assert!(grown < 48 << 10, "the server grew by {grown} KiB");
    assert!(srv.wait_log("MiB of offered chunks", 5), "{}", srv.log());
}

#[test]
fn a_chunk_size_too_small_for_a_file_plans_nothing_for_it() {
    // The session's chunk size comes from the client; a chunk plan past the per-file limit
    // (here 4 KiB chunks of 16 GiB) is refused for that file, and the session goes on.
    let env = Env::new();
    let root = env.mkdir("root");
    sparse(&root.join("want.bin"), 16 << 30);
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, opened) = Raw::open_with(
        srv.port,
        env.psk(),
        Open {
            chunk_size: 4096,
            ..base_open(true)
        },
    );
    match opened {
        Message::Opened { .. } => {}
        Message::Error { message, .. } => {
            // Refused at Open is as good: nothing was planned.
            assert!(message.contains("chunk"), "{message}");
            return;
        }
        other => panic!("{other:?}"),
    }
    raw.get_files(&[b"want.bin"]);
    let _data = raw.data(srv.port, 0).unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        match raw.recv() {
            Ok(Message::PutFile(p)) => panic!("a plan of {} byte chunks: {p:?}", p.chunk_size),
            Ok(Message::EntryFailed { message, .. }) | Ok(Message::Error { message, .. }) => {
                assert!(message.contains("chunk"), "{message}");
                break;
            }
            Ok(_) if Instant::now() < end => {}
            other => panic!("{other:?}"),
        }
    }
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
        let id = next_put(&mut raw);
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
