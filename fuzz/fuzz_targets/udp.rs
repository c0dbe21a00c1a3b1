//! Any bytes as a UDP datagram's header and as a run of side-channel frames: never panics; a
//! header that decodes is canonical and its range does not overflow; each frame that decodes
//! re-encodes to the bytes it took, and a NAK holds 1..=MAX_NAK_RANGES non-empty ranges.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_wire::udp::{DATAGRAM_HEADER_LEN, DatagramHeader, MAX_NAK_RANGES, UdpFrame};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = DatagramHeader::decode(data) {
        assert_eq!(h.encode()[..], data[..DATAGRAM_HEADER_LEN]);
        assert_eq!(usize::from(h.len), data.len() - DATAGRAM_HEADER_LEN);
        assert!(h.offset.checked_add(u64::from(h.len)).is_some());
    }
    let mut rest = data;
    while let Ok(Some((f, used))) = UdpFrame::decode(rest) {
        assert_eq!(f.encode(), rest[..used]);
        if let UdpFrame::Nak { ranges, .. } = &f {
            assert!((1..=MAX_NAK_RANGES).contains(&ranges.len()));
            assert!(ranges.iter().all(|&(s, n)| n > 0 && s.checked_add(n).is_some()));
        }
        rest = &rest[used..];
    }
});
