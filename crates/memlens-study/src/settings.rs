//! The paired study (the default): processes switch the profiler between off, placebo and each
//! interval in short blocks; overheads are paired in time.
//!
//! * `engine.rs`: the processes, the schedule of further rounds, the profile windows, the rows.
//! * `builtin.rs`: the built-in workloads, which switch the profiler themselves.
//! * `service.rs`: a program under its own load, switched through its control socket.
//! * `stats.rs`: each block against the off blocks beside it.
//! * `verdict.rs`: the answer first, the tables, and the JSON, CSV and HTML files;
//!   `chart.rs` its picture.
mod builtin;
mod chart;
mod engine;
mod service;
mod stats;
mod verdict;

use crate::{profilers, StudyArgs};
use anyhow::Result;
use memlens_measure::{units, usage};

pub(crate) use engine::{run, Metric, Service, Settings, Workload};
pub(crate) use verdict::emit;

// Default budget (`memlens study`, the README's main job, < 5 minutes on 2 cores): 1 synthetic +
// 3 pipeline workloads × (2 unwinders + jemalloc) = 12 cells, each in 3 processes of 14 rounds ×
// (2 × 8 + 1) blocks (7 intervals and the placebo) × 10 ms ≈ 2.4 s → ~90 s, plus 2 × 8 profile
// windows of the pipeline (~15 s); redis under redis-benchmark: 3 servers × 6 rounds × 15 runs of
// ~0.15 s plus warm-up and windows ≈ 60 s; the rest of --max-time (270 s) goes to further
// processes for the configurations still wider than their target. 10 ms rather than 20 ms blocks: a round takes
// half the time and was about as informative on this 2-core VM (fp 64K, 50 rounds: ±1.5–3.9
// points at 10 ms vs ±1.1–3.6 at 20 ms), with the same overhead (docs/study.md).
// libgcc and libunwind are measured on request.

/// Unwinders of the default paired study (the others on request: `--unwinders dwarf,fp,libgcc,libunwind`).
const DEFAULT_PAIRED_UNWINDERS: &str = "dwarf,fp";
/// Intervals a service is measured at by default: the published comparisons' (64K, 512K) and the
/// published recommendation (2M); each costs a run of the load per round.
pub(crate) const SERVICE_INTERVALS: [u64; 3] = [64 << 10, 512 << 10, 2 << 20];
/// redis-benchmark's run for one block: 40000 SETs and 40000 GETs of 64-byte values over 10000
/// keys, 8 connections pipelining 64 requests (~0.15 s on this 2-core VM). Of the settings tried
/// here under load (1 to 8 connections, 1 to 64 deep, 4000 to 100000 requests) this one gave the
/// narrowest spread of the server's CPU time between placebo blocks (docs/study.md).
const REDIS_LOAD: &str =
    "redis-benchmark -h 127.0.0.1 -p {PORT} -n 40000 -c 8 -P 64 -t set,get -r 10000 -d 64 -q";

/// Working set of a name: l2, llc or dram (or a size).
fn working_set(name: &str, threads: u64) -> Result<u64> {
    let l2 = memlens_measure::sysinfo::caches()
        .iter()
        .find(|c| c.level == 2)
        .map_or(1 << 20, |c| c.size_bytes);
    let llc = memlens_measure::sysinfo::llc_bytes().max(4 << 20);
    Ok(match name {
        "l2" => 4 * l2 * threads,
        "llc" => llc / 2,
        "dram" => 4 * llc,
        other => units::parse_size(other).map_err(|_| {
            usage(format!(
                "unknown working set '{other}' (use l2, llc, dram or a size)"
            ))
        })?,
    })
}

/// The metric of a service from `--metric` (cpu, wall or a regex) and `--metric-rate`.
fn metric(a: &StudyArgs) -> Result<Metric> {
    Ok(match a.metric.as_deref() {
        None | Some("cpu") => Metric::Cpu,
        Some("wall") => Metric::Wall,
        Some(r) => {
            let re = regex::Regex::new(r).map_err(|e| usage(format!("bad --metric regex: {e}")))?;
            if re.captures_len() < 2 {
                return Err(usage(
                    "--metric needs a capture group, e.g. 'requests per second: ([0-9.]+)'",
                ));
            }
            Metric::Output {
                regex: r.to_string(),
                rate: a.metric_rate,
            }
        }
    })
}

