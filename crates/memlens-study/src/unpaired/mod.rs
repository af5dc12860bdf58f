//! The unpaired study (`--unpaired`, and any command after `--`): every configuration in separate
//! processes, interleaved (A B C … A B C …), compared by the median of per-repeat ratios.
//!
//! * `configs.rs`: the configurations and the reference each is compared with.
//! * `workload.rs`: the built-in workloads and any command, and how their metric is read.
//! * `runner.rs`: the runs, interleaved; `judge.rs`: their profiles against the exact runs.
//! * `report.rs`: rows, recommendations, the document, and the JSON, CSV and HTML files.
mod configs;
mod judge;
mod report;
mod runner;
mod workload;

use crate::{profilers, StudyArgs};
use anyhow::Result;
use memlens_measure::usage;
use workload::Workload;

pub(crate) use report::emit;
pub(crate) use runner::run_plan;

/// The unpaired study's parameters, validated.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Workloads measured.
    pub workloads: Vec<Workload>,
    /// Sampling intervals.
    pub intervals: Vec<u64>,
    /// memlens unwinders.
    pub unwinders: Vec<String>,
    /// Other profilers, found here or not.
    pub baselines: Vec<profilers::Baseline>,
    /// Runs of every configuration.
    pub repeats: u32,
    /// Runs of the exact-mode configurations (at most `repeats`).
    pub exact_repeats: u32,
    /// Are the exact-mode runs (the truth of quality) made?
    pub exact: bool,
    /// Coverage a recommended interval must reach, percent.
    pub min_coverage: f64,
    /// Also recommend the best coverage under this overhead, percent.
    pub max_overhead: Option<f64>,
}

/// The unpaired study's plan from the command line (usage errors before anything runs).
pub(crate) fn plan(a: &StudyArgs) -> Result<Plan> {
    let intervals = crate::intervals(a)?;
    if intervals.contains(&0) {
        return Err(usage(
            "bad --intervals: an interval must be > 0 (exact mode is measured anyway)",
        ));
    }
    if a.repeats == 0 || a.repeats > 1000 {
        return Err(usage("--repeats must be between 1 and 1000"));
    }
    if !(0.0..=100.0).contains(&a.min_coverage) {
        return Err(usage("--min-coverage is a percentage between 0 and 100"));
    }
    let unwinders = profilers::unwinders(a.unwinders.as_deref())?;
    let baselines = profilers::baselines(&a.baselines)?;
    let workloads = workload::from_args(a)?;
    Ok(Plan {
        workloads,
        intervals,
        unwinders,
        baselines,
        repeats: a.repeats,
        exact_repeats: a.exact_repeats.clamp(1, a.repeats),
        exact: !a.no_exact,
        min_coverage: a.min_coverage,
        max_overhead: a.max_overhead,
    })
}
