//! `memlens study`: what heap profiling costs, by sampling interval and unwinder, and which interval
//! to use — measured paired in time, on a synthetic loop and on a realistic hot path.
//!
//! Two engines, one contract:
//!
//! * `paired/` (the default): each workload runs in one process per profiler (memlens with each
//!   unwinder, jemalloc's profiler), and that process switches the profiler between off and each
//!   interval in short blocks, in an order shuffled per round; an overhead is the median over rounds
//!   of a block against the off blocks beside it (`paired/stats.rs`). Quality is judged on a profile
//!   window of the realistic workload: the same ticks, after a warm-up and a reset, recorded exactly
//!   and at each interval. `paired/verdict.rs` puts the answer first.
//! * `unpaired/` (`--unpaired`): what cannot switch at run time (tcmalloc's sampler, heaptrack, any
//!   command after `--`) runs in separate, interleaved processes (`runner.rs`, `configs.rs`,
//!   `workload.rs`, `judge.rs`; `report.rs` renders it), marked unpaired.
//!
//! Shared by both: [`Row`], the JSON contract of a configuration's row (`row.rs`); the overhead
//! estimate with its bootstrap 95% interval (`estimate.rs`); quality against the exact truth
//! (`quality.rs`); the profilers found on this machine (`profilers.rs`).
#![warn(missing_docs)]
use anyhow::Result;
use memlens_measure::{units, usage};
use std::path::PathBuf;

mod estimate;
mod paired;
mod profilers;
mod quality;
mod row;
mod unpaired;

pub use row::Row;

const EXAMPLE: &str = "Example:
  memlens study                                  paired study of both built-in workloads (< 4 min)
  memlens study --quick                          a small paired study (seconds)
  memlens study --workload pipeline --working-sets llc --unwinders fp --intervals 64K,512K,2M
  memlens study --unpaired --baselines tcmalloc,heaptrack --repeats 5   separate processes, marked unpaired
  memlens study --unpaired --metric 'p99=([0-9.]+)' -- ./loadtest      any command (always unpaired)";

/// What heap profiling costs, by interval and unwinder
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLE)]
pub struct StudyArgs {
    /// Built-in workloads to study: synthetic, pipeline or all (ignored when a CMD is given)
    #[arg(long, default_value = "all", value_name = "NAME")]
    pub workload: String,
    /// Sampling intervals (mean bytes between samples) [default: 64K,128K,256K,512K,1M,2M,4M; --quick: 64K,2M]
    #[arg(long, value_name = "LIST")]
    pub intervals: Option<String>,
    /// Unwinders to measure: dwarf, fp, libgcc, libunwind (default: dwarf,fp; --quick: fp; --unpaired:
    /// all available here); `none` = only off and inactive
    #[arg(long, value_name = "LIST")]
    pub unwinders: Option<String>,
    /// Baseline profilers: jemalloc (paired), tcmalloc and heaptrack (--unpaired only), or none
    #[arg(long, default_value = "jemalloc", value_name = "LIST")]
    pub baselines: String,
    /// A small study for tests and a first look: 4 rounds, intervals 64K and 2M, the fp unwinder,
    /// one working set
    #[arg(long)]
    pub quick: bool,
    /// Paired: rounds of the first process of each workload and profiler (each round: every
    /// interval once between off blocks) [default: 40; --quick: 4]
    #[arg(long, value_name = "N")]
    pub rounds: Option<u32>,
    /// Paired: block length in milliseconds
    #[arg(long, default_value_t = 10, value_name = "MS")]
    pub block_ms: u64,
    /// Paired: time limit of the whole study in seconds; after the first rounds, further rounds
    /// of the intervals whose 95% CI is still wider than its target (±2 points synthetic, ±4
    /// pipeline) run while they fit; 0 = the first rounds only [default: 230; --quick: 0]
    #[arg(long, value_name = "S")]
    pub max_time: Option<f64>,
    /// Paired: half width of the 95% CI to aim for, points: synthetic loop, pipeline
    #[arg(long, default_value = "2,4", value_name = "SYN,PIPE")]
    pub ci_target: String,
    /// Paired pipeline: working sets of the books, from l2 (4 x L2 per thread), llc (half the
    /// last-level cache), dram (4 x LLC)
    #[arg(long, default_value = "l2,llc,dram", value_name = "LIST")]
    pub working_sets: String,
    /// Paired: ticks per thread of each profile window (quality); 0 = no quality
    #[arg(long, value_name = "N")]
    pub window_ticks: Option<u64>,
    /// Overhead budget of the recommendation: the upper end of the interval's 95% CI, percent
    #[arg(long, default_value_t = 5.0, value_name = "PCT")]
    pub budget: f64,
    /// Separate processes per configuration, compared by medians (for what cannot switch at run
    /// time: tcmalloc, heaptrack, a CMD); results are marked unpaired
    #[arg(long)]
    pub unpaired: bool,
    /// Unpaired: repeats of every configuration (run interleaved: A B C … A B C …)
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
    /// Result files (--json, --csv, --html).
    #[command(flatten)]
    pub out: memlens_measure::output::OutputArgs,
    /// Write the SVG plots into DIR
    #[arg(long, value_name = "DIR")]
    pub plots: Option<PathBuf>,
    /// Any program to study instead of the built-in workloads (implies --unpaired)
    #[arg(last = true, value_name = "CMD")]
    pub cmd: Vec<String>,
}

const DEFAULT_INTERVALS: &str = "64K,128K,256K,512K,1M,2M,4M";

/// The `--intervals` of either engine (`--quick`: 64K and 2M).
pub(crate) fn intervals(a: &StudyArgs) -> Result<Vec<u64>> {
    let def = if a.quick { "64K,2M" } else { DEFAULT_INTERVALS };
    let v = units::parse_size_list(a.intervals.as_deref().unwrap_or(def))
        .map_err(|e| usage(format!("bad --intervals: {e}")))?;
    if v.contains(&0) || v.is_empty() {
        return Err(usage(
            "bad --intervals: an interval must be > 0 (exact mode is measured anyway)",
        ));
    }
    Ok(v)
}

/// Run `memlens study`.
pub fn run_study(args: StudyArgs) -> Result<i32> {
    if args.unpaired || !args.cmd.is_empty() {
        let plan = unpaired::plan(&args)?;
        let results = unpaired::run_plan(&plan)?;
        unpaired::emit(&plan, &results, &args)?;
        return Ok(0);
    }
    let s = paired::settings(&args)?;
    let r = paired::run(s)?;
    paired::emit(&r, &args.out)?;
    Ok(0)
}
