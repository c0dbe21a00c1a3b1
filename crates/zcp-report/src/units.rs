//! Numbers for people, in iperf3's conventions: transfer sizes in binary units
//! (KBytes = 1024 bytes), bit rates in decimal units (Gbits/sec = 10^9 bits per second).

/// Bits per second of `bytes` over `seconds`; 0 for an empty interval.
pub fn bits_per_second(bytes: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        bytes as f64 * 8.0 / seconds
    } else {
        0.0
    }
}

use zcp_wire::three_digits;

/// `1.00 GBytes`, `512 KBytes`, `17 Bytes`.
pub fn bytes(n: u64) -> String {
    zcp_wire::scaled_text(n, ["Bytes", "KBytes", "MBytes", "GBytes", "TBytes"])
}

/// `9.41 Gbits/sec`.
pub fn rate(bits_per_second: f64) -> String {
    const UNITS: [&str; 5] = [
        "bits/sec",
        "Kbits/sec",
        "Mbits/sec",
        "Gbits/sec",
        "Tbits/sec",
    ];
    let mut v = bits_per_second;
    let mut i = 0;
    while v >= 1000.0 && i + 1 < UNITS.len() {
        v /= 1000.0;
        i += 1;
    }
    format!("{} {}", three_digits(v), UNITS[i])
}

/// `1.00 GiB`-style size for headings (binary units, IEC names).
pub fn size(n: u64) -> String {
    zcp_wire::size_text(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iperf3_style_units() {
        assert_eq!(bytes(17), "17 Bytes");
        assert_eq!(bytes(1 << 30), "1.00 GBytes");
        assert_eq!(bytes(3_520_000_000), "3.28 GBytes");
        assert_eq!(bytes(1_436_000), "1.37 MBytes");
        assert_eq!(rate(28.2e9), "28.2 Gbits/sec");
        assert_eq!(rate(9.414e9), "9.41 Gbits/sec");
        assert_eq!(rate(512.0), "512 bits/sec");
        assert_eq!(size(64 << 20), "64.0 MiB");
        assert_eq!(bits_per_second(1000, 0.0), 0.0);
        assert_eq!(bits_per_second(1000, 2.0), 4000.0);
    }
}
