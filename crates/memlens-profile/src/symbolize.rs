//! Offline symbolization: (module path, ELF virtual address) → function, file, line, inlined frames.
//!
//! Runs in the CLI, never in the target. blazesym reads the symbol tables and DWARF (including
//! separate debug files under /usr/lib/debug found by build ID or debuglink). A module path is
//! what a dump says, so the file is opened and checked first ([`crate::modfile`]: a regular file
//! only, what it links to too, compressed sections bounded) and blazesym reads that descriptor.
//! Before trusting a module on disk we check that its build ID matches the one the runtime
//! recorded: a rebuilt or foreign binary would give plausible but wrong names. Demangling is done
//! here, once per unique name, because it is the expensive part of symbolization.
//!
//! A [`Symbolizer`] is a cache meant to live as long as the memlens process: every address of a
//! module is symbolized once, keyed by the module's build ID (by path and file identity when it has
//! none), so the hundreds of dumps of a forking program, a server's repeated scrapes and the two
//! sides of a diff pay for each binary once. Clones share the cache; [`Symbolizer::global`] is the
//! process's own, which [`crate::convert_raw`] and [`crate::load`] use.
use crate::modfile::{ModFile, DEBUG_DIRS};
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized};
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock};

/// One frame at an address, as the debug info describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct SymFrame {
    /// Function name, demangled.
    pub name: Arc<str>,
    /// Source file.
    pub file: Arc<str>,
    /// Source line (0 = unknown).
    pub line: u32,
}

/// The frames at one address, innermost (inlined callee) first; empty when no symbol covers it.
pub type Frames = Arc<[SymFrame]>;

/// Cached addresses beyond which the cache starts over (a long-lived server that profiles ever new
/// binaries must not grow without bound): about 200 MB at worst.
const MAX_CACHED: usize = 1 << 21;

/// Symbolizes module addresses offline, caching what it read. Cheap to clone; clones share the cache
/// and may be used from several threads.
#[derive(Clone)]
pub struct Symbolizer {
    cache: Arc<Mutex<Cache>>,
    /// The blazesym worker (blazesym's symbolizer is not `Send`, so it lives on a thread of its own).
    worker: mpsc::Sender<Job>,
}

#[derive(Default)]
struct Cache {
    /// Per module key (build ID, or path and file identity): address → frames.
    modules: HashMap<String, HashMap<u64, Frames>>,
    cached: usize,
    /// Build ID on disk per path (or why the file cannot be read), with the file identity it was
    /// read from.
    build_ids: HashMap<String, (FileId, Result<Option<String>, String>)>,
    /// Demangled names and file names, one allocation per distinct string.
    strings: HashMap<String, Arc<str>>,
}

/// What identifies a file's content without reading it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
    mtime_ns: i64,
}

/// One blazesym call: the raw frames (mangled name, file, line) per address, innermost first.
type RawFrames = Vec<Vec<(String, String, u32)>>;
struct Job {
    path: String,
    addrs: Vec<u64>,
    reply: mpsc::Sender<Result<RawFrames, String>>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Symbolizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let c = lock(&self.cache);
        write!(
            f,
            "Symbolizer({} modules, {} addresses)",
            c.modules.len(),
            c.cached
        )
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Symbolizer {
    /// A symbolizer with an empty cache (code info and inlined frames on).
    pub fn new() -> Self {
        let (tx, rx) = mpsc::channel::<Job>();
        // The worker ends when the last clone is dropped (the channel closes).
        std::thread::Builder::new()
            .name("memlens-symbolize".into())
            .spawn(move || {
                let blaze = blazesym::symbolize::Symbolizer::builder()
                    .enable_code_info(true)
                    .enable_inlined_fns(true)
                    .enable_demangling(false)
                    .set_debug_dirs(Some(&DEBUG_DIRS))
                    .build();
                for job in rx {
                    job.reply
                        .send(run_blazesym(&blaze, &job.path, &job.addrs))
                        .ok();
                }
            })
            .expect("cannot start the symbolizer thread");
        Symbolizer {
            cache: Arc::default(),
            worker: tx,
        }
    }

    /// The process's shared symbolizer: what `convert_raw`, `load` and their callers use, so that
    /// every profile of a memlens process shares one cache.
    pub fn global() -> &'static Symbolizer {
        static GLOBAL: OnceLock<Symbolizer> = OnceLock::new();
        GLOBAL.get_or_init(Symbolizer::new)
    }

