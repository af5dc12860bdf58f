//! The engine. Every workload runs in cells, one per kind of process: memlens with each unwinder
//! and jemalloc's profiler, switched in blocks inside one process; or whole processes over an
//! allocator, for what cannot be switched inside a process (tcmalloc's sampler, heaptrack, a
//! command that runs to completion, and everything with `--schedule processes`). Every cell runs
//! its configurations in one schedule, `off, c1, off, c2, …, off` in an order shuffled per round —
//! a block is a stretch of a process (`blocks.rs`: the built-in workloads switch themselves;
//! `service.rs`: a program under its own load, switched through its control socket) or a whole
//! process (`processes.rs`) — so every overhead is paired the same way (`stats.rs`) and made into
//! a row by one builder (`rows.rs`).
//!
//! The cells run in `--processes` waves (all once, then all again: a configuration's processes
//! spread over the study's time, and what differs between them is part of its interval through
//! the hierarchical bootstrap); every process or part runs placebo blocks; quality comes from
//! profile windows, the same work recorded exactly and at each interval. Then, while the time limit
//! allows, further processes narrow the intervals still wider than their target (`plan.rs`).
mod blocks;
mod launch;
mod listen;
mod plan;
mod processes;
mod service;

use crate::estimate::estimate_groups;
use crate::model::{Alloc, Key, Kind, Part, ProcOut, Results, Row, Settings, SwitchFacts};
use crate::model::{Truth, Workload};
use crate::quality::{self, WindowQuality};
use crate::rows::{self, groups, Pool};
use crate::{recommend, stats};
use anyhow::Result;
use memlens_render::progress::Progress;
use memlens_workloads::Block;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One workload under one kind of process, and every block its processes ran.
struct Cell {
    w: usize,
    kind: Kind,
    /// Its configurations (a service's lose jemalloc's when its profiler cannot be switched).
    confs: Vec<Key>,
    /// Every block, configurations numbered by `confs` (for the counters' split).
    blocks: Vec<Block>,
    /// Wall time of a process beyond its blocks, s (the first process's).
    overhead_s: f64,
    /// Block length, s.
    block_s: f64,
    /// Half-width target, points.
    target: f64,
    /// Does it narrow the placebos (the first cell of its workload and schedule)?
    placebo_owner: bool,
}

impl Cell {
    /// Configurations (indices into `confs`) whose 95% interval is wider than the target, with
    /// the rounds each needs — in one further process at most as many as it has so far: what
    /// differs between processes narrows only with more processes, so the rounds are spread
    /// over processes of balanced size (the next pass adds another).
    fn missing(&self, pool: &Pool) -> Vec<(usize, u32)> {
        let sched = self.kind.schedule();
        self.confs
            .iter()
            .enumerate()
            .filter(|(_, k)| self.placebo_owner || !matches!(k, Key::Placebo(_)))
            .filter_map(|(j, k)| {
                let g = pool.get(&(self.w, sched, k.clone()))?;
                let e = estimate_groups(&groups(g, |p| &p.overhead))?;
                let n = stats::rounds_needed(&e, self.target).min(e.n.max(8) as u32);
                (n > 0).then_some((j, n))
            })
            .collect()
    }

    /// Pool a process's paired values, and keep its blocks for the counters' split.
    fn add(&mut self, pool: &mut Pool, out: ProcOut) {
        let paired = stats::pair(&out.blocks, out.confs.len());
        for (j, p) in paired.into_iter().enumerate().skip(1) {
            let key = (self.w, self.kind.schedule(), out.confs[j - 1].clone());
            let groups = pool.entry(key).or_default();
            match groups.iter_mut().find(|(g, _)| *g == out.group) {
                Some((_, q)) => q.extend(p),
                None => groups.push((out.group, p)),
            }
        }
        // renumber to the cell's configurations for the counters' split
        for mut b in out.blocks {
            if b.config > 0 {
                let k = &out.confs[b.config as usize - 1];
                b.config = self.confs.iter().position(|c| c == k).map_or(0, |i| i + 1) as u32;
            }
            self.blocks.push(b);
        }
    }

    /// Rounds of its first processes, all together.
    fn rounds(&self, s: &Settings) -> u32 {
        match (&self.kind, &s.workloads[self.w]) {
            (Kind::Runs(_), _) => s.process_rounds,
            (_, Workload::Service(_)) => s.service_rounds,
            _ => s.rounds,
        }
    }
}

