//! Hostile requests: paths out of the export, floods, bodies before a token, trickling
//! connections, listings of any size, encryption required.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

use super::*;
use crate::util::*;

#[test]
fn hostile_requests_reach_nothing_outside_and_leave_the_server_up() {
    let Some(face) = Face::start(false) else {
        return;
    };
    let outside = face.site.env.path("outside.txt");
    std::fs::write(&outside, b"OUTSIDE").unwrap();
    std::os::unix::fs::symlink(&outside, face.site.archive.join("out")).unwrap();
    std::fs::create_dir(face.site.archive.join("d")).unwrap();
    std::os::unix::fs::symlink(
        face.site.env.path("srv/incoming"),
        face.site.archive.join("d/in"),
    )
    .unwrap();
    let t = face.token("lab", &[]);
    for path in [
        "/archive/../outside.txt",
        "/archive/%2e%2e/outside.txt",
        "/archive/%2E%2E/%2e%2e/outside.txt",
        "/archive/..%2foutside.txt",
        "/archive/out",
        "/archive/d/in/",
        "/archive/%00",
        "/incoming/x",
        "/nosuch/x",
        "outside.txt",
    ] {
        let (code, _, body) = face.req("GET", path, &t, "");
        assert!(
            [400, 403, 404].contains(&code),
            "{path}: {code} {}",
            text(&body)
        );
        assert!(!text(&body).contains("OUTSIDE"), "{path}");
    }
    // Floods: too many headers, too long a head, a body too big for what it asks.
    let many: String = (0..100).map(|i| format!("X-{i}: y\r\n")).collect();
    assert_eq!(face.raw(&format!("GET / HTTP/1.1\r\n{many}\r\n")).0, 431);
    let long = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(20_000));
    assert_eq!(face.raw(&long).0, 431);
    let (code, _, _) = face.req("PROPFIND", "/archive/", &t, "Content-Length: 10000000\r\n");
    assert_eq!(code, 413);
    assert_eq!(face.raw("GARBAGE\r\n\r\n").0, 400);
    assert_eq!(face.req("LOCK", "/archive/d", &t, "").0, 405);
    assert_eq!(face.req("DELETE", "/archive/d", &t, "").0, 403);
    assert!(face.site.archive.join("d").is_dir());
    // Text from the network reaches the log escaped.
    // (Control characters are refused in paths; a right-to-left override is not.)
    assert_eq!(face.req("GET", "/archive/%1b%5b31mred", &t, "").0, 400);
    face.req("GET", "/archive/%E2%80%AEred", &t, "");
    assert!(face.srv.wait_log("red -> 404", 5), "{}", face.srv.log());
    let log = face.srv.log();
    assert!(
        !log.contains('\u{1b}') && !log.contains('\u{202e}'),
        "{log}"
    );

    // Connections that send a head a byte at a time and never finish: more than the table
    // holds per source. Newcomers evict them, so a real request is still answered at once.
    let started = Instant::now();
    let mut slow = Vec::new();
    for _ in 0..40 {
        let mut s = TcpStream::connect(face.addr).unwrap();
        s.write_all(b"GET /archive/ HTTP/1.1\r\nX-Slow: ").unwrap();
        slow.push(s);
    }
    let (code, _, _) = face.req("PROPFIND", "/archive/", &t, "Depth: 0\r\n");
    assert_eq!(code, 207);
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
    // Most of the trickling ones were shut down to make room.
    let mut closed = 0;
    for s in &mut slow {
        s.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        if matches!(s.read(&mut [0u8; 64]), Ok(0)) {
            closed += 1;
        }
    }
    assert!(closed >= 20, "{closed} of 40 closed");
    drop(slow);
    let mut face = face;
    assert!(face.srv.alive());
    // What is on disk is as the test left it.
    assert_eq!(std::fs::read(&outside).unwrap(), b"OUTSIDE");
    assert_eq!(tree(&face.site.archive), ["d", "d/in", "out"]);
}

