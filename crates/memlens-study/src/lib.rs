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
//! Shared by both: `Row`, the JSON contract of a configuration's row (`row.rs`); the overhead
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

const EXAMPLE: &str = "Examples:
  memlens study                                  paired study: synthetic loop, redis, pipeline (< 5 min)
  memlens study --quick                          a small paired study (seconds)
  memlens study --workload pipeline --working-sets llc --unwinders fp --intervals 64K,512K,2M
  memlens study --load 'redis-benchmark -p 6400 -n 20000 -q' -- redis-server --port 6400
                                                 your server, started inactive, paired under its load
  memlens study --pid 1234 --load './loadtest' --metric 'p99=([0-9.]+)'
                                                 a running process (attached if it has no runtime)
  memlens study --unpaired --baselines tcmalloc,heaptrack --repeats 5   separate processes, marked unpaired
  memlens study --unpaired --metric 'p99=([0-9.]+)' -- ./loadtest      any command, unpaired

Every paired process also runs placebo blocks (switched to as off is): a difference is resolved
only when its whole 95% interval lies beyond the placebo's. Method: docs/study.md.";

/// What heap profiling costs, by interval and unwinder
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLE)]
pub struct StudyArgs {
    /// Built-in workloads to study: synthetic, redis, pipeline (a list) or all (ignored with
    /// --load or a CMD)
    #[arg(long, default_value = "all", value_name = "LIST")]
    pub(crate) workload: String,
    /// Study a program under its own load, paired in time inside its process: CMD (run by `sh -c`)
    /// is one block's load; the program is `-- SERVER ARGS` (started with the runtime inactive) or
    /// --pid
    #[arg(long, value_name = "CMD")]
    pub(crate) load: Option<String>,
    /// With --load: a running process to study (through its control socket; attached, and
    /// detached at the end, when it has no runtime)
    #[arg(long, value_name = "PID")]
    pub(crate) pid: Option<String>,
    /// Sampling intervals (mean bytes between samples) [default: 64K,128K,256K,512K,1M,2M,4M; --quick: 64K,2M]
    #[arg(long, value_name = "LIST")]
    pub(crate) intervals: Option<String>,
    /// Unwinders to measure: dwarf, fp, libgcc, libunwind (default: dwarf,fp; --quick: fp; --unpaired:
    /// all available here); `none` = only off and inactive
    #[arg(long, value_name = "LIST")]
    pub(crate) unwinders: Option<String>,
    /// Baseline profilers: jemalloc (paired), tcmalloc and heaptrack (--unpaired only), or none
    #[arg(long, default_value = "jemalloc", value_name = "LIST")]
    pub(crate) baselines: String,
    /// A small study for tests and a first look: 4 rounds, intervals 64K and 2M, the fp unwinder,
    /// one working set
    #[arg(long)]
    pub(crate) quick: bool,
    /// Paired: rounds of every configuration in the first processes, all together (each round:
    /// every configuration once between off blocks) [default: 40, a service 16; --quick: 4]
    #[arg(long, value_name = "N")]
    pub(crate) rounds: Option<u32>,
    /// Paired: processes every configuration is measured in, at least (the intervals cover what
    /// differs between them); a --pid study has one
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub(crate) processes: u32,
    /// Paired: placebo configurations per process (switched to as off is); the first calibrates
    /// what counts as resolved, more measure how often an A/A difference is called resolved
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) placebos: u32,
    /// Service: runs of the load in each profile window (quality)
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub(crate) window_loads: u32,
    /// Paired: block length in milliseconds
    #[arg(long, default_value_t = 10, value_name = "MS")]
    pub(crate) block_ms: u64,
    /// Paired: time limit of the whole study in seconds; after the first rounds, further rounds
    /// of the configurations whose 95% CI is still wider than its target (--ci-target) run while
    /// they fit; 0 = the first rounds only [default: 270; --quick: 0]
    #[arg(long, value_name = "S")]
    pub(crate) max_time: Option<f64>,
    /// Paired: half width of the 95% CI to aim for, points: synthetic loop, pipeline, service
    /// (the service's defaults to the pipeline's)
    #[arg(long, default_value = "2,4,4", value_name = "SYN,PIPE[,SVC]")]
    pub(crate) ci_target: String,
    /// Paired pipeline: working sets of the books, from l2 (4 x L2 per thread), llc (half the
    /// last-level cache), dram (4 x LLC)
    #[arg(long, default_value = "l2,llc,dram", value_name = "LIST")]
    pub(crate) working_sets: String,
    /// Paired: ticks per thread of each profile window (quality); 0 = no quality
    #[arg(long, value_name = "N")]
    pub(crate) window_ticks: Option<u64>,
    /// Overhead budget of the recommendation: the upper end of the interval's 95% CI, percent
    #[arg(long, default_value_t = 5.0, value_name = "PCT")]
    pub(crate) budget: f64,
    /// Separate processes per configuration, compared by medians (for what cannot switch at run
    /// time: tcmalloc, heaptrack, a CMD); results are marked unpaired
    #[arg(long)]
    pub(crate) unpaired: bool,
    /// Unpaired: repeats of every configuration (run interleaved: A B C … A B C …)
    #[arg(long, default_value_t = 5)]
    pub(crate) repeats: u32,
    /// Skip the exact-mode runs (no coverage figures then)
    #[arg(long)]
    pub(crate) no_exact: bool,
    /// Repeats of the exact-mode runs (the truth; slow with the libgcc unwinder), at most --repeats
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) exact_repeats: u32,
    /// synthetic: thread counts, one table per count (e.g. 1,2)
    #[arg(long, default_value = "2", value_name = "LIST")]
    pub(crate) threads: String,
    /// synthetic: block size
    #[arg(long, default_value = "512", value_name = "SIZE")]
    pub(crate) size: String,
    /// synthetic: call-stack depth of the loop
    #[arg(long, default_value_t = 10)]
    pub(crate) depth: u32,
    /// synthetic: malloc/free pairs per thread (and as many timed mallocs)
    #[arg(long, default_value_t = 100_000)]
    pub(crate) ops: u64,
    /// pipeline: quotes per run
    #[arg(long, default_value_t = 10_000)]
    pub(crate) quotes: u64,
    /// pipeline: instruments (order books)
    #[arg(long, default_value_t = 4096)]
    pub(crate) instruments: usize,
    /// pipeline: seed of the quote generator
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Coverage a recommended interval must reach, in percent
    #[arg(long, default_value_t = 90.0, value_name = "PCT")]
    pub(crate) min_coverage: f64,
    /// Also recommend the interval with the best coverage whose overhead stays under PCT
    #[arg(long, value_name = "PCT")]
    pub(crate) max_overhead: Option<f64>,
    /// The metric. With --load: cpu (the process's CPU time per run of the load, the default),
    /// wall (the load's wall time), or a REGEX whose first capture group is read from the load's
    /// output. Unpaired CMD: a REGEX (default: wall time)
    #[arg(long, value_name = "cpu|wall|REGEX")]
    pub(crate) metric: Option<String>,
    /// The --metric figure is a rate (higher is better, e.g. requests per second): its inverse is
    /// the cost
    #[arg(long)]
    pub(crate) metric_rate: bool,
    /// Result files (--json, --csv, --html).
    #[command(flatten)]
    pub(crate) out: memlens_render::output::OutputArgs,
    /// Write the SVG plots into DIR
    #[arg(long, value_name = "DIR")]
    pub(crate) plots: Option<PathBuf>,
    /// With --load: the server to start and study; else any program to study unpaired
    #[arg(last = true, value_name = "CMD")]
    pub(crate) cmd: Vec<String>,
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
    if args.load.is_some() && args.unpaired {
        return Err(usage(
            "--load studies a program paired in its process: drop --unpaired",
        ));
    }
    // Says at once when other programs keep the machine busy (engine "study1": a warning at the
    // end, as `bench alloc` prints, is yours to add with `busy.end_warning`).
    let _busy = memlens_measure::busy::Watch::start("memlens study");
    if args.unpaired || (!args.cmd.is_empty() && args.load.is_none()) {
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
