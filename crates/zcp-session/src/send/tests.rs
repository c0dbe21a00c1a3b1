//! The sending role's state machine without I/O: what it hashes and proves, by verify mode.

use std::time::{Duration, Instant};

use zcp_engine::SendEngine;
use zcp_wire::{Message, Psk, SessionKeys, VerifyMode};

use super::HashJob;
use super::state::{SendOut, SenderConfig, Sending};
use crate::event::Report;
use crate::manifest::Entry;

/// A sending role with 2 MiB chunks (past the staged size, so a verified chunk is hashed by
/// a hash worker), one stream, and one announced 6 MiB file (id 0) the receiver made ready
/// with `rw`. Returns the outputs of that.
fn ready(verify: VerifyMode) -> (Sending, SendOut) {
    let cfg = SenderConfig {
        engine: SendEngine::Sendfile,
        block: 0,
        chunk_size: Some(2 << 20),
        idle: Duration::from_secs(30),
        verify,
    };
    let keys = SessionKeys::derive(&Psk::from_bytes([3; 32]), &[1; 32], &[2; 32]);
    let now = Instant::now();
    let mut s = Sending::new(
        cfg,
        (SendEngine::Sendfile, None),
        keys,
        ([1; 32], [2; 32]),
        1,
        now,
    );
    let file = tempfile::tempfile().expect("a temporary file");
    file.set_len(6 << 20).expect("its size");
    let meta = zcp_engine::fs::stat_fd(&file).expect("stat");
    s.take_entry(
        Entry::File {
            dest: b"f".to_vec(),
            name: Vec::new(),
            file,
            meta,
            display: "f".into(),
        },
        now,
    );
    let _ = s.take_out();
    s.handle_frame(
        Message::FileReady {
            file_id: 0,
            engine: "rw".into(),
            note: String::new(),
            target: b"f".to_vec(),
            resumed: false,
        },
        now,
    )
    .expect("ready");
    let out = s.take_out();
    (s, out)
}

#[test]
fn a_verified_file_has_every_chunk_hashed() {
    let (_, out) = ready(VerifyMode::Blake3);
    assert_eq!(out.chunks.len(), 3);
    let hashed: Vec<u64> = (out.hashes.iter())
        .filter_map(|h| match h {
            HashJob::Chunk { index, .. } => Some(*index),
            _ => None,
        })
        .collect();
    assert_eq!(hashed, [0, 1, 2]);
}

#[test]
fn without_verification_nothing_is_hashed_and_the_digest_is_zero() {
    let (mut s, out) = ready(VerifyMode::None);
    let now = Instant::now();
    assert_eq!(out.chunks.len(), 3, "every chunk goes out");
    assert!(out.hashes.is_empty(), "no hash job");
    assert!(
        out.chunks.iter().all(|c| !c.staged),
        "no chunk is read to be hashed"
    );
    assert!(
        !(out.frames.iter()).any(|m| matches!(m, Message::ChunkMac { .. })),
        "no MAC sent"
    );
    for index in 0..3 {
        let ack = Message::ChunkAck {
            file_id: 0,
            index,
            ok: true,
        };
        s.handle_frame(ack, now).expect("ack");
    }
    assert_eq!(
        s.durable_pending(),
        0,
        "unverified chunks are never resumed"
    );
    let out = s.take_out();
    assert_eq!(
        out.checks.len(),
        1,
        "every chunk acknowledged: the source check"
    );
    s.source_checked(0, None, now);
    let out = s.take_out();
    assert!(
        (out.frames.iter())
            .any(|m| matches!(m, Message::FileEnd { digest, .. } if *digest == [0; 32])),
        "{:?}",
        out.frames
    );
    // A receiver that claims it verified a file nobody hashed is not believed.
    let committed = Message::FileCommitted {
        file_id: 0,
        bytes: 6 << 20,
        digest: [1; 32],
        verified: true,
        stored: true,
    };
    s.handle_frame(committed, now).expect("committed");
    let done: Vec<(bool, bool)> = (s.take_out().reports.into_iter())
        .filter_map(|r| match r {
            Report::FileDone(d) => Some((d.verified, d.stored)),
            _ => None,
        })
        .collect();
    assert_eq!(done, [(false, true)]);
}

/// A receiver's `FileCommitted` is a claim: before `FileEnd` (no digest of this side's to
/// match), with a digest that is not the one sent, or with any byte count, the file is
/// reported with this side's size and not as verified.
#[test]
fn a_receivers_commit_claims_nothing_this_side_did_not_prove() {
    let (mut s, _out) = ready(VerifyMode::Blake3);
    let now = Instant::now();
    let committed = Message::FileCommitted {
        file_id: 0,
        bytes: u64::MAX,
        digest: [7; 32],
        verified: true,
        stored: true,
    };
    s.handle_frame(committed, now).expect("committed");
    let done: Vec<(bool, u64, [u8; 32])> = (s.take_out().reports.into_iter())
        .filter_map(|r| match r {
            Report::FileDone(d) if d.failure.is_none() => Some((d.verified, d.bytes, d.digest)),
            _ => None,
        })
        .collect();
    assert_eq!(done.len(), 1);
    assert!(!done[0].0, "not verified: {done:?}");
    assert_ne!(done[0].1, u64::MAX, "the size is this side's: {done:?}");
    assert_eq!(done[0].2, [0; 32], "no digest claimed: {done:?}");
}
