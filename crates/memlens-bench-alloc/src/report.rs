//! From runs to answers: medians and spreads per configuration, time relative to the system allocator
//! on one thread (the study's 100%) and to ideal scaling, ties, and the table / JSON / CSV / SVG / HTML.
use crate::allocators::{Allocator, Missing};
use crate::child::{Measured, Quantiles};
use crate::plan::{target_ms, Plan};
use anyhow::Result;
use memlens_measure::stats::{is_tie, Summary};
use memlens_measure::tsc::Clock;
use memlens_measure::units::format_size;
use memlens_render::doc::{not_measured, Document, Section, Table, NOT_MEASURED};
use memlens_render::plot::{line_chart_with_ranges, LineChart, Range, Series};
use serde::Serialize;
use std::path::Path;

/// One child run.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    pub allocator: String,
    pub pattern: &'static str,
    pub size: u64,
    pub threads: u64,
    pub repeat: u64,
    pub ops: u64,
    pub live: u64,
    #[serde(flatten)]
    pub m: Measured,
}

/// Latency quantiles in ns: median over repeats of each quantile, max over repeats for max.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub p50: Option<f64>,
    pub p99: Option<f64>,
    pub p999: Option<f64>,
    pub max: Option<f64>,
    pub samples: u64,
}

/// One configuration (pattern, size, threads, allocator) over its repeats.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub pattern: &'static str,
    pub size: u64,
    pub threads: u64,
    pub allocator: String,
    pub repeats: usize,
    pub time_ms: Summary,
    /// Median malloc calls per second, in millions.
    pub mops: f64,
    /// Median time relative to the baseline (system on 1 thread) in percent, and its min–max.
    pub rel_pct: Option<Summary>,
    /// Where ideal scaling from the baseline would be, in percent.
    pub ideal_pct: Option<f64>,
    /// This allocator's own 1-thread median time over this one (ideal: min(threads, CPUs)).
    pub speedup: Option<f64>,
    pub malloc_ns: Latency,
    pub free_ns: Latency,
    pub rss_mib: f64,
    /// Median CPU time (user + system) of the child, and its system part.
    pub cpu_ms: f64,
    /// The same over repeats, for judging CPU-time changes against their spread.
    pub cpu_range_ms: Summary,
    pub sys_ms: f64,
    /// Median over repeats of the share of the workers' timed spans they were on a CPU, in percent.
    pub on_cpu_pct: f64,
    /// The same for the share they were runnable but waiting for a CPU (None: no schedstat).
    pub waited_pct: Option<f64>,
    pub minor_faults: f64,
    pub major_faults: f64,
    /// Rank by median time within (pattern, size, threads), 1 = fastest.
    pub rank: usize,
    /// Median time over the fastest one's, in percent above it.
    pub vs_best_pct: f64,
    /// The min–max range overlaps the fastest one's: the difference is within the spread.
    pub tie_with_best: bool,
}

pub use memlens_measure::busy::Load;

use memlens_measure::busy::BUSY_WAITED_PCT;

/// Runs shorter than this (median) are too short to judge: scheduling and start-up dominate.
pub const SHORT_RUN_MS: f64 = 20.0;

#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    /// What 100% is, e.g. "system on 1 thread".
    pub baseline: String,
    pub load: Load,
    /// Median over the runs with no more threads than CPUs of the share of time the workers waited
    /// for a CPU (None: no schedstat, or every run oversubscribed).
    pub waited_pct: Option<f64>,
    /// Why a verdict may not be possible: a busy machine, too-short runs.
    pub warnings: Vec<String>,
    pub rows: Vec<Row>,
    pub verdicts: Vec<String>,
    pub clock_cost_ns: f64,
    pub tsc_step_ns: f64,
    /// Per-call times below this are not resolved: the spread of the clock's own cost (median
    /// over runs), or the TSC's step if larger.
    pub resolution_ns: f64,
}

/// The step the TSC advances by. A virtual machine (or a CPU) may advance it coarsely: on an AMD
/// EPYC KVM guest it moves by 26 ticks (10 ns), and reads that fall within one step get +1 so
/// they stay monotonic — so the smallest difference seen between two reads (1 tick, 0.4 ns) says
/// nothing of the resolution, and per-call times under 10 ns printed as `<0.4`.
fn tsc_step_ticks() -> u64 {
    let now = memlens_measure::tsc::now;
    let mut increments = Vec::with_capacity(2000);
    let mut prev = now();
    while increments.len() < 2000 {
        let t = now();
        if t != prev {
            increments.push(t.wrapping_sub(prev));
            prev = t;
        }
    }
    // Reads spread by uneven waits: on a TSC that moves every tick they land on every residue.
    let mut spaced = Vec::with_capacity(4000);
    for i in 0..4000u32 {
        for _ in 0..(i * 7919) % 61 {
            std::hint::spin_loop();
        }
        spaced.push(now());
    }
    tsc_step_of(&mut increments, &spaced)
}

