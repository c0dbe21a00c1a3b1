//! Key material: the pre-shared key, the proofs exchanged in the handshake, the keys derived
//! for one session, chunk MACs and the whole-file digest.
//!
//! Every secret here is a fixed-size array; comparisons of proofs and tags run in constant
//! time (`hmac::Mac::verify_slice`, `subtle`). Nothing in this module reads a clock, a random
//! source or a file: nonces and key bytes come in from the caller.

use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::crypt::{SALT_LEN, StreamKey};
use crate::proof::ChunkHasher;
use crate::{Nonce, SessionId};

type HmacSha256 = Hmac<Sha256>;

/// Length of the pre-shared key in bytes.
pub const PSK_LEN: usize = 32;

/// The pre-shared key. `Debug` never prints the key bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct Psk([u8; PSK_LEN]);

impl fmt::Debug for Psk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Psk(<redacted>)")
    }
}

/// Why a key file's contents were refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    /// The file holds no key line.
    #[error("the key file is empty (create one with `zcp keygen -o FILE`)")]
    Empty,
    /// The key line is not 64 hexadecimal digits.
    #[error("the key must be {} hexadecimal digits, found {found} characters", PSK_LEN * 2)]
    BadLength {
        /// Characters found on the key line.
        found: usize,
    },
    /// The key line has a character that is not a hexadecimal digit.
    #[error("the key has a character that is not a hexadecimal digit")]
    NotHex,
    /// Every byte of the key is the same, which no random key is.
    #[error("the key is all {0:#04x} bytes; generate a real one with `zcp keygen -o FILE`")]
    Trivial(u8),
}

impl Psk {
    /// A key from raw bytes (from `getrandom` in `zcp keygen`).
    pub fn from_bytes(bytes: [u8; PSK_LEN]) -> Psk {
        Psk(bytes)
    }

    /// Parses a key file: `#` comment lines and blank lines, then one line of 64 hex digits.
    pub fn parse(text: &str) -> Result<Psk, KeyError> {
        let line = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .ok_or(KeyError::Empty)?;
        if line.len() != PSK_LEN * 2 {
            return Err(KeyError::BadLength { found: line.len() });
        }
        let mut bytes = [0u8; PSK_LEN];
        hex::decode_to_slice(line, &mut bytes).map_err(|_| KeyError::NotHex)?;
        if bytes.iter().all(|b| *b == bytes[0]) {
            return Err(KeyError::Trivial(bytes[0]));
        }
        Ok(Psk(bytes))
    }

    /// The key file text that [`Psk::parse`] reads back.
    pub fn to_file_text(&self) -> String {
        format!(
            "# zcp pre-shared key. Keep it secret: mode 0600, copied only to the peer host.\n{}\n",
            hex::encode(self.0)
        )
    }

    fn mac(&self, label: &[u8], parts: &[&[u8]]) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.0).expect("HMAC takes keys of any length");
        m.update(label);
        for p in parts {
            m.update(p);
        }
        m
    }
}

const SERVER_LABEL: &[u8] = b"zcp/1 server proof";
const CLIENT_LABEL: &[u8] = b"zcp/1 client proof";
const SESSION_LABEL: &[u8] = b"zcp/1 session secret";
const JOIN_LABEL: &[u8] = b"zcp/1 data join";
const IDENTITY_LABEL: &[u8] = b"zcp/2 identity";
const ENCRYPTION_LABEL: &[u8] = b"zcp/6 encryption secret";
const HTTP_TOKEN_LABEL: &[u8] = b"zcp/http token key";

/// `HMAC-SHA256(psk, "zcp/http token key" || identity)`: the first key of the HTTP face's
/// bearer tokens for that identity. Separate from every session key by its label; rotating
/// the identity's key changes it, which revokes every token made with the old one.
pub fn http_token_key(psk: &Psk, identity: &str) -> [u8; 32] {
    psk.mac(HTTP_TOKEN_LABEL, &[identity.as_bytes()])
        .finalize()
        .into_bytes()
        .into()
}

