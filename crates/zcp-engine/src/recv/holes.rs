//! Receiving a chunk given as data extents: the extents checked, the holes between them made
//! holes in the file, and the chunk's sink fed zeros where the holes are, so it sees the
//! chunk's full logical bytes while the engines move only the data.

use std::os::fd::AsFd;

use super::{ChunkSink, Sink, Target};
use crate::EngineError;
use crate::sparse::{EXTENT_ALIGN, feed_zeros, make_hole};

/// Checks that `extents` (absolute `(offset, len)`) are non-empty, ascending and apart, lie
/// inside the chunk `offset..offset+len`, and start and end on [`EXTENT_ALIGN`] boundaries
/// (the chunk's end excepted). The wire checks the same; the engine does not trust its caller
/// with the offsets it writes at.
pub(super) fn check(offset: u64, len: u64, extents: &[(u64, u64)]) -> Result<(), EngineError> {
    let end = offset
        .checked_add(len)
        .ok_or_else(|| EngineError::Path("chunk range overflows".into()))?;
    let mut prev = offset;
    for &(start, n) in extents {
        let stop = start.saturating_add(n);
        let aligned = start.is_multiple_of(EXTENT_ALIGN)
            && (stop.is_multiple_of(EXTENT_ALIGN) || stop == end);
        if n == 0 || start < prev || stop > end || !aligned {
            return Err(EngineError::Path(format!(
                "data extent {start}+{n} does not fit chunk {offset}+{len}"
            )));
        }
        prev = stop;
    }
    Ok(())
}

/// Makes the holes of a chunk (everything in `offset..offset+len` outside `extents`) holes in
/// the target's file.
pub(super) fn punch(
    t: &Target,
    offset: u64,
    len: u64,
    extents: &[(u64, u64)],
) -> Result<(), EngineError> {
    let mut pos = offset;
    for &(start, n) in extents {
        make_hole(t.file.as_fd(), pos, start - pos)?;
        pos = start + n;
    }
    make_hole(t.file.as_fd(), pos, offset + len - pos)
}

/// Wraps a chunk's sink: the engine feeds the extents' bytes, in order; the sink sees the
/// chunk's every byte, zeros in the holes.
pub(super) struct ZeroFill {
    inner: Sink,
    /// The extents, relative to the chunk.
    extents: Vec<(u64, u64)>,
    next: usize,
    /// Bytes of the chunk the inner sink has seen.
    pos: u64,
    /// Bytes left of the extent being fed.
    left: u64,
    len: u64,
}

impl ZeroFill {
    pub(super) fn wrap(inner: Sink, offset: u64, len: u64, extents: &[(u64, u64)]) -> Sink {
        Box::new(ZeroFill {
            inner,
            extents: extents.iter().map(|&(s, n)| (s - offset, n)).collect(),
            next: 0,
            pos: 0,
            left: 0,
            len,
        })
    }
}

