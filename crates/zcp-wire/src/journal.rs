//! The receiver's resume journal: which chunks of a partial file are verified and durable, and
//! the MACs they were verified against.
//!
//! A journal is an append-only file beside the partial file: a 32-byte header, then records.
//! Each record ends with the first 8 bytes of an (unkeyed) BLAKE3 of its kind and payload, so a
//! record torn by a crash mid-append is recognised and everything from it on is ignored: the
//! journal's *valid length* is where the next append goes. The journal proves no chunk by
//! itself — a resumed chunk counts only after the sender recomputes its MAC over the current
//! source under the key of the session named in the journal, which needs the pre-shared key.
//! The chaining values it keeps for the file's digest are the receiver's own record, trusted as
//! its part file is: no peer can write either (names beginning `.zcp-` are refused).
//!
//! ```text
//! header  = "ZCPJ" version:u16=2 zero:u16 size:u64 chunk_size:u64 zero:u64
//! record  = kind:u8 payload check[8]
//!   kind 1, session: owner[16] client_nonce[32] server_nonce[32] file_id:u32   (tags from 0)
//!   kind 2, chunk:   session_tag:u16 index:u64 mac[32] cv[32]
//! ```
//!
//! A session record names its *owner* ([`crate::keys::JournalOwner`], from the identity's key):
//! an identity that may not read resumes only a journal whose every session is its own. A
//! chunk record keeps the chunk's plain BLAKE3 chaining value beside its MAC, so a resumed
//! file's digest needs no second pass ([`crate::proof`]). A version 1 journal (before both)
//! is void: its part file is written anew.

use crate::keys::JournalOwner;
use crate::{DecodeError, Nonce};

/// First bytes of a journal.
pub const JOURNAL_MAGIC: [u8; 4] = *b"ZCPJ";
/// Journal format version.
pub const JOURNAL_VERSION: u16 = 2;
/// Size of the journal header.
pub const JOURNAL_HEADER_LEN: usize = 32;
/// Most sessions one journal may name (a file resumed this many times starts over).
pub const MAX_JOURNAL_SESSIONS: usize = 256;
const CHECK_LEN: usize = 8;
const SESSION: u8 = 1;
const CHUNK: u8 = 2;
const SESSION_PAYLOAD: usize = 16 + 32 + 32 + 4;
const CHUNK_PAYLOAD: usize = 2 + 8 + 32 + 32;

/// What a journal is about: the file's size and chunk size. A sender announcing anything else
/// for the same target makes the journal void.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalHeader {
    /// File size.
    pub size: u64,
    /// Chunk size.
    pub chunk_size: u64,
}

impl JournalHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; JOURNAL_HEADER_LEN] {
        let mut out = [0u8; JOURNAL_HEADER_LEN];
        out[..4].copy_from_slice(&JOURNAL_MAGIC);
        out[4..6].copy_from_slice(&JOURNAL_VERSION.to_be_bytes());
        out[8..16].copy_from_slice(&self.size.to_be_bytes());
        out[16..24].copy_from_slice(&self.chunk_size.to_be_bytes());
        out
    }
}

/// One journal record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JournalRecord {
    /// A session that verified chunks of this file; later chunk records name it by its tag
    /// (its position among the session records, from 0).
    Session {
        /// Whose session it was.
        owner: JournalOwner,
        /// That session's client nonce.
        client_nonce: Nonce,
        /// That session's server nonce.
        server_nonce: Nonce,
        /// The file's id in that session.
        file_id: u32,
    },
    /// A chunk verified against `mac` (under session `session`'s chunk key) and made durable.
    Chunk {
        /// Session tag.
        session: u16,
        /// Chunk index.
        index: u64,
        /// The MAC it was verified against.
        mac: [u8; 32],
        /// Its plain BLAKE3 chaining value, which the MAC binds.
        cv: [u8; 32],
    },
}

fn check(kind: u8, payload: &[u8]) -> [u8; CHECK_LEN] {
    let mut h = blake3::Hasher::new();
    h.update(&[kind]);
    h.update(payload);
    let mut out = [0u8; CHECK_LEN];
    out.copy_from_slice(&h.finalize().as_bytes()[..CHECK_LEN]);
    out
}

