//! The counters of `bench latency`: the shared perf machinery ([`memlens_measure::counters`]) plus
//! the plausibility probe, which needs this crate's pointer chase: a hardware event that opens but
//! reads zero or nonsense under a load that must count it is shown as `n/a (reason)`.
use crate::chase;
pub use memlens_measure::counters::*;

/// The probe of hardware events, run once before measuring.
pub trait Validate {
    /// See the implementation on [`CounterSet`].
    fn validate(&mut self, huge: bool) -> Vec<(String, String)>;
}

impl Validate for CounterSet {
    /// Check that each open hardware event counts something plausible under a load that must make it
    /// count: a random chase over 64 MiB (cache and TLB misses on every load). Events that read zero
    /// or contradict the TSC are marked unavailable with the reason. Returns what the probe saw.
    fn validate(&mut self, huge: bool) -> Vec<(String, String)> {
        let mut notes = Vec::new();
        let hardware = self.hardware_open();
        if hardware.is_empty() {
            return notes;
        }
        let Ok(list) = chase::build(chase::Order::Random, 64, 64 << 20, huge, 0x5eed) else {
            return notes;
        };
        let loads = chase::round16(200_000);
        chase::chase(list.head, loads); // warm the page tables and caches once
        self.start();
        let t0 = memlens_measure::tsc::now_ordered();
        std::hint::black_box(chase::chase(list.head, loads));
        let ticks = (memlens_measure::tsc::now_ordered() - t0) as f64;
        let r = self.stop();
        for v in r.iter().filter(|v| hardware.contains(&v.name)) {
            let x = v.value.unwrap_or(0.0);
            let bad = if let Some(u) = &v.unavailable {
                Some(u.clone())
            } else if x == 0.0 {
                Some(format!("reads 0 under a probe of {loads} cache- and TLB-missing loads: not counted here"))
            } else if v.name == "cycles" && !(0.05..=20.0).contains(&(x / ticks)) {
                Some(format!(
                    "implausible: {x:.0} cycles in {ticks:.0} TSC ticks"
                ))
            } else if v.name == "instructions" && x < loads as f64 {
                Some(format!(
                    "implausible: {x:.0} instructions for {loads} loads"
                ))
            } else {
                None
            };
            notes.push((
                v.name.clone(),
                bad.clone()
                    .unwrap_or_else(|| format!("ok ({:.2} per probe load)", x / loads as f64)),
            ));
            if let Some(b) = bad {
                self.disable_event(&v.name, b);
            }
        }
        if let (Some(m), Some(r)) = (get(&r, "cache-misses"), get(&r, "cache-references")) {
            if m > r * 1.05 {
                let why = format!("implausible: {m:.0} misses > {r:.0} references");
                self.disable_event("cache-misses", why);
            }
        }
        notes
    }
}
