//! A driver for fuzzing the sending role's state machine ([`Sending`]) as a malicious
//! receiver drives it, with no disk and no socket: bytes become a script of inputs — the
//! receiver's frames in any order (decoded from raw bytes, or built to mostly make sense:
//! `Have`, `FileReady` naming any engine, `ChunkAck`, `FileCommitted` with any digest,
//! `verified` and `stored`, `FileFailed`, `Progress`, `EntryFailed`, `Notice`, `Stats`,
//! `Error`), the walk's entries, the hash workers' MACs and resume checks, the transport's
//! word that a chunk left, source checks and failures, streams ending, and the clock. Source checks are answered at once, as the
//! drive loop does. After each input the role's outputs are checked against what it was
//! told (issue 24, class 1):
//!
//! - a file is reported done (a `FileDone` without failure) only in answer to a
//!   `FileCommitted` that came after this side's `FileEnd`, for a file whose `FileReady`
//!   named an engine of the class the session asked for (a storing engine for `auto`,
//!   `splice`, `direct`, `rw`; exactly `null` or `mem` when asked for), and that says
//!   stored where that class stores and, where the file is proved (the session verifies
//!   and the engine reads the bytes), verified with the digest `FileEnd` carried;
//! - a file done is reported verified exactly when it is proved, stored exactly when the
//!   class stores, with `FileEnd`'s digest when verified and zeros otherwise;
//! - a proved file's `FileEnd` carries this side's digest: over the MACs the hash workers
//!   gave it (the latest for each chunk) and the chunks its resume checks kept;
//! - a `ChunkMac` only for a chunk the transport said had left (since it was last queued),
//!   and a `FileEnd` only once every chunk has left or was kept by a resume check: no MAC
//!   this side gives out, and no end of a file, stands for bytes that never crossed;
//! - no chunk, hash job or `ChunkMac` for a file whose `FileReady` named an engine outside
//!   the class; no receiver engine reported that is outside it;
//! - at most one outcome per file; the files counted as committed are the files done;
//! - a directory or link counts only on the receiver's `EntryDone` for it, in the order
//!   sent; an answer out of that order ends the session; what is unanswered at the
//!   receiver's `Stats` fails;
//! - bounded memory: offers held within `MAX_HELD_HAVE_BYTES`, files open within
//!   `MAX_OPEN_FILES`, one input's chunks within one file's plan;
//! - no panic, whatever the order.
//!
//! `cargo fuzz run sender_script` runs it under libFuzzer (the `fuzzing` feature exposes
//! it); the unit test below runs it on seeded random scripts in the suite.

mod checks;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fs::File;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use zcp_engine::fs::{EntryKind, Meta};
use zcp_engine::{RecvEngine, SendEngine, Usage};
use zcp_wire::{ChunkPlan, ErrorCode, Have, Message, Psk, SessionKeys, SideStats, VerifyMode};

use super::Script;
use crate::event::Report;
use crate::manifest::Entry;
use crate::recv::chunks::MAX_CHUNKS;
use crate::send::frames::MAX_HELD_HAVE_BYTES;
use crate::send::hash::HashJob;
use crate::send::state::{MAX_OPEN_FILES, SenderConfig, Sending};
use checks::{report, sent_frame};

/// The engines a receiver may name, right or wrong.
const ENGINES: [&str; 8] = ["rw", "splice", "direct", "null", "mem", "auto", "", "tape"];

/// This session's nonces (a `Have` naming them offers a target already there).
const NONCES: ([u8; 32], [u8; 32]) = ([1; 32], [2; 32]);

/// The chunks a resume check was asked about, with their MACs.
type Offered = Vec<(u64, [u8; 32])>;

/// What a `FileCommitted` said.
#[derive(Debug, Clone, Copy)]
struct Claim {
    digest: [u8; 32],
    verified: bool,
    stored: bool,
}

