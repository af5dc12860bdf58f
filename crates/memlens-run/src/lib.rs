//! memlens run / memlens ctl (work in progress).
pub mod ctl;
pub mod growth;
pub use ctl::{run_ctl, CtlArgs};
pub use growth::{LiveArgs, LivePlan, Watcher};

/// Run a command under the heap profiler
#[derive(Debug, clap::Args)]
pub struct RunArgs {}

pub fn run_run(_args: RunArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
