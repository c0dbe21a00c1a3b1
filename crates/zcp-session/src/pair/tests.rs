//! The roles, in one process, with small chunks (64 KiB) and small files: each engine pair,
//! trees, and every kind of fault the harness can inject, each followed by a run that must
//! complete from what is on disk.

use std::sync::Arc;
use std::time::Duration;

use zcp_engine::{RecvEngine, SendEngine};
use zcp_wire::ErrorCode;

use super::faulty::DiskFault;
use super::relay::WireFault;
use super::{Conn, Opts, Pair};

/// Sizes around the edges of chunks and pages.
const SIZES: [usize; 8] = [0, 1, 4095, 4097, 65535, 65536, 65537, 200_003];

#[test]
fn every_engine_pair_moves_every_size_exactly() {
    for send in SendEngine::ALL {
        for recv in [
            RecvEngine::Auto,
            RecvEngine::Splice,
            RecvEngine::Direct,
            RecvEngine::ReadWrite,
            RecvEngine::Mem,
            RecvEngine::Null,
        ] {
            let p = Pair::new();
            let names: Vec<String> = SIZES.iter().map(|n| format!("t/f{n}")).collect();
            for (i, n) in SIZES.iter().enumerate() {
                p.file(&names[i], *n, i as u64);
            }
            let o = Opts {
                send_engine: send,
                recv_engine: recv,
                ..Opts::default()
            };
            let out = p.push(&["t"], ".", &o);
            out.assert_clean();
            assert_eq!(out.received.committed(), SIZES.len(), "{send:?} {recv:?}");
            for name in &names {
                assert_eq!(p.same(name), recv.stores(), "{send:?} -> {recv:?}: {name}");
            }
            if !recv.stores() {
                assert_eq!(p.finals(), Vec::<String>::new(), "{recv:?} stores nothing");
            }
        }
    }
}

#[test]
fn a_tree_arrives_with_its_directories_links_and_empty_files() {
    let p = Pair::new();
    p.file("tree/a/one", 70_000, 1);
    p.file("tree/a/b/two", 3, 2);
    p.file("tree/empty", 0, 3);
    std::fs::create_dir_all(p.src("tree/hollow")).unwrap();
    std::os::unix::fs::symlink("a/one", p.src("tree/link")).unwrap();
    let out = p.push(&["tree"], "into", &Opts::default());
    out.assert_clean();
    for f in ["tree/a/one", "tree/a/b/two", "tree/empty"] {
        assert!(
            std::fs::read(p.dst(&format!("into/{f}"))).unwrap() == std::fs::read(p.src(f)).unwrap()
        );
    }
    assert!(p.dst("into/tree/hollow").is_dir());
    assert_eq!(
        std::fs::read_link(p.dst("into/tree/link")).unwrap(),
        std::path::Path::new("a/one")
    );
    assert_eq!(p.partials(), Vec::<String>::new());
}

#[test]
fn a_flipped_data_byte_is_caught_and_only_its_chunk_is_sent_again() {
    let p = Pair::new();
    p.file("f", 640 << 10, 7);
    let o = Opts {
        streams: 1,
        wire: Some((Conn::Data(0), 200_000, WireFault::Flip)),
        ..Opts::default()
    };
    let out = p.push(&["f"], "f", &o);
    out.assert_clean();
    assert!(p.same("f"));
    assert_eq!(out.sender.as_ref().unwrap().resent, 1, "{out:#?}");
    // One 64 KiB chunk again, and the headers.
    assert!(
        out.bytes_sent < (640 << 10) + (65 << 10) + 4096,
        "{}",
        out.bytes_sent
    );
}

#[test]
fn a_flipped_control_byte_ends_the_session_and_a_second_run_completes() {
    let p = Pair::new();
    p.file("f", 300_000, 8);
    let o = Opts {
        wire: Some((Conn::Control, 40, WireFault::Flip)),
        ..Opts::default()
    };
    let out = p.push(&["f"], "f", &o);
    assert!(out.receiver.is_err(), "{out:#?}");
    assert!(!p.dst("f").exists());
    let again = p.push(&["f"], "f", &Opts::default());
    again.assert_clean();
    assert!(p.same("f"));
}

