//! Why a connection or a file failed: the codes `Error`, `EntryFailed`, `FileFailed` and
//! `FileAbort` carry.

/// Why a connection or a file failed; carried in [`super::Message::Error`] and [`super::Message::FileFailed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// The peer broke the protocol (bad frame, unexpected message).
    Protocol,
    /// The peers speak different protocol versions.
    Version,
    /// Authentication failed: the peers do not share a key.
    Auth,
    /// The destination path was refused (absolute, `..`, NUL, outside the root, ...).
    BadPath,
    /// The destination filesystem has no room for the file.
    NoSpace,
    /// An I/O error on the receiver.
    Io,
    /// What the receiver wrote does not match what the sender hashed.
    Verify,
    /// The server is at a limit (sessions, streams, connections).
    Busy,
    /// A size or count over a protocol limit.
    Limit,
    /// The source changed or ended early while it was being sent.
    SourceChanged,
    /// Any other failure.
    Internal,
    /// A file is already at the destination and the session asked not to replace it
    /// (`--no-clobber`, or `--ignore-existing`, which counts it as skipped).
    Exists,
}

impl ErrorCode {
    pub(super) fn to_u16(self) -> u16 {
        match self {
            ErrorCode::Protocol => 1,
            ErrorCode::Version => 2,
            ErrorCode::Auth => 3,
            ErrorCode::BadPath => 4,
            ErrorCode::NoSpace => 5,
            ErrorCode::Io => 6,
            ErrorCode::Verify => 7,
            ErrorCode::Busy => 8,
            ErrorCode::Limit => 9,
            ErrorCode::SourceChanged => 10,
            ErrorCode::Internal => 11,
            ErrorCode::Exists => 12,
        }
    }

    pub(super) fn from_u16(v: u16) -> ErrorCode {
        match v {
            1 => ErrorCode::Protocol,
            2 => ErrorCode::Version,
            3 => ErrorCode::Auth,
            4 => ErrorCode::BadPath,
            5 => ErrorCode::NoSpace,
            6 => ErrorCode::Io,
            7 => ErrorCode::Verify,
            8 => ErrorCode::Busy,
            9 => ErrorCode::Limit,
            10 => ErrorCode::SourceChanged,
            12 => ErrorCode::Exists,
            // Codes added by later versions read as Internal rather than failing the decode.
            _ => ErrorCode::Internal,
        }
    }

    /// The code whose [`ErrorCode::name`] is `name`, if any.
    pub fn from_name(name: &str) -> Option<ErrorCode> {
        (1..=12).map(ErrorCode::from_u16).find(|c| c.name() == name)
    }

    /// A short lowercase name for logs and JSON.
    pub fn name(self) -> &'static str {
        match self {
            ErrorCode::Protocol => "protocol",
            ErrorCode::Version => "version",
            ErrorCode::Auth => "auth",
            ErrorCode::BadPath => "bad-path",
            ErrorCode::NoSpace => "no-space",
            ErrorCode::Io => "io",
            ErrorCode::Verify => "verify",
            ErrorCode::Busy => "busy",
            ErrorCode::Limit => "limit",
            ErrorCode::SourceChanged => "source-changed",
            ErrorCode::Internal => "internal",
            ErrorCode::Exists => "exists",
        }
    }
}
