//! Quality of sampled profiles against the exact truth: the profile windows of a workload — the
//! same work recorded exactly and at each interval (a built-in workload's window after a warm-up
//! and a reset, a service's runs of its load, a command's whole run).
//!
//! The truth of an unwinder is its exact window (every allocation recorded, symbolized). For a
//! sampled profile:
//! * coverage = share of the truly allocated bytes whose stack (as a sequence of function names)
//!   appears in the sampled profile — the published study's criterion (≥ 90% of all memory);
//! * total error = error of the estimated total allocated bytes;
//! * top-stack errors = error of the estimate for each of the truth's top stacks.
//!
//! Addresses differ between runs (ASLR): the dumps of a workload are symbolized together by
//! memlens-profile ([`memlens_profile::symbolize_dumps`]) and a stack is compared across
//! runs as its sequence of function names ([`memlens_profile::Stacks`]).
use anyhow::{Context, Result};
use memlens_profile::short_name;
use memlens_profile::{symbolize_dumps, Frames, Profile, SampleIndex, Stacks};
use serde::Serialize;
use std::collections::HashMap;
use std::path::PathBuf;

/// Stacks of the truth whose estimate error is reported: the largest, at most TOP of them, each
/// with at least MIN_SHARE of the bytes (smaller ones are too rarely sampled to be estimated; the
/// accuracy criterion of the design uses the same 5% threshold).
pub const TOP: usize = 5;
/// The smallest share of the truth's bytes a top stack must hold (see [`TOP`]).
pub const MIN_SHARE: f64 = 0.05;

/// How well one profile matches the exact truth.
#[derive(Debug, Clone, Serialize)]
pub struct Quality {
    /// Share of the truth's allocated bytes whose stack the profile has, percent.
    pub coverage_pct: f64,
    /// Error of the estimated total allocated bytes, percent of the truth's total.
    pub total_error_pct: f64,
    /// Error of the estimate of each top stack of the truth, in the truth's order.
    pub top_errors_pct: Vec<f64>,
    /// Largest absolute error among the top stacks.
    pub top_max_abs_error_pct: f64,
    /// Distinct stacks in the profile.
    pub stacks: usize,
}

/// One of the truth's largest stacks.
#[derive(Debug, Clone, Serialize)]
pub struct TopStack {
    /// Innermost frames first, `;`-joined (the allocating function first).
    pub stack: String,
    /// Bytes it allocated.
    pub bytes: f64,
    /// Its share of all allocated bytes, percent.
    pub share_pct: f64,
}

impl TopStack {
    /// The frames, innermost first.
    pub fn frames(&self) -> impl Iterator<Item = &str> {
        self.stack.split(" ← ")
    }

    /// The stack for a terminal: four frames after the `skip` innermost ones (`…` marks them),
    /// names shortened as pprof shows them.
    pub fn short(&self, skip: usize) -> String {
        let frames: Vec<String> = self.frames().skip(skip).take(4).map(short_name).collect();
        let more = if skip > 0 { "… ← " } else { "" };
        format!("{more}{}", frames.join(" ← "))
    }
}

impl TruthSummary {
    /// Innermost frames every top stack shares (the allocator's own, typically), leaving at least
    /// one frame of each: what a short display of the top stacks can skip.
    pub fn common_frames(&self) -> usize {
        let Some((first, rest)) = self.top.split_first() else {
            return 0;
        };
        let shortest = self.top.iter().map(|s| s.frames().count()).min();
        let shared = first
            .frames()
            .enumerate()
            .take_while(|(i, f)| rest.iter().all(|s| s.frames().nth(*i) == Some(*f)))
            .count();
        shared.min(shortest.unwrap_or(1).saturating_sub(1))
    }
}

