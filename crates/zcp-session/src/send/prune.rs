//! `--delete` on the sending side. Once every file is done and the walk was whole (nothing
//! failed, nothing passed over but zcp's own part files), the sender sends `Prune` and waits:
//! the receiver names each entry it removes (`Deleted`) and ends with `Pruned{end}`, whose
//! counts must match what it named. Only then do the directories' times and `Finish` go out,
//! so no deletion can change a directory's mtime after it was set. A walk that was not whole
//! asks for nothing: what was not announced could be what failed.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use zcp_wire::{DeleteMode, ErrorCode, PruneCount, RelPath, escape, escape_text};

use super::state::{Sending, proto};
use crate::error::SessionError;
use crate::event::{Failure, Report};

/// Removals a sender remembers (16 bytes each, to refuse one named twice); past this a
/// `Deleted` is no longer progress.
pub(crate) const MAX_NAMED: usize = 1 << 20;
/// How long a receiver's pruning (its `Deleted`s and keep-alives) counts as progress, at
/// most: a receiver cannot hold the session by naming removals or counting forever.
pub(crate) const MAX_PRUNE_WAIT: Duration = Duration::from_secs(2 * 60 * 60);

/// Where the sender is with `--delete`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Not yet asked.
    #[default]
    Before,
    /// `Prune` went out; the receiver's answers come.
    Asked,
    /// Over, or never asked for.
    Over,
}

/// The sending role's `--delete` state.
#[derive(Debug, Default)]
pub(crate) struct SendPrune {
    mode: DeleteMode,
    /// Failures and entries passed over so far: with any, no `Prune` goes.
    flaws: u64,
    stage: Stage,
    /// What the receiver named so far: removed, and not (failed or kept).
    named: (u64, u64),
    scanned: u64,
    /// The tops this side sent (canonical paths): every removal lies beneath one.
    tops: HashSet<Vec<u8>>,
    /// The removals named so far (at most [`MAX_NAMED`]), by a hash of their paths.
    seen: HashSet<[u8; 16]>,
    /// When `Prune` went out.
    asked_at: Option<Instant>,
}

impl SendPrune {
    pub(crate) fn new(mode: DeleteMode) -> SendPrune {
        SendPrune {
            mode,
            ..SendPrune::default()
        }
    }

    /// Something was not sent whole (a failure, or an entry passed over).
    pub(crate) fn flaw(&mut self) {
        self.flaws += 1;
    }

    /// A `MakeDir{top}` went out for `dest`.
    pub(crate) fn top(&mut self, dest: &[u8]) {
        if let (true, Ok(p)) = (self.mode.prunes(), RelPath::parse(dest)) {
            self.tops.insert(p.to_bytes());
        }
    }

    /// Whether `path` lies beneath a top this side sent (or, `at_top`, is one).
    fn beneath_a_top(&self, path: &[u8], at_top: bool) -> bool {
        (at_top && self.tops.contains(path))
            || path
                .iter()
                .enumerate()
                .filter(|(_, b)| **b == b'/')
                .any(|(i, _)| self.tops.contains(&path[..i]))
    }

    /// Whether the receiver's pruning may still count as progress.
    fn recent(&self) -> bool {
        self.asked_at.is_some_and(|t| t.elapsed() < MAX_PRUNE_WAIT)
    }
}

impl Sending {
    /// Whether the pruning is over (or was never asked for), so the directories' times may
    /// go out; asks for it first when the walk was whole.
    pub(crate) fn prune_over(&mut self) -> bool {
        let p = &mut self.prune;
        match p.stage {
            Stage::Over => return true,
            Stage::Asked => return false,
            Stage::Before => {}
        }
        if !p.mode.prunes() {
            p.stage = Stage::Over;
            return true;
        }
        if p.flaws > 0 {
            p.stage = Stage::Over;
            let f = Failure {
                path: String::new(),
                code: "delete",
                message: format!(
                    "{}: nothing deleted: {} entr{} of this transfer did not arrive whole (or \
                     were passed over), and what was not sent may be what failed",
                    p.mode.flag(),
                    p.flaws,
                    if p.flaws == 1 { "y" } else { "ies" }
                ),
            };
            self.report(Report::Notice(Some(f), None));
            return true;
        }
        p.stage = Stage::Asked;
        p.asked_at = Some(Instant::now());
        self.send(zcp_wire::Message::Prune);
        false
    }

