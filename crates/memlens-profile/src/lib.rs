//! memlens report / memlens diff: heap profiles in and out (work in progress).
/// Show the top stacks and functions of a heap profile
#[derive(Debug, clap::Args)]
pub struct ReportArgs {}

pub fn run_report(_args: ReportArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
/// What grew between two heap profiles
#[derive(Debug, clap::Args)]
pub struct DiffArgs {}

pub fn run_diff(_args: DiffArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
