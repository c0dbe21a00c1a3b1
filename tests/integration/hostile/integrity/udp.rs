//! `--transport udp` from hostile peers against `zcp serve`: a client whose datagrams carry another session's tag, offsets outside or between their
//! chunk's slots, the wrong lengths, files never announced, duplicates with other bytes, a
//! stranger's socket and a flood (all dropped and counted, never written: the session does
//! not verify, so a datagram taken would show on disk); an announcement outside the plan;
//! and, in a get, a client whose NAKs name datagrams its chunk does not have.

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use zcp_wire::udp::{DatagramHeader, UdpFrame};
use zcp_wire::{ChunkHeader, Message, Open};

use crate::hostile::peer::*;
use crate::util::*;

/// A UDP session's `Open` (the `rw` receiver, fair mode) with this verify mode.
fn open(pull: bool, verify: &str) -> Open {
    Open {
        recv_engine: "rw".into(),
        verify: verify.into(),
        transport: "udp".into(),
        ..base_open(pull)
    }
}

/// Reads side-channel frames from `s` until `want` matches one.
fn frame_until(s: &mut TcpStream, buf: &mut Vec<u8>, want: impl Fn(&UdpFrame) -> bool) -> UdpFrame {
    let end = Instant::now() + Duration::from_secs(10);
    s.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    loop {
        while let Some((f, used)) = UdpFrame::decode(buf).unwrap() {
            buf.drain(..used);
            if want(&f) {
                return f;
            }
        }
        assert!(Instant::now() < end, "no such frame within 10 s");
        let mut tmp = [0u8; 4096];
        match s.read(&mut tmp) {
            Ok(0) => panic!("the side channel closed"),
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
            Err(_) => {}
        }
    }
}

fn gram(tag: [u8; 8], file: u32, offset: u64, payload: &[u8]) -> Vec<u8> {
    let mut d = DatagramHeader {
        tag,
        file_id: file,
        flags: 0,
        len: payload.len() as u16,
        offset,
        sent_us: 1,
    }
    .encode()
    .to_vec();
    d.extend_from_slice(payload);
    d
}

