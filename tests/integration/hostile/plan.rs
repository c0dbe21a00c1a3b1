//! `Plan` (the sender's totals, for progress displays) from a hostile peer: absurd totals and
//! a flood of them are shown at most, never trusted, and never progress.

use std::time::{Duration, Instant};

use zcp_wire::Message;

use super::harness::*;
use crate::util::*;

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

#[test]
fn a_server_announcing_absurd_totals_cannot_break_the_progress_line() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let (child, mut evil) = evil_get(&env, &["f"], &dest, &["--progress", "--idle-timeout", "2"]);
    evil.send(&Message::Plan {
        files: u64::MAX,
        bytes: u64::MAX,
    });
    evil.send(&Message::Plan { files: 0, bytes: 0 });
    let body = vec![7u8; 100_000];
    let done = evil.send_file(0, b"f", &body);
    assert!(matches!(done, Message::FileCommitted { .. }), "{done:?}");
    evil.send(&Message::Plan {
        files: 1,
        bytes: u64::MAX,
    });
    evil.finish();
    let o = wait_output(child, 30);
    assert!(o.status.success(), "{}", both(&o));
    no_control_bytes(&o);
    let err = text(&o.stderr);
    assert!(err.lines().last().unwrap().starts_with("done"), "{err}");
    assert_eq!(std::fs::read(dest.join("f")).unwrap(), body);
    assert_eq!(tree(&dest), vec!["f"]);
}
