//! Stale `O_DIRECT` writes: the `direct` engine's queued writes of a chunk must never land
//! in a part file after it was let go, neither poisoning a later honest resume nor
//! corrupting another client's committed file while the attacker holds the write back.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use zcp_wire::{ChunkHeader, ErrorCode, Message, Open};

use crate::util::*;

/// Opens a push session of `streams` streams on the `direct` engine with `block`-byte blocks.
fn open_direct(raw: &mut Raw, streams: u16, block: u64) {
    raw.send(&Message::Open(Box::new(Open {
        streams,
        recv_engine: "direct".into(),
        block_size: block as u32,
        ..base_open(false)
    })));
    let opened = raw.recv().unwrap();
    assert!(
        matches!(opened, Message::Opened { streams: s, .. } if s == streams),
        "{opened:?}"
    );
}

/// Queues `count` blocks of filler (file 0) on `a` and, behind them, 64 KiB of garbage for
/// file `id` at `off`; returns `a` once the server has read every byte of it off the socket
/// (the direct engine's writes are then queued, not done).
fn queue_garbage_behind_filler(
    port: u16,
    a: TcpStream,
    block: u64,
    count: u64,
    id: u32,
    off: u64,
) -> TcpStream {
    let a_port = a.local_addr().unwrap().port();
    let writer = std::thread::spawn(move || {
        let mut a = a;
        let filler = vec![0xabu8; block as usize];
        for i in 0..count {
            a.write_all(&ChunkHeader::data(0, i * block, block).encode())
                .unwrap();
            a.write_all(&filler).unwrap();
        }
        a.write_all(&ChunkHeader::data(id, off, 65536).encode())
            .unwrap();
        a.write_all(&[0xee; 65536]).unwrap();
        a
    });
    let a = writer.join().unwrap();
    let t = Instant::now();
    while server_unread(port, a_port) != Some(0) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    a
}

/// The server socket of the data stream whose client side is `local_port`: bytes the server
/// has not read yet (`rx_queue` in /proc/net/tcp).
fn server_unread(server_port: u16, local_port: u16) -> Option<u64> {
    let t = std::fs::read_to_string("/proc/net/tcp").ok()?;
    for line in t.lines().skip(1) {
        let f: Vec<&str> = line.split_whitespace().collect();
        let port = |a: &str| u16::from_str_radix(a.rsplit(':').next()?, 16).ok();
        if port(f[1]) == Some(server_port) && port(f[2]) == Some(local_port) {
            let rx = f[4].split(':').nth(1)?;
            return u64::from_str_radix(rx, 16).ok();
        }
    }
    None
}

/// Whether bytes 64..128 KiB of `bytes` are the attacker's garbage.
fn garbage_in_chunk_1(bytes: &[u8]) -> bool {
    bytes.len() >= 131072 && bytes[65536..131072].iter().all(|b| *b == 0xee)
}

