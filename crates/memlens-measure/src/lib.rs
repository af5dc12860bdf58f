//! Shared measurement toolkit for every memlens command.
//!
//! * [`units`]: sizes (`64K`, `512KiB`, `1GiB`), lists and ranges (`1..8`), durations.
//! * [`error`]: usage errors (exit 2) vs failures (exit 1).
//! * [`tsc`]: calibrated, invariant-checked TSC clock.
//! * [`stats`]: median, spread, percentiles, ties, Pearson r.
//! * [`counters`]: perf counters (hardware where the CPU counts, software everywhere), `n/a (reason)`
//!   otherwise; read around a region or, allocation-free, around each tick.
//! * [`sysinfo`]: the machine facts every result file carries.
//! * [`doc`]: the document every measuring command reports (verdict, notes, tables, plots), rendered
//!   for the terminal (fitted to its width) and as HTML; the missing-value marks.
//! * [`names`]: function names shortened for display, as pprof does.
//! * [`output`]: tables, JSON and CSV writers.
//! * [`plot`] and [`html`]: SVG charts and self-contained HTML reports.
//! * [`rng`]: the seeded pseudo-random generator benchmarks and workloads share.
//! * [`progress`]: progress bars on stderr (hidden when stderr is not a terminal).
#![warn(missing_docs)]
pub mod counters;
pub mod doc;
pub mod error;
pub mod html;
pub mod names;
pub mod output;
pub mod plot;
pub mod progress;
pub mod rng;
pub mod stats;
pub mod sysinfo;
pub mod tsc;
pub mod units;

pub use error::{usage, UsageError};
