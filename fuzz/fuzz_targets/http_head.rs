//! Any bytes as an HTTP request head for `zcp serve`'s HTTPS face: never panics; a head is
//! complete only within the size and header bounds; every path component it yields is a plain
//! name (not empty, `.` or `..`, no `/` or NUL, at most 255 bytes), so no request path can
//! leave an export; a `Range` against any size gives a range inside the file or a refusal.
#![no_main]

use libfuzzer_sys::fuzz_target;
use zcp_http::request::{MAX_HEAD, MAX_HEADERS, Parsed, decode_path, parse, range};

fn plain(components: &[Vec<u8>]) {
    for c in components {
        assert!(!c.is_empty() && c.as_slice() != b"." && c.as_slice() != b"..");
        assert!(!c.contains(&b'/') && !c.contains(&0) && c.len() <= 255, "{c:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    match parse(data) {
        Ok(Parsed::Done(h)) => {
            assert!(h.len <= data.len() && h.len <= MAX_HEAD);
            assert!(h.headers.len() <= MAX_HEADERS);
            plain(&h.components);
            let _ = (h.keep_alive(), h.body_len(), h.bearer(), h.path_text());
            let size = u64::from_le_bytes(std::array::from_fn(|i| *data.get(i).unwrap_or(&0)));
            for s in [0, 1, 4096, size] {
                if let Ok(Some(r)) = range(h.header("range"), s) {
                    assert!(r.start < r.end && r.end <= s, "{r:?} of {s}");
                }
            }
        }
        Ok(Parsed::Partial) => assert!(data.len() < MAX_HEAD),
        Err(r) => assert!([400, 431].contains(&r.status), "{r:?}"),
    }
    if let Ok(text) = std::str::from_utf8(data)
        && let Ok(c) = decode_path(text)
    {
        plain(&c);
    }
});
