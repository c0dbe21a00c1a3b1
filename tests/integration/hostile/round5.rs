//! The fifth review of issue 10: an authenticated, malicious peer against what changed in the
//! fourth round (the receiver's idle clock paused by its own file-system work, the sender's
//! `Progress` during a resume check, the in-place keep of an existing target, `serve --once`
//! admitting one session); eight of its twelve attacks got through before the fixes in this
//! file's commit. Each test asserts the SAFE outcome on disk (and in exit codes, logs,
//! resources); a failing test says "GOT THROUGH:" and what did.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, Instant};

use zcp_wire::{Message, PutFile};

use super::harness::*;
use crate::util::*;

/// What the peer said next within `limit`, skipping what `skip` matches; `None` when it
/// closed (or said `Error`) first, or the time ran out (then `Err(())`).
fn next_raw(
    raw: &mut Raw,
    limit: Duration,
    skip: impl Fn(&Message) -> bool,
) -> Result<Option<Message>, ()> {
    let end = Instant::now() + limit;
    raw.s
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    while Instant::now() < end {
        match raw.recv_any() {
            Ok(Message::Error { .. }) => return Ok(None),
            Ok(m) if skip(&m) => {}
            Ok(m) => return Ok(Some(m)),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return Ok(None),
        }
    }
    Err(())
}

fn chatter(m: &Message) -> bool {
    matches!(
        m,
        Message::Progress { .. } | Message::ChunkAck { ok: true, .. }
    )
}

// ------------------------------------------------------------------ the paused idle clock

// ------------------------------------------------------------------ Progress while checking

// ------------------------------------------------------------------ in-place keep, hard links

// ------------------------------------------------------------------ serve --once

// ------------------------------------------------------------------ refused correctly

/// Sets `p`'s mtime to `secs` since the epoch.
fn set_mtime(p: &std::path::Path, secs: u64) {
    let f = std::fs::File::options().write(true).open(p).unwrap();
    f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(secs))
        .unwrap();
}
