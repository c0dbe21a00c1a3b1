//! A client against `zcp serve --metrics`: file names made of markup, script and terminal
//! escapes must reach the metrics, the JSON and the page as inert text; the HTTP listener
//! must shrug off garbage and slow requests without slowing the transfer server.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::monitor::{get, http, label_values, monitor_addr, promtool_passes};
use crate::util::*;

pub const EVIL: &str =
    "<img src=x onerror=document.title='pwned'>\x1b[31m\n<script>document.title='pwned'</script>";

#[test]
fn markup_and_escapes_in_file_names_stay_text() {
    let env = Env::new();
    let root = env.mkdir("in");
    let srv = ServerProc::start(&root, &env.key, &["--metrics", "127.0.0.1:0"]);
    push_evil(&env, &srv, &root);
    // That the page shows the name as text, runs none of it and makes no element of it, is
    // checked in Chromium by monitor::the_status_page_shows_a_running_push_in_chromium (one
    // browser for both).
}

/// Pushes a file named [`EVIL`] into `root` (the server's) and checks what is on disk, that
/// the metrics stay valid with bounded labels, and that the JSON holds the name escaped.
pub fn push_evil(env: &Env, srv: &ServerProc, root: &std::path::Path) {
    let m = monitor_addr(srv);
    let dir = env.mkdir("src");
    let src = dir.join(EVIL.replace('/', "_"));
    std::fs::write(&src, b"payload\n").unwrap();
    let o = run(send_cmd(srv.port, &env.key, &dir, "up/", &["-q", "-r"]), 30);
    // Linux allows the name: it is stored as sent, beneath the root, and nothing else is.
    assert!(o.status.success(), "{}", both(&o));
    let name = src.file_name().unwrap();
    let stored = std::path::Path::new("up/src").join(name);
    assert_eq!(
        tree_paths(root),
        vec!["up".into(), "up/src".into(), stored.clone()]
    );
    assert_eq!(std::fs::read(root.join(&stored)).unwrap(), b"payload\n");
    assert!(no_partials(root, 5));

    let text = get(m, "/metrics");
    promtool_passes(&text);
    let allowed = |v: &str| {
        !v.is_empty()
            && v.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
    };
    for v in label_values(&text) {
        assert!(allowed(&v), "label value {v:?} in\n{text}");
    }
    let body = get(m, "/api/sessions");
    assert!(
        !body.contains('\x1b') && !body.contains("\\u001b"),
        "{body}"
    );
    let doc: Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = doc["recent"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "file")
        .filter_map(|r| r["name"].as_str())
        .collect();
    let name = names
        .iter()
        .find(|n| n.contains("<img"))
        .unwrap_or_else(|| panic!("the file in {body}"));
    // Terminal escapes and the newline arrive spelled out, never raw.
    assert!(!name.contains('\n') && !name.contains('\x1b'), "{name:?}");
    assert!(
        name.contains("\\u{1b}[31m") && name.contains("\\n"),
        "{name:?}"
    );
}

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
