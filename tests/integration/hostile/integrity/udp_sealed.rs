//! An encrypted `--transport udp` push from a client that holds the key and breaks the
//! datagram layer: datagrams in clear after agreeing to encrypt, sealed under another
//! stream's or session's key, sealed and then moved, flagged or flipped. With nothing to
//! verify the chunks (`verify none`), any of them taken would show on disk: none is. A side
//! channel in clear after agreeing to encrypt ends the session with nothing stored.

use std::io::{Read, Write};
use std::net::{TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use zcp_wire::crypt::{AEAD_TAG_LEN, RECORD_PREFIX, SALT_LEN};
use zcp_wire::udp::{DatagramHeader, UdpFrame};
use zcp_wire::{
    ChunkHeader, DatagramSealer, Message, Open, RecordOpener, RecordSealer, SessionKeys,
};

use crate::util::*;

/// The client's side channel salt.
const SALT: [u8; SALT_LEN] = [0x11; SALT_LEN];
/// Payload bytes per datagram the client chooses (1500-byte MTU, less the tag).
const PAYLOAD: usize = 1424;

/// An encrypted UDP push session from a raw client, verifying nothing.
fn open_encrypted(port: u16, env: &Env) -> Raw {
    let mut raw = Raw::authenticate_encrypted(port, env.psk());
    assert!(raw.est.keys.encrypted());
    raw.send(&Message::Open(Box::new(Open {
        recv_engine: "rw".into(),
        verify: "none".into(),
        transport: "udp".into(),
        ..base_open(false)
    })));
    match raw.recv().unwrap() {
        Message::Opened { transport, .. } => assert_eq!(transport, "udp"),
        other => panic!("expected Opened, got {other:?}"),
    }
    raw
}

/// Stream 0's side channel, sealed as an honest sender seals it.
struct Side {
    s: TcpStream,
    keys: SessionKeys,
    sealer: RecordSealer,
    opener: Option<RecordOpener>,
    raw: Vec<u8>,
    plain: Vec<u8>,
}

impl Side {
    fn open(mut s: TcpStream, keys: &SessionKeys) -> Side {
        s.write_all(&SALT).unwrap();
        Side {
            sealer: RecordSealer::new(&keys.side_key(0, true, &SALT).unwrap()),
            keys: keys.clone(),
            opener: None,
            raw: Vec::new(),
            plain: Vec::new(),
            s,
        }
    }

    fn send(&mut self, f: &UdpFrame) {
        let body = f.encode();
        let mut r = vec![0u8; RECORD_PREFIX + body.len() + AEAD_TAG_LEN];
        r[RECORD_PREFIX..RECORD_PREFIX + body.len()].copy_from_slice(&body);
        self.sealer.seal(&mut r).unwrap();
        self.s.write_all(&r).unwrap();
    }

    /// Opens the server's records until a frame that `want` matches.
    fn until(&mut self, want: impl Fn(&UdpFrame) -> bool) -> UdpFrame {
        let end = Instant::now() + Duration::from_secs(10);
        self.s
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        loop {
            if self.opener.is_none() && self.raw.len() >= SALT_LEN {
                let salt: [u8; SALT_LEN] = self.raw[..SALT_LEN].try_into().unwrap();
                let key = self.keys.side_key(0, false, &salt).unwrap();
                self.opener = Some(RecordOpener::new(&key));
                self.raw.drain(..SALT_LEN);
            }
            if let Some(o) = &mut self.opener {
                while self.raw.len() >= RECORD_PREFIX {
                    let prefix: [u8; 4] = self.raw[..4].try_into().unwrap();
                    let n = RecordOpener::record_len(prefix).unwrap();
                    let Some(body) = self.raw.get_mut(4..4 + n + AEAD_TAG_LEN) else {
                        break;
                    };
                    o.open(prefix, body).unwrap();
                    self.plain.extend_from_slice(&body[..n]);
                    self.raw.drain(..4 + n + AEAD_TAG_LEN);
                }
            }
            while let Some((f, used)) = UdpFrame::decode(&self.plain).unwrap() {
                self.plain.drain(..used);
                if want(&f) {
                    return f;
                }
            }
            assert!(Instant::now() < end, "no such frame within 10 s");
            let mut tmp = [0u8; 4096];
            match self.s.read(&mut tmp) {
                Ok(0) => panic!("the side channel closed"),
                Ok(n) => self.raw.extend_from_slice(&tmp[..n]),
                Err(_) => {}
            }
        }
    }
}

fn header(offset: u64, len: usize) -> DatagramHeader {
    DatagramHeader {
        tag: [0; 8],
        file_id: 0,
        flags: 0,
        len: len as u16,
        offset,
        sent_us: 1,
    }
}

/// A datagram sealed by `sealer`.
fn sealed(sealer: &mut DatagramSealer, offset: u64, payload: &[u8]) -> Vec<u8> {
    let mut body = payload.to_vec();
    let (head, tag) = sealer.seal(header(offset, body.len()), &mut body).unwrap();
    [&head[..], &body, &tag].concat()
}

#[test]
fn datagrams_not_sealed_for_this_stream_never_reach_the_disk() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = open_encrypted(srv.port, &env);
    let keys = raw.est.keys.clone();
    let mut side = Side::open(raw.data(srv.port, 0).unwrap(), &keys);
    let UdpFrame::Hello { port, .. } = side.until(|f| matches!(f, UdpFrame::Hello { .. })) else {
        unreachable!()
    };
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.connect(("127.0.0.1", port)).unwrap();
    side.send(&UdpFrame::Hello {
        port: udp.local_addr().unwrap().port(),
        payload: PAYLOAD as u16,
        budget: 0,
    });
    let body: Vec<u8> = (0..65536u32).map(|i| (i * 7 + i / 311) as u8).collect();
    assert!(matches!(
        raw.put(0, b"x.bin", body.len() as u64),
        Message::FileReady { .. }
    ));
    side.send(&UdpFrame::Announce(ChunkHeader::data(0, 0, 65536)));
    side.until(|f| matches!(f, UdpFrame::Ready { .. }));

    let mut honest = DatagramSealer::new(&keys.datagram_key(0, &SALT).unwrap());
    let mut other_stream = DatagramSealer::new(&keys.datagram_key(1, &SALT).unwrap());
    let other_keys =
        SessionKeys::derive_encrypted(&env.psk(), (&[1; 32], &[2; 32]), &[3; 64], &[4; 32]);
    let mut other_session = DatagramSealer::new(&other_keys.datagram_key(0, &SALT).unwrap());
    let junk = vec![0xee; PAYLOAD];
    let in_clear = |payload: &[u8], extra: usize| {
        let mut h = header(0, payload.len());
        h.tag = keys.udp_tag();
        let mut d = h.encode().to_vec();
        d.extend_from_slice(payload);
        d.extend(std::iter::repeat_n(0u8, extra));
        d
    };
    let mut bad = vec![
        in_clear(&junk, 0),            // in clear, as a session in clear sends it
        in_clear(&junk, AEAD_TAG_LEN), // in clear, with room for a tag
        sealed(&mut other_stream, 0, &junk),
        sealed(&mut other_session, 0, &junk),
    ];
    // Sealed for this stream, then changed: moved to the next slot; flagged as a re-send,
    // a ciphertext bit flipped, another sequence number.
    let mut moved = sealed(&mut honest, 0, &junk);
    moved[16..24].copy_from_slice(&(PAYLOAD as u64).to_be_bytes());
    bad.push(moved);
    for (at, bit) in [(12usize, 1u8), (40, 0x80), (0, 1)] {
        let mut d = sealed(&mut honest, 0, &junk);
        d[at] ^= bit;
        bad.push(d);
    }
    for d in &bad {
        udp.send(d).unwrap();
    }
    // Then the true datagrams: had any of the above been taken, its slot would hold junk.
    std::thread::sleep(Duration::from_millis(100));
    for (g, p) in body.chunks(PAYLOAD).enumerate() {
        udp.send(&sealed(&mut honest, (g * PAYLOAD) as u64, p))
            .unwrap();
    }
    side.send(&UdpFrame::Sent {
        file_id: 0,
        offset: 0,
    });
    side.until(|f| matches!(f, UdpFrame::Done { .. }));
    side.send(&UdpFrame::End);
    // A one-chunk file: no ChunkAck, its commit answers.
    match raw.commit(0, [0; 32]) {
        Message::FileCommitted { .. } => {}
        other => panic!("{other:?}"),
    }
    assert_eq!(std::fs::read(root.join("x.bin")).unwrap(), body);
    drop(raw);
    drop(side);
    assert!(no_partials(&root, 10), "{:?}", tree(&root));
    assert!(srv.wait_log(" refused", 10), "{}", srv.log());
    let log = srv.log();
    let at = log.find(" refused").unwrap();
    let refused: u64 = log[..at].rsplit(' ').next().unwrap().parse().unwrap();
    assert!(refused >= bad.len() as u64, "{log}");
}

