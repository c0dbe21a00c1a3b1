//! A hostile sender on `zcp recv`'s bare stream (no key needed: anyone who reaches the
//! port): it floods past `--expect-size`, trickles and then stalls, sends everything but never
//! closes, or connects a second time. Each test asserts that nothing appears under the
//! destination's directory and that `zcp recv` ends within its bounds.

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::raw::recv;
use crate::util::*;

/// The names in `dir` but the key and the port files.
fn left(dir: &std::path::Path) -> Vec<String> {
    tree(dir)
        .into_iter()
        .filter(|n| n != "key" && !n.starts_with("port-"))
        .collect()
}

#[test]
fn a_flood_past_expect_size_commits_nothing() {
    let env = Env::new();
    let dest = env.path("dest.bin");
    let (zcp, port) = recv(env.dir.path(), &dest, &["--expect-size", "1M"]);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
    // Up to 64 MiB, until the receiver gives up on us.
    let block = vec![0xAAu8; 1 << 20];
    for _ in 0..64 {
        if s.write_all(&block).is_err() {
            break;
        }
    }
    drop(s);
    let o = zcp.finish(20);
    assert_eq!(o.status.code(), Some(5), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("more than --expect-size (1048576 bytes) arrived"),
        "{}",
        both(&o)
    );
    assert_eq!(left(env.dir.path()), Vec::<String>::new());
}

#[test]
fn a_trickle_then_a_stall_times_out_and_commits_nothing() {
    let env = Env::new();
    let dest = env.path("dest.bin");
    let (zcp, port) = recv(env.dir.path(), &dest, &["--timeout", "0.4"]);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    // A byte every 150 ms keeps the idle clock from running out...
    for _ in 0..4 {
        s.write_all(b"x").unwrap();
        std::thread::sleep(Duration::from_millis(150));
    }
    // ...until it stops, the connection held open.
    let t = Instant::now();
    let o = zcp.finish(10);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    drop(s);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("nothing arrived for 0.4 s"),
        "{}",
        both(&o)
    );
    assert_eq!(left(env.dir.path()), Vec::<String>::new());
}

#[test]
fn every_byte_but_no_close_commits_nothing_and_a_second_peer_is_refused() {
    let env = Env::new();
    let dest = env.path("dest.bin");
    let (zcp, port) = recv(
        env.dir.path(),
        &dest,
        &["--expect-size", "1000", "--timeout", "0.3"],
    );
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(&[1u8; 1000]).unwrap();
    // One connection only: the listener is gone once the first is accepted.
    std::thread::sleep(Duration::from_millis(200));
    assert!(TcpStream::connect(("127.0.0.1", port)).is_err());
    let o = zcp.finish(10);
    drop(s);
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    assert!(
        text(&o.stderr).contains("did not close the connection"),
        "{}",
        both(&o)
    );
    assert_eq!(left(env.dir.path()), Vec::<String>::new());
}

#[test]
fn a_part_file_left_by_a_killed_recv_is_replaced_only_with_force() {
    let env = Env::new();
    let dest = env.path("dest.bin");
    let (mut zcp, port) = recv(env.dir.path(), &dest, &[]);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(&[2u8; 100_000]).unwrap();
    // Killed outright (SIGKILL): its part file stays, under the name zcp clean knows.
    let end = Instant::now() + Duration::from_secs(10);
    while !tree(env.dir.path()).iter().any(|n| n.ends_with(".part")) {
        assert!(Instant::now() < end, "no part file appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
    zcp.0.as_mut().unwrap().kill().unwrap();
    let _ = zcp.0.take().unwrap().wait();
    drop(s);
    let part: Vec<String> = left(env.dir.path());
    assert_eq!(part.len(), 1, "{part:?}");
    assert!(part[0].starts_with(".zcp-") && part[0].ends_with(".part"));
    // Not replaced without --force; then replaced, and nothing else is left.
    let (zcp, port) = recv(env.dir.path(), &dest, &[]);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let _ = s.write_all(b"new");
    drop(s);
    let o = zcp.finish(10);
    assert_eq!(o.status.code(), Some(2), "{}", both(&o));
    assert!(text(&o.stderr).contains("add --force"), "{}", both(&o));
    assert_eq!(left(env.dir.path()), part);
    let (zcp, port) = recv(env.dir.path(), &dest, &["--force"]);
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"new").unwrap();
    drop(s);
    let o = zcp.finish(10);
    assert!(o.status.success(), "{}", both(&o));
    assert_eq!(std::fs::read(&dest).unwrap(), b"new");
    assert_eq!(left(env.dir.path()), ["dest.bin"]);
}