/// The TSC's step from `increments` between distinct consecutive reads and from `spaced` reads
/// taken at uneven intervals: the median increment `k` is the step when the spaced reads share
/// their residue modulo `k` (give or take the monotonic +1); otherwise the TSC moves every tick and
/// `k` was only the time a read takes.
fn tsc_step_of(increments: &mut [u64], spaced: &[u64]) -> u64 {
    if increments.is_empty() || spaced.is_empty() {
        return 1;
    }
    increments.sort_unstable();
    let k = increments[increments.len() / 2];
    if k <= 1 {
        return 1;
    }
    let mut residues = vec![0usize; k as usize];
    for &t in spaced {
        residues[(t % k) as usize] += 1;
    }
    let kk = k as usize;
    let near = (0..kk)
        .map(|r| residues[r] + residues[(r + 1) % kk] + residues[(r + kk - 1) % kk])
        .max()
        .unwrap_or(0);
    if near * 10 >= spaced.len() * 9 {
        k
    } else {
        1
    }
}

fn latency(qs: &[&Quantiles], clock: &Clock) -> Latency {
    let med = |f: fn(&Quantiles) -> Option<u64>| {
        let v: Vec<f64> = qs
            .iter()
            .filter_map(|q| f(q))
            .map(|t| clock.ticks_to_ns(t as f64))
            .collect();
        Summary::of(&v).map(|s| s.median)
    };
    Latency {
        p50: med(|q| q.p50),
        p99: med(|q| q.p99),
        p999: med(|q| q.p999),
        max: qs
            .iter()
            .filter_map(|q| q.max)
            .max()
            .map(|t| clock.ticks_to_ns(t as f64)),
        samples: qs.iter().map(|q| q.n).sum(),
    }
}

fn median(v: impl Iterator<Item = f64>) -> f64 {
    Summary::of(&v.collect::<Vec<_>>())
        .map(|s| s.median)
        .unwrap_or(f64::NAN)
}

fn pct(part: u64, whole: u64) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

/// Warnings that qualify every verdict: the machine was busy, or runs were too short.
fn warnings(plan: &Plan, rows: &[Row], waited: Option<f64>, load: &Load) -> Vec<String> {
    let mut w: Vec<String> = memlens_measure::busy::warning(load, Some(("the workers", waited)))
        .into_iter()
        .collect();
    let short: Vec<f64> = rows
        .iter()
        .map(|r| r.time_ms.median)
        .filter(|&t| t < SHORT_RUN_MS)
        .collect();
    if !short.is_empty() {
        let lo = short.iter().cloned().fold(f64::MAX, f64::min);
        let hi = short.iter().cloned().fold(0.0, f64::max);
        w.push(format!(
            "warning: {} of {} configurations ran {lo:.1}–{hi:.1} ms (under {SHORT_RUN_MS:.0} ms): too short to judge{}",
            short.len(),
            rows.len(),
            if plan.ops.is_some() {
                "; raise --ops".to_string()
            } else if plan.quick {
                "; drop --quick".to_string()
            } else {
                // Calibrated on the first allocator: a faster one finishes the same objects sooner.
                format!(
                    "; the runs were sized on {}, slower than these; raise --ops",
                    rows.first().map(|r| r.allocator.as_str()).unwrap_or("the first allocator")
                )
            }
        ));
    }
    w
}

