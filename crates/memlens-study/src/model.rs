//! What a study is made of, shared by the engine, its runners and the report: the settings and
//! workloads, how a cell's configurations are run (its [`Kind`], in blocks or in whole processes),
//! the configurations themselves ([`Key`]), what one process or one part of whole processes gave
//! ([`ProcOut`]), and the rows — the JSON contract of docs/study.md — with everything else the study
//! measured ([`Results`]). Types and their names in words only, so every other module stands on them.
use crate::estimate::Estimate;
use crate::quality::TruthSummary;
use crate::stats::CountSplit;
use memlens_measure::units::format_size;
use memlens_workloads::Block;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// How a service's or a command's runs are measured.
#[derive(Debug, Clone, Serialize)]
pub enum Metric {
    /// CPU time: a service's over the load's run (`/proc/PID/task/*/schedstat`), a command's own
    /// (its children's rusage).
    Cpu,
    /// Wall time of the run.
    Wall,
    /// The first capture group of `regex` in the output; `rate`: higher is better.
    Output {
        /// The regex (with one capture group).
        regex: String,
        /// Is the figure a rate (throughput), so that its inverse is the cost?
        rate: bool,
    },
}

impl Metric {
    /// What a run's value is, in words.
    pub fn describe(&self) -> String {
        match self {
            Metric::Cpu => "CPU time per run (the process's, schedstat or rusage)".into(),
            Metric::Wall => "wall time per run".into(),
            Metric::Output { regex, rate: true } => {
                format!("the figure '{regex}' of its output (a rate: its inverse)")
            }
            Metric::Output { regex, rate: false } => format!("the figure '{regex}' of its output"),
        }
    }
}

/// In a server's arguments and its load (the default study's redis): a TCP port free when that
/// server starts — picked anew for each, so another program cannot have taken it since the study
/// began.
pub const PORT: &str = "{PORT}";

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

/// A program that runs to completion, started once per run (whole processes only).
#[derive(Debug, Clone, Serialize)]
pub struct Command {
    /// Workload name (the program's).
    pub name: String,
    /// Program and arguments.
    pub argv: Vec<String>,
    /// How a run is measured.
    pub metric: Metric,
}

/// A workload of the study.
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
    /// A program that runs to completion (`-- CMD` without `--load`).
    Command(Command),
}

