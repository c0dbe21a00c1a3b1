//! A malicious *receiver*: a server holding the key that a real `zcp send` pushes to. It
//! runs the real server handshake (zcp-wire's, as [`super::server::Evil`] does for `zcp
//! get`), answers `Open` as it pleases, takes the data connections (a TCP stream is read and
//! discarded; a UDP side channel says `Hello`, claims every chunk announced `Ready` and says
//! it `Done` once the sender marks it sent — or, as [`SideChannel::DoneOnly`], `Done` at
//! once, never `Ready`), and answers the control frames as a [`Lie`] says: the attacks of issue 24,
//! class 1, on the sending side's proof that a file was stored and verified.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use zcp_wire::udp::UdpFrame;
use zcp_wire::{Established, Message, Open, Pacing, Psk, SideStats};

use super::server::{accept_within, handshake, join, open_from, read_timeout, seal_to};
use crate::util::*;

/// What the malicious receiver claims for every file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lie {
    /// Tells the truth: `rw`, commits after `FileEnd` with its digest, verified, stored.
    None,
    /// Names an engine in `FileReady` (`null`, `mem`), then commits as that engine would.
    Engine(&'static str),
    /// Commits with `verified = false`.
    Unverified,
    /// Commits with a digest other than the one `FileEnd` carried.
    WrongDigest,
    /// Commits with `stored = false` from a storing engine.
    NotStored,
    /// Commits right after `FileReady`, before any data, with the right digest (a key holder
    /// that knows the source can compute it).
    Early,
    /// Honest about files; says nothing about directories, links or directory times.
    SilentEntries,
    /// Honest about files; answers each directory, link or directory's times with an
    /// `EntryDone` for another path first.
    OtherEntry,
}

/// How a UDP side channel answers the chunks announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SideChannel {
    /// `Ready` at once, `Done` once the sender marks the chunk `Sent` (its datagrams are
    /// taken and dropped).
    Ready,
    /// `Done` at once, never `Ready`: claims chunks not one datagram of which was sent.
    DoneOnly,
}

/// A malicious server with an authenticated push session from one `zcp send`.
pub struct EvilRx {
    pub s: TcpStream,
    pub est: Established,
    /// What the client asked for.
    pub open: Open,
    /// Data connections joined.
    pub joined: usize,
    /// Datagrams that reached the UDP side channels' sockets.
    pub datagrams: Arc<AtomicU64>,
    /// Threads holding the data connections until the client closes them.
    data: Vec<JoinHandle<()>>,
}

/// The `Opened` an honest server would answer to `open` (a push: no pacing of its own).
pub fn honest_opened(open: &Open) -> Message {
    Message::Opened {
        streams: open.streams,
        idle_ms: 60_000,
        pacing: Pacing::None,
        verify: open.verify.clone(),
        transport: open.transport.clone(),
        udp_mode: open.udp_mode.clone(),
    }
}

impl EvilRx {
    /// Runs the real server handshake for one client on `l`, answers its `Open` with what
    /// `opened` makes of it, and takes the data connections that come within 2 s.
    pub fn accept(l: &TcpListener, psk: &Psk, opened: impl FnOnce(&Open) -> Message) -> EvilRx {
        EvilRx::accept_with(l, psk, opened, SideChannel::Ready)
    }

