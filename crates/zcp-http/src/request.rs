//! A request head, parsed by `httparse` and checked: the method, the path (percent-decoded,
//! split into components that can never leave an export), the headers the server reads, and
//! a `Range`. Nothing here does I/O; the `http_head` fuzz target feeds it bytes.

use percent_encoding::percent_decode;

/// The most headers a request may carry.
pub const MAX_HEADERS: usize = 64;
/// The largest request head (request line and headers).
pub const MAX_HEAD: usize = 16 * 1024;

/// The methods served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Method {
    /// `GET`.
    Get,
    /// `HEAD`.
    Head,
    /// `OPTIONS`.
    Options,
    /// `PROPFIND` (WebDAV).
    Propfind,
    /// `POST` (only a macaroon request).
    Post,
    /// `PUT`.
    Put,
    /// `MKCOL` (WebDAV).
    Mkcol,
    /// `DELETE`.
    Delete,
    /// Anything else (answered 405).
    Other,
}

/// Why a head was refused, with the status to answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{status}: {why}")]
pub struct Refused {
    /// The HTTP status.
    pub status: u16,
    /// What to fix.
    pub why: String,
}

impl Refused {
    pub(crate) fn new(status: u16, why: impl Into<String>) -> Refused {
        Refused {
            status,
            why: why.into(),
        }
    }
}

/// A request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// The method.
    pub method: Method,
    /// The method as sent (for logs; escaped before it is shown).
    pub method_text: String,
    /// The path's components, percent-decoded, each a plain name.
    pub components: Vec<Vec<u8>>,
    /// `HTTP/1.1` rather than `HTTP/1.0`.
    pub http11: bool,
    /// The headers (names lowercased), in order.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Bytes of the head, including the blank line.
    pub len: usize,
}

/// The outcome of looking for a head in what has been read so far.
#[derive(Debug)]
pub enum Parsed {
    /// A whole head.
    Done(Head),
    /// More bytes are needed.
    Partial,
}

/// Parses `buf` as a request head.
pub fn parse(buf: &[u8]) -> Result<Parsed, Refused> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
            return Err(Refused::new(
                431,
                format!("the request head is over {MAX_HEAD} bytes"),
            ));
        }
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Refused::new(
                431,
                format!("the request has over {MAX_HEADERS} headers"),
            ));
        }
        Err(e) => return Err(Refused::new(400, format!("malformed request ({e})"))),
    };
    if len > MAX_HEAD {
        return Err(Refused::new(
            431,
            format!("the request head is over {MAX_HEAD} bytes"),
        ));
    }
    let method_text = req.method.unwrap_or_default().to_string();
    let method = match method_text.as_str() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "OPTIONS" => Method::Options,
        "PROPFIND" => Method::Propfind,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "MKCOL" => Method::Mkcol,
        "DELETE" => Method::Delete,
        _ => Method::Other,
    };
    let target = req.path.unwrap_or_default();
    // `OPTIONS *` asks about the server itself.
    let components = if method == Method::Options && target == "*" {
        Vec::new()
    } else {
        decode_path(target)?
    };
    Ok(Parsed::Done(Head {
        method,
        method_text,
        components,
        http11: req.version == Some(1),
        headers: req
            .headers
            .iter()
            .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
            .collect(),
        len,
    }))
}

/// The components of a request target's path: the query is dropped, `%XX` decoded, empty
/// and `.` components skipped. `..` (however spelt), NUL, a `/` decoded from `%2F` inside a
/// component and a target that is not an absolute path are refused.
pub fn decode_path(target: &str) -> Result<Vec<Vec<u8>>, Refused> {
    let path = target.split(['?', '#']).next().unwrap_or_default();
    if !path.starts_with('/') {
        return Err(Refused::new(
            400,
            "the request target must be an absolute path (/EXPORT/PATH)",
        ));
    }
    let mut out = Vec::new();
    for raw in path.split('/') {
        let c: Vec<u8> = percent_decode(raw.as_bytes()).collect();
        match c.as_slice() {
            b"" | b"." => {}
            b".." => {
                return Err(Refused::new(
                    400,
                    "the path has a '..' component; paths may not leave the export",
                ));
            }
            c if c.iter().any(|b| *b < 0x20 || *b == 0x7f || *b == b'/') => {
                return Err(Refused::new(
                    400,
                    "a path component holds a control character or an encoded '/'",
                ));
            }
            c if c.len() > zcp_wire::MAX_NAME => {
                return Err(Refused::new(400, "a path component is over 255 bytes"));
            }
            c => out.push(c.to_vec()),
        }
    }
    Ok(out)
}

impl Head {
    /// The first value of header `name` (lowercase), as text if it is valid UTF-8.
    pub fn header(&self, name: &str) -> Option<&str> {
        (self.headers.iter())
            .find(|(n, _)| n == name)
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
            .map(str::trim)
    }

