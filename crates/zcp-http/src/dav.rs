//! WebDAV answers: a `PROPFIND` multistatus body (RFC 4918) and the headers that describe a
//! file (`Last-Modified`, `ETag`). Pure functions of names and metadata.

use std::time::{Duration, UNIX_EPOCH};

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_encode};

/// Bytes left as they are in an `href`: unreserved characters (RFC 3986) and the `/`
/// between components; everything else is `%XX`, so the XML needs no further escaping.
const HREF: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// What a `PROPFIND` reports of one entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Its path's components from the top of the URL space (export name first, when named).
    pub components: Vec<Vec<u8>>,
    /// A directory.
    pub dir: bool,
    /// Size in bytes (files).
    pub size: u64,
    /// Modification time.
    pub mtime: (i64, u32),
}

/// The `href` of `components`: `/a/b`, `/a/b/` for a directory, each component
/// percent-encoded.
pub fn href(components: &[Vec<u8>], dir: bool) -> String {
    let mut s = String::new();
    for c in components {
        s.push('/');
        s.extend(percent_encode(c, HREF));
    }
    if dir || components.is_empty() {
        s.push('/');
    }
    s
}

/// An HTTP date (RFC 9110's IMF-fixdate) for `mtime`; times before 1970 are the epoch.
pub fn http_date(mtime: (i64, u32)) -> String {
    let secs = u64::try_from(mtime.0).unwrap_or(0);
    httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(secs))
}

/// An entity tag that changes when the file's size or mtime does.
pub fn etag(size: u64, mtime: (i64, u32)) -> String {
    format!("\"{size:x}-{:x}.{:x}\"", mtime.0, mtime.1)
}

/// The start of a `207 Multi-Status` body.
pub const MULTISTATUS_START: &str =
    "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:multistatus xmlns:D=\"DAV:\">\n";
/// Its end.
pub const MULTISTATUS_END: &str = "</D:multistatus>\n";

/// One entry's `<D:response>` at `href` (already encoded, as [`href`] makes it).
pub fn response(href: &str, dir: bool, size: u64, mtime: (i64, u32)) -> String {
    let mut x = format!("<D:response><D:href>{href}</D:href><D:propstat><D:prop>");
    if dir {
        x.push_str("<D:resourcetype><D:collection/></D:resourcetype>");
    } else {
        x.push_str(&format!(
            "<D:resourcetype/><D:getcontentlength>{size}</D:getcontentlength><D:getetag>{}</D:getetag>",
            etag(size, mtime)
        ));
    }
    x.push_str(&format!(
        "<D:getlastmodified>{}</D:getlastmodified></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>\n",
        http_date(mtime)
    ));
    x
}

/// The href of `name` inside the directory whose href is `dir_href` (ending in `/`).
pub fn child_href(dir_href: &str, name: &[u8], dir: bool) -> String {
    let mut s = String::from(dir_href);
    s.extend(percent_encode(name, HREF));
    if dir {
        s.push('/');
    }
    s
}

/// The whole `207 Multi-Status` body for `entries` (the first is the one asked for).
pub fn multistatus(entries: &[Entry]) -> String {
    let mut x = String::from(MULTISTATUS_START);
    for e in entries {
        x.push_str(&response(
            &href(&e.components, e.dir),
            e.dir,
            e.size,
            e.mtime,
        ));
    }
    x.push_str(MULTISTATUS_END);
    x
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hrefs_escape_everything_but_plain_names() {
        let c = vec![b"data".to_vec(), b"a b<&>\"'/x\xff".to_vec()];
        assert_eq!(href(&c, false), "/data/a%20b%3C%26%3E%22%27%2Fx%FF");
        assert_eq!(href(&c[..1], true), "/data/");
        assert_eq!(href(&[], false), "/");
    }

    #[test]
    fn a_multistatus_lists_files_and_collections() {
        let x = multistatus(&[
            Entry {
                components: vec![b"d".to_vec()],
                dir: true,
                size: 4096,
                mtime: (0, 0),
            },
            Entry {
                components: vec![b"d".to_vec(), b"f".to_vec()],
                dir: false,
                size: 12,
                mtime: (1_700_000_000, 5),
            },
        ]);
        assert!(
            x.contains("<D:href>/d/</D:href><D:propstat><D:prop><D:resourcetype><D:collection/>")
        );
        assert!(x.contains("<D:getcontentlength>12</D:getcontentlength>"));
        assert!(x.contains("Tue, 14 Nov 2023 22:13:20 GMT"));
        assert!(x.contains("Thu, 01 Jan 1970 00:00:00 GMT"));
        assert_eq!(x.matches("<D:response>").count(), 2);
    }
}
