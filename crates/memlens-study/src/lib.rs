//! `memlens study`: what heap profiling costs, by sampling interval and unwinder, and which interval
//! to use — measured paired in time, on a synthetic loop and on a realistic hot path.
//!
//! The default study is paired ([`paired`]): each workload runs in one process per profiler (memlens
//! with each unwinder, jemalloc's profiler), and that process switches the profiler between off and
//! each interval in short blocks, in an order shuffled per round; an overhead is the median over
//! rounds of a block against the off blocks beside it ([`stats`]), with a bootstrap 95% interval.
//! Quality is judged on a profile window of the realistic workload: the same ticks, after a warm-up
//! and a reset, recorded exactly and at each interval ([`quality`]). [`verdict`] puts the answer first.
//!
//! What cannot switch at run time (tcmalloc's sampler, heaptrack, any command after `--`) runs with
//! `--unpaired` in separate, interleaved processes ([`runner`], [`configs`], [`workload`],
//! [`report`]) and is marked unpaired.
#![warn(missing_docs)]
use anyhow::Result;
use memlens_measure::{units, usage};
use std::path::PathBuf;

// Default budget (`memlens study`, the README's main job, < 4 minutes on 2 cores): 1 synthetic +
// 3 pipeline workloads × (2 unwinders + jemalloc) = 12 processes, each 8 warm-up blocks + 40 rounds ×
// 15 blocks × 10 ms ≈ 6 s → ~75 s, plus 2 × 8 profile windows of the pipeline (~1 s each) ≈ 15 s;
// the rest of --max-time (230 s) goes to further rounds of the intervals still wider than their
// target. 10 ms rather than 20 ms blocks: a round takes half the time and was about as informative
// on this 2-core VM (fp 64K, 50 rounds: ±1.5–3.9 points at 10 ms vs ±1.1–3.6 at 20 ms), with the
// same overhead (README, study section).
// libgcc and libunwind are measured on request.
pub mod configs;
pub mod paired;
pub mod quality;
pub mod report;
pub mod runner;
pub mod stats;
pub mod verdict;
pub mod workload;

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

/// The unpaired study's parameters, validated.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Workloads measured.
    pub workloads: Vec<workload::Workload>,
    /// Sampling intervals.
    pub intervals: Vec<u64>,
    /// memlens unwinders.
    pub unwinders: Vec<String>,
    /// Other profilers, found here or not.
    pub baselines: Vec<configs::Baseline>,
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

