//! How a file is cut into chunks, and the fixed header that precedes each chunk on a data
//! stream.
//!
//! A data stream, once joined, carries a sequence of [`ChunkHeader`]s, each followed by exactly
//! `len` raw bytes of the file (moved by the sender's engine, never framed or escaped) — or,
//! for a `Sparse` chunk, by its table of data extents ([`crate::Extents`]) and the bytes of
//! those extents alone — and ends with an `End` header. The receiver checks every header against the file's [`ChunkPlan`]
//! before it moves a byte: offset on a chunk boundary, length exactly that chunk's length.

use crate::DecodeError;

/// Size of a chunk header on a data stream.
pub const CHUNK_HEADER_LEN: usize = 28;
/// Magic bytes at the start of every chunk header.
pub const CHUNK_MAGIC: [u8; 4] = *b"ZCPD";
/// Smallest chunk size a sender may choose.
pub const MIN_CHUNK: u64 = 64 * 1024;
/// Largest chunk size a sender may choose; bounds what a receiver commits to per header.
pub const MAX_CHUNK: u64 = 1 << 30;
/// Chunk sizes are multiples of this, so every chunk offset suits O_DIRECT.
pub const CHUNK_ALIGN: u64 = 4096;

/// What a data-stream header announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkKind {
    /// `len` bytes of file `file_id` at `offset` follow.
    Data,
    /// No more chunks on this stream.
    End,
    /// Chunk `offset..offset+len` of file `file_id`, of which only the data extents follow:
    /// their table ([`crate::Extents`]), then their bytes in order. The rest is hole (zeros).
    Sparse,
}

/// The fixed 28-byte header before each chunk: magic, kind, 3 zero bytes, file id (`u32`),
/// offset (`u64`), length (`u64`), all big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkHeader {
    /// Data or end of stream.
    pub kind: ChunkKind,
    /// The file, as in its `PutFile`.
    pub file_id: u32,
    /// Where the bytes go in the file.
    pub offset: u64,
    /// How many raw bytes follow.
    pub len: u64,
}

impl ChunkHeader {
    /// The header for one chunk.
    pub fn data(file_id: u32, offset: u64, len: u64) -> ChunkHeader {
        ChunkHeader {
            kind: ChunkKind::Data,
            file_id,
            offset,
            len,
        }
    }

    /// The header for a sparse chunk: its table of extents and their bytes follow.
    pub fn sparse(file_id: u32, offset: u64, len: u64) -> ChunkHeader {
        ChunkHeader {
            kind: ChunkKind::Sparse,
            file_id,
            offset,
            len,
        }
    }

    /// The end-of-stream header.
    pub fn end() -> ChunkHeader {
        ChunkHeader {
            kind: ChunkKind::End,
            file_id: 0,
            offset: 0,
            len: 0,
        }
    }

    /// Encodes the header.
    pub fn encode(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut out = [0u8; CHUNK_HEADER_LEN];
        out[..4].copy_from_slice(&CHUNK_MAGIC);
        out[4] = match self.kind {
            ChunkKind::Data => 1,
            ChunkKind::End => 2,
            ChunkKind::Sparse => 3,
        };
        out[8..12].copy_from_slice(&self.file_id.to_be_bytes());
        out[12..20].copy_from_slice(&self.offset.to_be_bytes());
        out[20..28].copy_from_slice(&self.len.to_be_bytes());
        out
    }

