//! `zcp serve`'s monitor listener (the config's `metrics` address, `--metrics`): Prometheus
//! metrics at `GET /metrics`, a live status page at `GET /` (with `/app.js`, `/app.css`),
//! and its data at `GET /api/sessions`. The state and every text it serves come from
//! [`zcp_report::Monitor`]; this is only the HTTP.
//!
//! It has no authentication: it belongs on loopback or a management network. It is bounded
//! so that it can neither take down nor slow the transfer server: at most
//! [`MAX_CONNECTIONS`] connections at once, one request per connection, a request head of at
//! most [`MAX_HEAD`] bytes that must arrive within [`HEAD_DEADLINE`], and [`IO_TIMEOUT`] on
//! every read and write. Requests are parsed by `httparse`.
//!
//! Nobody can lock a scraper out by holding connections: the connections are kept in the
//! server's `PendingTable` (through `zcp_http::slots::Slots`, which the HTTP face shares),
//! so a newcomer is never refused for want of room but evicts one that got less far (no whole request head yet, then the oldest) from the source holding the
//! most; an evicted connection is shut down, which ends its thread's read or write at once.
//! While six of the eight are taken, a connection has [`PendingLimits::pressed`] (2 s) to be
//! served. Only when threads still winding down from evictions reach [`MAX_THREADS`] is a
//! newcomer answered 503.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use zcp_engine::sync::Locked;
use zcp_http::slots::{Counts, Slots};
use zcp_report::Monitor;
use zcp_report::monitor::{APP_CSS, APP_JS, FAVICON_SVG, INDEX_HTML};
use zcp_session::PendingLimits;

/// Connections served at once, at most (a newer one evicts one of them).
pub(crate) const MAX_CONNECTIONS: usize = 8;
/// Threads at once, at most, counting those still ending after their connection was evicted.
pub(crate) const MAX_THREADS: usize = 2 * MAX_CONNECTIONS;
/// The largest request head (request line and headers) read.
pub(crate) const MAX_HEAD: usize = 8192;
/// The time a connection has to send its whole request head.
pub(crate) const HEAD_DEADLINE: Duration = Duration::from_secs(3);
/// The timeout on each read and write.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// The page may load its own script, style sheet, icon and data, nothing else.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Binds the monitor's address; the error names the `metrics` setting (exit 2).
pub(crate) fn bind(addr: SocketAddr) -> anyhow::Result<TcpListener> {
    TcpListener::bind(addr).map_err(|e| {
        anyhow::Error::new(super::Usage(format!(
            "metrics: cannot listen on {addr}: {e} (give a free address and port, e.g. \
             127.0.0.1:9310, in --metrics or the config's metrics key)"
        )))
    })
}

/// Serves `monitor` on `listener` from a thread of its own, for as long as the process runs.
pub(crate) fn spawn(listener: TcpListener, monitor: Arc<Monitor>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("zcp-monitor".into())
        .spawn(move || accept_loop(&listener, &monitor))?;
    Ok(())
}

fn accept_loop(listener: &TcpListener, monitor: &Arc<Monitor>) {
    let threads = Counts::<()>::default();
    let slots = Arc::new(Mutex::new(Slots::new(PendingLimits {
        max: MAX_CONNECTIONS,
        per_source: MAX_CONNECTIONS,
        timeout: HEAD_DEADLINE + IO_TIMEOUT,
    })));
    loop {
        let (stream, peer) = match listener.accept() {
            Ok(s) => s,
            // Out of descriptors, or a connection reset before it was accepted: wait a
            // little rather than spin.
            Err(_) => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        let Some(thread) = threads.take((), MAX_THREADS) else {
            let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
            let _ = respond(
                &stream,
                &Reply::text(503, "too many requests at once\n"),
                false,
            );
            continue;
        };
        let Some(id) = slots.locked().admit(&stream, peer) else {
            continue;
        };
        let (monitor, slots) = (monitor.clone(), slots.clone());
        // A thread that cannot start drops the connection (and its count) with the closure;
        // its table entry goes when a later connection finds it past its time.
        let _ = std::thread::Builder::new()
            .name("zcp-monitor-conn".into())
            .spawn(move || {
                let _thread = thread;
                serve(stream, &monitor, || slots.locked().headed(id));
                slots.locked().done(id);
            });
    }
}

/// An answer.
#[derive(Debug)]
struct Reply {
    status: u16,
    content_type: &'static str,
    body: Vec<u8>,
}

impl Reply {
    fn new(status: u16, content_type: &'static str, body: impl Into<Vec<u8>>) -> Reply {
        Reply {
            status,
            content_type,
            body: body.into(),
        }
    }

    fn text(status: u16, body: &str) -> Reply {
        Reply::new(status, "text/plain; charset=utf-8", body)
    }
}

/// Reads one request and answers it (`headed` is called once its head is in); any failure
/// just closes the connection.
fn serve(stream: TcpStream, monitor: &Monitor, headed: impl FnOnce()) {
    let _ = stream.set_nodelay(true);
    if stream.set_write_timeout(Some(IO_TIMEOUT)).is_err() {
        return;
    }
    let Some(head) = read_head(&stream) else {
        return;
    };
    headed();
    let (reply, with_body) = match parse(&head) {
        Ok((method, path)) => (route(&method, &path, monitor), method != "HEAD"),
        Err(reply) => (reply, true),
    };
    let _ = respond(&stream, &reply, with_body);
}

/// The request head, up to the blank line; `None` when it did not come whole within
/// [`HEAD_DEADLINE`] (or the peer closed). A head over [`MAX_HEAD`] is returned cut, and
/// fails to parse.
fn read_head(mut stream: &TcpStream) -> Option<Vec<u8>> {
    let deadline = Instant::now() + HEAD_DEADLINE;
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 2048];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_HEAD {
        let left = deadline.checked_duration_since(Instant::now())?;
        // A zero timeout would mean "none".
        let wait = left.min(IO_TIMEOUT).max(Duration::from_millis(1));
        stream.set_read_timeout(Some(wait)).ok()?;
        let room = (MAX_HEAD - head.len()).min(buf.len());
        match stream.read(&mut buf[..room]) {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
        if not_http(&head) {
            // Answered (400) at once rather than at the deadline: a zcp client given this
            // port by mistake learns so at once, from the answer.
            break;
        }
    }
    Some(head)
}

/// Whether `head`, a request's first bytes, can no longer become an HTTP request.
fn not_http(head: &[u8]) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    matches!(req.parse(head), Err(e) if e != httparse::Error::TooManyHeaders)
}

