//! [`super`]'s unit tests: where each chunk of one file stands, and when it settles.

use super::*;

/// A chunk's proof whose MAC is `mac` (its chaining value and root the same bytes).
fn proof(mac: [u8; 32]) -> ChunkProof {
    ChunkProof {
        mac,
        cv: mac,
        root: Some(mac),
    }
}

fn file(size: u64, engine: RecvEngine, offered: Vec<(u64, ChunkProof)>) -> RxFile {
    let spec = FileSpec {
        id: 0,
        plan: ChunkPlan::new(size, 64 * 1024).unwrap(),
        engine,
        mode: 0o644,
        mtime: (0, 0),
        name: b"f".to_vec(),
        target: "f".into(),
        io: None,
        sparse: false,
        existing: None,
    };
    RxFile::new(
        spec,
        JournalState::default(),
        offered,
        (false, true),
        Instant::now(),
    )
}

fn keys() -> SessionKeys {
    let mut k = [1u8; 32];
    k[0] = 2;
    SessionKeys::derive(&zcp_wire::Psk::from_bytes(k), &[1; 32], &[2; 32])
}

/// The digest the sender would send for `f` with these chunk MACs.
fn digest_of(f: &RxFile, macs: &[[u8; 32]]) -> [u8; 32] {
    let p = f.plan();
    let mut d = keys().file_digest(f.id(), p.size(), p.chunk_size());
    for m in macs {
        d.push(m);
    }
    d.finish()
}

#[test]
fn verified_only_when_written_hashed_and_expected_match() {
    let mut f = file(100_000, RecvEngine::Direct, vec![]);
    f.claim(0).unwrap();
    assert_eq!(f.expect(0, [7; 32]), Ok(Outcome::Pending));
    assert_eq!(f.hashed(0, proof([7; 32])), Outcome::Pending);
    assert_eq!(f.written(0), Outcome::Verified(0));
    f.durable(0);
    // The other order: written, hashed, then the sender's MAC.
    f.claim(1).unwrap();
    assert_eq!(f.written(1), Outcome::Pending);
    assert_eq!(f.hashed(1, proof([8; 32])), Outcome::Pending);
    assert_eq!(f.expect(1, [8; 32]), Ok(Outcome::Verified(1)));
    let want = digest_of(&f, &[[7; 32], [8; 32]]);
    f.durable(1);
    assert_eq!(f.settle(&keys()), Settle::Wait, "no FileEnd yet");
    f.end(want).unwrap();
    assert!(f.end(want).is_err(), "one FileEnd per file");
    assert_eq!(f.settle(&keys()), Settle::Commit(want));
    assert_eq!(f.settle(&keys()), Settle::Wait, "decided once");
}

#[test]
fn an_end_before_every_chunk_is_acknowledged_fails_a_file_of_several_chunks() {
    let mut f = file(100_000, RecvEngine::ReadWrite, vec![]);
    f.claim(0).unwrap();
    f.written(0);
    f.hashed(0, proof([7; 32]));
    assert_eq!(f.expect(0, [7; 32]), Ok(Outcome::Verified(0)));
    f.durable(0);
    f.end(digest_of(&f, &[[7; 32], [8; 32]])).unwrap();
    assert!(matches!(
        f.settle(&keys()),
        Settle::Fail(Refusal { code: ErrorCode::Protocol, message: m }) if m.contains("1 of 2")
    ));
    assert_eq!(f.settle(&keys()), Settle::Wait, "decided once");
}

