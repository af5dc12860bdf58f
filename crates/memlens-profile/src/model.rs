//! The in-memory heap profile every input is turned into and every output is made from.
//!
//! It mirrors pprof's shape (samples → locations → lines → functions, locations → mappings) so
//! that writing and reading pprof is a direct translation, but keeps values as `f64` (the raw dump's
//! unbiased estimates are fractional; pprof rounds them to integers only when written).
use serde::Serialize;

/// Which of the four values a report ranks by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
#[value(rename_all = "snake_case")]
pub enum SampleIndex {
    /// Objects allocated (cumulative).
    AllocObjects,
    /// Bytes allocated (cumulative).
    AllocSpace,
    /// Objects live at the dump.
    InuseObjects,
    /// Bytes live at the dump.
    InuseSpace,
}

impl SampleIndex {
    /// Every sample index, in pprof's order.
    pub const ALL: [SampleIndex; 4] = [
        SampleIndex::AllocObjects,
        SampleIndex::AllocSpace,
        SampleIndex::InuseObjects,
        SampleIndex::InuseSpace,
    ];

    /// pprof's sample type name.
    pub fn name(self) -> &'static str {
        match self {
            SampleIndex::AllocObjects => "alloc_objects",
            SampleIndex::AllocSpace => "alloc_space",
            SampleIndex::InuseObjects => "inuse_objects",
            SampleIndex::InuseSpace => "inuse_space",
        }
    }

    /// pprof's unit for the sample type.
    pub fn unit(self) -> &'static str {
        match self {
            SampleIndex::AllocObjects | SampleIndex::InuseObjects => "count",
            SampleIndex::AllocSpace | SampleIndex::InuseSpace => "bytes",
        }
    }

    /// True for the byte-valued indexes.
    pub fn is_bytes(self) -> bool {
        self.unit() == "bytes"
    }
}

/// Facts about the profiled process and how it was profiled.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Meta {
    /// Process id.
    pub pid: u32,
    /// Parent process id.
    pub ppid: u32,
    /// Executable path.
    pub exe: String,
    /// Mean sampling interval in bytes; 0 = exact mode.
    pub interval: u64,
    /// Unwinder that captured the stacks.
    pub unwinder: String,
    /// Sampling was on when the dump was written.
    pub active: bool,
    /// Why the dump was written (exit, exec, ctl, api, fork-child-exit).
    pub reason: String,
    /// CLOCK_REALTIME ns when the runtime started (or was reset).
    pub start_ns: u64,
    /// CLOCK_REALTIME ns of the dump.
    pub time_ns: u64,
    /// Samples recorded by the runtime since start.
    pub samples: u64,
    /// Samples whose stack hit max depth or a broken frame chain.
    pub truncated: u64,
    /// Samples lost inside the runtime (tables full).
    pub dropped: u64,
    /// Samples whose stack the dwarf unwinder handed to its fallback (libunwind or libgcc).
    pub unwind_fallbacks: u64,
    /// Frames kept per stack.
    pub max_depth: u32,
    /// Estimated bytes of the dropped samples (their weight times their size).
    pub dropped_bytes: u64,
}

impl Meta {
    /// Share of recorded samples whose stack was truncated (0 when nothing was recorded).
    pub fn truncated_share(&self) -> f64 {
        if self.samples == 0 {
            0.0
        } else {
            self.truncated as f64 / self.samples as f64
        }
    }
}

/// A loaded module (or one PT_LOAD segment of it) in the profiled address space.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mapping {
    /// First run-time address.
    pub start: u64,
    /// One past the last run-time address.
    pub limit: u64,
    /// File offset of `start`.
    pub offset: u64,
    /// Path of the mapped file.
    pub filename: String,
    /// Hex build ID, empty when unknown.
    pub build_id: String,
    /// Functions are symbolized.
    pub has_functions: bool,
    /// File names are known.
    pub has_filenames: bool,
    /// Line numbers are known.
    pub has_line_numbers: bool,
    /// Inlined frames are expanded.
    pub has_inline_frames: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
/// A function, as pprof names it.
pub struct Function {
    /// Demangled name.
    pub name: String,
    /// Name as in the symbol table (mangled).
    pub system_name: String,
    /// Source file.
    pub filename: String,
    /// First line of the function.
    pub start_line: i64,
}

/// One source line of a location; a location has several when calls were inlined.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Line {
    /// Index + 1 into `Profile::functions`.
    pub function: u64,
    /// Source line (0 = unknown).
    pub line: i64,
}

