//! Control-connection frames and the messages they carry.
//!
//! A frame is a 5-byte header — payload length (`u32`, big-endian) and message type (`u8`) —
//! followed by the payload. The length is checked against [`MAX_PAYLOAD`] when the header is
//! decoded, before the caller reads or allocates the payload. Messages of type `0x10` and above
//! are *sealed*: their payload ends with a 16-byte tag (see [`crate::seal`]). This module only
//! encodes and decodes bodies; it does not know about tags, sockets or sessions.

use crate::codec::{Reader, Writer};
use crate::{DecodeError, Nonce, SESSION_ID_LEN, SessionId};

/// Size of a frame header: payload length (4) and message type (1).
pub const HEADER_LEN: usize = 5;
/// Largest payload a peer may announce in a frame header (tag included).
pub const MAX_PAYLOAD: usize = 64 * 1024;
/// Longest destination path, in bytes, as on Linux (`PATH_MAX`).
pub const MAX_PATH: usize = 4096;
/// Longest single path component, in bytes, as on Linux (`NAME_MAX`).
pub const MAX_NAME: usize = 255;
/// Longest error message or note.
pub const MAX_TEXT: usize = 1024;
/// Longest engine name.
pub const MAX_ENGINE_NAME: usize = 32;
/// First bytes of a `Hello` body: lets a server tell a zcp client from stray traffic.
pub const HELLO_MAGIC: [u8; 4] = *b"ZCP\x01";

/// What a connection is for, declared in its `Hello`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The control connection of a new session.
    Control,
    /// A data stream joining an existing session.
    Data,
}

/// Why a connection or a file failed; carried in [`Message::Error`] and [`Message::FileFailed`].
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
}

impl ErrorCode {
    fn to_u16(self) -> u16 {
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
        }
    }

    fn from_u16(v: u16) -> ErrorCode {
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
            // Codes added by later versions read as Internal rather than failing the decode.
            _ => ErrorCode::Internal,
        }
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
        }
    }
}

/// A file the client wants to store, announced before any of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutFile {
    /// Session-local file number; chunk headers on data streams refer to it.
    pub file_id: u32,
    /// Destination relative to the server root, raw bytes (validated by [`crate::RelPath`]).
    pub dest: Vec<u8>,
    /// Name to use when `dest` is a directory: the source's last component.
    pub name: Vec<u8>,
    /// Exact size in bytes.
    pub size: u64,
    /// Permission bits (`st_mode & 0o7777`).
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Modification time, nanoseconds part.
    pub mtime_nsec: u32,
    /// Chunk size the sender cuts the file into (see [`crate::ChunkPlan`]).
    pub chunk_size: u64,
    /// Receiver engine the client asks for (`auto`, `splice`, `direct`, ...).
    pub recv_engine: String,
    /// Bytes per read/write call on the receiver; 0 lets the receiver choose.
    pub block_size: u32,
}

/// The receiver's per-session resource use, sent in reply to [`Message::Finish`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReceiverStats {
    /// CPU time in user mode of the session's threads, microseconds.
    pub cpu_user_us: u64,
    /// CPU time in kernel mode of the session's threads, microseconds.
    pub cpu_sys_us: u64,
    /// Peak resident set size of the receiver process, bytes.
    pub max_rss_bytes: u64,
    /// Payload bytes the session received on its data streams.
    pub bytes_received: u64,
}

