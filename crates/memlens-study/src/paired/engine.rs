//! The paired study (the default): each workload runs in one process per profiler, which switches
//! the profiler itself between `off` and each interval in short blocks; overheads are paired in
//! time (`stats.rs`). Quality comes from profile windows of the realistic workload: the same
//! ticks after a warm-up and a reset, recorded exactly and at each interval.
use super::stats;
use crate::estimate::{estimate, Estimate};
use crate::profilers::{find_lib, lg_of, SCRUB};
use crate::quality::{self, Quality, TruthSummary};
use anyhow::{bail, Context, Result};
use memlens_measure::progress::Progress;
use memlens_measure::units::format_size;
use memlens_workloads::paired::Block;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A workload of the paired study.
#[derive(Debug, Clone, Serialize)]
pub enum Workload {
    /// The malloc-test loop (workloads/c/malloc_test.c): cycles per malloc.
    Synthetic {
        /// Threads allocating.
        threads: u64,
        /// Block size.
        size: u64,
        /// Call depth of the loop.
        depth: u32,
    },
    /// The run-to-completion pipeline: mean tick latency, books of `working_set` bytes.
    Pipeline {
        /// Name of the working set (`l2`, `llc`, `dram`).
        label: String,
        /// Bytes of order books, all threads together.
        working_set: u64,
    },
}

impl Workload {
    /// Short name used in tables and JSON.
    pub fn name(&self) -> String {
        match self {
            Workload::Synthetic { threads, .. } => format!("synthetic-{threads}t"),
            Workload::Pipeline { label, .. } => format!("pipeline-{label}"),
        }
    }

    /// One line saying what it measures.
    pub fn describe(&self) -> String {
        match self {
            Workload::Synthetic { threads, size, depth } => format!(
                "malloc-test loop: {threads} thread(s) malloc {size} B blocks at call depth {depth}, memory untouched; metric = mean cycles per malloc"
            ),
            Workload::Pipeline { working_set, .. } => format!(
                "run-to-completion pipeline, one thread per CPU, quote → book → strategy → order, books {}; metric = mean tick latency",
                format_size(*working_set)
            ),
        }
    }
}

/// Parameters of a paired study.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// Workloads measured.
    pub workloads: Vec<Workload>,
    /// Sampling intervals.
    pub intervals: Vec<u64>,
    /// memlens unwinders.
    pub unwinders: Vec<String>,
    /// Is jemalloc's profiler measured (libjemalloc2 installed and asked)?
    pub jemalloc: bool,
    /// Rounds of the first process of every workload and profiler (all intervals).
    pub rounds: u32,
    /// Time limit of the whole study, s: further rounds run only while they fit (0: none).
    pub max_seconds: f64,
    /// Half width of the 95% interval each configuration should reach, points: synthetic loop.
    pub target_synthetic: f64,
    /// Same, pipeline (mean latency).
    pub target_pipeline: f64,
    /// Block length, ms.
    pub block_ms: u64,
    /// Ticks per thread of each profile window (0: no quality measured).
    pub window_ticks: u64,
    /// Coverage a recommended interval must reach, percent.
    pub min_coverage: f64,
    /// Overhead budget of the recommendation, percent (upper end of the CI).
    pub budget: f64,
    /// Seed of the block order.
    pub seed: u64,
}

/// A row of the paired study: the contract's fields and [`Columns`].
pub type Row = crate::row::Row<Columns>;

