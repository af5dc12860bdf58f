//! Aggregations shared by `report`, `diff` and the views: stacks merged by their symbolized frames
//! (function names, so that profiles of different processes of one program compare; or function,
//! file and line, so that two call sites of one function are two rows), per-function flat and
//! cumulative values, and value formatting.
//!
//! Built to scale with the profile: frames are interned once per location into [`Frames`] (shared
//! by both sides of a diff), a merged [`Stack`] is its first sample's index and the summed values,
//! and stacks are matched by hashing their name ids, not by owned strings. A frame becomes text
//! only when it is shown ([`Frames::frame`]).
use crate::model::{Frame, Life, Profile, Sample, SampleIndex};
use std::collections::HashMap;

/// An interned frame (function, file, line, inlined) of a [`Frames`] table.
pub type FrameId = u32;
/// An interned function name (or file name) of a [`Frames`] table.
pub type NameId = u32;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FrameRec {
    name: NameId,
    file: NameId,
    line: i64,
    inlined: bool,
    /// The path of the module the code is in (empty when unknown).
    module: NameId,
}

/// Interned names and frames. One table may serve several profiles: their stacks then compare by
/// ids.
#[derive(Debug, Default)]
pub struct Frames {
    strings: Vec<String>,
    string_ids: HashMap<String, NameId>,
    frames: Vec<FrameRec>,
    frame_ids: HashMap<FrameRec, FrameId>,
}

impl Frames {
    /// The id of a name (function or file), interned.
    pub fn intern(&mut self, s: &str) -> NameId {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        let i = self.strings.len() as NameId;
        self.strings.push(s.to_string());
        self.string_ids.insert(s.to_string(), i);
        i
    }

    fn frame_id(&mut self, r: FrameRec) -> FrameId {
        let n = self.frames.len() as FrameId;
        *self.frame_ids.entry(r).or_insert_with(|| {
            self.frames.push(r);
            n
        })
    }

    /// The text of a name id.
    pub fn str(&self, n: NameId) -> &str {
        &self.strings[n as usize]
    }

    /// The function name id of a frame (what stacks are merged by).
    pub fn name_id(&self, f: FrameId) -> NameId {
        self.frames[f as usize].name
    }

    /// The function name of a frame.
    pub fn name(&self, f: FrameId) -> &str {
        self.str(self.name_id(f))
    }

    /// A frame as reports show it.
    pub fn frame(&self, f: FrameId) -> Frame {
        let r = self.frames[f as usize];
        Frame {
            function: self.str(r.name).to_string(),
            file: self.str(r.file).to_string(),
            line: r.line,
            inlined: r.inlined,
            module: self.str(r.module).to_string(),
        }
    }

    /// How many distinct frames the table holds (ids `0..count`).
    pub fn count(&self) -> u32 {
        self.frames.len() as u32
    }

    /// The module (its path) the code of a frame is in; empty when unknown.
    pub fn module(&self, f: FrameId) -> &str {
        self.str(self.frames[f as usize].module)
    }

    /// Frames as reports show them.
    pub fn resolve(&self, ids: impl IntoIterator<Item = FrameId>) -> Vec<Frame> {
        ids.into_iter().map(|f| self.frame(f)).collect()
    }
}

/// Each location's frames (inlined calls expanded, innermost first) as interned ids.
#[derive(Debug)]
struct Index {
    start: Vec<u32>,
    ids: Vec<FrameId>,
}