/// `HMAC-SHA256(psk, "zcp/2 identity" || client nonce)`: what a control `Hello` carries so
/// a server with several keys can tell which one the client holds. It proves nothing (a
/// captured one only ever names its own nonce) and is worthless without the key.
pub fn identity_tag(psk: &Psk, client: &Nonce) -> [u8; 32] {
    psk.mac(IDENTITY_LABEL, &[client])
        .finalize()
        .into_bytes()
        .into()
}

/// The index of the key in `keys` whose [`identity_tag`] for `client` is `tag`. Every key is
/// tried, each in constant time, whichever matches: the time taken says nothing about which
/// one did.
pub fn find_identity(keys: &[&Psk], client: &Nonce, tag: &[u8; 32]) -> Option<usize> {
    let mut found = None;
    for (i, k) in keys.iter().enumerate() {
        let ok = k.mac(IDENTITY_LABEL, &[client]).verify_slice(tag).is_ok();
        if ok && found.is_none() {
            found = Some(i);
        }
    }
    found
}

/// `HMAC-SHA256(psk, "zcp/1 server proof" || client nonce || server nonce || shares)`:
/// `shares` is empty in a session without encryption, else the client's key share then the
/// server's, so a share swapped or stripped on the way fails the proof.
pub fn server_proof(psk: &Psk, client: &Nonce, server: &Nonce, shares: &[u8]) -> [u8; 32] {
    psk.mac(SERVER_LABEL, &[client, server, shares])
        .finalize()
        .into_bytes()
        .into()
}

/// `HMAC-SHA256(psk, "zcp/1 client proof" || client nonce || server nonce || shares)`.
pub fn client_proof(psk: &Psk, client: &Nonce, server: &Nonce, shares: &[u8]) -> [u8; 32] {
    psk.mac(CLIENT_LABEL, &[client, server, shares])
        .finalize()
        .into_bytes()
        .into()
}

pub(crate) fn verify_server_proof(
    psk: &Psk,
    (client, server): (&Nonce, &Nonce),
    shares: &[u8],
    proof: &[u8],
) -> bool {
    psk.mac(SERVER_LABEL, &[client, server, shares])
        .verify_slice(proof)
        .is_ok()
}

pub(crate) fn verify_client_proof(
    psk: &Psk,
    (client, server): (&Nonce, &Nonce),
    shares: &[u8],
    proof: &[u8],
) -> bool {
    psk.mac(CLIENT_LABEL, &[client, server, shares])
        .verify_slice(proof)
        .is_ok()
}

/// The keys of an encrypted session: from a secret that takes in the X25519 agreement as
/// well as the pre-shared key, so a key learned later does not open what was recorded.
#[derive(Clone)]
pub(crate) struct CipherKeys {
    pub(crate) control_c2s: [u8; 32],
    pub(crate) control_s2c: [u8; 32],
    data: [u8; 32],
    side: [u8; 32],
    datagram: [u8; 32],
}

/// Keys of one authenticated session, derived from the pre-shared key and both nonces.
///
/// The session secret is `HMAC-SHA256(psk, "zcp/1 session secret" || client nonce || server
/// nonce)`; each purpose gets its own key from it by BLAKE3's key derivation mode, so a key
/// used for one purpose says nothing about another.
#[derive(Clone)]
pub struct SessionKeys {
    pub(crate) control_c2s: [u8; 32],
    pub(crate) control_s2c: [u8; 32],
    join: [u8; 32],
    chunk: [u8; 32],
    digest: [u8; 32],
    udp: [u8; 32],
    /// Names the key's holder in resume journals ([`SessionKeys::journal_owner`]).
    owner: JournalOwner,
    /// An encrypted session's keys ([`SessionKeys::derive_encrypted`]).
    pub(crate) cipher: Option<CipherKeys>,
    /// Nanoseconds this side spent encrypting and decrypting, shared by every clone.
    crypto_ns: Arc<AtomicU64>,
}

