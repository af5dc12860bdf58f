//! The two known sites every program here runs (as tests/programs/alloc_sites.c does in C):
//! `hold` keeps 8192 blocks of 4 KiB live to the end (32 MiB), `churn` allocates and frees 200 000
//! blocks of varied size on each of two threads. The program prints its own count of what `hold`
//! keeps and its allocator's statistics, and with a path argument waits for that file before the
//! sites run again (so `memlens attach` comes in between) and with a second one before it exits.
use std::hint::black_box;

pub const HOLD_N: usize = 8192;
pub const HOLD_SIZE: usize = 4096;
const CHURN_N: usize = 200_000;

#[inline(never)]
pub fn hold() -> Vec<Box<[u8]>> {
    (0..HOLD_N)
        .map(|_| {
            let mut b = vec![0u8; HOLD_SIZE].into_boxed_slice();
            b[0] = 1;
            black_box(b)
        })
        .collect()
}

#[inline(never)]
pub fn churn(seed: u64) {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(1);
    for i in 0..CHURN_N {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let n = 16 + (s >> 33) as usize % 2048;
        let mut v: Vec<u8> = Vec::with_capacity(n);
        v.push(1);
        if i % 5 == 0 {
            v.reserve_exact(n * 2);
        }
        black_box(&v);
    }
}

fn wait_for(path: &str) {
    while !std::path::Path::new(path).exists() {
        black_box(vec![0u8; 100]);
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Run the sites; `stats` reads the allocator's own count of allocated bytes.
pub fn main_with(name: &str, stats: fn() -> usize) {
    let args: Vec<String> = std::env::args().collect();
    let before = stats();
    let mut held = hold();
    let threads: Vec<_> = (0..2u64)
        .map(|i| std::thread::spawn(move || churn(i)))
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    println!(
        "held_bytes={} allocator={name} allocator_before={before} allocator_after={}",
        HOLD_N * HOLD_SIZE,
        stats()
    );
    if let Some(go) = args.get(1) {
        wait_for(go);
        drop(held);
        held = hold();
        churn(7);
        println!("again held_bytes={} allocator_after={}", HOLD_N * HOLD_SIZE, stats());
        if let Some(end) = args.get(2) {
            wait_for(end);
        }
    }
    // Live to the end: the profile written at exit shows them in use.
    std::mem::forget(black_box(held));
}

pub fn jemalloc_allocated() -> usize {
    tikv_jemalloc_ctl::epoch::advance().unwrap();
    tikv_jemalloc_ctl::stats::allocated::read().unwrap()
}
