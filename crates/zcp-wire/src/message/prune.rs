//! Mirroring (`--delete`): what the session asks of the receiver, and how it answers.

/// Whether the receiver removes what the sender does not have, asked for in
/// [`super::Open::delete`] (flags bits 3 and 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeleteMode {
    /// Nothing is removed (the default).
    #[default]
    Off,
    /// `--delete`: after every entry is in, inside each directory tree the sender copied
    /// ([`super::Message::MakeDir`] with `top`), what the sender did not announce is removed.
    Delete,
    /// `--delete-dry-run`: the same entries are named, and none is removed.
    DryRun,
}

impl DeleteMode {
    /// Whether the session prunes at all (really or as a dry run).
    pub fn prunes(self) -> bool {
        self != DeleteMode::Off
    }

    /// The command-line flag that asks for it.
    pub fn flag(self) -> &'static str {
        match self {
            DeleteMode::Off => "",
            DeleteMode::Delete => "--delete",
            DeleteMode::DryRun => "--delete-dry-run",
        }
    }

    pub(super) fn to_flags(self) -> [bool; 2] {
        match self {
            DeleteMode::Off => [false, false],
            DeleteMode::Delete => [true, false],
            DeleteMode::DryRun => [true, true],
        }
    }

    pub(super) fn from_flags(delete: bool, dry: bool) -> Option<DeleteMode> {
        match (delete, dry) {
            (false, false) => Some(DeleteMode::Off),
            (true, false) => Some(DeleteMode::Delete),
            (true, true) => Some(DeleteMode::DryRun),
            (false, true) => None,
        }
    }
}

/// How a receiver's pruning went, in a [`super::Message::Pruned`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PruneCount {
    /// Entries looked at in the directories pruned.
    pub scanned: u64,
    /// Entries removed (or, in a dry run, that would be), each named in a `Deleted` before.
    pub deleted: u64,
    /// Entries that could not be removed, each named in a failed `Deleted` before.
    pub failed: u64,
    /// The last of them: the pruning is over. Before it, a keep-alive (about once a second).
    pub end: bool,
    /// Non-empty: the receiver removed nothing, and why (an entry of the session failed, the
    /// tree was over its limits). Only with `end`.
    pub refused: String,
}
