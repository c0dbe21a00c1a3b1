//! The server log a peer with the key can fill: every text of a peer is logged escaped (a
//! control byte is up to six characters), so notices and failed files are clipped and
//! counted, never logged at more than about what the peer sent.

use std::io::Write;
use std::time::{Duration, Instant};

use zcp_wire::{ErrorCode, Message};

use crate::hostile::peer::*;
use crate::util::*;

/// Log amplification: every peer text is logged, escaped (a control byte becomes up to six
/// characters), with no rate limit and without being progress. Reports the ratio.
#[test]
fn server_log_amplification_by_escaped_notices() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
    let _d = raw.data(srv.port, 0).unwrap();
    let text: String = std::iter::repeat_n('\u{1}', 1024).collect();
    let before = srv.log().len();
    let mut sent = 0usize;
    let mut frames = Vec::new();
    for _ in 0..2000 {
        let f = raw.est.sealer.seal(&Message::EntryFailed {
            path: text.clone().into_bytes(),
            code: ErrorCode::Io,
            message: text.clone(),
        });
        sent += f.len();
        frames.extend_from_slice(&f);
    }
    raw.s.write_all(&frames).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let logged = srv.log().len() - before;
    eprintln!(
        "sent {} KiB of frames, the server logged {} KiB ({:.1}x)",
        sent >> 10,
        logged >> 10,
        logged as f64 / sent as f64
    );
    assert!(
        logged < 2 * sent,
        "GOT THROUGH (amplification): {logged} log bytes for {sent} bytes sent"
    );
}

/// The server log keeps 100 clipped notices per session, but a *file* that fails is logged
/// through another path (`ServerObserver::file_done`): every one, with its whole escaped
/// name. A name of control bytes escapes to six characters a byte (`\u{1}`), so a 4 KiB
/// PutFile answered by an early FileEnd (the file fails: "FileEnd with 0 of 2 chunks
/// acknowledged") writes about 24 KiB to the log, without limit, and each file made ready
/// is progress, so the session never idles out.
/// SAFE: the log grows by less than twice what the client sent.
#[test]
fn push_failed_files_flood_the_server_log_unclipped() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::connect_with(srv.port, env.psk(), "auto", 1);
    let _d = raw.data(srv.port, 0).unwrap();
    let comp = vec![0x01u8; 255];
    let mut dest = Vec::new();
    for i in 0..16 {
        if i > 0 {
            dest.push(b'/');
        }
        dest.extend_from_slice(&comp);
    }
    const N: u32 = 300;
    let before = srv.log().len();
    let mut sent = 0usize;
    let mut frames = Vec::new();
    for id in 0..N {
        for m in [
            pf(id, &dest, 131072, 65536),
            Message::FileEnd {
                file_id: id,
                digest: [0; 32],
            },
        ] {
            let f = raw.est.sealer.seal(&m);
            sent += f.len();
            frames.extend_from_slice(&f);
        }
    }
    raw.s.write_all(&frames).unwrap();
    let mut failed = 0;
    let t = Instant::now();
    raw.s
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    while failed < N && t.elapsed() < Duration::from_secs(15) {
        if let Ok(Message::FileFailed { .. }) = raw.recv_any() {
            failed += 1;
        }
    }
    std::thread::sleep(Duration::from_millis(500));
    let logged = srv.log().len() - before;
    eprintln!(
        "{failed} files failed; sent {} KiB, the server logged {} KiB ({:.1}x)",
        sent >> 10,
        logged >> 10,
        logged as f64 / sent as f64
    );
    assert!(
        !tree(&root).iter().any(|p| p.ends_with(".part")),
        "{:?}",
        tree(&root)
    );
    assert!(
        logged < 2 * sent,
        "GOT THROUGH (log amplification): {logged} log bytes for {sent} bytes sent"
    );
}
