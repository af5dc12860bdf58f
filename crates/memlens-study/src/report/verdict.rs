//! The answer first: the recommendation (a pure function of the rows), the verdict lines, then the
//! detailed tables (cost and quality apart, each under 120 columns), JSON, CSV and HTML.
use super::engine::{placebo_band, Results, Row};
use crate::estimate::{self, Estimate};
use anyhow::Result;
use memlens_measure::units::format_size;
use memlens_render::doc::{terminal_width, wrap, Document, Section, Table};
use memlens_render::output;
use serde::Serialize;

/// Published figures (jemalloc 3.4.1, 2×8-core Xeon, libgcc unwinder, 16 threads): increase of the
/// mean at 512 KiB on the malloc-test loop and on the real trading application.
pub const PUBLISHED_512K: (f64, f64) = (9.0, 42.0);

/// Where the method of the study is explained (in the tree).
pub const DESIGN_DOC: &str = "docs/study.md";

/// A candidate interval for the recommendation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Candidate {
    /// Interval, bytes.
    pub interval: u64,
    /// Its overhead.
    pub overhead: Estimate,
    /// Its coverage, if measured.
    pub coverage: Option<f64>,
}

/// Why an interval was recommended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// Its overhead is within the budget even at the upper end of its 95% interval.
    WithinBudget,
    /// Not proven within the budget, but statistically indistinguishable from the cheapest interval
    /// and not over the budget at its point estimate.
    TiedWithCheapest,
    /// Even the cheapest interval is over the budget: the smallest interval tied with it.
    OverBudget,
}

/// A recommendation: the interval, why, and the cheapest interval it was compared with.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recommendation {
    /// The recommended interval.
    pub pick: Candidate,
    /// Why.
    pub basis: Basis,
    /// The qualifying interval with the lowest upper CI end (the best guaranteed cost).
    pub cheapest: Candidate,
}

/// The interval to use — a rule built to give the same answer on two runs whose overheads differ
/// only by noise. It never ranks intervals by their point estimates:
///
/// 1. Qualifying intervals: coverage ≥ `min_coverage` (unknown coverage does not qualify).
/// 2. The *cheapest* is the qualifying interval with the lowest upper CI end (the best cost any
///    interval is proven to stay under).
/// 3. Eligible: a qualifying interval whose upper CI end is within `budget` (proven affordable), or
///    whose CI reaches down to the cheapest's upper end (indistinguishable from the cheapest) while
///    its point estimate stays within the budget (no limit when even the cheapest is over it).
/// 4. Recommend the smallest eligible interval (the most detail).
///
/// So when noise makes every interval's interval wide, they all tie with the cheapest and the
/// smallest one that covers is chosen, run after run; an interval is passed over only when it is
/// shown to cost more than the cheapest and is not proven affordable.
pub fn recommend(c: &[Candidate], min_coverage: f64, budget: f64) -> Option<Recommendation> {
    let mut ok: Vec<&Candidate> = c
        .iter()
        .filter(|x| x.coverage.is_some_and(|v| v >= min_coverage))
        .collect();
    ok.sort_by_key(|x| x.interval);
    let cheapest = **ok
        .iter()
        .min_by(|a, b| a.overhead.hi.total_cmp(&b.overhead.hi))?;
    let cap = if cheapest.overhead.pct <= budget {
        budget
    } else {
        f64::INFINITY
    };
    ok.iter().find_map(|x| {
        let basis = if x.overhead.hi <= budget {
            Basis::WithinBudget
        } else if x.overhead.lo <= cheapest.overhead.hi && x.overhead.pct <= cap {
            if cap.is_finite() {
                Basis::TiedWithCheapest
            } else {
                Basis::OverBudget
            }
        } else {
            return None;
        };
        Some(Recommendation {
            pick: **x,
            basis,
            cheapest,
        })
    })
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
}

