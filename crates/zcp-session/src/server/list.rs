//! A listing (`zcp ls`): what an identity that may read an export finds beneath the paths it
//! names, or which exports it may use. No data streams and no role: the paths come as `Get`s,
//! the answer as `ListEntry`s (an `EntryFailed` for a path that cannot be listed), then
//! `Finish`. Nothing is followed: directories are opened beneath the export's root with
//! `RESOLVE_BENEATH`-style lookups, entries are `lstat`ed, a link is shown as a link.

use std::os::fd::OwnedFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use zcp_engine::fs::{self, DirEntries, EntryKind, Meta};
use zcp_wire::{ErrorCode, ListEntry, ListKind, MAX_PATH, Message, RelPath, escape_text};

use super::Ctx;
use super::access::{Granted, Live};
use super::observer::ServerObserver;
use super::session::{Control, Grant};
use crate::error::SessionError;
use crate::manifest::join;

/// Paths one listing may name.
const MAX_LIST_PATHS: usize = 4096;

/// Lists the exports identity `who` may use, with what it may do in each; the number listed.
pub(super) fn serve_exports(
    ctx: &Ctx,
    mut c: Control,
    g: &Grant,
    live: &Live,
    who: usize,
) -> Result<u64, SessionError> {
    c.opened(g)?;
    match c.next(Instant::now() + ctx.cfg.handshake_timeout)? {
        Message::GetEnd => {}
        other => {
            let m = format!(
                "expected GetEnd (a listing of exports names no path), got {}",
                other.name()
            );
            return Err(c.refuse(ErrorCode::Protocol, m));
        }
    }
    let usable = live.usable(who);
    for (name, permission) in &usable {
        let mode = match (permission.reads(), permission.writes()) {
            _ if permission.deletes() => 0o777,
            (true, true) => 0o666,
            (true, false) => 0o444,
            _ => 0o222,
        };
        send(
            &c,
            ListEntry {
                path: name.as_bytes().to_vec(),
                kind: ListKind::Export,
                size: 0,
                mode,
                mtime_sec: 0,
                mtime_nsec: 0,
                target: Vec::new(),
                head: false,
            },
        )?;
    }
    send_msg(&c, &Message::Finish)?;
    Ok(usable.len() as u64)
}

/// Lists each path the client names beneath the export: the path itself, then (for a
/// directory) what is in it, all of it with `-r`, less what the filter excludes. The number
/// of entries listed; each path or directory that could not be listed is counted with the
/// observer as a failure.
pub(super) fn serve_list(
    ctx: &Ctx,
    mut c: Control,
    g: &Grant,
    export: &Granted,
    observer: &mut ServerObserver<'_>,
) -> Result<u64, SessionError> {
    c.opened(g)?;
    let until = Instant::now() + ctx.cfg.handshake_timeout;
    let mut paths = Vec::new();
    loop {
        match c.next(until)? {
            Message::Get { path, .. } => paths.push(path),
            Message::GetEnd => break,
            other => {
                let m = format!("expected Get, got {}", other.name());
                return Err(c.refuse(ErrorCode::Protocol, m));
            }
        }
        if paths.len() > MAX_LIST_PATHS {
            let m = format!("more than {MAX_LIST_PATHS} paths in one listing");
            return Err(c.refuse(ErrorCode::Limit, m));
        }
    }
    let mut out = Out {
        ctx,
        c: &c,
        last: Instant::now(),
        seen: 0,
        listed: 0,
        observer,
    };
    for path in paths {
        if let Err(why) = head(&mut out, g, export, &path)? {
            // Answered by the path as the client spelled it.
            out.failed(path, ErrorCode::BadPath, why)?;
        }
    }
    out.send(&Message::Finish)?;
    Ok(out.listed)
}

/// Where a listing's answers go, with what keeps the client waiting and the server stopping.
struct Out<'a, 'o> {
    ctx: &'a Ctx,
    c: &'a Control,
    /// When the client last heard from us.
    last: Instant,
    /// Entries looked at, listed or not.
    seen: u64,
    listed: u64,
    observer: &'a mut ServerObserver<'o>,
}

/// How long a walk that lists nothing (filters, zcp's own files, a slow disk) may keep the
/// client without a word: then a `Progress` keeps it waiting.
const KEEPALIVE: Duration = Duration::from_secs(2);

impl Out<'_, '_> {
    fn send(&mut self, m: &Message) -> Result<(), SessionError> {
        self.last = Instant::now();
        self.c.ctl.send(m).map_err(|e| e.into_session("the client"))
    }

    fn entry(&mut self, e: ListEntry) -> Result<(), SessionError> {
        self.listed += 1;
        self.send(&Message::ListEntry(e))
    }

    fn failed(&mut self, path: Vec<u8>, code: ErrorCode, why: String) -> Result<(), SessionError> {
        self.observer.failed(code.name());
        self.send(&Message::EntryFailed {
            path,
            code,
            message: why,
        })
    }

    /// One more entry looked at: stops when the server does, and says it is alive.
    fn tick(&mut self) -> Result<(), SessionError> {
        self.seen += 1;
        if self.seen.is_multiple_of(256) {
            if self.ctx.shutdown.load(Ordering::Relaxed) {
                let m = "the server is shutting down".to_string();
                return Err(self.c.refuse(ErrorCode::Busy, m));
            }
            if self.last.elapsed() > KEEPALIVE {
                let seen = self.seen;
                self.send(&Message::Progress {
                    file_id: 0,
                    bytes: seen,
                })?;
            }
        }
        Ok(())
    }
}

