//! `zcp ls`: list what the server holds beneath paths, or the exports this key may use.
//!
//! A listing is a session with `Open.list`: no data streams, the paths as `Get`s, the answer
//! as `ListEntry`s in order (each path's own entry first, marked `head`, then what is
//! beneath it), an
//! `EntryFailed` for a path that cannot be listed, `Finish` at the end. The server is not
//! trusted: an entry that is not the next path asked for or beneath the current one, one
//! deeper than asked without `-r`, beneath a path that is no directory, that the filter
//! excludes, or an export where paths were asked for, ends the listing as a protocol error.

use std::time::Instant;

use zcp_wire::{Filter, FilterRule, ListEntry, ListKind, Message, RelPath, escape};

use super::Connection;
use super::open::{Opened, open_session};
use crate::error::SessionError;

/// What to list.
#[derive(Debug, Clone)]
pub struct ListOptions {
    /// How to reach the server.
    pub conn: Connection,
    /// Paths relative to the server root (with exports: `EXPORT/PATH`). Empty: the root, or,
    /// when the server has exports, the exports this key may use.
    pub paths: Vec<Vec<u8>>,
    /// Everything beneath each directory, not only what is in it.
    pub recursive: bool,
    /// `--exclude` / `--include`, applied by the server's walk (and checked here).
    pub filter: Vec<FilterRule>,
    /// Ask for an encrypted session (`--encrypt`).
    pub encrypt: bool,
    /// Reach the host over ssh (`[USER@]HOST:PATH`): zcp is started there for the listing,
    /// and `conn` gives only the timeouts.
    pub ssh: Option<super::Ssh>,
}

/// One answer, as it arrives.
#[derive(Debug)]
pub enum Listed<'a> {
    /// An entry. `request` indexes the paths asked for; `rel` is its path beneath that one
    /// (empty: the path itself).
    Entry {
        /// Which path asked for.
        request: usize,
        /// Its path beneath it, raw.
        rel: &'a [u8],
        /// What the server said of it (its `path` is the server's, beneath the export).
        entry: &'a ListEntry,
    },
    /// An export this key may use (a listing of a server's exports).
    Export {
        /// Its name, raw.
        name: &'a [u8],
        /// It may be read (`zcp get`, `zcp ls`).
        read: bool,
        /// It may be written (`zcp send`).
        write: bool,
        /// A push may delete in it (`zcp send -r --delete`).
        delete: bool,
    },
    /// A path that could not be listed (`rel` empty), or a directory or entry beneath it
    /// that could not be read (the listing of that path is incomplete), and why (escaped).
    Failed {
        /// Which path asked for.
        request: usize,
        /// Where beneath it, raw; empty: the path itself.
        rel: &'a [u8],
        /// Why.
        message: String,
    },
    /// Something the server wants read (escaped).
    Notice(String),
}

/// How a listing went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListOutcome {
    /// Entries (or exports) listed.
    pub listed: u64,
    /// Paths that could not be listed.
    pub failed: u64,
    /// Directories or entries beneath the paths listed that could not be read.
    pub incomplete: u64,
}