/// Every message of protocol version 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// Client -> server, first frame of every connection.
    Hello {
        /// Protocol version the client speaks.
        version: u16,
        /// Control or data connection.
        role: Role,
        /// The client's fresh random nonce.
        nonce: Nonce,
    },
    /// Server -> client on a control connection: the server's nonce and its proof of the key.
    Challenge {
        /// Protocol version the server chose.
        version: u16,
        /// The server's fresh random nonce.
        nonce: Nonce,
        /// `HMAC(psk, "zcp/1 server" || client nonce || server nonce)`.
        proof: [u8; 32],
    },
    /// Client -> server: the client's proof of the key.
    Proof {
        /// `HMAC(psk, "zcp/1 client" || client nonce || server nonce)`.
        proof: [u8; 32],
    },
    /// Server -> client on a data connection: the nonce the join proof must cover.
    DataChallenge {
        /// The server's fresh random nonce for this connection.
        nonce: Nonce,
    },
    /// Client -> server: this data connection belongs to an authenticated session.
    DataJoin {
        /// The session, as named in its `Welcome`.
        session_id: SessionId,
        /// Stream index, below the session's stream count.
        stream: u16,
        /// MAC over session id, stream and both nonces under the session's join key.
        proof: [u8; 32],
    },
    /// Server -> client: the data connection is accepted; chunk frames follow.
    DataAccept,
    /// Either direction, never sealed, ends the connection.
    Error {
        /// What kind of failure.
        code: ErrorCode,
        /// What to fix, for a person.
        message: String,
    },
    /// Server -> client, sealed: authentication succeeded.
    Welcome {
        /// Names the session for its data connections.
        session_id: SessionId,
        /// Most data streams the server allows this session.
        max_streams: u16,
    },
    /// Client -> server, sealed: a file to receive.
    PutFile(PutFile),
    /// Server -> client, sealed: the file is open and preallocated; send its chunks.
    FileReady {
        /// The file, as in `PutFile`.
        file_id: u32,
        /// Receiver engine that will run.
        engine: String,
        /// Why it differs from the one asked for, if it does.
        note: String,
        /// Final path relative to the root, for display.
        target: Vec<u8>,
    },
    /// Client -> server, sealed: the keyed BLAKE3 MAC of one chunk, as the sender read it.
    ChunkMac {
        /// The file.
        file_id: u32,
        /// Chunk index in the file's [`crate::ChunkPlan`].
        index: u64,
        /// The MAC.
        mac: [u8; 32],
    },
    /// Client -> server, sealed: all chunks of the file were sent; its whole-file digest.
    FileEnd {
        /// The file.
        file_id: u32,
        /// Digest over the chunk MACs (see [`crate::keys::FileDigest`]).
        digest: [u8; 32],
    },
    /// Server -> client, sealed: the file is done. For storing engines: verified, synced and
    /// renamed into place. `null` and `mem` receivers store nothing, and `null` cannot verify.
    FileCommitted {
        /// The file.
        file_id: u32,
        /// Bytes received.
        bytes: u64,
        /// The receiver's digest of what it received (zeros when not verified).
        digest: [u8; 32],
        /// Whether the receiver checked every chunk MAC and the digest.
        verified: bool,
        /// Whether the bytes were stored durably under the target name.
        stored: bool,
    },
    /// Server -> client, sealed: the file was not committed; nothing was renamed into place.
    FileFailed {
        /// The file.
        file_id: u32,
        /// What kind of failure.
        code: ErrorCode,
        /// What happened, for a person.
        message: String,
    },
    /// Server -> client, sealed, about once a second while a file is being received or
    /// committed: the receiver is alive, and this much of the file is written.
    Progress {
        /// The file.
        file_id: u32,
        /// Bytes of it received and handed to the disk so far.
        bytes: u64,
    },
    /// Client -> server, sealed: no more files; report and close.
    Finish,
    /// Server -> client, sealed: the receiver's resource use; the session is over.
    Stats(ReceiverStats),
}

