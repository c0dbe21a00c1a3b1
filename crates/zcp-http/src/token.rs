//! Bearer tokens for the HTTP face, macaroon-style: an identity, a random id and a list of
//! caveats (path prefix, activities, expiry), each caveat chained into an HMAC-SHA256 whose
//! first key is derived from the identity's pre-shared key ([`zcp_wire::http_token_key`]).
//!
//! Anyone holding a token can narrow it (append a caveat and chain the signature on); nobody
//! can widen it, since a caveat cannot be taken out without the signature that came before it.
//! Rotating an identity's key revokes every token made from it. Nothing here reads a clock or
//! a random source: `now` and the id come from the caller.
//!
//! The text form is `zcp1.` + hex(body) + `.` + hex(signature), the body being lines: `id
//! IDENTITY`, `nonce HEX`, then one caveat a line (`path /export/prefix`, `activity A,B`,
//! `before UNIX-SECONDS`).

use hmac::{Hmac, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

const PREFIX: &str = "zcp1.";
/// The longest token text accepted (a flood of caveats is not a token).
pub const MAX_TOKEN: usize = 4096;

/// What a request does, as WLCG/dCache macaroons name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Activity {
    /// Read a file's bytes.
    Download,
    /// Write a file.
    Upload,
    /// List a directory.
    List,
    /// Remove a file or directory.
    Delete,
    /// Make directories, narrow tokens.
    Manage,
    /// Read size, time and checksums.
    ReadMetadata,
    /// Change metadata.
    UpdateMetadata,
}

impl Activity {
    /// Every activity.
    pub const ALL: [Activity; 7] = [
        Activity::Download,
        Activity::Upload,
        Activity::List,
        Activity::Delete,
        Activity::Manage,
        Activity::ReadMetadata,
        Activity::UpdateMetadata,
    ];

    /// Its name in a token and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Activity::Download => "DOWNLOAD",
            Activity::Upload => "UPLOAD",
            Activity::List => "LIST",
            Activity::Delete => "DELETE",
            Activity::Manage => "MANAGE",
            Activity::ReadMetadata => "READ_METADATA",
            Activity::UpdateMetadata => "UPDATE_METADATA",
        }
    }

    /// The activity named `s` (case-insensitive).
    pub fn parse(s: &str) -> Option<Activity> {
        Activity::ALL
            .into_iter()
            .find(|a| a.name().eq_ignore_ascii_case(s.trim()))
    }
}

/// One restriction a token carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caveat {
    /// Only this path and what lies beneath it (`/` + components, no trailing `/`; `/` alone
    /// is everything).
    Path(String),
    /// Only these activities.
    Activities(Vec<Activity>),
    /// Only before this time (Unix seconds).
    Before(u64),
}

impl Caveat {
    fn line(&self) -> String {
        match self {
            Caveat::Path(p) => format!("path {p}"),
            Caveat::Activities(a) => {
                let names: Vec<&str> = a.iter().map(|a| a.name()).collect();
                format!("activity {}", names.join(","))
            }
            Caveat::Before(t) => format!("before {t}"),
        }
    }

    fn parse(line: &str) -> Result<Caveat, TokenError> {
        let bad = || TokenError::Malformed("a caveat it does not know");
        let (kind, value) = line.split_once(' ').ok_or_else(bad)?;
        match kind {
            "path" => Ok(Caveat::Path(normalize_prefix(value).ok_or_else(bad)?)),
            "activity" => {
                let acts: Option<Vec<Activity>> = value.split(',').map(Activity::parse).collect();
                Ok(Caveat::Activities(acts.ok_or_else(bad)?))
            }
            "before" => Ok(Caveat::Before(value.parse().map_err(|_| bad())?)),
            _ => Err(bad()),
        }
    }
}

/// A path prefix in its one spelling: `/`, or `/a/b` (no `.`, `..`, empty component, NUL or
/// newline). `None` when it cannot be one.
pub fn normalize_prefix(p: &str) -> Option<String> {
    if !p.starts_with('/') || p.contains(['\0', '\n', '\r']) {
        return None;
    }
    let mut out = String::new();
    for c in p.split('/').filter(|c| !c.is_empty()) {
        if c == "." || c == ".." {
            return None;
        }
        out.push('/');
        out.push_str(c);
    }
    if out.is_empty() {
        out.push('/');
    }
    Some(out)
}

/// Why a token was refused. The HTTP answer is 401 for all of them.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not a token this server makes.
    #[error("the token is malformed ({0})")]
    Malformed(&'static str),
    /// Its identity is not configured (or no longer).
    #[error("the token names an identity this server does not know")]
    UnknownIdentity,
    /// The signature does not match: tampered, or made with another key.
    #[error("the token's signature does not match (tampered, or its key was rotated)")]
    BadSignature,
    /// Past its `before` caveat.
    #[error("the token expired")]
    Expired,
}

/// A token, parsed (not yet verified).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    /// The identity it speaks for.
    pub identity: String,
    nonce: [u8; 16],
    /// Its caveats, in order.
    pub caveats: Vec<Caveat>,
    sig: [u8; 32],
}

