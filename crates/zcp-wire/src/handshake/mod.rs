//! The handshake as typestate machines: each state is a value, each transition consumes it and
//! takes the next received message, and returns the reply to send.
//!
//! Control connection (`Sc`, `Ss`: X25519 key shares, present when encrypting):
//! ```text
//! client                                   server
//!   Hello{version, Control, Nc, [Sc]}   ->
//!                                 <-  Challenge{version, Ns, server proof, [Ss]}
//!   (client checks the server proof: a server without the key is refused here)
//!   Proof{client proof}           ->
//!                                 <-  Welcome{session id, max streams}  (sealed)
//! ```
//! Data connection:
//! ```text
//!   Hello{version, Data, Nc}      ->
//!                                 <-  DataChallenge{Ns}
//!   DataJoin{session, stream, MAC_join(session, stream, Nc, Ns)} ->
//!                                 <-  DataAccept, then chunk frames from the client
//! ```
//! No I/O and no clock: the caller reads frames, passes messages in and writes the replies.
//! How long an unauthenticated connection may take is for the server's table of pending
//! handshakes to decide (`zcp_session`'s `server::pending`), on its clock.

use crate::crypt::{Ephemeral, KeyShare};
use crate::message::{FrameHeader, Message, Role};
use crate::seal::{OpenError, Opener, Sealer, Side};
use crate::{ErrorCode, Nonce, PROTOCOL_VERSION, SessionId, SessionKeys, keys};

mod data;
pub use data::{DataAwaitJoin, DataClient, JoinRequest};

/// Why a handshake failed. [`HandshakeError::code`] gives the code to send to the peer.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum HandshakeError {
    /// The peer speaks another protocol version.
    #[error("protocol version mismatch: peer speaks {peer}, this side speaks {ours}")]
    Version {
        /// The peer's version.
        peer: u16,
        /// Ours.
        ours: u16,
    },
    /// The server's proof is wrong: it does not have our key.
    #[error(
        "the server failed to prove it holds the key: the key files differ (wrong --key-file?)"
    )]
    ServerProof,
    /// The client's proof is wrong: it does not have our key.
    #[error("the client failed to prove it holds the key (wrong or missing key file)")]
    ClientProof,
    /// A data connection's join proof is wrong for its session and nonces.
    #[error("data connection proof does not match its session (forged or replayed)")]
    JoinProof,
    /// A message arrived that the current state does not expect.
    #[error("expected {expected}, got {got}")]
    Unexpected {
        /// What the state waits for.
        expected: &'static str,
        /// What came.
        got: &'static str,
    },
    /// The peer sent an `Error` frame.
    #[error("peer refused: {message} ({})", code.name())]
    Refused {
        /// The peer's code.
        code: ErrorCode,
        /// The peer's message.
        message: String,
    },
    /// A sealed frame failed to open.
    #[error(transparent)]
    Open(#[from] OpenError),
    /// The client asked for encryption and the server answered without it.
    #[error(
        "the server answered without encryption, which this side asked for: refused rather than sent in clear (a server older than zcp 0.1 with protocol 6, or someone on the path stripping it)"
    )]
    Downgrade,
    /// The server answered with a key share the client did not ask for.
    #[error("the server sent a key share this side did not ask for")]
    UnaskedShare,
    /// The server requires encryption of this client's identity, and the client did not ask.
    #[error("this server requires encryption: run the client with --encrypt")]
    EncryptionRequired,
    /// A key share that yields no shared secret.
    #[error("the peer's key share is not a usable X25519 public key")]
    BadShare,
}

