//! The monitor's HTTP listener (`zcp serve --metrics`), which anyone who reaches it may
//! talk to: garbage, wrong methods, huge heads and slow requests get an answer or are cut at
//! the head deadline, and never slow the transfer server.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::monitor::{get, http, monitor_addr};
use crate::util::*;

/// A connection that sends `bytes`, then holds it open.
fn hold(addr: SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(bytes).unwrap();
    s
}

/// Waits (up to `secs`) for the server to close `s`; how long that took.
fn closed_within(s: &mut TcpStream, secs: u64) -> Option<Duration> {
    let start = Instant::now();
    s.set_read_timeout(Some(Duration::from_secs(secs))).unwrap();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Some(start.elapsed()),
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return Some(start.elapsed());
            }
            Err(_) => return None,
        }
    }
}

#[test]
fn the_listener_survives_garbage_and_slowloris() {
    let env = Env::new();
    let root = env.mkdir("in");
    let srv = ServerProc::start(&root, &env.key, &["--metrics", "127.0.0.1:0"]);
    let m = monitor_addr(&srv);
    // Seven connections take slots with heads that never end.
    let mut idle: Vec<TcpStream> = (0..7).map(|_| hold(m, b"GET / HTTP/1.1\r\n")).collect();
    std::thread::sleep(Duration::from_millis(100));
    let started = Instant::now();
    // One more trickles a header and never ends it: closed at the head deadline.
    let mut trickle = hold(m, b"GET /metrics HTTP/1.1\r\nX-Slow: ");
    std::thread::sleep(Duration::from_millis(200));
    // The ninth is served all the same: it evicts the oldest of the held ones (issue 24).
    let (status, head, _) = http(m, "GET", "/metrics", None);
    assert_eq!(status, 200, "{head}");
    assert!(
        closed_within(&mut idle[0], 5).is_some(),
        "the oldest held one is closed"
    );
    // Meanwhile the transfer server works as ever.
    let src = env.path("f.bin");
    make_file(&src, 1 << 20, 1 << 16, 5);
    let o = run(send_cmd(srv.port, &env.key, &src, "f.bin", &["-q"]), 30);
    assert!(o.status.success(), "{}", both(&o));
    assert!(same_file(&src, &root.join("f.bin")));
    // Closing the idle ones frees their slots; garbage gets its answer.
    idle.clear();
    std::thread::sleep(Duration::from_millis(200));
    for (request, want) in [
        (&b"\x00\x01\x02 garbage\r\n\r\n"[..], "400"),
        (
            &b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n"[..],
            "405",
        ),
        (&b"DELETE / HTTP/1.1\r\n\r\n"[..], "405"),
        (&b"GET /../../etc/passwd HTTP/1.1\r\n\r\n"[..], "404"),
    ] {
        let mut s = hold(m, request);
        let mut answer = String::new();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let _ = s.read_to_string(&mut answer);
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {want}")),
            "{request:?}: {answer}"
        );
    }
    let mut huge = b"GET / HTTP/1.1\r\n".to_vec();
    huge.extend(std::iter::repeat_n(b'a', 64 << 10));
    let mut s = TcpStream::connect(m).unwrap();
    let _ = s.write_all(&huge);
    let mut answer = String::new();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.1 431") || answer.is_empty(),
        "{answer}"
    );
    // The trickling connection is cut at the deadline (3 s after it began), not held.
    let waited = closed_within(&mut trickle, 10).expect("the slow connection is closed");
    let total = started.elapsed();
    assert!(
        total >= Duration::from_millis(2500) && total < Duration::from_secs(6),
        "closed after {total:?} ({waited:?} waited)"
    );
    assert!(get(m, "/metrics").contains("zcp_sessions_total{outcome=\"ok\"} 1"));
    let mut srv = srv;
    assert!(srv.alive());
}