fn plan(a: &StudyArgs) -> Result<Plan> {
    let intervals = intervals(a)?;
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

/// Unwinders of the default paired study (the others on request: `--unwinders dwarf,fp,libgcc,libunwind`).
const DEFAULT_PAIRED_UNWINDERS: &str = "dwarf,fp";

const DEFAULT_INTERVALS: &str = "64K,128K,256K,512K,1M,2M,4M";

fn intervals(a: &StudyArgs) -> Result<Vec<u64>> {
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

/// Working set of a name: l2, llc or dram (or a size).
fn working_set(name: &str, threads: u64) -> Result<u64> {
    let l2 = memlens_measure::sysinfo::caches()
        .iter()
        .find(|c| c.level == 2)
        .map_or(1 << 20, |c| c.size_bytes);
    let llc = memlens_measure::sysinfo::llc_bytes().max(4 << 20);
    Ok(match name {
        "l2" => 4 * l2 * threads,
        "llc" => llc / 2,
        "dram" => 4 * llc,
        other => units::parse_size(other).map_err(|_| {
            usage(format!(
                "unknown working set '{other}' (use l2, llc, dram or a size)"
            ))
        })?,
    })
}

fn paired_settings(a: &StudyArgs) -> Result<paired::Settings> {
    if a.metric.is_some() {
        return Err(usage("--metric applies to a CMD given after `--`"));
    }
    let mut baselines = configs::baselines(&a.baselines)?;
    if let Some(b) = baselines
        .iter()
        .find(|b| b.kind != configs::BaselineKind::Jemalloc)
    {
        return Err(usage(format!(
            "{} cannot be switched at run time: measure it with --unpaired",
            b.name()
        )));
    }
    let jemalloc = match baselines.pop() {
        Some(b) if b.path.is_none() => {
            eprintln!("memlens: baseline jemalloc is not installed here (Debian package libjemalloc2); it is left out");
            false
        }
        Some(_) => true,
        None => false,
    };
    // Each unwinder is one process per workload plus its profile windows: the default measures the
    // two that matter most (memlens's own and frame pointers) to keep the study under 4 minutes.
    let unwinders = match (&a.unwinders, a.quick) {
        (None, true) => vec!["fp".to_string()],
        (None, false) => configs::unwinders(Some(DEFAULT_PAIRED_UNWINDERS))?,
        (Some(u), _) => configs::unwinders(Some(u))?,
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let syn_threads =
        units::parse_count_list(&a.threads).map_err(|e| usage(format!("bad --threads: {e}")))?;
    if syn_threads.iter().any(|&t| t == 0 || t > 1024) {
        return Err(usage("--threads must be between 1 and 1024"));
    }
    let size = units::parse_size(&a.size)?;
    let sets: Vec<&str> = if a.quick {
        vec!["l2"]
    } else {
        a.working_sets.split(',').map(str::trim).collect()
    };
    let mut workloads = Vec::new();
    let names: &[&str] = match a.workload.as_str() {
        "all" => &["synthetic", "pipeline"],
        "synthetic" => &["synthetic"],
        "pipeline" => &["pipeline"],
        other => {
            return Err(usage(format!(
                "unknown workload '{other}' (use synthetic, pipeline or all)"
            )))
        }
    };
    for n in names {
        if *n == "synthetic" {
            workloads.extend(syn_threads.iter().map(|&t| paired::Workload::Synthetic {
                threads: t,
                size,
                depth: a.depth,
            }));
        } else {
            for s in &sets {
                workloads.push(paired::Workload::Pipeline {
                    label: s.to_string(),
                    working_set: working_set(s, threads)?,
                });
            }
        }
    }
    let rounds = a.rounds.unwrap_or(if a.quick { 4 } else { 40 });
    let max_seconds = a.max_time.unwrap_or(if a.quick { 0.0 } else { 230.0 });
    if !(0.0..=86_400.0).contains(&max_seconds) {
        return Err(usage(
            "--max-time is a number of seconds between 0 and 86400",
        ));
    }
    let targets: Vec<f64> = a
        .ci_target
        .split(',')
        .map(|x| x.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| usage("bad --ci-target: two numbers of points, e.g. 2,4"))?;
    let [target_synthetic, target_pipeline] = targets[..] else {
        return Err(usage("bad --ci-target: two numbers of points, e.g. 2,4"));
    };
    if !(target_synthetic > 0.0 && target_pipeline > 0.0) {
        return Err(usage("bad --ci-target: the half widths must be > 0"));
    }
    if rounds == 0 || rounds > 10_000 || a.block_ms == 0 || a.block_ms > 10_000 {
        return Err(usage("--rounds and --block-ms must be between 1 and 10000"));
    }
    if !(0.0..=100.0).contains(&a.min_coverage) {
        return Err(usage("--min-coverage is a percentage between 0 and 100"));
    }
    Ok(paired::Settings {
        workloads,
        intervals: intervals(a)?,
        unwinders,
        jemalloc,
        rounds,
        max_seconds,
        target_synthetic,
        target_pipeline,
        block_ms: if a.quick { 10 } else { a.block_ms },
        window_ticks: if a.no_exact {
            0
        } else {
            a.window_ticks.unwrap_or(20_000)
        },
        min_coverage: a.min_coverage,
        budget: a.budget,
        seed: a.seed,
    })
}

/// Run `memlens study`.
pub fn run_study(args: StudyArgs) -> Result<i32> {
    if args.unpaired || !args.cmd.is_empty() {
        let plan = plan(&args)?;
        let results = runner::run_plan(&plan)?;
        report::emit(&plan, &results, &args)?;
        return Ok(0);
    }
    let s = paired_settings(&args)?;
    let r = paired::run(s)?;
    verdict::emit(&r, &args.out)?;
    Ok(0)
}