/// The configurations of a workload's cells: memlens with each unwinder and jemalloc's profiler
/// switched in blocks (a service's jemalloc configurations ride in its first process, memlens
/// switches both), or in whole processes over glibc and jemalloc; tcmalloc's sampler and heaptrack
/// always in whole processes.
fn kinds(s: &Settings, w: &Workload) -> Vec<(Kind, Vec<Key>)> {
    let ivs = w.intervals(s);
    let unwinders = match w {
        Workload::Service(v) => &v.unwinders,
        _ => &s.unwinders,
    };
    let memlens = |u: &String| {
        ivs.iter()
            .map(|&i| Key::Memlens(u.clone(), i))
            .collect::<Vec<_>>()
    };
    let jemalloc: Vec<Key> = ivs.iter().map(|&i| Key::Jemalloc(i)).collect();
    let mut kinds: Vec<(Kind, Vec<Key>)> = Vec::new();
    let mut glibc = Vec::new();
    if s.whole(w) {
        glibc.push(Key::Inactive);
        glibc.extend(unwinders.iter().flat_map(memlens));
    } else {
        kinds.extend(
            unwinders
                .iter()
                .map(|u| (Kind::Memlens(u.clone()), memlens(u))),
        );
    }
    // a service is switched in blocks only (settings.rs notes what is left out of it)
    if s.heaptrack && !w.is_service() {
        glibc.push(Key::Heaptrack);
    }
    if !glibc.is_empty() {
        kinds.push((Kind::Runs(Alloc::Glibc), glibc));
    }
    match kinds.first_mut() {
        _ if !s.jemalloc => {}
        Some((Kind::Memlens(_), c)) if w.is_service() => c.extend(jemalloc),
        _ if w.is_service() => kinds.push((Kind::Memlens("dwarf".into()), jemalloc)),
        _ if s.whole(w) => kinds.push((Kind::Runs(Alloc::Jemalloc), jemalloc)),
        _ => kinds.push((Kind::Jemalloc, jemalloc)),
    }
    if s.tcmalloc && !w.is_service() {
        let t = ivs.iter().map(|&i| Key::Tcmalloc(i)).collect();
        kinds.push((Kind::Runs(Alloc::Tcmalloc), t));
    }
    kinds
}

/// Every cell of the study, the placebos in each.
fn cells_of(s: &Settings) -> Vec<Cell> {
    let mut cells: Vec<Cell> = Vec::new();
    for (w, work) in s.workloads.iter().enumerate() {
        for (kind, mut confs) in kinds(s, work) {
            confs.extend((0..s.placebos).map(Key::Placebo));
            let sched = kind.schedule();
            cells.push(Cell {
                w,
                placebo_owner: !cells.iter().any(|c| c.w == w && c.kind.schedule() == sched),
                kind,
                confs,
                blocks: Vec::new(),
                overhead_s: 0.0,
                block_s: s.block_ms as f64 / 1e3,
                target: s.target(work),
            });
        }
    }
    cells
}

/// Run one part of a cell's schedule: a process switched in blocks, or whole processes — all of
/// one group, for every round of whole processes is processes of its own (the bootstrap over
/// rounds is the bootstrap over processes).
fn run_part(s: &Settings, c: &Cell, part: &Part, tmp: &Path) -> Result<ProcOut> {
    let w = &s.workloads[c.w];
    match (w, &c.kind) {
        (Workload::Service(svc), Kind::Memlens(u)) => service::run_process(svc, s, u, part, tmp),
        (_, Kind::Runs(alloc)) => {
            let mut out = processes::run_part(w, s, *alloc, part, tmp)?;
            out.group = u64::MAX;
            Ok(out)
        }
        _ => blocks::run_process(w, s, &c.kind, part, tmp),
    }
}

/// The workloads whose profile windows run as processes of their own (a service runs its own in
/// its first process): every command, and of the built-in ones the realistic workload whose
/// working set is in the LLC — or the first pipeline, or else the first synthetic loop.
fn windowed(s: &Settings) -> Vec<usize> {
    let ws = &s.workloads;
    let find = |f: &dyn Fn(&Workload) -> bool| ws.iter().position(f);
    let builtin = find(&|w| w.name() == "pipeline-llc")
        .or_else(|| find(&|w| matches!(w, Workload::Pipeline { .. })))
        .or_else(|| find(&|w| matches!(w, Workload::Synthetic { .. })));
    let commands = (0..ws.len()).filter(|&i| matches!(ws[i], Workload::Command(_)));
    builtin.into_iter().chain(commands).collect()
}

