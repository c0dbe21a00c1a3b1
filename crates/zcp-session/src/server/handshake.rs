//! One connection's handshake, driven by readiness: bytes are read as they come (never past
//! the frame the handshake waits for), each complete frame advances the handshake, and the
//! reply goes out at once. No thread and no clock of its own: [`super::gate`] calls
//! [`Pending::on_readable`] when the socket has bytes and enforces the deadline.
//!
//! Before authentication a frame may carry at most [`PRE_AUTH_MAX`] bytes (every handshake
//! message is far smaller), so a pending connection holds a few hundred bytes at most.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use zcp_engine::sync::Locked;
use zcp_wire::{Accepted, ErrorCode, FrameHeader, HEADER_LEN, Message, escape_text};

use super::access::Live;
use super::{Ctx, Joined, Session, random_or};
use crate::error::Refusal;

/// Most payload bytes of a frame before the handshake has finished.
pub(super) const PRE_AUTH_MAX: usize = 1024;

/// Why a handshake ends when the peer closes before finishing it (counted, not logged one by
/// one: whoever opens and closes connections decides how many there are).
pub(super) const PEER_CLOSED: &str = "closed the connection during the handshake";

/// Where a handshake stands.
enum Step {
    /// Waiting for the `Hello`.
    Hello,
    /// The reply went out; waiting for the `Proof` or `DataJoin` (or the client's `Error`).
    Second {
        state: Accepted,
        live: Arc<Live>,
        who: Option<usize>,
    },
    /// Over (the connection is about to be handed on or closed).
    Done,
}

/// A connection in its handshake.
pub(super) struct Pending {
    pub(super) stream: TcpStream,
    pub(super) peer: SocketAddr,
    /// The frame being received: header, then payload.
    buf: Vec<u8>,
    step: Step,
    /// Whether any byte arrived.
    heard: bool,
}

impl Pending {
    /// Whether the peer has sent nothing yet (a connection it closes now was a TCP probe).
    pub(super) fn heard_nothing(&self) -> bool {
        !self.heard
    }

    /// A freshly accepted connection (non-blocking, as the listener's are).
    pub(super) fn new(stream: TcpStream, peer: SocketAddr) -> Pending {
        let _ = stream.set_nonblocking(true);
        let _ = stream.set_nodelay(true);
        Pending {
            stream,
            peer,
            buf: Vec::new(),
            step: Step::Hello,
            heard: false,
        }
    }

    /// Handshake frames received so far (what the eviction order counts).
    pub(super) fn stage(&self) -> u8 {
        match self.step {
            Step::Hello => 0,
            Step::Second { .. } => 1,
            Step::Done => 2,
        }
    }

    /// Reads what waits and advances: `Ok(None)` while the handshake needs more bytes, the
    /// authenticated connection once it is done, or why it failed (to tell the peer and log).
    pub(super) fn on_readable(&mut self, ctx: &Ctx) -> Result<Option<Joined>, Refusal> {
        loop {
            let Some(msg) = self.read_frame()? else {
                return Ok(None);
            };
            match std::mem::replace(&mut self.step, Step::Done) {
                Step::Hello => self.on_hello(ctx, msg)?,
                Step::Second { state, live, who } => {
                    return second(ctx, &mut self.stream, msg, state, live, who).map(Some);
                }
                Step::Done => return Err(Refusal::protocol("frame after the handshake")),
            }
        }
    }

    /// Reads towards the next whole frame, never past it (what follows the handshake belongs
    /// to the session); the decoded frame once it is whole.
    fn read_frame(&mut self) -> Result<Option<Message>, Refusal> {
        loop {
            let want = if self.buf.len() < HEADER_LEN {
                HEADER_LEN
            } else {
                let h = self.header()?;
                if self.buf.len() == HEADER_LEN + h.len {
                    let payload = self.buf.split_off(HEADER_LEN);
                    self.buf = Vec::new();
                    return decode(self.stage(), h, &payload).map(Some);
                }
                HEADER_LEN + h.len
            };
            let mut chunk = [0u8; HEADER_LEN + PRE_AUTH_MAX];
            let room = want - self.buf.len();
            match self.stream.read(&mut chunk[..room]) {
                Ok(0) => return Err(Refusal::protocol(PEER_CLOSED)),
                Ok(n) => {
                    self.heard = true;
                    self.buf.extend_from_slice(&chunk[..n]);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Refusal::protocol(e.to_string())),
            }
        }
    }

    /// The header of the frame being received, checked (the first five bytes are in).
    fn header(&self) -> Result<FrameHeader, Refusal> {
        let head: [u8; HEADER_LEN] = self.buf[..HEADER_LEN].try_into().expect("5 bytes");
        let h = FrameHeader::decode(head).map_err(|e| match self.step {
            // Whatever fails to decode as the first frame is most likely not zcp at all (an
            // HTTP probe, a port scanner): say so, with the decoder's detail.
            Step::Hello => Refusal::protocol(format!("not a zcp client: {e}")),
            _ => Refusal::protocol(e.to_string()),
        })?;
        if h.is_sealed() {
            return Err(Refusal::protocol(
                "sealed frame before the handshake finished",
            ));
        }
        if h.len > PRE_AUTH_MAX {
            return Err(Refusal::protocol(format!(
                "a frame of {} bytes before authentication (at most {PRE_AUTH_MAX})",
                h.len
            )));
        }
        Ok(h)
    }

