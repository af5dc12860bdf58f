//! `memlens bench alloc`: which allocator scales for a pattern of allocation. Each configuration
//! (allocator × pattern × size × threads) runs in a fresh child process with the allocator preloaded;
//! repeats are interleaved so drift on the machine hits every allocator alike.
#![warn(missing_docs)]
mod allocators;
mod child;
mod plan;
mod report;

use anyhow::{Context, Result};
use memlens_measure::units::{format_size, parse_count_list, parse_size_list};
use memlens_measure::usage;
use memlens_render::progress::Progress;
use plan::{calibrated_ops, target_ms, Plan};
use std::path::PathBuf;
use std::time::Duration;

const AFTER_HELP: &str = "\
Patterns (each moves a fixed total of --ops objects divided among the threads, so the
ideal time on T threads is 1/T of one thread's, up to the number of CPUs):
  split    each thread creates and destroys its share; an object lives while the next
           --live are made. The study's test.
  pairs    malloc immediately followed by free (malloc-test).
  batch    allocate --live blocks, then free them: runs batch-lifo (newest first) and
           batch-fifo (oldest first); either can be asked for alone.
  cross    half the threads (rounded up) allocate batches of --live blocks and hand them
           through queues to the other half, which free them: every free is cross-thread.
           With one thread the producer frees its own batches.
  larson   --live slots per thread (default 1000, fewer for big sizes) hold blocks of
           random size in [size/8, size]; each step frees a random slot and refills it;
           after every --live steps each thread moves on to the next thread's slots, so
           blocks are freed by threads that did not allocate them.
  all      every pattern above.
--live: how many objects each thread keeps alive at once, the program's working set of objects.
  split keeps 1000 per thread by default (at most 64 MiB of them: 64 of 1 MiB), the study's
  pattern of objects created and kept; a small --live such as 8 models short-lived temporaries,
  which thread caches recycle at once, and favours allocators built for that.
Run length: unless --ops is given, one calibration run per pattern and size (the first allocator
  on the fewest threads) sets the objects per run so that run takes about 150 ms (15 ms with
  --quick): runs of a few ms are dominated by start-up and scheduling noise.
One thread means a single-threaded process (the work runs on its only thread); glibc and the
  reference allocators skip their locks there, as single-threaded programs get.
The share of time on a CPU (and waiting for one: /proc/thread-self/schedstat) is reported per
  configuration; when the workers waited for a CPU, other programs were using the machine and
  the output says so.
Allocators: system (glibc), jemalloc, tcmalloc, mimalloc, tbbmalloc (Debian packages, found
through ldconfig), global-lock and pooled (memlens's reference allocators), and any
--allocator NAME=PATH.so. Each runs in a child process with LD_PRELOAD; the child checks
that malloc really resolves to the preloaded library.
Per-call latency: on average 1 malloc and 1 free in --sample-every (random gaps) are timed
with the TSC (fenced), the measured cost of reading the clock subtracted.
RSS, page faults and CPU time: wait4() on the child.

Example:
  memlens bench alloc --pattern split --sizes 128,1K,1M --threads 1..2
  memlens bench alloc --pattern all --sizes 64 --svg plots --html alloc.html
  memlens bench alloc --allocator hoard=/opt/libhoard.so --allocators system,hoard";

/// Allocator scalability across threads, sizes and patterns
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct AllocArgs {
    /// Boxed so the CLI's subcommand enum stays small (clippy::large_enum_variant).
    #[command(flatten)]
    pub(crate) opts: Box<AllocOptions>,
}

/// The options of `memlens bench alloc`.
#[derive(Debug, clap::Args)]
pub(crate) struct AllocOptions {
    /// Patterns to run (comma-separated): split, pairs, batch, batch-lifo, batch-fifo, cross, larson, all
    #[arg(long, default_value = "split")]
    pub(crate) pattern: String,
    /// Object sizes (comma-separated), e.g. 128,1K,1M
    #[arg(long, default_value = "128,1K,1M")]
    pub(crate) sizes: String,
    /// Thread counts: a list or range, e.g. 1..4 or 1,2,8 [default: 1..number of CPUs]
    #[arg(long)]
    pub(crate) threads: Option<String>,
    /// Allocators to compare, in this order (comma-separated) [default: all available]
    #[arg(long)]
    pub(crate) allocators: Option<String>,
    /// Add an allocator: NAME=PATH.so, preloaded like the others (repeatable)
    #[arg(long = "allocator", value_name = "NAME=PATH.so")]
    pub(crate) custom: Vec<String>,
    /// Objects allocated per run, over all threads [default: calibrated to ~150 ms per run]
    #[arg(long)]
    pub(crate) ops: Option<u64>,
    /// Objects each thread keeps alive: ring (split), batch (batch, cross) or slots (larson)
    /// [default: split and larson 1000 (at most 64 MiB of them), batch and cross 64]
    #[arg(long)]
    pub(crate) live: Option<u64>,
    /// Write every byte of each object after allocating it
    #[arg(long)]
    pub(crate) touch: bool,
    /// Repeats of every configuration, interleaved [default: 5]
    #[arg(long)]
    pub(crate) repeats: Option<u64>,
    /// Time one malloc and one free in N on average (0: no per-call latency)
    #[arg(long, default_value_t = 64)]
    pub(crate) sample_every: u64,
    /// A short run: ~15 ms per run and 2 repeats (too short for a verdict on a busy machine)
    #[arg(long)]
    pub(crate) quick: bool,
    /// Seed for larson's random sizes and slots
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// Give up on a run after this long, e.g. 120s
    #[arg(long, default_value = "300s")]
    pub(crate) timeout: String,
    #[command(flatten)]
    /// Result files (JSON, CSV, HTML).
    pub(crate) out: memlens_render::output::OutputArgs,
    /// Write one SVG plot per pattern and size into DIR (relative time vs threads, ideal dashed)
    #[arg(long, value_name = "DIR")]
    pub(crate) svg: Option<PathBuf>,
    /// List the allocators found (and the missing ones) and exit
    #[arg(long)]
    pub(crate) list: bool,
}

/// Every allocation pattern `bench alloc` knows, in the order it runs them.
pub const ALL_PATTERNS: &[&str] = &[
    "split",
    "pairs",
    "batch-lifo",
    "batch-fifo",
    "cross",
    "larson",
];

fn parse_patterns(s: &str) -> Result<Vec<&'static str>> {
    let mut out: Vec<&'static str> = Vec::new();
    for p in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let add: Vec<&'static str> = match p {
            "all" => ALL_PATTERNS.to_vec(),
            "batch" => vec!["batch-lifo", "batch-fifo"],
            _ => match ALL_PATTERNS.iter().find(|&&k| k == p) {
                Some(k) => vec![*k],
                None => {
                    return Err(usage(format!(
                        "unknown pattern '{p}' (use split, pairs, batch, batch-lifo, batch-fifo, cross, larson or all)"
                    )))
                }
            },
        };
        for a in add {
            if !out.contains(&a) {
                out.push(a);
            }
        }
    }
    if out.is_empty() {
        return Err(usage("--pattern is empty"));
    }
    Ok(out)
}