/// The profile windows of one workload and unwinder: the raw dumps of the exact one, then of each
/// interval.
fn windows(w: &Workload, s: &Settings, u: &str, tmp: &Path) -> Result<Vec<Vec<PathBuf>>> {
    match w {
        Workload::Command(c) => processes::windows(c, s, u, tmp),
        _ => blocks::windows(w, s, u, tmp),
    }
}

/// What the study gathers as its processes end.
struct Gathered {
    cells: Vec<Cell>,
    pool: Pool,
    switch: SwitchFacts,
    counters: Option<String>,
    notes: Vec<String>,
    truth: Vec<Truth>,
    /// (workload, unwinder, interval, quality) of every sampled window.
    quality: Vec<(String, String, u64, WindowQuality)>,
}

impl Gathered {
    /// Judge the windows of one workload and unwinder against their exact one.
    fn windows(&mut self, s: &Settings, w: &Workload, u: &str, d: Vec<Vec<PathBuf>>) -> Result<()> {
        let mut d = d.into_iter();
        let Some(exact) = d.next() else { return Ok(()) };
        let (t, qs) = quality::window(u, exact, d.collect())?;
        self.truth.push(Truth {
            workload: w.name(),
            summary: t,
        });
        for (i, q) in w.intervals(s).into_iter().zip(qs) {
            self.quality
                .push((w.name(), u.to_string(), s.intervals[i], q));
        }
        Ok(())
    }

    /// Take what a process of cell `ci` gave (`first`: of its first wave).
    fn take(&mut self, s: &Settings, ci: usize, mut out: ProcOut, first: bool) -> Result<()> {
        let kind = self.cells[ci].kind.clone();
        let w = &s.workloads[self.cells[ci].w];
        if let (Some(v), Workload::Synthetic { .. }) = (out.switch, w) {
            self.switch.threads = self.switch.threads.max(v[0]);
            self.switch.pending_max = self.switch.pending_max.max(v[1]);
            self.switch.max_ns = self.switch.max_ns.max(v[2]);
        }
        if self.counters.is_none() && matches!(kind, Kind::Memlens(_)) {
            self.counters = out.counters.take();
        }
        for n in out.notes.drain(..) {
            if !self.notes.contains(&n) {
                self.notes.push(n);
            }
        }
        if let (Some(d), Kind::Memlens(u)) = (out.windows.take(), &kind) {
            self.windows(s, w, u, d)?;
        }
        let c = &mut self.cells[ci];
        if first {
            c.confs = out.confs.clone();
            c.overhead_s = out.overhead_s;
            if out.block_s > 0.0 {
                c.block_s = out.block_s;
            }
        }
        c.add(&mut self.pool, out);
        Ok(())
    }
}

/// The first processes: every cell in `--processes` waves, the profile windows after the first.
fn first(s: &Settings, g: &mut Gathered, tmp: &Path) -> Result<()> {
    let windowed = if s.window_ticks > 0 {
        windowed(s)
    } else {
        vec![]
    };
    let total = g.cells.len() * s.processes as usize + windowed.len() * s.unwinders.len();
    let progress = Progress::new(total as u64, "study");
    for wave in 0..s.processes {
        for ci in 0..g.cells.len() {
            let c = &g.cells[ci];
            let w = &s.workloads[c.w];
            let rounds = c.rounds(s).div_ceil(s.processes).max(1);
            progress.step(format!(
                "{} · {} · {} {} of {} · {rounds} rounds",
                w.name(),
                c.kind,
                if matches!(c.kind, Kind::Runs(_)) {
                    "part"
                } else {
                    "process"
                },
                wave + 1,
                s.processes
            ));
            let part = Part {
                confs: c.confs.clone(),
                rounds,
                seed: s.seed.wrapping_add(wave as u64 * 7919),
                windows: wave == 0 && w.is_service() && s.window_ticks > 0,
            };
            let out = run_part(s, c, &part, tmp)?;
            g.take(s, ci, out, wave == 0)?;
            progress.inc();
        }
        for &w in windowed.iter().filter(|_| wave == 0) {
            let w = &s.workloads[w];
            for u in &s.unwinders {
                progress.step(format!("{} · profile windows, memlens {u}", w.name()));
                let d = windows(w, s, u, tmp)?;
                g.windows(s, w, u, d)?;
                progress.inc();
            }
        }
    }
    progress.finish();
    Ok(())
}

