//! Sessions without verification (`--verify none`) through both roles: bytes stored as they
//! arrive and durable, reported unverified, and never resumed as if they had been proved.

use std::time::Duration;

use zcp_engine::RecvEngine;
use zcp_wire::VerifyMode;

use super::relay::WireFault;
use super::{Conn, Opts, Pair};

/// Sizes around the edges of chunks and pages.
const SIZES: [usize; 6] = [0, 1, 4097, 65536, 65537, 200_003];

fn unverified() -> Opts {
    Opts {
        verify: VerifyMode::None,
        ..Opts::default()
    }
}

#[test]
fn without_verification_every_engine_stores_every_size_exactly_and_says_unverified() {
    for recv in [
        RecvEngine::Auto,
        RecvEngine::Splice,
        RecvEngine::Direct,
        RecvEngine::ReadWrite,
        RecvEngine::Mem,
    ] {
        let p = Pair::new();
        let names: Vec<String> = SIZES.iter().map(|n| format!("t/f{n}")).collect();
        for (i, n) in SIZES.iter().enumerate() {
            p.file(&names[i], *n, i as u64);
        }
        let o = Opts {
            recv_engine: recv,
            ..unverified()
        };
        let out = p.push(&["t"], ".", &o);
        out.assert_clean();
        assert_eq!(out.received.committed(), SIZES.len(), "{recv:?}");
        for name in &names {
            assert_eq!(p.same(name), recv.stores(), "{recv:?}: {name}");
        }
        for d in out.received.done.iter().chain(&out.sent.done) {
            assert!(!d.verified, "{recv:?}: {d:?}");
            assert_eq!(d.stored, recv.stores(), "{recv:?}: {d:?}");
        }
        assert_eq!(p.partials(), Vec::<String>::new(), "{recv:?}");
    }
}

#[test]
fn a_byte_flipped_on_the_way_is_stored_as_it_arrived_when_nothing_verifies() {
    // What --verify none gives up: the same fault a verified session catches and mends
    // (pair::tests) reaches the disk, and only that byte differs.
    let p = Pair::new();
    let src = p.file("f", 640 << 10, 7);
    let o = Opts {
        streams: 1,
        wire: Some((Conn::Data(0), 200_000, WireFault::Flip)),
        ..unverified()
    };
    let out = p.push(&["f"], "f", &o);
    out.assert_clean();
    assert_eq!(out.sender.as_ref().unwrap().resent, 0, "nothing noticed");
    let got = std::fs::read(p.dst("f")).unwrap();
    assert_eq!(got.len(), src.len());
    let differ: Vec<usize> = (0..src.len()).filter(|i| got[*i] != src[*i]).collect();
    assert_eq!(
        differ.len(),
        1,
        "one byte flipped, nothing else: {differ:?}"
    );
}

#[test]
fn an_existing_target_is_not_hashed_but_replaced() {
    let p = Pair::new();
    p.file("f", 300_000, 3);
    p.push(&["f"], "f", &Opts::default()).assert_clean();
    // Verified, the same target again costs no byte (the receiver hashes it, the sender
    // proves it); unverified, it is sent whole and replaced.
    let again = p.push(&["f"], "f", &Opts::default());
    again.assert_clean();
    assert_eq!(again.bytes_sent, 0, "{again:#?}");
    let none = p.push(&["f"], "f", &unverified());
    none.assert_clean();
    assert_eq!(none.received.skipped(), 0, "{none:#?}");
    assert!(none.bytes_sent >= 300_000, "{}", none.bytes_sent);
    assert!(p.same("f"));
}

#[test]
fn what_an_unverified_session_wrote_is_never_resumed_and_a_verified_attempts_chunks_are() {
    let p = Pair::new();
    let size: u64 = 8 << 20;
    p.file("big", size as usize, 9);
    // 1. Verified, cut once a few chunks were acknowledged: they (and maybe a few more) are
    // journaled.
    let cut_acks = Opts {
        streams: 1,
        wire: Some((Conn::ControlBack, 600, WireFault::CutAll)),
        ..Opts::default()
    };
    let out = p.push(&["big"], "big", &cut_acks);
    assert!(out.sender.is_err() && out.fired, "{out:#?}");
    let proved = p.journaled("big");
    assert!((65536..size - (256 << 10)).contains(&proved), "{proved}");

    // 2. Unverified, stalled halfway through what is left until its idle timeout ends it:
    // it resumes the proved chunks (the sender proves them against its source, as always),
    // writes and syncs more, and journals none of it.
    let stalled = Opts {
        streams: 1,
        idle: Duration::from_millis(400),
        wire: Some((
            Conn::Data(0),
            (size - proved) / 2,
            WireFault::Stall(Duration::from_millis(1500)),
        )),
        ..unverified()
    };
    let out = p.push(&["big"], "big", &stalled);
    assert!(out.sender.is_err() || out.receiver.is_err(), "{out:#?}");
    assert!(
        !p.dst("big").exists(),
        "nothing partial under the final name"
    );
    assert_eq!(
        p.journaled("big"),
        proved,
        "no record of the unverified chunks"
    );
    let parts = p.partials();
    assert_eq!(parts.len(), 2, "kept for the proved chunks: {parts:?}");
    let part = (parts.iter())
        .find(|n| n.ends_with(".part"))
        .map(|n| std::fs::read(p.dst(n)).unwrap())
        .unwrap();
    let src = std::fs::read(p.src("big")).unwrap();
    let held = (part.chunks(65536).zip(src.chunks(65536)))
        .filter(|(a, b)| a == b)
        .count() as u64;
    assert!(
        held * 65536 > proved,
        "it wrote more than was proved: {held} chunks"
    );

    // 3. Verified again: only the proved chunks are kept; everything the unverified session
    // wrote is sent again, and the file arrives exactly.
    let again = p.push(&["big"], "big", &Opts::default());
    again.assert_clean();
    assert!(p.same("big"));
    assert_eq!(again.received.skipped(), proved, "{again:#?}");
    assert!(again.bytes_sent >= size - proved, "{}", again.bytes_sent);
    assert!(again.received.done.iter().all(|d| d.verified));
    assert_eq!(p.partials(), Vec::<String>::new());
}

#[test]
fn an_interrupted_unverified_transfer_keeps_nothing_and_starts_over() {
    let p = Pair::new();
    let size: u64 = 2 << 20;
    p.file("big", size as usize, 11);
    let o = Opts {
        streams: 1,
        wire: Some((Conn::ControlBack, 600, WireFault::CutAll)),
        ..unverified()
    };
    let out = p.push(&["big"], "big", &o);
    assert!(out.sender.is_err(), "{out:#?}");
    assert!(!p.dst("big").exists());
    // Acknowledged chunks were synced, but nothing resumable: no part file is kept.
    assert_eq!(p.partials(), Vec::<String>::new());
    let again = p.push(&["big"], "big", &unverified());
    again.assert_clean();
    assert!(p.same("big"));
    assert_eq!(again.received.skipped(), 0, "{again:#?}");
    assert!(again.bytes_sent >= size, "{}", again.bytes_sent);
}
