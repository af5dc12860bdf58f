//! Offline symbolization: (module path, ELF virtual address) → function, file, line, inlined frames.
//!
//! Runs in the CLI, never in the target. blazesym reads the symbol tables and DWARF (including
//! separate debug files under /usr/lib/debug found by build ID or debuglink). Before trusting a
//! module on disk we check that its build ID matches the one the runtime recorded: a rebuilt or
//! foreign binary would give plausible but wrong names. Demangling is done here, once per unique
//! name, because it is the expensive part of symbolization.
use blazesym::symbolize::source::{Elf, Source};
use blazesym::symbolize::{Input, Symbolized};
use std::collections::HashMap;

/// One frame at an address, as the debug info describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct SymFrame {
    /// Function name, demangled.
    pub name: String,
    /// Source file.
    pub file: String,
    /// Source line (0 = unknown).
    pub line: u32,
}

/// Symbolizes module addresses offline, caching what it read.
pub struct Symbolizer {
    inner: blazesym::symbolize::Symbolizer,
    demangled: HashMap<String, String>,
    /// Build ID on disk per path: a library dlopen'ed in a loop appears once per load.
    build_ids: HashMap<String, Result<Option<String>, String>>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    /// A symbolizer with code info and inlined frames on.
    pub fn new() -> Self {
        let inner = blazesym::symbolize::Symbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            .enable_demangling(false)
            .build();
        Symbolizer {
            inner,
            demangled: HashMap::new(),
            build_ids: HashMap::new(),
        }
    }

    /// Symbolize ELF virtual addresses of the module at `path`. Returns, per address, its frames
    /// innermost first (empty when no symbol covers it). `Err` holds why the whole module cannot be
    /// symbolized (file absent, build ID differs, not ELF): the caller keeps raw addresses.
    pub fn module(
        &mut self,
        path: &str,
        build_id: &str,
        addrs: &[u64],
    ) -> Result<Vec<Vec<SymFrame>>, String> {
        let have = self
            .build_ids
            .entry(path.to_string())
            .or_insert_with(|| file_build_id(path))
            .clone()?;
        check_build_id(path, have, build_id)?;
        let src = Source::Elf(Elf::new(path));
        let syms = self
            .inner
            .symbolize(&src, Input::VirtOffset(addrs))
            .map_err(|e| format!("{e}"))?;
        let mut out = Vec::with_capacity(syms.len());
        let mut raw: Vec<Vec<(String, String, u32)>> = Vec::with_capacity(syms.len());
        for s in syms {
            let Symbolized::Sym(sym) = s else {
                raw.push(Vec::new());
                continue;
            };
            // blazesym lists the outer function first, then the inlined calls it contains, each with
            // its own line; pprof wants the innermost first.
            let mut frames = Vec::with_capacity(1 + sym.inlined.len());
            let (file, line) = code(sym.code_info.as_deref());
            frames.push((sym.name.to_string(), file, line));
            for f in sym.inlined.iter() {
                let (file, line) = code(f.code_info.as_ref());
                frames.push((f.name.to_string(), file, line));
            }
            frames.reverse();
            raw.push(frames);
        }
        for frames in raw {
            out.push(
                frames
                    .into_iter()
                    .map(|(n, file, line)| SymFrame {
                        name: self.demangle(&n),
                        file,
                        line,
                    })
                    .collect(),
            );
        }
        Ok(out)
    }

    /// Demangled form of a C++ or Rust symbol, computed once per unique name.
    pub fn demangle(&mut self, name: &str) -> String {
        if let Some(d) = self.demangled.get(name) {
            return d.clone();
        }
        let d = demangle(name);
        self.demangled.insert(name.to_string(), d.clone());
        d
    }
}

fn code(ci: Option<&blazesym::symbolize::CodeInfo<'_>>) -> (String, u32) {
    match ci {
        Some(c) => (c.to_path().display().to_string(), c.line.unwrap_or(0)),
        None => (String::new(), 0),
    }
}

/// Rust (legacy and v0) and Itanium C++ demangling; other names unchanged.
pub fn demangle(name: &str) -> String {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        // `{:#}` drops the hash suffix, as Rust's own backtraces do.
        return format!("{d:#}");
    }
    if name.starts_with("_Z") {
        if let Ok(Ok(d)) = cpp_demangle::Symbol::new(name).map(|s| s.demangle()) {
            return d;
        }
    }
    name.to_string()
}

/// Build ID of an ELF file on disk (lower-case hex), `None` when it has none.
pub fn file_build_id(path: &str) -> Result<Option<String>, String> {
    use object::Object;
    let data = std::fs::read(path).map_err(|e| format!("cannot read {path}: {e}"))?;
    let obj = object::File::parse(&*data).map_err(|e| format!("{path} is not an ELF file: {e}"))?;
    let id = obj
        .build_id()
        .map_err(|e| format!("{path}: bad build id note: {e}"))?;
    Ok(id.map(|b| b.iter().map(|x| format!("{x:02x}")).collect()))
}

fn check_build_id(path: &str, have: Option<String>, want: &str) -> Result<(), String> {
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
