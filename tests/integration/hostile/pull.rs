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