impl Index {
    fn new(p: &Profile, fr: &mut Frames) -> Index {
        let empty = fr.intern("");
        let funcs: Vec<(NameId, NameId)> = p
            .functions
            .iter()
            .map(|f| (fr.intern(&f.name), fr.intern(&f.filename)))
            .collect();
        let mut start = Vec::with_capacity(p.locations.len() + 1);
        let mut ids = Vec::new();
        let modules: Vec<NameId> = p.mappings.iter().map(|m| fr.intern(&m.filename)).collect();
        for loc in &p.locations {
            start.push(ids.len() as u32);
            let module = modules
                .get((loc.mapping as usize).wrapping_sub(1))
                .copied()
                .unwrap_or(empty);
            if loc.lines.is_empty() {
                let name = fr.intern(&p.address_name(loc));
                ids.push(fr.frame_id(FrameRec {
                    name,
                    file: empty,
                    line: 0,
                    inlined: false,
                    module,
                }));
                continue;
            }
            let last = loc.lines.len() - 1;
            for (k, l) in loc.lines.iter().enumerate() {
                let (name, file) = match funcs.get((l.function as usize).wrapping_sub(1)) {
                    Some(&f) => f,
                    None => (fr.intern(&p.address_name(loc)), empty),
                };
                ids.push(fr.frame_id(FrameRec {
                    name,
                    file,
                    line: l.line,
                    inlined: k != last,
                    module,
                }));
            }
        }
        start.push(ids.len() as u32);
        Index { start, ids }
    }

    /// The frames of a location id (index + 1); none for an unknown id.
    fn location(&self, id: u64) -> &[FrameId] {
        let i = (id as usize).wrapping_sub(1);
        match (self.start.get(i), self.start.get(i + 1)) {
            (Some(&a), Some(&b)) => &self.ids[a as usize..b as usize],
            _ => &[],
        }
    }

    fn sample<'a>(&'a self, s: &'a Sample) -> impl Iterator<Item = FrameId> + 'a {
        s.locations
            .iter()
            .flat_map(move |&l| self.location(l).iter().copied())
    }
}

/// A stack merged by function names: the first sample met with these names (whose frames, with
/// their files and lines, stand for the stack) and all four values summed.
#[derive(Debug, Clone, Copy)]
pub struct Stack {
    /// Index of the first sample in the profile.
    pub sample: u32,
    /// Position in [`Stacks::list`] when built (sorting keeps it).
    pub id: u32,
    /// Values per sample index, in [`SampleIndex`] order.
    pub values: [f64; 4],
    /// Samples merged into this stack.
    pub samples: u64,
    /// Hash of what it was merged by (its names, or its frames): what a diff matches stacks by.
    hash: u64,
}

impl Stack {
    /// The value of one sample index.
    pub fn get(&self, i: SampleIndex) -> f64 {
        self.values[i as usize]
    }
}

/// Finds entries by a 64-bit hash of their name sequence, telling collisions apart with `same`.
#[derive(Default)]
struct SeqMap {
    first: HashMap<u64, u32, U64Hash>,
    next: Vec<u32>,
}

/// Hashing for u64 keys (code addresses, hashes of name sequences): one multiply, folded, instead
/// of SipHash. Not a defence against chosen collisions: the keys come from the profiled process's
/// own memory, and a crafted file only slows its own reading.
#[derive(Default, Clone, Copy)]
pub(crate) struct U64Hash;

impl std::hash::BuildHasher for U64Hash {
    type Hasher = U64Hasher;
    fn build_hasher(&self) -> U64Hasher {
        U64Hasher(0)
    }
}

pub(crate) struct U64Hasher(u64);

impl std::hash::Hasher for U64Hasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, v: u64) {
        let m = u128::from(v ^ self.0) * 0x9E3779B97F4A7C15_u128;
        self.0 = (m as u64) ^ ((m >> 64) as u64);
    }
}

impl SeqMap {
    /// The entry whose sequence hashes to `h` and is `same`, or `new` (the next entry's index), added.
    fn find_or_add(&mut self, h: u64, new: u32, same: impl Fn(u32) -> bool) -> Option<u32> {
        let mut at = self.first.get(&h).copied();
        while let Some(i) = at {
            if same(i) {
                return Some(i);
            }
            at = Some(self.next[i as usize]).filter(|&n| n != u32::MAX);
        }
        let old = self.first.insert(h, new).unwrap_or(u32::MAX);
        debug_assert_eq!(self.next.len(), new as usize);
        self.next.push(old);
        None
    }
}

