//! Exit honesty (issue 24, class 1): `zcp send` exits 0 only when every requested entry
//! was committed as stored and verified, under the engine class and verify mode the client
//! asked for, with the digest the client computed. A malicious receiver ([`EvilRx`], the
//! server a push goes to, holding the key) names an engine the client never asked for,
//! commits unverified, unstored, with another digest or before the data was sent; downgrades
//! the session in `Opened`; claims a retried file is all there. Each fails the file (exit 5)
//! or the session, says so without claiming what was not done, and leaves the source as it
//! was. The same for `get` (a malicious server's `Opened` and commits), trees (a directory or
//! link counts only when the receiver says it made it), `--retry` and
//! `--transport udp`; and, mirrored, for `zcp serve` sending to a pulling client that names
//! an engine it did not ask for.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};

use zcp_wire::{ErrorCode, Have, Message, Open};

use crate::hostile::peer::receiver::{EvilRx, Lie, honest_opened};
use crate::hostile::peer::*;
use crate::util::*;

/// The exit code of a transfer whose data did not verify.
const INTEGRITY: i32 = 5;

/// A source file of `size` bytes in `env`, and its content.
fn source(env: &Env, name: &str, size: usize) -> (PathBuf, Vec<u8>) {
    let body: Vec<u8> = (0..size).map(|i| (i * 31 + i / 977) as u8).collect();
    let p = env.path(name);
    std::fs::write(&p, &body).unwrap();
    (p, body)
}

