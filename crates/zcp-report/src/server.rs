//! The server's log: one line per event, on a writer shared by every session's threads. Each
//! line starts with an RFC 3339 timestamp (UTC); a session's lines name its id, its peer and
//! its direction (`push` stores, `pull` sends).

use std::io::Write;
use std::sync::Mutex;
use zcp_engine::sync::Locked;

use zcp_session::{ServerEvent, ServerReporter};

use crate::sessions::{SessionInfo, Sessions};
use crate::units::{bits_per_second, rate, size};

/// Writes one line per server event. The listening line goes to `out` (scripts read the port
/// from it); everything else to `log`.
#[derive(Debug)]
pub struct ServerLog<O: Write + Send, L: Write + Send> {
    pub(crate) out: Mutex<O>,
    log: Mutex<L>,
    /// Each running session's peer and direction, by session id.
    sessions: Sessions,
}

impl<O: Write + Send, L: Write + Send> ServerLog<O, L> {
    /// A log writing the listening line to `out` and the rest to `log`.
    pub fn new(out: O, log: L) -> Self {
        ServerLog {
            out: Mutex::new(out),
            log: Mutex::new(log),
            sessions: Sessions::default(),
        }
    }

    /// Formats one event as one line, without the timestamp: whatever a peer put in its
    /// texts is escaped ([`zcp_wire::escape_text`]), so it can neither drive a terminal nor
    /// forge a line. A session's lines name its peer and direction once it has started.
    pub fn line(&self, event: &ServerEvent) -> String {
        message(event, self.sessions.observe(event).as_ref())
    }
}

/// One event's line (without timestamp), escaped; `ctx` is what is known of its session.
/// (A session's start line names its peer itself.)
pub(crate) fn message(event: &ServerEvent, ctx: Option<&SessionInfo>) -> String {
    let ctx = match event {
        ServerEvent::SessionStart { .. } => None,
        _ => ctx.map(|i| (i.peer, i.direction)),
    };
    zcp_wire::escape_text(&raw_line(event, ctx))
}