/// Message type codes. `0x10` and above are sealed.
pub(crate) mod code {
    pub(crate) const HELLO: u8 = 0x01;
    pub(crate) const CHALLENGE: u8 = 0x02;
    pub(crate) const PROOF: u8 = 0x03;
    pub(crate) const DATA_CHALLENGE: u8 = 0x04;
    pub(crate) const DATA_JOIN: u8 = 0x05;
    pub(crate) const DATA_ACCEPT: u8 = 0x06;
    pub(crate) const ERROR: u8 = 0x0F;
    pub(crate) const WELCOME: u8 = 0x10;
    pub(crate) const PUT_FILE: u8 = 0x11;
    pub(crate) const FILE_READY: u8 = 0x12;
    pub(crate) const CHUNK_MAC: u8 = 0x13;
    pub(crate) const FILE_END: u8 = 0x14;
    pub(crate) const FILE_COMMITTED: u8 = 0x15;
    pub(crate) const FILE_FAILED: u8 = 0x16;
    pub(crate) const FINISH: u8 = 0x17;
    pub(crate) const STATS: u8 = 0x18;
    pub(crate) const PROGRESS: u8 = 0x19;
    /// First sealed type code.
    pub(crate) const FIRST_SEALED: u8 = 0x10;
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length, already checked against [`MAX_PAYLOAD`].
    pub len: usize,
    /// Message type code.
    pub kind: u8,
}

impl FrameHeader {
    /// Decodes and bounds a header. Unknown types and oversized lengths are refused here, so
    /// the caller never reads, let alone allocates, a payload it would throw away.
    pub fn decode(bytes: [u8; HEADER_LEN]) -> Result<FrameHeader, DecodeError> {
        let len = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize;
        let kind = bytes[4];
        if len > MAX_PAYLOAD {
            return Err(DecodeError::TooLarge {
                len: len as u64,
                max: MAX_PAYLOAD as u64,
            });
        }
        if !is_known(kind) {
            return Err(DecodeError::Malformed(format!(
                "unknown message type 0x{kind:02x}"
            )));
        }
        Ok(FrameHeader { len, kind })
    }

    /// Whether this frame's payload ends with a seal tag.
    pub fn is_sealed(&self) -> bool {
        self.kind >= code::FIRST_SEALED
    }
}

fn is_known(kind: u8) -> bool {
    matches!(kind, code::HELLO..=code::DATA_ACCEPT | code::ERROR | code::WELCOME..=code::PROGRESS)
}

impl Message {
    /// This message's type code.
    pub fn kind(&self) -> u8 {
        match self {
            Message::Hello { .. } => code::HELLO,
            Message::Challenge { .. } => code::CHALLENGE,
            Message::Proof { .. } => code::PROOF,
            Message::DataChallenge { .. } => code::DATA_CHALLENGE,
            Message::DataJoin { .. } => code::DATA_JOIN,
            Message::DataAccept => code::DATA_ACCEPT,
            Message::Error { .. } => code::ERROR,
            Message::Welcome { .. } => code::WELCOME,
            Message::PutFile(_) => code::PUT_FILE,
            Message::FileReady { .. } => code::FILE_READY,
            Message::ChunkMac { .. } => code::CHUNK_MAC,
            Message::FileEnd { .. } => code::FILE_END,
            Message::FileCommitted { .. } => code::FILE_COMMITTED,
            Message::FileFailed { .. } => code::FILE_FAILED,
            Message::Finish => code::FINISH,
            Message::Stats(_) => code::STATS,
            Message::Progress { .. } => code::PROGRESS,
        }
    }

    /// Whether this message travels sealed.
    pub fn is_sealed(&self) -> bool {
        self.kind() >= code::FIRST_SEALED
    }