/// Lists one path asked for; `Ok(Err(why))` when it cannot be listed at all.
fn head(
    out: &mut Out<'_, '_>,
    g: &Grant,
    export: &Granted,
    asked: &[u8],
) -> Result<Result<(), String>, SessionError> {
    let p = match RelPath::parse(asked) {
        Ok(p) => p,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let comps = p.components();
    let head_path = p.to_bytes();
    let not_there = |e: zcp_engine::EngineError| format!("{e} on the server");
    let missing = || "no such file or directory on the server".to_string();
    // The path itself: the root (or export) is a directory; anything else is looked at in
    // its parent, not followed.
    let found = match comps.split_last() {
        None => export
            .root
            .open_dir(&[], false)
            .and_then(|d| fs::stat_fd(&d).map(|m| (Some(d), m, Vec::new())))
            .map_err(not_there),
        Some((last, _)) if fs::is_reserved_name(last) => Err(missing()),
        Some((last, parent)) => export
            .root
            .open_dir(parent, false)
            .map_err(not_there)
            .and_then(|pd| match fs::stat_at(&pd, last) {
                Err(zcp_engine::EngineError::Sys { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound =>
                {
                    Err(missing())
                }
                Err(e) => Err(not_there(e)),
                Ok(m) => {
                    let link = match m.kind {
                        EntryKind::Symlink => fs::read_link_at(&pd, last).unwrap_or_default(),
                        _ => Vec::new(),
                    };
                    let d = (m.kind == EntryKind::Dir)
                        .then(|| fs::open_at(&pd, last))
                        .transpose()
                        .map_err(not_there)?;
                    Ok((d, m, link))
                }
            }),
    };
    let (dir, meta, link) = match found {
        Ok(f) => f,
        Err(why) => return Ok(Err(why)),
    };
    out.entry(ListEntry {
        head: true,
        ..entry(head_path.clone(), &meta, link)
    })?;
    if let Some(dir) = dir {
        walk(out, g, dir, &head_path)?;
    }
    Ok(Ok(()))
}

/// What is in the directory `dir` (the listed path `head`), depth first with `-r`. What
/// cannot be read beneath it is answered with `EntryFailed` for that directory or entry.
fn walk(out: &mut Out<'_, '_>, g: &Grant, dir: OwnedFd, head: &[u8]) -> Result<(), SessionError> {
    let io = |e: zcp_engine::EngineError| format!("{e} on the server");
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) => return out.failed(head.to_vec(), ErrorCode::Io, io(e)),
    };
    // One directory being read per level of depth, with its path beneath the listed one.
    let mut levels: Vec<(OwnedFd, DirEntries, Vec<u8>)> = vec![(dir, entries, Vec::new())];
    while let Some((dir, entries, rel)) = levels.last_mut() {
        let name = match entries.next() {
            None => {
                levels.pop();
                continue;
            }
            Some(Ok(name)) => name,
            Some(Err(e)) => {
                let path = join(head, rel);
                levels.pop();
                out.failed(path, ErrorCode::Io, format!("listing stopped ({})", io(e)))?;
                continue;
            }
        };
        out.tick()?;
        if fs::is_reserved_name(&name) {
            continue;
        }
        let rel = join(rel, &name);
        let path = join(head, &rel);
        let m = match fs::stat_at(&*dir, &name) {
            Ok(m) => m,
            // Gone since it was read: not there to list.
            Err(zcp_engine::EngineError::Sys { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                continue;
            }
            Err(e) if path.len() <= MAX_PATH => {
                out.failed(path, ErrorCode::Io, io(e))?;
                continue;
            }
            Err(_) => continue,
        };
        let is_dir = m.kind == EntryKind::Dir;
        if g.filter.excludes(&rel, is_dir) {
            continue;
        }
        if path.len() > MAX_PATH {
            let m = format!(
                "an entry beneath {} has a path over {MAX_PATH} bytes; not listed",
                escape_text(&String::from_utf8_lossy(head))
            );
            out.observer.failed(ErrorCode::Limit.name());
            out.send(&Message::Notice { message: m })?;
            continue;
        }
        let link = match m.kind {
            EntryKind::Symlink => fs::read_link_at(&*dir, &name).unwrap_or_default(),
            _ => Vec::new(),
        };
        let child = match is_dir && g.recursive {
            true => Some(fs::open_at(&*dir, &name).and_then(|d| fs::read_dir(&d).map(|e| (d, e)))),
            false => None,
        };
        out.entry(entry(path.clone(), &m, link))?;
        match child {
            Some(Ok((d, e))) => levels.push((d, e, rel)),
            Some(Err(e)) => out.failed(path, ErrorCode::Io, io(e))?,
            None => {}
        }
    }
    Ok(())
}

fn entry(path: Vec<u8>, m: &Meta, target: Vec<u8>) -> ListEntry {
    let kind = match m.kind {
        EntryKind::File => ListKind::File,
        EntryKind::Dir => ListKind::Dir,
        EntryKind::Symlink => ListKind::Link,
        EntryKind::Other | EntryKind::Missing => ListKind::Other,
    };
    ListEntry {
        path,
        kind,
        size: if kind == ListKind::File { m.size } else { 0 },
        mode: m.mode,
        mtime_sec: m.mtime.0,
        mtime_nsec: m.mtime.1,
        target,
        head: false,
    }
}

fn send(c: &Control, e: ListEntry) -> Result<(), SessionError> {
    send_msg(c, &Message::ListEntry(e))
}

fn send_msg(c: &Control, m: &Message) -> Result<(), SessionError> {
    c.ctl.send(m).map_err(|e| e.into_session("the client"))
}
