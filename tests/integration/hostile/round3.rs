//! The third review of issue 10: an authenticated, malicious peer against the restructured
//! session code (recv/, send/, transport/); 10 of its 12 attacks got through before the fixes
//! in this file's commit (stale O_DIRECT writes landing after a part file was let go, budgets
//! for rings and descriptors, idle-clock bypasses). Each test asserts the SAFE outcome on
//! disk (and in exit codes, logs, resources); a failing test names what got through.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use zcp_wire::{ChunkHeader, ErrorCode, Message, Open, PutFile};

use super::harness::*;
use crate::util::*;

fn pf(id: u32, dest: &[u8], size: u64, chunk_size: u64) -> Message {
    Message::PutFile(PutFile {
        file_id: id,
        dest: dest.to_vec(),
        name: Vec::new(),
        size,
        mode: 0o644,
        mtime_sec: 1_000_000,
        mtime_nsec: 0,
        chunk_size,
    })
}

/// The keyed MAC of `bytes` as chunk (`id`, `off`) of this session.
fn mac_of(raw: &Raw, id: u32, off: u64, bytes: &[u8]) -> [u8; 32] {
    let mut h = raw.est.keys.chunk_hasher(id, off, bytes.len() as u64);
    h.update(bytes);
    *h.finalize().as_bytes()
}

/// Reads frames until `want` matches one (returned); panics after `secs` with what came.
fn wait_for(raw: &mut Raw, secs: u64, what: &str, want: impl Fn(&Message) -> bool) -> Message {
    let end = Instant::now() + Duration::from_secs(secs);
    let mut seen = Vec::new();
    raw.s
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    while Instant::now() < end {
        match raw.recv_any() {
            Ok(m) if want(&m) => return m,
            Ok(m) => seen.push(format!("{m:?}").chars().take(200).collect::<String>()),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("waiting for {what}: {e}; seen {seen:?}"),
        }
    }
    panic!("no {what} within {secs} s; seen {seen:?}")
}

