//! The one row builder: every configuration's paired values, from whichever schedule measured
//! them, become a [`Row`] — the median over rounds with its hierarchical 95% interval, the split of
//! its cost, its target — and each row is judged against the placebo of its workload and schedule.
//! Also the A/A count of the further placebos.
use crate::estimate::{self, estimate_groups, Estimate};
use crate::model::{Aa, Key, Row, Schedule, Settings};
use crate::profilers::lg_of;
use crate::stats::{CountSplit, Paired};
use memlens_measure::units::format_size;
use std::collections::BTreeMap;

/// Per workload, schedule and configuration: each process's paired values (whole processes: one
/// group per cell).
pub type Pool = BTreeMap<(usize, Schedule, Key), Vec<(u64, Paired)>>;

/// The values of one kind (overhead, p99, …) by process.
pub fn groups(g: &[(u64, Paired)], f: fn(&Paired) -> &Vec<f64>) -> Vec<Vec<f64>> {
    g.iter().map(|(_, p)| f(p).clone()).collect()
}

/// A configuration's profiler, name, unwinder and interval, as the rows give them.
pub fn config_name(k: &Key, s: &Settings) -> (&'static str, String, Option<String>, Option<u64>) {
    let size = |i: usize| format_size(s.intervals[i]);
    match k {
        Key::Placebo(0) => ("placebo", "placebo".into(), None, None),
        Key::Placebo(p) => ("placebo", format!("placebo {}", p + 1), None, None),
        Key::Inactive => ("memlens", "memlens inactive".into(), None, None),
        Key::Memlens(u, i) => (
            "memlens",
            format!("memlens {u} {}", size(*i)),
            Some(u.clone()),
            Some(s.intervals[*i]),
        ),
        Key::Jemalloc(i) => {
            let j = 1u64 << lg_of(s.intervals[*i]);
            (
                "jemalloc",
                format!("jemalloc prof {}", format_size(j)),
                None,
                Some(j),
            )
        }
        Key::Tcmalloc(i) => (
            "tcmalloc",
            format!("tcmalloc sampler {}", size(*i)),
            None,
            Some(s.intervals[*i]),
        ),
        Key::Heaptrack => ("heaptrack", "heaptrack".into(), None, None),
    }
}

/// One row from the pooled values of a configuration (None without any overhead value).
fn row(
    s: &Settings,
    (w, sched, key): &(usize, Schedule, Key),
    g: &[(u64, Paired)],
    counts: Option<CountSplit>,
) -> Option<Row> {
    let work = &s.workloads[*w];
    let e = estimate_groups(&groups(g, |p| &p.overhead))?;
    let (profiler, config, unwinder, interval) = config_name(key, s);
    let memlens = matches!(key, Key::Memlens(..));
    let est = |f: fn(&Paired) -> &Vec<f64>| estimate_groups(&groups(g, f)).filter(|_| memlens);
    let (direct, indirect, own) = (est(|p| &p.direct), est(|p| &p.indirect), est(|p| &p.own));
    // Where the ticks are not split (everything but the pipeline), the runtime's own account is
    // the direct cost, and the rest of the overhead the indirect.
    let (direct_pct, indirect_pct) = match (direct, own) {
        (Some(d), _) => (Some(d.pct), indirect.map(|i| i.pct)),
        (None, Some(o)) => (Some(o.pct), Some(e.pct - o.pct)),
        (None, None) => (None, None),
    };
    let target = s.target(work);
    let blocks = *sched == Schedule::Blocks;
    Some(Row {
        workload: work.name(),
        config,
        interval_bytes: interval,
        unwinder,
        paired: blocks,
        overhead_pct: e.pct,
        ci_low_pct: e.lo,
        ci_high_pct: e.hi,
        direct_cost_pct: direct_pct,
        indirect_cost_pct: indirect_pct,
        coverage_pct: None,
        total_error_pct: None,
        top_error_pct: None,
        samples: None,
        truncated_pct: None,
        profiler: profiler.into(),
        rounds: e.n,
        // whole processes: every round is processes of its own
        processes: if blocks {
            g.iter().filter(|(_, p)| !p.overhead.is_empty()).count()
        } else {
            e.n
        },
        ci_target_pct: target,
        ci_met: e.half_width() <= target,
        resolved: None,
        counts_per_tick: counts.filter(|_| memlens),
        p99_overhead_pct: estimate_groups(&groups(g, |p| &p.p99)),
        direct_ci: direct,
        indirect_ci: indirect,
        own_cost_pct: own,
        sampled_ticks_pct: est(|p| &p.sampled_share).map(|d| d.pct),
        per_round: groups(g, |p| &p.overhead),
    })
}

