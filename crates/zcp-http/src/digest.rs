//! Checksums a client sends with a `PUT` or asks for: RFC 9530's `Repr-Digest` and
//! `Content-Digest` (`sha-256=:BASE64:`, `adler=:BASE64:`, ...) and RFC 3230's legacy
//! `Digest` (`adler32=8 hex digits`, `crc32c=8 hex digits`, `sha-256=BASE64`, `md5=BASE64`),
//! which gfal2, davix and XRootD use. Pure: headers in, sums out.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use sha2::Digest as _;

/// A checksum algorithm served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Algo {
    /// Adler-32 (WLCG's usual one).
    Adler32,
    /// CRC-32C (Castagnoli).
    Crc32c,
    /// SHA-256.
    Sha256,
    /// MD5.
    Md5,
}

impl Algo {
    /// The sum's length in bytes.
    pub fn sum_len(self) -> usize {
        match self {
            Algo::Adler32 | Algo::Crc32c => 4,
            Algo::Md5 => 16,
            Algo::Sha256 => 32,
        }
    }

    /// The name in a legacy `Digest` header.
    pub fn legacy_name(self) -> &'static str {
        match self {
            Algo::Adler32 => "adler32",
            Algo::Crc32c => "crc32c",
            Algo::Sha256 => "sha-256",
            Algo::Md5 => "md5",
        }
    }

    /// The name in RFC 9530 headers.
    pub fn rfc9530_name(self) -> &'static str {
        match self {
            Algo::Adler32 => "adler",
            Algo::Crc32c => "crc32c",
            Algo::Sha256 => "sha-256",
            Algo::Md5 => "md5",
        }
    }

    fn parse(name: &str) -> Option<Algo> {
        match name.trim().to_ascii_lowercase().as_str() {
            "adler32" | "adler" => Some(Algo::Adler32),
            "crc32c" => Some(Algo::Crc32c),
            "sha-256" | "sha256" => Some(Algo::Sha256),
            "md5" => Some(Algo::Md5),
            _ => None,
        }
    }

    /// The legacy `Digest` form of `sum`: 8 hex digits (leading zeros kept) for the 32-bit
    /// sums, base64 for the others.
    pub fn legacy_value(self, sum: &[u8]) -> String {
        match self {
            Algo::Adler32 | Algo::Crc32c => hex::encode(sum),
            Algo::Sha256 | Algo::Md5 => B64.encode(sum),
        }
    }
}

/// Sums a client expects, from whichever headers gave them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expected(pub Vec<(Algo, Vec<u8>)>);

/// Why a digest header was refused (400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadDigest(pub String);

impl Expected {
    /// The sums of `Repr-Digest`, `Content-Digest` (RFC 9530) and `Digest` (RFC 3230), each
    /// given as the header's value. Algorithms this server does not compute are ignored, as
    /// both RFCs allow; a value it cannot read is an error. Two different values for one
    /// algorithm are an error too.
    pub fn from_headers(
        repr: Option<&str>,
        content: Option<&str>,
        legacy: Option<&str>,
    ) -> Result<Expected, BadDigest> {
        let mut out: Vec<(Algo, Vec<u8>)> = Vec::new();
        let mut add = |a: Algo, v: Vec<u8>| -> Result<(), BadDigest> {
            let want = if matches!(a, Algo::Adler32 | Algo::Crc32c) {
                4
            } else if a == Algo::Md5 {
                16
            } else {
                32
            };
            if v.len() != want {
                return Err(BadDigest(format!(
                    "a {} digest is {want} bytes, not {}",
                    a.legacy_name(),
                    v.len()
                )));
            }
            match out.iter().find(|(b, _)| *b == a) {
                Some((_, old)) if *old != v => Err(BadDigest(format!(
                    "two different {} digests given",
                    a.legacy_name()
                ))),
                Some(_) => Ok(()),
                None => {
                    out.push((a, v));
                    Ok(())
                }
            }
        };
        for header in [repr, content].into_iter().flatten() {
            for item in header.split(',').filter(|i| !i.trim().is_empty()) {
                let (name, value) = item
                    .split_once('=')
                    .ok_or_else(|| BadDigest(format!("'{}' is not NAME=:BASE64:", item.trim())))?;
                let Some(a) = Algo::parse(name) else { continue };
                let v = value
                    .trim()
                    .strip_prefix(':')
                    .and_then(|v| v.strip_suffix(':'))
                    .and_then(|v| B64.decode(v).ok())
                    .ok_or_else(|| BadDigest(format!("the {name} value is not :BASE64:")))?;
                add(a, v)?;
            }
        }
        if let Some(header) = legacy {
            for item in header.split(',').filter(|i| !i.trim().is_empty()) {
                let (name, value) = item
                    .split_once('=')
                    .ok_or_else(|| BadDigest(format!("'{}' is not NAME=VALUE", item.trim())))?;
                let Some(a) = Algo::parse(name) else { continue };
                let value = value.trim();
                let v = match a {
                    Algo::Adler32 | Algo::Crc32c => hex::decode(value).ok(),
                    Algo::Sha256 | Algo::Md5 => B64.decode(value).ok(),
                }
                .ok_or_else(|| BadDigest(format!("the {name} value '{value}' cannot be read")))?;
                add(a, v)?;
            }
        }
        Ok(Expected(out))
    }
}

