//! What a latency run is asked and what it measured: the arguments, the validated configuration,
//! the points and the results. Both the sweep (latency.rs) and its report (latency_report.rs) stand
//! on these types, so neither needs the other's.
use crate::chase::Order;
use memlens_measure::stats::Summary;
use serde::Serialize;
use std::path::PathBuf;

/// Memory access latency by order, element size and working set
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  memlens bench latency --max-ws 256M --json lat.json --svg lat.svg --html lat.html\n  \
memlens bench latency --orders random --sizes 64 --threads 2 --hugepages"
)]
pub struct LatencyArgs {
    /// Element sizes in bytes: multiples of 8 from 8 to 4096 (only the first 8 bytes are read)
    #[arg(long, default_value = "8,64,256", value_name = "LIST")]
    pub(crate) sizes: String,
    /// Access orders: seq (address order), random (one random cycle), page (one element per page)
    #[arg(long, default_value = "seq,random,page", value_name = "LIST")]
    pub(crate) orders: String,
    /// Smallest working set (swept over powers of two)
    #[arg(long, default_value = "1K", value_name = "SIZE")]
    pub(crate) min_ws: String,
    /// Largest working set
    #[arg(long, default_value = "1G", value_name = "SIZE")]
    pub(crate) max_ws: String,
    /// Chaser threads, each on its own list (loaded latency); counters follow chaser 0
    #[arg(long, default_value_t = 1, value_name = "N")]
    pub(crate) threads: usize,
    /// Back the lists with transparent huge pages (madvise MADV_HUGEPAGE) to show the TLB's share
    #[arg(long)]
    pub(crate) hugepages: bool,
    /// Repeats per point, interleaved across orders
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub(crate) repeats: usize,
    /// Target time of one timed chase
    #[arg(long, default_value = "20ms", value_name = "DURATION")]
    pub(crate) min_time: String,
    /// Counters: all (hardware where usable, plus software), software, off
    #[arg(long, default_value = "all", value_name = "MODE")]
    pub(crate) counters: String,
    /// Open this event with an invalid number so the kernel refuses it (tests of the n/a path)
    #[arg(long, hide = true, value_name = "EVENT")]
    pub(crate) test_break_event: Vec<String>,
    #[command(flatten)]
    /// Result files (JSON, CSV, HTML).
    pub(crate) out: memlens_render::output::OutputArgs,
    /// Write the latency-vs-working-set plot as SVG
    #[arg(long, value_name = "FILE")]
    pub(crate) svg: Option<PathBuf>,
}

/// Validated configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    pub sizes: Vec<u64>,
    pub orders: Vec<Order>,
    pub working_sets: Vec<u64>,
    pub threads: usize,
    pub hugepages: bool,
    pub repeats: usize,
    pub target_seconds: f64,
}

/// One counter over a point: median over repeats of the count per element.
#[derive(Debug, Clone, Serialize)]
pub struct CounterStat {
    pub name: String,
    pub per_element: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running_fraction: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Point {
    pub order: Order,
    pub element_bytes: u64,
    pub working_set: u64,
    pub elements: u64,
    pub loads_per_measurement: u64,
    /// Nanoseconds per element (per dependent load), over repeats.
    pub ns: Summary,
    /// TSC cycles per element.
    pub tsc_cycles: Summary,
    pub counters: Vec<CounterStat>,
}

impl Point {
    pub fn counter(&self, name: &str) -> std::result::Result<f64, String> {
        match self.counters.iter().find(|c| c.name == name) {
            Some(CounterStat {
                per_element: Some(v),
                ..
            }) => Ok(*v),
            Some(c) => Err(format!(
                "{}: {}",
                name,
                c.unavailable
                    .clone()
                    .unwrap_or_else(|| "not measured".into())
            )),
            None => Err(format!("{name}: not collected")),
        }
    }
}

/// Everything a latency run produced.
#[derive(Debug, Serialize)]
pub struct Results {
    pub config: Config,
    pub timer_overhead_ticks: f64,
    /// What the counter validation probe saw, per hardware event.
    pub counter_probe: Vec<(String, String)>,
    /// Why some (order, working set) points were not measured, once per reason (e.g. page order
    /// below two pages).
    pub skipped: Vec<String>,
    pub points: Vec<Point>,
    /// At the largest working set: bytes of list memory mapped, and how much of the process's
    /// anonymous memory the kernel backed with huge pages (AnonHugePages) — what `--hugepages` got.
    pub huge_pages_check: Option<(u64, u64)>,
}