/// Narrow what is still too wide while the time limit allows (2 s kept for the report): further
/// processes planned by [`plan::plan_extensions`]. Returns how many ran.
fn narrow(s: &Settings, g: &mut Gathered, t0: Instant, tmp: &Path) -> Result<u32> {
    let mut extra = 0u32;
    // Blocks last longer than planned by the switch itself (jemalloc's prof.reset) and the
    // scheduler's wake-up: `slow` (actual / planned wall time of the processes run so far, at
    // least 1.1) scales the plan so the limit holds.
    let mut slow = 1.1f64;
    for pass in 1..=12u64 {
        let left = (s.max_seconds - t0.elapsed().as_secs_f64() - 2.0) / slow;
        let needs: Vec<plan::Need> = g
            .cells
            .iter()
            .map(|c| (c.missing(&g.pool), c.overhead_s, c.block_s))
            .collect();
        let plan = plan::plan_extensions(&needs, left);
        if plan.is_empty() {
            break;
        }
        let progress = Progress::new(plan.len() as u64, "study: narrowing");
        for e in plan {
            let c = &g.cells[e.cell];
            progress.step(format!(
                "{} · {} · {} more rounds of {} configuration(s)",
                s.workloads[c.w].name(),
                c.kind,
                e.rounds,
                e.confs.len()
            ));
            let part = Part {
                confs: e.confs.iter().map(|&j| c.confs[j].clone()).collect(),
                rounds: e.rounds,
                seed: s.seed.wrapping_add(pass * 1000 + e.cell as u64),
                windows: false,
            };
            let t = Instant::now();
            let out = run_part(s, c, &part, tmp)?;
            slow = slow.max(t.elapsed().as_secs_f64() / e.seconds.max(1e-3));
            g.cells[e.cell].add(&mut g.pool, out);
            extra += 1;
            progress.inc();
            if t0.elapsed().as_secs_f64() > s.max_seconds - 2.0 {
                break;
            }
        }
        progress.finish();
    }
    Ok(extra)
}

/// Run the whole study: the first processes and the windows, then the further processes; the rows
/// and what they rest on.
pub fn run(s: Settings) -> Result<Results> {
    let t0 = Instant::now();
    let tmp = tempfile::Builder::new()
        .prefix("memlens-study.")
        .tempdir()
        .map_err(|e| anyhow::anyhow!("cannot create a temporary directory: {e}"))?;
    let mut g = Gathered {
        cells: cells_of(&s),
        pool: Pool::new(),
        switch: SwitchFacts::default(),
        counters: None,
        notes: s.notes.clone(),
        truth: Vec::new(),
        quality: Vec::new(),
    };
    first(&s, &mut g, tmp.path())?;
    let first_seconds = t0.elapsed().as_secs_f64();
    let extra = narrow(&s, &mut g, t0, tmp.path())?;
    let mut r = results(s, g);
    r.extra_processes = extra;
    r.first_seconds = first_seconds;
    r.seconds = t0.elapsed().as_secs_f64();
    Ok(r)
}

/// The rows (with quality and counters) and everything else the study reports.
fn results(s: Settings, g: Gathered) -> Results {
    // the counters' split of each memlens process switched in blocks, off first
    let splits: Vec<(&Cell, Vec<Option<stats::CountSplit>>)> = g
        .cells
        .iter()
        .filter(|c| matches!(c.kind, Kind::Memlens(_)) && !s.workloads[c.w].is_service())
        .map(|c| (c, stats::count_split(&c.blocks, c.confs.len())))
        .collect();
    let mut rows = rows::rows_of(&s, &g.pool, |w, key| {
        splits.iter().find(|(c, _)| c.w == w).and_then(|(c, v)| {
            let j = c.confs.iter().position(|x| x == key)?;
            v[j + 1]
        })
    });
    for (wname, u, r, (q, samples, tr)) in &g.quality {
        for row in rows.iter_mut().filter(|x| {
            &x.workload == wname
                && x.unwinder.as_deref() == Some(u.as_str())
                && x.interval_bytes == Some(*r)
        }) {
            row.coverage_pct = Some(q.coverage_pct);
            row.total_error_pct = Some(q.total_error_pct);
            row.top_error_pct = Some(q.top_max_abs_error_pct);
            row.samples = Some(*samples);
            row.truncated_pct = Some(tr * 100.0);
        }
    }
    let (counters, counter_events) = counter_note(g.counters, &rows);
    let mut counts_off = Vec::new();
    for (c, v) in &splits {
        let name = s.workloads[c.w].name();
        if let (Some(Some(off)), false) = (v.first(), counts_off.iter().any(|(n, _)| *n == name)) {
            counts_off.push((name, *off));
        }
    }
    if counter_events.is_none() {
        counts_off.clear();
        rows.iter_mut().for_each(|r| r.counts_per_tick = None);
    }
    Results {
        aa: rows::aa(&rows),
        recommendations: recommend::advise(&s, &rows),
        settings: s,
        rows,
        truth: g.truth,
        switch: g.switch,
        counters,
        counter_events,
        counts_off,
        extra_processes: 0,
        first_seconds: 0.0,
        notes: g.notes,
        seconds: 0.0,
    }
}

