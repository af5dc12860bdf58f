//! The answer and the verdict in words: the recommendation lines, then what they rest on — every
//! placebo's reading, 64K vs 2M per unwinder, memlens against the other profilers, realistic vs
//! synthetic beside the published figures, direct vs total cost, the CI targets missed.
use crate::estimate::Estimate;
use crate::model::{Basis, Results, Row, Schedule};
use crate::rows::{difference, placebo_band};
use memlens_measure::units::format_size;

/// Published figures (jemalloc 3.4.1, 2×8-core Xeon, libgcc unwinder, 16 threads): increase of the
/// mean at 512 KiB on the malloc-test loop and on the real trading application.
pub const PUBLISHED_512K: (f64, f64) = (9.0, 42.0);

/// "resolved", "within the placebo's ±band: not resolved" or "a tie".
fn tie_word(d: Option<Estimate>, band: Option<f64>) -> String {
    let Some(d) = d else { return "-".into() };
    match band {
        Some(b) if d.beyond(b) => "resolved".into(),
        Some(b) if d.lo > 0.0 || d.hi < 0.0 => {
            format!("not resolved: the interval excludes 0 but not the placebo's ±{b:.1}")
        }
        None if d.lo > 0.0 || d.hi < 0.0 => "resolved (no placebo measured)".into(),
        _ => "a tie: the CI of the difference contains 0".into(),
    }
}

/// The recommendation lines: per workload with coverage and per unwinder, the interval to use.
pub fn answer(r: &Results) -> Vec<String> {
    let s = &r.settings;
    let mut v = Vec::new();
    for a in &r.recommendations {
        let (w, u) = (&a.workload, &a.unwinder);
        let Some(rec) = a.recommendation else {
            v.push(format!(
                "recommended on {w}, memlens {u}: none — no interval reached {}% coverage",
                s.min_coverage
            ));
            continue;
        };
        let (c, cheap) = (rec.pick, rec.cheapest);
        let why = match rec.basis {
            Basis::WithinBudget => format!("≤ {}% budget at the CI's upper end", s.budget),
            _ if cheap.interval == c.interval => {
                format!("the cheapest, not proven ≤ {}%", s.budget)
            }
            Basis::TiedWithCheapest => format!(
                "a tie with the cheapest ({} {}%), not proven ≤ {}%",
                format_size(cheap.interval),
                cheap.overhead.show(),
                s.budget
            ),
            Basis::OverBudget => format!(
                "over the {}% budget; tied with the cheapest ({} {}%)",
                s.budget,
                format_size(cheap.interval),
                cheap.overhead.show()
            ),
        };
        v.push(format!(
            "recommended on {w}, memlens {u}: {} — overhead {}% ({why}), coverage {:.1}% (≥ {}%)",
            format_size(c.interval),
            c.overhead.show_ci(),
            c.coverage.unwrap_or(f64::NAN),
            s.min_coverage
        ));
    }
    if v.is_empty() {
        v.push("no recommendation: coverage was not measured (--no-exact, or no workload with profile windows)".into());
    }
    v
}

/// The workloads and schedules of the rows, in their order.
fn places(r: &Results) -> Vec<(String, Schedule)> {
    let mut v: Vec<(String, Schedule)> = Vec::new();
    for w in r.settings.workloads.iter().map(|w| w.name()) {
        for sched in [Schedule::Blocks, Schedule::Processes] {
            if r.rows
                .iter()
                .any(|x| x.workload == w && x.schedule() == sched)
            {
                v.push((w.clone(), sched));
            }
        }
    }
    v
}

