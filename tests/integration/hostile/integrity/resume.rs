//! Resume without trust: part files and journals planted by a key holder (under their own
//! names, in another case, or through a malicious server in a `get -r`) never make a later
//! honest transfer commit forged bytes; a `Go` for a file never offered commits nothing; a
//! chunk held for `Go` lands only after a restart emptied the part file.

use std::io::Write;
use std::time::Duration;

use zcp_wire::{ChunkHeader, ErrorCode, Message, PutFile};

use crate::hostile::peer::*;
use crate::util::*;

/// Cross-session poisoning. A key holder plants, under ordinary names, a part file holding
/// bytes of its choice and a journal whose MACs are those of the *honest* content (it needs
/// only to know that content, e.g. a published release, and the key: it picks the nonces).
/// The next honest `zcp send` of that file is offered the journaled chunks, proves them
/// against its source, answers Go{keep}, and the server commits the planted bytes, reported
/// verified. SAFE: the stored file is the honest content (or the planted names are refused).
#[test]
fn planted_part_and_journal_make_an_honest_push_commit_forged_bytes() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let honest: Vec<u8> = (0..131_072u32).map(|i| (i % 251) as u8).collect();
    let forged = vec![0x66u8; honest.len()];
    {
        let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
        let mut data = raw.data(srv.port, 0).unwrap();
        // The part name is .zcp-<first 8 bytes of BLAKE3("t.bin")>.part; an attacker computes
        // it, the test reads it off the disk.
        raw.send(&pf(0, b"t.bin", honest.len() as u64, 65536));
        assert!(matches!(raw.recv().unwrap(), Message::FileReady { .. }));
        let part = part_in(&root);
        raw.send(&Message::FileAbort {
            file_id: 0,
            code: ErrorCode::Io,
            message: "never mind".into(),
        });
        let journal = part.replace(".part", ".journal");
        let j = forged_journal(&env.psk(), &honest);
        std::thread::sleep(Duration::from_millis(300));
        // zcp's own names are refused for every entry: nothing is planted.
        for (id, name, body) in [(1, &part, &forged), (2, &journal, &j)] {
            match push_whole(&mut raw, &mut data, id, name.as_bytes(), body) {
                Message::FileFailed { code, message, .. } => {
                    assert_eq!(code, ErrorCode::BadPath);
                    assert!(message.contains("part files and journals"), "{message}");
                }
                other => panic!("GOT THROUGH: planting {name}: {other:?}"),
            }
        }
        assert!(raw_finish(&mut raw, &mut [data]));
    }
    eprintln!("planted: {:?}", tree(&root));
    // The honest user pushes the real file.
    let src = env.path("src");
    std::fs::write(&src, &honest).unwrap();
    let (o, v) = send_json(
        srv.port,
        &env.key,
        &src,
        "t.bin",
        &["--chunk-size", "64K"],
        30,
    );
    eprintln!("honest send: exit {:?}; end {}", o.status.code(), v["end"]);
    let stored = std::fs::read(root.join("t.bin")).unwrap();
    assert!(
        stored == honest,
        "GOT THROUGH: the honest push exited {:?}, reported {} / verified={}, and t.bin holds the \
         planted bytes (first byte {:#x}); resume skipped {} bytes",
        o.status.code(),
        v["end"]["files"],
        v["end"]["verified"],
        stored[0],
        v["end"]["resume"]["bytes_skipped"]
    );
}

/// The journal a key holder forges: the honest content's MACs under nonces it chose.
fn forged_journal(psk: &zcp_wire::Psk, honest: &[u8]) -> Vec<u8> {
    use zcp_wire::journal::{JournalHeader, JournalRecord};
    let (n1, n2, fid) = ([0x11u8; 32], [0x22u8; 32], 7u32);
    let keys = zcp_wire::SessionKeys::derive(psk, &n1, &n2);
    let mut j = JournalHeader {
        size: honest.len() as u64,
        chunk_size: 65536,
    }
    .encode()
    .to_vec();
    j.extend(
        JournalRecord::Session {
            owner: keys.journal_owner(),
            client_nonce: n1,
            server_nonce: n2,
            file_id: fid,
        }
        .encode(),
    );
    for (i, c) in honest.chunks(65536).enumerate() {
        let mut h = keys.chunk_hasher(fid, i as u64 * 65536, c.len() as u64);
        h.update(c);
        let proof = h.finalize();
        j.extend(
            JournalRecord::Chunk {
                session: 0,
                index: i as u64,
                mac: proof.mac,
                cv: proof.cv,
            }
            .encode(),
        );
    }
    j
}

