//! A connection's requests, one after another: the head read under the slot table's deadline,
//! the bearer token checked against the identity's key and the export's permissions, the
//! answer written, and each request reported.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::{ServerConnection, StreamOwned};
use zcp_engine::sync::Locked;
use zcp_session::{AccessSnapshot, PendingId};

use crate::conn::{self, Conn, HeadRead, IO_TIMEOUT};
use crate::files::{self, Body};
use crate::request::{Head, Method, Refused};
use crate::slots::Slots;
use crate::token::{Activity, Token, TokenError};
use crate::{Access, HttpReporter};

/// The largest request body read (a PROPFIND's XML, a macaroon request); larger is 413.
pub(crate) const MAX_BODY: u64 = 64 * 1024;
/// The methods served, for `Allow`.
pub(crate) const ALLOW: &str = "OPTIONS, GET, HEAD, PROPFIND, POST, PUT, MKCOL, DELETE";

/// One request as answered, for the log. Every text came from the network (escape it).
#[derive(Debug, Clone)]
pub struct Served {
    /// The client.
    pub peer: SocketAddr,
    /// Whether over TLS.
    pub tls: bool,
    /// The method as sent.
    pub method: String,
    /// The path, decoded (`/` + components).
    pub path: String,
    /// The identity its token named and proved, if it did.
    pub identity: Option<String>,
    /// The status answered.
    pub status: u16,
    /// Body bytes sent, or taken in (a PUT's file).
    pub bytes: u64,
    /// From the head's arrival to the last byte written.
    pub elapsed: Duration,
    /// Why it was refused or failed, if it was.
    pub why: Option<String>,
}

/// Seconds since the epoch.
pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What is answered.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) headers: Vec<(&'static str, String)>,
    pub(crate) body: Body,
    /// Why, for the log (refusals and failures).
    pub(crate) why: Option<String>,
    /// The connection must close after it.
    pub(crate) close: bool,
    /// Body bytes the request sent that were taken (a PUT's file).
    pub(crate) received: u64,
    /// The request's body was not read (it was refused first).
    pub(crate) unread_body: bool,
}

impl Answer {
    pub(crate) fn new(status: u16, body: Body) -> Answer {
        Answer {
            status,
            headers: Vec::new(),
            body,
            why: None,
            close: false,
            received: 0,
            unread_body: false,
        }
    }

    /// A refusal or failure: its reason as a text body and in the log.
    pub(crate) fn refuse(status: u16, why: impl Into<String>) -> Answer {
        let why = why.into();
        let mut a = Answer::new(status, Body::Bytes(format!("{why}\n").into_bytes()));
        a.headers
            .push(("Content-Type", "text/plain; charset=utf-8".into()));
        a.why = Some(why);
        a
    }

    pub(crate) fn header(mut self, k: &'static str, v: impl Into<String>) -> Answer {
        self.headers.push((k, v.into()));
        self
    }
}

/// A request that passed authentication: who, with what token.
pub(crate) struct Authed {
    pub(crate) identity: String,
    pub(crate) token: Token,
    pub(crate) snapshot: AccessSnapshot,
}

/// What a connection's thread needs.
pub(crate) struct Ctx {
    pub(crate) access: Access,
    pub(crate) reporter: Arc<dyn HttpReporter>,
    pub(crate) slots: Arc<Mutex<Slots>>,
    pub(crate) tls: Option<Arc<rustls::ServerConfig>>,
    pub(crate) peer: SocketAddr,
    /// The time for a request's head, and again for a small body.
    pub(crate) head_timeout: Duration,
    /// Requests being served per source, and the most at once.
    pub(crate) per_source: crate::slots::Counts<zcp_session::PendingSource>,
    pub(crate) max_per_source: usize,
    /// PUTs being received per identity, and the most at once.
    pub(crate) puts: crate::slots::Counts<String>,
    pub(crate) max_puts: usize,
}

