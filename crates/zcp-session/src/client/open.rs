//! Opening a session from the client: connect, authenticate, `Open`, check what the server
//! granted, open the data streams.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use zcp_engine::RecvEngine;
use zcp_engine::sys::random;
use zcp_wire::{ErrorCode, Message, Open, Pacing, escape, escape_text};

use super::{Connection, Transfer};
use crate::conn::{ClientSession, authenticate, connect, open_data};
use crate::error::{FrameIoError, SessionError};
use crate::event::Start;

/// An open session: the control connection, the data streams, what was granted.
pub(super) struct Opened {
    pub(super) cs: ClientSession,
    pub(super) streams: u16,
    pub(super) idle: Duration,
    pub(super) data: Vec<TcpStream>,
    /// Said when the server allows fewer streams than asked for.
    pub(super) capped: Option<String>,
    /// How the server holds a pull's rate cap.
    pub(super) pacing: Pacing,
    /// The remote paths as the server addresses them: beneath the export `Open` named
    /// (its name taken off) when the server has exports, as given otherwise.
    pub(super) paths: Vec<Vec<u8>>,
}

/// With named exports on the server, the first component of every remote path names the
/// export (`HOST:EXPORT/PATH`): the export, and the paths beneath it (`.` for the export
/// itself). One session reads or writes one export.
pub(crate) fn split_export(remote: &[Vec<u8>]) -> Result<(String, Vec<Vec<u8>>), String> {
    let mut export: Option<String> = None;
    let mut paths = Vec::with_capacity(remote.len());
    for r in remote {
        let p = zcp_wire::RelPath::parse(r)
            .map_err(|e| format!("invalid remote path '{}': {e}", escape(r)))?;
        let Some((first, rest)) = p.components().split_first() else {
            return Err(format!(
                "the server has exports: name one as the first component of the remote path (HOST:EXPORT/PATH), not '{}'",
                escape(r)
            ));
        };
        let name = String::from_utf8(first.clone())
            .map_err(|_| format!("export name '{}' is not UTF-8", escape(first)))?;
        match &export {
            Some(e) if *e != name => {
                return Err(format!(
                    "one session reads from one export, and '{}' and '{}' are two: run one get per export",
                    escape_text(e),
                    escape_text(&name)
                ));
            }
            _ => export = Some(name),
        }
        paths.push(if rest.is_empty() {
            b".".to_vec()
        } else {
            let mut p = rest.join(&b'/');
            // `HOST:EXPORT/DIR/` keeps its slash: a directory to send into.
            if r.ends_with(b"/") {
                p.push(b'/');
            }
            p
        });
    }
    Ok((export.unwrap_or_default(), paths))
}