impl JournalRecord {
    /// The record's bytes, check included.
    pub fn encode(&self) -> Vec<u8> {
        let (kind, payload) = match self {
            JournalRecord::Session {
                owner,
                client_nonce,
                server_nonce,
                file_id,
            } => {
                let mut p = Vec::with_capacity(SESSION_PAYLOAD);
                p.extend_from_slice(owner);
                p.extend_from_slice(client_nonce);
                p.extend_from_slice(server_nonce);
                p.extend_from_slice(&file_id.to_be_bytes());
                (SESSION, p)
            }
            JournalRecord::Chunk {
                session,
                index,
                mac,
                cv,
            } => {
                let mut p = Vec::with_capacity(CHUNK_PAYLOAD);
                p.extend_from_slice(&session.to_be_bytes());
                p.extend_from_slice(&index.to_be_bytes());
                p.extend_from_slice(mac);
                p.extend_from_slice(cv);
                (CHUNK, p)
            }
        };
        let mut out = Vec::with_capacity(1 + payload.len() + CHECK_LEN);
        out.push(kind);
        out.extend_from_slice(&payload);
        out.extend_from_slice(&check(kind, &payload));
        out
    }
}

/// A session named in a journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalSession {
    /// Whose session it was.
    pub owner: JournalOwner,
    /// Client nonce.
    pub client_nonce: Nonce,
    /// Server nonce.
    pub server_nonce: Nonce,
    /// The file's id in that session.
    pub file_id: u32,
}

/// A chunk record as read back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JournalChunk {
    /// The tag of the session that verified it.
    pub session: u16,
    /// Its index.
    pub index: u64,
    /// The MAC it was verified against.
    pub mac: [u8; 32],
    /// Its plain BLAKE3 chaining value.
    pub cv: [u8; 32],
}

/// A journal as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalState {
    /// The header.
    pub header: JournalHeader,
    /// Sessions, by tag.
    pub sessions: Vec<JournalSession>,
    /// The chunks in the order recorded; a later record for the same index supersedes an
    /// earlier one.
    pub chunks: Vec<JournalChunk>,
    /// Bytes up to the end of the last intact record: where the next append goes.
    pub valid_len: usize,
}

