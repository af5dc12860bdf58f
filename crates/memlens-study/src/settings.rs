//! The study's settings from the command line: what it studies (built-in workloads, a service under
//! its load, or a command), which profilers in which schedule, how many rounds — all checked before
//! anything runs, with a usage error for a flag this study would not read.
//!
//! The default study (`memlens study`, the README's main job, < 5 minutes on 2 cores): 1 synthetic
//! and 3 pipeline workloads × (2 unwinders + jemalloc) = 12 cells, each in 3 processes of 14 rounds ×
//! (2 × 8 + 1) blocks (7 intervals and the placebo) × 10 ms ≈ 2.4 s → ~90 s, plus 2 × 8 profile
//! windows of the pipeline (~15 s); redis under redis-benchmark: 3 servers × 6 rounds × 15 runs of
//! ~0.15 s plus warm-up and windows ≈ 60 s; the rest of --max-time (270 s) goes to further
//! processes for the configurations still wider than their target. 10 ms rather than 20 ms blocks:
//! a round takes half the time and was about as informative on this 2-core VM (fp 64K, 50 rounds:
//! ±1.5–3.9 points at 10 ms vs ±1.1–3.6 at 20 ms), with the same overhead (docs/study.md).
use crate::args::{ScheduleArg, StudyArgs};
use crate::model::{Command, Metric, Service, Settings, Workload, PORT};
use crate::profilers::{self, BaselineKind};
use anyhow::Result;
use memlens_measure::{units, usage};

/// Intervals of the default study.
const DEFAULT_INTERVALS: &str = "64K,128K,256K,512K,1M,2M,4M";
/// Unwinders of the default study (the others on request: `--unwinders dwarf,fp,libgcc,libunwind`):
/// each is one process per workload plus its profile windows, so the default measures the two that
/// matter most (memlens's own and frame pointers) to stay under 5 minutes.
const DEFAULT_UNWINDERS: &str = "dwarf,fp";
/// Intervals a service or a command is measured at by default: the published comparisons' (64K,
/// 512K) and the published recommendation (2M); each costs a run of the load per round.
const PROGRAM_INTERVALS: [u64; 3] = [64 << 10, 512 << 10, 2 << 20];
/// redis-benchmark's run for one block: 40000 SETs and 40000 GETs of 64-byte values over 10000
/// keys, 8 connections pipelining 64 requests (~0.15 s on this 2-core VM). Of the settings tried
/// here under load (1 to 8 connections, 1 to 64 deep, 4000 to 100000 requests) this one gave the
/// narrowest spread of the server's CPU time between placebo blocks (docs/study.md).
const REDIS_LOAD: &str =
    "redis-benchmark -h 127.0.0.1 -p {PORT} -n 40000 -c 8 -P 64 -t set,get -r 10000 -d 64 -q";

/// What a study is of.
#[derive(Clone, Copy, PartialEq)]
enum Subject {
    /// The built-in workloads (`--workload`).
    Builtin,
    /// A program under its own load (`--load`).
    Service,
    /// A program that runs to completion (`-- CMD` without `--load`).
    Command,
}

/// The profilers asked for, where each runs.
struct Profilers {
    unwinders: Vec<String>,
    whole: bool,
    jemalloc: bool,
    tcmalloc: bool,
    heaptrack: bool,
    notes: Vec<String>,
}

/// The `--intervals` asked for, or the default of what is studied.
fn intervals(a: &StudyArgs, subject: Subject) -> Result<Vec<u64>> {
    if subject != Subject::Builtin && a.intervals.is_none() {
        return Ok(PROGRAM_INTERVALS.to_vec());
    }
    let def = if a.quick { "64K,2M" } else { DEFAULT_INTERVALS };
    let v = units::parse_size_list(a.intervals.as_deref().unwrap_or(def))
        .map_err(|e| usage(format!("bad --intervals: {e}")))?;
    if v.contains(&0) || v.is_empty() {
        return Err(usage(
            "bad --intervals: an interval must be > 0 (the exact window is measured anyway)",
        ));
    }
    Ok(v)
}

