//! The paired study (the default): each workload runs in processes that switch the profiler
//! between `off` and each configuration in short blocks; overheads are paired in time
//! (`stats.rs`). A workload is built in (`builtin.rs`: the process switches itself) or a program
//! under its own load (`service.rs`: memlens switches it through its control socket).
//!
//! Every configuration is measured in at least `--processes` processes (2: what differs between
//! processes — where the heap landed, what else ran meanwhile — is then part of its interval,
//! through the hierarchical bootstrap of `estimate.rs`), and every process also runs placebo blocks
//! (switched to as off is): the A/A reading that calibrates what counts as resolved (`verdict.rs`).
//! Quality comes from profile windows: the same work after a reset, recorded exactly and at each
//! interval.
use super::builtin::{self, Kind};
use super::{service, stats};
use crate::estimate::{estimate_groups, Estimate};
use crate::profilers::lg_of;
use crate::quality::{self, Quality, TruthSummary};
use anyhow::Result;
use memlens_measure::units::format_size;
use memlens_render::progress::Progress;
use memlens_workloads::Block;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How a service's blocks are measured.
#[derive(Debug, Clone, Serialize)]
pub enum Metric {
    /// CPU time of the process over the load's run (`/proc/PID/task/*/schedstat`).
    Cpu,
    /// Wall time of the load's run.
    Wall,
    /// The first capture group of `regex` in the load's output; `rate`: higher is better.
    Output {
        /// The regex (with one capture group).
        regex: String,
        /// Is the figure a rate (throughput), so that its inverse is the cost?
        rate: bool,
    },
}

impl Metric {
    /// What a block's value is, in words.
    pub fn describe(&self) -> String {
        match self {
            Metric::Cpu => "the process's CPU time per run of the load (schedstat)".into(),
            Metric::Wall => "wall time per run of the load".into(),
            Metric::Output { regex, rate: true } => {
                format!("the load's figure '{regex}' (a rate: its inverse)")
            }
            Metric::Output { regex, rate: false } => format!("the load's figure '{regex}'"),
        }
    }
}

/// A program studied under its own load, switched through its control socket.
#[derive(Debug, Clone, Serialize)]
pub struct Service {
    /// Workload name (`redis`, or the program's name).
    pub name: String,
    /// The load: a shell command, one run per block.
    pub load: String,
    /// The server memlens starts (program and arguments); empty with `pid`.
    pub server: Vec<String>,
    /// A running process to study instead.
    pub pid: Option<i32>,
    /// How a block is measured.
    pub metric: Metric,
    /// Runs of the load in each profile window.
    pub window_loads: u32,
    /// The intervals it is measured at (indices into the settings' intervals).
    pub intervals: Vec<usize>,
    /// The memlens unwinders it is measured with (one server per unwinder).
    pub unwinders: Vec<String>,
}

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
    /// A program under its own load.
    Service(Service),
}

impl Workload {
    /// Short name used in tables and JSON.
    pub fn name(&self) -> String {
        match self {
            Workload::Synthetic { threads, .. } => format!("synthetic-{threads}t"),
            Workload::Pipeline { label, .. } => format!("pipeline-{label}"),
            Workload::Service(s) => s.name.clone(),
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
            Workload::Service(s) => format!(
                "{}{} under `{}`; metric = {}",
                if s.server.is_empty() { "process " } else { "" },
                s.pid.map_or_else(|| shell_words(&s.server), |p| p.to_string()),
                s.load,
                s.metric.describe()
            ),
        }
    }

    /// A program switched from outside (not a built-in workload)?
    pub fn is_service(&self) -> bool {
        matches!(self, Workload::Service(_))
    }

    /// The intervals it is measured at (indices into the settings' intervals).
    pub fn intervals(&self, s: &Settings) -> Vec<usize> {
        match self {
            Workload::Service(v) => v.intervals.clone(),
            _ => (0..s.intervals.len()).collect(),
        }
    }
}

