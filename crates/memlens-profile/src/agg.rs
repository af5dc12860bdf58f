//! Aggregations shared by `report` and `diff`: stacks merged by their symbolized frames (function
//! names, so that profiles of different processes of one program compare), per-function flat and
//! cumulative values, and value formatting.
use crate::model::{Frame, Profile, SampleIndex};
use std::collections::{HashMap, HashSet};

/// A stack with all four values summed over the samples that share its function names (or, from
/// [`stacks_by_line`], its frames' lines too).
#[derive(Debug, Clone)]
pub struct Stack {
    /// Innermost first; file/line of the first sample met with these names.
    pub frames: Vec<Frame>,
    /// Values per sample index, in [`SampleIndex`] order.
    pub values: [f64; 4],
    /// Samples merged into this stack.
    pub samples: u64,
}

impl Stack {
    /// The function names, innermost first: what stacks are merged by.
    pub fn key(&self) -> Vec<String> {
        self.frames.iter().map(|f| f.function.clone()).collect()
    }

    /// The value of one sample index.
    pub fn get(&self, i: SampleIndex) -> f64 {
        self.values[i as usize]
    }
}

/// Stacks merged by function names, in first-seen order.
pub fn stacks(p: &Profile) -> Vec<Stack> {
    merged(p, |frames| -> Vec<String> {
        frames.iter().map(|f| f.function.clone()).collect()
    })
}

/// Stacks merged by their frames' function, file and line (as `go tool pprof -lines` and
/// heaptrack list them): two call sites in one function stay two stacks, each with its own line.
pub fn stacks_by_line(p: &Profile) -> Vec<Stack> {
    merged(p, |frames| frames.to_vec())
}

/// Stacks merged by `key` of their frames, in first-seen order.
fn merged<K: std::hash::Hash + Eq>(p: &Profile, key: impl Fn(&[Frame]) -> K) -> Vec<Stack> {
    let mut out: Vec<Stack> = Vec::new();
    let mut index: HashMap<K, usize> = HashMap::new();
    for s in &p.samples {
        let frames = p.frames(s);
        let key = key(&frames);
        let vals = s.values();
        match index.get(&key) {
            Some(&i) => {
                let st = &mut out[i];
                for (a, b) in st.values.iter_mut().zip(vals) {
                    *a += b;
                }
                st.samples += s.samples;
            }
            None => {
                index.insert(key, out.len());
                out.push(Stack {
                    frames,
                    values: vals,
                    samples: s.samples,
                });
            }
        }
    }
    out
}

/// A function's values: flat = where it is the innermost frame (it called the allocator),
/// cum = stacks it appears in at all (counted once per stack, also when recursive).
#[derive(Debug, Clone, Default)]
pub struct Func {
    /// Function name.
    pub name: String,
    /// Source file, when known.
    pub file: String,
    /// Flat values per sample index.
    pub flat: [f64; 4],
    /// Cumulative values per sample index.
    pub cum: [f64; 4],
}

/// Flat and cumulative values of every function in `stacks`.
pub fn functions(stacks: &[Stack]) -> Vec<Func> {
    let mut out: Vec<Func> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut slot = |out: &mut Vec<Func>, f: &Frame| -> usize {
        *index.entry(f.function.clone()).or_insert_with(|| {
            out.push(Func {
                name: f.function.clone(),
                file: f.file.clone(),
                ..Func::default()
            });
            out.len() - 1
        })
    };
    for s in stacks {
        let mut seen = HashSet::new();
        for (k, f) in s.frames.iter().enumerate() {
            let i = slot(&mut out, f);
            if k == 0 {
                add(&mut out[i].flat, &s.values);
            }
            if seen.insert(i) {
                add(&mut out[i].cum, &s.values);
            }
        }
    }
    out
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
    let a = v.abs();
    if !i.is_bytes() {
        return format!("{sign}{a:.0}");
    }
    const U: [(&str, f64); 4] = [
        ("TiB", (1u64 << 40) as f64),
        ("GiB", (1u64 << 30) as f64),
        ("MiB", 1048576.0),
        ("KiB", 1024.0),
    ];
    for (name, unit) in U {
        if a >= unit {
            let x = a / unit;
            return if x >= 100.0 {
                format!("{sign}{x:.0} {name}")
            } else {
                format!("{sign}{x:.2} {name}")
            };
        }
    }
    format!("{sign}{a:.0} B")
}

/// A percentage with one decimal.
pub fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
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
        let st = stacks(&profile());
        assert_eq!(st.len(), 2);
        assert_eq!(st[0].get(SampleIndex::AllocSpace), 150.0);
        let fs = functions(&st);
        let get = |n: &str| fs.iter().find(|f| f.name == n).unwrap().clone();
        let b = SampleIndex::AllocSpace as usize;
        assert_eq!(get("leaf").flat[b], 150.0);
        assert_eq!(get("mid").flat[b], 25.0);
        assert_eq!(get("mid").cum[b], 175.0); // recursive stack counted once
        assert_eq!(get("main").cum[b], 175.0);
        assert_eq!(get("main").flat[b], 0.0);
    }

    #[test]
    fn by_line_keeps_two_call_sites_of_one_function_apart() {
        let mut p = profile();
        p.locations[1].lines[0].line = 2; // leaf's second call site: another line
        assert_eq!(stacks(&p).len(), 2);
        let st = stacks_by_line(&p);
        assert_eq!(st.len(), 3);
        let leaf_lines: Vec<(i64, f64)> = st
            .iter()
            .filter(|s| s.frames[0].function == "leaf")
            .map(|s| (s.frames[0].line, s.get(SampleIndex::AllocSpace)))
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
