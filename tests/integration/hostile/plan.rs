//! `Plan` (the sender's totals, for progress displays) from a hostile peer: absurd totals and
//! a flood of them are shown at most, never trusted, and never progress.

use std::time::{Duration, Instant};

use zcp_wire::Message;

use super::harness::*;
use crate::util::*;

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
