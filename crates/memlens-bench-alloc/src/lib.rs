//! memlens bench alloc (work in progress).
/// Allocator scalability across threads, sizes and patterns
#[derive(Debug, clap::Args)]
pub struct AllocArgs {}

pub fn run_alloc(_args: AllocArgs) -> anyhow::Result<i32> {
    anyhow::bail!("not implemented yet")
}
