//! `memlens check`: run a program under the sampling heap profiler and judge its heap against
//! limits — a gate for CI that fails the job when memory regresses.
//!
//! * `args.rs`: the command line and the limits it asks for.
//! * `limits.rs`: the limits, and the default sampling interval they call for.
//! * `estimate.rs`: a sampled figure's 95 % interval, and verdicts.
//! * `figures.rs`: a profile's peak, leak and allocated figures, in total and per stack, known
//!   stacks set aside (`allow.rs`: `--allow` and suppressions files).
//! * `judge.rs`: each limit against each process, the stacks behind it, how to settle it.
//! * `outcome.rs`: what a check found; `show.rs`: what is printed; `machine.rs`: JSON and JUnit XML.
//!
//! The run itself is `memlens run`'s ([`memlens_run::run_quietly`]); the profiles it writes are
//! read back with [`memlens_profile::load`]. Reference: docs/check.md.
#![warn(missing_docs)]
mod allow;
mod args;
mod estimate;
mod figures;
mod judge;
mod limits;
mod machine;
mod outcome;
mod show;

pub use args::CheckArgs;

use allow::Allow;
use anyhow::{anyhow, Context, Result};
use estimate::Verdict;
use figures::Figures;
use judge::Judged;
use limits::Limit;
use outcome::Outcome;
use std::path::{Path, PathBuf};

/// The exit status of a check whose limit is broken (0: kept, 1: failed to run, 2: usage).
pub const LIMIT_BROKEN: i32 = 3;

/// What a check is to do, from its command line (and its baseline).
struct Plan {
    limits: Vec<Limit>,
    allow: Allow,
    base: Option<Figures>,
    interval: u64,
    /// Why the interval, when it was chosen.
    why: Option<String>,
    /// Where the main process's profile goes.
    out: PathBuf,
}

impl Plan {
    /// Check the command line (usage errors before anything runs), read the baseline, choose
    /// the interval.
    fn of(a: &CheckArgs) -> Result<Plan> {
        let limits = a.limits()?;
        let allow = Allow::new(&a.allow, &a.suppressions)?;
        let asked = a.interval()?;
        let base = match &a.baseline {
            Some(f) => Some(read_figures(f, &allow).context("cannot read the baseline")?),
            None => None,
        };
        let (interval, why) = match asked {
            Some(r) => (r, None),
            None => {
                let (r, why) = limits::default_interval(&limits, |k| {
                    base.as_ref()
                        .map_or((0.0, 0.0), |b| (b.total(k).value, b.max_stack(k)))
                });
                (r, Some(why))
            }
        };
        let name = Path::new(&a.command[0])
            .file_name()
            .map_or("prog".into(), |n| n.to_string_lossy().into_owned());
        let out = a.output.clone().unwrap_or_else(|| {
            PathBuf::from(format!("memlens.check.{name}.{}.pb.gz", std::process::id()))
        });
        Ok(Plan {
            limits,
            allow,
            base,
            interval,
            why,
            out,
        })
    }
}

/// `memlens check`: returns the exit status.
pub fn run_check(a: CheckArgs) -> Result<i32> {
    let plan = Plan::of(&a)?;
    let t0 = std::time::Instant::now();
    let run = memlens_run::run_quietly(&memlens_run::RunArgs::for_command(
        a.command.clone(),
        plan.interval,
        a.unwinder.clone(),
        plan.out.clone(),
    ))?;
    let seconds = t0.elapsed().as_secs_f64();
    let mut notes = run_notes(&run.notes);
    let mut procs = Vec::new();
    for (pid, file) in &run.profiles {
        match read_figures(file, &plan.allow) {
            Ok(f) => procs.push(f),
            Err(e) => notes.push(format!("the profile of pid {pid} cannot be read: {e:#}")),
        }
    }
    let ending = memlens_run::ending(run.status);
    if procs.is_empty() {
        let why = notes.join("; ");
        remove_profiles(&run.profiles);
        return Err(anyhow!(
            "nothing to judge: no process of the run left a profile (the program {ending}){}{why}",
            if why.is_empty() { "" } else { ": " }
        ));
    }
    let judged = judge_all(&plan.limits, &procs, plan.base.as_ref(), a.top)?;
    notes.extend(figure_notes(&procs, plan.base.as_ref(), plan.interval));
    let exit_code = memlens_run::exit_code_of(run.status);
    let program_failed = (exit_code != 0).then(|| ending.clone());
    let any = |v: Verdict| judged.iter().any(|j| j.verdict == v);
    let status = if program_failed.is_some() {
        1
    } else if any(Verdict::Broken) || (a.strict && any(Verdict::Inconclusive)) {
        LIMIT_BROKEN
    } else {
        0
    };
    let kept = kept_profiles(&judged, &procs, &plan.out, status, a.output.is_some());
    let unkept: Vec<(u32, PathBuf)> = run
        .profiles
        .iter()
        .filter(|(_, f)| !kept.contains(f))
        .cloned()
        .collect();
    remove_profiles(&unkept);
    let r = Outcome {
        command: a
            .command
            .iter()
            .map(|c| c.to_string_lossy().into_owned())
            .collect(),
        ending,
        exit_code,
        program_failed,
        interval: plan.interval,
        interval_why: plan.why.clone(),
        judged,
        procs: &procs,
        kept,
        strict: a.strict,
        status,
        notes,
        seconds,
    };
    report(&r, &a)?;
    Ok(status)
}