fn chain(key: &[u8], data: &str) -> [u8; 32] {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    m.update(data.as_bytes());
    m.finalize().into_bytes().into()
}

impl Token {
    /// A new token for `identity`, signed with its key `key` ([`zcp_wire::http_token_key`]).
    pub fn mint(key: &[u8; 32], identity: &str, nonce: [u8; 16], caveats: Vec<Caveat>) -> Token {
        let mut t = Token {
            identity: identity.to_string(),
            nonce,
            caveats: Vec::new(),
            sig: chain(key, &Token::head(identity, &nonce)),
        };
        for c in caveats {
            t.narrow(c);
        }
        t
    }

    fn head(identity: &str, nonce: &[u8; 16]) -> String {
        format!("id {identity}\nnonce {}", hex::encode(nonce))
    }

    /// Adds a caveat (anyone holding the token can; it only ever takes rights away).
    pub fn narrow(&mut self, c: Caveat) {
        self.sig = chain(&self.sig, &c.line());
        self.caveats.push(c);
    }

    /// The text form.
    pub fn encode(&self) -> String {
        let mut body = Token::head(&self.identity, &self.nonce);
        for c in &self.caveats {
            body.push('\n');
            body.push_str(&c.line());
        }
        format!("{PREFIX}{}.{}", hex::encode(body), hex::encode(self.sig))
    }

    /// Parses the text form; the signature is checked by [`Token::verify`].
    pub fn decode(text: &str) -> Result<Token, TokenError> {
        if text.len() > MAX_TOKEN {
            return Err(TokenError::Malformed("too long"));
        }
        let rest = text
            .strip_prefix(PREFIX)
            .ok_or(TokenError::Malformed("not a zcp token"))?;
        let (body, sig) = rest
            .split_once('.')
            .ok_or(TokenError::Malformed("no signature"))?;
        let body = hex::decode(body).map_err(|_| TokenError::Malformed("not hexadecimal"))?;
        let body = String::from_utf8(body).map_err(|_| TokenError::Malformed("not UTF-8"))?;
        let mut s = [0u8; 32];
        hex::decode_to_slice(sig, &mut s).map_err(|_| TokenError::Malformed("bad signature"))?;
        let mut lines = body.split('\n');
        let identity = lines
            .next()
            .and_then(|l| l.strip_prefix("id "))
            .filter(|i| !i.is_empty())
            .ok_or(TokenError::Malformed("no identity"))?;
        let mut nonce = [0u8; 16];
        lines
            .next()
            .and_then(|l| l.strip_prefix("nonce "))
            .and_then(|n| hex::decode_to_slice(n, &mut nonce).ok())
            .ok_or(TokenError::Malformed("no nonce"))?;
        let caveats = lines.map(Caveat::parse).collect::<Result<Vec<_>, _>>()?;
        Ok(Token {
            identity: identity.to_string(),
            nonce,
            caveats,
            sig: s,
        })
    }

    /// Checks the signature against `key` (in constant time) and the expiry against `now`.
    pub fn verify(&self, key: &[u8; 32], now: u64) -> Result<(), TokenError> {
        let mut steps = vec![Token::head(&self.identity, &self.nonce)];
        steps.extend(self.caveats.iter().map(Caveat::line));
        let last = steps.pop().expect("the head is always there");
        let mut k = *key;
        for s in &steps {
            k = chain(&k, s);
        }
        let mut m = HmacSha256::new_from_slice(&k).expect("HMAC takes keys of any length");
        m.update(last.as_bytes());
        m.verify_slice(&self.sig)
            .map_err(|_| TokenError::BadSignature)?;
        if self
            .caveats
            .iter()
            .any(|c| matches!(c, Caveat::Before(t) if now >= *t))
        {
            return Err(TokenError::Expired);
        }
        Ok(())
    }

    /// Whether every caveat allows `activity` on `path` (`/` and the raw bytes of each
    /// component, as [`crate::request::path_bytes`] joins them). Paths are compared as bytes,
    /// so a caveat matches only the names it spells. A request that only reads metadata passes
    /// any activity caveat that allows something: whoever may move a file may see it.
    pub fn allows(&self, path: &[u8], activity: Activity) -> bool {
        self.caveats.iter().all(|c| match c {
            Caveat::Path(p) => under(path, p.as_bytes()),
            Caveat::Activities(a) => {
                a.contains(&activity) || (activity == Activity::ReadMetadata && !a.is_empty())
            }
            Caveat::Before(_) => true,
        })
    }

    /// Whether every caveat allows exactly `activity` on `path`, with no activity standing in
    /// for another (what a file's checksums need: `DOWNLOAD` or `READ_METADATA` itself).
    pub fn grants(&self, path: &[u8], activity: Activity) -> bool {
        self.caveats.iter().all(|c| match c {
            Caveat::Path(p) => under(path, p.as_bytes()),
            Caveat::Activities(a) => a.contains(&activity),
            Caveat::Before(_) => true,
        })
    }

