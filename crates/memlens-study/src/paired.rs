//! The paired study (the default): each workload runs in one process per profiler, which switches
//! the profiler itself between `off` and each interval in short blocks; overheads are paired in
//! time ([`crate::stats`]). Quality comes from profile windows of the realistic workload: the same
//! ticks after a warm-up and a reset, recorded exactly and at each interval.
use crate::configs::find_lib;
use crate::quality::{self, Quality, TruthSummary};
use crate::stats::{self, Estimate};
use anyhow::{bail, Context, Result};
use memlens_measure::progress::Progress;
use memlens_measure::units::format_size;
use memlens_workloads::paired::Block;
use serde::Serialize;
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
    /// Rounds per process.
    pub rounds: u32,
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

/// One configuration row: the JSON contract of `memlens study --json`.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Workload name.
    pub workload: String,
    /// Configuration name (`memlens fp 512K`, `jemalloc prof 512K`).
    pub config: String,
    /// Profiler: memlens or jemalloc.
    pub profiler: String,
    /// Sampling interval, bytes (null for baselines).
    pub interval_bytes: Option<u64>,
    /// memlens unwinder (null for jemalloc).
    pub unwinder: Option<String>,
    /// Measured in alternating blocks of one process.
    pub paired: bool,
    /// Overhead of the mean (cycles per malloc, or tick latency), percent.
    pub overhead_pct: f64,
    /// 95% interval of the overhead, low end.
    pub ci_low_pct: f64,
    /// 95% interval of the overhead, high end.
    pub ci_high_pct: f64,
    /// Rounds the estimate rests on.
    pub rounds: usize,
    /// Overhead of the p99 latency (pipeline).
    pub p99_overhead_pct: Option<Estimate>,
    /// Direct cost: excess time of the ticks that took a sample, percent of the mean (pipeline, memlens).
    pub direct_cost_pct: Option<f64>,
    /// Indirect cost: excess time of the ticks just after a sample (pipeline, memlens).
    pub indirect_cost_pct: Option<f64>,
    /// 95% intervals of the direct and indirect cost.
    pub direct_ci: Option<Estimate>,
    /// See `direct_ci`.
    pub indirect_ci: Option<Estimate>,
    /// Ticks that took a sample, percent.
    pub sampled_ticks_pct: Option<f64>,
    /// Coverage of the profile window against its exact truth, percent.
    pub coverage_pct: Option<f64>,
    /// Error of the estimated total bytes, percent.
    pub total_error_pct: Option<f64>,
    /// Largest absolute error among the top stacks, percent.
    pub top_error_pct: Option<f64>,
    /// Samples in the window.
    pub samples: Option<u64>,
    /// Share of truncated stacks, percent.
    pub truncated_pct: Option<f64>,
    /// Per-round overheads (for the comparisons of the verdict).
    #[serde(skip)]
    pub per_round: Vec<f64>,
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
    /// Cache and TLB misses per tick: measured, or why not.
    pub counters: String,
    /// Wall time of the study, s.
    pub seconds: f64,
}

const SCRUB: [&str; 8] = [
    "LD_PRELOAD",
    "MALLOC_CONF",
    "TCMALLOC_SAMPLE_PARAMETER",
    "HEAPPROFILE",
    "MEMLENS_INTERVAL",
    "MEMLENS_UNWINDER",
    "MEMLENS_ACTIVE",
    "MEMLENS_OUT",
];

/// The profiler a process is started for.
#[derive(Debug, Clone)]
enum Profiler {
    Memlens(String),
    Jemalloc,
}