#[derive(Debug, Clone, Default, PartialEq)]
/// A code address and the source lines it stands for.
pub struct Location {
    /// Index + 1 into `Profile::mappings`; 0 = none.
    pub mapping: u64,
    /// The address looked up (return address − 1).
    pub address: u64,
    /// Innermost (inlined callee) first.
    pub lines: Vec<Line>,
}

#[derive(Debug, Clone, Default, PartialEq)]
/// One stack and its values.
pub struct Sample {
    /// Index + 1 into `Profile::locations`, innermost (allocating function) first.
    pub locations: Vec<u64>,
    /// Estimated objects allocated.
    pub alloc_objects: f64,
    /// Estimated bytes allocated.
    pub alloc_bytes: f64,
    /// Estimated objects in use.
    pub inuse_objects: f64,
    /// Estimated bytes in use.
    pub inuse_bytes: f64,
    /// Samples taken for this stack (0 when the source does not say).
    pub samples: u64,
    /// A negated sample of the base profile in a difference profile (pprof label
    /// `pprof::base=true`, which makes pprof use the base total for percentages, as `-diff_base`).
    pub diff_base: bool,
}

impl Sample {
    /// The value of one sample index.
    pub fn value(&self, i: SampleIndex) -> f64 {
        match i {
            SampleIndex::AllocObjects => self.alloc_objects,
            SampleIndex::AllocSpace => self.alloc_bytes,
            SampleIndex::InuseObjects => self.inuse_objects,
            SampleIndex::InuseSpace => self.inuse_bytes,
        }
    }

    /// The four values in [`SampleIndex`] order.
    pub fn values(&self) -> [f64; 4] {
        [
            self.alloc_objects,
            self.alloc_bytes,
            self.inuse_objects,
            self.inuse_bytes,
        ]
    }

    /// Set the four values in [`SampleIndex`] order.
    pub fn set_values(&mut self, v: [f64; 4]) {
        [
            self.alloc_objects,
            self.alloc_bytes,
            self.inuse_objects,
            self.inuse_bytes,
        ] = v;
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
/// A heap profile: every input becomes one, every output is made from one.
pub struct Profile {
    /// Process and sampling facts.
    pub meta: Meta,
    /// Mapped modules.
    pub mappings: Vec<Mapping>,
    /// Functions (referenced by index + 1).
    pub functions: Vec<Function>,
    /// Locations (referenced by index + 1).
    pub locations: Vec<Location>,
    /// One per distinct stack.
    pub samples: Vec<Sample>,
}

/// One frame of a stack as a report shows it: a function (or an address when unsymbolized).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Frame {
    /// Function name (or `module+0xOFFSET` when unsymbolized).
    pub function: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    /// Source file, when known.
    pub file: String,
    #[serde(skip_serializing_if = "is_zero")]
    /// Source line (0 = unknown).
    pub line: i64,
    /// Inlined into the next frame.
    pub inlined: bool,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl Profile {
    /// Sum of one value over all samples.
    pub fn total(&self, i: SampleIndex) -> f64 {
        self.samples.iter().map(|s| s.value(i)).sum()
    }

    /// The frames of a sample, innermost first, with inlined calls expanded. An unsymbolized
    /// location is named `module+0xOFFSET` (stable across processes, unlike the address).
    pub fn frames(&self, s: &Sample) -> Vec<Frame> {
        let mut out = Vec::with_capacity(s.locations.len());
        for &id in &s.locations {
            let Some(loc) = self.locations.get((id as usize).wrapping_sub(1)) else {
                continue;
            };
            if loc.lines.is_empty() {
                out.push(Frame {
                    function: self.address_name(loc),
                    file: String::new(),
                    line: 0,
                    inlined: false,
                });
                continue;
            }
            let last = loc.lines.len() - 1;
            for (k, l) in loc.lines.iter().enumerate() {
                let f = self.functions.get((l.function as usize).wrapping_sub(1));
                out.push(Frame {
                    function: f.map_or_else(|| self.address_name(loc), |f| f.name.clone()),
                    file: f.map(|f| f.filename.clone()).unwrap_or_default(),
                    line: l.line,
                    inlined: k != last,
                });
            }
        }
        out
    }

    /// `libfoo.so+0x1234` for an address inside a mapping, `0x7f…` otherwise.
    pub fn address_name(&self, loc: &Location) -> String {
        match self.mappings.get((loc.mapping as usize).wrapping_sub(1)) {
            Some(m) if loc.address >= m.start => {
                let base = m.filename.rsplit('/').next().unwrap_or(&m.filename);
                format!("{base}+{:#x}", loc.address - m.start + m.offset)
            }
            _ => format!("{:#x}", loc.address),
        }
    }
}
