//! A process's figures as a check reads them from its profile: peak, leak and bytes allocated,
//! in total and per stack, each with its sampling error ([`Est`]), known stacks set aside.
//!
//! Stacks are merged by their functions' names (inlined frames expanded), as `memlens diff` merges
//! them, so that a baseline made by another build of the program compares stack by stack.
use crate::allow::{Allow, FrameText};
use crate::estimate::Est;
use crate::limits::Kind;
use memlens_profile::{Profile, Sample, SampleIndex};
use serde::Serialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// One frame of a stack as the check shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ShownFrame {
    /// Function name (or `module+0x…` when unsymbolized).
    pub function: String,
    /// Source file, when known.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub file: String,
    /// Source line (0: unknown).
    #[serde(skip_serializing_if = "is_zero")]
    pub line: i64,
    /// The module it runs in.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub module: String,
    /// Code of the program's own (not a system library, a standard library or the allocator).
    pub own: bool,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// A stack and its figures.
#[derive(Debug, Clone)]
pub struct StackFig {
    /// Innermost first.
    pub frames: Vec<ShownFrame>,
    /// Peak, leak and allocated ([`Kind::index`]).
    pub figs: [Est; 3],
    /// The rule that set it aside, per kind.
    pub allowed: [Option<String>; 3],
}

impl StackFig {
    /// Its figure of `kind`.
    pub fn fig(&self, kind: Kind) -> &Est {
        &self.figs[kind.index()]
    }

    /// What it is matched by across profiles: its functions' names.
    pub fn key(&self) -> Vec<String> {
        self.frames.iter().map(|f| f.function.clone()).collect()
    }
}

/// The figures of one process.
#[derive(Debug)]
pub struct Figures {
    /// Its pid.
    pub pid: u32,
    /// Its executable.
    pub exe: String,
    /// The profile they were read from.
    pub file: PathBuf,
    /// The interval it was sampled at (0: exact).
    pub interval: u64,
    /// Stacks, in no order.
    pub stacks: Vec<StackFig>,
    index: HashMap<Vec<String>, usize>,
    /// Totals over the stacks not set aside, per kind.
    pub totals: [Est; 3],
    /// Stacks set aside and their bytes, per kind.
    pub allowed: [(usize, f64); 3],
    /// Whether the profile has this figure at all, per kind (and why not).
    pub missing: [Option<String>; 3],
    /// What the reader should know about these figures (truncation, dropped samples).
    pub notes: Vec<String>,
}

impl Figures {
    /// The figures of profile `p` (read from `file`), stacks matching `allow` set aside.
    pub fn of(p: &Profile, file: &Path, allow: &Allow) -> Figures {
        let interval = p.meta.interval;
        let mut f = Figures {
            pid: p.meta.pid,
            exe: p.meta.exe.clone(),
            file: file.to_path_buf(),
            interval,
            stacks: Vec::new(),
            index: HashMap::new(),
            totals: [Est::default(); 3],
            allowed: [(0, 0.0); 3],
            missing: absent(p),
            notes: Vec::new(),
        };
        for s in &p.samples {
            let frames = shown_frames(p, s);
            // the runtime's own (its control thread's TLS, allocated by glibc through our malloc)
            if frames.iter().any(|f| is_runtime(&f.module)) {
                continue;
            }
            let figs = sample_figs(s, interval);
            let key: Vec<String> = frames.iter().map(|x| x.function.clone()).collect();
            match f.index.get(&key) {
                Some(&i) => {
                    for (a, b) in f.stacks[i].figs.iter_mut().zip(&figs) {
                        a.add(b);
                    }
                }
                None => {
                    f.index.insert(key, f.stacks.len());
                    f.stacks.push(StackFig {
                        frames,
                        figs,
                        allowed: Default::default(),
                    });
                }
            }
        }
        f.set_aside(allow);
        f.sum(p);
        f
    }

    /// Mark the stacks `allow` matches, per kind.
    fn set_aside(&mut self, allow: &Allow) {
        if allow.is_empty() {
            return;
        }
        for st in &mut self.stacks {
            for k in Kind::ALL {
                let text = st.frames.iter().map(|x| FrameText {
                    function: &x.function,
                    file: &x.file,
                    module: &x.module,
                });
                st.allowed[k.index()] = allow.matching(k, text).map(str::to_string);
            }
        }
    }

