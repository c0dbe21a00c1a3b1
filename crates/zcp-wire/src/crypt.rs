//! Encryption (`--encrypt`): the X25519 key agreement inside the handshake, AES-256-GCM for
//! control frames ([`crate::Sealer`]) and the record layer of encrypted data streams.
//!
//! A data stream of an encrypted session starts with a 32-byte salt the sending side draws
//! at random, then carries records: a 4-byte big-endian length `n` (1 to [`RECORD_MAX`]), `n`
//! bytes of ciphertext and a 16-byte tag. The plaintext of the records, end to end, is
//! exactly what the stream carries unencrypted (chunk headers, extent tables, bytes). Each
//! stream has its own key, `BLAKE3-keyed(key_data_dir, stream || salt)`; a record's nonce is
//! its index on the stream and its associated data its length prefix, so a record that is
//! altered, dropped, reordered, replayed, or taken from another stream, direction or session
//! fails to open. Nothing here reads a clock or a random source: salts and key-share secrets
//! come from the caller.

use aws_lc_rs::aead::{AES_256_GCM, Aad, LessSafeKey, Nonce as AeadNonce, UnboundKey};
use aws_lc_rs::agreement::{PrivateKey, UnparsedPublicKey, X25519, agree};

use crate::DecodeError;
use crate::udp::{DATAGRAM_HEADER_LEN, DatagramHeader};

/// Length of an X25519 key share (public key) in a `Hello` or `Challenge`.
pub const SHARE_LEN: usize = 32;
/// A key share: an X25519 public key.
pub type KeyShare = [u8; SHARE_LEN];
/// Length of an AES-GCM tag.
pub const AEAD_TAG_LEN: usize = 16;
/// The cipher, as reports name it.
pub const CIPHER_NAME: &str = "AES-256-GCM";
/// The key agreement, as reports name it.
pub const KEY_EXCHANGE_NAME: &str = "X25519";
/// Largest plaintext of one data-stream record.
pub const RECORD_MAX: usize = 256 * 1024;
/// Length of a record's length prefix.
pub const RECORD_PREFIX: usize = 4;
/// Length of the salt that opens an encrypted data stream.
pub const SALT_LEN: usize = 32;

/// Why something failed to decrypt or agree.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CryptError {
    /// The tag does not match: altered, replayed, reordered, or under another key.
    #[error("encrypted record failed authentication (altered, replayed or from another stream)")]
    BadTag,
    /// The peer's key share is not a usable X25519 public key.
    #[error("the peer's key share is not a usable X25519 public key")]
    BadShare,
    /// The record's length prefix is out of bounds.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// A stream sealed so many records that the nonce would repeat.
    #[error("the stream's record counter is exhausted")]
    Exhausted,
}

/// One side's ephemeral X25519 key for one handshake, made from 32 random bytes the caller
/// supplies (so this crate reads no random source). Used once, then dropped.
pub struct Ephemeral {
    key: PrivateKey,
    share: KeyShare,
}

impl std::fmt::Debug for Ephemeral {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ephemeral(<redacted>)")
    }
}

impl Ephemeral {
    /// The key for `secret` (fresh random bytes, used for this handshake only).
    pub fn new(secret: [u8; 32]) -> Ephemeral {
        let key = PrivateKey::from_private_key(&X25519, &secret)
            .expect("X25519 takes any 32 bytes as a private key");
        let share = key
            .compute_public_key()
            .expect("an X25519 key has a public key")
            .as_ref()
            .try_into()
            .expect("an X25519 public key is 32 bytes");
        Ephemeral { key, share }
    }

    /// The public share to send.
    pub fn share(&self) -> KeyShare {
        self.share
    }

    /// The shared secret with the peer's share. A share that yields no secret (a low-order
    /// point, whose result is all zeros) is refused.
    pub fn agree(self, peer: &KeyShare) -> Result<[u8; 32], CryptError> {
        let secret: [u8; 32] = agree(
            &self.key,
            UnparsedPublicKey::new(&X25519, peer),
            CryptError::BadShare,
            |k| k.try_into().map_err(|_| CryptError::BadShare),
        )?;
        if secret == [0; 32] {
            return Err(CryptError::BadShare);
        }
        Ok(secret)
    }
}

