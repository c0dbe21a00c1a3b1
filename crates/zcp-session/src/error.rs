//! The session's error type. Each variant names what a user can act on, and maps to one of
//! the exit codes the `zcp` binary documents.

use std::io;

use zcp_engine::EngineError;
use zcp_wire::{DecodeError, ErrorCode, HandshakeError, OpenError};

/// Why a session failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The key file is missing, unreadable, too open, or malformed.
    #[error("{0}")]
    Key(String),
    /// The source cannot be sent (missing, not a regular file, unreadable).
    #[error("source {path}: {reason}")]
    Source {
        /// The source path, escaped.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The source changed or ended early during the transfer; nothing was committed.
    #[error("source {path} changed while it was being sent: {reason}; nothing was committed")]
    SourceChanged {
        /// The source path, escaped.
        path: String,
        /// What changed.
        reason: String,
    },
    /// No TCP connection could be made.
    #[error("cannot connect to {addr}: {source}")]
    Connect {
        /// The address tried.
        addr: String,
        /// Why.
        source: io::Error,
    },
    /// Reaching the host over ssh, or starting zcp there, failed.
    #[error("ssh to {host}: {reason}")]
    Ssh {
        /// `[USER@]HOST`, as given.
        host: String,
        /// What failed, and how to fix it.
        reason: String,
        /// Whether another try may mend it (ssh itself failed, or the far side was slow).
        retry: bool,
    },
    /// The request cannot be made as given (found before connecting).
    #[error("{0}")]
    Usage(String),
    /// Authentication failed on either side.
    #[error("authentication failed: {0}")]
    Auth(String),
    /// The server knows our key but does not let its identity do this (`serve --config`:
    /// `observatory may not write to archive`). Its words, escaped.
    #[error("{0}")]
    Denied(String),
    /// The peer refused the session or failed it; nothing unverified was renamed into place.
    #[error("the peer refused: {message} [{}]", code.name())]
    Refused {
        /// The receiver's failure class.
        code: ErrorCode,
        /// Its explanation.
        message: String,
    },
    /// We refused the peer's request, and told it why.
    #[error("{message}")]
    Refusing {
        /// The class of the refusal.
        code: ErrorCode,
        /// What the peer was told.
        message: String,
    },
    /// What arrived does not match what was sent; nothing was committed.
    #[error("verification failed: {0}; nothing was committed")]
    Verify(String),
    /// The peer broke the protocol.
    #[error("protocol error from {peer}: {reason}")]
    Protocol {
        /// Which peer.
        peer: String,
        /// What it did.
        reason: String,
    },
    /// What answered on the port is not a zcp server.
    #[error(
        "{addr} is not a zcp server (it sent '{sent}'); {}",
        not_zcp_hint(sent)
    )]
    NotZcp {
        /// The address connected to.
        addr: String,
        /// The first bytes it sent, escaped.
        sent: String,
    },
    /// The connection failed mid-session.
    #[error("connection to {peer} failed: {reason}")]
    Connection {
        /// Which peer.
        peer: String,
        /// What happened.
        reason: String,
    },
    /// The session was stopped on purpose (a signal, a server shutting down) before it
    /// finished; what was verified and durable stays for a resume.
    #[error("{reason}")]
    Stopped {
        /// Why.
        reason: String,
        /// Bytes verified and stored durably on the receiver (committed or kept for a
        /// resume), where known.
        durable: Option<u64>,
    },
    /// A local engine failure.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Any other local I/O failure.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The error.
        source: io::Error,
    },
}

/// A refusal this side tells its peer: the class on the wire and the words. Refusals of an
/// entry fail that entry; a refusal of the session ends it as [`SessionError::Refusing`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct Refusal {
    /// The class, as sent in `Error`, `FileFailed` or `EntryFailed`.
    pub(crate) code: ErrorCode,
    /// What the peer is told.
    pub(crate) message: String,
}

/// How a refusal for want of file descriptors begins: the process's, not the entry's, so
/// the receiver ends the session as busy (another try may find them) rather than fail the
/// entry.
pub(crate) const OUT_OF_DESCRIPTORS: &str = "out of file descriptors";

impl Refusal {
    /// Whether it is for want of file descriptors ([`OUT_OF_DESCRIPTORS`]).
    pub(crate) fn is_out_of_descriptors(&self) -> bool {
        self.code == ErrorCode::Busy && self.message.starts_with(OUT_OF_DESCRIPTORS)
    }

