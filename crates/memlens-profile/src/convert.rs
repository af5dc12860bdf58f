//! Raw dump → symbolized profile model, and loading any supported input file.
use crate::agg::U64Hash;
use crate::lookup::{places, ProcessFiles};
use crate::model::{Function, Line, Location, Mapping, Profile, Sample};
use crate::raw::{RawDump, RawModule};
use crate::symbolize::{Frames, SymFrame, Symbolizer};
use anyhow::{anyhow, Context, Result};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

/// What `convert_raw` produced, for `memlens run` to print.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ConvertSummary {
    /// Process id of the profiled program.
    pub pid: u32,
    /// Its executable.
    pub exe: String,
    /// Samples the runtime recorded.
    pub samples: u64,
    /// Distinct stacks in the profile.
    pub stacks: usize,
    /// Estimated bytes allocated.
    pub alloc_bytes: f64,
    /// Estimated bytes in use at the dump.
    pub inuse_bytes: f64,
    /// Share of samples whose stack was truncated (0..1).
    pub truncated_share: f64,
    /// Samples the runtime lost (tables full).
    pub dropped: u64,
    /// Of those, samples of new stacks the full stack table could not take.
    pub table_full: u64,
    /// The stack table's limit (distinct stacks).
    pub max_stacks: u64,
    /// Samples counted as allocated but not tracked live (an address-space limit).
    pub untracked: u64,
    /// Modules whose addresses stay raw (binary absent, different build ID, no symbols).
    pub unsymbolized_modules: usize,
    /// One line per problem met while symbolizing (already printed on stderr).
    pub warnings: Vec<String>,
}

/// Read the raw dump `raw`, symbolize it and write it as gzipped pprof to `out` (and the peak set
/// beside it), with the process's shared symbolizer ([`Symbolizer::global`]).
pub fn convert_raw(raw: &Path, out: &Path) -> Result<ConvertSummary> {
    convert_raw_with(raw, out, Symbolizer::global())
}

/// [`convert_raw`] with the symbolizer `sym`.
pub fn convert_raw_with(raw: &Path, out: &Path, sym: &Symbolizer) -> Result<ConvertSummary> {
    convert_dump(crate::raw::read(raw)?, out, sym)
}

/// [`convert_raw`] of a raw dump's text already in memory (a state file rendered by
/// [`crate::render_state`], which need not be written anywhere first: its run directory may be
/// full).
pub fn convert_raw_text(text: &str, out: &Path) -> Result<ConvertSummary> {
    convert_dump(crate::raw::parse(text)?, out, Symbolizer::global())
}

fn convert_dump(dump: RawDump, out: &Path, sym: &Symbolizer) -> Result<ConvertSummary> {
    let (profile, warnings) = symbolize_dump_with(&dump, sym);
    drop(dump);
    crate::pprof::write(&profile, out)?;
    if let Some(peak) = crate::life::peak_profile(&profile) {
        crate::pprof::write(&peak, &crate::life::peak_path(out))?;
    }
    Ok(summary(&profile, warnings))
}

/// The summary of a converted profile.
pub fn summary(p: &Profile, warnings: Vec<String>) -> ConvertSummary {
    use crate::model::SampleIndex::*;
    let unsymbolized = warnings.len();
    ConvertSummary {
        pid: p.meta.pid,
        exe: p.meta.exe.clone(),
        samples: p.meta.samples,
        stacks: p.samples.len(),
        alloc_bytes: p.total(AllocSpace),
        inuse_bytes: p.total(InuseSpace),
        truncated_share: p.meta.truncated_share(),
        dropped: p.meta.dropped,
        table_full: p.meta.table_full,
        max_stacks: p.meta.max_stacks,
        untracked: p.meta.untracked,
        unsymbolized_modules: unsymbolized,
        warnings,
    }
}

/// Load a profile from a raw dump or a pprof file (gzipped or not), bounded in size and time
/// ([`crate::input`]). Symbolization problems of a raw dump are printed once per module as
/// warnings; they never fail the load. Raw dumps are symbolized with [`Symbolizer::global`].
pub fn load(path: &Path) -> Result<Profile> {
    load_with(path, Symbolizer::global())
}

