//! The fifth review of issue 10: an authenticated, malicious peer against what changed in the
//! fourth round (the receiver's idle clock paused by its own file-system work, the sender's
//! `Progress` during a resume check, the in-place keep of an existing target, `serve --once`
//! admitting one session); eight of its twelve attacks got through before the fixes in this
//! file's commit. Each test asserts the SAFE outcome on disk (and in exit codes, logs,
//! resources); a failing test says "GOT THROUGH:" and what did.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use zcp_wire::{Message, PutFile};

use super::harness::*;
use crate::util::*;

/// What the peer said next within `limit`, skipping what `skip` matches; `None` when it
/// closed (or said `Error`) first, or the time ran out (then `Err(())`).
fn next_raw(
    raw: &mut Raw,
    limit: Duration,
    skip: impl Fn(&Message) -> bool,
) -> Result<Option<Message>, ()> {
    let end = Instant::now() + limit;
    raw.s
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    while Instant::now() < end {
        match raw.recv_any() {
            Ok(Message::Error { .. }) => return Ok(None),
            Ok(m) if skip(&m) => {}
            Ok(m) => return Ok(Some(m)),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return Ok(None),
        }
    }
    Err(())
}

fn chatter(m: &Message) -> bool {
    matches!(
        m,
        Message::Progress { .. } | Message::ChunkAck { ok: true, .. }
    )
}

// ------------------------------------------------------------------ the paused idle clock

/// The receiver's own file-system work now stops its idle clock (`Receiving::paused`, from
/// `control_loop`'s `Step::Fs`). But not all of that time is work: preparing a file whose
/// part file is locked *waits* up to `LOCK_WAIT` (5 s) for the lock (`PartFile::open`), and
/// the waiting counts as the receiver being busy. A key holder opens `x.bin` (its part file is
/// now locked by this very session) and then announces `x.bin` again, every time it hears the
/// refusal: each announcement costs it one frame and stops the server's idle clock for 5 s.
/// No byte moves, nothing is verified or committed.
/// SAFE: the session ends at about its idle timeout (2 s here), well before 12 s.
#[test]
fn push_a_name_announced_twice_waits_out_its_own_lock_and_holds_the_session() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    raw.send(&pf(0, b"x.bin", 1000, 65536));
    match next_raw(&mut raw, Duration::from_secs(5), chatter) {
        Ok(Some(Message::FileReady { .. })) => {}
        other => panic!("{other:?}"),
    }
    let t = Instant::now();
    let mut alive = Duration::ZERO;
    let mut refusals = 0;
    let mut id = 1;
    while t.elapsed() < Duration::from_secs(17) {
        raw.send(&pf(id, b"x.bin", 1000, 65536));
        match next_raw(&mut raw, Duration::from_secs(8), chatter) {
            Ok(Some(Message::FileFailed { file_id, .. })) if file_id == id => {
                refusals += 1;
                alive = t.elapsed();
            }
            Ok(Some(other)) => panic!("{other:?}"),
            Ok(None) | Err(()) => break,
        }
        id += 1;
    }
    println!(
        "push session still answering {alive:?} after the last real step ({refusals} refusals); \
         server log:\n{}",
        srv.log()
    );
    assert!(
        alive < Duration::from_secs(12),
        "GOT THROUGH: a session with --idle-timeout 2 and no work at all was still answering \
         after {alive:?} ({refusals} PutFiles of a name it holds open, each waiting out the \
         part file's lock with the idle clock stopped)"
    );
    assert!(own_files(&root).is_empty() || no_partials(&root, 10));
}

/// What that hold is worth: a session that never times out keeps its part file's lock, so
/// the key holder can keep an honest transfer of that name out for as long as it likes. It
/// opens `x.bin` and re-announces it every time it is refused; 8 s later (four idle
/// timeouts) the operator's `zcp send` of `x.bin` waits the 5 s lock wait and fails "busy".
/// SAFE: by then the idle key holder's session is gone, and the honest send stores `x.bin`.
#[test]
fn push_a_session_held_by_lock_waits_keeps_an_honest_send_out() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    let (mut raw, data) = raw_open(&srv, &env, false);
    raw.send(&pf(0, b"x.bin", 1000, 65536));
    match next_raw(&mut raw, Duration::from_secs(5), chatter) {
        Ok(Some(Message::FileReady { .. })) => {}
        other => panic!("{other:?}"),
    }
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let th = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut id = 1;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                raw.send(&pf(id, b"x.bin", 1000, 65536));
                match next_raw(&mut raw, Duration::from_secs(8), chatter) {
                    Ok(Some(Message::FileFailed { .. })) => {}
                    _ => break,
                }
                id += 1;
            }
            (raw, data)
        })
    };
    std::thread::sleep(Duration::from_secs(8));
    let src = env.path("x.bin");
    make_dense(&src, 1000, 7);
    let o = run(
        send_cmd(srv.port, &env.key, &src, "x.bin", &["-i", "0"]),
        25,
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(th.join().unwrap());
    println!("honest send exit {:?}: {}", o.status.code(), both(&o));
    assert!(
        o.status.success() && root.join("x.bin").exists() && same_file(&src, &root.join("x.bin")),
        "GOT THROUGH: an honest send of x.bin failed 8 s after an idle key holder (idle \
         timeout 2 s) opened x.bin: {}",
        both(&o).lines().last().unwrap_or("")
    );
}

