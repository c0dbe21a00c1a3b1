//! Any bytes as a destination path: never panics; an accepted path has only plain components
//! and round-trips.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_wire::RelPath;

fuzz_target!(|data: &[u8]| {
    let Ok(p) = RelPath::parse(data) else { return };
    for c in p.components() {
        assert!(!c.is_empty() && c != b"." && c != b"..");
        assert!(!c.contains(&b'/') && !c.contains(&0));
        assert!(c.len() <= zcp_wire::MAX_NAME);
    }
    let again = RelPath::parse(&p.to_bytes()).unwrap();
    assert_eq!(again.components(), p.components());
    let _ = zcp_wire::escape(data);
});