/// Print the outcome, and write it as JSON and JUnit where asked.
fn report(r: &Outcome, a: &CheckArgs) -> Result<()> {
    eprint!("{}", show::text(r));
    if let Some(f) = &a.json {
        memlens_render::output::write_text(f, &machine::json(r)?)?;
    }
    if let Some(f) = &a.junit {
        memlens_render::output::write_text(f, &machine::junit(r))?;
    }
    Ok(())
}

/// What the reader should know of the figures: each process's notes, and a baseline sampled at
/// another interval.
fn figure_notes(procs: &[Figures], base: Option<&Figures>, interval: u64) -> Vec<String> {
    let mut notes: Vec<String> = procs
        .iter()
        .flat_map(|p| {
            p.notes
                .iter()
                .map(move |n| format!("{} (pid {}): {n}", p.program(), p.pid))
        })
        .collect();
    if let Some(b) = base.filter(|b| b.interval != interval) {
        notes.push(format!(
            "the baseline was sampled at {}, this run at {}: make both at one interval for the \
             closest comparison",
            memlens_measure::units::format_size(b.interval),
            memlens_measure::units::format_size(interval)
        ));
    }
    notes
}

/// A profile's figures.
fn read_figures(file: &Path, allow: &Allow) -> Result<Figures> {
    let p = memlens_profile::load(file)?;
    Ok(Figures::of(&p, file, allow))
}

/// Every limit on the processes it applies to: limits against the baseline on the processes that
/// ran its program, the others on every process.
fn judge_all<'a>(
    limits: &'a [Limit],
    procs: &'a [Figures],
    base: Option<&'a Figures>,
    top: usize,
) -> Result<Vec<Judged<'a>>> {
    let mut out = Vec::new();
    for l in limits {
        match base.filter(|_| l.needs_baseline()) {
            Some(b) => {
                let targets = judge::compared_with(procs, b);
                if targets.is_empty() {
                    let ran: Vec<&str> = procs.iter().map(Figures::program).collect();
                    return Err(anyhow!(
                        "the baseline is a profile of {}, and no process of this run ran it (they \
                         ran {})",
                        b.program(),
                        ran.join(", ")
                    ));
                }
                out.extend(
                    targets
                        .into_iter()
                        .map(|p| judge::judge(l, p, Some(b), top)),
                );
            }
            None => out.extend(procs.iter().map(|p| judge::judge(l, p, None, top))),
        }
    }
    Ok(out)
}

/// What of the run's own messages a check repeats: warnings and processes left running (the
/// lines saying where each profile went are the check's to say).
fn run_notes(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter(|l| !l.starts_with("memlens: profile of pid"))
        .map(|l| l.trim_start_matches("memlens: ").to_string())
        .collect()
}

/// The profiles a check keeps: all of them with `-o`; when it does not pass, those of the
/// processes a limit was not held on (the main one when it is the program that failed); none when
/// it passes (an inconclusive verdict says how to settle it, by running again).
fn kept_profiles(
    judged: &[Judged],
    procs: &[Figures],
    out: &Path,
    status: i32,
    asked: bool,
) -> Vec<PathBuf> {
    if asked {
        return procs.iter().map(|p| p.file.clone()).collect();
    }
    if status == 0 {
        return Vec::new();
    }
    let mut v: Vec<PathBuf> = Vec::new();
    for j in judged.iter().filter(|j| j.verdict != Verdict::Held) {
        if !v.contains(&j.proc.file) {
            v.push(j.proc.file.clone());
        }
    }
    if v.is_empty() {
        let main = procs.iter().find(|p| p.file == out).unwrap_or(&procs[0]);
        v.push(main.file.clone());
    }
    v
}

/// Remove the profiles a run wrote (each with its peak profile beside it).
fn remove_profiles(profiles: &[(u32, PathBuf)]) {
    for (_, f) in profiles {
        std::fs::remove_file(f).ok();
        let mut peak = memlens_profile::profile_stem(f).into_os_string();
        peak.push(".peak.pb.gz");
        std::fs::remove_file(peak).ok();
    }
}
