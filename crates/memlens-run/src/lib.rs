//! memlens run / memlens ctl (work in progress).
/// Run a command under the heap profiler
#[derive(Debug, clap::Args)]
pub struct RunArgs {}

pub fn run_run(_args: RunArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
/// Control a process running under the runtime
#[derive(Debug, clap::Args)]
pub struct CtlArgs {}

pub fn run_ctl(_args: CtlArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
