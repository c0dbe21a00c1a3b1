//! A driver for fuzzing the receiving role's state machine ([`Receiving`]) with no disk and no
//! socket: bytes become a script of inputs — frames from the sender (decoded from raw bytes,
//! or built so that they mostly make sense), chunk headers on data streams, the engines'
//! completions, durability and commit results, the clock — and every file-system job the role
//! asks for is answered in memory (files are prepared with an engine that stores nothing, and
//! may be offered for resume). After each input the role's outputs are checked against what
//! it was told:
//!
//! - `FileCommitted` only for a file whose commit the role asked for and was told succeeded;
//! - `ChunkAck{ok}` only for a chunk that was reported durable;
//! - `Progress` never past its file's size;
//! - in a session that does not verify (`--verify none`), no journal record and no
//!   `FileCommitted{verified}`: nothing it wrote can pass for proved later;
//! - nothing is asked of the committer for a file without `FileEnd`;
//! - every `MakeDir`, `MakeLink` and `DirTimes` answered at once and in order: `EntryDone`
//!   exactly when it was carried out, `EntryFailed` when refused or failed;
//! - no panic, whatever the order.
//!
//! `cargo fuzz run receiver_script` runs it under libFuzzer (the `fuzzing` feature exposes it);
//! the unit test below runs it on seeded random scripts in the suite. The sending role's
//! driver, [`sender_script`], plays a malicious receiver (`fuzzing/sender.rs`).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use zcp_engine::RecvEngine;
use zcp_wire::{ChunkHeader, ChunkPlan, ErrorCode, Message, PutFile, SessionKeys, SideStats};

use crate::confine::{Act, Requested, Scope};
use crate::error::Refusal;
use crate::recv::chunks::{FileSpec, JournalState};
use crate::recv::frames::{FsDone, FsJob, Offer, Prepared, Step};
use crate::recv::state::{Placement, Receiving, RxConfig, RxJob};

mod sender;
pub use sender::sender_script;

/// Reads the script: each call takes what it needs, and zeros once the bytes run out.
pub(crate) struct Script<'a> {
    pub(crate) data: &'a [u8],
    pub(crate) at: usize,
}

impl Script<'_> {
    pub(crate) fn u8(&mut self) -> u8 {
        let b = self.data.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        b
    }

    fn u16(&mut self) -> u16 {
        u16::from_be_bytes([self.u8(), self.u8()])
    }

    pub(crate) fn bytes(&mut self, n: usize) -> &[u8] {
        let start = self.at.min(self.data.len());
        let end = (self.at + n).min(self.data.len());
        self.at += n;
        &self.data[start..end]
    }

    fn done(&self) -> bool {
        self.at >= self.data.len()
    }

    /// One of a few MACs, so that what the sender says and what was received often agree.
    fn mac(&mut self) -> [u8; 32] {
        [self.u8() % 4; 32]
    }
}

/// What the driver has told the role, to check its outputs against.
#[derive(Default)]
struct Told {
    /// Each announced file's plan, in the order of their ids.
    plans: BTreeMap<u32, ChunkPlan>,
    /// Chunks placed on a stream and not yet completed.
    landed: Vec<(u32, u64)>,
    /// Chunks reported durable.
    durable: HashSet<(u32, u64)>,
    /// Files whose `FileEnd` the role received.
    ended: HashSet<u32>,
    /// The sender's MACs per file, to build a right digest now and then.
    macs: HashMap<u32, HashMap<u64, [u8; 32]>>,
    /// Durability and commits the role asked for, not yet answered.
    journal: Vec<(u32, u64)>,
    commits: Vec<u32>,
    /// Commits answered as done.
    committed: HashSet<u32>,
    /// Directories, links and directory times handed in, in order, not yet answered, with
    /// whether they were carried out (an `EntryDone` is due) or refused (`EntryFailed`).
    entries: VecDeque<(Vec<u8>, bool)>,
}

/// A receiving role that stores in memory (`mem`), two streams, a fixed key: what the
/// scripts and the role's unit tests run against.
pub(crate) fn in_memory(scope: Scope, now: Instant) -> (Receiving, SessionKeys) {
    let off = zcp_wire::DeleteMode::Off;
    in_memory_as(scope, now, zcp_wire::VerifyMode::Blake3, off)
}