/// The same against `zcp get`: a malicious server announces the requested name, then
/// announces it again and again; each time the client waits up to 5 s for its own part
/// file's lock with its idle clock stopped. The user's `get` hangs with nothing moving.
/// SAFE: `get --idle-timeout 2` gives up (non-zero) well before 12 s.
#[test]
fn pull_a_name_announced_twice_holds_get_past_its_idle_timeout() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let t = Instant::now();
    let (child, mut evil) = evil_get(&env, &["want.bin"], &dest, &["--idle-timeout", "2"]);
    evil.put(0, b"want.bin", b"", 1000);
    assert!(matches!(evil.next(), Message::FileReady { .. }));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let th = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let _ = evil.s.set_read_timeout(Some(Duration::from_secs(8)));
            for id in 1..5u32 {
                if stop.load(std::sync::atomic::Ordering::Relaxed) {
                    break;
                }
                evil.put(id, b"want.bin", b"", 1000);
                // Until the refusal (or the client is gone).
                loop {
                    match evil.recv() {
                        Ok(Message::FileFailed { file_id, .. }) if file_id == id => break,
                        Ok(_) => {}
                        Err(_) => return evil,
                    }
                }
            }
            evil
        })
    };
    let o = wait_output(child, 40);
    let took = t.elapsed();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    drop(th.join().unwrap());
    println!(
        "get exit {:?} after {took:?}: {}",
        o.status.code(),
        both(&o)
    );
    assert!(!o.status.success(), "{}", both(&o));
    assert!(
        took < Duration::from_secs(12),
        "GOT THROUGH: get --idle-timeout 2 was held {took:?} by a server that sent no byte \
         (re-announcing a name whose part file the client holds locked)"
    );
    assert!(no_partials(&dest, 5));
}

// ------------------------------------------------------------------ Progress while checking

/// New in round 4: a sender may send `Progress{bytes checked}` for a file awaiting its `Go`,
/// and it counts as progress while the count grows at 1 MiB/s since `FileReady`
/// (`RxFile::resume_progress`). Any disk hashes a hundred times faster, so the claim is cheap
/// to lie about: a key holder names an existing 8 MiB file on the server (the operator's,
/// or one it pushed once), lets the server hash it, and then never checks anything: one
/// `Progress` a second, counting up at 1 MiB/s, holds the session 8 s; then `FileAbort` and
/// the same `PutFile` again (the server hashes 8 MiB in milliseconds, with its idle clock
/// stopped) buys 8 s more, for ever. Nothing moves, nothing is verified or committed.
/// SAFE: the session ends at about its idle timeout (2 s), well before 12 s.
#[test]
fn push_resume_check_progress_lies_hold_a_session_forever() {
    let env = Env::new();
    let root = env.mkdir("root");
    let size = 8u64 << 20;
    make_file(&root.join("big.bin"), size, 1 << 20, 3);
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    let t = Instant::now();
    let mut alive = Duration::ZERO;
    let mut rounds = 0;
    'outer: for id in 0..10u32 {
        raw.send(&pf(id, b"big.bin", size, 65536));
        let mut offered = 0u64;
        loop {
            match next_raw(&mut raw, Duration::from_secs(8), chatter) {
                Ok(Some(Message::Have(h))) => offered += h.entries.len() as u64 * 65536,
                Ok(Some(Message::FileReady { resumed: true, .. })) => break,
                Ok(Some(other)) => panic!("{other:?}"),
                Ok(None) | Err(()) => break 'outer,
            }
        }
        assert_eq!(offered, size, "the existing target is offered whole");
        rounds += 1;
        let ready = Instant::now();
        // "Checking": a count that grows at a little over 1 MiB/s.
        while ready.elapsed() < Duration::from_secs(7) && t.elapsed() < Duration::from_secs(18) {
            let bytes = (((ready.elapsed().as_secs_f64() + 0.5) * 1.1 * (1 << 20) as f64) as u64)
                .min(offered);
            raw.send(&Message::Progress { file_id: id, bytes });
            match next_raw(&mut raw, Duration::from_millis(700), chatter) {
                Ok(Some(other)) => panic!("{other:?}"),
                Ok(None) => break 'outer,
                Err(()) => alive = t.elapsed(),
            }
        }
        if t.elapsed() >= Duration::from_secs(18) {
            break;
        }
        raw.send(&Message::FileAbort {
            file_id: id,
            code: zcp_wire::ErrorCode::Io,
            message: "again".into(),
        });
    }
    println!(
        "push session alive {alive:?} on Progress alone ({rounds} rounds); server log:\n{}",
        srv.log()
    );
    assert!(
        alive < Duration::from_secs(12),
        "GOT THROUGH: a session with --idle-timeout 2 lived {alive:?} on invented resume-check \
         Progress alone ({rounds} PutFiles of an existing 8 MiB file, no byte sent)"
    );
}