impl HandshakeError {
    /// The code to report to the peer for this failure.
    pub fn code(&self) -> ErrorCode {
        match self {
            HandshakeError::Version { .. } => ErrorCode::Version,
            HandshakeError::ServerProof
            | HandshakeError::ClientProof
            | HandshakeError::JoinProof
            | HandshakeError::Downgrade
            | HandshakeError::EncryptionRequired => ErrorCode::Auth,
            HandshakeError::Refused { code, .. } => *code,
            HandshakeError::Unexpected { .. }
            | HandshakeError::Open(_)
            | HandshakeError::UnaskedShare
            | HandshakeError::BadShare => ErrorCode::Protocol,
        }
    }
}

/// Refuses a peer speaking another protocol version.
fn same_version(peer: u16) -> Result<(), HandshakeError> {
    match peer == PROTOCOL_VERSION {
        true => Ok(()),
        false => Err(HandshakeError::Version {
            peer,
            ours: PROTOCOL_VERSION,
        }),
    }
}

fn unexpected(expected: &'static str, got: Message) -> HandshakeError {
    match got {
        Message::Error { code, message } => HandshakeError::Refused { code, message },
        other => HandshakeError::Unexpected {
            expected,
            got: other.name(),
        },
    }
}

/// What both ends hold once a control connection is authenticated.
#[derive(Debug)]
pub struct Established {
    /// The session's derived keys.
    pub keys: SessionKeys,
    /// The client's handshake nonce (journals name the session that verified a chunk by its
    /// nonces, so a later session can re-derive its chunk key from the pre-shared key).
    pub client_nonce: Nonce,
    /// The server's handshake nonce.
    pub server_nonce: Nonce,
    /// The session's id.
    pub session_id: SessionId,
    /// Most data streams the server allows.
    pub max_streams: u16,
    /// The server has named exports ([`crate::Open::export`]).
    pub exports: bool,
    /// Seals what this end sends.
    pub sealer: Sealer,
    /// Opens what this end receives.
    pub opener: Opener,
}

/// Client, before it sends `Hello`.
#[derive(Debug)]
pub struct ClientHandshake {
    psk: crate::Psk,
    nonce: Nonce,
    /// The ephemeral key when this side asks for encryption.
    ephemeral: Option<Ephemeral>,
}

/// The transcript of key shares the proofs and the encryption secret cover: empty without
/// encryption, else the client's share then the server's.
fn shares(client: &KeyShare, server: &KeyShare) -> Vec<u8> {
    [client.as_slice(), server.as_slice()].concat()
}

impl ClientHandshake {
    /// Starts a control handshake with a fresh random `nonce`.
    pub fn new(psk: crate::Psk, nonce: Nonce) -> ClientHandshake {
        ClientHandshake {
            psk,
            nonce,
            ephemeral: None,
        }
    }

    /// Asks for encryption, with an ephemeral X25519 key made from `secret` (32 fresh random
    /// bytes, for this handshake only). A server that answers without encryption is then
    /// refused ([`HandshakeError::Downgrade`]).
    pub fn encrypting(self, secret: [u8; 32]) -> ClientHandshake {
        ClientHandshake {
            ephemeral: Some(Ephemeral::new(secret)),
            ..self
        }
    }

    /// The `Hello` to send first.
    pub fn hello(&self) -> Message {
        Message::Hello {
            version: PROTOCOL_VERSION,
            role: Role::Control,
            nonce: self.nonce,
            identity: Some(keys::identity_tag(&self.psk, &self.nonce)),
            share: self.ephemeral.as_ref().map(Ephemeral::share),
        }
    }