/// A command line as a shell would read it back (arguments with spaces or none quoted).
fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
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
    /// Rounds of every configuration in the first processes of a built-in workload (all
    /// processes together).
    pub rounds: u32,
    /// Same for a service.
    pub service_rounds: u32,
    /// Processes every configuration is measured in, at least (1 for a `--pid` service).
    pub processes: u32,
    /// Placebo configurations per process (the first calibrates; more measure the A/A rate).
    pub placebos: u32,
    /// Time limit of the whole study, s: further rounds run only while they fit (0: none).
    pub max_seconds: f64,
    /// Half width of the 95% interval each configuration should reach, points: synthetic loop.
    pub target_synthetic: f64,
    /// Same, pipeline (mean latency).
    pub target_pipeline: f64,
    /// Same, a service.
    pub target_service: f64,
    /// Block length, ms (built-in workloads; a service's block is one run of its load).
    pub block_ms: u64,
    /// Ticks per thread of each profile window of the pipeline (0: no quality measured).
    pub window_ticks: u64,
    /// Coverage a recommended interval must reach, percent.
    pub min_coverage: f64,
    /// Overhead budget of the recommendation, percent (upper end of the CI).
    pub budget: f64,
    /// Seed of the block order.
    pub seed: u64,
}

impl Settings {
    fn target(&self, w: &Workload) -> f64 {
        match w {
            Workload::Synthetic { .. } => self.target_synthetic,
            Workload::Pipeline { .. } => self.target_pipeline,
            Workload::Service(_) => self.target_service,
        }
    }
}

/// A configuration a paired process switches to (besides off). The order is the rows' order:
/// the placebos first (the A/A reading the others are judged against).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// The k-th placebo: switched to as off is, sampling stays off.
    Placebo(u32),
    /// memlens with this unwinder at the i-th interval.
    Memlens(String, usize),
    /// jemalloc's profiler at the i-th interval (rounded to a power of two).
    Jemalloc(usize),
}

/// One process's share of the schedule: its configurations, how many rounds, the seed of its
/// block order, and whether it also runs the profile windows (a service's first process).
pub struct Part {
    /// Configurations, numbered from 1 in the blocks.
    pub confs: Vec<Key>,
    /// Rounds.
    pub rounds: u32,
    /// Seed of the block order.
    pub seed: u64,
    /// Run the profile windows after the rounds (service).
    pub windows: bool,
}

/// What one paired process gave.
pub struct ProcOut {
    /// The configurations it ran (a service may leave jemalloc's out).
    pub confs: Vec<Key>,
    /// Its blocks, configurations numbered from 1 by `confs`.
    pub blocks: Vec<Block>,
    /// memlens: threads, most pending, longest switch ns.
    pub switch: Option<[u64; 3]>,
    /// The pipeline's `counters` line.
    pub counters: Option<String>,
    /// Wall time beyond its blocks (start-up, warm-up, exit), s.
    pub overhead_s: f64,
    /// Mean block length, s (a service's: one run of its load).
    pub block_s: f64,
    /// The process, for the hierarchical bootstrap.
    pub group: u64,
    /// Raw dumps of its profile windows (exact, then each interval).
    pub windows: Option<Vec<Vec<PathBuf>>>,
    /// What it had to leave out, and why.
    pub notes: Vec<String>,
}

static GROUPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl ProcOut {
    /// An empty result over `confs`, a process of its own.
    pub fn new(confs: Vec<Key>) -> ProcOut {
        ProcOut {
            confs,
            blocks: Vec::new(),
            switch: None,
            counters: None,
            overhead_s: 0.0,
            block_s: 0.0,
            group: GROUPS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            windows: None,
            notes: Vec::new(),
        }
    }
}

/// A row of the paired study: the contract's fields and [`Columns`].
pub type Row = crate::row::Row<Columns>;