/// An AES-256-GCM key whose nonces are a counter: `4 zero bytes || counter:u64`.
pub(crate) struct Aead(LessSafeKey);

impl Aead {
    pub(crate) fn new(key: &[u8; 32]) -> Aead {
        Aead(LessSafeKey::new(
            UnboundKey::new(&AES_256_GCM, key).expect("a 32-byte AES-256 key"),
        ))
    }

    fn nonce(counter: u64) -> AeadNonce {
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&counter.to_be_bytes());
        AeadNonce::assume_unique_for_key(n)
    }

    /// Encrypts `buf` in place; returns its tag. Each counter is used once per key.
    pub(crate) fn seal(&self, counter: u64, aad: &[u8], buf: &mut [u8]) -> [u8; AEAD_TAG_LEN] {
        let tag = self
            .0
            .seal_in_place_separate_tag(Self::nonce(counter), Aad::from(aad), buf)
            .expect("AES-GCM seals any length this crate uses");
        tag.as_ref().try_into().expect("a 16-byte tag")
    }

    /// Decrypts `buf` in place if `tag` matches.
    pub(crate) fn open(
        &self,
        counter: u64,
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8],
    ) -> Result<(), CryptError> {
        self.0
            .open_in_place_separate_tag(Self::nonce(counter), Aad::from(aad), tag, buf)
            .map(|_| ())
            .map_err(|_| CryptError::BadTag)
    }
}

impl std::fmt::Debug for Aead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Aead(<redacted>)")
    }
}

/// The key of one data stream in one direction ([`crate::SessionKeys::stream_key`]).
pub struct StreamKey(pub(crate) [u8; 32]);

impl std::fmt::Debug for StreamKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StreamKey(<redacted>)")
    }
}

/// Seals the records a data stream sends.
#[derive(Debug)]
pub struct RecordSealer {
    aead: Aead,
    counter: u64,
}

impl RecordSealer {
    /// The sealer for a stream's key.
    pub fn new(key: &StreamKey) -> RecordSealer {
        RecordSealer {
            aead: Aead::new(&key.0),
            counter: 0,
        }
    }

    /// Seals a record in place. `record` is laid out as the wire wants it: [`RECORD_PREFIX`]
    /// bytes for the length, the plaintext (1 to [`RECORD_MAX`] bytes), then
    /// [`AEAD_TAG_LEN`] bytes for the tag; afterwards it is the record to send.
    pub fn seal(&mut self, record: &mut [u8]) -> Result<(), CryptError> {
        let n = record.len() - RECORD_PREFIX - AEAD_TAG_LEN;
        assert!((1..=RECORD_MAX).contains(&n), "record of {n} bytes");
        if self.counter == u64::MAX {
            return Err(CryptError::Exhausted);
        }
        let prefix = (n as u32).to_be_bytes();
        record[..RECORD_PREFIX].copy_from_slice(&prefix);
        let (body, tag) = record[RECORD_PREFIX..].split_at_mut(n);
        tag.copy_from_slice(&self.aead.seal(self.counter, &prefix, body));
        self.counter += 1;
        Ok(())
    }
}

/// Opens the records a data stream receives, in order.
#[derive(Debug)]
pub struct RecordOpener {
    aead: Aead,
    counter: u64,
}

impl RecordOpener {
    /// The opener for a stream's key.
    pub fn new(key: &StreamKey) -> RecordOpener {
        RecordOpener {
            aead: Aead::new(&key.0),
            counter: 0,
        }
    }

    /// The plaintext length a record's prefix announces, bounded before anything is read:
    /// the caller then reads that many bytes and the tag.
    pub fn record_len(prefix: [u8; RECORD_PREFIX]) -> Result<usize, CryptError> {
        let n = u32::from_be_bytes(prefix) as usize;
        if n == 0 || n > RECORD_MAX {
            return Err(CryptError::Decode(DecodeError::Malformed(format!(
                "encrypted record of {n} bytes (1 to {RECORD_MAX} allowed)"
            ))));
        }
        Ok(n)
    }