/// What the driver has told the role and seen it do, to check its outputs against.
#[derive(Default)]
struct Told {
    /// Each announced file's plan, by id; and its id by display name.
    plans: BTreeMap<u32, ChunkPlan>,
    ids: HashMap<String, u32>,
    /// The engine each file's first `FileReady` named; files offered in a `Have`.
    ready: BTreeMap<u32, String>,
    /// Files announced and not yet named in a `FileReady`; files ended and without an
    /// outcome (kept as the frames come, rather than worked out each step).
    not_ready: BTreeSet<u32>,
    unsettled: BTreeSet<u32>,
    offered: HashSet<u32>,
    /// `FileEnd` digests sent.
    ended: HashMap<u32, [u8; 32]>,
    /// The MACs this side computed or kept, per file and chunk (the latest for each).
    macs: HashMap<u32, HashMap<u64, [u8; 32]>>,
    /// Chunks to hash (hash jobs, staged chunks) and resume checks, not yet answered.
    hashes: Vec<(u32, u64)>,
    resumes: Vec<(u32, Offered)>,
    /// Chunks queued for the transport and not yet reported gone; those reported gone since
    /// they were last queued; those a resume check kept.
    queued: Vec<(u32, u64)>,
    departed: HashSet<(u32, u64)>,
    kept: HashSet<(u32, u64)>,
    /// Files with an outcome, by name and by id.
    done: HashSet<String>,
    over: HashSet<u32>,
    /// Files reported done (committed).
    committed: u64,
    /// Entries taken from the walk so far (names the next one).
    entries: u32,
    /// Directories, links (`true`) and directory times (`false`) sent, not yet answered;
    /// the directories the walk gave (for their times at the end).
    awaited: VecDeque<(bool, Vec<u8>)>,
    dirs: Vec<Vec<u8>>,
    /// Directories and links the receiver said it made.
    made: u64,
    /// Entries reported unanswered, and how many the last `Stats` left unanswered.
    unconfirmed: usize,
    left_at_stats: Option<usize>,
    /// `--delete`: the `Prune` went out; the receiver's `Pruned{end}` was taken.
    prune_sent: bool,
    pruned: bool,
}

/// The `FileCommitted` the current input was, if it was one: its file, what it said, and
/// whether this side's `FileEnd` had gone out before it.
type ThisCommit = Option<(u32, Claim, bool)>;

/// Whether `named` is an engine of the class `asked`: checked here on its own, not with the
/// role's rule.
fn in_class(asked: RecvEngine, named: &str) -> bool {
    if asked.stores() {
        matches!(named, "rw" | "splice" | "direct")
    } else {
        named == asked.name()
    }
}

/// A sending role with one stream, a fixed key, the verify mode and receiver engine the
/// script asks for.
fn role(s: &mut Script<'_>, now: Instant) -> (Sending, SessionKeys) {
    let a = s.u8();
    let asked = RecvEngine::ALL[usize::from(a) % RecvEngine::ALL.len()];
    let delete = match a {
        200.. => zcp_wire::DeleteMode::Delete,
        160.. => zcp_wire::DeleteMode::DryRun,
        _ => zcp_wire::DeleteMode::Off,
    };
    let verify = if s.u8().is_multiple_of(4) {
        VerifyMode::None
    } else {
        VerifyMode::Blake3
    };
    let cfg = SenderConfig {
        engine: SendEngine::Sendfile,
        block: 0,
        chunk_size: (!s.u8().is_multiple_of(4)).then_some(65536),
        idle: Duration::from_secs(5),
        verify,
        delete,
        recv_engine: asked,
    };
    let keys = SessionKeys::derive(&Psk::from_bytes([9; 32]), &NONCES.0, &NONCES.1);
    let sm = Sending::new(
        cfg,
        (SendEngine::Sendfile, None),
        keys.clone(),
        NONCES,
        1,
        now,
    );
    (sm, keys)
}

/// Runs one script against a fresh sending role. Panics when an output breaks a rule.
pub fn sender_script(data: &[u8]) {
    let mut s = Script { data, at: 0 };
    let mut now = Instant::now();
    let (mut sm, keys) = role(&mut s, now);
    let mut told = Told::default();
    for _ in 0..4096 {
        if s.done() {
            break;
        }
        now += Duration::from_millis(u64::from(s.u8() % 16) * 10);
        let (alive, commit) = step(&mut s, &mut sm, &mut told, now);
        check_out(&mut s, &mut sm, &mut told, &keys, commit, now);
        assert_eq!(
            sm.totals().entries,
            told.made,
            "entries counted without EntryDone"
        );
        if let Some(left) = told.left_at_stats.take() {
            assert_eq!(
                told.unconfirmed, left,
                "entries unanswered at Stats, not failed"
            );
            told.unconfirmed = 0;
        }
        if !alive {
            break;
        }
        // While the session lives (a receiver past a bound ends it, and what it held goes).
        assert!(
            sm.holding().1 <= MAX_HELD_HAVE_BYTES,
            "offers held past the bound"
        );
        assert!(
            sm.holding().0 <= MAX_OPEN_FILES,
            "files open past the bound"
        );
    }
    assert_eq!(
        sm.totals().files,
        told.committed,
        "files counted as committed are not the files done"
    );
}