/// Lists `opts.paths`, calling `on` with each answer as it arrives.
pub fn list(
    opts: &ListOptions,
    on: &mut dyn FnMut(Listed<'_>),
) -> Result<ListOutcome, SessionError> {
    let ssh = &opts.ssh;
    let far = super::route::start(ssh, &opts.conn, false, &mut |n| on(Listed::Notice(n)))?;
    if ssh.is_some() && !opts.encrypt {
        on(Listed::Notice(super::ssh::IN_THE_CLEAR.into()));
    }
    let conn = far.as_ref().map(|f| f.connection(&opts.conn));
    let listed = list_once(opts, conn.as_ref().unwrap_or(&opts.conn), on);
    // A connection through ssh that broke may be ssh's doing; a listing the far side got
    // wrong (a protocol error) is not.
    let listed = match (ssh, &far, listed) {
        (Some(s), Some(f), Err(e @ SessionError::Connection { .. })) if f.tunneled() => {
            Err(super::route::broken_tunnel(s, e))
        }
        (_, _, listed) => listed,
    };
    super::route::unreachable(ssh, listed)
}

fn list_once(
    opts: &ListOptions,
    conn: &Connection,
    on: &mut dyn FnMut(Listed<'_>),
) -> Result<ListOutcome, SessionError> {
    let filter = Filter::new(&opts.filter)
        .map_err(|e| SessionError::Usage(escape(e.to_string().as_bytes())))?;
    let open = zcp_wire::Open {
        delete: zcp_wire::DeleteMode::Off,
        pull: true,
        recursive: opts.recursive,
        streams: 1,
        idle_ms: conn.idle_timeout.as_millis().min(u128::from(u32::MAX)) as u32,
        recv_engine: "auto".into(),
        send_engine: "sendfile".into(),
        block_size: 0,
        chunk_size: 0,
        rate: 0,
        verify: zcp_wire::VerifyMode::Blake3.name().into(),
        transport: "tcp".into(),
        udp_mode: "fair".into(),
        export: String::new(),
        existing: String::new(),
        list: true,
        filters: opts.filter.iter().map(FilterRule::to_wire).collect(),
    };
    let Opened {
        mut cs,
        idle,
        paths,
        ..
    } = open_session(conn, open, &opts.paths, opts.encrypt)?;
    let peer = cs.peer.to_string();
    let exports = cs.exports && paths.is_empty();
    let paths = match paths.is_empty() && !exports {
        true => vec![b".".to_vec()],
        false => paths,
    };
    let io = |e: std::io::Error| SessionError::Connection {
        peer: peer.clone(),
        reason: e.to_string(),
    };
    for p in &paths {
        let get = Message::Get {
            path: p.clone(),
            dest: Vec::new(),
        };
        cs.tx.send(&get).map_err(io)?;
    }
    cs.tx.send(&Message::GetEnd).map_err(io)?;
    let mut check = Checker::new(&paths, exports, opts.recursive, filter);
    let mut last = Instant::now();
    loop {
        let m = match cs.rx.poll().map_err(|e| e.into_session(&peer))? {
            Some(m) => m,
            None if last.elapsed() > idle => {
                return Err(SessionError::Connection {
                    peer,
                    reason: format!("no answer for {} s", idle.as_secs()),
                });
            }
            None => continue,
        };
        last = Instant::now();
        match check.take(m, on) {
            Ok(Some(outcome)) => return Ok(outcome),
            Ok(None) => {}
            Err(Step::Protocol(reason)) => {
                let _ = cs.tx.send(&Message::Error {
                    code: zcp_wire::ErrorCode::Protocol,
                    message: reason.clone(),
                });
                return Err(SessionError::Protocol { peer, reason });
            }
            Err(Step::Refused(e)) => return Err(e),
        }
    }
}

enum Step {
    Protocol(String),
    Refused(SessionError),
}

/// What the server may say next, and what it said so far.
struct Checker {
    /// Each path asked for, as sent (a path that fails is answered so).
    sent: Vec<Vec<u8>>,
    /// Each path asked for, as the server spells it back when it lists it.
    asked: Vec<Vec<u8>>,
    exports: bool,
    recursive: bool,
    filter: Filter,
    /// The path whose entries come now, and whether it is a directory.
    current: Option<(usize, bool)>,
    /// The next path to be answered.
    next: usize,
    outcome: ListOutcome,
}

impl Checker {
    fn new(paths: &[Vec<u8>], exports: bool, recursive: bool, filter: Filter) -> Checker {
        let asked = paths
            .iter()
            .map(|p| RelPath::parse(p).map(|r| r.to_bytes()).unwrap_or_default())
            .collect();
        Checker {
            sent: paths.to_vec(),
            asked,
            exports,
            recursive,
            filter,
            current: None,
            next: 0,
            outcome: ListOutcome::default(),
        }
    }

    fn take(
        &mut self,
        m: Message,
        on: &mut dyn FnMut(Listed<'_>),
    ) -> Result<Option<ListOutcome>, Step> {
        match m {
            Message::ListEntry(e) => self.entry(&e, on)?,
            Message::EntryFailed { path, message, .. } => self.failed(&path, &message, on)?,
            Message::Notice { message } => on(Listed::Notice(zcp_wire::escape_text(&message))),
            // The server is still walking (what it passes over lists nothing).
            Message::Progress { .. } => {}
            Message::Finish if self.exports || self.next == self.asked.len() => {
                return Ok(Some(self.outcome));
            }
            Message::Finish => {
                return Err(Step::Protocol(format!(
                    "the server ended the listing with {} of {} paths unanswered",
                    self.asked.len() - self.next,
                    self.asked.len()
                )));
            }
            Message::Error { code, message } => {
                let message = zcp_wire::escape_text(&message);
                return Err(Step::Refused(SessionError::Refused { code, message }));
            }
            other => {
                return Err(Step::Protocol(format!(
                    "expected ListEntry, got {}",
                    other.name()
                )));
            }
        }
        Ok(None)
    }

    /// A path asked for that cannot be listed (spelled as sent), or something beneath the
    /// current one that could not be read (spelled as listed).
    fn failed(
        &mut self,
        path: &[u8],
        message: &str,
        on: &mut dyn FnMut(Listed<'_>),
    ) -> Result<(), Step> {
        let message = zcp_wire::escape_text(message);
        if !self.exports && self.sent.get(self.next).map(Vec::as_slice) == Some(path) {
            on(Listed::Failed {
                request: self.next,
                rel: &[],
                message,
            });
            self.outcome.failed += 1;
            self.current = None;
            self.next += 1;
            return Ok(());
        }
        let inside = self.current.and_then(|(request, is_dir)| {
            let head = &self.asked[request];
            let rel = match path == head.as_slice() {
                true => Some(&[][..]),
                false => self.beneath(head, path),
            };
            rel.filter(|_| is_dir).map(|rel| (request, rel))
        });
        let Some((request, rel)) = inside else {
            return Err(Step::Protocol(format!(
                "the server said '{}' failed, which is neither the next path asked for nor beneath the current one",
                escape(path)
            )));
        };
        on(Listed::Failed {
            request,
            rel,
            message,
        });
        self.outcome.incomplete += 1;
        Ok(())
    }

    /// `path`'s place beneath `head`, when it lies there and is spelled as the server
    /// spells paths (no `.`, no empty component).
    fn beneath<'p>(&self, head: &[u8], path: &'p [u8]) -> Option<&'p [u8]> {
        let rel = match head {
            b"." => Some(path),
            _ => path.strip_prefix(head).and_then(|r| r.strip_prefix(b"/")),
        }?;
        let canonical =
            RelPath::parse(rel).is_ok_and(|p| !p.components().is_empty() && p.to_bytes() == rel);
        canonical.then_some(rel)
    }

    fn entry(&mut self, e: &ListEntry, on: &mut dyn FnMut(Listed<'_>)) -> Result<(), Step> {
        let bad =
            |why: &str| Step::Protocol(format!("the server listed '{}', {why}", escape(&e.path)));
        if self.exports || e.kind == ListKind::Export {
            if !(self.exports && e.kind == ListKind::Export) {
                return Err(bad("an export where paths were asked for, or the reverse"));
            }
            let name = std::str::from_utf8(&e.path).ok();
            if name.is_none_or(|n| crate::server::check_name(n).is_err()) {
                return Err(bad("which is no export name"));
            }
            on(Listed::Export {
                name: &e.path,
                read: e.mode & 0o444 != 0,
                write: e.mode & 0o222 != 0,
                delete: e.mode & 0o111 != 0,
            });
            self.outcome.listed += 1;
            return Ok(());
        }
        if e.head {
            if self.asked.get(self.next) != Some(&e.path) {
                return Err(bad(
                    "as a path asked for, but it is not the next path asked for",
                ));
            }
            self.current = Some((self.next, e.kind == ListKind::Dir));
            self.next += 1;
            on(Listed::Entry {
                request: self.next - 1,
                rel: &[],
                entry: e,
            });
            self.outcome.listed += 1;
            return Ok(());
        }
        let Some((request, is_dir)) = self.current else {
            return Err(bad("which is not the next path asked for"));
        };
        let Some(rel) = self.beneath(&self.asked[request], &e.path) else {
            return Err(bad("which is not beneath the path asked for"));
        };
        if !is_dir {
            return Err(bad("beneath a path that is no directory"));
        }
        if !self.recursive && rel.contains(&b'/') {
            return Err(bad("deeper than asked for without -r"));
        }
        let act = match e.kind {
            ListKind::Dir => crate::confine::Act::Dir,
            _ => crate::confine::Act::File,
        };
        let comps: Vec<Vec<u8>> = rel.split(|b| *b == b'/').map(<[u8]>::to_vec).collect();
        if crate::confine::excluded(&self.filter, &comps, act).is_some() {
            return Err(bad(
                "which the filter excludes, or is in a directory it excludes",
            ));
        }
        on(Listed::Entry {
            request,
            rel,
            entry: e,
        });
        self.outcome.listed += 1;
        Ok(())
    }
}