/// The same poisoning from a malicious server in a `get -r`: it plants the part file and
/// journal inside the requested tree; the user's next `get -r` of that tree from an HONEST
/// server with the same key stores the planted bytes as verified.
/// (`.zcp-ad589cba5daedaec` is the part key of the name `t.bin`: BLAKE3, first 8 bytes.)
#[test]
fn planted_part_and_journal_poison_a_later_honest_pull() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let honest: Vec<u8> = (0..131_072u32).map(|i| (i % 251) as u8).collect();
    let forged = vec![0x66u8; honest.len()];
    let (child, mut evil) = evil_get(&env, &["run42"], &dest, &["-r"]);
    evil.send(&Message::MakeDir {
        path: b"run42".to_vec(),
        top: false,
    });
    evil.made(b"run42");
    let a = evil.send_file(0, b"run42/.zcp-ad589cba5daedaec.part", &forged);
    assert!(
        matches!(a, Message::FileFailed { .. }),
        "GOT THROUGH: {a:?}"
    );
    let j = forged_journal(&env.psk(), &honest);
    let a = evil.send_file(1, b"run42/.zcp-ad589cba5daedaec.journal", &j);
    assert!(
        matches!(a, Message::FileFailed { .. }),
        "GOT THROUGH: {a:?}"
    );
    evil.finish();
    let o = wait_output(child, 30);
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    assert_eq!(tree(&dest), ["run42"], "nothing planted");
    // Later: the same tree from an honest server.
    let root = env.mkdir("root");
    std::fs::create_dir(root.join("run42")).unwrap();
    std::fs::write(root.join("run42/t.bin"), &honest).unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let o = run(
        {
            let mut c = zcp();
            c.args(["get", "-i", "0", "-r", "--chunk-size", "64K", "-p"])
                .arg(srv.port.to_string())
                .arg("--key-file")
                .arg(&env.key)
                .arg("127.0.0.1::run42")
                .arg(&dest);
            c
        },
        30,
    );
    eprintln!("honest pull: exit {:?}: {}", o.status.code(), both(&o));
    let stored = std::fs::read(dest.join("run42/t.bin")).unwrap();
    assert!(
        stored == honest,
        "GOT THROUGH: honest get exited {:?} and run42/t.bin holds the planted bytes ({:#x}...)",
        o.status.code(),
        stored[0]
    );
}

/// zcp's own names are refused for every entry (round 2: a planted part file and journal
/// made a later honest transfer "resume" forged bytes as verified). The check compares bytes:
/// `.ZCP-<k>.PART` and `.ZCP-<k>.JOURNAL` pass. On a root where names are case-insensitive
/// (vfat/exFAT disks, SMB shares, ext4/f2fs/tmpfs directories with casefold) those ARE the
/// part file and journal of `t.bin`, and the round-2 poisoning works again. (Not run end to
/// end here: this kernel has no casefold, and FUSE's FAT cannot chmod, so zcp commits
/// nothing there at all.)
/// SAFE: a `PutFile` (or `MakeDir`, `MakeLink`) naming any case of zcp's own names is refused.
#[test]
fn own_names_in_another_case_are_not_refused() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, mut data) = raw_open(&srv, &env, false);
    let mut refused = Vec::new();
    let mut stored = Vec::new();
    for (id, name) in [
        (0u32, &b".ZCP-ad589cba5daedaec.PART"[..]),
        (1, b".Zcp-ad589cba5daedaec.Journal"),
    ] {
        let body = vec![7u8; 1000];
        raw.send(&pf(id, name, body.len() as u64, 65536));
        match raw.recv().unwrap() {
            Message::FileReady { .. } => {
                let mac = push_chunk(&mut raw, &mut data, id, &body, 0);
                let digest = raw.digest(id, body.len() as u64, &[mac]);
                raw.send(&Message::FileEnd {
                    file_id: id,
                    digest,
                });
                if let Message::FileCommitted { .. } = raw.recv().unwrap() {
                    stored.push(String::from_utf8_lossy(name).into_owned());
                }
            }
            Message::FileFailed { .. } => refused.push(String::from_utf8_lossy(name).into_owned()),
            other => panic!("{other:?}"),
        }
    }
    let _ = raw_finish(&mut raw, &mut [data]);
    println!("refused {refused:?}, stored {stored:?}: {:?}", tree(&root));
    assert!(
        stored.is_empty(),
        "GOT THROUGH: zcp's own part-file and journal names in another case were stored: \
         {stored:?} (on a case-insensitive root, a planted part file and journal for t.bin)"
    );
}

