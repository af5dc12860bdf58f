//! The TSC as a clock: calibrated against CLOCK_MONOTONIC, checked for invariance, with the cost of
//! reading it measured so per-call timings can subtract it.
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Read the TSC (no fence: cheapest, for loops timed as a whole).
#[inline(always)]
pub fn now() -> u64 {
    // SAFETY: rdtsc is available on every x86-64 CPU.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// Read the TSC after all earlier instructions completed (rdtscp), for timing short regions.
#[inline(always)]
pub fn now_ordered() -> u64 {
    let mut aux = 0u32;
    // SAFETY: rdtscp exists on every x86-64 CPU memlens supports (checked in `Clock::get`).
    unsafe { core::arch::x86_64::__rdtscp(&mut aux) }
}

/// Facts about the TSC on this machine.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Clock {
    /// Ticks per second, measured against CLOCK_MONOTONIC.
    pub hz: f64,
    /// CPUID says the TSC is invariant (constant rate, runs in deep C-states).
    pub invariant: bool,
    /// Median cost of one `now()` in ticks (back-to-back reads).
    pub read_cost_ticks: f64,
}

impl Clock {
    /// The calibrated clock, measured once per process (~50 ms).
    pub fn get() -> &'static Clock {
        static CLOCK: OnceLock<Clock> = OnceLock::new();
        CLOCK.get_or_init(calibrate)
    }

    /// Convert TSC ticks to nanoseconds.
    pub fn ticks_to_ns(&self, ticks: f64) -> f64 {
        ticks * 1e9 / self.hz
    }

    /// Convert TSC ticks to seconds.
    pub fn ticks_to_secs(&self, ticks: f64) -> f64 {
        ticks / self.hz
    }
}

fn invariant_tsc() -> bool {
    // CPUID leaf 0x8000_0007, EDX bit 8: invariant TSC.
    let max = core::arch::x86_64::__cpuid(0x8000_0000).eax;
    max >= 0x8000_0007 && core::arch::x86_64::__cpuid(0x8000_0007).edx & (1 << 8) != 0
}

fn calibrate() -> Clock {
    // Take the best of three 15 ms windows: a window interrupted by preemption shows a lower
    // ratio stability, and the median of three rejects one outlier.
    let mut rates = Vec::new();
    for _ in 0..3 {
        let (t0, c0) = (Instant::now(), now());
        while t0.elapsed() < Duration::from_millis(15) {
            std::hint::spin_loop();
        }
        let (c1, t1) = (now(), Instant::now());
        rates.push((c1 - c0) as f64 / (t1 - t0).as_secs_f64());
    }
    rates.sort_by(|a, b| a.total_cmp(b));
    let mut costs: Vec<u64> = (0..2001)
        .map(|_| {
            let a = now();
            let b = now();
            b - a
        })
        .collect();
    costs.sort_unstable();
    Clock {
        hz: rates[1],
        invariant: invariant_tsc(),
        read_cost_ticks: costs[costs.len() / 2] as f64,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn calibration_is_plausible() {
        let c = super::Clock::get();
        assert!(
            c.hz > 1e8 && c.hz < 1e10,
            "TSC rate {} Hz is implausible",
            c.hz
        );
        assert!(c.read_cost_ticks < 10_000.0);
    }
}