/// Which profilers, and whether memlens and jemalloc's profiler run as whole processes.
fn profilers(a: &StudyArgs, subject: Subject) -> Result<Profilers> {
    let sched = if a.unpaired {
        ScheduleArg::Processes
    } else {
        a.schedule
    };
    match (sched, subject) {
        (ScheduleArg::Processes, Subject::Service) => {
            return Err(usage(
                "--schedule processes: a service (--load) is switched in blocks inside its process",
            ))
        }
        (ScheduleArg::Blocks, Subject::Command) => {
            return Err(usage(
                "--schedule blocks: a command that runs to completion runs as whole processes",
            ))
        }
        _ => {}
    }
    let mut p = Profilers {
        unwinders: match (&a.unwinders, a.quick, subject) {
            (Some(u), _, _) => profilers::unwinders(Some(u))?,
            (None, _, Subject::Service | Subject::Command) => vec!["dwarf".to_string()],
            (None, true, _) => vec!["fp".to_string()],
            (None, false, _) => profilers::unwinders(Some(DEFAULT_UNWINDERS))?,
        },
        whole: sched == ScheduleArg::Processes,
        jemalloc: false,
        tcmalloc: false,
        heaptrack: false,
        notes: Vec::new(),
    };
    for b in profilers::baselines(&a.baselines)? {
        let whole_only = b.kind != BaselineKind::Jemalloc;
        if whole_only && sched == ScheduleArg::Blocks {
            return Err(usage(format!("--schedule blocks: {} cannot be switched inside a process (it runs as whole processes)", b.name())));
        }
        if whole_only && subject == Subject::Service {
            return Err(usage(format!("{} cannot be switched inside a running service (--load): study it on a built-in workload or a command", b.name())));
        }
        // a service's jemalloc is its own (the runtime finds it at run time)
        let found = b.path.is_some() || subject == Subject::Service;
        if !found {
            p.notes.push(format!(
                "{} is not installed here (Debian package {}): it is left out",
                b.name(),
                b.package
            ));
        }
        match b.kind {
            BaselineKind::Jemalloc => p.jemalloc = found,
            BaselineKind::Tcmalloc => p.tcmalloc = found,
            BaselineKind::Heaptrack => p.heaptrack = found,
        }
    }
    if subject == Subject::Service && a.pid.is_some() && p.unwinders.len() > 1 {
        return Err(usage(
            "--pid studies one process with the unwinder it has: give at most one --unwinders",
        ));
    }
    Ok(p)
}

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

