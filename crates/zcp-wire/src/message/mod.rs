//! Control-connection frames and the messages they carry.
//!
//! A frame is a 5-byte header — payload length (`u32`, big-endian) and message type (`u8`) —
//! followed by the payload. The length is checked against [`MAX_PAYLOAD`] when the header is
//! decoded, before the caller reads or allocates the payload. Messages of type `0x10` and above
//! are *sealed*: their payload ends with a 16-byte tag (see [`crate::seal`]). This module only
//! encodes and decodes bodies; it does not know about tags, sockets or sessions.

use crate::codec::{Reader, Writer};
use crate::{DecodeError, Nonce, SessionId};

mod decode;
mod encode;
mod error_code;
mod existing;
mod list;
mod prune;

pub use error_code::ErrorCode;
pub use existing::ExistingMode;
pub use list::{ListEntry, ListKind};
pub use prune::{DeleteMode, PruneCount};

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
/// Most `(index, mac)` entries in one [`Have`] message (fits [`MAX_PAYLOAD`]).
pub const MAX_HAVE_ENTRIES: usize = 1500;
/// Smallest rate cap a session may ask for in [`Open::rate`], bits per second (100 kbit/s).
pub const MIN_RATE: u64 = 100_000;
/// Largest rate cap a session may ask for in [`Open::rate`], bits per second (10 Tbit/s).
pub const MAX_RATE: u64 = 10_000_000_000_000;
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

/// How a session runs, asked for by the client right after `Welcome`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Open {
    /// `false`: the client sends (push); `true`: the server sends (pull, `zcp get`).
    pub pull: bool,
    /// Whether the sender descends into directories (`-r`).
    pub recursive: bool,
    /// Data streams the client wants; the server grants at most its own limit.
    pub streams: u16,
    /// Idle timeout the client wants, milliseconds (0: the server's); only ever tightened.
    pub idle_ms: u32,
    /// Receiver engine (`auto`, `splice`, `direct`, ...).
    pub recv_engine: String,
    /// Sender engine (`sendfile`, `rw`, `mmap`).
    pub send_engine: String,
    /// Bytes per read/write call on both sides; 0 lets each engine choose.
    pub block_size: u32,
    /// Chunk size; 0 lets the sender choose per file.
    pub chunk_size: u64,
    /// Cap on the payload of all data streams together, bits per second; 0: none. The
    /// sending side holds to it: the client in a push, the server in a pull. A server refuses
    /// a cap outside [`MIN_RATE`]..=[`MAX_RATE`].
    pub rate: u64,
    /// How the session proves its data: a [`VerifyMode::name`] (`blake3`, `none`). Text, so
    /// that a server can name a mode it does not know when it refuses it.
    pub verify: String,
    /// How data moves: `tcp` (the data connections carry the bytes) or `udp` (datagrams,
    /// the data connections their side channels). Text, so a refusal can name it.
    pub transport: String,
    /// With `udp`: its rate control, `fair` (backs off as queueing delay rises) or `fixed`
    /// (the rate cap, for dedicated links).
    pub udp_mode: String,
    /// The export the session reads or writes, when the server has named exports
    /// ([`Message::Welcome`]'s `exports`); empty for a server with one root. At most
    /// [`MAX_NAME`] bytes.
    pub export: String,
    /// What the receiver does with a file already at a destination: an
    /// [`ExistingMode::name`]. Text, so a refusal can name it.
    pub existing: String,
    /// A listing (`zcp ls`), not a transfer: the client names paths with `Get` and the
    /// server answers with [`Message::ListEntry`]s, no data streams. Flags bit 2.
    pub list: bool,
    /// Tree filters, `- PATTERN` or `+ PATTERN` (see [`crate::Filter`]), applied by the
    /// sender's walk: the client's in a push, the server's in a pull. At most
    /// [`crate::MAX_FILTER_RULES`], each at most [`crate::MAX_FILTER_RULE`] bytes.
    pub filters: Vec<String>,
    /// `--delete` or `--delete-dry-run` (flags bits 3 and 4): the receiver removes what the
    /// sender did not announce inside the trees it copied, once the sender's `Prune` says its
    /// walk was whole. A server grants it only to an identity with `read-write-delete`.
    pub delete: DeleteMode,
}

/// How a session proves the bytes it stores, as `--verify` asks for it in [`Open::verify`]
/// and the server repeats in [`Message::Opened`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum VerifyMode {
    /// A keyed BLAKE3 MAC per chunk and a keyed digest per file, checked by the receiver
    /// before a chunk is acknowledged and before a file is renamed into place.
    #[default]
    Blake3,
    /// No MAC and no digest: the receiver stores the bytes as they arrive. Asked for
    /// explicitly, never the default.
    None,
}