fn plan(args: &AllocOptions) -> Result<Plan> {
    let patterns = parse_patterns(&args.pattern)?;
    let sizes = parse_size_list(&args.sizes)?;
    if let Some(bad) = sizes.iter().find(|&&s| s == 0 || s > 1 << 30) {
        return Err(usage(format!(
            "--sizes: {bad} is out of range (1 byte to 1 GiB)"
        )));
    }
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get() as u64)
        .unwrap_or(1);
    let threads = match &args.threads {
        Some(t) => parse_count_list(t)?,
        None => (1..=ncpu).collect(),
    };
    if let Some(bad) = threads.iter().find(|&&t| t == 0 || t > 1024) {
        return Err(usage(format!(
            "--threads: {bad} is out of range (1 to 1024)"
        )));
    }
    if args.repeats == Some(0) {
        return Err(usage("--repeats must be at least 1"));
    }
    if args.ops == Some(0) || args.live == Some(0) {
        return Err(usage("--ops and --live must be at least 1"));
    }
    Ok(Plan {
        patterns,
        sizes,
        threads,
        repeats: args.repeats.unwrap_or(if args.quick { 2 } else { 5 }),
        ncpu,
        ops: args.ops,
        calibrated: Vec::new(),
        quick: args.quick,
        live: args.live,
        touch: args.touch,
        sample_every: args.sample_every,
        seed: args.seed,
    })
}

/// One untimed run per pattern and size under `alloc` on the fewest threads, to size the measured
/// runs (see [`target_ms`]).
fn calibrate(
    plan: &mut Plan,
    exe: &std::path::Path,
    alloc: &allocators::Allocator,
    timeout: Duration,
) -> Result<()> {
    let threads = plan.threads.iter().copied().min().unwrap_or(1);
    let mut out = Vec::new();
    for &pattern in &plan.patterns {
        for &size in &plan.sizes {
            let mut job = plan.job(pattern, size, threads);
            job.sample_every = 0;
            let m = child::run(exe, alloc, &job, timeout).with_context(|| {
                format!(
                    "calibration run ({} {pattern} {} × {threads})",
                    alloc.name,
                    format_size(size)
                )
            })?;
            let ops = calibrated_ops(job.ops, m.wall_ns as f64 / 1e6, target_ms(plan.quick));
            out.push((pattern, size, ops));
        }
    }
    plan.calibrated = out;
    Ok(())
}

fn list(found: &[allocators::Allocator], missing: &[allocators::Missing]) {
    let mut rows: Vec<Vec<String>> = found
        .iter()
        .map(|a| {
            let lib = a
                .lib
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_else(|| "(nothing preloaded)".into());
            vec![a.name.clone(), "available".into(), lib, a.origin.clone()]
        })
        .collect();
    rows.extend(missing.iter().map(|m| {
        vec![
            m.name.clone(),
            "missing".into(),
            String::new(),
            m.reason.clone(),
        ]
    }));
    println!(
        "{}",
        memlens_render::output::fit_table(&["allocator", "status", "library", "from"], &rows)
    );
}