/// Connects, authenticates and opens the session and its data streams. A server that grants
/// more streams than asked for (or none, or no idle time), names a pacing where it sends
/// nothing capped (or none where it does), or answers another verify mode than the one asked
/// for, breaks the protocol: nothing is opened for it. With `encrypt`, the session is
/// encrypted or not opened at all.
pub(super) fn open_session(
    conn: &Connection,
    mut open: Open,
    remote: &[Vec<u8>],
    encrypt: bool,
) -> Result<Opened, SessionError> {
    let listing = open.list;
    let control = connect(&conn.host, conn.port, conn.connect_timeout)?;
    control.set_read_timeout(Some(conn.connect_timeout)).ok();
    control.set_write_timeout(Some(conn.connect_timeout)).ok();
    let nonce = random().map_err(|source| SessionError::Io {
        what: "getrandom".into(),
        source,
    })?;
    let share = match encrypt {
        true => Some(random().map_err(|source| SessionError::Io {
            what: "getrandom".into(),
            source,
        })?),
        false => None,
    };
    let mut cs = authenticate(control, conn.psk.clone(), nonce, share)?;
    let peer = cs.peer.to_string();
    tracing::info!(%peer, session = %hex::encode(cs.session_id), "authenticated");
    let paths = if cs.exports && !(listing && remote.is_empty()) {
        match split_export(remote) {
            Ok((export, paths)) => {
                open.export = export;
                paths
            }
            Err(reason) => {
                let _ = cs.tx.send(&Message::Error {
                    code: ErrorCode::BadPath,
                    message: "the client gave up: no export named".into(),
                });
                return Err(SessionError::Usage(reason));
            }
        }
    } else {
        remote.to_vec()
    };
    // The server said its limit in Welcome; ask for no more, and say so.
    let wanted = open.streams.max(1);
    open.streams = wanted.min(cs.max_streams.max(1));
    let capped = (open.streams < wanted).then(|| {
        format!(
            "asked for {wanted} streams; the server allows at most {}, so {} are used",
            cs.max_streams, open.streams
        )
    });
    let asked_for = open.clone();
    cs.tx
        .send(&Message::Open(Box::new(open)))
        .map_err(|e| FrameIoError::from(e).into_session(&peer))?;
    cs.rx
        .stream
        .set_read_timeout(Some(Duration::from_millis(250)))
        .ok();
    let asked = Instant::now();
    let (streams, idle_ms, pacing, modes) = loop {
        match cs.rx.poll().map_err(|e| e.into_session(&peer))? {
            Some(Message::Opened {
                streams,
                idle_ms,
                pacing,
                verify,
                transport,
                udp_mode,
            }) => break (streams, idle_ms, pacing, [verify, transport, udp_mode]),
            // Only a permission refusal answers Open with `auth` (the key was proved).
            Some(Message::Error {
                code: ErrorCode::Auth,
                message,
            }) => return Err(SessionError::Denied(escape_text(&message))),
            Some(Message::Error { code, message }) => {
                return Err(SessionError::Refused {
                    code,
                    message: escape_text(&message),
                });
            }
            Some(other) => {
                return Err(SessionError::Protocol {
                    peer,
                    reason: format!("expected Opened, got {}", other.name()),
                });
            }
            None if asked.elapsed() > conn.connect_timeout => {
                return Err(SessionError::Connection {
                    peer,
                    reason: "no answer to Open within the timeout".into(),
                });
            }
            None => {}
        }
    };
    if let Some(reason) = granted_wrong(&asked_for, (streams, idle_ms), pacing, &modes) {
        let _ = cs.tx.send(&Message::Error {
            code: ErrorCode::Protocol,
            message: reason.clone(),
        });
        return Err(SessionError::Protocol { peer, reason });
    }
    let idle = Duration::from_millis(u64::from(idle_ms)).min(conn.idle_timeout);
    tracing::info!(
        streams,
        idle_ms,
        "session opened; connecting the data streams"
    );
    let mut data = Vec::with_capacity(usize::from(streams));
    for i in 0..streams {
        let nonce = random().map_err(|source| SessionError::Io {
            what: "getrandom".into(),
            source,
        })?;
        let s = open_data(
            cs.peer,
            &cs.keys,
            cs.session_id,
            i,
            nonce,
            conn.connect_timeout,
        )?;
        s.set_read_timeout(Some(idle)).ok();
        zcp_engine::sys::set_socket_timeouts(&s, Some(idle)).ok();
        data.push(s);
    }
    cs.tx.stream.set_write_timeout(Some(idle)).ok();
    Ok(Opened {
        cs,
        streams,
        idle,
        data,
        capped,
        pacing,
        paths,
    })
}