/// [`load`] with the symbolizer `sym`.
pub fn load_with(path: &Path, sym: &Symbolizer) -> Result<Profile> {
    let input = crate::input::open(path)?;
    if input.head.is_empty() {
        return Err(anyhow!("{} is empty (not a profile)", path.display()));
    }
    let shown = path.display().to_string();
    if crate::raw::looks_raw(&input.head) {
        let dump = crate::raw::read_from(input.reader()).with_context(|| shown.clone())?;
        let (p, warnings) = symbolize_dump_with(&dump, sym);
        for w in &warnings {
            eprintln!("memlens: warning: {w}");
        }
        return Ok(p);
    }
    let allowance = input.allowance.clone();
    crate::pprof_read::read(input.reader(), &allowance).map_err(|e| {
        if e.downcast_ref::<crate::input::OverBudget>().is_some() {
            e.context(format!("cannot load {shown}"))
        } else {
            e.context(format!(
                "cannot load {shown}: neither a memlens raw dump nor a pprof profile"
            ))
        }
    })
}

/// Modules whose frames are the profiler's own and never belong in a user's stack (the runtime's
/// file, or the memfd `memlens run` preloads as `/proc/self/fd/N` where no place allows exec).
fn is_own_module(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    (base.starts_with("libmemlens") && base.ends_with(".so"))
        || path.starts_with("/proc/self/fd/")
        || path.contains("memfd:memlens")
}

/// Pseudo-modules without a file on disk: not worth a warning.
fn is_virtual(path: &str) -> bool {
    path.is_empty() || path.contains("vdso") || path.starts_with('[')
}

/// The symbolized model of a raw dump and the warnings (not printed), one per module that cannot
/// be symbolized.
pub fn symbolize_dump_with(d: &RawDump, sym: &Symbolizer) -> (Profile, Vec<String>) {
    symbolize_dump_in(d, sym, &ProcessFiles::default())
}

/// [`symbolize_dump_with`] of a dump of a live process whose files are reached as `files` says
/// (its own root, its mapped files: a process in a container).
pub fn symbolize_dump_in(
    d: &RawDump,
    sym: &Symbolizer,
    files: &ProcessFiles,
) -> (Profile, Vec<String>) {
    let mut warnings = Vec::new();
    let p = build(d, sym, files, &mut warnings);
    (p, warnings)
}

/// [`convert_raw`] of the dump of a live process whose files are reached as `files` says.
pub fn convert_raw_in(raw: &Path, out: &Path, files: &ProcessFiles) -> Result<ConvertSummary> {
    let dump = crate::raw::read(raw)?;
    let (profile, warnings) = symbolize_dump_in(&dump, Symbolizer::global(), files);
    drop(dump);
    crate::pprof::write(&profile, out)?;
    if let Some(peak) = crate::life::peak_profile(&profile) {
        crate::pprof::write(&peak, &crate::life::peak_path(out))?;
    }
    Ok(summary(&profile, warnings))
}

/// Build the symbolized models of many raw dumps (the runs of one program, compared with each
/// other). Returns the profiles in the order of `dumps` and the warnings, one per module that
/// cannot be symbolized; they are not printed. Stacks of different dumps compare by their frames'
/// function names ([`crate::agg::Stacks`]): unsymbolized frames are named `module+0xOFFSET`, stable
/// across processes.
pub fn symbolize_dumps(dumps: &[RawDump]) -> (Vec<Profile>, Vec<String>) {
    let sym = Symbolizer::global();
    let mut warnings = Vec::new();
    let files = ProcessFiles::default();
    let profiles = dumps
        .iter()
        .map(|d| build(d, sym, &files, &mut warnings))
        .collect();
    (profiles, warnings)
}

/// Symbolize `addrs` of module `m` of dump `d` from the first place that holds its file with the
/// build ID the runtime recorded ([`crate::lookup`]); Err says where it was looked for and why
/// each place failed.
fn symbolize_module(
    sym: &Symbolizer,
    files: &ProcessFiles,
    d: &RawDump,
    m: &RawModule,
    addrs: &[u64],
) -> Result<Vec<Frames>, String> {
    let mut why = Vec::new();
    for place in places(files, &d.maps, &m.path, &m.build_id) {
        match sym.module(&place.path, &m.build_id, addrs) {
            Ok(f) => return Ok(f),
            Err(e) => why.push(format!("{}: {e}", place.what)),
        }
    }
    Err(why.join("; "))
}

