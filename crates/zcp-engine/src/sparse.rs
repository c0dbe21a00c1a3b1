//! Holes: where a file's data is (`SEEK_DATA`/`SEEK_HOLE`), reading a range with its holes as
//! zeros without touching them, and making a range of a file a hole.
//!
//! A sparse source is sent as its data extents ([`data_extents`]); its chunk MACs are still
//! over every logical byte, holes as zeros, hashed here from a static buffer of zeros
//! ([`visit_data`]) rather than by faulting hole pages into the page cache (which, on most
//! filesystems, fills it with zero pages as large as the holes). On the receiver, a chunk's
//! holes are made holes again ([`make_hole`]) before its data lands, so whatever an earlier
//! attempt left there reads as zeros, as the chunk's MAC says it must.

use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{FallocateFlags, SeekFrom};
use rustix::io::Errno;

use crate::EngineError;
use crate::error::retry;

/// A megabyte of zeros: what a hole reads as, fed to hashers and written where a filesystem
/// cannot punch holes.
pub static ZEROS: [u8; 1 << 20] = [0; 1 << 20];

/// Extents start and end on multiples of this (the end of the range excepted): what O_DIRECT
/// needs, and no finer than the block size of the filesystems zcp meets.
pub const EXTENT_ALIGN: u64 = 4096;

/// Holes shorter than this inside a range being hashed are read like data: two `lseek`s cost
/// more than hashing a few zero pages.
const HASH_MIN_HOLE: u64 = 64 << 10;

/// The data extents of bytes `offset..offset+len` of `file`, as absolute `(offset, len)`:
/// ascending and apart, each widened to [`EXTENT_ALIGN`] boundaries (within the range), holes
/// shorter than `min_hole` counted as data, and at most `max` extents (the smallest holes
/// filled first). Holes read as zeros, so the result only decides what need not be read.
/// A filesystem that cannot tell (`lseek` fails with anything but `ENXIO`) has no holes: the
/// whole range is data.
pub fn data_extents(
    file: impl AsFd,
    offset: u64,
    len: u64,
    min_hole: u64,
    max: usize,
) -> Vec<(u64, u64)> {
    let fd = file.as_fd();
    let end = offset.saturating_add(len);
    if len == 0 {
        return Vec::new();
    }
    let whole = vec![(offset, len)];
    let mut found: Vec<(u64, u64)> = Vec::new();
    let mut pos = offset;
    while pos < end {
        let data = match seek(fd, SeekFrom::Data(pos)) {
            Ok(d) => d,
            // No data from `pos` on: the rest of the file is a hole (or the file ends here).
            Err(Errno::NXIO) => break,
            Err(_) => return whole,
        };
        if data >= end {
            break;
        }
        let hole = match seek(fd, SeekFrom::Hole(data)) {
            Ok(h) => h.max(data + 1),
            Err(Errno::NXIO) => end,
            Err(_) => return whole,
        };
        let start = (data / EXTENT_ALIGN * EXTENT_ALIGN).max(offset);
        let stop = hole
            .div_ceil(EXTENT_ALIGN)
            .saturating_mul(EXTENT_ALIGN)
            .min(end);
        match found.last_mut() {
            Some(last) if start <= last.1 || start - last.1 < min_hole => last.1 = last.1.max(stop),
            _ => found.push((start, stop)),
        }
        pos = hole;
    }
    let found = fill_smallest_holes(found, max);
    found.into_iter().map(|(s, e)| (s, e - s)).collect()
}

/// Merges `extents` (as `(start, end)`) across their smallest holes until at most `max` remain.
fn fill_smallest_holes(extents: Vec<(u64, u64)>, max: usize) -> Vec<(u64, u64)> {
    if extents.len() <= max.max(1) {
        return extents;
    }
    let mut holes: Vec<(u64, usize)> = extents
        .windows(2)
        .enumerate()
        .map(|(i, w)| (w[1].0 - w[0].1, i))
        .collect();
    holes.sort_unstable();
    let mut fill = vec![false; extents.len()];
    for &(_, i) in &holes[..extents.len() - max.max(1)] {
        fill[i] = true;
    }
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(max);
    let mut joining = false;
    for (i, e) in extents.into_iter().enumerate() {
        match out.last_mut() {
            Some(last) if joining => last.1 = e.1,
            _ => out.push(e),
        }
        joining = fill[i];
    }
    out
}

fn seek(fd: BorrowedFd<'_>, to: SeekFrom) -> Result<u64, Errno> {
    loop {
        match rustix::fs::seek(fd, to) {
            Err(Errno::INTR) => continue,
            r => return r,
        }
    }
}