impl VerifyMode {
    /// Every mode, in the order help texts list them.
    pub const ALL: [VerifyMode; 2] = [VerifyMode::Blake3, VerifyMode::None];

    /// How the command line, the wire and reports name it.
    pub fn name(self) -> &'static str {
        match self {
            VerifyMode::Blake3 => "blake3",
            VerifyMode::None => "none",
        }
    }

    /// The mode named `name`, if any.
    pub fn parse(name: &str) -> Option<VerifyMode> {
        VerifyMode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether chunks and files are proved (MACs and digests computed and checked).
    pub fn checks(self) -> bool {
        self == VerifyMode::Blake3
    }
}

/// How the server's sending side holds a pull's rate cap, as [`Message::Opened`] says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pacing {
    /// No cap to hold here: a push (the client sends), or no cap asked for.
    None,
    /// The kernel paces each stream (`SO_MAX_PACING_RATE`), under a token bucket in user
    /// space that bounds the total.
    Kernel,
    /// A token bucket in user space alone.
    User,
}

impl Pacing {
    /// How reports name it.
    pub fn name(self) -> &'static str {
        match self {
            Pacing::None => "none",
            Pacing::Kernel => "kernel",
            Pacing::User => "user space",
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            Pacing::None => 0,
            Pacing::Kernel => 1,
            Pacing::User => 2,
        }
    }

    fn from_u8(v: u8) -> Option<Pacing> {
        Some(match v {
            0 => Pacing::None,
            1 => Pacing::Kernel,
            2 => Pacing::User,
            _ => return None,
        })
    }
}

/// A file the sender is about to send, announced before any of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutFile {
    /// Session-local file number; chunk headers on data streams refer to it.
    pub file_id: u32,
    /// Destination relative to the receiver's root, raw bytes (validated by [`crate::RelPath`]).
    pub dest: Vec<u8>,
    /// Empty: `dest` is the file's exact path. Otherwise the source's last component, used
    /// when `dest` is (or is spelled as) a directory, as scp does.
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
    /// The source has holes: the receiver sets the size without reserving the space, and
    /// chunks may come as `Sparse` ([`crate::Extents`]). Flags bit 0.
    pub sparse: bool,
}

/// Chunks of a partial file the receiver already holds, verified and durable from an earlier
/// session, with the MACs it verified them against in that session. The sender recomputes
/// each MAC under that session's chunk key (derivable only with the pre-shared key) over its
/// current source: all equal, and only the missing chunks are sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Have {
    /// The file in *this* session.
    pub file_id: u32,
    /// Client nonce of the session that verified these chunks.
    pub client_nonce: Nonce,
    /// Server nonce of that session.
    pub server_nonce: Nonce,
    /// The file's id in that session (chunk MACs are bound to it).
    pub old_file_id: u32,
    /// `(chunk index, MAC)` pairs, at most [`MAX_HAVE_ENTRIES`].
    pub entries: Vec<(u64, [u8; 32])>,
}

/// One side's resource use for a session, exchanged at its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SideStats {
    /// CPU time in user mode of the session's threads on that side, microseconds.
    pub cpu_user_us: u64,
    /// CPU time in kernel mode, microseconds.
    pub cpu_sys_us: u64,
    /// Peak resident set size of that side's process, bytes.
    pub max_rss_bytes: u64,
    /// Payload bytes moved over the data streams.
    pub bytes: u64,
    /// Files committed (receiver) or sent (sender).
    pub files: u64,
    /// CPU time in the cipher (an encrypted session), microseconds; 0 in clear.
    pub cipher_us: u64,
}

