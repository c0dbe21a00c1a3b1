//! The answers that change an export: `PUT` of a file (into zcp's part file beside the target,
//! checked against the digests the client sent, synced, and only then renamed into place),
//! `MKCOL` and `DELETE`. Nothing a failed or refused request wrote ever takes a name: the part
//! file is removed when the request ends without its rename.

use std::io::Read;
use std::os::fd::AsFd;
use std::sync::Arc;

use zcp_engine::fs::{self as efs, EntryKind, PartFile, RemoveGuide, Removed, Root};
use zcp_session::Permission;

use crate::conn::{Conn, IO_TIMEOUT};
use crate::digest::{self, Algo, Expected, Summer};
use crate::files::Body;
use crate::handle::{Answer, Authed};
use crate::request::Head;
use crate::token::Activity;

/// Bytes read from the connection at a time.
const PIECE: usize = 1 << 20;

/// Where a write points: the export's root, the identity's permission, the directory
/// components and the last name.
pub(crate) struct Target<'h> {
    root: Arc<Root>,
    perm: Permission,
    parents: &'h [Vec<u8>],
    name: &'h [u8],
}

/// The export and name a write request points at, once the token allows `activity` there
/// and the identity may write the export; never the export itself, never a reserved name.
pub(crate) fn target<'h>(
    head: &'h Head,
    a: &Authed,
    activity: Activity,
) -> Result<Target<'h>, Answer> {
    let (root, perm, inside) = crate::files::granted(head, a, activity)?;
    if !perm.writes() {
        return Err(Answer::refuse(
            403,
            format!("{} may only read this export", a.identity),
        ));
    }
    let Some((name, parents)) = inside.split_last() else {
        return Err(Answer::refuse(
            405,
            "the export itself cannot be written or removed",
        ));
    };
    if efs::is_reserved_name(name) {
        return Err(Answer::refuse(
            403,
            "names of the form .zcp-*.part/.journal/.link are zcp's own",
        ));
    }
    Ok(Target {
        root,
        perm,
        parents,
        name,
    })
}

/// `PUT`: the body (exactly `Content-Length` bytes, read from `buf` then `conn`) into a part
/// file, every digest the client sent checked, synced and renamed over the target; 201 for
/// a new file, 204 for one replaced. A refusal before the body is read closes the connection.
pub(crate) fn put(conn: &mut Conn, buf: &mut Vec<u8>, head: &Head, a: &Authed) -> Answer {
    let t = match target(head, a, Activity::Upload) {
        Ok(t) => t,
        Err(answer) => return answer.close_now(),
    };
    if head.header("transfer-encoding").is_some() {
        return Answer::refuse(411, "send the file with Content-Length, not chunked").close_now();
    }
    let Some(len) = head
        .header("content-length")
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return Answer::refuse(411, "a PUT needs Content-Length").close_now();
    };
    let expected = match Expected::from_headers(
        head.header("repr-digest"),
        head.header("content-digest"),
        head.header("digest"),
    ) {
        Ok(e) => e,
        Err(e) => return Answer::refuse(400, e.0).close_now(),
    };
    let dir = match t.root.open_dir(t.parents, false) {
        Ok(d) => Arc::new(d),
        Err(_) => {
            return Answer::refuse(409, "the parent directory does not exist (MKCOL it first)")
                .close_now();
        }
    };
    let existed = match efs::entry_kind(&*dir, t.name) {
        Ok(EntryKind::Missing) => false,
        Ok(EntryKind::File) => true,
        Ok(_) => {
            return Answer::refuse(409, "the name is taken by a directory or a link").close_now();
        }
        Err(e) => return Answer::refuse(500, e.to_string()).close_now(),
    };
    if existed && head.header("if-none-match") == Some("*") {
        return Answer::refuse(412, "the file exists (If-None-Match: *)").close_now();
    }
    let key = efs::part_key(t.name);
    let mut part = match PartFile::open(dir.clone(), &key) {
        Ok((p, _)) => p,
        Err(e) => {
            return Answer::refuse(409, format!("another transfer is writing this file ({e})"))
                .close_now();
        }
    };
    if let Err(e) = part.reset().and_then(|()| part.preallocate(len)) {
        return Answer::refuse(507, format!("no room for {len} bytes: {e}")).close_now();
    }
    if head
        .header("expect")
        .is_some_and(|e| e.eq_ignore_ascii_case("100-continue"))
    {
        use std::io::Write;
        if conn.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").is_err() || conn.flush().is_err() {
            return Answer::refuse(400, "the connection failed").close_now();
        }
    }
    let algos: Vec<Algo> = expected
        .0
        .iter()
        .map(|(a, _)| *a)
        .chain([Algo::Adler32])
        .collect();
    let mut sums = Summer::new(&algos);
    if let Err(why) = receive(conn, buf, &part, len, &mut sums) {
        // The part file goes when dropped: nothing takes the name.
        return Answer::refuse(400, why).close_now();
    }
    let got = sums.finish();
    if let Some((algo, want, have)) = digest::mismatch(&expected, &got) {
        return Answer::refuse(
            412,
            format!(
                "the {} of what arrived is {}, not {} as the request said: nothing was stored",
                algo.legacy_name(),
                algo.legacy_value(have),
                algo.legacy_value(want)
            ),
        );
    }
    // The sums go with the file (its final size and mtime guard them), before the rename.
    if let Ok(meta) = efs::stat_fd(part.fd()) {
        crate::files::keep_sums_fd(part.fd(), &meta, &got);
    }
    let stored = (part.sync())
        .and_then(|()| part.rename_to(t.name))
        .and_then(|()| efs::fsync_dir(&*dir));
    if let Err(e) = stored {
        return Answer::refuse(500, format!("the file could not be stored: {e}"));
    }
    let digest_header: Vec<String> = got
        .iter()
        .map(|(a, v)| format!("{}={}", a.legacy_name(), a.legacy_value(v)))
        .collect();
    let status = if existed { 204 } else { 201 };
    let mut answer = Answer::new(status, Body::Empty).header("Digest", digest_header.join(","));
    answer.received = len;
    answer
}

