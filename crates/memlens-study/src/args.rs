//! The command line of `memlens study`: every flag, its default, and where it applies
//! (settings.rs reads and checks them).
use memlens_render::output::OutputArgs;

const EXAMPLE: &str = "Examples:
  memlens study                                  synthetic loop, redis, pipeline (< 5 min)
  memlens study --quick                          a small study (seconds)
  memlens study --workload pipeline --working-sets llc --unwinders fp --intervals 64K,512K,2M
  memlens study --load 'redis-benchmark -p 6400 -n 20000 -q' -- redis-server --port 6400
                                                 your server, started inactive, paired under its load
  memlens study --pid 1234 --load './loadtest' --metric 'p99=([0-9.]+)'
                                                 a running process (attached if it has no runtime)
  memlens study --workload synthetic --baselines tcmalloc,heaptrack
                                                 tcmalloc and heaptrack as whole processes
  memlens study --metric 'p99=([0-9.]+)' -- ./loadtest      any program, run to completion

Every configuration takes turns with off (off, c1, off, c2, ..., off): in blocks inside one
process where the profiler switches at run time, else as whole processes. Every process also runs
placebo blocks (switched to, or run, as off is): a difference is resolved only when its whole 95%
interval lies beyond the placebo's. Method: docs/study.md.";

/// How configurations take turns (`--schedule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScheduleArg {
    /// In blocks inside one process where the profiler switches at run time (memlens, jemalloc's
    /// profiler), else as whole processes (tcmalloc, heaptrack, a command)
    Auto,
    /// Only in blocks: refuse what cannot be switched inside a process
    Blocks,
    /// Every configuration as whole processes (also memlens, with the runtime loaded inactive
    /// against none, and jemalloc's profiler)
    Processes,
}

