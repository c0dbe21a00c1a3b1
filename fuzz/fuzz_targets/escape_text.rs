//! Any text from the network, as it would be printed or logged: the escaped form holds no
//! control character (so no terminal escape, bell, carriage return or forged log line), a
//! second escape changes nothing, and names escaped with `escape` hold none either.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let safe = zcp_wire::escape_text(&text);
    assert!(!safe.chars().any(char::is_control), "{safe:?}");
    assert_eq!(zcp_wire::escape_text(&safe), safe);
    let name = zcp_wire::escape(data);
    assert!(!name.chars().any(char::is_control), "{name:?}");
});