impl Workload {
    /// Short name used in tables and JSON.
    pub fn name(&self) -> String {
        match self {
            Workload::Synthetic { threads, .. } => format!("synthetic-{threads}t"),
            Workload::Pipeline { label, .. } => format!("pipeline-{label}"),
            Workload::Service(s) => s.name.clone(),
            Workload::Command(c) => c.name.clone(),
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
            Workload::Command(c) => format!(
                "`{}`, run to completion; metric = {}",
                shell_words(&c.argv),
                c.metric.describe()
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
pub fn shell_words(argv: &[String]) -> String {
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

/// Parameters of a study.
#[derive(Debug, Clone, Serialize)]
pub struct Settings {
    /// Workloads measured.
    pub workloads: Vec<Workload>,
    /// Sampling intervals.
    pub intervals: Vec<u64>,
    /// memlens unwinders.
    pub unwinders: Vec<String>,
    /// memlens and jemalloc's profiler in whole processes, not switched in blocks
    /// (`--schedule processes`; a command always).
    pub whole: bool,
    /// Is jemalloc's profiler measured (asked, and installed where we load it)?
    pub jemalloc: bool,
    /// Is tcmalloc's sampler measured (whole processes)?
    pub tcmalloc: bool,
    /// Is heaptrack measured (whole processes)?
    pub heaptrack: bool,
    /// Rounds of every configuration in the first processes of a built-in workload switched in
    /// blocks (all processes together).
    pub rounds: u32,
    /// Same for a service.
    pub service_rounds: u32,
    /// Same for whole processes (a round: every configuration once, each between runs of its
    /// reference).
    pub process_rounds: u32,
    /// Processes every configuration switched in blocks is measured in, at least (1 for `--pid`).
    pub processes: u32,
    /// Placebo configurations per process or part (the first calibrates; more measure A/A).
    pub placebos: u32,
    /// Time limit of the whole study, s: further rounds run only while they fit (0: none).
    pub max_seconds: f64,
    /// Half width of the 95% interval each configuration should reach, points: synthetic loop.
    pub target_synthetic: f64,
    /// Same, pipeline (mean latency).
    pub target_pipeline: f64,
    /// Same, a service or a command.
    pub target_service: f64,
    /// Block length, ms (built-in workloads in blocks; a service's block is one run of its load).
    pub block_ms: u64,
    /// Operations per thread of one whole-process run of a built-in workload: malloc/free pairs
    /// of the synthetic loop, ticks of the pipeline.
    pub ops: u64,
    /// Operations per thread of each profile window of a built-in workload (0: no quality).
    pub window_ticks: u64,
    /// Coverage a recommended interval must reach, percent.
    pub min_coverage: f64,
    /// Overhead budget of the recommendation, percent (upper end of the CI).
    pub budget: f64,
    /// Seed of the quotes and of the block order.
    pub seed: u64,
    /// What was left out before anything ran, and why.
    #[serde(skip)]
    pub notes: Vec<String>,
}

impl Settings {
    /// Half-width target of a workload, points.
    pub fn target(&self, w: &Workload) -> f64 {
        match w {
            Workload::Synthetic { .. } => self.target_synthetic,
            Workload::Pipeline { .. } => self.target_pipeline,
            Workload::Service(_) | Workload::Command(_) => self.target_service,
        }
    }

    /// Does this workload run memlens and jemalloc's profiler in whole processes?
    pub fn whole(&self, w: &Workload) -> bool {
        self.whole || matches!(w, Workload::Command(_))
    }
}

/// How a cell's configurations take turns: in blocks inside one process, or as whole processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Schedule {
    /// Switched in blocks inside one process (paired in time).
    Blocks,
    /// One whole process per block, interleaved with the reference's.
    Processes,
}

impl Schedule {
    /// How the schedule reads after a workload's name: nothing for blocks (the default).
    pub fn suffix(self) -> &'static str {
        match self {
            Schedule::Blocks => "",
            Schedule::Processes => ", whole processes",
        }
    }
}

/// The allocator of a whole-process cell: its runs without any profiler are the reference.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alloc {
    /// The C library's malloc (the reference of memlens and heaptrack).
    Glibc,
    /// jemalloc preloaded (the reference of its profiler).
    Jemalloc,
    /// gperftools' tcmalloc preloaded (the reference of its sampler).
    Tcmalloc,
}

/// What a cell's processes run.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// Blocks in a process with memlens loaded inactive, with this unwinder.
    Memlens(String),
    /// Blocks in a process with jemalloc's profiler loaded inactive.
    Jemalloc,
    /// Whole processes over this allocator, each against the allocator alone.
    Runs(Alloc),
}

impl Kind {
    /// How its configurations take turns.
    pub fn schedule(&self) -> Schedule {
        match self {
            Kind::Runs(_) => Schedule::Processes,
            _ => Schedule::Blocks,
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Kind::Memlens(u) => write!(f, "memlens {u} in blocks"),
            Kind::Jemalloc => write!(f, "jemalloc's profiler in blocks"),
            Kind::Runs(Alloc::Glibc) => write!(f, "whole processes"),
            Kind::Runs(Alloc::Jemalloc) => write!(f, "whole processes over jemalloc"),
            Kind::Runs(Alloc::Tcmalloc) => write!(f, "whole processes over tcmalloc"),
        }
    }
}

/// A configuration a cell switches to (besides its reference, off). The order is the rows' order:
/// the placebos first (the A/A reading the others are judged against).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    /// The k-th placebo: switched to (or run) as off is.
    Placebo(u32),
    /// memlens's runtime loaded, not sampling (whole processes: against no runtime).
    Inactive,
    /// memlens with this unwinder at the i-th interval.
    Memlens(String, usize),
    /// jemalloc's profiler at the i-th interval (rounded to a power of two).
    Jemalloc(usize),
    /// tcmalloc's sampler at the i-th interval.
    Tcmalloc(usize),
    /// heaptrack (every allocation traced).
    Heaptrack,
}

/// One process's share of the schedule (or one part of whole processes): its configurations, how
/// many rounds, the seed of its block order, and whether it also runs the profile windows (a
/// service's first process).
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

/// What one process (or one part of whole processes) gave.
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
    /// Mean block length, s (a service's: one run of its load; whole processes: one run).
    pub block_s: f64,
    /// The process, for the hierarchical bootstrap (whole processes: one group per cell).
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