/// What only the paired study measures of a configuration (README: `p99_overhead_pct`, `rounds`,
/// `ci_target_pct`, `ci_met`, `counts_per_tick`, and the profiler and cost intervals).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Columns {
    /// Profiler: memlens or jemalloc.
    pub profiler: String,
    /// Rounds the estimate rests on.
    pub rounds: usize,
    /// Half width of the 95% interval the study aimed for, points.
    pub ci_target_pct: f64,
    /// Did the interval reach it (half width ≤ target)?
    pub ci_met: bool,
    /// Cache and TLB misses (the per-tick events) per tick by class, where counted.
    pub counts_per_tick: Option<stats::CountSplit>,
    /// Overhead of the p99 latency (pipeline).
    pub p99_overhead_pct: Option<Estimate>,
    /// 95% interval of the direct cost (`direct_cost_pct`).
    pub direct_ci: Option<Estimate>,
    /// 95% interval of the indirect cost (`indirect_cost_pct`).
    pub indirect_ci: Option<Estimate>,
    /// Ticks that took a sample, percent.
    pub sampled_ticks_pct: Option<f64>,
    /// Per-round overheads (for the comparisons of the verdict).
    #[serde(skip)]
    pub per_round: Vec<f64>,
}

impl Row {
    /// The overhead with its interval (every paired row has one).
    pub fn overhead(&self) -> Estimate {
        let nan = f64::NAN;
        Estimate {
            pct: self.overhead_pct.unwrap_or(nan),
            lo: self.ci_low_pct.unwrap_or(nan),
            hi: self.ci_high_pct.unwrap_or(nan),
            n: self.engine.rounds,
        }
    }
}

/// How fast the switches were, over every memlens process.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SwitchFacts {
    /// Threads a switch reached.
    pub threads: u64,
    /// Most threads not yet switched when a call returned.
    pub pending_max: u64,
    /// Longest switch call, ns.
    pub max_ns: u64,
}

/// Everything a paired study measured.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// Its parameters.
    pub settings: Settings,
    /// One row per configuration.
    pub rows: Vec<Row>,
    /// The exact truth of each unwinder's window.
    pub truth: Vec<TruthSummary>,
    /// Switch facts (synthetic loop).
    pub switch: SwitchFacts,
    /// The per-tick events and the cost of reading them, or `n/a (reason)`.
    pub counters: String,
    /// The per-tick events, where counted.
    pub counter_events: Option<[String; 2]>,
    /// Counts per tick of the off blocks, by workload (where counted).
    pub counts_off: Vec<(String, stats::CountSplit)>,
    /// Processes run beyond the first per workload and profiler, to narrow intervals.
    pub extra_processes: u32,
    /// Wall time of the study, s.
    pub seconds: f64,
}

/// The profiler a process is started for.
#[derive(Debug, Clone)]
enum Profiler {
    Memlens(String),
    Jemalloc,
}

/// One process's share of the schedule: which intervals (indices into the settings), how many
/// rounds, and the seed of its block order.
struct Part<'a> {
    intervals: &'a [usize],
    rounds: u32,
    seed: u64,
}

fn argv(w: &Workload, s: &Settings, part: &Part, list: &str) -> Result<Vec<String>> {
    Ok(match w {
        Workload::Synthetic {
            threads,
            size,
            depth,
        } => {
            let exe = memlens_native::path("malloc_test")
                .context("cannot find the malloc_test workload")?;
            [
                exe.display().to_string(),
                "--paired".into(),
                threads.to_string(),
                size.to_string(),
                depth.to_string(),
                s.block_ms.to_string(),
                part.rounds.to_string(),
                part.seed.to_string(),
                list.into(),
            ]
            .into()
        }
        Workload::Pipeline { working_set, .. } => {
            let me = std::env::current_exe().context("cannot find the memlens executable")?;
            [
                me.display().to_string(),
                "workload".into(),
                "rtc".into(),
                "--paired".into(),
                list.into(),
                "--rounds".into(),
                part.rounds.to_string(),
                "--block-ms".into(),
                s.block_ms.to_string(),
                "--working-set".into(),
                working_set.to_string(),
                "--seed".into(),
                s.seed.to_string(),
                "--order-seed".into(),
                part.seed.to_string(),
                "--counters".into(),
                "hw".into(),
            ]
            .into()
        }
    })
}

