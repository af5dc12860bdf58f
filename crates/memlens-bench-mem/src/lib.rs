//! `memlens bench latency` and `memlens bench bandwidth`: how access order, working-set size and
//! indirection shape the time of data processing, and which counter metrics predict it.
#![warn(missing_docs)]
mod bandwidth;
mod chase;
mod counters;
mod latency;
mod latency_model;
mod latency_report;
mod levels;
mod measure;
mod pmem;
mod region;
mod stream;

pub use bandwidth::{run_bandwidth, BandwidthArgs};
pub use latency::run_latency;
pub use latency_model::LatencyArgs;