    /// Decodes a header; refuses bad magic, unknown kinds, nonzero padding, and lengths over
    /// [`MAX_CHUNK`]. Whether the chunk fits its file is [`ChunkPlan::locate`]'s job.
    pub fn decode(b: &[u8; CHUNK_HEADER_LEN]) -> Result<ChunkHeader, DecodeError> {
        if b[..4] != CHUNK_MAGIC {
            return Err(DecodeError::Malformed(
                "chunk header has bad magic bytes".into(),
            ));
        }
        let kind = match b[4] {
            1 => ChunkKind::Data,
            2 => ChunkKind::End,
            3 => ChunkKind::Sparse,
            k => return Err(DecodeError::Malformed(format!("unknown chunk kind {k}"))),
        };
        if b[5..8] != [0, 0, 0] {
            return Err(DecodeError::Malformed(
                "chunk header padding is not zero".into(),
            ));
        }
        let h = ChunkHeader {
            kind,
            file_id: u32::from_be_bytes(b[8..12].try_into().expect("4 bytes")),
            offset: u64::from_be_bytes(b[12..20].try_into().expect("8 bytes")),
            len: u64::from_be_bytes(b[20..28].try_into().expect("8 bytes")),
        };
        if h.len > MAX_CHUNK {
            return Err(DecodeError::TooLarge {
                len: h.len,
                max: MAX_CHUNK,
            });
        }
        if kind == ChunkKind::End && (h.file_id, h.offset, h.len) != (0, 0, 0) {
            return Err(DecodeError::Malformed(
                "end header with nonzero fields".into(),
            ));
        }
        Ok(h)
    }
}

/// Why a chunk size or a chunk header does not fit the file.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum PlanError {
    /// The chunk size is out of range or misaligned.
    #[error("chunk size {0} must be a power of two from {MIN_CHUNK} (64K) to {MAX_CHUNK} (1G)")]
    BadChunkSize(u64),
    /// The header's offset is not on a chunk boundary or is past the end.
    #[error("chunk offset {offset} is not a chunk boundary of a {size}-byte file")]
    BadOffset {
        /// The offset in the header.
        offset: u64,
        /// The file size.
        size: u64,
    },
    /// The header's length is not the chunk's length.
    #[error("chunk at offset {offset} announces {len} bytes, but that chunk has {expected}")]
    BadLength {
        /// The chunk's offset.
        offset: u64,
        /// The length in the header.
        len: u64,
        /// The chunk's true length.
        expected: u64,
    },
}

/// A file cut into equal chunks (the last one shorter).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkPlan {
    size: u64,
    chunk_size: u64,
}

impl ChunkPlan {
    /// The plan for `size` bytes in chunks of `chunk_size`.
    pub fn new(size: u64, chunk_size: u64) -> Result<ChunkPlan, PlanError> {
        // A power of two, so each chunk is a whole subtree of the file's BLAKE3 tree
        // (crate::proof); in range, it is a multiple of CHUNK_ALIGN too.
        if !(MIN_CHUNK..=MAX_CHUNK).contains(&chunk_size) || !chunk_size.is_power_of_two() {
            return Err(PlanError::BadChunkSize(chunk_size));
        }
        Ok(ChunkPlan { size, chunk_size })
    }

    /// The chunk size zcp picks for a file: about 1/256 of the file (the power of two at or
    /// above it), between 4 MiB and 256 MiB. Large enough that per-chunk work (a header, a MAC, a journal
    /// record) is noise; small enough that the chunks in flight when a transfer dies — sent
    /// but not yet durable, so sent again on resume — stay a few percent of the file.
    pub fn default_chunk_size(size: u64) -> u64 {
        const MIB: u64 = 1 << 20;
        (size / 256).next_power_of_two().clamp(4 * MIB, 256 * MIB)
    }

    /// File size.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Chunk size.
    pub fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    /// Number of chunks; 0 for an empty file.
    pub fn count(&self) -> u64 {
        self.size.div_ceil(self.chunk_size)
    }

    /// Offset and length of chunk `index` (which must be below [`ChunkPlan::count`]).
    pub fn chunk(&self, index: u64) -> (u64, u64) {
        let offset = index * self.chunk_size;
        (offset, self.chunk_size.min(self.size - offset))
    }

