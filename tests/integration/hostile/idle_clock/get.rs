//! The idle clock of `zcp get` against a malicious server: chatter is not progress. Notices,
//! refused announcements, MACs without data, a name announced again and again (each time
//! waiting out the client's own part-file lock) and a resume check at a crawl all leave
//! `get --idle-timeout 2` to give up within seconds, with nothing stored.

use std::time::{Duration, Instant};

use zcp_wire::Message;

use crate::hostile::peer::*;
use crate::util::*;

#[test]
fn chatter_does_not_keep_a_pull_alive() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let t = Instant::now();
    let (child, mut evil) = evil_get(&env, &["f"], &dest, &["--idle-timeout", "2"]);
    evil.put(0, b"f", b"", 1 << 20);
    assert!(matches!(evil.next(), Message::FileReady { .. }));
    // Notices forever (bounded here: until the client is gone, or 15 s), never a byte.
    let chatter = evil.chatter(150, Duration::from_millis(100), |evil, _| {
        evil.send(&Message::Notice {
            message: "still here".into(),
        })
    });
    let o = wait_output(child, 30);
    chatter.stop();
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(both(&o).contains("no progress"), "{}", both(&o));
    assert!(t.elapsed() < Duration::from_secs(9), "{:?}", t.elapsed());
    assert!(no_partials(&dest, 5));
}

/// A malicious server keeps `get --idle-timeout 2` alive without sending one byte:
/// `mode` 0: a refused PutFile (new id, name not asked for) every 0.7 s;
/// `mode` 1: a ChunkMac for the next chunk of an announced file every 0.7 s.
fn pull_idle_held(mode: u8) -> (Option<i32>, Duration, String) {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let t = Instant::now();
    let (child, mut evil) = evil_get(&env, &["want.txt"], &dest, &["--idle-timeout", "2"]);
    if mode == 1 {
        evil.put(0, b"want.txt", b"", 100 << 20);
        assert!(matches!(evil.next(), Message::FileReady { .. }));
    }
    let chatter = evil.chatter(14, Duration::from_millis(700), move |evil, i| {
        if mode == 0 {
            evil.put(10 + i, format!("other{i}").as_bytes(), b"", 5);
        } else {
            evil.send(&Message::ChunkMac {
                file_id: 0,
                index: u64::from(i),
                mac: [0; 32],
            });
        }
    });
    let o = wait_output(child, 30);
    chatter.stop();
    (o.status.code(), t.elapsed(), both(&o))
}

#[test]
fn pull_refused_putfiles_hold_get_past_idle_timeout() {
    let (code, took, out) = pull_idle_held(0);
    eprintln!("exit {code:?} after {took:?}: {out}");
    assert!(
        took < Duration::from_secs(7),
        "GOT THROUGH: refused PutFiles kept get --idle-timeout 2 alive {took:?}"
    );
}

#[test]
fn pull_chunk_macs_without_data_hold_get_past_idle_timeout() {
    let (code, took, out) = pull_idle_held(1);
    eprintln!("exit {code:?} after {took:?}: {out}");
    assert!(
        took < Duration::from_secs(7),
        "GOT THROUGH: ChunkMacs without a byte kept get --idle-timeout 2 alive {took:?}"
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
    let _ = evil.s.set_read_timeout(Some(Duration::from_secs(8)));
    let chatter = evil.chatter(4, Duration::ZERO, |evil, i| {
        let id = i + 1;
        evil.put(id, b"want.bin", b"", 1000);
        // Until the refusal (or the client is gone: every later read fails at once).
        loop {
            match evil.recv() {
                Ok(Message::FileFailed { file_id, .. }) if file_id == id => break,
                Ok(_) => {}
                Err(_) => return,
            }
        }
    });
    let o = wait_output(child, 40);
    let took = t.elapsed();
    drop(chatter.stop());
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

/// A malicious server "checking" the user's existing file for resume at a crawl (100 KiB/s,
/// below the 1 MiB/s a disk keeps up). SAFE: `get --idle-timeout 2` gives up in well under
/// 8 s, the user's file unchanged.
#[test]
fn pull_a_resume_check_at_a_crawl_does_not_hold_get() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let size = 4u64 << 20;
    make_dense(&dest.join("want.bin"), size, 12);
    set_mtime(&dest.join("want.bin"), 1_000_000);
    let copy = env.path("want.copy");
    std::fs::copy(dest.join("want.bin"), &copy).unwrap();
    let t = Instant::now();
    let (child, mut evil) = evil_get(&env, &["want.bin"], &dest, &["--idle-timeout", "2"]);
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
