//! The receiving role's control messages, one handler each: entries (files, directories,
//! links, directory times), the resume answer (`Go`), chunk MACs and file ends, and what the
//! sender reports. Every name is checked against the session's [`Scope`] before anything is
//! created, and every text from the peer is escaped before it is reported.

use super::*;

/// The receiving role's loop state while it handles control messages.
pub(super) struct Handler<'a> {
    pub(super) shared: &'a Arc<RxShared>,
    pub(super) observer: &'a mut dyn Observer,
    pub(super) totals: &'a mut ReceiverTotals,
    pub(super) engines_told: bool,
    pub(super) finishing: bool,
    pub(super) stats_sent: bool,
}

/// What a handled message means for the loop.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Flow {
    /// Go on; `progress`: the message moved the session forward (the idle clock restarts).
    Go { progress: bool },
    /// The session is over (the sender's `Stats` after ours).
    Done,
}

const PROGRESS: Result<Flow, SessionError> = Ok(Flow::Go { progress: true });
const CHATTER: Result<Flow, SessionError> = Ok(Flow::Go { progress: false });

impl Handler<'_> {
    pub(super) fn proto(&self, reason: String) -> SessionError {
        SessionError::Protocol {
            peer: self.shared.peer().into(),
            reason,
        }
    }

    fn send(&self, m: &Message) -> Result<(), SessionError> {
        self.shared.ctl.send(m).map_err(|reason| self.proto(reason))
    }

    /// Handles one message from the sender.
    pub(super) fn message(&mut self, m: Message) -> Result<Flow, SessionError> {
        match m {
            Message::PutFile(p) => self.put_file(p),
            Message::MakeDir { path } => {
                let r = self.checked(&path, Act::Dir).and_then(|(p, _)| {
                    self.shared.dir(p.components(), true).map_err(engine_err)?;
                    Ok(self.shared.scope.made_dir(&p))
                });
                let new = matches!(r, Ok(true));
                self.entry_result(&path, r.map(|_| ()))?;
                Ok(Flow::Go { progress: new })
            }
            Message::MakeLink { path, target } => {
                let r = self.checked(&path, Act::Link).and_then(|(p, _)| {
                    let (last, parent) = p.components().split_last().expect("not the root");
                    let dir = self.shared.dir(parent, true).map_err(engine_err)?;
                    if self.shared.scope.guards_existing(&p)
                        && zcp_engine::fs::entry_kind(&*dir, last).map_err(engine_err)?
                            == EntryKind::File
                    {
                        return Err((
                            ErrorCode::BadPath,
                            format!(
                                "the server sent a link for '{p}', where your file '{p}' is; a file is never replaced by a link of the server's choosing; refused, nothing written"
                            ),
                        ));
                    }
                    zcp_engine::fs::make_symlink(&*dir, last, &target).map_err(engine_err)
                });
                // A link made or changed is progress; the same link again, or a refused one,
                // is not.
                let changed = matches!(r, Ok(true));
                self.entry_result(&path, r.map(|_| ()))?;
                Ok(Flow::Go { progress: changed })
            }
            Message::DirTimes {
                path,
                mode,
                mtime_sec,
                mtime_nsec,
            } => {
                let r = self.checked(&path, Act::Times).and_then(|(p, how)| {
                    let dir = self.shared.dir(p.components(), false).map_err(engine_err)?;
                    // Permission bits only: the engine drops setuid, setgid and sticky; a
                    // directory that was there before the session can only lose bits.
                    let narrow = how == Times::Existing;
                    let mtime = (mtime_sec, mtime_nsec);
                    zcp_engine::fs::set_mode_within(&*dir, mode, narrow, mtime).map_err(engine_err)
                });
                // A directory's times are not an entry of their own: only a failure counts.
                if r.is_err() {
                    self.entry_result(&path, r)?;
                }
                CHATTER
            }
            Message::Go { file_id, restart } => self.go(file_id, restart),
            Message::ChunkMac {
                file_id,
                index,
                mac,
            } => {
                let Some(f) = self.open(file_id, "ChunkMac")? else {
                    return CHATTER;
                };
                let o = f.expect(index, mac).map_err(|r| self.proto(r))?;
                self.shared.outcome(&f, o);
                PROGRESS
            }
            Message::FileEnd { file_id, digest } => {
                let Some(f) = self.open(file_id, "FileEnd")? else {
                    return CHATTER;
                };
                f.end(digest).map_err(|r| self.proto(r))?;
                self.shared.settle(&f);
                PROGRESS
            }
            Message::FileAbort {
                file_id,
                code,
                message,
            } => {
                let Some(f) = self.open(file_id, "FileAbort")? else {
                    return CHATTER;
                };
                let message = escape_text(&message);
                f.fail(code, message.clone());
                self.shared.abandon(&f);
                self.totals.failed += 1;
                self.observer.notice(
                    Some(Failure {
                        path: f.target.clone(),
                        code: code.name(),
                        message,
                    }),
                    None,
                );
                PROGRESS
            }
            Message::Notice { message } => {
                let who = if self.shared.scope.is_pull() {
                    "server"
                } else {
                    "sender"
                };
                self.observer
                    .notice(None, Some(format!("{who}: {}", escape_text(&message))));
                CHATTER
            }
            Message::EntryFailed { path, message, .. } => {
                // A source entry the sender could not send; its path arrives as the sender
                // displays it, which a hostile sender may fill with anything: escaped again.
                self.totals.failed += 1;
                self.observer.notice(
                    Some(Failure {
                        path: escape_text(&String::from_utf8_lossy(&path)),
                        code: "source",
                        message: escape_text(&message),
                    }),
                    None,
                );
                // Reported, but no step forward: a stream of these cannot hold the session.
                CHATTER
            }
            Message::Finish => {
                // Once: a repeated Finish is chatter.
                let first = !self.finishing;
                self.finishing = true;
                Ok(Flow::Go { progress: first })
            }
            Message::Stats(s) if self.stats_sent => {
                self.totals.peer = s;
                Ok(Flow::Done)
            }
            Message::Error { code, message } => Err(SessionError::Refused {
                code,
                message: format!("{} aborted: {}", self.shared.peer(), escape_text(&message)),
            }),
            other => Err(self.proto(format!(
                "unexpected {} from {}",
                other.name(),
                self.shared.peer()
            ))),
        }
    }

    /// File `id` if it is open; `None` if it was given up or committed (frames about it are
    /// late, and ignored); a protocol error if no `PutFile` named it.
    fn open(&self, id: u32, what: &str) -> Result<Option<Arc<Incoming>>, SessionError> {
        match self.shared.lookup(id) {
            Lookup::Open(f) => Ok(Some(f)),
            Lookup::Gone => Ok(None),
            Lookup::Unknown => Err(self.proto(format!("{what} for unknown file {id}"))),
        }
    }

    fn put_file(&mut self, p: PutFile) -> Result<Flow, SessionError> {
        let id = p.file_id;
        let shown = escape(&p.dest);
        // File ids only increase: a repeated or lower id is a protocol error, so refusals
        // cannot repeat without new work, and no set of past ids grows.
        let next = self.shared.open_files().1;
        if u64::from(id) < next {
            return Err(self.proto(format!(
                "PutFile with file id {id}, not above the last one ({}); file ids only increase",
                next - 1
            )));
        }
        let prepared = prepare(self.shared, p);
        // Only this thread announces files: nothing moved the mark since the check above.
        let mut files = self.shared.open_files();
        files.1 = u64::from(id) + 1;
        if let Ok(Prepared { file, .. }) = &prepared {
            files.0.insert(id, file.clone());
        }
        drop(files);
        match prepared {
            Ok(Prepared { haves, ready, .. }) => {
                if !self.engines_told {
                    self.engines_told = true;
                    if let Message::FileReady { engine, note, .. } = &ready {
                        let note = (!note.is_empty()).then_some(note.as_str());
                        self.observer
                            .engines(&self.shared.cfg.sender_engine, None, engine, note);
                    }
                }
                for h in haves {
                    self.send(&Message::Have(h))?;
                }
                self.send(&ready)?;
            }
            Err((code, message)) => {
                self.totals.failed += 1;
                self.observer.notice(
                    Some(Failure {
                        path: shown,
                        code: code.name(),
                        message: message.clone(),
                    }),
                    None,
                );
                self.send(&Message::FileFailed {
                    file_id: id,
                    code,
                    message,
                })?;
                // Still a step: a new file id, a new entry handled.
            }
        }
        PROGRESS
    }

    /// The sender's answer to an offer: only for a file offered (`FileReady{resumed}`), once.
    /// A restart empties the part file and its journal *before* any chunk may land.
    fn go(&mut self, file_id: u32, restart: bool) -> Result<Flow, SessionError> {
        let Some(f) = self.open(file_id, "Go")? else {
            return CHATTER;
        };
        f.may_go().map_err(|r| self.proto(r))?;
        if restart {
            let reset = f.store.locked().as_mut().map(|s| {
                s.journal_open = false;
                s.session_recorded = false;
                s.tag = 0;
                s.part
                    .reset()
                    .and_then(|_| s.part.preallocate(f.plan.size()))
            });
            if let Some(Err(e)) = reset {
                let (c, m) = engine_err(e);
                self.shared.fail_file(&f, c, m);
                return PROGRESS;
            }
        }
        let kept = f.go(restart).map_err(|r| self.proto(r))?;
        f.skipped.store(kept, Ordering::Relaxed);
        PROGRESS
    }

    /// `path` validated, and allowed for `act` by the session's scope (never the root; in a
    /// pull only what was asked for; times only for directories this session made).
    fn checked(&self, path: &[u8], act: Act) -> Result<(RelPath, Times), Refusal> {
        let p = RelPath::parse(path).map_err(|e| (ErrorCode::BadPath, e.to_string()))?;
        let how = self.shared.scope.check(&p, act)?;
        Ok((p, how))
    }

    fn entry_result(&mut self, path: &[u8], r: Result<(), Refusal>) -> Result<(), SessionError> {
        match r {
            Ok(()) => {
                self.totals.entries += 1;
                Ok(())
            }
            Err((code, message)) => {
                self.totals.failed += 1;
                self.observer.notice(
                    Some(Failure {
                        path: escape(path),
                        code: code.name(),
                        message: message.clone(),
                    }),
                    None,
                );
                self.send(&Message::EntryFailed {
                    path: path.to_vec(),
                    code,
                    message,
                })
            }
        }
    }
}