/// Cross-session poisoning through a stale O_DIRECT write. The `direct` engine queues a
/// chunk's buffers to its writer threads and returns: the stream lets go of the part file
/// (and its lock) while the write is still pending, on a second descriptor that holds no
/// lock. A key holder: (1) lands chunk 0 of `t.bin` honestly (durable, journaled); (2) queues
/// 160 MiB of another file on stream A and behind it chunk 1 of `t.bin` with GARBAGE;
/// (3) aborts `t.bin` (the part and journal are kept for a resume, the lock is free);
/// (4) announces `t.bin` again: the receiver resumes the same part file; Go{keep}; (5) sends
/// chunk 1 HONESTLY on stream B: verified, journaled with the honest MAC; (6) the stale
/// garbage write of stream A lands over it; (7) disconnects. The part now holds garbage
/// where its journal records the honest content's MACs. The next honest `zcp send` of the
/// honest `t.bin` resumes, proves every journaled MAC against its source, keeps them all,
/// and the server commits the garbage, reported verified.
/// SAFE: the stored `t.bin` is the honest content.
#[test]
fn push_stale_direct_write_poisons_a_later_honest_resume() {
    const BLOCK: u64 = 32 << 20;
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let honest: Vec<u8> = (0..131072u32).map(|i| (i % 251) as u8).collect();
    let mut raw = Raw::authenticate(srv.port, env.psk());
    open_direct(&mut raw, 2, BLOCK);
    let a = raw.data(srv.port, 0).unwrap();
    let mut b = raw.data(srv.port, 1).unwrap();
    // A large filler file, and t.bin (two 64 KiB chunks).
    raw.announce(0, b"filler.bin", 5 * BLOCK, BLOCK);
    raw.announce(1, b"t.bin", 131072, 65536);
    // (1) chunk 0 of t.bin, honest, on stream B: durable and journaled.
    raw.land(&mut b, 1, 0, 0, &honest[..65536]);
    // (2) the filler, then t.bin's chunk 1 as garbage, all on stream A.
    let t = Instant::now();
    let a = queue_garbage_behind_filler(srv.port, a, BLOCK, 5, 1, 65536);
    let read_at = t.elapsed();
    // (3) give t.bin up (a failed read; a changed source would remove them): part and
    // journal stay for a resume.
    raw.send(&Message::FileAbort {
        file_id: 1,
        code: ErrorCode::Io,
        message: "read failed".into(),
    });
    // (4) announce it again: resumed from the same part file.
    let ready = raw.announce(2, b"t.bin", 131072, 65536);
    assert!(
        matches!(ready, Message::FileReady { resumed: true, .. }),
        "setup: the second announcement was not resumed: {ready:?}"
    );
    raw.send(&Message::Go {
        file_id: 2,
        restart: false,
    });
    // (5) chunk 1, honest, on stream B.
    raw.land(&mut b, 2, 1, 65536, &honest[65536..]);
    eprintln!(
        "stream A read by the server after {read_at:?}; honest chunk 1 journaled {:?} later",
        t.elapsed() - read_at
    );
    // (6) let stream A's queued writes land, (7) go away.
    std::thread::sleep(Duration::from_secs(3));
    drop(a);
    drop(b);
    drop(raw);
    assert!(
        srv.wait_log("ended", 10) || srv.wait_log("failed", 1),
        "{}",
        srv.log()
    );
    std::thread::sleep(Duration::from_millis(500));
    let parts: Vec<String> = tree(&root)
        .into_iter()
        .filter(|n| n.ends_with(".part"))
        .collect();
    eprintln!("left behind: {:?}", tree(&root));
    if let Some(p) = parts.first() {
        let bytes = std::fs::read(root.join(p)).unwrap();
        let garbage = garbage_in_chunk_1(&bytes);
        eprintln!(
            "part file {p}: {} bytes, chunk 1 garbage: {garbage}",
            bytes.len()
        );
    }
    // An honest client now sends the honest t.bin.
    let src = env.mkdir("src").join("t.bin");
    std::fs::write(&src, &honest).unwrap();
    let o = run(
        send_cmd(srv.port, &env.key, &src, "t.bin", &["--chunk-size", "64K"]),
        30,
    );
    eprintln!("honest send: {:?}\n{}", o.status.code(), both(&o));
    let stored = std::fs::read(root.join("t.bin")).unwrap_or_default();
    let garbage = garbage_in_chunk_1(&stored);
    assert!(
        stored == honest,
        "GOT THROUGH: the honest send exited {:?} and the server stored {} bytes of t.bin \
         that are not the honest content (chunk 1 is the attacker's garbage: {garbage})",
        o.status.code(),
        stored.len()
    );
}