    /// Opens the next record: `body` is its ciphertext followed by its tag, decrypted in
    /// place; returns the plaintext length. A failure leaves the stream unusable.
    pub fn open(
        &mut self,
        prefix: [u8; RECORD_PREFIX],
        body: &mut [u8],
    ) -> Result<usize, CryptError> {
        let n = Self::record_len(prefix)?;
        if body.len() != n + AEAD_TAG_LEN {
            return Err(CryptError::BadTag);
        }
        if self.counter == u64::MAX {
            return Err(CryptError::Exhausted);
        }
        let (text, tag) = body.split_at_mut(n);
        self.aead.open(self.counter, &prefix, text, tag)?;
        self.counter += 1;
        Ok(n)
    }
}

/// Seals the datagrams of one UDP stream ([`crate::SessionKeys::datagram_key`]). Each
/// datagram, a first send or a re-send alike, takes the next sequence number as its nonce
/// and carries it in its header's first 8 bytes, in place of the session tag; the whole
/// header is its associated data, so its file, offset, length and flags cannot be changed.
#[derive(Debug)]
pub struct DatagramSealer {
    aead: Aead,
    next: u64,
}

impl DatagramSealer {
    /// The sealer for a stream's datagram key.
    pub fn new(key: &StreamKey) -> DatagramSealer {
        DatagramSealer {
            aead: Aead::new(&key.0),
            next: 0,
        }
    }

    /// Seals `payload` (header `h`'s bytes) in place: returns the header to send (its tag
    /// field now the datagram's sequence number) and the AEAD tag that follows the payload.
    pub fn seal(
        &mut self,
        mut h: DatagramHeader,
        payload: &mut [u8],
    ) -> Result<([u8; DATAGRAM_HEADER_LEN], [u8; AEAD_TAG_LEN]), CryptError> {
        if self.next == u64::MAX {
            return Err(CryptError::Exhausted);
        }
        debug_assert_eq!(usize::from(h.len), payload.len());
        h.tag = self.next.to_be_bytes();
        let head = h.encode();
        let tag = self.aead.seal(self.next, &head, payload);
        self.next += 1;
        Ok((head, tag))
    }
}

/// Opens the datagrams of one UDP stream, in any order (datagrams are lost, reordered and
/// re-sent; a replayed one carries what its first copy did, at the place its header names).
#[derive(Debug)]
pub struct DatagramOpener {
    aead: Aead,
}

impl DatagramOpener {
    /// The opener for a stream's datagram key.
    pub fn new(key: &StreamKey) -> DatagramOpener {
        DatagramOpener {
            aead: Aead::new(&key.0),
        }
    }

