//! The fourth review of issue 10: an authenticated, malicious peer against what the earlier
//! rounds did not cover (`serve --once` with more than one session, the in-place keep of an
//! existing target, directory bookkeeping, the idle clock while a target is hashed, ...);
//! seven of its eight attacks got through before the fixes in this file's commit. Each test
//! asserts the SAFE outcome on disk (and in exit codes, logs, resources); a failing test names
//! what got through.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use zcp_wire::{ChunkHeader, Message};

use super::harness::*;
use crate::util::*;

// ------------------------------------------------------------------ serve --once

// ------------------------------------------------------------------ in-place keep

/// A malicious server answers `get want.bin` (the user has a `want.bin` of 128 KiB) with a
/// `PutFile` of that size: the client hashes its file and offers it. The server keeps it all
/// (`Go{keep}`), then gives the file up (`FileAbort`). Every chunk now counts as "durable", so
/// the empty part file is kept "for a resume": a `.zcp-*.part` the user never asked for stays
/// in the destination (and one more for every name the server does this to).
/// SAFE: nothing of zcp's is left beside the user's file, which is unchanged.
#[test]
fn pull_in_place_keep_then_abort_leaves_a_part_file() {
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let dest = env.mkdir("dest");
    let body: Vec<u8> = (0..131_072u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(dest.join("want.bin"), &body).unwrap();
    // The announced mtime: in a pull only an unchanged copy is offered back.
    let f = std::fs::File::options()
        .write(true)
        .open(dest.join("want.bin"))
        .unwrap();
    f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1_000_000))
        .unwrap();
    let child = get(
        l.local_addr().unwrap().port(),
        &env.key,
        &["want.bin"],
        &dest,
        &[],
    );
    let mut evil = Evil::accept(&l, &env.psk(), None);
    evil.put(0, b"want.bin", b"", body.len() as u64);
    let mut haves = 0;
    loop {
        match evil.next() {
            Message::Have(_) => haves += 1,
            Message::FileReady { resumed, .. } => {
                assert!(resumed, "the existing target is offered");
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(haves > 0);
    evil.send(&Message::Go {
        file_id: 0,
        restart: false,
    });
    evil.send(&Message::FileAbort {
        file_id: 0,
        code: zcp_wire::ErrorCode::Io,
        message: "gone".into(),
    });
    evil.finish();
    let o = wait_output(child, 30);
    assert!(!o.status.success(), "the file was given up: {}", both(&o));
    assert_eq!(std::fs::read(dest.join("want.bin")).unwrap(), body);
    // The part file is let go of on the client's own schedule.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        own_files(&dest),
        Vec::<String>::new(),
        "GOT THROUGH: an empty part file was kept in the user's directory: {:?}",
        tree(&dest)
    );
}

// ------------------------------------------------------------------ bookkeeping per frame

// ------------------------------------------------------------------ the idle clock, honestly

// ------------------------------------------------------------------ existing directories

// ------------------------------------------------------------------ zcp's own names

// ------------------------------------------------------------------ memory per stream

// ------------------------------------------------------------------ draining kept part files