fn raw_line(event: &ServerEvent, ctx: Option<(std::net::SocketAddr, &str)>) -> String {
    let short = |s: &str| match ctx {
        Some((peer, dir)) => format!("{} ({dir} from {peer})", &s[..s.len().min(16)]),
        None => s[..s.len().min(16)].to_string(),
    };
    let pull = ctx.is_some_and(|(_, d)| d == "pull");
    match event {
        ServerEvent::Listening { addr, root } => {
            format!("zcp: listening on {addr}, root {root}")
        }
        ServerEvent::Leftovers {
            root,
            files,
            bytes,
            capped,
        } => {
            let found = format!(
                "{files} partial file{} of interrupted transfers ({} on disk)",
                if *files == 1 { "" } else { "s" },
                size(*bytes)
            );
            match capped {
                None => format!(
                    "zcp: {found} under {root}: running the same transfer again resumes or replaces them; `zcp clean {root}` lists and removes them"
                ),
                Some(cap) => format!(
                    "zcp: {found} in the first {cap} entries under {root} (not all were looked at); `zcp clean {root}` lists and removes them all"
                ),
            }
        }
        ServerEvent::Rejected { peer, reason, .. } => format!("zcp: refused {peer}: {reason}"),
        ServerEvent::SessionRefused {
            session,
            peer,
            identity,
            cause,
            reason,
            ..
        } if *cause == zcp_session::CLIENT_GAVE_UP => format!(
            "zcp: session {} from {peer} (identity {identity}) ended by the client before it \
             began: {reason}",
            &session[..session.len().min(16)]
        ),
        ServerEvent::SessionRefused {
            session,
            peer,
            identity,
            export,
            direction,
            reason,
            ..
        } => {
            let asked = match (direction, export) {
                (Some("pull"), Some(e)) => format!(", pull from export '{e}'"),
                (Some(_), Some(e)) => format!(", push to export '{e}'"),
                _ => String::new(),
            };
            format!(
                "zcp: refused session {} from {peer} (identity {identity}{asked}): {reason}",
                &session[..session.len().min(16)]
            )
        }
        ServerEvent::Shed {
            evicted,
            expired,
            gave_up,
            probes,
            refused,
            descriptors,
            pending,
            max,
            busiest,
        } => {
            let all = evicted + expired + gave_up;
            let probed = format!(
                "{probes} probe{} (connected and closed without a byte: zcp doctor, a health \
                 check, a port scan)",
                if *probes == 1 { "" } else { "s" }
            );
            let mut line = if all + refused + descriptors == 0 {
                format!("zcp: {probed}")
            } else {
                format!(
                    "zcp: {all} connection{} ended in their handshake: {evicted} evicted for \
                     newer ones, {expired} past their deadline, {gave_up} closed by their peer",
                    if all == 1 { "" } else { "s" }
                )
            };
            if *probes > 0 && all + refused + descriptors > 0 {
                line += &format!("; {probed}");
            }
            if *refused > 0 {
                line += &format!(
                    "; {refused} more refused (not logged one by one: 20 a second at most)"
                );
            }
            if *descriptors > 0 {
                line += &format!(
                    "; out of file descriptors {descriptors} time{}",
                    if *descriptors == 1 { "" } else { "s" }
                );
            }
            line += &format!("; {pending} of at most {max} pending");
            if let Some((source, n)) = busiest {
                line += &format!(", {n} from {source}");
            }
            line
        }
        ServerEvent::Engines {
            session,
            sender,
            receiver,
        } => format!(
            "zcp: session {}: engines: sender {sender}, receiver {receiver}",
            short(session)
        ),
        ServerEvent::Progress {
            session,
            phase,
            bytes,
            files,
            ..
        } => format!(
            "zcp: session {}: {phase}, {} and {files} file{} so far",
            short(session),
            size(*bytes),
            if *files == 1 { "" } else { "s" }
        ),
        ServerEvent::Stopping { sessions } => format!(
            "zcp: shutting down: accepting no more connections, ending {sessions} session{}",
            if *sessions == 1 { "" } else { "s" }
        ),
        ServerEvent::SessionStart {
            peer,
            session,
            direction,
            streams,
            identity,
            export,
        } => format!(
            "zcp: session {} from {peer}: {direction}, {streams} stream{}, identity {identity}, export {export}",
            short(session),
            if *streams == 1 { "" } else { "s" }
        ),
        ServerEvent::Reloaded { ok: true, message } => {
            format!("zcp: configuration reloaded: {message}")
        }
        ServerEvent::Reloaded { ok: false, message } => {
            format!("zcp: reload failed, the previous configuration stays in force: {message}")
        }
        ServerEvent::FileDone {
            session,
            target,
            bytes,
            skipped,
            seconds,
            engine,
            verified,
            stored,
            ..
        } => format!(
            "zcp: session {}: {} {} ({}) in {:.2} s, {}, engine {engine}{}{}",
            short(session),
            match (pull, stored) {
                (true, true) => "sent (stored by the client)",
                (true, false) => "sent",
                (false, true) => "stored",
                (false, false) => "received",
            },
            target,
            size(*bytes),
            seconds,
            // Of the bytes moved; those resumed are named apart.
            rate(bits_per_second(bytes.saturating_sub(*skipped), *seconds)),
            if *verified {
                ", verified"
            } else {
                ", not verified"
            },
            if *skipped > 0 {
                format!(", {} resumed", size(*skipped))
            } else {
                String::new()
            },
        ),
        ServerEvent::FileFailed {
            session,
            target,
            reason,
            ..
        } => {
            format!(
                "zcp: session {}: {target} not committed: {reason}",
                short(session)
            )
        }
        ServerEvent::Note { session, message } => {
            format!("zcp: session {}: {message}", short(session))
        }
        ServerEvent::SessionEnd {
            session,
            ok,
            reason,
            files,
            bytes,
            left,
            deleted,
            ..
        } => match (ok, reason) {
            (true, _) => format!(
                "zcp: session {} finished: {files} file{}, {}{}{}",
                short(session),
                if *files == 1 { "" } else { "s" },
                size(*bytes),
                match left {
                    0 => String::new(),
                    n => format!(", {n} left as already there"),
                },
                match deleted {
                    0 => String::new(),
                    n => format!(", {n} deleted"),
                }
            ),
            (false, r) => format!(
                "zcp: session {} failed: {}",
                short(session),
                r.as_deref().unwrap_or("unknown reason")
            ),
        },
    }
}

impl<O: Write + Send, L: Write + Send> ServerReporter for ServerLog<O, L> {
    fn event(&self, event: &ServerEvent) {
        // Progress is for the metrics and the status page; the log has the files and the end.
        if let ServerEvent::Progress { .. } = event {
            return;
        }
        let line = format!(
            "{} {}\n",
            humantime::format_rfc3339_millis(std::time::SystemTime::now()),
            self.line(event)
        );
        // One write per line, newline included: an unbuffered stderr otherwise makes two
        // system calls of every line (a server storing small files logs thousands a second),
        // and another process writing there could land between them.
        fn put(w: &mut dyn Write, line: &str) {
            let _ = w.write_all(line.as_bytes());
            let _ = w.flush();
        }
        match event {
            ServerEvent::Listening { .. } => put(&mut *self.out.locked(), &line),
            _ => put(&mut *self.log.locked(), &line),
        }
    }
}