/// One configuration's row, as `memlens study --json` writes it (`rows[]`): the contract's fields
/// first (docs/study.md), then the cost's interval, split and targets. A field that is not measured
/// or does not apply to the configuration is null.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Workload name (`synthetic-2t`, `pipeline-llc`, …).
    pub workload: String,
    /// Configuration name (`memlens fp 512K`, `jemalloc prof 512K`, `placebo`).
    pub config: String,
    /// Sampling interval, bytes (null when the configuration does not sample at an interval).
    pub interval_bytes: Option<u64>,
    /// memlens unwinder (null for the other profilers and the placebo).
    pub unwinder: Option<String>,
    /// Switched in blocks inside one process (true), or run as whole processes (false).
    pub paired: bool,
    /// Overhead against off, percent: the median over rounds of a block against the off blocks
    /// (or runs) beside it, − 1.
    pub overhead_pct: f64,
    /// 95% interval of that median, low end.
    pub ci_low_pct: f64,
    /// 95% interval of that median, high end.
    pub ci_high_pct: f64,
    /// Direct cost: the sampling ticks' excess (the pipeline) or the runtime's own account.
    pub direct_cost_pct: Option<f64>,
    /// Indirect cost: the ticks just after a sample (the pipeline) or the rest of the overhead.
    pub indirect_cost_pct: Option<f64>,
    /// Share of the exact window's allocated bytes whose stack the profile found, percent.
    pub coverage_pct: Option<f64>,
    /// Error of the estimated total allocated bytes, percent of the truth's.
    pub total_error_pct: Option<f64>,
    /// Largest absolute error among the truth's top stacks, percent.
    pub top_error_pct: Option<f64>,
    /// Samples in the profile window.
    pub samples: Option<u64>,
    /// Truncated stacks among the samples, percent.
    pub truncated_pct: Option<f64>,
    /// Profiler: memlens, jemalloc, tcmalloc, heaptrack or placebo.
    pub profiler: String,
    /// Rounds the estimate rests on.
    pub rounds: usize,
    /// Processes they come from: switched in blocks, the bootstrap resamples these, then their
    /// rounds; whole processes, one per round.
    pub processes: usize,
    /// Half width of the 95% interval the study aimed for, points.
    pub ci_target_pct: f64,
    /// Did the interval reach it (half width ≤ target)?
    pub ci_met: bool,
    /// Is the overhead resolved: does its whole interval lie beyond the placebo's reading of its
    /// schedule? Null for that placebo.
    pub resolved: Option<bool>,
    /// Cache and TLB misses (the per-tick events) per tick by class, where counted.
    pub counts_per_tick: Option<CountSplit>,
    /// Overhead of the p99 latency (pipeline).
    pub p99_overhead_pct: Option<Estimate>,
    /// 95% interval of the direct cost (`direct_cost_pct`), where the ticks are split.
    pub direct_ci: Option<Estimate>,
    /// 95% interval of the indirect cost (`indirect_cost_pct`), where the ticks are split.
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
    /// The overhead with its interval.
    pub fn overhead(&self) -> Estimate {
        Estimate {
            pct: self.overhead_pct,
            lo: self.ci_low_pct,
            hi: self.ci_high_pct,
            n: self.rounds,
        }
    }

    /// A placebo (the calibrating one or a further one)?
    pub fn is_placebo(&self) -> bool {
        self.profiler == "placebo"
    }

    /// The schedule it was measured in.
    pub fn schedule(&self) -> Schedule {
        if self.paired {
            Schedule::Blocks
        } else {
            Schedule::Processes
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

/// The exact truth of one workload's windows with one unwinder.
#[derive(Debug, Clone, Serialize)]
pub struct Truth {
    /// The workload whose window it is.
    pub workload: String,
    /// The truth.
    #[serde(flatten)]
    pub summary: TruthSummary,
}

/// A/A comparisons: with more than one placebo, each further placebo against off and against
/// each other, judged as every difference is (beyond the first placebo's band).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Aa {
    /// Comparisons made.
    pub comparisons: u32,
    /// Called resolved (false resolutions: nothing differs between placebos).
    pub resolved: u32,
    /// Whose 95% interval excludes 0 (what would be called resolved without the placebo's band).
    pub excludes_zero: u32,
}

/// A candidate interval for the recommendation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Candidate {
    /// Interval, bytes.
    pub interval: u64,
    /// Its overhead.
    pub overhead: Estimate,
    /// Its coverage, if measured.
    pub coverage: Option<f64>,
}

/// Why an interval was recommended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// Its overhead is within the budget even at the upper end of its 95% interval.
    WithinBudget,
    /// Not proven within the budget, but statistically indistinguishable from the cheapest interval
    /// and not over the budget at its point estimate.
    TiedWithCheapest,
    /// Even the cheapest interval is over the budget: the smallest interval tied with it.
    OverBudget,
}