/// One input. `false` once the role ended the session; and the commit it was, if it was.
fn step(s: &mut Script<'_>, sm: &mut Sending, told: &mut Told, now: Instant) -> (bool, ThisCommit) {
    // Mostly a file to talk about first: frames for none end the session at once.
    if told.plans.is_empty() && sm.wants_entry() && !s.u8().is_multiple_of(8) {
        entry(s, sm, told, now);
        return (true, None);
    }
    match s.u8() % 16 {
        0 => {
            let kind = s.u8();
            let len = usize::from(s.u16() % 512);
            let body = s.bytes(len).to_vec();
            match Message::decode(kind, &body) {
                Ok(m) => frame(sm, told, m, now),
                Err(_) => (true, None),
            }
        }
        1..=6 => {
            let m = built_frame(s, sm, told);
            frame(sm, told, m, now)
        }
        7 if sm.wants_entry() => {
            entry(s, sm, told, now);
            (true, None)
        }
        8 if !told.queued.is_empty() => {
            let (file, index) = told.queued.remove(usize::from(s.u8()) % told.queued.len());
            told.departed.insert((file, index));
            sm.departed(file, index, now);
            (true, None)
        }
        9 | 15 if !told.hashes.is_empty() => {
            let (file, index) = told.hashes.remove(usize::from(s.u8()) % told.hashes.len());
            let mac = s.mac();
            told.macs.entry(file).or_default().insert(index, mac);
            sm.hashed(file, index, proof_of(index, mac), now);
            (true, None)
        }
        10 if !told.resumes.is_empty() => {
            let (file, offered) = told.resumes.remove(0);
            let bytes = u64::from(s.u16());
            if s.u8().is_multiple_of(4) {
                sm.resume_progress(file, bytes, now);
                told.resumes.push((file, offered));
                return (true, None);
            }
            // The check passed for all (the offers matched the source) or failed.
            let kept = (!s.u8().is_multiple_of(3)).then_some(offered);
            if let Some(k) = &kept {
                let macs = told.macs.entry(file).or_default();
                for (i, mac) in k {
                    macs.insert(*i, *mac);
                    told.kept.insert((file, *i));
                }
            }
            let kept = kept.map(|k| k.into_iter().map(|(i, m)| (i, proof_of(i, m))).collect());
            sm.resume_checked(file, kept, now);
            (true, None)
        }
        11 => {
            let file = pick_file(s, told);
            sm.source_failed(file, "changed".into(), now);
            (true, None)
        }
        12 if sm.idle_files() && !sm.finishing() => {
            let meta = meta(EntryKind::Dir, 0, 0);
            sm.finish(told.dirs.iter().map(|d| (d.clone(), meta)).collect());
            (true, None)
        }
        13 => {
            sm.stream_done(Usage::default(), now);
            (true, None)
        }
        _ => (
            sm.tick(now, u64::from(s.u8()), "the receiver").is_ok(),
            None,
        ),
    }
}

/// A file id: mostly one announced, now and then any.
fn pick_file(s: &mut Script<'_>, told: &Told) -> u32 {
    let pick = s.u8();
    match pick % 8 {
        0 => u32::from(pick / 8),
        _ if told.plans.is_empty() => 0,
        _ => {
            let n = usize::from(pick / 8) % told.plans.len();
            *told.plans.keys().nth(n).expect("within the map")
        }
    }
}

/// A `Meta` of `kind` and `size`, with identity `id`.
fn meta(kind: EntryKind, size: u64, id: u32) -> Meta {
    Meta {
        kind,
        size,
        mode: 0o644,
        mtime: (1, 0),
        ctime: (1, 0),
        id: (1, u64::from(id)),
        nlink: 1,
        allocated: size,
        other: "",
    }
}

/// `/dev/null`, for a file entry: opened once for the process and shared (an `open` or a
/// `dup` for each file took the most of a run's time).
fn null_file() -> Option<Arc<File>> {
    static NULL: OnceLock<Option<Arc<File>>> = OnceLock::new();
    NULL.get_or_init(|| File::open("/dev/null").ok().map(Arc::new))
        .clone()
}