fn spawn(argv: &[String], env: &[(String, String)], what: &str) -> Result<String> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for k in SCRUB {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {}", argv[0]))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let why = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        bail!("{what} failed ({}): {why}", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn runtime() -> Result<String> {
    Ok(memlens_native::runtime()?.display().to_string())
}

/// What one paired process printed.
struct Printed {
    /// Its blocks, configurations renumbered to the settings' intervals (i + 1).
    blocks: Vec<Block>,
    /// memlens: threads, most pending, longest switch ns.
    switch: Option<[u64; 3]>,
    /// The pipeline's `counters` line.
    counters: Option<String>,
    /// Wall time beyond its blocks (start-up, warm-up blocks, exit), s.
    overhead_s: f64,
}

/// Run one paired process over a part of the schedule.
fn run_process(
    w: &Workload,
    s: &Settings,
    p: &Profiler,
    part: &Part,
    tmp: &Path,
) -> Result<Printed> {
    let t0 = std::time::Instant::now();
    let list = |f: &dyn Fn(u64) -> String| {
        part.intervals
            .iter()
            .map(|&i| f(s.intervals[i]))
            .collect::<Vec<_>>()
            .join(",")
    };
    let (list, env) = match p {
        Profiler::Memlens(u) => (
            list(&|r| format!("m{r}")),
            vec![
                ("LD_PRELOAD".to_string(), runtime()?),
                ("MEMLENS_ACTIVE".into(), "0".into()),
                ("MEMLENS_UNWINDER".into(), u.clone()),
            ],
        ),
        Profiler::Jemalloc => (
            list(&|r| format!("j{}", lg_of(r))),
            vec![
                (
                    "LD_PRELOAD".to_string(),
                    find_lib("libjemalloc.so.2")
                        .context("jemalloc is not installed (Debian package libjemalloc2)")?
                        .display()
                        .to_string(),
                ),
                (
                    "MALLOC_CONF".into(),
                    format!(
                        "prof:true,prof_active:false,prof_final:false,prof_prefix:{}",
                        tmp.join("je").display()
                    ),
                ),
            ],
        ),
    };
    let a = argv(w, s, part, &list)?;
    let out = spawn(&a, &env, &format!("{} under {p:?}", w.name()))?;
    let mut pr = Printed {
        blocks: Vec::new(),
        switch: None,
        counters: None,
        overhead_s: 0.0,
    };
    for l in out.lines() {
        if let Some(b) = Block::parse(l) {
            let mut b = b?;
            if b.config > 0 {
                // the process numbers its own list from 1
                let Some(&i) = part.intervals.get(b.config as usize - 1) else {
                    bail!("{} printed a block of an unknown configuration", w.name());
                };
                b.config = i as u32 + 1;
            }
            pr.blocks.push(b);
        } else if let Some(rest) = l.strip_prefix("switch ") {
            let v: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            if v.len() == 3 {
                pr.switch = Some([v[0], v[1], v[2]]);
            }
        } else if let Some(rest) = l.strip_prefix("counters ") {
            pr.counters = Some(rest.to_string());
        }
    }
    if pr.blocks.is_empty() {
        bail!("{} printed no blocks", w.name());
    }
    let k = part.intervals.len() as f64;
    let blocks_s = (part.rounds as f64 * (2.0 * k + 1.0) + k + 1.0) * s.block_ms as f64 / 1e3;
    pr.overhead_s = (t0.elapsed().as_secs_f64() - blocks_s).max(0.0);
    Ok(pr)
}

/// One workload under one profiler: the rounds of all its processes, pooled.
struct Cell {
    w: usize,
    p: Profiler,
    /// Per configuration (index 0 unused), the paired per-round values.
    paired: Vec<stats::Paired>,
    /// Every block (for the counters' split).
    blocks: Vec<Block>,
    /// Wall time of a process beyond its blocks, s (the first process's).
    overhead_s: f64,
    /// Half-width target, points.
    target: f64,
}

