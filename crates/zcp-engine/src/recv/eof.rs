//! [`StreamReceiver::receive_until_eof`]: every engine takes a bare stream of any length in
//! pieces, ends cleanly where the peer closes, and shows its sink exactly the bytes that came.

use std::io::Write;
use std::os::fd::AsFd;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, mpsc};

use super::{ChunkSink, RecvEngine, StreamReceiver, Target};

struct Hash(Arc<Mutex<blake3::Hasher>>, mpsc::Sender<()>);

impl ChunkSink for Hash {
    fn bytes(&mut self, bytes: &[u8]) {
        self.0.lock().unwrap().update(bytes);
    }
    fn seen_all(self: Box<Self>) {
        self.1.send(()).unwrap();
    }
}

/// Receives what a peer sends (`data`, then it closes) in pieces of `piece` bytes; returns
/// the bytes taken, the hash the sinks saw, and how many sinks were told they saw all.
fn receive(
    engine: RecvEngine,
    target: Option<&Target>,
    data: &[u8],
    piece: u64,
) -> (u64, [u8; 32], usize) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut tx = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (rx, _) = l.accept().unwrap();
    let sent = data.to_vec();
    let writer = std::thread::spawn(move || {
        tx.write_all(&sent).unwrap();
    });
    let hasher = Arc::new(Mutex::new(blake3::Hasher::new()));
    let (seen_tx, seen_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    let mut r = StreamReceiver::new(64 * 1024);
    let progress = AtomicU64::new(0);
    let mut at = 0;
    loop {
        let sink = engine
            .sees_bytes()
            .then(|| Box::new(Hash(hasher.clone(), seen_tx.clone())) as super::Sink)
            .or_else(|| {
                (engine == RecvEngine::Splice)
                    .then(|| Box::new(Hash(hasher.clone(), seen_tx.clone())) as super::Sink)
            });
        let done_tx = done_tx.clone();
        let got = r
            .receive_until_eof(
                engine,
                target,
                rx.as_fd(),
                (at, piece),
                sink,
                &progress,
                Box::new(move |res| done_tx.send(res).unwrap()),
            )
            .unwrap_or_else(|e| panic!("{}: {e}", engine.name()));
        at += got;
        if got < piece {
            break;
        }
    }
    r.finish().unwrap();
    writer.join().unwrap();
    let dones: Vec<_> = done_rx.try_iter().collect();
    assert!(
        dones.iter().all(Result::is_ok),
        "{} {}: {dones:?}",
        engine.name(),
        data.len()
    );
    assert_eq!(progress.load(std::sync::atomic::Ordering::Relaxed), at);
    let hash = *hasher.lock().unwrap().finalize().as_bytes();
    (at, hash, seen_rx.try_iter().count())
}

#[test]
fn every_engine_takes_a_stream_to_its_end_in_pieces() {
    let d = tempfile::tempdir().unwrap();
    let piece = 1 << 20;
    for size in [0usize, 1, 1 << 20, (5 << 19) + 123] {
        let data: Vec<u8> = (0..size as u32).map(|i| (i * 7 % 253) as u8).collect();
        let pieces = size as u64 / piece + 1;
        for engine in [
            RecvEngine::ReadWrite,
            RecvEngine::Splice,
            RecvEngine::Direct,
            RecvEngine::Mem,
            RecvEngine::Null,
        ] {
            let path = d.path().join(format!("{}-{size}", engine.name()));
            // Read and write: splice reads the written range back through a mapping.
            let file = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(&path)
                .unwrap();
            let direct = match engine {
                RecvEngine::Direct => {
                    use std::os::unix::fs::OpenOptionsExt;
                    match std::fs::OpenOptions::new()
                        .write(true)
                        .custom_flags(libc::O_DIRECT)
                        .open(&path)
                    {
                        Ok(f) => Some(Arc::new(f.into())),
                        Err(e) => {
                            eprintln!("direct skipped: O_DIRECT does not open here ({e})");
                            continue;
                        }
                    }
                }
                _ => None,
            };
            let target = Target {
                file: Arc::new(file.into()),
                direct,
            };
            let t = engine.stores().then_some(&target);
            let (got, hash, seen) = receive(engine, t, &data, piece);
            let what = format!("{} {size}", engine.name());
            assert_eq!(got, size as u64, "{what}");
            if engine != RecvEngine::Null {
                assert_eq!(hash, *blake3::hash(&data).as_bytes(), "{what}");
                assert_eq!(seen as u64, pieces, "{what}: every sink told it saw all");
            }
            if engine.stores() {
                // direct pads its last block with zeros: the caller cuts the file back.
                rustix::fs::ftruncate(&*target.file, got).unwrap();
                assert!(std::fs::read(&path).unwrap() == data, "{what}");
            }
        }
    }
}