/// The paused clock without any lie: the receiver's hashing of an existing target stops its
/// idle clock (`Receiving::paused`), and a `PutFile` of a file made ready then given up
/// (`FileAbort`) is, rightly, no progress. But the same `PutFile` again is new hashing, so a
/// key holder that announces an existing 512 MiB file on the server and aborts it as soon as
/// it is offered, over and over, keeps the server hashing the same bytes at full speed (two
/// small frames buy 512 MiB of reads and a core's worth of BLAKE3 each time) with its idle
/// clock stopped nearly all the time: the session never times out, and nothing is ever sent,
/// verified or committed.
/// SAFE: the session ends at about its idle timeout (2 s), well before 12 s.
#[test]
fn push_rehashing_one_existing_target_holds_a_session_forever() {
    let env = Env::new();
    let root = env.mkdir("root");
    let size = 512u64 << 20;
    make_file(&root.join("big.bin"), size, 64 << 20, 4);
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    let t = Instant::now();
    let mut alive = Duration::ZERO;
    let mut rounds = 0;
    let mut id = 0u32;
    'outer: while t.elapsed() < Duration::from_secs(16) {
        raw.send(&pf(id, b"big.bin", size, 1 << 20));
        loop {
            match next_raw(&mut raw, Duration::from_secs(8), chatter) {
                Ok(Some(Message::Have(_))) => {}
                Ok(Some(Message::FileReady { resumed: true, .. })) => break,
                Ok(Some(other)) => panic!("{other:?}"),
                Ok(None) | Err(()) => break 'outer,
            }
        }
        rounds += 1;
        alive = t.elapsed();
        raw.send(&Message::FileAbort {
            file_id: id,
            code: zcp_wire::ErrorCode::Io,
            message: "again".into(),
        });
        id += 1;
    }
    println!("push session alive {alive:?} on re-announcing one existing file ({rounds} rounds)");
    assert!(
        alive < Duration::from_secs(12),
        "GOT THROUGH: a session with --idle-timeout 2 lived {alive:?} by announcing and \
         aborting the same existing 512 MiB file {rounds} times (the server hashed {} GiB, \
         no byte sent)",
        rounds / 2
    );
}

// ------------------------------------------------------------------ in-place keep, hard links

// ------------------------------------------------------------------ serve --once

/// Sends the handshake's proof on a fresh connection and resets it at once (SO_LINGER 0):
/// the server reads a valid proof, then fails to write its welcome.
#[allow(unsafe_code)]
fn proof_then_reset(port: u16, psk: zcp_wire::Psk) {
    use std::os::fd::AsRawFd;
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let hs = zcp_wire::ClientHandshake::new(psk, [3; 32]);
    s.write_all(&hs.hello().encode_frame()).unwrap();
    let ch = read_plain(&mut s).unwrap();
    let (proof, _aw) = hs.on_challenge(ch).unwrap();
    let l = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: a valid socket and a valid `linger` of the size given.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&l as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0);
    s.write_all(&proof.encode_frame()).unwrap();
    drop(s);
}

