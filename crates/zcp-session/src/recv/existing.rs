//! A regular file already at a destination, and what the session asked done with it
//! (`Open.existing`): whether the receiver answers `exists` instead of receiving.

use std::os::fd::BorrowedFd;

use zcp_engine::fs::EntryKind;

use zcp_wire::{ErrorCode, ExistingMode};

use crate::error::Refusal;

/// What the sender announced: the file's size and mtime, and its destination for messages.
pub(crate) struct Announced<'a> {
    pub(crate) size: u64,
    pub(crate) mtime: (i64, u32),
    pub(crate) target: &'a str,
}

/// `Err(exists)` when the regular file `name` in `dir` (`kind`: what is there) is to be left
/// as it is: always under `ignore` and `fail`, under `size-only` when its size is the
/// announced one, under `quick` when its size and mtime both are. Under `backup`, whatever
/// is there, `Err(bad-path)` when `NAME~` could not take the old file (a name too long, a
/// directory, symlink or special file there): said before any byte moves, and the same
/// whether `NAME` exists or not, so it tells an identity that may not read nothing. `Ok`
/// otherwise: the file is received (the old one replaced, or kept when proved the same).
pub(crate) fn answer(
    mode: ExistingMode,
    (dir, name, kind): (BorrowedFd<'_>, &[u8], EntryKind),
    a: &Announced<'_>,
) -> Result<(), Refusal> {
    let t = a.target;
    if mode == ExistingMode::Backup {
        return backup_room(dir, name, t);
    }
    if kind != EntryKind::File {
        return Ok(());
    }
    let left = |why: String| Err(Refusal::new(ErrorCode::Exists, why));
    let same = |mtime: bool| {
        zcp_engine::fs::stat_at(dir, name)
            .is_ok_and(|m| m.size == a.size && (!mtime || m.mtime == a.mtime))
    };
    match mode {
        ExistingMode::Ignore | ExistingMode::Fail => Err(appeared(mode, t)),
        ExistingMode::SizeOnly if same(false) => left(format!(
            "'{t}' is already there with the same size: left as it is (--size-only)"
        )),
        ExistingMode::Quick if same(true) => left(format!(
            "'{t}' is already there with the same size and mtime: left as it is (--quick-check)"
        )),
        _ => Ok(()),
    }
}

/// The refusal of a file whose destination was free when it was prepared but taken at its
/// commit, under a mode that never replaces (`ignore`, `fail`): the same words as at prepare.
pub(crate) fn appeared(mode: ExistingMode, t: &str) -> Refusal {
    let why = match mode {
        ExistingMode::Ignore => {
            format!("'{t}' is already there: left as it is (--ignore-existing)")
        }
        _ => format!("'{t}' already exists: not replaced (--no-clobber)"),
    };
    Refusal::new(ErrorCode::Exists, why)
}

/// Longest name a directory entry may have (Linux's `NAME_MAX`).
const NAME_MAX: usize = 255;

/// Whether `NAME~` can take the file at `NAME` (`--backup`), checked whether or not there is one.
fn backup_room(dir: BorrowedFd<'_>, name: &[u8], t: &str) -> Result<(), Refusal> {
    let refused = |why: &str| {
        Err(Refusal::new(
            ErrorCode::BadPath,
            format!("destination '{t}' {why} (--backup)"),
        ))
    };
    if name.len() >= NAME_MAX {
        return refused("has a name too long to keep a backup of it as NAME~");
    }
    let mut backup = name.to_vec();
    backup.push(b'~');
    match zcp_engine::fs::entry_kind(dir, &backup) {
        Ok(EntryKind::Missing | EntryKind::File) => Ok(()),
        Ok(_) => refused("cannot have a backup: its NAME~ is not a regular file"),
        Err(e) => Err(crate::recv::prepare::engine_err(e)),
    }
}
