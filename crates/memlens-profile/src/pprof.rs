//! pprof (profile.proto) in and out: hand-written prost messages (no protoc needed), gzip via flate2.
//!
//! Written profiles carry the four heap sample types in pprof's order, `period_type space/bytes`,
//! `period` = sampling interval, mappings with build IDs and `has_functions`/`has_filenames`/
//! `has_line_numbers` set when symbolized, one location per unique address with its inlined lines
//! innermost first, and the process facts as `memlens.key=value` comments (read back by `read`).
use crate::model::{
    Function, Life, Line, Location, Mapping, Meta, Profile, Sample, SampleIndex, TimePoint, Views,
    LIFE_BUCKETS,
};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// A profile's path without `.gz` and `.pb`: the stem the files written beside it are named after
/// (`<stem>.peak.pb.gz`, `<stem>.<pid>.pb.gz`, `<stem>.growth.pb.gz`, …).
pub fn profile_stem(out: &Path) -> PathBuf {
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = name.strip_suffix(".gz").unwrap_or(&name);
    out.with_file_name(stem.strip_suffix(".pb").unwrap_or(stem))
}

pub mod proto {
    //! The subset of profile.proto memlens uses. Messages and fields are named and numbered as in
    //! that file, whose comments document them; they are not repeated here.
    #![allow(missing_docs)]
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Profile {
        #[prost(message, repeated, tag = "1")]
        pub sample_type: Vec<ValueType>,
        #[prost(message, repeated, tag = "2")]
        pub sample: Vec<Sample>,
        #[prost(message, repeated, tag = "3")]
        pub mapping: Vec<Mapping>,
        #[prost(message, repeated, tag = "4")]
        pub location: Vec<Location>,
        #[prost(message, repeated, tag = "5")]
        pub function: Vec<Function>,
        #[prost(string, repeated, tag = "6")]
        pub string_table: Vec<String>,
        #[prost(int64, tag = "7")]
        pub drop_frames: i64,
        #[prost(int64, tag = "8")]
        pub keep_frames: i64,
        #[prost(int64, tag = "9")]
        pub time_nanos: i64,
        #[prost(int64, tag = "10")]
        pub duration_nanos: i64,
        #[prost(message, optional, tag = "11")]
        pub period_type: Option<ValueType>,
        #[prost(int64, tag = "12")]
        pub period: i64,
        #[prost(int64, repeated, tag = "13")]
        pub comment: Vec<i64>,
        #[prost(int64, tag = "14")]
        pub default_sample_type: i64,
        /// memlens' own: the memory timeline, 5 values per point (ns, heap, rss, allocator in use,
        /// allocator footprint; -1 unknown). A field number profile.proto does not use: pprof tools
        /// skip it, and it keeps thousands of points out of the comments they print.
        #[prost(int64, repeated, tag = "1001")]
        pub memlens_timeline: Vec<i64>,
        /// memlens' own: each timeline point's anonymous mappings (-1 unknown), apart from its
        /// heap. A field of its own so that files written before the split, 5 values a point in
        /// `memlens_timeline`, still read.
        #[prost(int64, repeated, tag = "1002")]
        pub memlens_timeline_mmap: Vec<i64>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct ValueType {
        #[prost(int64, tag = "1")]
        pub r#type: i64,
        #[prost(int64, tag = "2")]
        pub unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Sample {
        #[prost(uint64, repeated, tag = "1")]
        pub location_id: Vec<u64>,
        #[prost(int64, repeated, tag = "2")]
        pub value: Vec<i64>,
        #[prost(message, repeated, tag = "3")]
        pub label: Vec<Label>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Label {
        #[prost(int64, tag = "1")]
        pub key: i64,
        #[prost(int64, tag = "2")]
        pub str: i64,
        #[prost(int64, tag = "3")]
        pub num: i64,
        #[prost(int64, tag = "4")]
        pub num_unit: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Mapping {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub memory_start: u64,
        #[prost(uint64, tag = "3")]
        pub memory_limit: u64,
        #[prost(uint64, tag = "4")]
        pub file_offset: u64,
        #[prost(int64, tag = "5")]
        pub filename: i64,
        #[prost(int64, tag = "6")]
        pub build_id: i64,
        #[prost(bool, tag = "7")]
        pub has_functions: bool,
        #[prost(bool, tag = "8")]
        pub has_filenames: bool,
        #[prost(bool, tag = "9")]
        pub has_line_numbers: bool,
        #[prost(bool, tag = "10")]
        pub has_inline_frames: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Location {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(uint64, tag = "2")]
        pub mapping_id: u64,
        #[prost(uint64, tag = "3")]
        pub address: u64,
        #[prost(message, repeated, tag = "4")]
        pub line: Vec<Line>,
        #[prost(bool, tag = "5")]
        pub is_folded: bool,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Line {
        #[prost(uint64, tag = "1")]
        pub function_id: u64,
        #[prost(int64, tag = "2")]
        pub line: i64,
        #[prost(int64, tag = "3")]
        pub column: i64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Function {
        #[prost(uint64, tag = "1")]
        pub id: u64,
        #[prost(int64, tag = "2")]
        pub name: i64,
        #[prost(int64, tag = "3")]
        pub system_name: i64,
        #[prost(int64, tag = "4")]
        pub filename: i64,
        #[prost(int64, tag = "5")]
        pub start_line: i64,
    }
}

/// Interned strings; index 0 is "" as profile.proto requires.
struct Strings {
    table: Vec<String>,
    index: HashMap<String, i64>,
}

impl Strings {
    fn new() -> Self {
        Strings {
            table: vec![String::new()],
            index: HashMap::from([(String::new(), 0)]),
        }
    }

    fn id(&mut self, s: &str) -> i64 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i64;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

const SAMPLES_LABEL: &str = "samples";
/// pprof's own label for samples of a diff base.
const BASE_LABEL: &str = "pprof::base";

/// Translate the model into profile.proto messages.
pub fn to_proto(p: &Profile) -> proto::Profile {
    let (mut m, enc) = proto_without_samples(p);
    m.sample = p.samples.iter().map(|s| enc.sample(s)).collect();
    m
}

/// How samples become messages: the string ids of their labels, fixed before any sample is written.
struct SampleEncoder {
    has_life: bool,
    life_keys: LifeKeys,
    samples_key: i64,
    count: i64,
    base_key: i64,
    yes: i64,
}

impl SampleEncoder {
    fn sample(&self, s: &Sample) -> proto::Sample {
        let mut value: Vec<i64> = s.values().iter().map(|v| v.round() as i64).collect();
        let mut label = labels(s, self.samples_key, self.count, self.base_key, self.yes);
        if self.has_life {
            let l = s.life.as_deref().cloned().unwrap_or_default();
            value.extend(life_values(&l).iter().map(|v| v.round() as i64));
            label.extend(self.life_keys.labels(&l));
        }
        proto::Sample {
            location_id: s.locations.clone(),
            value,
            label,
        }
    }
}

/// Everything of the message but the samples, and how to write those. Samples add no strings, so
/// the string table is the same whether they are written with the rest or streamed in between.
fn proto_without_samples(p: &Profile) -> (proto::Profile, SampleEncoder) {
    let mut st = Strings::new();
    let vt = |st: &mut Strings, t: &str, u: &str| proto::ValueType {
        r#type: st.id(t),
        unit: st.id(u),
    };
    let has_life = p.samples.iter().any(|s| s.life.is_some());
    let mut sample_type: Vec<proto::ValueType> = SampleIndex::ALL
        .iter()
        .map(|i| vt(&mut st, i.name(), i.unit()))
        .collect();
    if has_life {
        sample_type.extend(LIFE_TYPES.iter().map(|(t, u)| vt(&mut st, t, u)));
    }
    let life_keys = LifeKeys::new(&mut st);
    let period_type = Some(vt(&mut st, "space", "bytes"));
    let samples_key = st.id(SAMPLES_LABEL);
    let count = st.id("count");
    let (base_key, yes) = if p.samples.iter().any(|s| s.diff_base) {
        (st.id(BASE_LABEL), st.id("true"))
    } else {
        (0, 0)
    };
    let enc = SampleEncoder {
        has_life,
        life_keys,
        samples_key,
        count,
        base_key,
        yes,
    };
    let mapping = p
        .mappings
        .iter()
        .enumerate()
        .map(|(i, m)| proto::Mapping {
            id: i as u64 + 1,
            memory_start: m.start,
            memory_limit: m.limit,
            file_offset: m.offset,
            filename: st.id(&m.filename),
            build_id: st.id(&m.build_id),
            has_functions: m.has_functions,
            has_filenames: m.has_filenames,
            has_line_numbers: m.has_line_numbers,
            has_inline_frames: m.has_inline_frames,
        })
        .collect();
    let location = p
        .locations
        .iter()
        .enumerate()
        .map(|(i, l)| proto::Location {
            id: i as u64 + 1,
            mapping_id: l.mapping,
            address: l.address,
            line: l
                .lines
                .iter()
                .map(|x| proto::Line {
                    function_id: x.function,
                    line: x.line,
                    column: 0,
                })
                .collect(),
            is_folded: false,
        })
        .collect();
    let function = p
        .functions
        .iter()
        .enumerate()
        .map(|(i, f)| proto::Function {
            id: i as u64 + 1,
            name: st.id(&f.name),
            system_name: st.id(&f.system_name),
            filename: st.id(&f.filename),
            start_line: f.start_line,
        })
        .collect();
    let mut comments = meta_comments(&p.meta);
    comments.extend(cost_comment(&p.meta.cost));
    comments.extend(p.meta.notes.iter().map(|n| format!("{NOTE}{n}")));
    if let Some(v) = &p.views {
        comments.extend(views_comments(v));
    }
    let comment = comments.iter().map(|c| st.id(c)).collect();
    let default_sample_type = st.id(if p.meta.view == "peak" {
        SampleIndex::InuseSpace.name()
    } else {
        SampleIndex::AllocSpace.name()
    });
    let m = proto::Profile {
        sample_type,
        sample: Vec::new(),
        mapping,
        location,
        function,
        string_table: st.table,
        drop_frames: 0,
        keep_frames: 0,
        time_nanos: p.meta.time_ns as i64,
        duration_nanos: p.meta.time_ns.saturating_sub(p.meta.start_ns) as i64,
        period_type,
        period: p.meta.interval as i64,
        comment,
        default_sample_type,
        memlens_timeline: p.views.as_ref().map(timeline_values).unwrap_or_default(),
        memlens_timeline_mmap: p.views.as_ref().map(timeline_mmap).unwrap_or_default(),
    };
    (m, enc)
}

/// The process facts on one comment line (pprof prints comments in its header); `exe` goes last
/// because a path may contain spaces.
fn labels(s: &Sample, samples_key: i64, count: i64, base_key: i64, yes: i64) -> Vec<proto::Label> {
    let mut l = Vec::new();
    if s.samples > 0 {
        l.push(proto::Label {
            key: samples_key,
            str: 0,
            num: s.samples as i64,
            num_unit: count,
        });
    }
    if s.diff_base {
        l.push(proto::Label {
            key: base_key,
            str: yes,
            num: 0,
            num_unit: 0,
        });
    }
    l
}

/// Sample types after the four when the profile has lifetimes (in `life_values` order).
const LIFE_TYPES: [(&str, &str); 5] = [
    ("peak_objects", "count"),
    ("peak_space", "bytes"),
    ("freed_space", "bytes"),
    ("freed_1ms_space", "bytes"),
    ("freed_1s_space", "bytes"),
];

fn life_values(l: &Life) -> [f64; 5] {
    [
        l.peak_objects,
        l.peak_bytes,
        l.freed_total(),
        l.freed_within(1e6),
        l.freed_within(1e9),
    ]
}

/// Numeric labels of a stack with lifetimes: `lifetime_median` and `live_age` (nanoseconds, for
/// `go tool pprof -tagfocus lifetime_median=:1ms`), `inuse_prev` (bytes) and the freed bytes per
/// lifetime decade (`freed_lt_1us` … `freed_ge_100s`, what `read` rebuilds the histogram from).
struct LifeKeys {
    median: i64,
    age: i64,
    prev: i64,
    ns: i64,
    bytes: i64,
    decades: Vec<i64>,
}

const DECADE_NAMES: [&str; LIFE_BUCKETS] = [
    "freed_lt_1us",
    "freed_lt_10us",
    "freed_lt_100us",
    "freed_lt_1ms",
    "freed_lt_10ms",
    "freed_lt_100ms",
    "freed_lt_1s",
    "freed_lt_10s",
    "freed_lt_100s",
    "freed_ge_100s",
];

impl LifeKeys {
    fn new(st: &mut Strings) -> Self {
        LifeKeys {
            median: st.id("lifetime_median"),
            age: st.id("live_age"),
            prev: st.id("inuse_prev"),
            ns: st.id("nanoseconds"),
            bytes: st.id("bytes"),
            decades: DECADE_NAMES.iter().map(|n| st.id(n)).collect(),
        }
    }

    fn labels(&self, l: &Life) -> Vec<proto::Label> {
        let num = |key: i64, v: f64, unit: i64| proto::Label {
            key,
            str: 0,
            num: v.round() as i64,
            num_unit: unit,
        };
        let mut out = Vec::new();
        if let Some(m) = l.median_ns() {
            out.push(num(self.median, m, self.ns));
        }
        if l.live_age_ns > 0.0 {
            out.push(num(self.age, l.live_age_ns, self.ns));
        }
        if l.prev_inuse_bytes > 0.0 {
            out.push(num(self.prev, l.prev_inuse_bytes, self.bytes));
        }
        for (k, &v) in l.freed.iter().enumerate() {
            if v > 0.0 {
                out.push(num(self.decades[k], v, self.bytes));
            }
        }
        out
    }
}

/// The views' process facts as one comment (`memlens-views:`); the timeline has a field of its own.
fn views_comments(v: &Views) -> Vec<String> {
    vec![format!(
        "memlens-views: heap={} heap_max={} heap_max_ns={} peak={} peak_ns={} split_peak={} \
         split_peak_ns={} disabled={} allocator={}",
        v.heap_bytes.round() as i64,
        v.heap_max_bytes.round() as i64,
        v.heap_max_ns,
        v.peak_bytes.round() as i64,
        v.peak_ns,
        v.split_peak_bytes.round() as i64,
        v.split_peak_ns,
        v.disabled as u8,
        v.allocator
    )]
}

fn timeline_values(v: &Views) -> Vec<i64> {
    v.timeline
        .iter()
        .flat_map(|t| t.to_raw().into_iter().take(5))
        .collect()
}

fn timeline_mmap(v: &Views) -> Vec<i64> {
    v.timeline.iter().map(|t| t.to_raw()[5]).collect()
}

/// The 5 values a point, and its anonymous mappings when the file has them (unknown when not).
fn read_timeline(v: &mut Views, vals: &[i64], mmap: &[i64]) {
    v.timeline = vals
        .chunks_exact(5)
        .enumerate()
        .map(|(i, c)| {
            let m = mmap.get(i).copied().unwrap_or(-1);
            TimePoint::from_raw([c[0], c[1], c[2], c[3], c[4], m])
        })
        .collect();
}

/// Read a `views_comments` line back into `v`.
fn parse_views_comment(v: &mut Option<Views>, c: &str) {
    if let Some(rest) = c.strip_prefix("memlens-views: ") {
        let v = v.get_or_insert_with(Views::default);
        for kv in rest.split(' ') {
            let Some((k, x)) = kv.split_once('=') else {
                continue;
            };
            let n = || x.parse::<f64>().unwrap_or(0.0);
            match k {
                "heap" => v.heap_bytes = n(),
                "heap_max" => v.heap_max_bytes = n(),
                "heap_max_ns" => v.heap_max_ns = n() as u64,
                "peak" => v.peak_bytes = n(),
                "peak_ns" => v.peak_ns = n() as u64,
                "split_peak" => v.split_peak_bytes = n(),
                "split_peak_ns" => v.split_peak_ns = n() as u64,
                "allocator" => v.allocator = x.to_string(),
                "disabled" => v.disabled = x == "1",
                _ => {}
            }
        }
    }
}

/// A sample's lifetimes from its extra values (`cols`: where each of LIFE_TYPES sits) and labels
/// (key, num).
fn read_life(
    value: &[i64],
    label: &[(i64, i64)],
    cols: &[Option<usize>; 5],
    st: &[String],
) -> Option<Life> {
    cols.iter().any(Option::is_some).then_some(())?;
    let val = |i: usize| cols[i].map_or(0.0, |k| value[k] as f64);
    let mut l = Life {
        peak_objects: val(0),
        peak_bytes: val(1),
        ..Life::default()
    };
    for &(key, num) in label {
        let Some(key) = usize::try_from(key).ok().and_then(|k| st.get(k)) else {
            continue;
        };
        if let Some(k) = DECADE_NAMES.iter().position(|n| n == key) {
            l.freed[k] = num as f64;
        } else if key == "live_age" {
            l.live_age_ns = num as f64;
        } else if key == "inuse_prev" {
            l.prev_inuse_bytes = num as f64;
        }
    }
    Some(l)
}

/// The prefix of a runtime note's comment (`Meta::notes`): what memlens could and could not see.
const NOTE: &str = "memlens-note: ";

fn meta_comments(m: &Meta) -> Vec<String> {
    let mut view = if m.view.is_empty() {
        String::new()
    } else {
        format!(" view={}", m.view)
    };
    // Only when it happened: the comment of every other profile stays as it was.
    if m.table_full > 0 {
        view += &format!(" table_full={} max_stacks={}", m.table_full, m.max_stacks);
    }
    if m.untracked > 0 {
        view += &format!(" untracked={}", m.untracked);
    }
    // The command has no spaces (the runtime cuts argv[0] at the first); exe, which may, is last.
    if !m.command.is_empty() && !m.command.contains(' ') {
        view += &format!(" cmd={}", m.command);
    }
    vec![format!(
        "memlens: pid={} ppid={} interval={} unwinder={} active={} reason={} start_ns={} samples={} \
         truncated={} dropped={} unwind_fallbacks={} max_depth={} dropped_bytes={}{view} exe={}",
        m.pid,
        m.ppid,
        m.interval,
        m.unwinder,
        m.active as u8,
        m.reason,
        m.start_ns,
        m.samples,
        m.truncated,
        m.dropped,
        m.unwind_fallbacks,
        m.max_depth,
        m.dropped_bytes,
        m.exe
    )]
}

/// What profiling had cost the process, in words and as `key=value`s (read back by
/// [`parse_cost_comment`]); none from a runtime that does not account it.
fn cost_comment(c: &crate::model::Cost) -> Option<String> {
    let share = c.share_pct()?;
    Some(format!(
        "memlens-cost: the profiler's sampled path took {:.6} s of CPU, {share:.2}% of the process's {:.3} s; \
         {} allocation calls while sampling (estimated) | sampled_ns={} calls={} cpu_ns={}",
        c.sampled_ns as f64 / 1e9,
        c.cpu_ns as f64 / 1e9,
        c.calls,
        c.sampled_ns,
        c.calls,
        c.cpu_ns
    ))
}

fn parse_cost_comment(m: &mut Meta, c: &str) {
    let Some((_, kv)) = c
        .strip_prefix("memlens-cost: ")
        .and_then(|r| r.split_once(" | "))
    else {
        return;
    };
    for (k, v) in kv.split(' ').filter_map(|x| x.split_once('=')) {
        let n = v.parse::<u64>().unwrap_or(0);
        match k {
            "sampled_ns" => m.cost.sampled_ns = n,
            "calls" => m.cost.calls = n,
            "cpu_ns" => m.cost.cpu_ns = n,
            _ => {}
        }
    }
}

fn parse_comment(m: &mut Meta, c: &str) {
    let Some(rest) = c.strip_prefix("memlens: ") else {
        return;
    };
    let (fields, exe) = rest.split_once(" exe=").unwrap_or((rest, ""));
    m.exe = exe.to_string();
    for kv in fields.split(' ') {
        let Some((k, v)) = kv.split_once('=') else {
            continue;
        };
        let n = || v.parse::<u64>().unwrap_or(0);
        match k {
            "pid" => m.pid = n() as u32,
            "ppid" => m.ppid = n() as u32,
            "interval" => m.interval = n(),
            "unwinder" => m.unwinder = v.to_string(),
            "active" => m.active = n() != 0,
            "reason" => m.reason = v.to_string(),
            "start_ns" => m.start_ns = n(),
            "samples" => m.samples = n(),
            "truncated" => m.truncated = n(),
            "dropped" => m.dropped = n(),
            "dropped_bytes" => m.dropped_bytes = n(),
            "max_depth" => m.max_depth = n() as u32,
            "view" => m.view = v.to_string(),
            "table_full" => m.table_full = n(),
            "max_stacks" => m.max_stacks = n(),
            "untracked" => m.untracked = n(),
            "cmd" => m.command = v.to_string(),
            _ => {}
        }
    }
}

/// Write `p` as gzipped pprof to `path`.
pub fn write(p: &Profile, path: &Path) -> Result<()> {
    let f =
        std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?;
    let mut w = std::io::BufWriter::with_capacity(1 << 16, f);
    write_gz(p, &mut w)
        .and_then(|_| Ok(w.flush()?))
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Write `p` gzipped to `w`, one sample at a time: the bytes are those of
/// `to_proto(p).encode_to_vec()` (prost writes fields in tag order, so the sample types, then
/// every sample, then the rest), without the whole message in memory.
pub fn write_gz(p: &Profile, w: &mut dyn Write) -> Result<()> {
    let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::default());
    write_plain(p, &mut gz)?;
    gz.finish()?;
    Ok(())
}

/// [`write_gz`] without the gzip.
pub fn write_plain(p: &Profile, w: &mut dyn Write) -> Result<()> {
    use prost::Message;
    let (mut rest, enc) = proto_without_samples(p);
    let head = proto::Profile {
        sample_type: std::mem::take(&mut rest.sample_type),
        ..Default::default()
    };
    let mut buf = head.encode_to_vec();
    for s in &p.samples {
        prost::encoding::message::encode(2, &enc.sample(s), &mut buf);
        if buf.len() >= 1 << 16 {
            w.write_all(&buf)?;
            buf.clear();
        }
    }
    w.write_all(&buf)?;
    w.write_all(&rest.encode_to_vec())?;
    Ok(())
}

/// Samples as read, before the string table and the locations they refer to are known (pprof
/// writes samples first): location ids as in the file, values and labels raw. What a streamed read
/// holds until the end of the input.
#[derive(Default)]
pub(crate) struct Pending {
    samples: Vec<Sample>,
    values: Vec<i64>,
    value_end: Vec<usize>,
    /// (key, num) of every label; pprof's `str` is only needed to tell `pprof::base`, by its key.
    labels: Vec<(i64, i64)>,
    label_end: Vec<usize>,
}

impl Pending {
    /// Keep one sample; returns the bytes now held for it.
    pub(crate) fn push(&mut self, x: proto::Sample) -> u64 {
        let held = std::mem::size_of::<Sample>()
            + 2 * std::mem::size_of::<usize>()
            + 8 * (x.location_id.len() + x.value.len())
            + 16 * x.label.len();
        self.values.extend_from_slice(&x.value);
        self.value_end.push(self.values.len());
        self.labels.extend(x.label.iter().map(|l| (l.key, l.num)));
        self.label_end.push(self.labels.len());
        let mut locations = x.location_id;
        locations.shrink_to_fit();
        self.samples.push(Sample {
            locations,
            ..Sample::default()
        });
        held as u64
    }
}

/// The model of `m` (whose own `sample` is ignored) with the samples of `pending`.
pub(crate) fn build(m: &proto::Profile, pending: Pending) -> Result<Profile> {
    let st = &m.string_table;
    if st.first().is_none_or(|s| !s.is_empty()) {
        bail!("not a pprof profile (string table does not start with \"\")");
    }
    let (col, life_col) = columns(m)?;
    let (meta, views) = read_meta(m, col)?;
    let mappings = read_mappings(m)?;
    let functions = read_functions(m)?;
    let locations = read_locations(m)?;
    let samples = read_samples(m, pending, col, &life_col)?;
    Ok(Profile {
        meta,
        mappings,
        functions,
        locations,
        samples,
        views,
    })
}

/// String `i` of the profile's string table.
fn string(m: &proto::Profile, i: i64) -> Result<String> {
    usize::try_from(i)
        .ok()
        .and_then(|i| m.string_table.get(i))
        .cloned()
        .ok_or_else(|| anyhow!("bad string index {i}"))
}

/// Where each of our four values, and each lifetime value, sits among a file's sample types.
type Columns = ([Option<usize>; 4], [Option<usize>; 5]);

/// The [`Columns`] of `m` (a Go heap profile matches); an error when none of the four is there.
fn columns(m: &proto::Profile) -> Result<Columns> {
    let s = |i: i64| string(m, i);
    let mut col = [None; 4];
    let mut life_col = [None; 5];
    for (k, t) in m.sample_type.iter().enumerate() {
        let name = s(t.r#type)?;
        if let Some(i) = SampleIndex::ALL.iter().position(|x| x.name() == name) {
            col[i] = Some(k);
        }
        if let Some(i) = LIFE_TYPES.iter().position(|x| x.0 == name) {
            life_col[i] = Some(k);
        }
    }
    if col.iter().all(Option::is_none) {
        let names: Vec<String> = m
            .sample_type
            .iter()
            .filter_map(|t| s(t.r#type).ok())
            .collect();
        bail!(
            "not a heap profile (sample types: {})",
            if names.is_empty() {
                "none".into()
            } else {
                names.join(", ")
            }
        );
    }
    Ok((col, life_col))
}

/// The profile's facts (period, times, what it lacks, memlens's comments) and its views.
fn read_meta(m: &proto::Profile, col: [Option<usize>; 4]) -> Result<(Meta, Option<Views>)> {
    let mut meta = Meta {
        interval: m.period.max(0) as u64,
        time_ns: m.time_nanos.max(0) as u64,
        absent: SampleIndex::ALL
            .iter()
            .zip(col)
            .filter(|(_, c)| c.is_none())
            .map(|(&i, _)| i)
            .collect(),
        ..Meta::default()
    };
    meta.start_ns = meta.time_ns.saturating_sub(m.duration_nanos.max(0) as u64);
    let mut views = None;
    for &c in &m.comment {
        let c = string(m, c)?;
        parse_comment(&mut meta, &c);
        parse_cost_comment(&mut meta, &c);
        if let Some(n) = c.strip_prefix(NOTE) {
            meta.notes.push(n.to_string());
        }
        parse_views_comment(&mut views, &c);
    }
    if let Some(v) = &mut views {
        read_timeline(v, &m.memlens_timeline, &m.memlens_timeline_mmap);
    }
    Ok((meta, views))
}

/// Ids as the file numbers them → our 1-based positions.
fn positions(ids: impl Iterator<Item = u64>) -> HashMap<u64, u64> {
    ids.enumerate().map(|(i, id)| (id, i as u64 + 1)).collect()
}

fn read_mappings(m: &proto::Profile) -> Result<Vec<Mapping>> {
    let s = |i: i64| string(m, i);
    m.mapping
        .iter()
        .map(|x| {
            Ok(Mapping {
                start: x.memory_start,
                limit: x.memory_limit,
                offset: x.file_offset,
                filename: s(x.filename)?,
                build_id: s(x.build_id)?,
                has_functions: x.has_functions,
                has_filenames: x.has_filenames,
                has_line_numbers: x.has_line_numbers,
                has_inline_frames: x.has_inline_frames,
            })
        })
        .collect()
}

fn read_functions(m: &proto::Profile) -> Result<Vec<Function>> {
    let s = |i: i64| string(m, i);
    m.function
        .iter()
        .map(|f| {
            Ok(Function {
                name: s(f.name)?,
                system_name: s(f.system_name)?,
                filename: s(f.filename)?,
                start_line: f.start_line,
            })
        })
        .collect()
}

/// The locations, their mappings and functions renumbered to our positions.
fn read_locations(m: &proto::Profile) -> Result<Vec<Location>> {
    let map_ids = positions(m.mapping.iter().map(|x| x.id));
    let fn_ids = positions(m.function.iter().map(|x| x.id));
    m.location
        .iter()
        .map(|l| {
            let mapping = if l.mapping_id == 0 {
                0
            } else {
                *map_ids
                    .get(&l.mapping_id)
                    .ok_or_else(|| anyhow!("location refers to unknown mapping {}", l.mapping_id))?
            };
            let lines = l
                .line
                .iter()
                .map(|x| {
                    let function = *fn_ids.get(&x.function_id).ok_or_else(|| {
                        anyhow!("line refers to unknown function {}", x.function_id)
                    })?;
                    Ok(Line {
                        function,
                        line: x.line,
                    })
                })
                .collect::<Result<_>>()?;
            Ok(Location {
                mapping,
                address: l.address,
                lines,
            })
        })
        .collect()
}

/// The samples of `pending` with their location ids renumbered, our four values, their sample
/// counts, diff-base marks and lifetimes.
fn read_samples(
    m: &proto::Profile,
    pending: Pending,
    col: [Option<usize>; 4],
    life_col: &[Option<usize>; 5],
) -> Result<Vec<Sample>> {
    let st = &m.string_table;
    // Files written by memlens and Go number locations 1, 2, …: no map needed then.
    let dense = m
        .location
        .iter()
        .enumerate()
        .all(|(i, x)| x.id == i as u64 + 1);
    let loc_ids: HashMap<u64, u64> = if dense {
        HashMap::new()
    } else {
        positions(m.location.iter().map(|x| x.id))
    };
    let nloc = m.location.len() as u64;
    let key_of = |name: &str| st.iter().position(|x| x == name).map(|i| i as i64);
    let (samples_key, base_key) = (key_of(SAMPLES_LABEL), key_of(BASE_LABEL));
    let Pending {
        mut samples,
        values,
        value_end,
        labels,
        label_end,
    } = pending;
    let (mut v0, mut l0) = (0, 0);
    for (i, out) in samples.iter_mut().enumerate() {
        let (value, label) = (&values[v0..value_end[i]], &labels[l0..label_end[i]]);
        (v0, l0) = (value_end[i], label_end[i]);
        if value.len() != m.sample_type.len() {
            bail!(
                "sample has {} values for {} sample types",
                value.len(),
                m.sample_type.len()
            );
        }
        for id in out.locations.iter_mut() {
            let known = if dense {
                (1..=nloc).contains(id).then_some(*id)
            } else {
                loc_ids.get(id).copied()
            };
            *id = known.ok_or_else(|| anyhow!("sample refers to unknown location {id}"))?;
        }
        out.set_values(col.map(|c| c.map_or(0.0, |k| value[k] as f64)));
        out.samples = label
            .iter()
            .find(|l| Some(l.0) == samples_key)
            .map_or(0, |l| l.1.max(0) as u64);
        out.diff_base = label.iter().any(|l| Some(l.0) == base_key);
        out.life = read_life(value, label, life_col, st).map(Box::new);
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Function, Line, Location, Mapping, Meta, Profile, Sample};

    // the round trip the tests read back through (the crate itself reads files: `pprof_read`)
    /// The gzipped protobuf bytes of `p`.
    fn encode_gz(p: &Profile) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        write_gz(p, &mut out)?;
        Ok(out)
    }

    /// Decode pprof bytes (gzipped or not) into the model.
    fn decode(bytes: &[u8]) -> Result<Profile> {
        crate::pprof_read::read(
            bytes,
            &crate::input::Allowance::fixed(crate::input::budget()),
        )
    }

    /// Translate profile.proto messages into the model, validating every reference.
    fn from_proto(m: &proto::Profile) -> Result<Profile> {
        let mut pending = Pending::default();
        for x in &m.sample {
            pending.push(x.clone());
        }
        build(m, pending)
    }

    pub(crate) fn sample_profile() -> Profile {
        Profile {
            meta: Meta {
                pid: 7,
                ppid: 1,
                exe: "/opt/my app/server".into(),
                command: "server-link".into(),
                interval: 524288,
                unwinder: "fp".into(),
                active: true,
                reason: "ctl".into(),
                start_ns: 1_000,
                time_ns: 5_000,
                samples: 9,
                truncated: 2,
                dropped: 1,
                unwind_fallbacks: 0,
                max_depth: 64,
                dropped_bytes: 4096,
                max_stacks: 1024,
                table_full: 3,
                untracked: 2,
                view: String::new(),
                absent: Vec::new(),
                cost: crate::model::Cost {
                    sampled_ns: 430_942,
                    calls: 249_077,
                    cpu_ns: 36_992_568,
                },
                notes: vec!["app allocates through jemalloc linked into it (_rjem_*): hooked 14 entry points".into()],
            },
            mappings: vec![Mapping {
                start: 0x1000,
                limit: 0x9000,
                offset: 0x1000,
                filename: "/opt/my app/server".into(),
                build_id: "abcd".into(),
                has_functions: true,
                has_filenames: true,
                has_line_numbers: true,
                has_inline_frames: true,
            }],
            functions: vec![
                Function {
                    name: "leaf".into(),
                    system_name: "leaf".into(),
                    filename: "a.c".into(),
                    start_line: 0,
                },
                Function {
                    name: "ns::f(int)".into(),
                    system_name: "_ZN2ns1fEi".into(),
                    filename: "b.cc".into(),
                    start_line: 3,
                },
            ],
            locations: vec![
                Location {
                    mapping: 1,
                    address: 0x1234,
                    lines: vec![
                        Line {
                            function: 1,
                            line: 10,
                        },
                        Line {
                            function: 2,
                            line: 20,
                        },
                    ],
                },
                Location {
                    mapping: 0,
                    address: 0x7fff0000,
                    lines: vec![],
                },
            ],
            samples: vec![
                Sample {
                    locations: vec![1, 2],
                    alloc_objects: 3.0,
                    alloc_bytes: 3000.0,
                    inuse_objects: 1.0,
                    inuse_bytes: 1000.0,
                    samples: 3,
                    diff_base: false,
                    life: None,
                },
                Sample {
                    locations: vec![2],
                    alloc_objects: 1.0,
                    alloc_bytes: 64.0,
                    inuse_objects: 0.0,
                    inuse_bytes: 0.0,
                    samples: 1,
                    diff_base: true,
                    life: None,
                },
            ],
            views: None,
        }
    }

    #[test]
    fn lifetimes_peak_and_timeline_read_back() {
        let mut p = sample_profile();
        let mut freed = [0.0; LIFE_BUCKETS];
        freed[2] = 4096.0;
        freed[7] = 100.0;
        p.samples[0].life = Some(Box::new(Life {
            peak_objects: 2.0,
            peak_bytes: 2048.0,
            freed,
            live_age_ns: 5e8,
            prev_inuse_bytes: 512.0,
        }));
        p.samples[1].life = Some(Box::default());
        let point = |t: u64, h: f64| TimePoint {
            time_ns: t,
            heap_bytes: h,
            rss_bytes: Some(h * 2.0),
            allocator_in_use: None,
            allocator_footprint: Some(7.0),
            mmap_bytes: (t == 2).then_some(64.0),
        };
        p.views = Some(Views {
            heap_bytes: 10.0,
            heap_max_bytes: 20.0,
            heap_max_ns: 3,
            peak_bytes: 19.0,
            peak_ns: 2,
            split_peak_bytes: 17.0,
            split_peak_ns: 2,
            allocator: "glibc".into(),
            disabled: false,
            timeline: vec![point(1, 5.0), point(2, 19.0)],
        });
        let q = decode(&encode_gz(&p).unwrap()).unwrap();
        assert_eq!(q, p);
        let names: Vec<String> = {
            let m = to_proto(&p);
            m.sample_type
                .iter()
                .map(|t| m.string_table[t.r#type as usize].clone())
                .collect()
        };
        assert!(names.ends_with(&["freed_1ms_space".into(), "freed_1s_space".into()]));
    }

    #[test]
    fn streamed_bytes_are_the_whole_message() {
        use prost::Message;
        let mut p = sample_profile();
        p.samples[0].life = Some(Box::new(Life {
            peak_bytes: 7.0,
            ..Life::default()
        }));
        for p in [sample_profile(), p] {
            let mut streamed = Vec::new();
            write_plain(&p, &mut streamed).unwrap();
            assert_eq!(streamed, to_proto(&p).encode_to_vec());
        }
    }

    #[test]
    fn write_then_read_back_is_equal() {
        let p = sample_profile();
        let bytes = encode_gz(&p).unwrap();
        assert_eq!(&bytes[..2], &[0x1f, 0x8b]);
        assert_eq!(decode(&bytes).unwrap(), p);
        // the runtime's own account of its cost, in words in the comments pprof prints
        let m = to_proto(&p);
        let cost = m
            .comment
            .iter()
            .map(|&c| &m.string_table[c as usize])
            .find(|c| c.starts_with("memlens-cost: "))
            .expect("no cost comment");
        assert!(
            cost.contains("took 0.000431 s of CPU, 1.16% of the process's 0.037 s"),
            "{cost}"
        );
        // Plain (not gzipped) protobuf reads too.
        use prost::Message;
        assert_eq!(decode(&to_proto(&p).encode_to_vec()).unwrap(), p);
    }

    #[test]
    fn sample_types_period_and_rounding() {
        let mut p = sample_profile();
        p.samples[0].alloc_bytes = 2999.6;
        let m = to_proto(&p);
        let names: Vec<&str> = m
            .sample_type
            .iter()
            .map(|t| m.string_table[t.r#type as usize].as_str())
            .collect();
        assert_eq!(
            names,
            [
                "alloc_objects",
                "alloc_space",
                "inuse_objects",
                "inuse_space"
            ]
        );
        let units: Vec<&str> = m
            .sample_type
            .iter()
            .map(|t| m.string_table[t.unit as usize].as_str())
            .collect();
        assert_eq!(units, ["count", "bytes", "count", "bytes"]);
        assert_eq!(m.period, 524288);
        let pt = m.period_type.as_ref().unwrap();
        assert_eq!(
            (
                m.string_table[pt.r#type as usize].as_str(),
                m.string_table[pt.unit as usize].as_str()
            ),
            ("space", "bytes")
        );
        assert_eq!(m.sample[0].value[1], 3000);
        assert_eq!(m.string_table[m.mapping[0].build_id as usize], "abcd");
    }

    #[test]
    fn corrupt_input_is_an_error_not_a_panic() {
        let good = encode_gz(&sample_profile()).unwrap();
        let e = format!("{:#}", decode(&good[..good.len() / 2]).unwrap_err());
        assert!(e.contains("corrupt gzip"), "{e}");
        // Deterministic pseudo-random bytes.
        let mut x = 0x2545F4914F6CDD1Du64;
        let junk: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        assert!(decode(&junk).is_err());
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&junk).unwrap();
        assert!(decode(&gz.finish().unwrap()).is_err());
        // A valid protobuf that is not a heap profile.
        use prost::Message;
        let cpu = proto::Profile {
            sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
            string_table: vec!["".into(), "cpu".into(), "nanoseconds".into()],
            ..Default::default()
        };
        let e = format!("{:#}", decode(&cpu.encode_to_vec()).unwrap_err());
        assert!(e.contains("not a heap profile (sample types: cpu)"), "{e}");
        // A heap profile with only some of the four types: the others are absent, not zero.
        let space = proto::Profile {
            sample_type: vec![proto::ValueType { r#type: 1, unit: 2 }],
            string_table: vec!["".into(), "inuse_space".into(), "bytes".into()],
            ..Default::default()
        };
        let p = decode(&space.encode_to_vec()).unwrap();
        assert!(p.has(SampleIndex::InuseSpace) && !p.has(SampleIndex::AllocSpace));
        assert_eq!(p.meta.absent.len(), 3);
        let e = format!("{:#}", p.require(SampleIndex::AllocObjects).unwrap_err());
        assert!(
            e.contains("no alloc_objects values") && e.contains("inuse_space"),
            "{e}"
        );
        assert!(from_proto(&to_proto(&sample_profile()))
            .unwrap()
            .meta
            .absent
            .is_empty());
        // Dangling references.
        let mut bad = to_proto(&sample_profile());
        bad.sample[0].location_id.push(99);
        assert!(from_proto(&bad).is_err());
        let mut bad = to_proto(&sample_profile());
        bad.function[0].name = 10_000;
        assert!(from_proto(&bad).is_err());
    }
}
