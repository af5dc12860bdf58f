//! Reading the profiles memlens wrote during a study, as stacks of comparable frames.
//!
//! Addresses differ between runs (ASLR), so each frame is first made module-relative and then
//! symbolized to a function name; a stack is compared across runs as its sequence of names. All
//! dumps of a workload are symbolized together, each unique address once.
use anyhow::{Context, Result};
use std::collections::HashMap;
use std::path::PathBuf;

/// One run's profile: stacks (outermost-last frame names) with their unbiased allocated bytes.
#[derive(Debug, Clone, Default)]
pub struct RunProfile {
    pub samples: u64,
    pub truncated: u64,
    pub stacks: HashMap<Vec<String>, f64>,
}

impl RunProfile {
    pub fn total(&self) -> f64 {
        self.stacks.values().sum()
    }
}

/// A frame as (module index, module-relative address); None outside every module.
type Frame = Option<(usize, u64)>;

/// A raw dump reduced to what the study needs.
struct Dump {
    samples: u64,
    truncated: u64,
    /// (alloc bytes, frames as (module index, module-relative address))
    stacks: Vec<(f64, Vec<Frame>)>,
}

/// Modules seen in any dump, by (path, build id).
#[derive(Default)]
struct Modules {
    ids: HashMap<(String, String), usize>,
    list: Vec<(String, String)>,
}

impl Modules {
    fn id(&mut self, path: &str, build_id: &str) -> usize {
        let key = (path.to_string(), build_id.to_string());
        if let Some(&i) = self.ids.get(&key) {
            return i;
        }
        self.list.push(key.clone());
        self.ids.insert(key, self.list.len() - 1);
        self.list.len() - 1
    }
}

fn is_own(path: &str) -> bool {
    let base = path.rsplit('/').next().unwrap_or(path);
    base.starts_with("libmemlens") && base.ends_with(".so")
}

fn read_dump(path: &std::path::Path, mods: &mut Modules) -> Result<Dump> {
    let d = memlens_profile::raw::read(path)?;
    let local: Vec<(usize, &memlens_profile::raw::Module)> = d
        .modules
        .iter()
        .map(|m| (mods.id(&m.path, &m.build_id), m))
        .collect();
    let mut stacks = Vec::with_capacity(d.stacks.len());
    for s in &d.stacks {
        let mut frames = Vec::with_capacity(s.pcs.len());
        for &pc in &s.pcs {
            match local.iter().find(|(_, m)| m.segment_of(pc).is_some()) {
                // The runtime's own frames above the allocation call are not the program's.
                Some((_, m)) if frames.is_empty() && is_own(&m.path) => continue,
                Some((id, m)) => frames.push(Some((*id, pc.wrapping_sub(1).wrapping_sub(m.base)))),
                None => frames.push(None),
            }
        }
        stacks.push((s.alloc_bytes as f64, frames));
    }
    Ok(Dump {
        samples: d.meta.samples,
        truncated: d.meta.truncated,
        stacks,
    })
}

/// Load the dumps of many runs (each run may have several processes' dumps) and symbolize them
/// together. Returns one profile per run, in order.
pub fn load_runs(runs: &[Vec<PathBuf>]) -> Result<Vec<RunProfile>> {
    let mut mods = Modules::default();
    let mut dumps: Vec<Vec<Dump>> = Vec::with_capacity(runs.len());
    for r in runs {
        let mut v = Vec::new();
        for p in r {
            v.push(
                read_dump(p, &mut mods)
                    .with_context(|| format!("cannot read the profile {}", p.display()))?,
            );
        }
        dumps.push(v);
    }
    // Unique addresses per module, symbolized in one batch per module.
    let mut addrs: Vec<Vec<u64>> = vec![Vec::new(); mods.list.len()];
    for d in dumps.iter().flatten() {
        for (_, frames) in &d.stacks {
            for (m, a) in frames.iter().flatten() {
                addrs[*m].push(*a);
            }
        }
    }
    let mut names: HashMap<(usize, u64), String> = HashMap::new();
    let mut sym = memlens_profile::symbolize::Symbolizer::new();
    for (m, list) in addrs.iter_mut().enumerate() {
        list.sort_unstable();
        list.dedup();
        if list.is_empty() {
            continue;
        }
        let (path, build_id) = &mods.list[m];
        let base = path.rsplit('/').next().unwrap_or(path);
        // A module that cannot be symbolized keeps module+offset names: still stable across runs.
        let frames = sym
            .module(path, build_id, list)
            .unwrap_or_else(|_| vec![Vec::new(); list.len()]);
        for (a, fr) in list.iter().zip(frames) {
            let name = if fr.is_empty() {
                format!("{base}+{a:#x}")
            } else {
                // Innermost first; inlined calls count as frames of their own.
                fr.iter()
                    .map(|f| sym.demangle(&f.name))
                    .collect::<Vec<_>>()
                    .join(";")
            };
            names.insert((m, *a), name);
        }
    }
    Ok(dumps
        .into_iter()
        .map(|ds| {
            let mut p = RunProfile::default();
            for d in ds {
                p.samples += d.samples;
                p.truncated += d.truncated;
                for (bytes, frames) in d.stacks {
                    let key: Vec<String> = frames
                        .iter()
                        .map(|f| {
                            f.and_then(|k| names.get(&k).cloned())
                                .unwrap_or_else(|| "?".into())
                        })
                        .collect();
                    *p.stacks.entry(key).or_insert(0.0) += bytes;
                }
            }
            p
        })
        .collect())
}