/// The indices of `want` among `intervals`, or all of them when none is there.
fn subset(intervals: &[u64], want: &[u64]) -> Vec<usize> {
    let v: Vec<usize> = (0..intervals.len())
        .filter(|&i| want.contains(&intervals[i]))
        .collect();
    if v.is_empty() {
        (0..intervals.len()).collect()
    } else {
        v
    }
}

/// The default study's real application: redis-server under redis-benchmark, each server on a
/// port free when it starts (`{PORT}`, filled in by service.rs).
fn redis(intervals: &[u64], unwinders: Vec<String>, a: &StudyArgs) -> Result<Option<Service>> {
    let missing: Vec<&str> = ["redis-server", "redis-benchmark"]
        .into_iter()
        .filter(|p| profilers::find_exe(p).is_none())
        .collect();
    if !missing.is_empty() {
        eprintln!(
            "memlens: {} not installed here (Debian packages redis-server, redis-tools); the redis workload is left out",
            missing.join(" and ")
        );
        return Ok(None);
    }
    let port = service::PORT;
    let server = [
        "redis-server",
        "--port",
        port,
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ];
    Ok(Some(Service {
        name: "redis".into(),
        load: REDIS_LOAD.to_string(),
        server: server.iter().map(|s| s.to_string()).collect(),
        pid: None,
        metric: metric(a)?,
        window_loads: a.window_loads,
        intervals: subset(intervals, &SERVICE_INTERVALS),
        unwinders,
    }))
}

/// The program of `--load`: `-- SERVER ARGS` or `--pid PID`.
fn service(a: &StudyArgs, load: &str, intervals: &[u64], unwinders: &[String]) -> Result<Service> {
    let pid = a
        .pid
        .as_deref()
        .map(memlens_target::parse_pid)
        .transpose()?;
    let name = match (pid, a.cmd.first()) {
        (Some(_), Some(_)) => {
            return Err(usage("give either --pid PID or -- SERVER ARGS, not both"))
        }
        (None, None) => return Err(usage(
            "--load needs the program to study: -- SERVER ARGS (memlens starts it) or --pid PID",
        )),
        (Some(p), None) => memlens_target::ProcStatus::of(p)?
            .field("Name:")
            .unwrap_or("process")
            .to_string(),
        (None, Some(c)) => std::path::Path::new(c)
            .file_name()
            .map_or(c.clone(), |f| f.to_string_lossy().into_owned()),
    };
    if load.trim().is_empty() {
        return Err(usage("--load needs a command"));
    }
    Ok(Service {
        name,
        load: load.to_string(),
        server: if pid.is_some() { vec![] } else { a.cmd.clone() },
        pid,
        metric: metric(a)?,
        window_loads: a.window_loads,
        intervals: (0..intervals.len()).collect(),
        unwinders: unwinders.to_vec(),
    })
}