    /// Symbolize ELF virtual addresses of the module at `path` whose build ID the runtime recorded
    /// as `build_id` (empty: unknown). Returns, per address, its frames innermost first (empty
    /// when no symbol covers it); each address is looked up once per module for the life of the
    /// cache. `Err` holds why the whole module cannot be symbolized (file absent, build ID differs,
    /// not ELF): the caller keeps raw addresses.
    pub fn module(&self, path: &str, build_id: &str, addrs: &[u64]) -> Result<Vec<Frames>, String> {
        let file = ModFile::open(path)?;
        let id = FileId::of(&file.meta);
        // One lock for the whole call: the worker is one thread anyway, and a cache that another
        // caller starts over in between could otherwise lose addresses found missing here.
        let mut c = lock(&self.cache);
        let have = match c.build_ids.get(path) {
            Some((was, have)) if *was == id => have.clone(),
            _ => {
                let have = file.checked_build_id();
                c.build_ids.insert(path.to_string(), (id, have.clone()));
                have
            }
        }?;
        check_build_id(path, have.as_deref(), build_id)?;
        let key = match have {
            Some(b) if !b.is_empty() => format!("b {b}"),
            _ => format!("p {path} {id:?}"),
        };
        let mut missing = missing_of(c.modules.get(&key), addrs);
        if c.cached > 0 && c.cached + missing.len() > MAX_CACHED {
            c.modules.clear();
            c.strings.clear();
            c.cached = 0;
            missing = missing_of(None, addrs);
        }
        if !missing.is_empty() {
            // blazesym opens the descriptor checked above, not the name
            let raw = self.blazesym(&file.fd_path(), &missing)?;
            let cooked: Vec<Frames> = raw.into_iter().map(|fr| c.cook(fr)).collect();
            c.cached += missing.len();
            let m = c.modules.entry(key.clone()).or_default();
            m.extend(missing.into_iter().zip(cooked));
        }
        let m = &c.modules[&key];
        Ok(addrs.iter().map(|a| m[a].clone()).collect())
    }

    fn blazesym(&self, path: &str, addrs: &[u64]) -> Result<RawFrames, String> {
        let (tx, rx) = mpsc::channel();
        let job = Job {
            path: path.to_string(),
            addrs: addrs.to_vec(),
            reply: tx,
        };
        let dead = || "the symbolizer thread is gone".to_string();
        self.worker.send(job).map_err(|_| dead())?;
        rx.recv().map_err(|_| dead())?
    }

    /// Demangled form of a C++ or Rust symbol, computed once per unique name.
    pub fn demangle(&self, name: &str) -> Arc<str> {
        lock(&self.cache).demangled(name)
    }
}

impl Cache {
    fn intern(&mut self, s: &str) -> Arc<str> {
        if let Some(a) = self.strings.get(s) {
            return a.clone();
        }
        let a: Arc<str> = Arc::from(s);
        self.strings.insert(s.to_string(), a.clone());
        a
    }

    fn demangled(&mut self, name: &str) -> Arc<str> {
        // Mangled and demangled names share the table: a demangled name never starts with `_Z`,
        // and a Rust one loses its hash, so the two cannot be confused.
        let key = format!("\0{name}");
        if let Some(a) = self.strings.get(&key) {
            return a.clone();
        }
        let d = self.intern(&demangle(name));
        self.strings.insert(key, d.clone());
        d
    }

    fn cook(&mut self, raw: Vec<(String, String, u32)>) -> Frames {
        raw.into_iter()
            .map(|(n, file, line)| SymFrame {
                name: self.demangled(&n),
                file: self.intern(&file),
                line,
            })
            .collect()
    }
}

