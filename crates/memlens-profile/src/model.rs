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
    AllocObjects,
    AllocSpace,
    InuseObjects,
    InuseSpace,
}

impl SampleIndex {
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

    pub fn is_bytes(self) -> bool {
        self.unit() == "bytes"
    }
}

/// Facts about the profiled process and how it was profiled.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Meta {
    pub pid: u32,
    pub ppid: u32,
    pub exe: String,
    /// Mean sampling interval in bytes; 0 = exact mode.
    pub interval: u64,
    pub unwinder: String,
    pub active: bool,
    /// Why the dump was written (exit, exec, ctl, api, fork-child-exit).
    pub reason: String,
    pub start_ns: u64,
    pub time_ns: u64,
    /// Samples recorded by the runtime since start.
    pub samples: u64,
    /// Samples whose stack hit max depth or a broken frame chain.
    pub truncated: u64,
    /// Samples lost inside the runtime (tables full).
    pub dropped: u64,
    /// Samples whose stack the dwarf unwinder handed to its fallback (libunwind or libgcc).
    pub unwind_fallbacks: u64,
    pub max_depth: u32,
    /// Which view of the process this profile is: empty for the dump itself, `peak` for the live set
    /// at the heap's high-water mark (`<stem>.peak.pb.gz`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub view: String,
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
    pub start: u64,
    pub limit: u64,
    pub offset: u64,
    pub filename: String,
    /// Hex build ID, empty when unknown.
    pub build_id: String,
    pub has_functions: bool,
    pub has_filenames: bool,
    pub has_line_numbers: bool,
    pub has_inline_frames: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Function {
    pub name: String,
    pub system_name: String,
    pub filename: String,
    pub start_line: i64,
}

/// One source line of a location; a location has several when calls were inlined.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Line {
    /// Index + 1 into `Profile::functions`.
    pub function: u64,
    pub line: i64,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Location {
    /// Index + 1 into `Profile::mappings`; 0 = none.
    pub mapping: u64,
    /// The address looked up (return address − 1).
    pub address: u64,
    /// Innermost (inlined callee) first.
    pub lines: Vec<Line>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// Index + 1 into `Profile::locations`, innermost (allocating function) first.
    pub locations: Vec<u64>,
    pub alloc_objects: f64,
    pub alloc_bytes: f64,
    pub inuse_objects: f64,
    pub inuse_bytes: f64,
    /// Samples taken for this stack (0 when the source does not say).
    pub samples: u64,
    /// A negated sample of the base profile in a difference profile (pprof label
    /// `pprof::base=true`, which makes pprof use the base total for percentages, as `-diff_base`).
    pub diff_base: bool,
    /// Peak set, lifetimes and live age of this stack, when the runtime tracked them.
    pub life: Option<Life>,
}

/// Lifetime decades: bucket i holds what was freed at an age below `LIFE_BOUNDS_NS[i]` (and at
/// or above the previous bound); the last bucket is open.
pub const LIFE_BOUNDS_NS: [f64; 9] = [1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11];
pub const LIFE_BUCKETS: usize = LIFE_BOUNDS_NS.len() + 1;

/// The views' values of one stack (unbiased estimates like the four values).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Life {
    /// Live at the heap's (estimated) high-water mark.
    pub peak_objects: f64,
    pub peak_bytes: f64,
    /// Bytes freed, by lifetime decade (see [`LIFE_BOUNDS_NS`]).
    pub freed: [f64; LIFE_BUCKETS],
    /// Mean age of the live bytes when the profile was written, in ns.
    pub live_age_ns: f64,
    /// Live bytes when the process wrote its previous dump (0 before the first).
    pub prev_inuse_bytes: f64,
}

impl Life {
    pub fn freed_total(&self) -> f64 {
        self.freed.iter().sum()
    }

    /// Bytes freed at an age below `bound_ns` (one of the decade bounds).
    pub fn freed_within(&self, bound_ns: f64) -> f64 {
        let k = LIFE_BOUNDS_NS
            .iter()
            .position(|&b| b >= bound_ns)
            .unwrap_or(LIFE_BUCKETS - 1);
        self.freed[..=k].iter().sum()
    }

    /// Median lifetime of the freed bytes in ns (log-interpolated within its decade), or None.
    pub fn median_ns(&self) -> Option<f64> {
        let total = self.freed_total();
        if total <= 0.0 {
            return None;
        }
        let mut below = 0.0;
        for (k, &v) in self.freed.iter().enumerate() {
            if v > 0.0 && below + v >= total / 2.0 {
                let hi = if k < LIFE_BOUNDS_NS.len() {
                    LIFE_BOUNDS_NS[k]
                } else {
                    LIFE_BOUNDS_NS[k - 1] * 10.0
                };
                let f = (total / 2.0 - below) / v;
                return Some(hi / 10.0 * 10f64.powf(f));
            }
            below += v;
        }
        None
    }

    pub fn add(&mut self, o: &Life) {
        self.peak_objects += o.peak_objects;
        self.peak_bytes += o.peak_bytes;
        for (a, b) in self.freed.iter_mut().zip(o.freed) {
            *a += b;
        }
        self.prev_inuse_bytes += o.prev_inuse_bytes;
    }
}

/// One point of the memory timeline.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TimePoint {
    /// CLOCK_REALTIME ns.
    pub time_ns: u64,
    /// Estimated live heap (unbiased, from the samples).
    pub heap_bytes: f64,
    pub rss_bytes: Option<f64>,
    /// The allocator's own figures (plus the sampled blocks it does not see), when it exposes them.
    pub allocator_in_use: Option<f64>,
    pub allocator_footprint: Option<f64>,
}

/// Process-wide facts of the views.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Views {
    /// Estimated live heap when the profile was written.
    pub heap_bytes: f64,
    /// Highest estimate seen, and when.
    pub heap_max_bytes: f64,
    pub heap_max_ns: u64,
    /// The estimate when the peak set was taken, and when.
    pub peak_bytes: f64,
    pub peak_ns: u64,
    /// Where the allocator figures come from: glibc, jemalloc, tcmalloc or none.
    pub allocator: String,
    /// The runtime had its views switched off (MEMLENS_VIEWS=0): no peak, lifetimes or timeline.
    pub disabled: bool,
    pub timeline: Vec<TimePoint>,
}

impl Sample {
    pub fn value(&self, i: SampleIndex) -> f64 {
        match i {
            SampleIndex::AllocObjects => self.alloc_objects,
            SampleIndex::AllocSpace => self.alloc_bytes,
            SampleIndex::InuseObjects => self.inuse_objects,
            SampleIndex::InuseSpace => self.inuse_bytes,
        }
    }

    pub fn values(&self) -> [f64; 4] {
        [
            self.alloc_objects,
            self.alloc_bytes,
            self.inuse_objects,
            self.inuse_bytes,
        ]
    }

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
pub struct Profile {
    pub meta: Meta,
    pub mappings: Vec<Mapping>,
    pub functions: Vec<Function>,
    pub locations: Vec<Location>,
    pub samples: Vec<Sample>,
    /// Present when the runtime tracked peak, lifetimes and the timeline.
    pub views: Option<Views>,
}

/// One frame of a stack as a report shows it: a function (or an address when unsymbolized).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Frame {
    pub function: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub file: String,
    #[serde(skip_serializing_if = "is_zero")]
    pub line: i64,
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
