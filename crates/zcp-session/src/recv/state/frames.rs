//! The receiving role's answer to each control message from the sender, and to the
//! file-system work those messages need. Every name is checked against the session's
//! [`crate::confine::Scope`] before any work is asked for, and every text from the peer is
//! escaped before it is reported.

use std::time::{Duration, Instant};

use zcp_wire::{
    ChunkPlan, ChunkProof, ErrorCode, Have, MAX_HAVE_ENTRIES, Message, Nonce, PutFile, RelPath,
    escape, escape_text,
};

use super::{Receiving, Refusal};
use crate::confine::{Act, Times};
use crate::error::SessionError;
use crate::event::{Failure, Report};
use crate::recv::chunks::{FileSpec, JournalState, MAX_CHUNKS, MAX_SESSION_CHUNKS, RxFile};

/// Most files a session may have open at once on the receiver.
pub(crate) const MAX_OPEN_FILES: usize = 1024;

/// What the loop does after a frame.
#[derive(Debug)]
pub(crate) enum Step {
    /// Nothing more than carrying out the outputs.
    Next,
    /// File-system work; its result goes to [`Receiving::fs_done`].
    Fs(FsJob),
    /// `--delete`: remove what the sender did not announce ([`crate::recv::prune::run`]).
    Prune(crate::recv::prune::PruneJob),
    /// The session is over (the sender's `Stats` after ours).
    Done,
}

/// File-system work a frame needs, done by the loop without the role's lock.
#[derive(Debug)]
pub(crate) enum FsJob {
    /// Resolve, open (or resume) and prepare a file announced with `PutFile`.
    Prepare { put: PutFile, plan: ChunkPlan },
    /// Make a directory (and missing parents).
    MakeDir { raw: Vec<u8>, path: RelPath },
    /// Make a link; with `guard`, never over a file that is there.
    MakeLink {
        raw: Vec<u8>,
        path: RelPath,
        target: Vec<u8>,
        guard: bool,
    },
    /// Set a directory's mode (only narrowing it, with `narrow`) and mtime.
    Times {
        raw: Vec<u8>,
        path: RelPath,
        mode: u32,
        narrow: bool,
        mtime: (i64, u32),
    },
    /// `Go{restart}`: empty the part file and preallocate it again.
    Reset { file: u32, size: u64, sparse: bool },
}

/// The result of an [`FsJob`].
#[derive(Debug)]
pub(crate) enum FsDone {
    Prepared {
        id: u32,
        shown: String,
        result: Result<Prepared, Refusal>,
    },
    /// A `MakeDir`, `MakeLink` or `DirTimes`: `Ok(changed)` (a directory or link made or
    /// changed), or the refusal.
    Entry {
        raw: Vec<u8>,
        act: Act,
        path: Option<RelPath>,
        result: Result<bool, Refusal>,
    },
    Reset {
        file: u32,
        result: Result<(), Refusal>,
    },
}

/// Chunks held from an earlier session (or the existing target's), as one `Have` group.
#[derive(Debug, Clone)]
pub(crate) struct Offer {
    pub(crate) nonces: (Nonce, Nonce),
    pub(crate) old_file_id: u32,
    /// Each chunk offered, with its proof (the `Have` carries the MAC).
    pub(crate) entries: Vec<(u64, ChunkProof)>,
}

/// A file ready to receive.
#[derive(Debug)]
pub(crate) struct Prepared {
    pub(crate) spec: FileSpec,
    pub(crate) journal: JournalState,
    pub(crate) offers: Vec<Offer>,
    /// The offers are the existing target's chunks.
    pub(crate) in_place: bool,
    /// Why the engine differs from the one asked for.
    pub(crate) note: Option<String>,
    /// How long preparing took the receiver (waiting for an earlier attempt's lock,
    /// hashing an existing target; not the time its keep-alives waited for the peer): its
    /// own work, not the peer's silence.
    pub(crate) own_work: Duration,
}