/// Answers 503 to a connection there is no thread for (plain HTTP; a TLS one is closed, as
/// a plain answer would only be a TLS error to its client).
pub(crate) fn busy(stream: TcpStream, tls: bool) {
    if tls {
        return;
    }
    let _ = stream.set_write_timeout(Some(Duration::from_millis(100)));
    let text = "the server is serving as many connections as it may; try again\n";
    let head = conn::head_text(
        503,
        &[
            ("Content-Length", text.len().to_string()),
            ("Retry-After", "1".into()),
        ],
        false,
    );
    let _ = (&stream).write_all(format!("{head}{text}").as_bytes());
}

impl Ctx {
    /// Serves `stream`'s requests until it closes, fails, or a request ends it. `id` is its
    /// place in the slot table while it waits for its first head.
    pub(crate) fn serve(self, stream: TcpStream, id: PendingId) {
        let _ = stream.set_nodelay(true);
        if stream.set_write_timeout(Some(IO_TIMEOUT)).is_err() {
            self.slots.locked().done(id);
            return;
        }
        let mut conn = match &self.tls {
            None => Conn::Plain(stream),
            Some(cfg) => match ServerConnection::new(cfg.clone()) {
                Ok(c) => Conn::Tls(Box::new(StreamOwned::new(c, stream))),
                Err(_) => {
                    self.slots.locked().done(id);
                    return;
                }
            },
        };
        let mut buf = Vec::new();
        let mut first = Some(id);
        loop {
            let id = match first.take() {
                Some(id) => id,
                None => match self.slots.locked().admit(conn.tcp(), self.peer) {
                    Some(id) => id,
                    None => break,
                },
            };
            let deadline = Instant::now() + self.slots.locked().limit();
            let got = conn::read_head(&mut conn, &mut buf, deadline);
            self.slots.locked().done(id);
            let keep = match got {
                HeadRead::Head(head) => self.request(&mut conn, &mut buf, &head),
                HeadRead::Refused(r) => {
                    self.refused(&mut conn, &r);
                    false
                }
                HeadRead::Gone => false,
            };
            if !keep {
                break;
            }
        }
        if let Conn::Tls(t) = &mut conn {
            t.conn.send_close_notify();
            let _ = t.flush();
        }
    }

    /// A head that could not be parsed: answered, reported, and the connection closes.
    fn refused(&self, conn: &mut Conn, r: &Refused) {
        let a = Answer::refuse(r.status, r.why.clone());
        let sent = AtomicU64::new(0);
        let how = Framing {
            with_body: true,
            keep: false,
            http11: true,
        };
        let _ = write_answer(conn, a.close_now(), how, &sent);
        self.reporter.served(&Served {
            peer: self.peer,
            tls: conn.tls(),
            method: "-".into(),
            path: "-".into(),
            identity: None,
            status: r.status,
            bytes: sent.load(Ordering::Relaxed),
            elapsed: Duration::ZERO,
            why: Some(r.why.clone()),
        });
    }

    /// One request; whether the connection stays open for another.
    fn request(&self, conn: &mut Conn, buf: &mut Vec<u8>, head: &Head) -> bool {
        let started = Instant::now();
        let mut identity = None;
        let source = zcp_session::PendingSource::of(self.peer.ip());
        let own = self.per_source.take(source, self.max_per_source);
        let mut answer = match &own {
            Some(_) => self.dispatch(conn, buf, head, &mut identity, started),
            None => Answer::refuse(
                503,
                format!(
                    "this address has {} requests being served already; try again",
                    self.max_per_source
                ),
            )
            .header("Retry-After", "1")
            .close_now(),
        };
        // A request refused before its body was read: what follows is not a request.
        if answer.unread_body {
            answer.close = true;
        }
        let keep = head.keep_alive() && !answer.close;
        let status = answer.status;
        let why = answer.why.clone();
        let received = answer.received;
        let sent = AtomicU64::new(0);
        let how = Framing {
            with_body: head.method != Method::Head,
            keep,
            http11: head.http11,
        };
        let written = write_answer(conn, answer, how, &sent);
        drop(own);
        self.reporter.served(&Served {
            peer: self.peer,
            tls: conn.tls(),
            method: head.method_text.clone(),
            path: head.path_text(),
            identity,
            status,
            bytes: sent.load(Ordering::Relaxed) + received,
            elapsed: started.elapsed(),
            why: why.or(written.clone().err()),
        });
        written == Ok(true)
    }