pub fn summarize(plan: &Plan, allocs: &[Allocator], runs: &[Run], load: Load) -> Outcome {
    let clock = Clock::get();
    let mut rows = Vec::new();
    let base_alloc = allocs
        .iter()
        .find(|a| a.name == "system")
        .unwrap_or(&allocs[0])
        .name
        .clone();
    let base_threads = if plan.threads.contains(&1) {
        1
    } else {
        plan.threads[0]
    };
    for &pattern in &plan.patterns {
        for &size in &plan.sizes {
            let of = |a: &str, t: u64| -> Vec<&Run> {
                runs.iter()
                    .filter(|r| {
                        r.pattern == pattern && r.size == size && r.threads == t && r.allocator == a
                    })
                    .collect()
            };
            let times = |rs: &[&Run]| {
                Summary::of(
                    &rs.iter()
                        .map(|r| r.m.wall_ns as f64 / 1e6)
                        .collect::<Vec<_>>(),
                )
            };
            let base = times(&of(&base_alloc, base_threads));
            for &threads in &plan.threads {
                let first = rows.len();
                for a in allocs {
                    let rs = of(&a.name, threads);
                    let Some(t) = times(&rs) else { continue };
                    let own1 = times(&of(&a.name, base_threads));
                    let at = (pattern, size, threads, base_threads);
                    rows.push(row(plan, at, &a.name, &rs, t, base, own1));
                }
                rank(&mut rows[first..]);
            }
        }
    }
    // Only runs with no more workers than CPUs: beyond, the workers wait for each other.
    let waited = runs
        .iter()
        .filter(|r| r.threads <= plan.ncpu)
        .map(|r| r.m.waiting_ns.map(|w| pct(w, r.m.thread_ns)))
        .collect::<Option<Vec<f64>>>()
        .filter(|v| !v.is_empty())
        .map(|v| median(v.into_iter()));
    let warnings = warnings(plan, &rows, waited, &load);
    let clock_cost = median(runs.iter().map(|r| r.m.clock_cost_ticks as f64));
    let jitter = median(runs.iter().map(|r| r.m.clock_jitter_ticks as f64));
    let step = tsc_step_ticks() as f64;
    Outcome {
        baseline: format!(
            "{base_alloc} on {base_threads} thread{}",
            if base_threads == 1 { "" } else { "s" }
        ),
        verdicts: warnings
            .iter()
            .cloned()
            .chain(verdicts(plan, &rows))
            .chain(scaling(plan, &rows))
            .collect(),
        load,
        waited_pct: waited,
        warnings,
        rows,
        clock_cost_ns: clock.ticks_to_ns(clock_cost),
        tsc_step_ns: clock.ticks_to_ns(step),
        resolution_ns: clock.ticks_to_ns(if jitter.is_nan() {
            step
        } else {
            jitter.max(step)
        }),
    }
}