    /// The `Hello`: find the identity, answer with the challenge.
    fn on_hello(&mut self, ctx: &Ctx, hello: Message) -> Result<(), Refusal> {
        // This connection's snapshot of the exports and identities, kept by its session.
        let live = ctx.live.locked().clone();
        let required = |i: usize| {
            live.identities
                .get(i)
                .is_some_and(|id| id.require_encryption)
        };
        let offer = zcp_wire::ServerOffer {
            secret: Some(random_or::<32>("key share")?),
            required: &required,
        };
        let nonce = random_or::<32>("nonce")?;
        let (state, reply, who) = zcp_wire::accept_any(&live.keys(), hello, nonce, &offer)
            .map_err(|e| match e {
                zcp_wire::HandshakeError::ClientProof => Refusal::new(
                    ErrorCode::Auth,
                    "the client's key is not one this server knows (wrong --key-file?)",
                ),
                e => Refusal::new(e.code(), e.to_string()),
            })?;
        write(&mut self.stream, &reply.encode_frame())?;
        self.step = Step::Second { state, live, who };
        Ok(())
    }
}

fn decode(stage: u8, h: FrameHeader, payload: &[u8]) -> Result<Message, Refusal> {
    Message::decode(h.kind, payload).map_err(|e| {
        if stage == 0 {
            Refusal::protocol(format!("not a zcp client: {e}"))
        } else {
            Refusal::protocol(e.to_string())
        }
    })
}

/// Writes a handshake reply whole. The socket's buffer is empty this early, so a reply that
/// does not fit at once means a peer that will not read: it fails the handshake.
fn write(s: &mut TcpStream, frame: &[u8]) -> Result<(), Refusal> {
    match s.write(frame) {
        Ok(n) if n == frame.len() => Ok(()),
        Ok(_) => Err(Refusal::protocol(
            "the peer does not take the handshake's reply",
        )),
        Err(e) => Err(Refusal::new(ErrorCode::Protocol, e.to_string())),
    }
}

/// The second frame: the control connection's proof (a new session) or the data
/// connection's join (a stream of a running session).
fn second(
    ctx: &Ctx,
    stream: &mut TcpStream,
    msg: Message,
    state: Accepted,
    live: Arc<Live>,
    who: Option<usize>,
) -> Result<Joined, Refusal> {
    if let Message::Error { message, .. } = msg {
        // The client gave up on us (for example: our proof did not match its key). Its words
        // go to the log, escaped.
        return Err(Refusal::new(
            ErrorCode::Auth,
            format!("the client gave up: {}", escape_text(&message)),
        ));
    }
    match state {
        Accepted::Control(await_proof) => {
            let session_id: zcp_wire::SessionId = random_or::<16>("session id")?;
            let who = who.ok_or_else(|| Refusal::protocol("a control Hello names no identity"))?;
            let (est, welcome) = await_proof
                .on_proof_with(msg, session_id, ctx.cfg.max_streams, live.named())
                .map_err(|e| Refusal::new(e.code(), e.to_string()))?;
            let session = {
                let mut sessions = ctx.sessions.locked();
                if ctx.single.load(Ordering::Relaxed) && ctx.taken.swap(true, Ordering::Relaxed) {
                    return Err(Refusal::new(
                        ErrorCode::Busy,
                        "this server runs one session (serve --once), and it is taken",
                    ));
                }
                if sessions.len() >= ctx.cfg.max_sessions {
                    return Err(Refusal::new(
                        ErrorCode::Busy,
                        "too many sessions; try again later",
                    ));
                }
                let session = Arc::new(Session::new(session_id, est.keys.clone()));
                sessions.insert(session_id, session.clone());
                session
            };
            if let Err(e) = write(stream, &welcome) {
                ctx.sessions.locked().remove(&session_id);
                // `serve --once`: a session that never started does not take the one slot.
                ctx.taken.store(false, Ordering::Relaxed);
                return Err(e);
            }
            Ok(Joined::Control(
                session,
                est.sealer,
                est.opener,
                (est.client_nonce, est.server_nonce),
                (live, who),
            ))
        }
        Accepted::Data(await_join) => {
            let req = await_join
                .on_join(msg)
                .map_err(|e| Refusal::new(e.code(), e.to_string()))?;
            let session = ctx.sessions.locked().get(&req.session_id).cloned();
            // An unknown session and a bad proof get the same answer: the peer learns nothing
            // about which sessions exist.
            let refused = || {
                Refusal::new(
                    ErrorCode::Auth,
                    "data connection proof does not match any session",
                )
            };
            let session = session.ok_or_else(refused)?;
            req.verify(&session.keys).map_err(|_| refused())?;
            session.join(req.stream)?;
            write(stream, &Message::DataAccept.encode_frame())?;
            Ok(Joined::Data(session, req.stream))
        }
    }
}
