//! memlens run / memlens ctl: start programs under the runtime and control running ones.
//!
//! * `run.rs`: `memlens run`: launch under the runtime, wait (as the subreaper of all it starts).
//! * `rundir.rs`: the run directory every process of a run leaves its dumps in; `places.rs`: where
//!   the run's files go and where the runtime loads from (noexec, read-only, full or foreign
//!   `/dev/shm`, an unwritable HOME).
//! * `collect.rs`: a profile for every process of a run, or why there is none (also `memlens report
//!   RUNDIR`); `members.rs`: which files of a run directory are the run's.
//! * `loader.rs`: the C library a program runs on (its `PT_INTERP`): musl programs run unprofiled.
//! * `ctl.rs`: `memlens ctl` (its client is `memlens_target::Target`).
//! * `live.rs`: the options of profiling on demand (`--inactive`, `--start-on-growth`,
//!   `--profile-for`, `--dump-every`) and their plan.
//! * `watcher.rs`: the thread that carries that plan out while the program runs.
#![warn(missing_docs)]
mod collect;
mod ctl;
mod live;
mod loader;
mod members;
mod places;
mod run;
mod rundir;
mod watcher;

pub use collect::{ending, signal_name};
pub use ctl::{run_ctl, CtlArgs};
pub use run::{exit_code_of, run_collect, run_quietly, run_run, RunArgs, RunOutcome, SpawnError};