/// The row of one allocator at (pattern, size, threads, baseline threads): its runs `rs`, their
/// time `t`, the baseline's time `base` and its own time on the baseline's threads `own1`.
fn row(
    plan: &Plan,
    (pattern, size, threads, base_threads): (&'static str, u64, u64, u64),
    allocator: &str,
    rs: &[&Run],
    t: Summary,
    base: Option<Summary>,
    own1: Option<Summary>,
) -> Row {
    let rel = base.map(|b| {
        let v: Vec<f64> = rs
            .iter()
            .map(|r| r.m.wall_ns as f64 / 1e6 / b.median * 100.0)
            .collect();
        Summary::of(&v).expect("non-empty")
    });
    let eff = |n: u64| n.min(plan.ncpu) as f64;
    let clock = Clock::get();
    Row {
        pattern,
        size,
        threads,
        allocator: allocator.to_string(),
        repeats: rs.len(),
        time_ms: t,
        mops: median(
            rs.iter()
                .map(|r| r.m.mallocs as f64 / (r.m.wall_ns.max(1) as f64 / 1e9) / 1e6),
        ),
        rel_pct: rel,
        ideal_pct: base.map(|_| 100.0 * eff(base_threads) / eff(threads)),
        speedup: own1.map(|o| o.median / t.median),
        malloc_ns: latency(
            &rs.iter().map(|r| &r.m.malloc_ticks).collect::<Vec<_>>(),
            clock,
        ),
        free_ns: latency(
            &rs.iter().map(|r| &r.m.free_ticks).collect::<Vec<_>>(),
            clock,
        ),
        rss_mib: median(rs.iter().map(|r| r.m.max_rss_kib as f64 / 1024.0)),
        cpu_ms: median(rs.iter().map(|r| r.m.user_ms + r.m.sys_ms)),
        cpu_range_ms: Summary::of(
            &rs.iter()
                .map(|r| r.m.user_ms + r.m.sys_ms)
                .collect::<Vec<_>>(),
        )
        .expect("non-empty"),
        sys_ms: median(rs.iter().map(|r| r.m.sys_ms)),
        on_cpu_pct: median(
            rs.iter()
                .map(|r| pct(r.m.on_cpu_ns, r.m.thread_ns).min(100.0)),
        ),
        waited_pct: rs
            .iter()
            .map(|r| r.m.waiting_ns.map(|w| pct(w, r.m.thread_ns)))
            .collect::<Option<Vec<f64>>>()
            .map(|v| median(v.into_iter())),
        minor_faults: median(rs.iter().map(|r| r.m.minor_faults as f64)),
        major_faults: median(rs.iter().map(|r| r.m.major_faults as f64)),
        rank: 0,
        vs_best_pct: 0.0,
        tie_with_best: false,
    }
}

/// Rank one group by median time and mark who is within the spread of the fastest.
fn rank(group: &mut [Row]) {
    let mut order: Vec<usize> = (0..group.len()).collect();
    order.sort_by(|&a, &b| group[a].time_ms.median.total_cmp(&group[b].time_ms.median));
    let Some(&best) = order.first() else { return };
    let b = group[best].time_ms;
    for (r, &i) in order.iter().enumerate() {
        let row = &mut group[i];
        row.rank = r + 1;
        row.vs_best_pct = (row.time_ms.median / b.median - 1.0) * 100.0;
        row.tie_with_best = r > 0 && is_tie(&row.time_ms, &b);
    }
}

/// One sentence per (pattern, size, threads): who wins and whether the margin exceeds the spread.
fn verdicts(plan: &Plan, rows: &[Row]) -> Vec<String> {
    let mut out = Vec::new();
    for &pattern in &plan.patterns {
        for &size in &plan.sizes {
            for &threads in &plan.threads {
                let mut g: Vec<&Row> = rows
                    .iter()
                    .filter(|r| r.pattern == pattern && r.size == size && r.threads == threads)
                    .collect();
                g.sort_by_key(|r| r.rank);
                let head = format!(
                    "{pattern} {}, {threads} thread{}",
                    size_label(size),
                    if threads == 1 { "" } else { "s" }
                );
                match g.as_slice() {
                    [] => {}
                    [only] => out.push(format!(
                        "{head}: only {} measured ({:.2} ms)",
                        only.allocator, only.time_ms.median
                    )),
                    [w, next, ..] => {
                        let tied: Vec<&str> = g[1..]
                            .iter()
                            .filter(|r| r.tie_with_best)
                            .map(|r| r.allocator.as_str())
                            .collect();
                        let margin = next.time_ms.min - w.time_ms.max;
                        if w.time_ms.n < 2 || next.time_ms.n < 2 {
                            out.push(format!(
                                "{head}: {} fastest, {:.2} ms vs {} {:.2} ms (one repeat: no spread to judge the margin by)",
                                w.allocator, w.time_ms.median, next.allocator, next.time_ms.median
                            ));
                        } else if tied.is_empty() {
                            out.push(format!(
                                "{head}: {} fastest, {:.2} ms vs {} {:.2} ms ({:.0}% faster; ranges {:.2}–{:.2} vs {:.2}–{:.2} ms do not overlap, margin {:.2} ms beyond the spread)",
                                w.allocator, w.time_ms.median, next.allocator, next.time_ms.median,
                                (1.0 - w.time_ms.median / next.time_ms.median) * 100.0,
                                w.time_ms.min, w.time_ms.max, next.time_ms.min, next.time_ms.max, margin
                            ));
                        } else {
                            out.push(format!(
                                "{head}: {} has the lowest median ({:.2} ms) but ties with {} (min–max ranges overlap)",
                                w.allocator, w.time_ms.median, tied.join(", ")
                            ));
                        }
                    }
                }
            }
        }
    }
    out
}

/// `128 B`, `1 KiB`, `1.5 MiB`.
pub fn size_label(size: u64) -> String {
    let s = format_size(size);
    if s.ends_with(|c: char| c.is_ascii_alphabetic()) {
        format!("{s}iB")
    } else {
        format!("{s} B")
    }
}

/// Per pattern and size: who gets faster, slower, or stays within the spread from the fewest to
/// the most threads (the study's question: does the singleton allocator degrade with threads?).
fn scaling(plan: &Plan, rows: &[Row]) -> Vec<String> {
    let (Some(&lo), Some(&hi)) = (plan.threads.iter().min(), plan.threads.iter().max()) else {
        return Vec::new();
    };
    if lo == hi {
        return Vec::new();
    }
    if plan.repeats < 2 {
        return vec!["scaling: one repeat gives no spread, so no 1→N-thread verdict (use --repeats 2 or more)".into()];
    }
    let mut out = Vec::new();
    for &pattern in &plan.patterns {
        for &size in &plan.sizes {
            let (mut up, mut down, mut same) = (Vec::new(), Vec::new(), Vec::new());
            let mut cpu = Vec::new();
            for r in rows
                .iter()
                .filter(|r| r.pattern == pattern && r.size == size && r.threads == hi)
            {
                let Some(base) = rows.iter().find(|b| {
                    b.pattern == pattern
                        && b.size == size
                        && b.threads == lo
                        && b.allocator == r.allocator
                }) else {
                    continue;
                };
                let item = format!(
                    "{} {:.2}×",
                    r.allocator,
                    base.time_ms.median / r.time_ms.median
                );
                // CPU time of the same work: flat for an allocator that scales, up when threads
                // fight over a lock or cache lines. Unlike wall time it hardly moves when other
                // programs load the machine.
                cpu.push(format!(
                    "{} {:+.0}%{}",
                    r.allocator,
                    (r.cpu_ms / base.cpu_ms - 1.0) * 100.0,
                    if is_tie(&base.cpu_range_ms, &r.cpu_range_ms) {
                        ""
                    } else {
                        " (beyond the spread)"
                    }
                ));
                if is_tie(&base.time_ms, &r.time_ms) {
                    same.push(item);
                } else if r.time_ms.median < base.time_ms.median {
                    up.push(item);
                } else {
                    down.push(item);
                }
            }
            let list = |v: &Vec<String>| {
                if v.is_empty() {
                    "none".to_string()
                } else {
                    v.join(", ")
                }
            };
            out.push(format!(
                "{pattern} {}, {lo} → {hi} threads (speedup, ideal {:.0}×): faster beyond the spread: {}; slower beyond the spread: {}; within the spread: {}",
                size_label(size),
                hi.min(plan.ncpu) as f64 / lo.min(plan.ncpu) as f64,
                list(&up),
                list(&down),
                list(&same)
            ));
            out.push(format!(
                "{pattern} {}, {lo} → {hi} threads, change of CPU time for the same work: {}",
                size_label(size),
                list(&cpu)
            ));
        }
    }
    out
}

/// A latency in ns: `< N` below the resolution (the clock's own spread, or its step), so a call
/// too fast to time never reads 0.
fn ns(v: Option<f64>, resolution: f64) -> String {
    match v {
        None => NOT_MEASURED.into(),
        Some(x) if x < resolution => format!("<{resolution:.1}"),
        Some(x) if x >= 1e4 => format!("{:.0}k", x / 1e3),
        Some(x) if x >= 100.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.1}"),
    }
}

