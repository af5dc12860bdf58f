//! memlens run / memlens ctl: start programs under the runtime and control running ones.
//!
//! * `run.rs`: `memlens run`: launch under the runtime, wait, turn its raw dumps into profiles.
//! * `ctl.rs`: `memlens ctl` (its client is `memlens_target::Target`).
//! * `live.rs`: the options of profiling on demand (`--inactive`, `--start-on-growth`,
//!   `--profile-for`, `--dump-every`) and their plan.
//! * `watcher.rs`: the thread that carries that plan out while the program runs.
#![warn(missing_docs)]
mod ctl;
mod live;
mod run;
mod watcher;

pub use ctl::{run_ctl, CtlArgs};
pub use live::LiveArgs;
pub use run::{run_run, RunArgs};
