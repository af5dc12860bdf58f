//! Summary statistics for repeated measurements.
use serde::{Deserialize, Serialize};

/// Median and spread of a set of repeats.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// Number of values.
    pub n: usize,
    /// Median.
    pub median: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl Summary {
    /// Summarise `xs`; `None` when empty.
    pub fn of(xs: &[f64]) -> Option<Summary> {
        if xs.is_empty() {
            return None;
        }
        let mut v = xs.to_vec();
        v.sort_by(|a, b| a.total_cmp(b));
        Some(Summary {
            n: v.len(),
            median: quantile_sorted(&v, 0.5),
            mean: v.iter().sum::<f64>() / v.len() as f64,
            min: v[0],
            max: v[v.len() - 1],
        })
    }

    /// Width of the min–max range.
    pub fn spread(&self) -> f64 {
        self.max - self.min
    }

    /// Relative spread (max-min)/median, or 0 when the median is 0.
    pub fn rel_spread(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            self.spread() / self.median.abs()
        }
    }
}

/// Quantile `q` (0 ≤ q ≤ 1) of already sorted data, linear interpolation between closest ranks.
pub fn quantile_sorted(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
}

/// Quantile of unsorted data.
pub fn quantile(xs: &[f64], q: f64) -> f64 {
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    quantile_sorted(&v, q)
}

/// Percent change of `x` over `base` (`+10.0` means 10% more).
pub fn overhead_pct(x: f64, base: f64) -> f64 {
    (x / base - 1.0) * 100.0
}

/// Two results are a tie when their min–max ranges overlap: the spread is larger than the difference
/// being ranked on.
pub fn is_tie(a: &Summary, b: &Summary) -> bool {
    a.min <= b.max && b.min <= a.max
}

/// Pearson correlation of two equally long series; `None` if undefined (fewer than 2 points or zero variance).
pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    if x.len() != y.len() || x.len() < 2 {
        return None;
    }
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    if sxx == 0.0 || syy == 0.0 {
        return None;
    }
    Some(sxy / (sxx * syy).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_and_quantiles() {
        let s = Summary::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!(s.median, 2.5);
        assert_eq!(s.min, 1.0);
        assert_eq!(s.max, 10.0);
        assert_eq!(quantile(&[1.0, 2.0, 3.0, 4.0, 5.0], 0.5), 3.0);
        assert!(Summary::of(&[]).is_none());
    }

    #[test]
    fn ties_and_correlation() {
        let a = Summary::of(&[1.0, 2.0]).unwrap();
        let b = Summary::of(&[1.5, 3.0]).unwrap();
        let c = Summary::of(&[5.0, 6.0]).unwrap();
        assert!(is_tie(&a, &b));
        assert!(!is_tie(&a, &c));
        assert!((pearson(&[1.0, 2.0, 3.0], &[2.0, 4.0, 6.0]).unwrap() - 1.0).abs() < 1e-12);
        assert!(pearson(&[1.0, 1.0], &[2.0, 3.0]).is_none());
        assert!((overhead_pct(110.0, 100.0) - 10.0).abs() < 1e-9);
    }
}