/// The counters' note from the pipeline's `counters` line: the events and the cost of a read, or
/// `n/a (reason)` — also when the events opened but counted nothing on any tick (a VM may accept
/// an event it never counts).
fn counter_note(line: Option<String>, rows: &[Row]) -> (String, Option<[String; 2]>) {
    let Some(line) = line else {
        return ("n/a (no pipeline workload measured in blocks)".into(), None);
    };
    if line.starts_with("n/a") {
        return (line, None);
    }
    let f: Vec<&str> = line.split_whitespace().collect();
    let (Some(a), Some(b)) = (f.first(), f.get(1)) else {
        return (format!("n/a (unreadable counters line '{line}')"), None);
    };
    let counted = rows.iter().filter_map(|r| r.counts_per_tick).any(|c| {
        c.sampled
            .iter()
            .chain(&c.after)
            .chain(&c.far)
            .any(|&x| x > 0.0)
    });
    if !counted {
        return (
            format!("n/a ({a} and {b} opened but read 0 on every tick: not counted here)"),
            None,
        );
    }
    let cost = f
        .iter()
        .find_map(|x| x.strip_prefix("read_cycles="))
        .unwrap_or("?");
    (
        format!("{a}, {b} per tick (a read costs {cost} TSC cycles, outside the timed tick)"),
        Some([a.to_string(), b.to_string()]),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Schedule;

    fn settings(workloads: Vec<Workload>, whole: bool) -> Settings {
        Settings {
            workloads,
            intervals: vec![64 << 10, 2 << 20],
            unwinders: vec!["fp".into()],
            whole,
            jemalloc: true,
            tcmalloc: true,
            heaptrack: true,
            rounds: 4,
            service_rounds: 4,
            process_rounds: 4,
            processes: 2,
            placebos: 1,
            max_seconds: 0.0,
            target_synthetic: 2.0,
            target_pipeline: 4.0,
            target_service: 4.0,
            block_ms: 10,
            ops: 1000,
            window_ticks: 100,
            min_coverage: 90.0,
            budget: 5.0,
            seed: 1,
            notes: vec![],
        }
    }

    /// memlens and jemalloc's profiler switch in blocks, tcmalloc and heaptrack run as whole
    /// processes, each cell with its placebo; `--schedule processes` moves memlens (with the
    /// runtime loaded inactive against none) and jemalloc into whole processes too.
    #[test]
    fn each_profiler_runs_in_the_schedule_it_can() {
        let syn = Workload::Synthetic {
            threads: 1,
            size: 512,
            depth: 10,
        };
        let show = |s: &Settings| -> Vec<(String, Vec<Key>, bool)> {
            cells_of(s)
                .into_iter()
                .map(|c| (c.kind.to_string(), c.confs, c.placebo_owner))
                .collect()
        };
        let m = |i| Key::Memlens("fp".into(), i);
        let p = Key::Placebo(0);
        assert_eq!(
            show(&settings(vec![syn.clone()], false)),
            [
                (
                    "memlens fp in blocks".into(),
                    vec![m(0), m(1), p.clone()],
                    true
                ),
                (
                    "whole processes".into(),
                    vec![Key::Heaptrack, p.clone()],
                    true
                ),
                (
                    "jemalloc's profiler in blocks".into(),
                    vec![Key::Jemalloc(0), Key::Jemalloc(1), p.clone()],
                    false
                ),
                (
                    "whole processes over tcmalloc".into(),
                    vec![Key::Tcmalloc(0), Key::Tcmalloc(1), p.clone()],
                    false
                ),
            ]
        );
        let whole = show(&settings(vec![syn], true));
        assert_eq!(
            whole[0].1,
            [Key::Inactive, m(0), m(1), Key::Heaptrack, p.clone()]
        );
        assert_eq!(whole[1].0, "whole processes over jemalloc");
        assert!(cells_of(&settings(vec![], true)).is_empty());
        assert_eq!(Kind::Runs(Alloc::Glibc).schedule(), Schedule::Processes);
    }
}