/// Sends `m` every `every` (made by `make(turn)`) until the peer closes the control
/// connection or `limit` passes. Returns how long the session lived.
fn chatter_until_closed(
    raw: &mut Raw,
    limit: Duration,
    every: Duration,
    mut make: impl FnMut(u64) -> Option<Message>,
) -> (bool, Duration) {
    let t = Instant::now();
    let mut turn = 0;
    raw.s.set_read_timeout(Some(every)).unwrap();
    while t.elapsed() < limit {
        if let Some(m) = make(turn) {
            raw.send(&m);
        }
        turn += 1;
        match raw.recv_any() {
            Ok(Message::Error { .. }) => return (true, t.elapsed()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return (true, t.elapsed()),
        }
    }
    (false, t.elapsed())
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

// ------------------------------------------------------------------ honest outcomes

/// A receiver counts every write of a chunk into the bytes it reports in `Progress`, also a
/// chunk written again after a MAC mismatch (which an honest sender causes when a source
/// changes under a chunk). Its `Progress` then exceeds the file's size, which the sender
/// treats as a protocol error and ends the session for.
/// SAFE: `Progress` never names more bytes than the file has.
#[test]
fn push_progress_stays_within_the_file_after_a_chunk_is_sent_again() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
    let mut d = raw.data(srv.port, 0).unwrap();
    let body = vec![0x42u8; 1000];
    raw.send(&pf(0, b"p.bin", 1000, 65536));
    wait_for(&mut raw, 10, "FileReady", |m| {
        matches!(m, Message::FileReady { .. })
    });
    // Twice the chunk with a MAC that does not match (as after a source changed under it).
    for _ in 0..2 {
        d.write_all(&ChunkHeader::data(0, 0, 1000).encode())
            .unwrap();
        d.write_all(&body).unwrap();
        raw.send(&Message::ChunkMac {
            file_id: 0,
            index: 0,
            mac: [1; 32],
        });
        wait_for(&mut raw, 10, "ChunkAck not ok", |m| {
            matches!(m, Message::ChunkAck { ok: false, .. })
        });
    }
    // The receiver's keep-alives while the file is open.
    let mut most = 0;
    let t = Instant::now();
    raw.s
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    while t.elapsed() < Duration::from_millis(2500) {
        if let Ok(Message::Progress { file_id: 0, bytes }) = raw.recv_any() {
            most = most.max(bytes);
        }
    }
    // Then the file, honestly: it still arrives.
    let mac = push_chunk(&mut raw, &mut d, 0, &body, 0);
    let mut dg = raw.est.keys.file_digest(0, 1000, 65536);
    dg.push(&mac);
    raw.send(&Message::FileEnd {
        file_id: 0,
        digest: dg.finish(),
    });
    let a = wait_for(&mut raw, 10, "FileCommitted/FileFailed", |m| {
        matches!(
            m,
            Message::FileCommitted { .. } | Message::FileFailed { .. }
        )
    });
    assert!(matches!(a, Message::FileCommitted { .. }), "{a:?}");
    assert_eq!(std::fs::read(root.join("p.bin")).unwrap(), body);
    assert!(no_partials(&root, 5));
    assert!(
        most <= 1000,
        "GOT THROUGH: the server reported Progress of {most} bytes for a 1000-byte file \
         (an honest zcp client ends the session on that as a protocol error)"
    );
}

/// A malicious server sends the requested file's only chunk with a wrong MAC, again and
/// again. PROTOCOL.md: "A chunk that fails four times fails its file". The receiving client
/// never counts: it asks for the chunk forever (and each resend is bytes moved, so progress:
/// the idle timeout never ends it), and its Progress grows past the file's size.
/// SAFE: the client gives the file up by the 4th failure (FileFailed or the session ends),
/// exits non-zero, stores nothing.
#[test]
fn pull_a_chunk_that_never_verifies_is_not_asked_for_forever() {
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let dest = env.mkdir("dest");
    let child = get(
        l.local_addr().unwrap().port(),
        &env.key,
        &["want.bin"],
        &dest,
        &[],
    );
    let mut evil = Evil::accept(&l, &env.psk(), None);
    evil.put(0, b"want.bin", b"", 1000);
    assert!(matches!(evil.next(), Message::FileReady { .. }));
    let mut not_ok = 0;
    let mut gave_up = false;
    let mut most_progress = 0;
    'outer: for _ in 0..8 {
        let d = &mut evil.data[0];
        if d.write_all(&ChunkHeader::data(0, 0, 1000).encode())
            .is_err()
            || d.write_all(&[0xee; 1000]).is_err()
        {
            gave_up = true;
            break;
        }
        evil.send(&Message::ChunkMac {
            file_id: 0,
            index: 0,
            mac: [3; 32],
        });
        loop {
            match evil.recv() {
                Ok(Message::Progress { bytes, .. }) => most_progress = most_progress.max(bytes),
                Ok(Message::ChunkAck { ok: false, .. }) => {
                    not_ok += 1;
                    break;
                }
                Ok(Message::FileFailed { .. }) | Err(_) => {
                    gave_up = true;
                    break 'outer;
                }
                Ok(_) => {}
            }
        }
    }
    // A second and a half of keep-alives.
    evil.s
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    if let Ok(Message::Progress { bytes, .. }) = evil.recv() {
        most_progress = most_progress.max(bytes);
    }
    read_timeout(&evil.s);
    evil.finish();
    let o = wait_output(child, 30);
    eprintln!(
        "not-ok acks {not_ok}, gave up {gave_up}, most progress {most_progress}; {}",
        both(&o)
    );
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    assert!(!dest.join("want.bin").exists());
    assert!(no_partials(&dest, 5));
    assert!(
        gave_up && not_ok <= 4,
        "GOT THROUGH: the client asked {not_ok} times for a chunk that never verifies \
         (Progress up to {most_progress} bytes for a 1000-byte file)"
    );
    assert!(
        most_progress <= 1000,
        "GOT THROUGH: Progress of {most_progress} bytes for a 1000-byte file"
    );
}

// ------------------------------------------------------------------ idle-timeout bypasses