    /// Totals of the stacks not set aside, and what they may miss.
    fn sum(&mut self, p: &Profile) {
        for st in &self.stacks {
            for k in Kind::ALL {
                let i = k.index();
                if st.allowed[i].is_some() {
                    self.allowed[i].0 += 1;
                    self.allowed[i].1 += st.figs[i].value;
                } else {
                    self.totals[i].add(&st.figs[i]);
                }
            }
        }
        let m = &p.meta;
        let r = m.interval as f64;
        for t in &mut self.totals {
            t.interval = r;
            t.missing += m.dropped_bytes as f64;
        }
        // samples the range could not track live stand for at least R bytes each
        for k in [Kind::Peak, Kind::Leak] {
            self.totals[k.index()].missing += m.untracked as f64 * r;
        }
        if let Some(v) = p.views.as_ref().filter(|v| !v.disabled) {
            let set_aside = self.allowed[Kind::Peak.index()].1;
            let peak = &mut self.totals[Kind::Peak.index()];
            if v.split_peak_bytes > 0.0 && m.interval > 0 {
                // The split-sample estimate and its interval, as `report --view peak` prints
                // them: the highest estimate leans high on a heap that churns (2.2x on
                // churn_peak at 512K), but a spike briefer than the churn is only in it, so the
                // interval's upper end is what it allows. The stacks set aside leave both with
                // their bytes in the peak set; the stacks shown are the set's.
                let missing = peak.missing;
                *peak = Est::split_peak(
                    v.split_peak_bytes - set_aside,
                    v.heap_max_bytes - set_aside,
                    m.interval,
                );
                peak.missing = missing;
            } else {
                // No split (exact mode, an older runtime): the highest estimate. The peak set is
                // a snapshot the runtime takes each time the estimate passes the last one by
                // 1/32: the highest estimate may be up to that much above it. Its stacks are the
                // snapshot's.
                peak.value = peak.value.max(v.heap_max_bytes - set_aside);
            }
        }
        if m.dropped > 0 {
            self.notes.push(format!(
                "{} samples were dropped by the runtime ({} estimated): the upper bounds include them",
                m.dropped,
                memlens_measure::units::format_size(m.dropped_bytes)
            ));
        }
        if m.untracked > 0 {
            self.notes.push(format!(
                "{} samples were not tracked live (an address-space limit): the peak and leak upper \
                 bounds include them",
                m.untracked
            ));
        }
        let trunc = m.truncated_share();
        if trunc > 0.1 {
            self.notes.push(format!(
                "{:.0}% of the stacks were truncated: a stack's figures may be split among several",
                trunc * 100.0
            ));
        }
    }

    /// The stack of this one key (function names), if the profile has it.
    pub fn find(&self, key: &[String]) -> Option<&StackFig> {
        self.index.get(key).map(|&i| &self.stacks[i])
    }

    /// Its total of `kind`.
    pub fn total(&self, kind: Kind) -> &Est {
        &self.totals[kind.index()]
    }

    /// The largest figure of `kind` among its stacks not set aside.
    pub fn max_stack(&self, kind: Kind) -> f64 {
        self.stacks
            .iter()
            .filter(|s| s.allowed[kind.index()].is_none())
            .map(|s| s.fig(kind).value)
            .fold(0.0, f64::max)
    }

    /// The executable's file name.
    pub fn program(&self) -> &str {
        self.exe.rsplit('/').next().unwrap_or(&self.exe)
    }
}

/// Why a profile has no figure of each kind (None: it has it).
fn absent(p: &Profile) -> [Option<String>; 3] {
    let live = if !p.has(SampleIndex::InuseSpace) {
        Some("the profile has no in-use values".to_string())
    } else {
        None
    };
    let peak = live.clone().or_else(|| match &p.views {
        Some(v) if v.disabled => Some("the runtime's views were off (MEMLENS_VIEWS=0)".into()),
        None => Some("the profile has no peak set (not written by memlens run)".into()),
        _ => None,
    });
    let alloc = (!p.has(SampleIndex::AllocSpace))
        .then(|| "the profile has no allocated values".to_string());
    [peak, live, alloc]
}

/// A sample's peak, leak and allocated figures.
fn sample_figs(s: &Sample, interval: u64) -> [Est; 3] {
    let (pb, po) = s
        .life
        .as_deref()
        .map_or((0.0, 0.0), |l| (l.peak_bytes, l.peak_objects));
    [
        Est::of(pb, po, interval),
        Est::of(s.inuse_bytes, s.inuse_objects, interval),
        Est::of(s.alloc_bytes, s.alloc_objects, interval),
    ]
}

