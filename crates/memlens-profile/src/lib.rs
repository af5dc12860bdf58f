//! Heap profiles in and out: the runtime's raw dumps, offline symbolization, pprof, and the
//! `memlens report` / `memlens diff` commands.
//!
//! * [`raw`]: strict reader of the runtime's raw dump.
//! * [`symbolize`]: module + ELF address → functions, files, lines, inlined frames (blazesym).
//! * [`model`]: the profile every input becomes and every output is made from.
//! * [`pprof`]: profile.proto writer and reader (gzip).
//! * [`convert`]: raw dump → symbolized profile ([`convert_raw`] is what `memlens run` calls).
pub mod convert;
pub mod model;
pub mod pprof;
pub mod raw;
pub mod symbolize;

pub use convert::{convert_raw, load, ConvertSummary};
pub use model::{Profile, SampleIndex};

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