impl Cell {
    fn add(&mut self, blocks: Vec<Block>) {
        let n = self.paired.len() - 1;
        for (i, p) in stats::pair(&blocks, n).into_iter().enumerate().skip(1) {
            self.paired[i].extend(p);
        }
        self.blocks.extend(blocks);
    }

    /// Intervals (indices) whose 95% interval is wider than the target, with the rounds each needs.
    fn missing(&self) -> Vec<(usize, u32)> {
        (1..self.paired.len())
            .filter_map(|i| {
                let e = estimate(&self.paired[i].overhead)?;
                let n = stats::rounds_needed(&e, self.target);
                (n > 0).then_some((i - 1, n))
            })
            .collect()
    }
}

/// A further process for a cell: its intervals and rounds, and the wall time it will take.
#[derive(Debug, Clone, PartialEq)]
pub struct Extension {
    /// Index of the cell (workload × profiler).
    pub cell: usize,
    /// Intervals (indices into the settings) to run.
    pub intervals: Vec<usize>,
    /// Rounds.
    pub rounds: u32,
    /// Expected wall time, s.
    pub seconds: f64,
}

/// Plan the next further processes within `budget_s` seconds. Pure: `needs` is, per cell (workload
/// × profiler), its intervals still wider than the target with the rounds each needs, and the wall
/// time a process takes beyond its blocks; `block_s` is the block length. Each cell that misses
/// gets a process over just those intervals (rounds = the most any of them needs), or two: the
/// intervals that need less than a third of the neediest's rounds get a shorter one of their own.
/// The cheapest processes are funded first, so as many targets as possible are met, and the first
/// that does not fit gets the time left, if that buys at least 8 rounds.
pub fn plan_extensions(
    needs: &[(Vec<(usize, u32)>, f64)],
    block_s: f64,
    budget_s: f64,
) -> Vec<Extension> {
    let cost = |k: usize, rounds: u32, over: f64| {
        over + (rounds as f64 * (2 * k + 1) as f64 + (k + 1) as f64) * block_s
    };
    let mut all: Vec<Extension> = Vec::new();
    for (cell, (m, over)) in needs.iter().enumerate() {
        // The intervals that need about as many rounds as the neediest share its process; the
        // others (less than a third of that) get a shorter process of their own, rather than
        // riding along for all its rounds.
        let most = m.iter().map(|x| x.1).max().unwrap_or(0);
        for heavy in [true, false] {
            let part: Vec<&(usize, u32)> =
                m.iter().filter(|x| (x.1 * 3 >= most) == heavy).collect();
            let Some(rounds) = part.iter().map(|x| x.1).max() else {
                continue;
            };
            all.push(Extension {
                cell,
                intervals: part.iter().map(|x| x.0).collect(),
                rounds,
                seconds: cost(part.len(), rounds, *over),
            });
        }
    }
    all.sort_by(|a, b| a.seconds.total_cmp(&b.seconds));
    let mut left = budget_s;
    let mut out = Vec::new();
    for mut e in all {
        if e.seconds <= left {
            left -= e.seconds;
            out.push(e);
            continue;
        }
        let k = e.intervals.len();
        let over = needs[e.cell].1;
        // (a cell's shorter process, if any, came before: it was cheaper)
        let fit = ((left - cost(k, 0, over)) / ((2 * k + 1) as f64 * block_s)).floor();
        if fit >= 8.0 {
            e.rounds = fit as u32;
            e.seconds = cost(k, e.rounds, over);
            out.push(e);
        }
        break;
    }
    out
}