/// The sums of a body as it streams through.
pub struct Summer {
    adler: Option<adler2::Adler32>,
    crc: Option<u32>,
    sha: Option<sha2::Sha256>,
    md5: Option<md5::Md5>,
}

impl std::fmt::Debug for Summer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Summer")
    }
}

impl Summer {
    /// Sums `algos` (and nothing else: each costs a pass of CPU).
    pub fn new(algos: &[Algo]) -> Summer {
        let has = |a| algos.contains(&a);
        Summer {
            adler: has(Algo::Adler32).then(adler2::Adler32::new),
            crc: has(Algo::Crc32c).then_some(0),
            sha: has(Algo::Sha256).then(sha2::Sha256::new),
            md5: has(Algo::Md5).then(md5::Md5::new),
        }
    }

    /// Adds bytes.
    pub fn update(&mut self, b: &[u8]) {
        if let Some(a) = &mut self.adler {
            a.write_slice(b);
        }
        if let Some(c) = &mut self.crc {
            *c = crc32c::crc32c_append(*c, b);
        }
        if let Some(s) = &mut self.sha {
            s.update(b);
        }
        if let Some(m) = &mut self.md5 {
            m.update(b);
        }
    }

    /// The sums, in [`Algo`] order.
    pub fn finish(self) -> Vec<(Algo, Vec<u8>)> {
        let mut out = Vec::new();
        if let Some(a) = self.adler {
            out.push((Algo::Adler32, a.checksum().to_be_bytes().to_vec()));
        }
        if let Some(c) = self.crc {
            out.push((Algo::Crc32c, c.to_be_bytes().to_vec()));
        }
        if let Some(s) = self.sha {
            out.push((Algo::Sha256, s.finalize().to_vec()));
        }
        if let Some(m) = self.md5 {
            out.push((Algo::Md5, m.finalize().to_vec()));
        }
        out
    }
}