/// Why the server's `Opened` breaks the protocol for the `Open` asked for, if it does.
fn granted_wrong(
    asked: &Open,
    (streams, idle_ms): (u16, u32),
    pacing: Pacing,
    [verify, transport, udp_mode]: &[String; 3],
) -> Option<String> {
    let server_paces = asked.pull && asked.rate != 0;
    match (streams, idle_ms) {
        (n, _) if asked.list && n != 0 => Some(format!(
            "the server granted {n} data streams to a listing, which moves no data"
        )),
        (0, _) if !asked.list => Some("the server granted no data streams".to_string()),
        (n, _) if n > asked.streams => Some(format!(
            "the server granted {n} data streams, more than the {} asked for",
            asked.streams
        )),
        (_, 0) => Some("the server granted an idle timeout of 0".to_string()),
        // Both sides must agree on what is proved: a server that would verify less than
        // asked (or more) is refused before a byte moves.
        _ if *verify != asked.verify => Some(format!(
            "the server answered verify mode '{}' to a request for '{}'",
            escape_text(verify),
            asked.verify
        )),
        // And on how the bytes move.
        _ if (transport, udp_mode) != (&asked.transport, &asked.udp_mode) => Some(format!(
            "the server answered transport '{}' ({}) to a request for '{}' ({})",
            escape_text(transport),
            escape_text(udp_mode),
            asked.transport,
            asked.udp_mode
        )),
        _ if server_paces == (pacing == Pacing::None) => Some(format!(
            "the server answered pacing '{}' for {}",
            pacing.name(),
            if server_paces {
                "a pull with a rate cap"
            } else {
                "a session in which it sends nothing capped"
            }
        )),
        _ => None,
    }
}

pub(super) fn start_event(
    cs: &ClientSession,
    direction: &'static str,
    source: String,
    target: String,
    size: Option<u64>,
    t: &Transfer,
    streams: u16,
) -> Start {
    Start {
        local: cs.local,
        remote: cs.peer,
        session: hex::encode(cs.session_id),
        direction,
        source,
        target,
        size,
        chunk_size: t.chunk_size.unwrap_or(0),
        block_size: t.block_size,
        streams,
        sender_engine: t.engine.name().into(),
        sender_note: None,
        receiver_engine: t.recv_engine.name().into(),
        receiver_note: None,
        verify: t.verify.checks() && t.recv_engine != RecvEngine::Null,
        verify_mode: t.verify,
        limit_rate: None,
    }
}

pub(super) fn open_message(t: &Transfer, pull: bool, idle: Duration) -> Open {
    Open {
        pull,
        recursive: t.recursive,
        streams: t.streams.max(1),
        idle_ms: idle.as_millis().min(u128::from(u32::MAX)) as u32,
        recv_engine: t.recv_engine.name().into(),
        send_engine: t.engine.name().into(),
        block_size: t.block_size.min(u64::from(u32::MAX)) as u32,
        chunk_size: t.chunk_size.unwrap_or(0),
        rate: t.link.rate(),
        verify: t.verify.name().into(),
        transport: t.link.kind.name().into(),
        udp_mode: t.link.udp_mode.name().into(),
        export: String::new(),
        existing: t.existing.name().into(),
        list: false,
        // Only the sender walks: the server needs the rules in a pull alone.
        // The sender walks: the server needs the rules in a pull, and in a push only to keep
        // what they exclude from `--delete`.
        filters: match pull || t.delete.prunes() {
            true => t.filter.iter().map(zcp_wire::FilterRule::to_wire).collect(),
            false => Vec::new(),
        },
        delete: t.delete,
    }
}

#[cfg(test)]
mod tests {
    use super::split_export;

    fn split(paths: &[&str]) -> Result<(String, Vec<String>), String> {
        let remote: Vec<Vec<u8>> = paths.iter().map(|p| p.as_bytes().to_vec()).collect();
        split_export(&remote).map(|(e, ps)| {
            let ps = ps.into_iter().map(|p| String::from_utf8(p).unwrap());
            (e, ps.collect())
        })
    }

    #[test]
    fn the_first_component_names_the_export() {
        assert_eq!(
            split(&["incoming/run42/"]).unwrap(),
            ("incoming".into(), vec!["run42/".into()])
        );
        assert_eq!(
            split(&["incoming"]).unwrap(),
            ("incoming".into(), vec![".".into()])
        );
        assert_eq!(
            split(&["./archive//a/b", "archive/c"]).unwrap(),
            ("archive".into(), vec!["a/b".into(), "c".into()])
        );
        let e = split(&["archive/a", "incoming/b"]).unwrap_err();
        assert!(e.contains("one export"), "{e}");
        for bad in [".", "", "../x", "/abs"] {
            assert!(split(&[bad]).is_err(), "{bad}");
        }
    }
}
