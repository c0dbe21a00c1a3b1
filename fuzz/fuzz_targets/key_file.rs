//! Any text as a key file: never panics; an accepted key round-trips through its file text.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_wire::Psk;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(k) = Psk::parse(text) {
        assert_eq!(Psk::parse(&k.to_file_text()).unwrap(), k);
    }
});