/// The exact truth of one unwinder, summarised.
#[derive(Debug, Clone, Serialize)]
pub struct TruthSummary {
    /// The unwinder of the exact run.
    pub unwinder: String,
    /// Bytes allocated.
    pub total_bytes: f64,
    /// Distinct stacks.
    pub stacks: usize,
    /// The largest stacks (see [`TOP`] and [`MIN_SHARE`]), largest first.
    pub top: Vec<TopStack>,
}

/// One run's profile (all its processes' dumps): stacks as function names, innermost first, with
/// their estimated allocated bytes.
#[derive(Debug, Clone, Default)]
pub(crate) struct RunProfile {
    pub(crate) samples: u64,
    truncated: u64,
    stacks: HashMap<Vec<String>, f64>,
}

impl RunProfile {
    /// Add one process's profile, merging stacks by function names.
    fn add(&mut self, p: &Profile) {
        self.samples += p.meta.samples;
        self.truncated += p.meta.truncated;
        let mut fr = Frames::default();
        let st = Stacks::new(p, &mut fr);
        for s in &st.list {
            *self.stacks.entry(st.key(s, &fr)).or_insert(0.0) += s.get(SampleIndex::AllocSpace);
        }
    }

    fn total(&self) -> f64 {
        self.stacks.values().sum()
    }

    pub(crate) fn truncated_share(&self) -> f64 {
        self.truncated as f64 / self.samples.max(1) as f64
    }
}

/// Read the raw dumps of many runs (a run may have several processes' dumps) and symbolize them
/// together. Returns one profile per run, in order.
pub(crate) fn load_runs(runs: &[Vec<PathBuf>]) -> Result<Vec<RunProfile>> {
    let dumps = runs
        .iter()
        .flatten()
        .map(|p| {
            memlens_profile::read_raw(p)
                .with_context(|| format!("cannot read the profile {}", p.display()))
        })
        .collect::<Result<Vec<_>>>()?;
    // A module that cannot be symbolized keeps `module+0xOFFSET` names, still stable across runs:
    // quality is judged all the same, so its warning is not worth printing here.
    let (profiles, _warnings) = symbolize_dumps(&dumps);
    let mut profiles = profiles.into_iter();
    Ok(runs
        .iter()
        .map(|r| {
            let mut run = RunProfile::default();
            for p in profiles.by_ref().take(r.len()) {
                run.add(&p);
            }
            run
        })
        .collect())
}

pub(crate) struct Truth {
    stacks: HashMap<Vec<String>, f64>,
    total: f64,
    top: Vec<(Vec<String>, f64)>,
}

impl Truth {
    pub(crate) fn of(p: &RunProfile) -> Truth {
        let mut top: Vec<(Vec<String>, f64)> =
            p.stacks.iter().map(|(k, v)| (k.clone(), *v)).collect();
        top.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        top.truncate(TOP);
        let total = p.total();
        top.retain(|(_, v)| *v >= MIN_SHARE * total);
        Truth {
            stacks: p.stacks.clone(),
            total,
            top,
        }
    }

    pub(crate) fn summary(&self, unwinder: &str) -> TruthSummary {
        TruthSummary {
            unwinder: unwinder.to_string(),
            total_bytes: self.total,
            stacks: self.stacks.len(),
            top: self
                .top
                .iter()
                .map(|(k, v)| TopStack {
                    stack: k.join(" ← "),
                    bytes: *v,
                    share_pct: v / self.total.max(1.0) * 100.0,
                })
                .collect(),
        }
    }
}

/// Judge a sampled (or exact) profile against the truth.
pub(crate) fn judge_one(truth: &Truth, p: &RunProfile) -> Quality {
    // (a fold from +0: the sum of nothing found is 0, not the -0 of `sum`)
    let covered: f64 = truth
        .stacks
        .iter()
        .filter(|(k, _)| p.stacks.contains_key(*k))
        .fold(0.0, |a, (_, v)| a + v);
    let pct = |x: f64, base: f64| {
        if base > 0.0 {
            x / base * 100.0
        } else {
            f64::NAN
        }
    };
    let top_errors_pct: Vec<f64> = truth
        .top
        .iter()
        .map(|(k, t)| pct(p.stacks.get(k).copied().unwrap_or(0.0) - t, *t))
        .collect();
    Quality {
        coverage_pct: pct(covered, truth.total),
        total_error_pct: pct(p.total() - truth.total, truth.total),
        top_max_abs_error_pct: top_errors_pct.iter().fold(0.0, |m, e| m.max(e.abs())),
        top_errors_pct,
        stacks: p.stacks.len(),
    }
}

