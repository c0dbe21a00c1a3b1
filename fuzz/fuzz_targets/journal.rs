//! Any bytes as a resume journal (a crash can leave anything at its end): never panics; what
//! decodes only names sessions that were recorded, and its valid length is within the input
//! and re-decodes to the same state.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_wire::journal::decode_journal;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = decode_journal(data) else { return };
    assert!(s.valid_len <= data.len());
    for c in &s.chunks {
        assert!(usize::from(c.session) < s.sessions.len());
    }
    let again = decode_journal(&data[..s.valid_len]).expect("a valid prefix decodes");
    assert_eq!(again, s);
});
