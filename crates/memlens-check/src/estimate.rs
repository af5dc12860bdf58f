//! How far a sampled figure may be from the truth, and what that makes of a limit.
//!
//! The runtime samples a block of s bytes with probability p = 1 − e^(−s/R) and weighs it s/p, so
//! a figure E (the sum of the weights of the sampled blocks of a set) is unbiased, with variance
//! Σ s²·(1 − p)/p = Σ s²/(e^(s/R) − 1) over every block of the set. Per block that is R²·k(s/R)
//! with k(x) = x²/(eˣ − 1) ≤ min(x, K), K = 0.6476 (k's maximum, at x ≈ 1.594): a figure of B bytes
//! in N blocks has a variance of at most R·min(B, K·N·R). That is B·R whatever the sizes (the
//! bound `memlens report --view peak` prints), and far less when the bytes are in a few large
//! blocks (each is then sampled almost surely). The profile's estimates of B and N stand for them.
//!
//! With few samples a normal interval is wrong (nothing sampled would read "exactly 0"), so the
//! figure is read as c·n, n a Poisson count and c = V/E the bytes one sample stands for (≤ R), and
//! bounded by Garwood's exact Poisson interval on n (χ² quantiles by Wilson and Hilferty's
//! approximation). With many samples that is E ± z·√V; with none it is [0, R·ln 40]: a Poisson
//! process over bytes leaves H bytes unsampled with probability e^(−H/R), under 2.5 % beyond
//! H = 3.69·R. A figure made of large blocks (c ≪ R) may still hide up to that much in small ones
//! unsampled, which the upper bound adds.
use serde::Serialize;

/// One-sided 97.5 % quantile of the normal distribution: each bound of a two-sided 95 % interval.
pub const Z: f64 = 1.959_964;

/// One-sided 1 − 2.5 %/1000 quantile: the lower bound of a peak. The peak is the highest of the
/// estimate over the whole run, the maximum of a noisy curve, which leans high (redis at 512K:
/// +19 % ≈ 2 standard errors, docs/heap-views.md). Bounding it as the highest of up to 1000
/// independent estimates (Bonferroni: 2.5 % shared among 1000) keeps a peak verdict of "broken"
/// at 95 %.
pub const Z_PEAK: f64 = 4.0556;

/// Maximum of x²/(eˣ − 1): the most variance one block can carry, in units of R².
const K_MAX: f64 = 0.6476;

/// ln 40: the upper 97.5 % bound of a Poisson mean when nothing was counted.
const UNSEEN: f64 = 3.688_879;

/// A sampled figure (bytes) and what is known of its error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Est {
    /// The estimate, bytes.
    pub value: f64,
    /// An upper bound of its variance, bytes².
    pub var: f64,
    /// The sampling interval R it was sampled at (0: every allocation recorded).
    pub interval: f64,
    /// Bytes the figure may miss on top of its sampling error: samples the runtime dropped, the
    /// step between the peak set and the highest estimate.
    pub missing: f64,
    /// One estimate of one moment, not the highest of a run's (a peak read from the split
    /// samples): its lower bound needs no widening ([`Est::z_lower`]).
    #[serde(skip)]
    pub one_moment: bool,
    /// The least its upper bound may be, whatever its own interval: a split peak's is what the
    /// run's highest estimate allows (a spike briefer than the heap's churn is not told from
    /// noise; `memlens report --view peak` prints the same upper end). 0: none.
    #[serde(skip)]
    pub upper_floor: f64,
}

impl Est {
    /// The figure of `bytes` in `objects` blocks (the profile's estimates) sampled at `interval`.
    pub fn of(bytes: f64, objects: f64, interval: u64) -> Est {
        let r = interval as f64;
        let bytes = bytes.max(0.0);
        Est {
            value: bytes,
            var: r * bytes.min(K_MAX * objects.max(0.0) * r),
            interval: r,
            missing: 0.0,
            one_moment: false,
            upper_floor: 0.0,
        }
    }

    /// The split-sample peak (`memlens report --view peak`'s figure): the mean of each half's
    /// estimate at the other half's highest, an unbiased estimate of the heap at one moment whose
    /// variance is at most that of one whole estimate, `bytes`·R (docs/heap-views.md).
    /// `highest`: the run's highest estimate, whose bound is the least upper bound
    /// ([`Est::upper_floor`]).
    pub fn split_peak(bytes: f64, highest: f64, interval: u64) -> Est {
        let r = interval as f64;
        let bytes = bytes.max(0.0);
        Est {
            value: bytes,
            var: r * bytes,
            interval: r,
            missing: 0.0,
            one_moment: true,
            upper_floor: memlens_profile::peak_bound_from_highest(highest, r),
        }
    }