/// Who wrote a journal's chunks: 16 bytes derived from the pre-shared key alone (the same in
/// every session of that key, and telling nothing of it), so a receiver can hold a resume to
/// the identity that wrote it.
pub type JournalOwner = [u8; 16];

impl fmt::Debug for SessionKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionKeys(<redacted>)")
    }
}

impl SessionKeys {
    /// Derives the session's keys.
    pub fn derive(psk: &Psk, client: &Nonce, server: &Nonce) -> SessionKeys {
        let secret: [u8; 32] = psk
            .mac(SESSION_LABEL, &[client, server])
            .finalize()
            .into_bytes()
            .into();
        SessionKeys {
            control_c2s: blake3::derive_key("zcp/1 control client to server", &secret),
            control_s2c: blake3::derive_key("zcp/1 control server to client", &secret),
            join: blake3::derive_key("zcp/1 data join", &secret),
            chunk: blake3::derive_key("zcp/1 chunk mac", &secret),
            digest: blake3::derive_key("zcp/1 file digest", &secret),
            udp: blake3::derive_key("zcp/1 udp datagram tag", &secret),
            owner: blake3::derive_key("zcp/1 journal owner", &psk.0)[..16]
                .try_into()
                .expect("16 of 32 bytes"),
            cipher: None,
            crypto_ns: Arc::default(),
        }
    }

    /// Derives an encrypted session's keys: those of [`SessionKeys::derive`] (chunk MACs and
    /// digests stay derived from the pre-shared key and nonces alone, so a resume can check a
    /// journal's chunks), plus encryption keys from `E = HMAC-SHA256(psk, "zcp/6 encryption
    /// secret" || client nonce || server nonce || shares || X25519 secret)`.
    pub fn derive_encrypted(
        psk: &Psk,
        (client, server): (&Nonce, &Nonce),
        shares: &[u8],
        agreed: &[u8; 32],
    ) -> SessionKeys {
        let secret: [u8; 32] = psk
            .mac(ENCRYPTION_LABEL, &[client, server, shares, agreed])
            .finalize()
            .into_bytes()
            .into();
        SessionKeys {
            cipher: Some(CipherKeys {
                control_c2s: blake3::derive_key(
                    "zcp/6 encrypted control client to server",
                    &secret,
                ),
                control_s2c: blake3::derive_key(
                    "zcp/6 encrypted control server to client",
                    &secret,
                ),
                data: blake3::derive_key("zcp/6 data stream", &secret),
                side: blake3::derive_key("zcp/6 udp side channel", &secret),
                datagram: blake3::derive_key("zcp/6 udp datagram", &secret),
            }),
            ..SessionKeys::derive(psk, client, server)
        }
    }

    /// Whether the session is encrypted.
    pub fn encrypted(&self) -> bool {
        self.cipher.is_some()
    }

    /// The key of data stream `stream`, opened with `salt` (the stream's first bytes, drawn
    /// at random by its sender): `BLAKE3-keyed(key_data, stream:u16 || salt)`. A data stream
    /// carries records one way only (its receiver never sends on it), so one data key serves
    /// both directions; the salt makes every stream connection's key its own. `None` in a
    /// session without encryption.
    pub fn stream_key(&self, stream: u16, salt: &[u8; SALT_LEN]) -> Option<StreamKey> {
        let c = self.cipher.as_ref()?;
        Some(per_stream(&c.data, &[], stream, salt))
    }

    /// The key of one direction of UDP stream `stream`'s side channel (its data
    /// connection, which carries frames both ways), opened with `salt` (drawn at random by
    /// the side that writes with it): `BLAKE3-keyed(key_side, direction || stream:u16 ||
    /// salt)`, the direction 0 from the sender of the data, 1 from its receiver. The
    /// direction keeps a side from ever opening its own records reflected back at it, even
    /// under a copied salt. `None` in a session without encryption.
    pub fn side_key(
        &self,
        stream: u16,
        from_sender: bool,
        salt: &[u8; SALT_LEN],
    ) -> Option<StreamKey> {
        let c = self.cipher.as_ref()?;
        Some(per_stream(&c.side, &[u8::from(!from_sender)], stream, salt))
    }

