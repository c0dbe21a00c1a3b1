//! Texts from a malicious server on the user's terminal: notices, failed entries, errors
//! and absurd totals (`Plan`) reach `zcp get`'s output escaped, never as control bytes that
//! clear the screen, forge a line or break the progress line.

use zcp_wire::{ErrorCode, Message};

use crate::hostile::peer::*;
use crate::util::*;

#[test]
fn texts_from_a_hostile_server_never_reach_the_terminal_raw() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let (child, mut evil) = evil_get(&env, &["f"], &dest, &[]);
    let nasty = "\x1b[2J\x07\rzcp: get: done\nzcp: forged line";
    evil.send(&Message::Notice {
        message: nasty.into(),
    });
    evil.send(&Message::EntryFailed {
        path: b"\x1b]0;title\x07".to_vec(),
        code: ErrorCode::Io,
        message: nasty.into(),
    });
    evil.send(&Message::Error {
        code: ErrorCode::Internal,
        message: nasty.into(),
    });
    let o = wait_output(child, 30);
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    no_control_bytes(&o);
    assert!(!text(&o.stderr).contains("\nzcp: forged"), "{}", both(&o));
    assert!(both(&o).contains("\\u{1b}[2J"), "{}", both(&o));
    assert_eq!(tree(&dest), Vec::<String>::new());
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
