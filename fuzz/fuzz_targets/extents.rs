//! Any bytes as a sparse chunk's extent table, for a chunk length the input chooses: raw (a
//! count and entries as they come off a data stream) or built from small aligned steps, so
//! that most tables get past the alignment rule to the ordering and bounds checks. Never
//! panics; a count over MAX_EXTENTS is refused before anything is allocated for it; a table
//! that decodes lies inside its chunk, in order, aligned, and re-encodes to the bytes it came
//! from; a list `Extents::new` accepts round-trips through its encoding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_wire::{EXTENT_ALIGN, EXTENT_ENTRY_LEN, Extents, MAX_EXTENTS};

/// The rules every accepted table keeps, stated apart from the decoder's own code.
fn check(e: &Extents, chunk_len: u64) {
    assert!(e.as_slice().len() <= MAX_EXTENTS);
    let mut prev = 0u64;
    let mut sum = 0u64;
    for &(start, len) in e.as_slice() {
        let end = start
            .checked_add(len)
            .expect("an accepted extent does not overflow");
        assert!(
            len > 0 && start >= prev && end <= chunk_len,
            "{e:?} in {chunk_len}"
        );
        assert!(start % EXTENT_ALIGN == 0);
        assert!(end % EXTENT_ALIGN == 0 || end == chunk_len);
        prev = end;
        sum += len;
    }
    assert_eq!(e.data_len(), sum);
    assert!(e.data_len() <= chunk_len);
    let bytes = e.encode();
    let n = Extents::table_len(bytes[..4].try_into().unwrap()).unwrap();
    assert_eq!(n, bytes.len() - 4);
    assert_eq!(&Extents::decode(&bytes[4..], chunk_len).unwrap(), e);
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 9 {
        return;
    }
    let chunk_len = u64::from_be_bytes(data[1..9].try_into().unwrap());
    let rest = &data[9..];
    if data[0] & 1 == 0 {
        // As read off a stream: the count first, checked before the table is read.
        if rest.len() < 4 {
            return;
        }
        let count: [u8; 4] = rest[..4].try_into().unwrap();
        let Ok(n) = Extents::table_len(count) else {
            assert!(u32::from_be_bytes(count) as usize > MAX_EXTENTS);
            return;
        };
        assert_eq!(n, u32::from_be_bytes(count) as usize * EXTENT_ENTRY_LEN);
        let Some(table) = rest[4..].get(..n) else {
            return;
        };
        let Ok(e) = Extents::decode(table, chunk_len) else {
            return;
        };
        check(&e, chunk_len);
        assert_eq!(e.encode(), rest[..4 + n]);
    } else {
        // Built: each entry a gap and a length in pages, now and then a few bytes off.
        let list: Vec<(u64, u64)> = rest
            .chunks_exact(3)
            .scan(0u64, |at, c| {
                let start = *at + u64::from(c[0] >> 2) * EXTENT_ALIGN + u64::from(c[0] & 3);
                let len = u64::from(c[1]) * EXTENT_ALIGN + u64::from(c[2] >> 4);
                *at = start + len;
                Some((start, len))
            })
            .collect();
        if let Ok(e) = Extents::new(list.clone(), chunk_len) {
            assert_eq!(e.as_slice(), &list[..]);
            check(&e, chunk_len);
        }
    }
});
