//! How a session was encrypted, as its summary says.

/// How a session was encrypted, and what the cipher cost each side.
#[derive(Debug, Clone, PartialEq)]
pub struct Encryption {
    /// The cipher of data and control frames.
    pub cipher: &'static str,
    /// The key agreement of each session.
    pub key_exchange: &'static str,
    /// Seconds the sender spent encrypting and decrypting (its own report, when the peer).
    pub sender_seconds: f64,
    /// Seconds the receiver spent so.
    pub receiver_seconds: f64,
}

impl Encryption {
    /// The report of a session under `keys`, where this side sent (`sending`) or received,
    /// and the peer said it spent `peer_us` in the cipher: `None` when it was not encrypted.
    pub(crate) fn of(
        keys: &zcp_wire::SessionKeys,
        sending: bool,
        peer_us: u64,
    ) -> Option<Encryption> {
        let mine = keys.crypto_time().as_secs_f64();
        let theirs = peer_us as f64 / 1e6;
        let (sender_seconds, receiver_seconds) = match sending {
            true => (mine, theirs),
            false => (theirs, mine),
        };
        keys.encrypted().then_some(Encryption {
            cipher: zcp_wire::crypt::CIPHER_NAME,
            key_exchange: zcp_wire::crypt::KEY_EXCHANGE_NAME,
            sender_seconds,
            receiver_seconds,
        })
    }
}