/// What heap profiling costs, by interval and unwinder
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLE)]
pub struct StudyArgs {
    /// Built-in workloads to study: synthetic, redis, pipeline (a list) or all [default: all;
    /// --quick: synthetic,pipeline]
    #[arg(long, value_name = "LIST")]
    pub(crate) workload: Option<String>,
    /// Study a program under its own load, paired in time inside its process: CMD (run by `sh -c`)
    /// is one block's load; the program is `-- SERVER ARGS` (started with the runtime inactive) or
    /// --pid
    #[arg(long, value_name = "CMD")]
    pub(crate) load: Option<String>,
    /// With --load: a running process to study (through its control socket; attached, and
    /// detached at the end, when it has no runtime)
    #[arg(long, value_name = "PID")]
    pub(crate) pid: Option<String>,
    /// How configurations take turns with off
    #[arg(long, value_enum, default_value = "auto")]
    pub(crate) schedule: ScheduleArg,
    /// The former name of --schedule processes
    #[arg(long, hide = true)]
    pub(crate) unpaired: bool,
    /// Sampling intervals (mean bytes between samples) [default: 64K,128K,256K,512K,1M,2M,4M;
    /// --quick: 64K,2M; a service or a command: 64K,512K,2M]
    #[arg(long, value_name = "LIST")]
    pub(crate) intervals: Option<String>,
    /// Unwinders to measure: dwarf, fp, libgcc, libunwind [default: dwarf,fp; --quick: fp; a
    /// service or a command: dwarf]; `none` = no memlens configuration
    #[arg(long, value_name = "LIST")]
    pub(crate) unwinders: Option<String>,
    /// Other profilers: jemalloc (its profiler), tcmalloc (its sampler) and heaptrack (whole
    /// processes), or none
    #[arg(long, default_value = "jemalloc", value_name = "LIST")]
    pub(crate) baselines: String,
    /// A small study for tests and a first look: 4 rounds, intervals 64K and 2M, the fp unwinder,
    /// one working set
    #[arg(long)]
    pub(crate) quick: bool,
    /// Rounds of every configuration in the first processes, all together (each round: every
    /// configuration once between off blocks) [default: 40, a service 16, whole processes 5;
    /// --quick: 4, whole processes 3]
    #[arg(long, value_name = "N")]
    pub(crate) rounds: Option<u32>,
    /// Processes every configuration switched in blocks is measured in, at least (the intervals
    /// cover what differs between them) [default: 3; a --pid study has one]
    #[arg(long, value_name = "N")]
    pub(crate) processes: Option<u32>,
    /// Placebo configurations per process (switched to, or run, as off is); the first calibrates
    /// what counts as resolved, more measure how often an A/A difference is called resolved
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) placebos: u32,
    /// Built-in workloads in blocks: block length in milliseconds [default: 10]
    #[arg(long, value_name = "MS")]
    pub(crate) block_ms: Option<u64>,
    /// Built-in workloads as whole processes: operations per thread of a run (malloc/free pairs
    /// of the synthetic loop, ticks of the pipeline) [default: 100000]
    #[arg(long, value_name = "N")]
    pub(crate) ops: Option<u64>,
    /// Time limit of the whole study in seconds; after the first rounds, further rounds of the
    /// configurations whose 95% CI is still wider than its target (--ci-target) run while they
    /// fit; 0 = the first rounds only [default: 270; --quick: 0]
    #[arg(long, value_name = "S")]
    pub(crate) max_time: Option<f64>,
    /// Half width of the 95% CI to aim for, points: synthetic loop, pipeline, service or command
    /// (the last defaults to the pipeline's)
    #[arg(long, default_value = "2,4,4", value_name = "SYN,PIPE[,SVC]")]
    pub(crate) ci_target: String,
    /// Pipeline: working sets of the books, from l2 (4 x L2 per thread), llc (half the last-level
    /// cache), dram (4 x LLC), or sizes [default: l2,llc,dram; --quick: l2]
    #[arg(long, value_name = "LIST")]
    pub(crate) working_sets: Option<String>,
    /// Built-in workloads: operations per thread of each profile window (quality); 0 = no
    /// quality [default: 20000]
    #[arg(long, value_name = "N")]
    pub(crate) window_ticks: Option<u64>,
    /// Service: runs of the load in each profile window [default: 4]
    #[arg(long, value_name = "N")]
    pub(crate) window_loads: Option<u32>,
    /// Skip the profile windows (no coverage, no recommendation)
    #[arg(long)]
    pub(crate) no_exact: bool,
    /// Overhead budget of the recommendation: the upper end of the interval's 95% CI, percent
    #[arg(long, default_value_t = 5.0, value_name = "PCT")]
    pub(crate) budget: f64,
    /// Coverage a recommended interval must reach, in percent
    #[arg(long, default_value_t = 90.0, value_name = "PCT")]
    pub(crate) min_coverage: f64,
    /// Synthetic: thread counts, one workload per count (e.g. 1,2) [default: 2]
    #[arg(long, value_name = "LIST")]
    pub(crate) threads: Option<String>,
    /// Synthetic: block size [default: 512]
    #[arg(long, value_name = "SIZE")]
    pub(crate) size: Option<String>,
    /// Synthetic: call-stack depth of the loop [default: 10]
    #[arg(long, value_name = "N")]
    pub(crate) depth: Option<u32>,
    /// Seed of the pipeline's quotes and of the block order
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// The metric of a service or a command: cpu (its CPU time per run; a service's default),
    /// wall (the run's wall time; a command's default), or a REGEX whose first capture group is
    /// read from the output of the load or the command
    #[arg(long, value_name = "cpu|wall|REGEX")]
    pub(crate) metric: Option<String>,
    /// The --metric figure is a rate (higher is better, e.g. requests per second): its inverse is
    /// the cost
    #[arg(long)]
    pub(crate) metric_rate: bool,
    /// Result files (--json, --csv, --html).
    #[command(flatten)]
    pub(crate) out: OutputArgs,
    /// Flags of the former second engine (refused with what replaced each).
    #[command(flatten)]
    pub(crate) former: Former,
    /// With --load: the server to start and study; else a program to study as whole processes
    #[arg(last = true, value_name = "CMD")]
    pub(crate) cmd: Vec<String>,
}

/// The flags only the former `--unpaired` engine read (docs/study.md, Options): hidden, and a
/// usage error that says what replaced each, so an old command line fails plainly.
#[derive(Debug, clap::Args)]
pub struct Former {
    #[arg(long, hide = true)]
    repeats: Option<String>,
    #[arg(long, hide = true)]
    exact_repeats: Option<String>,
    #[arg(long, hide = true)]
    quotes: Option<String>,
    #[arg(long, hide = true)]
    instruments: Option<String>,
    #[arg(long, hide = true)]
    max_overhead: Option<String>,
    #[arg(long, hide = true)]
    plots: Option<String>,
}

impl Former {
    /// The first of them given, and what replaced it.
    pub(crate) fn given(&self) -> Option<(&'static str, &'static str)> {
        [
            (
                &self.repeats,
                "--repeats",
                "it is --rounds (of whole processes too)",
            ),
            (
                &self.exact_repeats,
                "--exact-repeats",
                "one exact profile window per unwinder is the truth",
            ),
            (
                &self.quotes,
                "--quotes",
                "the pipeline is the run-to-completion one: --working-sets, --ops",
            ),
            (
                &self.instruments,
                "--instruments",
                "the pipeline is the run-to-completion one: --working-sets",
            ),
            (
                &self.max_overhead,
                "--max-overhead",
                "one recommendation rule: --budget",
            ),
            (&self.plots, "--plots", "the chart is on the --html page"),
        ]
        .into_iter()
        .find_map(|(v, flag, why)| v.as_ref().map(|_| (flag, why)))
    }
}
