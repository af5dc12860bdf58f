//! memlens bench latency / bandwidth (work in progress).
/// Memory access latency by order, element size and working set
#[derive(Debug, clap::Args)]
pub struct LatencyArgs {}

pub fn run_latency(_args: LatencyArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
/// STREAM bandwidth and the indirection case
#[derive(Debug, clap::Args)]
pub struct BandwidthArgs {}

pub fn run_bandwidth(_args: BandwidthArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
