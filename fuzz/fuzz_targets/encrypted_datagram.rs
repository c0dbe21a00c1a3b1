//! An encrypted UDP session's datagrams: any bytes offered as a datagram never panic and
//! never open without the key; a payload sealed with it opens to its header and bytes in
//! any order, and any one byte flipped on the wire makes it fail.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_wire::udp::{DATAGRAM_HEADER_LEN, DatagramHeader};
use zcp_wire::{DatagramOpener, DatagramSealer, Psk, SessionKeys};

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
    let key = keys.datagram_key(1, &[5; 32]).unwrap();
    let o = DatagramOpener::new(&key);
    // Raw bytes as a datagram: checked like any header, and never opened.
    if let Ok(h) = DatagramHeader::decode_sealed(data) {
        assert_eq!(h.encode()[..], data[..DATAGRAM_HEADER_LEN]);
    }
    assert!(o.open(&mut data.to_vec()).is_err(), "a forged datagram opened");

    // The bytes as payloads of up to `piece` bytes, sealed in turn, opened last first.
    let flip = usize::from(u16::from_be_bytes([data[0], data[1]]));
    let piece = usize::from(data[2]) + 1;
    let plain = &data[3..];
    let mut s = DatagramSealer::new(&key);
    let mut grams = Vec::new();
    for (i, p) in plain.chunks(piece).enumerate() {
        let h = DatagramHeader {
            tag: [0; 8],
            file_id: 7,
            flags: 0,
            len: p.len() as u16,
            offset: (i * piece) as u64,
            sent_us: i as u64,
        };
        let mut body = p.to_vec();
        let (head, tag) = s.seal(h, &mut body).unwrap();
        grams.push(([&head[..], &body, &tag].concat(), h, p));
    }
    for (d, h, p) in grams.iter().rev() {
        let mut opened = d.clone();
        let got = o.open(&mut opened).expect("a sealed datagram opens");
        assert_eq!((got.file_id, got.offset, got.len), (h.file_id, h.offset, h.len));
        assert_eq!(&opened[DATAGRAM_HEADER_LEN..][..p.len()], *p);
        let mut bad = d.clone();
        let at = flip % bad.len();
        bad[at] ^= 1 << (data[2] % 8);
        assert!(o.open(&mut bad).is_err(), "byte {at} flipped unseen");
    }
});