/// What only the paired study measures of a configuration (docs/study.md: `p99_overhead_pct`, `rounds`,
/// `ci_target_pct`, `ci_met`, `counts_per_tick`, and the profiler, placebo and cost intervals).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Columns {
    /// Profiler: memlens, jemalloc or placebo.
    pub profiler: String,
    /// Rounds the estimate rests on.
    pub rounds: usize,
    /// Processes they come from (the bootstrap resamples these, then their rounds).
    pub processes: usize,
    /// Half width of the 95% interval the study aimed for, points.
    pub ci_target_pct: f64,
    /// Did the interval reach it (half width ≤ target)?
    pub ci_met: bool,
    /// Is the overhead resolved: does its whole interval lie beyond the placebo's reading (±
    /// the largest end of the first placebo's interval)? Null for that placebo.
    pub resolved: Option<bool>,
    /// Cache and TLB misses (the per-tick events) per tick by class, where counted.
    pub counts_per_tick: Option<stats::CountSplit>,
    /// Overhead of the p99 latency (pipeline).
    pub p99_overhead_pct: Option<Estimate>,
    /// 95% interval of the direct cost (`direct_cost_pct`).
    pub direct_ci: Option<Estimate>,
    /// 95% interval of the indirect cost (`indirect_cost_pct`).
    pub indirect_ci: Option<Estimate>,
    /// The runtime's own account of its sampled path, percent of the process's CPU time at the
    /// off rate (where the runtime accounts its cost).
    pub own_cost_pct: Option<Estimate>,
    /// Ticks that took a sample, percent.
    pub sampled_ticks_pct: Option<f64>,
    /// Per-round overheads by process (for the comparisons of the verdict).
    #[serde(skip)]
    pub per_round: Vec<Vec<f64>>,
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

    /// The calibrating placebo (the first)?
    pub fn is_placebo(&self) -> bool {
        self.engine.profiler == "placebo"
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

/// The exact truth of one workload's windows with one unwinder.
#[derive(Debug, Clone, Serialize)]
pub struct Truth {
    /// The workload whose window it is.
    pub workload: String,
    /// The truth.
    #[serde(flatten)]
    pub summary: TruthSummary,
}

/// Everything a paired study measured.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// Its parameters.
    pub settings: Settings,
    /// One row per configuration.
    pub rows: Vec<Row>,
    /// The exact truth of each window.
    pub truth: Vec<Truth>,
    /// Switch facts (synthetic loop).
    pub switch: SwitchFacts,
    /// The per-tick events and the cost of reading them, or `n/a (reason)`.
    pub counters: String,
    /// The per-tick events, where counted.
    pub counter_events: Option<[String; 2]>,
    /// Counts per tick of the off blocks, by workload (where counted).
    pub counts_off: Vec<(String, stats::CountSplit)>,
    /// Processes run beyond the first ones, to narrow intervals.
    pub extra_processes: u32,
    /// Wall time of the first processes and the profile windows, s (the rest of `seconds` went
    /// to the further processes and the report).
    pub first_seconds: f64,
    /// What was left out, and why.
    pub notes: Vec<String>,
    /// A/A comparisons between placebos and how many were called resolved (with `--placebos` > 1).
    pub aa: Option<super::verdict::Aa>,
    /// Wall time of the study, s.
    pub seconds: f64,
}

/// One workload under one kind of process, and every block its processes ran.
struct Cell {
    w: usize,
    kind: Kind,
    /// Its configurations (a service's lose jemalloc's when its profiler cannot be switched).
    confs: Vec<Key>,
    /// Every block, configurations numbered by `confs` (for the counters' split).
    blocks: Vec<Block>,
    /// Wall time of a process beyond its blocks, s (the first process's).
    overhead_s: f64,
    /// Block length, s.
    block_s: f64,
    /// Half-width target, points.
    target: f64,
    /// Does it narrow the placebos (the first cell of its workload)?
    placebo_owner: bool,
}

/// Per workload and configuration, each process's paired values.
type Pool = BTreeMap<(usize, Key), Vec<(u64, stats::Paired)>>;

fn add(pool: &mut Pool, cell: &mut Cell, out: ProcOut) {
    let paired = stats::pair(&out.blocks, out.confs.len());
    for (j, p) in paired.into_iter().enumerate().skip(1) {
        let key = out.confs[j - 1].clone();
        let groups = pool.entry((cell.w, key)).or_default();
        match groups.iter_mut().find(|(g, _)| *g == out.group) {
            Some((_, q)) => q.extend(p),
            None => groups.push((out.group, p)),
        }
    }
    // renumber to the cell's configurations for the counters' split
    for mut b in out.blocks {
        if b.config > 0 {
            let k = &out.confs[b.config as usize - 1];
            b.config = cell.confs.iter().position(|c| c == k).map_or(0, |i| i + 1) as u32;
        }
        cell.blocks.push(b);
    }
}

fn groups(g: &[(u64, stats::Paired)], f: fn(&stats::Paired) -> &Vec<f64>) -> Vec<Vec<f64>> {
    g.iter().map(|(_, p)| f(p).clone()).collect()
}

