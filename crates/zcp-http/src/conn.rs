//! One client connection: plain TCP or TLS (rustls), request heads read under a deadline, and
//! answers written, a file's bytes by `sendfile` where the connection is plain.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use rustls::{ServerConnection, StreamOwned};
use zcp_engine::send::{FileSender, SendEngine};

use crate::request::{self, Head, MAX_HEAD, Parsed, Refused};

/// The timeout on each read and write once a request is being served.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// Bytes of a file read at a time for a TLS connection.
const TLS_CHUNK: usize = 256 * 1024;

/// A connection, plain or TLS.
pub(crate) enum Conn {
    Plain(TcpStream),
    Tls(Box<StreamOwned<ServerConnection, TcpStream>>),
}

impl Conn {
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(t) => &t.sock,
        }
    }

    /// Whether the bytes go through TLS.
    pub(crate) fn tls(&self) -> bool {
        matches!(self, Conn::Tls(_))
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(t) => t.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(t) => t.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(t) => t.flush(),
        }
    }
}

/// What came of waiting for a request head.
pub(crate) enum HeadRead {
    /// A whole head (its bytes are taken out of the buffer).
    Head(Head),
    /// A head that cannot be served (answered, then the connection closes).
    Refused(Refused),
    /// The peer closed, the deadline passed, or the connection failed: close without a word.
    Gone,
}

/// Reads until `buf` starts with a whole request head, or `deadline`.
pub(crate) fn read_head(conn: &mut Conn, buf: &mut Vec<u8>, deadline: Instant) -> HeadRead {
    let mut chunk = [0u8; 4096];
    loop {
        if !buf.is_empty() {
            match request::parse(buf) {
                Ok(Parsed::Done(h)) => {
                    buf.drain(..h.len);
                    return HeadRead::Head(h);
                }
                Ok(Parsed::Partial) => {}
                Err(r) => return HeadRead::Refused(r),
            }
        }
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            return HeadRead::Gone;
        };
        // A zero timeout would mean "none".
        if (conn.tcp())
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .is_err()
        {
            return HeadRead::Gone;
        }
        let room = (MAX_HEAD + 1 - buf.len().min(MAX_HEAD)).min(chunk.len());
        match conn.read(&mut chunk[..room]) {
            Ok(0) | Err(_) => return HeadRead::Gone,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Reads a request body of `len` bytes (the caller caps `len`), whole by `deadline`.
pub(crate) fn read_body(
    conn: &mut Conn,
    buf: &mut Vec<u8>,
    len: u64,
    deadline: Instant,
) -> Option<Vec<u8>> {
    let len = usize::try_from(len).ok()?;
    let mut chunk = [0u8; 8192];
    while buf.len() < len {
        let left = deadline.checked_duration_since(Instant::now())?;
        conn.tcp()
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .ok()?;
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    Some(buf.drain(..len).collect())
}

/// An answer's head: status line, headers, blank line.
pub(crate) fn head_text(status: u16, headers: &[(&str, String)], keep_alive: bool) -> String {
    let mut s = format!("HTTP/1.1 {status} {}\r\n", reason(status));
    s.push_str(&format!(
        "Date: {}\r\nServer: zcp/{}\r\n",
        httpdate::fmt_http_date(std::time::SystemTime::now()),
        env!("CARGO_PKG_VERSION")
    ));
    for (k, v) in headers {
        s.push_str(k);
        s.push_str(": ");
        s.push_str(v);
        s.push_str("\r\n");
    }
    if !keep_alive {
        s.push_str("Connection: close\r\n");
    }
    s.push_str("\r\n");
    s
}

/// Writes bytes `start..end` of `file` after an answer's head: `sendfile` on a plain
/// connection, `pread` and TLS records otherwise. Counts what went into `sent`.
pub(crate) fn send_file(
    conn: &mut Conn,
    file: std::os::fd::BorrowedFd<'_>,
    start: u64,
    end: u64,
    sent: &AtomicU64,
) -> Result<(), String> {
    if let Conn::Plain(s) = conn {
        return FileSender::new(SendEngine::Sendfile, SendEngine::Sendfile.default_block())
            .send(file, s.as_fd(), start, end - start, sent)
            .map_err(|e| e.to_string());
    }
    let mut buf = vec![0u8; TLS_CHUNK];
    let mut at = start;
    while at < end {
        let n = usize::try_from(end - at)
            .unwrap_or(TLS_CHUNK)
            .min(TLS_CHUNK);
        zcp_engine::udp::read_at(file, &mut buf[..n], at).map_err(|e| e.to_string())?;
        conn.write_all(&buf[..n]).map_err(|e| e.to_string())?;
        at += n as u64;
        sent.fetch_add(n as u64, std::sync::atomic::Ordering::Relaxed);
    }
    conn.flush().map_err(|e| e.to_string())
}

/// The reason phrase of the statuses served.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        206 => "Partial Content",
        207 => "Multi-Status",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        416 => "Range Not Satisfiable",
        423 => "Locked",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        507 => "Insufficient Storage",
        _ => "",
    }
}
