//! memlens run / memlens ctl: start programs under the runtime and control running ones.
pub mod run;

pub use run::{run_run, RunArgs};

/// Control a process running under the runtime
#[derive(Debug, clap::Args)]
pub struct CtlArgs {}

pub fn run_ctl(_args: CtlArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