impl Receiving {
    /// Handles one message from the sender. Only real work restarts the idle clock: here,
    /// the first `Finish`; chunks verified and files committed restart it where they happen.
    pub(crate) fn handle_frame(&mut self, m: Message, now: Instant) -> Result<Step, SessionError> {
        if self.mirror.asked()
            && matches!(
                m,
                Message::PutFile(_) | Message::MakeDir { .. } | Message::MakeLink { .. }
            )
        {
            return Err(self.proto(format!("{} after Prune", m.name())));
        }
        match m {
            Message::Prune => self.on_prune(),
            Message::PutFile(p) => self.put_file(p),
            Message::MakeDir { path, top } => Ok(self.make_dir(path, top)),
            Message::MakeLink { path, target } => Ok(self.make_link(path, target)),
            Message::DirTimes {
                path,
                mode,
                mtime_sec,
                mtime_nsec,
            } => Ok(self.dir_times(path, mode, (mtime_sec, mtime_nsec))),
            Message::Go { file_id, restart } => self.go(file_id, restart),
            Message::ChunkMac {
                file_id,
                index,
                mac,
            } => {
                if let Some(f) = self.open_file(file_id, "ChunkMac")? {
                    let o = f.expect(index, mac);
                    let o = o.map_err(|r| self.proto(r.message))?;
                    self.outcome(file_id, o, now);
                }
                Ok(Step::Next)
            }
            Message::FileEnd { file_id, digest } => {
                if let Some(f) = self.open_file(file_id, "FileEnd")? {
                    let r = f.end(digest);
                    r.map_err(|r| self.proto(r.message))?;
                    self.settle(file_id, now);
                }
                Ok(Step::Next)
            }
            Message::FileAbort {
                file_id,
                code,
                message,
            } => self.file_abort(file_id, code, &message),
            Message::Notice { message } => {
                let who = if self.scope.is_pull() {
                    "server"
                } else {
                    "sender"
                };
                let note = format!("{who}: {}", escape_text(&message));
                self.report(Report::Notice(None, Some(note)));
                Ok(Step::Next)
            }
            Message::EntryFailed { path, message, .. } => {
                // A source entry the sender could not send; its path arrives as the sender
                // displays it, which a hostile sender may fill with anything: escaped again.
                let failure = Failure {
                    path: escape_text(&String::from_utf8_lossy(&path)),
                    code: "source",
                    message: escape_text(&message),
                };
                self.source_failures += 1;
                self.report(Report::Notice(Some(failure), None));
                Ok(Step::Next)
            }
            Message::Progress { file_id, bytes } => {
                // The sender checking the chunks offered for resume, before its `Go`.
                if let Some(f) = self.files.get_mut(&file_id)
                    && f.resume_progress(bytes, now)
                        .map_err(|r| self.proto(r.message))?
                {
                    self.progress(now);
                }
                Ok(Step::Next)
            }
            Message::Plan { files, bytes } => {
                // For the display only, and not progress: a peer that repeats it is chatter.
                self.report(Report::Plan { files, bytes });
                Ok(Step::Next)
            }
            Message::Finish => {
                // Once: a repeated Finish is chatter.
                if !self.finishing {
                    self.finishing = true;
                    self.progress(now);
                    self.unpruned();
                }
                Ok(Step::Next)
            }
            Message::Stats(s) if self.stats_sent => {
                self.totals.peer = s;
                Ok(Step::Done)
            }
            Message::Error { code, message } => Err(SessionError::Refused {
                code,
                message: format!("{} aborted: {}", self.peer(), escape_text(&message)),
            }),
            other => Err(self.proto(format!("unexpected {} from {}", other.name(), self.peer()))),
        }
    }

    fn make_dir(&mut self, path: Vec<u8>, top: bool) -> Step {
        self.entry(path, Act::Dir)
            .map_or(Step::Next, |(raw, path, _)| {
                self.mirror.dir(&path, top);
                Step::Fs(FsJob::MakeDir { raw, path })
            })
    }