fn rows_of(w: &Workload, s: &Settings, c: &Cell) -> Vec<Row> {
    let split = stats::count_split(&c.blocks, s.intervals.len());
    s.intervals
        .iter()
        .enumerate()
        .filter_map(|(i, &r)| {
            let pr = &c.paired[i + 1];
            let e = estimate(&pr.overhead)?;
            let (profiler, config, unwinder, interval) = match &c.p {
                Profiler::Memlens(u) => (
                    "memlens",
                    format!("memlens {u} {}", format_size(r)),
                    Some(u.clone()),
                    r,
                ),
                Profiler::Jemalloc => {
                    let j = 1u64 << lg_of(r);
                    (
                        "jemalloc",
                        format!("jemalloc prof {}", format_size(j)),
                        None,
                        j,
                    )
                }
            };
            let memlens = matches!(c.p, Profiler::Memlens(_));
            let direct = estimate(&pr.direct).filter(|_| memlens);
            let indirect = estimate(&pr.indirect).filter(|_| memlens);
            Some(Row {
                workload: w.name(),
                config,
                interval_bytes: Some(interval),
                unwinder,
                paired: true,
                overhead_pct: Some(e.pct),
                ci_low_pct: Some(e.lo),
                ci_high_pct: Some(e.hi),
                direct_cost_pct: direct.map(|d| d.pct),
                indirect_cost_pct: indirect.map(|d| d.pct),
                coverage_pct: None,
                total_error_pct: None,
                top_error_pct: None,
                samples: None,
                truncated_pct: None,
                engine: Columns {
                    profiler: profiler.into(),
                    rounds: e.n,
                    ci_target_pct: c.target,
                    ci_met: e.half_width() <= c.target,
                    counts_per_tick: split[i + 1].filter(|_| memlens),
                    p99_overhead_pct: estimate(&pr.p99),
                    direct_ci: direct,
                    indirect_ci: indirect,
                    sampled_ticks_pct: estimate(&pr.sampled_share)
                        .filter(|_| memlens)
                        .map(|d| d.pct),
                    per_round: pr.overhead.clone(),
                },
            })
        })
        .collect()
}

/// The profile windows of one unwinder on the pipeline: exact, then each interval.
fn windows(w: &Workload, s: &Settings, u: &str, tmp: &Path) -> Result<Vec<Vec<PathBuf>>> {
    let Workload::Pipeline { working_set, .. } = w else {
        bail!("profile windows run on the pipeline")
    };
    let me = std::env::current_exe().context("cannot find the memlens executable")?;
    let mut out = Vec::new();
    for (k, r) in std::iter::once(0)
        .chain(s.intervals.iter().copied())
        .enumerate()
    {
        let prefix = tmp.join(format!("win-{u}-{k}"));
        let a = [
            me.display().to_string(),
            "workload".into(),
            "rtc".into(),
            "--window".into(),
            r.to_string(),
            "--ticks".into(),
            s.window_ticks.to_string(),
            "--working-set".into(),
            working_set.to_string(),
            "--seed".into(),
            s.seed.to_string(),
        ];
        let env = vec![
            ("LD_PRELOAD".to_string(), runtime()?),
            ("MEMLENS_ACTIVE".into(), "0".into()),
            ("MEMLENS_UNWINDER".into(), u.to_string()),
            ("MEMLENS_OUT".into(), prefix.display().to_string()),
        ];
        spawn(&a, &env, &format!("profile window {u} {r}"))?;
        let d: Vec<PathBuf> = memlens_target::raw_dumps(&prefix)?
            .into_iter()
            .map(|d| d.path)
            .collect();
        if d.is_empty() {
            bail!("the profile window {u} {r} wrote no dump");
        }
        out.push(d);
    }
    Ok(out)
}

