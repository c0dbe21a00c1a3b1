//! Encrypted sessions through the one role wiring: push and pull, every receiver engine, a
//! sparse file, a flipped ciphertext byte, a resume; over UDP, corrupted datagrams and a
//! flipped side-channel byte.

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
    // TCP: a data stream's records; UDP: a side channel's, either way (its salt at byte 10).
    let tcp = || encrypted();
    let udp = || encrypted_udp(0, 0, 1);
    let cases: [(&str, Conn, u64, &dyn Fn() -> Opts); 7] = [
        ("tcp", Conn::Data(0), 10, &tcp),
        ("tcp", Conn::Data(0), 50, &tcp),
        ("tcp", Conn::Data(0), 200_000, &tcp),
        ("udp", Conn::Data(0), 10, &udp),
        ("udp", Conn::Data(0), 300, &udp),
        ("udp back", Conn::DataBack(0), 10, &udp),
        ("udp back", Conn::DataBack(0), 200, &udp),
    ];
    for (kind, conn, at, opts) in cases {
        let what = format!("{kind}, byte {at}");
        let p = Pair::new();
        p.file("f", 640 << 10, 7);
        let o = Opts {
            streams: 1,
            wire: Some((conn, at, WireFault::Flip)),
            idle: std::time::Duration::from_secs(20),
            ..opts()
        };
        let out = p.push(&["f"], "f", &o);
        assert!(out.fired, "{what}");
        // The session ends at once (not at the idle timeout), as failing verification.
        let why = out.sender.as_ref().unwrap_err();
        assert!(
            why.to_string().contains("failed authentication"),
            "{what}: {out:#?}"
        );
        assert_eq!(why.exit_code(), crate::exit::INTEGRITY, "{what}");
        assert!(out.receiver.is_err(), "{what}: {out:#?}");
        // Never the altered bytes under the final name; what was proven stays journaled.
        assert!(!p.dst("f").exists(), "{what}");
        let again = p.push(&["f"], "f", &opts());
        again.assert_clean();
        assert!(p.same("f"), "{what}");
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

/// Encrypted over UDP: a path that loses and corrupts datagrams.
fn encrypted_udp(loss: u32, tamper: u32, seed: u64) -> Opts {
    let mut o = super::udp::udp(Some((loss, seed)));
    if let Some(u) = &mut o.udp {
        u.tamper = Some((tamper, seed.wrapping_mul(0x9e37_79b9) ^ 0x5bd1));
    }
    Opts { encrypt: true, ..o }
}

#[test]
fn encrypted_udp_refuses_corrupted_datagrams_and_mends_them_with_resends() {
    for (pull, seed) in [(false, 3u64), (true, 8)] {
        let p = Pair::new();
        p.file("big", 3 << 20, seed);
        p.file("odd", 700_001, seed + 1);
        let o = Opts {
            pull,
            join_late: !pull,
            streams: 2,
            ..encrypted_udp(10, 20, seed)
        };
        let out = p.push(&["big", "odd"], ".", &o);
        out.assert_clean();
        assert!(p.same("big") && p.same("odd"), "pull {pull}");
        let (sent, got) = out.udp.expect("a UDP session");
        // 2% of ~2,700 datagrams were altered on the way: each failed to open, was refused
        // (never written) and came again when NAKed, as the lost ones did.
        assert!(got.rejected >= 20, "pull {pull}: {got:?}");
        assert!(sent.lost >= got.rejected, "NAKed as lost: {sent:?} {got:?}");
        assert!(sent.resent >= got.rejected, "{sent:?} {got:?}");
        // An encrypted datagram's tag takes room from its payload.
        assert_eq!(sent.payload, 1424);
    }
}
