//! Which allocators can be benchmarked here: glibc (nothing preloaded), the distribution's allocators
//! found through the dynamic linker's cache, memlens's own reference allocators, and any the user adds
//! with `--allocator NAME=PATH.so`.
use anyhow::Result;
use memlens_measure::usage;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;

/// An allocator memlens looks for: the library that replaces malloc when preloaded, and where it
/// comes from (a Debian package, or how to build it when Debian has none).
struct Known {
    name: &'static str,
    soname: &'static str,
    source: Source,
}

enum Source {
    /// The Debian package that installs the library.
    Debian(&'static str),
    /// Not packaged: how to get it.
    Build(&'static str),
}

const KNOWN: &[Known] = &[
    Known {
        name: "jemalloc",
        soname: "libjemalloc.so.2",
        source: Source::Debian("libjemalloc2"),
    },
    Known {
        name: "tcmalloc",
        soname: "libtcmalloc_minimal.so.4",
        source: Source::Debian("libtcmalloc-minimal4"),
    },
    Known {
        name: "mimalloc",
        soname: "libmimalloc.so.2",
        source: Source::Debian("libmimalloc2.0"),
    },
    // The proxy, not libtbbmalloc.so.2 itself: only the proxy defines malloc/free.
    Known {
        name: "tbbmalloc",
        soname: "libtbbmalloc_proxy.so.2",
        source: Source::Debian("libtbbmalloc2"),
    },
    // The allocator the study compared; Debian does not package it.
    Known {
        name: "hoard",
        soname: "libhoard.so",
        source: Source::Build(
            "Hoard is not packaged by Debian: build it from the emeryberger/Hoard repository on GitHub (make in src/) \
             and copy libhoard.so to /usr/local/lib (then run ldconfig), or name it with --allocator hoard=PATH",
        ),
    },
];

/// Where to look when `ldconfig -p` does not know a library.
const LIB_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/usr/local/lib",
    "/usr/lib64",
    "/lib64",
    "/usr/lib",
];

/// An allocator to benchmark. `lib == None` is the system allocator (glibc, nothing preloaded).
#[derive(Debug, Clone, Serialize)]
pub struct Allocator {
    pub name: String,
    pub lib: Option<PathBuf>,
    /// Where it comes from: "glibc", a Debian package, "memlens", or "--allocator".
    pub origin: String,
}

/// An allocator that was asked for (or is part of the default set) but cannot be used.
#[derive(Debug, Clone, Serialize)]
pub struct Missing {
    pub name: String,
    pub reason: String,
}

/// Paths of x86-64 libraries known to the dynamic linker's cache (`ldconfig -p`), by soname.
fn ldconfig_cache() -> Vec<(String, PathBuf)> {
    let out = Command::new("ldconfig")
        .arg("-p")
        .output()
        .or_else(|_| Command::new("/sbin/ldconfig").arg("-p").output());
    let Ok(out) = out else { return Vec::new() };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("x86-64"))
        .filter_map(|l| {
            let (left, path) = l.split_once("=>")?;
            Some((
                left.split_whitespace().next()?.to_string(),
                PathBuf::from(path.trim()),
            ))
        })
        .collect()
}

fn find_library(soname: &str, cache: &[(String, PathBuf)]) -> Option<PathBuf> {
    cache
        .iter()
        .find(|(n, p)| n == soname && p.exists())
        .map(|(_, p)| p.clone())
        .or_else(|| {
            LIB_DIRS
                .iter()
                .map(|d| Path::new(d).join(soname))
                .find(|p| p.exists())
        })
}

/// Parse `NAME=PATH.so` from `--allocator`.
pub fn parse_custom(spec: &str) -> Result<(String, PathBuf)> {
    let Some((name, path)) = spec.split_once('=') else {
        return Err(usage(format!(
            "--allocator '{spec}' must be NAME=PATH.so, e.g. hoard=/usr/lib/libhoard.so"
        )));
    };
    let name = name.trim();
    if name.is_empty() || name.contains([',', ' ', '/']) {
        return Err(usage(format!(
            "--allocator '{spec}': the name must be a plain word"
        )));
    }
    Ok((name.to_string(), PathBuf::from(path.trim())))
}

/// Every allocator that can run here, plus the ones that cannot (with the package to install).
pub fn discover(custom: &[(String, PathBuf)]) -> Result<(Vec<Allocator>, Vec<Missing>)> {
    let mut found = vec![Allocator {
        name: "system".into(),
        lib: None,
        origin: "glibc".into(),
    }];
    let mut missing = Vec::new();
    let cache = ldconfig_cache();
    for k in KNOWN {
        // --allocator NAME=PATH names the library itself: no need to look for it.
        if custom.iter().any(|(n, _)| n == k.name) {
            continue;
        }
        match (find_library(k.soname, &cache), &k.source) {
            (Some(p), source) => found.push(Allocator {
                name: k.name.into(),
                lib: Some(p),
                origin: match source {
                    Source::Debian(pkg) => format!("Debian package {pkg}"),
                    Source::Build(_) => "found by the dynamic linker".into(),
                },
            }),
            (None, Source::Debian(pkg)) => missing.push(Missing {
                name: k.name.into(),
                reason: format!("{} not found; install the Debian package {pkg}", k.soname),
            }),
            (None, Source::Build(how)) => missing.push(Missing {
                name: k.name.into(),
                reason: format!("{} not found; {how}", k.soname),
            }),
        }
    }
    for name in memlens_native::reference_allocators() {
        let lib = memlens_native::path(&format!("libmemlens-{name}.so"))?;
        found.push(Allocator {
            name: name.to_string(),
            lib: Some(lib),
            origin: "memlens".into(),
        });
    }
    for (name, path) in custom {
        if found.iter().any(|a| &a.name == name) || missing.iter().any(|m| &m.name == name) {
            return Err(usage(format!(
                "--allocator {name}=…: the name '{name}' is already taken; choose another"
            )));
        }
        if path.is_file() {
            let lib = path.canonicalize().unwrap_or_else(|_| path.clone());
            found.push(Allocator {
                name: name.clone(),
                lib: Some(lib),
                origin: "--allocator".into(),
            });
        } else {
            missing.push(Missing {
                name: name.clone(),
                reason: format!("{} does not exist", path.display()),
            });
        }
    }
    Ok((found, missing))
}

/// Restrict to `--allocators LIST` (in the order given); unknown names are usage errors, known but
/// missing ones stay in `missing`.
pub fn select(
    found: Vec<Allocator>,
    missing: Vec<Missing>,
    list: Option<&str>,
) -> Result<(Vec<Allocator>, Vec<Missing>)> {
    let Some(list) = list else {
        return Ok((found, missing));
    };
    let mut sel = Vec::new();
    let mut miss = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if let Some(a) = found.iter().find(|a| a.name == name) {
            if !sel.iter().any(|s: &Allocator| s.name == name) {
                sel.push(a.clone());
            }
        } else if let Some(m) = missing.iter().find(|m| m.name == name) {
            miss.push(m.clone());
        } else {
            let known: Vec<&str> = found
                .iter()
                .map(|a| a.name.as_str())
                .chain(missing.iter().map(|m| m.name.as_str()))
                .collect();
            return Err(usage(format!(
                "unknown allocator '{name}' (known: {}; add others with --allocator NAME=PATH.so)",
                known.join(", ")
            )));
        }
    }
    if sel.is_empty() && miss.is_empty() {
        return Err(usage("--allocators is empty"));
    }
    Ok((sel, miss))
}