/// The method and path (without its query) of a request head, or the answer to a bad one.
fn parse(head: &[u8]) -> Result<(String, String), Reply> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) if head.len() >= MAX_HEAD => {
            return Err(Reply::text(431, "request head too large\n"));
        }
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Reply::text(431, "too many request headers\n"));
        }
        Ok(httparse::Status::Partial) | Err(_) => {
            return Err(Reply::text(400, "bad request\n"));
        }
    }
    let method = req.method.unwrap_or_default().to_string();
    let path = req.path.unwrap_or_default();
    let path = path
        .split(['?', '#'])
        .next()
        .unwrap_or_default()
        .to_string();
    Ok((method, path))
}

/// The answer to `method` on `path`.
fn route(method: &str, path: &str, monitor: &Monitor) -> Reply {
    if method != "GET" && method != "HEAD" {
        return Reply::text(405, "only GET (and HEAD) are served here\n");
    }
    match path {
        "/" | "/index.html" => Reply::new(200, "text/html; charset=utf-8", INDEX_HTML),
        "/app.js" => Reply::new(200, "text/javascript; charset=utf-8", APP_JS),
        "/app.css" => Reply::new(200, "text/css; charset=utf-8", APP_CSS),
        "/favicon.svg" | "/favicon.ico" => Reply::new(200, "image/svg+xml", FAVICON_SVG),
        "/metrics" => Reply::new(
            200,
            "text/plain; version=0.0.4; charset=utf-8",
            monitor.metrics_text(),
        ),
        "/api/sessions" => Reply::new(200, "application/json", monitor.status_json()),
        _ => Reply::text(404, "not found: try /, /metrics or /api/sessions\n"),
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    }
}

/// Writes `reply` (its body unless `with_body` is false, for HEAD) and closes.
fn respond(mut stream: &TcpStream, reply: &Reply, with_body: bool) -> std::io::Result<()> {
    let allow = if reply.status == 405 {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{allow}\
         Cache-Control: no-store\r\nX-Content-Type-Options: nosniff\r\n\
         Content-Security-Policy: {CSP}\r\nReferrer-Policy: no-referrer\r\n\
         X-Frame-Options: DENY\r\nConnection: close\r\n\r\n",
        reply.status,
        reason(reply.status),
        reply.content_type,
        reply.body.len(),
    );
    stream.write_all(head.as_bytes())?;
    if with_body {
        stream.write_all(&reply.body)?;
    }
    stream.flush()?;
    stream.shutdown(Shutdown::Write)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_head_that_cannot_become_http_is_known_at_once() {
        assert!(not_http(b"\x00\x00\x00\x2c\x01ZCP\x01"));
        assert!(not_http(b"SSH-2.0-x\r\n"));
        assert!(!not_http(b"GE"));
        assert!(!not_http(b"GET /metrics HT"));
        assert!(!not_http(b"GET /metrics HTTP/1.1\r\nHost: a\r\n"));
    }

    #[test]
    fn requests_parse_or_get_the_right_error() {
        let ok = parse(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\n\r\n").unwrap();
        assert_eq!(ok, ("GET".into(), "/metrics".into()));
        let bad = parse(b"\x00\x01garbage\r\n\r\n").unwrap_err();
        assert_eq!(bad.status, 400);
        let many: String = (0..40).map(|i| format!("X-{i}: y\r\n")).collect();
        let e = parse(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes()).unwrap_err();
        assert_eq!(e.status, 431);
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(MAX_HEAD));
        let e = parse(&long.as_bytes()[..MAX_HEAD]).unwrap_err();
        assert_eq!(e.status, 431);
    }

    #[test]
    fn routes_answer_get_only_and_known_paths() {
        let m = Monitor::new();
        assert_eq!(route("POST", "/metrics", &m).status, 405);
        assert_eq!(route("GET", "/etc/passwd", &m).status, 404);
        assert_eq!(
            route("GET", "/", &m).content_type,
            "text/html; charset=utf-8"
        );
        let r = route("GET", "/api/sessions", &m);
        let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!(v["active"].as_array().map(Vec::len), Some(0));
        let r = route("HEAD", "/metrics", &m);
        assert!(
            String::from_utf8(r.body)
                .unwrap()
                .contains("zcp_sessions_active 0")
        );
    }
}
