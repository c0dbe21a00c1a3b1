//! Encrypted sessions through the one role wiring: push and pull, every receiver engine, a
//! sparse file, a flipped ciphertext byte, a resume.

use std::io::{Seek, SeekFrom, Write};

use zcp_engine::RecvEngine;

use super::relay::WireFault;
use super::{Conn, Opts, Pair};

fn encrypted() -> Opts {
    Opts {
        encrypt: true,
        ..Opts::default()
    }
}

/// A file with a hole of 1 MiB between two runs of data.
fn sparse(p: &Pair, rel: &str) {
    let mut f = std::fs::File::create(p.src(rel)).unwrap();
    f.write_all(&super::pseudo_random(70_000, 5)).unwrap();
    f.seek(SeekFrom::Start(1 << 20)).unwrap();
    f.write_all(&super::pseudo_random(100_000, 6)).unwrap();
}

#[test]
fn encrypted_sessions_carry_trees_both_ways_with_every_engine() {
    for pull in [false, true] {
        for engine in [
            RecvEngine::Auto,
            RecvEngine::Splice,
            RecvEngine::ReadWrite,
            RecvEngine::Direct,
        ] {
            let what = format!("pull {pull}, {}", engine.name());
            let p = Pair::new();
            let names = ["t/a", "t/b", "t/c", "t/empty-file"];
            for (i, (n, len)) in names.iter().zip([1usize, 65_537, 900_000, 0]).enumerate() {
                p.file(n, len, i as u64);
            }
            sparse(&p, "t/holes");
            let o = Opts {
                pull,
                join_late: !pull,
                recv_engine: engine,
                ..encrypted()
            };
            let out = p.push(&["t"], ".", &o);
            // Direct I/O may be refused by the test's filesystem: the file fails, clearly.
            if engine == RecvEngine::Direct && !out.clean() {
                continue;
            }
            out.assert_clean();
            for n in names.iter().chain(&["t/holes"]) {
                assert!(p.same(n), "{what}: {n}");
            }
            let (_, receiver) = out.received.engines.clone().expect("engines reported");
            assert_ne!(receiver, "splice", "{what}: nothing to splice from");
        }
    }
}

#[test]
fn a_flipped_ciphertext_byte_fails_its_stream_and_nothing_altered_is_committed() {
    for at in [10u64, 50, 200_000] {
        let p = Pair::new();
        p.file("f", 640 << 10, 7);
        let o = Opts {
            streams: 1,
            wire: Some((Conn::Data(0), at, WireFault::Flip)),
            idle: std::time::Duration::from_secs(20),
            ..encrypted()
        };
        let out = p.push(&["f"], "f", &o);
        assert!(out.fired, "byte {at}");
        // The session ends at once (not at the idle timeout), as failing verification.
        let why = out.sender.as_ref().unwrap_err();
        assert!(
            why.to_string().contains("failed authentication"),
            "byte {at}: {out:#?}"
        );
        assert_eq!(why.exit_code(), crate::exit::INTEGRITY, "byte {at}");
        assert!(out.receiver.is_err(), "byte {at}: {out:#?}");
        // Never the altered bytes under the final name.
        assert!(!p.dst("f").exists(), "byte {at}");
        let again = p.push(&["f"], "f", &encrypted());
        again.assert_clean();
        assert!(p.same("f"), "byte {at}");
    }
}

#[test]
fn an_encrypted_session_resumes_what_a_cut_one_made_durable() {
    let p = Pair::new();
    p.file("big", 2 << 20, 9);
    let o = Opts {
        streams: 1,
        wire: Some((Conn::ControlBack, 600, WireFault::CutAll)),
        ..encrypted()
    };
    let out = p.push(&["big"], "big", &o);
    assert!(out.sender.is_err() && out.receiver.is_err(), "{out:#?}");
    assert!(!p.dst("big").exists());
    let durable = p.journaled("big");
    assert!(durable >= 65536, "{durable}");
    // Resumed by a session with other keys (its own agreement), encrypted or not: the
    // journal's chunks are proven with keys from the pre-shared key and nonces.
    let again = p.push(&["big"], "big", &encrypted());
    again.assert_clean();
    assert!(p.same("big"));
    assert!(again.received.skipped() >= durable, "{again:#?}");
}
