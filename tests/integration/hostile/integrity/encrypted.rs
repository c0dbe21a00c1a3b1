//! An encrypted `zcp get` against a server that holds the key but breaks the record layer:
//! chunks sent in clear after agreeing to encrypt, records sealed under another stream's key
//! or another session's. Each ends the session as failing verification (exit 5) with nothing
//! under the asked-for name; the same harness sealing honestly is served.

use zcp_wire::{Message, SessionKeys};

use crate::hostile::peer::*;
use crate::util::*;

/// How the server seals data stream 0.
enum Sealing {
    Honest,
    InClear,
    AnotherStream,
    AnotherSession,
}

/// A pull of one 200,000-byte file from a server that seals its data stream as `how`; the
/// client's output and what is in its destination.
fn pull(how: Sealing) -> (std::process::Output, Vec<String>, bool) {
    let env = Env::new();
    let dest = env.mkdir("dest");
    let (child, mut evil) = evil_get(&env, &["want.bin"], &dest.join("got.bin"), &["--encrypt"]);
    assert!(evil.est.keys.encrypted(), "the session is encrypted");
    let body: Vec<u8> = (0..200_000u32).map(|i| (i % 253) as u8).collect();
    let keys = evil.est.keys.clone();
    match how {
        Sealing::Honest => evil.seal_as(&keys, 0),
        Sealing::InClear => {}
        Sealing::AnotherStream => evil.seal_as(&keys, 1),
        Sealing::AnotherSession => {
            let other =
                SessionKeys::derive_encrypted(&env.psk(), (&[1; 32], &[2; 32]), &[3; 64], &[4; 32]);
            evil.seal_as(&other, 0);
        }
    }
    let honest = matches!(how, Sealing::Honest);
    if honest {
        assert!(matches!(
            evil.send_file(0, b"got.bin", &body),
            Message::FileCommitted { verified: true, .. }
        ));
        evil.finish();
    } else {
        evil.put(0, b"got.bin", b"", body.len() as u64);
        // Every chunk, with its true MAC: only the record layer is wrong.
        for (i, c) in body.chunks(65536).enumerate() {
            let _ = evil.chunk(0, i as u64 * 65536, c);
            let mac = evil.mac(0, i as u64 * 65536, c);
            evil.send(&Message::ChunkMac {
                file_id: 0,
                index: i as u64,
                mac,
            });
        }
    }
    let o = wait_output(child, 30);
    let stored = std::fs::read(dest.join("got.bin")).is_ok_and(|b| b == body);
    (o, tree(&dest), stored)
}

#[test]
fn an_honestly_sealed_stream_is_stored() {
    let (o, _, stored) = pull(Sealing::Honest);
    assert!(o.status.success(), "{}", both(&o));
    assert!(stored);
}

#[test]
fn chunks_in_clear_after_agreeing_to_encrypt_store_nothing() {
    let (o, dest, _) = pull(Sealing::InClear);
    assert_eq!(o.status.code(), Some(5), "{}", both(&o));
    assert!(!dest.contains(&"got.bin".to_string()), "{dest:?}");
}

#[test]
fn records_from_another_stream_or_session_store_nothing() {
    for how in [Sealing::AnotherStream, Sealing::AnotherSession] {
        let (o, dest, _) = pull(how);
        assert_eq!(o.status.code(), Some(5), "{}", both(&o));
        assert!(
            text(&o.stderr).contains("failed authentication"),
            "{}",
            both(&o)
        );
        assert!(!dest.contains(&"got.bin".to_string()), "{dest:?}");
    }
}
