//! The sending role's state machine without I/O: what it hashes and proves, by verify mode.

use std::time::{Duration, Instant};

use zcp_engine::{RecvEngine, SendEngine};
use zcp_wire::{Message, Psk, SessionKeys, VerifyMode};

use super::HashJob;
use super::state::{SendOut, SenderConfig, Sending};
use crate::event::Report;
use crate::manifest::Entry;

/// A sending role with 2 MiB chunks (past the staged size, so a verified chunk is hashed by
/// a hash worker), one stream, and one announced 6 MiB file (id 0) the receiver made ready
/// with `rw`. Returns the outputs of that.
fn ready(verify: VerifyMode) -> (Sending, SendOut) {
    ready_with(verify, RecvEngine::Auto, "rw")
}

/// [`ready`], for a session that asked for the receiver engine `asked`, whose receiver
/// named `named` in its `FileReady`.
fn ready_with(verify: VerifyMode, asked: RecvEngine, named: &str) -> (Sending, SendOut) {
    ready_sized(verify, asked, named, 6 << 20)
}

/// What the role tests' sessions run with: 2 MiB chunks, the sender engine `sendfile`.
pub(super) fn config(
    verify: VerifyMode,
    delete: zcp_wire::DeleteMode,
    asked: RecvEngine,
) -> SenderConfig {
    SenderConfig {
        engine: SendEngine::Sendfile,
        block: 0,
        chunk_size: Some(2 << 20),
        idle: Duration::from_secs(30),
        verify,
        delete,
        recv_engine: asked,
    }
}

/// A sending role under `cfg`, one stream, the fixed key and nonces the tests use.
pub(super) fn sending(cfg: SenderConfig) -> Sending {
    let keys = SessionKeys::derive(&Psk::from_bytes([3; 32]), &[1; 32], &[2; 32]);
    let engine = (SendEngine::Sendfile, None);
    Sending::new(cfg, engine, keys, ([1; 32], [2; 32]), 1, Instant::now())
}

/// [`ready_with`], for a file of `size` bytes.
fn ready_sized(
    verify: VerifyMode,
    asked: RecvEngine,
    named: &str,
    size: u64,
) -> (Sending, SendOut) {
    let mut s = sending(config(verify, zcp_wire::DeleteMode::Off, asked));
    let now = Instant::now();
    let file = tempfile::tempfile().expect("a temporary file");
    file.set_len(size).expect("its size");
    let meta = zcp_engine::fs::stat_fd(&file).expect("stat");
    s.take_entry(
        Entry::File {
            dest: b"f".to_vec(),
            name: Vec::new(),
            file: file.into(),
            meta,
            display: "f".into(),
        },
        now,
    );
    let _ = s.take_out();
    s.handle_frame(
        Message::FileReady {
            file_id: 0,
            engine: named.into(),
            note: String::new(),
            target: b"f".to_vec(),
            resumed: false,
        },
        now,
    )
    .expect("ready");
    let out = s.take_out();
    (s, out)
}

/// A chunk proof with MAC `m` (the role keeps its chaining value for the digest only).
fn mac(m: [u8; 32]) -> zcp_wire::ChunkProof {
    zcp_wire::ChunkProof {
        mac: m,
        ..Default::default()
    }
}

#[test]
fn a_verified_file_has_every_chunk_hashed() {
    let (_, out) = ready(VerifyMode::Blake3);
    assert_eq!(out.chunks.len(), 3);
    let hashed: Vec<u64> = (out.hashes.iter())
        .filter_map(|h| match h {
            HashJob::Chunk { index, .. } => Some(*index),
            _ => None,
        })
        .collect();
    assert_eq!(hashed, [0, 1, 2]);
}