/// The metric of a service or a command from `--metric` (cpu, wall or a regex) and
/// `--metric-rate`; `def` when none is given.
fn metric(a: &StudyArgs, def: Metric) -> Result<Metric> {
    Ok(match a.metric.as_deref() {
        None => def,
        Some("cpu") => Metric::Cpu,
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

/// The default study's real application: redis-server under redis-benchmark, each server on a
/// port free when it starts, at the intervals of a service among those asked for (all of them
/// when none is), with the first unwinder (each is a server of its own).
fn redis(intervals: &[u64], unwinders: &[String], a: &StudyArgs) -> Result<Option<Service>> {
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
    let server = ["redis-server", "--port", PORT, "--bind", "127.0.0.1"];
    let mut ivs: Vec<usize> = (0..intervals.len())
        .filter(|&i| PROGRAM_INTERVALS.contains(&intervals[i]))
        .collect();
    if ivs.is_empty() {
        ivs = (0..intervals.len()).collect();
    }
    Ok(Some(Service {
        name: "redis".into(),
        load: REDIS_LOAD.to_string(),
        server: server
            .iter()
            .chain(&["--save", "", "--appendonly", "no"])
            .map(|s| s.to_string())
            .collect(),
        pid: None,
        metric: metric(a, Metric::Cpu)?,
        window_loads: a.window_loads.unwrap_or(4),
        intervals: ivs,
        unwinders: unwinders.iter().take(1).cloned().collect(),
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
        (None, Some(c)) => program_name(c),
    };
    if load.trim().is_empty() {
        return Err(usage("--load needs a command"));
    }
    Ok(Service {
        name,
        load: load.to_string(),
        server: if pid.is_some() { vec![] } else { a.cmd.clone() },
        pid,
        metric: metric(a, Metric::Cpu)?,
        window_loads: a.window_loads.unwrap_or(4),
        intervals: (0..intervals.len()).collect(),
        unwinders: unwinders.to_vec(),
    })
}

/// A program's name from its path.
fn program_name(c: &str) -> String {
    std::path::Path::new(c)
        .file_name()
        .map_or(c.to_string(), |f| f.to_string_lossy().into_owned())
}

/// The built-in workloads of `--workload`.
fn builtin(a: &StudyArgs, intervals: &[u64], unwinders: &[String]) -> Result<Vec<Workload>> {
    let threads = units::parse_count_list(a.threads.as_deref().unwrap_or("2"))
        .map_err(|e| usage(format!("bad --threads: {e}")))?;
    if threads.iter().any(|&t| t == 0 || t > 1024) {
        return Err(usage("--threads must be between 1 and 1024"));
    }
    let size = units::parse_size(a.size.as_deref().unwrap_or("512"))?;
    let depth = a.depth.unwrap_or(10);
    if depth == 0 || depth > 1000 {
        return Err(usage("--depth must be between 1 and 1000"));
    }
    let sets = match (&a.working_sets, a.quick) {
        (Some(s), _) => s.as_str(),
        (None, true) => "l2",
        (None, false) => "l2,llc,dram",
    };
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let names = match (a.workload.as_deref(), a.quick) {
        (Some(l), _) => l,
        (None, true) => "synthetic,pipeline",
        (None, false) => "all",
    };
    let names = if names == "all" {
        "synthetic,redis,pipeline"
    } else {
        names
    };
    let mut out = Vec::new();
    for n in names.split(',').map(str::trim) {
        match n {
            "synthetic" => out.extend(threads.iter().map(|&t| Workload::Synthetic {
                threads: t,
                size,
                depth,
            })),
            "pipeline" => {
                for s in sets.split(',').map(str::trim) {
                    out.push(Workload::Pipeline {
                        label: s.to_string(),
                        working_set: working_set(s, cpus)?,
                    });
                }
            }
            "redis" => out.extend(redis(intervals, unwinders, a)?.map(Workload::Service)),
            other => {
                return Err(usage(format!(
                    "unknown workload '{other}' (use synthetic, redis, pipeline or all)"
                )))
            }
        }
    }
    Ok(out)
}

/// The workloads of the study.
fn workloads(
    a: &StudyArgs,
    subject: Subject,
    intervals: &[u64],
    unwinders: &[String],
) -> Result<Vec<Workload>> {
    Ok(match (subject, &a.load) {
        (Subject::Service, Some(load)) => {
            vec![Workload::Service(service(a, load, intervals, unwinders)?)]
        }
        (Subject::Command, _) => vec![Workload::Command(Command {
            name: program_name(&a.cmd[0]),
            argv: a.cmd.clone(),
            metric: metric(a, Metric::Wall)?,
        })],
        _ => builtin(a, intervals, unwinders)?,
    })
}

/// The CI targets of `--ci-target`: synthetic loop, pipeline, service or command.
fn targets(a: &StudyArgs) -> Result<(f64, f64, f64)> {
    let bad = || usage("bad --ci-target: points, e.g. 2,4,4 (synthetic, pipeline, service)");
    let v: Vec<f64> = a
        .ci_target
        .split(',')
        .map(|x| x.trim().parse::<f64>())
        .collect::<Result<_, _>>()
        .map_err(|_| bad())?;
    let t = match v[..] {
        [s, p] => (s, p, p),
        [s, p, v] => (s, p, v),
        _ => return Err(bad()),
    };
    if !(t.0 > 0.0 && t.1 > 0.0 && t.2 > 0.0) {
        return Err(usage("bad --ci-target: the half widths must be > 0"));
    }
    Ok(t)
}

/// The numbers of the command line, in their ranges.
fn check_ranges(a: &StudyArgs, max_seconds: f64) -> Result<()> {
    if !(0.0..=86_400.0).contains(&max_seconds) {
        return Err(usage(
            "--max-time is a number of seconds between 0 and 86400",
        ));
    }
    let block_ms = a.block_ms.unwrap_or(10);
    if a.rounds.is_some_and(|r| r == 0 || r > 10_000) || block_ms == 0 || block_ms > 10_000 {
        return Err(usage("--rounds and --block-ms must be between 1 and 10000"));
    }
    if !(0.0..=100.0).contains(&a.min_coverage) {
        return Err(usage("--min-coverage is a percentage between 0 and 100"));
    }
    let processes = a.processes.unwrap_or(3);
    if processes == 0 || processes > 100 || a.placebos == 0 || a.placebos > 20 {
        return Err(usage(
            "--processes must be between 1 and 100, --placebos between 1 and 20",
        ));
    }
    if a.ops == Some(0) {
        return Err(usage("--ops must be at least 1"));
    }
    Ok(())
}

/// A flag given that this study would not read is a usage error that says why (a default that
/// silently does nothing is worse than no flag).
fn unread(a: &StudyArgs, s: &Settings) -> Result<()> {
    let has = |f: &dyn Fn(&Workload) -> bool| s.workloads.iter().any(f);
    let synthetic = has(&|w| matches!(w, Workload::Synthetic { .. }));
    let pipeline = has(&|w| matches!(w, Workload::Pipeline { .. }));
    let service = has(&|w| w.is_service());
    let command = has(&|w| matches!(w, Workload::Command(_)));
    let builtin = synthetic || pipeline;
    let whole = s.whole || s.tcmalloc || s.heaptrack;
    // (given, read by this study, the flag, why it is not)
    let checks = [
        (
            a.workload.is_some(),
            a.load.is_none() && a.cmd.is_empty(),
            "--workload",
            "it names built-in workloads, and this study is of a program (--load or -- CMD)",
        ),
        (
            a.block_ms.is_some(),
            builtin && !s.whole,
            "--block-ms",
            "it is the length of a block inside a built-in workload's process, and none runs here",
        ),
        (
            a.processes.is_some(),
            !s.whole && (builtin || service) && a.pid.is_none(),
            "--processes",
            "it counts processes switched in blocks (a --pid study has its one; whole processes run one per block)",
        ),
        (
            a.ops.is_some(),
            builtin && whole,
            "--ops",
            "it sizes a built-in workload's run as a whole process (tcmalloc, heaptrack, --schedule processes), and none runs here",
        ),
        (
            a.window_ticks.is_some(),
            builtin,
            "--window-ticks",
            "it sizes a built-in workload's profile windows, and this study has none",
        ),
        (
            a.window_loads.is_some(),
            service,
            "--window-loads",
            "it counts runs of a service's load in a profile window, and this study has no service",
        ),
        (
            a.working_sets.is_some(),
            pipeline,
            "--working-sets",
            "it sizes the pipeline, and this study does not run it",
        ),
        (
            a.threads.is_some() || a.size.is_some() || a.depth.is_some(),
            synthetic,
            "--threads, --size and --depth",
            "they shape the synthetic loop, and this study does not run it",
        ),
        (
            a.metric.is_some() || a.metric_rate,
            service || command,
            "--metric",
            "it measures a service (--load, redis) or a command (-- CMD), and this study has neither",
        ),
    ];
    match checks.iter().find(|(given, read, ..)| *given && !*read) {
        Some((_, _, flag, why)) => Err(usage(format!("{flag} is not read by this study: {why}"))),
        None => Ok(()),
    }
}

/// The study's settings from the command line (usage errors before anything runs).
pub(crate) fn settings(a: &StudyArgs) -> Result<Settings> {
    if let Some((flag, why)) = a.former.given() {
        return Err(usage(format!(
            "{flag} is gone with the second engine: {why}"
        )));
    }
    if a.pid.is_some() && a.load.is_none() {
        return Err(usage(
            "--pid needs --load 'CMD': the load that drives the process",
        ));
    }
    let subject = match (&a.load, a.cmd.is_empty()) {
        (Some(_), _) => Subject::Service,
        (None, false) => Subject::Command,
        (None, true) => Subject::Builtin,
    };
    let p = profilers(a, subject)?;
    let intervals = intervals(a, subject)?;
    let workloads = workloads(a, subject, &intervals, &p.unwinders)?;
    let mut notes = p.notes;
    if (p.tcmalloc || p.heaptrack) && workloads.iter().any(Workload::is_service) {
        notes.push(
            "tcmalloc and heaptrack are not run on redis: a service is switched in blocks only"
                .into(),
        );
    }
    let max_seconds = a.max_time.unwrap_or(if a.quick { 0.0 } else { 270.0 });
    check_ranges(a, max_seconds)?;
    let (target_synthetic, target_pipeline, target_service) = targets(a)?;
    let quick = |q: u32, n: u32| a.rounds.unwrap_or(if a.quick { q } else { n });
    let blocks = !p.whole && workloads.iter().any(|w| !matches!(w, Workload::Command(_)));
    let s = Settings {
        intervals,
        unwinders: p.unwinders,
        whole: p.whole,
        jemalloc: p.jemalloc,
        tcmalloc: p.tcmalloc,
        heaptrack: p.heaptrack,
        rounds: quick(4, 40),
        service_rounds: quick(4, 16),
        process_rounds: quick(3, 5),
        // A process found running is one process: every round comes from it; whole processes
        // run one per block, in one wave.
        processes: match (a.pid.is_some(), blocks) {
            (false, true) => a.processes.unwrap_or(3),
            _ => 1,
        },
        placebos: a.placebos,
        max_seconds,
        target_synthetic,
        target_pipeline,
        target_service,
        block_ms: a.block_ms.unwrap_or(10),
        ops: a.ops.unwrap_or(100_000),
        window_ticks: if a.no_exact {
            0
        } else {
            a.window_ticks.unwrap_or(20_000)
        },
        min_coverage: a.min_coverage,
        budget: a.budget,
        seed: a.seed,
        notes,
        workloads,
    };
    unread(a, &s)?;
    Ok(s)
}