    fn make_link(&mut self, path: Vec<u8>, target: Vec<u8>) -> Step {
        self.entry(path, Act::Link)
            .map_or(Step::Next, |(raw, path, _)| {
                self.mirror.name(&path, b"");
                let guard = self.scope.guards_existing(&path);
                Step::Fs(FsJob::MakeLink {
                    raw,
                    path,
                    target,
                    guard,
                })
            })
    }

    fn dir_times(&mut self, path: Vec<u8>, mode: u32, mtime: (i64, u32)) -> Step {
        self.entry(path, Act::Times)
            .map_or(Step::Next, |(raw, path, how)| {
                // A directory that was there before the session can only lose bits.
                Step::Fs(FsJob::Times {
                    raw,
                    path,
                    mode,
                    narrow: how == Times::Existing,
                    mtime,
                })
            })
    }

    /// The sender gave a file up. No progress: a stream of announce-then-abort cannot hold
    /// the session. A source that changed while being sent leaves nothing to resume: a later
    /// run finds another size (the journal no longer fits) or other bytes (it starts over),
    /// so its part file and journal are removed rather than kept.
    fn file_abort(
        &mut self,
        id: u32,
        code: ErrorCode,
        message: &str,
    ) -> Result<Step, SessionError> {
        if self.open_file(id, "FileAbort")?.is_none() {
            return Ok(Step::Next);
        }
        // Only a receiver says a file is already there: from a sender it is no reason to
        // count the file as left (`--ignore-existing`), but a failure like any other.
        let (code, message) = match code {
            ErrorCode::Exists => (
                ErrorCode::Protocol,
                &*format!(
                    "the sender gave it up as 'exists', which only a receiver says: {message}"
                ),
            ),
            _ => (code, message),
        };
        let resumable = code != ErrorCode::SourceChanged;
        let target = self.give_up(id, resumable).map(|f| f.spec.target);
        self.report(Report::Notice(
            Some(Failure {
                path: target.unwrap_or_default(),
                code: code.name(),
                message: escape_text(message),
            }),
            None,
        ));
        Ok(Step::Next)
    }

    /// `raw` validated and allowed for `act` by the session's scope; a refusal is answered
    /// and reported here (`None`).
    fn entry(&mut self, raw: Vec<u8>, act: Act) -> Option<(Vec<u8>, RelPath, Times)> {
        let checked = RelPath::parse(&raw)
            .map_err(|e| Refusal::new(ErrorCode::BadPath, e.to_string()))
            .and_then(|p| self.scope.check(&p, act).map(|how| (p, how)));
        match checked {
            Ok((p, how)) => Some((raw, p, how)),
            Err(refusal) => {
                self.entry_failed(&raw, refusal);
                None
            }
        }
    }

    fn entry_failed(&mut self, raw: &[u8], Refusal { code, message }: Refusal) {
        self.report(Report::Notice(
            Some(Failure {
                path: escape(raw),
                code: code.name(),
                message: message.clone(),
            }),
            None,
        ));
        self.send(Message::EntryFailed {
            path: raw.to_vec(),
            code,
            message,
        });
    }

    /// A `PutFile`: checks what needs no file system (the id, the plan, the limits, a pulled
    /// name), then asks for the file to be prepared.
    fn put_file(&mut self, p: PutFile) -> Result<Step, SessionError> {
        let id = p.file_id;
        // File ids only increase: a repeated or lower id is a protocol error, so refusals
        // cannot repeat without new work, and no set of past ids grows.
        if u64::from(id) < self.next_id {
            return Err(self.proto(format!(
                "PutFile with file id {id}, not above the last one ({}); file ids only increase",
                self.next_id - 1
            )));
        }
        self.next_id = u64::from(id) + 1;
        // A file made ready is a step (in `open`); a refusal is not, so a stream of refused
        // files cannot hold the session.
        let shown = escape(&p.dest);
        match self.admit(&p) {
            Ok(plan) => {
                if let Ok(dest) = RelPath::parse(&p.dest) {
                    self.mirror.name(&dest, &p.name);
                }
                self.preparing = Some(id);
                Ok(Step::Fs(FsJob::Prepare { put: p, plan }))
            }
            Err(refusal) => {
                self.refuse_file(id, shown, refusal);
                Ok(Step::Next)
            }
        }
    }

