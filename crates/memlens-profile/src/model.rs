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
    /// The program's name as it was started (argv[0]'s file name: `redis-server`, where `exe` is
    /// the file its symlink points to, `redis-check-rdb`); empty when the runtime did not say.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub command: String,
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
    /// The runtime's stack table limit (distinct stacks; 0 = not said).
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub max_stacks: u64,
    /// Dropped samples of new stacks the full stack table could not take (part of `dropped`).
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub table_full: u64,
    /// Samples counted as allocated but not tracked live: the sampled-blocks range could not grow
    /// (an address-space limit), so their frees are not seen and `inuse_*` leaves them out.
    #[serde(skip_serializing_if = "is_zero_u64")]
    pub untracked: u64,
    /// Which view of the process this profile is: empty for the dump itself, `peak` for the live set
    /// at the heap's high-water mark (`<stem>.peak.pb.gz`).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub view: String,
    /// Heap sample types the file did not have (a profile written by another tool): their values
    /// read 0 in the samples, and are printed as n/a, never as a measured 0.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub absent: Vec<SampleIndex>,
    /// What profiling had cost the process when the dump was written, by the runtime's own
    /// account (0 from a runtime that does not keep it): ns in its sampled path, allocation calls
    /// made while sampling (estimated from the samples), and the process's CPU ns.
    pub cost: Cost,
    /// What the runtime said about what it could and could not see (`note` lines of the dump, the
    /// profile's `memlens-note:` comments): allocators linked into the program it hooked, those it
    /// cannot hook, a heap growing where nothing is sampled (runtime/src/base/notes.c).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The runtime's own account of its cost (runtime/src/sample/cost.c).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Cost {
    /// Nanoseconds in the sampled path (unwinding, recording, the views, sampled frees).
    pub sampled_ns: u64,
    /// Allocation calls while sampling, estimated from the samples' weights.
    pub calls: u64,
    /// The process's CPU time, ns.
    pub cpu_ns: u64,
}

impl Cost {
    /// The sampled path's share of the process's CPU time, percent (None when not accounted).
    pub fn share_pct(&self) -> Option<f64> {
        (self.cpu_ns > 0 && (self.sampled_ns > 0 || self.calls > 0))
            .then(|| self.sampled_ns as f64 / self.cpu_ns as f64 * 100.0)
    }
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
    /// Peak set, lifetimes and live age of this stack, when the runtime tracked them (boxed: a
    /// profile without them pays one word per sample, not the whole record).
    pub life: Option<Box<Life>>,
}

/// Lifetime decades: bucket i holds what was freed at an age below `LIFE_BOUNDS_NS[i]` (and at
/// or above the previous bound); the last bucket is open.
pub const LIFE_BOUNDS_NS: [f64; 9] = [1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11];
/// Number of lifetime decades (the bounds plus the open last one).
pub const LIFE_BUCKETS: usize = LIFE_BOUNDS_NS.len() + 1;

/// The views' values of one stack (unbiased estimates like the four values).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Life {
    /// Live at the heap's (estimated) high-water mark.
    pub peak_objects: f64,
    /// Bytes live at the high-water mark.
    pub peak_bytes: f64,
    /// Bytes freed, by lifetime decade (see [`LIFE_BOUNDS_NS`]).
    pub freed: [f64; LIFE_BUCKETS],
    /// Mean age of the live bytes when the profile was written, in ns.
    pub live_age_ns: f64,
    /// Live bytes when the process wrote its previous dump (0 before the first).
    pub prev_inuse_bytes: f64,
}

impl Life {
    /// All bytes freed (every decade).
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

    /// The decade holding the median lifetime of the freed bytes, `[lo, hi)` in ns (`lo` 0 for
    /// the first decade, `hi` infinite for the open last one), or None. Bytes are only known per
    /// decade: a point inside it would be the shape assumed, not measured.
    pub fn median_range_ns(&self) -> Option<(f64, f64)> {
        let total = self.freed_total();
        if total <= 0.0 {
            return None;
        }
        let mut below = 0.0;
        for (k, &v) in self.freed.iter().enumerate() {
            if v > 0.0 && below + v >= total / 2.0 {
                let lo = if k == 0 { 0.0 } else { LIFE_BOUNDS_NS[k - 1] };
                let hi = LIFE_BOUNDS_NS.get(k).copied().unwrap_or(f64::INFINITY);
                return Some((lo, hi));
            }
            below += v;
        }
        None
    }

    /// The upper bound of the decade holding the median lifetime (of the open last decade, its
    /// lower bound), or None: `lifetime_median=:1ms` in `go tool pprof` then selects exactly the
    /// stacks whose median lifetime is under 1 ms.
    pub fn median_ns(&self) -> Option<f64> {
        self.median_range_ns()
            .map(|(lo, hi)| if hi.is_finite() { hi } else { lo })
    }

    /// Add another stack's values (merging stacks; the live age is merged by the caller).
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
    /// Resident set size of the process.
    pub rss_bytes: Option<f64>,
    /// The allocator's own figures (plus the sampled blocks it does not see), when it exposes them.
    pub allocator_in_use: Option<f64>,
    /// What the allocator holds from the system (glibc: arenas + mmapped; jemalloc: resident).
    pub allocator_footprint: Option<f64>,
}

