//! The limits a check judges, and the sampling interval they call for when none is given.
use crate::estimate::{pow2_at_most, Z, Z_PEAK};
use anyhow::Result;
use memlens_measure::error::usage;
use memlens_measure::units::{format_size, parse_size};
use serde::Serialize;

/// Which figure of a process a limit is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Bytes live at the heap's high-water mark (the peak set).
    Peak,
    /// Bytes still live when the process ended.
    Leak,
    /// Bytes allocated over the whole run (every allocation, freed or not).
    Allocated,
}

impl Kind {
    /// Every kind, in the order figures are kept.
    pub const ALL: [Kind; 3] = [Kind::Peak, Kind::Leak, Kind::Allocated];

    /// Its name in output and in suppressions (`leak:REGEX`).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Peak => "peak",
            Kind::Leak => "leak",
            Kind::Allocated => "allocated",
        }
    }

    /// Its index in arrays of figures.
    pub fn index(self) -> usize {
        self as usize
    }

    /// The one-sided confidence of its lower bound: a peak's is widened (see [`Z_PEAK`]).
    pub fn z_lower(self) -> f64 {
        match self {
            Kind::Peak => Z_PEAK,
            _ => Z,
        }
    }

    /// `memlens report` view that shows this figure.
    pub fn view(self) -> &'static str {
        match self {
            Kind::Peak => "peak",
            Kind::Leak => "leaks",
            Kind::Allocated => "alloc",
        }
    }
}

/// What a limit bounds the figure by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// At most this many bytes.
    Size(f64),
    /// At most the baseline's figure times (1 + this fraction).
    Growth(f64),
    /// At most the baseline's figure plus this many bytes.
    GrowthBytes(f64),
}

/// One limit of the command line.
#[derive(Debug, Clone, Serialize)]
pub struct Limit {
    /// The figure it bounds.
    pub kind: Kind,
    /// Judged on each stack rather than on the process's total.
    pub per_stack: bool,
    /// The bound.
    pub bound: Bound,
    /// The option that set it (`--max-peak`).
    pub flag: &'static str,
    /// Its value as given (`100M`, `10%`).
    pub given: String,
}

impl Limit {
    /// A limit in bytes from an option's value.
    pub fn size(kind: Kind, per_stack: bool, flag: &'static str, v: &str) -> Result<Limit> {
        let b = parse_size(v).map_err(|e| usage(format!("bad {flag} '{v}': {e:#}")))?;
        Ok(Limit {
            kind,
            per_stack,
            bound: Bound::Size(b as f64),
            flag,
            given: v.to_string(),
        })
    }

    /// A growth limit in percent of the baseline's figure (`10`, `10%`, `2.5%`).
    pub fn growth(kind: Kind, flag: &'static str, v: &str) -> Result<Limit> {
        let pct: f64 = v
            .trim()
            .trim_end_matches('%')
            .trim()
            .parse()
            .ok()
            .filter(|p: &f64| p.is_finite() && *p >= 0.0 && *p <= 1e6)
            .ok_or_else(|| {
                usage(format!(
                    "bad {flag} '{v}': want a percentage of the baseline (e.g. 10%)"
                ))
            })?;
        Ok(Limit {
            kind,
            per_stack: false,
            bound: Bound::Growth(pct / 100.0),
            flag,
            given: v.to_string(),
        })
    }

    /// A per-stack growth limit in bytes over the baseline's stack.
    pub fn growth_bytes(kind: Kind, flag: &'static str, v: &str) -> Result<Limit> {
        let mut l = Limit::size(kind, true, flag, v)?;
        if let Bound::Size(b) = l.bound {
            l.bound = Bound::GrowthBytes(b);
        }
        Ok(l)
    }

    /// Whether it compares with a baseline.
    pub fn needs_baseline(&self) -> bool {
        !matches!(self.bound, Bound::Size(_))
    }

    /// `--max-peak 100M` as given.
    pub fn shown(&self) -> String {
        format!("{} {}", self.flag, self.given)
    }

    /// The finest interval this limit asks for (not yet a power of two), given the baseline's
    /// total figure and its largest stack of this kind (for limits against a baseline).
    fn interval_for(&self, base_total: f64, base_max_stack: f64) -> f64 {
        let (zl, zh) = (self.kind.z_lower(), Z);
        match self.bound {
            // a figure 5 % from the limit settled: z·√(L·R) ≤ L/20
            Bound::Size(l) => l / (20.0 * zl).powi(2),
            // both figures' bounds within a third of the growth allowed, (zl + zh)·√(B·R) ≤ g·B/3:
            // the two thirds left are 5.5 standard errors of the difference of two runs of an
            // unchanged program, which therefore reads "held", not "inconclusive"
            Bound::Growth(g) => (g / 3.0 / (zl + zh)).powi(2) * base_total,
            // the same with a stack as large as the baseline's largest
            Bound::GrowthBytes(s) => (s / 3.0 / (zl + zh)).powi(2) / base_max_stack.max(s),
        }
    }
}

