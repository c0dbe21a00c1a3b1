//! What a listing (`zcp ls`, [`super::Open::list`]) answers with.

/// What a [`super::Message::ListEntry`] names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    /// A regular file.
    File,
    /// A directory.
    Dir,
    /// A symbolic link (its target in `target`).
    Link,
    /// Anything else (FIFO, socket, device): never sent by a transfer.
    Other,
    /// An export the identity may use (a listing of a server's exports).
    Export,
}

impl ListKind {
    pub(super) fn to_u8(self) -> u8 {
        match self {
            ListKind::File => 0,
            ListKind::Dir => 1,
            ListKind::Link => 2,
            ListKind::Other => 3,
            ListKind::Export => 4,
        }
    }

    pub(super) fn from_u8(v: u8) -> Option<ListKind> {
        Some(match v {
            0 => ListKind::File,
            1 => ListKind::Dir,
            2 => ListKind::Link,
            3 => ListKind::Other,
            4 => ListKind::Export,
            _ => return None,
        })
    }

    /// How reports and JSON name it.
    pub fn name(self) -> &'static str {
        match self {
            ListKind::File => "file",
            ListKind::Dir => "dir",
            ListKind::Link => "link",
            ListKind::Other => "other",
            ListKind::Export => "export",
        }
    }
}

/// One entry of a listing (`zcp ls`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListEntry {
    /// The path as the client asked for it, joined with the entry's place beneath it.
    pub path: Vec<u8>,
    /// What it is.
    pub kind: ListKind,
    /// Bytes (files); 0 for anything else.
    pub size: u64,
    /// Permission bits.
    pub mode: u32,
    /// Modification time, seconds since the epoch.
    pub mtime_sec: i64,
    /// Nanoseconds part.
    pub mtime_nsec: u32,
    /// A link's target, raw; empty otherwise.
    pub target: Vec<u8>,
    /// The path asked for itself: the first entry of the answer to the next `Get` (flags
    /// bit 0). Every other entry lies beneath the last such one.
    pub head: bool,
}
