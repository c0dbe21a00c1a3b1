//! The server's handshake fed any decodable first and second message: never panics, and a
//! client without the key is never accepted.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_wire::{Accepted, FrameHeader, HEADER_LEN, Message, Psk, accept};

fn msg(data: &[u8]) -> Option<(Message, usize)> {
    if data.len() < HEADER_LEN {
        return None;
    }
    let h = FrameHeader::decode(data[..HEADER_LEN].try_into().unwrap()).ok()?;
    let end = HEADER_LEN + h.len;
    let m = Message::decode(h.kind, data.get(HEADER_LEN..end)?).ok()?;
    Some((m, end))
}

fuzz_target!(|data: &[u8]| {
    let mut key = [7u8; 32];
    key[3] = 9;
    let psk = Psk::from_bytes(key);
    let Some((first, used)) = msg(data) else { return };
    let Ok((state, _reply)) = accept(&psk, first, [2; 32]) else { return };
    let Some((second, _)) = msg(&data[used..]) else { return };
    match state {
        Accepted::Control(s) => {
            assert!(s.on_proof(second, [1; 16], 4).is_err(), "accepted a proof made without the key");
        }
        Accepted::Data(s) => {
            let _ = s.on_join(second);
        }
    }
});
