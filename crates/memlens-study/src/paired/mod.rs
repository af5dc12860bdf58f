//! The paired study (the default): one process per workload and profiler switches the profiler
//! itself between off and each interval in short blocks; overheads are paired in time.
//!
//! * `engine.rs`: the processes, the schedule of further rounds, the profile windows, the rows.
//! * `stats.rs`: each block against the off blocks beside it.
//! * `verdict.rs`: the answer first, the tables, and the JSON, CSV and HTML files.
mod engine;
mod stats;
mod verdict;

use crate::{profilers, StudyArgs};
use anyhow::Result;
use memlens_measure::{units, usage};

pub(crate) use engine::{run, Settings, Workload};
pub(crate) use verdict::emit;

// Default budget (`memlens study`, the README's main job, < 4 minutes on 2 cores): 1 synthetic +
// 3 pipeline workloads × (2 unwinders + jemalloc) = 12 processes, each 8 warm-up blocks + 40 rounds ×
// 15 blocks × 10 ms ≈ 6 s → ~75 s, plus 2 × 8 profile windows of the pipeline (~1 s each) ≈ 15 s;
// the rest of --max-time (230 s) goes to further rounds of the intervals still wider than their
// target. 10 ms rather than 20 ms blocks: a round takes half the time and was about as informative
// on this 2-core VM (fp 64K, 50 rounds: ±1.5–3.9 points at 10 ms vs ±1.1–3.6 at 20 ms), with the
// same overhead (README, study section).
// libgcc and libunwind are measured on request.

/// Unwinders of the default paired study (the others on request: `--unwinders dwarf,fp,libgcc,libunwind`).
const DEFAULT_PAIRED_UNWINDERS: &str = "dwarf,fp";

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

/// The paired study's settings from the command line (usage errors before anything runs).
pub(crate) fn settings(a: &StudyArgs) -> Result<Settings> {
    if a.metric.is_some() {
        return Err(usage("--metric applies to a CMD given after `--`"));
    }
    let mut baselines = profilers::baselines(&a.baselines)?;
    if let Some(b) = baselines
        .iter()
        .find(|b| b.kind != profilers::BaselineKind::Jemalloc)
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
        (None, false) => profilers::unwinders(Some(DEFAULT_PAIRED_UNWINDERS))?,
        (Some(u), _) => profilers::unwinders(Some(u))?,
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
            workloads.extend(syn_threads.iter().map(|&t| Workload::Synthetic {
                threads: t,
                size,
                depth: a.depth,
            }));
        } else {
            for s in &sets {
                workloads.push(Workload::Pipeline {
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
    Ok(Settings {
        workloads,
        intervals: crate::intervals(a)?,
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
