//! memlens run / memlens ctl: start programs under the runtime and control running ones.
//!
//! * [`run`]: `memlens run`: launch under the runtime, wait, turn its raw dumps into profiles.
//! * [`ctl`]: `memlens ctl` and the client side of the control socket ([`ctl::Target`]).
//! * [`live`]: the options of profiling on demand (`--inactive`, `--start-on-growth`,
//!   `--profile-for`, `--dump-every`) and their plan.
//! * [`watcher`]: the thread that carries that plan out while the program runs.
#![warn(missing_docs)]
pub mod ctl;
pub mod live;
pub mod run;
pub mod watcher;

pub use ctl::{run_ctl, CtlArgs};
pub use live::{LiveArgs, LivePlan};
pub use run::{run_run, RunArgs};
pub use watcher::Watcher;