/// The paired study's settings from the command line (usage errors before anything runs).
pub(crate) fn settings(a: &StudyArgs) -> Result<Settings> {
    if a.metric.is_some() && a.load.is_none() && !a.workload.contains("redis") {
        return Err(usage(
            "--metric applies to --load (a service) or a CMD given after `--` with --unpaired",
        ));
    }
    if a.pid.is_some() && a.load.is_none() {
        return Err(usage(
            "--pid needs --load 'CMD': the load that drives the process",
        ));
    }
    let mut baselines = profilers::baselines(&a.baselines)?;
    if let Some(b) = baselines
        .iter()
        .find(|b| b.kind != profilers::BaselineKind::Jemalloc)
    {
        return Err(usage(format!(
            "{} cannot be switched at run time: measure it with --unpaired",
            b.name()
        )));
    }
    let service_only = a.load.is_some();
    let jemalloc = match baselines.pop() {
        // a service's jemalloc is its own (the runtime finds it at run time)
        Some(_) if service_only => true,
        Some(b) if b.path.is_none() => {
            eprintln!("memlens: baseline jemalloc is not installed here (Debian package libjemalloc2); it is left out");
            false
        }
        Some(_) => true,
        None => false,
    };
    // Each unwinder is one process per workload plus its profile windows: the default measures the
    // two that matter most (memlens's own and frame pointers) to keep the study under 5 minutes;
    // a service, the default unwinder.
    let unwinders = match (&a.unwinders, a.quick, service_only) {
        (None, _, true) => vec!["dwarf".to_string()],
        (None, true, _) => vec!["fp".to_string()],
        (None, false, _) => profilers::unwinders(Some(DEFAULT_PAIRED_UNWINDERS))?,
        (Some(u), _, _) => profilers::unwinders(Some(u))?,
    };
    if service_only && unwinders.len() > 1 && a.pid.is_some() {
        return Err(usage(
            "--pid studies one process with the unwinder it has: give at most one --unwinders",
        ));
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let syn_threads =
        units::parse_count_list(&a.threads).map_err(|e| usage(format!("bad --threads: {e}")))?;
    if syn_threads.iter().any(|&t| t == 0 || t > 1024) {
        return Err(usage("--threads must be between 1 and 1024"));
    }
    let size = units::parse_size(&a.size)?;
    let sets: Vec<&str> = if a.quick {
        vec!["l2"]
    } else {
        a.working_sets.split(',').map(str::trim).collect()
    };
    let intervals = if service_only && a.intervals.is_none() {
        SERVICE_INTERVALS.to_vec()
    } else {
        crate::intervals(a)?
    };
    let mut workloads = Vec::new();
    if let Some(load) = &a.load {
        workloads.push(Workload::Service(service(a, load, &intervals, &unwinders)?));
    } else {
        let names: Vec<&str> = match a.workload.as_str() {
            "all" if a.quick => vec!["synthetic", "pipeline"],
            "all" => vec!["synthetic", "redis", "pipeline"],
            list => list.split(',').map(str::trim).collect(),
        };
        for n in names {
            match n {
                "synthetic" => workloads.extend(syn_threads.iter().map(|&t| Workload::Synthetic {
                    threads: t,
                    size,
                    depth: a.depth,
                })),
                "pipeline" => {
                    for s in &sets {
                        workloads.push(Workload::Pipeline {
                            label: s.to_string(),
                            working_set: working_set(s, threads)?,
                        });
                    }
                }
                // one unwinder (the first) on redis: each is a server of its own
                "redis" => workloads.extend(
                    redis(&intervals, unwinders.iter().take(1).cloned().collect(), a)?
                        .map(Workload::Service),
                ),
                other => {
                    return Err(usage(format!(
                        "unknown workload '{other}' (use synthetic, redis, pipeline or all)"
                    )))
                }
            }
        }
    }
    let rounds = a.rounds.unwrap_or(if a.quick { 4 } else { 40 });
    let service_rounds = a.rounds.unwrap_or(if a.quick { 4 } else { 16 });
    let max_seconds = a.max_time.unwrap_or(if a.quick { 0.0 } else { 270.0 });
    if !(0.0..=86_400.0).contains(&max_seconds) {
        return Err(usage(
            "--max-time is a number of seconds between 0 and 86400",
        ));
    }
    let bad_target = || usage("bad --ci-target: points, e.g. 2,4,4 (synthetic, pipeline, service)");
    let targets: Vec<f64> = a
        .ci_target
        .split(',')
        .map(|x| x.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad_target())?;
    let (target_synthetic, target_pipeline, target_service) = match targets[..] {
        [s, p] => (s, p, p),
        [s, p, v] => (s, p, v),
        _ => return Err(bad_target()),
    };
    if !(target_synthetic > 0.0 && target_pipeline > 0.0 && target_service > 0.0) {
        return Err(usage("bad --ci-target: the half widths must be > 0"));
    }
    if rounds == 0 || rounds > 10_000 || a.block_ms == 0 || a.block_ms > 10_000 {
        return Err(usage("--rounds and --block-ms must be between 1 and 10000"));
    }
    if !(0.0..=100.0).contains(&a.min_coverage) {
        return Err(usage("--min-coverage is a percentage between 0 and 100"));
    }
    if a.processes == 0 || a.processes > 100 || a.placebos == 0 || a.placebos > 20 {
        return Err(usage(
            "--processes must be between 1 and 100, --placebos between 1 and 20",
        ));
    }
    // A process found running is one process: every round comes from it.
    let processes = if a.pid.is_some() { 1 } else { a.processes };
    Ok(Settings {
        workloads,
        intervals,
        unwinders,
        jemalloc,
        rounds,
        service_rounds,
        processes,
        placebos: a.placebos,
        max_seconds,
        target_synthetic,
        target_pipeline,
        target_service,
        block_ms: if a.quick { 10 } else { a.block_ms },
        window_ticks: if a.no_exact {
            0
        } else {
            a.window_ticks.unwrap_or(20_000)
        },
        min_coverage: a.min_coverage,
        budget: a.budget,
        seed: a.seed,
    })
}