    fn admit(&self, p: &PutFile) -> Result<ChunkPlan, Refusal> {
        let plan = ChunkPlan::new(p.size, p.chunk_size)
            .map_err(|e| Refusal::new(ErrorCode::Limit, e.to_string()))?;
        if plan.count() > MAX_CHUNKS {
            return Err(Refusal::new(
                ErrorCode::Limit,
                format!(
                    "{} chunks is over the limit of {MAX_CHUNKS}; use a larger chunk size",
                    plan.count()
                ),
            ));
        }
        if self.files.len() >= MAX_OPEN_FILES {
            return Err(Refusal::new(
                ErrorCode::Limit,
                format!("more than {MAX_OPEN_FILES} files open in one session"),
            ));
        }
        let open = self.open_chunks;
        if open + plan.count() > MAX_SESSION_CHUNKS {
            return Err(Refusal::new(
                ErrorCode::Limit,
                format!(
                    "{} chunks with the {open} of the files open is over the session's limit of {MAX_SESSION_CHUNKS}",
                    plan.count()
                ),
            ));
        }
        let dest =
            RelPath::parse(&p.dest).map_err(|e| Refusal::new(ErrorCode::BadPath, e.to_string()))?;
        crate::confine::not_reserved(&dest, &p.name)?;
        if self.scope.is_pull() {
            // The client chose every name itself: a name of the server's choosing is refused.
            if !p.name.is_empty() {
                return Err(Refusal::new(
                    ErrorCode::BadPath,
                    format!(
                        "the server sent file '{}' under a name of its own ('{}'); refused, nothing written",
                        escape(&p.dest),
                        escape(&p.name)
                    ),
                ));
            }
            self.scope.check(&dest, Act::File)?;
        }
        Ok(plan)
    }

    fn refuse_file(&mut self, id: u32, shown: String, Refusal { code, message }: Refusal) {
        self.report(Report::Notice(
            Some(Failure {
                path: shown,
                code: code.name(),
                message: message.clone(),
            }),
            None,
        ));
        self.send(Message::FileFailed {
            file_id: id,
            code,
            message,
        });
    }

    /// The sender's answer to an offer: only for a file offered (`FileReady{resumed}`), once.
    /// A restart empties the part file and its journal *before* any chunk may land.
    fn go(&mut self, file_id: u32, restart: bool) -> Result<Step, SessionError> {
        let Some(f) = self.open_file(file_id, "Go")? else {
            return Ok(Step::Next);
        };
        let (may, stores, size) = (f.may_go(), f.spec.io.is_some(), f.plan().size());
        let sparse = f.spec.sparse;
        may.map_err(|r| self.proto(r.message))?;
        if restart && stores {
            return Ok(Step::Fs(FsJob::Reset {
                file: file_id,
                size,
                sparse,
            }));
        }
        self.go_now(file_id, restart)
    }

    fn go_now(&mut self, file_id: u32, restart: bool) -> Result<Step, SessionError> {
        if let Some(f) = self.files.get_mut(&file_id) {
            f.go(restart).map_err(|r| self.proto(r.message))?;
        }
        Ok(Step::Next)
    }

