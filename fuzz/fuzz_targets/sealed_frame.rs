//! Any bytes offered to an opener after the handshake: never panics, and nothing forged opens.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_wire::{FrameHeader, HEADER_LEN, Message, Opener, Psk, SessionKeys, Side};

fuzz_target!(|data: &[u8]| {
    if data.len() < HEADER_LEN {
        return;
    }
    let mut key = [0x5Au8; 32];
    key[0] = 1;
    let keys = SessionKeys::derive(&Psk::from_bytes(key), &[1; 32], &[2; 32]);
    let mut opener = Opener::new(&keys, Side::Server);
    let head: [u8; HEADER_LEN] = data[..HEADER_LEN].try_into().unwrap();
    let Ok(h) = FrameHeader::decode(head) else { return };
    if let Ok(m) = opener.open(h, &data[HEADER_LEN..]) {
        // Without the key the fuzzer can only get unsealed Error frames through.
        assert!(matches!(m, Message::Error { .. }), "forged sealed frame opened: {m:?}");
    }
});
