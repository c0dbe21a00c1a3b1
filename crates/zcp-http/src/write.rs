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
/// A PUT's body must bring at least this much in every [`RATE_WINDOW`].
const MIN_RATE: u64 = 1 << 20;
const RATE_WINDOW: std::time::Duration = std::time::Duration::from_secs(30);

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
    if head.components.is_empty() {
        return Err(Answer::refuse(
            405,
            "name an export and a path in it: /EXPORT/PATH",
        ));
    }
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
/// a new file, 204 for one replaced (201 either way for a write-only identity, which learns
/// nothing of what is there). A refusal before the body is read closes the connection.
pub(crate) fn put(conn: &mut Conn, buf: &mut Vec<u8>, head: &Head, a: &Authed) -> Answer {
    match put_checked(head, a) {
        Ok(p) => put_body(conn, buf, head, p),
        Err(answer) => answer.close_now(),
    }
}

/// A PUT that passed every check made before its body is read.
struct Checked<'h> {
    t: Target<'h>,
    len: u64,
    expected: Expected,
    dir: Arc<std::os::fd::OwnedFd>,
    existed: bool,
    part: PartFile,
}

fn put_checked<'h>(head: &'h Head, a: &Authed) -> Result<Checked<'h>, Answer> {
    let t = target(head, a, Activity::Upload)?;
    let len = head
        .body_len()
        .map_err(|r| Answer::refuse(r.status, r.why))?;
    if head.has_header("content-range") {
        return Err(Answer::refuse(
            400,
            "a PUT replaces the whole file: Content-Range is not accepted (RFC 9110)",
        ));
    }
    let digest_header = |name: &str| {
        head.header_all(name)
            .map_err(|r| Answer::refuse(400, r.why))
    };
    let expected = Expected::from_headers(
        digest_header("repr-digest")?.as_deref(),
        digest_header("content-digest")?.as_deref(),
        digest_header("digest")?.as_deref(),
    )
    .map_err(|e| Answer::refuse(400, e.0))?;
    let blind = !t.perm.reads();
    let conditional = head.has_header("if-none-match") || head.has_header("if-match");
    if blind && conditional {
        return Err(Answer::refuse(
            403,
            "a write-only identity cannot make a PUT conditional on what is there",
        ));
    }
    // A write-only identity's parents are made as a native push makes them: whether they
    // were there is not its to know.
    let dir = t
        .root
        .open_dir(t.parents, blind)
        .map(Arc::new)
        .map_err(|_| Answer::refuse(409, "the parent directory does not exist (MKCOL it first)"))?;
    let existed = match efs::entry_kind(&*dir, t.name) {
        Ok(EntryKind::Missing) => false,
        Ok(EntryKind::File) => true,
        Ok(_) => {
            return Err(Answer::refuse(
                409,
                "the name is taken by a directory or a link",
            ));
        }
        Err(e) => return Err(Answer::refuse(500, e.to_string())),
    };
    if existed && head.header("if-none-match") == Some("*") {
        return Err(Answer::refuse(412, "the file exists (If-None-Match: *)"));
    }
    if head.has_header("if-match") {
        return Err(Answer::refuse(412, "If-Match is not supported here"));
    }
    let free = efs::fs_info(&*dir)
        .map(|i| i.free_bytes)
        .unwrap_or(u64::MAX);
    if len > free {
        return Err(Answer::refuse(
            507,
            format!("no room for {len} bytes ({free} free)"),
        ));
    }
    let part = match PartFile::open(dir.clone(), &efs::part_key(t.name)) {
        Ok((p, _)) => p,
        Err(e) => {
            return Err(Answer::refuse(
                423,
                format!("another transfer is writing this file ({e})"),
            )
            .header("Retry-After", "5"));
        }
    };
    Ok(Checked {
        t,
        len,
        expected,
        dir,
        existed,
        part,
    })
}

fn put_body(conn: &mut Conn, buf: &mut Vec<u8>, head: &Head, p: Checked<'_>) -> Answer {
    let Checked {
        t,
        len,
        expected,
        dir,
        existed,
        mut part,
    } = p;
    // Space is taken as the bytes come, not reserved ahead: a token holder who announces a
    // large body and sends nothing holds no disk.
    if let Err(e) = part.reset() {
        return Answer::refuse(500, e.to_string()).close_now();
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
    // Readable as files made by a native transfer are (0644 before the umask the server runs
    // under); the sums go with the file, guarded by its final size and mtime.
    if let Ok(meta) = efs::stat_fd(part.fd()) {
        let _ = efs::set_mode_and_mtime(part.fd(), 0o644, meta.mtime);
        crate::files::keep_sums_fd(part.fd(), &meta, &got);
    }
    let no_clobber = head.header("if-none-match") == Some("*");
    let stored = part.sync().and_then(|()| {
        if no_clobber {
            part.rename_to_new(t.name)
        } else {
            part.rename_to(t.name).map(|()| true)
        }
    });
    match stored.and_then(|renamed| efs::fsync_dir(&*dir).map(|()| renamed)) {
        Ok(true) => {}
        Ok(false) => return Answer::refuse(412, "the file appeared meanwhile (If-None-Match: *)"),
        Err(e) => return Answer::refuse(500, format!("the file could not be stored: {e}")),
    }
    let digest_header: Vec<String> = got
        .iter()
        .map(|(a, v)| format!("{}={}", a.legacy_name(), a.legacy_value(v)))
        .collect();
    let status = if existed && t.perm.reads() { 204 } else { 201 };
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
    // A body must keep coming: at least MIN_RATE bytes in every RATE_WINDOW (or the rest).
    let (mut window, mut window_start) = (std::time::Instant::now(), 0u64);
    while at < len {
        if window.elapsed() >= RATE_WINDOW {
            if at - window_start < MIN_RATE.min(len - window_start) {
                return Err(format!(
                    "the body came too slowly ({} bytes in {} s; at least {MIN_RATE} are needed)",
                    at - window_start,
                    RATE_WINDOW.as_secs()
                ));
            }
            (window, window_start) = (std::time::Instant::now(), at);
        }
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
    // A write-only identity learns nothing of what is there: its directories are made with
    // their parents, as a native push makes them, and one already there is made again.
    let blind = !t.perm.reads();
    let Ok(dir) = t.root.open_dir(t.parents, blind) else {
        return Answer::refuse(409, "the parent directory does not exist");
    };
    match efs::entry_kind(&dir, t.name) {
        Ok(EntryKind::Missing) => {}
        Ok(EntryKind::Dir) if blind => return Answer::new(201, Body::Empty),
        Ok(_) if blind => return Answer::refuse(409, "the name cannot be made a directory"),
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

/// Removes everything but zcp's own part files, journals and links: those of a transfer
/// still running must not go from under it (`zcp clean` removes the stale ones).
struct All;

impl RemoveGuide for All {
    fn keep(&mut self, path: &[u8], _dir: bool) -> bool {
        let name = path.rsplit(|b| *b == b'/').next().unwrap_or(path);
        efs::is_reserved_name(name)
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
        Ok(r) if r.kept > 0 => Answer::refuse(
            409,
            format!(
                "{} of zcp's part files are in it (a transfer may be running; `zcp clean` removes stale ones): the rest was removed",
                r.kept
            ),
        ),
        Ok(_) => Answer::new(204, Body::Empty),
        Err(e) => Answer::refuse(500, format!("not all was removed: {e}")),
    }
}