/// The first expected sum that `got` contradicts: (algorithm, expected, got).
pub fn mismatch<'a>(
    expected: &'a Expected,
    got: &'a [(Algo, Vec<u8>)],
) -> Option<(Algo, &'a [u8], &'a [u8])> {
    expected.0.iter().find_map(|(a, want)| {
        let (_, have) = got.iter().find(|(b, _)| b == a)?;
        (have != want).then_some((*a, want.as_slice(), have.as_slice()))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sums(data: &[u8]) -> Vec<(Algo, Vec<u8>)> {
        let mut s = Summer::new(&[Algo::Adler32, Algo::Crc32c, Algo::Sha256, Algo::Md5]);
        for part in data.chunks(3) {
            s.update(part);
        }
        s.finish()
    }

    #[test]
    fn known_values() {
        let got = sums(b"Wikipedia");
        assert_eq!(hex::encode(&got[0].1), "11e60398");
        let got = sums(b"123456789");
        assert_eq!(hex::encode(&got[1].1), "e3069283");
        assert_eq!(
            hex::encode(&got[2].1),
            "15e2b0d3c33891ebb0f1ef609ec419420c20e320ce94c65fbc8c3312448eb225"
        );
        assert_eq!(hex::encode(&got[3].1), "25f9e794323b453885f5181f1b624d0b");
        // Leading zeros are kept: adler32 of "" is 00000001.
        let empty = sums(b"");
        assert_eq!(Algo::Adler32.legacy_value(&empty[0].1), "00000001");
    }

    #[test]
    fn headers_parse_and_mismatches_are_found() {
        let got = sums(b"123456789");
        let sha = B64.encode(&got[2].1);
        let e = Expected::from_headers(
            Some(&format!("sha-256=:{sha}:, unixsum=:AAA=:")),
            None,
            Some("ADLER32=091e01de, crc32c=e3069283"),
        )
        .unwrap();
        assert_eq!(e.0.len(), 3);
        assert_eq!(mismatch(&e, &got), None);
        let wrong = Expected::from_headers(None, None, Some("adler32=091e01df")).unwrap();
        assert_eq!(mismatch(&wrong, &got).map(|m| m.0), Some(Algo::Adler32));
        for bad in [
            (None, Some("adler32=xyz")),
            (None, Some("adler32=091e01de, adler32=00000001")),
            (Some("sha-256=abc"), None),
            (Some("sha-256=:AAAA:"), None),
            (None, Some("md5")),
        ] {
            assert!(
                Expected::from_headers(bad.0, None, bad.1).is_err(),
                "{bad:?}"
            );
        }
        assert_eq!(
            Expected::from_headers(None, None, Some("sha-512=abc")).unwrap(),
            Expected::default()
        );
    }
}

/// The algorithms a `Want-Digest` (RFC 3230: `adler32, md5;q=0.5`) or `Want-Repr-Digest`
/// (RFC 9530: `adler=3, sha-256=10`) header asks for and this server computes, each once; a
/// preference of 0 means "not this one".
pub fn wanted(want_digest: Option<&str>, want_repr: Option<&str>) -> (Vec<Algo>, Vec<Algo>) {
    let legacy = want_digest.map_or_else(Vec::new, |h| {
        pick(h, |item| {
            let mut parts = item.split(';');
            let name = parts.next()?;
            let q_zero = parts.any(|p| {
                p.trim()
                    .strip_prefix("q=")
                    .and_then(|q| q.trim().parse::<f32>().ok())
                    == Some(0.0)
            });
            (!q_zero).then_some(name)
        })
    });
    let repr = want_repr.map_or_else(Vec::new, |h| {
        pick(h, |item| {
            let (name, pref) = item.split_once('=').unwrap_or((item, "1"));
            (pref.trim() != "0").then_some(name)
        })
    });
    (legacy, repr)
}

fn pick<'a>(header: &'a str, name: impl Fn(&'a str) -> Option<&'a str>) -> Vec<Algo> {
    let mut out = Vec::new();
    for a in header
        .split(',')
        .filter_map(|i| name(i.trim()))
        .filter_map(Algo::parse)
    {
        if !out.contains(&a) {
            out.push(a);
        }
    }
    out
}

/// The RFC 9530 form of `sum`: `:BASE64:`.
pub fn rfc9530_value(sum: &[u8]) -> String {
    format!(":{}:", B64.encode(sum))
}

#[cfg(test)]
mod wanted_tests {
    use super::*;

    #[test]
    fn wanted_algorithms() {
        assert_eq!(
            wanted(Some("ADLER32, md5;q=0.3, sha;q=1, crc32c;q=0"), None),
            (vec![Algo::Adler32, Algo::Md5], vec![])
        );
        assert_eq!(
            wanted(None, Some("adler=3, sha-256=10, sha-512=1, md5=0")),
            (vec![], vec![Algo::Adler32, Algo::Sha256])
        );
        assert_eq!(
            wanted(Some("adler32, adler32"), None).0,
            vec![Algo::Adler32]
        );
        assert_eq!(rfc9530_value(&[0, 0, 0, 1]), ":AAAAAQ==:");
    }
}
