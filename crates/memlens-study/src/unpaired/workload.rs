//! The workloads a study measures: how each is started and how its metric is read from its output.
use crate::StudyArgs;
use anyhow::{bail, Context, Result};
use memlens_measure::{units, usage};
use regex::Regex;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A workload of the unpaired study: a program started once per run.
#[derive(Debug, Clone)]
pub enum Workload {
    /// The malloc-test loop (workloads/c/malloc_test.c).
    Synthetic {
        /// Threads allocating.
        threads: u64,
        /// Block size.
        size: u64,
        /// Call depth of the loop.
        depth: u32,
        /// malloc/free pairs per thread.
        ops: u64,
    },
    /// The staged trading pipeline (`memlens workload pipeline`).
    Pipeline {
        /// Quotes per run.
        quotes: u64,
        /// Instruments (order books).
        instruments: usize,
        /// Seed of the quote generator.
        seed: u64,
    },
    /// Any program; metric = wall time or the first capture of `metric` in its output.
    Command {
        /// Program and arguments.
        argv: Vec<String>,
        /// Where the metric is in its output (None: wall time).
        metric: Option<Regex>,
    },
}

/// One run's measurements: the primary metric (what overhead is computed on) and extra figures.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Measure {
    /// The metric overheads are computed on (see [`Workload::unit`]).
    pub primary: f64,
    /// Other figures by name (`cycles_per_pair`, `p99_ns`, `checksum`, `wall_s`…).
    pub extra: BTreeMap<String, f64>,
}

/// The workloads the arguments ask for: a CMD after `--`, or the built-in ones, checked.
pub fn from_args(a: &StudyArgs) -> Result<Vec<Workload>> {
    if !a.cmd.is_empty() {
        let metric = match &a.metric {
            Some(r) => Some(Regex::new(r).map_err(|e| usage(format!("bad --metric regex: {e}")))?),
            None => None,
        };
        if metric.as_ref().is_some_and(|r| r.captures_len() < 2) {
            return Err(usage(
                "--metric needs a capture group, e.g. 'latency=([0-9.]+)'",
            ));
        }
        return Ok(vec![Workload::Command {
            argv: a.cmd.clone(),
            metric,
        }]);
    }
    if a.metric.is_some() {
        return Err(usage("--metric applies to a CMD given after `--`"));
    }
    let names: Vec<&str> = match a.workload.as_str() {
        "all" => vec!["synthetic", "pipeline"],
        "synthetic" => vec!["synthetic"],
        "pipeline" => vec!["pipeline"],
        other => {
            return Err(usage(format!(
            "unknown workload '{other}' (use synthetic, pipeline or all, or give a CMD after --)"
        )))
        }
    };
    let size = units::parse_size(&a.size)?;
    let threads =
        units::parse_count_list(&a.threads).map_err(|e| usage(format!("bad --threads: {e}")))?;
    if threads.iter().any(|&t| t == 0 || t > 1024) {
        return Err(usage("--threads must be between 1 and 1024"));
    }
    if a.depth == 0 || a.depth > 1000 || a.ops == 0 || a.quotes == 0 || a.instruments == 0 {
        return Err(usage(
            "--depth, --ops, --quotes and --instruments must be at least 1 (depth ≤ 1000)",
        ));
    }
    let mut out = Vec::new();
    for n in names {
        match n {
            "synthetic" => out.extend(threads.iter().map(|&t| Workload::Synthetic {
                threads: t,
                size,
                depth: a.depth,
                ops: a.ops,
            })),
            _ => out.push(Workload::Pipeline {
                quotes: a.quotes,
                instruments: a.instruments,
                seed: a.seed,
            }),
        }
    }
    Ok(out)
}

impl Workload {
    /// Short name used in tables, file names and JSON.
    pub fn name(&self) -> String {
        match self {
            Workload::Synthetic { threads, .. } => format!("synthetic-{threads}t"),
            Workload::Pipeline { .. } => "pipeline".into(),
            Workload::Command { argv, .. } => {
                let base = std::path::Path::new(&argv[0])
                    .file_name()
                    .map(|s| s.to_string_lossy().into_owned());
                base.unwrap_or_else(|| argv[0].clone())
            }
        }
    }

    /// One line saying what the workload does.
    pub fn describe(&self) -> String {
        match self {
            Workload::Synthetic { threads, size, depth, ops } => format!(
                "malloc-test loop: {threads} thread(s), each {ops} malloc/free pairs of {} B at call depth {depth}, memory untouched; metric = mean cycles per malloc (TSC)",
                size
            ),
            Workload::Pipeline { quotes, instruments, seed } => format!(
                "trading pipeline: {quotes} quotes over {instruments} order books (seed {seed}), 3 threads; metric = mean tick-to-order latency (TSC)"
            ),
            Workload::Command { argv, metric } => match metric {
                Some(r) => format!("`{}`; metric = first capture of /{}/ in its output", argv.join(" "), r.as_str()),
                None => format!("`{}`; metric = wall time", argv.join(" ")),
            },
        }
    }

