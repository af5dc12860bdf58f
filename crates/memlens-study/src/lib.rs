//! `memlens study`: what heap profiling costs, by sampling interval and unwinder, and which interval
//! to use — measured paired in time, on a synthetic loop, on a realistic hot path, on redis and on
//! your own program.
//!
//! One engine (`run/`), two schedules: each configuration takes turns with off in the schedule
//! `off, c1, off, c2, …, off`, either in blocks inside one process (memlens and jemalloc's
//! profiler, which switch at run time) or as whole processes (tcmalloc's sampler, heaptrack, a
//! command that runs to completion, or everything with `--schedule processes`). Every block is
//! paired with the off blocks beside it (`stats.rs`), every process runs placebo blocks, and one
//! row builder (`rows.rs`) makes each configuration's row with its interval over processes
//! (`estimate.rs`), quality against the exact window (`quality.rs`) and one recommendation rule
//! (`recommend.rs`). `model.rs` holds the types all of these share; `settings.rs` reads the
//! command line; `report/` puts the answer first (`chart.rs`), then the verdict and the tables,
//! and writes the JSON, CSV and HTML files.
#![warn(missing_docs)]
use anyhow::Result;

mod args;
mod estimate;
mod model;
mod profilers;
mod quality;
mod recommend;
mod report;
mod rows;
mod run;
mod settings;
mod stats;

pub use args::{ScheduleArg, StudyArgs};

/// Run `memlens study`.
pub fn run_study(args: StudyArgs) -> Result<i32> {
    // Says at once when other programs keep the machine busy (a warning at the end, as `bench
    // alloc` prints, is the study's to add with `busy.end_warning`).
    let _busy = memlens_measure::busy::Watch::start("memlens study");
    let s = settings::settings(&args)?;
    let r = run::run(s)?;
    report::emit(&r, &args.out)?;
    Ok(0)
}