#[test]
fn no_body_is_read_before_the_token_and_small_faults_are_answered_right() {
    let Some(face) = Face::start(false) else {
        return;
    };
    let t = face.token("lab", &[]);
    // Without a token, a request announcing a body is answered at once and closed: nobody
    // without a key can hold a thread by sending a body slowly.
    for method in ["POST", "PUT", "PROPFIND", "LOCK"] {
        let started = Instant::now();
        let mut s = TcpStream::connect(face.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
        write!(
            s,
            "{method} /archive/a HTTP/1.1\r\nContent-Length: 65536\r\n\r\n"
        )
        .unwrap();
        let mut all = Vec::new();
        let _ = s.read_to_end(&mut all);
        let answer = String::from_utf8_lossy(&all);
        assert!(
            answer.starts_with("HTTP/1.1 401") || answer.starts_with("HTTP/1.1 405"),
            "{method}: {answer}"
        );
        assert!(answer.contains("Connection: close"), "{answer}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{method}: {:?}",
            started.elapsed()
        );
    }
    // A failed token says the same whether its identity exists or not.
    let forge = |id: &str| {
        let body: String = format!("id {id}\nnonce {}", "00".repeat(16))
            .bytes()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("zcp1.{body}.{}", "00".repeat(32))
    };
    let (c1, _, b1) = face.req("GET", "/archive/a", &forge("lab"), "");
    let (c2, _, b2) = face.req("GET", "/archive/a", &forge("nobody"), "");
    assert_eq!((c1, c2), (401, 401));
    assert_eq!(b1, b2);
    // A caveat's path is matched on bytes: one spelling U+FFFD does not reach other names.
    std::fs::create_dir(face.site.archive.join("d")).unwrap();
    std::fs::create_dir(
        face.site
            .archive
            .join(std::ffi::OsStr::from_bytes(b"d/\xfe")),
    )
    .unwrap();
    std::fs::write(
        face.site
            .archive
            .join(std::ffi::OsStr::from_bytes(b"d/\xfe/h")),
        b"hidden",
    )
    .unwrap();
    let odd = face.token("lab", &["--path", "/archive/d/\u{fffd}"]);
    assert_eq!(face.req("GET", "/archive/d/%FE/h", &odd, "").0, 403);
    assert_eq!(face.req("GET", "/archive/d/%FE/h", &t, "").0, 200);
    // Macaroon requests: a parameter on the type is fine, another type is 415, and an
    // activity the caller's token lacks is refused rather than minted useless.
    let ask = r#"{"caveats": ["activity:DOWNLOAD"]}"#;
    let post = |token: &str, ct: &str| {
        face.raw(&format!(
            "POST /archive/d HTTP/1.1\r\nAuthorization: Bearer {token}\r\nContent-Type: {ct}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{ask}",
            ask.len()
        ))
        .0
    };
    assert_eq!(post(&t, "application/macaroon-request; charset=utf-8"), 200);
    assert_eq!(post(&t, "application/json"), 415);
    assert_eq!(
        post(
            &face.token("lab", &["--activity", "LIST"]),
            "application/macaroon-request"
        ),
        403
    );
    assert_eq!(face.req("GET", "/archive/x%0Abefore%201", &t, "").0, 400);
    // OPTIONS *, a signed Content-Length, HTTP/1.0 keep-alive.
    let (code, head, _) = face.raw("OPTIONS * HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(code, 200, "{head}");
    assert!(head.contains("DAV: 1"), "{head}");
    assert_eq!(
        face.req("PROPFIND", "/archive/", &t, "Content-Length: +3\r\n")
            .0,
        400
    );
    let mut s = TcpStream::connect(face.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "HEAD /archive/d/%FE/h HTTP/1.0\r\nAuthorization: Bearer {t}\r\nConnection: keep-alive\r\n\r\n").unwrap();
    let mut got = [0u8; 2048];
    let n = s.read(&mut got).unwrap();
    let answer = String::from_utf8_lossy(&got[..n]);
    assert!(answer.contains("Connection: keep-alive"), "{answer}");
}

#[test]
fn listings_stream_and_encryption_is_required_where_the_config_says() {
    let Some(face) = Face::start(false) else {
        return;
    };
    let dir = face.site.archive.join("many");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..3000 {
        std::fs::write(dir.join(format!("file-{i:05}-{}", "n".repeat(100))), b"").unwrap();
    }
    let t = face.token("lab", &[]);
    let (code, head, body) = face.req("PROPFIND", "/archive/many/", &t, "Depth: 1\r\n");
    assert_eq!(code, 207, "{head}");
    assert!(head.contains("Transfer-Encoding: chunked"), "{head}");
    // Dechunked, every entry is there once, and the document ends.
    let mut xml = Vec::new();
    let mut rest = &body[..];
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n").unwrap();
        let n = usize::from_str_radix(std::str::from_utf8(&rest[..line_end]).unwrap(), 16).unwrap();
        if n == 0 {
            break;
        }
        xml.extend_from_slice(&rest[line_end + 2..line_end + 2 + n]);
        rest = &rest[line_end + 4 + n..];
    }
    let xml = String::from_utf8(xml).unwrap();
    assert_eq!(xml.matches("<D:response>").count(), 3001);
    assert!(xml.ends_with("</D:multistatus>\n"));
    // An identity that must be encrypted is refused on plain HTTP.
    let cfg = std::fs::read_to_string(&face.site.config).unwrap();
    let cfg = cfg.replace(
        "[identity.lab]\n",
        "[identity.lab]\nrequire_encryption = true\n",
    );
    face.site.write(&cfg);
    signal(face.srv.pid(), libc::SIGHUP);
    assert!(
        face.srv.wait_log("configuration reloaded", 10),
        "{}",
        face.srv.log()
    );
    let (code, _, body) = face.req("GET", "/archive/many/", &t, "");
    assert_eq!(code, 403, "{}", text(&body));
    assert!(
        text(&body).contains("require_encryption"),
        "{}",
        text(&body)
    );
}