    /// Whether header `name` (lowercase) is present at all, whatever its bytes.
    pub fn has_header(&self, name: &str) -> bool {
        self.headers.iter().any(|(n, _)| n == name)
    }

    /// Every value of header `name` (lowercase), joined by `, ` as RFC 9110 combines field
    /// lines; `Err` when one is not UTF-8 (so that no line can be skipped unseen).
    pub fn header_all(&self, name: &str) -> Result<Option<String>, Refused> {
        let mut out: Option<String> = None;
        for (_, v) in self.headers.iter().filter(|(n, _)| n == name) {
            let v = std::str::from_utf8(v)
                .map_err(|_| Refused::new(400, format!("the {name} header is not UTF-8")))?;
            match &mut out {
                Some(o) => {
                    o.push_str(", ");
                    o.push_str(v.trim());
                }
                None => out = Some(v.trim().to_string()),
            }
        }
        Ok(out)
    }

    /// Whether the connection stays open after this request.
    pub fn keep_alive(&self) -> bool {
        let conn = self.header("connection").unwrap_or_default();
        let has = |w: &str| conn.split(',').any(|t| t.trim().eq_ignore_ascii_case(w));
        if self.http11 {
            !has("close")
        } else {
            has("keep-alive")
        }
    }

    /// The body's length: 0 without one. A chunked body is refused (no method served here
    /// takes one), as is a `Content-Length` that is not one number.
    pub fn body_len(&self) -> Result<u64, Refused> {
        if self.has_header("transfer-encoding") {
            return Err(Refused::new(
                411,
                "a chunked request body is not accepted here; send Content-Length",
            ));
        }
        let lens: Vec<&str> = (self.headers.iter())
            .filter(|(n, _)| n == "content-length")
            .map(|(_, v)| std::str::from_utf8(v).unwrap_or("x").trim())
            .collect();
        match lens.as_slice() {
            [] => Ok(0),
            [one] if !one.is_empty() && one.bytes().all(|b| b.is_ascii_digit()) => one
                .parse()
                .map_err(|_| Refused::new(400, "Content-Length is too large")),
            [_] => Err(Refused::new(400, "Content-Length is not a number")),
            _ => Err(Refused::new(400, "Content-Length is given more than once")),
        }
    }

    /// The bearer token of `Authorization: Bearer T`, if any.
    pub fn bearer(&self) -> Option<&str> {
        let v = self.header("authorization")?;
        let (scheme, token) = v.split_once(' ')?;
        scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
    }

    /// The path, lossy for names that are not UTF-8 (for logs; escape it before showing).
    pub fn path_text(&self) -> String {
        path_text(&self.components)
    }

    /// The path's raw bytes, as token caveats are matched against them.
    pub fn path_bytes(&self) -> Vec<u8> {
        path_bytes(&self.components)
    }

    /// Whether a body follows the head (a length above 0, chunked, or a length that cannot
    /// be read): a request refused before its body is read must close the connection.
    pub fn has_body(&self) -> bool {
        self.has_header("transfer-encoding") || self.body_len() != Ok(0)
    }
}

/// `/` + the raw bytes of `components` joined by `/`.
pub fn path_bytes(components: &[Vec<u8>]) -> Vec<u8> {
    let mut p = Vec::new();
    for c in components {
        p.push(b'/');
        p.extend_from_slice(c);
    }
    if p.is_empty() {
        p.push(b'/');
    }
    p
}

/// `/` + `components` joined by `/` (lossy for names that are not UTF-8).
pub fn path_text(components: &[Vec<u8>]) -> String {
    String::from_utf8_lossy(&path_bytes(components)).into_owned()
}

/// A byte range to serve: `start..end` of the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

