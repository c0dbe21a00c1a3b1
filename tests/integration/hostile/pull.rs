//! A malicious server that holds the key, against `zcp get`.

use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use zcp_wire::{ErrorCode, Message};

use super::harness::*;
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
fn more_streams_than_asked_for_opens_none() {
    let env = Env::new();
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let dest = env.mkdir("dest");
    let child = get(
        l.local_addr().unwrap().port(),
        &env.key,
        &["f"],
        &dest,
        &["-P", "1"],
    );
    let evil = Evil::accept(&l, &env.psk(), Some(200));
    assert_eq!(evil.joined, 0, "the client opened data connections");
    let o = wait_output(child, 30);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        both(&o).contains("more than the 1 asked for"),
        "{}",
        both(&o)
    );
}
