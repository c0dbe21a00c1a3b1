//! Hash-then-MAC: one pass over a chunk gives both its proof (a keyed MAC) and its part of the
//! file's plain BLAKE3, the content digest users compare with `b3sum`.
//!
//! BLAKE3 is a tree. A chunk whose size is a power of two (at least BLAKE3's 1 KiB leaf) and
//! whose offset is a multiple of that size is a whole subtree of the file's tree, so hashing
//! its bytes from that offset gives the subtree's *chaining value* (`cv`), whatever else the
//! file holds. The chunk's MAC is a keyed BLAKE3 over the chunk's place (file id, offset,
//! length) and that chaining value: forging it needs the session's chunk key, and matching it
//! with other bytes needs a BLAKE3 collision. The file's plain BLAKE3 is then the chaining
//! values merged up the tree ([`plain_digest`]), with no second pass over the data.

use blake3::hazmat::{HasherExt, Mode, merge_subtrees_non_root, merge_subtrees_root};

/// BLAKE3's leaf: chunk offsets must be multiples of it.
const LEAF: u64 = 1024;

/// A 32-byte BLAKE3 chaining value or hash.
pub type Cv = [u8; 32];

/// What one pass over a chunk proves: its keyed MAC, and its share of the file's plain BLAKE3.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChunkProof {
    /// The keyed MAC over the chunk's place and `cv`: what the peers compare.
    pub mac: [u8; 32],
    /// The plain BLAKE3 chaining value of the chunk as a subtree of its file.
    pub cv: Cv,
    /// For the chunk at offset 0: the plain BLAKE3 of its bytes as a whole input, which is the
    /// file's digest when this chunk is the whole file.
    pub root: Option<Cv>,
}

impl ChunkProof {
    /// The MAC's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.mac
    }
}

/// Hashes one chunk's bytes, fed in order ([`crate::SessionKeys::chunk_hasher`]).
#[derive(Clone)]
pub struct ChunkHasher {
    plain: blake3::Hasher,
    /// The keyed MAC, already fed the chunk's place.
    mac: blake3::Hasher,
    at_start: bool,
    /// Most bytes the subtree may take (`None`: no bound, at offset 0).
    max: Option<u64>,
    fed: u64,
    /// More bytes came than the chunk's subtree can hold: the proof is one no honest chunk
    /// has (and BLAKE3's tree is never asked to take them).
    overfed: bool,
}

impl ChunkHasher {
    /// A hasher for the chunk at `offset` of `len` bytes whose MAC starts from `mac` (keyed,
    /// fed the chunk's place). An offset that is no subtree boundary for `len` (never one of
    /// a valid plan's chunks) still hashes, as a tree of its own: its MAC binds its place and
    /// bytes all the same, but its `cv` is no part of any file's digest.
    pub(crate) fn new(mac: blake3::Hasher, offset: u64, len: u64) -> ChunkHasher {
        let mut plain = blake3::Hasher::new();
        let fits = offset.is_multiple_of(LEAF)
            && blake3::hazmat::max_subtree_len(offset).is_none_or(|max| len <= max);
        let max = if offset > 0 && fits {
            plain.set_input_offset(offset);
            blake3::hazmat::max_subtree_len(offset)
        } else {
            None
        };
        ChunkHasher {
            plain,
            mac,
            at_start: offset == 0,
            max,
            fed: 0,
            overfed: false,
        }
    }

    /// Feeds the next bytes of the chunk.
    pub fn update(&mut self, bytes: &[u8]) -> &mut ChunkHasher {
        let fed = self.fed.saturating_add(bytes.len() as u64);
        if self.max.is_some_and(|max| fed > max) {
            self.overfed = true;
        }
        if !self.overfed {
            self.plain.update(bytes);
            self.fed = fed;
        }
        self
    }

    /// The chunk's proof.
    pub fn finalize(&self) -> ChunkProof {
        // A subtree past offset 0 with no bytes, or more than it holds, has no chaining value
        // (BLAKE3 would panic): its MAC is over a marker no chunk's 32-byte value can equal.
        if self.overfed || (self.max.is_some() && self.fed == 0) {
            let mut mac = self.mac.clone();
            mac.update(b"zcp/1 no such subtree");
            return ChunkProof {
                mac: *mac.finalize().as_bytes(),
                ..ChunkProof::default()
            };
        }
        let cv = self.plain.finalize_non_root();
        let mut mac = self.mac.clone();
        mac.update(&cv);
        ChunkProof {
            mac: *mac.finalize().as_bytes(),
            cv,
            root: self.at_start.then(|| *self.plain.finalize().as_bytes()),
        }
    }
}

/// The plain BLAKE3 of a file from its chunks' proofs in order (`cvs`, and `root`: the first
/// chunk's [`ChunkProof::root`]), under a plan whose chunk size is a power of two: the hash
/// `b3sum` prints for the same bytes. An empty file has no chunks; a one-chunk file's digest
/// is its chunk's root (`None` there: the zeros, as no digest).
pub fn plain_digest(cvs: &[Cv], root: Option<Cv>) -> Cv {
    match cvs.len() {
        0 => *blake3::hash(b"").as_bytes(),
        1 => {
            // Every hasher at offset 0 gives its root, and a file of one chunk keeps no
            // journal (whose records have none).
            debug_assert!(root.is_some(), "a one-chunk file's digest needs its root");
            root.unwrap_or([0; 32])
        }
        n => {
            let split = left_leaves(n);
            merge_subtrees_root(&merge(&cvs[..split]), &merge(&cvs[split..]), Mode::Hash).into()
        }
    }
}