    /// [`EvilRx::accept`], with UDP side channels that answer as `side` says.
    pub fn accept_with(
        l: &TcpListener,
        psk: &Psk,
        opened: impl FnOnce(&Open) -> Message,
        side: SideChannel,
    ) -> EvilRx {
        let (mut s, mut est) = handshake(l, psk, 16);
        let (h, p) = read_msg(&mut s).unwrap();
        let Ok(Message::Open(open)) = est.opener.open(h, &p) else {
            panic!("expected Open")
        };
        let answer = opened(&open);
        let streams = match &answer {
            Message::Opened { streams, .. } => usize::from(*streams),
            _ => 0,
        };
        let udp = matches!(&answer, Message::Opened { transport, .. } if transport == "udp");
        s.write_all(&est.sealer.seal(&answer)).unwrap();
        let mut evil = EvilRx {
            s,
            est,
            open: *open,
            joined: 0,
            datagrams: Arc::new(AtomicU64::new(0)),
            data: Vec::new(),
        };
        while evil.joined < streams {
            let Some(mut d) = accept_within(l, 2) else {
                break;
            };
            evil.joined += 1;
            join(&mut d, psk, &evil.est);
            let count = evil.datagrams.clone();
            evil.data.push(std::thread::spawn(move || {
                if udp {
                    side_channel(d, side, &count)
                } else {
                    drain(d)
                }
            }));
        }
        evil
    }

    pub fn send(&mut self, m: &Message) {
        seal_to(&mut self.s, &mut self.est, m);
    }

    pub fn recv(&mut self) -> std::io::Result<Message> {
        open_from(&mut self.s, &mut self.est)
    }

    /// Plays the receiver of a push to its end, lying as `lie` says about every file whose
    /// destination ends with `only` (every file when empty; honest about the others);
    /// `early` is the source's content, for [`Lie::Early`]'s digest. Returns the frames the
    /// client sent (`FileAbort`s, `ChunkMac`s, `FileEnd`s are what the tests look at), once it
    /// closed.
    pub fn serve(&mut self, lie: Lie, only: &str, early: &[u8]) -> Vec<Message> {
        let mut lies: HashMap<u32, Lie> = HashMap::new();
        let mut seen = Vec::new();
        let end = Instant::now() + Duration::from_secs(30);
        while Instant::now() < end {
            let Ok(m) = self.recv() else {
                break;
            };
            match &m {
                Message::PutFile(p) => {
                    let lie = if p.dest.ends_with(only.as_bytes()) {
                        lie
                    } else {
                        Lie::None
                    };
                    lies.insert(p.file_id, lie);
                    let engine = match lie {
                        Lie::Engine(e) => e,
                        _ => "rw",
                    };
                    self.send(&Message::FileReady {
                        file_id: p.file_id,
                        engine: engine.into(),
                        note: String::new(),
                        target: p.dest.clone(),
                        resumed: false,
                    });
                    if lie == Lie::Early {
                        let digest = digest_of(&self.est, p.file_id, early, p.chunk_size);
                        self.commit(p.file_id, p.size, digest, lie);
                    }
                }
                Message::ChunkMac { file_id, index, .. } => self.send(&Message::ChunkAck {
                    file_id: *file_id,
                    index: *index,
                    ok: true,
                }),
                Message::FileEnd { file_id, digest } => {
                    let lie = lies.get(file_id).copied().unwrap_or(Lie::None);
                    if lie != Lie::Early {
                        self.commit(*file_id, 0, *digest, lie);
                    }
                }
                Message::MakeDir { path, .. }
                | Message::MakeLink { path, .. }
                | Message::DirTimes { path, .. } => self.entry(path, lie, only),
                Message::Finish => self.send(&Message::Stats(SideStats::default())),
                _ => {}
            }
            seen.push(m);
        }
        seen
    }

    /// The answer to a directory, link or directory's times at `path`, as `lie` has it for
    /// paths ending with `only`: an honest receiver says it made it.
    fn entry(&mut self, path: &[u8], lie: Lie, only: &str) {
        let lie = if path.ends_with(only.as_bytes()) {
            lie
        } else {
            Lie::None
        };
        match lie {
            Lie::SilentEntries => return,
            Lie::OtherEntry => self.send(&Message::EntryDone {
                path: b"made-up".to_vec(),
            }),
            _ => {}
        }
        self.send(&Message::EntryDone {
            path: path.to_vec(),
        });
    }