/// a − b of two rows' medians, with the hierarchical interval of their rounds by process.
fn difference(a: &Row, b: &Row) -> Option<Estimate> {
    estimate::difference_groups(&a.engine.per_round, &b.engine.per_round)
}

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

/// The workloads whose memlens rows have coverage (profile windows), in the study's order.
fn judged(r: &Results) -> Vec<String> {
    r.settings
        .workloads
        .iter()
        .map(|w| w.name())
        .filter(|w| {
            r.rows
                .iter()
                .any(|x| &x.workload == w && x.coverage_pct.is_some())
        })
        .collect()
}

/// The recommendation lines: per workload with coverage and per unwinder, the interval to use.
pub fn answer(r: &Results) -> Vec<String> {
    let s = &r.settings;
    let mut v = Vec::new();
    for w in judged(r) {
        for u in &s.unwinders {
            let cands: Vec<Candidate> = r
                .rows
                .iter()
                .filter(|x| x.workload == w && x.unwinder.as_deref() == Some(u))
                .map(|x| Candidate {
                    interval: x.interval_bytes.unwrap_or(0),
                    overhead: x.overhead(),
                    coverage: x.coverage_pct,
                })
                .collect();
            if cands.is_empty() {
                continue;
            }
            v.push(match recommend(&cands, s.min_coverage, s.budget) {
                Some(rec) => {
                    let c = rec.pick;
                    let why = match rec.basis {
                        Basis::WithinBudget => format!("≤ {}% budget at the CI's upper end", s.budget),
                        Basis::TiedWithCheapest | Basis::OverBudget
                            if rec.cheapest.interval == c.interval =>
                        {
                            format!("the cheapest, not proven ≤ {}%", s.budget)
                        }
                        Basis::TiedWithCheapest => format!(
                            "a tie with the cheapest ({} {}%), not proven ≤ {}%",
                            format_size(rec.cheapest.interval),
                            rec.cheapest.overhead.show(),
                            s.budget
                        ),
                        Basis::OverBudget => format!(
                            "over the {}% budget; tied with the cheapest ({} {}%)",
                            s.budget,
                            format_size(rec.cheapest.interval),
                            rec.cheapest.overhead.show()
                        ),
                    };
                    format!(
                        "recommended on {w}, memlens {u}: {} — overhead {}% ({why}), coverage {:.1}% (≥ {}%)",
                        format_size(c.interval),
                        c.overhead.show_ci(),
                        c.coverage.unwrap_or(f64::NAN),
                        s.min_coverage
                    )
                }
                None => format!(
                    "recommended on {w}, memlens {u}: none — no interval reached {}% coverage",
                    s.min_coverage
                ),
            });
        }
    }
    if v.is_empty() {
        v.push("no recommendation: coverage was not measured (--no-exact, or no workload with profile windows)".into());
    }
    v
}

/// A/A comparisons: with more than one placebo, each further placebo against off and against
/// each other, judged as every difference is (beyond the first placebo's band).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Aa {
    /// Comparisons made.
    pub comparisons: u32,
    /// Called resolved (false resolutions: nothing differs between placebos).
    pub resolved: u32,
    /// Whose 95% interval excludes 0 (what would be called resolved without the placebo's band).
    pub excludes_zero: u32,
}