/// [`in_memory`] proving as `verify` asks, and with `--delete` or its dry run.
fn in_memory_as(
    scope: Scope,
    now: Instant,
    verify: zcp_wire::VerifyMode,
    delete: zcp_wire::DeleteMode,
) -> (Receiving, SessionKeys) {
    let keys = SessionKeys::derive(&zcp_wire::Psk::from_bytes([9; 32]), &[1; 32], &[2; 32]);
    let cfg = RxConfig {
        requested: RecvEngine::Mem,
        block: 0,
        idle: Duration::from_secs(5),
        sender_engine: "sendfile".into(),
        verify,
        existing: zcp_wire::ExistingMode::Replace,
        delete: (delete, Default::default()),
    };
    let rx = Receiving::new(cfg, keys.clone(), ([1; 32], [2; 32]), scope, 2, now);
    (rx, keys)
}

/// Runs one script against a fresh receiving role. Panics when an output breaks a rule.
pub fn receiver_script(data: &[u8]) {
    let mut s = Script { data, at: 0 };
    let first = s.u8();
    let pull = first.is_multiple_of(3);
    let scope = if pull {
        Scope::pull(Requested {
            names: (0..4).map(|i| format!("f{i}").into_bytes()).collect(),
            recursive: s.u8().is_multiple_of(2),
            filter: Default::default(),
        })
    } else {
        Scope::push()
    };
    let start = Instant::now();
    let mut now = start;
    let delete = match (first.is_multiple_of(5), first.is_multiple_of(2)) {
        (false, _) => zcp_wire::DeleteMode::Off,
        (true, true) => zcp_wire::DeleteMode::Delete,
        (true, false) => zcp_wire::DeleteMode::DryRun,
    };
    let verify = match s.u8().is_multiple_of(4) {
        true => zcp_wire::VerifyMode::None,
        false => zcp_wire::VerifyMode::Blake3,
    };
    let (mut rx, keys) = in_memory_as(scope, now, verify, delete);
    let mut told = Told::default();
    for _ in 0..4096 {
        if s.done() {
            break;
        }
        now += Duration::from_millis(u64::from(s.u8() % 8));
        if !step(&mut s, &mut rx, &mut told, &keys, now) {
            break;
        }
        check_out(&mut rx, &mut told);
    }
    rx.close(s.u8().is_multiple_of(2), now);
    check_out(&mut rx, &mut told);
}

/// One input. `false` once the role ended the session.
fn step(
    s: &mut Script<'_>,
    rx: &mut Receiving,
    told: &mut Told,
    keys: &SessionKeys,
    now: Instant,
) -> bool {
    match s.u8() % 12 {
        0 => {
            let kind = s.u8();
            let len = usize::from(s.u16() % 512);
            let body = s.bytes(len).to_vec();
            match Message::decode(kind, &body) {
                Ok(m) => frame(s, rx, told, m, now),
                Err(_) => true,
            }
        }
        1..=4 => {
            let m = built_frame(s, told, keys);
            // A sender that does not verify sends no MACs; now and then one, which ends the
            // session.
            let mac = matches!(m, Message::ChunkMac { .. });
            if mac && !rx.verifies() && !s.u8().is_multiple_of(8) {
                return true;
            }
            frame(s, rx, told, m, now)
        }
        5 | 6 => {
            let (file, index) = (u32::from(s.u8() % 6), u64::from(s.u8() % 8));
            // Mostly the chunk as the plan has it; now and then a header that does not fit.
            let (offset, len) = match told.plans.get(&file) {
                Some(p) if index < p.count() && !s.u8().is_multiple_of(8) => p.chunk(index),
                _ => (index * 65536, u64::from(s.u16()).max(1)),
            };
            let h = ChunkHeader::data(file, offset, len);
            if let Ok(Placement::Land { file, index, .. }) = rx.place(&h, now) {
                told.landed.push((file, index));
            }
            true
        }
        7 if !told.landed.is_empty() => {
            let (file, index) = told.landed.remove(usize::from(s.u8()) % told.landed.len());
            let ok = !s.u8().is_multiple_of(8);
            let r = ok
                .then_some(())
                .ok_or_else(|| Refusal::new(ErrorCode::Io, "EIO"));
            rx.written(file, index, r, now);
            if ok {
                let mac = s.mac();
                // A chunk at offset 0 is hashed from the file's start: its proof has the
                // root, as `ChunkHasher` always gives it there.
                let proof = zcp_wire::ChunkProof {
                    mac,
                    cv: mac,
                    root: (index == 0).then_some(mac),
                };
                rx.hashed(file, index, proof, now);
            }
            true
        }
        8 if !told.journal.is_empty() => {
            let (file, index) = told.journal.remove(0);
            let ok = !s.u8().is_multiple_of(8);
            if ok {
                told.durable.insert((file, index));
            }
            let r = ok
                .then_some(())
                .ok_or_else(|| Refusal::new(ErrorCode::Io, "EIO"));
            rx.journaled(file, &[index], r, now);
            true
        }
        9 if !told.commits.is_empty() => {
            let file = told.commits.remove(0);
            let ok = !s.u8().is_multiple_of(8);
            if ok {
                told.committed.insert(file);
            }
            let r = ok
                .then_some(())
                .ok_or_else(|| Refusal::new(ErrorCode::Io, "EIO"));
            rx.committed(file, [0; 32], r, now);
            true
        }
        _ => rx.tick(now, 0).is_ok(),
    }
}

