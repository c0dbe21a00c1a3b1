//! A regular file already at a destination, and what the session asked done with it
//! (`Open.existing`): whether the receiver answers `exists` instead of receiving.

use std::os::fd::AsFd;

use zcp_wire::{ErrorCode, ExistingMode};

use crate::error::Refusal;

/// What the sender announced: the file's size and mtime, and its destination for messages.
pub(crate) struct Announced<'a> {
    pub(crate) size: u64,
    pub(crate) mtime: (i64, u32),
    pub(crate) target: &'a str,
}

/// `Err(exists)` when the file `name` in `dir` (a regular file) is to be left as it is:
/// always under `ignore` and `fail`, under `size-only` when its size is the announced one,
/// under `quick` when its size and mtime both are. `Ok` otherwise: it is received (and the
/// old file replaced, or kept when proved the same).
pub(crate) fn answer(
    mode: ExistingMode,
    dir: impl AsFd,
    name: &[u8],
    a: &Announced<'_>,
) -> Result<(), Refusal> {
    let t = a.target;
    let left = |why: String| Err(Refusal::new(ErrorCode::Exists, why));
    let same = |mtime: bool| {
        zcp_engine::fs::stat_at(dir.as_fd(), name)
            .is_ok_and(|m| m.size == a.size && (!mtime || m.mtime == a.mtime))
    };
    match mode {
        ExistingMode::Ignore => left(format!(
            "'{t}' is already there: left as it is (--ignore-existing)"
        )),
        ExistingMode::Fail => left(format!("'{t}' already exists: not replaced (--no-clobber)")),
        ExistingMode::SizeOnly if same(false) => left(format!(
            "'{t}' is already there with the same size: left as it is (--size-only)"
        )),
        ExistingMode::Quick if same(true) => left(format!(
            "'{t}' is already there with the same size and mtime: left as it is (--quick-check)"
        )),
        _ => Ok(()),
    }
}
