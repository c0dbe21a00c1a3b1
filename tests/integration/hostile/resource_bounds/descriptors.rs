//! File descriptors a peer with the key can make `zcp serve` hold: one per `Get` of a pull,
//! and part files draining at a session's end, which must be let go (and their locks with
//! them) when the session ends.

use std::io::Write;
use std::time::{Duration, Instant};

use zcp_wire::{ChunkHeader, Message, Open};

use crate::hostile::peer::*;
use crate::util::*;

/// File descriptors: every `Get` of a pull holds a directory descriptor until the walk
/// (4096 per session). A handful of key holders' sessions exhaust the server's descriptors
/// (this host's hard limit: `ulimit -Hn`), and honest transfers then fail.
/// SAFE: 4000 Gets grow the server's descriptors by less than 512.
#[test]
fn pull_gets_each_hold_a_server_descriptor() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::create_dir(root.join("d")).unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let before = fd_count(srv.pid());
    let mut raw = Raw::opened(
        srv.port,
        env.psk(),
        Open {
            chunk_size: 65536,
            ..base_open(true)
        },
    );
    let mut frames = Vec::new();
    for _ in 0..4000 {
        frames.extend_from_slice(&raw.est.sealer.seal(&Message::Get {
            path: b"d/x".to_vec(),
            dest: Vec::new(),
        }));
    }
    raw.s.write_all(&frames).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let during = fd_count(srv.pid());
    eprintln!("server descriptors {before} -> {during} after 4000 Gets");
    drop(raw);
    assert!(
        during.saturating_sub(before) < 512,
        "GOT THROUGH: one pull session's 4000 Gets hold {} server descriptors",
        during - before
    );
}

/// The draining of kept part files (round 3): a key holder lands chunk 0 of `tN.bin`
/// (durable), starts chunk 1 on its data stream and stops mid-chunk (the stream holds the
/// part file), gives the file up (kept for a resume, so it drains), then goes silent, in
/// three sessions at once. If a draining part file outlived its session (leaked, and locked
/// for good), the server would keep its descriptors and an honest resume of `tN.bin` would
/// be refused as busy forever.
/// SAFE: once the sessions idle out, the server's descriptors are back where they were and
/// honest sends of the three files complete (resuming the kept chunk).
#[test]
fn part_files_draining_at_a_sessions_end_are_let_go() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    std::thread::sleep(Duration::from_millis(200));
    let base = fd_count(srv.pid());
    let body: Vec<u8> = (0..196_608u32).map(|i| (i % 249) as u8).collect();
    let mut held = Vec::new();
    for k in 0..3 {
        let name = format!("t{k}.bin");
        let mut raw = Raw::connect_with(srv.port, env.psk(), "rw", 1);
        let mut data = raw.data(srv.port, 0).unwrap();
        raw.send(&pf(0, name.as_bytes(), body.len() as u64, 65536));
        assert!(matches!(raw.recv().unwrap(), Message::FileReady { .. }));
        push_chunk(&mut raw, &mut data, 0, &body, 0);
        loop {
            if let Message::ChunkAck { ok: true, .. } = raw.recv_any().unwrap() {
                break;
            }
        }
        data.write_all(&ChunkHeader::data(0, 65536, 65536).encode())
            .unwrap();
        data.write_all(&body[65536..66536]).unwrap();
        std::thread::sleep(Duration::from_millis(100));
        raw.send(&Message::FileAbort {
            file_id: 0,
            code: zcp_wire::ErrorCode::Io,
            message: "bye".into(),
        });
        held.push((raw, data));
    }
    let during = fd_count(srv.pid());
    // Silence: every session ends at its idle timeout.
    let end = Instant::now() + Duration::from_secs(15);
    while fd_count(srv.pid()) > base && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = fd_count(srv.pid());
    println!("server descriptors: {base} before, {during} during, {after} after");
    drop(held);
    assert!(
        after <= base,
        "GOT THROUGH: {} descriptors outlived their sessions",
        after - base
    );
    let src = env.path("src.bin");
    std::fs::write(&src, &body).unwrap();
    for k in 0..3 {
        let name = format!("t{k}.bin");
        let o = run(
            send_cmd(
                srv.port,
                &env.key,
                &src,
                &name,
                &["-i", "0", "--chunk-size", "64K"],
            ),
            30,
        );
        assert!(o.status.success(), "GOT THROUGH: {name}: {}", both(&o));
        assert_eq!(std::fs::read(root.join(&name)).unwrap(), body);
    }
    assert_eq!(own_files(&root), Vec::<String>::new());
}