    /// Unit of the primary metric.
    pub fn unit(&self) -> &'static str {
        match self {
            Workload::Synthetic { .. } => "cycles/malloc",
            Workload::Pipeline { .. } => "ns (mean latency)",
            Workload::Command {
                metric: Some(_), ..
            } => "(metric)",
            Workload::Command { metric: None, .. } => "s (wall)",
        }
    }

    /// Program and arguments to start.
    pub fn argv(&self) -> Result<Vec<String>> {
        Ok(match self {
            Workload::Synthetic {
                threads,
                size,
                depth,
                ops,
            } => {
                let exe = memlens_native::path("malloc_test")
                    .context("cannot find the malloc_test workload")?;
                vec![
                    exe.display().to_string(),
                    threads.to_string(),
                    size.to_string(),
                    depth.to_string(),
                    ops.to_string(),
                ]
            }
            Workload::Pipeline {
                quotes,
                instruments,
                seed,
            } => {
                let me: PathBuf =
                    std::env::current_exe().context("cannot find the memlens executable")?;
                vec![
                    me.display().to_string(),
                    "workload".into(),
                    "pipeline".into(),
                    "--quotes".into(),
                    quotes.to_string(),
                    "--instruments".into(),
                    instruments.to_string(),
                    "--seed".into(),
                    seed.to_string(),
                ]
            }
            Workload::Command { argv, .. } => argv.clone(),
        })
    }

    /// Read the metric from a finished run's output (`wall` seconds measured by the runner).
    pub fn measure(&self, stdout: &str, stderr: &str, wall: f64) -> Result<Measure> {
        match self {
            Workload::Synthetic { .. } => parse_synthetic(stdout),
            Workload::Pipeline { .. } => parse_pipeline(stdout),
            Workload::Command { metric: None, .. } => Ok(Measure {
                primary: wall,
                extra: BTreeMap::from([("wall_s".into(), wall)]),
            }),
            Workload::Command {
                metric: Some(re), ..
            } => {
                let text = format!("{stdout}\n{stderr}");
                let cap = re.captures(&text).and_then(|c| c.get(1)).with_context(|| {
                    format!(
                        "the command's output does not match --metric /{}/",
                        re.as_str()
                    )
                })?;
                let v: f64 = cap.as_str().trim().parse().with_context(|| {
                    format!(
                        "--metric captured '{}', which is not a number",
                        cap.as_str()
                    )
                })?;
                Ok(Measure {
                    primary: v,
                    extra: BTreeMap::from([("wall_s".into(), wall)]),
                })
            }
        }
    }
}

fn parse_synthetic(stdout: &str) -> Result<Measure> {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("malloc_test "))
        .context("malloc_test printed no result line")?;
    let mut extra = BTreeMap::new();
    for kv in line.split_whitespace().skip(1) {
        if let Some((k, v)) = kv.split_once('=') {
            if let Ok(x) = v.parse::<f64>() {
                extra.insert(k.to_string(), x);
            }
        }
    }
    let Some(&primary) = extra.get("cycles_per_malloc") else {
        bail!("malloc_test result line lacks cycles_per_malloc: {line}")
    };
    if !extra.contains_key("cycles_per_pair") {
        bail!("malloc_test result line lacks cycles_per_pair: {line}");
    }
    Ok(Measure { primary, extra })
}

fn parse_pipeline(stdout: &str) -> Result<Measure> {
    let m = memlens_workloads::PipelineMetrics::find(stdout)?;
    let ns = &m.latency_ns;
    let mut extra = BTreeMap::from([
        ("mean_ns".to_string(), ns.mean),
        ("p50_ns".to_string(), ns.p50),
        ("p99_ns".to_string(), ns.p99),
        ("p999_ns".to_string(), ns.p999),
        ("seconds".to_string(), m.seconds),
    ]);
    // The checksum of the orders is the proof that every configuration did the same work.
    if let Ok(c) = u64::from_str_radix(&m.checksum, 16) {
        extra.insert("checksum".into(), (c >> 12) as f64);
    }
    Ok(Measure {
        primary: ns.mean,
        extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_synthetic_line() {
        let m = parse_synthetic("malloc_test threads=1 size=512 depth=10 ops=5 cycles_per_pair=60.5 cycles_per_malloc=70.25\n").unwrap();
        assert_eq!(m.primary, 70.25);
        assert_eq!(m.extra["cycles_per_pair"], 60.5);
        assert!(parse_synthetic("nothing").is_err());
    }

    #[test]
    fn command_metric_regex() {
        let w = Workload::Command {
            argv: vec!["x".into()],
            metric: Some(Regex::new("took ([0-9.]+) ms").unwrap()),
        };
        assert_eq!(
            w.measure("a\ntook 12.5 ms\n", "", 1.0).unwrap().primary,
            12.5
        );
        assert!(w.measure("nope", "", 1.0).is_err());
    }
}