#[test]
fn a_side_channel_in_clear_after_agreeing_to_encrypt_stores_nothing() {
    let env = Env::new();
    let root = env.mkdir("root");
    let srv = ServerProc::start(&root, &env.key, &[]);
    let mut raw = open_encrypted(srv.port, &env);
    let mut data = raw.data(srv.port, 0).unwrap();
    assert!(matches!(
        raw.put(0, b"x.bin", 65536),
        Message::FileReady { .. }
    ));
    // A salt, then frames in clear: their first bytes read as a record's length.
    data.write_all(&SALT).unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let hello = UdpFrame::Hello {
        port: udp.local_addr().unwrap().port(),
        payload: PAYLOAD as u16,
        budget: 0,
    };
    data.write_all(&hello.encode()).unwrap();
    data.write_all(&UdpFrame::Announce(ChunkHeader::data(0, 0, 65536)).encode())
        .unwrap();
    // The stream ends as a protocol error, named in the log; nothing is placed.
    assert!(
        srv.wait_log(
            "UDP side channel: malformed message: encrypted record of",
            10
        ),
        "{}",
        srv.log()
    );
    drop(raw);
    drop(data);
    assert!(!root.join("x.bin").exists(), "{:?}", tree(&root));
    assert!(no_partials(&root, 10), "{:?}", tree(&root));
}