/// Feeds `n` zeros to `f`, a megabyte at a time.
pub fn feed_zeros(mut n: u64, mut f: impl FnMut(&[u8])) {
    while n > 0 {
        let k = n.min(ZEROS.len() as u64) as usize;
        f(&ZEROS[..k]);
        n -= k as u64;
    }
}

/// Feeds bytes `offset..offset+len` of `file` to `f`, in order, as
/// [`visit_mapped`](crate::map::visit_mapped) does, but holes as zeros from a static buffer:
/// only the data is mapped. For a sparse file this keeps the holes out of the page cache and
/// hashes them at memory speed. A file shorter than `offset+len` gives
/// [`EngineError::SourceChanged`].
pub fn visit_data(
    file: impl AsFd,
    offset: u64,
    len: u64,
    mut f: impl FnMut(&[u8]),
) -> Result<(), EngineError> {
    let fd = file.as_fd();
    let end = offset
        .checked_add(len)
        .ok_or_else(|| EngineError::Path("range overflows".into()))?;
    let size = rustix::fs::fstat(fd)
        .map_err(|e| EngineError::sys("fstat", "file being hashed", e))?
        .st_size as u64;
    if size < end {
        return Err(EngineError::SourceChanged(format!(
            "the file is {size} bytes, but bytes up to {end} were to be read"
        )));
    }
    let mut pos = offset;
    for (start, n) in data_extents(fd, offset, len, HASH_MIN_HOLE, usize::MAX) {
        feed_zeros(start - pos, &mut f);
        crate::map::visit_mapped(fd, start, n, &mut f)?;
        pos = start + n;
    }
    feed_zeros(end - pos, &mut f);
    Ok(())
}

/// Feeds bytes `offset..offset+len` of `file` to `f`: through [`visit_data`] when the file
/// takes less storage than its size (it has holes), else through
/// [`visit_mapped`](crate::map::visit_mapped). What every hash of a source or target uses.
pub fn visit(
    file: impl AsFd,
    offset: u64,
    len: u64,
    f: impl FnMut(&[u8]),
) -> Result<(), EngineError> {
    let fd = file.as_fd();
    if crate::fs::stat_fd(fd)?.sparse() {
        visit_data(fd, offset, len, f)
    } else {
        crate::map::visit_mapped(fd, offset, len, f)
    }
}

