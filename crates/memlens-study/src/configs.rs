//! The configurations a study runs, and the baseline profilers found on this machine.
//!
//! Every profiling configuration is compared with the configuration that runs the same allocator
//! without profiling: memlens and heaptrack with `off` (glibc malloc, no runtime), jemalloc's profiler
//! with plain jemalloc, tcmalloc's sampler with plain tcmalloc.
use anyhow::Result;
use memlens_measure::{units::format_size, usage};
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

/// What a configuration runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Setup {
    /// No runtime, glibc malloc.
    Off,
    /// Runtime loaded, sampling off (MEMLENS_ACTIVE=0).
    Inactive,
    /// memlens sampling at `interval` with `unwinder`.
    Sampled {
        /// Mean bytes between samples.
        interval: u64,
        /// Unwinder name.
        unwinder: String,
    },
    /// memlens exact mode (every allocation).
    Exact {
        /// Unwinder name.
        unwinder: String,
    },
    /// jemalloc preloaded, profiler off (None) or sampling at 2^lg bytes.
    Jemalloc {
        /// log2 of the sampling interval.
        lg_sample: Option<u32>,
    },
    /// gperftools tcmalloc preloaded, sampler off (None) or at `interval`.
    Tcmalloc {
        /// Mean bytes between samples.
        interval: Option<u64>,
    },
    /// heaptrack (exact tracing) over glibc malloc.
    Heaptrack,
}

/// A configuration: one way of running the workload, compared with its reference.
#[derive(Debug, Clone, Serialize)]
pub struct Config {
    /// Its name in tables (`memlens fp 512K`, `jemalloc prof 512K`, `off`).
    pub name: String,
    /// What it runs.
    pub setup: Setup,
    /// Name of the configuration it is compared with (None: it is a reference itself).
    pub reference: Option<String>,
    /// Group for plots: "memlens fp", "jemalloc", ….
    pub family: String,
    /// The interval it samples at (None when not sampling).
    pub interval: Option<u64>,
}

impl Config {
    /// Does this configuration write a memlens profile to read for quality?
    pub fn memlens_profile(&self) -> bool {
        matches!(self.setup, Setup::Sampled { .. } | Setup::Exact { .. })
    }
}

/// jemalloc samples at powers of two only: log2 of the interval, rounded to the nearest power.
pub fn lg_of(interval: u64) -> u32 {
    (interval.max(1) as f64).log2().round() as u32
}

/// Every configuration of a study, in the order they are interleaved within a repeat.
pub fn all(
    intervals: &[u64],
    unwinders: &[String],
    baselines: &[Baseline],
    exact: bool,
) -> Vec<Config> {
    let mut v = Vec::new();
    let mk = |name: String,
              setup: Setup,
              reference: Option<&str>,
              family: &str,
              interval: Option<u64>| Config {
        name,
        setup,
        reference: reference.map(str::to_string),
        family: family.to_string(),
        interval,
    };
    v.push(mk("off".into(), Setup::Off, None, "reference", None));
    v.push(mk(
        "inactive".into(),
        Setup::Inactive,
        Some("off"),
        "memlens",
        None,
    ));
    for u in unwinders {
        for &r in intervals {
            let setup = Setup::Sampled {
                interval: r,
                unwinder: u.clone(),
            };
            v.push(mk(
                format!("memlens {u} {}", format_size(r)),
                setup,
                Some("off"),
                &format!("memlens {u}"),
                Some(r),
            ));
        }
        if exact {
            v.push(mk(
                format!("memlens {u} exact"),
                Setup::Exact {
                    unwinder: u.clone(),
                },
                Some("off"),
                &format!("memlens {u}"),
                None,
            ));
        }
    }
    for b in baselines.iter().filter(|b| b.path.is_some()) {
        match b.kind {
            BaselineKind::Jemalloc => {
                v.push(mk(
                    "jemalloc".into(),
                    Setup::Jemalloc { lg_sample: None },
                    None,
                    "reference",
                    None,
                ));
                for &r in intervals {
                    let lg = lg_of(r);
                    let name = format!("jemalloc prof {}", format_size(1 << lg));
                    v.push(mk(
                        name,
                        Setup::Jemalloc {
                            lg_sample: Some(lg),
                        },
                        Some("jemalloc"),
                        "jemalloc",
                        Some(1 << lg),
                    ));
                }
            }
            BaselineKind::Tcmalloc => {
                v.push(mk(
                    "tcmalloc".into(),
                    Setup::Tcmalloc { interval: None },
                    None,
                    "reference",
                    None,
                ));
                for &r in intervals {
                    let name = format!("tcmalloc sampler {}", format_size(r));
                    v.push(mk(
                        name,
                        Setup::Tcmalloc { interval: Some(r) },
                        Some("tcmalloc"),
                        "tcmalloc",
                        Some(r),
                    ));
                }
            }
            BaselineKind::Heaptrack => v.push(mk(
                "heaptrack".into(),
                Setup::Heaptrack,
                Some("off"),
                "heaptrack",
                None,
            )),
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configuration_set() {
        let b = vec![Baseline {
            kind: BaselineKind::Jemalloc,
            path: Some("/x".into()),
            package: "p",
        }];
        let c = all(&[65536, 1 << 20], &["fp".into()], &b, true);
        let names: Vec<&str> = c.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "off",
                "inactive",
                "memlens fp 64K",
                "memlens fp 1M",
                "memlens fp exact",
                "jemalloc",
                "jemalloc prof 64K",
                "jemalloc prof 1M"
            ]
        );
        assert_eq!(lg_of(512 << 10), 19);
        assert!(unwinders(Some("bogus")).is_err());
        assert!(baselines("valgrind").is_err());
    }
}
