//! The answers that read an export: `GET` and `HEAD` of a file (one range at most),
//! `PROPFIND` of a file or directory, and a narrower token for an authenticated caller.
//!
//! A name is resolved beneath the export's root descriptor one component at a time without
//! following a symlink; a symlink, a device, a FIFO and zcp's own part files are "not found",
//! the same answer as a name that is not there.

use std::os::fd::{AsFd, OwnedFd};

use zcp_engine::fs::{self as efs, EntryKind, Meta, Root};
use zcp_session::Permission;

use crate::dav::{self, Entry};
use crate::digest::{self, Algo, Summer};
use crate::handle::{Answer, Authed, activity_of, now_unix};
use crate::request::{self, Head, Method};
use crate::token::{Activity, Caveat, Token};

/// The longest life a narrowed token may be given.
const MAX_VALIDITY: u64 = 7 * 24 * 3600;

/// An answer's body.
pub(crate) enum Body {
    Empty,
    Bytes(Vec<u8>),
    /// Bytes `start..end` of an open file.
    File {
        fd: OwnedFd,
        start: u64,
        end: u64,
    },
    /// A directory's listing, written chunked as it is read.
    Listing(Box<Listing>),
}

impl Body {
    /// Its length, where it is known before it is written.
    pub(crate) fn len(&self) -> Option<u64> {
        match self {
            Body::Empty => Some(0),
            Body::Bytes(b) => Some(b.len() as u64),
            Body::File { start, end, .. } => Some(end - start),
            Body::Listing(_) => None,
        }
    }
}

/// What a path names once resolved.
enum Found {
    Dir(OwnedFd),
    File(OwnedFd, Meta),
}

/// `GET`, `HEAD` and `PROPFIND`.
pub(crate) fn read_side(head: &Head, a: &Authed) -> Answer {
    let named = a.snapshot.named();
    if named && head.components.is_empty() {
        return top(head, a);
    }
    let (root, perm, inside) = match granted(head, a, activity_of(head)) {
        Ok(g) => g,
        Err(answer) => return answer,
    };
    if !perm.reads() {
        return Answer::refuse(403, format!("{} may only write here", a.identity));
    }
    let found = match resolve(&root, inside) {
        Ok(f) => f,
        Err(answer) => return answer,
    };
    match (head.method, found) {
        (Method::Propfind, found) => propfind(head, a, found),
        (_, Found::File(fd, meta)) => {
            // Checksums say much about a small file: only for who may read it or was given
            // its metadata by name; and only an identity that may write keeps them with it.
            let path = head.path_bytes();
            let sums_ok = a.token.grants(&path, Activity::Download)
                || a.token.grants(&path, Activity::ReadMetadata);
            get_file(head, fd, &meta, sums_ok, perm.writes())
        }
        (_, Found::Dir(_)) => Answer::refuse(
            403,
            "this is a directory: PROPFIND lists it, GET reads files",
        ),
    }
}

/// Where a request points: an export, what the identity may do there, and the path inside.
type Place<'h> = (std::sync::Arc<Root>, Permission, &'h [Vec<u8>]);

/// The export, permission and path inside it that `head` names, once the token allows
/// `activity` there.
pub(crate) fn granted<'h>(
    head: &'h Head,
    a: &Authed,
    activity: Activity,
) -> Result<Place<'h>, Answer> {
    if !a.token.allows(&head.path_bytes(), activity) {
        return Err(Answer::refuse(
            403,
            format!("the token does not allow {} on this path", activity.name()),
        ));
    }
    let (export, inside) = if a.snapshot.named() {
        (
            String::from_utf8_lossy(&head.components[0]).into_owned(),
            &head.components[1..],
        )
    } else {
        (String::new(), &head.components[..])
    };
    let Some((root, perm)) = a.snapshot.export_for(&a.identity, &export) else {
        return Err(Answer::refuse(404, "no such export for this identity"));
    };
    Ok((root, perm, inside))
}

/// Opens what `inside` names beneath `root`.
fn resolve(root: &Root, inside: &[Vec<u8>]) -> Result<Found, Answer> {
    let missing = || Answer::refuse(404, "not found (or not a plain file or directory)");
    let Some((name, parents)) = inside.split_last() else {
        return root
            .open_dir(&[], false)
            .map(Found::Dir)
            .map_err(|_| missing());
    };
    if efs::is_reserved_name(name) {
        return Err(missing());
    }
    let dir = root.open_dir(parents, false).map_err(|_| missing())?;
    match efs::stat_at(&dir, name).map_err(|_| missing())?.kind {
        EntryKind::Dir => root
            .open_dir(inside, false)
            .map(Found::Dir)
            .map_err(|_| missing()),
        EntryKind::File => {
            let fd = efs::open_at(&dir, name).map_err(|_| missing())?;
            // The name may have been replaced between the look and the open: only the
            // descriptor is proof.
            let meta = efs::stat_fd(&fd).map_err(|_| missing())?;
            if meta.kind != EntryKind::File {
                return Err(missing());
            }
            Ok(Found::File(fd, meta))
        }
        _ => Err(missing()),
    }
}

