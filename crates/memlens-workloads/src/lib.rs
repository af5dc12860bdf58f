//! Built-in workloads of `memlens study`, run in this process by the hidden `memlens workload …`
//! subcommand so the study can start them under the runtime (LD_PRELOAD) like any other program.
//!
//! * `pipeline`: a latency-critical trading pipeline (quotes in → orders out) whose metric is the
//!   tick-to-order latency of every quote; see [`pipeline`].
//!
//! The synthetic malloc-test loop is a C program (`workloads/c/malloc_test.c`), because its point is
//! to be as thin as the published test: nothing between the loop and malloc.
use anyhow::Result;

pub mod pipeline;
mod rng;

/// Run a built-in workload in this process and print its metrics as one JSON line
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  memlens workload pipeline --seed 1 --quotes 50000")]
pub struct WorkloadArgs {
    #[command(subcommand)]
    pub kind: WorkloadKind,
}

#[derive(Debug, clap::Subcommand)]
pub enum WorkloadKind {
    /// Trading pipeline: generate quotes, parse, update order books, decide, serialise orders
    Pipeline(pipeline::PipelineArgs),
}

pub fn run_workload(args: WorkloadArgs) -> Result<i32> {
    match args.kind {
        WorkloadKind::Pipeline(a) => {
            let m = pipeline::run(&a.config()?)?;
            println!("{}", serde_json::to_string(&m)?);
            Ok(0)
        }
    }
}
