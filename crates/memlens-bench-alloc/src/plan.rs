//! What a `bench alloc` run was decided to be before its first child: the patterns, sizes, threads
//! and objects per run (`Plan`), and the defaults and calibration rule behind them. The runner
//! (lib.rs) builds it and the report (report.rs) reads it, so the report needs nothing of the runner.
use crate::child;
/// Objects of the calibration run: a few ms with a fast allocator, fewer for big objects (each may
/// cost a page fault or a system call).
pub(crate) fn default_ops(size: u64) -> u64 {
    (4u64 << 30)
        .checked_div(size)
        .unwrap_or(0)
        .clamp(2_000, 200_000)
}

/// What one run should last on the calibration allocator (the fastest one is usually glibc on one
/// thread, so slower allocators and contended runs take longer).
pub(crate) fn target_ms(quick: bool) -> f64 {
    if quick {
        15.0
    } else {
        150.0
    }
}

/// Objects for a run to last `target` ms, from a calibration run of `ops` objects that took
/// `took_ms`: never fewer than the calibration's, at most 1000 times more.
pub(crate) fn calibrated_ops(ops: u64, took_ms: f64, target: f64) -> u64 {
    let scale = (target / took_ms.max(0.01)).clamp(1.0, 1000.0);
    ((ops as f64 * scale) as u64).max(ops)
}

/// Default live objects per thread. split and larson keep 1000 (the study's objects created and
/// kept), at most 64 MiB (split) or 128 MiB (larson) of them; batch and cross hand over batches of 64.
pub(crate) fn default_live(pattern: &str, size: u64) -> u64 {
    match pattern {
        "larson" => ((128u64 << 20) / size.max(1)).clamp(8, 1000),
        "split" => ((64u64 << 20) / size.max(1)).clamp(8, 1000),
        _ => 64,
    }
}

/// Everything decided before the first run.
pub(crate) struct Plan {
    pub patterns: Vec<&'static str>,
    pub sizes: Vec<u64>,
    pub threads: Vec<u64>,
    pub repeats: u64,
    pub ncpu: u64,
    pub ops: Option<u64>,
    /// Objects per run of each (pattern, size), from --ops or the calibration run.
    pub calibrated: Vec<(&'static str, u64, u64)>,
    pub quick: bool,
    pub live: Option<u64>,
    pub touch: bool,
    pub sample_every: u64,
    pub seed: u64,
}

impl Plan {
    pub(crate) fn job(&self, pattern: &'static str, size: u64, threads: u64) -> child::Job {
        let ops = self
            .ops
            .or_else(|| {
                self.calibrated
                    .iter()
                    .find(|c| c.0 == pattern && c.1 == size)
                    .map(|c| c.2)
            })
            .unwrap_or_else(|| default_ops(size))
            .max(1);
        child::Job {
            pattern,
            size,
            threads,
            ops,
            live: self.live.unwrap_or_else(|| default_live(pattern, size)),
            touch: self.touch,
            sample_every: self.sample_every,
            seed: self.seed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_counts_scale_with_size() {
        assert_eq!(default_ops(128), 200_000);
        assert_eq!(default_ops(1 << 20), 4096);
        assert_eq!(default_ops(1 << 30), 2_000);
        assert_eq!(default_live("larson", 128), 1000);
        assert_eq!(default_live("larson", 1 << 20), 128);
        assert_eq!(default_live("split", 128), 1000);
        assert_eq!(default_live("split", 1 << 20), 64);
        assert_eq!(default_live("batch-lifo", 128), 64);
    }

    #[test]
    fn calibration_scales_runs_to_the_target() {
        // 200k objects in 10 ms → 3M for 150 ms.
        assert_eq!(calibrated_ops(200_000, 10.0, 150.0), 3_000_000);
        // Already long enough: unchanged, never fewer.
        assert_eq!(calibrated_ops(200_000, 400.0, 150.0), 200_000);
        // A run too fast to time is scaled at most 1000-fold.
        assert_eq!(calibrated_ops(2_000, 0.0, 150.0), 2_000_000);
    }
}
