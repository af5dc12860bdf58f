//! Built-in workloads of `memlens study`, run in this process by the hidden `memlens workload …`
//! subcommand so the study can start them under the runtime (LD_PRELOAD) like any other program.
//!
//! * `rtc`: the realistic hot path, a run-to-completion trading pipeline (one thread per core:
//!   quote → book → strategy → order), paired blocks or a profile window.
//! * `pipeline`: the staged version (three threads connected by queues), kept as an option; its
//!   latency includes queueing between the stages ([`PipelineMetrics`]: what it prints).
//! * `paired`: the block lines both paired workloads print ([`Block`]), their order ([`schedule`]), and
//!   the profiler switch.
//!
//! The synthetic malloc-test loop is a C program (`workloads/c/malloc_test.c`), because its point is
//! to be as thin as the published test: nothing between the loop and malloc.
#![warn(missing_docs)]
use anyhow::Result;

mod paired;
mod pipeline;
mod rng;
mod rtc;

pub use paired::{schedule, Block, AFTER};
pub use pipeline::Metrics as PipelineMetrics;

/// Run a built-in workload in this process and print its metrics as one JSON line
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  memlens workload pipeline --seed 1 --quotes 50000")]
pub struct WorkloadArgs {
    /// The workload to run
    #[command(subcommand)]
    kind: WorkloadKind,
}

/// The built-in workloads.
#[derive(Debug, clap::Subcommand)]
enum WorkloadKind {
    /// Trading pipeline, staged over three threads: generate quotes, parse, update order books, decide, serialise orders
    Pipeline(pipeline::PipelineArgs),
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
        WorkloadKind::Pipeline(a) => {
            let m = pipeline::run(&a.config()?)?;
            println!("{}", serde_json::to_string(&m)?);
            Ok(0)
        }
    }
}
