//! Any bytes as a control frame: header bounds, then body decode. Never panics; whatever
//! decodes re-encodes to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_wire::{FrameHeader, HEADER_LEN, MAX_PAYLOAD, Message};

fuzz_target!(|data: &[u8]| {
    if data.len() < HEADER_LEN {
        return;
    }
    let head: [u8; HEADER_LEN] = data[..HEADER_LEN].try_into().unwrap();
    let Ok(h) = FrameHeader::decode(head) else { return };
    assert!(h.len <= MAX_PAYLOAD);
    let body = &data[HEADER_LEN..];
    if let Ok(m) = Message::decode(h.kind, body) {
        assert_eq!(m.kind(), h.kind);
        assert_eq!(Message::decode(h.kind, &m.encode_body()).unwrap(), m);
    }
});
