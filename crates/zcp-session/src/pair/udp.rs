//! Sessions over the UDP transport through both roles, on loopback: a seeded lossy path
//! (the sender drops a share of its datagrams) that NAKs must mend, every receiver engine,
//! trees of small files, and `--verify none`.

use zcp_engine::RecvEngine;
use zcp_wire::VerifyMode;
use zcp_wire::udp::UdpMode;

use super::{Opts, Pair};
use crate::transport::udp::UdpConfig;

pub(super) fn udp(loss: Option<(u32, u64)>) -> Opts {
    Opts {
        chunk_size: Some(256 << 10),
        udp: Some(UdpConfig {
            mode: UdpMode::Fair,
            cap: 0,
            offload: true,
            // 1440-byte payloads: many datagrams per chunk, as on an Ethernet path.
            mtu: Some(1500),
            loss,
            tamper: None,
        }),
        ..Opts::default()
    }
}

#[test]
fn a_lossy_path_is_mended_by_naks_and_resends_stay_near_the_losses() {
    for (streams, seed) in [(1u16, 7u64), (2, 99)] {
        let p = Pair::new();
        p.file("big", 3 << 20, seed);
        p.file("odd", 1_000_003, seed + 1);
        let o = Opts {
            streams,
            ..udp(Some((30, seed)))
        };
        let out = p.push(&["big", "odd"], ".", &o);
        out.assert_clean();
        assert!(p.same("big") && p.same("odd"), "{streams} streams");
        assert_eq!(p.partials(), Vec::<String>::new());
        let (sent, got) = out.udp.expect("a UDP session");
        // 3% of ~2,900 datagrams were dropped: each was NAKed and re-sent.
        assert!(sent.lost >= 40, "{sent:?}");
        assert!(sent.resent >= sent.lost, "{sent:?}");
        assert!(
            got.lost >= sent.lost,
            "the receiver NAKed what the sender heard: {got:?}"
        );
        assert!(
            sent.resent * 10 <= sent.lost * 11,
            "re-sent within 1.1x of lost: {sent:?}"
        );
        assert_eq!(got.rejected, 0, "{got:?}");
        assert!(sent.engines.contains("sendmmsg"), "{sent:?}");
        assert_eq!(sent.payload, 1440);
    }
}

#[test]
fn every_receiver_engine_stores_a_tree_over_udp() {
    for recv in [
        RecvEngine::Auto,
        RecvEngine::Direct,
        RecvEngine::ReadWrite,
        RecvEngine::Splice,
        RecvEngine::Mem,
        RecvEngine::Null,
    ] {
        let p = Pair::new();
        let sizes = [0usize, 1, 4097, 65536, 300_001];
        for (i, n) in sizes.iter().enumerate() {
            p.file(&format!("t/d{}/f{n}", i % 2), *n, i as u64);
        }
        let o = Opts {
            recv_engine: recv,
            ..udp(Some((10, 3)))
        };
        let out = p.push(&["t"], ".", &o);
        out.assert_clean();
        assert_eq!(out.received.committed(), sizes.len(), "{recv:?}");
        for (i, n) in sizes.iter().enumerate() {
            let name = format!("t/d{}/f{n}", i % 2);
            assert_eq!(p.same(&name), recv.stores(), "{recv:?}: {name}");
        }
        assert_eq!(p.partials(), Vec::<String>::new(), "{recv:?}");
    }
}

#[test]
fn without_verification_and_with_a_fixed_rate_the_bytes_still_arrive() {
    let p = Pair::new();
    p.file("f", 2 << 20, 5);
    let mut o = udp(Some((20, 11)));
    o.verify = VerifyMode::None;
    o.limit_rate = Some(8 * (400 << 20));
    if let Some(c) = &mut o.udp {
        c.mode = UdpMode::Fixed;
        c.offload = false;
    }
    let out = p.push(&["f"], ".", &o);
    out.assert_clean();
    assert!(p.same("f"));
    let (sent, _) = out.udp.expect("a UDP session");
    assert_eq!(sent.cuts, 0, "fixed never cuts: {sent:?}");
    assert!(sent.resent >= sent.lost && sent.lost > 0, "{sent:?}");
    assert!(!sent.engines.contains("gso"), "{sent:?}");
}

#[test]
fn a_tree_of_many_small_files_goes_over_two_streams() {
    let p = Pair::new();
    for i in 0..300usize {
        p.file(&format!("t/a/f{i}"), i * 37, i as u64);
    }
    for i in 0..3usize {
        p.file(&format!("t/a/b/g{i}"), 5_000_000, 1000 + i as u64);
    }
    let o = Opts {
        streams: 2,
        chunk_size: None,
        ..udp(None)
    };
    let out = p.push(&["t"], ".", &o);
    out.assert_clean();
    assert_eq!(out.received.committed(), 303);
    assert!(p.same("t/a/f299") && p.same("t/a/b/g2") && p.same("t/a/f1"));
}

#[test]
fn each_side_holds_its_chunk_buffers_within_the_session_budget() {
    // 16 streams of 8 MiB chunks: each stream's share (128 MiB / 16) is exactly one chunk,
    // which the sender's window must still let through, one at a time.
    let p = Pair::new();
    p.file("f", (40 << 20) + 12_345, 21);
    let o = Opts {
        streams: 16,
        chunk_size: Some(8 << 20),
        ..udp(None)
    };
    let out = p.push(&["f"], ".", &o);
    out.assert_clean();
    assert!(p.same("f"));
    let (sent, got) = out.udp_memory;
    let budget = crate::transport::udp::budget::UDP_BUDGET;
    assert!(sent > 0 && sent <= budget, "sender held {sent}");
    assert!(got > 0 && got <= budget, "receiver held {got}");
}

#[test]
fn a_chunk_over_a_streams_share_is_refused_by_the_sender_before_it_is_read() {
    // 16 MiB chunks on 16 streams: a share is 8 MiB, so no chunk may be held at all.
    let p = Pair::new();
    p.file("f", 17 << 20, 22);
    let o = Opts {
        streams: 16,
        chunk_size: Some(16 << 20),
        ..udp(None)
    };
    let out = p.push(&["f"], ".", &o);
    assert!(!out.clean(), "{out:?}");
    assert!(
        format!("{out:?}").contains("choose a smaller --chunk-size"),
        "{out:?}"
    );
    // The file's last chunk (1 MiB) fits a share and may have gone; no 16 MiB one was read.
    assert!(out.udp_memory.0 < 16 << 20, "{:?}", out.udp_memory);
    assert!(!p.dst("f").exists());
}