#[test]
fn a_cut_mid_file_resumes_sending_only_what_was_not_durable() {
    let p = Pair::new();
    p.file("big", 2 << 20, 9);
    // Acknowledgements come only for durable chunks: cut after a few hundred bytes of them.
    let o = Opts {
        streams: 1,
        wire: Some((Conn::ControlBack, 600, WireFault::CutAll)),
        ..Opts::default()
    };
    let out = p.push(&["big"], "big", &o);
    assert!(out.sender.is_err() && out.receiver.is_err(), "{out:#?}");
    assert!(
        !p.dst("big").exists(),
        "nothing partial under the final name"
    );
    assert_eq!(
        p.partials().len(),
        2,
        "part file and journal kept: {:?}",
        p.partials()
    );
    let durable = p.journaled("big");
    assert!(
        durable >= 65536,
        "acknowledged chunks are durable: {durable}"
    );
    let again = p.push(&["big"], "big", &Opts::default());
    again.assert_clean();
    assert!(p.same("big"));
    assert!(again.received.skipped() >= durable, "{again:#?}");
    assert!(
        again.bytes_sent <= (2 << 20) - durable,
        "{}",
        again.bytes_sent
    );
    assert_eq!(p.partials(), Vec::<String>::new());
}

#[test]
fn a_full_disk_fails_only_its_file_and_a_second_run_completes() {
    let p = Pair::new();
    p.file("d/a", 100_000, 1);
    p.file("d/b", 100_000, 2);
    p.file("d/c", 100_000, 3);
    let o = Opts {
        streams: 1,
        disk: Some((2, DiskFault::WriteNoSpace)),
        ..Opts::default()
    };
    let out = p.push(&["d"], ".", &o);
    assert!(out.sender.is_ok() && out.receiver.is_ok(), "{out:#?}");
    assert_eq!(out.received.committed(), 2, "{out:#?}");
    let f = &out.sent.failures;
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].code, ErrorCode::NoSpace.name());
    let again = p.push(&["d"], ".", &Opts::default());
    again.assert_clean();
    for n in ["d/a", "d/b", "d/c"] {
        assert!(p.same(n), "{n}");
    }
}

/// A data stream of the receiver finds the process out of descriptors (EMFILE from `pipe2`):
/// the session ends as busy, for a retry, and fails no file; what was durable is kept, and
/// the next run resumes it and completes.
#[test]
fn a_stream_out_of_descriptors_ends_the_session_busy_and_fails_no_file() {
    let p = Pair::new();
    p.file("d/a", 300_000, 1);
    p.file("d/b", 300_000, 2);
    let o = Opts {
        streams: 1,
        disk: Some((6, DiskFault::StreamEmfile)),
        ..Opts::default()
    };
    let out = p.push(&["d"], ".", &o);
    let Err(e) = &out.sender else {
        panic!("the sender succeeded: {out:#?}");
    };
    assert!(e.retryable(), "{e}");
    assert!(e.to_string().contains("out of file descriptors"), "{e}");
    assert!(out.receiver.is_err(), "{out:#?}");
    assert!(out.sent.failures.is_empty(), "{out:#?}");
    assert!(!p.dst("d/b").exists());
    let again = p.push(&["d"], ".", &Opts::default());
    again.assert_clean();
    for n in ["d/a", "d/b"] {
        assert!(p.same(n), "{n}");
    }
}

#[test]
fn a_source_that_cannot_be_read_ends_the_session_and_a_second_run_completes() {
    let p = Pair::new();
    p.file("f", 500_000, 4);
    let o = Opts {
        disk: Some((3, DiskFault::ReadEio)),
        ..Opts::default()
    };
    let out = p.push(&["f"], "f", &o);
    assert!(out.sender.is_err(), "{out:#?}");
    assert!(!p.dst("f").exists());
    p.push(&["f"], "f", &Opts::default()).assert_clean();
    assert!(p.same("f"));
}