/// Say once per module how many of its addresses no symbol covers (a stripped file: its debug
/// symbols would name them), and once per dump how many frames are in no module at all.
fn unnamed_warnings(d: &RawDump, unnamed: &BTreeMap<usize, usize>, loose: usize) -> Vec<String> {
    let mut w: Vec<String> = unnamed
        .iter()
        .filter(|(_, &n)| n > 0)
        .map(|(&mi, &n)| {
            let m = &d.modules[mi];
            let id = if m.build_id.is_empty() {
                String::new()
            } else {
                format!(", build id {}", m.build_id)
            };
            format!(
                "{n} address(es) in {} have no symbol (the file has no symbol covering them: \
                 stripped, or code without a name; its debug symbols{id} would name them); they \
                 show as addresses",
                m.path
            )
        })
        .collect();
    if loose > 0 {
        w.push(format!(
            "{loose} frame address(es) of process {} are in no module it had loaded (generated \
             code, or a module unloaded before the dump): they show as addresses",
            d.meta.pid
        ));
    }
    w
}

/// The model of `d`, symbolized by `sym` from the files `files` reaches; a warning per module
/// not symbolized (and not already in `warnings`) is appended.
fn build(
    d: &RawDump,
    sym: &Symbolizer,
    files: &ProcessFiles,
    warnings: &mut Vec<String>,
) -> Profile {
    let mut b = Builder {
        p: Profile {
            meta: d.meta.clone(),
            ..Profile::default()
        },
        ..Builder::default()
    };
    // Unique pcs per module, in a stable order.
    let mut by_module: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
    let mut module_of: HashMap<u64, Option<usize>, U64Hash> = HashMap::default();
    for s in &d.stacks {
        for &pc in &s.pcs {
            module_of.entry(pc).or_insert_with(|| {
                let m = find_module(&d.modules, pc);
                if let Some(i) = m {
                    by_module.entry(i).or_default().push(pc);
                }
                m
            });
        }
    }
    let mut loc_of: HashMap<u64, u64, U64Hash> = HashMap::default();
    let mut unnamed: BTreeMap<usize, usize> = BTreeMap::new();
    for (&mi, pcs) in &by_module {
        let m = &d.modules[mi];
        let addrs: Vec<u64> = pcs
            .iter()
            .map(|pc| pc.wrapping_sub(1).wrapping_sub(m.base))
            .collect();
        let frames = match symbolize_module(sym, files, d, m, &addrs) {
            Ok(f) => {
                if !is_virtual(&m.path) && !is_own_module(&m.path) {
                    unnamed.insert(mi, f.iter().filter(|fr| fr.is_empty()).count());
                }
                f
            }
            Err(why) => {
                let w = format!(
                    "cannot symbolize {}: {why}; its frames show as addresses",
                    m.path
                );
                if !is_virtual(&m.path) && !warnings.contains(&w) {
                    warnings.push(w);
                }
                vec![Frames::from([]); pcs.len()]
            }
        };
        for (pc, fr) in pcs.iter().zip(frames) {
            let id = b.location(m, *pc, &fr);
            loc_of.insert(*pc, id);
        }
    }
    let loose = module_of.values().filter(|m| m.is_none()).count();
    for w in unnamed_warnings(d, &unnamed, loose) {
        if !warnings.contains(&w) {
            warnings.push(w);
        }
    }
    let mut mmap_loc = None;
    for s in &d.stacks {
        let mut locations = Vec::with_capacity(s.pcs.len() + 1);
        if s.flags & STACK_MMAP != 0 {
            locations.push(*mmap_loc.get_or_insert_with(|| b.mmap_location()));
        }
        for &pc in &s.pcs {
            let own = module_of[&pc].is_some_and(|i| is_own_module(&d.modules[i].path));
            if own && locations.len() == usize::from(s.flags & STACK_MMAP != 0) {
                continue; // the runtime's own frames above the allocation call
            }
            let id = match loc_of.get(&pc) {
                Some(&id) => id,
                None => {
                    b.p.locations.push(Location {
                        mapping: 0,
                        address: pc.wrapping_sub(1),
                        lines: Vec::new(),
                    });
                    let id = b.p.locations.len() as u64;
                    loc_of.insert(pc, id);
                    id
                }
            };
            locations.push(id);
        }
        b.p.samples.push(Sample {
            locations,
            alloc_objects: s.alloc_objects_fx as f64 / 65536.0,
            alloc_bytes: s.alloc_bytes as f64,
            inuse_objects: s.inuse_objects_fx as f64 / 65536.0,
            inuse_bytes: s.inuse_bytes as f64,
            samples: s.samples,
            diff_base: false,
            life: s
                .life
                .as_ref()
                .map(|l| Box::new(crate::life::life_of(l, d.views.as_ref()))),
        });
    }
    b.p.views = d.views.as_ref().map(crate::life::views_of);
    b.p
}