/// The default interval's floor: finer costs a malloc-heavy program more than it tells (a figure
/// of 1 MiB is known within ±6 % at 95 % here; docs/check.md has the costs).
pub const MIN_DEFAULT: u64 = 1 << 10;
/// The default interval's ceiling: `memlens run`'s default.
pub const MAX_DEFAULT: u64 = 512 << 10;

/// The interval a check samples at when `--interval` is not given, and why: the largest power of
/// two at which every limit is settled at 95 % by a figure 5 % from it (for a growth limit, both
/// runs' bounds within a third of the growth allowed), within [`MIN_DEFAULT`]..[`MAX_DEFAULT`].
/// `base(kind)` gives the baseline's total figure and largest stack of that kind.
pub fn default_interval(limits: &[Limit], base: impl Fn(Kind) -> (f64, f64)) -> (u64, String) {
    let mut best: Option<(f64, &Limit)> = None;
    for l in limits {
        let (total, max_stack) = base(l.kind);
        let r = l.interval_for(total, max_stack);
        if best.is_none_or(|(b, _)| r < b) {
            best = Some((r, l));
        }
    }
    let Some((r, l)) = best else {
        return (MAX_DEFAULT, "memlens run's default".into());
    };
    let r = pow2_at_most(r)
        .unwrap_or(MIN_DEFAULT)
        .clamp(MIN_DEFAULT, MAX_DEFAULT);
    let why = match l.bound {
        Bound::Size(_) => format!(
            "the largest to settle a figure 5% from {} at 95%",
            l.shown()
        ),
        _ => format!(
            "the largest to bound both runs within a third of {} at 95%",
            l.shown()
        ),
    };
    let bounded = if r == MIN_DEFAULT || r == MAX_DEFAULT {
        format!(
            "; the default stays within {}..{}",
            format_size(MIN_DEFAULT),
            format_size(MAX_DEFAULT)
        )
    } else {
        String::new()
    };
    (r, format!("{why}{bounded}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse() {
        let l = Limit::size(Kind::Peak, false, "--max-peak", "100M").unwrap();
        assert_eq!(l.bound, Bound::Size((100 << 20) as f64));
        assert_eq!(
            Limit::growth(Kind::Leak, "--max-leak-growth", "12.5%")
                .unwrap()
                .bound,
            Bound::Growth(0.125)
        );
        assert_eq!(
            Limit::growth(Kind::Leak, "--max-leak-growth", "10")
                .unwrap()
                .bound,
            Bound::Growth(0.1)
        );
        for bad in ["-1%", "x", "", "1e9%"] {
            let e = Limit::growth(Kind::Leak, "--max-leak-growth", bad).unwrap_err();
            assert!(memlens_measure::error::is_usage(&e), "{bad}");
        }
        assert!(Limit::size(Kind::Leak, false, "--max-leak", "lots").is_err());
        let g = Limit::growth_bytes(Kind::Leak, "--max-leak-growth-per-stack", "1M").unwrap();
        assert_eq!(g.bound, Bound::GrowthBytes((1 << 20) as f64));
        assert!(g.per_stack && g.needs_baseline());
    }

    #[test]
    fn default_interval_follows_the_tightest_limit() {
        let none = |_| (0.0, 0.0);
        // 100 MiB of leak: (100 MiB/20/1.96)² / 100 MiB = 68 KiB → 64 KiB.
        let leak = Limit::size(Kind::Leak, false, "--max-leak", "100M").unwrap();
        assert_eq!(
            default_interval(std::slice::from_ref(&leak), none).0,
            64 << 10
        );
        // a peak's lower bound is wider: 100 MiB → 15.9 KiB → 8 KiB
        let peak = Limit::size(Kind::Peak, false, "--max-peak", "100M").unwrap();
        let (r, why) = default_interval(&[leak.clone(), peak], none);
        assert_eq!(r, 8 << 10);
        assert!(why.contains("--max-peak 100M"), "{why}");
        // small limits stop at the floor, none at all is run's default
        let tiny = Limit::size(Kind::Leak, false, "--max-leak", "0").unwrap();
        let (r, why) = default_interval(&[tiny], none);
        assert_eq!(r, MIN_DEFAULT);
        assert!(why.contains("within"), "{why}");
        assert_eq!(default_interval(&[], none).0, MAX_DEFAULT);
        // 10 % over a baseline leak of 64 MiB: (0.1/3/3.92)² · 64 MiB = 4.7 KiB → 4 KiB
        let g = Limit::growth(Kind::Leak, "--max-leak-growth", "10%").unwrap();
        assert_eq!(
            default_interval(&[g], |_| (64.0 * 1048576.0, 0.0)).0,
            4 << 10
        );
    }
}