fn lat(l: &Latency, resolution: f64) -> String {
    if l.samples == 0 {
        return NOT_MEASURED.into();
    }
    let f = |v| ns(v, resolution);
    format!("{}/{}/{}/{}", f(l.p50), f(l.p99), f(l.p999), f(l.max))
}

/// The table of one (pattern, size): what answers the question first (time and its ranking),
/// then throughput, per-call latency and the child's resources.
fn table(rows: &[&Row], resolution: f64) -> Table {
    let mut t = Table::new(&["allocator", "threads"])
        .topic(
            "time",
            &[
                "time ms",
                "min–max ms",
                "vs fastest",
                "rel %",
                "ideal %",
                "speedup",
            ],
        )
        .topic("throughput", &["Mops/s"])
        .topic(
            "latency",
            &["malloc ns p50/p99/p99.9/max", "free ns p50/p99/p99.9/max"],
        )
        .topic(
            "resources",
            &[
                "CPU ms (sys)",
                "on CPU %",
                "waited %",
                "peak RSS MiB",
                "minor faults",
            ],
        );
    let or_na = |v: Option<String>| v.unwrap_or_else(|| NOT_MEASURED.into());
    for r in rows {
        t.push(vec![
            r.allocator.clone(),
            r.threads.to_string(),
            format!("{:.2}", r.time_ms.median),
            format!("{:.2}–{:.2}", r.time_ms.min, r.time_ms.max),
            if r.rank == 1 {
                "fastest".into()
            } else if r.tie_with_best {
                format!("+{:.0}% (tie)", r.vs_best_pct)
            } else {
                format!("+{:.0}%", r.vs_best_pct)
            },
            or_na(r.rel_pct.map(|s| format!("{:.0}", s.median))),
            or_na(r.ideal_pct.map(|v| format!("{v:.0}"))),
            or_na(r.speedup.map(|v| format!("{v:.2}×"))),
            format!("{:.1}", r.mops),
            lat(&r.malloc_ns, resolution),
            lat(&r.free_ns, resolution),
            format!("{:.1} ({:.1})", r.cpu_ms, r.sys_ms),
            format!("{:.0}", r.on_cpu_pct),
            or_na(r.waited_pct.map(|w| format!("{w:.0}"))),
            format!("{:.1}", r.rss_mib),
            format!("{:.0}", r.minor_faults),
        ]);
    }
    t
}

