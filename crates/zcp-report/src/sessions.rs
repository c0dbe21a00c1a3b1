//! What a server's reporters remember of each running session: a session's later events name
//! only its id, so the peer, identity, export, direction and engines come from its
//! [`ServerEvent::SessionStart`] and [`ServerEvent::Engines`], kept until its
//! [`ServerEvent::SessionEnd`]. Shared by the log ([`crate::ServerLog`], [`crate::ServerTrace`])
//! and the transfer log ([`crate::TransferLog`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;

use zcp_engine::sync::Locked;
use zcp_session::ServerEvent;

/// What is known of one running session.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionInfo {
    /// Who connected.
    pub peer: SocketAddr,
    /// `push` or `pull`.
    pub direction: &'static str,
    /// The identity whose key the client holds.
    pub identity: String,
    /// The export the session uses.
    pub export: String,
    /// The sending and the receiving side's engines, once known.
    pub engines: Option<(String, String)>,
}

/// Sessions remembered at most (a server runs far fewer at once): beyond it a session's
/// lines simply do not name its peer, and memory stays bounded whatever clients do.
pub const MAX_REMEMBERED: usize = 4096;

/// The running sessions, by id; safe to share between threads.
#[derive(Debug, Default)]
pub struct Sessions(Mutex<HashMap<String, SessionInfo>>);

impl Sessions {
    /// Takes `event` into account and returns what is known of the session it concerns (as
    /// of this event: a `SessionEnd` still finds its session, which is then forgotten).
    pub fn observe(&self, event: &ServerEvent) -> Option<SessionInfo> {
        let mut known = self.0.locked();
        match event {
            ServerEvent::SessionStart {
                peer,
                session,
                direction,
                identity,
                export,
                ..
            } => {
                if known.len() < MAX_REMEMBERED || known.contains_key(session) {
                    known.insert(
                        session.clone(),
                        SessionInfo {
                            peer: *peer,
                            direction,
                            identity: identity.clone(),
                            export: export.clone(),
                            engines: None,
                        },
                    );
                }
                known.get(session).cloned()
            }
            ServerEvent::Engines {
                session,
                sender,
                receiver,
            } => {
                let info = known.get_mut(session)?;
                info.engines = Some((sender.clone(), receiver.clone()));
                Some(info.clone())
            }
            ServerEvent::SessionEnd { session, .. } => known.remove(session),
            ServerEvent::FileDone { session, .. }
            | ServerEvent::Progress { session, .. }
            | ServerEvent::FileFailed { session, .. }
            | ServerEvent::Note { session, .. } => known.get(session).cloned(),
            ServerEvent::Listening { .. }
            | ServerEvent::Stopping { .. }
            | ServerEvent::Leftovers { .. }
            | ServerEvent::Rejected { .. }
            | ServerEvent::SessionRefused { .. }
            | ServerEvent::Shed { .. }
            | ServerEvent::Reloaded { .. } => None,
        }
    }

    /// How many sessions are remembered now.
    pub fn len(&self) -> usize {
        self.0.locked().len()
    }

    /// Whether no session is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start(id: &str) -> ServerEvent {
        ServerEvent::SessionStart {
            peer: "127.0.0.1:4000".parse().unwrap(),
            session: id.into(),
            direction: "push",
            streams: 2,
            identity: "lab".into(),
            export: "incoming".into(),
        }
    }

    fn end(id: &str) -> ServerEvent {
        ServerEvent::SessionEnd {
            session: id.into(),
            ok: true,
            reason: None,
            files: 0,
            bytes: 0,
            seconds: 0.0,
            resent_chunks: 0,
            failed: 0,
            left: 0,
            deleted: 0,
        }
    }

    #[test]
    fn a_session_is_known_from_its_start_to_its_end_with_its_engines() {
        let s = Sessions::default();
        assert_eq!(s.observe(&start("a")).unwrap().identity, "lab");
        let e = s.observe(&ServerEvent::Engines {
            session: "a".into(),
            sender: "sendfile".into(),
            receiver: "splice".into(),
        });
        assert_eq!(
            e.unwrap().engines,
            Some(("sendfile".into(), "splice".into()))
        );
        let note = ServerEvent::Note {
            session: "a".into(),
            message: "x".into(),
        };
        assert_eq!(s.observe(&note).unwrap().export, "incoming");
        let last = s.observe(&end("a")).unwrap();
        assert_eq!(last.engines.unwrap().1, "splice");
        assert!(s.observe(&note).is_none());
        assert!(s.is_empty());
    }

    #[test]
    fn the_map_stays_bounded() {
        let s = Sessions::default();
        for i in 0..MAX_REMEMBERED + 10 {
            s.observe(&start(&i.to_string()));
        }
        assert_eq!(s.len(), MAX_REMEMBERED);
        assert!(s.observe(&end(&(MAX_REMEMBERED + 5).to_string())).is_none());
        s.observe(&end("0"));
        assert!(s.observe(&start("new")).is_some());
    }
}
