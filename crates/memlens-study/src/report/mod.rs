//! What the study says: the answer first (the recommendation and the chart, `chart.rs`), then the
//! verdict (`verdict.rs`), then the tables — cost per workload and schedule, counters, quality,
//! the exact window's top stacks, the run — on the terminal (fitted to its width) and as HTML; the
//! rows as JSON (the whole [`Results`]) and CSV (the contract's fields).
mod chart;
mod verdict;

use crate::model::{Results, Row, Schedule};
use crate::stats::CountSplit;
use anyhow::Result;
use memlens_render::doc::{terminal_width, wrap, Document, Section, Table};
use memlens_render::output;

/// Where the method of the study is explained (in the tree).
const DESIGN_DOC: &str = "docs/study.md";

/// Heading of the answer: the recommendation and the chart.
const ANSWER: &str =
    "ANSWER (each configuration paired with off beside it; 95% intervals; the placebo is the A/A reading)";

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |x| format!("{x:.digits$}"))
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

/// The cost table of one workload in one schedule, columns grouped by topic so that a narrow
/// terminal gets it in parts (each repeating the configuration).
fn cost_table(r: &Results, w: &str, sched: Schedule) -> Table {
    let mut t = Table::new(&COST_HEAD[..1])
        .topic("mean", &COST_HEAD[1..6])
        .topic("p99", &COST_HEAD[6..7])
        .topic("split", &COST_HEAD[7..11]);
    let show = |e: Option<crate::estimate::Estimate>| e.map_or("-".into(), |e| e.show());
    for x in r
        .rows
        .iter()
        .filter(|x| x.workload == w && x.schedule() == sched)
    {
        let e = x.overhead();
        t.push(vec![
            x.config.clone(),
            e.n.to_string(),
            x.processes.to_string(),
            format!("{:+.1} [{:+.1}, {:+.1}]", e.pct, e.lo, e.hi),
            format!(
                "{:.2} / {} {}",
                e.half_width(),
                x.ci_target_pct,
                if x.ci_met { "ok" } else { "✗" }
            ),
            match x.resolved {
                Some(true) => "yes",
                Some(false) => "no",
                None => "(A/A)",
            }
            .into(),
            show(x.p99_overhead_pct),
            show(x.direct_ci),
            show(x.indirect_ci),
            show(x.own_cost_pct),
            opt(x.sampled_ticks_pct, 2),
        ]);
    }
    t
}

/// The per-tick counters by class of tick (where counted): one row per memlens configuration
/// plus each workload's off blocks.
fn count_table(r: &Results) -> Option<Table> {
    let [a, b] = r.counter_events.as_ref()?;
    let head = [
        "config".to_string(),
        format!("{a}: sampled / after / far"),
        format!("{b}: sampled / after / far"),
    ];
    let f = |c: &CountSplit, k: usize| {
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
            if let Some(c) = &x.counts_per_tick {
                rows.push(vec![format!("{w} {}", x.config), f(c, 0), f(c, 1)]);
            }
        }
    }
    Some(Table::simple(&head, rows))
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

/// Each exact window's top stacks: its name, and a row per stack.
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

/// The study as one document, after the answer: the verdict, then the cost tables, the counters,
/// the quality of the profile windows, the top stacks, and how the switches went.
fn document(r: &Results) -> Document {
    let mut doc = Document::new("memlens study: what heap profiling costs");
    let mut v = Section::new("VERDICT (± = half the 95% interval)");
    for l in verdict::verdict(r) {
        v = v.note(l);
    }
    doc.sections.push(v);
    for w in &r.settings.workloads {
        for sched in [Schedule::Blocks, Schedule::Processes] {
            let t = cost_table(r, &w.name(), sched);
            if !t.rows.is_empty() {
                let how = match sched {
                    Schedule::Blocks => "in blocks inside one process",
                    Schedule::Processes => "as whole processes",
                };
                let head = format!("Cost: {}, {how} — {}", w.name(), w.describe());
                doc.sections.push(Section::new(head).table(t));
            }
        }
    }
    if let Some(t) = count_table(r) {
        let head =
            "Counters per tick by class of tick (sampled, the ticks after, far from a sample)";
        doc.sections.push(Section::new(head).table(t));
    }
    let q = quality_rows(r);
    if !q.is_empty() {
        let head =
            "Profile quality: the same window (warm-up, reset, the same work), exact vs sampled";
        doc.sections
            .push(Section::new(head).table(Table::simple(&QUALITY_HEAD, q)));
    }
    for (u, rows) in truth_rows(r) {
        let head = format!("Top stacks of the exact window ({u}), innermost first, short names");
        doc.sections
            .push(Section::new(head).table(Table::simple(&["share %", "stack"], rows)));
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
fn answer_text(r: &Results, width: usize) -> String {
    let mut o = format!("{}\n", wrap(ANSWER, width, ""));
    for l in verdict::answer(r) {
        o += &wrap(&l, width, "  ");
        o.push('\n');
    }
    for l in chart::text(r, width) {
        o += &l;
        o.push('\n');
    }
    o
}

/// Print the answer, the verdict and the tables (fitted to the terminal's width); write the files
/// asked for.
pub fn emit(r: &Results, out: &output::OutputArgs) -> Result<()> {
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
            "Answer (each configuration paired with off beside it; 95% intervals; the placebo is the A/A reading)",
        );
        for l in verdict::answer(r) {
            a = a.note(l);
        }
        a = a.plot(chart::svg(r)?);
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
        CsvRow {
            workload: &x.workload,
            config: &x.config,
            interval_bytes: x.interval_bytes,
            unwinder: x.unwinder.as_deref(),
            paired: x.paired,
            overhead_pct: r3(x.overhead_pct),
            ci_low_pct: r3(x.ci_low_pct),
            ci_high_pct: r3(x.ci_high_pct),
            coverage_pct: x.coverage_pct.map(r3),
            direct_cost_pct: x.direct_cost_pct.map(r3),
            indirect_cost_pct: x.indirect_cost_pct.map(r3),
        }
    }
}