/// A recommendation: the interval, why, and the cheapest interval it was compared with.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Recommendation {
    /// The recommended interval.
    pub pick: Candidate,
    /// Why.
    pub basis: Basis,
    /// The qualifying interval with the lowest upper CI end (the best guaranteed cost).
    pub cheapest: Candidate,
}

/// The recommendation for one unwinder on one workload (`recommendations[]` in the JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Advice {
    /// The workload whose profile quality was judged.
    pub workload: String,
    /// The memlens unwinder.
    pub unwinder: String,
    /// The interval and why, or none: no interval reached the coverage asked for.
    pub recommendation: Option<Recommendation>,
}

/// Everything a study measured: the JSON file's top level.
#[derive(Debug, Clone, Serialize)]
pub struct Results {
    /// Its parameters.
    pub settings: Settings,
    /// One row per configuration.
    pub rows: Vec<Row>,
    /// The recommended interval per judged workload and unwinder.
    pub recommendations: Vec<Advice>,
    /// The exact truth of each window.
    pub truth: Vec<Truth>,
    /// Switch facts (synthetic loop).
    pub switch: SwitchFacts,
    /// The per-tick events and the cost of reading them, or `n/a (reason)`.
    pub counters: String,
    /// The per-tick events, where counted.
    pub counter_events: Option<[String; 2]>,
    /// Counts per tick of the off blocks, by workload (where counted).
    pub counts_off: Vec<(String, CountSplit)>,
    /// Processes (or parts of whole processes) run beyond the first ones, to narrow intervals.
    pub extra_processes: u32,
    /// Wall time of the first processes and the profile windows, s (the rest of `seconds` went
    /// to the further processes and the report).
    pub first_seconds: f64,
    /// What was left out, and why.
    pub notes: Vec<String>,
    /// A/A comparisons between placebos and how many were called resolved (with `--placebos` > 1).
    pub aa: Option<Aa>,
    /// Wall time of the study, s.
    pub seconds: f64,
}

/// The contract's fields (docs/study.md's list), in the order it gives them.
#[cfg(test)]
pub(crate) const CONTRACT: [&str; 15] = [
    "workload",
    "config",
    "interval_bytes",
    "unwinder",
    "paired",
    "overhead_pct",
    "ci_low_pct",
    "ci_high_pct",
    "coverage_pct",
    "direct_cost_pct",
    "indirect_cost_pct",
    "total_error_pct",
    "top_error_pct",
    "samples",
    "truncated_pct",
];

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A row of `workload` with the overhead interval [lo, hi] and nothing else measured.
    pub(crate) fn row(workload: &str, config: &str, profiler: &str, lo: f64, hi: f64) -> Row {
        Row {
            workload: workload.into(),
            config: config.into(),
            interval_bytes: None,
            unwinder: None,
            paired: true,
            overhead_pct: (lo + hi) / 2.0,
            ci_low_pct: lo,
            ci_high_pct: hi,
            direct_cost_pct: None,
            indirect_cost_pct: None,
            coverage_pct: None,
            total_error_pct: None,
            top_error_pct: None,
            samples: None,
            truncated_pct: None,
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
        }
    }

    /// The rows' JSON: the contract's fields and the study's own columns, nothing else; it reads
    /// back as written, except the per-round values it leaves out.
    #[test]
    fn rows_keep_the_json_contract() {
        let e = Estimate {
            pct: 2.0,
            lo: 1.0,
            hi: 3.5,
            n: 10,
        };
        let mut r = row("pipeline-l2", "memlens fp 64K", "memlens", e.lo, e.hi);
        r.overhead_pct = e.pct;
        r.samples = Some(340);
        r.p99_overhead_pct = Some(e);
        r.per_round = vec![vec![1.0, 2.0]];
        let v = serde_json::to_value(&r).unwrap();
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
        let mut want: Vec<&str> = CONTRACT.iter().chain(&own).copied().collect();
        want.sort_unstable();
        assert_eq!(keys, want, "{v}");
        // samples is a count: an integer in the JSON
        assert_eq!(v["samples"], serde_json::Value::from(340u64));
        let back: Row = serde_json::from_value(v).unwrap();
        assert_eq!(back.overhead(), e);
        assert!(back.per_round.is_empty());
        assert_eq!(back.p99_overhead_pct, Some(e));
    }
}