    /// The receiver removed `path` (or, in a dry run, would), or could not.
    pub(crate) fn on_deleted(
        &mut self,
        path: &[u8],
        dir: bool,
        failed: Option<(ErrorCode, String)>,
    ) -> Result<bool, SessionError> {
        if self.prune.stage != Stage::Asked {
            return Err(proto(format!(
                "Deleted '{}' when no Prune was asked for",
                escape(path)
            )));
        }
        let p = &mut self.prune;
        // A tree's top itself only as one that could not be pruned (its listing failed).
        if !p.beneath_a_top(path, failed.is_some()) {
            return Err(proto(format!(
                "Deleted '{}', which lies beneath no tree this side sent",
                escape(path)
            )));
        }
        let key = crate::confine::key_of(path);
        let new = p.seen.len() < MAX_NAMED && p.seen.insert(key);
        if !new && p.seen.contains(&key) {
            return Err(proto(format!("Deleted '{}' named twice", escape(path))));
        }
        let new = new && p.recent();
        let shown = escape(path);
        match failed {
            None => {
                p.named.0 += 1;
                let dry_run = p.mode == DeleteMode::DryRun;
                self.report(Report::Deleted {
                    path: shown,
                    dir,
                    dry_run,
                });
            }
            Some((ErrorCode::Exists, message)) => {
                // Kept for what it holds that the rules keep: said, not a failure.
                p.named.1 += 1;
                let note = format!("receiver: {shown}: {}", escape_text(&message));
                self.report(Report::Notice(None, Some(note)));
            }
            Some((code, message)) => {
                p.named.1 += 1;
                let f = Failure {
                    path: shown,
                    code: code.name(),
                    message: format!("not deleted: {}", escape_text(&message)),
                };
                self.report(Report::Notice(Some(f), None));
            }
        }
        Ok(new)
    }