/// Reads a journal. A bad header is an error (the journal is void); a torn, corrupt or
/// inconsistent record ends the journal there, keeping everything before it.
pub fn decode_journal(bytes: &[u8]) -> Result<JournalState, DecodeError> {
    if bytes.len() < JOURNAL_HEADER_LEN {
        return Err(DecodeError::Truncated {
            needed: JOURNAL_HEADER_LEN - bytes.len(),
        });
    }
    let h = &bytes[..JOURNAL_HEADER_LEN];
    if h[..4] != JOURNAL_MAGIC {
        return Err(DecodeError::Malformed(
            "not a zcp journal (bad magic bytes)".into(),
        ));
    }
    let version = u16::from_be_bytes([h[4], h[5]]);
    if version != JOURNAL_VERSION {
        return Err(DecodeError::Malformed(format!(
            "journal version {version}, expected {JOURNAL_VERSION}"
        )));
    }
    if h[6..8] != [0, 0] || h[24..32] != [0; 8] {
        return Err(DecodeError::Malformed(
            "journal header padding is not zero".into(),
        ));
    }
    let u64_at =
        |b: &[u8], at: usize| u64::from_be_bytes(b[at..at + 8].try_into().expect("8 bytes"));
    let header = JournalHeader {
        size: u64_at(h, 8),
        chunk_size: u64_at(h, 16),
    };
    let mut state = JournalState {
        header,
        sessions: Vec::new(),
        chunks: Vec::new(),
        valid_len: JOURNAL_HEADER_LEN,
    };
    let mut pos = JOURNAL_HEADER_LEN;
    while pos < bytes.len() {
        let kind = bytes[pos];
        let payload_len = match kind {
            SESSION => SESSION_PAYLOAD,
            CHUNK => CHUNK_PAYLOAD,
            _ => break,
        };
        let end = pos + 1 + payload_len + CHECK_LEN;
        if end > bytes.len() {
            break;
        }
        let payload = &bytes[pos + 1..pos + 1 + payload_len];
        if bytes[pos + 1 + payload_len..end] != check(kind, payload) {
            break;
        }
        if kind == SESSION {
            if state.sessions.len() >= MAX_JOURNAL_SESSIONS {
                break;
            }
            state.sessions.push(JournalSession {
                owner: payload[..16].try_into().expect("16 bytes"),
                client_nonce: payload[16..48].try_into().expect("32 bytes"),
                server_nonce: payload[48..80].try_into().expect("32 bytes"),
                file_id: u32::from_be_bytes(payload[80..84].try_into().expect("4 bytes")),
            });
        } else {
            let tag = u16::from_be_bytes([payload[0], payload[1]]);
            if usize::from(tag) >= state.sessions.len() {
                break;
            }
            state.chunks.push(JournalChunk {
                session: tag,
                index: u64_at(payload, 2),
                mac: payload[10..42].try_into().expect("32 bytes"),
                cv: payload[42..74].try_into().expect("32 bytes"),
            });
        }
        pos = end;
        state.valid_len = pos;
    }
    Ok(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<u8> {
        let mut j = JournalHeader {
            size: 1 << 30,
            chunk_size: 16 << 20,
        }
        .encode()
        .to_vec();
        j.extend(
            JournalRecord::Session {
                owner: [9; 16],
                client_nonce: [1; 32],
                server_nonce: [2; 32],
                file_id: 7,
            }
            .encode(),
        );
        for i in 0..3 {
            j.extend(
                JournalRecord::Chunk {
                    session: 0,
                    index: i,
                    mac: [i as u8; 32],
                    cv: [i as u8 + 100; 32],
                }
                .encode(),
            );
        }
        j
    }

    #[test]
    fn round_trip() {
        let j = sample();
        let s = decode_journal(&j).unwrap();
        assert_eq!(
            s.header,
            JournalHeader {
                size: 1 << 30,
                chunk_size: 16 << 20
            }
        );
        assert_eq!(s.sessions.len(), 1);
        assert_eq!(s.sessions[0].file_id, 7);
        assert_eq!(s.sessions[0].owner, [9; 16]);
        let chunk = |i: u8| JournalChunk {
            session: 0,
            index: u64::from(i),
            mac: [i; 32],
            cv: [i + 100; 32],
        };
        assert_eq!(s.chunks, vec![chunk(0), chunk(1), chunk(2)]);
        assert_eq!(s.valid_len, j.len());
    }

    #[test]
    fn a_torn_or_corrupt_tail_is_dropped_not_trusted() {
        let j = sample();
        for cut in JOURNAL_HEADER_LEN..j.len() {
            let s = decode_journal(&j[..cut]).unwrap();
            assert!(s.valid_len <= cut);
            assert!(s.chunks.len() <= 3);
        }
        let mut bad = j.clone();
        let last = bad.len() - 20;
        bad[last] ^= 1; // inside the last chunk's MAC
        let s = decode_journal(&bad).unwrap();
        assert_eq!(s.chunks.len(), 2);
        // A chunk naming a session that was never recorded ends the journal there.
        let mut j = JournalHeader {
            size: 1,
            chunk_size: 65536,
        }
        .encode()
        .to_vec();
        j.extend(
            JournalRecord::Chunk {
                session: 0,
                index: 0,
                mac: [0; 32],
                cv: [0; 32],
            }
            .encode(),
        );
        assert!(decode_journal(&j).unwrap().chunks.is_empty());
    }

    #[test]
    fn a_bad_header_voids_the_journal() {
        assert!(decode_journal(b"short").is_err());
        let mut j = sample();
        j[0] = b'X';
        assert!(decode_journal(&j).is_err());
        let mut j = sample();
        j[5] = 9;
        assert!(decode_journal(&j).is_err());
        // A version 1 journal (no owners, no chaining values) is void.
        let mut j = sample();
        j[5] = 1;
        assert!(decode_journal(&j).is_err());
    }
}
