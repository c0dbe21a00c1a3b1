//! Sizes for people in messages that cross crates (an engine's error, a session's notice):
//! binary units with IEC names, three significant digits.

/// `64.0 MiB`, `1.00 GiB`, `17 B`.
pub fn size_text(n: u64) -> String {
    scaled_text(n, ["B", "KiB", "MiB", "GiB", "TiB"])
}

/// `n` scaled by 1024 into the largest of `units` that keeps it at least 1, with three
/// significant digits (whole below the first step).
pub fn scaled_text(n: u64, units: [&str; 5]) -> String {
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} {}", units[0])
    } else {
        format!("{} {}", three_digits(v), units[i])
    }
}

/// `v` with three significant digits (`123`, `12.3`, `1.23`).
pub fn three_digits(v: f64) -> String {
    if v >= 99.95 {
        format!("{v:.0}")
    } else if v >= 9.995 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_people_write_them() {
        assert_eq!(size_text(17), "17 B");
        assert_eq!(size_text(1023), "1023 B");
        assert_eq!(size_text(1024), "1.00 KiB");
        assert_eq!(size_text(50 << 20), "50.0 MiB");
        assert_eq!(size_text(52_428_800), "50.0 MiB");
        assert_eq!(size_text(1 << 30), "1.00 GiB");
        assert_eq!(size_text(300 << 30), "300 GiB");
        assert_eq!(size_text(5 << 40), "5.00 TiB");
        assert_eq!(size_text(u64::MAX), "16777216 TiB");
    }
}
