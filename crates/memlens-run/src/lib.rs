//! memlens run / memlens ctl: start programs under the runtime and control running ones.
pub mod ctl;
pub mod growth;
pub mod run;

pub use ctl::{run_ctl, CtlArgs};
pub use growth::{LiveArgs, LivePlan, Watcher};
pub use run::{run_run, RunArgs};
