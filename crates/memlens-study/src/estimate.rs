//! An overhead as the study reports it: the median of per-round paired values, with a
//! percentile-bootstrap 95% interval.
//!
//! The study measures every configuration switched in blocks in several processes, and what differs between
//! processes (where the allocator's arenas landed, what else ran on the machine meanwhile) is not
//! covered by resampling the rounds of one. So the bootstrap is hierarchical: each resample draws
//! the processes with replacement, then the rounds of each drawn process with replacement, and
//! takes the median of what it drew. With one process it is the plain bootstrap over rounds.
//!
//! With few processes that still understates what differs between them (a resample of two
//! processes can only reproduce their spread, never a third's), so the interval is widened where
//! needed to the random-effects one: the pooled median ± t(G−1) × SD of the processes' medians /
//! √G, Student's t for G processes (12.7 for two, 4.3 for three, 2.6 for six).
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

    /// Do the two intervals overlap (no difference resolved)? (The tests ask; verdicts use `beyond`.)
    #[cfg(test)]
    pub fn overlaps(&self, o: &Estimate) -> bool {
        self.lo <= o.hi && o.lo <= self.hi
    }

    /// Does the whole interval lie beyond ±`band` (a difference larger than an A/A reading)?
    pub fn beyond(&self, band: f64) -> bool {
        self.lo > band || self.hi < -band
    }
}

/// Median of `v` in linear time (reorders `v`; NaN for an empty slice).
fn median(v: &mut [f64]) -> f64 {
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    let (left, m, _) = v.select_nth_unstable_by(n / 2, |a, b| a.total_cmp(b));
    let m = *m;
    if n % 2 == 1 {
        return m;
    }
    let below = left.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (below + m) / 2.0
}

/// A small deterministic generator (xorshift), so the same data give the same interval.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Resamples of a bootstrap.
const RESAMPLES: usize = 2000;

/// The processes (groups) of `groups` that hold values.
fn nonempty(groups: &[Vec<f64>]) -> Vec<&[f64]> {
    groups
        .iter()
        .filter(|g| !g.is_empty())
        .map(Vec::as_slice)
        .collect()
}

/// One hierarchical resample's median: processes with replacement, then rounds within each.
fn draw(groups: &[&[f64]], rng: &mut Rng, buf: &mut Vec<f64>) -> f64 {
    buf.clear();
    for _ in 0..groups.len() {
        let g = groups[rng.below(groups.len())];
        buf.extend((0..g.len()).map(|_| g[rng.below(g.len())]));
    }
    median(buf)
}

fn percentiles(mut meds: Vec<f64>, pct: f64, n: usize) -> Estimate {
    meds.sort_by(|a, b| a.total_cmp(b));
    let q = |p| memlens_measure::stats::quantile_sorted(&meds, p);
    Estimate {
        pct,
        lo: q(0.025),
        hi: q(0.975),
        n,
    }
}

/// Student's t, two-sided 95%, for `df` degrees of freedom (df ≥ 1).
fn t975(df: usize) -> f64 {
    const T: [f64; 10] = [
        12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    ];
    match df {
        0 => f64::INFINITY,
        1..=10 => T[df - 1],
        11..=15 => 2.131,
        16..=20 => 2.086,
        21..=30 => 2.042,
        _ => 1.96,
    }
}

/// Half width of the random-effects interval over the processes' medians (see the module);
/// `None` with fewer than two processes.
fn between(groups: &[&[f64]]) -> Option<f64> {
    if groups.len() < 2 {
        return None;
    }
    let meds: Vec<f64> = groups.iter().map(|g| median(&mut g.to_vec())).collect();
    let k = meds.len() as f64;
    let mean = meds.iter().sum::<f64>() / k;
    let sd = (meds.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (k - 1.0)).sqrt();
    Some(t975(meds.len() - 1) * sd / k.sqrt())
}

/// Widen `e` to ± `half` around its median where that is wider.
fn widen(mut e: Estimate, half: Option<f64>) -> Estimate {
    if let Some(h) = half {
        e.lo = e.lo.min(e.pct - h);
        e.hi = e.hi.max(e.pct + h);
    }
    e
}

/// Median of all values with a hierarchical-bootstrap 95% interval over `groups` (one per
/// process), widened to the random-effects interval where that is wider (see the module).
/// `None` when there is no value.
pub fn estimate_groups(groups: &[Vec<f64>]) -> Option<Estimate> {
    let g = nonempty(groups);
    if g.is_empty() {
        return None;
    }
    let mut all: Vec<f64> = g.iter().flat_map(|x| x.iter().copied()).collect();
    let n = all.len();
    let pct = median(&mut all);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut buf = Vec::with_capacity(n);
    let meds = (0..RESAMPLES)
        .map(|_| draw(&g, &mut rng, &mut buf))
        .collect();
    Some(widen(percentiles(meds, pct, n), between(&g)))
}