    /// Takes the server's `Challenge`; on success returns the `Proof` to send.
    pub fn on_challenge(
        self,
        msg: Message,
    ) -> Result<(Message, ClientAwaitWelcome), HandshakeError> {
        let Message::Challenge {
            version,
            nonce,
            proof,
            share,
        } = msg
        else {
            return Err(unexpected("Challenge", msg));
        };
        same_version(version)?;
        let agreement = match (self.ephemeral, share) {
            (None, None) => None,
            (Some(_), None) => return Err(HandshakeError::Downgrade),
            (None, Some(_)) => return Err(HandshakeError::UnaskedShare),
            (Some(e), Some(theirs)) => Some((shares(&e.share(), &theirs), e, theirs)),
        };
        let transcript = agreement.as_ref().map_or(&[][..], |a| &a.0[..]);
        let nonces = (&self.nonce, &nonce);
        if !keys::verify_server_proof(&self.psk, nonces, transcript, &proof) {
            return Err(HandshakeError::ServerProof);
        }
        let reply = Message::Proof {
            proof: keys::client_proof(&self.psk, &self.nonce, &nonce, transcript),
        };
        let keys = match agreement {
            None => SessionKeys::derive(&self.psk, &self.nonce, &nonce),
            Some((transcript, e, theirs)) => {
                let agreed = e.agree(&theirs).map_err(|_| HandshakeError::BadShare)?;
                SessionKeys::derive_encrypted(&self.psk, nonces, &transcript, &agreed)
            }
        };
        Ok((
            reply,
            ClientAwaitWelcome {
                keys,
                nonces: (self.nonce, nonce),
            },
        ))
    }
}

/// Client, after sending `Proof`.
#[derive(Debug)]
pub struct ClientAwaitWelcome {
    keys: SessionKeys,
    nonces: (Nonce, Nonce),
}

impl ClientAwaitWelcome {
    /// Takes the next frame (sealed `Welcome`, or an `Error`).
    pub fn on_frame(
        self,
        header: FrameHeader,
        payload: &[u8],
    ) -> Result<Established, HandshakeError> {
        let mut opener = Opener::new(&self.keys, Side::Client);
        match opener.open(header, payload)? {
            Message::Welcome {
                session_id,
                max_streams,
                exports,
            } => Ok(Established {
                exports,
                sealer: Sealer::new(&self.keys, Side::Client),
                keys: self.keys,
                client_nonce: self.nonces.0,
                server_nonce: self.nonces.1,
                session_id,
                max_streams,
                opener,
            }),
            other => Err(unexpected("Welcome", other)),
        }
    }
}

/// What a server learns from a connection's `Hello`.
#[derive(Debug)]
pub enum Accepted {
    /// A new session's control connection; send the reply, then wait for its `Proof`.
    Control(ServerAwaitProof),
    /// A data connection; send the reply, then wait for its `DataJoin`.
    Data(DataAwaitJoin),
}

/// What a server brings to a control handshake besides its keys.
pub struct ServerOffer<'a> {
    /// 32 fresh random bytes for this handshake's ephemeral X25519 key, used only if the
    /// session is encrypted. `None`: this server cannot encrypt (it answers without a key
    /// share, which a client that asked refuses).
    pub secret: Option<[u8; 32]>,
    /// Whether the identity with this index in the keys must encrypt: a client that does
    /// not ask is refused before the server proves anything.
    pub required: &'a dyn Fn(usize) -> bool,
}

impl std::fmt::Debug for ServerOffer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServerOffer(<redacted>)")
    }
}

/// Server: takes the first message of a connection and a fresh nonce; returns the next state
/// and the reply to send. The one-key form of [`accept_any`], for a server that cannot
/// encrypt (tests and hand-made peers).
pub fn accept(
    psk: &crate::Psk,
    hello: Message,
    nonce: Nonce,
) -> Result<(Accepted, Message), HandshakeError> {
    let offer = ServerOffer {
        secret: None,
        required: &|_| false,
    };
    accept_any(&[psk], hello, nonce, &offer).map(|(a, m, _)| (a, m))
}