/// `GET` or `HEAD` of a file.
fn get_file(head: &Head, fd: OwnedFd, meta: &Meta, sums_ok: bool, keep: bool) -> Answer {
    let size = meta.size;
    let (status, start, end) = match request::range(head.header("range"), size) {
        Ok(None) => (200, 0, size),
        Ok(Some(r)) => (206, r.start, r.end),
        Err(()) => {
            return Answer::refuse(
                416,
                format!("the range is not within the file's {size} bytes"),
            )
            .header("Content-Range", format!("bytes */{size}"));
        }
    };
    let (legacy, repr) = if sums_ok {
        digest::wanted(head.header("want-digest"), head.header("want-repr-digest"))
    } else {
        (Vec::new(), Vec::new())
    };
    let mut all: Vec<Algo> = legacy.clone();
    all.extend(repr.iter().filter(|a| !legacy.contains(a)));
    let sums = match sums_of(&fd, meta, &all, keep) {
        Ok(s) => s,
        Err(e) => return Answer::refuse(500, format!("the file could not be read: {e}")),
    };
    let header = |algos: &[Algo], value: &dyn Fn(Algo, &[u8]) -> String| -> String {
        (sums.iter())
            .filter(|(a, _)| algos.contains(a))
            .map(|(a, v)| value(*a, v))
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut a = Answer::new(status, Body::File { fd, start, end })
        .header("Content-Type", "application/octet-stream")
        .header("Accept-Ranges", "bytes")
        .header("ETag", dav::etag(size, meta.mtime))
        .header("Last-Modified", dav::http_date(meta.mtime));
    if status == 206 {
        a = a.header("Content-Range", format!("bytes {start}-{}/{size}", end - 1));
    }
    if !legacy.is_empty() {
        a = a.header(
            "Digest",
            header(&legacy, &|al, v| {
                format!("{}={}", al.legacy_name(), al.legacy_value(v))
            }),
        );
    }
    if !repr.is_empty() {
        a = a.header(
            "Repr-Digest",
            header(&repr, &|al, v| {
                format!("{}={}", al.rfc9530_name(), digest::rfc9530_value(v))
            }),
        );
    }
    a
}

/// The extended attribute a file's `algo` sum is kept in, with the size and mtime it was
/// taken at: `user.zcp.adler32` = `SIZE MTIME_S MTIME_NS HEX`.
fn xattr_name(algo: Algo) -> String {
    format!("user.zcp.{}", algo.legacy_name())
}

fn xattr_value(meta: &Meta, sum: &[u8]) -> String {
    format!(
        "{} {} {} {}",
        meta.size,
        meta.mtime.0,
        meta.mtime.1,
        hex::encode(sum)
    )
}

/// Keeps `sums` with the file (best effort: a filesystem without user attributes keeps none).
pub(crate) fn keep_sums_fd(fd: impl AsFd, meta: &Meta, sums: &[(Algo, Vec<u8>)]) {
    for (a, v) in sums {
        let _ = efs::set_xattr(&fd, &xattr_name(*a), xattr_value(meta, v).as_bytes());
    }
}

/// The sums of a whole file: those kept with it while its size and mtime are unchanged, the
/// rest read (and then kept).
fn sums_of(
    fd: &OwnedFd,
    meta: &Meta,
    algos: &[Algo],
    keep: bool,
) -> Result<Vec<(Algo, Vec<u8>)>, String> {
    let mut out = Vec::new();
    let mut missing = Vec::new();
    for &a in algos {
        let kept = efs::get_xattr(fd, &xattr_name(a))
            .and_then(|v| String::from_utf8(v).ok())
            .and_then(|v| {
                let prefix = xattr_value(meta, &[]);
                v.strip_prefix(&prefix).and_then(|h| hex::decode(h).ok())
            })
            .filter(|v| v.len() == a.sum_len());
        match kept {
            Some(v) => out.push((a, v)),
            None => missing.push(a),
        }
    }
    if missing.is_empty() {
        return Ok(out);
    }
    let mut sums = Summer::new(&missing);
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0;
    while at < meta.size {
        let n = usize::try_from(meta.size - at)
            .unwrap_or(buf.len())
            .min(buf.len());
        zcp_engine::udp::read_at(fd.as_fd(), &mut buf[..n], at).map_err(|e| e.to_string())?;
        sums.update(&buf[..n]);
        at += n as u64;
    }
    let read = sums.finish();
    // Kept only if the file did not change while it was read, nor in the last two seconds
    // (a write in the same clock tick as the mtime would not show), and only for an identity
    // that may write the file.
    let settled = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .is_ok_and(|now| now.as_secs() as i64 > meta.mtime.0 + 2);
    if keep
        && settled
        && efs::stat_fd(fd).is_ok_and(|m| m.size == meta.size && m.mtime == meta.mtime)
    {
        keep_sums_fd(fd, meta, &read);
    }
    out.extend(read);
    Ok(out)
}

/// `PROPFIND` of what was found: itself, and with depth 1 a directory's entries.
fn propfind(head: &Head, a: &Authed, found: Found) -> Answer {
    let depth = head.header("depth").unwrap_or("1");
    if depth != "0" && depth != "1" {
        return Answer::refuse(403, "PROPFIND answers depth 0 or 1, not infinity");
    }
    let here = head.components.clone();
    let (dir, meta) = match found {
        Found::File(_, meta) => return multistatus(&[entry(here, &meta)]),
        Found::Dir(dir) => match efs::stat_fd(&dir) {
            Ok(m) => (dir, m),
            Err(e) => return Answer::refuse(500, e.to_string()),
        },
    };
    if depth == "0" {
        return multistatus(&[entry(here, &meta)]);
    }
    // Depth 1: streamed as the directory is read, so a directory of any size costs the
    // server one piece of XML at a time.
    let base_href = dav::href(&here, true);
    let mut first = String::from(dav::MULTISTATUS_START);
    first.push_str(&dav::response(&base_href, true, meta.size, meta.mtime));
    let listing = Listing {
        dir,
        first,
        base_href,
        base_path: head.path_bytes(),
        token: a.token.clone(),
    };
    Answer::new(207, Body::Listing(Box::new(listing)))
        .header("Content-Type", "application/xml; charset=utf-8")
}

/// A depth-1 `PROPFIND` body still to be written: the directory, its own entry already
/// rendered, and what each child's href and caveat check start from.
pub(crate) struct Listing {
    dir: OwnedFd,
    first: String,
    base_href: String,
    base_path: Vec<u8>,
    token: Token,
}

/// Bytes of XML gathered before each piece is written.
const LISTING_PIECE: usize = 64 * 1024;

impl Listing {
    /// Writes the body in pieces through `emit`: the files and directories in the directory
    /// (never symlinks, devices or part files), those the token reaches. An error reading
    /// the directory ends the body unfinished, so the client cannot take it for whole.
    pub(crate) fn write(
        &self,
        emit: &mut dyn FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        let mut piece = self.first.clone();
        let entries = efs::read_dir(&self.dir).map_err(|e| e.to_string())?;
        for name in entries {
            let name = name.map_err(|e| e.to_string())?;
            if efs::is_reserved_name(&name) {
                continue;
            }
            let Ok(meta) = efs::stat_at(&self.dir, &name) else {
                continue;
            };
            let dir = match meta.kind {
                EntryKind::Dir => true,
                EntryKind::File => false,
                _ => continue,
            };
            let mut path = self.base_path.clone();
            if path != b"/" {
                path.push(b'/');
            }
            path.extend_from_slice(&name);
            if !self.token.allows(&path, Activity::ReadMetadata) {
                continue;
            }
            let href = dav::child_href(&self.base_href, &name, dir);
            piece.push_str(&dav::response(&href, dir, meta.size, meta.mtime));
            if piece.len() >= LISTING_PIECE {
                emit(piece.as_bytes())?;
                piece.clear();
            }
        }
        piece.push_str(dav::MULTISTATUS_END);
        emit(piece.as_bytes())
    }
}

fn entry(components: Vec<Vec<u8>>, meta: &Meta) -> Entry {
    Entry {
        components,
        dir: meta.kind == EntryKind::Dir,
        size: meta.size,
        mtime: meta.mtime,
    }
}

fn multistatus(entries: &[Entry]) -> Answer {
    Answer::new(207, Body::Bytes(dav::multistatus(entries).into_bytes()))
        .header("Content-Type", "application/xml; charset=utf-8")
}

/// `/` of a server with named exports: `PROPFIND` lists the identity's exports, anything else
/// is refused.
fn top(head: &Head, a: &Authed) -> Answer {
    if head.method != Method::Propfind {
        return Answer::refuse(404, "name an export: /EXPORT/PATH");
    }
    let mut entries = vec![Entry {
        components: Vec::new(),
        dir: true,
        size: 0,
        mtime: (0, 0),
    }];
    if head.header("depth") != Some("0") {
        for (name, _) in a.snapshot.exports_of(&a.identity) {
            if a.token
                .allows(format!("/{name}").as_bytes(), Activity::ReadMetadata)
            {
                entries.push(Entry {
                    components: vec![name.into_bytes()],
                    dir: true,
                    size: 0,
                    mtime: (0, 0),
                });
            }
        }
    }
    multistatus(&entries)
}

/// `POST` with `Content-Type: application/macaroon-request`: the caller's token narrowed to
/// this path, the activities asked for and the validity asked for (at most a week), as
/// `{"macaroon": TOKEN}`. It can never grant more than the caller's own token.
pub(crate) fn macaroon_request(head: &Head, body: &[u8], a: &Authed) -> Answer {
    let ct = head.header("content-type").unwrap_or_default();
    let media = ct.split(';').next().unwrap_or_default().trim();
    if !media.eq_ignore_ascii_case("application/macaroon-request") {
        return Answer::refuse(
            415,
            "POST here only takes a macaroon request (Content-Type: application/macaroon-request)",
        );
    }
    let Ok(path) = String::from_utf8(head.path_bytes()) else {
        return Answer::refuse(400, "a token can only be narrowed to a path that is UTF-8");
    };
    let req: serde_json::Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(e) => return Answer::refuse(400, format!("the macaroon request is not JSON: {e}")),
    };
    let mut activities = Vec::new();
    for c in (req.get("caveats").and_then(|c| c.as_array()))
        .into_iter()
        .flatten()
    {
        let Some(text) = c.as_str() else {
            return Answer::refuse(400, "each caveat is a string");
        };
        let Some(list) = text.strip_prefix("activity:") else {
            return Answer::refuse(
                400,
                format!(
                    "caveat '{}' is not understood (only activity:A,B)",
                    zcp_wire::escape_text(text)
                ),
            );
        };
        for name in list.split(',') {
            match Activity::parse(name) {
                Some(act) => activities.push(act),
                None => {
                    return Answer::refuse(
                        400,
                        format!("no activity '{}'", zcp_wire::escape_text(name)),
                    );
                }
            }
        }
    }
    let validity = match req.get("validity").and_then(|v| v.as_str()) {
        None => 3600,
        Some(v) => match iso_duration(v) {
            Some(s) => s.min(MAX_VALIDITY),
            None => {
                return Answer::refuse(
                    400,
                    format!(
                        "validity '{}' is not an ISO 8601 duration such as PT30M",
                        zcp_wire::escape_text(v)
                    ),
                );
            }
        },
    };
    // Asking for what the caller's token does not allow here would only make a token that
    // fails later: say so now.
    let path_bytes = head.path_bytes();
    if let Some(missing) = activities
        .iter()
        .find(|act| !a.token.allows(&path_bytes, **act))
    {
        return Answer::refuse(
            403,
            format!("the token does not allow {} on this path", missing.name()),
        );
    }
    let mut t: Token = a.token.clone();
    t.narrow(Caveat::Path(path));
    if !activities.is_empty() {
        t.narrow(Caveat::Activities(activities));
    }
    t.narrow(Caveat::Before(now_unix() + validity));
    let body = serde_json::json!({ "macaroon": t.encode() }).to_string();
    Answer::new(200, Body::Bytes(body.into_bytes())).header("Content-Type", "application/json")
}

