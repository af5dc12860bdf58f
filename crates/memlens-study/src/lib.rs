//! `memlens study`: what heap profiling costs, by sampling interval and unwinder, and which interval
//! to use — the experiment of DESIGN.md ("published studies", item 1) as one command.
//!
//! For each workload (the synthetic malloc-test loop, the trading pipeline, or any command) the study
//! runs a set of configurations — no runtime, runtime inactive, sampling at each interval × unwinder,
//! exact mode, and the baselines (jemalloc's and tcmalloc's profilers over their own allocators,
//! heaptrack) — in interleaved repeats, reads the workload's metric from each run, and reads the
//! profiles memlens wrote to judge their quality against an exact run (coverage, error of estimates).
//!
//! * [`workload`]: how each workload is started and where its metric comes from.
//! * [`configs`]: the configurations and the baselines found on this machine.
//! * [`runner`]: running one child process and collecting its metric and profile.
//! * [`quality`]: coverage and estimation error of sampled profiles against the exact truth.
//! * [`report`]: summaries, the recommendation, tables, JSON/CSV, SVG plots and HTML.
use anyhow::Result;
use memlens_measure::{units, usage};
use std::path::PathBuf;

// Default run budget (`memlens study` with no arguments, the README's main job: ~3 minutes on 2 cores).
// Per workload: off, inactive, 3 unwinders × 7 intervals, jemalloc + 7, tcmalloc + 7, heaptrack = 40
// configurations × 5 repeats = 200 runs, plus 3 exact runs (once each: they are the truth, and exact
// with libgcc is slow).
//   synthetic (2 threads × 100k pairs + 100k mallocs): ~0.1 s a run → 200 × 0.1 = 20 s; exact fp/libunwind
//     ~1 s, libgcc ~10 s; heaptrack ~2 s × 5 = 10 s                                          ≈ 45 s
//   pipeline (10k quotes at 40k/s over 4096 books, ~0.1 s to build the books): ~0.35 s a run
//     → 200 × 0.35 = 70 s; exact fp ~1 s, libunwind ~2 s, libgcc ~10 s; heaptrack ~3 s × 5 = 15 s  ≈ 100 s
//   reading and symbolizing ~210 profiles per workload                                        ≈ 10 s
// Total ≈ 2.5–3 min on an idle machine; under load from parallel builds it stretches (6 min seen).
pub mod configs;
pub mod quality;
pub mod rawdump;
pub mod report;
pub mod runner;
pub mod workload;

const EXAMPLE: &str = "Example:
  memlens study                                   both built-in workloads, default intervals (~3 min)
  memlens study --workload synthetic --threads 1,2 --intervals 64K,512K,2M --baselines jemalloc,heaptrack
  memlens study --intervals 512K,2M --repeats 3 -- ./server --bench    any command; metric = wall time
  memlens study --metric 'p99=([0-9.]+)' -- ./loadtest                 metric printed by the command";

/// What heap profiling costs, by interval and unwinder
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLE)]
pub struct StudyArgs {
    /// Built-in workloads to study: synthetic, pipeline or all (ignored when a CMD is given)
    #[arg(long, default_value = "all", value_name = "NAME")]
    pub workload: String,
    /// Sampling intervals (mean bytes between samples)
    #[arg(
        long,
        default_value = "64K,128K,256K,512K,1M,2M,4M",
        value_name = "LIST"
    )]
    pub intervals: String,
    /// Unwinders to measure: dwarf, fp, libgcc, libunwind (default: all available here); `none` = only off and inactive
    #[arg(long, value_name = "LIST")]
    pub unwinders: Option<String>,
    /// Baseline profilers: jemalloc, tcmalloc, heaptrack, or none
    #[arg(
        long,
        default_value = "jemalloc,tcmalloc,heaptrack",
        value_name = "LIST"
    )]
    pub baselines: String,
    /// Repeats of every configuration (run interleaved: A B C … A B C …)
    #[arg(long, default_value_t = 5)]
    pub repeats: u32,
    /// Skip the exact-mode runs (no coverage figures then)
    #[arg(long)]
    pub no_exact: bool,
    /// Repeats of the exact-mode runs (the truth; slow with the libgcc unwinder), at most --repeats
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub exact_repeats: u32,
    /// synthetic: thread counts, one table per count (e.g. 1,2)
    #[arg(long, default_value = "2", value_name = "LIST")]
    pub threads: String,
    /// synthetic: block size
    #[arg(long, default_value = "512", value_name = "SIZE")]
    pub size: String,
    /// synthetic: call-stack depth of the loop
    #[arg(long, default_value_t = 10)]
    pub depth: u32,
    /// synthetic: malloc/free pairs per thread (and as many timed mallocs)
    #[arg(long, default_value_t = 100_000)]
    pub ops: u64,
    /// pipeline: quotes per run
    #[arg(long, default_value_t = 10_000)]
    pub quotes: u64,
    /// pipeline: instruments (order books)
    #[arg(long, default_value_t = 4096)]
    pub instruments: usize,
    /// pipeline: seed of the quote generator
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Coverage a recommended interval must reach, in percent
    #[arg(long, default_value_t = 90.0, value_name = "PCT")]
    pub min_coverage: f64,
    /// Also recommend the interval with the best coverage whose overhead stays under PCT
    #[arg(long, value_name = "PCT")]
    pub max_overhead: Option<f64>,
    /// CMD only: the metric is the first capture group of REGEX in CMD's output (default: wall time)
    #[arg(long, value_name = "REGEX")]
    pub metric: Option<String>,
    #[command(flatten)]
    pub out: memlens_measure::output::OutputArgs,
    /// Write the SVG plots into DIR
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
    /// Any program to study instead of the built-in workloads
    #[arg(last = true, value_name = "CMD")]
    pub cmd: Vec<String>,
}

/// The study's parameters, validated.
#[derive(Debug, Clone)]
pub struct Plan {
    pub workloads: Vec<workload::Workload>,
    pub intervals: Vec<u64>,
    pub unwinders: Vec<String>,
    pub baselines: Vec<configs::Baseline>,
    pub repeats: u32,
    pub exact_repeats: u32,
    pub exact: bool,
    pub min_coverage: f64,
    pub max_overhead: Option<f64>,
}

fn plan(a: &StudyArgs) -> Result<Plan> {
    let intervals =
        units::parse_size_list(&a.intervals).map_err(|e| usage(format!("bad --intervals: {e}")))?;
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
    let unwinders = configs::unwinders(a.unwinders.as_deref())?;
    let baselines = configs::baselines(&a.baselines)?;
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

pub fn run_study(args: StudyArgs) -> Result<i32> {
    let plan = plan(&args)?;
    let results = runner::run_plan(&plan)?;
    report::emit(&plan, &results, &args)?;
    Ok(0)
}