#[test]
fn a_digest_that_differs_fails_and_an_early_end_waits_for_the_chunk() {
    let mut f = file(1000, RecvEngine::ReadWrite, vec![]);
    // One chunk: FileEnd may come before the chunk is verified.
    f.end(digest_of(&f, &[[5; 32]])).unwrap();
    f.claim(0).unwrap();
    assert_eq!(f.expect(0, [5; 32]), Ok(Outcome::Pending));
    assert_eq!(f.settle(&keys()), Settle::Wait);
    f.written(0);
    assert_eq!(f.hashed(0, proof([5; 32])), Outcome::Verified(0));
    f.durable(0);
    assert!(matches!(f.settle(&keys()), Settle::Commit(_)));

    let mut f = file(1000, RecvEngine::ReadWrite, vec![]);
    f.end(digest_of(&f, &[[6; 32]])).unwrap();
    f.claim(0).unwrap();
    f.written(0);
    f.hashed(0, proof([5; 32]));
    assert_eq!(f.expect(0, [5; 32]), Ok(Outcome::Verified(0)));
    f.durable(0);
    assert!(matches!(
        f.settle(&keys()),
        Settle::Fail(Refusal {
            code: ErrorCode::Verify,
            ..
        })
    ));
}

#[test]
fn a_mismatch_resets_the_chunk_for_a_resend() {
    let mut f = file(100_000, RecvEngine::Splice, vec![]);
    f.claim(0).unwrap();
    f.written(0);
    f.hashed(0, proof([1; 32]));
    assert_eq!(f.expect(0, [2; 32]), Ok(Outcome::Mismatch(0)));
    // Claimable again, with a fresh MAC expected.
    f.claim(0).unwrap();
    f.written(0);
    f.hashed(0, proof([2; 32]));
    assert_eq!(f.expect(0, [2; 32]), Ok(Outcome::Verified(0)));
    assert!(f.claim(0).is_err(), "a verified chunk is not sent twice");
    assert!(f.expect(5, [0; 32]).is_err());
}

#[test]
fn a_chunk_that_never_verifies_is_given_up_and_counts_once_as_written() {
    let mut f = file(100_000, RecvEngine::ReadWrite, vec![]);
    for round in 1..=MAX_MISMATCHES {
        f.claim(1).unwrap();
        f.written(1);
        assert!(f.written <= f.plan().size(), "{}", f.written);
        f.hashed(1, proof([1; 32]));
        let want = if round < MAX_MISMATCHES {
            Outcome::Mismatch(1)
        } else {
            Outcome::GiveUp(1)
        };
        assert_eq!(f.expect(1, [2; 32]), Ok(want), "round {round}");
        assert_eq!(f.written, 0, "a failed chunk's bytes are not counted");
    }
}

#[test]
fn resumed_chunks_wait_for_go() {
    let mut f = file(
        200_000,
        RecvEngine::Direct,
        vec![(0, proof([3; 32])), (1, proof([4; 32]))],
    );
    assert!(f.claim(2).is_err(), "no data before Go");
    assert!(f.holds_resumable(), "offered chunks are kept until Go");
    assert_eq!(f.go(false), Ok(2 * 65536));
    assert!(f.go(false).is_err(), "one Go per file");
    assert!(f.claim(0).is_err(), "kept chunks are done");
    for i in 2..4 {
        f.claim(i).unwrap();
        f.written(i);
        f.hashed(i, proof([9; 32]));
        assert_eq!(f.expect(i, [9; 32]), Ok(Outcome::Verified(i)));
        f.durable(i);
    }
    f.end(digest_of(&f, &[[3; 32], [4; 32], [9; 32], [9; 32]]))
        .unwrap();
    assert!(matches!(f.settle(&keys()), Settle::Commit(_)));

    let mut f = file(200_000, RecvEngine::Direct, vec![(0, proof([3; 32]))]);
    assert_eq!(f.go(true), Ok(0));
    assert!(!f.holds_resumable(), "a restart keeps nothing");
    f.claim(0).unwrap();
}

#[test]
fn the_senders_resume_check_counts_only_while_it_moves_at_a_believable_rate() {
    let t0 = Instant::now();
    let mut f = file(
        200_000,
        RecvEngine::Direct,
        vec![(0, proof([3; 32])), (1, proof([4; 32]))],
    );
    assert_eq!(f.resume_progress(65536, t0), Ok(true), "work under way");
    assert_eq!(
        f.resume_progress(65536, t0),
        Ok(false),
        "a repeat is chatter"
    );
    let later = t0 + std::time::Duration::from_secs(10);
    assert_eq!(
        f.resume_progress(100_000, later),
        Ok(false),
        "a crawl is not work"
    );
    assert!(
        f.resume_progress(131_073, later).is_err(),
        "past the bytes offered"
    );
    f.go(false).unwrap();
    assert_eq!(
        f.resume_progress(131_072, t0),
        Ok(false),
        "no check after Go"
    );
}