/// The walk's next entry: mostly a file (of no real bytes: the driver hashes nothing),
/// now and then a directory, a link or a source that could not be read.
fn entry(s: &mut Script<'_>, sm: &mut Sending, told: &mut Told, now: Instant) {
    told.entries += 1;
    let display = format!("f{}", told.entries);
    let e = match s.u8() % 8 {
        0 => {
            told.dirs.push(display.clone().into_bytes());
            Entry::Dir {
                dest: display.into_bytes(),
                top: told.entries % 2 == 1,
            }
        }
        1 => Entry::Link {
            dest: display.into_bytes(),
            target: b"t".to_vec(),
        },
        2 => {
            let b = s.u8();
            Entry::Skip {
                display,
                why: "unreadable".into(),
                fail: b.is_multiple_of(2),
                ours: b.is_multiple_of(3),
            }
        }
        _ => {
            let Some(file) = null_file() else {
                return;
            };
            // Mostly one chunk or a few; now and then up to 16 MiB; rarely a plan of up to
            // 2^20 chunks (past the limit of chunks, or up to it: a run that big is slow).
            let size = match s.u8() % 8 {
                0 => 0,
                1..=4 => u64::from(s.u16()),
                5 | 6 => u64::from(s.u16()) * 4,
                _ if s.u8().is_multiple_of(16) => u64::from(s.u16()) << 20,
                _ => u64::from(s.u16()) << 8,
            };
            let meta = meta(EntryKind::File, size, told.entries);
            Entry::File {
                dest: display.clone().into_bytes(),
                name: Vec::new(),
                file,
                meta,
                display,
            }
        }
    };
    sm.take_entry(e, now);
}

/// One of `candidates` mostly (a file in the state the frame fits), now and then any file.
fn pick_from<'a>(
    s: &mut Script<'_>,
    told: &Told,
    mut candidates: impl ExactSizeIterator<Item = &'a u32>,
) -> u32 {
    let pick = s.u8();
    if candidates.len() == 0 || pick.is_multiple_of(8) {
        return pick_file(s, told);
    }
    let n = usize::from(pick / 8) % candidates.len();
    *candidates.nth(n).expect("within the set")
}

/// An engine name: mostly one of the class asked for, now and then any.
fn engine_name(s: &mut Script<'_>, asked: RecvEngine) -> String {
    let pick = usize::from(s.u8());
    match pick % 4 {
        0 => ENGINES[(pick / 4) % ENGINES.len()].into(),
        _ if asked.stores() => ENGINES[(pick / 4) % 3].into(),
        _ => asked.name().into(),
    }
}

