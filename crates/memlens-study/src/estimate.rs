//! An overhead as both engines report it: the median of per-round (paired) or per-repeat
//! (unpaired) ratios, with a percentile-bootstrap 95% interval.
use serde::{Deserialize, Serialize};

/// An overhead estimate in percent: median of the paired per-round values with its bootstrap 95%
/// confidence interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Median over rounds, percent.
    pub pct: f64,
    /// Lower end of the 95% interval, percent.
    pub lo: f64,
    /// Upper end of the 95% interval, percent.
    pub hi: f64,
    /// Rounds it rests on.
    pub n: usize,
}

impl Estimate {
    /// Half the width of the interval, in points.
    pub fn half_width(&self) -> f64 {
        (self.hi - self.lo) / 2.0
    }

    /// `+12.3 ±1.1`.
    pub fn show(&self) -> String {
        format!("{:+.1} ±{:.1}", self.pct, self.half_width())
    }

    /// `+12.3 [+11.0, +13.1]` (the interval itself: a median's interval need not be symmetric).
    pub fn show_ci(&self) -> String {
        format!("{:+.1} [{:+.1}, {:+.1}]", self.pct, self.lo, self.hi)
    }

    /// Do the two intervals overlap (no difference resolved)?
    pub fn overlaps(&self, o: &Estimate) -> bool {
        self.lo <= o.hi && o.lo <= self.hi
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    memlens_measure::stats::quantile_sorted(v, 0.5)
}

/// Median of `xs` with a percentile-bootstrap 95% interval (2000 resamples, fixed seed so the same
/// data give the same interval). `None` when empty.
pub fn estimate(xs: &[f64]) -> Option<Estimate> {
    if xs.is_empty() {
        return None;
    }
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut meds: Vec<f64> = (0..2000)
        .map(|_| {
            let mut s: Vec<f64> = (0..xs.len())
                .map(|_| xs[(next() % xs.len() as u64) as usize])
                .collect();
            median(&mut s)
        })
        .collect();
    meds.sort_by(|a, b| a.total_cmp(b));
    let q = |p| memlens_measure::stats::quantile_sorted(&meds, p);
    Some(Estimate {
        pct: median(&mut xs.to_vec()),
        lo: q(0.025),
        hi: q(0.975),
        n: xs.len(),
    })
}

/// Difference of medians a − b of two sets of per-round values, with a bootstrap 95% interval
/// (each set resampled on its own, so it holds for values from different processes too). `None`
/// when either is empty.
pub fn difference(a: &[f64], b: &[f64]) -> Option<Estimate> {
    if a.is_empty() || b.is_empty() {
        return None;
    }
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut draw = |v: &[f64]| {
        let mut s: Vec<f64> = (0..v.len())
            .map(|_| v[(next() % v.len() as u64) as usize])
            .collect();
        median(&mut s)
    };
    let mut d: Vec<f64> = (0..2000).map(|_| draw(a) - draw(b)).collect();
    d.sort_by(|p, q| p.total_cmp(q));
    let q = |p| memlens_measure::stats::quantile_sorted(&d, p);
    Some(Estimate {
        pct: median(&mut a.to_vec()) - median(&mut b.to_vec()),
        lo: q(0.025),
        hi: q(0.975),
        n: a.len().min(b.len()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn difference_of_medians_resolves_or_ties() {
        let a: Vec<f64> = (0..60).map(|i| 10.0 + (i % 7) as f64 * 0.3).collect();
        let b: Vec<f64> = (0..40).map(|i| 2.0 + (i % 5) as f64 * 0.3).collect();
        let d = difference(&a, &b).unwrap();
        assert!(d.lo > 0.0 && d.lo <= d.pct && d.pct <= d.hi, "{d:?}");
        let t = difference(&a, &a).unwrap();
        assert!(t.lo <= 0.0 && 0.0 <= t.hi, "{t:?}");
        assert!(difference(&a, &[]).is_none());
    }
}
