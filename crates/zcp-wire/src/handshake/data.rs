//! The data connection's handshake: the server's `DataAwaitJoin` and the `JoinRequest` it
//! yields (checked against the named session's keys), and the client's `DataClient`.

use super::{HandshakeError, unexpected};
use crate::message::{Message, Role};
use crate::{Nonce, PROTOCOL_VERSION, SessionId, SessionKeys};

/// Server, data connection, after sending `DataChallenge`.
#[derive(Debug)]
pub struct DataAwaitJoin {
    pub(super) client: Nonce,
    pub(super) server: Nonce,
}

impl DataAwaitJoin {
    /// Takes the `DataJoin`. The caller looks the session up by [`JoinRequest::session_id`]
    /// and calls [`JoinRequest::verify`] with its keys before reading any chunk.
    pub fn on_join(self, msg: Message) -> Result<JoinRequest, HandshakeError> {
        let Message::DataJoin {
            session_id,
            stream,
            proof,
        } = msg
        else {
            return Err(unexpected("DataJoin", msg));
        };
        Ok(JoinRequest {
            session_id,
            stream,
            proof,
            client: self.client,
            server: self.server,
        })
    }
}

/// A data connection's claim to belong to a session, not yet checked.
#[derive(Debug)]
pub struct JoinRequest {
    /// The session it names.
    pub session_id: SessionId,
    /// The stream index it claims.
    pub stream: u16,
    proof: [u8; 32],
    client: Nonce,
    server: Nonce,
}

impl JoinRequest {
    /// Checks the proof against the named session's keys.
    pub fn verify(&self, keys: &SessionKeys) -> Result<(), HandshakeError> {
        if keys.verify_join(
            &self.session_id,
            self.stream,
            &self.client,
            &self.server,
            &self.proof,
        ) {
            Ok(())
        } else {
            Err(HandshakeError::JoinProof)
        }
    }
}

/// Client side of a data connection: the `Hello` to send and, given the `DataChallenge`, the
/// `DataJoin`.
#[derive(Debug)]
pub struct DataClient {
    nonce: Nonce,
}

impl DataClient {
    /// Starts a data connection handshake with a fresh random nonce.
    pub fn new(nonce: Nonce) -> DataClient {
        DataClient { nonce }
    }

    /// The `Hello` to send first.
    pub fn hello(&self) -> Message {
        Message::Hello {
            version: PROTOCOL_VERSION,
            role: Role::Data,
            nonce: self.nonce,
            identity: None,
            share: None,
        }
    }

    /// Takes the `DataChallenge`; returns the `DataJoin` to send.
    pub fn on_challenge(
        &self,
        msg: Message,
        keys: &SessionKeys,
        session_id: SessionId,
        stream: u16,
    ) -> Result<Message, HandshakeError> {
        let Message::DataChallenge { nonce } = msg else {
            return Err(unexpected("DataChallenge", msg));
        };
        Ok(Message::DataJoin {
            session_id,
            stream,
            proof: keys.join_proof(&session_id, stream, &self.nonce, &nonce),
        })
    }

    /// Takes the server's answer to the join.
    pub fn on_accept(msg: Message) -> Result<(), HandshakeError> {
        match msg {
            Message::DataAccept => Ok(()),
            other => Err(unexpected("DataAccept", other)),
        }
    }
}