/// The pull's `Get` phase has no idle clock: each `Get` gets the whole handshake timeout
/// again, so one `Get` every few seconds holds a session slot (and the thread) for up to
/// 4096 x --handshake-timeout (11 h at the defaults), with no progress.
/// SAFE: the session ends within a few seconds of --idle-timeout / --handshake-timeout.
#[test]
fn pull_gets_trickled_hold_a_server_session_without_progress() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::write(root.join("f"), b"x").unwrap();
    let srv = ServerProc::start(
        &root,
        &env.key,
        &["--idle-timeout", "2", "--handshake-timeout", "3"],
    );
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&open_message(true, 65536));
    assert!(matches!(raw.recv().unwrap(), Message::Opened { .. }));
    let (closed, lived) = chatter_until_closed(
        &mut raw,
        Duration::from_secs(14),
        Duration::from_millis(2000),
        |_| {
            Some(Message::Get {
                path: b"f".to_vec(),
                dest: Vec::new(),
            })
        },
    );
    eprintln!("closed {closed} after {lived:?}; log {}", srv.log());
    assert!(
        closed && lived < Duration::from_secs(9),
        "GOT THROUGH: a Get every 2 s held a session past --idle-timeout 2 / \
         --handshake-timeout 3 for {lived:?}"
    );
}

/// `Progress` from the receiver counts as progress whenever its byte count grows: a pull
/// client that never says FileReady and raises the count by one byte a second holds a
/// server session for size-in-bytes seconds (a 1 GiB file: 34 years) without any work.
/// SAFE: the session ends within a few seconds of --idle-timeout.
#[test]
fn pull_progress_counted_up_one_byte_at_a_time_holds_a_server_session() {
    let env = Env::new();
    let root = env.mkdir("root");
    std::fs::File::create(root.join("want.bin"))
        .unwrap()
        .set_len(1 << 30)
        .unwrap();
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    let (mut raw, _data) = raw_open(&srv, &env, true);
    let id = next_put(&mut raw);
    let (closed, lived) = chatter_until_closed(
        &mut raw,
        Duration::from_secs(12),
        Duration::from_millis(500),
        |turn| {
            Some(Message::Progress {
                file_id: id,
                bytes: turn + 1,
            })
        },
    );
    eprintln!("closed {closed} after {lived:?}; log {}", srv.log());
    assert!(
        closed && lived < Duration::from_secs(8),
        "GOT THROUGH: Progress +1 byte every 0.5 s held a pull session past \
         --idle-timeout 2 for {lived:?} (no FileReady, no byte moved)"
    );
}

/// "A link made or changed" is progress: flipping one link between two targets holds a push
/// session open forever, and in a pull (`get -r`) a server can do the same to a client.
/// SAFE: the session ends within a few seconds of --idle-timeout.
#[test]
fn push_a_link_flipped_back_and_forth_holds_a_session() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    let (closed, lived) = chatter_until_closed(
        &mut raw,
        Duration::from_secs(12),
        Duration::from_millis(500),
        |turn| {
            Some(Message::MakeLink {
                path: b"l".to_vec(),
                target: if turn % 2 == 0 {
                    b"a".to_vec()
                } else {
                    b"b".to_vec()
                },
            })
        },
    );
    eprintln!("closed {closed} after {lived:?}; log {}", srv.log());
    assert!(
        std::fs::symlink_metadata(root.join("l")).is_ok(),
        "the link was made"
    );
    assert!(
        closed && lived < Duration::from_secs(8),
        "GOT THROUGH: a link flipped every 0.5 s held a push session past \
         --idle-timeout 2 for {lived:?}"
    );
}

// ------------------------------------------------------------------ resources

