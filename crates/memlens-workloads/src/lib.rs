//! Built-in workloads (work in progress).
/// Run a built-in workload (used by memlens study)
#[derive(Debug, clap::Args)]
pub struct WorkloadArgs {}

pub fn run_workload(_args: WorkloadArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