#[test]
fn a_source_changed_or_truncated_mid_file_is_never_committed() {
    for truncate in [false, true] {
        let p = Pair::new();
        p.file("f", 1 << 20, 5);
        let src = p.src("f");
        let change: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            if truncate {
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(&src)
                    .unwrap()
                    .set_len(300_000)
                    .unwrap();
            } else {
                let mut b = std::fs::read(&src).unwrap();
                b[900_000] ^= 1;
                std::thread::sleep(Duration::from_millis(5));
                std::fs::write(&src, b).unwrap();
            }
        });
        let o = Opts {
            streams: 1,
            wire: Some((Conn::Data(0), 400_000, WireFault::Trigger(change))),
            ..Opts::default()
        };
        let out = p.push(&["f"], "f", &o);
        assert!(!p.dst("f").exists(), "truncate {truncate}: {out:#?}");
        let code = out.sent.failures.first().map(|f| f.code);
        assert_eq!(code, Some(ErrorCode::SourceChanged.name()), "{out:#?}");
        // Nothing to resume from a source that changed: no part file or journal kept.
        assert_eq!(p.partials(), Vec::<String>::new(), "truncate {truncate}");
        p.push(&["f"], "f", &Opts::default()).assert_clean();
        assert!(p.same("f"));
    }
}

#[test]
fn a_stall_past_the_idle_timeout_ends_the_session_and_a_second_run_completes() {
    let p = Pair::new();
    p.file("f", 300_000, 6);
    let o = Opts {
        streams: 1,
        idle: Duration::from_millis(400),
        wire: Some((
            Conn::Data(0),
            100_000,
            WireFault::Stall(Duration::from_millis(1500)),
        )),
        ..Opts::default()
    };
    let out = p.push(&["f"], "f", &o);
    assert!(out.sender.is_err() || out.receiver.is_err(), "{out:#?}");
    assert!(!p.dst("f").exists());
    p.push(&["f"], "f", &Opts::default()).assert_clean();
    assert!(p.same("f"));
}

#[test]
fn delete_prunes_the_tree_in_process_and_a_cut_before_it_deletes_nothing() {
    let p = Pair::new();
    p.file("tree/a/one", 70_000, 1);
    p.file("tree/two", 3, 2);
    for (stale, seed) in [
        ("into/tree/gone", 4),
        ("into/tree/a/old/x", 5),
        ("into/keep", 6),
    ] {
        std::fs::create_dir_all(p.dst(stale).parent().unwrap()).unwrap();
        std::fs::write(p.dst(stale), pseudo(seed)).unwrap();
    }
    // A write that fails: the session is not whole, so nothing goes.
    let cut = Opts {
        delete: zcp_wire::DeleteMode::Delete,
        disk: Some((1, DiskFault::WriteNoSpace)),
        ..Opts::default()
    };
    let out = p.push(&["tree"], "into", &cut);
    assert!(!out.clean(), "{out:?}");
    assert!(out.received.deleted.is_empty() && out.sent.deleted.is_empty());
    assert!(p.dst("into/tree/gone").exists() && p.dst("into/tree/a/old/x").exists());
    // Whole: the receiver prunes, both sides name each removal, and `into/keep` (beside the
    // tree) stays.
    let o = Opts {
        delete: zcp_wire::DeleteMode::Delete,
        ..Opts::default()
    };
    let out = p.push(&["tree"], "into", &o);
    out.assert_clean();
    let mut named = out.sent.deleted.clone();
    named.sort();
    assert_eq!(named, ["into/tree/a/old", "into/tree/gone"]);
    assert_eq!(out.received.deleted.len(), 2);
    assert_eq!(
        p.finals(),
        ["into/keep", "into/tree/a/one", "into/tree/two"]
    );
}

fn pseudo(seed: u64) -> Vec<u8> {
    super::pseudo_random(100, seed)
}
