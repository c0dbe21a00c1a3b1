//! The zcp wire protocol, without I/O.
//!
//! This crate owns the byte formats (control frames, messages, data-stream chunk headers), the
//! handshake and its key derivations, sealing of control frames, destination-path validation
//! and the chunk plan. It does not own sockets, files, clocks or randomness: callers pass bytes,
//! nonces and `now` in, and get messages, replies and errors out, as in quinn-proto. That keeps
//! every rule about what a peer may send testable in memory and fuzzable without a network.
//!
//! The format is specified for people in `docs/PROTOCOL.md`; keep the two in step.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod chunk;
mod codec;
pub mod crypt;
mod extents;
mod filter;
mod handshake;
pub mod journal;
pub mod keys;
mod message;
mod path;
pub mod proof;
mod seal;
pub mod udp;
mod units;

pub use chunk::{
    CHUNK_ALIGN, CHUNK_HEADER_LEN, CHUNK_MAGIC, ChunkHeader, ChunkKind, ChunkPlan, MAX_CHUNK,
    MIN_CHUNK, PlanError,
};
pub use crypt::{
    CryptError, DatagramOpener, DatagramSealer, Ephemeral, KeyShare, RecordOpener, RecordSealer,
    StreamKey,
};
pub use extents::{EXTENT_ALIGN, EXTENT_ENTRY_LEN, Extents, MAX_EXTENTS};
pub use filter::{
    Filter, FilterError, FilterRule, MAX_FILTER_BYTES, MAX_FILTER_RULE, MAX_FILTER_RULES,
};
pub use handshake::{
    Accepted, ClientAwaitWelcome, ClientHandshake, DataAwaitJoin, DataClient, Established,
    HandshakeError, JoinRequest, ServerAwaitProof, ServerOffer, accept, accept_any,
};
pub use keys::{FileDigest, JournalOwner, KeyError, PSK_LEN, Psk, SessionKeys, http_token_key};
pub use message::{
    DeleteMode, ErrorCode, ExistingMode, FrameHeader, HEADER_LEN, HELLO_MAGIC, Have, ListEntry,
    ListKind, MAX_ENGINE_NAME, MAX_HAVE_ENTRIES, MAX_NAME, MAX_PATH, MAX_PAYLOAD, MAX_RATE,
    MAX_TEXT, MIN_RATE, Message, Open, Pacing, PruneCount, PutFile, Role, SideStats, VerifyMode,
};
pub use path::{PathError, RelPath, escape, escape_text};
pub use proof::{ChunkHasher, ChunkProof, plain_digest};
pub use seal::{OpenError, Opener, Sealer, Side, TAG_LEN};
pub use units::{scaled_text, size_text, three_digits};

/// The protocol version this crate speaks.
pub const PROTOCOL_VERSION: u16 = 6;
/// Length of a nonce.
pub const NONCE_LEN: usize = 32;
/// Length of a session id.
pub const SESSION_ID_LEN: usize = 16;

/// A fresh random value from one side of a handshake.
pub type Nonce = [u8; NONCE_LEN];
/// Names a session to its data connections.
pub type SessionId = [u8; SESSION_ID_LEN];

/// Why bytes from the network did not decode.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    /// More bytes are needed: the input ended inside a field.
    #[error("message truncated: {needed} more bytes needed")]
    Truncated {
        /// Bytes missing from the field being read.
        needed: usize,
    },
    /// A length over the protocol's bound.
    #[error("announced length {len} is over the limit of {max}")]
    TooLarge {
        /// What the peer announced.
        len: u64,
        /// The bound.
        max: u64,
    },
    /// The bytes are complete but break a rule of the format.
    #[error("malformed message: {0}")]
    Malformed(String),
}
