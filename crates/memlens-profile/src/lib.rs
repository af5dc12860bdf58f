//! Heap profiles in and out: the runtime's raw dumps and state files, offline symbolization, pprof,
//! and the `memlens report` / `memlens diff` commands.
//!
//! The modules are private; what other crates use is re-exported here, by what it is for:
//!
//! * the profile every input becomes and every output is made from ([`Profile`] and its parts);
//! * reading: [`load`] (any profile file, bounded), [`convert_raw`] (raw dump → symbolized pprof,
//!   what `memlens run` calls), the raw dump itself ([`read_raw`], [`RawDump`]; only its header: [`read_raw_head`]; whether the
//!   runtime finished it: [`raw_is_complete`]), a state file
//!   ([`read_state_info`], [`render_state`]), symbolization ([`Symbolizer`]) from the files of
//!   the process wherever they are ([`ProcessFiles`]: a container's root, its mapped files), and
//!   the one door for files memlens did not create and the user did not name ([`open_regular`],
//!   [`read_regular`], [`copy_regular`]: a regular file only, no link, bounded);
//! * writing pprof: [`write_pprof`], [`to_proto`] and the [`proto`] messages (`memlens serve`);
//! * stacks merged by function names ([`Frames`], [`Stacks`]) and names shortened for display
//!   ([`short_name`]);
//! * the two commands, `report` ([`run_report`]) and `diff` ([`run_diff`]).
//!
//! Inside: `raw` (strict reader of the raw dump), `state` (the state file), `symbolize`
//! (module + ELF address → functions, files, lines, inlined frames) after `modfile` (what a
//! module file must be before it is read), `lookup` (where a module's file is: the process's
//! root, its mapped files, this host, debug files by build ID), `model`, `pprof` (writer and
//! reader, gzip) with `pprof_read` (the streamed, bounded read), `input` (opening a profile, bounded
//! in size, time and kind), `convert`, `life` and `views` (peak set, lifetimes, leaks, timeline,
//! `report --view`), `agg` (stacks as interned frame ids, flat/cum per function), `names`, `report`
//! (`page`: its HTML page; `present`: what `report`, `views`, `page` and `diff` share, below them
//! all) and `diff` (`compared`: the two profiles matched, below `diff` and `diff_flame`, its
//! differential flame graph).
#![warn(missing_docs)]
mod agg;
mod compared;
mod convert;
mod diff;
mod diff_flame;
mod flame;
mod input;
mod life;
mod lookup;
mod model;
mod modfile;
mod names;
mod page;
mod pprof;
mod pprof_read;
mod present;
mod raw;
mod report;
mod state;
mod symbolize;
mod views;

pub use model::{Frame, Function, Line, Location, Mapping, Profile, Sample, SampleIndex};

pub use convert::{
    convert_raw, convert_raw_in, convert_raw_text, load, symbolize_dump_in, symbolize_dump_with,
    symbolize_dumps, ConvertSummary,
};
pub use lookup::ProcessFiles;
pub use raw::{
    is_complete as raw_is_complete, parse as parse_raw, read as read_raw,
    read_head as read_raw_head, RawDump, RawHead, RawModule, RawStack,
};
pub use state::{
    read_info as read_state_info, render as render_state, StateInfo, Status as StateStatus,
};
pub use symbolize::{demangle, file_build_id, Symbolizer};

pub use input::{budget, copy_regular, kind as file_kind, open_regular, read_regular, Links};

pub use pprof::{profile_stem, proto, to_proto, write as write_pprof};

pub use agg::{fmt_value, Frames, Stacks};
pub use names::short_name;
pub use views::peak_bound_from_highest;

pub use compared::compare;
pub use diff::{difference_profile, run_diff, DiffArgs};
pub use present::Format as ReportFormat;
pub use report::{render as render_report, run_report, ReportArgs};