fn argv(w: &Workload, s: &Settings, list: &str) -> Result<Vec<String>> {
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
                s.rounds.to_string(),
                s.seed.to_string(),
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
                s.rounds.to_string(),
                "--block-ms".into(),
                s.block_ms.to_string(),
                "--working-set".into(),
                working_set.to_string(),
                "--seed".into(),
                s.seed.to_string(),
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

/// Run one paired process; returns its blocks and, for memlens, the switch line.
fn run_process(
    w: &Workload,
    s: &Settings,
    p: &Profiler,
    tmp: &Path,
) -> Result<(Vec<Block>, Option<[u64; 3]>)> {
    let (list, env) = match p {
        Profiler::Memlens(u) => (
            s.intervals
                .iter()
                .map(|r| format!("m{r}"))
                .collect::<Vec<_>>()
                .join(","),
            vec![
                ("LD_PRELOAD".to_string(), runtime()?),
                ("MEMLENS_ACTIVE".into(), "0".into()),
                ("MEMLENS_UNWINDER".into(), u.clone()),
            ],
        ),
        Profiler::Jemalloc => (
            s.intervals
                .iter()
                .map(|r| format!("j{}", crate::configs::lg_of(*r)))
                .collect::<Vec<_>>()
                .join(","),
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
    let a = argv(w, s, &list)?;
    let out = spawn(&a, &env, &format!("{} under {p:?}", w.name()))?;
    let mut blocks = Vec::new();
    let mut sw = None;
    for l in out.lines() {
        if let Some(b) = Block::parse(l) {
            blocks.push(b?);
        } else if let Some(rest) = l.strip_prefix("switch ") {
            let v: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            if v.len() == 3 {
                sw = Some([v[0], v[1], v[2]]);
            }
        }
    }
    if blocks.is_empty() {
        bail!("{} printed no blocks", w.name());
    }
    Ok((blocks, sw))
}

fn rows_of(w: &Workload, s: &Settings, p: &Profiler, blocks: &[Block]) -> Vec<Row> {
    let paired = stats::pair(blocks, s.intervals.len());
    s.intervals
        .iter()
        .enumerate()
        .filter_map(|(i, &r)| {
            let pr = &paired[i + 1];
            let e = stats::estimate(&pr.overhead)?;
            let (profiler, config, unwinder, interval) = match p {
                Profiler::Memlens(u) => (
                    "memlens",
                    format!("memlens {u} {}", format_size(r)),
                    Some(u.clone()),
                    r,
                ),
                Profiler::Jemalloc => {
                    let j = 1u64 << crate::configs::lg_of(r);
                    (
                        "jemalloc",
                        format!("jemalloc prof {}", format_size(j)),
                        None,
                        j,
                    )
                }
            };
            let memlens = matches!(p, Profiler::Memlens(_));
            let direct = stats::estimate(&pr.direct).filter(|_| memlens);
            let indirect = stats::estimate(&pr.indirect).filter(|_| memlens);
            Some(Row {
                workload: w.name(),
                config,
                profiler: profiler.into(),
                interval_bytes: Some(interval),
                unwinder,
                paired: true,
                overhead_pct: e.pct,
                ci_low_pct: e.lo,
                ci_high_pct: e.hi,
                rounds: e.n,
                p99_overhead_pct: stats::estimate(&pr.p99),
                direct_cost_pct: direct.map(|d| d.pct),
                indirect_cost_pct: indirect.map(|d| d.pct),
                direct_ci: direct,
                indirect_ci: indirect,
                sampled_ticks_pct: stats::estimate(&pr.sampled_share)
                    .filter(|_| memlens)
                    .map(|d| d.pct),
                coverage_pct: None,
                total_error_pct: None,
                top_error_pct: None,
                samples: None,
                truncated_pct: None,
                per_round: pr.overhead.clone(),
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
        let stem = format!("win-{u}-{k}.");
        let mut d: Vec<PathBuf> = std::fs::read_dir(tmp)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with(&stem))
                    && p.extension().is_some_and(|e| e == "raw")
            })
            .collect();
        d.sort();
        if d.is_empty() {
            bail!("the profile window {u} {r} wrote no dump");
        }
        out.push(d);
    }
    Ok(out)
}

/// Run the whole paired study.
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
    let mut rows = Vec::new();
    let mut switch = SwitchFacts::default();
    for w in &s.workloads {
        for p in &profilers {
            progress.step(format!("{} · {p:?} · {} rounds", w.name(), s.rounds));
            let (blocks, sw) = run_process(w, &s, p, tmp.path())?;
            if let (Some(v), Workload::Synthetic { .. }) = (sw, w) {
                switch.threads = switch.threads.max(v[0]);
                switch.pending_max = switch.pending_max.max(v[1]);
                switch.max_ns = switch.max_ns.max(v[2]);
            }
            rows.extend(rows_of(w, &s, p, &blocks));
            progress.inc();
        }
    }
    let mut truth = Vec::new();
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
            for (r, (q, samples, tr)) in s.intervals.iter().zip(qs) {
                for row in rows.iter_mut().filter(|x| {
                    x.workload == qw.name()
                        && x.unwinder.as_deref() == Some(u.as_str())
                        && x.interval_bytes == Some(*r)
                }) {
                    fill(row, &q, samples, tr);
                }
            }
            progress.inc();
        }
    }
    progress.finish();
    let counters = match memlens_measure::sysinfo::pmu_probe() {
        Err(why) => format!("n/a ({why})"),
        Ok(()) => "n/a (counters per tick are not collected yet; the PMU is available)".into(),
    };
    Ok(Results {
        settings: s,
        rows,
        truth,
        switch,
        counters,
        seconds: t0.elapsed().as_secs_f64(),
    })
}

fn fill(row: &mut Row, q: &Quality, samples: u64, truncated: f64) {
    row.coverage_pct = Some(q.coverage_pct);
    row.total_error_pct = Some(q.total_error_pct);
    row.top_error_pct = Some(q.top_max_abs_error_pct);
    row.samples = Some(samples);
    row.truncated_pct = Some(truncated * 100.0);
}
