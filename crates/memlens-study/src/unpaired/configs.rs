//! The configurations the unpaired study runs, in the order they are interleaved.
//!
//! Every profiling configuration is compared with the configuration that runs the same allocator
//! without profiling: memlens and heaptrack with `off` (glibc malloc, no runtime), jemalloc's profiler
//! with plain jemalloc, tcmalloc's sampler with plain tcmalloc.
use crate::profilers::{lg_of, Baseline, BaselineKind};
use memlens_measure::units::format_size;
use serde::Serialize;

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
    use crate::profilers::{Baseline, BaselineKind};

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
    }
}
