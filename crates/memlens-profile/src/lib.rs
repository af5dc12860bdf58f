//! Heap profiles in and out: the runtime's raw dumps, offline symbolization, pprof, and the
//! `memlens report` / `memlens diff` commands.
//!
//! * [`raw`]: strict reader of the runtime's raw dump.
//! * [`symbolize`]: module + ELF address → functions, files, lines, inlined frames (blazesym).
//! * [`model`]: the profile every input becomes and every output is made from.
//! * [`pprof`]: profile.proto writer and reader (gzip); [`pprof_read`]: the streamed, bounded read.
//! * [`input`]: opening a profile, bounded in size, time and kind.
//! * [`convert`]: raw dump → symbolized profile ([`convert_raw`] is what `memlens run` calls).
//! * [`life`] and [`views`]: peak set, lifetimes, leaks, timeline and `memlens report --view`.
//! * [`agg`]: stacks merged by function names, flat/cum per function.
//! * [`report`] and [`diff`]: the two commands.
#![warn(missing_docs)]
pub mod agg;
pub mod convert;
pub mod diff;
pub mod input;
pub mod life;
pub mod model;
mod names;
pub mod pprof;
pub mod pprof_read;
pub mod raw;
pub mod report;
pub mod state;
pub mod symbolize;
pub mod views;

pub use convert::{convert_raw, load, ConvertSummary};
pub use model::{Profile, SampleIndex};
pub use names::short_name;
pub use pprof::profile_stem;

pub use diff::{run_diff, DiffArgs};
pub use report::{run_report, ReportArgs};