/// Run `memlens bench alloc`; returns the exit status.
pub fn run_alloc(args: AllocArgs) -> Result<i32> {
    let args = *args.opts;
    let custom = args
        .custom
        .iter()
        .map(|s| allocators::parse_custom(s))
        .collect::<Result<Vec<_>>>()?;
    let (found, missing) = allocators::discover(&custom)?;
    if args.list {
        list(&found, &missing);
        return Ok(0);
    }
    let mut plan = plan(&args)?;
    let busy = memlens_measure::busy::Watch::start("memlens bench alloc");
    let timeout =
        memlens_measure::units::parse_duration(&args.timeout)?.max(Duration::from_secs(1));
    let (mut allocs, missing) = allocators::select(found, missing, args.allocators.as_deref())?;
    for m in &missing {
        eprintln!("memlens: warning: {} is not measured: {}", m.name, m.reason);
    }
    if allocs.is_empty() {
        anyhow::bail!("no allocator left to measure (see the warnings above)");
    }
    if let Some(&t) = plan.threads.iter().find(|&&t| t > plan.ncpu) {
        eprintln!(
            "memlens: warning: {t} threads on {} CPUs: the machine is oversubscribed, so times above {} threads include time-sharing",
            plan.ncpu, plan.ncpu
        );
    }
    let exe = child::executable()?;
    if plan.ops.is_none() {
        calibrate(&mut plan, &exe, &allocs[0], timeout)?;
    }
    let (runs, failed) = run_all(&plan, &exe, &mut allocs, timeout);
    if allocs.is_empty() {
        anyhow::bail!("every allocator failed (see the warnings above)");
    }
    let load = busy.load();
    let summary = report::summarize(&plan, &allocs, &runs, load);
    let svgs = report::svgs(&plan, &summary)?;
    if let Some(dir) = &args.svg {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for (name, svg) in &svgs {
            memlens_render::output::write_text(&dir.join(name), svg)?;
        }
    }
    let doc = report::document(&plan, &summary, &missing, &failed, svgs);
    doc.print();
    if let Some(p) = &args.out.json {
        report::write_json(p, &plan, &allocs, &missing, &failed, &runs, &summary)?;
    }
    if let Some(p) = &args.out.csv {
        memlens_render::output::write_csv_rows(p, &report::csv_rows(&summary))?;
    }
    if let Some(p) = &args.out.html {
        memlens_render::output::write_text(p, &doc.to_html())?;
    }
    Ok(0)
}

/// Every measured run of the plan, each in a fresh child. An allocator whose child fails is
/// dropped, with its earlier runs, and returned among the failed ones.
fn run_all(
    plan: &Plan,
    exe: &std::path::Path,
    allocs: &mut Vec<allocators::Allocator>,
    timeout: Duration,
) -> (Vec<report::Run>, Vec<allocators::Missing>) {
    let total = plan.repeats
        * (plan.patterns.len() * plan.sizes.len() * plan.threads.len() * allocs.len()) as u64;
    let progress = Progress::new(total, "bench alloc");
    let mut runs = Vec::new();
    let mut failed: Vec<allocators::Missing> = Vec::new();
    // Repeats outermost and allocators innermost: A B C A B C…, so slow drift of the machine's load
    // lands on every allocator alike.
    for rep in 0..plan.repeats {
        for &pattern in &plan.patterns {
            for &size in &plan.sizes {
                for &threads in &plan.threads {
                    let job = plan.job(pattern, size, threads);
                    let mut i = 0;
                    while i < allocs.len() {
                        let a = &allocs[i];
                        progress.step(format!(
                            "{} {pattern} {} × {threads}",
                            a.name,
                            format_size(size)
                        ));
                        match child::run(exe, a, &job, timeout) {
                            Ok(m) => {
                                runs.push(report::Run {
                                    allocator: a.name.clone(),
                                    pattern,
                                    size,
                                    threads,
                                    repeat: rep,
                                    ops: job.ops,
                                    live: job.live,
                                    m,
                                });
                                i += 1;
                            }
                            Err(e) => {
                                let reason = format!("{e:#}");
                                progress.println(format!(
                                    "memlens: warning: {} dropped: {reason}",
                                    a.name
                                ));
                                failed.push(allocators::Missing {
                                    name: a.name.clone(),
                                    reason,
                                });
                                let name = a.name.clone();
                                runs.retain(|r| r.allocator != name);
                                allocs.remove(i);
                            }
                        }
                        progress.inc();
                    }
                }
            }
        }
    }
    progress.finish();
    (runs, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_expand_and_reject_unknown() {
        assert_eq!(
            parse_patterns("batch").unwrap(),
            vec!["batch-lifo", "batch-fifo"]
        );
        assert_eq!(parse_patterns("all").unwrap().len(), 6);
        assert_eq!(parse_patterns("split,split").unwrap(), vec!["split"]);
        assert!(memlens_measure::error::is_usage(
            &parse_patterns("zigzag").unwrap_err()
        ));
    }
}