    /// The key of UDP stream `stream`'s datagrams, which only its sender seals:
    /// `BLAKE3-keyed(key_datagram, stream:u16 || salt)`, `salt` the one the sender's side
    /// channel opened with. `None` in a session without encryption.
    pub fn datagram_key(&self, stream: u16, salt: &[u8; SALT_LEN]) -> Option<StreamKey> {
        let c = self.cipher.as_ref()?;
        Some(per_stream(&c.datagram, &[], stream, salt))
    }

    /// Counts time spent encrypting or decrypting (the caller measures it: this crate reads
    /// no clock).
    pub fn add_crypto_time(&self, d: std::time::Duration) {
        let ns = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        self.crypto_ns.fetch_add(ns, Ordering::Relaxed);
    }

    /// Time this side spent encrypting and decrypting so far, in every clone of these keys.
    pub fn crypto_time(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(self.crypto_ns.load(Ordering::Relaxed))
    }

    /// The owner a resume journal records for the sessions of this key: a write-only
    /// identity resumes only part files whose every session was its own.
    pub fn journal_owner(&self) -> JournalOwner {
        self.owner
    }

    /// The proof a data connection sends: an HMAC over the session id, stream index and both
    /// of this connection's nonces under the session's join key. A fresh server nonce per
    /// connection makes a captured proof useless on another connection.
    pub fn join_proof(
        &self,
        session: &SessionId,
        stream: u16,
        client: &Nonce,
        server: &Nonce,
    ) -> [u8; 32] {
        self.join_mac(session, stream, client, server)
            .finalize()
            .into_bytes()
            .into()
    }

    /// Checks a join proof in constant time.
    pub fn verify_join(
        &self,
        session: &SessionId,
        stream: u16,
        client: &Nonce,
        server: &Nonce,
        proof: &[u8],
    ) -> bool {
        self.join_mac(session, stream, client, server)
            .verify_slice(proof)
            .is_ok()
    }

    fn join_mac(
        &self,
        session: &SessionId,
        stream: u16,
        client: &Nonce,
        server: &Nonce,
    ) -> HmacSha256 {
        let mut m = HmacSha256::new_from_slice(&self.join).expect("any key length");
        m.update(JOIN_LABEL);
        m.update(session);
        m.update(&stream.to_be_bytes());
        m.update(client);
        m.update(server);
        m
    }

    /// The 8-byte tag every UDP datagram of this session carries (`--transport udp`): a
    /// datagram without it is dropped before its payload is looked at. Not a MAC (the chunk
    /// MAC proves the bytes); a filter against stray datagrams and other sessions'.
    pub fn udp_tag(&self) -> [u8; 8] {
        self.udp[..8].try_into().expect("8 of 32 bytes")
    }

    /// The hasher of one chunk, bound to the chunk's file, offset and length. Feed it the
    /// chunk's bytes, in order, and finalize: the chunk's MAC (a keyed BLAKE3 over its place
    /// and the plain BLAKE3 chaining value of its bytes) and that chaining value, from one
    /// pass ([`crate::proof`]).
    pub fn chunk_hasher(&self, file_id: u32, offset: u64, len: u64) -> ChunkHasher {
        let mut h = blake3::Hasher::new_keyed(&self.chunk);
        h.update(&file_id.to_be_bytes());
        h.update(&offset.to_be_bytes());
        h.update(&len.to_be_bytes());
        ChunkHasher::new(h, offset, len)
    }

    /// Starts the whole-file digest; see [`FileDigest`].
    pub fn file_digest(&self, file_id: u32, size: u64, chunk_size: u64) -> FileDigest {
        let mut h = blake3::Hasher::new_keyed(&self.digest);
        h.update(&file_id.to_be_bytes());
        h.update(&size.to_be_bytes());
        h.update(&chunk_size.to_be_bytes());
        FileDigest(h)
    }
}

