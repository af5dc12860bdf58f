//! Report a Rust program's allocations to memlens, whatever its global allocator.
//!
//! memlens profiles the dynamic `malloc` and hooks the allocators it finds linked into a program
//! (jemalloc, mimalloc, tcmalloc) by their symbols. A program it cannot see into — an allocator it
//! does not know, a stripped binary, arenas of its own — can report instead: wrap the global
//! allocator in [`Profiled`], and every allocation and free goes to the runtime's
//! `memlens_report_alloc` / `memlens_report_free` (runtime/include/memlens.h), sampled by the same
//! byte countdown as `malloc`.
//!
//! ```
//! use std::alloc::System;
//! #[global_allocator]
//! static A: memlens_alloc::Profiled<System> = memlens_alloc::Profiled::new(System);
//! # fn main() { let v = vec![1u8; 4096]; assert_eq!(v.len(), 4096); }
//! ```
//!
//! With tikv-jemallocator: `static A: Profiled<tikv_jemallocator::Jemalloc> = Profiled::new(Jemalloc);`.
//!
//! Without the runtime (the program not started under `memlens run` nor attached to) the wrapper
//! costs one relaxed load per call: the API is looked up with `dlsym` at the first allocation, and
//! again only when `memlens attach` may have loaded it since ([`Profiled::refresh`]). While the
//! runtime is there, the hooks it put on the allocator stop counting (the reports would count the
//! same memory twice).
#![warn(missing_docs)]
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicPtr, AtomicU8, Ordering};

type AllocFn = unsafe extern "C" fn(*mut libc::c_void, libc::size_t);
type FreeFn = unsafe extern "C" fn(*mut libc::c_void);

/// Where the lookup stands: not done, under way (allocations made by `dlsym` itself are not
/// reported: it may allocate), done.
const UNRESOLVED: u8 = 0;
const RESOLVING: u8 = 1;
const RESOLVED: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNRESOLVED);
static REPORT_ALLOC: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());
static REPORT_FREE: AtomicPtr<libc::c_void> = AtomicPtr::new(std::ptr::null_mut());

/// Look the runtime's API up (once; again after [`Profiled::refresh`]).
#[cold]
fn resolve() {
    if STATE
        .compare_exchange(UNRESOLVED, RESOLVING, Ordering::Acquire, Ordering::Relaxed)
        .is_err()
    {
        return;
    }
    // SAFETY: dlsym with RTLD_DEFAULT and NUL-terminated names has no preconditions.
    let (a, f) = unsafe {
        (
            libc::dlsym(libc::RTLD_DEFAULT, c"memlens_report_alloc".as_ptr()),
            libc::dlsym(libc::RTLD_DEFAULT, c"memlens_report_free".as_ptr()),
        )
    };
    if !a.is_null() && !f.is_null() {
        REPORT_FREE.store(f, Ordering::Release);
        REPORT_ALLOC.store(a, Ordering::Release);
    }
    STATE.store(RESOLVED, Ordering::Release);
}

#[inline]
fn report_alloc(p: *mut u8, size: usize) {
    if STATE.load(Ordering::Relaxed) != RESOLVED {
        resolve();
    }
    let f = REPORT_ALLOC.load(Ordering::Acquire);
    if !f.is_null() {
        // SAFETY: f is memlens_report_alloc (void (*)(void *, size_t)), found by dlsym.
        unsafe { std::mem::transmute::<*mut libc::c_void, AllocFn>(f)(p.cast(), size) }
    }
}

#[inline]
fn report_free(p: *mut u8) {
    let f = REPORT_FREE.load(Ordering::Acquire);
    if !f.is_null() {
        // SAFETY: f is memlens_report_free (void (*)(void *)), found by dlsym.
        unsafe { std::mem::transmute::<*mut libc::c_void, FreeFn>(f)(p.cast()) }
    }
}

/// A global allocator `A` whose allocations and frees are reported to memlens.
#[derive(Debug, Default, Clone, Copy)]
pub struct Profiled<A>(pub A);

impl<A> Profiled<A> {
    /// Wrap `inner` (usable in a `static`).
    pub const fn new(inner: A) -> Self {
        Profiled(inner)
    }

    /// Look the runtime up again at the next allocation: call it when memlens may have been
    /// attached since the first allocation (`memlens attach` loads the runtime later).
    pub fn refresh() {
        let _ = STATE.compare_exchange(RESOLVED, UNRESOLVED, Ordering::AcqRel, Ordering::Relaxed);
    }

    /// Whether the runtime's API was found (false before the first allocation).
    pub fn active() -> bool {
        !REPORT_ALLOC.load(Ordering::Acquire).is_null()
    }
}

// SAFETY: every method forwards to A's, with the same layout, and only reports the result.
unsafe impl<A: GlobalAlloc> GlobalAlloc for Profiled<A> {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { self.0.alloc(layout) };
        if !p.is_null() {
            report_alloc(p, layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { self.0.alloc_zeroed(layout) };
        if !p.is_null() {
            report_alloc(p, layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        report_free(ptr);
        // SAFETY: the caller's contract, passed on.
        unsafe { self.0.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let q = unsafe { self.0.realloc(ptr, layout, new_size) };
        if !q.is_null() {
            report_free(ptr);
            report_alloc(q, new_size);
        }
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::alloc::System;

    #[test]
    fn without_the_runtime_it_only_forwards() {
        let a = Profiled::new(System);
        let l = Layout::from_size_align(4096, 64).unwrap();
        // SAFETY: a valid layout; the block is freed with the same one.
        unsafe {
            let p = a.alloc_zeroed(l);
            assert!(!p.is_null() && (p as usize).is_multiple_of(64) && *p.add(4095) == 0);
            let q = a.realloc(p, l, 8192);
            assert!(!q.is_null());
            a.dealloc(q, Layout::from_size_align(8192, 64).unwrap());
        }
        assert!(
            !Profiled::<System>::active(),
            "no memlens runtime in the test process"
        );
    }
}
