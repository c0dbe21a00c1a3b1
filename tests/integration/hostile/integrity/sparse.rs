//! Attacks through sparse chunks: a peer that calls data a hole, or sends an extent table
//! that breaks the rules. The receiver hashes the holes as zeros itself, so no claim of a
//! hole is taken on trust; a table is checked whole before a byte lands.

use std::io::Write;

use zcp_wire::{ChunkHeader, ErrorCode, Message, PutFile};

use crate::hostile::peer::*;
use crate::util::*;

/// A `PutFile` for a sparse file `dest` of `size` bytes in 64 KiB chunks.
fn sparse_put(dest: &[u8], size: u64) -> Message {
    Message::PutFile(PutFile {
        sparse: true,
        ..put_file(0, dest, size, 65536)
    })
}

/// A sparse chunk header and its extent table (`(start, len)` relative to the chunk).
fn sparse_chunk(offset: u64, len: u64, extents: &[(u64, u64)]) -> Vec<u8> {
    let mut b = ChunkHeader::sparse(0, offset, len).encode().to_vec();
    b.extend_from_slice(&(extents.len() as u32).to_be_bytes());
    for (s, n) in extents {
        b.extend_from_slice(&s.to_be_bytes());
        b.extend_from_slice(&n.to_be_bytes());
    }
    b
}

#[test]
fn a_client_that_calls_data_a_hole_never_gets_it_verified() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::write(root.join("t.bin"), b"the user's file").unwrap();
    let mut srv = ServerProc::start(&root, &env.key, &["--once"]);
    let (mut raw, mut data) = raw_open(&srv, &env, false);
    raw.send(&sparse_put(b"t.bin", 131072));
    wait_for(&mut raw, 10, "FileReady", |m| {
        matches!(m, Message::FileReady { .. })
    });
    // Chunk 0 as all hole, with the MAC of the data it really holds; sent again each time
    // the receiver asks, until it gives up.
    let real = vec![0x5au8; 65536];
    let mac = mac_of(&raw, 0, 0, &real);
    let mut refused = 0;
    let failed = loop {
        data.write_all(&sparse_chunk(0, 65536, &[])).unwrap();
        raw.send(&Message::ChunkMac {
            file_id: 0,
            index: 0,
            mac,
        });
        match wait_for(&mut raw, 10, "an answer", |m| {
            matches!(
                m,
                Message::ChunkAck { .. } | Message::FileFailed { .. } | Message::Error { .. }
            )
        }) {
            Message::ChunkAck { ok: false, .. } => refused += 1,
            Message::FileFailed { code, message, .. } => break (code, message),
            other => panic!("after {refused} refusals: {other:?}"),
        }
        assert!(refused < 10, "the receiver never gives up");
    };
    assert_eq!(refused, 3, "asked again, then given up");
    assert_eq!(failed.0, ErrorCode::Verify, "{}", failed.1);
    assert!(raw_finish(&mut raw, &mut [data]));
    assert_eq!(srv.exit_code(20), Some(5), "{}", srv.log());
    assert_eq!(
        std::fs::read(root.join("t.bin")).unwrap(),
        b"the user's file"
    );
    assert!(own_files(&root).is_empty(), "{:?}", tree(&root));
}

#[test]
fn extent_tables_that_break_the_rules_are_refused_before_a_byte_lands() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::write(root.join("t.bin"), b"the user's file").unwrap();
    let mut srv = ServerProc::start(&root, &env.key, &[]);
    let size = 100_000;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            // 64 GiB of table, if it were believed.
            "too many extents",
            [
                &ChunkHeader::sparse(0, 0, 65536).encode()[..],
                &u32::MAX.to_be_bytes(),
            ]
            .concat(),
            "over the limit",
        ),
        (
            "an extent past the chunk",
            sparse_chunk(0, 65536, &[(61440, 8192)]),
            "runs past",
        ),
        (
            "an unaligned extent",
            sparse_chunk(0, 65536, &[(100, 4096)]),
            "not aligned",
        ),
        (
            "overlapping extents",
            sparse_chunk(0, 65536, &[(0, 8192), (4096, 4096)]),
            "before the previous one ends",
        ),
        (
            "an empty extent",
            sparse_chunk(0, 65536, &[(0, 0)]),
            "is empty",
        ),
        (
            "a hole past the end of the file",
            sparse_chunk(131072, 65536, &[]),
            "not a chunk boundary",
        ),
        (
            "a hole longer than its chunk",
            sparse_chunk(65536, 65536, &[]),
            "but that chunk has",
        ),
    ];
    for (what, bytes, why) in cases {
        let (mut raw, mut data) = raw_open(&srv, &env, false);
        raw.send(&sparse_put(b"t.bin", size));
        wait_for(&mut raw, 10, "FileReady", |m| {
            matches!(m, Message::FileReady { .. })
        });
        data.write_all(&bytes).unwrap();
        let _ = data.write_all(&[0xEE; 8192]);
        assert!(closes(&mut data, 10), "{what}: the data stream stays open");
        raw.send(&Message::FileEnd {
            file_id: 0,
            digest: [0; 32],
        });
        match wait_for(&mut raw, 10, "FileFailed", |m| {
            matches!(m, Message::FileFailed { .. })
        }) {
            Message::FileFailed { code, .. } => assert_ne!(code, ErrorCode::Verify, "{what}"),
            _ => unreachable!(),
        }
        assert!(srv.wait_log(why, 10), "{what}: {}", srv.log());
        assert!(srv.alive(), "{what}: the server died");
        assert_eq!(
            std::fs::read(root.join("t.bin")).unwrap(),
            b"the user's file",
            "{what}"
        );
        assert!(no_partials(&root, 10), "{what}: {:?}", tree(&root));
    }
}

#[test]
fn a_server_that_calls_data_a_hole_gets_nothing_stored() {
    let env = Env::new();
    let dest = victim_dest(&env);
    let (child, mut evil) = evil_get(&env, &["want.bin"], &dest, &[]);
    evil.send(&sparse_put(b"want.bin", 131072));
    assert!(matches!(
        evil.next(),
        Message::FileReady { resumed: false, .. }
    ));
    let mac = evil.mac(0, 0, &[0x77; 65536]);
    let mut refused = 0;
    loop {
        evil.data[0]
            .write_all(&sparse_chunk(0, 65536, &[]))
            .unwrap();
        evil.send(&Message::ChunkMac {
            file_id: 0,
            index: 0,
            mac,
        });
        match evil.next() {
            Message::ChunkAck { ok: false, .. } => refused += 1,
            Message::FileFailed {
                code: ErrorCode::Verify,
                ..
            } => break,
            other => panic!("after {refused} refusals: {other:?}"),
        }
        assert!(refused < 10, "the client never gives up");
    }
    evil.finish();
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(5), "{}", both(&o));
    no_control_bytes(&o);
    assert_eq!(tree(&dest), vec!["keep.txt", "private"]);
}