    /// `FileCommitted` for `file_id`, as `lie` has it.
    pub fn commit(&mut self, file_id: u32, bytes: u64, digest: [u8; 32], lie: Lie) {
        let mut digest = digest;
        if lie == Lie::WrongDigest {
            digest[0] ^= 0x80;
        }
        let engine_stores = !matches!(lie, Lie::Engine(_));
        self.send(&Message::FileCommitted {
            file_id,
            bytes,
            digest,
            verified: !matches!(lie, Lie::Unverified | Lie::Engine("null")),
            stored: engine_stores && lie != Lie::NotStored,
        });
    }

    /// Waits for the data connections' threads (they end when the client closes them).
    pub fn join(self) {
        drop(self.s);
        for t in self.data {
            let _ = t.join();
        }
    }
}

/// The digest an honest sender computes for `body` as file `id` of this session.
pub fn digest_of(est: &Established, id: u32, body: &[u8], chunk_size: u64) -> [u8; 32] {
    let plan = zcp_wire::ChunkPlan::new(body.len() as u64, chunk_size).unwrap();
    let mut d = est.keys.file_digest(id, plan.size(), plan.chunk_size());
    for i in 0..plan.count() {
        let (off, len) = plan.chunk(i);
        let mut h = est.keys.chunk_hasher(id, off, len);
        h.update(&body[off as usize..(off + len) as usize]);
        d.push(h.finalize().as_bytes());
    }
    d.finish()
}

/// A TCP data stream: read and discarded until the client closes it.
fn drain(mut d: TcpStream) {
    read_timeout(&d);
    let mut buf = vec![0u8; 1 << 16];
    let end = Instant::now() + Duration::from_secs(40);
    while Instant::now() < end {
        match d.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// A UDP side channel: `Hello` with a socket that takes (and drops, counting them in
/// `count`) the datagrams; every chunk announced is answered as `side` says, until the
/// sender's `End`.
fn side_channel(d: TcpStream, side: SideChannel, count: &Arc<AtomicU64>) {
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    let taker = udp.try_clone().unwrap();
    let (count, stop) = (
        count.clone(),
        Arc::new(std::sync::atomic::AtomicBool::new(false)),
    );
    let stopped = stop.clone();
    let t = std::thread::spawn(move || {
        let _ = taker.set_read_timeout(Some(Duration::from_millis(100)));
        let mut b = vec![0u8; 70_000];
        while !stopped.load(Ordering::Relaxed) {
            if taker.recv(&mut b).is_ok() {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    answer_chunks(d, side, &udp);
    stop.store(true, Ordering::Relaxed);
    let _ = t.join();
}

/// The side channel's frames, as `side` says, until the sender's `End` (or 40 s).
fn answer_chunks(mut d: TcpStream, side: SideChannel, udp: &UdpSocket) {
    read_timeout(&d);
    let hello = UdpFrame::Hello {
        port: udp.local_addr().unwrap().port(),
        payload: 0,
        budget: 64 << 20,
    };
    d.write_all(&hello.encode()).unwrap();
    let mut buf = Vec::new();
    let mut tmp = [0u8; 4096];
    let end = Instant::now() + Duration::from_secs(40);
    while Instant::now() < end {
        while let Ok(Some((f, used))) = UdpFrame::decode(&buf) {
            buf.drain(..used);
            match f {
                UdpFrame::Announce(h) => {
                    let (file_id, offset) = (h.file_id, h.offset);
                    let answer = match side {
                        SideChannel::Ready => UdpFrame::Ready { file_id, offset },
                        SideChannel::DoneOnly => UdpFrame::Done { file_id, offset },
                    };
                    let _ = d.write_all(&answer.encode());
                }
                UdpFrame::Sent { file_id, offset } if side == SideChannel::Ready => {
                    let _ = d.write_all(&UdpFrame::Done { file_id, offset }.encode());
                }
                UdpFrame::End => {
                    // Hold the channel until the client closes it, as a receiver does.
                    let _ = d.read_to_end(&mut Vec::new());
                    return;
                }
                _ => {}
            }
        }
        match d.read(&mut tmp) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&tmp[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}