impl Cell {
    /// Configurations (indices into `confs`) whose 95% interval is wider than the target, with
    /// the rounds each needs — in one further process at most as many as it has so far: what
    /// differs between processes narrows only with more processes, so the rounds are spread
    /// over processes of balanced size (the next pass adds another).
    fn missing(&self, pool: &Pool) -> Vec<(usize, u32)> {
        self.confs
            .iter()
            .enumerate()
            .filter(|(_, k)| self.placebo_owner || !matches!(k, Key::Placebo(_)))
            .filter_map(|(j, k)| {
                let g = pool.get(&(self.w, k.clone()))?;
                let e = estimate_groups(&groups(g, |p| &p.overhead))?;
                let n = stats::rounds_needed(&e, self.target).min(e.n.max(8) as u32);
                (n > 0).then_some((j, n))
            })
            .collect()
    }
}

/// A further process for a cell: its configurations and rounds, and the wall time it will take.
#[derive(Debug, Clone, PartialEq)]
pub struct Extension {
    /// Index of the cell (workload × kind of process).
    pub cell: usize,
    /// Configurations (indices into the cell's) to run.
    pub confs: Vec<usize>,
    /// Rounds.
    pub rounds: u32,
    /// Expected wall time, s.
    pub seconds: f64,
}

/// What a cell still needs: its configurations still wider than the target with the rounds each
/// needs, the wall time a process takes beyond its blocks, and its block length (s).
pub type Need = (Vec<(usize, u32)>, f64, f64);