/// What a `Range` header asks of a file of `size` bytes: `Ok(None)` for the whole file (no
/// header, or one this server ignores, as RFC 9110 allows: several ranges, another unit);
/// `Err(())` when it cannot be satisfied (416).
#[allow(clippy::result_unit_err)]
pub fn range(header: Option<&str>, size: u64) -> Result<Option<ByteRange>, ()> {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return Ok(None);
    };
    if spec.contains(',') {
        return Ok(None);
    }
    let (a, b) = spec.trim().split_once('-').ok_or(())?;
    let num = |s: &str| -> Result<u64, ()> {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(());
        }
        s.parse().map_err(|_| ())
    };
    let r = if a.is_empty() {
        let n = num(b)?;
        if n == 0 {
            return Err(());
        }
        ByteRange {
            start: size.saturating_sub(n),
            end: size,
        }
    } else {
        let start = num(a)?;
        let end = if b.is_empty() {
            size
        } else {
            let last = num(b)?;
            if last < start {
                return Err(());
            }
            last.saturating_add(1).min(size)
        };
        ByteRange { start, end }
    };
    if r.start >= size {
        return Err(());
    }
    Ok(Some(r))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Head {
        match parse(text.as_bytes()).unwrap() {
            Parsed::Done(h) => h,
            Parsed::Partial => panic!("partial"),
        }
    }

    #[test]
    fn a_head_parses() {
        let h = head("GET /data/a%20b/c.txt?x=1 HTTP/1.1\r\nHost: h\r\nRange: bytes=0-9\r\n\r\n");
        assert_eq!(h.method, Method::Get);
        assert_eq!(
            h.components,
            vec![b"data".to_vec(), b"a b".to_vec(), b"c.txt".to_vec()]
        );
        assert_eq!(h.header("range"), Some("bytes=0-9"));
        assert!(h.keep_alive());
        assert_eq!(h.path_text(), "/data/a b/c.txt");
        assert!(matches!(
            parse(b"GET / HTTP/1.1\r\nHost"),
            Ok(Parsed::Partial)
        ));
        let h10 = head("HEAD / HTTP/1.0\r\n\r\n");
        assert!(!h10.keep_alive());
        assert_eq!(h10.path_text(), "/");
    }

    #[test]
    fn paths_cannot_leave_the_export() {
        for t in [
            "/a/../b",
            "/a/%2e%2e/b",
            "/a/%2E%2e",
            "/a%2f..%2fb",
            "/a/%00",
            "/a/x%0Abefore%201",
            "/a/%1b[31m",
            "a/b",
            "*",
        ] {
            assert!(decode_path(t).is_err(), "{t}");
        }
        assert_eq!(
            decode_path("//a/./b/").unwrap(),
            vec![b"a".to_vec(), b"b".to_vec()]
        );
    }

    #[test]
    fn floods_are_refused_with_431() {
        let mut many = String::from("GET / HTTP/1.1\r\n");
        for i in 0..=MAX_HEADERS {
            many.push_str(&format!("X-{i}: y\r\n"));
        }
        many.push_str("\r\n");
        assert_eq!(parse(many.as_bytes()).unwrap_err().status, 431);
        let long = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(MAX_HEAD));
        assert_eq!(parse(long.as_bytes()).unwrap_err().status, 431);
        assert_eq!(
            parse(b"\x00\x01 / HTTP/1.1\r\n\r\n").unwrap_err().status,
            400
        );
    }

    #[test]
    fn bodies_and_tokens() {
        let h =
            head("PUT /a HTTP/1.1\r\nContent-Length: 12\r\nAuthorization: bearer  T.1 \r\n\r\n");
        assert_eq!(h.body_len(), Ok(12));
        assert_eq!(h.bearer(), Some("T.1"));
        let plus = head("PUT /a HTTP/1.1\r\nContent-Length: +3\r\n\r\n");
        assert_eq!(plus.body_len().unwrap_err().status, 400);
        assert!(plus.has_body());
        let two = head("PUT /a HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n");
        assert_eq!(two.body_len().unwrap_err().status, 400);
        let chunked = head("PUT /a HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(chunked.body_len().unwrap_err().status, 411);
        let basic = head("GET /a HTTP/1.1\r\nAuthorization: Basic eA==\r\n\r\n");
        assert_eq!(basic.bearer(), None);
    }

    #[test]
    fn ranges() {
        let r = |h: &str, size| range(Some(h), size);
        assert_eq!(
            r("bytes=0-9", 100),
            Ok(Some(ByteRange { start: 0, end: 10 }))
        );
        assert_eq!(
            r("bytes=90-", 100),
            Ok(Some(ByteRange {
                start: 90,
                end: 100
            }))
        );
        assert_eq!(
            r("bytes=-10", 100),
            Ok(Some(ByteRange {
                start: 90,
                end: 100
            }))
        );
        assert_eq!(
            r("bytes=-1000", 100),
            Ok(Some(ByteRange { start: 0, end: 100 }))
        );
        assert_eq!(
            r("bytes=50-1000", 100),
            Ok(Some(ByteRange {
                start: 50,
                end: 100
            }))
        );
        assert_eq!(r("bytes=100-", 100), Err(()));
        assert_eq!(r("bytes=9-3", 100), Err(()));
        assert_eq!(r("bytes=-0", 100), Err(()));
        assert_eq!(r("bytes=x-3", 100), Err(()));
        assert_eq!(r("bytes=+1-3", 100), Err(()));
        assert_eq!(r("bytes=0-1,5-6", 100), Ok(None));
        assert_eq!(r("items=0-1", 100), Ok(None));
        assert_eq!(range(None, 100), Ok(None));
        assert_eq!(r("bytes=0-", 0), Err(()));
    }
}
