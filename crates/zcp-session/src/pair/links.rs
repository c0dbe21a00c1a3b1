//! Every link both ways, through the one role wiring the client and the server use: push and
//! pull, over TCP and over UDP (each in clear and encrypted), with and without a rate cap, with a
//! disk fault.

use std::time::{Duration, Instant};

use super::faulty::DiskFault;
use super::udp::udp;
use super::{Opts, Pair};

/// The ways a session's data can move: push or pull, TCP or UDP, in clear or encrypted; a
/// push's receiving streams join after its role started, as on a server.
fn links() -> Vec<(&'static str, Opts)> {
    let tcp = Opts::default();
    let udp = udp(Some((10, 5)));
    vec![
        (
            "push tcp",
            Opts {
                join_late: true,
                ..tcp.clone()
            },
        ),
        (
            "pull tcp",
            Opts {
                pull: true,
                ..tcp.clone()
            },
        ),
        (
            "push tcp encrypted",
            Opts {
                join_late: true,
                encrypt: true,
                ..tcp.clone()
            },
        ),
        (
            "pull tcp encrypted",
            Opts {
                pull: true,
                encrypt: true,
                ..tcp
            },
        ),
        (
            "push udp",
            Opts {
                join_late: true,
                ..udp.clone()
            },
        ),
        (
            "pull udp",
            Opts {
                pull: true,
                ..udp.clone()
            },
        ),
        (
            "push udp encrypted",
            Opts {
                join_late: true,
                encrypt: true,
                ..udp.clone()
            },
        ),
        (
            "pull udp encrypted",
            Opts {
                pull: true,
                encrypt: true,
                ..udp
            },
        ),
    ]
}

/// A tree of files of awkward sizes, a link and an empty directory beneath `t`.
fn tree(p: &Pair) -> Vec<String> {
    let mut names = Vec::new();
    for (i, n) in [0usize, 1, 4095, 65_536, 65_537, 700_001]
        .iter()
        .enumerate()
    {
        let name = format!("t/d{}/f{n}", i % 2);
        p.file(&name, *n, i as u64 + 40);
        names.push(name);
    }
    std::fs::create_dir_all(p.src("t/empty")).unwrap();
    std::os::unix::fs::symlink("d0/f0", p.src("t/link")).unwrap();
    names
}

#[test]
fn every_link_carries_a_tree_both_ways() {
    for (what, o) in links() {
        let p = Pair::new();
        let names = tree(&p);
        let out = p.push(&["t"], ".", &o);
        out.assert_clean();
        assert_eq!(out.received.committed(), names.len(), "{what}");
        for n in &names {
            assert!(p.same(n), "{what}: {n}");
        }
        assert!(p.dst("t/empty").is_dir(), "{what}");
        assert_eq!(
            std::fs::read_link(p.dst("t/link")).unwrap(),
            std::path::Path::new("d0/f0"),
            "{what}"
        );
        assert_eq!(p.partials(), Vec::<String>::new(), "{what}");
        assert_eq!(out.udp.is_some(), what.contains("udp"), "{what}");
    }
}

#[test]
fn a_pull_takes_what_was_asked_into_the_clients_directory() {
    let p = Pair::new();
    p.file("a/one", 100_000, 1);
    p.file("b/two", 3, 2);
    let o = Opts {
        pull: true,
        ..Opts::default()
    };
    let out = p.push(&["a/one", "b"], "into", &o);
    out.assert_clean();
    assert_eq!(
        std::fs::read(p.dst("into/one")).unwrap(),
        std::fs::read(p.src("a/one")).unwrap()
    );
    assert_eq!(
        std::fs::read(p.dst("into/b/two")).unwrap(),
        std::fs::read(p.src("b/two")).unwrap()
    );
    assert_eq!(p.finals(), ["into/b/two", "into/one"]);
}

#[test]
fn the_sender_holds_the_rate_cap_on_every_link() {
    // 2 MiB at 16 Mbit/s over one stream: no less than about a second, whatever the load (the
    // cap only bounds the rate from above, so this lower bound cannot fail for slowness). A
    // UDP stream's bucket may let 256 KiB go at once: the bound leaves room for it.
    let (bits, len) = (16_000_000u64, 2usize << 20);
    for (what, o) in links() {
        let p = Pair::new();
        p.file("f", len, 9);
        let o = Opts {
            limit_rate: Some(bits),
            streams: 1,
            ..o
        };
        let t0 = Instant::now();
        let out = p.push(&["f"], ".", &o);
        let took = t0.elapsed();
        out.assert_clean();
        assert!(p.same("f"), "{what}");
        let ideal = Duration::from_secs_f64(len as f64 * 8.0 / bits as f64);
        assert!(
            took >= ideal.mul_f64(0.75),
            "{what}: {took:?} for {ideal:?} at the cap"
        );
        let limit = out.limit.expect("the sender reports its cap");
        assert_eq!(limit.bits_per_second, bits, "{what}");
        match what.contains("udp") {
            true => assert_eq!(limit.pacing, "user space (UDP, per stream)", "{what}"),
            false => assert!(
                ["kernel", "user space"].contains(&limit.pacing.as_str()),
                "{what}: {limit:?}"
            ),
        }
    }
}

#[test]
fn a_full_disk_on_any_link_fails_its_file_and_a_second_run_completes() {
    for (what, o) in links() {
        let p = Pair::new();
        p.file("t/a", 300_000, 3);
        p.file("t/b", 200_000, 4);
        let faulty = Opts {
            disk: Some((1, DiskFault::WriteNoSpace)),
            ..o.clone()
        };
        let first = p.push(&["t"], ".", &faulty);
        assert!(first.fired, "{what}");
        assert!(!first.clean(), "{what}: {first:#?}");
        assert!(
            !(p.same("t/a") && p.same("t/b")),
            "{what}: a file with a failed write was committed"
        );
        let second = p.push(&["t"], ".", &o);
        second.assert_clean();
        assert!(p.same("t/a") && p.same("t/b"), "{what}");
        assert_eq!(p.partials(), Vec::<String>::new(), "{what}");
    }
}
