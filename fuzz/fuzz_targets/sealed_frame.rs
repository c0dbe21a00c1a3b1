//! Any bytes offered to an opener after the handshake, of a session in clear or encrypted
//! (the first byte's low bit): never panics, and nothing forged opens.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_wire::{FrameHeader, HEADER_LEN, Message, Opener, Psk, SessionKeys, Side};

fuzz_target!(|data: &[u8]| {
    if data.len() < HEADER_LEN + 1 {
        return;
    }
    let mut key = [0x5Au8; 32];
    key[0] = 1;
    let psk = Psk::from_bytes(key);
    let keys = match data[0] & 1 {
        0 => SessionKeys::derive(&psk, &[1; 32], &[2; 32]),
        _ => SessionKeys::derive_encrypted(&psk, (&[1; 32], &[2; 32]), &[3; 64], &[4; 32]),
    };
    let data = &data[1..];
    let mut opener = Opener::new(&keys, Side::Server);
    let head: [u8; HEADER_LEN] = data[..HEADER_LEN].try_into().unwrap();
    let Ok(h) = FrameHeader::decode(head) else { return };
    if let Ok(m) = opener.open(h, &data[HEADER_LEN..]) {
        // Without the key the fuzzer can only get unsealed Error frames through.
        assert!(matches!(m, Message::Error { .. }), "forged sealed frame opened: {m:?}");
    }
});
