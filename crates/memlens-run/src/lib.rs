//! memlens run / memlens ctl: start programs under the runtime and control running ones.
//!
//! * `run.rs`: `memlens run`: launch under the runtime, wait, turn its raw dumps into profiles.
//! * `ctl.rs`: `memlens ctl` and the client side of the control socket ([`Target`]).
//! * `live.rs`: the options of profiling on demand (`--inactive`, `--start-on-growth`,
//!   `--profile-for`, `--dump-every`) and their plan.
//! * `watcher.rs`: the thread that carries that plan out while the program runs.
#![warn(missing_docs)]
mod ctl;
mod live;
mod run;
mod watcher;

pub use ctl::{default_dump_name, is_runtime_path, run_ctl, CtlArgs, ProcStatus, Reply, Target};
pub use live::{LiveArgs, LivePlan};
pub use run::{run_run, RunArgs, ServeHook, SERVE_HOOK};
pub use watcher::{rss_bytes, Watcher};
