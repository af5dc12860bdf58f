//! Page-aligned anonymous memory with explicit huge-page advice.
//!
//! Every buffer a benchmark touches comes from here so that its page size is what the user asked for
//! (`--hugepages` → `MADV_HUGEPAGE`, otherwise `MADV_NOHUGEPAGE`), whatever the system's THP default is,
//! and so that nothing is touched before the thread that uses it writes it (first touch).
use anyhow::{bail, Result};

/// 2 MiB: the x86-64 huge page; regions are aligned to it so THP can back them from the first byte.
pub const HUGE: usize = 2 << 20;
pub const PAGE: usize = 4096;

pub struct Region {
    map: *mut u8,
    map_len: usize,
    base: *mut u8,
}

// SAFETY: a Region is plain memory owned by one value; threads get disjoint slices of it.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    /// Reserve `len` bytes aligned to 2 MiB, untouched; `huge` selects the THP advice.
    pub fn new(len: usize, huge: bool) -> Result<Region> {
        let len = len.max(PAGE).div_ceil(PAGE) * PAGE;
        let map_len = len + HUGE;
        // SAFETY: anonymous private mapping, no file; checked for MAP_FAILED below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            bail!(
                "cannot map {} bytes: {}",
                len,
                std::io::Error::last_os_error()
            );
        }
        let map = map as *mut u8;
        let base = ((map as usize).div_ceil(HUGE) * HUGE) as *mut u8;
        let advice = if huge {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        // SAFETY: [base, base+len) lies inside the mapping. Advice failure is not fatal for
        // NOHUGEPAGE, but a refused HUGEPAGE request must be reported, not silently ignored.
        let rc = unsafe { libc::madvise(base as *mut libc::c_void, len, advice) };
        if rc != 0 && huge {
            let e = std::io::Error::last_os_error();
            unsafe { libc::munmap(map as *mut libc::c_void, map_len) };
            bail!("madvise(MADV_HUGEPAGE) refused: {e} (is transparent_hugepage 'never'?)");
        }
        Ok(Region { map, map_len, base })
    }

    pub fn base(&self) -> *mut u8 {
        self.base
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping created in `new`.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn region_is_aligned_and_writable() {
        let r = super::Region::new(10_000, false).unwrap();
        assert_eq!(r.base() as usize % super::HUGE, 0);
        unsafe { r.base().add(9_999).write(7) };
    }
}
