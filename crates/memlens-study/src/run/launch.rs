//! How the study starts a program under a profiler, and reads what a run cost: the environment of
//! each profiler (memlens's runtime, jemalloc's profiler), one start-and-wait with the run's
//! output and a one-line reason when it fails, a run's value by `--metric`, and the windows' raw
//! dumps. Shared by the three runners.
use crate::model::Metric;
use crate::profilers::{find_lib, SCRUB};
use anyhow::{anyhow, bail, Context, Result};
use memlens_workloads::Block;
use regex::Regex;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The memlens runtime's path.
pub fn runtime() -> Result<String> {
    Ok(memlens_native::runtime()?.display().to_string())
}

/// The environment of memlens's runtime: loaded with `unwinder`, sampling at `interval` bytes
/// (0: every allocation) or inactive (None), its dumps under `out` (`<out>.<pid>.<seq>.raw`).
pub fn memlens_env(
    unwinder: &str,
    interval: Option<u64>,
    out: Option<&Path>,
) -> Result<Vec<(String, String)>> {
    let mut env = vec![
        ("LD_PRELOAD".to_string(), runtime()?),
        ("MEMLENS_UNWINDER".into(), unwinder.to_string()),
        (
            "MEMLENS_ACTIVE".into(),
            u8::from(interval.is_some()).to_string(),
        ),
    ];
    if let Some(r) = interval {
        env.push(("MEMLENS_INTERVAL".into(), r.to_string()));
    }
    if let Some(o) = out {
        env.push(("MEMLENS_OUT".into(), o.display().to_string()));
    }
    Ok(env)
}

/// A library the study preloads, or why it cannot.
pub fn lib(name: &str, package: &str) -> Result<String> {
    Ok(find_lib(name)
        .with_context(|| format!("{name} is not installed (Debian package {package})"))?
        .display()
        .to_string())
}

/// The jemalloc library and the MALLOC_CONF that loads its profiler inactive.
pub fn jemalloc_env(tmp: &Path) -> Result<Vec<(String, String)>> {
    Ok(vec![
        (
            "LD_PRELOAD".to_string(),
            lib("libjemalloc.so.2", "libjemalloc2")?,
        ),
        ("MALLOC_CONF".into(), jemalloc_conf(tmp)),
    ])
}

/// jemalloc's profiler loaded but inactive, dumping nothing at exit, any file it writes in `tmp`.
pub fn jemalloc_conf(tmp: &Path) -> String {
    format!(
        "prof:true,prof_active:false,prof_final:false,prof_prefix:{}",
        tmp.join("je").display()
    )
}

/// A finished run: its output and how long it took.
pub struct Ran {
    /// Standard output, then standard error.
    pub out: String,
    /// Wall time, s.
    pub wall: f64,
    /// CPU time of the run and everything it waited for (its rusage), s.
    pub cpu: f64,
}

/// The CPU seconds of the children this process has waited for.
fn children_cpu() -> f64 {
    // SAFETY: rusage is plain data (all zeroes is a valid value), and getrusage fills it.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    s(ru.ru_utime) + s(ru.ru_stime)
}

/// Run `argv` with the parent's profiler variables removed and `env` set, and wait for it. A run
/// that fails is an error saying `what` failed, with its status and the last line it printed.
pub fn spawn(argv: &[String], env: &[(String, String)], what: &str) -> Result<Ran> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for k in SCRUB {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let (cpu0, t0) = (children_cpu(), Instant::now());
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {}", argv[0]))?;
    let (wall, cpu) = (t0.elapsed().as_secs_f64(), children_cpu() - cpu0);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    if !out.status.success() {
        let why = last_line(&stderr).or_else(|| last_line(&stdout));
        bail!(
            "{what} failed ({}){}",
            out.status,
            why.map_or(String::new(), |l| format!(": {l}"))
        );
    }
    Ok(Ran {
        out: format!("{stdout}\n{stderr}"),
        wall,
        cpu,
    })
}

/// The last line of `s` that is not blank.
pub fn last_line(s: &str) -> Option<&str> {
    s.lines().rev().map(str::trim).find(|l| !l.is_empty())
}

/// A run's cost by `metric` (larger = slower): CPU or wall seconds, or the figure the regex
/// captures in its output (its inverse for a rate).
pub fn cost(metric: &Metric, regex: Option<&Regex>, out: &str, wall: f64, cpu: f64) -> Result<f64> {
    let (rate, re) = match (metric, regex) {
        (Metric::Cpu, _) => return Ok(cpu),
        (Metric::Wall, _) => return Ok(wall),
        (Metric::Output { rate, .. }, Some(re)) => (*rate, re),
        (Metric::Output { .. }, None) => bail!("--metric has no regex"),
    };
    let cap = re
        .captures(out)
        .and_then(|c| c.get(1))
        .ok_or_else(|| anyhow!("the output has no match of --metric '{}'", re.as_str()))?;
    let v: f64 = cap.as_str().trim().parse().map_err(|_| {
        anyhow!(
            "--metric captured '{}', which is not a number",
            cap.as_str()
        )
    })?;
    if !rate {
        return Ok(v);
    }
    if v <= 0.0 {
        bail!("the --metric figure is {v}: a rate must be > 0");
    }
    Ok(1.0 / v)
}

/// The compiled regex of an output metric.
pub fn regex_of(metric: &Metric) -> Result<Option<Regex>> {
    Ok(match metric {
        Metric::Output { regex, .. } => Some(Regex::new(regex)?),
        _ => None,
    })
}

/// A block of one run of a program or a load: its cost, kept as an integer scaled by `scale`
/// (so that the first run reads about 2^40), and the run's latency quantiles where it has them.
pub fn cost_block(round: u32, config: u32, cost: f64, scale: f64, q: Option<[f64; 3]>) -> Block {
    Block {
        round,
        config,
        ticks: 1,
        cycles: (cost * scale).round() as u64,
        quantiles: q,
        ..Block::default()
    }
}

/// The scale of [`cost_block`] for a first run that cost `cost`.
pub fn scale_of(cost: f64) -> f64 {
    if cost > 0.0 {
        (1u64 << 40) as f64 / cost
    } else {
        1.0
    }
}

/// The raw dumps a window wrote under `prefix`; an error when it wrote none.
pub fn window_dumps(prefix: &Path, what: &str) -> Result<Vec<PathBuf>> {
    let d: Vec<PathBuf> = memlens_target::raw_dumps(prefix)?
        .into_iter()
        .map(|d| d.path)
        .collect();
    if d.is_empty() {
        bail!("the profile window {what} wrote no dump");
    }
    Ok(d)
}
