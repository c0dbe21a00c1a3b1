//! Page-aligned buffers for O_DIRECT, from anonymous memory mappings: their pages are zero
//! and cost no memory until something is written into them, so a ring of large buffers that
//! only ever sees small chunks stays small.

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use rustix::mm::{MapFlags, ProtFlags};

const ALIGN: usize = 4096;

/// A zeroed, 4096-byte-aligned buffer whose length is a multiple of 4096.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: AlignedBuf owns its mapping exclusively (like Vec<u8>); moving it to another
// thread moves that ownership.
#[allow(unsafe_code)]
unsafe impl Send for AlignedBuf {}

impl AlignedBuf {
    /// A buffer of at least `len` bytes (rounded up to 4096, at least 4096).
    pub fn new(len: usize) -> AlignedBuf {
        let len = len.max(1).div_ceil(ALIGN) * ALIGN;
        // SAFETY: a fresh private anonymous mapping of `len` bytes at an address the kernel
        // picks: no existing memory is affected. Its pages read as zero until written.
        #[allow(unsafe_code)]
        let raw = unsafe {
            rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::PRIVATE,
            )
        };
        let ptr = raw
            .ok()
            .and_then(|p| NonNull::new(p.cast::<u8>()))
            .unwrap_or_else(|| {
                let layout = std::alloc::Layout::from_size_align(len, ALIGN).expect("layout");
                std::alloc::handle_alloc_error(layout)
            });
        AlignedBuf { ptr, len }
    }

    /// Lets the pages from `at` (rounded up to a page) to the end go: they cost no memory
    /// again until written, and read as zeros. How a buffer kept for reuse serves a smaller
    /// chunk without holding on to what a larger one wrote.
    pub fn release_from(&mut self, at: usize) {
        let at = at.div_ceil(ALIGN) * ALIGN;
        if at >= self.len {
            return;
        }
        // SAFETY: the range is page-aligned and lies within this buffer's own private
        // anonymous mapping (made in `new`, still mapped); &mut self means no slice of it is
        // alive. MADV_DONTNEED on such a mapping only replaces those pages with zero-fill
        // ones, so every byte stays initialised (as zeros).
        #[allow(unsafe_code)]
        let r = unsafe {
            rustix::mm::madvise(
                self.ptr.as_ptr().add(at).cast(),
                self.len - at,
                rustix::mm::Advice::LinuxDontNeed,
            )
        };
        if r.is_err() {
            // Not expected on an anonymous mapping; zeros written keep the promise above,
            // though not the memory.
            self[at..].fill(0);
        }
    }
}

impl Deref for AlignedBuf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: ptr is a live mapping of len bytes (zero-filled by the kernel, so
        // initialised) owned by self.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts(self.ptr.as_ptr(), self.len)
        }
    }
}

impl DerefMut for AlignedBuf {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in deref, and &mut self guarantees exclusive access.
        #[allow(unsafe_code)]
        unsafe {
            std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len)
        }
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: mapped in `new` with exactly this length and not unmapped before; no slice
        // of it outlives self.
        #[allow(unsafe_code)]
        unsafe {
            let _ = rustix::mm::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

impl std::fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "AlignedBuf({} bytes)", self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligned_and_rounded() {
        let mut b = AlignedBuf::new(5000);
        assert_eq!(b.len(), 8192);
        assert_eq!(b.as_ptr() as usize % ALIGN, 0);
        assert!(b.iter().all(|x| *x == 0));
        b[8191] = 1;
        assert_eq!(b[8191], 1);
    }

    #[test]
    fn released_pages_read_as_zeros() {
        let mut b = AlignedBuf::new(64 << 20);
        b.fill(7);
        b.release_from(5000);
        assert!(b[..5000].iter().all(|x| *x == 7));
        assert!(
            b[5000..8192].iter().all(|x| *x == 7),
            "the page holding `at` stays"
        );
        assert!(b[8192..].iter().all(|x| *x == 0));
        b.release_from(64 << 20);
        assert_eq!(b[8191], 7, "nothing past the end to let go");
    }

    #[test]
    fn a_large_buffer_costs_only_the_pages_written() {
        let rss = || crate::sys::process_usage().max_rss_bytes;
        let before = rss();
        let mut b = AlignedBuf::new(256 << 20);
        b[0] = 1;
        b[(256 << 20) - 1] = 1;
        assert!(rss() < before + (32 << 20), "{} -> {}", before, rss());
    }
}