/// The quality of one sampled window, its sample count and its share of truncated stacks.
pub type WindowQuality = (Quality, u64, f64);

/// Quality of profiles of the same measured window: `exact` is the truth (every allocation), each
/// of `sampled` one sampled run. Returns the truth's summary and one quality (with its sample count
/// and truncated share) per sampled run.
pub fn window(
    unwinder: &str,
    exact: Vec<PathBuf>,
    sampled: Vec<Vec<PathBuf>>,
) -> Result<(TruthSummary, Vec<WindowQuality>)> {
    let mut all = vec![exact];
    all.extend(sampled);
    let mut ps = load_runs(&all)?.into_iter();
    let truth = Truth::of(&ps.next().expect("the exact run was loaded"));
    let q = ps
        .map(|p| (judge_one(&truth, &p), p.samples, p.truncated_share()))
        .collect();
    Ok((truth.summary(unwinder), q))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prof(stacks: &[(&str, f64)]) -> RunProfile {
        RunProfile {
            samples: stacks.len() as u64,
            truncated: 0,
            stacks: stacks
                .iter()
                .map(|(k, v)| (k.split(';').map(str::to_string).collect(), *v))
                .collect(),
        }
    }

    #[test]
    fn exact_against_itself_is_complete() {
        let p = prof(&[("a;main", 600.0), ("b;main", 300.0), ("c;x;main", 100.0)]);
        let q = judge_one(&Truth::of(&p), &p);
        assert_eq!(q.coverage_pct, 100.0);
        assert_eq!(q.total_error_pct, 0.0);
        assert!(q.top_errors_pct.iter().all(|e| *e == 0.0));
    }

    #[test]
    fn common_frames_leave_one_of_each_stack() {
        let t = |stacks: &[&str]| TruthSummary {
            unwinder: "fp".into(),
            total_bytes: 1.0,
            stacks: stacks.len(),
            top: stacks
                .iter()
                .map(|s| TopStack {
                    stack: s.to_string(),
                    bytes: 1.0,
                    share_pct: 1.0,
                })
                .collect(),
        };
        assert_eq!(
            t(&["malloc ← new ← a ← main", "malloc ← new ← b ← main"]).common_frames(),
            2
        );
        assert_eq!(t(&["malloc ← new", "malloc ← new ← b"]).common_frames(), 1);
        assert_eq!(t(&["a ← main", "b ← main"]).common_frames(), 0);
        assert_eq!(t(&[]).common_frames(), 0);
        let s = &t(&["malloc ← new ← std::vector<int>::push_back(int const&) ← main"]).top[0];
        assert_eq!(s.short(2), "… ← std::vector::push_back ← main");
    }

    #[test]
    fn coverage_counts_bytes_of_found_stacks() {
        let t = Truth::of(&prof(&[
            ("a;main", 600.0),
            ("b;main", 300.0),
            ("c;x;main", 100.0),
        ]));
        let q = judge_one(&t, &prof(&[("a;main", 660.0), ("b;main", 240.0)]));
        assert!((q.coverage_pct - 90.0).abs() < 1e-9);
        assert!((q.total_error_pct - -10.0).abs() < 1e-9);
        assert!((q.top_errors_pct[0] - 10.0).abs() < 1e-9);
        assert!((q.top_errors_pct[1] - -20.0).abs() < 1e-9);
        assert!((q.top_errors_pct[2] - -100.0).abs() < 1e-9);
    }
}
