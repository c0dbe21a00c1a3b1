//! Reading a file range through short-lived read-only mappings, for hashing straight from the
//! page cache without copying into a buffer.
//!
//! Two hazards come with mapping a file that someone else may change, and this module owns
//! both. Memory: only [`WINDOW`] bytes are mapped at a time, so resident memory does not grow
//! with the file. Truncation: touching a mapped page past the file's end raises SIGBUS, which
//! would kill the process (the server, in the pull direction). A process-wide SIGBUS handler,
//! installed once, checks whether the fault lies in the window the faulting thread registered;
//! if so it maps a zero page over the faulting page, records the hit and returns, so the read
//! finishes with zeros and [`visit_mapped`] reports [`EngineError::SourceChanged`]. Faults
//! anywhere else get the previous disposition back and recur, so unrelated SIGBUS behaves as
//! it would without zcp.

use std::cell::Cell;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Once;

use crate::EngineError;

/// Bytes mapped at a time.
pub const WINDOW: usize = 8 << 20;

thread_local! {
    // Const-initialised and without destructors: reading them is a plain TLS load, safe in a
    // signal handler on the same thread (SIGBUS from a memory access is thread-directed).
    static GUARD_START: Cell<usize> = const { Cell::new(0) };
    static GUARD_LEN: Cell<usize> = const { Cell::new(0) };
    static GUARD_HIT: Cell<bool> = const { Cell::new(false) };
}

static INSTALL: Once = Once::new();
static mut PREVIOUS: Option<libc::sigaction> = None;

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo_t for SA_SIGINFO handlers; si_addr is valid for
    // SIGBUS.
    #[allow(unsafe_code)]
    let addr = unsafe { (*info).si_addr() } as usize;
    let start = GUARD_START.with(Cell::get);
    let len = GUARD_LEN.with(Cell::get);
    if len != 0 && addr >= start && addr < start + len {
        let page = rustix::param::page_size();
        let base = addr & !(page - 1);
        // SAFETY: `base..base+page` lies inside the window this thread mapped and still owns
        // (it unmaps only after clearing the guard); replacing that page with an anonymous zero
        // page changes no memory anyone else relies on. mmap is a plain syscall, safe here.
        #[allow(unsafe_code)]
        let p = unsafe {
            libc::mmap(
                base as *mut libc::c_void,
                page,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if p != libc::MAP_FAILED {
            GUARD_HIT.with(|h| h.set(true));
            return;
        }
    }
    // Not our fault: put the previous disposition back; the faulting access repeats and gets
    // whatever would have happened without us (by default, the process dies with SIGBUS).
    // SAFETY: PREVIOUS was written once, before the handler was installed, and never again.
    #[allow(unsafe_code)]
    unsafe {
        let prev = *std::ptr::addr_of!(PREVIOUS);
        match prev {
            Some(old) => libc::sigaction(libc::SIGBUS, &old, std::ptr::null_mut()),
            None => {
                libc::signal(libc::SIGBUS, libc::SIG_DFL);
                0
            }
        };
    }
}

fn install_guard() {
    INSTALL.call_once(|| {
        // SAFETY: sigaction with a fully initialised struct; the handler only touches
        // thread-locals without destructors and makes async-signal-safe syscalls. PREVIOUS is
        // written here, inside call_once, before any handler can run.
        #[allow(unsafe_code)]
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_sigbus as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut sa.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &sa, &mut old) == 0 {
                *std::ptr::addr_of_mut!(PREVIOUS) = Some(old);
            }
        }
    });
}