    /// The answer: the method and the token are checked before any body is read, so nobody
    /// without a valid token can hold a thread by sending one slowly.
    fn dispatch(
        &self,
        conn: &mut Conn,
        buf: &mut Vec<u8>,
        head: &Head,
        identity: &mut Option<String>,
        started: Instant,
    ) -> Answer {
        let unread = |a: Answer| {
            let body = head.has_body();
            let mut a = a;
            a.unread_body = body;
            a
        };
        match head.method {
            Method::Options => {
                return self.with_body(conn, buf, head, started, |_| {
                    Answer::new(200, Body::Empty)
                        .header("DAV", "1")
                        .header("Allow", ALLOW)
                        .header("Accept-Ranges", "bytes")
                });
            }
            Method::Other => {
                return unread(
                    Answer::refuse(
                        405,
                        format!(
                            "{} is not served here (yet): {ALLOW} are",
                            zcp_wire::escape_text(&head.method_text)
                        ),
                    )
                    .header("Allow", ALLOW),
                );
            }
            _ => {}
        }
        let authed = match self.authenticate(head) {
            Ok(a) => a,
            Err(a) => return unread(a),
        };
        *identity = Some(authed.identity.clone());
        if !conn.tls() && authed.snapshot.must_encrypt(&authed.identity) {
            return unread(Answer::refuse(
                403,
                format!(
                    "{} must be served encrypted (require_encryption): use the HTTPS face",
                    authed.identity
                ),
            ));
        }
        if head.method == Method::Put {
            // The body is the file: streamed by the PUT itself once it is allowed.
            let Some(_put) = self.puts.take(authed.identity.clone(), self.max_puts) else {
                return unread(
                    Answer::refuse(
                        503,
                        format!(
                            "{} PUTs of this identity are running; try again",
                            self.max_puts
                        ),
                    )
                    .header("Retry-After", "5"),
                );
            };
            return crate::write::put(conn, buf, head, &authed);
        }
        self.with_body(conn, buf, head, started, |body| match head.method {
            Method::Post => files::macaroon_request(head, body, &authed),
            Method::Mkcol => crate::write::mkcol(head, &authed),
            Method::Delete => crate::write::delete(head, &authed),
            _ => files::read_side(head, &authed),
        })
    }

    /// Reads the request's small body (at most [`MAX_BODY`], whole within the head's time),
    /// then answers with `then`.
    fn with_body(
        &self,
        conn: &mut Conn,
        buf: &mut Vec<u8>,
        head: &Head,
        started: Instant,
        then: impl FnOnce(&[u8]) -> Answer,
    ) -> Answer {
        let len = match head.body_len() {
            Ok(n) => n,
            Err(r) => return Answer::refuse(r.status, r.why).close_now(),
        };
        if len > MAX_BODY {
            return Answer::refuse(
                413,
                format!("a request body here is at most {MAX_BODY} bytes"),
            )
            .close_now();
        }
        match conn::read_body(conn, buf, len, started + self.head_timeout) {
            Some(body) => then(&body),
            None => Answer::refuse(400, "the request body did not come whole in time").close_now(),
        }
    }