/// Each placebo's reading: the band every difference of its workload and schedule must exceed.
fn placebos(r: &Results) -> Vec<String> {
    let mut v = Vec::new();
    for (w, sched) in places(r) {
        let Some(p) = r
            .rows
            .iter()
            .find(|x| x.workload == w && x.schedule() == sched && x.config == "placebo")
        else {
            continue;
        };
        v.push(format!(
            "placebo on {w}{} ({} as off is): {}% over {} rounds in {} process{} — a difference is resolved only beyond ±{:.1} points",
            sched.suffix(),
            if p.paired { "switched to" } else { "run" },
            p.overhead().show_ci(),
            p.rounds,
            p.processes,
            if p.processes == 1 { "" } else { "es" },
            placebo_band(&r.rows, &w, sched).unwrap_or(f64::NAN)
        ));
    }
    if let Some(a) = &r.aa {
        v.push(format!(
            "A/A: {} of {} comparisons between placebos called resolved ({:.1}%); {} excluded 0 (the rate without the placebo's band)",
            a.resolved,
            a.comparisons,
            a.resolved as f64 / a.comparisons as f64 * 100.0,
            a.excludes_zero
        ));
    }
    v
}

/// The row of a workload, profiler, unwinder (any with None) and interval.
fn find<'a>(r: &'a Results, w: &str, p: &str, u: Option<&str>, i: u64) -> Option<&'a Row> {
    r.rows.iter().find(|x| {
        x.workload == w
            && x.profiler == p
            && (u.is_none() || x.unwinder.as_deref() == u)
            && x.interval_bytes == Some(i)
    })
}

/// `a vs b …: x% vs y%; difference d points — resolved or not`, judged against the wider of the
/// two rows' placebo bands.
fn versus(r: &Results, what: String, a: &Row, b: &Row) -> String {
    let band = |x: &Row| placebo_band(&r.rows, &x.workload, x.schedule());
    let band = match (band(a), band(b)) {
        (Some(x), Some(y)) => Some(x.max(y)),
        (x, y) => x.or(y),
    };
    let d = difference(a, b);
    format!(
        "{what}: {}% vs {}%; difference {} points — {}",
        a.overhead().show(),
        b.overhead().show(),
        d.map_or("-".into(), |d| d.show_ci()),
        tie_word(d, band)
    )
}

/// 64K vs 2M per unwinder; memlens (first unwinder) against the other profilers at 64K and 512K;
/// the configurations without an interval (the runtime inactive, heaptrack).
fn comparisons(r: &Results) -> Vec<String> {
    let s = &r.settings;
    let u0 = s.unwinders.first().map(String::as_str);
    let mut v = Vec::new();
    for w in s.workloads.iter().map(|w| w.name()) {
        for u in &s.unwinders {
            let m = |i| find(r, &w, "memlens", Some(u), i);
            if let (Some(a), Some(b)) = (m(64 << 10), m(2 << 20)) {
                v.push(versus(r, format!("64K vs 2M ({u}) on {w}"), a, b));
            }
        }
        for (p, name) in [
            ("jemalloc", "jemalloc prof"),
            ("tcmalloc", "tcmalloc sampler"),
        ] {
            for i in [64u64 << 10, 512 << 10] {
                if let (Some(m), Some(o)) = (find(r, &w, "memlens", u0, i), find(r, &w, p, None, i))
                {
                    let what = format!(
                        "memlens {} vs {name} at {} on {w}",
                        u0.unwrap_or(""),
                        format_size(i)
                    );
                    v.push(versus(r, what, m, o));
                }
            }
        }
        for x in r.rows.iter().filter(|x| x.workload == w) {
            if x.config == "memlens inactive" || x.profiler == "heaptrack" {
                v.push(format!(
                    "{} on {w} (whole processes, against none): {}% — {}",
                    x.config,
                    x.overhead().show_ci(),
                    tie_word(Some(x.overhead()), placebo_band(&r.rows, &w, x.schedule()))
                ));
            }
        }
    }
    v
}

