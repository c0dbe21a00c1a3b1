//! Destination paths from the network, validated before anything touches a filesystem.
//!
//! A [`RelPath`] is a list of components, each a non-empty byte string without `/` or NUL, never
//! `.` or `..`. Bytes need not be UTF-8: Linux names are bytes, and zcp keeps them exact. This
//! module only checks the *shape*; the receiver still resolves every component beneath its root
//! with `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS)`, so a symlink placed on the receiver
//! cannot lead outside either.

use crate::message::{MAX_NAME, MAX_PATH};

/// Why a path from the network was refused.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum PathError {
    /// No bytes at all.
    #[error("the destination path is empty; give a path relative to the server root, or '.'")]
    Empty,
    /// Starts with `/`.
    #[error("the destination path {0} is absolute; give a path relative to the server root")]
    Absolute(String),
    /// Has a `..` component.
    #[error("the destination path {0} has a '..' component; paths may not leave the server root")]
    ParentDir(String),
    /// Has a NUL byte.
    #[error("the destination path {0} contains a NUL byte")]
    Nul(String),
    /// Longer than `PATH_MAX`.
    #[error("the destination path is {0} bytes, over the limit of {MAX_PATH}")]
    TooLong(usize),
    /// A component longer than `NAME_MAX`.
    #[error("a component of the destination path is {0} bytes, over the limit of {MAX_NAME}")]
    NameTooLong(usize),
    /// A file name that is not one plain component.
    #[error("the file name {0} is not a single plain name")]
    BadName(String),
}

/// A validated path relative to the receiver's root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelPath {
    components: Vec<Vec<u8>>,
    trailing_slash: bool,
}

impl RelPath {
    /// Validates raw bytes from the network. `.` components and repeated slashes are dropped;
    /// `.` alone is the root itself.
    pub fn parse(raw: &[u8]) -> Result<RelPath, PathError> {
        if raw.is_empty() {
            return Err(PathError::Empty);
        }
        if raw.len() > MAX_PATH {
            return Err(PathError::TooLong(raw.len()));
        }
        if raw.contains(&0) {
            return Err(PathError::Nul(escape(raw)));
        }
        if raw[0] == b'/' {
            return Err(PathError::Absolute(escape(raw)));
        }
        let mut components = Vec::new();
        for c in raw.split(|b| *b == b'/') {
            match c {
                b"" | b"." => {}
                b".." => return Err(PathError::ParentDir(escape(raw))),
                c if c.len() > MAX_NAME => return Err(PathError::NameTooLong(c.len())),
                c => components.push(c.to_vec()),
            }
        }
        Ok(RelPath {
            components,
            trailing_slash: raw.ends_with(b"/") || raw.ends_with(b"/.") || raw == b".",
        })
    }

    /// Validates a single file name (the source's last component).
    pub fn check_name(name: &[u8]) -> Result<(), PathError> {
        if name.is_empty()
            || name == b"."
            || name == b".."
            || name.contains(&b'/')
            || name.contains(&0)
        {
            return Err(PathError::BadName(escape(name)));
        }
        if name.len() > MAX_NAME {
            return Err(PathError::NameTooLong(name.len()));
        }
        Ok(())
    }

    /// The components, in order. Empty for the root.
    pub fn components(&self) -> &[Vec<u8>] {
        &self.components
    }

    /// Whether the path names a directory by its spelling (`dir/`, `.`, `dir/.`).
    pub fn names_directory(&self) -> bool {
        self.trailing_slash || self.components.is_empty()
    }

    /// This path with one more component, already checked with [`RelPath::check_name`].
    pub fn join(&self, name: &[u8]) -> Result<RelPath, PathError> {
        Self::check_name(name)?;
        let mut components = self.components.clone();
        components.push(name.to_vec());
        let joined = RelPath {
            components,
            trailing_slash: false,
        };
        let len = joined.to_bytes().len();
        if len > MAX_PATH {
            return Err(PathError::TooLong(len));
        }
        Ok(joined)
    }

    /// The path as bytes, components joined by `/`; `.` for the root.
    pub fn to_bytes(&self) -> Vec<u8> {
        if self.components.is_empty() {
            return b".".to_vec();
        }
        self.components.join(&b'/')
    }
}

impl std::fmt::Display for RelPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&escape(&self.to_bytes()))
    }
}