/// `zcp send` of `srcs` to the receiver listening on `l`, into `dest`, started.
fn start_send(env: &Env, l: &TcpListener, srcs: &[&Path], dest: &str, extra: &[&str]) -> Child {
    let mut c = zcp();
    c.args(["send", "-i", "0", "-p"])
        .arg(l.local_addr().unwrap().port().to_string())
        .arg("--key-file")
        .arg(&env.key)
        .args(extra)
        .args(srcs)
        .arg(format!("127.0.0.1::{dest}"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c.spawn().unwrap()
}

/// A push of `srcs` to a receiver that lies as `lie` says (about files whose destination
/// ends with `only`; every file when empty): the client's output and the frames it sent.
fn push(env: &Env, srcs: &[&Path], extra: &[&str], lie: Lie, only: &str) -> (Output, Vec<Message>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let child = start_send(env, &l, srcs, "in", extra);
    let mut evil = EvilRx::accept(&l, &env.psk(), honest_opened);
    let early = match (lie, srcs) {
        (Lie::Early, [one]) => std::fs::read(one).unwrap(),
        _ => Vec::new(),
    };
    let seen = evil.serve(lie, only, &early);
    let o = wait_output(child, 30);
    evil.join();
    (o, seen)
}

/// The JSON document of a `-J` run.
fn doc(o: &Output) -> serde_json::Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {}", both(o)))
}

/// What a client that was lied to must not say: that anything was verified or stored, or
/// that the user asked for `--verify none`.
fn claims_nothing(o: &Output) {
    let all = both(o);
    for claim in [
        "Verified: every",
        "stored durably",
        "--verify none",
        "Stored:   ",
        "null receiver",
        "received into memory",
    ] {
        assert!(!all.contains(claim), "claims {claim:?}: {all}");
    }
    no_control_bytes(o);
}

/// The source is exactly as it was.
fn untouched(p: &Path, body: &[u8], mtime: std::time::SystemTime) {
    assert_eq!(std::fs::read(p).unwrap(), body, "the source changed");
    assert_eq!(
        crate::hostile::peer::mtime(p),
        mtime,
        "the source's mtime changed"
    );
}

/// One file pushed to a receiver that lies as `lie` says: exit 5, the file named failed as a
/// verification failure with `why`, nothing claimed, the source untouched. Returns the
/// frames the client sent.
fn one_file_fails(lie: Lie, why: &str) -> Vec<Message> {
    one_file_fails_with(lie, why, 100_000, &[])
}

/// [`one_file_fails`] for a source of `size` bytes and with `extra` flags.
fn one_file_fails_with(lie: Lie, why: &str, size: usize, extra: &[&str]) -> Vec<Message> {
    let env = Env::new();
    let (src, body) = source(&env, "a.bin", size);
    let mtime = mtime(&src);
    let (o, seen) = push(&env, &[&src], extra, lie, "");
    assert_eq!(o.status.code(), Some(INTEGRITY), "{lie:?}: {}", both(&o));
    let err = text(&o.stderr);
    assert!(err.contains("1 entry did not arrive"), "{lie:?}: {err}");
    assert!(err.contains(why), "{lie:?}: {err}");
    claims_nothing(&o);
    untouched(&src, &body, mtime);
    seen
}

#[test]
fn an_honest_receiver_through_this_harness_is_a_success() {
    // The harness itself: the same receiver, telling the truth, gets exit 0 and the claims
    // the other tests look for.
    let env = Env::new();
    let (src, _) = source(&env, "a.bin", 100_000);
    let (o, _) = push(&env, &[&src], &[], Lie::None, "");
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let out = text(&o.stdout);
    assert!(out.contains("Verified: every chunk MAC matched"), "{out}");
    assert!(out.contains("stored durably and verified"), "{out}");
}

#[test]
fn a_null_engine_the_client_did_not_ask_for_fails_the_file() {
    let seen = one_file_fails(Lie::Engine("null"), "stores nothing");
    // The file was given up at its FileReady: no byte's MAC was dropped for it, no FileEnd,
    // and the receiver was told why.
    assert!(
        !seen
            .iter()
            .any(|m| matches!(m, Message::FileEnd { .. } | Message::ChunkMac { .. })),
        "{seen:?}"
    );
    assert!(
        seen.iter().any(|m| matches!(
            m,
            Message::FileAbort {
                code: ErrorCode::Verify,
                ..
            }
        )),
        "{seen:?}"
    );
}

#[test]
fn a_mem_engine_the_client_did_not_ask_for_fails_the_file() {
    one_file_fails(Lie::Engine("mem"), "stores nothing");
}

#[test]
fn an_unverified_commit_fails_the_file_and_never_blames_verify_none() {
    let env = Env::new();
    let (src, body) = source(&env, "a.bin", 100_000);
    let mtime = mtime(&src);
    let (o, _) = push(&env, &[&src], &["-J"], Lie::Unverified, "");
    assert_eq!(o.status.code(), Some(INTEGRITY), "{}", both(&o));
    let d = doc(&o);
    let end = &d["end"];
    assert_eq!(end["verify_mode"], "blake3", "{d}");
    assert_eq!(end["verified"], false, "{d}");
    assert_eq!(end["stored"], false, "{d}");
    assert_eq!(end["files"]["committed"], 0, "{d}");
    assert_eq!(end["files"]["failed"], 1, "{d}");
    let f = &end["files"]["failures"][0];
    assert_eq!(f["code"], "verify", "{d}");
    assert!(
        f["message"].as_str().unwrap().contains("did not verify"),
        "{d}"
    );
    assert!(!text(&o.stdout).contains("--verify none"), "{d}");
    untouched(&src, &body, mtime);
}

#[test]
fn a_commit_with_another_digest_fails_the_file() {
    one_file_fails(Lie::WrongDigest, "digest other than this side's");
}

#[test]
fn a_commit_that_stored_nothing_fails_the_file() {
    one_file_fails(Lie::NotStored, "did not store it");
}

#[test]
fn a_commit_before_the_data_was_sent_fails_the_file() {
    // With the right digest, verified and stored: a key holder that knows the source can
    // compute all of it, but not before this side's FileEnd. Five chunks: the FileEnd waits
    // for their acknowledgements, which this receiver sends only after its commit.
    let seen = one_file_fails_with(
        Lie::Early,
        "before this side sent all of it",
        300_000,
        &["--chunk-size", "64K"],
    );
    assert!(
        !seen.iter().any(|m| matches!(m, Message::FileEnd { .. })),
        "{seen:?}"
    );
}

#[test]
fn engines_and_modes_the_user_asked_for_are_a_success_and_say_so() {
    let env = Env::new();
    let (src, _) = source(&env, "a.bin", 100_000);
    // --recv-engine null: nothing stored or verified, as asked.
    let (o, _) = push(
        &env,
        &[&src],
        &["--recv-engine", "null"],
        Lie::Engine("null"),
        "",
    );
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let out = text(&o.stdout);
    assert!(out.contains("null receiver"), "{out}");
    assert!(!out.contains("--verify none"), "{out}");
    // --verify none: stored, not verified, and that is what the user asked for.
    let (o, _) = push(&env, &[&src], &["--verify", "none"], Lie::Unverified, "");
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    let out = text(&o.stdout);
    assert!(out.contains("Verified: no (--verify none)"), "{out}");
    // But a receiver that stores nothing still fails it: the user asked for storage.
    let (o, _) = push(&env, &[&src], &["--verify", "none"], Lie::Engine("mem"), "");
    assert_eq!(o.status.code(), Some(INTEGRITY), "{}", both(&o));
    let all = both(&o);
    assert!(all.contains("stores nothing"), "{all}");
    assert!(
        !all.contains("Stored:   ") && !all.contains("received into memory"),
        "{all}"
    );
}

#[test]
fn in_a_tree_only_the_files_proved_count_as_done() {
    let env = Env::new();
    let top = env.mkdir("tree");
    std::fs::create_dir(top.join("sub")).unwrap();
    for (name, size) in [("a.bin", 1000), ("sub/b.bin", 70_000), ("sub/c.bin", 5)] {
        let body: Vec<u8> = (0..size).map(|i| (i % 253) as u8).collect();
        std::fs::write(top.join(name), body).unwrap();
    }
    std::os::unix::fs::symlink("a.bin", top.join("link")).unwrap();
    let before = tree(&top);
    let (o, _) = push(&env, &[&top], &["-r", "-J"], Lie::WrongDigest, "b.bin");
    assert_eq!(o.status.code(), Some(INTEGRITY), "{}", both(&o));
    let d = doc(&o);
    let files = &d["end"]["files"];
    assert_eq!(files["committed"], 2, "{d}");
    assert_eq!(files["failed"], 1, "{d}");
    assert_eq!(files["failures"][0]["code"], "verify", "{d}");
    assert!(
        files["failures"][0]["path"]
            .as_str()
            .unwrap()
            .ends_with("b.bin"),
        "{d}"
    );
    // The summary's bytes are those of the files proved, not of the tree.
    assert_eq!(d["end"]["sum"]["bytes"], 1005, "{d}");
    assert_eq!(tree(&top), before, "the source tree changed");
    // Every file lied about: nothing committed, each one failed.
    let (o, _) = push(&env, &[&top], &["-r", "-J"], Lie::Engine("null"), "");
    assert_eq!(o.status.code(), Some(INTEGRITY), "{}", both(&o));
    let d = doc(&o);
    assert_eq!(d["end"]["files"]["committed"], 0, "{d}");
    assert_eq!(d["end"]["files"]["failed"], 3, "{d}");
    assert_eq!(d["end"]["verified"], false, "{d}");
}

/// A tree of a file, two directories (one within the other) and a link, in `env`.
fn small_tree(env: &Env) -> PathBuf {
    let top = env.mkdir("tree");
    std::fs::create_dir_all(top.join("sub/deep")).unwrap();
    std::fs::write(top.join("a.bin"), b"abc").unwrap();
    std::os::unix::fs::symlink("a.bin", top.join("link")).unwrap();
    top
}

/// Directories and links have no bytes to prove: each counts only when the receiver says it
/// made it (`EntryDone`). A receiver that says nothing about any of them fails each, and
/// each directory's times, as unconfirmed: exit 5, none counted, the file still proved. One
/// that skips only `deep` and answers what follows is answering out of order: a protocol
/// error, naming the directory that went unanswered.
#[test]
fn in_a_tree_a_directory_or_link_counts_only_when_the_receiver_made_it() {
    let env = Env::new();
    let top = small_tree(&env);
    let before = tree(&top);
    // Honest: the destination `in`, the top directory, sub, sub/deep and the link.
    let (o, seen) = push(&env, &[&top], &["-r", "-J"], Lie::None, "");
    assert_eq!(o.status.code(), Some(0), "{}", both(&o));
    assert_eq!(doc(&o)["end"]["files"]["entries"], 5, "{seen:?}");
    // Silent about every one: 4 directories, 1 link, 3 directories' times.
    let (o, _) = push(&env, &[&top], &["-r", "-J"], Lie::SilentEntries, "");
    assert_eq!(o.status.code(), Some(INTEGRITY), "{}", both(&o));
    let d = doc(&o);
    let files = &d["end"]["files"];
    assert_eq!(files["entries"], 0, "{d}");
    assert_eq!(files["committed"], 1, "{d}");
    assert_eq!(files["failed"], 8, "{d}");
    for f in files["failures"].as_array().unwrap() {
        assert_eq!(f["code"], "verify", "{d}");
        let m = f["message"].as_str().unwrap();
        assert!(m.contains("without saying it made this"), "{d}");
    }
    no_control_bytes(&o);
    // Silent about `deep` alone.
    let (o, _) = push(&env, &[&top], &["-r"], Lie::SilentEntries, "deep");
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    let err = text(&o.stderr);
    assert!(
        err.contains("the directory '") && err.contains("deep' was next"),
        "{err}"
    );
    claims_nothing(&o);
    assert_eq!(tree(&top), before, "the source tree changed");
}

/// An `EntryDone` for a path other than the next one awaiting an answer (here, one never
/// sent) is a protocol error: the session ends, nothing is claimed.
#[test]
fn an_answer_for_an_entry_never_sent_ends_the_session() {
    let env = Env::new();
    let top = small_tree(&env);
    let (o, _) = push(&env, &[&top], &["-r"], Lie::OtherEntry, "sub");
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    let err = text(&o.stderr);
    assert!(err.contains("an answer for 'made-up'"), "{err}");
    claims_nothing(&o);
}

/// `--retry`: the first attempt's receiver drops the connection mid-file; the second
/// claims every chunk is already there (offers under the first session's nonces, with MACs
/// it made up) and commits as soon as this side answers. The sender checks the offers
/// against its own hashes, sends the file whole (`Go{restart}`), and takes no commit before
/// its `FileEnd`: the retried file fails, exit 5.
#[test]
fn a_retried_file_the_receiver_claims_to_hold_is_still_proved() {
    let env = Env::new();
    let (src, body) = source(&env, "a.bin", 300_000);
    let mtime = mtime(&src);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let extra = [
        "--retry",
        "1",
        "--retry-wait",
        "0.1",
        "--chunk-size",
        "64K",
        "-J",
    ];
    let child = start_send(&env, &l, &[&src], "in", &extra);
    // Attempt 1: the file is announced, then the connection is lost.
    let mut first = EvilRx::accept(&l, &env.psk(), honest_opened);
    let put = loop {
        if let Message::PutFile(p) = first.recv().unwrap() {
            break p;
        }
    };
    first.join();
    // Attempt 2: everything is "already there".
    let mut second = EvilRx::accept(&l, &env.psk(), honest_opened);
    let put2 = loop {
        if let Message::PutFile(p) = second.recv().unwrap() {
            break p;
        }
    };
    assert_eq!((put2.size, put2.chunk_size), (put.size, put.chunk_size));
    let chunks = put2.size.div_ceil(put2.chunk_size);
    second.send(&Message::Have(Have {
        file_id: put2.file_id,
        client_nonce: [1; 32],
        server_nonce: [2; 32],
        old_file_id: put.file_id,
        entries: (0..chunks).map(|i| (i, [i as u8; 32])).collect(),
    }));
    second.send(&Message::FileReady {
        file_id: put2.file_id,
        engine: "rw".into(),
        note: String::new(),
        target: put2.dest.clone(),
        resumed: true,
    });
    let restart = loop {
        if let Message::Go { restart, .. } = second.recv().unwrap() {
            break restart;
        }
    };
    assert!(restart, "the made-up offers were believed");
    let digest = crate::hostile::peer::receiver::digest_of(&second.est, put2.file_id, &body, 65536);
    second.commit(put2.file_id, put2.size, digest, Lie::None);
    let seen = second.serve(Lie::None, "", &[]);
    let o = wait_output(child, 30);
    second.join();
    assert_eq!(o.status.code(), Some(INTEGRITY), "{}", both(&o));
    let d = doc(&o);
    assert_eq!(d["end"]["retries"], 1, "{d}");
    assert_eq!(d["end"]["files"]["committed"], 0, "{d}");
    assert_eq!(d["end"]["resume"]["bytes_skipped"], 0, "{d}");
    let why = d["end"]["files"]["failures"][0]["message"]
        .as_str()
        .unwrap();
    assert!(why.contains("before this side sent all of it"), "{d}");
    assert!(
        !seen.iter().any(|m| matches!(m, Message::FileEnd { .. })),
        "a FileEnd after the file failed: {seen:?}"
    );
    untouched(&src, &body, mtime);
}

#[test]
fn over_udp_a_null_engine_or_another_digest_fails_the_file() {
    for (lie, why) in [
        (Lie::Engine("null"), "stores nothing"),
        (Lie::WrongDigest, "digest other than this side's"),
    ] {
        let env = Env::new();
        let (src, body) = source(&env, "a.bin", 100_000);
        let mtime = mtime(&src);
        let (o, _) = push(&env, &[&src], &["--transport", "udp"], lie, "");
        assert_eq!(o.status.code(), Some(INTEGRITY), "{lie:?}: {}", both(&o));
        assert!(text(&o.stderr).contains(why), "{lie:?}: {}", both(&o));
        claims_nothing(&o);
        untouched(&src, &body, mtime);
    }
}

/// The client's extra flags, the server's answer to its `Open`, and the word the refusal
/// names.
type Downgrade = (&'static [&'static str], fn(&Open) -> Message, &'static str);

/// A server whose `Opened` answers another verify mode or transport than asked: refused
/// before any data stream, by `send` as by `get`.
fn downgrades() -> [Downgrade; 3] {
    [
        (&[], |o| with(o, "none", "tcp"), "verify mode"),
        (
            &["--transport", "udp"],
            |o| with(o, "blake3", "tcp"),
            "transport",
        ),
        (&[], |o| with(o, "blake3", "udp"), "transport"),
    ]
}

fn with(o: &Open, verify: &str, transport: &str) -> Message {
    let Message::Opened {
        streams,
        idle_ms,
        pacing,
        udp_mode,
        ..
    } = honest_opened(o)
    else {
        unreachable!()
    };
    Message::Opened {
        streams,
        idle_ms,
        pacing,
        verify: verify.into(),
        transport: transport.into(),
        udp_mode,
    }
}

#[test]
fn a_downgrade_in_opened_is_refused_by_send_before_any_stream() {
    for (extra, answer, what) in downgrades() {
        let env = Env::new();
        let (src, body) = source(&env, "a.bin", 1000);
        let mtime = mtime(&src);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let child = start_send(&env, &l, &[&src], "in", extra);
        let evil = EvilRx::accept(&l, &env.psk(), answer);
        // The client asked for what it wanted; the answer was the server's.
        assert_eq!(evil.open.verify, "blake3", "{what}");
        assert_eq!(evil.joined, 0, "{what}: a data stream connected");
        let o = wait_output(child, 20);
        evil.join();
        assert_eq!(o.status.code(), Some(1), "{what}: {}", both(&o));
        assert!(text(&o.stderr).contains(what), "{}", both(&o));
        claims_nothing(&o);
        untouched(&src, &body, mtime);
    }
}

#[test]
fn a_downgrade_in_opened_is_refused_by_get_before_any_stream() {
    for (extra, answer, what) in downgrades() {
        let env = Env::new();
        let dest = victim_dest(&env);
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let child = get(port, &env.key, &["want.bin"], &dest.join("got"), extra);
        answer_open(&l, &env, answer);
        let o = wait_output(child, 20);
        assert_eq!(o.status.code(), Some(1), "{what}: {}", both(&o));
        assert!(text(&o.stderr).contains(what), "{}", both(&o));
        claims_nothing(&o);
        l.set_nonblocking(true).unwrap();
        assert!(l.accept().is_err(), "{what}: a data stream connected");
        assert_eq!(tree(&dest), ["keep.txt", "private"], "{what}");
    }
}

/// A `get` whose server commits nothing it proved: a `FileEnd` with another digest, or a
/// `Finish` while the file is open. The client verifies for itself; nothing is renamed into
/// place and the exit code is not 0.
#[test]
fn a_get_whose_server_proves_nothing_stores_nothing() {
    let body: Vec<u8> = (0..150_000u32).map(|i| (i % 251) as u8).collect();
    for wrong_digest in [true, false] {
        let env = Env::new();
        let dest = victim_dest(&env);
        let (child, mut evil) = evil_get(&env, &["want.bin"], &dest, &["-J"]);
        let id = 0;
        evil.put(id, b"want.bin", b"", body.len() as u64);
        assert!(
            matches!(evil.next(), Message::FileReady { .. }),
            "the client is ready"
        );
        if wrong_digest {
            for (i, c) in body.chunks(65536).enumerate() {
                let off = i as u64 * 65536;
                let mut h = evil.est.keys.chunk_hasher(id, off, c.len() as u64);
                h.update(c);
                let d = &mut evil.data[0];
                use std::io::Write;
                d.write_all(&zcp_wire::ChunkHeader::data(id, off, c.len() as u64).encode())
                    .unwrap();
                d.write_all(c).unwrap();
                evil.send(&Message::ChunkMac {
                    file_id: id,
                    index: i as u64,
                    mac: *h.finalize().as_bytes(),
                });
            }
            for _ in 0..body.len().div_ceil(65536) {
                assert!(matches!(evil.next(), Message::ChunkAck { ok: true, .. }));
            }
            evil.send(&Message::FileEnd {
                file_id: id,
                digest: [0x42; 32],
            });
        }
        evil.finish();
        let o = wait_output(child, 30);
        let code = o.status.code();
        assert!(
            code.is_some_and(|c| c != 0),
            "wrong digest {wrong_digest}: {}",
            both(&o)
        );
        if wrong_digest {
            assert_eq!(code, Some(INTEGRITY), "{}", both(&o));
        }
        let d = doc(&o);
        assert_eq!(d["end"]["files"]["committed"], 0, "{d}");
        assert_eq!(d["end"]["verified"], false, "{d}");
        // Nothing under the name asked for; chunks verified are kept in zcp's own part
        // file for a resume, nothing else is added.
        let own = own_files(&dest);
        let theirs: Vec<String> = (tree(&dest).into_iter())
            .filter(|p| !own.contains(p))
            .collect();
        assert_eq!(theirs, ["keep.txt", "private"], "{}", both(&o));
        assert!(!dest.join("want.bin").exists());
    }
}

/// The mirror on `zcp serve` in a pull, where the server is the sender: a client that asked
/// for a storing engine and names `null` (or `mem`) in its `FileReady` gets the file failed
/// at once (no byte, no MAC sent), and the server logs it failed, not sent. The source is
/// untouched, and the server serves an honest `get` afterwards.
#[test]
fn a_pulling_client_naming_an_engine_it_did_not_ask_for_gets_nothing() {
    for named in ["null", "mem"] {
        let env = Env::new();
        let root = env.mkdir("root");
        let want: Vec<u8> = (0..100_000u32).map(|i| (i % 239) as u8).collect();
        std::fs::write(root.join("want.bin"), &want).unwrap();
        let srv = ServerProc::start(&root, &env.key, &[]);
        let (mut raw, mut data) = raw_open(&srv, &env, true);
        let id = next_put(&mut raw);
        raw.send(&Message::FileReady {
            file_id: id,
            engine: named.into(),
            note: String::new(),
            target: b"want.bin".to_vec(),
            resumed: false,
        });
        let abort = wait_for(&mut raw, 10, "FileAbort", |m| {
            matches!(m, Message::FileAbort { .. } | Message::ChunkMac { .. })
        });
        let Message::FileAbort { code, message, .. } = abort else {
            panic!("{named}: a MAC before the abort: {abort:?}")
        };
        assert_eq!(code, ErrorCode::Verify, "{named}: {message}");
        assert!(message.contains("stores nothing"), "{named}: {message}");
        assert!(srv.wait_log("stores nothing", 10), "{}", srv.log());
        // Not a byte of the file on the data stream: at most the end marker.
        data.set_read_timeout(Some(std::time::Duration::from_millis(300)))
            .unwrap();
        let mut got = Vec::new();
        let _ = std::io::Read::read_to_end(&mut data, &mut got);
        assert!(got.len() <= 28, "{named}: {} bytes sent", got.len());
        drop(data);
        drop(raw);
        assert_eq!(std::fs::read(root.join("want.bin")).unwrap(), want);
        let out = env.path("got.bin");
        let mut c = zcp();
        c.args(["get", "-p", &srv.port.to_string(), "--key-file"])
            .arg(&env.key)
            .arg("127.0.0.1::want.bin")
            .arg(&out);
        let o = run(c, 30);
        assert!(o.status.success(), "{}\n{}", both(&o), srv.log());
        assert_eq!(std::fs::read(&out).unwrap(), want);
    }
}

/// Issue 24, class 1 (commit without the data), over UDP: a receiver that answers every
/// announced chunk with `Done` (never `Ready`), would acknowledge every `ChunkMac` and echo
/// `FileEnd`'s digest. A chunk not yet sent cannot be done: the stream fails at the first
/// such `Done`, no `ChunkMac` or `FileEnd` goes out (nothing left), the run fails without
/// claiming anything, and the source is as it was.
#[test]
fn over_udp_done_for_chunks_never_sent_proves_nothing() {
    use crate::hostile::peer::receiver::SideChannel;
    let env = Env::new();
    let (src, body) = source(&env, "a.bin", 12 << 20);
    let mtime = mtime(&src);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let child = start_send(&env, &l, &[&src], "in", &["--transport", "udp", "-J"]);
    let mut evil = EvilRx::accept_with(&l, &env.psk(), honest_opened, SideChannel::DoneOnly);
    let seen = evil.serve(Lie::None, "", &[]);
    let o = wait_output(child, 30);
    let datagrams = evil.datagrams.clone();
    evil.join();
    // The session fails as a protocol error (exit 1), with no end document: nothing is
    // counted as committed, verified or stored.
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    let d = doc(&o);
    assert_eq!(d["exit_code"], 1, "{d}");
    assert!(d["error"].as_str().unwrap().contains("not yet sent"), "{d}");
    assert!(d.get("end").is_none(), "{d}");
    assert!(
        !seen
            .iter()
            .any(|m| matches!(m, Message::ChunkMac { .. } | Message::FileEnd { .. })),
        "a MAC or FileEnd for chunks never sent: {seen:?}"
    );
    assert_eq!(
        datagrams.load(std::sync::atomic::Ordering::Relaxed),
        0,
        "no chunk was ever Ready"
    );
    claims_nothing(&o);
    untouched(&src, &body, mtime);
}

/// Issue 24, class 1, over TCP: a receiver that acknowledges every chunk as soon as the file
/// is ready — before any `ChunkMac`, which goes only once a chunk's bytes have left — and
/// echoes `FileEnd`'s digest. An acknowledgement of a chunk whose MAC was not sent is a
/// protocol error: the run fails, no `FileEnd` goes out, nothing is claimed.
#[test]
fn acks_for_chunks_whose_mac_was_not_sent_end_the_session() {
    let env = Env::new();
    let (src, body) = source(&env, "a.bin", 12 << 20);
    let mtime = mtime(&src);
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let child = start_send(&env, &l, &[&src], "in", &["--chunk-size", "1M", "-J"]);
    let mut evil = EvilRx::accept(&l, &env.psk(), honest_opened);
    let put = loop {
        if let Message::PutFile(p) = evil.recv().unwrap() {
            break p;
        }
    };
    evil.send(&Message::FileReady {
        file_id: put.file_id,
        engine: "rw".into(),
        note: String::new(),
        target: put.dest.clone(),
        resumed: false,
    });
    for index in 0..put.size.div_ceil(put.chunk_size) {
        evil.send(&Message::ChunkAck {
            file_id: put.file_id,
            index,
            ok: true,
        });
    }
    let seen = evil.serve(Lie::None, "", &[]);
    let o = wait_output(child, 30);
    evil.join();
    // The session fails as a protocol error (exit 1), with no end document: nothing is
    // counted as committed, verified or stored.
    assert_eq!(o.status.code(), Some(1), "{}", both(&o));
    let d = doc(&o);
    assert_eq!(d["exit_code"], 1, "{d}");
    assert!(d["error"].as_str().unwrap().contains("was not sent"), "{d}");
    assert!(d.get("end").is_none(), "{d}");
    assert!(
        !seen.iter().any(|m| matches!(m, Message::FileEnd { .. })),
        "a FileEnd: {seen:?}"
    );
    claims_nothing(&o);
    untouched(&src, &body, mtime);
}