/// Server with several keys: takes the first message of a connection and a fresh nonce;
/// returns the next state, the reply to send, and for a control connection the index in
/// `keys` of the key its `Hello` names ([`keys::identity_tag`]). A tag that matches no key is
/// [`HandshakeError::ClientProof`], answered before the server proves anything.
pub fn accept_any(
    keys: &[&crate::Psk],
    hello: Message,
    nonce: Nonce,
    offer: &ServerOffer<'_>,
) -> Result<(Accepted, Message, Option<usize>), HandshakeError> {
    let Message::Hello {
        version,
        role,
        nonce: client,
        identity,
        share,
    } = hello
    else {
        return Err(unexpected("Hello", hello));
    };
    same_version(version)?;
    Ok(match (role, identity) {
        (Role::Control, Some(tag)) => {
            let i = keys::find_identity(keys, &client, &tag).ok_or(HandshakeError::ClientProof)?;
            let psk = keys[i];
            // The client's share asks for encryption; a server that cannot answers without
            // one (the client refuses that); an identity that must encrypt refuses a client
            // that did not ask, before the server proves anything.
            let agreement = match (share, offer.secret) {
                (Some(theirs), Some(secret)) => {
                    let e = Ephemeral::new(secret);
                    let ours = e.share();
                    let agreed = e.agree(&theirs).map_err(|_| HandshakeError::BadShare)?;
                    Some((shares(&theirs, &ours), ours, agreed))
                }
                (None, _) if (offer.required)(i) => return Err(HandshakeError::EncryptionRequired),
                _ => None,
            };
            let transcript = agreement.as_ref().map_or(&[][..], |a| &a.0[..]);
            let proof = keys::server_proof(psk, &client, &nonce, transcript);
            let share = agreement.as_ref().map(|a| a.1);
            (
                Accepted::Control(ServerAwaitProof {
                    psk: psk.clone(),
                    client,
                    server: nonce,
                    agreement: agreement.map(|(t, _, agreed)| (t, agreed)),
                }),
                Message::Challenge {
                    version: PROTOCOL_VERSION,
                    nonce,
                    proof,
                    share,
                },
                Some(i),
            )
        }
        (Role::Control, None) => {
            return Err(HandshakeError::Unexpected {
                expected: "Hello with an identity tag",
                got: "Hello without one",
            });
        }
        (Role::Data, _) => (
            Accepted::Data(DataAwaitJoin {
                client,
                server: nonce,
            }),
            Message::DataChallenge { nonce },
            None,
        ),
    })
}

/// Server, control connection, after sending `Challenge`.
#[derive(Debug)]
pub struct ServerAwaitProof {
    psk: crate::Psk,
    client: Nonce,
    server: Nonce,
    /// An encrypted session's share transcript and X25519 secret.
    agreement: Option<(Vec<u8>, [u8; 32])>,
}

impl ServerAwaitProof {
    /// Takes the client's `Proof`; on success returns the session and the sealed `Welcome`
    /// frame to send.
    pub fn on_proof(
        self,
        msg: Message,
        session_id: SessionId,
        max_streams: u16,
    ) -> Result<(Established, Vec<u8>), HandshakeError> {
        self.on_proof_with(msg, session_id, max_streams, false)
    }

