//! Timing one point of the latency sweep: warm the list, then time a chase of a calibrated length
//! with the TSC (and the counters around it), on one or more chaser threads.
use crate::chase::{self, List};
use crate::counters::{CounterSet, Reading};
use memlens_measure::tsc::{now_ordered, Clock};
use std::sync::Barrier;

/// A list and where its chase stopped last time (the next measurement continues from there, so a
/// list larger than the caches is never re-measured over elements the warm-up just loaded).
pub struct Chaser {
    pub list: List,
    pos: *const usize,
}

// SAFETY: `pos` points into `list`, which the chaser owns.
unsafe impl Send for Chaser {}

impl Chaser {
    pub fn new(list: List) -> Chaser {
        let pos = list.head;
        Chaser { list, pos }
    }

    /// Chase `warm` elements untimed, then `loads` timed in [`CHUNKS`] chunks; returns each chunk's
    /// TSC ticks.
    fn run(
        &mut self,
        warm: u64,
        loads: u64,
        counters: Option<&mut CounterSet>,
        sync: Option<&Barrier>,
    ) -> (Vec<u64>, Option<Reading>) {
        let mut p = chase::chase(self.pos, warm);
        if let Some(b) = sync {
            b.wait();
        }
        let mut counters = counters;
        if let Some(c) = counters.as_deref_mut() {
            c.start();
        }
        let per_chunk = chunk_loads(loads);
        let mut ticks = [0u64; CHUNKS];
        let n = if loads == 0 { 1 } else { CHUNKS };
        for t in ticks.iter_mut().take(n) {
            let t0 = now_ordered();
            p = chase::chase(std::hint::black_box(p), per_chunk);
            *t = now_ordered() - t0;
        }
        let reading = counters.map(|c| c.stop());
        self.pos = std::hint::black_box(p);
        (ticks[..n].to_vec(), reading)
    }
}

/// A timed chase is split into this many chunks and the median chunk is kept: a preemption or an
/// interrupt (frequent on a loaded 2-core VM) spoils one chunk, not the point.
pub const CHUNKS: usize = 16;

/// Loads per chunk for a measurement of `loads` loads.
pub fn chunk_loads(loads: u64) -> u64 {
    if loads == 0 {
        0
    } else {
        chase::round16(loads / CHUNKS as u64)
    }
}

/// Median cost in ticks of timing an empty chase: subtracted from every measurement.
pub fn timer_overhead(c: &mut Chaser) -> f64 {
    let mut v: Vec<f64> = (0..1001)
        .map(|_| c.run(0, 0, None, None).0[0] as f64)
        .collect();
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// One timed measurement on all chasers at once (chaser 0 runs in this thread and carries the
/// counters); returns the mean over chasers of ticks per load, and chaser 0's counter reading.
pub fn measure(
    chasers: &mut [Chaser],
    warm: u64,
    loads: u64,
    overhead: f64,
    counters: Option<&mut CounterSet>,
) -> (f64, Option<Reading>) {
    let per = chunk_loads(loads) as f64;
    let per_load = |t: &[u64]| {
        let v: Vec<f64> = t
            .iter()
            .map(|&x| (x as f64 - overhead).max(0.0) / per)
            .collect();
        memlens_measure::stats::quantile(&v, 0.5)
    };
    if chasers.len() == 1 {
        let (t, r) = chasers[0].run(warm, loads, counters, None);
        return (per_load(&t), r);
    }
    let barrier = Barrier::new(chasers.len());
    let (first, rest) = chasers.split_first_mut().expect("at least one chaser");
    std::thread::scope(|s| {
        let handles: Vec<_> = rest
            .iter_mut()
            .map(|c| s.spawn(|| c.run(warm, loads, None, Some(&barrier)).0))
            .collect();
        let (t0, r) = first.run(warm, loads, counters, Some(&barrier));
        let mut each = vec![per_load(&t0)];
        // A chaser thread cannot panic (no allocation, no indexing), so join only fails on abort.
        each.extend(
            handles
                .into_iter()
                .filter_map(|h| h.join().ok())
                .map(|t| per_load(&t)),
        );
        (each.iter().sum::<f64>() / each.len() as f64, r)
    })
}

/// Number of loads that take about `target_s` seconds on this list (at least 16 Ki, a multiple of 16).
pub fn calibrate(c: &mut Chaser, target_s: f64) -> u64 {
    let clock = Clock::get();
    let mut n = 16 * 1024u64;
    loop {
        let (t, _) = c.run(0, n, None, None);
        let secs = clock.ticks_to_secs(t.iter().sum::<u64>() as f64);
        if secs >= 0.002 || n >= 1 << 34 {
            let want = (n as f64 * target_s / secs.max(1e-9)) as u64;
            return chase::round16(want.clamp(16 * 1024, 1 << 36));
        }
        n *= 4;
    }
}