    /// The message body, without frame header or tag.
    pub fn encode_body(&self) -> Vec<u8> {
        let mut w = Writer::default();
        match self {
            Message::Hello {
                version,
                role,
                nonce,
            } => {
                w.raw(&HELLO_MAGIC).u16(*version);
                w.u8(match role {
                    Role::Control => 1,
                    Role::Data => 2,
                });
                w.raw(nonce);
            }
            Message::Challenge {
                version,
                nonce,
                proof,
            } => {
                w.u16(*version).raw(nonce).raw(proof);
            }
            Message::Proof { proof } => {
                w.raw(proof);
            }
            Message::DataChallenge { nonce } => {
                w.raw(nonce);
            }
            Message::DataJoin {
                session_id,
                stream,
                proof,
            } => {
                w.raw(session_id).u16(*stream).raw(proof);
            }
            Message::DataAccept | Message::Finish => {}
            Message::Error { code, message } => {
                w.u16(code.to_u16())
                    .bytes(clip(message.as_bytes(), MAX_TEXT));
            }
            Message::Welcome {
                session_id,
                max_streams,
            } => {
                w.raw(session_id).u16(*max_streams);
            }
            Message::PutFile(p) => {
                w.u32(p.file_id).bytes(&p.dest).bytes(&p.name).u64(p.size);
                w.u32(p.mode).i64(p.mtime_sec).u32(p.mtime_nsec);
                w.u64(p.chunk_size)
                    .bytes(clip(p.recv_engine.as_bytes(), MAX_ENGINE_NAME));
                w.u32(p.block_size);
            }
            Message::FileReady {
                file_id,
                engine,
                note,
                target,
            } => {
                w.u32(*file_id)
                    .bytes(clip(engine.as_bytes(), MAX_ENGINE_NAME));
                w.bytes(clip(note.as_bytes(), MAX_TEXT)).bytes(target);
            }
            Message::ChunkMac {
                file_id,
                index,
                mac,
            } => {
                w.u32(*file_id).u64(*index).raw(mac);
            }
            Message::FileEnd { file_id, digest } => {
                w.u32(*file_id).raw(digest);
            }
            Message::FileCommitted {
                file_id,
                bytes,
                digest,
                verified,
                stored,
            } => {
                w.u32(*file_id).u64(*bytes).raw(digest);
                w.u8(u8::from(*verified) | (u8::from(*stored) << 1));
            }
            Message::FileFailed {
                file_id,
                code,
                message,
            } => {
                w.u32(*file_id).u16(code.to_u16());
                w.bytes(clip(message.as_bytes(), MAX_TEXT));
            }
            Message::Stats(s) => {
                w.u64(s.cpu_user_us).u64(s.cpu_sys_us);
                w.u64(s.max_rss_bytes).u64(s.bytes_received);
            }
            Message::Progress { file_id, bytes } => {
                w.u32(*file_id).u64(*bytes);
            }
        }
        w.buf
    }

    /// A whole unsealed frame: header and body. Sealed messages go through
    /// [`crate::Sealer::seal`] instead.
    pub fn encode_frame(&self) -> Vec<u8> {
        debug_assert!(!self.is_sealed(), "sealed messages need a Sealer");
        frame(self.kind(), &self.encode_body(), &[])
    }

