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

/// A raw dump reduced to what the study needs.
struct Dump {
    samples: u64,
    truncated: u64,
    /// (alloc bytes, frames as (module index, module-relative address))
    stacks: Vec<(f64, Vec<Option<(usize, u64)>>)>,
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

/// The parts of a raw dump (format 1, runtime/README.md) the study needs.
struct RawModule {
    base: u64,
    build_id: String,
    path: String,
    /// (vaddr, memsz) of each PT_LOAD segment.
    segments: Vec<(u64, u64)>,
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).ok()
}

fn read_raw(path: &std::path::Path) -> Result<(u64, u64, Vec<RawModule>, Vec<(f64, Vec<u64>)>)> {
    let text = std::fs::read_to_string(path)?;
    if !text.starts_with("memlens-raw 1") {
        anyhow::bail!("not a memlens raw dump (version 1)");
    }
    if !text.trim_end().ends_with("end") {
        anyhow::bail!("truncated raw dump (no final 'end')");
    }
    let (mut samples, mut truncated, mut mods, mut stacks) = (0, 0, Vec::new(), Vec::new());
    let mut in_maps = false;
    for (n, line) in text.lines().enumerate() {
        let bad = || anyhow::anyhow!("line {}: malformed '{}'", n + 1, line);
        if in_maps {
            in_maps = line != "end maps";
            continue;
        }
        let f: Vec<&str> = line.split(' ').collect();
        match f[0] {
            "maps" => in_maps = true,
            "samples" => samples = f.get(1).and_then(|v| v.parse().ok()).ok_or_else(bad)?,
            "truncated" => truncated = f.get(1).and_then(|v| v.parse().ok()).ok_or_else(bad)?,
            "module" if f.len() >= 5 => mods.push(RawModule {
                base: hex(f[1]).ok_or_else(bad)?,
                build_id: if f[2] == "-" {
                    String::new()
                } else {
                    f[2].to_string()
                },
                path: f[4..].join(" "),
                segments: Vec::new(),
            }),
            "segment" if f.len() >= 3 => {
                let seg = (hex(f[1]).ok_or_else(bad)?, hex(f[2]).ok_or_else(bad)?);
                mods.last_mut().ok_or_else(bad)?.segments.push(seg);
            }
            "stack" if f.len() >= 7 => {
                let bytes: f64 = f[3].parse().map_err(|_| bad())?;
                let pcs = f[7..]
                    .iter()
                    .map(|p| hex(p))
                    .collect::<Option<Vec<u64>>>()
                    .ok_or_else(bad)?;
                stacks.push((bytes, pcs));
            }
            _ => {}
        }
    }
    Ok((samples, truncated, mods, stacks))
}

fn read_dump(path: &std::path::Path, mods: &mut Modules) -> Result<Dump> {
    let (samples, truncated, modules, raw_stacks) = read_raw(path)?;
    let local: Vec<(usize, &RawModule)> = modules
        .iter()
        .map(|m| (mods.id(&m.path, &m.build_id), m))
        .collect();
    let contains = |m: &RawModule, pc: u64| {
        pc.checked_sub(m.base)
            .is_some_and(|v| m.segments.iter().any(|(a, len)| v >= *a && v - a < *len))
    };
    let mut stacks = Vec::with_capacity(raw_stacks.len());
    for (bytes, pcs) in raw_stacks {
        let mut frames = Vec::with_capacity(pcs.len());
        for pc in pcs {
            match local.iter().find(|(_, m)| contains(m, pc)) {
                // The runtime's own frames above the allocation call are not the program's.
                Some((_, m)) if frames.is_empty() && is_own(&m.path) => continue,
                Some((id, m)) => frames.push(Some((*id, pc.wrapping_sub(1).wrapping_sub(m.base)))),
                None => frames.push(None),
            }
        }
        stacks.push((bytes, frames));
    }
    Ok(Dump {
        samples,
        truncated,
        stacks,
    })
}

/// Function names of `addrs` (ELF virtual addresses) in the module, innermost inlined frame first
/// and `;`-joined; `None` where unknown. (Until the profile crate's symbolizer lands, all unknown:
/// frames are then compared as module+offset, which is as stable across runs of the same binary.)
fn symbolize(_path: &str, _build_id: &str, addrs: &[u64]) -> Vec<Option<String>> {
    vec![None; addrs.len()]
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
    for (m, list) in addrs.iter_mut().enumerate() {
        list.sort_unstable();
        list.dedup();
        if list.is_empty() {
            continue;
        }
        let (path, build_id) = &mods.list[m];
        let base = path.rsplit('/').next().unwrap_or(path);
        // A module that cannot be symbolized keeps module+offset names: still stable across runs.
        for (a, name) in list.iter().zip(symbolize(path, build_id, list)) {
            names.insert((m, *a), name.unwrap_or_else(|| format!("{base}+{a:#x}")));
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