/// A frame a receiver could send, mostly for a file in the state it fits (offers and
/// `FileReady` for a file announced, acknowledgements for one made ready, commits for one
/// ended), with digests from a small alphabet or the one this side sent.
fn built_frame(s: &mut Script<'_>, sm: &Sending, told: &Told) -> Message {
    let op = s.u8() % 12;
    let file_id = match op {
        0..=2 => pick_from(s, told, told.not_ready.iter()),
        3..=5 => pick_from(s, told, told.ready.keys()),
        6 | 7 => pick_from(s, told, told.unsettled.iter()),
        _ => pick_file(s, told),
    };
    let count = told.plans.get(&file_id).map_or(4, ChunkPlan::count);
    let index = |s: &mut Script<'_>| u64::from(s.u8()) % (count + 1);
    match op {
        0 => Message::Have(Have {
            file_id,
            client_nonce: if s.u8().is_multiple_of(2) {
                NONCES.0
            } else {
                [3; 32]
            },
            server_nonce: NONCES.1,
            old_file_id: 0,
            entries: (0..1 + s.u8() % 3).map(|_| (index(s), s.mac())).collect(),
        }),
        1 | 2 => Message::FileReady {
            file_id,
            engine: engine_name(s, sm.cfg().recv_engine),
            note: if s.u8().is_multiple_of(4) {
                "\x1b[2Jnote".into()
            } else {
                String::new()
            },
            target: b"t".to_vec(),
            resumed: told.offered.contains(&file_id) && !s.u8().is_multiple_of(4),
        },
        3..=5 => Message::ChunkAck {
            file_id,
            index: index(s) % (count.max(1) + u64::from(s.u8().is_multiple_of(8))),
            ok: !s.u8().is_multiple_of(8),
        },
        6 | 7 => {
            let digest = match (s.u8() % 4, told.ended.get(&file_id)) {
                (0, _) | (_, None) => s.mac(),
                (_, Some(d)) => *d,
            };
            let flags = s.u8();
            Message::FileCommitted {
                file_id,
                bytes: u64::from(s.u16()),
                digest,
                verified: !flags.is_multiple_of(4),
                stored: flags % 8 < 6,
            }
        }
        8 => Message::FileFailed {
            file_id,
            code: ErrorCode::NoSpace,
            message: "full".into(),
        },
        9 => Message::Progress {
            file_id,
            // Mostly within the file's size.
            bytes: u64::from(s.u16()) % told.plans.get(&file_id).map_or(1 << 20, |p| p.size() + 2),
        },
        10 => {
            // Mostly the entry next awaiting an answer; now and then another.
            let path = match told.awaited.front() {
                Some((_, p)) if !s.u8().is_multiple_of(8) => p.clone(),
                _ => b"f1".to_vec(),
            };
            if s.u8().is_multiple_of(4) {
                Message::EntryFailed {
                    path,
                    code: ErrorCode::Io,
                    message: "EIO".into(),
                }
            } else {
                Message::EntryDone { path }
            }
        }
        _ => match s.u8() % 8 {
            0 => Message::Error {
                code: ErrorCode::Verify,
                message: "no".into(),
            },
            1..=3 if sm.finishing() => Message::Stats(SideStats::default()),
            4 => Message::Deleted {
                // Beneath a directory the walk gave, mostly (the odd ones are tops).
                path: {
                    let n = told.dirs.len().max(1);
                    let mut p = told
                        .dirs
                        .get(usize::from(s.u8()) % n)
                        .cloned()
                        .unwrap_or_default();
                    p.extend_from_slice(format!("/old{}", s.u8() % 4).as_bytes());
                    p
                },
                dir: s.u8().is_multiple_of(2),
                failed: s
                    .u8()
                    .is_multiple_of(4)
                    .then(|| (ErrorCode::Io, "EIO".into())),
            },
            5 => Message::Pruned(zcp_wire::PruneCount {
                scanned: u64::from(s.u8()),
                deleted: u64::from(s.u8() % 4),
                failed: u64::from(s.u8() % 2),
                end: !s.u8().is_multiple_of(4),
                refused: String::new(),
            }),
            _ => Message::Notice {
                message: "hi".into(),
            },
        },
    }
}

/// Hands `m` to the role. `false` when it ended the session; and the commit `m` is.
fn frame(sm: &mut Sending, told: &mut Told, m: Message, now: Instant) -> (bool, ThisCommit) {
    let mut commit = None;
    match &m {
        Message::FileReady {
            file_id, engine, ..
        } => {
            told.ready.entry(*file_id).or_insert_with(|| engine.clone());
            told.not_ready.remove(file_id);
        }
        Message::Have(h) => {
            told.offered.insert(h.file_id);
        }
        Message::FileCommitted {
            file_id,
            digest,
            verified,
            stored,
            ..
        } => {
            let claim = Claim {
                digest: *digest,
                verified: *verified,
                stored: *stored,
            };
            commit = Some((*file_id, claim, told.ended.contains_key(file_id)));
        }
        _ => {}
    }
    let answer = match &m {
        Message::EntryDone { path } => Some((true, path.clone())),
        Message::EntryFailed { path, .. } => Some((false, path.clone())),
        _ => None,
    };
    let stats = matches!(m, Message::Stats(_));
    let end = matches!(&m, Message::Pruned(c) if c.end);
    let alive = sm.handle_frame(m, now).is_ok();
    if alive && end {
        assert!(told.prune_sent, "a Pruned taken when no Prune went out");
        told.pruned = true;
    }
    if alive && let Some((done, path)) = answer {
        let (entry, next) = told
            .awaited
            .pop_front()
            .expect("an answer taken for nothing");
        assert_eq!(path, next, "an answer taken out of order");
        told.made += u64::from(done && entry);
    }
    if alive && stats {
        told.left_at_stats = Some(told.awaited.len());
        told.awaited.clear();
    }
    (alive, commit)
}