/// Every message of protocol version 6.
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
        /// Control connections (version 2 on): `HMAC(psk, "zcp/2 identity" || nonce)`, by
        /// which a server with several keys finds the one this client holds before it proves
        /// its own. `None` on data connections (and in a version-1 `Hello`).
        identity: Option<[u8; 32]>,
        /// Control connections (version 6 on): the client's X25519 key share when it asks for
        /// encryption.
        share: Option<crate::KeyShare>,
    },
    /// Server -> client on a control connection: the server's nonce and its proof of the key.
    Challenge {
        /// Protocol version the server chose.
        version: u16,
        /// The server's fresh random nonce.
        nonce: Nonce,
        /// `HMAC(psk, "zcp/1 server proof" || client nonce || server nonce || shares)`.
        proof: [u8; 32],
        /// The server's X25519 key share: present exactly when the session is encrypted.
        share: Option<crate::KeyShare>,
    },
    /// Client -> server: the client's proof of the key.
    Proof {
        /// `HMAC(psk, "zcp/1 client proof" || client nonce || server nonce)`.
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
        /// The server has named exports: the first component of a remote path names one
        /// ([`Open::export`]).
        exports: bool,
    },
    /// Client -> server: how the session runs (boxed: sent once a session, and the largest
    /// message by far).
    Open(Box<Open>),
    /// Server -> client: what the server granted.
    Opened {
        /// Data streams the client opens now.
        streams: u16,
        /// Idle timeout in force, milliseconds.
        idle_ms: u32,
        /// How the server holds a pull's rate cap; [`Pacing::None`] in a push or without one.
        pacing: Pacing,
        /// The verify mode in force: the one `Open` asked for, repeated (a client refuses
        /// any other).
        verify: String,
        /// The transport in force, repeated from `Open` (a client refuses any other).
        transport: String,
        /// The UDP rate-control mode in force, repeated from `Open`.
        udp_mode: String,
    },
    /// Sender -> receiver: a file to receive.
    PutFile(PutFile),
    /// Sender -> receiver: a directory to create (its mode and mtime come in `DirTimes`).
    MakeDir {
        /// Path relative to the receiver's root.
        path: Vec<u8>,
        /// The top of a tree the sender copies (a source directory, not a directory made to
        /// hold several sources): under `--delete`, this directory and those beneath it are
        /// pruned. Flags bit 0.
        top: bool,
    },
    /// Sender -> receiver: a symbolic link to create; its target is never followed.
    MakeLink {
        /// Path relative to the receiver's root.
        path: Vec<u8>,
        /// The link's target, as raw bytes.
        target: Vec<u8>,
    },
    /// Sender -> receiver, after every file: a directory's mode and mtime.
    DirTimes {
        /// Path relative to the receiver's root.
        path: Vec<u8>,
        /// Permission bits.
        mode: u32,
        /// Modification time, seconds.
        mtime_sec: i64,
        /// Modification time, nanoseconds part.
        mtime_nsec: u32,
    },
    /// Receiver -> sender: a directory or link could not be created.
    EntryFailed {
        /// The entry's path.
        path: Vec<u8>,
        /// What kind of failure.
        code: ErrorCode,
        /// Why.
        message: String,
    },
    /// Receiver -> sender: a `MakeDir`, `MakeLink` or `DirTimes` was carried out. Every one
    /// of them is answered, in the order they came, by this or by `EntryFailed`.
    EntryDone {
        /// The entry's path, exactly as the sender named it.
        path: Vec<u8>,
    },
    /// Receiver -> sender: chunks already held (see [`Have`]); sent before `FileReady`.
    Have(Have),
    /// Receiver -> sender: the file is open and preallocated; send its chunks (after `Go`, if
    /// `resumed`).
    FileReady {
        /// The file.
        file_id: u32,
        /// Receiver engine that will run.
        engine: String,
        /// Why it differs from the one asked for, or how `auto` chose.
        note: String,
        /// Final path relative to the root, for display.
        target: Vec<u8>,
        /// Whether `Have` messages came before: the sender must answer with `Go`.
        resumed: bool,
    },
    /// Sender -> receiver, for a resumed file: whether the held chunks still match the source.
    Go {
        /// The file.
        file_id: u32,
        /// `true`: they do not; discard them and receive the whole file again.
        restart: bool,
    },
    /// Sender -> receiver: the keyed BLAKE3 MAC of one chunk, as the sender read it.
    ChunkMac {
        /// The file.
        file_id: u32,
        /// Chunk index in the file's [`crate::ChunkPlan`].
        index: u64,
        /// The MAC.
        mac: [u8; 32],
    },
    /// Receiver -> sender: chunk verified and durable (`ok`), or failed verification and
    /// reset: send it again.
    ChunkAck {
        /// The file.
        file_id: u32,
        /// Chunk index.
        index: u64,
        /// Verified and durable.
        ok: bool,
    },
    /// Sender -> receiver: every chunk was acknowledged; the whole-file digest.
    FileEnd {
        /// The file.
        file_id: u32,
        /// Digest over the chunk MACs (see [`crate::keys::FileDigest`]).
        digest: [u8; 32],
    },
    /// Sender -> receiver: the sender gives up on this file (its source changed or vanished);
    /// the receiver keeps what it verified, for a later resume, and commits nothing.
    FileAbort {
        /// The file.
        file_id: u32,
        /// Why.
        code: ErrorCode,
        /// For a person.
        message: String,
    },
    /// Receiver -> sender: the file is done. For storing engines: verified, synced and
    /// renamed into place. `null` and `mem` store nothing, and `null` cannot verify.
    FileCommitted {
        /// The file.
        file_id: u32,
        /// Bytes in the file.
        bytes: u64,
        /// The receiver's digest of what it holds (zeros when not verified).
        digest: [u8; 32],
        /// Whether every chunk MAC and the digest were checked.
        verified: bool,
        /// Whether the file was stored durably under its final name.
        stored: bool,
    },
    /// Receiver -> sender: the file was not committed; nothing was renamed into place.
    FileFailed {
        /// The file.
        file_id: u32,
        /// What kind of failure.
        code: ErrorCode,
        /// What happened, for a person.
        message: String,
    },
    /// Receiver -> sender, about once a second while files are open: the receiver is alive.
    Progress {
        /// A file being received.
        file_id: u32,
        /// Bytes of it written so far.
        bytes: u64,
    },
    /// Client -> server in a pull session: send this path (relative to the server root).
    Get {
        /// The path.
        path: Vec<u8>,
        /// Where it goes, relative to the client's destination; empty: its own name.
        dest: Vec<u8>,
    },
    /// Client -> server in a pull session: no more paths.
    GetEnd,
    /// Sender -> receiver: something the person at the other end should read (a skipped
    /// special file, a source that vanished).
    Notice {
        /// The text.
        message: String,
    },
    /// Sender -> receiver: no more entries; every file is done. Answered with `Stats`.
    Finish,
    /// Each side's resource use at the end: the receiver's after `Finish`, then the sender's.
    Stats(SideStats),
    /// Server -> client in a listing session (`Open::list`): one entry. Paths that cannot be
    /// listed are answered with `EntryFailed`; `Finish` ends the listing.
    ListEntry(ListEntry),
    /// Sender -> receiver, once, under `--delete` (or its dry run), after every file is done
    /// and before any `DirTimes`: the walk was whole (nothing failed, nothing passed over), so
    /// what the trees' directories hold beyond what was announced may go. Answered with
    /// `Deleted`s and `Pruned`; the sender sends nothing more until the last `Pruned`.
    Prune,
    /// Receiver -> sender, after `Prune`: an entry removed (or, in a dry run, that would be),
    /// or that could not be.
    Deleted {
        /// Its path beneath the receiver's root.
        path: Vec<u8>,
        /// A directory (removed with everything in it).
        dir: bool,
        /// Why it could not be removed (it is still there). Flags bit 1.
        failed: Option<(ErrorCode, String)>,
    },
    /// Receiver -> sender, after `Prune`: a keep-alive while it prunes, then (with `end`)
    /// how it went.
    Pruned(PruneCount),
    /// Sender -> receiver, at most once, when the sender has counted its sources: how many
    /// files and bytes the session will announce. For progress displays only; a receiver
    /// never trusts it for anything else.
    Plan {
        /// Regular files to send.
        files: u64,
        /// Their bytes.
        bytes: u64,
    },
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
    pub(crate) const OPEN: u8 = 0x11;
    pub(crate) const OPENED: u8 = 0x12;
    pub(crate) const PUT_FILE: u8 = 0x13;
    pub(crate) const MAKE_DIR: u8 = 0x14;
    pub(crate) const MAKE_LINK: u8 = 0x15;
    pub(crate) const DIR_TIMES: u8 = 0x16;
    pub(crate) const ENTRY_FAILED: u8 = 0x17;
    pub(crate) const HAVE: u8 = 0x18;
    pub(crate) const FILE_READY: u8 = 0x19;
    pub(crate) const GO: u8 = 0x1A;
    pub(crate) const CHUNK_MAC: u8 = 0x1B;
    pub(crate) const CHUNK_ACK: u8 = 0x1C;
    pub(crate) const FILE_END: u8 = 0x1D;
    pub(crate) const FILE_ABORT: u8 = 0x1E;
    pub(crate) const FILE_COMMITTED: u8 = 0x1F;
    pub(crate) const FILE_FAILED: u8 = 0x20;
    pub(crate) const PROGRESS: u8 = 0x21;
    pub(crate) const GET: u8 = 0x22;
    pub(crate) const GET_END: u8 = 0x23;
    pub(crate) const NOTICE: u8 = 0x24;
    pub(crate) const FINISH: u8 = 0x25;
    pub(crate) const STATS: u8 = 0x26;
    pub(crate) const PLAN: u8 = 0x27;
    pub(crate) const ENTRY_DONE: u8 = 0x28;
    pub(crate) const LIST_ENTRY: u8 = 0x29;
    pub(crate) const PRUNE: u8 = 0x2A;
    pub(crate) const DELETED: u8 = 0x2B;
    pub(crate) const PRUNED: u8 = 0x2C;
    /// An `Error` sealed in an encrypted session.
    pub(crate) const SEALED_ERROR: u8 = 0x2D;
    /// First sealed type code.
    pub(crate) const FIRST_SEALED: u8 = 0x10;
    /// Last known type code.
    pub(crate) const LAST: u8 = 0x2D;
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
    matches!(kind, code::HELLO..=code::DATA_ACCEPT | code::ERROR | code::WELCOME..=code::LAST)
}

