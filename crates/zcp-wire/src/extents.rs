//! The table of data extents that follows a `Sparse` chunk header on a data stream.
//!
//! A chunk of a sparse file that holds holes is sent as its data extents alone: the header
//! ([`crate::ChunkHeader::sparse`]) names the whole chunk, then comes this table — `count:u32`
//! and `count` × (`start:u64`, `len:u64`), offsets relative to the chunk's start — and then
//! the bytes of each extent in order, nothing else. Whatever the table leaves out is hole:
//! zeros, which the receiver keeps as holes and hashes as zeros, so the chunk's MAC is over its
//! full logical bytes as for any chunk.
//!
//! Every entry is checked before a byte of data is read: at most [`MAX_EXTENTS`] of them (the
//! count is checked before the table is read, so at most 16 KiB are ever allocated for one),
//! each non-empty, in ascending order without overlap, inside the chunk, and starting and
//! ending on multiples of [`EXTENT_ALIGN`] (the chunk's own end excepted), so every write the
//! receiver makes suits O_DIRECT.

use crate::DecodeError;

/// Most extents one sparse chunk may list; a sender with more fills the smallest holes.
pub const MAX_EXTENTS: usize = 1024;
/// Bytes of one table entry.
pub const EXTENT_ENTRY_LEN: usize = 16;
/// Extents start and end on multiples of this (but for the one ending at the chunk's end).
pub const EXTENT_ALIGN: u64 = 4096;

/// The data extents of one sparse chunk, as `(start, len)` relative to the chunk's offset:
/// ascending, apart, inside the chunk, aligned. Checked when made ([`Extents::new`]) and when
/// decoded ([`Extents::decode`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Extents(Vec<(u64, u64)>);

impl Extents {
    /// The extents `list` of a chunk of `chunk_len` bytes, if they keep every rule above.
    pub fn new(list: Vec<(u64, u64)>, chunk_len: u64) -> Result<Extents, DecodeError> {
        let bad = |m: String| Err(DecodeError::Malformed(m));
        if list.len() > MAX_EXTENTS {
            return Err(DecodeError::TooLarge {
                len: list.len() as u64,
                max: MAX_EXTENTS as u64,
            });
        }
        let mut prev_end = 0u64;
        for (i, &(start, len)) in list.iter().enumerate() {
            let Some(end) = start.checked_add(len).filter(|e| *e <= chunk_len) else {
                return bad(format!(
                    "extent {i} ({len} bytes at {start}) runs past the {chunk_len}-byte chunk"
                ));
            };
            if len == 0 {
                return bad(format!("extent {i} is empty"));
            }
            if i > 0 && start < prev_end {
                return bad(format!(
                    "extent {i} starts at {start}, before the previous one ends ({prev_end})"
                ));
            }
            if !start.is_multiple_of(EXTENT_ALIGN)
                || !(end.is_multiple_of(EXTENT_ALIGN) || end == chunk_len)
            {
                return bad(format!(
                    "extent {i} ({start}..{end}) is not aligned to {EXTENT_ALIGN} bytes"
                ));
            }
            prev_end = end;
        }
        Ok(Extents(list))
    }

    /// The extents, `(start, len)` relative to the chunk.
    pub fn as_slice(&self) -> &[(u64, u64)] {
        &self.0
    }

    /// Bytes of data that follow the table on the stream.
    pub fn data_len(&self) -> u64 {
        self.0.iter().map(|e| e.1).sum()
    }

    /// The table as sent: count, then the entries.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.0.len() * EXTENT_ENTRY_LEN);
        out.extend_from_slice(&(self.0.len() as u32).to_be_bytes());
        for (start, len) in &self.0 {
            out.extend_from_slice(&start.to_be_bytes());
            out.extend_from_slice(&len.to_be_bytes());
        }
        out
    }

    /// How many table bytes follow a count: refused over [`MAX_EXTENTS`] entries, before
    /// anything is read or allocated for them.
    pub fn table_len(count: [u8; 4]) -> Result<usize, DecodeError> {
        let n = u32::from_be_bytes(count) as usize;
        if n > MAX_EXTENTS {
            return Err(DecodeError::TooLarge {
                len: n as u64,
                max: MAX_EXTENTS as u64,
            });
        }
        Ok(n * EXTENT_ENTRY_LEN)
    }

    /// Decodes and checks the entries (the bytes after the count) of a chunk of `chunk_len`
    /// bytes.
    pub fn decode(table: &[u8], chunk_len: u64) -> Result<Extents, DecodeError> {
        if !table.len().is_multiple_of(EXTENT_ENTRY_LEN) {
            return Err(DecodeError::Malformed(format!(
                "an extent table of {} bytes is not whole entries",
                table.len()
            )));
        }
        let word = |b: &[u8]| u64::from_be_bytes(b.try_into().expect("8 bytes"));
        let list = table
            .chunks_exact(EXTENT_ENTRY_LEN)
            .map(|e| (word(&e[..8]), word(&e[8..])))
            .collect();
        Extents::new(list, chunk_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(list: Vec<(u64, u64)>, chunk: u64) -> Result<Extents, DecodeError> {
        let e = Extents::new(list, chunk)?;
        let bytes = e.encode();
        let n = Extents::table_len(bytes[..4].try_into().unwrap())?;
        assert_eq!(n, bytes.len() - 4);
        let back = Extents::decode(&bytes[4..], chunk)?;
        assert_eq!(back, e);
        Ok(back)
    }

    #[test]
    fn tables_round_trip_and_count_their_data() {
        let e = round_trip(
            vec![(0, 4096), (1 << 20, 8192), (4 << 20, 100)],
            (4 << 20) + 100,
        )
        .unwrap();
        assert_eq!(e.data_len(), 4096 + 8192 + 100);
        let none = round_trip(Vec::new(), 1 << 20).unwrap();
        assert_eq!(none.data_len(), 0);
        assert_eq!(none.encode(), [0, 0, 0, 0]);
        // Touching extents are allowed (a sender merges them, but nothing breaks).
        round_trip(vec![(0, 4096), (4096, 4096)], 65536).unwrap();
    }

    #[test]
    fn every_rule_is_checked() {
        let chunk = 1 << 20;
        for (what, list) in [
            ("empty", vec![(0, 0)]),
            ("past the end", vec![(chunk - 4096, 8192)]),
            ("overflow", vec![(u64::MAX - 4095, 8192)]),
            ("unaligned start", vec![(100, 4096)]),
            ("unaligned end", vec![(0, 5000)]),
            ("overlap", vec![(8192, 8192), (12288, 4096)]),
            ("out of order", vec![(65536, 4096), (0, 4096)]),
        ] {
            assert!(Extents::new(list, chunk).is_err(), "{what} accepted");
        }
        // The chunk's own end need not be aligned (the file's last chunk).
        Extents::new(vec![(4096, 5000)], 9096).unwrap();
        let many = (0..=MAX_EXTENTS as u64).map(|i| (i * 8192, 4096)).collect();
        assert!(matches!(
            Extents::new(many, 1 << 30),
            Err(DecodeError::TooLarge { .. })
        ));
        assert!(Extents::table_len((MAX_EXTENTS as u32 + 1).to_be_bytes()).is_err());
        assert_eq!(
            Extents::table_len((MAX_EXTENTS as u32).to_be_bytes()),
            Ok(MAX_EXTENTS * EXTENT_ENTRY_LEN)
        );
        assert!(Extents::decode(&[0; 17], chunk).is_err());
    }
}
