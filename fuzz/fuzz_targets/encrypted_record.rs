//! An encrypted data stream's records: any bytes offered as records never panic and never
//! open without the key; records sealed with it open to what was sealed, and any one byte
//! flipped on the wire makes a record fail.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_wire::crypt::{AEAD_TAG_LEN, RECORD_PREFIX};
use zcp_wire::{Psk, RecordOpener, RecordSealer, SessionKeys};

/// Opens `wire` as records; the plaintext, or `None` at the first that fails.
fn open_all(o: &mut RecordOpener, mut wire: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    while wire.len() >= RECORD_PREFIX {
        let prefix: [u8; RECORD_PREFIX] = wire[..RECORD_PREFIX].try_into().unwrap();
        let n = RecordOpener::record_len(prefix).ok()?;
        let body = wire.get(RECORD_PREFIX..RECORD_PREFIX + n + AEAD_TAG_LEN)?;
        let mut body = body.to_vec();
        let got = o.open(prefix, &mut body).ok()?;
        out.extend_from_slice(&body[..got]);
        wire = &wire[RECORD_PREFIX + n + AEAD_TAG_LEN..];
    }
    wire.is_empty().then_some(out)
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let keys = SessionKeys::derive_encrypted(
        &Psk::from_bytes([0x3c; 32]),
        (&[1; 32], &[2; 32]),
        &[3; 64],
        &[4; 32],
    );
    let key = keys.stream_key(1, &[5; 32]).unwrap();
    // Raw bytes as records: nothing opens without the key.
    let mut o = RecordOpener::new(&key);
    let forged = open_all(&mut o, data);
    assert!(forged.is_none_or(|p| p.is_empty()), "forged records opened");

    // The same bytes as plaintext, sealed in records of up to `piece` bytes.
    let flip = usize::from(u16::from_be_bytes([data[0], data[1]]));
    let piece = usize::from(data[2]) + 1;
    let plain = &data[3..];
    let mut s = RecordSealer::new(&key);
    let mut wire = Vec::new();
    for p in plain.chunks(piece) {
        let mut r = vec![0u8; RECORD_PREFIX];
        r.extend_from_slice(p);
        r.extend_from_slice(&[0; AEAD_TAG_LEN]);
        s.seal(&mut r).unwrap();
        wire.extend_from_slice(&r);
    }
    let mut o = RecordOpener::new(&key);
    assert_eq!(open_all(&mut o, &wire).as_deref(), Some(plain));
    if !wire.is_empty() {
        let at = flip % wire.len();
        wire[at] ^= 1 << (data[2] % 8);
        let mut o = RecordOpener::new(&key);
        assert!(open_all(&mut o, &wire).is_none_or(|p| p != plain), "byte {at} flipped unseen");
    }
});