    /// Decodes a body of type `kind`. The body is the payload without any seal tag.
    pub fn decode(kind: u8, body: &[u8]) -> Result<Message, DecodeError> {
        let mut r = Reader::new(body);
        let msg = match kind {
            code::HELLO => {
                let magic: [u8; 4] = r.array()?;
                if magic != HELLO_MAGIC {
                    return Err(DecodeError::Malformed(
                        "not a zcp hello (bad magic bytes)".into(),
                    ));
                }
                let version = r.u16()?;
                let role = match r.u8()? {
                    1 => Role::Control,
                    2 => Role::Data,
                    other => {
                        return Err(DecodeError::Malformed(format!(
                            "unknown connection role {other}"
                        )));
                    }
                };
                Message::Hello {
                    version,
                    role,
                    nonce: r.array()?,
                }
            }
            code::CHALLENGE => Message::Challenge {
                version: r.u16()?,
                nonce: r.array()?,
                proof: r.array()?,
            },
            code::PROOF => Message::Proof { proof: r.array()? },
            code::DATA_CHALLENGE => Message::DataChallenge { nonce: r.array()? },
            code::DATA_JOIN => Message::DataJoin {
                session_id: r.array::<SESSION_ID_LEN>()?,
                stream: r.u16()?,
                proof: r.array()?,
            },
            code::DATA_ACCEPT => Message::DataAccept,
            code::ERROR => Message::Error {
                code: ErrorCode::from_u16(r.u16()?),
                message: r.text(MAX_TEXT, "error message")?,
            },
            code::WELCOME => Message::Welcome {
                session_id: r.array()?,
                max_streams: r.u16()?,
            },
            code::PUT_FILE => Message::PutFile(PutFile {
                file_id: r.u32()?,
                dest: r.bytes(MAX_PATH, "destination path")?,
                name: r.bytes(MAX_NAME, "file name")?,
                size: r.u64()?,
                mode: r.u32()?,
                mtime_sec: r.i64()?,
                mtime_nsec: r.u32()?,
                chunk_size: r.u64()?,
                recv_engine: r.text(MAX_ENGINE_NAME, "engine name")?,
                block_size: r.u32()?,
            }),
            code::FILE_READY => Message::FileReady {
                file_id: r.u32()?,
                engine: r.text(MAX_ENGINE_NAME, "engine name")?,
                note: r.text(MAX_TEXT, "note")?,
                target: r.bytes(MAX_PATH, "target path")?,
            },
            code::CHUNK_MAC => Message::ChunkMac {
                file_id: r.u32()?,
                index: r.u64()?,
                mac: r.array()?,
            },
            code::FILE_END => Message::FileEnd {
                file_id: r.u32()?,
                digest: r.array()?,
            },
            code::FILE_COMMITTED => {
                let (file_id, bytes, digest) = (r.u32()?, r.u64()?, r.array()?);
                let flags = r.u8()?;
                if flags > 3 {
                    return Err(DecodeError::Malformed(format!(
                        "unknown commit flags {flags:#x}"
                    )));
                }
                Message::FileCommitted {
                    file_id,
                    bytes,
                    digest,
                    verified: flags & 1 != 0,
                    stored: flags & 2 != 0,
                }
            }
            code::FILE_FAILED => Message::FileFailed {
                file_id: r.u32()?,
                code: ErrorCode::from_u16(r.u16()?),
                message: r.text(MAX_TEXT, "failure message")?,
            },
            code::FINISH => Message::Finish,
            code::STATS => Message::Stats(ReceiverStats {
                cpu_user_us: r.u64()?,
                cpu_sys_us: r.u64()?,
                max_rss_bytes: r.u64()?,
                bytes_received: r.u64()?,
            }),
            code::PROGRESS => Message::Progress {
                file_id: r.u32()?,
                bytes: r.u64()?,
            },
            other => {
                return Err(DecodeError::Malformed(format!(
                    "unknown message type 0x{other:02x}"
                )));
            }
        };
        r.finish("message")?;
        Ok(msg)
    }

    /// A short name for error messages ("expected Welcome, got PutFile").
    pub fn name(&self) -> &'static str {
        match self {
            Message::Hello { .. } => "Hello",
            Message::Challenge { .. } => "Challenge",
            Message::Proof { .. } => "Proof",
            Message::DataChallenge { .. } => "DataChallenge",
            Message::DataJoin { .. } => "DataJoin",
            Message::DataAccept => "DataAccept",
            Message::Error { .. } => "Error",
            Message::Welcome { .. } => "Welcome",
            Message::PutFile(_) => "PutFile",
            Message::FileReady { .. } => "FileReady",
            Message::ChunkMac { .. } => "ChunkMac",
            Message::FileEnd { .. } => "FileEnd",
            Message::FileCommitted { .. } => "FileCommitted",
            Message::FileFailed { .. } => "FileFailed",
            Message::Finish => "Finish",
            Message::Stats(_) => "Stats",
            Message::Progress { .. } => "Progress",
        }
    }
}

fn clip(bytes: &[u8], max: usize) -> &[u8] {
    if bytes.len() <= max {
        return bytes;
    }
    // Cut on a UTF-8 boundary so the receiver's lossy decode shows no replacement character.
    let mut end = max;
    while end > 0 && (bytes[end] & 0xC0) == 0x80 {
        end -= 1;
    }
    &bytes[..end]
}