/// Takes the role's outputs (answering source checks at once, as the drive loop does) and
/// checks them against what it was told.
fn check_out(
    s: &mut Script<'_>,
    sm: &mut Sending,
    told: &mut Told,
    keys: &SessionKeys,
    commit: ThisCommit,
    now: Instant,
) {
    let asked = sm.cfg().recv_engine;
    loop {
        let out = sm.take_out();
        assert!(
            out.chunks.len() as u64 <= MAX_CHUNKS,
            "one input, chunks of many files"
        );
        for m in &out.frames {
            sent_frame(sm, told, keys, m);
        }
        for c in &out.chunks {
            assert!(
                told.ready
                    .get(&c.file_id)
                    .is_some_and(|e| in_class(asked, e)),
                "a chunk of file {} sent to an engine not asked for: {:?} asked {asked:?}",
                c.file_id,
                told.ready.get(&c.file_id)
            );
            if c.staged {
                told.hashes.push((c.file_id, c.index));
            }
            told.departed.remove(&(c.file_id, c.index));
            told.queued.push((c.file_id, c.index));
        }
        for h in out.hashes {
            match h {
                HashJob::Chunk { file_id, index, .. } => {
                    let ready = told.ready.get(&file_id);
                    assert!(
                        ready.is_some_and(|e| in_class(asked, e)),
                        "hashed for {ready:?}"
                    );
                    told.hashes.push((file_id, index));
                }
                HashJob::Resume { file_id, haves, .. } => {
                    let offered = haves.iter().flat_map(|h| h.entries.iter().copied());
                    told.resumes.push((file_id, offered.collect()));
                }
            }
        }
        for r in out.reports {
            report(sm, told, r, commit);
        }
        if out.checks.is_empty() {
            return;
        }
        for c in out.checks {
            let changed = s.u8().is_multiple_of(8).then(|| "changed".to_string());
            sm.source_checked(c.file_id, changed, now);
        }
    }
}

/// Chunk `index`'s proof with MAC `mac`: its chaining value (and for chunk 0 its root) the
/// same bytes, which the role only keeps for the plain digest it reports.
fn proof_of(index: u64, mac: [u8; 32]) -> zcp_wire::ChunkProof {
    zcp_wire::ChunkProof {
        mac,
        cv: mac,
        root: (index == 0).then_some(mac),
    }
}

/// The plain digest the role reports for a file whose chunks' proofs were `macs` (as
/// [`proof_of`] makes them).
fn plain_of(macs: Option<&HashMap<u64, [u8; 32]>>, count: u64) -> [u8; 32] {
    let cvs: Vec<[u8; 32]> = (0..count)
        .map(|i| macs.and_then(|m| m.get(&i)).copied().unwrap_or([0; 32]))
        .collect();
    zcp_wire::plain_digest(&cvs, cvs.first().copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_scripts_keep_the_senders_rules() {
        let mut rng = fastrand::Rng::with_seed(0x5e4d);
        for _ in 0..4000 {
            let len = rng.usize(0..2048);
            let data: Vec<u8> = (0..len).map(|_| rng.u8(..)).collect();
            sender_script(&data);
        }
    }

    /// What libFuzzer found in a second each, from an empty corpus, with the proof taken
    /// out of the sending role (issue 24, class 1): an engine not asked for reported as the
    /// receiver's, and files done on a commit before their `FileEnd`.
    #[test]
    fn the_scripts_that_found_class_1_keep_the_rules() {
        for hex in [
            "9300064a0a27ed9300064206",
            "c3010000caff000805f7f6",
            "0af9ffdfffff009e020101",
        ] {
            let bytes: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("hex"))
                .collect();
            sender_script(&bytes);
        }
    }

    #[test]
    fn scripts_reach_commits_and_failures() {
        // Enough random scripts commit a file, fail one on a commit, and have a directory or
        // link made, that the checks above are not vacuous.
        let mut rng = fastrand::Rng::with_seed(11);
        let (mut done, mut failed, mut made) = (0, 0, 0);
        for _ in 0..4000 {
            let data: Vec<u8> = (0..1536).map(|_| rng.u8(..)).collect();
            let mut s = Script { data: &data, at: 0 };
            let now = Instant::now();
            let (mut sm, keys) = role(&mut s, now);
            let mut told = Told::default();
            while !s.done() {
                let (alive, commit) = step(&mut s, &mut sm, &mut told, now);
                let before = (told.done.len(), told.committed);
                check_out(&mut s, &mut sm, &mut told, &keys, commit, now);
                if commit.is_some() && told.done.len() > before.0 {
                    if told.committed > before.1 {
                        done += 1;
                    } else {
                        failed += 1;
                    }
                }
                if !alive {
                    break;
                }
            }
            made += told.made;
        }
        eprintln!("{done} files done, {failed} commits refused, {made} entries made");
        assert!(made > 0, "no script had a directory or link made");
        assert!(done > 0, "no script got a file done");
        assert!(failed > 0, "no script had a commit refused");
    }
}