/// A sample's frames, innermost first (inlined calls expanded), each with its module and whether
/// it is the program's own code.
fn shown_frames(p: &Profile, s: &Sample) -> Vec<ShownFrame> {
    let mut out = Vec::with_capacity(s.locations.len());
    for &id in &s.locations {
        let Some(loc) = p.locations.get((id as usize).wrapping_sub(1)) else {
            continue;
        };
        let module = p
            .mappings
            .get((loc.mapping as usize).wrapping_sub(1))
            .map_or("", |m| m.filename.as_str());
        let mut push = |function: String, file: String, line: i64| {
            let own = is_own(&function, &file, module, &p.meta.exe);
            out.push(ShownFrame {
                function,
                file,
                line,
                module: module.to_string(),
                own,
            });
        };
        if loc.lines.is_empty() {
            push(p.address_name(loc), String::new(), 0);
        }
        for l in &loc.lines {
            match p.functions.get((l.function as usize).wrapping_sub(1)) {
                Some(f) => push(f.name.clone(), f.filename.clone(), l.line),
                None => push(p.address_name(loc), String::new(), l.line),
            }
        }
    }
    out
}

/// The memlens runtime's own module (libmemlens.so, wherever it was extracted).
fn is_runtime(module: &str) -> bool {
    let base = module.rsplit('/').next().unwrap_or(module);
    base.starts_with("libmemlens") && base.ends_with(".so")
}

/// Directories of the system's libraries: code there is not the program's own.
const LIBRARY_DIRS: [&str; 5] = [
    "/lib/",
    "/lib64/",
    "/usr/lib/",
    "/usr/lib64/",
    "/usr/local/lib/",
];

/// Source paths of standard and system code compiled into the program (C++ headers, Rust's
/// standard library, crates from a registry, glibc's build-relative paths).
fn is_library_source(f: &str) -> bool {
    ["/usr/include/", "/usr/src/", "/rustc/", "./", "../"]
        .iter()
        .any(|p| f.starts_with(p))
        || f.contains("/.cargo/registry/")
        || f.contains("/.rustup/")
}

/// The allocator's entry points and wrappers every stack starts with.
fn is_allocator(name: &str) -> bool {
    const EXACT: [&str; 8] = [
        "malloc",
        "calloc",
        "realloc",
        "free",
        "reallocarray",
        "posix_memalign",
        "aligned_alloc",
        "memalign",
    ];
    EXACT.contains(&name)
        || name.starts_with("operator new")
        || name.starts_with("__rust_")
        || name.starts_with("__rdl_")
        || name.starts_with("alloc::")
        || name.starts_with("std::")
        || name.starts_with("core::")
        || name.starts_with("__gnu_cxx::")
        || name.starts_with("__libc_")
}

/// Is this frame the program's own code: in its executable or a library outside the system's
/// directories, from a source file that is not a system or standard one, and not the allocator?
fn is_own(function: &str, file: &str, module: &str, exe: &str) -> bool {
    let own_module = !module.is_empty()
        && (module == exe
            || !(LIBRARY_DIRS.iter().any(|d| module.starts_with(d)) || is_runtime(module)));
    own_module && !is_library_source(file) && !is_allocator(function)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_frames() {
        let exe = "/home/u/app/target/release/app";
        assert!(is_own(
            "app::cache::insert",
            "/home/u/app/src/cache.rs",
            exe,
            exe
        ));
        assert!(!is_own(
            "alloc::raw_vec::finish_grow",
            "/rustc/abc/library/alloc/src/raw_vec.rs",
            exe,
            exe
        ));
        assert!(!is_own(
            "hashbrown::raw::RawTable::reserve",
            "/root/.cargo/registry/src/x/hashbrown/raw.rs",
            exe,
            exe
        ));
        assert!(!is_own(
            "malloc",
            "",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
            exe
        ));
        assert!(!is_own(
            "std::vector<int>::_M_realloc_insert",
            "/usr/include/c++/12/bits/vector.tcc",
            exe,
            exe
        ));
        assert!(is_own(
            "sqlite3_malloc64",
            "",
            "/opt/sqlite/libsqlite3.so",
            exe
        ));
        assert!(!is_own(
            "sqlite3_malloc64",
            "",
            "/usr/lib/x86_64-linux-gnu/libsqlite3.so.0",
            exe
        ));
        // python3's interpreter is the program here: its frames are its own
        assert!(is_own(
            "PyDict_SetItem",
            "",
            "/usr/bin/python3.11",
            "/usr/bin/python3.11"
        ));
        assert!(!is_own("f", "", "", exe));
    }
}