/// A frame that mostly makes sense: for the files announced so far, with MACs and digests
/// from a small alphabet (or right).
fn built_frame(s: &mut Script<'_>, told: &Told, keys: &SessionKeys) -> Message {
    // Mostly a file announced already (and the next id for a new one); now and then any.
    let ids = &told.plans;
    let next = ids.last_key_value().map_or(0, |(i, _)| i + 1);
    let pick = s.u8();
    let file_id = match pick % 8 {
        0 => u32::from(pick / 8),
        _ if ids.is_empty() => next,
        _ => {
            let n = usize::from(pick / 8) % ids.len();
            *ids.keys().nth(n).expect("within the map")
        }
    };
    let op = s.u8();
    let op = if ids.is_empty() && !op.is_multiple_of(4) {
        0
    } else {
        op % 10
    };
    match op {
        0 | 1 => Message::PutFile(PutFile {
            file_id: if pick.is_multiple_of(8) {
                file_id
            } else {
                next
            },
            dest: format!("f{}", next % 5).into_bytes(),
            name: Vec::new(),
            size: match s.u8() % 4 {
                0 => 0,
                1 => u64::from(s.u16()),
                _ => u64::from(s.u16()) * u64::from(1 + s.u8() % 4),
            },
            mode: 0o644,
            mtime_sec: 1,
            mtime_nsec: 0,
            chunk_size: 65536 * (1 + u64::from(s.u8() % 2)),
            sparse: next.is_multiple_of(3),
        }),
        2 | 3 => {
            let count = told.plans.get(&file_id).map_or(8, ChunkPlan::count).max(1);
            let index = u64::from(s.u8());
            Message::ChunkMac {
                file_id,
                index: if index % 16 == 0 {
                    index % 8
                } else {
                    index % count
                },
                mac: s.mac(),
            }
        }
        4 => {
            let digest = if !s.u8().is_multiple_of(4) {
                right_digest(told, keys, file_id)
            } else {
                [s.u8(); 32]
            };
            Message::FileEnd { file_id, digest }
        }
        5 => Message::Go {
            file_id,
            restart: s.u8().is_multiple_of(2),
        },
        6 => Message::FileAbort {
            file_id,
            code: ErrorCode::SourceChanged,
            message: "changed".into(),
        },
        7 => {
            let a = s.u8();
            let path = format!("f{}/d{}", a % 5, s.u8() % 3).into_bytes();
            match s.u8() % 4 {
                0 => Message::MakeDir {
                    path,
                    top: a >= 128,
                },
                3 => Message::Prune,
                1 => Message::MakeLink {
                    path,
                    target: b"t".to_vec(),
                },
                _ => Message::DirTimes {
                    path,
                    mode: 0o755,
                    mtime_sec: 1,
                    mtime_nsec: 0,
                },
            }
        }
        8 => Message::Progress {
            file_id,
            bytes: u64::from(s.u16()) * 64,
        },
        _ => match s.u8() % 16 {
            0 => Message::Stats(SideStats::default()),
            1..=7 => Message::Finish,
            _ => Message::Notice {
                message: "hi".into(),
            },
        },
    }
}

