//! Any 28 bytes as a chunk header, then checked against a plan: never panics; a header that
//! decodes is canonical, and a located chunk lies inside the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_wire::{CHUNK_HEADER_LEN, ChunkHeader, ChunkPlan};

fuzz_target!(|data: &[u8]| {
    if data.len() < CHUNK_HEADER_LEN + 16 {
        return;
    }
    let raw: [u8; CHUNK_HEADER_LEN] = data[..CHUNK_HEADER_LEN].try_into().unwrap();
    let Ok(h) = ChunkHeader::decode(&raw) else { return };
    assert_eq!(h.encode(), raw);
    let size = u64::from_be_bytes(data[CHUNK_HEADER_LEN..CHUNK_HEADER_LEN + 8].try_into().unwrap());
    let chunk = u64::from_be_bytes(data[CHUNK_HEADER_LEN + 8..CHUNK_HEADER_LEN + 16].try_into().unwrap());
    let Ok(plan) = ChunkPlan::new(size, chunk) else { return };
    if let Ok(i) = plan.locate(h.offset, h.len) {
        let (off, len) = plan.chunk(i);
        assert_eq!((off, len), (h.offset, h.len));
        assert!(off + len <= size);
    }
});