/// What stacks are merged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    /// Function names: profiles of different processes of one program compare.
    Names,
    /// Function, file and line of every frame (as `go tool pprof -lines` and heaptrack list them).
    Lines,
}

impl Key {
    fn of(self, fr: &Frames, f: FrameId) -> u32 {
        match self {
            Key::Names => fr.name_id(f),
            Key::Lines => f,
        }
    }
}

fn hash_key(key: Key, fr: &Frames, frames: impl Iterator<Item = FrameId>) -> u64 {
    let mut h = 0xcbf29ce484222325u64;
    for f in frames {
        h = (h ^ u64::from(key.of(fr, f))).wrapping_mul(0x100000001b3);
        h ^= h >> 29;
    }
    h
}

fn same_key(
    key: Key,
    fr: &Frames,
    a: impl Iterator<Item = FrameId>,
    b: impl Iterator<Item = FrameId>,
) -> bool {
    a.map(|f| key.of(fr, f)).eq(b.map(|f| key.of(fr, f)))
}

/// The stacks of one profile merged by function names ([`Stacks::new`]) or by lines
/// ([`Stacks::by_line`]), from one pass over its samples: the four values, and the views' columns
/// when the profile has them.
#[derive(Debug)]
pub struct Stacks<'p> {
    /// The profile.
    pub profile: &'p Profile,
    index: Index,
    /// Merged stacks, in first-seen order until sorted.
    pub list: Vec<Stack>,
    /// The views' columns summed, and the sum of live age × live bytes, of the stacks (by
    /// [`Stack::id`]) that merged several samples; a stack of one sample reads its sample's.
    merged_life: HashMap<u32, (Life, f64)>,
    key: Key,
}