impl TimePoint {
    /// A point from the five numbers of the runtime's `tl` line (also how our pprof files keep
    /// it): time ns, heap, RSS, allocator in use, allocator footprint; negative = unknown.
    pub fn from_raw(c: [i64; 5]) -> TimePoint {
        let opt = |x: i64| (x >= 0).then_some(x as f64);
        TimePoint {
            time_ns: c[0].max(0) as u64,
            heap_bytes: c[1] as f64,
            rss_bytes: opt(c[2]),
            allocator_in_use: opt(c[3]),
            allocator_footprint: opt(c[4]),
        }
    }

    /// The five numbers [`TimePoint::from_raw`] reads.
    pub fn to_raw(&self) -> [i64; 5] {
        let opt = |x: Option<f64>| x.map_or(-1, |x| x.round() as i64);
        [
            self.time_ns as i64,
            self.heap_bytes.round() as i64,
            opt(self.rss_bytes),
            opt(self.allocator_in_use),
            opt(self.allocator_footprint),
        ]
    }
}

/// Process-wide facts of the views.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Views {
    /// Estimated live heap when the profile was written.
    pub heap_bytes: f64,
    /// Highest estimate seen, and when.
    pub heap_max_bytes: f64,
    /// CLOCK_REALTIME ns of the highest estimate.
    pub heap_max_ns: u64,
    /// The estimate when the peak set was taken, and when.
    pub peak_bytes: f64,
    /// CLOCK_REALTIME ns of the peak snapshot.
    pub peak_ns: u64,
    /// The split-sample estimate of the peak (the runtime's `view split`): the mean of half B's
    /// estimate when half A was highest and A's when B was; 0 when the runtime did not write it.
    pub split_peak_bytes: f64,
    /// CLOCK_REALTIME ns of the later of the two moments.
    pub split_peak_ns: u64,
    /// Where the allocator figures come from: glibc, jemalloc, tcmalloc or none.
    pub allocator: String,
    /// The runtime had its views switched off (MEMLENS_VIEWS=0): no peak, lifetimes or timeline.
    pub disabled: bool,
    /// The memory timeline, oldest first.
    pub timeline: Vec<TimePoint>,
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
    /// Present when the runtime tracked peak, lifetimes and the timeline.
    pub views: Option<Views>,
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
    /// The file the code is in (the mapping's path; empty when unknown): where a report tells a
    /// library's frame from the program's own. Not in JSON.
    #[serde(skip)]
    pub module: String,
}

fn is_zero_u64(v: &u64) -> bool {
    *v == 0
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

impl Profile {
    /// Whether the profile has values of sample type `i` (see [`Meta::absent`]).
    pub fn has(&self, i: SampleIndex) -> bool {
        !self.meta.absent.contains(&i)
    }

    /// An error when the profile has no values of sample type `i`, naming those it has.
    pub fn require(&self, i: SampleIndex) -> anyhow::Result<()> {
        if self.has(i) {
            return Ok(());
        }
        let has: Vec<&str> = SampleIndex::ALL
            .iter()
            .filter(|&&x| self.has(x))
            .map(|x| x.name())
            .collect();
        anyhow::bail!(
            "this profile has no {} values (its heap sample types: {}): choose one with --sample-index",
            i.name(),
            has.join(", ")
        )
    }

    /// Sum of one value over all samples.
    pub fn total(&self, i: SampleIndex) -> f64 {
        self.samples.iter().map(|s| s.value(i)).sum()
    }

    /// Is the sample's memory anonymous mmap (its innermost frame the runtime's
    /// `[anonymous mmap]`, issue 31), not the heap?
    pub fn is_mmap(&self, s: &Sample) -> bool {
        let leaf = s
            .locations
            .first()
            .and_then(|&id| self.locations.get((id as usize).wrapping_sub(1)));
        let func = leaf
            .and_then(|l| l.lines.first())
            .and_then(|l| self.functions.get((l.function as usize).wrapping_sub(1)));
        func.is_some_and(|f| f.name == crate::convert::MMAP_FRAME)
    }

    /// The part of [`Profile::total`] that is anonymous mmap.
    pub fn mmap_total(&self, i: SampleIndex) -> f64 {
        self.samples
            .iter()
            .filter(|s| self.is_mmap(s))
            .map(|s| s.value(i))
            .sum()
    }

    /// The frames of a sample, innermost first, with inlined calls expanded. An unsymbolized
    /// location is named `module+0xOFFSET` (stable across processes, unlike the address).
    pub fn frames(&self, s: &Sample) -> Vec<Frame> {
        let mut out = Vec::with_capacity(s.locations.len());
        for &id in &s.locations {
            let Some(loc) = self.locations.get((id as usize).wrapping_sub(1)) else {
                continue;
            };
            let module = self
                .mappings
                .get((loc.mapping as usize).wrapping_sub(1))
                .map_or_else(String::new, |m| m.filename.clone());
            if loc.lines.is_empty() {
                out.push(Frame {
                    function: self.address_name(loc),
                    file: String::new(),
                    line: 0,
                    inlined: false,
                    module,
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
                    module: module.clone(),
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