/// Every configuration's row, judged against its placebo; `counts` gives the counters' split of a
/// configuration of a workload, where counted.
pub fn rows_of(
    s: &Settings,
    pool: &Pool,
    counts: impl Fn(usize, &Key) -> Option<CountSplit>,
) -> Vec<Row> {
    let mut rows: Vec<Row> = pool
        .iter()
        .filter_map(|(k, g)| row(s, k, g, counts(k.0, &k.2)))
        .collect();
    calibrate(&mut rows);
    rows
}

/// The placebo's band of a workload in a schedule: the largest distance from 0 of the first
/// placebo's 95% interval — what the pairing reads when nothing changes.
pub fn placebo_band(rows: &[Row], workload: &str, sched: Schedule) -> Option<f64> {
    rows.iter()
        .find(|r| r.workload == workload && r.schedule() == sched && r.config == "placebo")
        .map(|p| p.ci_low_pct.abs().max(p.ci_high_pct.abs()))
}

/// Mark every row resolved or not against its workload's placebo band in its schedule (the
/// first placebo itself stays unmarked).
fn calibrate(rows: &mut [Row]) {
    let bands: Vec<Option<f64>> = rows
        .iter()
        .map(|r| placebo_band(rows, &r.workload, r.schedule()))
        .collect();
    for (r, band) in rows.iter_mut().zip(bands) {
        if r.config != "placebo" {
            r.resolved = band.map(|b| r.overhead().beyond(b));
        }
    }
}

/// a − b of two rows' medians, with the hierarchical interval of their rounds by process.
pub fn difference(a: &Row, b: &Row) -> Option<Estimate> {
    estimate::difference_groups(&a.per_round, &b.per_round)
}

/// The A/A count of a study (None with one placebo per workload).
pub fn aa(rows: &[Row]) -> Option<Aa> {
    let mut out = Aa::default();
    let mut places: Vec<(&str, Schedule)> = Vec::new();
    for r in rows {
        if !places.contains(&(&r.workload, r.schedule())) {
            places.push((&r.workload, r.schedule()));
        }
    }
    for (w, sched) in places {
        let band = placebo_band(rows, w, sched);
        let extra: Vec<&Row> = rows
            .iter()
            .filter(|r| r.workload == w && r.schedule() == sched)
            .filter(|r| r.is_placebo() && r.config != "placebo")
            .collect();
        for (i, a) in extra.iter().enumerate() {
            out.comparisons += 1;
            out.resolved += u32::from(a.resolved == Some(true));
            out.excludes_zero += u32::from(a.overhead().beyond(0.0));
            for b in &extra[i + 1..] {
                out.comparisons += 1;
                let d = difference(a, b);
                out.resolved += u32::from(matches!((d, band), (Some(d), Some(x)) if d.beyond(x)));
                out.excludes_zero += u32::from(d.is_some_and(|d| d.beyond(0.0)));
            }
        }
    }
    (out.comparisons > 0).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::tests::row;

    /// A row is resolved only when its whole interval lies beyond the placebo's band of its
    /// schedule.
    #[test]
    fn the_placebo_calibrates_every_row_of_its_workload_and_schedule() {
        let mut rows = vec![
            row("w", "placebo", "placebo", -1.0, 1.5),
            row("w", "placebo 2", "placebo", -0.5, 1.2),
            row("w", "memlens fp 64K", "memlens", 1.2, 4.0),
            row("w", "memlens fp 128K", "memlens", 1.6, 4.0),
            row("w", "jemalloc prof 64K", "jemalloc", -9.0, -2.0),
            row("w", "placebo", "placebo", -5.0, 6.0),
            row("w", "tcmalloc sampler 64K", "tcmalloc", 2.0, 5.0),
        ];
        for r in &mut rows[5..] {
            r.paired = false;
        }
        calibrate(&mut rows);
        let got: Vec<Option<bool>> = rows.iter().map(|r| r.resolved).collect();
        // the band is 1.5 in blocks: 1.2 is inside it (excluding 0 is not enough), 1.6 is beyond;
        // whole processes have their own placebo (±6): +2…+5 is not resolved there
        assert_eq!(
            got,
            [
                None,
                Some(false),
                Some(false),
                Some(true),
                Some(true),
                None,
                Some(false)
            ]
        );
        assert_eq!(placebo_band(&rows, "w", Schedule::Blocks), Some(1.5));
        assert_eq!(placebo_band(&rows, "w", Schedule::Processes), Some(6.0));
        assert_eq!(placebo_band(&rows, "other", Schedule::Blocks), None);
    }
}
