//! Built-in workloads of `memlens study`, run in this process by the hidden `memlens workload …`
//! subcommand so the study can start them under the runtime (LD_PRELOAD) like any other program.
//!
//! * `rtc`: the realistic hot path, a run-to-completion trading pipeline (one thread per core:
//!   quote → book → strategy → order), in paired blocks, a profile window or plain timed ticks;
//!   its market (quote feed, order books, strategy) is `market/`.
//! * `paired`: the block lines both paired workloads print ([`Block`]), their order ([`schedule`]), and
//!   the profiler switch.
//!
//! The synthetic malloc-test loop is a C program (`workloads/c/malloc_test.c`), because its point is
//! to be as thin as the published test: nothing between the loop and malloc.
#![warn(missing_docs)]
use anyhow::Result;

mod market;
mod paired;
mod rng;
mod rtc;

pub use paired::{schedule, Block, AFTER};

/// Run a built-in workload in this process and print what it measured
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  memlens workload rtc --ticks 200000 --working-set 64M")]
pub struct WorkloadArgs {
    /// The workload to run
    #[command(subcommand)]
    kind: WorkloadKind,
}

/// The built-in workloads.
#[derive(Debug, clap::Subcommand)]
enum WorkloadKind {
    /// Trading pipeline, run to completion on each core (the study's realistic hot path)
    Rtc(rtc::RtcArgs),
}

/// Run the workload the arguments name.
pub fn run_workload(args: WorkloadArgs) -> Result<i32> {
    match args.kind {
        WorkloadKind::Rtc(a) => {
            rtc::run(&a)?;
            Ok(0)
        }
    }
}
