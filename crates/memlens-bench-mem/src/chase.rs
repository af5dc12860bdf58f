//! Pointer-chasing lists and the dependent-load kernel.
//!
//! A list is a cycle of elements inside one [`Region`]; each element's first 8 bytes hold the address
//! of the next element, and nothing else is read. Three layouts:
//! * `seq`: elements back to back in address order (the hardware prefetchers see a stream);
//! * `random`: a random single cycle through all elements (Sattolo's shuffle), defeating prefetch;
//! * `page`: one element per 4 KiB page at a random 8-byte-aligned offset, pages visited in a random
//!   single cycle: every load is a new page (a TLB miss once the pages outnumber the TLB).
use crate::region::{Region, PAGE};
use anyhow::Result;
use memlens_measure::rng::Rng;
use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    Seq,
    Random,
    Page,
}

impl Order {
    pub fn name(self) -> &'static str {
        match self {
            Order::Seq => "seq",
            Order::Random => "random",
            Order::Page => "page",
        }
    }

    pub fn parse(s: &str) -> Option<Order> {
        match s.trim() {
            "seq" | "sequential" => Some(Order::Seq),
            "random" | "rand" => Some(Order::Random),
            "page" | "per-page" => Some(Order::Page),
            _ => None,
        }
    }
}

/// A built list: the memory and where the chase starts.
pub struct List {
    _region: Region,
    pub head: *const usize,
    pub elements: u64,
}

// SAFETY: the list is read-only after construction and each chaser thread gets its own list.
unsafe impl Send for List {}
unsafe impl Sync for List {}

/// Number of elements a list of `order` with `elem`-byte elements has in a working set of `ws` bytes.
pub fn element_count(order: Order, elem: u64, ws: u64) -> u64 {
    match order {
        Order::Seq | Order::Random => ws / elem,
        Order::Page => ws / PAGE as u64,
    }
}

/// The smallest working set that holds two elements of `elem` bytes in `order`.
pub fn min_working_set(order: Order, elem: u64) -> u64 {
    match order {
        Order::Seq | Order::Random => 2 * elem,
        Order::Page => 2 * PAGE as u64,
    }
}

/// Build a list; `ws` is the memory the list spans. Needs at least two elements.
pub fn build(order: Order, elem: u64, ws: u64, huge: bool, seed: u64) -> Result<List> {
    let n = element_count(order, elem, ws);
    anyhow::ensure!(
        n >= 2,
        "a {} list of {elem} B elements needs more than {ws} B",
        order.name()
    );
    let region = Region::new(ws as usize, huge)?;
    let base = region.base() as usize;
    let mut rng = Rng::new(seed);
    // addr(i): where element i lives.
    let offsets: Vec<u16>;
    let addr: Box<dyn Fn(u64) -> usize> = match order {
        Order::Seq | Order::Random => Box::new(move |i| base + (i * elem) as usize),
        Order::Page => {
            // A random 8-byte-aligned offset per page, leaving room for the whole element.
            let slots = (PAGE as u64 - elem) / 8 + 1;
            offsets = (0..n).map(|_| (rng.below(slots) * 8) as u16).collect();
            Box::new(move |i| base + i as usize * PAGE + offsets[i as usize] as usize)
        }
    };
    let write = |i: u64, next: u64| {
        // SAFETY: addr(i) is an 8-byte-aligned slot inside the region.
        unsafe { (addr(i) as *mut usize).write(addr(next)) }
    };
    match order {
        Order::Seq => {
            for i in 0..n {
                write(i, (i + 1) % n);
            }
        }
        Order::Random | Order::Page => {
            // Sattolo's algorithm yields a uniformly random permutation that is one single cycle,
            // so the chase visits every element before repeating. u32 indices halve the memory
            // (and the cache misses) of the shuffle for lists up to 4 G elements.
            let mut next: Vec<u32> = (0..n as u32).collect();
            for i in (1..n as usize).rev() {
                let j = rng.below(i as u64) as usize;
                next.swap(i, j);
            }
            for (i, &nx) in next.iter().enumerate() {
                write(i as u64, nx as u64);
            }
        }
    }
    let head = addr(0) as *const usize;
    Ok(List {
        _region: region,
        head,
        elements: n,
    })
}

/// Follow `n` next pointers from `p` (n a multiple of 16) and return where the chase stopped.
///
/// Volatile loads keep the compiler from reasoning about the chain; the loop is unrolled 16 times so
/// its control (one add, compare and branch per 16 loads) runs beside the load chain, not on it.
/// `objdump -d` shows 16 `mov (%rax),%rax` per iteration.
#[inline(never)]
pub fn chase(mut p: *const usize, n: u64) -> *const usize {
    let mut i = n / 16;
    while i != 0 {
        // SAFETY: every element of a built list holds the address of another element.
        unsafe {
            p = core::ptr::read_volatile(p) as *const usize;
            p = core::ptr::read_volatile(p) as *const usize;
            p = core::ptr::read_volatile(p) as *const usize;
            p = core::ptr::read_volatile(p) as *const usize;
            p = core::ptr::read_volatile(p) as *const usize;
            p = core::ptr::read_volatile(p) as *const usize;
            p = core::ptr::read_volatile(p) as *const usize;
            p = core::ptr::read_volatile(p) as *const usize;
            p = core::ptr::read_volatile(p) as *const usize;
            p = core::ptr::read_volatile(p) as *const usize;
            p = core::ptr::read_volatile(p) as *const usize;
            p = core::ptr::read_volatile(p) as *const usize;
            p = core::ptr::read_volatile(p) as *const usize;
            p = core::ptr::read_volatile(p) as *const usize;
            p = core::ptr::read_volatile(p) as *const usize;
            p = core::ptr::read_volatile(p) as *const usize;
        }
        i -= 1;
    }
    p
}

/// Round an iteration count up to the kernel's unroll factor.
pub fn round16(n: u64) -> u64 {
    n.div_ceil(16).max(1) * 16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every layout must be one cycle through all its elements.
    #[test]
    fn lists_are_single_cycles() {
        for order in [Order::Seq, Order::Random, Order::Page] {
            for elem in [8u64, 64, 256] {
                let l = build(order, elem, 64 << 10, false, 7).unwrap();
                let mut seen = std::collections::HashSet::new();
                let mut p = l.head;
                for _ in 0..l.elements {
                    assert!(
                        seen.insert(p as usize),
                        "{order:?}/{elem}: element visited twice"
                    );
                    p = unsafe { *p as *const usize };
                }
                assert_eq!(p, l.head, "{order:?}/{elem}: not closed after n steps");
                if order == Order::Page {
                    let pages: std::collections::HashSet<_> =
                        seen.iter().map(|a| a / PAGE).collect();
                    assert_eq!(pages.len() as u64, l.elements);
                }
            }
        }
    }

    #[test]
    fn chase_returns_to_head_after_full_cycles() {
        let l = build(Order::Random, 64, 64 << 10, false, 1).unwrap();
        assert_eq!(l.elements, 1024);
        assert_eq!(chase(l.head, 1024 * 3), l.head);
    }
}
