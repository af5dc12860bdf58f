//! Rust growing `Vec`s and `String`s (every growth is a realloc through the system allocator), with
//! an exact count of its own heap: a global allocator that forwards to `System` and adds up the
//! sizes it is asked for. Each round builds vectors of integers by `push`, strings by `push_str` and
//! a byte buffer by `extend`, holds them for a moment, then drops them.
//!   vec_growth [ROUNDS]   (default 40)
//! Prints `true_peak <bytes>` (the most bytes live at once, exactly) and `maxrss_kib <n>`.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(by: usize) {
    let now = LIVE.fetch_add(by, Relaxed) + by;
    PEAK.fetch_max(now, Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            grew(l.size());
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        System.dealloc(p, l);
        LIVE.fetch_sub(l.size(), Relaxed);
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let q = System.realloc(p, l, new);
        if !q.is_null() {
            LIVE.fetch_sub(l.size(), Relaxed);
            grew(new);
        }
        q
    }
}

#[global_allocator]
static A: Counting = Counting;

#[inline(never)]
fn build_vecs(n: usize) -> Vec<Vec<u64>> {
    (0..8)
        .map(|k| {
            let mut v = Vec::new();
            for i in 0..n {
                v.push((i * k) as u64);
            }
            v
        })
        .collect()
}

#[inline(never)]
fn build_strings(n: usize) -> Vec<String> {
    (0..8)
        .map(|k| {
            let mut s = String::new();
            for i in 0..n {
                s.push_str(if (i + k) % 2 == 0 { "memlens" } else { "heap" });
            }
            s
        })
        .collect()
}

#[inline(never)]
fn build_bytes(n: usize) -> Vec<u8> {
    let mut b = Vec::new();
    for i in 0..n {
        b.extend_from_slice(&[(i & 0xff) as u8; 100]);
    }
    b
}

fn maxrss_kib() -> i64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(-1)
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(40);
    let mut sum = 0u64;
    for r in 0..rounds {
        let n = 200_000 + 1000 * (r % 7);
        let v = build_vecs(n);
        let s = build_strings(n);
        let b = build_bytes(n / 4);
        sum += v.iter().map(|x| x[n - 1]).sum::<u64>() + s.iter().map(|x| x.len() as u64).sum::<u64>();
        sum += b[b.len() - 1] as u64;
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    println!("checksum {sum}");
    println!("true_peak {}", PEAK.load(Relaxed));
    println!("maxrss_kib {}", maxrss_kib());
}
