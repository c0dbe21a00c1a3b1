//! The second review, continued: planted part files and journals, idle clocks held by a
//! malicious server, links, log injection, path spellings and sequencing games.

use super::*;

/// Pushes `body` as file `id` named `dest` over `data` (64 KiB chunks), honestly; the answer.
fn push_whole(raw: &mut Raw, data: &mut TcpStream, id: u32, dest: &[u8], body: &[u8]) -> Message {
    raw.send(&pf(id, dest, body.len() as u64, 65536));
    loop {
        match raw.recv().unwrap() {
            Message::FileReady { resumed, .. } => {
                if resumed {
                    // Offered what is there already: start over, as an honest sender does
                    // when it does not check.
                    raw.send(&Message::Go {
                        file_id: id,
                        restart: true,
                    });
                }
                break;
            }
            Message::Have(_) => {}
            other => return other,
        }
    }
    let n = body.len().div_ceil(65536);
    let mut d = raw.est.keys.file_digest(id, body.len() as u64, 65536);
    for i in 0..n {
        let mac = push_chunk(raw, data, id, body, i);
        d.push(&mac);
    }
    if n > 1 {
        let mut acks = 0;
        while acks < n {
            match raw.recv_any().unwrap() {
                Message::ChunkAck { ok: true, .. } => acks += 1,
                Message::Progress { .. } => {}
                other => return other,
            }
        }
    }
    raw.send(&Message::FileEnd {
        file_id: id,
        digest: d.finish(),
    });
    loop {
        match raw.recv_any().unwrap() {
            Message::Progress { .. } | Message::ChunkAck { .. } => {}
            m => return m,
        }
    }
}

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
            client_nonce: n1,
            server_nonce: n2,
            file_id: fid,
        }
        .encode(),
    );
    for (i, c) in honest.chunks(65536).enumerate() {
        let mut h = keys.chunk_hasher(fid, i as u64 * 65536, c.len() as u64);
        h.update(c);
        j.extend(
            JournalRecord::Chunk {
                session: 0,
                index: i as u64,
                mac: *h.finalize().as_bytes(),
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
    });
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
                .arg("127.0.0.1:run42")
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
