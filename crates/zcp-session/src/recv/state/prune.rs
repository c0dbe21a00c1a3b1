//! The receiving state machine's part in `--delete`: the sender's `Prune` checked and turned
//! into a [`PruneJob`] for the loop ([`crate::recv::prune::run`] carries it out), and the
//! failure of a session whose sender never asked.

use zcp_wire::{Message, PruneCount};

use super::Receiving;
use super::frames::Step;
use crate::error::SessionError;
use crate::event::{Failure, Report};

impl Receiving {
    /// The sender finished: under `--delete` without its `Prune`, nothing was removed, and
    /// that is a failure of the session (the sender's walk was not whole, or it never asked).
    pub(crate) fn unpruned(&mut self) {
        if !self.mirror.mode().prunes() || self.mirror.asked() {
            return;
        }
        let who = self.peer();
        self.report(Report::Notice(
            Some(Failure {
                path: String::new(),
                code: "delete",
                message: format!(
                    "{}: nothing deleted: {who} did not ask for it (what it sent was not whole)",
                    self.mirror.mode().flag()
                ),
            }),
            None,
        ));
    }

    /// The sender's `Prune`: once, before `Finish`, in a session that asked for it.
    pub(crate) fn on_prune(&mut self) -> Result<Step, SessionError> {
        let m = &self.mirror;
        if !m.mode().prunes() {
            return Err(self.proto("Prune in a session that did not ask for --delete".into()));
        }
        if m.asked() || self.finishing {
            return Err(self.proto("Prune again, or after Finish".into()));
        }
        self.mirror.ask();
        let open = !self.files.is_empty() || self.preparing.is_some();
        if let Some(why) = self.mirror.refusal(open) {
            self.report(Report::Notice(
                Some(Failure {
                    path: String::new(),
                    code: "delete",
                    message: format!("{}: nothing deleted: {why}", self.mirror.mode().flag()),
                }),
                None,
            ));
            self.send(Message::Pruned(PruneCount {
                end: true,
                refused: why,
                ..PruneCount::default()
            }));
            return Ok(Step::Next);
        }
        Ok(Step::Prune(self.mirror.job()))
    }
}