/// Memory per session: the `direct` ring allocates six buffers of the client's block size
/// per stream, zeroed (so resident) when the stream's first chunk arrives. A client asking
/// for 64 MiB blocks pins 384 MiB of server memory per stream with one 64 KiB chunk: with
/// the default 16 streams and 16 sessions, about 96 GiB.
/// SAFE: four streams with one small chunk each grow the server by less than 256 MiB.
#[test]
fn push_direct_rings_pin_server_memory_per_stream() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    const STREAMS: u16 = 4;
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&Message::Open(Open {
        pull: false,
        recursive: false,
        streams: STREAMS,
        idle_ms: 0,
        recv_engine: "direct".into(),
        send_engine: "sendfile".into(),
        block_size: 64 << 20,
        chunk_size: 0,
    }));
    assert!(matches!(raw.recv().unwrap(), Message::Opened { .. }));
    let mut data: Vec<TcpStream> = (0..STREAMS)
        .map(|i| raw.data(srv.port, i).unwrap())
        .collect();
    let before = srv.rss_kib();
    let body = vec![0x61u8; usize::from(STREAMS) * 65536];
    raw.send(&pf(0, b"m.bin", body.len() as u64, 65536));
    wait_for(&mut raw, 10, "FileReady", |m| {
        matches!(m, Message::FileReady { .. })
    });
    for (i, d) in data.iter_mut().enumerate() {
        push_chunk(&mut raw, d, 0, &body, i);
    }
    std::thread::sleep(Duration::from_millis(1500));
    let after = srv.rss_kib();
    let grown = after.saturating_sub(before) >> 10;
    eprintln!("server RSS {before} KiB -> {after} KiB (+{grown} MiB) for 256 KiB of data");
    // The file itself arrives.
    let mut dg = raw.est.keys.file_digest(0, body.len() as u64, 65536);
    let macs: Vec<[u8; 32]> = body
        .chunks(65536)
        .enumerate()
        .map(|(i, c)| mac_of(&raw, 0, i as u64 * 65536, c))
        .collect();
    for m in &macs {
        dg.push(m);
    }
    raw.send(&Message::FileEnd {
        file_id: 0,
        digest: dg.finish(),
    });
    let a = wait_for(&mut raw, 10, "FileCommitted/FileFailed", |m| {
        matches!(
            m,
            Message::FileCommitted { .. } | Message::FileFailed { .. }
        )
    });
    assert!(matches!(a, Message::FileCommitted { .. }), "{a:?}");
    assert_eq!(std::fs::read(root.join("m.bin")).unwrap(), body);
    assert!(
        grown < 256,
        "GOT THROUGH: {STREAMS} streams with one 64 KiB chunk each grew the server by \
         {grown} MiB (64 MiB blocks x 6 ring buffers per stream)"
    );
}

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
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&open_message(true, 65536));
    assert!(matches!(raw.recv().unwrap(), Message::Opened { .. }));
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

// ------------------------------------------------------------------ integrity: stale writes

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
    const FILLER: u64 = 5;
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let honest: Vec<u8> = (0..131072u32).map(|i| (i % 251) as u8).collect();
    let mut raw = Raw::authenticate(srv.port, env.psk());
    raw.send(&Message::Open(Open {
        pull: false,
        recursive: false,
        streams: 2,
        idle_ms: 0,
        recv_engine: "direct".into(),
        send_engine: "sendfile".into(),
        block_size: BLOCK as u32,
        chunk_size: 0,
    }));
    assert!(matches!(
        raw.recv().unwrap(),
        Message::Opened { streams: 2, .. }
    ));
    let a = raw.data(srv.port, 0).unwrap();
    let mut b = raw.data(srv.port, 1).unwrap();
    let a_port = a.local_addr().unwrap().port();
    // A large filler file, and t.bin (two 64 KiB chunks).
    raw.send(&pf(0, b"filler.bin", FILLER * BLOCK, BLOCK));
    wait_for(&mut raw, 10, "FileReady 0", |m| {
        matches!(m, Message::FileReady { file_id: 0, .. })
    });
    raw.send(&pf(1, b"t.bin", 131072, 65536));
    let r = wait_for(&mut raw, 10, "FileReady 1", |m| {
        matches!(m, Message::FileReady { file_id: 1, .. })
    });
    eprintln!("{r:?}");
    // (1) chunk 0 of t.bin, honest, on stream B: durable and journaled.
    b.write_all(&ChunkHeader::data(1, 0, 65536).encode())
        .unwrap();
    b.write_all(&honest[..65536]).unwrap();
    let m = mac_of(&raw, 1, 0, &honest[..65536]);
    raw.send(&Message::ChunkMac {
        file_id: 1,
        index: 0,
        mac: m,
    });
    wait_for(&mut raw, 10, "ChunkAck 1/0", |m| {
        matches!(
            m,
            Message::ChunkAck {
                file_id: 1,
                index: 0,
                ok: true
            }
        )
    });
    // (2) the filler, then t.bin's chunk 1 as garbage, all on stream A.
    let writer = std::thread::spawn(move || {
        let mut a = a;
        let filler = vec![0xabu8; BLOCK as usize];
        for i in 0..FILLER {
            a.write_all(&ChunkHeader::data(0, i * BLOCK, BLOCK).encode())
                .unwrap();
            a.write_all(&filler).unwrap();
        }
        a.write_all(&ChunkHeader::data(1, 65536, 65536).encode())
            .unwrap();
        a.write_all(&[0xee; 65536]).unwrap();
        a
    });
    let a = writer.join().unwrap();
    let t = Instant::now();
    while server_unread(srv.port, a_port) != Some(0) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(2));
    }
    let read_at = t.elapsed();
    // (3) give t.bin up: part and journal stay for a resume.
    raw.send(&Message::FileAbort {
        file_id: 1,
        code: ErrorCode::SourceChanged,
        message: "changed".into(),
    });
    // (4) announce it again: resumed from the same part file.
    raw.send(&pf(2, b"t.bin", 131072, 65536));
    let ready = wait_for(&mut raw, 10, "FileReady 2", |m| {
        matches!(m, Message::FileReady { file_id: 2, .. })
    });
    assert!(
        matches!(ready, Message::FileReady { resumed: true, .. }),
        "setup: the second announcement was not resumed: {ready:?}"
    );
    raw.send(&Message::Go {
        file_id: 2,
        restart: false,
    });
    // (5) chunk 1, honest, on stream B.
    b.write_all(&ChunkHeader::data(2, 65536, 65536).encode())
        .unwrap();
    b.write_all(&honest[65536..]).unwrap();
    let m = mac_of(&raw, 2, 65536, &honest[65536..]);
    raw.send(&Message::ChunkMac {
        file_id: 2,
        index: 1,
        mac: m,
    });
    wait_for(&mut raw, 10, "ChunkAck 2/1", |m| {
        matches!(
            m,
            Message::ChunkAck {
                file_id: 2,
                index: 1,
                ok: true
            }
        )
    });
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
        let garbage = bytes.len() >= 131072 && bytes[65536..131072].iter().all(|b| *b == 0xee);
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
    let garbage = stored.len() == 131072 && stored[65536..].iter().all(|b| *b == 0xee);
    assert!(
        stored == honest,
        "GOT THROUGH: the honest send exited {:?} and the server stored {} bytes of t.bin \
         that are not the honest content (chunk 1 is the attacker's garbage: {garbage})",
        o.status.code(),
        stored.len()
    );
}

