//! The built-in workloads as paired processes: the synthetic loop (`workloads/c/malloc_test.c
//! --paired`) and the run-to-completion pipeline (`memlens workload rtc --paired`) switch the
//! profiler themselves between blocks and print one `block` line each; the pipeline's profile
//! windows (exact, then each interval) give the quality.
use super::engine::{Key, Part, ProcOut, Settings, Workload};
use crate::profilers::{find_lib, lg_of, SCRUB};
use anyhow::{bail, Context, Result};
use memlens_workloads::Block;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The profiler a built-in process is started for.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// memlens with this unwinder, loaded inactive.
    Memlens(String),
    /// jemalloc's profiler (`prof:true,prof_active:false`).
    Jemalloc,
}

fn argv(w: &Workload, s: &Settings, part: &Part, list: &str) -> Result<Vec<String>> {
    Ok(match w {
        Workload::Synthetic {
            threads,
            size,
            depth,
        } => {
            let exe = memlens_native::path("malloc_test")
                .context("cannot find the malloc_test workload")?;
            [
                exe.display().to_string(),
                "--paired".into(),
                threads.to_string(),
                size.to_string(),
                depth.to_string(),
                s.block_ms.to_string(),
                part.rounds.to_string(),
                part.seed.to_string(),
                list.into(),
            ]
            .into()
        }
        Workload::Pipeline { working_set, .. } => {
            let me = std::env::current_exe().context("cannot find the memlens executable")?;
            [
                me.display().to_string(),
                "workload".into(),
                "rtc".into(),
                "--paired".into(),
                list.into(),
                "--rounds".into(),
                part.rounds.to_string(),
                "--block-ms".into(),
                s.block_ms.to_string(),
                "--working-set".into(),
                working_set.to_string(),
                "--seed".into(),
                s.seed.to_string(),
                "--order-seed".into(),
                part.seed.to_string(),
                "--counters".into(),
                "hw".into(),
            ]
            .into()
        }
        Workload::Service(_) => bail!("a service is not a built-in workload"),
    })
}

pub(super) fn spawn(argv: &[String], env: &[(String, String)], what: &str) -> Result<String> {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for k in SCRUB {
        cmd.env_remove(k);
    }
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    let out = cmd
        .output()
        .with_context(|| format!("cannot start {}", argv[0]))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let why = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("");
        bail!("{what} failed ({}): {why}", out.status);
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(super) fn runtime() -> Result<String> {
    Ok(memlens_native::runtime()?.display().to_string())
}

/// The jemalloc library and the MALLOC_CONF that loads its profiler inactive.
pub(super) fn jemalloc_env(tmp: &Path) -> Result<Vec<(String, String)>> {
    Ok(vec![
        (
            "LD_PRELOAD".to_string(),
            find_lib("libjemalloc.so.2")
                .context("jemalloc is not installed (Debian package libjemalloc2)")?
                .display()
                .to_string(),
        ),
        ("MALLOC_CONF".into(), jemalloc_conf(tmp)),
    ])
}

/// jemalloc's profiler loaded but inactive, dumping nothing at exit, any file it writes in `tmp`.
pub(super) fn jemalloc_conf(tmp: &Path) -> String {
    format!(
        "prof:true,prof_active:false,prof_final:false,prof_prefix:{}",
        tmp.join("je").display()
    )
}

/// Run one built-in paired process over `part`: its blocks numbered by `part.confs`.
pub(super) fn run_process(
    w: &Workload,
    s: &Settings,
    kind: &Kind,
    part: &Part,
    tmp: &Path,
) -> Result<ProcOut> {
    let t0 = std::time::Instant::now();
    let list = part
        .confs
        .iter()
        .map(|k| match k {
            Key::Memlens(_, i) => format!("m{}", s.intervals[*i]),
            Key::Jemalloc(i) => format!("j{}", lg_of(s.intervals[*i])),
            Key::Placebo(p) => format!("p{p}"),
        })
        .collect::<Vec<_>>()
        .join(",");
    let env = match kind {
        Kind::Memlens(u) => vec![
            ("LD_PRELOAD".to_string(), runtime()?),
            ("MEMLENS_ACTIVE".into(), "0".into()),
            ("MEMLENS_UNWINDER".into(), u.clone()),
        ],
        Kind::Jemalloc => jemalloc_env(tmp)?,
    };
    let a = argv(w, s, part, &list)?;
    let out = spawn(&a, &env, &format!("{} under {kind:?}", w.name()))?;
    let mut pr = ProcOut::new(part.confs.clone());
    for l in out.lines() {
        if let Some(b) = Block::parse(l) {
            let b = b?;
            if b.config as usize > part.confs.len() {
                bail!("{} printed a block of an unknown configuration", w.name());
            }
            pr.blocks.push(b);
        } else if let Some(rest) = l.strip_prefix("switch ") {
            let v: Vec<u64> = rest
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            if v.len() == 3 {
                pr.switch = Some([v[0], v[1], v[2]]);
            }
        } else if let Some(rest) = l.strip_prefix("counters ") {
            pr.counters = Some(rest.to_string());
        }
    }
    if pr.blocks.is_empty() {
        bail!("{} printed no blocks", w.name());
    }
    let k = part.confs.len() as f64;
    let blocks_s = (part.rounds as f64 * (2.0 * k + 1.0) + k + 1.0) * s.block_ms as f64 / 1e3;
    pr.overhead_s = (t0.elapsed().as_secs_f64() - blocks_s).max(0.0);
    Ok(pr)
}

/// The profile windows of one unwinder on the pipeline: exact, then each interval; the raw dumps
/// of each.
pub(super) fn windows(
    w: &Workload,
    s: &Settings,
    u: &str,
    tmp: &Path,
) -> Result<Vec<Vec<PathBuf>>> {
    let Workload::Pipeline { working_set, .. } = w else {
        bail!("profile windows run on the pipeline")
    };
    let me = std::env::current_exe().context("cannot find the memlens executable")?;
    let mut out = Vec::new();
    for (k, r) in std::iter::once(0)
        .chain(s.intervals.iter().copied())
        .enumerate()
    {
        let prefix = tmp.join(format!("win-{u}-{k}"));
        let a = [
            me.display().to_string(),
            "workload".into(),
            "rtc".into(),
            "--window".into(),
            r.to_string(),
            "--ticks".into(),
            s.window_ticks.to_string(),
            "--working-set".into(),
            working_set.to_string(),
            "--seed".into(),
            s.seed.to_string(),
        ];
        let env = vec![
            ("LD_PRELOAD".to_string(), runtime()?),
            ("MEMLENS_ACTIVE".into(), "0".into()),
            ("MEMLENS_UNWINDER".into(), u.to_string()),
            ("MEMLENS_OUT".into(), prefix.display().to_string()),
        ];
        spawn(&a, &env, &format!("profile window {u} {r}"))?;
        let d: Vec<PathBuf> = memlens_target::raw_dumps(&prefix)?
            .into_iter()
            .map(|d| d.path)
            .collect();
        if d.is_empty() {
            bail!("the profile window {u} {r} wrote no dump");
        }
        out.push(d);
    }
    Ok(out)
}