/// The chaining value of a left-balanced subtree of equal-sized leaves (the last may be short).
fn merge(cvs: &[Cv]) -> Cv {
    if cvs.len() == 1 {
        return cvs[0];
    }
    let split = left_leaves(cvs.len());
    merge_subtrees_non_root(&merge(&cvs[..split]), &merge(&cvs[split..]), Mode::Hash)
}

/// Leaves in the left subtree of `n` (≥ 2) equal power-of-two leaves: the largest power of two
/// below `n`, as BLAKE3 splits its input.
fn left_leaves(n: usize) -> usize {
    1 << (usize::BITS - 1 - (n - 1).leading_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::tests::psk;
    use crate::{ChunkPlan, SessionKeys};

    fn bytes(n: usize, seed: u8) -> Vec<u8> {
        let mut v = Vec::with_capacity(n);
        let mut x = u32::from(seed) | 1;
        for _ in 0..n {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            v.push(x as u8);
        }
        v
    }

    /// The digest from chunk proofs is `b3sum`'s, at sizes around every boundary.
    #[test]
    fn the_digest_from_chunks_is_the_plain_blake3() {
        let keys = SessionKeys::derive(&psk(3), &[1; 32], &[2; 32]);
        let cs = 65536u64;
        let sizes = [
            0,
            1,
            1023,
            1024,
            65535,
            65536,
            65537,
            2 * 65536,
            3 * 65536 - 1,
            3 * 65536 + 1,
            5 * 65536,
            7 * 65536 + 4096,
            9 * 65536,
            17 * 65536 + 1,
        ];
        for size in sizes {
            let data = bytes(size, size as u8);
            let plan = ChunkPlan::new(size as u64, cs).unwrap();
            let proofs: Vec<ChunkProof> = (0..plan.count())
                .map(|i| {
                    let (off, len) = plan.chunk(i);
                    let mut h = keys.chunk_hasher(4, off, len);
                    // Fed in uneven pieces, as the engines feed it.
                    for piece in data[off as usize..(off + len) as usize].chunks(10_000) {
                        h.update(piece);
                    }
                    h.finalize()
                })
                .collect();
            let cvs: Vec<Cv> = proofs.iter().map(|p| p.cv).collect();
            let root = proofs.first().and_then(|p| p.root);
            assert_eq!(
                plain_digest(&cvs, root),
                *blake3::hash(&data).as_bytes(),
                "size {size}"
            );
        }
    }

    /// The MAC binds the place and the bytes: another file id, offset, length or byte, or
    /// another session's key, changes it.
    #[test]
    fn the_mac_binds_place_bytes_and_key() {
        let keys = SessionKeys::derive(&psk(3), &[1; 32], &[2; 32]);
        let other = SessionKeys::derive(&psk(3), &[1; 32], &[3; 32]);
        let data = bytes(65536, 9);
        let mac = |k: &SessionKeys, id: u32, off: u64, d: &[u8]| {
            let mut h = k.chunk_hasher(id, off, d.len() as u64);
            h.update(d);
            h.finalize().mac
        };
        let base = mac(&keys, 1, 65536, &data);
        assert_ne!(base, mac(&keys, 2, 65536, &data));
        assert_ne!(base, mac(&keys, 1, 131072, &data));
        assert_ne!(base, mac(&keys, 1, 65536, &data[..65535]));
        assert_ne!(base, mac(&other, 1, 65536, &data));
        let mut flipped = data.clone();
        flipped[100] ^= 1;
        assert_ne!(base, mac(&keys, 1, 65536, &flipped));
        // The chaining value is the key's business not at all: the same in every session.
        let cv = |k: &SessionKeys| {
            let mut h = k.chunk_hasher(1, 65536, 65536);
            h.update(&data);
            h.finalize().cv
        };
        assert_eq!(cv(&keys), cv(&other));
    }

    /// An offset no subtree starts at (no valid plan has one), a chunk fed more bytes than
    /// its subtree holds, or none at all, hashes without a panic; the last two to a MAC that
    /// matches no honest chunk's.
    #[test]
    fn off_the_tree_overfed_or_empty_still_hashes() {
        let keys = SessionKeys::derive(&psk(3), &[1; 32], &[2; 32]);
        for (off, len) in [
            (1, 10),
            (1024, 4096),
            (3 * 65536, 131072),
            (u64::MAX - 5, 5),
        ] {
            let mut h = keys.chunk_hasher(0, off, len);
            h.update(&[0; 10]);
            let _ = h.finalize();
        }
        let data = bytes(65537, 4);
        let honest = {
            let mut h = keys.chunk_hasher(0, 65536, 65536);
            h.update(&data[..65536]);
            h.finalize()
        };
        let mut over = keys.chunk_hasher(0, 65536, 65536);
        over.update(&data[..65536]).update(&data[65536..]);
        assert_ne!(over.finalize().mac, honest.mac);
        let empty = keys.chunk_hasher(0, 65536, 65536).finalize();
        assert_ne!(empty.mac, honest.mac);
    }
}
