//! Chunks that break the rules: two streams claiming one chunk, a chunk whose MAC never
//! matches (asked for again at most three times), a MAC or chunk header for a file that does
//! not exist or does not fit. Nothing unverified commits; errors are said and logged.

use std::io::Write;
use std::time::Duration;

use zcp_wire::{ChunkHeader, ErrorCode, Message, PutFile};

use crate::hostile::peer::*;
use crate::util::*;

/// Two streams claim the same chunk at once, one with the honest bytes, one with garbage;
/// the MAC is the honest one. SAFE: the second claim is refused; whatever commits is the
/// honest content, never the garbage.
#[test]
fn push_two_streams_claiming_one_chunk() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 2);
    let mut a = raw.data(srv.port, 0).unwrap();
    let mut b = raw.data(srv.port, 1).unwrap();
    let honest = vec![0x11u8; 65536];
    raw.announce(0, b"c.bin", 65536, 65536);
    // Whichever stream's claim comes second is refused and closed: its writes may fail.
    let h = ChunkHeader::data(0, 0, 65536).encode();
    let _ = a.write_all(&h);
    let _ = b.write_all(&h);
    let _ = a.write_all(&honest[..1000]);
    let _ = b.write_all(&[0xee; 65536]);
    let _ = a.write_all(&honest[1000..]);
    let m = mac_of(&raw, 0, 0, &honest);
    raw.send(&Message::ChunkMac {
        file_id: 0,
        index: 0,
        mac: m,
    });
    let digest = raw.digest(0, 65536, &[m]);
    raw.send(&Message::FileEnd { file_id: 0, digest });
    let answer = wait_for(&mut raw, 10, "an answer", |m| {
        matches!(
            m,
            Message::FileCommitted { .. }
                | Message::FileFailed { .. }
                | Message::ChunkAck { ok: false, .. }
        )
    });
    std::thread::sleep(Duration::from_millis(300));
    eprintln!("{answer:?}; tree {:?}", tree(&root));
    if let Ok(stored) = std::fs::read(root.join("c.bin")) {
        assert_eq!(stored, honest, "GOT THROUGH: garbage committed");
    }
}

/// A malicious server sends the requested file's only chunk with a wrong MAC, again and
/// again. PROTOCOL.md: "A chunk that fails four times fails its file". The receiving client
/// never counts: it asks for the chunk forever (and each resend is bytes moved, so progress:
/// the idle timeout never ends it), and its Progress grows past the file's size.
/// SAFE: the client gives the file up by the 4th failure (FileFailed or the session ends),
/// exits non-zero, stores nothing.
#[test]
fn pull_a_chunk_that_never_verifies_is_not_asked_for_forever() {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let (child, mut evil) = evil_get(&env, &["want.bin"], &dest, &[]);
    evil.put(0, b"want.bin", b"", 1000);
    assert!(matches!(evil.next(), Message::FileReady { .. }));
    let mut not_ok = 0;
    let mut gave_up = false;
    let mut most_progress = 0;
    'outer: for _ in 0..8 {
        if evil.chunk(0, 0, &[0xee; 1000]).is_err() {
            gave_up = true;
            break;
        }
        evil.send(&Message::ChunkMac {
            file_id: 0,
            index: 0,
            mac: [3; 32],
        });
        loop {
            match evil.recv() {
                Ok(Message::Progress { bytes, .. }) => most_progress = most_progress.max(bytes),
                Ok(Message::ChunkAck { ok: false, .. }) => {
                    not_ok += 1;
                    break;
                }
                Ok(Message::FileFailed { .. }) | Err(_) => {
                    gave_up = true;
                    break 'outer;
                }
                Ok(_) => {}
            }
        }
    }
    // A second and a half of keep-alives.
    evil.s
        .set_read_timeout(Some(Duration::from_millis(1500)))
        .unwrap();
    if let Ok(Message::Progress { bytes, .. }) = evil.recv() {
        most_progress = most_progress.max(bytes);
    }
    read_timeout(&evil.s);
    evil.finish();
    let o = wait_output(child, 30);
    eprintln!(
        "not-ok acks {not_ok}, gave up {gave_up}, most progress {most_progress}; {}",
        both(&o)
    );
    assert_ne!(o.status.code(), Some(0), "{}", both(&o));
    assert!(!dest.join("want.bin").exists());
    assert!(no_partials(&dest, 5));
    assert!(
        gave_up && not_ok <= 4,
        "GOT THROUGH: the client asked {not_ok} times for a chunk that never verifies \
         (Progress up to {most_progress} bytes for a 1000-byte file)"
    );
    assert!(
        most_progress <= 1000,
        "GOT THROUGH: Progress of {most_progress} bytes for a 1000-byte file"
    );
}

#[test]
fn protocol_errors_are_said_and_logged() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, _data) = raw_open(&srv, &env, false);
    raw.send(&Message::ChunkMac {
        file_id: 99,
        index: 0,
        mac: [0; 32],
    });
    let (code, why) = error_from(&mut raw).expect("an Error frame");
    assert_eq!(code, ErrorCode::Protocol);
    assert!(why.contains("unknown file 99"), "{why}");
    assert!(srv.wait_log("unknown file 99", 5), "{}", srv.log());
    // A chunk header that does not fit its file: the stream closes, the log says why.
    let (mut raw, mut data) = raw_open(&srv, &env, false);
    raw.send(&Message::PutFile(PutFile {
        mtime_sec: 0,
        ..put_file(0, b"x.bin", 100_000, 65536)
    }));
    assert!(matches!(raw.recv().unwrap(), Message::FileReady { .. }));
    data.write_all(&ChunkHeader::data(0, 4096, 65536).encode())
        .unwrap();
    assert!(closes(&mut data, 10));
    assert!(srv.wait_log("data stream", 5), "{}", srv.log());
    assert!(!root.join("x.bin").exists());
}
