//! The walk's entries, announced: directories and links (each awaiting its answer), a
//! source passed over or failed, and files (`PutFile`, with the state a file keeps until its
//! commit proves it).

use std::collections::HashMap;
use std::fs::File;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use zcp_engine::fs::Meta;
use zcp_wire::{ChunkPlan, ErrorCode, Message, PutFile};

use super::entries::Awaited;
use super::state::{OutFile, Sending, State};
use crate::event::{Failure, Report};
use crate::manifest::Entry;
use crate::recv::chunks::MAX_CHUNKS;

impl Sending {
    /// Announces the next entry of the walk.
    pub(crate) fn take_entry(&mut self, entry: Entry, now: Instant) {
        match entry {
            // Counted when the receiver answers (`EntryDone`), not here.
            Entry::Dir { dest, top } => {
                if top {
                    self.prune.top(&dest);
                }
                self.awaiting.push(Awaited::Dir, dest.clone());
                self.send(Message::MakeDir { path: dest, top });
            }
            Entry::Link { dest, target } => {
                self.awaiting.push(Awaited::Link, dest.clone());
                self.send(Message::MakeLink { path: dest, target });
            }
            Entry::Skip {
                display,
                why,
                fail: true,
                ..
            } => {
                // The receiver counts it too: in a pull it is the side that reports.
                let path = display.as_bytes();
                self.send(Message::EntryFailed {
                    path: path[..path.len().min(zcp_wire::MAX_PATH)].to_vec(),
                    code: ErrorCode::Io,
                    message: why.clone(),
                });
                let f = Failure {
                    path: display,
                    code: "source",
                    message: why,
                };
                self.report(Report::Notice(Some(f), None));
            }
            Entry::Skip {
                display, why, ours, ..
            } => {
                if !ours {
                    // Passed over: the receiver may hold that name, which is not to go.
                    self.prune.flaw();
                }
                let note = format!("skipped {display}: {why}");
                self.send(Message::Notice {
                    message: note.clone(),
                });
                self.report(Report::Notice(None, Some(note)));
            }
            Entry::File {
                dest,
                name,
                file,
                meta,
                display,
            } => self.announce(dest, name, file, meta, display, now),
        }
    }

    fn announce(
        &mut self,
        dest: Vec<u8>,
        name: Vec<u8>,
        file: Arc<File>,
        meta: Meta,
        display: String,
        now: Instant,
    ) {
        let chunk_size = self
            .cfg
            .chunk_size
            .unwrap_or_else(|| ChunkPlan::default_chunk_size(meta.size));
        let plan = match ChunkPlan::new(meta.size, chunk_size) {
            Ok(p) if p.count() <= MAX_CHUNKS => p,
            r => {
                let message = match r {
                    Ok(p) => format!(
                        "{} chunks is over the limit of {MAX_CHUNKS}; use a larger --chunk-size",
                        p.count()
                    ),
                    Err(e) => e.to_string(),
                };
                let f = Failure {
                    path: display,
                    code: "limit",
                    message,
                };
                self.report(Report::Notice(Some(f), None));
                return;
            }
        };
        let id = self.next_id;
        self.next_id += 1;
        self.open_chunks += plan.count();
        let count = plan.count() as usize;
        self.send(Message::PutFile(PutFile {
            file_id: id,
            dest,
            name,
            size: meta.size,
            mode: meta.mode,
            mtime_sec: meta.mtime.0,
            mtime_nsec: meta.mtime.1,
            chunk_size: plan.chunk_size(),
            sparse: meta.sparse(),
        }));
        let f = OutFile {
            file,
            display,
            meta,
            plan,
            state: State::Announced,
            haves: Vec::new(),
            offered: Vec::new(),
            held: 0,
            progress: 0,
            ending_since: None,
            sent_digest: None,
            held_target: false,
            macs: vec![None; count],
            cvs: vec![[0; 32]; count],
            root: None,
            departed: vec![false; count],
            acked: vec![false; count],
            n_acked: 0,
            retries: HashMap::new(),
            skipped: 0,
            cancelled: Arc::new(AtomicBool::new(false)),
            started: now,
            began: None,
            engine: String::new(),
            verify: true,
            stores: true,
        };
        self.open.insert(id, f);
    }
}
