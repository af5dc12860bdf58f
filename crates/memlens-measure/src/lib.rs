//! What every memlens measurement shares (how results are shown is `memlens-render`).
//!
//! * [`units`]: sizes (`64K`, `512KiB`, `1GiB`), lists and ranges (`1..8`), durations.
//! * [`error`]: usage errors (exit 2) vs failures (exit 1).
//! * [`tsc`]: calibrated, invariant-checked TSC clock.
//! * [`stats`]: median, spread, percentiles, ties, Pearson r.
//! * [`counters`]: perf counters (hardware where the CPU counts, software everywhere), `n/a (reason)`
//!   otherwise; read around a region or, allocation-free, around each tick.
//! * [`sysinfo`]: the machine facts every result file carries.
//! * [`busy`]: whether other programs kept the machine busy, and the warning every measuring
//!   command prints when they did.
//! * [`rng`]: the seeded pseudo-random generator benchmarks and workloads share.
#![warn(missing_docs)]
pub mod busy;
pub mod counters;
pub mod error;
pub mod rng;
pub mod stats;
pub mod sysinfo;
pub mod tsc;
pub mod units;

pub use error::usage;
