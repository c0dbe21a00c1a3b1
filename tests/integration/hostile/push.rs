//! A malicious client that holds the key, against `zcp serve`.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use zcp_wire::{ChunkHeader, ErrorCode, Have, Message, PutFile};

use super::harness::*;
use crate::util::*;

#[test]
fn a_resume_cut_before_go_keeps_the_part_file_and_journal() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let body: Vec<u8> = (0..196_608u32).map(|i| (i % 241) as u8).collect();
    let put = |raw: &mut Raw| {
        raw.send(&Message::PutFile(PutFile {
            file_id: 0,
            dest: b"r.bin".to_vec(),
            name: Vec::new(),
            size: body.len() as u64,
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            chunk_size: 65536,
            sparse: false,
        }))
    };
    {
        let (mut raw, mut data) = raw_open(&srv, &env, false);
        put(&mut raw);
        assert!(matches!(raw.recv().unwrap(), Message::FileReady { .. }));
        push_chunk(&mut raw, &mut data, 0, &body, 0);
        loop {
            if let Message::ChunkAck { ok: true, .. } = raw.recv_any().unwrap() {
                break;
            }
        }
    }
    let parts = |root: &Path| {
        let mut v: Vec<String> = tree(root)
            .into_iter()
            .filter(|n| n.starts_with(".zcp-"))
            .map(|n| n.rsplit('.').next().unwrap().to_string())
            .collect();
        v.sort();
        v
    };
    let end = Instant::now() + Duration::from_secs(10);
    while parts(&root) != ["journal", "part"] && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(parts(&root), ["journal", "part"], "{:?}", tree(&root));
    {
        // Offered for resume, then cut off before Go.
        let (mut raw, _data) = raw_open(&srv, &env, false);
        put(&mut raw);
        let mut haves = 0;
        loop {
            match raw.recv().unwrap() {
                Message::Have(_) => haves += 1,
                Message::FileReady { resumed, .. } => {
                    assert!(resumed);
                    break;
                }
                other => panic!("{other:?}"),
            }
        }
        assert!(haves > 0);
    }
    let end = Instant::now() + Duration::from_secs(10);
    while srv.log().matches(" failed: ").count() < 2 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(srv.log().matches(" failed: ").count(), 2, "{}", srv.log());
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(parts(&root), ["journal", "part"], "{:?}", tree(&root));
    // And a real sender resumes from it.
    let src = env.path("src");
    std::fs::write(&src, &body).unwrap();
    let (o, v) = send_json(
        srv.port,
        &env.key,
        &src,
        "r.bin",
        &["--chunk-size", "64K"],
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(v["end"]["resume"]["bytes_skipped"], 65536, "{v}");
    assert!(same_file(&src, &root.join("r.bin")));
}