fn groups<'a>(plan: &Plan, s: &'a Outcome) -> Vec<(String, &'static str, u64, Vec<&'a Row>)> {
    let mut out = Vec::new();
    for &pattern in &plan.patterns {
        for &size in &plan.sizes {
            let rows: Vec<&Row> = s
                .rows
                .iter()
                .filter(|r| r.pattern == pattern && r.size == size)
                .collect();
            if !rows.is_empty() {
                out.push((
                    format!("{pattern}, {} objects", size_label(size)),
                    pattern,
                    size,
                    rows,
                ));
            }
        }
    }
    out
}

fn notes(plan: &Plan, s: &Outcome, missing: &[Missing], failed: &[Missing]) -> Vec<String> {
    let mut n = vec![
        format!(
            "{}; objects each thread keeps alive (--live): {}; {}.",
            objects(plan),
            live(plan),
            s.load.describe()
        ),
        format!(
            "on CPU %: the share of the workers' timed spans they ran on a CPU; waited %: the share they were runnable but waiting for one (/proc/thread-self/schedstat; n/a where the kernel has none) — other programs' load, which makes times noisy above {BUSY_WAITED_PCT:.0}%. A lock that puts threads to sleep lowers on CPU % without raising waited %."
        ),
        format!(
            "time: median of {} interleaved repeats; rel %: median time relative to {} = 100%; ideal %: perfect scaling from it (capped at {} CPUs); speedup: the allocator's own 1-thread time over this one; tie: min–max ranges overlap the fastest's.",
            plan.repeats, s.baseline, plan.ncpu
        ),
        if plan.sample_every > 0 {
            format!(
                "latency: on average 1 call in {} timed (random gaps) with lfence/rdtsc … rdtscp, clock cost {:.1} ns subtracted; <{:.1} = below the resolution (the spread of the clock's own cost, or the TSC's step of {:.1} ns): too fast to time one call at a time. CPU time, peak RSS and faults are the whole child's (wait4), start-up included.",
                plan.sample_every, s.clock_cost_ns, s.resolution_ns, s.tsc_step_ns
            )
        } else {
            not_measured("latency: --sample-every 0")
        },
    ];
    for m in missing {
        n.push(format!("not measured: {}: {}", m.name, m.reason));
    }
    for m in failed {
        n.push(format!("dropped: {}: {}", m.name, m.reason));
    }
    n
}

/// `3.1M`, `200k`, `950`.
fn count(n: u64) -> String {
    match n {
        0..=9_999 => n.to_string(),
        10_000..=999_999 => format!("{:.0}k", n as f64 / 1e3),
        _ => format!("{:.1}M", n as f64 / 1e6),
    }
}

/// Objects per run, by pattern and size: `split 128 B 3.1M, …`.
fn objects(plan: &Plan) -> String {
    let mut v = Vec::new();
    for &pattern in &plan.patterns {
        for &size in &plan.sizes {
            let ops = plan.job(pattern, size, 1).ops;
            v.push(format!("{pattern} {} {}", size_label(size), count(ops)));
        }
    }
    let how = if plan.ops.is_some() {
        "--ops".to_string()
    } else {
        format!(
            "calibrated to ~{:.0} ms on the first allocator",
            target_ms(plan.quick)
        )
    };
    format!("objects per run ({how}): {}", v.join(", "))
}

/// Live objects per thread, by pattern and size.
fn live(plan: &Plan) -> String {
    let mut v: Vec<String> = Vec::new();
    for &pattern in &plan.patterns {
        for &size in &plan.sizes {
            let l = plan.job(pattern, size, 1).live;
            v.push(format!("{pattern} {} {l}", size_label(size)));
        }
    }
    v.join(", ")
}