/// `serve --once` takes its one session (`ctx.taken.swap(true)` in `handshake`) before it
/// writes the welcome; when that write fails, the handshake returns an error, `handle` never
/// sends on `ended`, and `taken` stays set. A key holder that resets the connection right
/// after its proof leaves a `--once` server that never exits and refuses every later client
/// ("it is taken"): the operator's transfer can never run, and the server never reports.
/// SAFE: the server exits (the session it ran for failed) or serves the next client.
#[test]
fn once_a_welcome_that_cannot_be_written_wedges_the_server() {
    let env = Env::new();
    let src = env.path("small.bin");
    make_dense(&src, 1000, 5);
    let mut wedged = None;
    for attempt in 0..8 {
        let root = env.mkdir(&format!("root{attempt}"));
        let mut srv = ServerProc::start(&root, &env.key, &["--once"]);
        proof_then_reset(srv.port, env.psk());
        std::thread::sleep(Duration::from_millis(500));
        if !srv.alive() {
            // The welcome went out before the reset: the session ran and failed, and the
            // server ended with it. Try again.
            continue;
        }
        let o = run(
            send_cmd(srv.port, &env.key, &src, "small.bin", &["-i", "0"]),
            20,
        );
        std::thread::sleep(Duration::from_secs(2));
        let alive = srv.alive();
        let served = o.status.success() && root.join("small.bin").exists();
        println!(
            "attempt {attempt}: honest send exit {:?} ({}), server alive after: {alive}; log:\n{}",
            o.status.code(),
            both(&o).lines().last().unwrap_or(""),
            srv.log()
        );
        if !served && alive {
            wedged = Some(both(&o));
            break;
        }
        if served {
            // The reset beat the welcome (the server was still there after it) and the next
            // client was served: what this test looks for happened, and was handled.
            break;
        }
    }
    assert!(
        wedged.is_none(),
        "GOT THROUGH: serve --once neither exited nor served: the honest send got {:?}",
        wedged
    );
}

// ------------------------------------------------------------------ refused correctly

/// `Progress` counting up fast, but for a file that awaits no `Go` (nothing was offered):
/// chatter. SAFE: the session still ends at its idle timeout (2 s), well before 6 s.
#[test]
fn push_progress_for_a_file_not_awaiting_go_holds_nothing() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    raw.send(&pf(0, b"n.bin", 64 << 20, 1 << 20));
    match next_raw(&mut raw, Duration::from_secs(8), chatter) {
        Ok(Some(Message::FileReady { resumed: false, .. })) => {}
        other => panic!("{other:?}"),
    }
    let t = Instant::now();
    let mut alive = Duration::ZERO;
    let mut n = 1u64;
    while t.elapsed() < Duration::from_secs(10) {
        raw.send(&Message::Progress {
            file_id: 0,
            bytes: n << 20,
        });
        n += 1;
        match next_raw(&mut raw, Duration::from_millis(300), chatter) {
            Ok(None) => break,
            Ok(Some(m)) => panic!("{m:?}"),
            Err(()) => alive = t.elapsed(),
        }
    }
    println!("alive {alive:?}");
    assert!(
        alive < Duration::from_secs(6),
        "GOT THROUGH: Progress for a file that awaits no Go held the session {alive:?}"
    );
    assert!(no_partials(&root, 10));
}

/// A malicious server "checking" the user's existing file for resume at a crawl (100 KiB/s,
/// below the 1 MiB/s a disk keeps up). SAFE: `get --idle-timeout 2` gives up in well under
/// 8 s, the user's file unchanged.
#[test]
fn pull_a_resume_check_at_a_crawl_does_not_hold_get() {
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let dest = env.mkdir("dest");
    let size = 4u64 << 20;
    make_dense(&dest.join("want.bin"), size, 12);
    set_mtime(&dest.join("want.bin"), 1_000_000);
    let copy = env.path("want.copy");
    std::fs::copy(dest.join("want.bin"), &copy).unwrap();
    let t = Instant::now();
    let child = get(
        l.local_addr().unwrap().port(),
        &env.key,
        &["want.bin"],
        &dest,
        &["--idle-timeout", "2"],
    );
    let mut evil = Evil::accept(&l, &env.psk(), None);
    evil.put(0, b"want.bin", b"", size);
    loop {
        match evil.next() {
            Message::Have(_) => {}
            Message::FileReady { resumed: true, .. } => break,
            other => panic!("{other:?}"),
        }
    }
    let th = std::thread::spawn(move || {
        for k in 1..100u64 {
            evil.send(&Message::Progress {
                file_id: 0,
                bytes: k * 20 * 1024,
            });
            std::thread::sleep(Duration::from_millis(200));
            if evil.s.peek(&mut [0u8; 1]).is_ok_and(|n| n == 0) {
                break;
            }
        }
    });
    let o = wait_output(child, 30);
    let took = t.elapsed();
    drop(th);
    println!(
        "get exit {:?} after {took:?}: {}",
        o.status.code(),
        both(&o)
    );
    assert!(!o.status.success());
    assert!(
        took < Duration::from_secs(8),
        "GOT THROUGH: a crawling resume check held get {took:?}"
    );
    assert!(same_file(&copy, &dest.join("want.bin")));
    assert!(no_partials(&dest, 5));
}

/// Sets `p`'s mtime to `secs` since the epoch.
fn set_mtime(p: &std::path::Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(p).unwrap();
    f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}