/// The A/A count of a study (None with one placebo per workload).
pub fn aa(rows: &[Row]) -> Option<Aa> {
    let mut out = Aa::default();
    let mut workloads: Vec<&str> = rows.iter().map(|r| r.workload.as_str()).collect();
    workloads.dedup();
    for w in workloads {
        let band = placebo_band(rows, w);
        let extra: Vec<&Row> = rows
            .iter()
            .filter(|r| r.workload == w && r.is_placebo() && r.config != "placebo")
            .collect();
        for (i, a) in extra.iter().enumerate() {
            out.comparisons += 1;
            out.resolved += u32::from(a.engine.resolved == Some(true));
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

/// The verdict: what the answer rests on, in a few lines (± = half the 95% interval).
pub fn verdict(r: &Results) -> Vec<String> {
    let s = &r.settings;
    let mut v = Vec::new();
    let names: Vec<String> = s.workloads.iter().map(|w| w.name()).collect();
    for w in &names {
        if let Some(p) = r
            .rows
            .iter()
            .find(|x| &x.workload == w && x.config == "placebo")
        {
            v.push(format!(
                "placebo on {w} (switched to as off is): {}% over {} rounds in {} process{} — a difference is resolved only beyond ±{:.1} points",
                p.overhead().show_ci(),
                p.engine.rounds,
                p.engine.processes,
                if p.engine.processes == 1 { "" } else { "es" },
                placebo_band(&r.rows, w).unwrap_or(f64::NAN)
            ));
        }
    }
    if let Some(a) = aa(&r.rows) {
        v.push(format!(
            "A/A: {} of {} comparisons between placebos called resolved ({:.1}%); {} excluded 0 (the rate without the placebo's band)",
            a.resolved,
            a.comparisons,
            a.resolved as f64 / a.comparisons as f64 * 100.0,
            a.excludes_zero
        ));
    }
    let find = |w: &str, p: &str, u: Option<&str>, i: u64| {
        r.rows.iter().find(|x| {
            x.workload == w
                && x.engine.profiler == p
                && (u.is_none() || x.unwinder.as_deref() == u)
                && x.interval_bytes == Some(i)
        })
    };
    let u0 = s.unwinders.first().map(String::as_str);
    for w in &names {
        let band = placebo_band(&r.rows, w);
        for u in &s.unwinders {
            let (Some(a), Some(b)) = (
                find(w, "memlens", Some(u), 64 << 10),
                find(w, "memlens", Some(u), 2 << 20),
            ) else {
                continue;
            };
            let d = difference(a, b);
            v.push(format!(
                "64K vs 2M ({u}) on {w}: {}% vs {}%; difference {} points — {}",
                a.overhead().show(),
                b.overhead().show(),
                d.map_or("-".into(), |d| d.show_ci()),
                tie_word(d, band)
            ));
        }
        for i in [64u64 << 10, 512 << 10] {
            if let (Some(m), Some(j)) = (find(w, "memlens", u0, i), find(w, "jemalloc", None, i)) {
                let d = difference(m, j);
                v.push(format!(
                    "memlens {} vs jemalloc prof at {} on {w}: {}% vs {}%; difference {} points — {}",
                    u0.unwrap_or(""),
                    format_size(i),
                    m.overhead().show(),
                    j.overhead().show(),
                    d.map_or("-".into(), |d| d.show_ci()),
                    tie_word(d, band)
                ));
            }
        }
    }
    let synth = names.iter().find(|w| w.starts_with("synthetic"));
    // the realistic workloads: those judged for quality (redis, the pipeline in the LLC)
    for rw in judged(r).iter().filter(|w| !w.starts_with("synthetic")) {
        let Some(sw) = synth else { break };
        if let (Some(a), Some(b)) = (
            find(rw, "memlens", u0, 512 << 10),
            find(sw, "memlens", u0, 512 << 10),
        ) {
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
            if let (Some(di), Some(ii)) = (a.engine.direct_ci, a.engine.indirect_ci) {
                v.push(format!(
                    "  split on {rw}: direct (the sampling ticks) {}%, indirect (the {} ticks after) {}%, rest {:+.1}%",
                    di.show(),
                    memlens_workloads::AFTER,
                    ii.show(),
                    a.overhead().pct - di.pct - ii.pct
                ));
            }
        }
    }
    v.extend(direct_vs_total(r));
    v.push(format!("cache/TLB misses per tick: {}", r.counters));
    let missed: Vec<&Row> = r.rows.iter().filter(|x| !x.engine.ci_met).collect();
    v.push(if missed.is_empty() {
        format!(
            "every 95% CI reached its target (±{} points synthetic, ±{} pipeline, ±{} service) within {:.0} s",
            s.target_synthetic, s.target_pipeline, s.target_service, r.seconds
        )
    } else {
        format!(
            "{} of {} configurations did not reach their CI target (±{} synthetic, ±{} pipeline, ±{} service; ✗ below, with the half width reached) {}",
            missed.len(),
            r.rows.len(),
            s.target_synthetic,
            s.target_pipeline,
            s.target_service,
            if s.max_seconds > 0.0 {
                format!("within the {:.0} s limit", s.max_seconds)
            } else {
                "(--max-time 0: no further rounds)".to_string()
            }
        )
    });
    if s.processes < 2 {
        v.push("one process per configuration: the intervals cover the rounds of that process, not what differs between processes".into());
    }
    v.extend(r.notes.iter().cloned());
    v
}

/// Direct (the runtime's own account of its sampled path) vs total (the paired overhead), per
/// workload at 64K and 512K for the first unwinder — or why it is not there.
fn direct_vs_total(r: &Results) -> Vec<String> {
    let mut v = Vec::new();
    let u0 = r.settings.unwinders.first().map(String::as_str);
    for w in r.settings.workloads.iter().map(|w| w.name()) {
        let parts: Vec<String> = r
            .rows
            .iter()
            .filter(|x| {
                x.workload == w && x.engine.profiler == "memlens" && x.unwinder.as_deref() == u0
            })
            .filter(|x| matches!(x.interval_bytes, Some(i) if i == 64 << 10 || i == 512 << 10))
            .filter_map(|x| {
                let o = x.engine.own_cost_pct?;
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
    if v.is_empty() && r.rows.iter().any(|x| x.engine.profiler == "memlens") {
        v.push("direct cost: n/a (this runtime does not account its own cost)".into());
    }
    v
}

const COST_HEAD: [&str; 11] = [
    "config",
    "rounds",
    "procs",
    "mean % (95% CI)",
    "± / target",
    "resolved",
    "p99 %",
    "direct %",
    "indirect %",
    "own %",
    "sampled ticks %",
];

fn cost_rows(r: &Results, w: &str) -> Vec<Vec<String>> {
    r.rows
        .iter()
        .filter(|x| x.workload == w)
        .map(|x| {
            let e = x.overhead();
            vec![
                x.config.clone(),
                e.n.to_string(),
                x.engine.processes.to_string(),
                format!("{:+.1} [{:+.1}, {:+.1}]", e.pct, e.lo, e.hi),
                format!(
                    "{:.2} / {} {}",
                    (e.hi - e.lo) / 2.0,
                    x.engine.ci_target_pct,
                    if x.engine.ci_met { "ok" } else { "✗" }
                ),
                match x.engine.resolved {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "(A/A)",
                }
                .into(),
                x.engine.p99_overhead_pct.map_or("-".into(), |e| e.show()),
                x.engine.direct_ci.map_or("-".into(), |e| e.show()),
                x.engine.indirect_ci.map_or("-".into(), |e| e.show()),
                x.engine.own_cost_pct.map_or("-".into(), |e| e.show()),
                opt(x.engine.sampled_ticks_pct, 2),
            ]
        })
        .collect()
}

/// The per-tick counters by class of tick (where counted): header and rows, one per memlens
/// configuration plus each workload's off blocks.
fn count_table(r: &Results) -> Option<(Vec<String>, Vec<Vec<String>>)> {
    let [a, b] = r.counter_events.as_ref()?;
    let head = vec![
        "config".to_string(),
        format!("{a}: sampled / after / far"),
        format!("{b}: sampled / after / far"),
    ];
    let f = |c: &super::stats::CountSplit, k: usize| {
        format!("{:.1} / {:.1} / {:.1}", c.sampled[k], c.after[k], c.far[k])
    };
    let mut rows = Vec::new();
    for (w, off) in &r.counts_off {
        rows.push(vec![
            format!("{w} off"),
            format!("- / - / {:.1}", off.far[0]),
            format!("- / - / {:.1}", off.far[1]),
        ]);
        for x in r.rows.iter().filter(|x| &x.workload == w) {
            if let Some(c) = &x.engine.counts_per_tick {
                rows.push(vec![format!("{w} {}", x.config), f(c, 0), f(c, 1)]);
            }
        }
    }
    Some((head, rows))
}

const QUALITY_HEAD: [&str; 7] = [
    "workload",
    "config",
    "coverage %",
    "total err %",
    "top-stack err %",
    "samples",
    "truncated %",
];

fn quality_rows(r: &Results) -> Vec<Vec<String>> {
    r.rows
        .iter()
        .filter(|x| x.coverage_pct.is_some())
        .map(|x| {
            vec![
                x.workload.clone(),
                x.config.clone(),
                opt(x.coverage_pct, 1),
                opt(x.total_error_pct, 1),
                opt(x.top_error_pct, 1),
                x.samples.map_or("-".into(), |v| v.to_string()),
                opt(x.truncated_pct, 1),
            ]
        })
        .collect()
}

fn workloads(r: &Results) -> Vec<(String, String)> {
    r.settings
        .workloads
        .iter()
        .map(|w| (w.name(), w.describe()))
        .collect()
}

fn truth_rows(r: &Results) -> Vec<(String, Vec<Vec<String>>)> {
    r.truth
        .iter()
        .map(|t| {
            // Skip the frames every top stack shares (the allocator's own), or all five rows read
            // the same four frames.
            let skip = t.summary.common_frames();
            let rows = t
                .summary
                .top
                .iter()
                .map(|s| {
                    let mut st = s.short(skip);
                    if st.chars().count() > 90 {
                        st = st.chars().take(89).collect::<String>() + "…";
                    }
                    vec![format!("{:.1}", s.share_pct), st]
                })
                .collect();
            (format!("{}, {}", t.workload, t.summary.unwinder), rows)
        })
        .collect()
}

/// The cost table of one workload, columns grouped by topic so that a narrow terminal gets it in
/// parts (each repeating the configuration).
fn cost_table(r: &Results, w: &str) -> Table {
    let mut t = Table::new(&COST_HEAD[..1])
        .topic("mean", &COST_HEAD[1..6])
        .topic("p99", &COST_HEAD[6..7])
        .topic("split", &COST_HEAD[7..11]);
    t.rows = cost_rows(r, w);
    t
}

/// Heading of the answer: the recommendation and the chart.
const ANSWER: &str =
    "ANSWER (paired in time inside each process; 95% intervals; the placebo is the A/A reading)";

/// The study as one document, after the answer: the verdict, then the cost tables, the counters,
/// the quality of the profile windows, the top stacks, and how the switches went.
pub fn document(r: &Results) -> Document {
    let mut doc = Document::new("memlens study: what heap profiling costs");
    let mut v = Section::new("VERDICT (± = half the 95% interval)");
    for l in verdict(r) {
        v = v.note(l);
    }
    doc.sections.push(v);
    for (w, d) in workloads(r) {
        doc.sections
            .push(Section::new(format!("Cost: {w} — {d}")).table(cost_table(r, &w)));
    }
    if let Some((h, rows)) = count_table(r) {
        doc.sections.push(
            Section::new(
                "Counters per tick by class of tick (sampled, the ticks after, far from a sample)",
            )
            .table(Table::simple(&h, rows)),
        );
    }
    let q = quality_rows(r);
    if !q.is_empty() {
        doc.sections.push(
            Section::new(
                "Profile quality: the same window (warm-up, reset, the same work), exact vs sampled",
            )
            .table(Table::simple(&QUALITY_HEAD, q)),
        );
    }
    for (u, rows) in truth_rows(r) {
        doc.sections.push(
            Section::new(format!(
                "Top stacks of the exact window ({u}), innermost first, short names"
            ))
            .table(Table::simple(&["share %", "stack"], rows)),
        );
    }
    doc.sections.push(
        Section::new("Run")
            .note(format!(
                "switch: {} threads, longest switch call {:.1} µs, threads still pending after it: {} at most",
                r.switch.threads,
                r.switch.max_ns as f64 / 1e3,
                r.switch.pending_max
            ))
            .note(format!(
                "study took {:.0} s: {:.0} s the first processes and the profile windows, the rest {} further processes and the report; method: {DESIGN_DOC}",
                r.seconds, r.first_seconds, r.extra_processes
            )),
    );
    doc
}

/// The answer for the terminal: the recommendation and the chart, fitted to `width`.
pub fn answer_text(r: &Results, width: usize) -> String {
    let mut o = format!(
        "{}
",
        wrap(ANSWER, width, "")
    );
    for l in answer(r) {
        o += &wrap(&l, width, "  ");
        o.push('\n');
    }
    for l in super::chart::text(r, width) {
        o += &l;
        o.push('\n');
    }
    o
}

/// Print the answer, the verdict and the tables (fitted to the terminal's width); write the files
/// asked for.
pub fn emit(r: &Results, out: &memlens_render::output::OutputArgs) -> Result<()> {
    let doc = document(r);
    let width = terminal_width();
    print!("{}{}", answer_text(r, width), doc.to_text(width));
    if let Some(p) = &out.json {
        output::write_json(p, r)?;
    }
    if let Some(p) = &out.csv {
        let rows: Vec<CsvRow> = r.rows.iter().map(CsvRow::of).collect();
        output::write_csv_rows(p, &rows)?;
    }
    if let Some(p) = &out.html {
        let mut page = doc.clone();
        let mut a = Section::new(
            "Answer (paired in time inside each process; 95% intervals; the placebo is the A/A reading)",
        );
        for l in answer(r) {
            a = a.note(l);
        }
        a = a.plot(super::chart::svg(r)?);
        page.sections.insert(0, a);
        page.sections[1].heading = "Verdict (± = half the 95% interval)".into();
        output::write_text(p, &page.to_html())?;
    }
    Ok(())
}

/// One CSV line per configuration: the JSON contract's fields, flat (an empty cell is not
/// measured or does not apply), percentages to three decimals.
#[derive(serde::Serialize)]
struct CsvRow<'a> {
    workload: &'a str,
    config: &'a str,
    interval_bytes: Option<u64>,
    unwinder: Option<&'a str>,
    paired: bool,
    overhead_pct: f64,
    ci_low_pct: f64,
    ci_high_pct: f64,
    coverage_pct: Option<f64>,
    direct_cost_pct: Option<f64>,
    indirect_cost_pct: Option<f64>,
}

impl<'a> CsvRow<'a> {
    fn of(x: &'a Row) -> CsvRow<'a> {
        let r3 = |v: f64| (v * 1000.0).round() / 1000.0;
        let e = x.overhead();
        CsvRow {
            workload: &x.workload,
            config: &x.config,
            interval_bytes: x.interval_bytes,
            unwinder: x.unwinder.as_deref(),
            paired: x.paired,
            overhead_pct: r3(e.pct),
            ci_low_pct: r3(e.lo),
            ci_high_pct: r3(e.hi),
            coverage_pct: x.coverage_pct.map(r3),
            direct_cost_pct: x.direct_cost_pct.map(r3),
            indirect_cost_pct: x.indirect_cost_pct.map(r3),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(interval: u64, pct: f64, hw: f64, cov: Option<f64>) -> Candidate {
        Candidate {
            interval,
            overhead: Estimate {
                pct,
                lo: pct - hw,
                hi: pct + hw,
                n: 10,
            },
            coverage: cov,
        }
    }

    #[test]
    fn recommendation_table() {
        use Basis::*;
        let k = 1024;
        // (candidates, expected interval and basis)
        type Case = (Vec<Candidate>, Option<(u64, Basis)>);
        let cases: Vec<Case> = vec![
            // the smallest interval proven within budget wins
            (
                vec![
                    c(64 * k, 20.0, 2.0, Some(99.0)),
                    c(512 * k, 3.0, 1.0, Some(97.0)),
                    c(2048 * k, 1.0, 1.0, Some(91.0)),
                ],
                Some((512 * k, WithinBudget)),
            ),
            // not proven (upper end 5.5) and shown costlier than the cheapest: passed over
            (
                vec![
                    c(512 * k, 4.5, 1.0, Some(97.0)),
                    c(2048 * k, 1.0, 1.0, Some(95.0)),
                ],
                Some((2048 * k, WithinBudget)),
            ),
            // coverage rules out the cheap one; the only one left is over budget
            (
                vec![
                    c(512 * k, 8.0, 1.0, Some(97.0)),
                    c(2048 * k, 1.0, 1.0, Some(80.0)),
                ],
                Some((512 * k, OverBudget)),
            ),
            // nothing in budget: the smallest tied with the cheapest (64K is clearly dearer)
            (
                vec![
                    c(64 * k, 30.0, 1.0, Some(99.0)),
                    c(256 * k, 9.0, 1.0, Some(95.0)),
                    c(1024 * k, 8.5, 1.0, Some(92.0)),
                ],
                Some((256 * k, OverBudget)),
            ),
            // unknown coverage never qualifies
            (vec![c(512 * k, 1.0, 1.0, None)], None),
            (vec![], None),
        ];
        for (i, (cands, want)) in cases.iter().enumerate() {
            assert_eq!(
                recommend(cands, 90.0, 5.0).map(|x| (x.pick.interval, x.basis)),
                *want,
                "case {i}"
            );
        }
    }

    /// Near-ties: overheads that differ only by noise must give the same answer, whichever
    /// interval happens to have the lowest point estimate and whether or not one of them happens
    /// to be proven within budget.
    #[test]
    fn recommendation_is_stable_under_noise() {
        let k = 1024;
        let cov = [99.0, 98.0, 96.0, 93.0];
        let iv = [64 * k, 128 * k, 256 * k, 512 * k];
        // Three "runs" of the same noisy pipeline (true overhead ~1% everywhere, CIs ±3.5).
        let runs = [
            [1.5, 0.2, 2.1, -0.3],
            [-0.4, 1.9, 0.3, 1.2],
            [2.4, 1.1, -0.9, 0.8],
        ];
        for (i, pcts) in runs.iter().enumerate() {
            let cands: Vec<Candidate> = (0..4)
                .map(|j| c(iv[j], pcts[j], 3.5, Some(cov[j])))
                .collect();
            let rec = recommend(&cands, 90.0, 5.0).unwrap();
            assert_eq!(rec.pick.interval, 64 * k, "run {i}: {rec:?}");
        }
        // A real difference is kept: 64K clearly dearer (+9 ±1) than 512K (+0.8 ±1), in every run.
        for jitter in [-0.4, 0.0, 0.4] {
            let cands = vec![
                c(64 * k, 9.0 + jitter, 1.0, Some(99.0)),
                c(128 * k, 4.6 - jitter, 1.0, Some(98.0)),
                c(512 * k, 0.8 + jitter, 1.0, Some(93.0)),
                c(2048 * k, 0.3 - jitter, 1.0, Some(60.0)),
            ];
            let rec = recommend(&cands, 90.0, 5.0).unwrap();
            assert_eq!(rec.pick.interval, 512 * k, "jitter {jitter}: {rec:?}");
        }
        // Tied with the cheapest but over budget at its point estimate: not chosen.
        let cands = vec![
            c(64 * k, 5.5, 3.0, Some(99.0)),
            c(512 * k, 2.0, 3.5, Some(95.0)),
        ];
        let rec = recommend(&cands, 90.0, 5.0).unwrap();
        assert_eq!(
            (rec.pick.interval, rec.basis),
            (512 * k, Basis::TiedWithCheapest)
        );
    }
}
