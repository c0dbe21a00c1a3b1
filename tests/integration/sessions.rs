//! The server under load and abuse: many sessions at once, limits a client can only tighten,
//! stalled and silent peers.

use std::io::Write;
use std::process::Stdio;
use std::time::{Duration, Instant};

use zcp_wire::{ErrorCode, Message};

use crate::util::*;

#[test]
fn many_sessions_at_once() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let srcs: Vec<_> = (0..6)
        .map(|i| {
            let p = env.path(&format!("s{i}"));
            make_dense(&p, (3 << 20) + i * 4097, i);
            p
        })
        .collect();
    let children: Vec<_> = srcs
        .iter()
        .enumerate()
        .map(|(i, p)| {
            send_cmd(
                srv.port,
                &env.key,
                p,
                &format!("out{i}"),
                &["-i", "0", "-P", "2"],
            )
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    for (i, c) in children.into_iter().enumerate() {
        let o = wait_output(c, 60);
        assert!(o.status.success(), "session {i}: {}", both(&o));
        assert!(same_file(&srcs[i], &root.join(format!("out{i}"))));
    }
}

#[test]
fn limits_a_client_can_only_tighten() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("f");
    make_dense(&src, 1 << 20, 1);
    let srv = ServerProc::start(
        &root,
        &env.key,
        &["--max-streams", "2", "--max-sessions", "1"],
    );
    let (o, v) = send_json(srv.port, &env.key, &src, "f", &["-P", "8"], 30);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(v["start"]["streams"], 2, "asked for 8, the server allows 2");
    // The client may exit before the server has let go of the session: its end line comes
    // after the slot is free.
    assert!(srv.wait_log("finished", 10), "{}", srv.log());

    // One session at a time: a second one is refused while the first holds its place.
    let held = Raw::connect(srv.port, env.psk());
    let o = run(send_cmd(srv.port, &env.key, &src, "g", &[]), 20);
    assert!(!o.status.success());
    assert!(both(&o).contains("too many sessions"), "{}", both(&o));
    drop(held);
    assert!(srv.wait_log("failed", 10) || srv.wait_log("finished", 10));
    let o = run(send_cmd(srv.port, &env.key, &src, "g", &["-i", "0"]), 20);
    assert!(o.status.success(), "{}", both(&o));
}

#[test]
fn stalled_and_silent_peers_block_no_one_and_are_dropped() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(
        &root,
        &env.key,
        &["--idle-timeout", "2", "--handshake-timeout", "2"],
    );
    // Silent before authenticating, and stalled after it.
    let mut silent = std::net::TcpStream::connect(("127.0.0.1", srv.port)).unwrap();
    let mut stalled = Raw::connect(srv.port, env.psk());
    let src = env.path("f");
    make_dense(&src, 2 << 20, 2);
    let t = Instant::now();
    let o = run(send_cmd(srv.port, &env.key, &src, "f", &["-i", "0"]), 20);
    assert!(o.status.success(), "{}", both(&o));
    assert!(
        t.elapsed() < Duration::from_secs(2),
        "a stalled session held others up"
    );
    assert!(closes(&mut silent, 10));
    // The stalled session is ended at its idle timeout.
    let end = Instant::now() + Duration::from_secs(10);
    let mut gone = false;
    while Instant::now() < end {
        match stalled.recv_any() {
            Ok(Message::Error {
                code: ErrorCode::Limit,
                ..
            })
            | Err(_) => {
                gone = true;
                break;
            }
            _ => {}
        }
    }
    assert!(gone, "the stalled session was not ended");
    assert!(srv.wait_log("no progress", 5), "{}", srv.log());
}

#[test]
fn a_sender_that_stops_mid_transfer_is_detected_and_the_file_resumes() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("big");
    make_file(&src, 2 << 30, 1 << 20, 9);
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    let mut child = send_cmd(
        srv.port,
        &env.key,
        &src,
        "big",
        &[&["-i", "0"][..], &SLOW[..]].concat(),
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    let pid = child.id().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    let t = Instant::now();
    assert!(srv.wait_log("no progress", 15), "{}", srv.log());
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "detected after {:?}",
        t.elapsed()
    );
    let _ = std::process::Command::new("kill")
        .args(["-CONT", &pid])
        .status();
    let _ = child.kill();
    let _ = child.wait();
    assert!(!root.join("big").exists());
    let (o, v) = send_json(
        srv.port,
        &env.key,
        &src,
        "big",
        &["--chunk-size", "16M"],
        120,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &root.join("big")));
    assert!(
        v["end"]["resume"]["bytes_skipped"].as_u64().unwrap() > 0,
        "{}",
        v["end"]
    );
}

