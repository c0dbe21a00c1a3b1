//! Any 28 bytes as a chunk header, then checked against a plan, and what follows as a sparse
//! chunk's extent table: never panics; a header that decodes is canonical, a located chunk
//! lies inside the file, and a table that decodes lies inside its chunk, in order, aligned.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_wire::{CHUNK_HEADER_LEN, ChunkHeader, ChunkPlan, EXTENT_ALIGN, Extents, MAX_EXTENTS};

fuzz_target!(|data: &[u8]| {
    if data.len() < CHUNK_HEADER_LEN + 16 {
        return;
    }
    let raw: [u8; CHUNK_HEADER_LEN] = data[..CHUNK_HEADER_LEN].try_into().unwrap();
    let Ok(h) = ChunkHeader::decode(&raw) else { return };
    assert_eq!(h.encode(), raw);
    let size = u64::from_be_bytes(data[CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + 8].try_into().unwrap());
    let chunk = u64::from_be_bytes(data[CHUNK_HEADER_LEN + 8..CHUNK_HEADER_LEN + 16].try_into().unwrap());
    if let Ok(plan) = ChunkPlan::new(size, chunk)
        && let Ok(i) = plan.locate(h.offset, h.len)
    {
        let (off, len) = plan.chunk(i);
        assert_eq!((off, len), (h.offset, h.len));
        assert!(off + len <= size);
    }
    let rest = &data[CHUNK_HEADER_LEN + 16..];
    if rest.len() < 4 {
        return;
    }
    let Ok(n) = Extents::table_len(rest[..4].try_into().unwrap()) else { return };
    assert!(n <= MAX_EXTENTS * 16);
    let Some(table) = rest[4..].get(..n) else { return };
    let Ok(e) = Extents::decode(table, h.len) else { return };
    assert_eq!(e.encode(), rest[..4 + n]);
    assert!(e.data_len() <= h.len);
    let mut prev = 0;
    for &(start, len) in e.as_slice() {
        assert!(len > 0 && start >= prev && start + len <= h.len);
        assert!(start % EXTENT_ALIGN == 0);
        assert!((start + len) % EXTENT_ALIGN == 0 || start + len == h.len);
        prev = start + len;
    }
});