    /// The result of file-system work a frame asked for.
    pub(crate) fn fs_done(&mut self, done: FsDone, now: Instant) -> Result<(), SessionError> {
        // Out of descriptors: the process's want, not this entry's fault. The session ends as
        // busy (the sender's `--retry` comes back and resumes) instead of failing entry after
        // entry for as long as it lasts.
        let refusal = match &done {
            FsDone::Prepared { result, .. } => result.as_ref().err(),
            FsDone::Entry { result, .. } => result.as_ref().err(),
            FsDone::Reset { result, .. } => result.as_ref().err(),
        };
        if let Some(r) = refusal.filter(|r| r.is_out_of_descriptors()) {
            return Err(r.clone().into());
        }
        match done {
            FsDone::Prepared { id, shown, result } => {
                self.preparing = None;
                match result {
                    Ok(p) => self.open(id, p, now),
                    Err(refusal) => self.refuse_file(id, shown, refusal),
                }
            }
            FsDone::Entry {
                raw,
                act,
                path,
                result,
            } => match result {
                Ok(changed) => {
                    // Every entry is answered: the sender counts it only on this word.
                    self.send(Message::EntryDone { path: raw });
                    let new = match (act, path) {
                        // A repeated MakeDir of the same directory is no progress; nor is a
                        // link made again at a path this session already made one (even to
                        // another target: flipping a link back and forth is not work).
                        (Act::Dir, Some(p)) => {
                            self.mirror.made_dir(Some(&p));
                            self.scope.made_dir(&p)
                        }
                        (Act::Link, Some(p)) => changed && self.scope.made_link(&p),
                        // A directory's times are not an entry of their own.
                        _ => return Ok(()),
                    };
                    self.totals.entries += 1;
                    if new {
                        self.progress(now);
                    }
                }
                Err(refusal) => {
                    self.mirror.made_dir(None);
                    self.entry_failed(&raw, refusal)
                }
            },
            FsDone::Reset { file, result } => match result {
                Ok(()) => {
                    self.go_now(file, true)?;
                }
                Err(Refusal {
                    code: c,
                    message: m,
                }) => self.fail_file(file, c, m, now),
            },
        }
        Ok(())
    }

    /// A prepared file opens: its offers go out as `Have`s, then its `FileReady`.
    fn open(&mut self, id: u32, p: Prepared, now: Instant) {
        if !self.engines_told {
            self.engines_told = true;
            self.report(Report::Engines {
                sender: self.cfg.sender_engine.clone(),
                sender_note: None,
                receiver: p.spec.engine.name().into(),
                receiver_note: p.note.clone(),
            });
        }
        let offered: Vec<(u64, ChunkProof)> = p
            .offers
            .iter()
            .flat_map(|o| o.entries.iter().copied())
            .collect();
        for o in &p.offers {
            for entries in o.entries.chunks(MAX_HAVE_ENTRIES) {
                self.send(Message::Have(Have {
                    file_id: id,
                    client_nonce: o.nonces.0,
                    server_nonce: o.nonces.1,
                    old_file_id: o.old_file_id,
                    entries: entries.iter().map(|(i, p)| (*i, p.mac)).collect(),
                }));
            }
        }
        let ready = Message::FileReady {
            file_id: id,
            engine: p.spec.engine.name().into(),
            note: p.note.unwrap_or_default(),
            target: p.spec.target.clone().into_bytes(),
            resumed: !offered.is_empty(),
        };
        // Preparing earns keep-alive credit (the receiver's own work paused its idle clock,
        // the sender's resume check of the offers may count as work) once per target and
        // session: a target announced and given up again and again buys nothing more.
        let first = self.credit(&p.spec.target, p.spec.existing.as_ref().map(|e| e.id));
        let offers = !offered.is_empty();
        if first {
            self.paused(p.own_work, now);
        }
        let verify = self.cfg.verify.checks();
        let mut f = RxFile::new(p.spec, p.journal, offered, (p.in_place, verify), now);
        f.check_counts = first && offers;
        self.open_chunks += f.plan().count();
        if let Some(old) = self.files.insert(id, f) {
            // Ids only increase, so none is open twice; were one, its chunks leave the count.
            self.open_chunks -= old.plan().count();
        }
        // A file made ready is not progress by itself: its bytes, verified chunks and commit
        // are.
        self.send(ready);
    }
}
