//! The command line of `memlens check`, and the limits it asks for.
use crate::limits::{Kind, Limit};
use anyhow::Result;
use memlens_measure::error::usage;
use std::ffi::OsString;
use std::path::PathBuf;

const HELP: &str = "\
Exit status: 0 every limit held; 3 a limit is broken (or, with --strict, inconclusive);
1 the program failed (non-zero exit, a signal) or could not be checked; 2 usage.

Verdicts are sampling-aware: a limit is broken only when the whole 95% interval of the
estimate is beyond it, held when the whole interval is within it, and inconclusive between,
with the --interval that would settle it. Without --interval the check samples at the
largest power of two that settles a figure 5% from the tightest limit (1K..512K): test
runs are short, so a finer interval than memlens run's 512K costs them little, while at
512K a 10 MB heap is only known within ±44% at 95%. The interval used is printed with
the verdict (docs/check.md: the statistics, the costs, recipes for CI).

Examples:
  memlens check --max-peak 200M --max-leak 1M -- ./build/parser_test
  memlens check --max-leak-per-stack 64K --suppressions known.supp -- python3 -m pytest tests/
  memlens run --interval 16K -o base.pb.gz -- ./bench          (a baseline, on main)
  memlens check --baseline base.pb.gz --interval 16K --max-peak-growth 10% -- ./bench
  memlens check --max-allocated 1G --exact --junit heap.xml -- ./build/tests";

/// Run a program under the heap profiler and judge its heap against limits (exit 3 if broken)
#[derive(Debug, clap::Args)]
#[command(after_help = HELP)]
pub struct CheckArgs {
    /// Most bytes live at once (the heap's high-water mark), per process
    #[arg(long, value_name = "SIZE")]
    pub(crate) max_peak: Option<String>,
    /// Most bytes still live when a process ends
    #[arg(long, value_name = "SIZE")]
    pub(crate) max_leak: Option<String>,
    /// Most bytes a single stack leaves live when a process ends
    #[arg(long, value_name = "SIZE")]
    pub(crate) max_leak_per_stack: Option<String>,
    /// Most bytes allocated over the whole run (freed or not), per process
    #[arg(long, value_name = "SIZE")]
    pub(crate) max_allocated: Option<String>,
    /// A profile to compare with (memlens run -o FILE of the same program, e.g. on main)
    #[arg(long, value_name = "PROFILE")]
    pub(crate) baseline: Option<PathBuf>,
    /// Most growth of the peak over the baseline's, in percent
    #[arg(long, value_name = "PCT", requires = "baseline")]
    pub(crate) max_peak_growth: Option<String>,
    /// Most growth of the leak over the baseline's, in percent
    #[arg(long, value_name = "PCT", requires = "baseline")]
    pub(crate) max_leak_growth: Option<String>,
    /// Most growth of the bytes allocated over the baseline's, in percent
    #[arg(long, value_name = "PCT", requires = "baseline")]
    pub(crate) max_allocated_growth: Option<String>,
    /// Most bytes any stack may leak beyond what it leaked in the baseline (a percentage of one
    /// stack is rarely resolvable by sampling: a size is)
    #[arg(long, value_name = "SIZE", requires = "baseline")]
    pub(crate) max_leak_growth_per_stack: Option<String>,
    /// Leave out stacks with a frame (function, source file or module) matching REGEX; repeatable
    #[arg(long, value_name = "REGEX")]
    pub(crate) allow: Vec<String>,
    /// A file of such expressions, one a line (`leak:`/`peak:`/`allocated:` before one applies it
    /// to that figure only; `#` comments); repeatable
    #[arg(long, value_name = "FILE")]
    pub(crate) suppressions: Vec<PathBuf>,
    /// Mean sampling interval (64K, 8K, 1 …) [default: chosen from the limits, see below]
    #[arg(long, value_name = "SIZE")]
    pub(crate) interval: Option<String>,
    /// Record every allocation (every figure exact, at the cost of unwinding each allocation and
    /// 176 bytes of header per live block)
    #[arg(long, conflicts_with = "interval")]
    pub(crate) exact: bool,
    /// Stack unwinder: dwarf, fp, libgcc, libunwind [default: dwarf]
    #[arg(long, value_name = "NAME", value_parser = ["dwarf", "fp", "libgcc", "libunwind"])]
    pub(crate) unwinder: Option<String>,
    /// An inconclusive verdict fails the check too (exit 3)
    #[arg(long)]
    pub(crate) strict: bool,
    /// Keep the profile here whatever the verdict [default: memlens.check.CMD.PID.pb.gz, kept
    /// only when the check does not pass]
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// Also write the outcome as JSON to FILE
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<PathBuf>,
    /// Also write the outcome as JUnit XML to FILE (one test case per limit and process)
    #[arg(long, value_name = "FILE")]
    pub(crate) junit: Option<PathBuf>,
    /// Stacks listed for each limit not held
    #[arg(long, value_name = "N", default_value_t = 5,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1000))]
    pub(crate) top: usize,
    /// The program to run and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

impl CheckArgs {
    /// The limits asked for, checked: at least one, and a baseline only with a limit against it.
    pub(crate) fn limits(&self) -> Result<Vec<Limit>> {
        let mut v = Vec::new();
        let size = [
            (Kind::Peak, false, "--max-peak", &self.max_peak),
            (Kind::Leak, false, "--max-leak", &self.max_leak),
            (
                Kind::Leak,
                true,
                "--max-leak-per-stack",
                &self.max_leak_per_stack,
            ),
            (
                Kind::Allocated,
                false,
                "--max-allocated",
                &self.max_allocated,
            ),
        ];
        for (kind, per_stack, flag, val) in size {
            if let Some(s) = val {
                v.push(Limit::size(kind, per_stack, flag, s)?);
            }
        }
        let growth = [
            (Kind::Peak, "--max-peak-growth", &self.max_peak_growth),
            (Kind::Leak, "--max-leak-growth", &self.max_leak_growth),
            (
                Kind::Allocated,
                "--max-allocated-growth",
                &self.max_allocated_growth,
            ),
        ];
        for (kind, flag, val) in growth {
            if let Some(s) = val {
                v.push(Limit::growth(kind, flag, s)?);
            }
        }
        if let Some(s) = &self.max_leak_growth_per_stack {
            v.push(Limit::growth_bytes(
                Kind::Leak,
                "--max-leak-growth-per-stack",
                s,
            )?);
        }
        if v.is_empty() {
            return Err(usage(
                "no limit given (--max-peak, --max-leak, --max-leak-per-stack, --max-allocated, or \
                 --baseline with --max-peak-growth …); to only profile, use memlens run",
            ));
        }
        if self.baseline.is_some() && !v.iter().any(Limit::needs_baseline) {
            return Err(usage(
                "--baseline needs a limit against it (--max-peak-growth, --max-leak-growth, \
                 --max-allocated-growth, --max-leak-growth-per-stack)",
            ));
        }
        Ok(v)
    }

    /// The interval asked for: Some(0) for --exact, None when it is to be chosen.
    pub(crate) fn interval(&self) -> Result<Option<u64>> {
        if self.exact {
            return Ok(Some(0));
        }
        self.interval
            .as_deref()
            .map(|s| memlens_target::parse_interval(s, "--interval"))
            .transpose()
    }
}
