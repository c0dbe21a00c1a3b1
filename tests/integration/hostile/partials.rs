//! Part files that no later run can resume are removed, however the file was given up, on a
//! server (a push) and on a client (a pull); part files that can be resumed stay. A client
//! cannot turn the removal into one of anything but its own session's file. Each test asserts
//! the directory listing afterwards.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use zcp_wire::{ChunkHeader, ErrorCode, Message};

use super::harness::*;
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
    let mut digest = a.est.keys.file_digest(0, SIZE, 65536);
    digest.push(&mac_of(&a, 0, 0, &body[..65536]));
    digest.push(&mac1);
    wait_for(&mut a, 10, "ChunkAck 1", |m| {
        matches!(m, Message::ChunkAck { ok: true, .. })
    });
    a.send(&Message::FileEnd {
        file_id: 0,
        digest: digest.finish(),
    });
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
        let mut h = evil.est.keys.chunk_hasher(0, 0, 65536);
        h.update(&body[..65536]);
        let mac = *h.finalize().as_bytes();
        evil.data[0]
            .write_all(&ChunkHeader::data(0, 0, 65536).encode())
            .unwrap();
        evil.data[0].write_all(&body[..65536]).unwrap();
        evil.send(&Message::ChunkMac {
            file_id: 0,
            index: 0,
            mac,
        });
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
