//! The built-in workloads switched in blocks: the synthetic loop (`workloads/c/malloc_test.c
//! --paired`) and the run-to-completion pipeline (`memlens workload rtc --paired`) switch the
//! profiler themselves between blocks and print one `block` line each. Their profile windows
//! (`--window`: exact, then each interval, each in a process of its own) give the quality.
use super::launch::{jemalloc_env, memlens_env, spawn, window_dumps};
use crate::model::{Key, Kind, Part, ProcOut, Settings, Workload};
use crate::profilers::lg_of;
use anyhow::{bail, Context, Result};
use memlens_workloads::Block;
use std::path::{Path, PathBuf};

/// `malloc_test` in `mode` (`--paired`, `--window`, or plain with none) with the synthetic loop's
/// threads, block size and depth; the mode's own arguments follow.
pub(super) fn malloc_test(mode: Option<&str>, w: &Workload) -> Result<Vec<String>> {
    let Workload::Synthetic {
        threads,
        size,
        depth,
    } = w
    else {
        bail!("{} is not the synthetic loop", w.name())
    };
    let exe =
        memlens_native::path("malloc_test").context("cannot find the malloc_test workload")?;
    let mut a = vec![exe.display().to_string()];
    a.extend(mode.map(str::to_string));
    a.extend([threads.to_string(), size.to_string(), depth.to_string()]);
    Ok(a)
}

/// `memlens workload rtc` and the arguments every mode shares.
pub(super) fn rtc(working_set: u64, s: &Settings) -> Result<Vec<String>> {
    let me = std::env::current_exe().context("cannot find the memlens executable")?;
    Ok(vec![
        me.display().to_string(),
        "workload".into(),
        "rtc".into(),
        "--working-set".into(),
        working_set.to_string(),
        "--seed".into(),
        s.seed.to_string(),
    ])
}

fn argv(w: &Workload, s: &Settings, part: &Part, list: &str) -> Result<Vec<String>> {
    Ok(match w {
        Workload::Synthetic { .. } => {
            let mut a = malloc_test(Some("--paired"), w)?;
            a.extend([s.block_ms.to_string(), part.rounds.to_string()]);
            a.extend([part.seed.to_string(), list.into()]);
            a
        }
        Workload::Pipeline { working_set, .. } => {
            let mut a = rtc(*working_set, s)?;
            a.extend(["--paired".into(), list.into()]);
            a.extend(["--rounds".into(), part.rounds.to_string()]);
            a.extend(["--block-ms".into(), s.block_ms.to_string()]);
            a.extend(["--order-seed".into(), part.seed.to_string()]);
            a.extend(["--counters".into(), "hw".into()]);
            a
        }
        _ => bail!("{} is not a built-in workload", w.name()),
    })
}

/// The configuration list of a paired process (`m<BYTES>`, `j<LG>`, `p<K>`).
fn list(part: &Part, s: &Settings) -> Result<String> {
    let v: Vec<String> = part
        .confs
        .iter()
        .map(|k| match k {
            Key::Memlens(_, i) => Ok(format!("m{}", s.intervals[*i])),
            Key::Jemalloc(i) => Ok(format!("j{}", lg_of(s.intervals[*i]))),
            Key::Placebo(p) => Ok(format!("p{p}")),
            other => bail!("{other:?} cannot be switched inside a process"),
        })
        .collect::<Result<_>>()?;
    Ok(v.join(","))
}

/// Run one built-in process switched in blocks over `part`: its blocks numbered by `part.confs`.
pub(super) fn run_process(
    w: &Workload,
    s: &Settings,
    kind: &Kind,
    part: &Part,
    tmp: &Path,
) -> Result<ProcOut> {
    let t0 = std::time::Instant::now();
    let env = match kind {
        Kind::Memlens(u) => memlens_env(u, None, None)?,
        Kind::Jemalloc => jemalloc_env(tmp)?,
        Kind::Runs(_) => bail!("whole processes are not switched in blocks"),
    };
    let a = argv(w, s, part, &list(part, s)?)?;
    let ran = spawn(&a, &env, &format!("{} under {kind}", w.name()))?;
    let mut pr = ProcOut::new(part.confs.clone());
    for l in ran.out.lines() {
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

/// The profile windows of one unwinder on a built-in workload: the same work after a warm-up and
/// a reset, exact and then at each interval; the raw dumps of each.
pub(super) fn windows(
    w: &Workload,
    s: &Settings,
    u: &str,
    tmp: &Path,
) -> Result<Vec<Vec<PathBuf>>> {
    let mut out = Vec::new();
    for (k, r) in std::iter::once(0)
        .chain(s.intervals.iter().copied())
        .enumerate()
    {
        let a = match w {
            Workload::Synthetic { .. } => {
                let mut a = malloc_test(Some("--window"), w)?;
                a.extend([s.window_ticks.to_string(), r.to_string()]);
                a
            }
            Workload::Pipeline { working_set, .. } => {
                let mut a = rtc(*working_set, s)?;
                a.extend(["--window".into(), r.to_string()]);
                a.extend(["--ticks".into(), s.window_ticks.to_string()]);
                a
            }
            _ => bail!("{} is not a built-in workload", w.name()),
        };
        let prefix = tmp.join(format!("win-{}-{u}-{k}", w.name()));
        let what = format!("{} {u} {r}", w.name());
        spawn(&a, &memlens_env(u, None, Some(&prefix))?, &what)?;
        out.push(window_dumps(&prefix, &what)?);
    }
    Ok(out)
}