fn flags(bits: &[bool]) -> u8 {
    bits.iter()
        .enumerate()
        .fold(0, |acc, (i, b)| acc | (u8::from(*b) << i))
}

fn read_flags<const N: usize>(
    r: &mut Reader<'_>,
    what: &'static str,
) -> Result<[bool; N], DecodeError> {
    let v = r.u8()?;
    if u32::from(v) >> N != 0 {
        return Err(DecodeError::Malformed(format!(
            "unknown {what} flags {v:#x}"
        )));
    }
    Ok(std::array::from_fn(|i| v & (1 << i) != 0))
}

impl Message {
    /// This message's type code.
    pub fn kind(&self) -> u8 {
        use code::*;
        match self {
            Message::Hello { .. } => HELLO,
            Message::Challenge { .. } => CHALLENGE,
            Message::Proof { .. } => PROOF,
            Message::DataChallenge { .. } => DATA_CHALLENGE,
            Message::DataJoin { .. } => DATA_JOIN,
            Message::DataAccept => DATA_ACCEPT,
            Message::Error { .. } => ERROR,
            Message::Welcome { .. } => WELCOME,
            Message::Open(_) => OPEN,
            Message::Opened { .. } => OPENED,
            Message::PutFile(_) => PUT_FILE,
            Message::MakeDir { .. } => MAKE_DIR,
            Message::MakeLink { .. } => MAKE_LINK,
            Message::DirTimes { .. } => DIR_TIMES,
            Message::EntryFailed { .. } => ENTRY_FAILED,
            Message::Have(_) => HAVE,
            Message::FileReady { .. } => FILE_READY,
            Message::Go { .. } => GO,
            Message::ChunkMac { .. } => CHUNK_MAC,
            Message::ChunkAck { .. } => CHUNK_ACK,
            Message::FileEnd { .. } => FILE_END,
            Message::FileAbort { .. } => FILE_ABORT,
            Message::FileCommitted { .. } => FILE_COMMITTED,
            Message::FileFailed { .. } => FILE_FAILED,
            Message::Progress { .. } => PROGRESS,
            Message::Get { .. } => GET,
            Message::GetEnd => GET_END,
            Message::Notice { .. } => NOTICE,
            Message::Finish => FINISH,
            Message::Stats(_) => STATS,
            Message::Plan { .. } => PLAN,
            Message::EntryDone { .. } => ENTRY_DONE,
            Message::ListEntry(_) => LIST_ENTRY,
            Message::Prune => PRUNE,
            Message::Deleted { .. } => DELETED,
            Message::Pruned(_) => PRUNED,
        }
    }

