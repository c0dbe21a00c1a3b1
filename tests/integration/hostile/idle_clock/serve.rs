//! The idle clock of `zcp serve` against a malicious client: chatter is not progress, and a
//! role's own work is not a way to stop its clock for free. Refused announcements, a `Get`
//! every few seconds, `Progress` counted up a byte at a time or invented for a resume check,
//! a link flipped back and forth, a name announced again to wait out its own lock, the same
//! existing target re-hashed, a flood of `Plan`s: every such session ends at about its idle
//! timeout. And the honest case: hashing a large existing target is not idleness.

use std::time::{Duration, Instant};

use zcp_wire::Message;

use crate::hostile::peer::*;
use crate::util::*;

/// Refused PutFiles (new ids, nothing written) every second keep a push session open past
/// --idle-timeout 2. SAFE: the session ends within a few seconds.
#[test]
fn refused_putfiles_hold_a_session_past_the_idle_timeout() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
    let _d = raw.data(srv.port, 0).unwrap();
    raw.s
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let t = Instant::now();
    let mut id = 0u32;
    let mut closed = false;
    let mut last = Instant::now() - Duration::from_secs(5);
    while t.elapsed() < Duration::from_secs(9) {
        if last.elapsed() >= Duration::from_millis(700) {
            raw.send(&pf(id, b"../escape", 10, 65536));
            id += 1;
            last = Instant::now();
        }
        match raw.recv_any() {
            Ok(Message::Error { message, .. }) => eprintln!("error: {message}"),
            Ok(_) => {}
            Err(e) if timed_out(&e) => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    eprintln!(
        "closed {closed} after {:?}, {id} refusals; log {}",
        t.elapsed(),
        srv.log()
    );
    assert_eq!(tree(&root), Vec::<String>::new());
    assert!(
        closed,
        "GOT THROUGH: refused PutFiles held the session {:?} past --idle-timeout 2",
        t.elapsed()
    );
}

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
    let mut raw = Raw::opened(
        srv.port,
        env.psk(),
        zcp_wire::Open {
            chunk_size: 65536,
            ..base_open(true)
        },
    );
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
    match next_raw(&mut raw, Duration::from_secs(5), keepalive) {
        Ok(Some(Message::FileReady { .. })) => {}
        other => panic!("{other:?}"),
    }
    let t = Instant::now();
    let mut alive = Duration::ZERO;
    let mut refusals = 0;
    let mut id = 1;
    while t.elapsed() < Duration::from_secs(17) {
        raw.send(&pf(id, b"x.bin", 1000, 65536));
        match next_raw(&mut raw, Duration::from_secs(8), keepalive) {
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
    match next_raw(&mut raw, Duration::from_secs(5), keepalive) {
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
                match next_raw(&mut raw, Duration::from_secs(8), keepalive) {
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
            match next_raw(&mut raw, Duration::from_secs(8), keepalive) {
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
            match next_raw(&mut raw, Duration::from_millis(700), keepalive) {
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
/// SAFE: the session ends at about its idle timeout (2 s) after the first hash (the only one
/// that stops the clock) and the one in flight when the clock runs out. How long a hash takes
/// is measured (`PutFile` to `FileReady`), so a loaded machine moves the bound, not the verdict:
/// a session that never ends outlives `idle + 4 × the slowest round + 6 s` (and at least 16 s).
#[test]
fn push_rehashing_one_existing_target_holds_a_session_forever() {
    let env = Env::new();
    let root = env.mkdir("root");
    let size = 512u64 << 20;
    make_file(&root.join("big.bin"), size, 64 << 20, 4);
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    let t = Instant::now();
    let mut slowest = Duration::ZERO;
    let limit =
        |slowest: Duration| (Duration::from_secs(8) + slowest * 4).max(Duration::from_secs(16));
    let mut ended = false;
    let mut rounds = 0;
    let mut id = 0u32;
    'outer: while t.elapsed() < limit(slowest) {
        let round = Instant::now();
        raw.send(&pf(id, b"big.bin", size, 1 << 20));
        loop {
            match next_raw(&mut raw, Duration::from_secs(30), keepalive) {
                Ok(Some(Message::Have(_))) => {}
                Ok(Some(Message::FileReady { resumed: true, .. })) => break,
                Ok(Some(other)) => panic!("{other:?}"),
                Ok(None) => {
                    ended = true;
                    break 'outer;
                }
                Err(()) => break 'outer,
            }
        }
        slowest = slowest.max(round.elapsed());
        rounds += 1;
        raw.send(&Message::FileAbort {
            file_id: id,
            code: zcp_wire::ErrorCode::Io,
            message: "again".into(),
        });
        id += 1;
    }
    let alive = t.elapsed();
    println!(
        "push session alive {alive:?} on re-announcing one existing file ({rounds} rounds, \
         slowest {slowest:?})"
    );
    assert!(
        ended && alive < limit(slowest),
        "GOT THROUGH: a session with --idle-timeout 2 lived {alive:?} by announcing and \
         aborting the same existing 512 MiB file {rounds} times (the server hashed {} GiB, \
         no byte sent; the slowest hash took {slowest:?})",
        rounds / 2
    );
}

/// `Progress` counting up fast, but for a file that awaits no `Go` (nothing was offered):
/// chatter. SAFE: the session still ends at its idle timeout (2 s), well before 6 s.
#[test]
fn push_progress_for_a_file_not_awaiting_go_holds_nothing() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    raw.send(&pf(0, b"n.bin", 64 << 20, 1 << 20));
    match next_raw(&mut raw, Duration::from_secs(8), keepalive) {
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
        match next_raw(&mut raw, Duration::from_millis(300), keepalive) {
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

#[test]
fn a_client_flooding_plans_is_still_idle_and_stores_nothing() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    let t = Instant::now();
    raw.s
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let mut closed = false;
    let mut turn = 0u64;
    while t.elapsed() < Duration::from_secs(10) {
        raw.send(&Message::Plan {
            files: u64::MAX - turn,
            bytes: turn.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        });
        turn += 1;
        match raw.recv_any() {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => {
                closed = true;
                break;
            }
        }
    }
    assert!(closed, "Plans kept the session open");
    assert!(t.elapsed() < Duration::from_secs(8), "{:?}", t.elapsed());
    assert!(srv.wait_log("no progress", 5), "{}", srv.log());
    assert!(tree(&root).is_empty(), "{:?}", tree(&root));
    // The server still serves.
    let src = env.path("after");
    make_dense(&src, 10_000, 1);
    let o = run(
        send_cmd(srv.port, &env.key, &src, "after", &["-i", "0"]),
        20,
    );
    assert!(o.status.success(), "{}", both(&o));
}

/// Not an attack, an honest outcome: `zcp send` of a file the server already holds, byte
/// for byte. The receiver hashes its target to offer it, "sending Progress about once a
/// second while it hashes" (PROTOCOL.md) -- but it hashes inside the control loop, which
/// holds the control writer's cork while it handles a frame, so every keep-alive is held
/// back until the hashing is over (measured: four `Progress` frames arrive together with the
/// `Have`s after 4.3 s of hashing a 3 GiB target). The sender hears nothing and ends the
/// session "without progress" once hashing takes longer than the idle timeout; so does the
/// receiver (hashing is not progress on its clock), and every re-run fails the same way. At
/// the default 60 s that is any target of about 45 GB or more here (less on a slow disk).
/// Scaled down: `--idle-timeout 2` and a 3 GiB file (sparse: nothing is written).
/// SAFE: the send succeeds and the target is kept.
#[test]
fn hashing_an_existing_target_longer_than_the_idle_timeout_fails_an_honest_send() {
    let env = Env::new();
    let root = env.mkdir("root");
    let src = env.path("same.bin");
    let size = 3u64 << 30;
    make_file(&src, size, 1 << 30, 9);
    make_file(&root.join("same.bin"), size, 1 << 30, 9);
    let srv = ServerProc::start(&root, &env.key, &["--idle-timeout", "2"]);
    let t = Instant::now();
    let o = run(
        send_cmd(srv.port, &env.key, &src, "same.bin", &["-i", "0"]),
        60,
    );
    println!(
        "send exit {:?} after {:?}: {}",
        o.status.code(),
        t.elapsed(),
        both(&o)
    );
    println!("server log: {}", srv.log());
    assert!(same_file(&src, &root.join("same.bin")));
    assert!(
        o.status.success(),
        "GOT THROUGH (honest outcome): a send of a file the server already holds failed \
         because hashing it is not progress: {}",
        both(&o)
    );
}