    /// The index of the chunk a header describes, if the header fits the plan exactly.
    pub fn locate(&self, offset: u64, len: u64) -> Result<u64, PlanError> {
        if !offset.is_multiple_of(self.chunk_size) || offset >= self.size {
            return Err(PlanError::BadOffset {
                offset,
                size: self.size,
            });
        }
        let index = offset / self.chunk_size;
        let (_, expected) = self.chunk(index);
        if len != expected {
            return Err(PlanError::BadLength {
                offset,
                len,
                expected,
            });
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_refusals() {
        let h = ChunkHeader::data(3, 1 << 33, 4097);
        assert_eq!(ChunkHeader::decode(&h.encode()).unwrap(), h);
        let s = ChunkHeader::sparse(3, 1 << 33, 4097);
        assert_eq!(ChunkHeader::decode(&s.encode()).unwrap(), s);
        assert_eq!(s.encode()[4], 3);
        let big = ChunkHeader::sparse(0, 0, MAX_CHUNK + 1).encode();
        assert!(ChunkHeader::decode(&big).is_err());
        assert_eq!(
            ChunkHeader::decode(&ChunkHeader::end().encode()).unwrap(),
            ChunkHeader::end()
        );

        let mut b = h.encode();
        b[0] = b'X';
        assert!(ChunkHeader::decode(&b).is_err());
        let mut b = h.encode();
        b[6] = 1;
        assert!(ChunkHeader::decode(&b).is_err());
        let mut b = h.encode();
        b[4] = 9;
        assert!(ChunkHeader::decode(&b).is_err());
        let big = ChunkHeader::data(0, 0, MAX_CHUNK + 1).encode();
        assert!(matches!(
            ChunkHeader::decode(&big),
            Err(DecodeError::TooLarge { .. })
        ));
    }

    #[test]
    fn plan_covers_the_file_exactly() {
        for size in [
            0u64,
            1,
            4095,
            4096,
            4097,
            (1 << 31) - 1,
            (1 << 31) + 1,
            5 << 30,
        ] {
            let plan = ChunkPlan::new(size, ChunkPlan::default_chunk_size(size)).unwrap();
            let mut next = 0;
            for i in 0..plan.count() {
                let (off, len) = plan.chunk(i);
                assert_eq!(off, next);
                assert!(len > 0);
                assert_eq!(plan.locate(off, len), Ok(i));
                next = off + len;
            }
            assert_eq!(next, size);
        }
    }

    #[test]
    fn plan_refuses_misfit_headers() {
        let plan = ChunkPlan::new(10 << 20, 4 << 20).unwrap();
        assert!(matches!(
            plan.locate(4096, 4 << 20),
            Err(PlanError::BadOffset { .. })
        ));
        assert!(matches!(
            plan.locate(12 << 20, 1),
            Err(PlanError::BadOffset { .. })
        ));
        assert!(matches!(
            plan.locate(8 << 20, 4 << 20),
            Err(PlanError::BadLength { .. })
        ));
        assert_eq!(plan.locate(8 << 20, 2 << 20), Ok(2));
        assert!(ChunkPlan::new(1, 4097).is_err());
        assert!(ChunkPlan::new(1, 0).is_err());
        assert!(ChunkPlan::new(1, MAX_CHUNK * 2).is_err());
    }

    #[test]
    fn default_chunk_size_grows_with_the_file() {
        assert_eq!(ChunkPlan::default_chunk_size(0), 4 << 20);
        assert_eq!(ChunkPlan::default_chunk_size(4 << 30), 16 << 20);
        // 5 GiB / 256 is 20 MiB: the power of two above it.
        assert_eq!(ChunkPlan::default_chunk_size(5 << 30), 32 << 20);
        for size in [0, 1 << 20, 3 << 30, 5 << 30, 77 << 30, 1 << 40] {
            let cs = ChunkPlan::default_chunk_size(size);
            assert!(ChunkPlan::new(size, cs).is_ok(), "{size}: {cs}");
        }
        // A chunk size that is no power of two is refused, however aligned.
        assert!(ChunkPlan::new(1 << 30, 3 << 20).is_err());
        assert!(ChunkPlan::new(1 << 30, 4 << 20).is_ok());
        assert_eq!(ChunkPlan::default_chunk_size(64 << 30), 256 << 20);
        assert_eq!(ChunkPlan::default_chunk_size(1 << 40), 256 << 20);
    }
}