/// The report: one section (table and plot) per pattern and size, then how to read it; the
/// verdicts are the answer. `svgs` are [`svgs`]'s charts, in the same order.
pub fn document(
    plan: &Plan,
    s: &Outcome,
    missing: &[Missing],
    failed: &[Missing],
    svgs: Vec<(String, String)>,
) -> Document {
    let mut d = Document::new("memlens bench alloc");
    d.verdict = s.verdicts.clone();
    let mut svgs = svgs.into_iter();
    for (title, _, _, rows) in groups(plan, s) {
        let mut sec = Section::new(title).table(table(&rows, s.resolution_ns));
        if let Some((_, svg)) = svgs.next() {
            sec = sec.plot(svg);
        }
        d.sections.push(sec);
    }
    let mut how = Section::new("How to read the tables");
    for n in notes(plan, s, missing, failed) {
        how = how.note(n);
    }
    d.sections.push(how);
    d
}

#[derive(Serialize)]
struct JsonOut<'a> {
    config: serde_json::Value,
    allocators: &'a [Allocator],
    missing: &'a [Missing],
    dropped: &'a [Missing],
    summary: &'a Outcome,
    runs: &'a [Run],
}

pub fn write_json(
    path: &Path,
    plan: &Plan,
    allocs: &[Allocator],
    missing: &[Missing],
    failed: &[Missing],
    runs: &[Run],
    s: &Outcome,
) -> Result<()> {
    let config = serde_json::json!({
        "patterns": plan.patterns, "sizes": plan.sizes, "threads": plan.threads, "repeats": plan.repeats,
        "touch": plan.touch, "sample_every": plan.sample_every, "seed": plan.seed, "cpus": plan.ncpu,
    });
    memlens_render::output::write_json(
        path,
        &JsonOut {
            config,
            allocators: allocs,
            missing,
            dropped: failed,
            summary: s,
            runs,
        },
    )
}

/// One CSV line per configuration: every number of [`Row`], flat; an empty cell is not measured.
#[derive(Serialize)]
pub struct CsvRow<'a> {
    pattern: &'static str,
    size: u64,
    threads: u64,
    allocator: &'a str,
    repeats: usize,
    time_ms_median: f64,
    time_ms_min: f64,
    time_ms_max: f64,
    rel_pct: Option<f64>,
    ideal_pct: Option<f64>,
    speedup: Option<f64>,
    mops: f64,
    malloc_p50_ns: Option<f64>,
    malloc_p99_ns: Option<f64>,
    malloc_p999_ns: Option<f64>,
    malloc_max_ns: Option<f64>,
    free_p50_ns: Option<f64>,
    free_p99_ns: Option<f64>,
    free_p999_ns: Option<f64>,
    free_max_ns: Option<f64>,
    latency_resolution_ns: f64,
    peak_rss_mib: f64,
    cpu_ms: f64,
    sys_ms: f64,
    minor_faults: f64,
    major_faults: f64,
    rank: usize,
    vs_fastest_pct: f64,
    tie_with_fastest: bool,
}

/// The CSV rows of `s`.
pub fn csv_rows(s: &Outcome) -> Vec<CsvRow<'_>> {
    s.rows
        .iter()
        .map(|r| CsvRow {
            pattern: r.pattern,
            size: r.size,
            threads: r.threads,
            allocator: &r.allocator,
            repeats: r.repeats,
            time_ms_median: r.time_ms.median,
            time_ms_min: r.time_ms.min,
            time_ms_max: r.time_ms.max,
            rel_pct: r.rel_pct.map(|x| x.median),
            ideal_pct: r.ideal_pct,
            speedup: r.speedup,
            mops: r.mops,
            malloc_p50_ns: r.malloc_ns.p50,
            malloc_p99_ns: r.malloc_ns.p99,
            malloc_p999_ns: r.malloc_ns.p999,
            malloc_max_ns: r.malloc_ns.max,
            free_p50_ns: r.free_ns.p50,
            free_p99_ns: r.free_ns.p99,
            free_p999_ns: r.free_ns.p999,
            free_max_ns: r.free_ns.max,
            latency_resolution_ns: s.resolution_ns,
            peak_rss_mib: r.rss_mib,
            cpu_ms: r.cpu_ms,
            sys_ms: r.sys_ms,
            minor_faults: r.minor_faults,
            major_faults: r.major_faults,
            rank: r.rank,
            vs_fastest_pct: r.vs_best_pct,
            tie_with_fastest: r.tie_with_best,
        })
        .collect()
}

