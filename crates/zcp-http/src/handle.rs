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
use crate::token::{Activity, Token};
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
}

/// Answers 503 to a connection there is no thread for (plain HTTP; a TLS one is closed).
pub(crate) fn busy(stream: TcpStream) {
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
        let _ = write_answer(conn, a.close_now(), true, &sent);
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
        let answer = if head.method == Method::Put {
            // The body is the file: streamed by the PUT itself, once it is allowed. A refusal
            // before it is read closes the connection (what follows is not a request).
            match self.authenticate(head) {
                Err(a) => a.close_now(),
                Ok(authed) => {
                    identity = Some(authed.identity.clone());
                    crate::write::put(conn, buf, head, &authed)
                }
            }
        } else {
            match self.read_body(conn, buf, head) {
                Err(a) => a.close_now(),
                Ok(body) => self.answer(head, &body, &mut identity),
            }
        };
        let keep = head.keep_alive() && !answer.close;
        let status = answer.status;
        let why = answer.why.clone();
        let received = answer.received;
        let sent = AtomicU64::new(0);
        let written = write_answer(conn, answer, head.method != Method::Head, &sent);
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
        keep && written.is_ok()
    }

    /// The request's body (at most [`MAX_BODY`]), or the answer that refuses it.
    fn read_body(
        &self,
        conn: &mut Conn,
        buf: &mut Vec<u8>,
        head: &Head,
    ) -> Result<Vec<u8>, Answer> {
        let len = head
            .body_len()
            .map_err(|r| Answer::refuse(r.status, r.why))?;
        if len > MAX_BODY {
            return Err(Answer::refuse(
                413,
                format!("a request body here is at most {MAX_BODY} bytes"),
            ));
        }
        conn::read_body(conn, buf, len)
            .ok_or_else(|| Answer::refuse(400, "the request body did not come whole"))
    }

    /// The answer to an authenticated or public request.
    fn answer(&self, head: &Head, body: &[u8], identity: &mut Option<String>) -> Answer {
        match head.method {
            Method::Options => {
                return Answer::new(200, Body::Empty)
                    .header("DAV", "1")
                    .header("Allow", ALLOW)
                    .header("Accept-Ranges", "bytes");
            }
            Method::Other => {
                return Answer::refuse(
                    405,
                    format!(
                        "{} is not served here (yet): {ALLOW} are",
                        zcp_wire::escape_text(&head.method_text)
                    ),
                )
                .header("Allow", ALLOW);
            }
            _ => {}
        }
        let authed = match self.authenticate(head) {
            Ok(a) => a,
            Err(a) => return a,
        };
        *identity = Some(authed.identity.clone());
        match head.method {
            Method::Post => files::macaroon_request(head, body, &authed),
            Method::Mkcol => crate::write::mkcol(head, &authed),
            Method::Delete => crate::write::delete(head, &authed),
            _ => files::read_side(head, &authed),
        }
    }

    /// The token's identity, proved.
    fn authenticate(&self, head: &Head) -> Result<Authed, Answer> {
        let challenge = |why: &str, error: &str| {
            let mut a = Answer::refuse(401, why);
            let v = if error.is_empty() {
                "Bearer realm=\"zcp\"".to_string()
            } else {
                format!("Bearer realm=\"zcp\", error=\"{error}\"")
            };
            a.headers.push(("WWW-Authenticate", v));
            a
        };
        let Some(text) = head.bearer() else {
            return Err(challenge(
                "a bearer token is needed (Authorization: Bearer TOKEN; make one with `zcp token`)",
                "",
            ));
        };
        let token = Token::decode(text).map_err(|e| challenge(&e.to_string(), "invalid_token"))?;
        let snapshot = (self.access)();
        let Some(psk) = snapshot.key_of(&token.identity) else {
            return Err(challenge(
                &crate::token::TokenError::UnknownIdentity.to_string(),
                "invalid_token",
            ));
        };
        let key = zcp_wire::http_token_key(psk, &token.identity);
        token
            .verify(&key, now_unix())
            .map_err(|e| challenge(&e.to_string(), "invalid_token"))?;
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

/// Writes `a`: its head, then its body (not for `HEAD`, whose head still gives the length).
fn write_answer(
    conn: &mut Conn,
    a: Answer,
    with_body: bool,
    sent: &AtomicU64,
) -> Result<(), String> {
    let mut headers = a.headers;
    headers.push(("Content-Length", a.body.len().to_string()));
    let head = conn::head_text(a.status, &headers, !a.close);
    conn.write_all(head.as_bytes()).map_err(|e| e.to_string())?;
    if with_body {
        match &a.body {
            Body::Empty => {}
            Body::Bytes(b) => {
                conn.write_all(b).map_err(|e| e.to_string())?;
                sent.fetch_add(b.len() as u64, Ordering::Relaxed);
            }
            Body::File { fd, start, end } => {
                conn::send_file(conn, std::os::fd::AsFd::as_fd(fd), *start, *end, sent)?;
            }
        }
    }
    conn.flush().map_err(|e| e.to_string())
}

/// The activity a request needs of its token.
pub(crate) fn activity_of(head: &Head) -> Activity {
    match head.method {
        Method::Get => Activity::Download,
        Method::Propfind if head.header("depth") != Some("0") => Activity::List,
        _ => Activity::ReadMetadata,
    }
}
