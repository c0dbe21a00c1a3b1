//! Parsing `--rate` and `--rtt`, and the arithmetic and formatting of the target.

use std::time::Duration;

/// Parses a rate in bits per second: a number with an optional SI suffix (`K`, `M`, `G`, `T`,
/// powers of 1000, as links are rated) and optional `bit`, `b`, `bps` or `bit/s` after it:
/// `100G`, `40Gbit`, `2.5g`, `400M`, `1000000000`.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let body = ["bit/s", "bps", "bit", "b"]
        .iter()
        .find_map(|unit| lower.strip_suffix(unit))
        .unwrap_or(&lower);
    let (num, mult) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 1e3),
        Some('m') => (&body[..body.len() - 1], 1e6),
        Some('g') => (&body[..body.len() - 1], 1e9),
        Some('t') => (&body[..body.len() - 1], 1e12),
        _ => (body, 1.0),
    };
    let bad = || format!("{t:?} is not a rate; write bits per second like 100G, 40Gbit or 400M");
    let n: f64 = num.trim().parse().map_err(|_| bad())?;
    let bps = n * mult;
    if !bps.is_finite() || !(1e3..=1e15).contains(&bps) {
        return Err(format!(
            "{t:?} is outside 1 Kbit/s to 1000 Tbit/s; write bits per second like 100G"
        ));
    }
    Ok(bps.round() as u64)
}

/// Parses a round-trip time: a number with a unit, `us`, `ms` or `s` (`100ms`, `0.25s`,
/// `80us`).
pub fn parse_rtt(s: &str) -> Result<Duration, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, secs) = if let Some(n) = t.strip_suffix("us") {
        (n, 1e-6)
    } else if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else {
        return Err(format!(
            "{s:?} has no unit; write the round-trip time like 100ms, 0.2s or 500us"
        ));
    };
    let n: f64 = num.trim().parse().map_err(|_| {
        format!("{s:?} is not a round-trip time; write it like 100ms, 0.2s or 500us")
    })?;
    let d = n * secs;
    if !d.is_finite() || !(1e-6..=10.0).contains(&d) {
        return Err(format!("{s:?} is outside 1us to 10s"));
    }
    Ok(Duration::from_secs_f64(d))
}

/// Bytes in flight at `rate_bps` over `rtt`: rate / 8 x RTT.
pub fn bdp_bytes(rate_bps: u64, rtt: Duration) -> u64 {
    (rate_bps as u128 * rtt.as_micros() / 8 / 1_000_000) as u64
}

/// `100 Gbit/s`, `2.5 Gbit/s`, `400 Mbit/s`.
pub fn rate(bps: u64) -> String {
    let (v, unit) = if bps >= 1_000_000_000 {
        (bps as f64 / 1e9, "Gbit/s")
    } else if bps >= 1_000_000 {
        (bps as f64 / 1e6, "Mbit/s")
    } else {
        (bps as f64 / 1e3, "Kbit/s")
    };
    format!("{} {unit}", trim(v))
}

/// `1.25 GB`, `64 KB`: decimal, as document 002 writes the BDP.
pub fn bytes(n: u64) -> String {
    let (v, unit) = match n {
        n if n >= 1_000_000_000 => (n as f64 / 1e9, "GB"),
        n if n >= 1_000_000 => (n as f64 / 1e6, "MB"),
        n if n >= 1_000 => (n as f64 / 1e3, "KB"),
        n => (n as f64, "B"),
    };
    format!("{} {unit}", trim(v))
}

/// `100 ms`, `250 us`, `1.5 s`.
pub fn duration(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 1e6 {
        format!("{} s", trim(us / 1e6))
    } else if us >= 1e3 {
        format!("{} ms", trim(us / 1e3))
    } else {
        format!("{} us", trim(us))
    }
}

/// Three significant figures without trailing zeros.
fn trim(v: f64) -> String {
    let s = if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!(parse_rate("100G").unwrap(), 100_000_000_000);
        assert_eq!(parse_rate("40Gbit").unwrap(), 40_000_000_000);
        assert_eq!(parse_rate("2.5g").unwrap(), 2_500_000_000);
        assert_eq!(parse_rate("400Mbps").unwrap(), 400_000_000);
        assert_eq!(parse_rate("1000000").unwrap(), 1_000_000);
        for bad in ["", "G", "fast", "-1G", "0", "5000T", "1e400"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rtts() {
        assert_eq!(parse_rtt("100ms").unwrap(), Duration::from_millis(100));
        assert_eq!(parse_rtt("0.25s").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_rtt("80us").unwrap(), Duration::from_micros(80));
        assert!(parse_rtt("100").unwrap_err().contains("no unit"));
        for bad in ["ms", "-5ms", "0ms", "11s", "fast ms"] {
            assert!(parse_rtt(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn document_002s_bdp() {
        // 100 Gbit/s x 100 ms = 1,250,000,000 bytes.
        let bdp = bdp_bytes(100_000_000_000, Duration::from_millis(100));
        assert_eq!(bdp, 1_250_000_000);
        assert_eq!(bytes(bdp), "1.25 GB");
        assert_eq!(rate(100_000_000_000), "100 Gbit/s");
        assert_eq!(rate(2_500_000_000), "2.5 Gbit/s");
        assert_eq!(duration(Duration::from_micros(52)), "52 us");
        assert_eq!(duration(Duration::from_millis(100)), "100 ms");
    }
}
