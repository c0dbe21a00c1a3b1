//! What a receiver does with a file already at a destination (`Open.existing`).

/// What a receiver does with a regular file already at a file's destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExistingMode {
    /// Replace it (once the new one is verified and durable); if it is already the same
    /// bytes, keep it. The default.
    #[default]
    Replace,
    /// Leave it and send nothing (`--ignore-existing`): counted as skipped, not compared.
    Ignore,
    /// Leave it and fail the file (`--no-clobber`), class `exists`.
    Fail,
    /// Replace it, keeping the old one as `NAME~` (`--backup`).
    Backup,
    /// Leave it, as `Ignore`, when its size is the announced one (`--size-only`); else
    /// replace it.
    SizeOnly,
    /// Leave it, as `Ignore`, when its size and mtime are the announced ones (rsync's quick
    /// check, `--quick-check`): no byte of either copy is read; else replace it.
    Quick,
}

impl ExistingMode {
    /// Every mode.
    pub const ALL: [ExistingMode; 6] = [
        ExistingMode::Replace,
        ExistingMode::Ignore,
        ExistingMode::Fail,
        ExistingMode::Backup,
        ExistingMode::SizeOnly,
        ExistingMode::Quick,
    ];

    /// How the wire and reports name it.
    pub fn name(self) -> &'static str {
        match self {
            ExistingMode::Replace => "replace",
            ExistingMode::Ignore => "ignore",
            ExistingMode::Fail => "fail",
            ExistingMode::Backup => "backup",
            ExistingMode::SizeOnly => "size-only",
            ExistingMode::Quick => "quick",
        }
    }

    /// The mode named `name`; an empty name is the default.
    pub fn parse(name: &str) -> Option<ExistingMode> {
        if name.is_empty() {
            return Some(ExistingMode::Replace);
        }
        ExistingMode::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether the mode tells the sender that something is there (a file of the name):
    /// what an identity that may not read must not learn.
    pub fn reveals(self) -> bool {
        !matches!(self, ExistingMode::Replace | ExistingMode::Backup)
    }

    /// Whether a file answered `exists` under this mode was left at the client's asking
    /// (counted apart), not failed.
    pub fn leaves(self) -> bool {
        matches!(
            self,
            ExistingMode::Ignore | ExistingMode::SizeOnly | ExistingMode::Quick
        )
    }
}
