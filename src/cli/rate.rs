//! `--limit-rate RATE`: a cap in bits per second, written as iperf3's `-b` takes it.

use zcp_wire::{MAX_RATE, MIN_RATE};

/// Parses `500M`, `2G`, `1.5G`, `750000`: bits per second, with the decimal suffixes K, M, G
/// and T (powers of 1000, either case). Refuses 0, garbage, and caps outside what a session
/// may ask for ([`MIN_RATE`]..=[`MAX_RATE`]), saying what to write instead.
pub(crate) fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let examples = "examples: 500M, 2G, 1.5G (bits per second; K, M, G, T are powers of 1000)";
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') || num.matches('.').count() > 1
    {
        return Err(format!("'{s}' is not a rate ({examples})"));
    }
    let scale: u64 = match unit {
        "" => 1,
        "k" | "K" => 1_000,
        "m" | "M" => 1_000_000,
        "g" | "G" => 1_000_000_000,
        "t" | "T" => 1_000_000_000_000,
        u if u.to_ascii_lowercase().contains('b') || u.contains('/') => {
            return Err(format!(
                "'{s}': give bits per second with a bare suffix ({examples}); for 100 megabytes \
                 per second write 800M"
            ));
        }
        _ => return Err(format!("'{s}' has an unknown unit '{unit}' ({examples})")),
    };
    // Exact for whole numbers; a fraction is rounded to the nearest bit per second.
    let (whole, frac) = num.split_once('.').unwrap_or((num, ""));
    let whole: u64 = whole
        .parse()
        .map_err(|_| format!("'{s}' is too large (at most 10T)"))?;
    let mut bits = whole.checked_mul(scale);
    if !frac.is_empty() {
        let f: f64 = format!("0.{frac}")
            .parse()
            .map_err(|_| format!("'{s}' is not a rate"))?;
        bits = bits.map(|b| b.saturating_add((f * scale as f64).round() as u64));
    }
    let bits = bits.ok_or_else(|| format!("'{s}' is too large (at most 10T)"))?;
    if bits == 0 {
        return Err(format!(
            "'{s}' would send nothing; give a cap such as 500M, or leave --limit-rate out for none"
        ));
    }
    if bits < MIN_RATE {
        return Err(format!(
            "'{s}' is {bits} bit/s, below the smallest cap zcp holds ({}K)",
            MIN_RATE / 1000
        ));
    }
    if bits > MAX_RATE {
        return Err(format!(
            "'{s}' is above the largest cap zcp takes ({}T)",
            MAX_RATE / 1_000_000_000_000
        ));
    }
    Ok(bits)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_bits_per_second_with_decimal_suffixes() {
        assert_eq!(parse_rate("500M"), Ok(500_000_000));
        assert_eq!(parse_rate("2G"), Ok(2_000_000_000));
        assert_eq!(parse_rate("2g"), Ok(2_000_000_000));
        assert_eq!(parse_rate("1.5G"), Ok(1_500_000_000));
        assert_eq!(parse_rate("0.5G"), Ok(500_000_000));
        assert_eq!(parse_rate("100k"), Ok(100_000));
        assert_eq!(parse_rate("750000"), Ok(750_000));
        assert_eq!(parse_rate(" 10T "), Ok(10_000_000_000_000));
        assert_eq!(parse_rate("2.000000001G"), Ok(2_000_000_001));
    }

    #[test]
    fn nonsense_zero_and_absurd_rates_say_what_to_write() {
        let err = |s: &str| parse_rate(s).unwrap_err();
        assert!(err("0").contains("would send nothing"));
        assert!(err("0M").contains("would send nothing"));
        assert!(err("0.0G").contains("would send nothing"));
        assert!(err("fast").contains("not a rate"), "{}", err("fast"));
        assert!(err("").contains("not a rate"));
        assert!(err("1.2.3G").contains("not a rate"));
        assert!(err("5.G").contains("not a rate"));
        assert!(err("-5M").contains("not a rate"));
        assert!(err("5X").contains("unknown unit"));
        assert!(err("5Mi").contains("unknown unit"));
        assert!(err("100MB").contains("800M"));
        assert!(err("100Mbit").contains("bare suffix"));
        assert!(err("1Mb/s").contains("bare suffix"));
        assert!(err("50K").contains("below the smallest cap"));
        assert!(err("99999").contains("below the smallest cap"));
        assert!(err("11T").contains("above the largest cap"));
        assert!(err("18446744073709551615").contains("above the largest cap"));
        assert!(err("18446744073709551616").contains("too large"));
        assert!(err("99999999999T").contains("too large"));
    }
}