/// Run the whole paired study: one process per workload and profiler over every interval; the
/// profile windows; then, while the time limit allows, further processes over just the intervals
/// whose 95% interval is still wider than its target ([`plan_extensions`]).
pub fn run(s: Settings) -> Result<Results> {
    let t0 = std::time::Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("memlens-study.")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let mut profilers: Vec<Profiler> = s
        .unwinders
        .iter()
        .map(|u| Profiler::Memlens(u.clone()))
        .collect();
    if s.jemalloc {
        profilers.push(Profiler::Jemalloc);
    }
    let quality_on = s.window_ticks > 0
        && s.workloads
            .iter()
            .any(|w| matches!(w, Workload::Pipeline { .. }));
    let total = (s.workloads.len() * profilers.len()) as u64
        + if quality_on {
            s.unwinders.len() as u64
        } else {
            0
        };
    let progress = Progress::new(total, "study");
    let mut switch = SwitchFacts::default();
    let mut cells: Vec<Cell> = Vec::new();
    let mut counters: Option<String> = None;
    let all: Vec<usize> = (0..s.intervals.len()).collect();
    for (wi, w) in s.workloads.iter().enumerate() {
        for p in &profilers {
            progress.step(format!("{} · {p:?} · {} rounds", w.name(), s.rounds));
            let part = Part {
                intervals: &all,
                rounds: s.rounds,
                seed: s.seed,
            };
            let pr = run_process(w, &s, p, &part, tmp.path())?;
            if let (Some(v), Workload::Synthetic { .. }) = (pr.switch, w) {
                switch.threads = switch.threads.max(v[0]);
                switch.pending_max = switch.pending_max.max(v[1]);
                switch.max_ns = switch.max_ns.max(v[2]);
            }
            if counters.is_none() && matches!(p, Profiler::Memlens(_)) {
                counters = pr.counters;
            }
            let mut c = Cell {
                w: wi,
                p: p.clone(),
                paired: vec![stats::Paired::default(); s.intervals.len() + 1],
                blocks: Vec::new(),
                overhead_s: pr.overhead_s,
                target: match w {
                    Workload::Synthetic { .. } => s.target_synthetic,
                    Workload::Pipeline { .. } => s.target_pipeline,
                },
            };
            c.add(pr.blocks);
            cells.push(c);
            progress.inc();
        }
    }
    let mut truth = Vec::new();
    let mut quality_rows = Vec::new();
    // Quality on the realistic workload whose working set is in the LLC (or the first pipeline).
    let qw = s
        .workloads
        .iter()
        .filter(|w| matches!(w, Workload::Pipeline { .. }))
        .find(|w| w.name() == "pipeline-llc")
        .or_else(|| {
            s.workloads
                .iter()
                .find(|w| matches!(w, Workload::Pipeline { .. }))
        });
    if let (true, Some(qw)) = (quality_on, qw) {
        for u in &s.unwinders {
            progress.step(format!("{} · profile windows · {u}", qw.name()));
            let mut d = windows(qw, &s, u, tmp.path())?;
            let exact = d.remove(0);
            let (t, qs) = quality::window(u, exact, d)?;
            truth.push(t);
            for (r, q) in s.intervals.iter().zip(qs) {
                quality_rows.push((qw.name(), u.clone(), *r, q));
            }
            progress.inc();
        }
    }
    progress.finish();
    // Narrow what is still too wide, while the time limit allows (2 s kept for the report).
    let mut extra = 0u32;
    // Blocks last longer than planned by the switch itself (jemalloc's prof.reset) and the
    // scheduler's wake-up: `slow` (actual / planned wall time of the processes run so far, at
    // least 1.1) scales the plan so the limit holds.
    let mut slow = 1.1f64;
    for pass in 1..=6u64 {
        let left = (s.max_seconds - t0.elapsed().as_secs_f64() - 2.0) / slow;
        let needs: Vec<(Vec<(usize, u32)>, f64)> =
            cells.iter().map(|c| (c.missing(), c.overhead_s)).collect();
        let plan = plan_extensions(&needs, s.block_ms as f64 / 1e3, left);
        if plan.is_empty() {
            break;
        }
        let progress = Progress::new(plan.len() as u64, "study: narrowing");
        for e in plan {
            let c = &mut cells[e.cell];
            let w = &s.workloads[c.w];
            progress.step(format!(
                "{} · {:?} · {} more rounds of {} interval(s)",
                w.name(),
                c.p,
                e.rounds,
                e.intervals.len()
            ));
            let part = Part {
                intervals: &e.intervals,
                rounds: e.rounds,
                seed: s.seed.wrapping_add(pass * 1000 + e.cell as u64),
            };
            let t = std::time::Instant::now();
            let pr = run_process(w, &s, &c.p, &part, tmp.path())?;
            slow = slow.max(t.elapsed().as_secs_f64() / e.seconds.max(1e-3));
            c.add(pr.blocks);
            extra += 1;
            if t0.elapsed().as_secs_f64() > s.max_seconds - 2.0 {
                break;
            }
            progress.inc();
        }
        progress.finish();
    }
    let mut rows = Vec::new();
    let mut counts_off = Vec::new();
    for c in &cells {
        let w = &s.workloads[c.w];
        rows.extend(rows_of(w, &s, c));
        if matches!(c.p, Profiler::Memlens(_)) && !counts_off.iter().any(|(n, _)| *n == w.name()) {
            if let Some(Some(off)) = stats::count_split(&c.blocks, 0).first() {
                counts_off.push((w.name(), *off));
            }
        }
    }
    for (wname, u, r, (q, samples, tr)) in &quality_rows {
        for row in rows.iter_mut().filter(|x| {
            &x.workload == wname
                && x.unwinder.as_deref() == Some(u.as_str())
                && x.interval_bytes == Some(*r)
        }) {
            fill(row, q, *samples, *tr);
        }
    }
    let (counters, counter_events) = counter_note(counters, &rows);
    if counter_events.is_none() {
        counts_off.clear();
        for r in rows.iter_mut() {
            r.engine.counts_per_tick = None;
        }
    }
    Ok(Results {
        settings: s,
        rows,
        truth,
        switch,
        counters,
        counter_events,
        counts_off,
        extra_processes: extra,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

/// The counters' note from the pipeline's `counters` line: the events and the cost of a read, or
/// `n/a (reason)` — also when the events opened but counted nothing on any tick (a VM may accept
/// an event it never counts).
fn counter_note(line: Option<String>, rows: &[Row]) -> (String, Option<[String; 2]>) {
    let Some(line) = line else {
        return ("n/a (no pipeline workload measured)".into(), None);
    };
    if line.starts_with("n/a") {
        return (line, None);
    }
    let f: Vec<&str> = line.split_whitespace().collect();
    let (Some(a), Some(b)) = (f.first(), f.get(1)) else {
        return (format!("n/a (unreadable counters line '{line}')"), None);
    };
    let counted = rows
        .iter()
        .filter_map(|r| r.engine.counts_per_tick)
        .any(|c| {
            c.sampled
                .iter()
                .chain(&c.after)
                .chain(&c.far)
                .any(|&x| x > 0.0)
        });
    if !counted {
        return (
            format!("n/a ({a} and {b} opened but read 0 on every tick: not counted here)"),
            None,
        );
    }
    let cost = f
        .iter()
        .find_map(|x| x.strip_prefix("read_cycles="))
        .unwrap_or("?");
    (
        format!("{a}, {b} per tick (a read costs {cost} TSC cycles, outside the timed tick)"),
        Some([a.to_string(), b.to_string()]),
    )
}

fn fill(row: &mut Row, q: &Quality, samples: u64, truncated: f64) {
    row.coverage_pct = Some(q.coverage_pct);
    row.total_error_pct = Some(q.total_error_pct);
    row.top_error_pct = Some(q.top_max_abs_error_pct);
    row.samples = Some(samples);
    row.truncated_pct = Some(truncated * 100.0);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The paired rows' JSON: the contract's fields and this engine's columns (the README's
    /// `p99_overhead_pct`, `rounds`, `ci_target_pct`, `ci_met`, `counts_per_tick` among them),
    /// nothing else; it reads back as written, except the per-round values it leaves out.
    #[test]
    fn rows_keep_the_json_contract() {
        let e = Estimate {
            pct: 2.0,
            lo: 1.0,
            hi: 3.5,
            n: 40,
        };
        let row = Row {
            workload: "pipeline-l2".into(),
            config: "memlens fp 64K".into(),
            interval_bytes: Some(65536),
            unwinder: Some("fp".into()),
            paired: true,
            overhead_pct: Some(e.pct),
            ci_low_pct: Some(e.lo),
            ci_high_pct: Some(e.hi),
            direct_cost_pct: Some(0.5),
            indirect_cost_pct: Some(0.1),
            coverage_pct: Some(99.0),
            total_error_pct: Some(-1.0),
            top_error_pct: Some(2.0),
            samples: Some(340),
            truncated_pct: Some(0.0),
            engine: Columns {
                profiler: "memlens".into(),
                rounds: e.n,
                ci_target_pct: 4.0,
                ci_met: true,
                counts_per_tick: None,
                p99_overhead_pct: Some(e),
                direct_ci: Some(e),
                indirect_ci: None,
                sampled_ticks_pct: Some(0.1),
                per_round: vec![1.0, 2.0],
            },
        };
        let v = serde_json::to_value(&row).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        let own = [
            "profiler",
            "rounds",
            "ci_target_pct",
            "ci_met",
            "counts_per_tick",
            "p99_overhead_pct",
            "direct_ci",
            "indirect_ci",
            "sampled_ticks_pct",
        ];
        let mut want: Vec<&str> = crate::row::CONTRACT.iter().chain(&own).copied().collect();
        want.sort_unstable();
        assert_eq!(keys, want, "{v}");
        assert_eq!(v["samples"], serde_json::Value::from(340u64));
        let back: Row = serde_json::from_value(v).unwrap();
        assert_eq!(back.overhead(), e);
        assert!(back.engine.per_round.is_empty());
        assert_eq!(back.engine.p99_overhead_pct, Some(e));
    }

    #[test]
    fn extensions_fund_the_cheapest_needs_first_within_the_time() {
        // cell 0: met; cell 1: one interval needs 100 rounds (3 blocks each); cell 2: two
        // intervals need 50 and 400 rounds — each gets a process of its own (3 blocks a round);
        // 10 ms blocks, 0.5 s start-up each.
        let needs = vec![
            (vec![], 0.5),
            (vec![(0, 100)], 0.5),
            (vec![(0, 50), (3, 400)], 0.5),
        ];
        let all = plan_extensions(&needs, 0.01, 100.0);
        let got: Vec<(usize, Vec<usize>, u32)> = all
            .iter()
            .map(|e| (e.cell, e.intervals.clone(), e.rounds))
            .collect();
        // cheapest first: cell 2's short process, cell 1, cell 2's long one
        assert_eq!(
            got,
            [(2, vec![0], 50), (1, vec![0], 100), (2, vec![3], 400)]
        );
        assert!((all[1].seconds - (0.5 + (300.0 + 2.0) * 0.01)).abs() < 1e-9);
        // 10 s: the first two fit whole (2.02 + 3.52 s); the last gets what is left, whole rounds
        let some = plan_extensions(&needs, 0.01, 10.0);
        assert_eq!(some.len(), 3);
        assert_eq!(
            some[2].rounds,
            ((10.0 - 2.02 - 3.52 - 0.5 - 0.02) / 0.03f64).floor() as u32
        );
        assert!(some.iter().map(|e| e.seconds).sum::<f64>() <= 10.0 + 1e-9);
        // no time: nothing; fewer than 8 rounds fit: nothing
        assert!(plan_extensions(&needs, 0.01, 0.0).is_empty());
        assert!(plan_extensions(&needs, 0.01, 0.6).is_empty());
        // intervals that need about as many rounds share one process
        let both = plan_extensions(&[(vec![(1, 300), (2, 120)], 0.5)], 0.01, 100.0);
        assert_eq!(
            (both[0].intervals.clone(), both[0].rounds),
            (vec![1, 2], 300)
        );
    }
}