    /// When `e` is the process (or system) out of file descriptors: the refusal that ends the
    /// session as busy, counted so the server's accept loop sheds pending connections to make
    /// room. Anything else is `None`, for the caller to class.
    pub(crate) fn out_of_descriptors(e: &EngineError) -> Option<Refusal> {
        match e {
            EngineError::Sys { source, .. } => Refusal::short_of_descriptors(source, e),
            _ => None,
        }
    }

    /// [`Refusal::out_of_descriptors`] for an OS error `source`, told as `what`.
    pub(crate) fn short_of_descriptors(
        source: &io::Error,
        what: impl std::fmt::Display,
    ) -> Option<Refusal> {
        if !zcp_engine::sys::is_fd_limit(source) {
            return None;
        }
        crate::server::gate::note_out_of_descriptors();
        Some(Refusal::new(
            ErrorCode::Busy,
            format!("{OUT_OF_DESCRIPTORS} ({what}); try again"),
        ))
    }

    /// A data stream's failure on this side, as the peer is told it: out of descriptors is
    /// the session's want ([`Refusal::out_of_descriptors`]), a full disk is `NoSpace`, and
    /// anything else `Io`.
    pub(crate) fn stream(e: &EngineError) -> Refusal {
        if let EngineError::Refused(m) = e {
            // Bytes that failed authentication (an encrypted record altered on the way).
            return Refusal::new(ErrorCode::Verify, m.clone());
        }
        Refusal::out_of_descriptors(e).unwrap_or_else(|| {
            let code = if e.is_no_space() {
                ErrorCode::NoSpace
            } else {
                ErrorCode::Io
            };
            Refusal::new(code, e.to_string())
        })
    }

    pub(crate) fn new(code: ErrorCode, message: impl Into<String>) -> Refusal {
        Refusal {
            code,
            message: message.into(),
        }
    }

    /// The peer broke the protocol.
    pub(crate) fn protocol(message: impl Into<String>) -> Refusal {
        Refusal::new(ErrorCode::Protocol, message)
    }
}

impl From<Refusal> for SessionError {
    fn from(r: Refusal) -> SessionError {
        SessionError::Refusing {
            code: r.code,
            message: r.message,
        }
    }
}

/// Exit codes of the `zcp` binary, by failure class.
pub mod exit {
    use zcp_wire::ErrorCode;

    /// Success.
    pub const OK: i32 = 0;
    /// A failure not covered below (network, I/O, protocol).
    pub const FAILURE: i32 = 1;
    /// Bad command-line usage.
    pub const USAGE: i32 = 2;
    /// Missing, wrong or unsafe key; authentication failed.
    pub const AUTH: i32 = 3;
    /// The receiver refused the destination (bad path, no space, not writable).
    pub const REFUSED: i32 = 4;
    /// The data did not verify, or the source changed while being sent.
    pub const INTEGRITY: i32 = 5;

    /// Partial: the session ran to its end; some entries arrived and others did not.
    pub const PARTIAL: i32 = 23;

    /// The exit code of a session that ran to its end with entries that failed, given their
    /// failure classes (see [`crate::Failure::code`]) and whether anything was stored: 0 with
    /// no failure; [`INTEGRITY`] when any failed verification or its source changed; else
    /// [`PARTIAL`] when something arrived; else the class of the first failure.
    pub fn for_failures<'a>(codes: impl IntoIterator<Item = &'a str>, stored_any: bool) -> i32 {
        let codes: Vec<&str> = codes.into_iter().collect();
        match codes.first() {
            None => OK,
            Some(_)
                if codes
                    .iter()
                    .any(|c| matches!(*c, "verify" | "source-changed")) =>
            {
                INTEGRITY
            }
            Some(_) if stored_any => PARTIAL,
            Some(first) => for_failure(first),
        }
    }

    /// The exit code for one failure class ([`ErrorCode::name`], or `source` for a source
    /// that could not be sent): the one map every exit code of zcp goes through.
    pub fn for_failure(code: &str) -> i32 {
        match ErrorCode::from_name(code) {
            Some(c) => for_code(c),
            None => FAILURE,
        }
    }

    /// The exit code for a refusal of class `code`: the destination refused (4: a bad path,
    /// no space, an I/O error, a file already there under `--no-clobber`), integrity (5), the
    /// key (3), anything else — busy, limits, protocol, internal — 1.
    pub fn for_code(code: ErrorCode) -> i32 {
        match code {
            ErrorCode::Verify | ErrorCode::SourceChanged => INTEGRITY,
            ErrorCode::BadPath | ErrorCode::NoSpace | ErrorCode::Io | ErrorCode::Exists => REFUSED,
            ErrorCode::Auth => AUTH,
            _ => FAILURE,
        }
    }
}