    /// [`ServerAwaitProof::on_proof`] for a server that says whether it has named exports.
    pub fn on_proof_with(
        self,
        msg: Message,
        session_id: SessionId,
        max_streams: u16,
        exports: bool,
    ) -> Result<(Established, Vec<u8>), HandshakeError> {
        let Message::Proof { proof } = msg else {
            return Err(unexpected("Proof", msg));
        };
        let nonces = (&self.client, &self.server);
        let transcript = self.agreement.as_ref().map_or(&[][..], |a| &a.0[..]);
        if !keys::verify_client_proof(&self.psk, nonces, transcript, &proof) {
            return Err(HandshakeError::ClientProof);
        }
        let keys = match &self.agreement {
            None => SessionKeys::derive(&self.psk, &self.client, &self.server),
            Some((t, agreed)) => SessionKeys::derive_encrypted(&self.psk, nonces, t, agreed),
        };
        let mut sealer = Sealer::new(&keys, Side::Server);
        let welcome = sealer.seal(&Message::Welcome {
            session_id,
            max_streams,
            exports,
        });
        let opener = Opener::new(&keys, Side::Server);
        Ok((
            Established {
                keys,
                client_nonce: self.client,
                server_nonce: self.server,
                session_id,
                max_streams,
                exports,
                sealer,
                opener,
            },
            welcome,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Psk;
    use crate::message::HEADER_LEN;

    fn psk(b: u8) -> Psk {
        let mut k = [b; 32];
        k[0] = 0xAA;
        Psk::from_bytes(k)
    }

    fn split(frame: &[u8]) -> (FrameHeader, &[u8]) {
        let h = FrameHeader::decode(frame[..HEADER_LEN].try_into().unwrap()).unwrap();
        (h, &frame[HEADER_LEN..])
    }

    fn offer(secret: Option<[u8; 32]>, required: bool) -> ServerOffer<'static> {
        ServerOffer {
            secret,
            required: if required { &|_| true } else { &|_| false },
        }
    }

    /// Drives an encrypted control handshake: the client asks when `ask`, the server can
    /// encrypt when `can`, and requires it when `must`.
    fn encrypted(
        ask: bool,
        can: bool,
        must: bool,
    ) -> Result<(Established, Established), HandshakeError> {
        let mut client = ClientHandshake::new(psk(5), [1; 32]);
        if ask {
            client = client.encrypting([3; 32]);
        }
        let server = offer(can.then_some([4; 32]), must);
        let (acc, challenge, _) = accept_any(&[&psk(5)], client.hello(), [2; 32], &server)?;
        let Accepted::Control(await_proof) = acc else {
            panic!("control")
        };
        let (proof, await_welcome) = client.on_challenge(challenge)?;
        let (server, welcome) = await_proof.on_proof(proof, [9; 16], 4)?;
        let (h, p) = split(&welcome);
        Ok((await_welcome.on_frame(h, p)?, server))
    }

    #[test]
    fn encryption_is_agreed_only_when_asked_and_never_dropped() {
        let (mut c, mut s) = encrypted(true, true, false).unwrap();
        assert!(c.keys.encrypted() && s.keys.encrypted());
        let f = c.sealer.seal(&Message::Finish);
        let (h, p) = split(&f);
        assert_eq!(s.opener.open(h, p).unwrap(), Message::Finish);
        // Not asked: in clear, even on a server that could.
        let (c, _) = encrypted(false, true, false).unwrap();
        assert!(!c.keys.encrypted());
        // Asked, and the server cannot: the client refuses rather than go on in clear.
        assert_eq!(
            encrypted(true, false, false).unwrap_err(),
            HandshakeError::Downgrade
        );
        // Required by the server and not asked: refused before the server proves anything.
        let e = encrypted(false, true, true).unwrap_err();
        assert_eq!(e, HandshakeError::EncryptionRequired);
        assert_eq!(e.code(), ErrorCode::Auth);
        assert!(encrypted(true, true, true).unwrap().0.keys.encrypted());
    }

    #[test]
    fn a_share_stripped_or_swapped_on_the_path_fails_the_proofs() {
        let client = ClientHandshake::new(psk(5), [1; 32]).encrypting([3; 32]);
        let Message::Hello {
            version,
            role,
            nonce,
            identity,
            ..
        } = client.hello()
        else {
            panic!()
        };
        // Someone on the path strips the client's share: the server answers in clear, and
        // the client refuses.
        let stripped = Message::Hello {
            version,
            role,
            nonce,
            identity,
            share: None,
        };
        let (_, challenge, _) =
            accept_any(&[&psk(5)], stripped, [2; 32], &offer(Some([4; 32]), false)).unwrap();
        assert_eq!(
            ClientHandshake::new(psk(5), [1; 32])
                .encrypting([3; 32])
                .on_challenge(challenge)
                .unwrap_err(),
            HandshakeError::Downgrade
        );
        // Or swaps it for a share of its own: the server's proof covers the shares it saw.
        let swapped = Message::Hello {
            version,
            role,
            nonce,
            identity,
            share: Some(Ephemeral::new([8; 32]).share()),
        };
        let (_, challenge, _) =
            accept_any(&[&psk(5)], swapped, [2; 32], &offer(Some([4; 32]), false)).unwrap();
        assert_eq!(
            client.on_challenge(challenge).unwrap_err(),
            HandshakeError::ServerProof
        );
    }

    /// Drives a whole control handshake in memory, both sides with their own keys.
    fn control(
        client_key: Psk,
        server_key: Psk,
    ) -> Result<(Established, Established), HandshakeError> {
        let client = ClientHandshake::new(client_key, [1; 32]);
        let (acc, challenge) = accept(&server_key, client.hello(), [2; 32])?;
        let Accepted::Control(await_proof) = acc else {
            panic!("control")
        };
        let (proof, await_welcome) = client.on_challenge(challenge)?;
        let (server, welcome) = await_proof.on_proof(proof, [9; 16], 4)?;
        let (h, p) = split(&welcome);
        let client = await_welcome.on_frame(h, p)?;
        Ok((client, server))
    }

    #[test]
    fn matching_keys_establish_one_session() {
        let (mut c, mut s) = control(psk(5), psk(5)).unwrap();
        assert_eq!(c.session_id, [9; 16]);
        assert_eq!(c.max_streams, 4);
        // Sealed traffic flows both ways after the handshake.
        let f = c.sealer.seal(&Message::Finish);
        let (h, p) = split(&f);
        assert_eq!(s.opener.open(h, p).unwrap(), Message::Finish);
        let f = s.sealer.seal(&Message::Finish);
        let (h, p) = split(&f);
        assert_eq!(c.opener.open(h, p).unwrap(), Message::Finish);
    }

    #[test]
    fn a_server_without_the_key_is_caught_by_the_client() {
        // A server that answers whatever the tag says, proving with a key of its own.
        let client = ClientHandshake::new(psk(5), [1; 32]);
        let challenge = Message::Challenge {
            version: PROTOCOL_VERSION,
            nonce: [2; 32],
            proof: keys::server_proof(&psk(6), &[1; 32], &[2; 32], &[]),
            share: None,
        };
        assert_eq!(
            client.on_challenge(challenge).unwrap_err(),
            HandshakeError::ServerProof
        );
    }

    #[test]
    fn a_tag_that_names_no_key_is_refused_before_the_server_proves_anything() {
        let err = control(psk(5), psk(6)).unwrap_err();
        assert_eq!(err, HandshakeError::ClientProof);
        let hello = ClientHandshake::new(psk(6), [1; 32]).hello();
        assert!(accept_any(&[&psk(1), &psk(2)], hello, [2; 32], &offer(None, false)).is_err());
    }

    #[test]
    fn the_server_finds_the_key_the_client_holds_among_several() {
        let keys = [psk(1), psk(2), psk(3)];
        let refs: Vec<&Psk> = keys.iter().collect();
        for (i, k) in keys.iter().enumerate() {
            let client = ClientHandshake::new(k.clone(), [i as u8; 32]);
            let (acc, challenge, found) =
                accept_any(&refs, client.hello(), [7; 32], &offer(None, false)).unwrap();
            assert_eq!(found, Some(i));
            let Accepted::Control(await_proof) = acc else {
                panic!("control")
            };
            let (proof, await_welcome) = client.on_challenge(challenge).unwrap();
            let (_, welcome) = await_proof.on_proof_with(proof, [9; 16], 4, true).unwrap();
            let (h, p) = split(&welcome);
            assert!(await_welcome.on_frame(h, p).unwrap().exports);
        }
        // A control Hello without a tag (as a hand-made one might be) is refused.
        let bare = Message::Hello {
            version: PROTOCOL_VERSION,
            role: Role::Control,
            nonce: [1; 32],
            identity: None,
            share: None,
        };
        assert!(accept_any(&refs, bare, [7; 32], &offer(None, false)).is_err());
    }

    #[test]
    fn server_refuses_a_client_without_the_key() {
        // A client that names the server's key but cannot prove it (a replayed Hello).
        let (acc, _challenge) = accept(
            &psk(5),
            ClientHandshake::new(psk(5), [1; 32]).hello(),
            [2; 32],
        )
        .unwrap();
        let Accepted::Control(await_proof) = acc else {
            panic!()
        };
        // A client that skips checking the challenge and sends a made-up proof.
        let err = await_proof
            .on_proof(Message::Proof { proof: [0; 32] }, [9; 16], 4)
            .unwrap_err();
        assert_eq!(err, HandshakeError::ClientProof);
        assert_eq!(err.code(), ErrorCode::Auth);
    }

    #[test]
    fn version_mismatch_and_wrong_messages() {
        let bad = Message::Hello {
            version: 99,
            role: Role::Control,
            nonce: [0; 32],
            identity: None,
            share: None,
        };
        assert!(matches!(
            accept(&psk(1), bad, [2; 32]),
            Err(HandshakeError::Version { peer: 99, .. })
        ));
        assert!(matches!(
            accept(&psk(1), Message::Finish, [2; 32]),
            Err(HandshakeError::Unexpected {
                expected: "Hello",
                got: "Finish"
            })
        ));
        // A server speaking another version is refused by the client too.
        let other = Message::Challenge {
            version: 99,
            nonce: [2; 32],
            proof: [0; 32],
            share: None,
        };
        assert!(matches!(
            ClientHandshake::new(psk(1), [1; 32]).on_challenge(other),
            Err(HandshakeError::Version { peer: 99, .. })
        ));
        let client = ClientHandshake::new(psk(1), [1; 32]);
        let refused = Message::Error {
            code: ErrorCode::Busy,
            message: "too many sessions".into(),
        };
        assert!(matches!(
            client.on_challenge(refused),
            Err(HandshakeError::Refused {
                code: ErrorCode::Busy,
                ..
            })
        ));
    }

    #[test]
    fn data_join_verifies_and_replay_fails() {
        let (c, s) = control(psk(5), psk(5)).unwrap();
        let dc = DataClient::new([7; 32]);
        let (acc, challenge) = accept(&psk(5), dc.hello(), [8; 32]).unwrap();
        let Accepted::Data(await_join) = acc else {
            panic!("data")
        };
        let join = dc
            .on_challenge(challenge, &c.keys, c.session_id, 0)
            .unwrap();
        let req = await_join.on_join(join.clone()).unwrap();
        assert_eq!(req.session_id, s.session_id);
        req.verify(&s.keys).unwrap();

        // The same join replayed on a new connection meets a fresh server nonce and fails.
        let (acc, _) = accept(&psk(5), dc.hello(), [10; 32]).unwrap();
        let Accepted::Data(await_join) = acc else {
            panic!()
        };
        let replayed = await_join.on_join(join).unwrap();
        assert_eq!(replayed.verify(&s.keys), Err(HandshakeError::JoinProof));

        // A proof made under another session's keys fails too.
        let (other, _) = control(psk(5), psk(5)).map(|(c, _)| (c, ())).unwrap();
        let foreign_keys = SessionKeys::derive(&psk(5), &[3; 32], &[4; 32]);
        let (acc, challenge) = accept(&psk(5), dc.hello(), [11; 32]).unwrap();
        let Accepted::Data(await_join) = acc else {
            panic!()
        };
        let forged = dc
            .on_challenge(challenge, &foreign_keys, other.session_id, 0)
            .unwrap();
        assert_eq!(
            await_join.on_join(forged).unwrap().verify(&s.keys),
            Err(HandshakeError::JoinProof)
        );
    }
}