#[test]
fn without_verification_nothing_is_hashed_and_the_digest_is_zero() {
    let (mut s, out) = ready(VerifyMode::None);
    let now = Instant::now();
    assert_eq!(out.chunks.len(), 3, "every chunk goes out");
    assert!(out.hashes.is_empty(), "no hash job");
    assert!(
        out.chunks.iter().all(|c| !c.staged),
        "no chunk is read to be hashed"
    );
    assert!(
        !(out.frames.iter()).any(|m| matches!(m, Message::ChunkMac { .. })),
        "no MAC sent"
    );
    for index in 0..3 {
        let ack = Message::ChunkAck {
            file_id: 0,
            index,
            ok: true,
        };
        s.handle_frame(ack, now).expect("ack");
    }
    assert_eq!(
        s.durable_pending(),
        0,
        "unverified chunks are never resumed"
    );
    // Without MACs an acknowledgement may overtake the transport's word that the chunk
    // left: it is taken, but the file does not end before every chunk has left.
    assert!(s.take_out().checks.is_empty(), "no chunk has left yet");
    for index in 0..3 {
        s.departed(0, index, now);
    }
    let out = s.take_out();
    assert!(
        !(out.frames.iter()).any(|m| matches!(m, Message::ChunkMac { .. })),
        "no MAC sent on departure either"
    );
    assert_eq!(
        out.checks.len(),
        1,
        "every chunk sent and acknowledged: the source check"
    );
    s.source_checked(0, None, now);
    let out = s.take_out();
    assert!(
        (out.frames.iter())
            .any(|m| matches!(m, Message::FileEnd { digest, .. } if *digest == [0; 32])),
        "{:?}",
        out.frames
    );
    // A receiver that claims it verified a file nobody hashed is not believed.
    let committed = Message::FileCommitted {
        file_id: 0,
        bytes: 6 << 20,
        digest: [1; 32],
        verified: true,
        stored: true,
    };
    s.handle_frame(committed, now).expect("committed");
    let done: Vec<(bool, bool)> = (s.take_out().reports.into_iter())
        .filter_map(|r| match r {
            Report::FileDone(d) => Some((d.verified, d.stored)),
            _ => None,
        })
        .collect();
    assert_eq!(done, [(false, true)]);
}

/// The file's outcomes reported so far: (verified, stored, digest, failure class).
fn outcomes(s: &mut Sending) -> Vec<(bool, bool, [u8; 32], Option<&'static str>)> {
    (s.take_out().reports.into_iter())
        .filter_map(|r| match r {
            Report::FileDone(d) => {
                Some((d.verified, d.stored, d.digest, d.failure.map(|f| f.code)))
            }
            _ => None,
        })
        .collect()
}

/// Runs file 0 of `s` (just made ready) to its `FileEnd`: each chunk hashed (MACs of the
/// source, all zeros here), sent by the transport, acknowledged, the source unchanged.
/// Returns the digest sent.
fn to_file_end(s: &mut Sending, out: &SendOut) -> [u8; 32] {
    let now = Instant::now();
    for h in &out.hashes {
        if let HashJob::Chunk { index, .. } = h {
            s.hashed(0, *index, mac([*index as u8; 32]), now);
        }
    }
    for c in &out.chunks {
        s.departed(c.file_id, c.index, now);
    }
    for index in 0..out.chunks.len() as u64 {
        let ack = Message::ChunkAck {
            file_id: 0,
            index,
            ok: true,
        };
        s.handle_frame(ack, now).expect("ack");
    }
    let checks = s.take_out().checks;
    assert_eq!(checks.len(), 1, "the source check");
    s.source_checked(0, None, now);
    let frames = s.take_out().frames;
    (frames.iter())
        .find_map(|m| match m {
            Message::FileEnd { digest, .. } => Some(*digest),
            _ => None,
        })
        .expect("FileEnd")
}

fn commit(digest: [u8; 32], verified: bool, stored: bool) -> Message {
    Message::FileCommitted {
        file_id: 0,
        bytes: 6 << 20,
        digest,
        verified,
        stored,
    }
}