/// Median of `xs` with a percentile-bootstrap 95% interval (2000 resamples, fixed seed so the same
/// data give the same interval). `None` when empty.
#[cfg(test)]
pub fn estimate(xs: &[f64]) -> Option<Estimate> {
    estimate_groups(&[xs.to_vec()])
}

/// Difference of medians a − b of two configurations' per-round values, each given by process,
/// with a hierarchical-bootstrap 95% interval (each side resampled on its own, so it holds for
/// values from different processes too; for two configurations of the same processes it is
/// conservative), widened to the two sides' random-effects half widths added in quadrature
/// where that is wider. `None` when either is empty.
pub fn difference_groups(a: &[Vec<f64>], b: &[Vec<f64>]) -> Option<Estimate> {
    let (ga, gb) = (nonempty(a), nonempty(b));
    if ga.is_empty() || gb.is_empty() {
        return None;
    }
    let flat = |g: &[&[f64]]| -> Vec<f64> { g.iter().flat_map(|x| x.iter().copied()).collect() };
    let (mut fa, mut fb) = (flat(&ga), flat(&gb));
    let n = fa.len().min(fb.len());
    let pct = median(&mut fa) - median(&mut fb);
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut buf = Vec::new();
    let d = (0..RESAMPLES)
        .map(|_| draw(&ga, &mut rng, &mut buf) - draw(&gb, &mut rng, &mut buf))
        .collect();
    let half = match (between(&ga), between(&gb)) {
        (None, None) => None,
        (x, y) => Some(x.unwrap_or(0.0).hypot(y.unwrap_or(0.0))),
    };
    Some(widen(percentiles(d, pct, n), half))
}

/// [`difference_groups`] of two sets of values from one process each.
#[cfg(test)]
pub fn difference(a: &[f64], b: &[f64]) -> Option<Estimate> {
    difference_groups(&[a.to_vec()], &[b.to_vec()])
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

    #[test]
    fn median_is_the_middle_value_or_the_mean_of_the_two() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }

    /// Rounds of one process look alike; processes differ by an offset. The plain bootstrap over
    /// the pooled rounds is as narrow as the rounds' noise; the hierarchical one spans the
    /// processes, so it contains what another process would read.
    #[test]
    fn hierarchical_interval_covers_what_differs_between_processes() {
        let process = |offset: f64, seed: u64| -> Vec<f64> {
            let mut r = Rng(seed);
            (0..200)
                .map(|_| offset + (r.below(1000) as f64 / 1000.0 - 0.5))
                .collect()
        };
        let groups = vec![process(4.0, 1), process(6.0, 2), process(5.0, 3)];
        let flat: Vec<f64> = groups.iter().flatten().copied().collect();
        let plain = estimate(&flat).unwrap();
        let hier = estimate_groups(&groups).unwrap();
        assert_eq!((plain.pct, plain.n), (hier.pct, hier.n));
        assert!(plain.half_width() < 0.3, "{plain:?}");
        assert!(hier.half_width() > 2.0 * plain.half_width(), "{hier:?}");
        // a fourth process at 4.5 falls inside the hierarchical interval, not the plain one
        assert!(
            hier.lo < 4.5 && 4.5 < hier.hi && plain.lo > 4.5,
            "{plain:?} {hier:?}"
        );
        // one process: the plain bootstrap
        assert_eq!(estimate_groups(&groups[..1]), estimate(&groups[0]));
        // processes that agree: the bootstrap's interval, not widened
        let same = vec![process(5.0, 1), process(5.0, 2), process(5.0, 3)];
        let e = estimate_groups(&same).unwrap();
        assert!(e.half_width() < 0.5, "{e:?}");
        // a difference carries both sides' spread between processes
        let d = difference_groups(&groups, &same).unwrap();
        assert!(d.lo < -2.0 && d.hi > 2.0, "{d:?}");
        assert!(estimate_groups(&[vec![], vec![]]).is_none());
    }

    #[test]
    fn a_band_is_exceeded_only_by_a_whole_interval() {
        let e = |lo, hi| Estimate {
            pct: (lo + hi) / 2.0,
            lo,
            hi,
            n: 10,
        };
        assert!(e(2.0, 4.0).beyond(1.5));
        assert!(!e(1.0, 4.0).beyond(1.5));
        assert!(e(-4.0, -2.0).beyond(1.5));
        assert!(!e(-1.0, 1.0).beyond(0.0));
    }
}
