//! Running the configurations: one child process per run, started with the environment of its
//! configuration (LD_PRELOAD + memlens/jemalloc/tcmalloc variables, or under heaptrack), with every
//! profile written into a private temporary directory.
use super::configs::{self, Config, Setup};
use super::judge;
use super::workload::{Measure, Workload};
use super::Plan;
use crate::profilers::{self, SCRUB};
use anyhow::{bail, Context, Result};
use memlens_render::progress::Progress;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// One run of one configuration.
#[derive(Debug, Clone, Serialize)]
pub struct Run {
    /// Which repeat (0-based): runs of the same repeat are compared with each other.
    pub repeat: u32,
    /// The workload's metric and extra figures.
    pub measure: Measure,
    /// Wall time of the process, seconds.
    pub wall_s: f64,
    /// Samples the profiler reported (memlens: from its dump).
    pub samples: Option<u64>,
    /// Share of truncated stacks among the samples (memlens).
    pub truncated_share: Option<f64>,
    /// Quality of the profile against the exact truth (memlens sampled and exact runs).
    pub quality: Option<crate::quality::Quality>,
}

/// Every run of one configuration.
#[derive(Debug, Clone, Serialize)]
pub struct ConfigRuns {
    /// The configuration.
    pub config: Config,
    /// Its runs, in repeat order.
    pub runs: Vec<Run>,
}

/// All results of one workload.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadResults {
    /// Workload name ([`Workload::name`]).
    pub workload: String,
    /// What it does ([`Workload::describe`]).
    pub description: String,
    /// Unit of its metric ([`Workload::unit`]).
    pub unit: String,
    /// Every configuration's runs, in the order they were interleaved.
    pub configs: Vec<ConfigRuns>,
    /// The top stacks of the exact truth, per unwinder (for the per-stack error table).
    pub truth: Vec<crate::quality::TruthSummary>,
    /// Why quality could not be judged, when it could not.
    pub quality_note: Option<String>,
}

/// The environment, preload and wrapper of a configuration.
struct Launch {
    env: Vec<(String, String)>,
    wrapper: Vec<String>,
    /// Prefix of memlens raw dumps (`<prefix>.<pid>.<seq>.raw`).
    dump_prefix: Option<PathBuf>,
}

/// heaptrack blocks the program until its interpreter process runs (~0.5 s here): start-up, not what
/// the per-pair figure compares, so under heaptrack the synthetic loop runs untimed for a second first
/// (the pipeline workload ignores it). memlens exact mode gets no warm-up: its run is also the truth
/// the sampled runs are scored against, so it must allocate exactly what they do.
fn warm_up() -> Vec<(String, String)> {
    vec![("MALLOC_TEST_WARMUP_MS".into(), "1000".into())]
}

fn launch(cfg: &Config, tmp: &Path, tag: &str) -> Result<Launch> {
    let runtime = || -> Result<String> { Ok(memlens_native::runtime()?.display().to_string()) };
    let mut l = Launch {
        env: Vec::new(),
        wrapper: Vec::new(),
        dump_prefix: None,
    };
    let lib = |name: &str| -> Result<String> {
        profilers::find_lib(name)
            .map(|p| p.display().to_string())
            .with_context(|| format!("{name} is not installed"))
    };
    match &cfg.setup {
        Setup::Off => {}
        Setup::Inactive => {
            l.env.push(("LD_PRELOAD".into(), runtime()?));
            l.env.push(("MEMLENS_ACTIVE".into(), "0".into()));
        }
        Setup::Sampled { interval, unwinder } => {
            let prefix = tmp.join(tag);
            l.env.push(("LD_PRELOAD".into(), runtime()?));
            l.env.push(("MEMLENS_ACTIVE".into(), "1".into()));
            l.env
                .push(("MEMLENS_INTERVAL".into(), interval.to_string()));
            l.env.push(("MEMLENS_UNWINDER".into(), unwinder.clone()));
            l.env
                .push(("MEMLENS_OUT".into(), prefix.display().to_string()));
            l.dump_prefix = Some(prefix);
        }
        Setup::Exact { unwinder } => {
            let prefix = tmp.join(tag);
            l.env.push(("LD_PRELOAD".into(), runtime()?));
            l.env.push(("MEMLENS_ACTIVE".into(), "1".into()));
            l.env.push(("MEMLENS_INTERVAL".into(), "0".into()));
            l.env.push(("MEMLENS_UNWINDER".into(), unwinder.clone()));
            l.env
                .push(("MEMLENS_OUT".into(), prefix.display().to_string()));
            l.dump_prefix = Some(prefix);
        }
        Setup::Jemalloc { lg_sample } => {
            l.env.push(("LD_PRELOAD".into(), lib("libjemalloc.so.2")?));
            if let Some(lg) = lg_sample {
                // prof_final off: the dump at exit is not part of what the study measures, and the
                // prefix keeps any dump jemalloc still writes inside the temporary directory.
                let conf = format!(
                    "prof:true,prof_active:true,lg_prof_sample:{lg},prof_final:false,prof_prefix:{}",
                    tmp.join(format!("{tag}.jeprof")).display()
                );
                l.env.push(("MALLOC_CONF".into(), conf));
            }
        }
        Setup::Tcmalloc { interval } => {
            l.env.push(("LD_PRELOAD".into(), lib("libtcmalloc.so.4")?));
            if let Some(r) = interval {
                l.env
                    .push(("TCMALLOC_SAMPLE_PARAMETER".into(), r.to_string()));
            }
        }
        Setup::Heaptrack => {
            let exe = profilers::find_exe("heaptrack")
                .context("heaptrack is not installed (Debian package heaptrack)")?
                .display()
                .to_string();
            l.env.extend(warm_up());
            l.wrapper = vec![
                exe,
                "-o".into(),
                tmp.join(format!("{tag}.heaptrack")).display().to_string(),
            ];
        }
    }
    Ok(l)
}