#[test]
fn go_restart_for_a_file_never_offered_commits_nothing() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, mut data) = raw_open(&srv, &env, false);
    let body = vec![0xabu8; 131072];
    raw.send(&Message::PutFile(PutFile {
        mtime_sec: 0,
        ..put_file(0, b"t.bin", body.len() as u64, 65536)
    }));
    assert!(matches!(
        raw.recv().unwrap(),
        Message::FileReady { resumed: false, .. }
    ));
    let macs = [
        push_chunk(&mut raw, &mut data, 0, &body, 0),
        push_chunk(&mut raw, &mut data, 0, &body, 1),
    ];
    raw.acks(0, 2);
    raw.send(&Message::Go {
        file_id: 0,
        restart: true,
    });
    let digest = raw.digest(0, body.len() as u64, &macs);
    raw.send(&Message::FileEnd { file_id: 0, digest });
    let (code, why) = error_from(&mut raw).expect("an Error frame before the close");
    assert_eq!(code, ErrorCode::Protocol);
    assert!(why.contains("not offered"), "{why}");
    assert!(srv.wait_log("not offered", 5), "{}", srv.log());
    // Never an all-zero (or any) file under the final name; the verified chunks stay.
    assert!(!root.join("t.bin").exists(), "{:?}", tree(&root));
}

/// A chunk of a resumed file waits on its stream for `Go`; the sender then says
/// Go{restart}. SAFE: the held chunk lands only after the part file was emptied, the file
/// is sent whole, and what commits is exactly the honest content.
#[test]
fn push_a_chunk_held_for_go_then_restart() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
    let mut d = raw.data(srv.port, 0).unwrap();
    let honest: Vec<u8> = (0..131072u32).map(|i| (i % 241) as u8).collect();
    raw.announce(0, b"r.bin", 131072, 65536);
    // Chunk 0 of an OLD version (durable), then the file is given up: kept for a resume.
    let old = vec![0x99u8; 65536];
    raw.land(&mut d, 0, 0, 0, &old);
    // A failed read: the part file is kept for the resume below.
    raw.send(&Message::FileAbort {
        file_id: 0,
        code: ErrorCode::Io,
        message: "x".into(),
    });
    let r = raw.announce(1, b"r.bin", 131072, 65536);
    assert!(
        matches!(r, Message::FileReady { resumed: true, .. }),
        "{r:?}"
    );
    // Chunk 1 before Go: held.
    d.write_all(&ChunkHeader::data(1, 65536, 65536).encode())
        .unwrap();
    d.write_all(&honest[65536..]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    raw.send(&Message::Go {
        file_id: 1,
        restart: true,
    });
    d.write_all(&ChunkHeader::data(1, 0, 65536).encode())
        .unwrap();
    d.write_all(&honest[..65536]).unwrap();
    let mut macs = Vec::new();
    for i in 0..2u64 {
        let c = &honest[i as usize * 65536..(i as usize + 1) * 65536];
        let m = mac_of(&raw, 1, i * 65536, c);
        macs.push(m);
        raw.send(&Message::ChunkMac {
            file_id: 1,
            index: i,
            mac: m,
        });
    }
    raw.acks(1, 2);
    let digest = raw.digest(1, 131072, &macs);
    let a = raw.commit(1, digest);
    assert!(matches!(a, Message::FileCommitted { .. }), "{a:?}");
    assert_eq!(std::fs::read(root.join("r.bin")).unwrap(), honest);
    assert!(no_partials(&root, 5));
    assert!(!tree(&root).iter().any(|p| p.ends_with(".journal")));
}
