//! Part files that no later run can resume are removed, however the file was given up, on a
//! server (a push) and on a client (a pull); part files that can be resumed stay. A client
//! cannot turn the removal into one of anything but its own session's file; a resume cut
//! before `Go` keeps what it can resume; a server keeping the user's existing file in place
//! and then giving it up leaves nothing of zcp's beside it. Each test asserts the directory
//! listing afterwards.

use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use zcp_wire::{ErrorCode, Message, PutFile};

use crate::hostile::peer::*;
use crate::util::*;

const SIZE: u64 = 131_072;

fn body() -> Vec<u8> {
    (0..SIZE as u32).map(|i| (i % 251) as u8).collect()
}

/// A push session that announced `dest` as file `id` (two 64 KiB chunks) and made its
/// chunk 0 durable (acknowledged): its part file and journal are on the disk.
fn one_durable_chunk(srv: &ServerProc, env: &Env, dest: &[u8], id: u32) -> (Raw, TcpStream) {
    let mut raw = Raw::connect(srv.port, env.psk());
    let mut data = raw.data(srv.port, 0).unwrap();
    raw.send(&pf(id, dest, SIZE, 65536));
    wait_for(&mut raw, 10, "FileReady", |m| {
        matches!(m, Message::FileReady { .. })
    });
    push_chunk(&mut raw, &mut data, id, &body(), 0);
    wait_for(&mut raw, 10, "ChunkAck 0", |m| {
        matches!(m, Message::ChunkAck { ok: true, .. })
    });
    raw.s
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    (raw, data)
}

/// `own_files(dir)` once it equals `want`, or what it was after 5 s.
fn settles_to(dir: &std::path::Path, want: &[String]) -> Vec<String> {
    let end = Instant::now() + Duration::from_secs(5);
    loop {
        let now = own_files(dir);
        if now == want || Instant::now() > end {
            return now;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn abort(id: u32, code: ErrorCode) -> Message {
    Message::FileAbort {
        file_id: id,
        code,
        message: "given up".into(),
    }
}

/// The part file and journal names of target `name` in the root, sorted as `own_files`.
fn names_of(name: &[u8]) -> Vec<String> {
    let key = zcp_engine::fs::part_key(name);
    vec![format!(".zcp-{key}.journal"), format!(".zcp-{key}.part")]
}

/// A file given up because its source changed leaves no part file or journal; one given up
/// for another reason keeps both, and the next announcement resumes from them.
#[test]
fn a_source_changed_abort_removes_the_part_file_other_aborts_keep_it() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, _data) = one_durable_chunk(&srv, &env, b"t.bin", 0);
    assert_eq!(own_files(&root), names_of(b"t.bin"), "setup");
    sync_after(&mut raw, &abort(0, ErrorCode::SourceChanged), 1);
    assert_eq!(
        settles_to(&root, &[]),
        Vec::<String>::new(),
        "a part file that can never be resumed was kept"
    );
    // Given up for a failed read: kept, and resumed by the next session that sends it.
    let (mut raw, data) = one_durable_chunk(&srv, &env, b"u.bin", 0);
    sync_after(&mut raw, &abort(0, ErrorCode::Io), 1);
    assert_eq!(own_files(&root), names_of(b"u.bin"));
    drop((raw, data));
    let mut raw = Raw::connect(srv.port, env.psk());
    raw.send(&pf(0, b"u.bin", SIZE, 65536));
    let ready = wait_for(&mut raw, 10, "FileReady", |m| {
        matches!(m, Message::FileReady { .. })
    });
    assert!(
        matches!(ready, Message::FileReady { resumed: true, .. }),
        "{ready:?}"
    );
}

/// A part file kept for a resume, then the same target announced with another size (the
/// journal no longer fits: the part file is emptied for the new transfer), whose space
/// cannot be reserved: nothing is left, not even the emptied part file.
#[test]
fn a_part_file_of_another_size_is_not_left_behind_when_the_new_file_fails() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, data) = one_durable_chunk(&srv, &env, b"t.bin", 0);
    sync_after(&mut raw, &abort(0, ErrorCode::Io), 1);
    assert_eq!(own_files(&root), names_of(b"t.bin"), "setup: kept");
    drop((raw, data));
    // 64 TiB: no filesystem here reserves that.
    let mut raw = Raw::connect(srv.port, env.psk());
    raw.send(&pf(0, b"t.bin", 64 << 40, 1 << 30));
    let failed = wait_for(&mut raw, 10, "FileFailed", |m| {
        matches!(m, Message::FileFailed { .. })
    });
    eprintln!("{failed:?}");
    assert_eq!(
        settles_to(&root, &[]),
        Vec::<String>::new(),
        "an emptied part file was kept"
    );
    assert!(!root.join("t.bin").exists());
}

/// A part file offered for resume, the sender restarts the file (`Go{restart}`), and the
/// session ends before any new chunk is durable: the emptied part file is removed.
#[test]
fn a_restarted_file_cut_before_a_new_chunk_leaves_nothing() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, data) = one_durable_chunk(&srv, &env, b"t.bin", 0);
    sync_after(&mut raw, &abort(0, ErrorCode::Io), 1);
    drop((raw, data));
    let mut raw = Raw::connect(srv.port, env.psk());
    let data = raw.data(srv.port, 0).unwrap();
    raw.send(&pf(0, b"t.bin", SIZE, 65536));
    let ready = wait_for(&mut raw, 10, "FileReady", |m| {
        matches!(m, Message::FileReady { .. })
    });
    assert!(
        matches!(ready, Message::FileReady { resumed: true, .. }),
        "setup: {ready:?}"
    );
    raw.s
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    sync_after(
        &mut raw,
        &Message::Go {
            file_id: 0,
            restart: true,
        },
        1,
    );
    drop(data);
    drop(raw);
    assert_eq!(settles_to(&root, &[]), Vec::<String>::new());
}