impl ChunkSink for ZeroFill {
    fn bytes(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.left == 0 {
                let Some(&(start, n)) = self.extents.get(self.next) else {
                    // More bytes than the extents hold: the engine's contract is broken. Feed
                    // them on: the MAC cannot match, so nothing wrong is accepted.
                    self.inner.bytes(bytes);
                    self.pos += bytes.len() as u64;
                    return;
                };
                let inner = &mut self.inner;
                feed_zeros(start.saturating_sub(self.pos), |z| inner.bytes(z));
                self.pos = self.pos.max(start);
                self.left = n;
                self.next += 1;
            }
            let k = bytes.len().min(self.left.min(usize::MAX as u64) as usize);
            self.inner.bytes(&bytes[..k]);
            bytes = &bytes[k..];
            self.left -= k as u64;
            self.pos += k as u64;
        }
    }

    fn seen_all(mut self: Box<Self>) {
        let inner = &mut self.inner;
        feed_zeros(self.len.saturating_sub(self.pos), |z| inner.bytes(z));
        self.inner.seen_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    struct Keep(Arc<Mutex<(Vec<u8>, bool)>>);
    impl ChunkSink for Keep {
        fn bytes(&mut self, b: &[u8]) {
            self.0.lock().unwrap().0.extend_from_slice(b);
        }
        fn seen_all(self: Box<Self>) {
            self.0.lock().unwrap().1 = true;
        }
    }

    #[test]
    fn the_sink_sees_the_logical_chunk_in_any_pieces() {
        let base = 1 << 20;
        let extents = [(base + 4096, 8192), (base + 65536, 4096 + 100)];
        let len = 65536 + 4096 + 100;
        let data: Vec<u8> = (0..8192 + 4196).map(|i| (i % 250) as u8 + 1).collect();
        let mut want = vec![0u8; len as usize];
        want[4096..4096 + 8192].copy_from_slice(&data[..8192]);
        want[65536..].copy_from_slice(&data[8192..]);
        for piece in [1, 7, 4096, 100_000] {
            let seen = Arc::new(Mutex::new((Vec::new(), false)));
            let mut s = ZeroFill::wrap(Box::new(Keep(seen.clone())), base, len, &extents);
            for p in data.chunks(piece) {
                s.bytes(p);
            }
            assert!(!seen.lock().unwrap().1);
            s.seen_all();
            let g = seen.lock().unwrap();
            assert!(g.1 && g.0 == want, "pieces of {piece}");
        }
        // No extents: the whole chunk is zeros.
        let seen = Arc::new(Mutex::new((Vec::new(), false)));
        ZeroFill::wrap(Box::new(Keep(seen.clone())), 0, 5000, &[]).seen_all();
        assert_eq!(seen.lock().unwrap().0, vec![0u8; 5000]);
    }

    /// Every engine receives a chunk with holes over a socket: only the data crosses, the
    /// file holds the logical chunk (zeros where an earlier write left garbage), the holes
    /// are holes, and the sink sees every logical byte.
    #[test]
    fn every_engine_keeps_the_holes_of_a_chunk() {
        use crate::recv::{RecvEngine, StreamReceiver};
        use rustix::fs::{Mode, OFlags};
        use std::io::Write;
        use std::os::unix::fs::{FileExt, MetadataExt};
        use std::sync::atomic::{AtomicU64, Ordering};
        const MIB: u64 = 1 << 20;
        let d = tempfile::tempdir().unwrap();
        // Chunk 16..32 MiB of a 32 MiB + 100 file: data at 17 MiB (64 KiB) and at its end.
        let (offset, len) = (16 * MIB, 16 * MIB + 100);
        let extents = [(17 * MIB, 65536), (31 * MIB, MIB + 100)];
        let data: Vec<u8> = (0..65536 + MIB + 100)
            .map(|i| (i % 249) as u8 + 1)
            .collect();
        let mut want = vec![0u8; len as usize];
        want[MIB as usize..MIB as usize + 65536].copy_from_slice(&data[..65536]);
        want[15 * MIB as usize..].copy_from_slice(&data[65536..]);
        for engine in [
            RecvEngine::ReadWrite,
            RecvEngine::Splice,
            RecvEngine::Direct,
            RecvEngine::Mem,
            RecvEngine::Null,
        ] {
            let path = d.path().join(engine.name());
            let f = std::fs::File::create_new(&path).unwrap();
            // What an earlier attempt left: garbage over the whole chunk, on disk.
            f.write_all_at(&vec![0xEE; len as usize], offset).unwrap();
            f.sync_all().unwrap();
            let direct = (engine == RecvEngine::Direct).then(|| {
                let fd = rustix::fs::open(&path, OFlags::WRONLY | OFlags::DIRECT, Mode::empty())
                    .expect("O_DIRECT on the test directory's filesystem");
                Arc::new(fd)
            });
            let target = Target {
                file: Arc::new(f.into()),
                direct,
            };
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let mut tx = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
            let (rx, _) = l.accept().unwrap();
            let body = data.clone();
            let writer = std::thread::spawn(move || tx.write_all(&body).unwrap());
            let seen = Arc::new(Mutex::new((Vec::new(), false)));
            let sink: Option<Sink> =
                (engine != RecvEngine::Null).then(|| Box::new(Keep(seen.clone())) as Sink);
            let (dtx, drx) = std::sync::mpsc::channel();
            let progress = AtomicU64::new(0);
            let mut r = StreamReceiver::new(0);
            r.receive_sparse(
                engine,
                engine.stores().then_some(&target),
                rx.as_fd(),
                (offset, len),
                &extents,
                sink,
                &progress,
                Box::new(move |res| dtx.send(res.is_ok()).unwrap()),
            )
            .unwrap_or_else(|e| panic!("{}: {e}", engine.name()));
            r.finish().unwrap();
            writer.join().unwrap();
            let what = engine.name();
            assert_eq!(drx.try_iter().collect::<Vec<_>>(), [true], "{what}");
            assert_eq!(
                progress.load(Ordering::Relaxed),
                data.len() as u64,
                "{what}"
            );
            if engine != RecvEngine::Null {
                let g = seen.lock().unwrap();
                assert!(g.1 && g.0 == want, "{what}: the sink saw the logical chunk");
            }
            if engine.stores() {
                let file = std::fs::File::open(&path).unwrap();
                let mut got = vec![1u8; len as usize];
                file.read_exact_at(&mut got, offset).unwrap();
                assert!(got == want, "{what}: the file holds the logical chunk");
                file.sync_all().unwrap();
                // 16 MiB of garbage became holes: about the 1.1 MiB of data stays allocated.
                let allocated = file.metadata().unwrap().blocks() * 512;
                assert!(allocated < 2 * MIB, "{what}: {allocated} bytes allocated");
            }
        }
    }

    #[test]
    fn extents_that_do_not_fit_the_chunk_are_refused() {
        let c = 1 << 20;
        assert!(check(c, c, &[]).is_ok());
        assert!(check(c, c + 10, &[(c, 4096), (2 * c, 10)]).is_ok());
        for bad in [
            vec![(0, 4096)],
            vec![(c, 0)],
            vec![(c + 1, 4096)],
            vec![(c, 4095)],
            vec![(c, 8192), (c + 4096, 4096)],
            vec![(2 * c - 4096, 8192)],
            vec![(c, u64::MAX)],
        ] {
            assert!(check(c, c, &bad).is_err(), "{bad:?}");
        }
    }
}