/// A stack's flag (raw dump, `stack` line): its memory is anonymous mmap, not the heap (issue 31).
pub const STACK_MMAP: u64 = 2;
/// The name of the frame that marks such a stack (innermost, above its call site).
pub const MMAP_FRAME: &str = "[anonymous mmap]";

fn find_module(mods: &[RawModule], pc: u64) -> Option<usize> {
    // A later entry for the same range is the more recent load (dlopen after dlclose).
    let loaded = mods
        .iter()
        .rposition(|m| m.loaded && m.segment_of(pc).is_some());
    loaded.or_else(|| mods.iter().rposition(|m| m.segment_of(pc).is_some()))
}

#[derive(Default)]
struct Builder {
    p: Profile,
    /// (module base, segment vaddr) → mapping id.
    mappings: HashMap<(u64, u64, String), u64>,
    /// (name, file) → function id; the names are the symbolizer's shared strings.
    functions: HashMap<(Arc<str>, Arc<str>), u64>,
}

impl Builder {
    fn mapping(&mut self, m: &RawModule, pc: u64) -> u64 {
        let Some(seg) = m.segment_of(pc) else {
            return 0;
        };
        let key = (m.base, seg.vaddr, m.path.clone());
        if let Some(&id) = self.mappings.get(&key) {
            return id;
        }
        // Page-aligned like /proc/self/maps, which is what pprof tools expect of a mapping.
        let start = (m.base + seg.vaddr) & !0xfff;
        let limit = (m.base + seg.vaddr + seg.memsz + 0xfff) & !0xfff;
        self.p.mappings.push(Mapping {
            start,
            limit,
            offset: seg.offset & !0xfff,
            filename: m.path.clone(),
            build_id: m.build_id.clone(),
            ..Mapping::default()
        });
        let id = self.p.mappings.len() as u64;
        self.mappings.insert(key, id);
        id
    }

    fn function(&mut self, f: &SymFrame) -> u64 {
        let key = (f.name.clone(), f.file.clone());
        if let Some(&id) = self.functions.get(&key) {
            return id;
        }
        self.p.functions.push(Function {
            name: f.name.to_string(),
            system_name: f.name.to_string(),
            filename: f.file.to_string(),
            start_line: 0,
        });
        let id = self.p.functions.len() as u64;
        self.functions.insert(key, id);
        id
    }

    /// The innermost frame of every stack of anonymous mmap (the runtime's flag ML_STACK_MMAP): a
    /// function of its own, so that every view, diff and engine shows that memory as its own kind,
    /// under the call site that mapped it, apart from the heap.
    fn mmap_location(&mut self) -> u64 {
        let f = SymFrame {
            name: Arc::from(MMAP_FRAME),
            file: Arc::from(""),
            line: 0,
        };
        let function = self.function(&f);
        self.p.locations.push(Location {
            mapping: 0,
            address: 0,
            lines: vec![Line { function, line: 0 }],
        });
        self.p.locations.len() as u64
    }

    fn location(&mut self, m: &RawModule, pc: u64, frames: &[SymFrame]) -> u64 {
        let mapping = self.mapping(m, pc);
        let lines: Vec<Line> = frames
            .iter()
            .map(|f| Line {
                function: self.function(f),
                line: f.line as i64,
            })
            .collect();
        if let Some(mp) = self.p.mappings.get_mut((mapping as usize).wrapping_sub(1)) {
            if !lines.is_empty() {
                mp.has_functions = true;
            }
            if frames.iter().any(|f| !f.file.is_empty()) {
                mp.has_filenames = true;
            }
            if frames.iter().any(|f| f.line != 0) {
                mp.has_line_numbers = true;
            }
            if frames.len() > 1 {
                mp.has_inline_frames = true;
            }
        }
        self.p.locations.push(Location {
            mapping,
            address: pc.wrapping_sub(1),
            lines,
        });
        self.p.locations.len() as u64
    }
}
