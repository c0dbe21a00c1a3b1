//! What a peer with the key can make the other side hold, or keep open: memory for chunk
//! tables and offers is bounded per session whatever the files and chunk sizes, and a claim
//! of progress is held to the file it is about.

use std::io::Write;
use std::time::{Duration, Instant};

use zcp_wire::{ErrorCode, Have, Message, PutFile};

use super::harness::*;
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
    // 16 GiB in 64 KiB chunks: 2^18 chunks, the most one file may have. Two fill the
    // session's 2^19; every file after that is refused until one is done.
    let answers: Vec<Message> = (0..6u32)
        .map(|id| {
            raw.send(&Message::PutFile(PutFile {
                file_id: id,
                dest: format!("f{id}").into_bytes(),
                name: Vec::new(),
                size: 16 << 30,
                mode: 0o644,
                mtime_sec: 0,
                mtime_nsec: 0,
                chunk_size: 64 << 10,
                sparse: false,
            }));
            raw.recv().unwrap()
        })
        .collect();
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
    let put = |raw: &mut Raw, id: u32| {
        raw.send(&Message::PutFile(PutFile {
            file_id: id,
            dest: format!("f{id}").into_bytes(),
            name: Vec::new(),
            size: 16 << 30,
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            chunk_size: 64 << 10,
            sparse: false,
        }));
        raw.recv().unwrap()
    };
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
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&open_message(true, 4096));
    match raw.recv().unwrap() {
        Message::Opened { .. } => {}
        Message::Error { message, .. } => {
            // Refused at Open is as good: nothing was planned.
            assert!(message.contains("chunk"), "{message}");
            return;
        }
        other => panic!("{other:?}"),
    }
    raw.send(&Message::Get {
        path: b"want.bin".to_vec(),
        dest: Vec::new(),
    });
    raw.send(&Message::GetEnd);
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