/// The digest the sender would send for `file_id` with the MACs it sent.
fn right_digest(told: &Told, keys: &SessionKeys, file_id: u32) -> [u8; 32] {
    let Some(plan) = told.plans.get(&file_id) else {
        return [0; 32];
    };
    let mut d = keys.file_digest(file_id, plan.size(), plan.chunk_size());
    for i in 0..plan.count() {
        let mac = told
            .macs
            .get(&file_id)
            .and_then(|m| m.get(&i))
            .copied()
            .unwrap_or([0; 32]);
        d.push(&mac);
    }
    d.finish()
}

/// Hands `m` to the role and answers the file-system job it asks for. `false` when the role
/// ended the session.
fn frame(
    s: &mut Script<'_>,
    rx: &mut Receiving,
    told: &mut Told,
    m: Message,
    now: Instant,
) -> bool {
    match &m {
        Message::ChunkMac {
            file_id,
            index,
            mac,
        } => {
            told.macs.entry(*file_id).or_default().insert(*index, *mac);
        }
        Message::FileEnd { file_id, .. } => {
            told.ended.insert(*file_id);
        }
        _ => {}
    }
    let entry = match &m {
        Message::MakeDir { path, .. } | Message::MakeLink { path, .. } => Some(path.clone()),
        Message::DirTimes { path, .. } => Some(path.clone()),
        _ => None,
    };
    let step = match rx.handle_frame(m, now) {
        Ok(step) => step,
        Err(_) => return false,
    };
    let done = match step {
        Step::Next => {
            // Refused before any file-system work.
            if let Some(path) = entry {
                told.entries.push_back((path, false));
            }
            return true;
        }
        Step::Done => return false,
        Step::Prune(_) => {
            // Only with nothing open and nothing failed; the loop then prunes and says so.
            assert!(
                rx.may_prune(),
                "a Prune carried out with files open or entries failed"
            );
            rx.send(Message::Pruned(zcp_wire::PruneCount {
                end: true,
                ..Default::default()
            }));
            return true;
        }
        Step::Fs(job) => answer(s, told, job),
    };
    if let (Some(path), FsDone::Entry { result, .. }) = (entry, &done) {
        told.entries.push_back((path, result.is_ok()));
    }
    rx.fs_done(done, now).is_ok()
}

/// What a disk would have answered, in memory.
fn answer(s: &mut Script<'_>, told: &mut Told, job: FsJob) -> FsDone {
    let refused = s.u8().is_multiple_of(8);
    let refusal = || Refusal::new(ErrorCode::NoSpace, "full");
    match job {
        FsJob::Prepare { put, plan } => {
            let id = put.file_id;
            told.plans.insert(id, plan);
            let offers = (s.u8().is_multiple_of(3) && plan.count() > 0)
                .then(|| Offer {
                    nonces: ([3; 32], [4; 32]),
                    old_file_id: 1,
                    entries: (0..plan.count().min(4))
                        .map(|i| {
                            (
                                i,
                                zcp_wire::ChunkProof {
                                    mac: [1; 32],
                                    // A file of one chunk keeps no journal: its only offer
                                    // is an existing target's, hashed from its start, which
                                    // has the root (a journal's records have none).
                                    root: (plan.count() == 1).then_some([2; 32]),
                                    ..Default::default()
                                },
                            )
                        })
                        .collect(),
                })
                .into_iter()
                .collect();
            let spec = FileSpec {
                id,
                plan,
                engine: if s.u8().is_multiple_of(4) {
                    RecvEngine::Null
                } else {
                    RecvEngine::Mem
                },
                mode: put.mode,
                mtime: (put.mtime_sec, put.mtime_nsec),
                name: put.dest.clone(),
                target: String::from_utf8_lossy(&put.dest).into_owned(),
                io: None,
                sparse: put.sparse,
                existing: None,
            };
            let result = if refused {
                Err(refusal())
            } else {
                Ok(Prepared {
                    spec,
                    journal: JournalState {
                        kept: plan.count() > 1,
                        ..JournalState::default()
                    },
                    offers,
                    in_place: s.u8().is_multiple_of(4),
                    note: None,
                    own_work: Duration::from_millis(u64::from(s.u8())),
                })
            };
            FsDone::Prepared {
                id,
                shown: String::new(),
                result,
            }
        }
        FsJob::MakeDir { raw, path } => entry(raw, Act::Dir, path, refused),
        FsJob::MakeLink { raw, path, .. } => entry(raw, Act::Link, path, refused),
        FsJob::Times { raw, path, .. } => entry(raw, Act::Times, path, refused),
        FsJob::Reset { file, .. } => FsDone::Reset {
            file,
            result: if refused { Err(refusal()) } else { Ok(()) },
        },
    }
}