#[test]
fn stray_spoofed_and_misplaced_datagrams_never_reach_the_disk() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let (mut raw, opened) = Raw::open_with(srv.port, env.psk(), open(false, "none"));
    assert!(matches!(opened, Message::Opened { transport, .. } if transport == "udp"));
    let mut data = raw.data(srv.port, 0).unwrap();
    let mut buf = Vec::new();
    let UdpFrame::Hello { port, budget, .. } =
        frame_until(&mut data, &mut buf, |f| matches!(f, UdpFrame::Hello { .. }))
    else {
        unreachable!()
    };
    assert!(budget > 0);
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.connect(("127.0.0.1", port)).unwrap();
    let payload = 1440usize;
    let hello = UdpFrame::Hello {
        port: udp.local_addr().unwrap().port(),
        payload: payload as u16,
        budget: 0,
    };
    data.write_all(&hello.encode()).unwrap();

    // A file of two 64 KiB chunks; only the first is announced.
    let body: Vec<u8> = (0..131_072u32).map(|i| (i * 13 + i / 509) as u8).collect();
    assert!(matches!(
        raw.put(0, b"x.bin", body.len() as u64),
        Message::FileReady { .. }
    ));
    let chunk = &body[..65536];
    data.write_all(&UdpFrame::Announce(ChunkHeader::data(0, 0, 65536)).encode())
        .unwrap();
    frame_until(&mut data, &mut buf, |f| matches!(f, UdpFrame::Ready { .. }));
    let tag = raw.est.keys.udp_tag();
    let junk = vec![0xee; payload];
    let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
    let bad: Vec<Vec<u8>> = vec![
        gram(*b"othersss", 0, 0, &junk),          // another session's tag
        gram(tag, 7, 0, &junk),                   // a file never announced
        gram(tag, 0, 65536, &junk),               // the chunk not announced
        gram(tag, 0, 1441, &junk),                // between two slots
        gram(tag, 0, 0, &junk[..100]),            // the wrong length
        gram(tag, 0, u64::MAX - 10, &junk[..10]), // offset overflows
        tag.to_vec(),                             // shorter than a header
    ];
    for d in &bad {
        udp.send(d).unwrap();
        // From a socket the server's is not connected to: the kernel drops it.
        stranger
            .send_to(&gram(tag, 0, 0, &junk), ("127.0.0.1", port))
            .unwrap();
    }
    // A flood of other sessions' datagrams.
    for _ in 0..5000 {
        let _ = udp.send(&gram(*b"floodfld", 0, 0, &junk));
    }
    // The true datagrams, each slot but the first followed by a duplicate with other bytes.
    for (g, p) in chunk.chunks(payload).enumerate() {
        let off = (g * payload) as u64;
        udp.send(&gram(tag, 0, off, p)).unwrap();
        if g > 0 {
            udp.send(&gram(tag, 0, off, &junk[..p.len()])).unwrap();
        }
    }
    data.write_all(
        &UdpFrame::Sent {
            file_id: 0,
            offset: 0,
        }
        .encode(),
    )
    .unwrap();
    frame_until(&mut data, &mut buf, |f| matches!(f, UdpFrame::Done { .. }));
    // The second chunk, announced, sent whole, then an End.
    data.write_all(&UdpFrame::Announce(ChunkHeader::data(0, 65536, 65536)).encode())
        .unwrap();
    frame_until(&mut data, &mut buf, |f| matches!(f, UdpFrame::Ready { .. }));
    for (g, p) in body[65536..].chunks(payload).enumerate() {
        udp.send(&gram(tag, 0, 65536 + (g * payload) as u64, p))
            .unwrap();
    }
    data.write_all(
        &UdpFrame::Sent {
            file_id: 0,
            offset: 65536,
        }
        .encode(),
    )
    .unwrap();
    frame_until(&mut data, &mut buf, |f| matches!(f, UdpFrame::Done { .. }));
    data.write_all(&UdpFrame::End.encode()).unwrap();
    raw.acks(0, 2);
    match raw.commit(0, [0; 32]) {
        Message::FileCommitted { .. } => {}
        other => panic!("{other:?}"),
    }
    // Exactly the true bytes: no refused datagram was written, with nothing to verify them.
    assert_eq!(std::fs::read(root.join("x.bin")).unwrap(), body);
    drop(raw);
    drop(data);
    assert!(no_partials(&root, 10), "{:?}", tree(&root));
    // The server's log counts what it refused and the duplicates (from its own socket: the
    // stranger's datagrams never reached it).
    assert!(srv.wait_log(" duplicates", 10), "{}", srv.log());
    let log = srv.log();
    let count = |what: &str| -> u64 {
        let at = log.find(what).unwrap_or_else(|| panic!("{what}: {log}"));
        let head = log[..at].rsplit(' ').next().unwrap();
        head.parse().unwrap_or_else(|_| panic!("{what}: {log}"))
    };
    assert!(count(" refused") >= 7, "{log}");
    assert!(count(" duplicates") >= 40, "{log}");
    // The server goes on.
    let src = env.path("honest.bin");
    make_dense(&src, 300_000, 2);
    let o = run(
        send_cmd(srv.port, &env.key, &src, "h.bin", &["--transport", "udp"]),
        30,
    );
    assert!(o.status.success(), "{}\n{}", both(&o), srv.log());
    assert!(same_file(&src, &root.join("h.bin")));
}