/// One chart per pattern and size: relative time vs threads, a line per allocator, ideal dashed.
pub fn svgs(plan: &Plan, s: &Outcome) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for (title, pattern, size, rows) in groups(plan, s) {
        let mut series: Vec<Series> = Vec::new();
        let mut spreads: Vec<Range> = Vec::new();
        for r in &rows {
            let Some(rel) = r.rel_pct else { continue };
            let k = match series.iter().position(|x| x.name == r.allocator) {
                Some(k) => k,
                None => {
                    series.push(Series {
                        name: r.allocator.clone(),
                        points: Vec::new(),
                        dashed: false,
                    });
                    series.len() - 1
                }
            };
            series[k].points.push((r.threads as f64, rel.median));
            spreads.push(Range {
                series: k,
                x: r.threads as f64,
                low: rel.min,
                high: rel.max,
            });
        }
        let ideal: Vec<(f64, f64)> = plan
            .threads
            .iter()
            .filter_map(|&t| {
                rows.iter()
                    .find(|r| r.threads == t)?
                    .ideal_pct
                    .map(|v| (t as f64, v))
            })
            .collect();
        series.push(Series {
            name: "ideal scaling".into(),
            points: ideal,
            dashed: true,
        });
        let chart = LineChart {
            title: format!(
                "{title}: time relative to {} (median, bars min–max)",
                s.baseline
            ),
            x_label: "threads".into(),
            y_label: "time, % of baseline".into(),
            series,
            ..Default::default()
        };
        out.push((
            format!("alloc-{pattern}-{}.svg", format_size(size)),
            line_chart_with_ranges(&chart, &spreads)?,
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(name: &str, times: &[f64]) -> Row {
        Row {
            pattern: "split",
            size: 128,
            threads: 1,
            allocator: name.into(),
            repeats: times.len(),
            time_ms: Summary::of(times).unwrap(),
            mops: 1.0,
            rel_pct: None,
            ideal_pct: None,
            speedup: None,
            malloc_ns: Latency::default(),
            free_ns: Latency::default(),
            rss_mib: 1.0,
            on_cpu_pct: 100.0,
            waited_pct: Some(0.0),
            cpu_ms: 1.0,
            cpu_range_ms: Summary::of(&[1.0]).unwrap(),
            sys_ms: 0.0,
            minor_faults: 0.0,
            major_faults: 0.0,
            rank: 0,
            vs_best_pct: 0.0,
            tie_with_best: false,
        }
    }

    #[test]
    fn ranking_marks_overlapping_ranges_as_ties() {
        let mut g = vec![
            row("slow", &[30.0, 31.0, 32.0]),
            row("fast", &[10.0, 11.0, 12.0]),
            row("near", &[11.5, 13.0, 14.0]),
        ];
        rank(&mut g);
        let by = |n: &str| g.iter().find(|r| r.allocator == n).unwrap().clone();
        assert_eq!(by("fast").rank, 1);
        assert_eq!(by("near").rank, 2);
        assert!(by("near").tie_with_best, "11.5–14 overlaps 10–12");
        assert!(!by("slow").tie_with_best);
        assert!((by("slow").vs_best_pct - 181.818).abs() < 0.01);
    }

    #[test]
    fn tsc_step_is_the_coarse_step_not_the_monotonic_fixup() {
        // A TSC that moves by 26 ticks, a read within one step getting +1 (seen on a KVM guest):
        // increments 26, 26, …, 1, 25; every spaced read on one residue mod 26 (or the next).
        let mut inc: Vec<u64> = (0..100).map(|i| if i % 9 == 8 { 1 } else { 26 }).collect();
        let spaced: Vec<u64> = (0..400u64)
            .map(|i| 4 + 26 * (i * 3 + 1000) + (i % 20 == 0) as u64)
            .collect();
        assert_eq!(tsc_step_of(&mut inc, &spaced), 26);
        // A TSC that moves every tick, read back to back in 25 ticks: the reads take 25 ticks but
        // land on every residue, so the step is 1.
        let mut inc = vec![25u64; 100];
        let spaced: Vec<u64> = (0..400u64).map(|i| 1000 + i * 37 + (i * i) % 11).collect();
        assert_eq!(tsc_step_of(&mut inc, &spaced), 1);
        assert_eq!(tsc_step_of(&mut [], &spaced), 1);
        assert_eq!(tsc_step_of(&mut [1, 1, 2], &spaced), 1);
    }

    #[test]
    fn size_labels() {
        assert_eq!(size_label(128), "128 B");
        assert_eq!(size_label(1024), "1KiB");
        assert_eq!(size_label(1 << 20), "1MiB");
    }
}
