//! Sparse sources through both roles: holes are not sent, stay holes, and verify; with
//! staged (64 KiB) and mapped (2 MiB) chunks, every engine pair, a flipped byte and a cut.

use std::os::unix::fs::{FileExt, MetadataExt};

use zcp_engine::{RecvEngine, SendEngine};

use super::relay::WireFault;
use super::{Conn, Opts, Pair, pseudo_random};

const MIB: u64 = 1 << 20;

/// A 24 MiB + 5 source with data at 100 KiB (20 KiB: inside one 64 KiB chunk, across two
/// 4 KiB blocks), 3..5 MiB, a 4 KiB block at 10 MiB + 12 KiB, and its last 5 bytes. Returns
/// the bytes of data written.
fn sparse_source(p: &Pair, rel: &str, seed: u64) -> u64 {
    let path = p.src(rel);
    std::fs::create_dir_all(path.parent().expect("in src")).expect("parents");
    let f = std::fs::File::create(&path).expect("create");
    f.set_len(24 * MIB + 5).expect("size");
    let mut data = 0;
    for (i, (off, len)) in [
        (100 << 10, 20 << 10),
        (3 * MIB, 2 * MIB),
        (10 * MIB + (12 << 10), 4096),
        (24 * MIB, 5),
    ]
    .into_iter()
    .enumerate()
    {
        f.write_all_at(&pseudo_random(len as usize, seed + i as u64), off)
            .expect("write");
        data += len;
    }
    f.sync_all().expect("sync");
    data
}

/// Whether destination `rel` holds what source `s` holds.
fn same(p: &Pair, rel: &str) -> bool {
    std::fs::read(p.dst(rel)).ok() == std::fs::read(p.src("s")).ok()
}

fn allocated(path: &std::path::Path) -> u64 {
    std::fs::metadata(path).expect("stat").blocks() * 512
}

/// Whether the filesystem of the test directory keeps holes (tmpfs, ext4, xfs, btrfs do).
fn keeps_holes(p: &Pair) -> bool {
    let probe = p.src("probe");
    let f = std::fs::File::create(&probe).expect("probe");
    f.set_len(8 * MIB).expect("size");
    let holes = allocated(&probe) < MIB;
    std::fs::remove_file(&probe).expect("remove");
    holes
}

#[test]
fn a_sparse_file_crosses_as_its_data_and_lands_with_its_holes() {
    let p = Pair::new();
    if !keeps_holes(&p) {
        eprintln!("the test directory's filesystem keeps no holes; skipped");
        return;
    }
    let data = sparse_source(&p, "s", 1);
    // Every sender engine into `direct`, and `sendfile` into every engine that verifies;
    // staged chunks (64 KiB: read once, hashed, sent) and mapped ones (2 MiB).
    let pairs = SendEngine::ALL
        .map(|s| (s, RecvEngine::Direct))
        .into_iter()
        .chain(
            [RecvEngine::Splice, RecvEngine::ReadWrite, RecvEngine::Mem]
                .map(|r| (SendEngine::Sendfile, r)),
        );
    for chunk in [64 << 10, 2 * MIB] {
        for (send, recv) in pairs.clone() {
            let name = format!("{}-{}-{chunk}", send.name(), recv.name());
            let o = Opts {
                send_engine: send,
                recv_engine: recv,
                chunk_size: Some(chunk),
                ..Opts::default()
            };
            let out = p.push(&["s"], &name, &o);
            out.assert_clean();
            // The data, each piece widened to whole 4 KiB blocks, and no hole.
            assert!(
                out.bytes_sent >= data && out.bytes_sent <= data + 4 * 8192,
                "{name}: {} bytes sent for {data} of data",
                out.bytes_sent
            );
            if !recv.stores() {
                continue;
            }
            let dst = p.dst(&name);
            assert!(
                std::fs::read(&dst).expect("arrived") == std::fs::read(p.src("s")).unwrap(),
                "{name}: contents differ"
            );
            assert!(
                allocated(&dst) <= data + MIB,
                "{name}: {} bytes allocated for {data} of data",
                allocated(&dst)
            );
            std::fs::remove_file(&dst).expect("remove");
        }
    }
    assert_eq!(p.partials(), Vec::<String>::new());
}

#[test]
fn a_flipped_byte_in_a_sparse_chunk_is_sent_again_and_a_cut_resumes_with_its_holes() {
    let p = Pair::new();
    if !keeps_holes(&p) {
        return;
    }
    let data = sparse_source(&p, "s", 2);
    // The first data on the stream is the 20 KiB at 100 KiB: flip a byte in it.
    let o = Opts {
        streams: 1,
        wire: Some((Conn::Data(0), 5000, WireFault::Flip)),
        ..Opts::default()
    };
    let out = p.push(&["s"], "flipped", &o);
    out.assert_clean();
    assert!(out.fired);
    assert_eq!(out.sender.as_ref().unwrap().resent, 1, "{out:#?}");
    assert!(same(&p, "flipped"));

    // Cut once acknowledgements of durable chunks (holes among them) have come.
    let o = Opts {
        streams: 1,
        wire: Some((Conn::ControlBack, 2000, WireFault::CutAll)),
        ..Opts::default()
    };
    let out = p.push(&["s"], "cut", &o);
    assert!(out.sender.is_err() && out.receiver.is_err(), "{out:#?}");
    assert!(!p.dst("cut").exists());
    let durable = p.journaled("cut");
    assert!(durable >= 65536, "durable chunks: {durable}");
    let again = p.push(&["s"], "cut", &Opts::default());
    again.assert_clean();
    assert!(same(&p, "cut"));
    assert!(again.received.skipped() >= durable, "{again:#?}");
    assert!(again.bytes_sent <= data + 4 * 8192, "{}", again.bytes_sent);
    assert!(allocated(&p.dst("cut")) <= data + MIB);
    assert_eq!(p.partials(), Vec::<String>::new());

    // The same command once more: the target's chunks, holes too, are proven in place.
    let kept = p.push(&["s"], "cut", &Opts::default());
    kept.assert_clean();
    assert_eq!(kept.bytes_sent, 0);
    assert_eq!(kept.received.skipped(), 24 * MIB + 5);
}