/// Plan the next further processes within `budget_s` seconds. Pure: `needs` is, per cell, what it
/// still needs ([`Need`]). Each cell that misses gets a process over just those configurations
/// (rounds = the most any of them needs), or two: those that need less than a third of the
/// neediest's rounds get a shorter one of their own. The cheapest processes are funded first, so
/// as many targets as possible are met, and the first that does not fit gets the time left, if
/// that buys at least 8 rounds.
pub fn plan_extensions(needs: &[Need], budget_s: f64) -> Vec<Extension> {
    let cost = |k: usize, rounds: u32, over: f64, block_s: f64| {
        over + (rounds as f64 * (2 * k + 1) as f64 + (k + 1) as f64) * block_s
    };
    let mut all: Vec<Extension> = Vec::new();
    for (cell, (m, over, block_s)) in needs.iter().enumerate() {
        let most = m.iter().map(|x| x.1).max().unwrap_or(0);
        for heavy in [true, false] {
            let part: Vec<&(usize, u32)> =
                m.iter().filter(|x| (x.1 * 3 >= most) == heavy).collect();
            let Some(rounds) = part.iter().map(|x| x.1).max() else {
                continue;
            };
            all.push(Extension {
                cell,
                confs: part.iter().map(|x| x.0).collect(),
                rounds,
                seconds: cost(part.len(), rounds, *over, *block_s),
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
        let k = e.confs.len();
        let (_, over, block_s) = needs[e.cell];
        // (a cell's shorter process, if any, came before: it was cheaper)
        let fit = ((left - cost(k, 0, over, block_s)) / ((2 * k + 1) as f64 * block_s)).floor();
        if fit >= 8.0 {
            e.rounds = fit as u32;
            e.seconds = cost(k, e.rounds, over, block_s);
            out.push(e);
        }
        break;
    }
    out
}

fn config_name(k: &Key, s: &Settings) -> (String, String, Option<String>, Option<u64>) {
    match k {
        Key::Placebo(0) => ("placebo".into(), "placebo".into(), None, None),
        Key::Placebo(p) => ("placebo".into(), format!("placebo {}", p + 1), None, None),
        Key::Memlens(u, i) => (
            "memlens".into(),
            format!("memlens {u} {}", format_size(s.intervals[*i])),
            Some(u.clone()),
            Some(s.intervals[*i]),
        ),
        Key::Jemalloc(i) => {
            let j = 1u64 << lg_of(s.intervals[*i]);
            (
                "jemalloc".into(),
                format!("jemalloc prof {}", format_size(j)),
                None,
                Some(j),
            )
        }
    }
}

fn rows_of(s: &Settings, pool: &Pool, cells: &[Cell]) -> Vec<Row> {
    let mut rows = Vec::new();
    for ((w, key), g) in pool {
        let work = &s.workloads[*w];
        let Some(e) = estimate_groups(&groups(g, |p| &p.overhead)) else {
            continue;
        };
        let (profiler, config, unwinder, interval) = config_name(key, s);
        let memlens = matches!(key, Key::Memlens(..));
        let est = |f: fn(&stats::Paired) -> &Vec<f64>| estimate_groups(&groups(g, f));
        let direct = est(|p| &p.direct).filter(|_| memlens);
        let indirect = est(|p| &p.indirect).filter(|_| memlens);
        let own = est(|p| &p.own).filter(|_| memlens);
        let target = s.target(work);
        let counts = cells
            .iter()
            .find(|c| c.w == *w && c.confs.contains(key))
            .and_then(|c| {
                let j = c.confs.iter().position(|x| x == key)?;
                stats::count_split(&c.blocks, c.confs.len())[j + 1]
            })
            .filter(|_| memlens);
        // Where the ticks are not split (everything but the pipeline), the runtime's own
        // account is the direct cost, and the rest of the overhead the indirect.
        let (direct_pct, indirect_pct) = match (direct, own) {
            (Some(d), _) => (Some(d.pct), indirect.map(|i| i.pct)),
            (None, Some(o)) => (Some(o.pct), Some(e.pct - o.pct)),
            (None, None) => (None, None),
        };
        rows.push(Row {
            workload: work.name(),
            config,
            interval_bytes: interval,
            unwinder,
            paired: true,
            overhead_pct: Some(e.pct),
            ci_low_pct: Some(e.lo),
            ci_high_pct: Some(e.hi),
            direct_cost_pct: direct_pct,
            indirect_cost_pct: indirect_pct,
            coverage_pct: None,
            total_error_pct: None,
            top_error_pct: None,
            samples: None,
            truncated_pct: None,
            engine: Columns {
                profiler,
                rounds: e.n,
                processes: g.iter().filter(|(_, p)| !p.overhead.is_empty()).count(),
                ci_target_pct: target,
                ci_met: e.half_width() <= target,
                resolved: None,
                counts_per_tick: counts,
                p99_overhead_pct: est(|p| &p.p99),
                direct_ci: direct,
                indirect_ci: indirect,
                own_cost_pct: own,
                sampled_ticks_pct: est(|p| &p.sampled_share).filter(|_| memlens).map(|d| d.pct),
                per_round: groups(g, |p| &p.overhead),
            },
        });
    }
    calibrate(&mut rows);
    rows
}

/// The placebo's band of a workload: the largest distance from 0 of the first placebo's 95%
/// interval — what the pairing reads when nothing changes.
pub fn placebo_band(rows: &[Row], workload: &str) -> Option<f64> {
    rows.iter()
        .find(|r| r.workload == workload && r.is_placebo() && r.config == "placebo")
        .map(|p| {
            p.ci_low_pct
                .unwrap_or(0.0)
                .abs()
                .max(p.ci_high_pct.unwrap_or(0.0).abs())
        })
}

/// Mark every row resolved or not against its workload's placebo band (the first placebo itself
/// stays unmarked).
fn calibrate(rows: &mut [Row]) {
    let bands: Vec<Option<f64>> = rows
        .iter()
        .map(|r| placebo_band(rows, &r.workload))
        .collect();
    for (r, band) in rows.iter_mut().zip(bands) {
        if r.config == "placebo" {
            continue;
        }
        r.engine.resolved = band.map(|b| r.overhead().beyond(b));
    }
}

/// The built-in cells: one per workload and kind of process (memlens with each unwinder,
/// jemalloc); a service's: one per unwinder, jemalloc's configurations riding in the first.
fn cells_of(s: &Settings) -> Vec<Cell> {
    let mut cells: Vec<Cell> = Vec::new();
    for (w, work) in s.workloads.iter().enumerate() {
        let placebos: Vec<Key> = (0..s.placebos).map(Key::Placebo).collect();
        let ivs = work.intervals(s);
        let unwinders = match work {
            Workload::Service(v) => &v.unwinders,
            _ => &s.unwinders,
        };
        let mut kinds: Vec<(Kind, Vec<Key>)> = unwinders
            .iter()
            .map(|u| {
                let mut c: Vec<Key> = ivs.iter().map(|&i| Key::Memlens(u.clone(), i)).collect();
                c.extend(placebos.iter().cloned());
                (Kind::Memlens(u.clone()), c)
            })
            .collect();
        if s.jemalloc {
            let je: Vec<Key> = ivs.iter().map(|&i| Key::Jemalloc(i)).collect();
            match kinds.first_mut() {
                // a service runs jemalloc's configurations beside memlens's (memlens switches both)
                Some((_, c)) if work.is_service() => c.extend(je),
                _ => {
                    let mut c = je;
                    c.extend(placebos.iter().cloned());
                    kinds.push((
                        if work.is_service() {
                            Kind::Memlens("dwarf".into())
                        } else {
                            Kind::Jemalloc
                        },
                        c,
                    ));
                }
            }
        }
        for (i, (kind, confs)) in kinds.into_iter().enumerate() {
            cells.push(Cell {
                w,
                kind,
                confs,
                blocks: Vec::new(),
                overhead_s: 0.0,
                block_s: s.block_ms as f64 / 1e3,
                target: s.target(work),
                placebo_owner: i == 0,
            });
        }
    }
    cells
}

fn run_part(s: &Settings, c: &Cell, part: &Part, tmp: &Path) -> Result<ProcOut> {
    let w = &s.workloads[c.w];
    match (w, &c.kind) {
        (Workload::Service(svc), Kind::Memlens(u)) => service::run_process(svc, s, u, part, tmp),
        (Workload::Service(_), Kind::Jemalloc) => unreachable!("a service cell runs the runtime"),
        _ => builtin::run_process(w, s, &c.kind, part, tmp),
    }
}

/// Run the whole paired study: every cell in `--processes` processes (all cells once, then all
/// again: the processes of a configuration are spread over the study's time); the profile
/// windows; then, while the time limit allows, further processes over just the configurations
/// whose 95% interval is still wider than its target ([`plan_extensions`]).
pub fn run(s: Settings) -> Result<Results> {
    let t0 = std::time::Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("memlens-study.")
        .tempdir()
        .map_err(|e| anyhow::anyhow!("cannot create a temporary directory: {e}"))?;
    let mut cells = cells_of(&s);
    let builtin_windows = s.window_ticks > 0
        && s.workloads
            .iter()
            .any(|w| matches!(w, Workload::Pipeline { .. }));
    let total = (cells.len() as u64) * s.processes as u64
        + if builtin_windows {
            s.unwinders.len() as u64
        } else {
            0
        };
    let progress = Progress::new(total, "study");
    let mut switch = SwitchFacts::default();
    let mut pool = Pool::new();
    let mut counters: Option<String> = None;
    let mut notes: Vec<String> = Vec::new();
    let mut truth = Vec::new();
    let mut quality_rows: Vec<(String, String, u64, quality::WindowQuality)> = Vec::new();
    let mut windows_of = |w: &Workload, u: &str, d: Vec<Vec<PathBuf>>| -> Result<()> {
        let mut d = d;
        let exact = d.remove(0);
        let (t, qs) = quality::window(u, exact, d)?;
        truth.push(Truth {
            workload: w.name(),
            summary: t,
        });
        for (i, q) in w.intervals(&s).into_iter().zip(qs) {
            quality_rows.push((w.name(), u.to_string(), s.intervals[i], q));
        }
        Ok(())
    };
    for wave in 0..s.processes {
        for c in cells.iter_mut() {
            let w = &s.workloads[c.w];
            let rounds = match w {
                Workload::Service(_) => s.service_rounds,
                _ => s.rounds,
            };
            let rounds = rounds.div_ceil(s.processes).max(1);
            progress.step(format!(
                "{} · {:?} · process {} of {} · {rounds} rounds",
                w.name(),
                c.kind,
                wave + 1,
                s.processes
            ));
            let part = Part {
                confs: c.confs.clone(),
                rounds,
                seed: s.seed.wrapping_add(wave as u64 * 7919),
                windows: wave == 0 && w.is_service() && s.window_ticks > 0,
            };
            let mut out = run_part(&s, c, &part, tmp.path())?;
            if let (Some(v), Workload::Synthetic { .. }) = (out.switch, w) {
                switch.threads = switch.threads.max(v[0]);
                switch.pending_max = switch.pending_max.max(v[1]);
                switch.max_ns = switch.max_ns.max(v[2]);
            }
            if counters.is_none() && matches!(c.kind, Kind::Memlens(_)) {
                counters = out.counters.take();
            }
            for n in out.notes.drain(..) {
                if !notes.contains(&n) {
                    notes.push(n);
                }
            }
            if let (Some(d), Kind::Memlens(u)) = (out.windows.take(), &c.kind) {
                windows_of(w, u, d)?;
            }
            if wave == 0 {
                c.confs = out.confs.clone();
                c.overhead_s = out.overhead_s;
                if out.block_s > 0.0 {
                    c.block_s = out.block_s;
                }
            }
            add(&mut pool, c, out);
            progress.inc();
        }
        // Quality on the realistic workload whose working set is in the LLC (or the first
        // pipeline), between the waves.
        if wave == 0 && builtin_windows {
            let qw = s
                .workloads
                .iter()
                .find(|w| w.name() == "pipeline-llc")
                .or_else(|| {
                    s.workloads
                        .iter()
                        .find(|w| matches!(w, Workload::Pipeline { .. }))
                });
            if let Some(qw) = qw {
                for u in &s.unwinders {
                    progress.step(format!("{} · profile windows · {u}", qw.name()));
                    let d = builtin::windows(qw, &s, u, tmp.path())?;
                    windows_of(qw, u, d)?;
                    progress.inc();
                }
            }
        }
    }
    progress.finish();
    let first_seconds = t0.elapsed().as_secs_f64();
    // Narrow what is still too wide, while the time limit allows (2 s kept for the report).
    let mut extra = 0u32;
    // Blocks last longer than planned by the switch itself (jemalloc's prof.reset) and the
    // scheduler's wake-up: `slow` (actual / planned wall time of the processes run so far, at
    // least 1.1) scales the plan so the limit holds.
    let mut slow = 1.1f64;
    for pass in 1..=12u64 {
        let left = (s.max_seconds - t0.elapsed().as_secs_f64() - 2.0) / slow;
        let needs: Vec<Need> = cells
            .iter()
            .map(|c| (c.missing(&pool), c.overhead_s, c.block_s))
            .collect();
        let plan = plan_extensions(&needs, left);
        if plan.is_empty() {
            break;
        }
        let progress = Progress::new(plan.len() as u64, "study: narrowing");
        for e in plan {
            let c = &mut cells[e.cell];
            let w = &s.workloads[c.w];
            progress.step(format!(
                "{} · {:?} · {} more rounds of {} configuration(s)",
                w.name(),
                c.kind,
                e.rounds,
                e.confs.len()
            ));
            let part = Part {
                confs: e.confs.iter().map(|&j| c.confs[j].clone()).collect(),
                rounds: e.rounds,
                seed: s.seed.wrapping_add(pass * 1000 + e.cell as u64),
                windows: false,
            };
            let t = std::time::Instant::now();
            let out = run_part(&s, c, &part, tmp.path())?;
            slow = slow.max(t.elapsed().as_secs_f64() / e.seconds.max(1e-3));
            add(&mut pool, c, out);
            extra += 1;
            if t0.elapsed().as_secs_f64() > s.max_seconds - 2.0 {
                break;
            }
            progress.inc();
        }
        progress.finish();
    }
    let mut rows = rows_of(&s, &pool, &cells);
    let mut counts_off = Vec::new();
    for c in &cells {
        let w = &s.workloads[c.w];
        if matches!(c.kind, Kind::Memlens(_))
            && !w.is_service()
            && !counts_off.iter().any(|(n, _)| *n == w.name())
        {
            if let Some(Some(off)) = stats::count_split(&c.blocks, c.confs.len()).first() {
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
    let aa = super::verdict::aa(&rows);
    Ok(Results {
        settings: s,
        aa,
        rows,
        truth,
        switch,
        counters,
        counter_events,
        counts_off,
        extra_processes: extra,
        first_seconds,
        notes,
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

    /// The paired rows' JSON: the contract's fields and this engine's columns (docs/study.md's
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
                processes: 2,
                ci_target_pct: 4.0,
                ci_met: true,
                resolved: Some(true),
                counts_per_tick: None,
                p99_overhead_pct: Some(e),
                direct_ci: Some(e),
                indirect_ci: None,
                own_cost_pct: Some(e),
                sampled_ticks_pct: Some(0.1),
                per_round: vec![vec![1.0, 2.0]],
            },
        };
        let v = serde_json::to_value(&row).unwrap();
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        let own = [
            "profiler",
            "rounds",
            "processes",
            "ci_target_pct",
            "ci_met",
            "resolved",
            "counts_per_tick",
            "p99_overhead_pct",
            "direct_ci",
            "indirect_ci",
            "own_cost_pct",
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
        // cell 0: met; cell 1: one configuration needs 100 rounds (3 blocks each); cell 2: two
        // need 50 and 400 rounds — each gets a process of its own (3 blocks a round); 10 ms
        // blocks, 0.5 s start-up each.
        let needs = vec![
            (vec![], 0.5, 0.01),
            (vec![(0, 100)], 0.5, 0.01),
            (vec![(0, 50), (3, 400)], 0.5, 0.01),
        ];
        let all = plan_extensions(&needs, 100.0);
        let got: Vec<(usize, Vec<usize>, u32)> = all
            .iter()
            .map(|e| (e.cell, e.confs.clone(), e.rounds))
            .collect();
        // cheapest first: cell 2's short process, cell 1, cell 2's long one
        assert_eq!(
            got,
            [(2, vec![0], 50), (1, vec![0], 100), (2, vec![3], 400)]
        );
        assert!((all[1].seconds - (0.5 + (300.0 + 2.0) * 0.01)).abs() < 1e-9);
        // 10 s: the first two fit whole (2.02 + 3.52 s); the last gets what is left, whole rounds
        let some = plan_extensions(&needs, 10.0);
        assert_eq!(some.len(), 3);
        assert_eq!(
            some[2].rounds,
            ((10.0 - 2.02 - 3.52 - 0.5 - 0.02) / 0.03f64).floor() as u32
        );
        assert!(some.iter().map(|e| e.seconds).sum::<f64>() <= 10.0 + 1e-9);
        // no time: nothing; fewer than 8 rounds fit: nothing
        assert!(plan_extensions(&needs, 0.0).is_empty());
        assert!(plan_extensions(&needs, 0.6).is_empty());
        // configurations that need about as many rounds share one process
        let both = plan_extensions(&[(vec![(1, 300), (2, 120)], 0.5, 0.01)], 100.0);
        assert_eq!((both[0].confs.clone(), both[0].rounds), (vec![1, 2], 300));
        // a service's blocks are runs of its load: 20 rounds of 3 blocks of 0.2 s
        let svc = plan_extensions(&[(vec![(0, 20)], 1.0, 0.2)], 100.0);
        assert!((svc[0].seconds - (1.0 + 62.0 * 0.2)).abs() < 1e-9);
    }

    /// A row is resolved only when its whole interval lies beyond the placebo's band.
    #[test]
    fn the_placebo_calibrates_every_row_of_its_workload() {
        let row = |config: &str, profiler: &str, lo: f64, hi: f64| Row {
            workload: "w".into(),
            config: config.into(),
            interval_bytes: None,
            unwinder: None,
            paired: true,
            overhead_pct: Some((lo + hi) / 2.0),
            ci_low_pct: Some(lo),
            ci_high_pct: Some(hi),
            direct_cost_pct: None,
            indirect_cost_pct: None,
            coverage_pct: None,
            total_error_pct: None,
            top_error_pct: None,
            samples: None,
            truncated_pct: None,
            engine: Columns {
                profiler: profiler.into(),
                rounds: 10,
                processes: 2,
                ci_target_pct: 2.0,
                ci_met: true,
                resolved: None,
                counts_per_tick: None,
                p99_overhead_pct: None,
                direct_ci: None,
                indirect_ci: None,
                own_cost_pct: None,
                sampled_ticks_pct: None,
                per_round: vec![],
            },
        };
        let mut rows = vec![
            row("placebo", "placebo", -1.0, 1.5),
            row("placebo 2", "placebo", -0.5, 1.2),
            row("memlens fp 64K", "memlens", 1.2, 4.0),
            row("memlens fp 128K", "memlens", 1.6, 4.0),
            row("jemalloc prof 64K", "jemalloc", -9.0, -2.0),
        ];
        calibrate(&mut rows);
        let got: Vec<Option<bool>> = rows.iter().map(|r| r.engine.resolved).collect();
        // the band is 1.5: 1.2 is inside it (excluding 0 is not enough), 1.6 is beyond
        assert_eq!(
            got,
            [None, Some(false), Some(false), Some(true), Some(true)]
        );
        assert_eq!(placebo_band(&rows, "w"), Some(1.5));
        assert_eq!(placebo_band(&rows, "other"), None);
    }
}