    /// The one-sided confidence of the lower bound of a figure of `kind`'s (`kind_z`): a peak that
    /// is the highest of a run's estimates is widened, a split-sample one is not.
    pub fn z_lower(&self, kind_z: f64) -> f64 {
        if self.one_moment {
            Z
        } else {
            kind_z
        }
    }

    /// The sum of two figures of disjoint sets of blocks (independent samples).
    pub fn add(&mut self, o: &Est) {
        self.value += o.value;
        self.var += o.var;
        self.interval = self.interval.max(o.interval);
        self.missing += o.missing;
    }

    /// The bytes one sample stands for (c = V/E), and the effective count of samples E/c.
    fn per_sample(&self) -> Option<(f64, f64)> {
        (self.interval > 0.0 && self.var > 0.0 && self.value > 0.0).then(|| {
            let c = self.var / self.value;
            (c, self.value / c)
        })
    }

    /// The lower bound at one-sided confidence `z` (a normal quantile).
    pub fn lower(&self, z: f64) -> f64 {
        match self.per_sample() {
            Some((c, n)) => c * poisson_lower(n, z),
            None => self.value,
        }
    }

    /// The upper bound at one-sided 97.5 % ([`Z`]; an upper bound is never widened as a peak's
    /// lower one is: the peak leans high on its own).
    pub fn upper(&self) -> f64 {
        let r = self.interval;
        if r <= 0.0 {
            return self.value + self.missing;
        }
        // what small blocks may hide unsampled, less what the count's own bound allows for
        let unseen = |c: f64| (r - c).max(0.0) * UNSEEN;
        let sampled = match self.per_sample() {
            Some((c, n)) => c * poisson_upper(n, Z) + unseen(c),
            None => self.value + unseen(0.0),
        };
        sampled.max(self.upper_floor) + self.missing
    }
}

/// Lower bound of a Poisson mean when `n` was counted: χ²(2n) at the lower tail, halved.
fn poisson_lower(n: f64, z: f64) -> f64 {
    if n <= 0.0 {
        return 0.0;
    }
    let base = 1.0 - 1.0 / (9.0 * n) - z / (3.0 * n.sqrt());
    n * base.max(0.0).powi(3)
}

/// Upper bound of a Poisson mean when `n` was counted: χ²(2n + 2) at the upper tail, halved.
fn poisson_upper(n: f64, z: f64) -> f64 {
    let m = n.max(0.0) + 1.0;
    m * (1.0 - 1.0 / (9.0 * m) + z / (3.0 * m.sqrt())).powi(3)
}

/// What a limit makes of a figure's interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The whole interval is within the limit.
    Held,
    /// The interval straddles the limit: this interval cannot tell.
    Inconclusive,
    /// The whole interval is beyond the limit.
    Broken,
}

impl Verdict {
    /// The word the output uses.
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Held => "held",
            Verdict::Inconclusive => "inconclusive",
            Verdict::Broken => "BROKEN",
        }
    }
}

/// The largest interval (a power of two) at which a figure of `value` bytes is at least `margin`
/// bytes from its limit's bound at one-sided confidence `z` — under the small-block bound √(E·R)
/// of its standard error; None when no interval is fine enough.
pub fn interval_to_settle(value: f64, margin: f64, z: f64) -> Option<u64> {
    if margin <= 0.0 {
        return None;
    }
    let r = (margin / z).powi(2) / value.max(margin);
    pow2_at_most(r)
}

