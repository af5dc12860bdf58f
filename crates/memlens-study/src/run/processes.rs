//! Whole processes: what cannot be switched inside a process — tcmalloc's sampler, heaptrack, a
//! command that runs to completion, and everything under `--schedule processes` — runs one process
//! per block, in the schedule of the blocks (`off, c1, off, c2, …, off`, the configurations
//! shuffled per round), so each run is paired with the runs of its reference beside it: the program
//! over the same allocator without any profiler (glibc, jemalloc or tcmalloc preloaded). A placebo
//! is a run of the reference.
//!
//! The built-in workloads run in their plain mode: the synthetic loop `--ops` malloc/free pairs per
//! thread (mean cycles per malloc), the pipeline `--ops` ticks per thread (mean tick latency, and
//! its p99); a command's run is measured by `--metric` (wall time by default).
use super::blocks::{malloc_test, rtc};
use super::launch::{cost, cost_block, lib, memlens_env, regex_of, scale_of, spawn, window_dumps};
use crate::model::{shell_words, Alloc, Command, Key, Part, ProcOut, Settings, Workload};
use crate::profilers::{find_exe, lg_of};
use crate::rows::config_name;
use anyhow::{bail, Context, Result};
use memlens_workloads::schedule;
use regex::Regex;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// How a run of one configuration is started: its environment, and a program it runs under.
#[derive(Default)]
struct Launch {
    env: Vec<(String, String)>,
    wrapper: Vec<String>,
}

/// The launch of `key` (the reference's with None) in a cell over `alloc`; any file a profiler
/// writes goes under `tmp`, named from `tag`.
fn launch(alloc: Alloc, key: Option<&Key>, s: &Settings, tmp: &Path, tag: &str) -> Result<Launch> {
    let mut l = Launch::default();
    match alloc {
        Alloc::Glibc => {}
        Alloc::Jemalloc => l.env.push((
            "LD_PRELOAD".into(),
            lib("libjemalloc.so.2", "libjemalloc2")?,
        )),
        Alloc::Tcmalloc => l.env.push((
            "LD_PRELOAD".into(),
            lib("libtcmalloc.so.4", "libgoogle-perftools4")?,
        )),
    }
    let out = tmp.join(tag);
    match key {
        None | Some(Key::Placebo(_)) => {}
        Some(Key::Inactive) => l.env.extend(memlens_env("dwarf", None, Some(&out))?),
        Some(Key::Memlens(u, i)) => {
            l.env
                .extend(memlens_env(u, Some(s.intervals[*i]), Some(&out))?)
        }
        // prof_final off: the dump at exit is not part of what the study measures, and the prefix
        // keeps any dump jemalloc still writes inside the temporary directory.
        Some(Key::Jemalloc(i)) => l.env.push((
            "MALLOC_CONF".into(),
            format!(
                "prof:true,prof_active:true,lg_prof_sample:{},prof_final:false,prof_prefix:{}",
                lg_of(s.intervals[*i]),
                out.display()
            ),
        )),
        Some(Key::Tcmalloc(i)) => l.env.push((
            "TCMALLOC_SAMPLE_PARAMETER".into(),
            s.intervals[*i].to_string(),
        )),
        Some(Key::Heaptrack) => {
            let exe = find_exe("heaptrack")
                .context("heaptrack is not installed (Debian package heaptrack)")?;
            l.wrapper = vec![
                exe.display().to_string(),
                "-o".into(),
                out.display().to_string(),
            ];
            // heaptrack blocks the program until its interpreter runs (~0.5 s here): start-up,
            // not what the per-malloc figure compares, so the synthetic loop warms up first
            l.env.push(("MALLOC_TEST_WARMUP_MS".into(), "1000".into()));
        }
    }
    Ok(l)
}

/// The program of a workload's runs and how a run's value is read from its output.
struct Program {
    argv: Vec<String>,
    workload: Workload,
    regex: Option<Regex>,
}

/// One run's value: its cost and, where the run has them, its latency quantiles.
type Value = (f64, Option<[f64; 3]>);

impl Program {
    fn of(w: &Workload, s: &Settings) -> Result<Program> {
        let argv = match w {
            Workload::Synthetic { .. } => {
                let mut a = malloc_test(None, w)?;
                a.push(s.ops.to_string());
                a
            }
            Workload::Pipeline { working_set, .. } => {
                let mut a = rtc(*working_set, s)?;
                a.extend(["--ticks".into(), s.ops.to_string()]);
                a
            }
            Workload::Command(c) => c.argv.clone(),
            Workload::Service(_) => bail!("a service is studied in blocks only"),
        };
        let regex = match w {
            Workload::Command(c) => regex_of(&c.metric)?,
            _ => None,
        };
        Ok(Program {
            argv,
            workload: w.clone(),
            regex,
        })
    }

