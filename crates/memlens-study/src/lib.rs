//! memlens study (work in progress).
/// What heap profiling costs, by interval and unwinder
#[derive(Debug, clap::Args)]
pub struct StudyArgs {}

pub fn run_study(_args: StudyArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
