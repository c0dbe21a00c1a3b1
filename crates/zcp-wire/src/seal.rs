//! Sealed control frames: integrity and ordering for every control message after the handshake.
//!
//! Each direction has its own key and a sequence number that starts at 0 and rises by one per
//! sealed frame. Without encryption the tag is the first 16 bytes of `BLAKE3-keyed(key, seq ||
//! type || body)` and the body is in clear; in an encrypted session the body is encrypted
//! with AES-256-GCM (nonce `seq`, associated data the type) and the tag is its GCM tag, and an
//! `Error` is sealed too. Either way a frame that is altered, replayed, reordered, dropped or
//! reflected back fails to open.

use subtle::ConstantTimeEq;

use crate::crypt::Aead;
use crate::message::{FrameHeader, Message, code, frame};
use crate::{DecodeError, SessionKeys};

/// Length of the tag at the end of a sealed payload.
pub const TAG_LEN: usize = 16;

fn tag(key: &[u8; 32], seq: u64, kind: u8, body: &[u8]) -> [u8; TAG_LEN] {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(&seq.to_be_bytes());
    h.update(&[kind]);
    h.update(body);
    let mut out = [0u8; TAG_LEN];
    out.copy_from_slice(&h.finalize().as_bytes()[..TAG_LEN]);
    out
}

/// Which end of the control connection a [`Sealer`] or [`Opener`] belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The end that connected.
    Client,
    /// The end that accepted.
    Server,
}

/// Seals outgoing control messages.
#[derive(Debug)]
pub struct Sealer {
    key: [u8; 32],
    aead: Option<Box<Aead>>,
    seq: u64,
}

/// The control key of frames `sender` sends, and the cipher when the session is encrypted.
fn control_key(keys: &SessionKeys, sender: Side) -> ([u8; 32], Option<Box<Aead>>) {
    let key = match sender {
        Side::Client => keys.control_c2s,
        Side::Server => keys.control_s2c,
    };
    let aead = keys.cipher.as_ref().map(|c| {
        Box::new(Aead::new(match sender {
            Side::Client => &c.control_c2s,
            Side::Server => &c.control_s2c,
        }))
    });
    (key, aead)
}

impl Sealer {
    /// The sealer for frames that `side` sends.
    pub fn new(keys: &SessionKeys, side: Side) -> Sealer {
        let (key, aead) = control_key(keys, side);
        Sealer { key, aead, seq: 0 }
    }

    /// A whole frame for `msg`. Sealed types get a tag and use up a sequence number; an
    /// unsealed type (only `Error` is sent after the handshake) is framed as is, except in
    /// an encrypted session, where an `Error` is sealed too (its text may name files).
    pub fn seal(&mut self, msg: &Message) -> Vec<u8> {
        let Some(aead) = &self.aead else {
            if !msg.is_sealed() {
                return msg.encode_frame();
            }
            let body = msg.encode_body();
            let t = tag(&self.key, self.seq, msg.kind(), &body);
            self.seq += 1;
            return frame(msg.kind(), &body, &t);
        };
        let kind = match msg {
            Message::Error { .. } => code::SEALED_ERROR,
            _ if !msg.is_sealed() => return msg.encode_frame(),
            _ => msg.kind(),
        };
        let mut body = msg.encode_body();
        let t = aead.seal(self.seq, &[kind], &mut body);
        self.seq += 1;
        frame(kind, &body, &t)
    }
}

