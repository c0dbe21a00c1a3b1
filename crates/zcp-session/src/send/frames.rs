//! The sending role's answer to each message from the receiver: offers (`Have`), a file ready
//! (`FileReady`), acknowledgements, commits and failures, keep-alives and notices. Every text
//! from the peer is escaped before it is reported; what is only chatter never restarts the
//! idle clock.

use std::time::Instant;

use zcp_engine::RecvEngine;
use zcp_wire::{ErrorCode, Have, Message, escape, escape_text};

use super::hash::HashJob;
use super::proof::{self, Claim};
use super::state::{MAX_COMMIT_WAIT, MAX_RETRIES, Sending, State, proto};
use crate::control::keepalive_every;
use crate::error::SessionError;
use crate::event::{Failure, FileOutcome, Report};

/// Memory the `Have`s a sender holds at once may take, over every file of a session: each
/// costs its message and 40 bytes an entry ([`have_cost`]), so a receiver cannot grow the
/// sender past this by offering chunks, however it splits its offers. One `Have` per chunk of
/// the open files (2^19) at 1500 entries a message is about 21 MiB.
pub(crate) const MAX_HELD_HAVE_BYTES: usize = 32 << 20;

/// Bytes a second a receiver hashing an existing target keeps up at least, for its `Progress`
/// to count (any disk hashes far faster; a peer inching the count up does not).
const MIN_HASH_RATE: f64 = (1u64 << 20) as f64;

/// What holding `h` costs: the message, and its entries on the heap (with an allocator's
/// overhead for each of the two allocations).
fn have_cost(h: &Have) -> usize {
    std::mem::size_of::<Have>() + h.entries.capacity() * std::mem::size_of::<(u64, [u8; 32])>() + 32
}

impl Sending {
    /// Handles one message from the receiver.
    pub(crate) fn handle_frame(&mut self, m: Message, now: Instant) -> Result<(), SessionError> {
        let progress = match m {
            Message::Have(h) => self.on_have(h).map(|()| false)?,
            Message::FileReady {
                file_id,
                engine,
                note,
                resumed,
                target,
            } => {
                let (engine, note) = (escape_text(&engine), escape_text(&note));
                self.on_ready(file_id, (&engine, &note), resumed, target, now)?;
                true
            }
            Message::FileFailed {
                file_id,
                code,
                message,
            } => {
                if !self.open.contains_key(&file_id) {
                    return Ok(());
                }
                self.fail_file(file_id, code, escape_text(&message), false, now);
                true
            }
            Message::ChunkAck { file_id, index, ok } => self.on_ack(file_id, index, ok, now)?,
            // The receiver's byte count is its own business: the file's size is known here.
            Message::FileCommitted {
                file_id,
                bytes: _,
                digest,
                verified,
                stored,
            } => {
                let claim = Claim {
                    digest,
                    verified,
                    stored,
                };
                self.on_committed(file_id, claim, now)?;
                true
            }
            Message::EntryDone { path } => {
                // A directory or link counts once the receiver says it made it. Progress
                // (times included): each answers an entry sent, so there are no more of them.
                let what = self.awaiting.answer(&path).map_err(proto)?;
                if what.is_entry() {
                    self.totals.entries += 1;
                }
                true
            }
            Message::EntryFailed {
                path,
                code,
                message,
            } => {
                let what = self.awaiting.answer(&path).map_err(proto)?;
                if !self.awaiting.failed(what, &path) {
                    return Ok(());
                }
                let f = Failure {
                    path: escape(&path),
                    code: code.name(),
                    message: escape_text(&message),
                };
                self.report(Report::Notice(Some(f), None));
                // Reported, but no step forward: a stream of these cannot hold the session
                // (each answers an entry sent, so there are no more of them than entries).
                false
            }
            Message::Progress { file_id, bytes } => self.on_keepalive(file_id, bytes, now)?,
            Message::Deleted { path, dir, failed } => self.on_deleted(&path, dir, failed)?,
            Message::Pruned(c) => self.on_pruned(c)?,
            Message::Notice { message } => {
                let note = format!("receiver: {}", escape_text(&message));
                self.report(Report::Notice(None, Some(note)));
                false
            }
            Message::Stats(s) if self.finishing => {
                self.stats(s);
                false
            }
            Message::Error { code, message } => {
                let message = escape_text(&message);
                return Err(match code {
                    ErrorCode::Verify => SessionError::Verify(message),
                    _ => SessionError::Refused { code, message },
                });
            }
            other => {
                return Err(proto(format!(
                    "unexpected {} from the receiver",
                    other.name()
                )));
            }
        };
        if progress {
            self.progress(now);
        }
        Ok(())
    }