#[test]
fn an_existing_targets_chunks_never_keep_a_part_file() {
    let mut f = file(
        100_000,
        RecvEngine::Direct,
        vec![(0, proof([3; 32])), (1, proof([4; 32]))],
    );
    f.in_place = true;
    assert!(!f.holds_resumable(), "offered from the target");
    assert_eq!(f.go(false), Ok(100_000));
    assert!(
        !f.holds_resumable(),
        "kept in the target, none in the part file: given up, nothing stays"
    );
}

#[test]
fn go_for_a_file_that_was_not_offered_is_refused() {
    // The attack: chunks verified and durable, then Go{restart} empties the part file;
    // had the chunks stayed durable, an all-zero file would commit as verified.
    let mut f = file(200_000, RecvEngine::ReadWrite, vec![]);
    f.claim(0).unwrap();
    f.written(0);
    f.hashed(0, proof([9; 32]));
    assert_eq!(f.expect(0, [9; 32]), Ok(Outcome::Verified(0)));
    f.durable(0);
    assert!(f.may_go().is_err());
    let e = f.go(true).unwrap_err();
    assert!(e.message.contains("not offered"), "{e}");
    assert!(f.holds_resumable(), "the durable chunk is untouched");
    assert!(f.claim(0).is_err(), "and still done");
}

#[test]
fn an_unverified_file_counts_written_chunks_refuses_macs_and_keeps_only_verified_ones() {
    let mut f = file(200_000, RecvEngine::Direct, vec![(0, proof([3; 32]))]);
    f.verify = false;
    assert!(f.holds_resumable(), "a verified attempt's chunk is offered");
    assert_eq!(f.go(false), Ok(65536));
    // What this session writes counts once written (the transport reports a zero MAC
    // for it, hashing nothing) and is durable, but never resumable.
    for i in 1..4 {
        f.claim(i).unwrap();
        assert_eq!(f.hashed(i, proof([0; 32])), Outcome::Pending);
        assert_eq!(f.written(i), Outcome::Verified(i));
        f.durable(i);
    }
    assert!(f.holds_resumable(), "the kept chunk still is");
    let e = f.expect(2, [9; 32]).unwrap_err();
    assert!(e.message.contains("does not verify"), "{e}");
    // Any digest: the sender of an unverified file sends zeros, and none is checked.
    f.end([7; 32]).unwrap();
    assert_eq!(f.settle(&keys()), Settle::Commit([0; 32]));

    let mut f = file(200_000, RecvEngine::Direct, vec![]);
    f.verify = false;
    f.claim(0).unwrap();
    f.hashed(0, proof([0; 32]));
    assert_eq!(f.written(0), Outcome::Verified(0));
    f.durable(0);
    assert!(
        !f.holds_resumable(),
        "unverified chunks alone keep no part file"
    );
}

#[test]
fn failures_wait_for_the_end_and_empty_files_commit() {
    let mut f = file(1000, RecvEngine::Direct, vec![]);
    f.fail(ErrorCode::NoSpace, "full".into());
    assert_eq!(
        f.settle(&keys()),
        Settle::Wait,
        "failed, but no FileEnd yet"
    );
    f.end([0; 32]).unwrap();
    assert!(matches!(
        f.settle(&keys()),
        Settle::Fail(Refusal {
            code: ErrorCode::NoSpace,
            ..
        })
    ));
    let mut f = file(0, RecvEngine::Direct, vec![]);
    f.end(digest_of(&f, &[])).unwrap();
    assert!(matches!(f.settle(&keys()), Settle::Commit(_)));
}