/// Makes bytes `offset..offset+len` of `file` read as zeros without storing them: a punched
/// hole (the file's size is kept). A filesystem that cannot punch holes gets the zeros
/// written instead.
pub fn make_hole(file: BorrowedFd<'_>, offset: u64, len: u64) -> Result<(), EngineError> {
    if len == 0 {
        return Ok(());
    }
    let flags = FallocateFlags::PUNCH_HOLE | FallocateFlags::KEEP_SIZE;
    match retry("fallocate(PUNCH_HOLE)", "destination file", None, || {
        rustix::fs::fallocate(file, flags, offset, len)
    }) {
        Err(EngineError::Sys { source, .. })
            if matches!(
                source.raw_os_error(),
                Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS)
            ) =>
        {
            let mut done = 0;
            while done < len {
                let k = (len - done).min(ZEROS.len() as u64) as usize;
                crate::recv::pwrite_all(file, &ZEROS[..k], offset + done)?;
                done += k as u64;
            }
            Ok(())
        }
        r => r,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{FileExt, MetadataExt};

    const MIB: u64 = 1 << 20;

    /// A 64 MiB file with data at 1 MiB (4 KiB), 10..12 MiB and its last 100 bytes.
    fn sparse_file() -> (std::fs::File, Vec<(u64, Vec<u8>)>) {
        let f = tempfile::tempfile().unwrap();
        f.set_len(64 * MIB).unwrap();
        let writes = vec![
            (MIB, vec![1u8; 4096]),
            (
                10 * MIB,
                (0..2 * MIB).map(|i| (i % 251) as u8 + 1).collect(),
            ),
            (64 * MIB - 100, vec![7u8; 100]),
        ];
        for (off, bytes) in &writes {
            f.write_all_at(bytes, *off).unwrap();
        }
        (f, writes)
    }

    /// Whether this filesystem reports holes at all (tmpfs, ext4, xfs, btrfs do).
    fn has_holes(f: &std::fs::File) -> bool {
        f.metadata().unwrap().blocks() * 512 < f.metadata().unwrap().len()
            && data_extents(f, 0, f.metadata().unwrap().len(), 0, usize::MAX).len() > 1
    }

    #[test]
    fn finds_the_data_and_nothing_else() {
        let (f, _) = sparse_file();
        if !has_holes(&f) {
            eprintln!("this filesystem reports no holes; skipped");
            return;
        }
        let all = data_extents(&f, 0, 64 * MIB, 0, usize::MAX);
        assert_eq!(
            all,
            [(MIB, 4096), (10 * MIB, 2 * MIB), (64 * MIB - 4096, 4096)]
        );
        // A range that starts and ends inside data is clipped to the range.
        assert_eq!(
            data_extents(&f, 11 * MIB, 4 * MIB, 0, usize::MAX),
            [(11 * MIB, MIB)]
        );
        // A range of holes only has no extents.
        assert!(data_extents(&f, 2 * MIB, 8 * MIB, 0, usize::MAX).is_empty());
        // Holes shorter than min_hole are filled; too many extents fill the smallest holes.
        assert_eq!(
            data_extents(&f, 0, 16 * MIB, 9 * MIB, usize::MAX),
            [(MIB, 11 * MIB)]
        );
        assert_eq!(
            data_extents(&f, 0, 64 * MIB, 0, 2),
            [(MIB, 11 * MIB), (64 * MIB - 4096, 4096)]
        );
        assert_eq!(data_extents(&f, 0, 64 * MIB, 0, 1), [(MIB, 63 * MIB)]);
        assert!(data_extents(&f, 5, 0, 0, 8).is_empty());
    }

    #[test]
    fn unaligned_data_is_widened_to_whole_blocks() {
        let f = tempfile::tempfile().unwrap();
        f.set_len(8 * MIB).unwrap();
        f.write_all_at(&[9; 10], 3 * MIB + 5000).unwrap();
        if !has_holes(&f) {
            return;
        }
        let e = data_extents(&f, 0, 8 * MIB, 0, usize::MAX);
        assert_eq!(e.len(), 1);
        let (s, n) = e[0];
        assert!(
            s.is_multiple_of(EXTENT_ALIGN) && n.is_multiple_of(EXTENT_ALIGN),
            "{e:?}"
        );
        assert!(s <= 3 * MIB + 5000 && s + n >= 3 * MIB + 5010, "{e:?}");
    }

    #[test]
    fn a_file_without_seek_data_is_all_data() {
        // A pipe cannot seek: the fallback says everything is data.
        let (r, _w) = rustix::pipe::pipe().unwrap();
        assert_eq!(data_extents(&r, 0, 1000, 0, 8), [(0, 1000)]);
    }

    #[test]
    fn visit_data_reads_holes_as_zeros_and_catches_a_short_file() {
        let (f, writes) = sparse_file();
        let mut want = vec![0u8; (64 * MIB) as usize];
        for (off, bytes) in &writes {
            want[*off as usize..*off as usize + bytes.len()].copy_from_slice(bytes);
        }
        for (off, len) in [(0, 64 * MIB), (MIB - 10, 20_000), (9 * MIB, 5 * MIB + 1)] {
            let mut seen = Vec::new();
            visit_data(&f, off, len, |b| seen.extend_from_slice(b)).unwrap();
            assert!(
                seen == want[off as usize..(off + len) as usize],
                "{off}+{len}"
            );
        }
        let err = visit_data(&f, 60 * MIB, 5 * MIB, |_| {}).unwrap_err();
        assert!(matches!(err, EngineError::SourceChanged(_)), "{err}");
    }

    #[test]
    fn make_hole_zeroes_a_range_and_frees_it() {
        let f = tempfile::tempfile().unwrap();
        f.write_all_at(&vec![5u8; (4 * MIB) as usize], 0).unwrap();
        f.sync_all().unwrap();
        make_hole(f.as_fd(), MIB, 2 * MIB).unwrap();
        let mut got = vec![1u8; (4 * MIB) as usize];
        f.read_exact_at(&mut got, 0).unwrap();
        assert!(got[..MIB as usize].iter().all(|b| *b == 5));
        assert!(got[MIB as usize..3 * MIB as usize].iter().all(|b| *b == 0));
        assert!(got[3 * MIB as usize..].iter().all(|b| *b == 5));
        assert_eq!(f.metadata().unwrap().len(), 4 * MIB, "size kept");
        if has_holes(&f) {
            assert!(f.metadata().unwrap().blocks() * 512 <= 2 * MIB + 64 * 1024);
        }
    }
}