    /// Alive and moving: hashing an existing target advances the count; during a commit
    /// (after `FileEnd`) the count stands still, for a bounded time. A count is of the file's
    /// bytes: past its size it is a lie, not progress.
    fn on_keepalive(
        &mut self,
        file_id: u32,
        bytes: u64,
        now: Instant,
    ) -> Result<bool, SessionError> {
        let Some(f) = self.open.get_mut(&file_id) else {
            return Ok(false);
        };
        if bytes > f.plan.size() {
            return Err(proto(format!(
                "Progress of {bytes} bytes for file {file_id}, a file of {}",
                f.plan.size()
            )));
        }
        let grew = bytes > f.progress;
        f.progress = f.progress.max(bytes);
        // A count that grows slower than any disk hashes is not work being done: a byte at a
        // time cannot hold the session.
        let since = now.saturating_duration_since(f.started).as_secs_f64();
        let believable = bytes as f64 >= since * MIN_HASH_RATE;
        let committing = f
            .ending_since
            .is_some_and(|t| now.saturating_duration_since(t) < MAX_COMMIT_WAIT);
        Ok((grew && believable) || committing)
    }

    /// Holds an offer of chunks for a file not yet ready: each chunk of the file at most once,
    /// and no more than [`MAX_HELD_HAVE_BYTES`] over the session.
    fn on_have(&mut self, h: Have) -> Result<(), SessionError> {
        let Some(f) = self.open.get_mut(&h.file_id) else {
            return Err(proto(format!("Have for unknown file {}", h.file_id)));
        };
        if f.state != State::Announced {
            return Err(proto(format!(
                "Have for file {} after its FileReady",
                h.file_id
            )));
        }
        let count = f.plan.count();
        if f.offered.is_empty() {
            f.offered = vec![0; count.div_ceil(64) as usize];
        }
        for (index, _) in &h.entries {
            if *index >= count {
                return Err(proto(format!(
                    "Have offers chunk {index} of a {count}-chunk file"
                )));
            }
            let (word, bit) = ((*index / 64) as usize, 1u64 << (*index % 64));
            if f.offered[word] & bit != 0 {
                return Err(proto(format!(
                    "Have offers chunk {index} of file {} twice",
                    h.file_id
                )));
            }
            f.offered[word] |= bit;
        }
        let cost = have_cost(&h);
        f.held += cost;
        f.haves.push(h);
        self.held_haves += cost;
        if self.held_haves > MAX_HELD_HAVE_BYTES {
            return Err(proto(format!(
                "more than {} MiB of offered chunks held at once",
                MAX_HELD_HAVE_BYTES >> 20
            )));
        }
        Ok(())
    }

    /// The receiver's engine for a file, of the class asked for: the first names the
    /// receiver's engine in the reports; a note not heard before is passed on (at most 64).
    fn engine_named(&mut self, engine: &str, note: &str) {
        if self.totals.receiver_engine.is_none() {
            self.totals.receiver_engine = Some(engine.to_string());
            self.report(Report::Engines {
                sender: match self.keys.encrypted() {
                    true => crate::client::SEALED_ENGINE.into(),
                    false => self.engine.name().into(),
                },
                sender_note: self.engine_note.clone(),
                receiver: engine.into(),
                receiver_note: (!note.is_empty()).then(|| note.to_string()),
            });
            self.notes_seen.insert(note.to_string());
        } else if !note.is_empty()
            && self.notes_seen.len() < 64
            && self.notes_seen.insert(note.to_string())
        {
            self.report(Report::Notice(None, Some(format!("receiver: {note}"))));
        }
    }

    /// A file is ready on the receiver: with an engine of the class the session asked for
    /// (else the file fails: `proof::engine_fits`), its offers to check or its chunks to send.
    fn on_ready(
        &mut self,
        file_id: u32,
        (engine, note): (&str, &str),
        resumed: bool,
        target: Vec<u8>,
        now: Instant,
    ) -> Result<(), SessionError> {
        match self.open.get(&file_id) {
            None => return Err(proto(format!("FileReady for unknown file {file_id}"))),
            Some(f) if f.state != State::Announced => {
                return Err(proto(format!("a second FileReady for file {file_id}")));
            }
            Some(_) => {}
        }
        let named = match proof::engine_fits(self.cfg.recv_engine, engine) {
            Ok(e) => e,
            Err(why) => {
                self.fail_file(file_id, ErrorCode::Verify, why, true, now);
                return Ok(());
            }
        };
        // Where the first file lands, for the summary (shown escaped).
        self.totals.stored_as.get_or_insert(target);
        self.engine_named(engine, note);
        let nonces = self.nonces;
        let Some(f) = self.open.get_mut(&file_id) else {
            return Ok(());
        };
        f.verify = self.cfg.verify.checks() && named != RecvEngine::Null;
        f.stores = named.stores();
        f.engine = engine.to_string();
        if !resumed {
            // Offers without `resumed` are dropped unanswered.
            f.haves.clear();
            self.held_haves -= std::mem::take(&mut f.held);
            self.start_sending(file_id, Vec::new());
            return Ok(());
        }
        if f.haves.is_empty() {
            return Err(proto(format!(
                "FileReady{{resumed}} for file {file_id} without any Have"
            )));
        }
        f.state = State::Checking;
        let haves = std::mem::take(&mut f.haves);
        f.held_target = haves
            .iter()
            .all(|h| (h.client_nonce, h.server_nonce) == nonces);
        let job = HashJob::Resume {
            file_id,
            file: f.file.clone(),
            plan: f.plan,
            haves,
            every: keepalive_every(self.cfg.idle),
        };
        self.out.hashes.push(job);
        Ok(())
    }