#[test]
fn a_commit_with_this_sides_digest_after_file_end_is_done() {
    let (mut s, out) = ready(VerifyMode::Blake3);
    let sent = to_file_end(&mut s, &out);
    assert_ne!(sent, [0; 32]);
    s.handle_frame(commit(sent, true, true), Instant::now())
        .expect("committed");
    // Reported: the plain BLAKE3 from the chunks' chaining values, not the keyed digest.
    let plain = zcp_wire::plain_digest(&vec![[0; 32]; out.chunks.len()], None);
    assert_ne!(plain, sent);
    assert_eq!(outcomes(&mut s), [(true, true, plain, None)]);
    assert_eq!(s.totals.files, 1);
}

/// Issue 24, class 1: a receiver's `FileCommitted` is a claim. Before `FileEnd` (no digest
/// of this side's to match; the receiver cannot have had the data), not verified in a
/// session that verifies, with another digest, or not stored by a storing engine: the file
/// fails as a verification failure, is not counted, and its size is not the receiver's.
#[test]
fn a_commit_that_proves_less_than_was_asked_fails_the_file() {
    type Case = (&'static str, bool, fn([u8; 32]) -> Message);
    let cases: [Case; 4] = [
        ("before FileEnd", false, |_| commit([7; 32], true, true)),
        ("not verified", true, |d| commit(d, false, true)),
        ("another digest", true, |d| {
            let mut other = d;
            other[0] ^= 1;
            commit(other, true, true)
        }),
        ("not stored", true, |d| commit(d, true, false)),
    ];
    for (what, ended, claim) in cases {
        let (mut s, out) = ready(VerifyMode::Blake3);
        let sent = if ended {
            to_file_end(&mut s, &out)
        } else {
            [0; 32]
        };
        s.handle_frame(claim(sent), Instant::now())
            .expect("the session goes on");
        assert_eq!(
            outcomes(&mut s),
            [(false, false, [0; 32], Some("verify"))],
            "{what}"
        );
        assert_eq!(s.totals.files, 0, "{what}");
        assert!(s.idle_files(), "{what}: the file is over");
    }
}

/// Issue 24, class 1: a `FileReady` naming an engine outside the class the session asked
/// for (`null` or `mem` for a storing request, anything but the engine asked for `null` or
/// `mem`, a name no engine has) fails the file at once: no chunk, no hash, no MAC, the
/// receiver told, nothing reported as its engine.
#[test]
fn a_file_ready_with_an_engine_not_asked_for_fails_the_file() {
    let cases = [
        (RecvEngine::Auto, "null"),
        (RecvEngine::Auto, "mem"),
        (RecvEngine::ReadWrite, "null"),
        (RecvEngine::Direct, "auto"),
        (RecvEngine::Auto, "tape"),
        (RecvEngine::Mem, "null"),
        (RecvEngine::Mem, "rw"),
        (RecvEngine::Null, "mem"),
    ];
    for (asked, named) in cases {
        let (mut s, out) = ready_with(VerifyMode::Blake3, asked, named);
        let what = format!("{named} for {}", asked.name());
        assert!(out.chunks.is_empty() && out.hashes.is_empty(), "{what}");
        assert!(
            (out.frames.iter()).any(|m| matches!(
                m,
                Message::FileAbort {
                    file_id: 0,
                    code: zcp_wire::ErrorCode::Verify,
                    ..
                }
            )),
            "{what}: {:?}",
            out.frames
        );
        let done: Vec<_> = (out.reports.iter())
            .filter_map(|r| match r {
                Report::FileDone(d) => Some((d.verified, d.stored, d.failure.clone())),
                Report::Engines { .. } => panic!("{what}: reported as the engine"),
                _ => None,
            })
            .collect();
        assert_eq!(done.len(), 1, "{what}");
        let f = done[0].2.as_ref().expect("a failure");
        assert_eq!(f.code, "verify", "{what}");
        assert!(f.message.contains(asked.name()), "{what}: {}", f.message);
        assert!(s.totals.receiver_engine.is_none(), "{what}");
        // A commit for it afterwards is for a file no longer open.
        assert!(
            s.handle_frame(commit([0; 32], true, true), Instant::now())
                .is_err()
        );
    }
}

/// What the user asked for is what a commit is held to: `--recv-engine null` (nothing
/// stored, nothing read, so nothing verified), `mem` (verified, not stored), `--verify none`
/// (stored, not verified). Each is done once committed after `FileEnd`, and never reported
/// as more than it was, whatever the receiver claims.
#[test]
fn engines_and_modes_asked_for_are_done_as_asked() {
    let cases = [
        (VerifyMode::Blake3, RecvEngine::Null, (false, false)),
        (VerifyMode::Blake3, RecvEngine::Mem, (true, false)),
        (VerifyMode::None, RecvEngine::Auto, (false, true)),
        (VerifyMode::None, RecvEngine::Mem, (false, false)),
    ];
    for (verify, asked, (verified, stored)) in cases {
        let named = if asked == RecvEngine::Auto {
            "splice"
        } else {
            asked.name()
        };
        let (mut s, out) = ready_with(verify, asked, named);
        assert_eq!(out.hashes.is_empty(), !verified, "{asked:?}");
        let sent = to_file_end(&mut s, &out);
        // The receiver claims everything: verified, stored, its digest.
        s.handle_frame(commit(sent, true, true), Instant::now())
            .expect("committed");
        let plain = zcp_wire::plain_digest(&vec![[0; 32]; out.chunks.len()], None);
        let digest = if verified { plain } else { [0; 32] };
        assert_eq!(
            outcomes(&mut s),
            [(verified, stored, digest, None)],
            "{verify:?} {asked:?}"
        );
    }
}

/// `--retry`: a later attempt's receiver that offers every chunk (`Have`, `FileReady
/// {resumed}`) and commits before the resume check answered proves nothing: the chunks kept
/// are only those this side recomputed, and the file is done only after its `FileEnd`.
#[test]
fn a_commit_during_the_resume_check_fails_the_file() {
    let (mut s, _) = ready_with(VerifyMode::Blake3, RecvEngine::Auto, "rw");
    // A second file, offered whole for resume.
    let now = Instant::now();
    let file = tempfile::tempfile().expect("a temporary file");
    file.set_len(4 << 20).expect("its size");
    let meta = zcp_engine::fs::stat_fd(&file).expect("stat");
    s.take_entry(
        Entry::File {
            dest: b"g".to_vec(),
            name: Vec::new(),
            file: file.into(),
            meta,
            display: "g".into(),
        },
        now,
    );
    let have = zcp_wire::Have {
        file_id: 1,
        client_nonce: [5; 32],
        server_nonce: [6; 32],
        old_file_id: 0,
        entries: vec![(0, [1; 32]), (1, [2; 32])],
    };
    s.handle_frame(Message::Have(have), now).expect("have");
    let ready = Message::FileReady {
        file_id: 1,
        engine: "rw".into(),
        note: String::new(),
        target: b"g".to_vec(),
        resumed: true,
    };
    s.handle_frame(ready, now).expect("ready");
    let out = s.take_out();
    assert!(
        (out.hashes.iter()).any(|h| matches!(h, HashJob::Resume { file_id: 1, .. })),
        "the offers are checked against the source"
    );
    let claim = Message::FileCommitted {
        file_id: 1,
        bytes: 4 << 20,
        digest: [9; 32],
        verified: true,
        stored: true,
    };
    s.handle_frame(claim, now).expect("the session goes on");
    let done: Vec<_> = (s.take_out().reports.into_iter())
        .filter_map(|r| match r {
            Report::FileDone(d) => Some(d.failure.map(|f| f.code)),
            _ => None,
        })
        .collect();
    assert_eq!(done, [Some("verify")]);
    // The check's answer, late, finds the file gone.
    s.resume_checked(1, Some(vec![(0, mac([1; 32])), (1, mac([2; 32]))]), now);
    assert!(s.take_out().chunks.is_empty());
}

// ---- issue 24, class 1: a chunk counts only once its bytes have left ----

/// The `ChunkMac`s among `frames`, as (index, mac).
fn chunk_macs(frames: &[Message]) -> Vec<(u64, [u8; 32])> {
    (frames.iter())
        .filter_map(|m| match m {
            Message::ChunkMac { index, mac, .. } => Some((*index, *mac)),
            _ => None,
        })
        .collect()
}

fn ack(index: u64, ok: bool) -> Message {
    Message::ChunkAck {
        file_id: 0,
        index,
        ok,
    }
}

/// (a) A chunk's MAC goes out only once it is both hashed and departed, in either order.
#[test]
fn a_chunk_mac_goes_out_only_once_the_chunk_is_hashed_and_has_left() {
    let (mut s, _) = ready(VerifyMode::Blake3);
    let now = Instant::now();
    s.hashed(0, 0, mac([7; 32]), now);
    assert!(
        chunk_macs(&s.take_out().frames).is_empty(),
        "hashed, not sent"
    );
    s.departed(0, 0, now);
    assert_eq!(chunk_macs(&s.take_out().frames), [(0, [7; 32])]);
    s.departed(0, 1, now);
    assert!(
        chunk_macs(&s.take_out().frames).is_empty(),
        "sent, not hashed"
    );
    s.hashed(0, 1, mac([8; 32]), now);
    assert_eq!(chunk_macs(&s.take_out().frames), [(1, [8; 32])]);
    // The transport's word again sends nothing more.
    s.departed(0, 1, now);
    assert!(chunk_macs(&s.take_out().frames).is_empty());
}

/// (b) An acknowledgement (or a refusal) of a chunk whose MAC was not sent — it has not
/// left, or is not hashed — is a protocol error: nobody can have verified it.
#[test]
fn an_ack_for_a_chunk_whose_mac_was_not_sent_is_a_protocol_error() {
    for ok in [true, false] {
        // Hashed but still queued.
        let (mut s, out) = ready(VerifyMode::Blake3);
        let now = Instant::now();
        for index in 0..out.chunks.len() as u64 {
            s.hashed(0, index, mac([1; 32]), now);
        }
        let e = s.handle_frame(ack(0, ok), now).expect_err("not sent");
        assert!(e.to_string().contains("ChunkMac was not sent"), "{e}");
        // Sent but not hashed.
        let (mut s, _) = ready(VerifyMode::Blake3);
        s.departed(0, 1, now);
        assert!(s.handle_frame(ack(1, ok), now).is_err(), "not hashed");
        // Both: taken.
        s.hashed(0, 1, mac([1; 32]), now);
        assert!(s.handle_frame(ack(1, ok), now).is_ok());
    }
}

/// The reviewer's attack, over the state machine: acknowledgements of chunks that are still
/// queued (hashed, none left) neither end the file nor let a commit count.
#[test]
fn acks_before_any_departure_end_nothing() {
    let (mut s, out) = ready(VerifyMode::Blake3);
    let now = Instant::now();
    for index in 0..out.chunks.len() as u64 {
        s.hashed(0, index, mac([index as u8; 32]), now);
    }
    assert!(chunk_macs(&s.take_out().frames).is_empty());
    assert!(s.handle_frame(ack(0, true), now).is_err());
    let o = s.take_out();
    assert!(
        o.checks.is_empty()
            && !o
                .frames
                .iter()
                .any(|m| matches!(m, Message::FileEnd { .. }))
    );
    assert_eq!(s.totals.files, 0);
}

/// (c) `FileEnd` waits for every chunk to have left, even a one-chunk file (which needs no
/// acknowledgement) whose MAC is known.
#[test]
fn file_end_waits_for_every_chunk_to_have_left() {
    let now = Instant::now();
    let (mut s, out) = ready_sized(VerifyMode::Blake3, RecvEngine::Auto, "rw", 1 << 20);
    assert_eq!(out.chunks.len(), 1);
    // A small chunk: the transport hashes it as it reads it (staged), then sends it.
    s.hashed(0, 0, mac([4; 32]), now);
    let o = s.take_out();
    assert!(
        o.checks.is_empty() && chunk_macs(&o.frames).is_empty(),
        "not sent yet"
    );
    s.departed(0, 0, now);
    let o = s.take_out();
    assert_eq!(chunk_macs(&o.frames), [(0, [4; 32])]);
    assert_eq!(
        o.checks.len(),
        1,
        "sent and its MAC out: the source check, then FileEnd"
    );
}

/// A file whose chunks are still leaving is "sending"; once every chunk left, and until the
/// receiver commits it, "verifying and syncing" (a pull showed the latter while data flowed).
#[test]
fn the_phase_is_sending_until_every_chunk_left() {
    use crate::event::Phase;
    let now = Instant::now();
    let (mut s, out) = ready_sized(VerifyMode::Blake3, RecvEngine::Auto, "rw", 3 << 26);
    assert!(out.chunks.len() >= 2, "{}", out.chunks.len());
    assert_eq!(s.phase(), Phase::Sending);
    for c in &out.chunks[..out.chunks.len() - 1] {
        s.departed(c.file_id, c.index, now);
    }
    assert_eq!(s.phase(), Phase::Sending);
    let last = out.chunks.last().unwrap();
    s.departed(last.file_id, last.index, now);
    assert_eq!(s.phase(), Phase::Syncing);
}

/// (a) after a refusal: the chunk is sent again, and its fresh MAC waits for it to leave
/// again; an acknowledgement before that is a protocol error.
#[test]
fn a_chunk_sent_again_must_leave_again_before_its_mac() {
    let (mut s, _) = ready(VerifyMode::Blake3);
    let now = Instant::now();
    s.hashed(0, 2, mac([1; 32]), now);
    s.departed(0, 2, now);
    let _ = s.take_out();
    s.handle_frame(ack(2, false), now).expect("a refusal");
    let out = s.take_out();
    assert_eq!(out.chunks.len(), 1, "sent again");
    s.hashed(0, 2, mac([2; 32]), now);
    assert!(chunk_macs(&s.take_out().frames).is_empty());
    assert!(s.handle_frame(ack(2, true), now).is_err());
    let (mut s, _) = ready(VerifyMode::Blake3);
    s.hashed(0, 2, mac([1; 32]), now);
    s.departed(0, 2, now);
    s.handle_frame(ack(2, false), now).expect("a refusal");
    s.hashed(0, 2, mac([2; 32]), now);
    s.departed(0, 2, now);
    assert_eq!(chunk_macs(&s.take_out().frames).last(), Some(&(2, [2; 32])));
    assert!(s.handle_frame(ack(2, true), now).is_ok());
}

fn review_session(nonces: ([u8; 32], [u8; 32])) -> Sending {
    let cfg = SenderConfig {
        engine: SendEngine::Sendfile,
        block: 0,
        chunk_size: Some(2 << 20),
        idle: Duration::from_secs(30),
        verify: VerifyMode::Blake3,
        delete: zcp_wire::DeleteMode::Off,
        recv_engine: RecvEngine::Auto,
    };
    let keys = SessionKeys::derive(&Psk::from_bytes([3; 32]), &nonces.0, &nonces.1);
    Sending::new(
        cfg,
        (SendEngine::Sendfile, None),
        keys,
        nonces,
        1,
        Instant::now(),
    )
}

fn announce_file(s: &mut Sending, file: &std::fs::File) {
    let file = file.try_clone().unwrap();
    let meta = zcp_engine::fs::stat_fd(&file).expect("stat");
    s.take_entry(
        Entry::File {
            dest: b"f".to_vec(),
            name: Vec::new(),
            file: file.into(),
            meta,
            display: "f".into(),
        },
        Instant::now(),
    );
}

/// Runs `hashes` on a real hash worker under session `sess`, feeding back what it reports.
fn run_hashes(s: &mut Sending, sess: ([u8; 32], [u8; 32]), hashes: Vec<HashJob>) {
    let psk = Psk::from_bytes([3; 32]);
    let keys = SessionKeys::derive(&psk, &sess.0, &sess.1);
    let jobs = crate::transport::Queue::new();
    for h in hashes {
        jobs.push(h);
    }
    jobs.close();
    let (tx, rx) = std::sync::mpsc::channel();
    super::hash::hash_worker(jobs, tx, keys, psk);
    let now = Instant::now();
    for ev in rx.try_iter() {
        match ev {
            super::SendEvent::Hashed { file, index, proof } => s.hashed(file, index, proof, now),
            super::SendEvent::ResumeChecked { file, kept } => s.resume_checked(file, kept, now),
            _ => {}
        }
    }
}

/// (a) closes the replay: a receiver that never took a byte (it collected what it could in
/// attempt 1 and dropped) has no MAC to offer in attempt 2, so the resume check keeps
/// nothing, every chunk is sent, and an echoed commit before they left proves nothing.
#[test]
fn a_receiver_that_took_no_byte_has_no_chunk_mac_to_replay() {
    use std::io::Write;
    let mut file = tempfile::tempfile().unwrap();
    let body: Vec<u8> = (0..(6u32 << 20))
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    file.write_all(&body).unwrap();
    // Attempt 1: made ready, every chunk hashed; the transport sent none.
    let a = ([1; 32], [2; 32]);
    let mut s1 = review_session(a);
    announce_file(&mut s1, &file);
    let _ = s1.take_out();
    let ready = |resumed| Message::FileReady {
        file_id: 0,
        engine: "rw".into(),
        note: String::new(),
        target: b"f".to_vec(),
        resumed,
    };
    s1.handle_frame(ready(false), Instant::now()).unwrap();
    let out1 = s1.take_out();
    run_hashes(&mut s1, a, out1.hashes);
    assert!(
        chunk_macs(&s1.take_out().frames).is_empty(),
        "no ChunkMac before a chunk left"
    );
    // Attempt 2: the receiver offers every chunk under attempt 1's nonces, with the only
    // MACs it could have (guesses).
    let b = ([7; 32], [8; 32]);
    let mut s2 = review_session(b);
    announce_file(&mut s2, &file);
    let _ = s2.take_out();
    let now = Instant::now();
    let entries = (0..3).map(|i| (i, [i as u8; 32])).collect();
    let have = zcp_wire::Have {
        file_id: 0,
        client_nonce: a.0,
        server_nonce: a.1,
        old_file_id: 0,
        entries,
    };
    s2.handle_frame(Message::Have(have), now).unwrap();
    s2.handle_frame(ready(true), now).unwrap();
    let out2 = s2.take_out();
    run_hashes(&mut s2, b, out2.hashes);
    let out3 = s2.take_out();
    assert!(
        out3.frames
            .iter()
            .any(|m| matches!(m, Message::Go { restart: true, .. }))
    );
    assert_eq!(out3.chunks.len(), 3, "every chunk is sent");
    run_hashes(&mut s2, b, out3.hashes);
    let out4 = s2.take_out();
    assert!(out4.checks.is_empty(), "no FileEnd before the chunks left");
    assert!(chunk_macs(&out4.frames).is_empty());
    assert!(
        s2.handle_frame(ack(0, true), now).is_err(),
        "an ack for a chunk not sent"
    );
    // (The session ends on that error; a commit echoed anyway is still no proof.)
    let commit = Message::FileCommitted {
        file_id: 0,
        bytes: 6 << 20,
        digest: [0; 32],
        verified: true,
        stored: true,
    };
    s2.handle_frame(commit, now)
        .expect("the file fails, not the session");
    assert_eq!(outcomes(&mut s2), [(false, false, [0; 32], Some("verify"))]);
    assert_eq!(s2.totals.files, 0);
}