    /// The earliest expiry among its caveats.
    pub fn expiry(&self) -> Option<u64> {
        (self.caveats.iter())
            .filter_map(|c| match c {
                Caveat::Before(t) => Some(*t),
                _ => None,
            })
            .min()
    }
}

/// Whether `path` is `prefix` or lies beneath it.
pub fn under(path: &[u8], prefix: &[u8]) -> bool {
    prefix == b"/"
        || path == prefix
        || (path.starts_with(prefix) && path.get(prefix.len()) == Some(&b'/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: [u8; 32] = [7; 32];

    fn token() -> Token {
        Token::mint(
            &KEY,
            "observatory",
            [1; 16],
            vec![
                Caveat::Path("/data/run1".into()),
                Caveat::Activities(vec![Activity::Download, Activity::List]),
                Caveat::Before(1000),
            ],
        )
    }

    #[test]
    fn a_token_round_trips_and_verifies() {
        let t = token();
        let back = Token::decode(&t.encode()).unwrap();
        assert_eq!(back, t);
        back.verify(&KEY, 999).unwrap();
        assert_eq!(back.verify(&KEY, 1000), Err(TokenError::Expired));
        assert_eq!(back.verify(&[8; 32], 0), Err(TokenError::BadSignature));
        let bare = Token::mint(&KEY, "x", [2; 16], vec![]);
        Token::decode(&bare.encode())
            .unwrap()
            .verify(&KEY, 0)
            .unwrap();
    }

    #[test]
    fn a_caveat_cannot_be_removed_or_changed() {
        let t = token();
        let mut wider = t.clone();
        wider.caveats.pop();
        assert_eq!(wider.verify(&KEY, 0), Err(TokenError::BadSignature));
        let mut moved = t.clone();
        moved.caveats[0] = Caveat::Path("/data".into());
        assert_eq!(moved.verify(&KEY, 0), Err(TokenError::BadSignature));
        let mut other = t.clone();
        other.identity = "admin".into();
        assert_eq!(other.verify(&KEY, 0), Err(TokenError::BadSignature));
        // One flipped hex digit anywhere in the text.
        let text = t.encode();
        for i in PREFIX.len()..text.len() {
            let mut b = text.clone().into_bytes();
            if b[i] == b'.' {
                continue;
            }
            b[i] = if b[i] == b'0' { b'1' } else { b'0' };
            let flipped = String::from_utf8(b).unwrap();
            assert!(
                Token::decode(&flipped)
                    .and_then(|t| t.verify(&KEY, 0))
                    .is_err(),
                "flip at {i} accepted"
            );
        }
    }

    #[test]
    fn narrowing_keeps_the_signature_valid_and_only_narrows() {
        let mut t = token();
        t.narrow(Caveat::Activities(vec![Activity::List]));
        t.verify(&KEY, 0).unwrap();
        assert!(t.allows(b"/data/run1/a", Activity::List));
        assert!(!t.allows(b"/data/run1/a", Activity::Download));
        // A second path caveat can only narrow: both must hold.
        t.narrow(Caveat::Path("/data".into()));
        assert!(!t.allows(b"/data/run2", Activity::List));
    }

    #[test]
    fn paths_match_whole_components() {
        let t = token();
        assert!(t.allows(b"/data/run1", Activity::Download));
        assert!(t.allows(b"/data/run1/x/y", Activity::Download));
        assert!(!t.allows(b"/data/run10", Activity::Download));
        assert!(!t.allows(b"/data", Activity::Download));
        assert!(!t.allows(b"/data/run1/x", Activity::Upload));
        assert!(t.allows(b"/data/run1/x", Activity::ReadMetadata));
        assert!(under(b"/anything", b"/"));
        // A caveat spelling U+FFFD matches only that spelling, not other bytes shown so.
        let odd = Token::mint(&KEY, "x", [3; 16], vec![Caveat::Path("/d/\u{fffd}".into())]);
        assert!(!odd.allows(b"/d/\xfe/h", Activity::Download));
        assert!(odd.allows("/d/\u{fffd}/h".as_bytes(), Activity::Download));
    }

    #[test]
    fn prefixes_have_one_spelling() {
        assert_eq!(normalize_prefix("/a//b/").as_deref(), Some("/a/b"));
        assert_eq!(normalize_prefix("/").as_deref(), Some("/"));
        assert_eq!(normalize_prefix("a/b"), None);
        assert_eq!(normalize_prefix("/a/../b"), None);
        assert_eq!(normalize_prefix("/a\nbefore 9"), None);
    }

    #[test]
    fn malformed_texts_are_refused() {
        for text in [
            "",
            "zcp1.",
            "zcp1.zz.00",
            "Bearer x",
            &format!("zcp1.{}.{}", hex::encode("id a\nnonce 00"), "00".repeat(32)),
            &format!(
                "zcp1.{}.{}",
                hex::encode(format!("id a\nnonce {}\nscope all", "00".repeat(16))),
                "00".repeat(32)
            ),
        ] {
            assert!(
                matches!(Token::decode(text), Err(TokenError::Malformed(_))),
                "{text}"
            );
        }
        assert!(Token::decode(&"a".repeat(MAX_TOKEN + 1)).is_err());
    }
}