/// A second session sends `FileAbort{source-changed}` for a file it never announced, while
/// the first holds that file id's target: a protocol error; the first session's part file
/// and journal stay, and it completes the file.
#[test]
fn a_source_changed_abort_removes_nothing_of_another_session() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut a, mut a_data) = one_durable_chunk(&srv, &env, b"t.bin", 0);
    let before = own_files(&root);
    let mut b = Raw::connect(srv.port, env.psk());
    b.send(&abort(0, ErrorCode::SourceChanged));
    let said = error_from(&mut b);
    assert!(matches!(said, Some((ErrorCode::Protocol, _))), "{said:?}");
    assert_eq!(own_files(&root), before);
    // The first session finishes its file.
    let body = body();
    let mac1 = push_chunk(&mut a, &mut a_data, 0, &body, 1);
    let digest = a.digest(0, SIZE, &[mac_of(&a, 0, 0, &body[..65536]), mac1]);
    wait_for(&mut a, 10, "ChunkAck 1", |m| {
        matches!(m, Message::ChunkAck { ok: true, .. })
    });
    a.send(&Message::FileEnd { file_id: 0, digest });
    wait_for(&mut a, 10, "FileCommitted", |m| {
        matches!(m, Message::FileCommitted { .. })
    });
    assert_eq!(std::fs::read(root.join("t.bin")).unwrap(), body);
    assert_eq!(settles_to(&root, &[]), Vec::<String>::new());
}

/// `zcp get` from a server that gives a file up after one durable chunk: because its source
/// changed, the client keeps nothing of it; for another reason, the part file and journal
/// stay for the next `zcp get`.
#[test]
fn a_pull_whose_source_changed_leaves_no_part_file_in_the_destination() {
    let env = Env::new();
    for (code, kept) in [(ErrorCode::SourceChanged, false), (ErrorCode::Io, true)] {
        let dest = env.mkdir(&format!("dest-{}", code.name()));
        let (child, mut evil) = evil_get(&env, &["t.bin"], &dest, &[]);
        evil.put(0, b"t.bin", b"", SIZE);
        assert!(matches!(evil.next(), Message::FileReady { .. }), "setup");
        let body = body();
        evil.send_chunk(0, 0, 0, &body[..65536]);
        assert!(
            matches!(evil.next(), Message::ChunkAck { ok: true, .. }),
            "setup: chunk 0 durable"
        );
        evil.send(&abort(0, code));
        evil.finish();
        let o = wait_output(child, 30);
        assert!(!o.status.success(), "{}", both(&o));
        let want = if kept { names_of(b"t.bin") } else { Vec::new() };
        assert_eq!(
            settles_to(&dest, &want),
            want,
            "{}: {}",
            code.name(),
            both(&o)
        );
        assert!(!dest.join("t.bin").exists());
    }
}

#[test]
fn a_resume_cut_before_go_keeps_the_part_file_and_journal() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let body: Vec<u8> = (0..196_608u32).map(|i| (i % 241) as u8).collect();
    let put = |raw: &mut Raw| {
        raw.send(&Message::PutFile(PutFile {
            mtime_sec: 0,
            ..put_file(0, b"r.bin", body.len() as u64, 65536)
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
    // Both sessions ended as failed: one log line each (a line's reason may say "failed"
    // again, as "connection to the client failed: ..." does).
    let failed = || {
        let log = srv.log();
        log.lines().filter(|l| l.contains(") failed: ")).count()
    };
    let end = Instant::now() + Duration::from_secs(10);
    while failed() < 2 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(failed(), 2, "{}", srv.log());
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

/// A malicious server answers `get want.bin` (the user has a `want.bin` of 128 KiB) with a
/// `PutFile` of that size: the client hashes its file and offers it. The server keeps it all
/// (`Go{keep}`), then gives the file up (`FileAbort`). Every chunk now counts as "durable", so
/// the empty part file is kept "for a resume": a `.zcp-*.part` the user never asked for stays
/// in the destination (and one more for every name the server does this to).
/// SAFE: nothing of zcp's is left beside the user's file, which is unchanged.
#[test]
fn pull_in_place_keep_then_abort_leaves_a_part_file() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let body: Vec<u8> = (0..131_072u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(dest.join("want.bin"), &body).unwrap();
    // The announced mtime: in a pull only an unchanged copy is offered back.
    set_mtime(&dest.join("want.bin"), 1_000_000);
    let (child, mut evil) = evil_get(&env, &["want.bin"], &dest, &[]);
    evil.put(0, b"want.bin", b"", body.len() as u64);
    let mut haves = 0;
    loop {
        match evil.next() {
            Message::Have(_) => haves += 1,
            Message::FileReady { resumed, .. } => {
                assert!(resumed, "the existing target is offered");
                break;
            }
            other => panic!("{other:?}"),
        }
    }
    assert!(haves > 0);
    evil.send(&Message::Go {
        file_id: 0,
        restart: false,
    });
    evil.send(&Message::FileAbort {
        file_id: 0,
        code: zcp_wire::ErrorCode::Io,
        message: "gone".into(),
    });
    evil.finish();
    let o = wait_output(child, 30);
    assert!(!o.status.success(), "the file was given up: {}", both(&o));
    assert_eq!(std::fs::read(dest.join("want.bin")).unwrap(), body);
    // The part file is let go of on the client's own schedule.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        own_files(&dest),
        Vec::<String>::new(),
        "GOT THROUGH: an empty part file was kept in the user's directory: {:?}",
        tree(&dest)
    );
}