    /// The token's identity, proved. A token that fails says the same whether its identity
    /// exists or not (the log says which).
    fn authenticate(&self, head: &Head) -> Result<Authed, Answer> {
        let challenge = |shown: &str, why: String, error: &str| {
            let mut a = Answer::refuse(401, shown);
            a.why = Some(why);
            let v = if error.is_empty() {
                "Bearer realm=\"zcp\"".to_string()
            } else {
                format!("Bearer realm=\"zcp\", error=\"{error}\"")
            };
            a.headers.push(("WWW-Authenticate", v));
            a
        };
        let invalid = |why: String| {
            challenge(
                "the token is not valid here (malformed, tampered, made with another key, or of \
                 an identity this server does not know)",
                why,
                "invalid_token",
            )
        };
        let Some(text) = head.bearer() else {
            let m =
                "a bearer token is needed (Authorization: Bearer TOKEN; make one with `zcp token`)";
            return Err(challenge(m, m.into(), ""));
        };
        let token = Token::decode(text).map_err(|e| invalid(e.to_string()))?;
        let snapshot = (self.access)();
        let Some(psk) = snapshot.key_of(&token.identity) else {
            return Err(invalid(TokenError::UnknownIdentity.to_string()));
        };
        let key = zcp_wire::http_token_key(psk, &token.identity);
        match token.verify(&key, now_unix()) {
            Ok(()) => {}
            // Only a token with a good signature gets this far: saying so leaks nothing.
            Err(TokenError::Expired) => {
                let m = TokenError::Expired.to_string();
                return Err(challenge(&m, m.clone(), "invalid_token"));
            }
            Err(e) => return Err(invalid(e.to_string())),
        }
        Ok(Authed {
            identity: token.identity.clone(),
            token,
            snapshot,
        })
    }
}

impl Answer {
    /// The connection closes after this answer.
    pub(crate) fn close_now(mut self) -> Answer {
        self.close = true;
        self
    }
}

/// How an answer is framed.
#[derive(Debug, Clone, Copy)]
struct Framing {
    /// Not for `HEAD`, whose head still gives the length.
    with_body: bool,
    /// The connection stays open after it.
    keep: bool,
    /// The request was HTTP/1.1 (an HTTP/1.0 one kept open is told `keep-alive`).
    http11: bool,
}

/// Writes `a`: its head, then its body (chunked where its length is not known before, or to
/// the connection's end for HTTP/1.0); whether the connection stays open.
fn write_answer(
    conn: &mut Conn,
    a: Answer,
    how: Framing,
    sent: &AtomicU64,
) -> Result<bool, String> {
    let mut headers = a.headers;
    let mut how = how;
    // HTTP/1.0 knows no chunks: a body of unknown length ends with the connection.
    let chunked = a.body.len().is_none() && how.http11;
    match a.body.len() {
        Some(n) => headers.push(("Content-Length", n.to_string())),
        None if chunked => headers.push(("Transfer-Encoding", "chunked".into())),
        None => how.keep = false,
    }
    if how.keep && !how.http11 {
        headers.push(("Connection", "keep-alive".into()));
    }
    let head = conn::head_text(a.status, &headers, how.keep);
    conn.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
    if how.with_body {
        match &a.body {
            Body::Empty => {}
            Body::Bytes(b) => {
                conn.write_all(b).map_err(|e| e.to_string())?;
                sent.fetch_add(b.len() as u64, Ordering::Relaxed);
            }
            Body::File { fd, start, end } => {
                conn::send_file(conn, std::os::fd::AsFd::as_fd(fd), *start, *end, sent)?;
            }
            Body::Listing(l) => {
                l.write(&mut |piece: &[u8]| {
                    sent.fetch_add(piece.len() as u64, Ordering::Relaxed);
                    if !chunked {
                        return conn.write_all(piece).map_err(|e| e.to_string());
                    }
                    let framed =
                        [format!("{:x}\r\n", piece.len()).as_bytes(), piece, b"\r\n"].concat();
                    conn.write_all(&framed).map_err(|e| e.to_string())
                })?;
                if chunked {
                    conn.write_all(b"0\r\n\r\n").map_err(|e| e.to_string())?;
                }
            }
        }
    }
    conn.flush().map_err(|e| e.to_string())?;
    Ok(how.keep)
}

/// The activity a request needs of its token.
pub(crate) fn activity_of(head: &Head) -> Activity {
    match head.method {
        Method::Get => Activity::Download,
        Method::Propfind if head.header("depth") != Some("0") => Activity::List,
        _ => Activity::ReadMetadata,
    }
}
