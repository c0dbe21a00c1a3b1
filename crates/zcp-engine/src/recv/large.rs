//! Large offsets, at the engine level: small ranges of a sparse source beyond 2 GiB and 4 GiB
//! (2^31 - 1 and 2^31 + 1 straddled, 2^32 crossed, an odd length at the end), moved by every
//! sender engine into every receiver engine over a loopback socket, and compared. Every 64-bit
//! offset path (`sendfile`/`splice` offsets, `pwrite`, O_DIRECT positions, the mapping used to
//! hash) runs here in well under a second; the multi-GiB end-to-end transfers are the
//! integration suite's.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

use rustix::fs::{Mode, OFlags};

use super::*;
use crate::{FileSender, SendEngine};

const GIB: u64 = 1 << 30;

/// The ranges: each straddles or sits beyond a 32-bit boundary. Offsets are 4096-aligned (as
/// every chunk's is); lengths are not.
const RANGES: [(u64, u64); 4] = [
    (2 * GIB - 65536, 65536 * 2 + 1),
    (2 * GIB + (256 << 10), 4097),
    (4 * GIB - 8192, 12_289),
    (4 * GIB + 65536, 1 << 20),
];

/// A sparse file of 4 GiB + 2 MiB with a distinct pattern in each range.
fn source(dir: &std::path::Path) -> (std::fs::File, Vec<Vec<u8>>) {
    let path = dir.join("src");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    f.set_len(4 * GIB + (2 << 20)).unwrap();
    let mut patterns = Vec::new();
    for (i, (off, len)) in RANGES.iter().enumerate() {
        let bytes: Vec<u8> = (0..*len).map(|b| (b * 31 + i as u64 * 7) as u8).collect();
        rustix::io::pwrite(&f, &bytes, *off).unwrap();
        patterns.push(bytes);
    }
    (f, patterns)
}

fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (b, _) = l.accept().unwrap();
    (a, b)
}

/// A sink that hashes, to compare what `mem` saw.
struct Hash(blake3::Hasher, mpsc::Sender<[u8; 32]>);

impl ChunkSink for Hash {
    fn bytes(&mut self, b: &[u8]) {
        self.0.update(b);
    }
    fn seen_all(self: Box<Self>) {
        let _ = self.1.send(*self.0.finalize().as_bytes());
    }
}

#[test]
fn every_engine_pair_moves_ranges_beyond_2_and_4_gib() {
    let d = tempfile::tempdir().unwrap();
    let (src, patterns) = source(d.path());
    let src = Arc::new(src);
    for send in SendEngine::ALL {
        for recv in [
            RecvEngine::Splice,
            RecvEngine::Direct,
            RecvEngine::ReadWrite,
            RecvEngine::Mem,
            RecvEngine::Null,
        ] {
            let what = format!("{} -> {}", send.name(), recv.name());
            let dst_path = d
                .path()
                .join(format!("dst-{}-{}", send.name(), recv.name()));
            let dst = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&dst_path)
                .unwrap();
            dst.set_len(4 * GIB + (2 << 20)).unwrap();
            let direct = (recv == RecvEngine::Direct).then(|| {
                let fd = rustix::fs::open(&dst_path, OFlags::RDWR | OFlags::DIRECT, Mode::empty())
                    .expect("O_DIRECT on the test directory's filesystem");
                Arc::new(fd)
            });
            let target = Target {
                file: Arc::new(dst.into()),
                direct,
            };
            let (mut tx, rx) = pair();
            let sender = {
                let src = src.clone();
                std::thread::spawn(move || {
                    let mut s = FileSender::new(send, 0);
                    let progress = AtomicU64::new(0);
                    for (off, len) in RANGES {
                        s.send(src.as_fd(), tx.as_fd(), off, len, &progress)
                            .unwrap();
                    }
                    tx.flush().unwrap();
                    progress.load(Ordering::Relaxed)
                })
            };
            let mut r = StreamReceiver::new(0);
            let progress = AtomicU64::new(0);
            let (done_tx, done_rx) = mpsc::channel();
            let (mac_tx, mac_rx) = mpsc::channel();
            for (off, len) in RANGES {
                let sink: Option<Sink> = (recv != RecvEngine::Null)
                    .then(|| Box::new(Hash(blake3::Hasher::new(), mac_tx.clone())) as Sink);
                let done = done_tx.clone();
                let t = recv.stores().then_some(&target);
                r.receive(
                    recv,
                    t,
                    rx.as_fd(),
                    off,
                    len,
                    sink,
                    &progress,
                    Box::new(move |res| done.send(res.map_err(|e| e.message)).unwrap()),
                )
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            }
            r.finish().unwrap();
            let sent = sender.join().unwrap();
            let total: u64 = RANGES.iter().map(|r| r.1).sum();
            assert_eq!(
                (sent, progress.load(Ordering::Relaxed)),
                (total, total),
                "{what}"
            );
            let done: Vec<_> = done_rx.try_iter().collect();
            assert!(done.iter().all(Result::is_ok), "{what}: {done:?}");
            if recv.stores() {
                for ((off, len), want) in RANGES.iter().zip(&patterns) {
                    let mut got = vec![0u8; *len as usize];
                    rustix::io::pread(&*target.file, &mut got, *off).unwrap();
                    assert!(got == *want, "{what}: bytes at {off}");
                }
            }
            if recv != RecvEngine::Null {
                let mut macs: Vec<[u8; 32]> = mac_rx.try_iter().collect();
                let mut want: Vec<[u8; 32]> = patterns
                    .iter()
                    .map(|p| *blake3::hash(p).as_bytes())
                    .collect();
                // In the order each sink finished, which need not be the ranges' order.
                macs.sort_unstable();
                want.sort_unstable();
                assert_eq!(macs, want, "{what}: what the sinks saw");
            }
            drop(target);
            std::fs::remove_file(&dst_path).unwrap();
        }
    }
}