    /// The receiver's keep-alive while it prunes, or (`end`) how it went: its counts must be
    /// what it named.
    pub(crate) fn on_pruned(&mut self, c: PruneCount) -> Result<bool, SessionError> {
        let p = &mut self.prune;
        if p.stage != Stage::Asked {
            return Err(proto("Pruned when no Prune was asked for".into()));
        }
        if c.scanned < p.scanned {
            return Err(proto(
                "a Pruned that counts fewer entries than before".into(),
            ));
        }
        let grew = c.scanned > p.scanned;
        p.scanned = c.scanned;
        if !c.end {
            return Ok(grew && p.recent());
        }
        if (c.deleted, c.failed) != p.named {
            return Err(proto(format!(
                "Pruned counts {} deleted and {} failed where {} and {} were named",
                c.deleted, c.failed, p.named.0, p.named.1
            )));
        }
        if !c.refused.is_empty() && p.named != (0, 0) {
            return Err(proto("Pruned refused after naming deletions".into()));
        }
        p.stage = Stage::Over;
        if !c.refused.is_empty() {
            let f = Failure {
                path: String::new(),
                code: "delete",
                message: format!(
                    "{}: the receiver deleted nothing: {}",
                    p.mode.flag(),
                    escape_text(&c.refused)
                ),
            };
            self.report(Report::Notice(Some(f), None));
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use zcp_engine::RecvEngine;
    use zcp_wire::{DeleteMode, ErrorCode, Message, PruneCount, VerifyMode};

    use crate::event::Report;
    use crate::manifest::Entry;
    use crate::send::state::Sending;
    use crate::send::tests::{config, sending};

    /// A sender under `mode` that walked the tree `t` (a top), answered, and finished.
    fn walked(mode: DeleteMode, skipped: bool) -> Sending {
        let mut s = sending(config(VerifyMode::Blake3, mode, RecvEngine::Auto));
        let now = Instant::now();
        s.take_entry(
            Entry::Dir {
                dest: b"./t".to_vec(),
                top: true,
            },
            now,
        );
        if skipped {
            s.take_entry(
                Entry::Skip {
                    display: "t/fifo".into(),
                    why: "is a FIFO".into(),
                    fail: false,
                    ours: false,
                },
                now,
            );
        }
        s.handle_frame(
            Message::EntryDone {
                path: b"./t".to_vec(),
            },
            now,
        )
        .unwrap();
        s.finish(Vec::new());
        s
    }

    fn frames(s: &mut Sending) -> Vec<&'static str> {
        s.take_out().frames.iter().map(Message::name).collect()
    }

    fn deleted(path: &[u8], failed: Option<(ErrorCode, String)>) -> Message {
        Message::Deleted {
            path: path.to_vec(),
            dir: false,
            failed,
        }
    }

    fn end(deleted: u64, failed: u64) -> Message {
        Message::Pruned(PruneCount {
            deleted,
            failed,
            end: true,
            ..PruneCount::default()
        })
    }

    #[test]
    fn prune_goes_once_the_walk_is_whole_and_times_and_finish_wait_for_its_end() {
        let mut s = walked(DeleteMode::Delete, false);
        assert!(frames(&mut s).ends_with(&["Prune"]));
        assert!(!s.wants_entry(), "nothing is announced after Prune");
        let now = Instant::now();
        s.finish(Vec::new());
        assert!(
            frames(&mut s).is_empty(),
            "nothing before the receiver's Pruned"
        );
        assert!(s.handle_frame(deleted(b"t/old", None), now).is_ok());
        let kept = Some((ErrorCode::Exists, "kept".to_string()));
        assert!(s.handle_frame(deleted(b"t/a", kept), now).is_ok());
        assert!(s.handle_frame(end(1, 1), now).is_ok());
        let reports = s.take_out().reports;
        assert!(
            reports
                .iter()
                .any(|r| matches!(r, Report::Deleted { path, .. } if path == "t/old"))
        );
        assert!(
            !reports.iter().any(Report::is_flaw),
            "a kept directory is no failure"
        );
        s.finish(Vec::new());
        assert_eq!(frames(&mut s), ["Finish"]);
    }

    #[test]
    fn a_receiver_cannot_name_removals_outside_the_trees_twice_or_miscount_them() {
        let now = Instant::now();
        let mut s = walked(DeleteMode::Delete, false);
        for bad in [&b"other/x"[..], b"t", b"tx/y"] {
            assert!(s.handle_frame(deleted(bad, None), now).is_err(), "{bad:?}");
        }
        assert!(s.handle_frame(deleted(b"t/x", None), now).is_ok());
        assert!(s.handle_frame(deleted(b"t/x", None), now).is_err(), "twice");
        // The top itself only as a failure (its listing failed).
        let failed = Some((ErrorCode::Io, "EACCES".to_string()));
        let mut s2 = walked(DeleteMode::Delete, false);
        assert!(s2.handle_frame(deleted(b"t", failed), now).is_ok());
        assert!(s.handle_frame(end(2, 0), now).is_err(), "counts not named");
        let mut s = walked(DeleteMode::Off, false);
        assert!(
            frames(&mut s).ends_with(&["Finish"]),
            "no Prune without --delete"
        );
        assert!(s.handle_frame(deleted(b"t/x", None), now).is_err());
        assert!(s.handle_frame(end(0, 0), now).is_err());
    }

    #[test]
    fn a_walk_that_passed_something_over_asks_for_nothing_and_fails() {
        let mut s = walked(DeleteMode::Delete, true);
        let out = s.take_out();
        assert!(!out.frames.iter().any(|m| matches!(m, Message::Prune)));
        assert!(out.frames.iter().any(|m| matches!(m, Message::Finish)));
        assert!(out.reports.iter().any(|r| matches!(
            r,
            Report::Notice(Some(f), _) if f.code == "delete" && f.message.contains("nothing deleted")
        )));
    }
}