/// Why a control frame failed to open.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum OpenError {
    /// The tag does not match: altered, replayed, reordered, or sealed under another key.
    #[error("control frame failed authentication (altered, replayed or from another session)")]
    BadTag,
    /// An unsealed frame other than `Error` arrived after the handshake.
    #[error("unsealed {0} frame after the handshake")]
    Unsealed(&'static str),
    /// The body does not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// Opens incoming control frames.
#[derive(Debug)]
pub struct Opener {
    key: [u8; 32],
    aead: Option<Box<Aead>>,
    seq: u64,
}

impl Opener {
    /// The opener for frames that `side` receives.
    pub fn new(keys: &SessionKeys, side: Side) -> Opener {
        let peer = match side {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        };
        let (key, aead) = control_key(keys, peer);
        Opener { key, aead, seq: 0 }
    }

    /// Checks and decodes one frame's payload (`header.len` bytes, tag included).
    pub fn open(&mut self, header: FrameHeader, payload: &[u8]) -> Result<Message, OpenError> {
        if !header.is_sealed() {
            let msg = Message::decode(header.kind, payload)?;
            return match msg {
                Message::Error { .. } => Ok(msg),
                other => Err(OpenError::Unsealed(other.name())),
            };
        }
        if payload.len() < TAG_LEN {
            return Err(OpenError::BadTag);
        }
        let (body, got) = payload.split_at(payload.len() - TAG_LEN);
        if let Some(aead) = &self.aead {
            let mut body = body.to_vec();
            aead.open(self.seq, &[header.kind], &mut body, got)
                .map_err(|_| OpenError::BadTag)?;
            self.seq += 1;
            // An encrypted session's `Error` travels sealed, under its own type code.
            let kind = match header.kind {
                code::SEALED_ERROR => code::ERROR,
                k => k,
            };
            return Ok(Message::decode(kind, &body)?);
        }
        if header.kind == code::SEALED_ERROR {
            return Err(OpenError::BadTag);
        }
        let want = tag(&self.key, self.seq, header.kind, body);
        if !bool::from(want.ct_eq(got)) {
            return Err(OpenError::BadTag);
        }
        self.seq += 1;
        Ok(Message::decode(header.kind, body)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::message::HEADER_LEN;
    use crate::{ErrorCode, Psk};

    fn keys(server_nonce: u8) -> SessionKeys {
        let mut k = [4u8; 32];
        k[1] = 9;
        SessionKeys::derive(&Psk::from_bytes(k), &[1; 32], &[server_nonce; 32])
    }

    fn split(frame: &[u8]) -> (FrameHeader, &[u8]) {
        let h = FrameHeader::decode(frame[..HEADER_LEN].try_into().unwrap()).unwrap();
        (h, &frame[HEADER_LEN..])
    }

    #[test]
    fn seal_open_in_order() {
        let k = keys(2);
        let mut s = Sealer::new(&k, Side::Client);
        let mut o = Opener::new(&k, Side::Server);
        for m in [
            Message::Finish,
            Message::FileEnd {
                file_id: 1,
                digest: [9; 32],
            },
        ] {
            let f = s.seal(&m);
            let (h, p) = split(&f);
            assert_eq!(o.open(h, p).unwrap(), m);
        }
    }

    #[test]
    fn tampering_replay_reflection_and_foreign_keys_fail() {
        let k = keys(2);
        let mut s = Sealer::new(&k, Side::Client);
        let first = s.seal(&Message::Finish);
        let second = s.seal(&Message::Finish);

        // Replay: the first frame again where the second is due.
        let mut o = Opener::new(&k, Side::Server);
        let (h, p) = split(&first);
        o.open(h, p).unwrap();
        assert_eq!(o.open(h, p), Err(OpenError::BadTag));

        // Reorder: the second frame first.
        let mut o = Opener::new(&k, Side::Server);
        let (h, p) = split(&second);
        assert_eq!(o.open(h, p), Err(OpenError::BadTag));

        // Reflection: a client frame fed back to the client.
        let mut o = Opener::new(&k, Side::Client);
        let (h, p) = split(&first);
        assert_eq!(o.open(h, p), Err(OpenError::BadTag));

        // Another session's keys.
        let mut o = Opener::new(&keys(3), Side::Server);
        assert_eq!(o.open(h, p), Err(OpenError::BadTag));

        // A flipped bit in the body.
        let m = Message::FileEnd {
            file_id: 1,
            digest: [9; 32],
        };
        let mut f = Sealer::new(&k, Side::Client).seal(&m);
        f[HEADER_LEN + 2] ^= 1;
        let (h, p) = split(&f);
        assert_eq!(
            Opener::new(&k, Side::Server).open(h, p),
            Err(OpenError::BadTag)
        );
    }

    fn encrypted(b: u8) -> SessionKeys {
        SessionKeys::derive_encrypted(
            &Psk::from_bytes([4; 32]),
            (&[1; 32], &[2; 32]),
            &[b; 64],
            &[b; 32],
        )
    }

    #[test]
    fn encrypted_frames_hide_their_bodies_and_errors() {
        let k = encrypted(5);
        let mut s = Sealer::new(&k, Side::Server);
        let mut o = Opener::new(&k, Side::Client);
        let name_in = Message::Error {
            code: ErrorCode::BadPath,
            message: "secret-name.h5 is missing".into(),
        };
        for m in [Message::Finish, name_in] {
            let f = s.seal(&m);
            assert!(
                !f.windows(11).any(|w| w == b"secret-name"),
                "{m:?} in clear"
            );
            let (h, p) = split(&f);
            assert!(h.is_sealed());
            assert_eq!(o.open(h, p).unwrap(), m);
        }
        // Replayed, reflected, under another session's keys, or flipped: refused.
        let f = Sealer::new(&k, Side::Server).seal(&Message::Finish);
        let (h, p) = split(&f);
        assert_eq!(o.open(h, p), Err(OpenError::BadTag));
        assert_eq!(
            Opener::new(&k, Side::Server).open(h, p),
            Err(OpenError::BadTag)
        );
        assert_eq!(
            Opener::new(&encrypted(6), Side::Client).open(h, p),
            Err(OpenError::BadTag)
        );
        // A frame sealed without encryption (a peer claiming encryption, sending in clear).
        assert!(
            Opener::new(&k, Side::Client).open(h, p).is_ok(),
            "the genuine first frame"
        );
        let plain = Sealer::new(&keys(2), Side::Server).seal(&Message::Finish);
        let (h, p) = split(&plain);
        assert_eq!(
            Opener::new(&k, Side::Client).open(h, p),
            Err(OpenError::BadTag)
        );
        // And an encrypted error is no unencrypted session's.
        let e = Sealer::new(&k, Side::Server).seal(&Message::Error {
            code: ErrorCode::Io,
            message: "x".into(),
        });
        let (h, p) = split(&e);
        assert_eq!(
            Opener::new(&keys(2), Side::Client).open(h, p),
            Err(OpenError::BadTag)
        );
    }

    #[test]
    fn only_error_may_arrive_unsealed() {
        let k = keys(2);
        let err = Message::Error {
            code: ErrorCode::Io,
            message: "disk".into(),
        };
        let f = Sealer::new(&k, Side::Server).seal(&err);
        let (h, p) = split(&f);
        assert_eq!(Opener::new(&k, Side::Client).open(h, p).unwrap(), err);

        let f = Message::DataAccept.encode_frame();
        let (h, p) = split(&f);
        assert_eq!(
            Opener::new(&k, Side::Client).open(h, p),
            Err(OpenError::Unsealed("DataAccept"))
        );
    }
}
