//! The profilers a study measures, found on this machine: memlens's unwinders and the baseline
//! profilers (jemalloc's, tcmalloc's sampler, heaptrack), with the Debian package of what is missing.
//! The study chooses from these.
use anyhow::Result;
use memlens_measure::usage;
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Every unwinder the runtime has.
pub const ALL_UNWINDERS: [&str; 4] = ["dwarf", "fp", "libgcc", "libunwind"];
const LIB_DIRS: [&str; 4] = [
    "/usr/lib/x86_64-linux-gnu",
    "/lib/x86_64-linux-gnu",
    "/usr/lib64",
    "/usr/lib",
];

/// Variables of ours or of the baselines that the parent may carry and that would leak into a run
/// (every run removes them, then sets its own).
pub(crate) const SCRUB: [&str; 8] = [
    "LD_PRELOAD",
    "MALLOC_CONF",
    "TCMALLOC_SAMPLE_PARAMETER",
    "HEAPPROFILE",
    "MEMLENS_INTERVAL",
    "MEMLENS_UNWINDER",
    "MEMLENS_ACTIVE",
    "MEMLENS_OUT",
];

/// A library in the usual directories, if installed.
pub fn find_lib(name: &str) -> Option<PathBuf> {
    LIB_DIRS
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.exists())
}

/// A program on the PATH, if installed.
pub(crate) fn find_exe(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// The unwinders to measure: those asked (checked), or every one available here.
pub fn unwinders(asked: Option<&str>) -> Result<Vec<String>> {
    let libunwind = find_lib("libunwind.so.8").is_some();
    let Some(list) = asked else {
        return Ok(ALL_UNWINDERS
            .iter()
            .filter(|u| **u != "libunwind" || libunwind)
            .map(|u| u.to_string())
            .collect());
    };
    if list.trim() == "none" {
        return Ok(vec![]);
    }
    let mut out = Vec::new();
    for u in list.split(',').map(str::trim).filter(|u| !u.is_empty()) {
        if !ALL_UNWINDERS.contains(&u) {
            return Err(usage(format!(
                "unknown unwinder '{u}' (use dwarf, fp, libgcc, libunwind or none)"
            )));
        }
        if u == "libunwind" && !libunwind {
            return Err(usage(
                "the libunwind unwinder needs libunwind.so.8 (Debian package libunwind8)",
            ));
        }
        if !out.iter().any(|x| x == u) {
            out.push(u.to_string());
        }
    }
    if out.is_empty() {
        return Err(usage(format!("'{list}' names no unwinder")));
    }
    Ok(out)
}

/// The other heap profilers a study compares memlens with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BaselineKind {
    /// jemalloc's sampling profiler (`prof:true`, `lg_prof_sample`).
    Jemalloc,
    /// gperftools tcmalloc's sampler (`TCMALLOC_SAMPLE_PARAMETER`).
    Tcmalloc,
    /// heaptrack, which records every allocation.
    Heaptrack,
}

/// A baseline profiler asked for, found or not.
#[derive(Debug, Clone, Serialize)]
pub struct Baseline {
    /// Which profiler.
    pub kind: BaselineKind,
    /// Library or program found on this machine.
    pub path: Option<PathBuf>,
    /// Debian package that provides it.
    pub package: &'static str,
}

impl Baseline {
    /// Its name on the command line and in tables.
    pub fn name(&self) -> &'static str {
        match self.kind {
            BaselineKind::Jemalloc => "jemalloc",
            BaselineKind::Tcmalloc => "tcmalloc",
            BaselineKind::Heaptrack => "heaptrack",
        }
    }
}

/// The baselines of a `--baselines` list (`none` for none), each found on this machine or not.
pub fn baselines(list: &str) -> Result<Vec<Baseline>> {
    if list.trim() == "none" {
        return Ok(vec![]);
    }
    let mut out: Vec<Baseline> = Vec::new();
    for b in list.split(',').map(str::trim).filter(|b| !b.is_empty()) {
        let base = match b {
            "jemalloc" => Baseline {
                kind: BaselineKind::Jemalloc,
                path: find_lib("libjemalloc.so.2"),
                package: "libjemalloc2",
            },
            // The sampler of gperftools lives in the full libtcmalloc (not tcmalloc-minimal).
            "tcmalloc" => Baseline {
                kind: BaselineKind::Tcmalloc,
                path: find_lib("libtcmalloc.so.4"),
                package: "libgoogle-perftools4",
            },
            "heaptrack" => Baseline {
                kind: BaselineKind::Heaptrack,
                path: find_exe("heaptrack"),
                package: "heaptrack",
            },
            other => {
                return Err(usage(format!(
                    "unknown baseline '{other}' (use jemalloc, tcmalloc, heaptrack or none)"
                )))
            }
        };
        if !out.iter().any(|x| x.kind == base.kind) {
            out.push(base);
        }
    }
    Ok(out)
}

/// jemalloc samples at powers of two only: log2 of the interval, rounded to the nearest power.
pub fn lg_of(interval: u64) -> u32 {
    (interval.max(1) as f64).log2().round() as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profilers_asked_for() {
        assert_eq!(lg_of(512 << 10), 19);
        assert!(unwinders(Some("bogus")).is_err());
        assert!(baselines("valgrind").is_err());
    }
}