/// Raw dumps written under `prefix` (`<prefix>.<pid>.<seq>.raw`, one per process of the run).
fn dumps(prefix: &Path) -> Vec<PathBuf> {
    memlens_target::raw_dumps(prefix)
        .map(|d| d.into_iter().map(|d| d.path).collect())
        .unwrap_or_default()
}

fn last_line(s: &str) -> &str {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
}

/// Run one configuration once. Returns the metric and the raw dumps it left.
fn run_once(
    w: &Workload,
    cfg: &Config,
    tmp: &Path,
    tag: &str,
) -> Result<(Measure, f64, Vec<PathBuf>)> {
    let argv = w.argv()?;
    let l = launch(cfg, tmp, tag)?;
    let full: Vec<String> = l
        .wrapper
        .iter()
        .cloned()
        .chain(argv.iter().cloned())
        .collect();
    let mut cmd = Command::new(&full[0]);
    cmd.args(&full[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for k in SCRUB {
        cmd.env_remove(k);
    }
    cmd.envs(l.env.iter().map(|(k, v)| (k, v)));
    let t0 = Instant::now();
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {}", full[0]))?;
    let wall = t0.elapsed().as_secs_f64();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    if !out.status.success() {
        let status = match (
            out.status.code(),
            std::os::unix::process::ExitStatusExt::signal(&out.status),
        ) {
            (Some(c), _) => format!("exit status {c}"),
            (None, Some(s)) => format!("signal {s}"),
            _ => "unknown status".into(),
        };
        let why = last_line(&stderr);
        bail!(
            "`{}` failed under configuration '{}' with {status}{}; no overhead computed from it",
            argv.join(" "),
            cfg.name,
            if why.is_empty() {
                String::new()
            } else {
                format!(" (stderr: {why})")
            }
        );
    }
    let m = w.measure(&stdout, &stderr, wall).with_context(|| {
        format!(
            "configuration '{}' ran, but its metric is missing",
            cfg.name
        )
    })?;
    let d = l.dump_prefix.as_deref().map(dumps).unwrap_or_default();
    if l.dump_prefix.is_some() && d.is_empty() {
        bail!("configuration '{}': the memlens runtime wrote no profile (MEMLENS_OUT) — is the runtime working?", cfg.name);
    }
    // Baselines' own profiles can be large (heaptrack's trace): they are not read, so drop them now.
    if let Ok(rd) = std::fs::read_dir(tmp) {
        for e in rd.filter_map(|e| e.ok()) {
            let n = e.file_name().to_string_lossy().into_owned();
            if n.starts_with(tag) && !n.ends_with(".raw") {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
    Ok((m, wall, d))
}

/// Run every configuration of every workload, interleaved within each workload:
/// repeat 1 of A, B, C …, then repeat 2 of A, B, C …, so slow drift (other load, thermal) hits all
/// configurations alike.
pub fn run_plan(plan: &Plan) -> Result<Vec<WorkloadResults>> {
    let cfgs = configs::all(
        &plan.intervals,
        &plan.unwinders,
        &plan.baselines,
        plan.exact,
    );
    for b in plan.baselines.iter().filter(|b| b.path.is_none()) {
        eprintln!(
            "memlens: baseline {} is not installed here (Debian package {}); it is left out",
            b.name(),
            b.package
        );
    }
    let exact = cfgs
        .iter()
        .filter(|c| matches!(c.setup, Setup::Exact { .. }))
        .count() as u64;
    let per_workload =
        (cfgs.len() as u64 - exact) * plan.repeats as u64 + exact * plan.exact_repeats as u64;
    let total = plan.workloads.len() as u64 * per_workload;
    let progress = Progress::new(total, "study");
    let tmp = tempfile::Builder::new()
        .prefix("memlens-study.")
        .tempdir()
        .context("cannot create a temporary directory")?;
    let mut all = Vec::new();
    for (wi, w) in plan.workloads.iter().enumerate() {
        let mut runs: Vec<Vec<(Run, Vec<PathBuf>)>> = vec![Vec::new(); cfgs.len()];
        for rep in 0..plan.repeats {
            for (ci, cfg) in cfgs.iter().enumerate() {
                if matches!(cfg.setup, Setup::Exact { .. }) && rep >= plan.exact_repeats {
                    continue;
                }
                progress.step(format!("{} · {} · repeat {}", w.name(), cfg.name, rep + 1));
                let tag = format!("w{wi:02}c{ci:03}r{rep:03}");
                let (measure, wall_s, dumps) = run_once(w, cfg, tmp.path(), &tag)?;
                let run = Run {
                    repeat: rep,
                    measure,
                    wall_s,
                    samples: None,
                    truncated_share: None,
                    quality: None,
                };
                runs[ci].push((run, dumps));
                progress.inc();
            }
        }
        progress.step(format!("{} · reading profiles", w.name()));
        let (configs, truth, note) = judge::judge(&cfgs, runs)?;
        all.push(WorkloadResults {
            workload: w.name(),
            description: w.describe(),
            unit: w.unit().into(),
            configs,
            truth,
            quality_note: note,
        });
    }
    progress.finish();
    Ok(all)
}