/// The largest power of two at most `r` (None below 1).
pub fn pow2_at_most(r: f64) -> Option<u64> {
    if r.is_nan() || r < 1.0 {
        return None;
    }
    let r = r.min((1u64 << 62) as f64) as u64;
    Some(1u64 << (63 - r.leading_zeros()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlens_measure::rng::Rng;

    #[test]
    fn a_split_peak_is_bounded_above_by_what_the_highest_estimate_allows() {
        let r: f64 = 512.0 * 1024.0;
        // the split reads the churn's plateau; the highest estimate may hold a brief spike
        let e = Est::split_peak(25e6, 40e6, 512 << 10);
        let own = Est::split_peak(25e6, 0.0, 512 << 10);
        assert!(own.upper() < 34e6, "{}", own.upper());
        let hi = e.upper();
        assert!(
            hi > 40e6 + 1.96 * (40e6 * r).sqrt() * 0.9 && hi > own.upper(),
            "{hi}"
        );
        assert_eq!(hi, memlens_profile::peak_bound_from_highest(40e6, r));
        assert_eq!(e.lower(Z), own.lower(Z), "the lower end is the split's");
    }

    #[test]
    fn nothing_sampled_bounds_at_ln_40_intervals() {
        let e = Est::of(0.0, 0.0, 4096);
        assert_eq!(e.lower(Z), 0.0);
        let hi = e.upper();
        assert!((hi / 4096.0 - UNSEEN).abs() < 0.05, "{hi}");
    }

    #[test]
    fn many_small_samples_are_the_normal_interval() {
        // 10 000 samples of blocks far below R: E ± 1.96·√(E·R), within 1 %.
        let r = 4096u64;
        let e = Est::of(1e4 * r as f64, 1e6, r);
        let sd = (e.value * r as f64).sqrt();
        let (lo, hi) = (e.lower(Z), e.upper());
        assert!(((e.value - lo) / (Z * sd) - 1.0).abs() < 0.01, "{lo}");
        assert!(((hi - e.value) / (Z * sd) - 1.0).abs() < 0.02, "{hi}");
    }

    #[test]
    fn large_blocks_carry_little_error() {
        // Ten blocks of 100·R: each sampled with p = 1 − e^(−100), the figure is all but exact.
        // Their count bounds the variance by 10·K·R² (blocks at the worst size, 1.6·R), ±5 R at
        // 95 %, where the bytes alone (1000 R²) would allow ±62 R; above, what small blocks could
        // hide unsampled (3.7 R) adds to it.
        let r = 4096.0;
        let e = Est::of(1000.0 * r, 10.0, r as u64);
        let lo = e.value - e.lower(Z);
        assert!(lo > 4.5 * r && lo < 5.5 * r, "{}", lo / r);
        let hi = e.upper() - e.value;
        assert!(hi > 8.0 * r && hi < 10.0 * r, "{}", hi / r);
    }

    #[test]
    fn exact_figures_have_no_interval() {
        let e = Est::of(12345.0, 3.0, 0);
        assert_eq!((e.lower(Z), e.upper()), (12345.0, 12345.0));
    }

    /// The runtime's sampling simulated: blocks of a mix of sizes (many small, some near R, a few
    /// large), each kept with probability 1 − e^(−s/R) and weighed s/p. The interval must cover
    /// the true total in at least 95 % of 4000 trials, and it must not be so wide that it always
    /// does (the bound is conservative, not useless): each side misses the truth in at most 2.5 %.
    #[test]
    fn intervals_cover_the_truth_at_95_percent() {
        let r = 8192.0;
        let mut g = Rng::new(32);
        let sizes: Vec<f64> = (0..3000)
            .map(|i| match i % 10 {
                0..=6 => 16.0 + (g.below(200) as f64),
                7 | 8 => 4096.0 + (g.below(16384) as f64),
                _ => 65536.0 * (1 + g.below(8)) as f64,
            })
            .collect();
        let truth: f64 = sizes.iter().sum();
        let (mut below, mut above) = (0, 0);
        let trials = 4000;
        for _ in 0..trials {
            let (mut b, mut n) = (0.0, 0.0);
            for &s in &sizes {
                let p = 1.0 - (-s / r).exp();
                let u = (g.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                if u < p {
                    b += s / p;
                    n += 1.0 / p;
                }
            }
            let e = Est::of(b, n, r as u64);
            below += (e.upper() < truth) as u32;
            above += (e.lower(Z) > truth) as u32;
        }
        // Each side: at most 2.5 % expected; 3.5 % leaves room for 4000 trials' own noise
        // (binomial sd 0.25 %).
        assert!(
            below as f64 <= 0.035 * trials as f64,
            "upper < truth in {below}"
        );
        assert!(
            above as f64 <= 0.035 * trials as f64,
            "lower > truth in {above}"
        );
    }

    #[test]
    fn settling_intervals() {
        // 10 MB, 1 MB from its limit: (1 MB/1.96)²/10 MB = 26 KB → 16 KiB.
        assert_eq!(interval_to_settle(10e6, 1e6, Z), Some(16384));
        assert_eq!(interval_to_settle(10e6, 0.0, Z), None);
        assert_eq!(pow2_at_most(0.5), None);
        assert_eq!(pow2_at_most(4096.0), Some(4096));
        assert_eq!(pow2_at_most(8191.0), Some(4096));
    }
}