/// Reads `len` body bytes into `part` and `sums`.
fn receive(
    conn: &mut Conn,
    buf: &mut Vec<u8>,
    part: &PartFile,
    len: u64,
    sums: &mut Summer,
) -> Result<(), String> {
    conn.tcp()
        .set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut piece = vec![0u8; PIECE];
    let mut at = 0u64;
    while at < len {
        let want = usize::try_from(len - at).unwrap_or(PIECE).min(PIECE);
        let n = if buf.is_empty() {
            match conn.read(&mut piece[..want]) {
                Ok(0) => return Err(format!("the body ended after {at} of {len} bytes")),
                Ok(n) => n,
                Err(e) => return Err(format!("the body stopped after {at} of {len} bytes: {e}")),
            }
        } else {
            let n = buf.len().min(want);
            piece[..n].copy_from_slice(&buf[..n]);
            buf.drain(..n);
            n
        };
        zcp_engine::recv::pwrite_all(part.fd(), &piece[..n], at).map_err(|e| e.to_string())?;
        sums.update(&piece[..n]);
        at += n as u64;
    }
    Ok(())
}

/// `MKCOL`: one directory, in a parent that exists; 201, or 405 where the name is taken.
pub(crate) fn mkcol(head: &Head, a: &Authed) -> Answer {
    let t = match target(head, a, Activity::Manage) {
        Ok(t) => t,
        Err(answer) => return answer,
    };
    let Ok(dir) = t.root.open_dir(t.parents, false) else {
        return Answer::refuse(409, "the parent directory does not exist");
    };
    match efs::entry_kind(&dir, t.name) {
        Ok(EntryKind::Missing) => {}
        Ok(_) => return Answer::refuse(405, "the name is taken"),
        Err(e) => return Answer::refuse(500, e.to_string()),
    }
    let mut all = t.parents.to_vec();
    all.push(t.name.to_vec());
    match t
        .root
        .open_dir(&all, true)
        .and_then(|_| efs::fsync_dir(&dir))
    {
        Ok(()) => Answer::new(201, Body::Empty),
        Err(e) => Answer::refuse(409, e.to_string()),
    }
}

/// Removes everything; stops at nothing.
struct All;

impl RemoveGuide for All {
    fn keep(&mut self, _path: &[u8], _dir: bool) -> bool {
        false
    }
    fn go_on(&mut self) -> bool {
        true
    }
}

/// `DELETE`: a file, a symlink (never followed) or a directory with all it holds, for an
/// identity with `read-write-delete`; 204.
pub(crate) fn delete(head: &Head, a: &Authed) -> Answer {
    let t = match target(head, a, Activity::Delete) {
        Ok(t) => t,
        Err(answer) => return answer,
    };
    if !t.perm.deletes() {
        return Answer::refuse(403, format!("{} may not delete here", a.identity));
    }
    let Ok(dir) = t.root.open_dir(t.parents, false) else {
        return Answer::refuse(404, "not found");
    };
    match efs::entry_kind(&dir, t.name) {
        Ok(EntryKind::Missing) => return Answer::refuse(404, "not found"),
        Ok(_) => {}
        Err(e) => return Answer::refuse(500, e.to_string()),
    }
    match efs::remove_entry(dir.as_fd(), t.name, &mut All, false)
        .and_then(|r: Removed| efs::fsync_dir(&dir).map(|()| r))
    {
        Ok(_) => Answer::new(204, Body::Empty),
        Err(e) => Answer::refuse(500, format!("not all was removed: {e}")),
    }
}