/// Builds a frame from a type code, body and tag.
pub(crate) fn frame(kind: u8, body: &[u8], tag: &[u8]) -> Vec<u8> {
    let len = body.len() + tag.len();
    let mut out = Vec::with_capacity(HEADER_LEN + len);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    out.push(kind);
    out.extend_from_slice(body);
    out.extend_from_slice(tag);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn samples() -> Vec<Message> {
        vec![
            Message::Hello {
                version: 1,
                role: Role::Data,
                nonce: [3; 32],
            },
            Message::Challenge {
                version: 1,
                nonce: [4; 32],
                proof: [5; 32],
            },
            Message::Proof { proof: [6; 32] },
            Message::DataChallenge { nonce: [7; 32] },
            Message::DataJoin {
                session_id: [8; 16],
                stream: 3,
                proof: [9; 32],
            },
            Message::DataAccept,
            Message::Error {
                code: ErrorCode::BadPath,
                message: "destination is absolute".into(),
            },
            Message::Welcome {
                session_id: [1; 16],
                max_streams: 8,
            },
            Message::PutFile(PutFile {
                file_id: 0,
                dest: b"dir/\xffname".to_vec(),
                name: b"src.bin".to_vec(),
                size: (1 << 33) + 1,
                mode: 0o644,
                mtime_sec: -1,
                mtime_nsec: 999_999_999,
                chunk_size: 64 << 20,
                recv_engine: "auto".into(),
                block_size: 1 << 20,
            }),
            Message::FileReady {
                file_id: 0,
                engine: "direct".into(),
                note: String::new(),
                target: b"dir/x".to_vec(),
            },
            Message::ChunkMac {
                file_id: 0,
                index: 12,
                mac: [2; 32],
            },
            Message::FileEnd {
                file_id: 0,
                digest: [3; 32],
            },
            Message::FileCommitted {
                file_id: 0,
                bytes: 5,
                digest: [3; 32],
                verified: true,
                stored: false,
            },
            Message::FileFailed {
                file_id: 0,
                code: ErrorCode::NoSpace,
                message: "full".into(),
            },
            Message::Progress {
                file_id: 2,
                bytes: 1 << 40,
            },
            Message::Finish,
            Message::Stats(ReceiverStats {
                cpu_user_us: 1,
                cpu_sys_us: 2,
                max_rss_bytes: 3,
                bytes_received: 4,
            }),
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in samples() {
            let body = m.encode_body();
            assert_eq!(Message::decode(m.kind(), &body).unwrap(), m, "{}", m.name());
            // Every strict prefix is truncated or malformed, never a different message.
            for cut in 0..body.len() {
                assert!(
                    Message::decode(m.kind(), &body[..cut]).is_err(),
                    "{}",
                    m.name()
                );
            }
            let mut longer = body.clone();
            longer.push(0);
            assert!(Message::decode(m.kind(), &longer).is_err());
        }
    }

    #[test]
    fn header_bounds_length_and_type() {
        let ok = FrameHeader::decode([0, 0, 0, 4, code::PROOF]).unwrap();
        assert_eq!(ok.len, 4);
        assert!(!ok.is_sealed());
        assert!(matches!(
            FrameHeader::decode([0xff, 0xff, 0xff, 0xff, code::PROOF]),
            Err(DecodeError::TooLarge { .. })
        ));
        assert!(matches!(
            FrameHeader::decode([0, 0, 0, 1, 0x7f]),
            Err(DecodeError::Malformed(_))
        ));
        assert!(
            FrameHeader::decode([0, 0, 0, 0, code::FINISH])
                .unwrap()
                .is_sealed()
        );
    }

    #[test]
    fn bad_hello_magic_names_the_cause() {
        let err = Message::decode(code::HELLO, b"GET / HTTP/1.1\r\n\r\n").unwrap_err();
        assert!(err.to_string().contains("not a zcp hello"), "{err}");
    }

    #[test]
    fn long_text_is_clipped_on_a_char_boundary() {
        let long = "é".repeat(MAX_TEXT);
        let m = Message::Error {
            code: ErrorCode::Io,
            message: long,
        };
        match Message::decode(code::ERROR, &m.encode_body()).unwrap() {
            Message::Error { message, .. } => {
                assert!(message.len() <= MAX_TEXT);
                assert!(!message.contains('\u{FFFD}'));
            }
            other => panic!("{other:?}"),
        }
    }
}