/// Seconds in an ISO 8601 duration of days, hours, minutes and seconds (`P1D`, `PT1H30M`,
/// `PT90S`).
pub fn iso_duration(s: &str) -> Option<u64> {
    let rest = s.strip_prefix('P')?;
    let (days, time) = match rest.split_once('T') {
        Some((d, t)) => (d, t),
        None => (rest, ""),
    };
    let mut total: u64 = 0;
    let mut any = false;
    let mut take = |part: &str, units: &[(char, u64)]| -> Option<()> {
        let mut num = String::new();
        for ch in part.chars() {
            if ch.is_ascii_digit() {
                num.push(ch);
                continue;
            }
            let &(_, mult) = units.iter().find(|(u, _)| *u == ch)?;
            let n: u64 = num.parse().ok()?;
            total = total.checked_add(n.checked_mul(mult)?)?;
            num.clear();
            any = true;
        }
        num.is_empty().then_some(())
    };
    take(days, &[('D', 86_400)])?;
    take(time, &[('H', 3600), ('M', 60), ('S', 1)])?;
    any.then_some(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_durations() {
        assert_eq!(iso_duration("PT30M"), Some(1800));
        assert_eq!(iso_duration("P1DT1H"), Some(90_000));
        assert_eq!(iso_duration("PT90S"), Some(90));
        assert_eq!(iso_duration("P"), None);
        assert_eq!(iso_duration("PT"), None);
        assert_eq!(iso_duration("30M"), None);
        assert_eq!(iso_duration("PT5X"), None);
        assert_eq!(iso_duration("PT5"), None);
        assert_eq!(iso_duration("PT99999999999999999999S"), None);
    }
}
