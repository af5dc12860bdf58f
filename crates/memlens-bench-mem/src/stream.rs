//! STREAM kernels and the indirection case, each over one thread's slice of the arrays.
//!
//! Traffic is counted STREAM's way: copy and scale move 2 words of 8 bytes per element, add and triad
//! 3; write-allocate reads of the destination are not counted.
use std::sync::atomic::{AtomicUsize, Ordering};

pub const SCALAR: f64 = 3.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Kernel {
    Copy,
    Scale,
    Add,
    Triad,
    /// Triad with the handle→address translation called for every element access (3 per element).
    TriadTranslated,
    /// The same triad with the translation hoisted out of the loop.
    TriadHoisted,
    /// Triad over a libpmemobj pool, the exported `pmemobj_direct` called per element access.
    PmemDirect,
    /// Triad over a libpmemobj pool, `pmemobj_direct_inline` (D_RO/D_RW) per element access: the
    /// study's code path.
    PmemInline,
    /// The same with the arrays kept in the cache (a small part of them, processed again and
    /// again): the loop's own speed when memory is not the limit.
    PmemInlineCached,
    /// Triad over a libpmemobj pool, `pmemobj_direct` hoisted (the PMDK recipe).
    PmemHoisted,
}

impl Kernel {
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Copy => "copy",
            Kernel::Scale => "scale",
            Kernel::Add => "add",
            Kernel::Triad => "triad",
            Kernel::TriadTranslated => "triad, translate per element",
            Kernel::TriadHoisted => "triad, translation hoisted",
            Kernel::PmemDirect => "pmemobj triad, exported pmemobj_direct per element",
            Kernel::PmemInline => "pmemobj triad, D_RO/D_RW (inline) per element",
            Kernel::PmemInlineCached => "pmemobj triad, D_RO/D_RW per element, arrays in cache",
            Kernel::PmemHoisted => "pmemobj triad, pmemobj_direct hoisted",
        }
    }

    /// 8-byte words moved per element, as STREAM counts them.
    pub fn words(self) -> u64 {
        match self {
            Kernel::Copy | Kernel::Scale => 2,
            _ => 3,
        }
    }
}

/// A thread's view of the three arrays.
#[derive(Clone, Copy)]
pub struct Slices {
    pub a: *mut f64,
    pub b: *mut f64,
    pub c: *mut f64,
    pub n: usize,
}

// SAFETY: each thread gets disjoint slices.
unsafe impl Send for Slices {}
unsafe impl Sync for Slices {}

impl Slices {
    /// First touch: the thread that will use the slice writes it first, so its pages are local.
    pub fn init(&self) {
        // SAFETY: the slices are valid for n elements and owned by the calling thread.
        unsafe {
            for i in 0..self.n {
                *self.a.add(i) = 1.0;
                *self.b.add(i) = 2.0;
                *self.c.add(i) = 0.0;
            }
        }
    }

    pub fn run(&self, k: Kernel) {
        // SAFETY: as for `init`; the three arrays never overlap.
        let (a, b, c) = unsafe {
            (
                std::slice::from_raw_parts_mut(self.a, self.n),
                std::slice::from_raw_parts_mut(self.b, self.n),
                std::slice::from_raw_parts_mut(self.c, self.n),
            )
        };
        match k {
            Kernel::Copy => copy(a, c),
            Kernel::Scale => scale(c, b),
            Kernel::Add => add(a, b, c),
            Kernel::Triad => triad(b, c, a),
            Kernel::TriadHoisted => triad_hoisted(self),
            Kernel::TriadTranslated => triad_translated(self),
            Kernel::PmemDirect
            | Kernel::PmemInline
            | Kernel::PmemInlineCached
            | Kernel::PmemHoisted => unreachable!("pmem kernels run in pmem.rs"),
        }
    }
}

// The four STREAM kernels, on slices so the compiler vectorises them without bounds checks.
#[inline(never)]
fn copy(a: &[f64], c: &mut [f64]) {
    c.copy_from_slice(a);
}

#[inline(never)]
fn scale(c: &[f64], b: &mut [f64]) {
    for (b, c) in b.iter_mut().zip(c) {
        *b = SCALAR * c;
    }
}

#[inline(never)]
fn add(a: &[f64], b: &[f64], c: &mut [f64]) {
    for ((c, a), b) in c.iter_mut().zip(a).zip(b) {
        *c = a + b;
    }
}

#[inline(never)]
pub fn triad(b: &[f64], c: &[f64], a: &mut [f64]) {
    for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
        *a = b + SCALAR * c;
    }
}

/// A registry of "pools": a handle names a pool and an offset, like a persistent-memory object id.
/// Relaxed atomic loads of the base keep the compiler from treating the translation as a pure
/// function it could hoist out of the loop itself.
static POOLS: [AtomicUsize; 4] = [const { AtomicUsize::new(0) }; 4];

#[derive(Clone, Copy)]
pub struct Handle {
    pub pool: usize,
    pub offset: usize,
}

/// Handle → address, not inlined: the call every element access pays in the indirect variant.
#[inline(never)]
pub extern "C" fn translate(h: &Handle) -> *mut f64 {
    (POOLS[h.pool % POOLS.len()].load(Ordering::Relaxed) + h.offset) as *mut f64
}

/// Register `base` as pool 0 so handles can name offsets from it.
pub fn register_pool(base: usize) {
    POOLS[0].store(base, Ordering::Relaxed);
}

#[inline(never)]
fn triad_translated(s: &Slices) {
    let base = POOLS[0].load(Ordering::Relaxed);
    let h = |p: *mut f64| Handle {
        pool: 0,
        offset: p as usize - base,
    };
    let (ha, hb, hc) = (h(s.a), h(s.b), h(s.c));
    for i in 0..s.n {
        // SAFETY: translate returns the slice's base; i < n.
        unsafe {
            let b = *translate(&hb).add(i);
            let c = *translate(&hc).add(i);
            *translate(&ha).add(i) = b + SCALAR * c;
        }
    }
}

/// The translation done once per slice, then the plain loop: what a programmer (or the PMDK recipe)
/// does by hand.
#[inline(never)]
fn triad_hoisted(s: &Slices) {
    let base = POOLS[0].load(Ordering::Relaxed);
    let h = |p: *mut f64| Handle {
        pool: 0,
        offset: p as usize - base,
    };
    let (pa, pb, pc) = (translate(&h(s.a)), translate(&h(s.b)), translate(&h(s.c)));
    // SAFETY: the translated pointers are the slice bases, valid for n elements, not overlapping.
    let (a, b, c) = unsafe {
        (
            std::slice::from_raw_parts_mut(pa, s.n),
            std::slice::from_raw_parts(pb, s.n),
            std::slice::from_raw_parts(pc, s.n),
        )
    };
    triad(b, c, a);
}