/// A character that must not reach a terminal or a log raw: control characters (ESC, BEL,
/// CR, newline, DEL, the C1 range) and the bidirectional overrides.
fn unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Shows raw name bytes to a person: valid UTF-8 as is, except control characters and
/// invalid bytes, which are escaped (`\n`, `\xff`), and the whole quoted when it holds
/// anything escaped or a space, so the exact bytes can always be read back.
pub fn escape(raw: &[u8]) -> String {
    let mut out = String::new();
    let mut quoted = false;
    for chunk in raw.utf8_chunks() {
        for ch in chunk.valid().chars() {
            if unsafe_char(ch) || ch == '\\' || ch == '\'' {
                quoted = true;
                out.extend(ch.escape_default());
            } else {
                quoted |= ch == ' ';
                out.push(ch);
            }
        }
        for b in chunk.invalid() {
            quoted = true;
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    if quoted { format!("'{out}'") } else { out }
}

/// Makes text safe to print or log: control characters (ESC, BEL, CR, newline, DEL, the C1
/// range) and the bidirectional overrides are escaped (`\u{1b}`, `\r`, `\n`, `\u{202e}`);
/// everything else is kept, so text escaped once passes unchanged a second time. Every text
/// that came from the network goes through this (or [`escape`] for names) before it reaches a
/// terminal or a log line, so a peer can neither drive the terminal nor forge lines.
pub fn escape_text(text: &str) -> String {
    if !text.chars().any(unsafe_char) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len() + 8);
    for ch in text.chars() {
        if unsafe_char(ch) {
            out.extend(ch.escape_default());
        } else {
            out.push(ch);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_relative_paths_exactly() {
        let p = RelPath::parse(b"a//b/./c\xff").unwrap();
        assert_eq!(
            p.components(),
            &[b"a".to_vec(), b"b".to_vec(), b"c\xff".to_vec()]
        );
        assert!(!p.names_directory());
        assert!(RelPath::parse(b"dir/").unwrap().names_directory());
        let root = RelPath::parse(b".").unwrap();
        assert!(root.components().is_empty() && root.names_directory());
        assert_eq!(root.join(b"f").unwrap().to_bytes(), b"f");
        assert_eq!(RelPath::parse(b"-rf").unwrap().to_bytes(), b"-rf");
        assert!(RelPath::parse(&[b'x'; 255]).is_ok());
    }

    #[test]
    fn refuses_every_escape() {
        assert_eq!(RelPath::parse(b""), Err(PathError::Empty));
        assert!(matches!(
            RelPath::parse(b"/etc/passwd"),
            Err(PathError::Absolute(_))
        ));
        assert!(matches!(
            RelPath::parse(b"a/../../x"),
            Err(PathError::ParentDir(_))
        ));
        assert!(matches!(
            RelPath::parse(b".."),
            Err(PathError::ParentDir(_))
        ));
        assert!(matches!(RelPath::parse(b"a\0b"), Err(PathError::Nul(_))));
        assert_eq!(
            RelPath::parse(&[b'x'; 256]),
            Err(PathError::NameTooLong(256))
        );
        assert_eq!(
            RelPath::parse(&[b'a'; MAX_PATH + 1]),
            Err(PathError::TooLong(MAX_PATH + 1))
        );
        for bad in [&b""[..], b".", b"..", b"a/b", b"a\0"] {
            assert!(RelPath::check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn escape_keeps_bytes_readable() {
        assert_eq!(escape(b"plain.txt"), "plain.txt");
        assert_eq!(escape("ünï".as_bytes()), "ünï");
        assert_eq!(escape(b"a b"), "'a b'");
        assert_eq!(escape(b"new\nline"), "'new\\nline'");
        assert_eq!(escape(b"bad\xff"), "'bad\\xff'");
        // The bidirectional overrides, as in escape_text: a name cannot reorder what follows.
        assert_eq!(
            escape("evil\u{202e}txt.exe".as_bytes()),
            "'evil\\u{202e}txt.exe'"
        );
    }

    #[test]
    fn escape_text_leaves_no_control_character() {
        assert_eq!(escape_text("plain text, ünï"), "plain text, ünï");
        let evil = "ok\x1b[2J\x07\rzcp: session 00 finished\nnext\u{9b}31m\u{7f}";
        let safe = escape_text(evil);
        assert!(!safe.chars().any(char::is_control), "{safe:?}");
        assert_eq!(
            safe,
            "ok\\u{1b}[2J\\u{7}\\rzcp: session 00 finished\\nnext\\u{9b}31m\\u{7f}"
        );
        assert_eq!(escape_text(&safe), safe, "escaping twice changes nothing");
        assert_eq!(escape_text("name\u{202e}txt.exe"), "name\\u{202e}txt.exe");
    }
}