/// Feeds bytes `offset..offset+len` of `file` to `f`, in order, through read-only mappings of
/// at most [`WINDOW`] bytes. A file that ends before `offset+len`, or shrinks while being read,
/// gives [`EngineError::SourceChanged`] (`f` may have seen zeros by then: discard its result).
pub fn visit_mapped(
    file: impl AsFd,
    offset: u64,
    len: u64,
    mut f: impl FnMut(&[u8]),
) -> Result<(), EngineError> {
    if len == 0 {
        return Ok(());
    }
    install_guard();
    let page = rustix::param::page_size() as u64;
    let fd = file.as_fd();
    let end = offset
        .checked_add(len)
        .ok_or_else(|| EngineError::Path("range overflows".into()))?;
    let short = |size: u64| {
        EngineError::SourceChanged(format!(
            "the file is {size} bytes, but bytes up to {end} were to be read"
        ))
    };
    let mut pos = offset;
    while pos < end {
        // Catches a file that is already short; the guard catches one that shrinks while
        // its window is being read.
        let size = rustix::fs::fstat(fd)
            .map_err(|e| EngineError::sys("fstat", "file being hashed", e))?
            .st_size as u64;
        if size < end {
            return Err(short(size));
        }
        let map_off = pos & !(page - 1);
        let map_len = (WINDOW as u64).min(end - map_off) as usize;
        // SAFETY: a fresh shared read-only mapping chosen by the kernel (no MAP_FIXED), so it
        // overlaps nothing of ours; unmapped below before the next window.
        #[allow(unsafe_code)]
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                map_off as libc::off_t,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(EngineError::Sys {
                call: "mmap",
                what: "file being hashed",
                source: std::io::Error::last_os_error(),
            });
        }
        // SAFETY: advice on our own fresh mapping; failure only loses a readahead hint.
        #[allow(unsafe_code)]
        unsafe {
            libc::madvise(ptr, map_len, libc::MADV_SEQUENTIAL);
        }
        GUARD_HIT.with(|h| h.set(false));
        GUARD_START.with(|s| s.set(ptr as usize));
        GUARD_LEN.with(|l| l.set(map_len));
        let skip = (pos - map_off) as usize;
        // SAFETY: `ptr..ptr+map_len` is mapped readable until the munmap below. Pages past the
        // file's end fault into the guard, which maps zeros there instead of killing us. Another
        // process may change the file's bytes while we read them; the slice is only handed to a
        // hash function, for which any byte values are fine, and a changed file is caught by
        // comparing digests.
        #[allow(unsafe_code)]
        let bytes =
            unsafe { std::slice::from_raw_parts((ptr as *const u8).add(skip), map_len - skip) };
        f(bytes);
        GUARD_LEN.with(|l| l.set(0));
        let hit = GUARD_HIT.with(Cell::get);
        // SAFETY: unmapping exactly the mapping made above (including any zero pages the guard
        // placed inside it); `bytes` is not used after this.
        #[allow(unsafe_code)]
        unsafe {
            libc::munmap(ptr, map_len);
        }
        if hit {
            return Err(EngineError::SourceChanged(format!(
                "the file ended early: pages near byte {} of an expected {end} vanished while being read",
                map_off
            )));
        }
        pos = map_off + map_len as u64;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn visits_every_byte_in_order() {
        let mut f = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..(WINDOW * 2 + 12345)).map(|i| (i % 251) as u8).collect();
        f.write_all(&data).unwrap();
        for (off, len) in [
            (0u64, data.len() as u64),
            (4095, 10),
            (5000, (WINDOW + 7) as u64),
            (0, 0),
        ] {
            let mut seen = Vec::new();
            visit_mapped(&f, off, len, |b| seen.extend_from_slice(b)).unwrap();
            assert_eq!(seen, &data[off as usize..(off + len) as usize]);
        }
    }

    #[test]
    fn a_short_file_is_reported_not_fatal() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![7u8; 10_000]).unwrap();
        // Ask for more than the file holds: the pages past EOF would raise SIGBUS.
        let err = visit_mapped(&f, 0, 3 * 4096 + 10_000, |b| {
            std::hint::black_box(b.iter().map(|x| *x as u64).sum::<u64>());
        })
        .unwrap_err();
        assert!(matches!(err, EngineError::SourceChanged(_)), "{err}");
        // The guard left things as they were: a normal read still works.
        let mut n = 0;
        visit_mapped(&f, 0, 10_000, |b| n += b.len()).unwrap();
        assert_eq!(n, 10_000);
    }

    #[test]
    fn truncation_during_the_visit_is_caught() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![1u8; 4 << 20]).unwrap();
        let g = f.try_clone().unwrap();
        let mut first = true;
        let err = visit_mapped(&f, 0, 4 << 20, |b| {
            if first {
                first = false;
                g.set_len(4096).unwrap();
            }
            std::hint::black_box(b.iter().map(|x| *x as u64).sum::<u64>());
        })
        .unwrap_err();
        assert!(matches!(err, EngineError::SourceChanged(_)), "{err}");
    }
}