    /// Returns whether it was progress.
    fn on_ack(
        &mut self,
        file_id: u32,
        index: u64,
        ok: bool,
        now: Instant,
    ) -> Result<bool, SessionError> {
        let Some(f) = self.open.get_mut(&file_id) else {
            return Ok(false);
        };
        if matches!(f.state, State::Announced | State::Checking) {
            // Nothing of it was sent: an acknowledgement would keep a chunk from ever being
            // sent, a refusal would send one before the receiver made the file ready.
            return Err(proto(format!(
                "ChunkAck for file {file_id} before any of its chunks was sent"
            )));
        }
        if index >= f.plan.count() {
            return Err(proto(format!(
                "ChunkAck for chunk {index} of a {}-chunk file",
                f.plan.count()
            )));
        }
        let i = index as usize;
        if ok && f.acked[i] {
            // The same acknowledgement again moves nothing.
            return Ok(false);
        }
        if f.verify && !(f.departed[i] && f.macs[i].is_some()) {
            // Its MAC was not sent (it goes only once the chunk's bytes have left): an
            // honest receiver cannot have verified it. Without MACs (`--verify none`) an
            // acknowledgement may overtake the transport's word that the chunk left, so it
            // is taken, and `FileEnd` still waits for every chunk to have left.
            return Err(proto(format!(
                "ChunkAck for chunk {index} of file {file_id}, whose ChunkMac was not sent"
            )));
        }
        if ok {
            f.acked[i] = true;
            f.n_acked += 1;
            self.maybe_end(file_id);
            return Ok(true);
        }
        let tries = f.retries.entry(index).or_insert(0);
        *tries += 1;
        if *tries > MAX_RETRIES {
            let msg = format!(
                "chunk {index} failed verification {} times; giving up on this file",
                MAX_RETRIES + 1
            );
            self.fail_file(file_id, ErrorCode::Verify, msg, true, now);
            return Ok(true);
        }
        f.macs[i] = None;
        f.departed[i] = false;
        let note = format!(
            "{}: chunk {index} failed verification on the receiver; sending it again",
            f.display
        );
        self.totals.resent += 1;
        self.report(Report::Notice(None, Some(note)));
        self.schedule(file_id, vec![index]);
        Ok(true)
    }

    /// The receiver committed file `file_id`: done only if what it says proves the file
    /// stored and verified as the session asked (`proof::judge`); otherwise the file fails
    /// (class `verify`), whatever the receiver made of it. The size and the digest reported
    /// are this side's own: a receiver's word, even one holding the key, does not go into a
    /// report or a server's transfer log as fact.
    fn on_committed(
        &mut self,
        file_id: u32,
        claim: Claim,
        now: Instant,
    ) -> Result<(), SessionError> {
        let Some(f) = self.open.get(&file_id) else {
            return Err(proto(format!("FileCommitted for unknown file {file_id}")));
        };
        let proved = match proof::judge(f, claim) {
            Ok(p) => p,
            Err(why) => {
                // The receiver takes the file for committed: nothing to tell it.
                self.fail_file(file_id, ErrorCode::Verify, why, false, now);
                return Ok(());
            }
        };
        let Some(f) = self.remove(file_id) else {
            return Ok(());
        };
        self.totals.files += 1;
        self.totals.last_commit = Some(now);
        let seconds = f.seconds(now);
        self.report(Report::FileDone(FileOutcome {
            path: f.display,
            bytes: f.plan.size(),
            skipped: f.skipped,
            seconds,
            engine: f.engine,
            verified: proved.verified,
            stored: proved.stored,
            digest: proved.digest,
            failure: None,
        }));
        Ok(())
    }
}