impl<'p> Stacks<'p> {
    /// Merge the samples of `p` by function names, interning its frames into `fr`.
    pub fn new(p: &'p Profile, fr: &mut Frames) -> Stacks<'p> {
        Stacks::merge(p, fr, Key::Names)
    }

    /// Merge the samples of `p` by their frames' function, file and line: two call sites in one
    /// function stay two stacks, each with its own line.
    pub fn by_line(p: &'p Profile, fr: &mut Frames) -> Stacks<'p> {
        Stacks::merge(p, fr, Key::Lines)
    }

    fn merge(p: &'p Profile, fr: &mut Frames, key: Key) -> Stacks<'p> {
        let index = Index::new(p, fr);
        let mut list: Vec<Stack> = Vec::new();
        let mut merged_life: HashMap<u32, (Life, f64)> = HashMap::new();
        let mut map = SeqMap::default();
        let weighted = |s: &Sample| {
            s.life
                .as_deref()
                .map(|l| (l.clone(), l.live_age_ns * s.inuse_bytes))
        };
        for (k, s) in p.samples.iter().enumerate() {
            let h = hash_key(key, fr, index.sample(s));
            let new = list.len() as u32;
            let found = map.find_or_add(h, new, |i| {
                let first = &p.samples[list[i as usize].sample as usize];
                same_key(key, fr, index.sample(first), index.sample(s))
            });
            let i = match found {
                Some(i) => {
                    if let Some((l, aw)) = weighted(s) {
                        let first = &p.samples[list[i as usize].sample as usize];
                        let e = merged_life
                            .entry(i)
                            .or_insert_with(|| weighted(first).unwrap_or_default());
                        e.0.add(&l);
                        e.1 += aw;
                    }
                    i as usize
                }
                None => {
                    list.push(Stack {
                        sample: k as u32,
                        id: new,
                        values: [0.0; 4],
                        samples: 0,
                        hash: h,
                    });
                    new as usize
                }
            };
            let st = &mut list[i];
            for (a, b) in st.values.iter_mut().zip(s.values()) {
                *a += b;
            }
            st.samples += s.samples;
        }
        Stacks {
            profile: p,
            index,
            list,
            merged_life,
            key,
        }
    }

    /// The views' columns of a stack, summed over its samples (the live age is the bytes-weighted
    /// mean); default when the profile has none.
    pub fn life_of(&self, st: &Stack) -> Life {
        let (mut l, aw) = match self.merged_life.get(&st.id) {
            Some((l, aw)) => (l.clone(), *aw),
            None => {
                let s = &self.profile.samples[st.sample as usize];
                match s.life.as_deref() {
                    Some(l) => (l.clone(), l.live_age_ns * s.inuse_bytes),
                    None => return Life::default(),
                }
            }
        };
        l.live_age_ns = share(aw, st.get(SampleIndex::InuseSpace));
        l
    }

    /// The frames of a stack (those of its first sample), innermost first.
    pub fn frames(&self, st: &Stack) -> impl Iterator<Item = FrameId> + '_ {
        self.index.sample(&self.profile.samples[st.sample as usize])
    }

    /// The function names of a stack, innermost first: what stacks are merged by.
    pub fn key(&self, st: &Stack, fr: &Frames) -> Vec<String> {
        self.frames(st).map(|f| fr.name(f).to_string()).collect()
    }

    /// Sort by one value, largest first.
    pub fn sort_by(&mut self, idx: SampleIndex) {
        self.list.sort_by(|x, y| y.get(idx).total_cmp(&x.get(idx)));
    }
}

/// The stacks of two profiles (the sides of a diff) merged by function names: `(side, stack)`
/// pairs go in, one entry per distinct name sequence comes out with its value per side.
#[derive(Default)]
pub struct Merged {
    map: SeqMap,
    /// Per entry: (side, stack) of its first occurrence, and its value per side.
    pub entries: Vec<(usize, Stack, [f64; 2])>,
}

impl Merged {
    /// Add `st` of `all[side]` with value `v` (both sides merged alike: by names, or by lines).
    pub fn add(&mut self, all: &[&Stacks; 2], fr: &Frames, side: usize, st: &Stack, v: f64) {
        debug_assert_eq!(all[0].key, all[1].key, "both sides merged alike");
        let key = all[side].key;
        let h = st.hash;
        let new = self.entries.len() as u32;
        let entries = &self.entries;
        let found = self.map.find_or_add(h, new, |i| {
            let (s, first, _) = &entries[i as usize];
            same_key(key, fr, all[*s].frames(first), all[side].frames(st))
        });
        let i = match found {
            Some(i) => i as usize,
            None => {
                self.entries.push((side, *st, [0.0; 2]));
                new as usize
            }
        };
        self.entries[i].2[side] += v;
    }
}

/// A function's values: flat = where it is the innermost frame (it called the allocator),
/// cum = stacks it appears in at all (counted once per stack, also when recursive).
#[derive(Debug, Clone, Default)]
pub struct Func {
    /// Function name id.
    pub name: NameId,
    /// Source file id (of the first frame met), when known.
    pub file: NameId,
    /// Module file name id (of the first frame met), when known.
    pub module: NameId,
    /// Flat values per sample index.
    pub flat: [f64; 4],
    /// Cumulative values per sample index.
    pub cum: [f64; 4],
}

/// Flat and cumulative values of every function of `stacks` (each: its frames and its values).
pub fn functions<I>(fr: &Frames, stacks: impl Iterator<Item = (I, [f64; 4])>) -> Vec<Func>
where
    I: Iterator<Item = FrameId>,
{
    functions_by(fr, stacks, |f| fr.name_id(f))
}

/// [`functions`] with frames grouped by `group` (a small dense id per group: a function name id,
/// or a name as displayed), each group named by the first function met in it.
pub fn functions_by<I>(
    fr: &Frames,
    stacks: impl Iterator<Item = (I, [f64; 4])>,
    group: impl Fn(FrameId) -> u32,
) -> Vec<Func>
where
    I: Iterator<Item = FrameId>,
{
    let mut out: Vec<Func> = Vec::new();
    // Per group: its function's index + 1 and the last stack that counted it in `cum`.
    let mut slot: Vec<(u32, u32)> = Vec::new();
    for (k, (frames, values)) in stacks.enumerate() {
        let stamp = k as u32 + 1;
        for (j, f) in frames.enumerate() {
            let r = fr.frames[f as usize];
            let g = group(f) as usize;
            if slot.len() <= g {
                slot.resize(g + 1, (0, 0));
            }
            let s = &mut slot[g];
            if s.0 == 0 {
                out.push(Func {
                    name: r.name,
                    file: r.file,
                    module: r.module,
                    ..Func::default()
                });
                s.0 = out.len() as u32;
            }
            let func = &mut out[s.0 as usize - 1];
            if j == 0 {
                add(&mut func.flat, &values);
            }
            if s.1 != stamp {
                s.1 = stamp;
                add(&mut func.cum, &values);
            }
        }
    }
    out
}

/// A group per function as reports display it: its short name ([`crate::names::short_name`]), its
/// file and its module, so that the instantiations of one template (`std::vector<int>::push_back`,
/// `std::vector<char>::push_back`) are one row, and two functions of one short name in different
/// files or modules stay two. Indexed by frame id.
pub fn display_groups(fr: &Frames) -> Vec<u32> {
    let mut ids: HashMap<(String, NameId, NameId), u32> = HashMap::new();
    let mut by_name: HashMap<(NameId, NameId, NameId), u32> = HashMap::new();
    fr.frames
        .iter()
        .map(|r| {
            *by_name
                .entry((r.name, r.file, r.module))
                .or_insert_with(|| {
                    let key = (crate::names::short_name(fr.str(r.name)), r.file, r.module);
                    let n = ids.len() as u32;
                    *ids.entry(key).or_insert(n)
                })
        })
        .collect()
}

fn add(a: &mut [f64; 4], b: &[f64; 4]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

/// `part / whole`, 0 when the whole is 0.
pub fn share(part: f64, whole: f64) -> f64 {
    if whole == 0.0 {
        0.0
    } else {
        part / whole
    }
}

/// Bytes as `812 B`, `1.50 KiB`, `23.4 MiB`; counts as integers; `signed` adds `+` to growth.
pub fn fmt_value(v: f64, i: SampleIndex, signed: bool) -> String {
    let sign = if v < 0.0 {
        "-"
    } else if signed && v > 0.0 {
        "+"
    } else {
        ""
    };
    if !i.is_bytes() {
        return format!("{sign}{:.0}", v.abs());
    }
    if sign == "+" {
        format!("+{}", memlens_measure::units::format_bytes(v))
    } else {
        memlens_measure::units::format_bytes(v)
    }
}

/// A percentage with one decimal.
pub fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}

/// A sequence serialized from an iterator made when it is written: JSON of every stack without
/// every stack's frames in memory at once.
pub(crate) struct SerSeq<I>(std::cell::RefCell<Option<I>>);

impl<I> SerSeq<I> {
    pub(crate) fn new(it: I) -> Self {
        SerSeq(std::cell::RefCell::new(Some(it)))
    }
}

impl<I> serde::Serialize for SerSeq<I>
where
    I: Iterator,
    I::Item: serde::Serialize,
{
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let it = self.0.borrow_mut().take();
        s.collect_seq(it.into_iter().flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Function, Line, Location, Sample};

    /// Two samples with the same names (different addresses) and one with a recursive frame.
    fn profile() -> Profile {
        let f = |n: &str| Function {
            name: n.into(),
            ..Function::default()
        };
        let loc = |fid: u64, addr: u64| Location {
            mapping: 0,
            address: addr,
            lines: vec![Line {
                function: fid,
                line: 1,
            }],
        };
        let s = |locs: Vec<u64>, b: f64| Sample {
            locations: locs,
            alloc_bytes: b,
            alloc_objects: 1.0,
            ..Sample::default()
        };
        Profile {
            functions: vec![f("leaf"), f("mid"), f("main")],
            locations: vec![loc(1, 10), loc(1, 11), loc(2, 20), loc(3, 30)],
            samples: vec![
                s(vec![1, 3, 4], 100.0),
                s(vec![2, 3, 4], 50.0),
                s(vec![3, 3, 4], 25.0),
            ],
            ..Profile::default()
        }
    }

    #[test]
    fn merges_by_names_and_counts_cum_once() {
        let p = profile();
        let mut fr = Frames::default();
        let st = Stacks::new(&p, &mut fr);
        assert_eq!(st.list.len(), 2);
        assert_eq!(st.list[0].get(SampleIndex::AllocSpace), 150.0);
        assert_eq!(st.key(&st.list[1], &fr), ["mid", "mid", "main"]);
        let fs = functions(&fr, st.list.iter().map(|s| (st.frames(s), s.values)));
        let get = |n: &str| fs.iter().find(|f| fr.str(f.name) == n).unwrap().clone();
        let b = SampleIndex::AllocSpace as usize;
        assert_eq!(get("leaf").flat[b], 150.0);
        assert_eq!(get("mid").flat[b], 25.0);
        assert_eq!(get("mid").cum[b], 175.0); // recursive stack counted once
        assert_eq!(get("main").cum[b], 175.0);
        assert_eq!(get("main").flat[b], 0.0);
    }

    #[test]
    fn equal_hashes_of_different_names_stay_apart() {
        let p = profile();
        let mut fr = Frames::default();
        let st = Stacks::new(&p, &mut fr);
        // Force every sequence into one hash bucket: the chain must still tell them apart.
        let mut m = SeqMap::default();
        let s = &st.list;
        assert_eq!(m.find_or_add(7, 0, |_| false), None);
        let same = |i: u32, j: usize| {
            same_key(Key::Names, &fr, st.frames(&s[i as usize]), st.frames(&s[j]))
        };
        assert_eq!(m.find_or_add(7, 1, |i| same(i, 1)), None);
        assert_eq!(m.find_or_add(7, 2, |i| same(i, 1)), Some(1));
        assert_eq!(m.find_or_add(7, 2, |i| same(i, 0)), Some(0));
    }

    #[test]
    fn by_line_keeps_two_call_sites_of_one_function_apart() {
        let mut p = profile();
        p.locations[1].lines[0].line = 2; // leaf's second call site: another line
        let mut fr = Frames::default();
        assert_eq!(Stacks::new(&p, &mut fr).list.len(), 2);
        let st = Stacks::by_line(&p, &mut fr);
        assert_eq!(st.list.len(), 3);
        let leaf_lines: Vec<(i64, f64)> = st
            .list
            .iter()
            .map(|s| (fr.frame(st.frames(s).next().unwrap()), s))
            .filter(|(f, _)| f.function == "leaf")
            .map(|(f, s)| (f.line, s.get(SampleIndex::AllocSpace)))
            .collect();
        assert_eq!(leaf_lines, vec![(1, 100.0), (2, 50.0)]);
    }

    #[test]
    fn formats_values() {
        assert_eq!(fmt_value(812.0, SampleIndex::AllocSpace, false), "812 B");
        assert_eq!(
            fmt_value(1536.0, SampleIndex::AllocSpace, true),
            "+1.50 KiB"
        );
        assert_eq!(
            fmt_value(-3.0 * 1048576.0, SampleIndex::InuseSpace, true),
            "-3.00 MiB"
        );
        assert_eq!(fmt_value(41.6, SampleIndex::AllocObjects, false), "42");
        assert_eq!(pct(0.1234), "12.3%");
    }
}