    /// Run once as `l` says; `name` is the configuration's, for the error of a failed run.
    fn run(&self, l: &Launch, name: &str) -> Result<Value> {
        let full: Vec<String> = l.wrapper.iter().chain(&self.argv).cloned().collect();
        let what = format!(
            "`{}` as {name} (no overhead computed from it)",
            shell_words(&self.argv)
        );
        let ran = spawn(&full, &l.env, &what)?;
        let field = |line: &str, k: &str| -> Option<f64> {
            line.split_whitespace()
                .find_map(|kv| kv.strip_prefix(k)?.strip_prefix('=')?.parse().ok())
        };
        let line = |prefix: &str| {
            ran.out
                .lines()
                .find(|l| l.starts_with(prefix))
                .with_context(|| format!("{what}: no '{prefix}' line in its output"))
        };
        Ok(match &self.workload {
            Workload::Synthetic { .. } => {
                let l = line("malloc_test ")?;
                let v = field(l, "cycles_per_malloc").context("no cycles_per_malloc")?;
                (v, None)
            }
            Workload::Pipeline { .. } => {
                let l = line("rtc ticks=")?;
                let q = ["p50_ns", "p99_ns", "p999_ns"].map(|k| field(l, k).unwrap_or(f64::NAN));
                (field(l, "mean_ns").context("no mean_ns")?, Some(q))
            }
            Workload::Command(c) => {
                let v = cost(&c.metric, self.regex.as_ref(), &ran.out, ran.wall, ran.cpu);
                (v.with_context(|| what.clone())?, None)
            }
            Workload::Service(_) => bail!("a service is studied in blocks only"),
        })
    }
}

static RUNS: AtomicU64 = AtomicU64::new(0);

/// Remove what the profilers of a run left under `tmp` (dumps, heaptrack's trace: not read).
fn clean(tmp: &Path, tag: &str) {
    if let Ok(rd) = std::fs::read_dir(tmp) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with(tag) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}

/// Run one part of a whole-process cell over `alloc`: a warm-up run of the reference, then the
/// schedule, every block a run. The blocks' costs are scaled so that the warm-up reads 2^40.
pub(super) fn run_part(
    w: &Workload,
    s: &Settings,
    alloc: Alloc,
    part: &Part,
    tmp: &Path,
) -> Result<ProcOut> {
    let prog = Program::of(w, s)?;
    let name = |c: u32| -> String {
        match c {
            0 => "off".into(),
            c => config_name(&part.confs[c as usize - 1], s).1,
        }
    };
    let run = |c: u32| -> Result<(Value, f64)> {
        let tag = format!("run-{}", RUNS.fetch_add(1, Ordering::Relaxed));
        let key = (c > 0).then(|| &part.confs[c as usize - 1]);
        let l = launch(alloc, key, s, tmp, &tag)?;
        let t0 = std::time::Instant::now();
        let v = prog.run(&l, &name(c));
        clean(tmp, &tag);
        Ok((v?, t0.elapsed().as_secs_f64()))
    };
    let ((first, _), _) = run(0)?;
    let scale = scale_of(first);
    let mut out = ProcOut::new(part.confs.clone());
    let mut wall = 0.0;
    let sched = schedule(part.confs.len(), part.rounds, part.seed);
    for &(round, c) in &sched {
        let ((v, q), t) = run(c)?;
        wall += t;
        out.blocks.push(cost_block(round, c, v, scale, q));
    }
    out.block_s = wall / sched.len().max(1) as f64;
    Ok(out)
}

/// The profile windows of a command with one unwinder: a whole run exact, then one at each
/// interval; the raw dumps of each (every process of the run).
pub(super) fn windows(c: &Command, s: &Settings, u: &str, tmp: &Path) -> Result<Vec<Vec<PathBuf>>> {
    let mut out = Vec::new();
    for (k, r) in std::iter::once(0)
        .chain(s.intervals.iter().copied())
        .enumerate()
    {
        let prefix = tmp.join(format!("win-{}-{u}-{k}", c.name));
        let what = format!("{} {u} {r}", c.name);
        spawn(&c.argv, &memlens_env(u, Some(r), Some(&prefix))?, &what)?;
        out.push(window_dumps(&prefix, &what)?);
    }
    Ok(out)
}