/// The realistic workloads (those judged for quality: redis, the pipeline in the LLC) against
/// the synthetic loop at 512K, beside the published +42% vs +9%, with the pipeline's split.
fn realistic(r: &Results) -> Vec<String> {
    let s = &r.settings;
    let u0 = s.unwinders.first().map(String::as_str);
    let names: Vec<String> = s.workloads.iter().map(|w| w.name()).collect();
    let Some(sw) = names.iter().find(|w| w.starts_with("synthetic")) else {
        return vec![];
    };
    let mut v = Vec::new();
    let judged = r.recommendations.iter().map(|a| &a.workload);
    let mut seen: Vec<&String> = Vec::new();
    for rw in judged.filter(|w| !w.starts_with("synthetic")) {
        if seen.contains(&rw) {
            continue;
        }
        seen.push(rw);
        let (Some(a), Some(b)) = (
            find(r, rw, "memlens", u0, 512 << 10),
            find(r, sw, "memlens", u0, 512 << 10),
        ) else {
            continue;
        };
        let d = difference(a, b);
        v.push(format!(
            "realistic vs synthetic at 512K ({}): {rw} {}% vs {sw} {}% — difference {} points; published: +{}% vs +{}%",
            u0.unwrap_or(""),
            a.overhead().show(),
            b.overhead().show(),
            d.map_or("-".into(), |d| d.show_ci()),
            PUBLISHED_512K.1,
            PUBLISHED_512K.0
        ));
        if let (Some(di), Some(ii)) = (a.direct_ci, a.indirect_ci) {
            v.push(format!(
                "  split on {rw}: direct (the sampling ticks) {}%, indirect (the {} ticks after) {}%, rest {:+.1}%",
                di.show(),
                memlens_workloads::AFTER,
                ii.show(),
                a.overhead_pct - di.pct - ii.pct
            ));
        }
    }
    v
}

/// Direct (the runtime's own account of its sampled path) vs total (the paired overhead), per
/// workload, at 64K and 512K for the first unwinder — or why it is not there.
fn direct_vs_total(r: &Results) -> Vec<String> {
    let mut v = Vec::new();
    let u0 = r.settings.unwinders.first().map(String::as_str);
    for w in r.settings.workloads.iter().map(|w| w.name()) {
        let parts: Vec<String> = r
            .rows
            .iter()
            .filter(|x| x.workload == w && x.profiler == "memlens" && x.unwinder.as_deref() == u0)
            .filter(|x| matches!(x.interval_bytes, Some(i) if i == 64 << 10 || i == 512 << 10))
            .filter_map(|x| {
                let o = x.own_cost_pct?;
                Some(format!(
                    "{}: direct {}% of its CPU, total {}%",
                    format_size(x.interval_bytes?),
                    o.show(),
                    x.overhead().show_ci()
                ))
            })
            .collect();
        if !parts.is_empty() {
            v.push(format!(
                "direct vs total on {w} (memlens {}; direct = the runtime's own account of its sampled path): {}",
                u0.unwrap_or(""),
                parts.join("; ")
            ));
        }
    }
    if v.is_empty() && r.rows.iter().any(|x| x.paired && x.profiler == "memlens") {
        v.push("direct cost: n/a (this runtime does not account its own cost)".into());
    }
    v
}

/// How many intervals reached their target, within what time.
fn targets(r: &Results) -> String {
    let s = &r.settings;
    let missed = r.rows.iter().filter(|x| !x.ci_met).count();
    let targets = format!(
        "±{} points synthetic, ±{} pipeline, ±{} service or command",
        s.target_synthetic, s.target_pipeline, s.target_service
    );
    if missed == 0 {
        return format!(
            "every 95% CI reached its target ({targets}) within {:.0} s",
            r.seconds
        );
    }
    format!(
        "{missed} of {} configurations did not reach their CI target ({targets}; ✗ below, with the half width reached) {}",
        r.rows.len(),
        if s.max_seconds > 0.0 {
            format!("within the {:.0} s limit", s.max_seconds)
        } else {
            "(--max-time 0: no further rounds)".to_string()
        }
    )
}

/// The verdict: what the answer rests on, in a few lines (± = half the 95% interval).
pub fn verdict(r: &Results) -> Vec<String> {
    let mut v = placebos(r);
    v.extend(comparisons(r));
    v.extend(realistic(r));
    v.extend(direct_vs_total(r));
    v.push(format!("cache/TLB misses per tick: {}", r.counters));
    v.push(targets(r));
    if r.settings.processes < 2 && r.rows.iter().any(|x| x.paired) {
        v.push("one process per configuration: the intervals cover the rounds of that process, not what differs between processes".into());
    }
    v.extend(r.notes.iter().cloned());
    v
}