    /// Whether this message travels sealed.
    pub fn is_sealed(&self) -> bool {
        self.kind() >= code::FIRST_SEALED
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
            Message::Open(_) => "Open",
            Message::Opened { .. } => "Opened",
            Message::PutFile(_) => "PutFile",
            Message::MakeDir { .. } => "MakeDir",
            Message::MakeLink { .. } => "MakeLink",
            Message::DirTimes { .. } => "DirTimes",
            Message::EntryFailed { .. } => "EntryFailed",
            Message::EntryDone { .. } => "EntryDone",
            Message::Have(_) => "Have",
            Message::FileReady { .. } => "FileReady",
            Message::Go { .. } => "Go",
            Message::ChunkMac { .. } => "ChunkMac",
            Message::ChunkAck { .. } => "ChunkAck",
            Message::FileEnd { .. } => "FileEnd",
            Message::FileAbort { .. } => "FileAbort",
            Message::FileCommitted { .. } => "FileCommitted",
            Message::FileFailed { .. } => "FileFailed",
            Message::Progress { .. } => "Progress",
            Message::Get { .. } => "Get",
            Message::GetEnd => "GetEnd",
            Message::Notice { .. } => "Notice",
            Message::Finish => "Finish",
            Message::Plan { .. } => "Plan",
            Message::Stats(_) => "Stats",
            Message::ListEntry(_) => "ListEntry",
            Message::Prune => "Prune",
            Message::Deleted { .. } => "Deleted",
            Message::Pruned(_) => "Pruned",
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
mod tests;