/// The distinct addresses of `addrs` that `known` lacks, sorted.
fn missing_of(known: Option<&HashMap<u64, Frames>>, addrs: &[u64]) -> Vec<u64> {
    let mut m: Vec<u64> = addrs
        .iter()
        .copied()
        .filter(|a| known.is_none_or(|k| !k.contains_key(a)))
        .collect();
    m.sort_unstable();
    m.dedup();
    m
}

fn run_blazesym(
    blaze: &blazesym::symbolize::Symbolizer,
    path: &str,
    addrs: &[u64],
) -> Result<RawFrames, String> {
    let src = Source::Elf(Elf::new(path));
    let syms = blaze
        .symbolize(&src, Input::VirtOffset(addrs))
        .map_err(|e| format!("{e}"))?;
    Ok(syms
        .into_iter()
        .map(|s| {
            let Symbolized::Sym(sym) = s else {
                return Vec::new();
            };
            // blazesym lists the outer function first, then the inlined calls it contains, each
            // with its own line; pprof wants the innermost first.
            let mut frames = Vec::with_capacity(1 + sym.inlined.len());
            let (file, line) = code(sym.code_info.as_deref());
            frames.push((sym.name.to_string(), file, line));
            for f in sym.inlined.iter() {
                let (file, line) = code(f.code_info.as_ref());
                frames.push((f.name.to_string(), file, line));
            }
            frames.reverse();
            frames
        })
        .collect())
}

fn code(ci: Option<&blazesym::symbolize::CodeInfo<'_>>) -> (String, u32) {
    match ci {
        Some(c) => (c.to_path().display().to_string(), c.line.unwrap_or(0)),
        None => (String::new(), 0),
    }
}

impl FileId {
    fn of(m: &std::fs::Metadata) -> FileId {
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: m.mtime(),
            mtime_ns: m.mtime_nsec(),
        }
    }
}

/// Rust (legacy and v0) and Itanium C++ demangling; other names unchanged.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        // `{:#}` drops the hash suffix, as Rust's own backtraces do.
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Some(d) = cxa_demangle(name) {
            return d;
        }
    }
    name.to_string()
}

#[link(name = "stdc++")]
extern "C" {
    fn __cxa_demangle(
        mangled: *const std::ffi::c_char,
        buf: *mut std::ffi::c_char,
        len: *mut usize,
        status: *mut std::ffi::c_int,
    ) -> *mut std::ffi::c_char;
}

/// The C++ runtime's own demangler (libstdc++'s, the code c++filt runs): it agrees with c++filt
/// on every name of libstdc++ and boost (`tests/demangle.rs`), where cpp_demangle 0.5.1 differed
/// on 767 of 6849, among them templated constructors missing their first parameter (issue 34).
fn cxa_demangle(name: &str) -> Option<String> {
    let c = std::ffi::CString::new(name).ok()?;
    let mut status: std::ffi::c_int = -1;
    // SAFETY: a NUL-terminated name, no buffer (the demangler mallocs the result, freed here).
    unsafe {
        let out = __cxa_demangle(
            c.as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            &mut status,
        );
        if out.is_null() {
            return None;
        }
        let s = (status == 0).then(|| std::ffi::CStr::from_ptr(out).to_string_lossy().into_owned());
        libc::free(out.cast());
        s
    }
}

/// Build ID of an ELF file on disk (lower-case hex), `None` when it has none; an error when it is
/// not a regular ELF file or links to what the symbolizer would not read ([`crate::modfile`]).
pub fn file_build_id(path: &str) -> Result<Option<String>, String> {
    ModFile::open(path)?.checked_build_id()
}

fn check_build_id(path: &str, have: Option<&str>, want: &str) -> Result<(), String> {
    match have {
        _ if want.is_empty() => Ok(()),
        Some(h) if h == want => Ok(()),
        Some(h) => Err(format!(
            "{path} on disk has build id {h}, the profile was taken with {want}"
        )),
        None => Err(format!(
            "{path} on disk has no build id, the profile was taken with {want}"
        )),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn demangles_cpp_and_rust_and_keeps_c() {
        assert_eq!(super::demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(
            super::demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(super::demangle("malloc"), "malloc");
        assert_eq!(super::demangle("_Zgarbage"), "_Zgarbage");
    }
}