#[test]
fn indexes_out_of_range_end_the_stream_or_session() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::connect(srv.port, env.psk());
    assert!(matches!(
        raw.put(0, b"t", 100_000),
        Message::FileReady { .. }
    ));
    // A MAC for a chunk the file does not have is a protocol error: the session ends.
    raw.send(&Message::ChunkMac {
        file_id: 0,
        index: 9,
        mac: [0; 32],
    });
    raw.s.flush().unwrap();
    assert!(closes(&mut raw.s, 10));
    assert!(srv.wait_log("chunk 9", 5), "{}", srv.log());
    // File ids only increase: an id again, or a lower one, on a fresh session each, ends
    // the session with the reason.
    for (first, again) in [(3, 3), (5, 4)] {
        let mut raw = Raw::connect(srv.port, env.psk());
        assert!(matches!(
            raw.put(first, b"a", 10),
            Message::FileReady { .. }
        ));
        raw.send(&Message::PutFile(zcp_wire::PutFile {
            file_id: again,
            dest: b"b".to_vec(),
            name: Vec::new(),
            size: 10,
            mode: 0o644,
            mtime_sec: 0,
            mtime_nsec: 0,
            chunk_size: 65536,
            sparse: false,
        }));
        let said = loop {
            match raw.recv() {
                Ok(Message::Error { code, message }) => break Some((code, message)),
                Ok(_) => {}
                Err(_) => break None,
            }
        };
        let (code, why) = said.expect("an Error before the close");
        assert_eq!(code, ErrorCode::Protocol);
        assert!(why.contains("only increase"), "{why}");
        assert!(closes(&mut raw.s, 10));
    }
    assert!(!srv.root.join("b").exists());
}

#[test]
fn serve_once_exits_with_its_sessions_outcome() {
    let env = Env::new();
    let src = env.path("t");
    std::fs::create_dir_all(src.join("sub")).unwrap();
    make_dense(&src.join("a.bin"), 10_000, 1);
    make_dense(&src.join("sub/b.bin"), 10_000, 2);
    let cases: [(&str, i32); 4] = [
        ("ok", 0),
        ("partial", 23),
        ("refused", 4),
        ("refused-tree", 4),
    ];
    for (case, want) in cases {
        let root = env.mkdir(&format!("root-{case}"));
        match case {
            // A directory where a file of the tree goes: that file fails, the rest arrives.
            "partial" => std::fs::create_dir_all(root.join("t/sub/b.bin/x")).unwrap(),
            // The one file sent cannot be stored (its target is a symlink): nothing arrives.
            "refused" => {
                std::fs::write(root.join("elsewhere"), b"kept").unwrap();
                std::os::unix::fs::symlink("elsewhere", root.join("one.bin")).unwrap();
            }
            // A file where the tree's top directory goes: no directory and no file of the
            // tree can arrive, so nothing did (not "partial").
            "refused-tree" => std::fs::write(root.join("t"), b"kept").unwrap(),
            _ => {}
        }
        let mut srv = ServerProc::start(&root, &env.key, &["--once"]);
        let o = if case == "refused" {
            run(
                send_cmd(
                    srv.port,
                    &env.key,
                    &src.join("a.bin"),
                    "one.bin",
                    &["-i", "0"],
                ),
                30,
            )
        } else {
            let mut c = zcp();
            c.args([
                "send",
                "-r",
                "-i",
                "0",
                "-p",
                &srv.port.to_string(),
                "--key-file",
            ])
            .arg(&env.key)
            .arg(&src)
            .arg("127.0.0.1::.");
            run(c, 30)
        };
        assert_eq!(o.status.code(), Some(want), "{case} client: {}", both(&o));
        assert_eq!(
            srv.exit_code(30),
            Some(want),
            "{case} server: {}",
            srv.log()
        );
        match case {
            "ok" => assert!(same_file(&src.join("sub/b.bin"), &root.join("t/sub/b.bin"))),
            "partial" => {
                assert!(same_file(&src.join("a.bin"), &root.join("t/a.bin")));
                assert!(
                    root.join("t/sub/b.bin/x").is_dir(),
                    "the directory is left alone"
                );
            }
            "refused" => assert_eq!(std::fs::read(root.join("elsewhere")).unwrap(), b"kept"),
            _ => {
                assert_eq!(std::fs::read(root.join("t")).unwrap(), b"kept");
                assert_eq!(tree(&root), ["t"]);
            }
        }
    }
}