/// What to check when `sent` answered instead of a zcp server.
fn not_zcp_hint(sent: &str) -> String {
    let port = crate::DEFAULT_PORT;
    if sent.starts_with("HTTP/") {
        format!(
            "an HTTP server answered (zcp serve's --metrics port?): give the transfer port \
             (-p; the default is {port})"
        )
    } else if sent.starts_with("SSH-") {
        format!("an SSH server answered: give zcp serve's port (-p; the default is {port})")
    } else {
        "check the host and the port (-p)".into()
    }
}

impl SessionError {
    /// Whether trying the same session again may succeed (`--retry`): the connection could
    /// not be made or was lost, a peer went quiet, or the server was busy or shutting down.
    /// A key, a path, a source or the data itself is not retried: the next try would fail
    /// the same way.
    pub fn retryable(&self) -> bool {
        match self {
            SessionError::Connect { .. } | SessionError::Connection { .. } => true,
            SessionError::Ssh { retry, .. } => *retry,
            SessionError::Refused { code, .. } => *code == ErrorCode::Busy,
            SessionError::Engine(e) => matches!(
                e,
                EngineError::Disconnected { .. } | EngineError::Timeout { .. }
            ),
            _ => false,
        }
    }

    /// The exit code for this failure (see [`exit`]).
    pub fn exit_code(&self) -> i32 {
        match self {
            SessionError::Key(_) | SessionError::Auth(_) | SessionError::Denied(_) => exit::AUTH,
            SessionError::Usage(_) => exit::USAGE,
            SessionError::Refused { code, .. } | SessionError::Refusing { code, .. } => {
                exit::for_code(*code)
            }
            SessionError::Verify(_) | SessionError::SourceChanged { .. } => exit::INTEGRITY,
            _ => exit::FAILURE,
        }
    }

    pub(crate) fn from_handshake(peer: &str, e: HandshakeError) -> SessionError {
        const REQUIRES_ENCRYPTION: &str = "this server requires encryption";
        match e {
            HandshakeError::ServerProof
            | HandshakeError::ClientProof
            | HandshakeError::JoinProof
            | HandshakeError::Downgrade => SessionError::Auth(e.to_string()),
            // The server takes our key, but not in clear.
            HandshakeError::Refused {
                code: ErrorCode::Auth,
                message,
            } if message.starts_with(REQUIRES_ENCRYPTION) => SessionError::Auth(format!(
                "the server refused a session in clear: {}",
                zcp_wire::escape_text(&message)
            )),
            HandshakeError::Refused {
                code: ErrorCode::Auth,
                message,
            } => SessionError::Auth(format!(
                "the server refused our key: {}",
                zcp_wire::escape_text(&message)
            )),
            HandshakeError::Refused { code, message } => SessionError::Refused {
                code,
                message: zcp_wire::escape_text(&message),
            },
            other => SessionError::Protocol {
                peer: peer.to_string(),
                reason: other.to_string(),
            },
        }
    }
}

/// Why reading or writing a control frame failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum FrameIoError {
    #[error("connection closed")]
    Closed,
    #[error("{0}")]
    Io(#[from] io::Error),
    #[error("{0}")]
    Decode(#[from] DecodeError),
    #[error("{0}")]
    Open(#[from] OpenError),
}

impl FrameIoError {
    pub(crate) fn into_session(self, peer: &str) -> SessionError {
        match self {
            FrameIoError::Closed => SessionError::Connection {
                peer: peer.into(),
                reason: "the peer closed the connection".into(),
            },
            FrameIoError::Io(e) if zcp_engine::io_class(&e) == zcp_engine::IoClass::TimedOut => {
                SessionError::Connection {
                    peer: peer.into(),
                    reason: "no answer within the timeout (peer stalled or gone)".into(),
                }
            }
            FrameIoError::Io(e) => SessionError::Connection {
                peer: peer.into(),
                reason: e.to_string(),
            },
            FrameIoError::Decode(e) => SessionError::Protocol {
                peer: peer.into(),
                reason: e.to_string(),
            },
            FrameIoError::Open(e) => SessionError::Protocol {
                peer: peer.into(),
                reason: e.to_string(),
            },
        }
    }
}