/// The same stale O_DIRECT write, held for as long as the attacker likes, against ANOTHER
/// client's upload whose content the attacker does not know. A key holder (session A):
/// lands one chunk of `t.bin` (any bytes: the part file is then kept for a resume), queues
/// 320 MiB of a filler file on its stream with wrong MACs and, behind it, garbage for chunk 1
/// of `t.bin`; gives `t.bin` up (part kept, lock free); then stops reading its control
/// connection after provoking a few MiB of answers. The direct engine's writer threads, done
/// with a filler chunk, block sending its `ChunkAck{not ok}` on A's stuck control connection:
/// the garbage write stays queued, on a descriptor of the part file's inode. An honest
/// client (B) now sends `t.bin`: the receiver reuses that part file (same inode), restarts
/// it, stores B's bytes, verifies, renames it into place and reports success. A then lets go
/// (closes its connection): the writers go on and the garbage lands in B's committed file.
/// SAFE: after A is gone, `t.bin` still holds B's content.
#[test]
fn push_a_held_stale_direct_write_corrupts_another_clients_committed_file() {
    use std::os::fd::AsRawFd;
    const BLOCK: u64 = 64 << 20;
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "30"]);
    let mut raw = Raw::authenticate(srv.port, env.psk());
    // A small receive window on A's control connection, so that the server's answers fill
    // it (and the server's send buffer) soon.
    let small: libc::c_int = 4096;
    // SAFETY: a valid socket descriptor and a c_int option value of the right size.
    #[allow(unsafe_code)]
    unsafe {
        libc::setsockopt(
            raw.s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&small as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
    open_direct(&mut raw, 1, BLOCK);
    let mut a = raw.data(srv.port, 0).unwrap();
    raw.announce(0, b"filler.bin", 5 * BLOCK, BLOCK);
    raw.announce(1, b"t.bin", 131072, 65536);
    // One durable chunk of t.bin (its content is irrelevant): the part file will be kept.
    raw.land(&mut a, 1, 0, 0, &[0u8; 65536]);
    // Wrong MACs for the filler: each filler write that completes answers ChunkAck{not ok}.
    for i in 0..5 {
        raw.send(&Message::ChunkMac {
            file_id: 0,
            index: i,
            mac: [9; 32],
        });
    }
    // The filler, then the garbage for t.bin's chunk 1, on the one stream.
    let a = queue_garbage_behind_filler(srv.port, a, BLOCK, 5, 1, 65536);
    // Give t.bin up (a failed read: its part file is kept), and provoke answers we never
    // read (invalid paths are echoed back).
    let mut flood = raw.est.sealer.seal(&Message::FileAbort {
        file_id: 1,
        code: ErrorCode::Io,
        message: "read failed".into(),
    });
    let mut bad = b"../".to_vec();
    bad.extend_from_slice(&[b'x'; 4090]);
    for _ in 0..2500 {
        flood.extend_from_slice(&raw.est.sealer.seal(&Message::MakeDir {
            path: bad.clone(),
            top: false,
        }));
    }
    let mut ctl = raw.s.try_clone().unwrap();
    let flooder = std::thread::spawn(move || {
        let _ = ctl.write_all(&flood);
    });
    std::thread::sleep(Duration::from_secs(3));
    eprintln!("after the stall: {:?}", tree(&root));
    // An honest client sends its own t.bin (content the attacker never saw).
    let honest: Vec<u8> = (0..131072u32).map(|i| (i * 7 % 253) as u8).collect();
    let src = env.mkdir("src").join("t.bin");
    std::fs::write(&src, &honest).unwrap();
    let o = run(
        send_cmd(srv.port, &env.key, &src, "t.bin", &["--chunk-size", "64K"]),
        30,
    );
    let right_after = std::fs::read(root.join("t.bin")).unwrap_or_default();
    eprintln!(
        "honest send: {:?}, stored == honest right after: {}\n{}",
        o.status.code(),
        right_after == honest,
        both(&o)
    );
    // A lets go.
    let _ = raw.s.shutdown(std::net::Shutdown::Both);
    drop(a);
    drop(raw);
    let _ = flooder.join();
    std::thread::sleep(Duration::from_secs(3));
    let stored = std::fs::read(root.join("t.bin")).unwrap_or_default();
    let garbage = garbage_in_chunk_1(&stored);
    eprintln!("left behind: {:?}", tree(&root));
    // While A's write is held, the part file stays locked: B is refused as busy (nothing
    // stored), or B's file arrived and stays B's.
    if o.status.success() {
        assert!(right_after == honest, "B was told its file was stored");
        assert!(
            stored == honest,
            "GOT THROUGH: the honest client was told its t.bin was stored and verified; after \
             the attacker let go, t.bin holds {} bytes that are not its content (chunk 1 is \
             the attacker's garbage: {garbage})",
            stored.len()
        );
    } else {
        assert!(both(&o).contains("another transfer"), "{}", both(&o));
        assert!(!root.join("t.bin").exists(), "nothing stored while refused");
    }
    // With A gone, B's command run again stores B's file, whole and right.
    let o = run(
        send_cmd(srv.port, &env.key, &src, "t.bin", &["--chunk-size", "64K"]),
        30,
    );
    assert!(o.status.success(), "{}", both(&o));
    assert!(std::fs::read(root.join("t.bin")).unwrap() == honest);
    assert!(no_partials(&root, 5), "{:?}", tree(&root));
}