    /// Opens a whole datagram `d` in place: its header (checked as
    /// [`DatagramHeader::decode_sealed`] checks) if the tag matches; the plaintext payload is
    /// then `d[DATAGRAM_HEADER_LEN..][..header.len]`.
    pub fn open(&self, d: &mut [u8]) -> Result<DatagramHeader, CryptError> {
        let h = DatagramHeader::decode_sealed(d).map_err(CryptError::Decode)?;
        let (head, rest) = d.split_at_mut(DATAGRAM_HEADER_LEN);
        let (payload, tag) = rest.split_at_mut(usize::from(h.len));
        self.aead
            .open(u64::from_be_bytes(h.tag), head, payload, tag)?;
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(plain: &[u8]) -> Vec<u8> {
        let mut r = vec![0u8; RECORD_PREFIX];
        r.extend_from_slice(plain);
        r.extend_from_slice(&[0; AEAD_TAG_LEN]);
        r
    }

    fn open(o: &mut RecordOpener, r: &[u8]) -> Result<Vec<u8>, CryptError> {
        let prefix = r[..RECORD_PREFIX].try_into().unwrap();
        let mut body = r[RECORD_PREFIX..].to_vec();
        let n = o.open(prefix, &mut body)?;
        Ok(body[..n].to_vec())
    }

    #[test]
    fn agreement_matches_and_refuses_low_order_shares() {
        let (a, b) = (Ephemeral::new([1; 32]), Ephemeral::new([2; 32]));
        let (sa, sb) = (a.share(), b.share());
        assert_ne!(sa, sb);
        assert_eq!(a.agree(&sb).unwrap(), b.agree(&sa).unwrap());
        // The all-zero point has low order: no secret.
        assert!(Ephemeral::new([3; 32]).agree(&[0; 32]).is_err());
    }

    #[test]
    fn records_round_trip_in_order_only() {
        let key = StreamKey([9; 32]);
        let mut s = RecordSealer::new(&key);
        let mut one = record(b"first record");
        s.seal(&mut one).unwrap();
        let mut two = record(b"second");
        s.seal(&mut two).unwrap();
        assert!(
            !one.windows(5).any(|w| w == b"first"),
            "ciphertext hides the text"
        );

        let mut o = RecordOpener::new(&key);
        assert_eq!(open(&mut o, &one).unwrap(), b"first record");
        // Replayed where the second is due.
        assert_eq!(open(&mut o, &one), Err(CryptError::BadTag));
        let mut o = RecordOpener::new(&key);
        // Reordered.
        assert_eq!(open(&mut o, &two), Err(CryptError::BadTag));
        // Another stream's key.
        let mut o = RecordOpener::new(&StreamKey([8; 32]));
        assert_eq!(open(&mut o, &one), Err(CryptError::BadTag));
        // A flipped byte in the ciphertext, in the tag, or in the length.
        for at in [RECORD_PREFIX, one.len() - 1] {
            let mut bad = one.clone();
            bad[at] ^= 1;
            let mut o = RecordOpener::new(&key);
            assert_eq!(open(&mut o, &bad), Err(CryptError::BadTag), "byte {at}");
        }
        let mut bad = one.clone();
        bad[3] ^= 1;
        bad.pop();
        let mut o = RecordOpener::new(&key);
        assert_eq!(open(&mut o, &bad), Err(CryptError::BadTag));
    }

    fn datagram(s: &mut DatagramSealer, offset: u64, text: &[u8]) -> Vec<u8> {
        let h = DatagramHeader {
            tag: [0; 8],
            file_id: 3,
            flags: 0,
            len: text.len() as u16,
            offset,
            sent_us: 9,
        };
        let mut body = text.to_vec();
        let (head, tag) = s.seal(h, &mut body).unwrap();
        [&head[..], &body, &tag].concat()
    }

    #[test]
    fn datagrams_open_in_any_order_and_only_as_sealed() {
        let key = StreamKey([4; 32]);
        let mut s = DatagramSealer::new(&key);
        let (one, two) = (
            datagram(&mut s, 0, b"first gram"),
            datagram(&mut s, 10, b"second"),
        );
        // Each took the next sequence number, and hides its text.
        assert_eq!(one[..8], 0u64.to_be_bytes());
        assert_eq!(two[..8], 1u64.to_be_bytes());
        assert!(!one.windows(5).any(|w| w == b"first"));
        let o = DatagramOpener::new(&key);
        for (d, text, offset) in [(&two, &b"second"[..], 10), (&one, b"first gram", 0)] {
            let mut d = d.clone();
            let h = o.open(&mut d).unwrap();
            assert_eq!((h.offset, h.file_id), (offset, 3));
            assert_eq!(&d[DATAGRAM_HEADER_LEN..][..text.len()], text);
        }
        // A flipped byte anywhere (header, payload, tag), another stream's key, a
        // truncated datagram: refused.
        for at in [0, 11, 16, DATAGRAM_HEADER_LEN, one.len() - 1] {
            let mut bad = one.clone();
            bad[at] ^= 1;
            assert!(o.open(&mut bad).is_err(), "byte {at}");
        }
        assert!(
            DatagramOpener::new(&StreamKey([5; 32]))
                .open(&mut one.clone())
                .is_err()
        );
        assert!(o.open(&mut one[..one.len() - 1].to_vec()).is_err());
        assert!(o.open(&mut one[..20].to_vec()).is_err());
    }

    #[test]
    fn record_lengths_are_bounded() {
        assert!(RecordOpener::record_len([0; 4]).is_err());
        assert!(RecordOpener::record_len((RECORD_MAX as u32 + 1).to_be_bytes()).is_err());
        assert_eq!(
            RecordOpener::record_len((RECORD_MAX as u32).to_be_bytes()).unwrap(),
            RECORD_MAX
        );
    }
}