#[test]
fn an_announcement_outside_the_plan_ends_the_session_with_nothing_stored() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::opened(srv.port, env.psk(), open(false, "none"));
    let mut data = raw.data(srv.port, 0).unwrap();
    let mut buf = Vec::new();
    frame_until(&mut data, &mut buf, |f| matches!(f, UdpFrame::Hello { .. }));
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let hello = UdpFrame::Hello {
        port: udp.local_addr().unwrap().port(),
        payload: 1440,
        budget: 0,
    };
    data.write_all(&hello.encode()).unwrap();
    assert!(matches!(
        raw.put(0, b"y.bin", 70_000),
        Message::FileReady { .. }
    ));
    // A chunk past the file's end.
    data.write_all(&UdpFrame::Announce(ChunkHeader::data(0, 1 << 20, 65536)).encode())
        .unwrap();
    // The stream ends as a protocol error, named in the log; nothing is placed.
    assert!(
        srv.wait_log("chunk offset 1048576 is not a chunk boundary", 10),
        "{}",
        srv.log()
    );
    drop(data);
    drop(raw);
    assert!(!root.join("y.bin").exists());
    assert!(no_partials(&root, 10), "{:?}", tree(&root));
}

#[test]
fn a_get_whose_client_naks_datagrams_its_chunk_lacks_fails_cleanly() {
    bad_feedback_in_a_get(None, "a NAK for datagram 4000000");
}

#[test]
fn a_get_whose_client_sends_a_malformed_frame_fails_cleanly() {
    // An unknown kind, then a NAK with no ranges: the first ends the stream.
    let junk = [&[99u8, 0, 1, 7][..], &[5, 0, 14, 0, 0, 0, 0][..]].concat();
    bad_feedback_in_a_get(Some(junk), "unknown UDP side-channel frame kind 99");
}

/// A get over UDP whose client, once the first chunk is announced, sends `junk` (or, by
/// default, a NAK of datagrams the chunk lacks): the server's stream fails with `why` in
/// its log, the source is untouched, and the server serves an honest get afterwards.
fn bad_feedback_in_a_get(junk: Option<Vec<u8>>, why: &str) {
    let env = Env::new();
    let root = env.mkdir("root");
    let want: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
    std::fs::write(root.join("want.bin"), &want).unwrap();
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = Raw::opened(srv.port, env.psk(), open(true, "blake3"));
    raw.get_files(&[b"want.bin"]);
    let mut data = raw.data(srv.port, 0).unwrap();
    // We are the receiver: our Hello first.
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let hello = UdpFrame::Hello {
        port: udp.local_addr().unwrap().port(),
        payload: 0,
        budget: 1 << 20,
    };
    data.write_all(&hello.encode()).unwrap();
    let mut buf = Vec::new();
    frame_until(&mut data, &mut buf, |f| matches!(f, UdpFrame::Hello { .. }));
    let id = next_put(&mut raw);
    // The engine its `Open` asked for: any other fails the file at once (issue 24).
    raw.ready(id, "rw");
    let UdpFrame::Announce(h) =
        frame_until(&mut data, &mut buf, |f| matches!(f, UdpFrame::Announce(_)))
    else {
        unreachable!()
    };
    // A malformed frame would end it as surely; this NAK is well formed but absurd.
    let nak = UdpFrame::Nak {
        file_id: h.file_id,
        offset: h.offset,
        ranges: vec![(0, u32::MAX - 1), (4_000_000, 5)],
    };
    data.write_all(
        &UdpFrame::Ready {
            file_id: h.file_id,
            offset: h.offset,
        }
        .encode(),
    )
    .unwrap();
    data.write_all(&junk.unwrap_or_else(|| nak.encode()))
        .unwrap();
    assert!(srv.wait_log(why, 10), "{}", srv.log());
    drop(data);
    drop(raw);
    // The source is untouched and the server goes on.
    assert_eq!(std::fs::read(root.join("want.bin")).unwrap(), want);
    let out = env.path("got.bin");
    let mut c = zcp();
    c.args(["get", "-p", &srv.port.to_string(), "--key-file"])
        .arg(&env.key)
        .args(["--transport", "udp", "127.0.0.1::want.bin"])
        .arg(&out);
    let o = run(c, 30);
    assert!(o.status.success(), "{}\n{}", both(&o), srv.log());
    assert_eq!(std::fs::read(&out).unwrap(), want);
}