/// `BLAKE3-keyed(key, prefix || stream:u16 || salt)`: a per-stream key under one of the
/// session's keys.
fn per_stream(key: &[u8; 32], prefix: &[u8], stream: u16, salt: &[u8; SALT_LEN]) -> StreamKey {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(prefix);
    h.update(&stream.to_be_bytes());
    h.update(salt);
    StreamKey(*h.finalize().as_bytes())
}

/// The whole-file digest: a keyed BLAKE3 over the file's size, its chunk size and its chunk
/// MACs in chunk order. Both sides compute it from their own MACs, so equal digests mean every
/// chunk matched and none was missing or reordered.
#[derive(Debug, Clone)]
pub struct FileDigest(blake3::Hasher);

impl FileDigest {
    /// Adds the next chunk's MAC.
    pub fn push(&mut self, mac: &[u8; 32]) {
        self.0.update(mac);
    }

    /// The digest.
    pub fn finish(&self) -> [u8; 32] {
        *self.0.finalize().as_bytes()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn psk(b: u8) -> Psk {
        let mut k = [b; 32];
        k[0] ^= 1;
        Psk::from_bytes(k)
    }

    #[test]
    fn key_file_round_trips_and_refuses_junk() {
        let k = psk(7);
        assert_eq!(Psk::parse(&k.to_file_text()).unwrap(), k);
        assert_eq!(Psk::parse("# only a comment\n\n"), Err(KeyError::Empty));
        assert_eq!(Psk::parse("abcd"), Err(KeyError::BadLength { found: 4 }));
        assert_eq!(Psk::parse(&"zz".repeat(32)), Err(KeyError::NotHex));
        assert_eq!(Psk::parse(&"00".repeat(32)), Err(KeyError::Trivial(0)));
        assert!(
            !format!("{k:?}").contains("06"),
            "Debug must not print key bytes"
        );
    }

    #[test]
    fn proofs_depend_on_key_role_and_nonces() {
        let (a, b) = ([1u8; 32], [2u8; 32]);
        let p = server_proof(&psk(9), &a, &b, &[]);
        assert!(verify_server_proof(&psk(9), (&a, &b), &[], &p));
        assert!(!verify_server_proof(&psk(8), (&a, &b), &[], &p));
        assert!(!verify_server_proof(&psk(9), (&b, &a), &[], &p));
        // A server proof is no client proof: no reflection.
        assert!(!verify_client_proof(&psk(9), (&a, &b), &[], &p));
        assert!(!verify_server_proof(&psk(9), (&a, &b), &[], &p[..31]));
        // Key shares are part of what is proven: stripped or swapped, the proof fails.
        let q = server_proof(&psk(9), &a, &b, &[3; 64]);
        assert!(verify_server_proof(&psk(9), (&a, &b), &[3; 64], &q));
        assert!(!verify_server_proof(&psk(9), (&a, &b), &[], &q));
        assert!(!verify_server_proof(&psk(9), (&a, &b), &[4; 64], &q));
    }

    #[test]
    fn join_proof_binds_session_stream_and_nonces() {
        let keys = SessionKeys::derive(&psk(3), &[1; 32], &[2; 32]);
        let sid = [5u8; 16];
        let p = keys.join_proof(&sid, 2, &[7; 32], &[8; 32]);
        assert!(keys.verify_join(&sid, 2, &[7; 32], &[8; 32], &p));
        assert!(!keys.verify_join(&sid, 3, &[7; 32], &[8; 32], &p));
        assert!(!keys.verify_join(&[6; 16], 2, &[7; 32], &[8; 32], &p));
        assert!(!keys.verify_join(&sid, 2, &[7; 32], &[9; 32], &p));
        let other = SessionKeys::derive(&psk(3), &[1; 32], &[3; 32]);
        assert!(!other.verify_join(&sid, 2, &[7; 32], &[8; 32], &p));
    }

    fn c_data(k: &SessionKeys) -> [u8; 32] {
        k.cipher.as_ref().unwrap().data
    }

    #[test]
    fn encrypted_keys_keep_the_proof_keys_and_split_streams() {
        let plain = SessionKeys::derive(&psk(3), &[1; 32], &[2; 32]);
        let enc = SessionKeys::derive_encrypted(&psk(3), (&[1; 32], &[2; 32]), &[5; 64], &[6; 32]);
        assert!(!plain.encrypted() && enc.encrypted());
        // Chunk MACs are the same: a resume checks a journal written by either.
        let mac = |k: &SessionKeys| {
            let mut h = k.chunk_hasher(0, 0, 4);
            h.update(b"data");
            *h.finalize().as_bytes()
        };
        assert_eq!(mac(&plain), mac(&enc));
        assert!(plain.stream_key(0, &[0; 32]).is_none());
        let key = |stream, salt: u8| enc.stream_key(stream, &[salt; 32]).unwrap().0;
        let other =
            SessionKeys::derive_encrypted(&psk(3), (&[1; 32], &[2; 32]), &[5; 64], &[7; 32]);
        assert_ne!(key(0, 1), key(1, 1));
        assert_ne!(key(0, 1), key(0, 2));
        assert_ne!(key(0, 1), other.stream_key(0, &[1; 32]).unwrap().0);
        assert_ne!(key(0, 1), c_data(&enc));
        // UDP: each direction of a side channel, and the datagrams, have their own keys.
        let side = |from_sender| enc.side_key(0, from_sender, &[1; 32]).unwrap().0;
        let datagram = enc.datagram_key(0, &[1; 32]).unwrap().0;
        assert_ne!(side(true), side(false));
        for k in [side(true), side(false), datagram] {
            assert_ne!(k, key(0, 1));
        }
        assert_ne!(side(true), datagram);
        assert_ne!(datagram, enc.datagram_key(1, &[1; 32]).unwrap().0);
        assert!(plain.side_key(0, true, &[1; 32]).is_none());
        assert!(plain.datagram_key(0, &[1; 32]).is_none());
        let c = enc.cipher.as_ref().unwrap();
        // Each is the construction PROTOCOL.md gives, byte for byte.
        let keyed = |key: &[u8; 32], parts: &[&[u8]]| {
            let mut h = blake3::Hasher::new_keyed(key);
            for p in parts {
                h.update(p);
            }
            *h.finalize().as_bytes()
        };
        let (s7, salt) = (7u16.to_be_bytes(), [9u8; 32]);
        assert_eq!(
            enc.stream_key(7, &salt).unwrap().0,
            keyed(&c.data, &[&s7, &salt])
        );
        let sender = enc.side_key(7, true, &salt).unwrap().0;
        assert_eq!(sender, keyed(&c.side, &[&[0], &s7, &salt]));
        let receiver = enc.side_key(7, false, &salt).unwrap().0;
        assert_eq!(receiver, keyed(&c.side, &[&[1], &s7, &salt]));
        let datagram = enc.datagram_key(7, &salt).unwrap().0;
        assert_eq!(datagram, keyed(&c.datagram, &[&s7, &salt]));
        assert_ne!(c.control_c2s, c.control_s2c);
        assert_ne!(c.control_c2s, c.data);
        assert_ne!(c.control_c2s, plain.control_c2s);
        // The time counter is shared by clones.
        enc.clone()
            .add_crypto_time(std::time::Duration::from_millis(3));
        assert_eq!(enc.crypto_time(), std::time::Duration::from_millis(3));
    }

    #[test]
    fn chunk_mac_binds_position() {
        let keys = SessionKeys::derive(&psk(3), &[1; 32], &[2; 32]);
        let mac = |f, o, l| {
            let mut h = keys.chunk_hasher(f, o, l);
            h.update(b"data");
            *h.finalize().as_bytes()
        };
        assert_ne!(mac(0, 0, 4), mac(0, 4096, 4));
        assert_ne!(mac(0, 0, 4), mac(1, 0, 4));
        assert_eq!(mac(0, 0, 4), mac(0, 0, 4));
    }
}