// ------------------------------------------------------------------ the server log

/// The server log keeps 100 clipped notices per session, but a *file* that fails is logged
/// through another path (`ServerObserver::file_done`): every one, with its whole escaped
/// name. A name of control bytes escapes to six characters a byte (`\u{1}`), so a 4 KiB
/// PutFile answered by an early FileEnd (the file fails: "FileEnd with 0 of 2 chunks
/// acknowledged") writes about 24 KiB to the log, without limit, and each file made ready
/// is progress, so the session never idles out.
/// SAFE: the log grows by less than twice what the client sent.
#[test]
fn push_failed_files_flood_the_server_log_unclipped() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
    let _d = raw.data(srv.port, 0).unwrap();
    let comp = vec![0x01u8; 255];
    let mut dest = Vec::new();
    for i in 0..16 {
        if i > 0 {
            dest.push(b'/');
        }
        dest.extend_from_slice(&comp);
    }
    const N: u32 = 300;
    let before = srv.log().len();
    let mut sent = 0usize;
    let mut frames = Vec::new();
    for id in 0..N {
        for m in [
            pf(id, &dest, 131072, 65536),
            Message::FileEnd {
                file_id: id,
                digest: [0; 32],
            },
        ] {
            let f = raw.est.sealer.seal(&m);
            sent += f.len();
            frames.extend_from_slice(&f);
        }
    }
    raw.s.write_all(&frames).unwrap();
    let mut failed = 0;
    let t = Instant::now();
    raw.s
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    while failed < N && t.elapsed() < Duration::from_secs(15) {
        if let Ok(Message::FileFailed { .. }) = raw.recv_any() {
            failed += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let logged = srv.log().len() - before;
    eprintln!(
        "{failed} files failed; sent {} KiB, the server logged {} KiB ({:.1}x)",
        sent >> 10,
        logged >> 10,
        logged as f64 / sent as f64
    );
    assert!(
        !tree(&root).iter().any(|p| p.ends_with(".part")),
        "{:?}",
        tree(&root)
    );
    assert!(
        logged < 2 * sent,
        "GOT THROUGH (log amplification): {logged} log bytes for {sent} bytes sent"
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
    const FILLER: u64 = 5;
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
    raw.send(&Message::Open(Open {
        pull: false,
        recursive: false,
        streams: 1,
        idle_ms: 0,
        recv_engine: "direct".into(),
        send_engine: "sendfile".into(),
        block_size: BLOCK as u32,
        chunk_size: 0,
    }));
    assert!(matches!(
        raw.recv().unwrap(),
        Message::Opened { streams: 1, .. }
    ));
    let mut a = raw.data(srv.port, 0).unwrap();
    let a_port = a.local_addr().unwrap().port();
    raw.send(&pf(0, b"filler.bin", FILLER * BLOCK, BLOCK));
    wait_for(&mut raw, 10, "FileReady 0", |m| {
        matches!(m, Message::FileReady { file_id: 0, .. })
    });
    raw.send(&pf(1, b"t.bin", 131072, 65536));
    wait_for(&mut raw, 10, "FileReady 1", |m| {
        matches!(m, Message::FileReady { file_id: 1, .. })
    });
    // One durable chunk of t.bin (its content is irrelevant): the part file will be kept.
    let zeros = vec![0u8; 65536];
    a.write_all(&ChunkHeader::data(1, 0, 65536).encode())
        .unwrap();
    a.write_all(&zeros).unwrap();
    let m = mac_of(&raw, 1, 0, &zeros);
    raw.send(&Message::ChunkMac {
        file_id: 1,
        index: 0,
        mac: m,
    });
    wait_for(&mut raw, 10, "ChunkAck 1/0", |m| {
        matches!(
            m,
            Message::ChunkAck {
                file_id: 1,
                index: 0,
                ok: true
            }
        )
    });
    // Wrong MACs for the filler: each filler write that completes answers ChunkAck{not ok}.
    for i in 0..FILLER {
        raw.send(&Message::ChunkMac {
            file_id: 0,
            index: i,
            mac: [9; 32],
        });
    }
    // The filler, then the garbage for t.bin's chunk 1, on the one stream.
    let writer = std::thread::spawn(move || {
        let filler = vec![0xabu8; BLOCK as usize];
        for i in 0..FILLER {
            a.write_all(&ChunkHeader::data(0, i * BLOCK, BLOCK).encode())
                .unwrap();
            a.write_all(&filler).unwrap();
        }
        a.write_all(&ChunkHeader::data(1, 65536, 65536).encode())
            .unwrap();
        a.write_all(&[0xee; 65536]).unwrap();
        a
    });
    let a = writer.join().unwrap();
    let t = Instant::now();
    while server_unread(srv.port, a_port) != Some(0) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(1));
    }
    // Give t.bin up, and provoke answers we never read (invalid paths are echoed back).
    let mut flood = raw.est.sealer.seal(&Message::FileAbort {
        file_id: 1,
        code: ErrorCode::SourceChanged,
        message: "changed".into(),
    });
    let mut bad = b"../".to_vec();
    bad.extend_from_slice(&[b'x'; 4090]);
    for _ in 0..2500 {
        flood.extend_from_slice(&raw.est.sealer.seal(&Message::MakeDir { path: bad.clone() }));
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
    let garbage = stored.len() >= 131072 && stored[65536..131072].iter().all(|b| *b == 0xee);
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

// ------------------------------------------------------------------ refused correctly

/// Two streams claim the same chunk at once, one with the honest bytes, one with garbage;
/// the MAC is the honest one. SAFE: the second claim is refused; whatever commits is the
/// honest content, never the garbage.
#[test]
fn push_two_streams_claiming_one_chunk() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 2);
    let mut a = raw.data(srv.port, 0).unwrap();
    let mut b = raw.data(srv.port, 1).unwrap();
    let honest = vec![0x11u8; 65536];
    raw.send(&pf(0, b"c.bin", 65536, 65536));
    wait_for(&mut raw, 10, "FileReady", |m| {
        matches!(m, Message::FileReady { .. })
    });
    // Whichever stream's claim comes second is refused and closed: its writes may fail.
    let h = ChunkHeader::data(0, 0, 65536).encode();
    let _ = a.write_all(&h);
    let _ = b.write_all(&h);
    let _ = a.write_all(&honest[..1000]);
    let _ = b.write_all(&[0xee; 65536]);
    let _ = a.write_all(&honest[1000..]);
    let m = mac_of(&raw, 0, 0, &honest);
    raw.send(&Message::ChunkMac {
        file_id: 0,
        index: 0,
        mac: m,
    });
    let mut dg = raw.est.keys.file_digest(0, 65536, 65536);
    dg.push(&m);
    raw.send(&Message::FileEnd {
        file_id: 0,
        digest: dg.finish(),
    });
    let answer = wait_for(&mut raw, 10, "an answer", |m| {
        matches!(
            m,
            Message::FileCommitted { .. }
                | Message::FileFailed { .. }
                | Message::ChunkAck { ok: false, .. }
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    eprintln!("{answer:?}; tree {:?}", tree(&root));
    if let Ok(stored) = std::fs::read(root.join("c.bin")) {
        assert_eq!(stored, honest, "GOT THROUGH: garbage committed");
    }
}

/// A chunk of a resumed file waits on its stream for `Go`; the sender then says
/// Go{restart}. SAFE: the held chunk lands only after the part file was emptied, the file
/// is sent whole, and what commits is exactly the honest content.
#[test]
fn push_a_chunk_held_for_go_then_restart() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
    let mut d = raw.data(srv.port, 0).unwrap();
    let honest: Vec<u8> = (0..131072u32).map(|i| (i % 241) as u8).collect();
    raw.send(&pf(0, b"r.bin", 131072, 65536));
    wait_for(&mut raw, 10, "FileReady 0", |m| {
        matches!(m, Message::FileReady { file_id: 0, .. })
    });
    // Chunk 0 of an OLD version (durable), then the file is given up: kept for a resume.
    let old = vec![0x99u8; 65536];
    d.write_all(&ChunkHeader::data(0, 0, 65536).encode())
        .unwrap();
    d.write_all(&old).unwrap();
    let m = mac_of(&raw, 0, 0, &old);
    raw.send(&Message::ChunkMac {
        file_id: 0,
        index: 0,
        mac: m,
    });
    wait_for(&mut raw, 10, "ChunkAck 0/0", |m| {
        matches!(
            m,
            Message::ChunkAck {
                file_id: 0,
                ok: true,
                ..
            }
        )
    });
    raw.send(&Message::FileAbort {
        file_id: 0,
        code: ErrorCode::SourceChanged,
        message: "x".into(),
    });
    raw.send(&pf(1, b"r.bin", 131072, 65536));
    let r = wait_for(&mut raw, 10, "FileReady 1", |m| {
        matches!(m, Message::FileReady { file_id: 1, .. })
    });
    assert!(
        matches!(r, Message::FileReady { resumed: true, .. }),
        "{r:?}"
    );
    // Chunk 1 before Go: held.
    d.write_all(&ChunkHeader::data(1, 65536, 65536).encode())
        .unwrap();
    d.write_all(&honest[65536..]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    raw.send(&Message::Go {
        file_id: 1,
        restart: true,
    });
    d.write_all(&ChunkHeader::data(1, 0, 65536).encode())
        .unwrap();
    d.write_all(&honest[..65536]).unwrap();
    let mut dg = raw.est.keys.file_digest(1, 131072, 65536);
    for i in 0..2u64 {
        let c = &honest[i as usize * 65536..(i as usize + 1) * 65536];
        let m = mac_of(&raw, 1, i * 65536, c);
        dg.push(&m);
        raw.send(&Message::ChunkMac {
            file_id: 1,
            index: i,
            mac: m,
        });
    }
    for _ in 0..2 {
        wait_for(&mut raw, 10, "ChunkAck 1", |m| {
            matches!(
                m,
                Message::ChunkAck {
                    file_id: 1,
                    ok: true,
                    ..
                }
            )
        });
    }
    raw.send(&Message::FileEnd {
        file_id: 1,
        digest: dg.finish(),
    });
    let a = wait_for(&mut raw, 10, "commit", |m| {
        matches!(
            m,
            Message::FileCommitted { .. } | Message::FileFailed { .. }
        )
    });
    assert!(matches!(a, Message::FileCommitted { .. }), "{a:?}");
    assert_eq!(std::fs::read(root.join("r.bin")).unwrap(), honest);
    assert!(no_partials(&root, 5));
    assert!(!tree(&root).iter().any(|p| p.ends_with(".journal")));
}