fn entry(raw: Vec<u8>, act: Act, path: zcp_wire::RelPath, refused: bool) -> FsDone {
    FsDone::Entry {
        raw,
        act,
        path: Some(path),
        result: if refused {
            Err(Refusal::new(ErrorCode::Io, "EIO"))
        } else {
            Ok(true)
        },
    }
}

/// Takes the role's outputs and checks them against what it was told.
fn check_out(rx: &mut Receiving, told: &mut Told) {
    let out = rx.take_out();
    let unverified = !rx.verifies();
    for job in out.jobs {
        match job {
            RxJob::Journal(j) => {
                assert!(
                    !unverified || (j.records.is_empty() && j.start.is_none()),
                    "a session that does not verify journals chunk {} of file {}",
                    j.index,
                    j.file
                );
                told.journal.push((j.file, j.index));
            }
            RxJob::Commit(c) => {
                assert!(
                    told.ended.contains(&c.spec.id),
                    "commit asked for file {} without its FileEnd",
                    c.spec.id
                );
                told.commits.push(c.spec.id);
            }
            RxJob::Release { .. } => {}
        }
    }
    for m in out.frames {
        match m {
            Message::FileCommitted {
                file_id, verified, ..
            } => {
                assert!(
                    told.committed.contains(&file_id),
                    "FileCommitted for file {file_id}, whose commit was not done"
                );
                assert!(
                    !(unverified && verified),
                    "file {file_id} committed as verified in a session that does not verify"
                );
            }
            Message::ChunkAck {
                file_id,
                index,
                ok: true,
            } => assert!(
                told.durable.contains(&(file_id, index)),
                "ChunkAck{{ok}} for chunk {index} of file {file_id}, never made durable"
            ),
            Message::Progress { file_id, bytes } => {
                let size = told.plans.get(&file_id).map_or(u64::MAX, ChunkPlan::size);
                assert!(
                    bytes <= size,
                    "Progress {bytes} past file {file_id}'s {size}"
                );
            }
            Message::EntryDone { path } => {
                let next = told.entries.pop_front();
                assert_eq!(next, Some((path, true)), "an entry answered out of order");
            }
            Message::EntryFailed { path, .. } => {
                let next = told.entries.pop_front();
                assert_eq!(next, Some((path, false)), "an entry answered out of order");
            }
            _ => {}
        }
    }
    assert!(told.entries.is_empty(), "an entry left unanswered");
    let _ = rx.take_reports();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_scripts_keep_the_receivers_rules() {
        let mut rng = fastrand::Rng::with_seed(0x5eed);
        for _ in 0..3000 {
            let len = rng.usize(0..2048);
            let data: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
            receiver_script(&data);
        }
    }

    #[test]
    fn a_script_can_commit_a_file() {
        // Enough random scripts reach a commit that the checks above are not vacuous.
        let mut rng = fastrand::Rng::with_seed(7);
        let mut commits = 0;
        let mut steps = 0;
        for _ in 0..3000 {
            let data: Vec<u8> = (0..1024).map(|_| rng.u8(..)).collect();
            let mut s = Script { data: &data, at: 0 };
            let now = Instant::now();
            let (mut rx, keys) = in_memory(Scope::push(), now);
            let mut told = Told::default();
            while !s.done() && step(&mut s, &mut rx, &mut told, &keys, now) {
                check_out(&mut rx, &mut told);
            }
            commits += told.committed.len();
            steps += s.at;
        }
        eprintln!("{commits} commits, {steps} script bytes used");
        assert!(commits > 0, "no script committed anything");
    }
}
