//! The unpaired study's results: summaries of the runs, the recommendation, and one document
//! (verdict, notes, tables, plots) for the terminal and HTML, with the rows as JSON and CSV.
//! Published figures (docs/design.md, published studies) are shown beside ours, always labelled
//! as published.
use super::configs::{Config, Setup};
use super::runner::{ConfigRuns, WorkloadResults};
use super::Plan;
use crate::quality::TruthSummary;
use crate::StudyArgs;
use anyhow::Result;
use memlens_measure::stats::{overhead_pct, Summary};
use memlens_measure::units::format_size;
use memlens_render::doc::{self, Document, Section, Table, NOT_APPLICABLE, NOT_MEASURED};
use memlens_render::{output, plot};
use serde::{Deserialize, Serialize};

/// Where the published figures come from.
pub const PUBLISHED_LABEL: &str =
    "published: jemalloc 3.4.1, 2×8-core Xeon E5-2690, libgcc unwinder, 16 threads (docs/design.md)";
/// Increase of mean malloc() time in the malloc-test program, by interval (published).
pub const PUBLISHED_SYNTHETIC: [(u64, f64); 6] = [
    (64 << 10, 203.0),
    (128 << 10, 25.0),
    (256 << 10, 21.0),
    (512 << 10, 9.0),
    (1 << 20, 4.0),
    (2 << 20, 2.0),
];
/// Increase of mean quote-to-order latency of the real trading application, by interval (published).
pub const PUBLISHED_TRADING: [(u64, f64); 6] = [
    (64 << 10, 154.0),
    (128 << 10, 103.0),
    (256 << 10, 75.0),
    (512 << 10, 42.0),
    (1 << 20, 18.0),
    (2 << 20, 5.0),
];

/// A row of the unpaired study: the contract's fields ([`crate::row::Row`], so scripts read both
/// engines alike) and [`Columns`].
pub type Row = crate::row::Row<Columns>;

/// What only the unpaired study reports of a configuration, summarised over its repeats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Columns {
    /// Group of the plots (`memlens fp`, `jemalloc`, `reference`…).
    pub family: String,
    /// Sampling interval, bytes (the same as `interval_bytes`).
    pub interval: Option<u64>,
    /// The configuration it is compared with (null: a reference itself).
    pub reference: Option<String>,
    /// The workload's metric over the repeats.
    pub metric: Summary,
    /// The interval of the overhead contains 0: the difference is within the noise.
    pub tie: bool,
    /// synthetic: cycles per malloc/free pair (median over repeats).
    pub pair_cycles: Option<f64>,
    /// synthetic: `pair_cycles` minus the reference's.
    pub pair_delta_cycles: Option<f64>,
    /// pipeline: p99 latency (median over repeats), ns.
    pub p99_ns: Option<f64>,
    /// The published overhead at this interval, percent.
    pub published_pct: Option<f64>,
}

/// The interval to use with one unwinder, by the study's criteria.
#[derive(Debug, Clone, Serialize)]
pub struct Recommendation {
    /// The unwinder.
    pub unwinder: String,
    /// Largest interval with coverage ≥ --min-coverage.
    pub interval: Option<u64>,
    /// Its overhead, percent.
    pub overhead_pct: Option<f64>,
    /// Its coverage, percent.
    pub coverage_pct: Option<f64>,
    /// Smallest interval whose overhead ≤ --max-overhead (if given).
    pub under_max_overhead: Option<u64>,
    /// Its overhead, percent.
    pub under_max_overhead_pct: Option<f64>,
    /// Its coverage, percent.
    pub under_max_overhead_coverage: Option<f64>,
    /// The recommendation in a sentence.
    pub text: String,
}

/// Everything reported about one workload (an element of the JSON's `workloads`).
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadReport {
    /// Workload name.
    pub workload: String,
    /// What it does.
    pub description: String,
    /// Unit of its metric.
    pub unit: String,
    /// One row per configuration.
    pub rows: Vec<Row>,
    /// One per unwinder.
    pub recommendations: Vec<Recommendation>,
    /// How to read the rows, and what was not measured.
    pub notes: Vec<String>,
    /// Every run.
    pub results: WorkloadResults,
}

fn median_of(xs: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = xs.filter(|x| x.is_finite()).collect();
    Summary::of(&v).map(|s| s.median)
}

fn published_for(w: &str, c: &Config) -> Option<f64> {
    let Setup::Sampled { interval, .. } = &c.setup else {
        return None;
    };
    let table = if w.starts_with("synthetic") {
        &PUBLISHED_SYNTHETIC
    } else if w == "pipeline" {
        &PUBLISHED_TRADING
    } else {
        return None;
    };
    table.iter().find(|(r, _)| r == interval).map(|(_, p)| *p)
}

fn rows(w: &WorkloadResults) -> Vec<Row> {
    let summary = |cr: &ConfigRuns| {
        Summary::of(
            &cr.runs
                .iter()
                .map(|r| r.measure.primary)
                .collect::<Vec<_>>(),
        )
    };
    let extra = |cr: &ConfigRuns, k: &str| {
        median_of(
            cr.runs
                .iter()
                .filter_map(|r| r.measure.extra.get(k).copied()),
        )
    };
    let mut out = Vec::new();
    for cr in &w.configs {
        let Some(metric) = summary(cr) else { continue };
        let reference = cr
            .config
            .reference
            .as_ref()
            .and_then(|r| w.configs.iter().find(|c| &c.config.name == r));
        // Repeats are interleaved (A B C … A B C …): pair each run with its reference's run of the
        // same repeat, as the paired study pairs blocks.
        let est = reference.and_then(|rf| {
            let ratios: Vec<f64> = cr
                .runs
                .iter()
                .filter_map(|r| {
                    let b = rf.runs.iter().find(|b| b.repeat == r.repeat)?;
                    let x = overhead_pct(r.measure.primary, b.measure.primary);
                    x.is_finite().then_some(x)
                })
                .collect();
            crate::estimate::estimate(&ratios)
        });
        let pair = extra(cr, "cycles_per_pair");
        let ref_pair = reference.and_then(|r| extra(r, "cycles_per_pair"));
        let q = |f: fn(&crate::quality::Quality) -> f64| {
            median_of(cr.runs.iter().filter_map(|r| r.quality.as_ref().map(f)))
        };
        out.push(Row {
            workload: w.workload.clone(),
            config: cr.config.name.clone(),
            interval_bytes: cr.config.interval,
            unwinder: match &cr.config.setup {
                Setup::Sampled { unwinder, .. } | Setup::Exact { unwinder } => {
                    Some(unwinder.clone())
                }
                _ => None,
            },
            paired: false,
            overhead_pct: est.map(|e| e.pct),
            ci_low_pct: est.map(|e| e.lo),
            ci_high_pct: est.map(|e| e.hi),
            // measured by the paired study only (ticks tagged by the runtime's sample count)
            direct_cost_pct: None,
            indirect_cost_pct: None,
            coverage_pct: q(|q| q.coverage_pct),
            total_error_pct: q(|q| q.total_error_pct),
            top_error_pct: q(|q| q.top_max_abs_error_pct),
            // a count: the median of the repeats' counts, to the nearest whole sample
            samples: median_of(cr.runs.iter().filter_map(|r| r.samples.map(|s| s as f64)))
                .map(|m| m.round_ties_even() as u64),
            truncated_pct: median_of(
                cr.runs
                    .iter()
                    .filter_map(|r| r.truncated_share.map(|s| s * 100.0)),
            ),
            engine: Columns {
                family: cr.config.family.clone(),
                interval: cr.config.interval,
                reference: cr.config.reference.clone(),
                metric,
                tie: est.is_some_and(|e| e.lo <= 0.0 && 0.0 <= e.hi),
                pair_cycles: pair,
                pair_delta_cycles: pair.zip(ref_pair).map(|(a, b)| a - b),
                p99_ns: extra(cr, "p99_ns"),
                published_pct: published_for(&w.workload, &cr.config),
            },
        });
    }
    out
}

fn recommend(
    rows: &[Row],
    unwinders: &[String],
    min_cov: f64,
    max_ovh: Option<f64>,
) -> Vec<Recommendation> {
    let mut out = Vec::new();
    for u in unwinders {
        let mut sampled: Vec<&Row> = rows
            .iter()
            .filter(|r| r.unwinder.as_deref() == Some(u.as_str()) && r.engine.interval.is_some())
            .collect();
        sampled.sort_by_key(|r| r.engine.interval);
        let best = sampled
            .iter()
            .rev()
            .find(|r| r.coverage_pct.is_some_and(|c| c >= min_cov));
        let under = max_ovh.and_then(|m| {
            sampled
                .iter()
                .find(|r| r.overhead_pct.is_some_and(|o| o <= m))
        });
        let mut text = match best {
            Some(r) => format!(
                "{u}: use {} — the largest interval whose coverage ({:.1}%) meets {min_cov}%; overhead {}",
                format_size(r.engine.interval.unwrap_or(0)),
                r.coverage_pct.unwrap_or(f64::NAN),
                overhead_words(r)
            ),
            None if sampled.iter().all(|r| r.coverage_pct.is_none()) => {
                format!("{u}: no recommendation — coverage was not measured (no exact run)")
            }
            None => format!("{u}: no interval reached {min_cov}% coverage; use a smaller interval than those measured"),
        };
        if let Some(m) = max_ovh {
            match under {
                Some(r) => text.push_str(&format!(
                    "; under {m}% overhead the finest interval is {} ({}, coverage {})",
                    format_size(r.engine.interval.unwrap_or(0)),
                    overhead_words(r),
                    cell(r.coverage_pct, true, |c| format!("{c:.1}%"))
                )),
                None => text.push_str(&format!("; no interval stays under {m}% overhead")),
            }
        }
        out.push(Recommendation {
            unwinder: u.clone(),
            interval: best.and_then(|r| r.engine.interval),
            overhead_pct: best.and_then(|r| r.overhead_pct),
            coverage_pct: best.and_then(|r| r.coverage_pct),
            under_max_overhead: under.and_then(|r| r.engine.interval),
            under_max_overhead_pct: under.and_then(|r| r.overhead_pct),
            under_max_overhead_coverage: under.and_then(|r| r.coverage_pct),
            text,
        });
    }
    out
}

/// A percentage with its sign; `~` marks a tie with the reference.
fn fmt_pct(p: Option<f64>, tie: bool) -> String {
    match p {
        Some(p) if p.is_finite() => format!("{p:+.1}%{}", if tie { " ~" } else { "" }),
        Some(_) => NOT_MEASURED.into(),
        None => NOT_APPLICABLE.into(),
    }
}

/// A row's overhead in a sentence: the tie said in words (a lone `~` would wrap onto a line of
/// its own).
fn overhead_words(r: &Row) -> String {
    let tie = if r.engine.tie {
        " (within the noise)"
    } else {
        ""
    };
    format!("{}{tie}", fmt_pct(r.overhead_pct, false))
}

/// A cell of an optional value: `-` where it does not apply to the row, `n/a` where it could have
/// been measured but was not.
fn cell(x: Option<f64>, applies: bool, f: impl Fn(f64) -> String) -> String {
    match x.filter(|v| v.is_finite()) {
        Some(v) => f(v),
        None if applies => NOT_MEASURED.into(),
        None => NOT_APPLICABLE.into(),
    }
}

fn is_synthetic(w: &str) -> bool {
    w.starts_with("synthetic")
}

/// The configurations of a workload: cost first, then its own figures, then quality.
fn table(w: &WorkloadReport) -> Table {
    let synth = is_synthetic(&w.workload);
    let pipe = w.workload == "pipeline";
    let mut t =
        Table::new(&["configuration"]).topic("cost", &["median", "min–max", "overhead", "95% CI"]);
    if synth {
        t = t.topic("cycles per pair", &["cyc/pair", "Δ cyc/pair"]);
    }
    if pipe {
        t = t.topic("latency", &["p99 ns"]);
    }
    t = t.topic(
        "quality",
        &["coverage", "total err", "top err", "samples", "trunc."],
    );
    if synth || pipe {
        t = t.topic("published", &["published"]);
    }
    for r in &w.rows {
        let memlens = r.unwinder.is_some();
        let compared = r.engine.reference.is_some();
        let mut c = vec![
            r.config.clone(),
            doc::num(r.engine.metric.median),
            format!(
                "{}–{}",
                doc::num(r.engine.metric.min),
                doc::num(r.engine.metric.max)
            ),
            fmt_pct(r.overhead_pct, r.engine.tie),
            match (r.ci_low_pct, r.ci_high_pct) {
                (Some(l), Some(h)) => format!("[{l:+.1}, {h:+.1}]"),
                _ => fmt_pct(r.overhead_pct, false),
            },
        ];
        if synth {
            c.push(cell(r.engine.pair_cycles, true, doc::num));
            c.push(cell(r.engine.pair_delta_cycles, compared, |d| {
                format!("{d:+.1}")
            }));
        }
        if pipe {
            c.push(cell(r.engine.p99_ns, true, doc::num));
        }
        c.push(cell(r.coverage_pct, memlens, |v| format!("{v:.1}%")));
        c.push(cell(r.total_error_pct, memlens, |v| format!("{v:+.1}%")));
        c.push(cell(r.top_error_pct, memlens, |v| format!("{v:.1}%")));
        c.push(cell(r.samples.map(|v| v as f64), memlens, |v| {
            format!("{v:.0}")
        }));
        c.push(cell(r.truncated_pct, memlens, |v| format!("{v:.1}%")));
        if synth || pipe {
            c.push(cell(r.engine.published_pct, false, |v| format!("+{v:.0}%")));
        }
        t.push(c);
    }
    t
}

/// Overhead at each interval: synthetic vs pipeline vs published, for one unwinder.
fn comparison(reports: &[WorkloadReport], unwinder: &str) -> Option<Table> {
    let synth = reports.iter().rfind(|w| is_synthetic(&w.workload))?;
    let pipe = reports.iter().find(|w| w.workload == "pipeline")?;
    let get = |w: &WorkloadReport, r: u64| {
        w.rows
            .iter()
            .find(|x| x.unwinder.as_deref() == Some(unwinder) && x.engine.interval == Some(r))
            .map_or_else(
                || NOT_MEASURED.into(),
                |x| fmt_pct(x.overhead_pct, x.engine.tie),
            )
    };
    let mut intervals: Vec<u64> = synth
        .rows
        .iter()
        .filter_map(|r| r.engine.interval.filter(|_| r.unwinder.is_some()))
        .collect();
    intervals.sort_unstable();
    intervals.dedup();
    let published = |t: &[(u64, f64)], r: u64| {
        let p = t.iter().find(|x| x.0 == r).map(|x| x.1);
        cell(p, false, |v| format!("+{v:.0}%"))
    };
    let mut t = Table::new(&["interval"])
        .topic("measured", &[&synth.workload, "pipeline"])
        .topic("published", &["published synthetic", "published trading"]);
    for &r in &intervals {
        t.push(vec![
            format_size(r),
            get(synth, r),
            get(pipe, r),
            published(&PUBLISHED_SYNTHETIC, r),
            published(&PUBLISHED_TRADING, r),
        ]);
    }
    Some(t)
}

/// The exact run's top stacks, innermost first, with short names and without the frames they
/// all share (the JSON has them whole).
fn truth_table(t: &TruthSummary) -> Table {
    let skip = t.common_frames();
    let mut tab = Table::new(&[]).topic("", &["share", "bytes", "stack"]);
    for s in &t.top {
        tab.push(vec![
            format!("{:.1}%", s.share_pct),
            format!("{:.0}", s.bytes),
            s.short(skip),
        ]);
    }
    tab
}

/// How to read a workload's rows; the same sentences on the terminal, in HTML and in the JSON.
fn notes(plan: &Plan, w: &WorkloadResults, rows: &[Row]) -> Vec<String> {
    let mut n = vec![format!(
        "overhead = median over {} interleaved repeats of each run's ratio to its reference's run \
         of the same repeat, with a bootstrap 95% interval; {NOT_MEASURED} = not measured, \
         {NOT_APPLICABLE} = does not apply",
        plan.repeats
    )];
    if let Some(q) = &w.quality_note {
        n.push(q.clone());
    }
    let ties = rows
        .iter()
        .filter(|r| r.engine.tie && r.engine.reference.is_some())
        .count();
    n.push(format!(
        "top err = largest error of the estimate among the exact run's top stacks (≤ {}, each ≥ {:.0}% of the bytes); total err = error of the estimated total",
        crate::quality::TOP,
        crate::quality::MIN_SHARE * 100.0
    ));
    if ties > 0 {
        n.push(format!("~ marks {ties} configuration(s) whose 95% interval contains 0: the difference from the reference is within the noise"));
    }
    if is_synthetic(&w.workload) {
        // The exact-mode speed figure: memlens exact vs heaptrack on the same loop.
        let ht = rows.iter().find(|r| r.config == "heaptrack");
        for ex in rows.iter().filter(|r| r.config.ends_with(" exact")) {
            if let (Some(h), Some(e)) =
                (ht.and_then(|h| h.engine.pair_cycles), ex.engine.pair_cycles)
            {
                let (ratio, word) = if h >= e {
                    (h / e, "faster")
                } else {
                    (e / h, "slower")
                };
                n.push(format!(
                    "{}: {e:.0} cycles/pair vs heaptrack {h:.0} cycles/pair — {ratio:.1}× {word} than heaptrack",
                    ex.config
                ));
            }
        }
    }
    if w.workload == "pipeline" {
        let sums: Vec<f64> = w
            .configs
            .iter()
            .flat_map(|c| {
                c.runs
                    .iter()
                    .filter_map(|r| r.measure.extra.get("checksum").copied())
            })
            .collect();
        if sums.windows(2).all(|p| p[0] == p[1]) && !sums.is_empty() {
            n.push("every run produced the same orders (checksum equal): all configurations did the same work".into());
        } else if !sums.is_empty() {
            n.push("WARNING: the order checksums differ between runs: the pipeline was not deterministic".into());
        }
    }
    if rows.iter().any(|r| r.engine.published_pct.is_some()) {
        n.push(format!("published column = {PUBLISHED_LABEL}"));
    }
    n
}

fn plots(w: &WorkloadReport) -> Result<Vec<(String, String)>> {
    let mut families: Vec<String> = Vec::new();
    for r in &w.rows {
        if r.engine.interval.is_some() && !families.contains(&r.engine.family) {
            families.push(r.engine.family.clone());
        }
    }
    let series_of = |f: &str, y: fn(&Row) -> Option<f64>| plot::Series {
        name: f.to_string(),
        points: w
            .rows
            .iter()
            .filter(|r| r.engine.family == f)
            .filter_map(|r| Some((r.engine.interval? as f64 / 1024.0, y(r)?)))
            .collect(),
        dashed: false,
    };
    let mut ovh: Vec<plot::Series> = families
        .iter()
        .map(|f| series_of(f, |r| r.overhead_pct))
        .collect();
    let published = if is_synthetic(&w.workload) {
        Some((
            "published malloc-test (jemalloc, libgcc)",
            &PUBLISHED_SYNTHETIC,
        ))
    } else if w.workload == "pipeline" {
        Some((
            "published trading app (jemalloc, libgcc)",
            &PUBLISHED_TRADING,
        ))
    } else {
        None
    };
    if let Some((name, t)) = published {
        ovh.push(plot::Series {
            name: name.into(),
            points: t.iter().map(|(r, p)| (*r as f64 / 1024.0, *p)).collect(),
            dashed: true,
        });
    }
    let overhead = plot::line_chart(&plot::LineChart {
        title: format!("{}: overhead vs sampling interval", w.workload),
        x_label: "interval (KiB)".into(),
        y_label: "overhead of the median (%)".into(),
        log_x: true,
        log_y: false,
        series: ovh,
        markers: vec![],
    })?;
    let cov: Vec<plot::Series> = families
        .iter()
        .filter(|f| f.starts_with("memlens"))
        .map(|f| series_of(f, |r| r.coverage_pct))
        .filter(|s| !s.points.is_empty())
        .collect();
    let mut out = vec![(format!("{}-overhead.svg", w.workload), overhead)];
    if !cov.is_empty() {
        let coverage = plot::line_chart(&plot::LineChart {
            title: format!("{}: coverage of allocated bytes vs interval", w.workload),
            x_label: "interval (KiB)".into(),
            y_label: "coverage (%)".into(),
            log_x: true,
            log_y: false,
            series: cov,
            markers: vec![],
        })?;
        out.push((format!("{}-coverage.svg", w.workload), coverage));
    }
    Ok(out)
}

/// Summarise every workload's runs: rows, recommendations and notes.
pub fn reports(plan: &Plan, results: &[WorkloadResults]) -> Vec<WorkloadReport> {
    results
        .iter()
        .map(|w| {
            let rows = rows(w);
            WorkloadReport {
                workload: w.workload.clone(),
                description: w.description.clone(),
                unit: w.unit.clone(),
                recommendations: recommend(
                    &rows,
                    &plan.unwinders,
                    plan.min_coverage,
                    plan.max_overhead,
                ),
                notes: notes(plan, w, &rows),
                rows,
                results: w.clone(),
            }
        })
        .collect()
}

/// Baselines asked for but not installed here, with the package that provides each.
fn missing_baselines(plan: &Plan) -> Vec<String> {
    plan.baselines
        .iter()
        .filter(|b| b.path.is_none())
        .map(|b| format!("{} (not installed; Debian package {})", b.name(), b.package))
        .collect()
}

/// The study as one document: the recommendations as its verdict, a section per workload (table,
/// notes, the exact run's top stacks, plots), the comparison with the published figures.
/// `svgs` holds each workload's plots, in the order of `reports`.
pub fn document(plan: &Plan, reports: &[WorkloadReport], svgs: Vec<Vec<String>>) -> Document {
    let mut d = Document::new("memlens study: what heap profiling costs (unpaired)");
    d.verdict.push(format!(
        "UNPAIRED: separate processes, {} interleaved repeats per configuration; a paired study \
         (the default, without --unpaired) resolves smaller differences.",
        plan.repeats
    ));
    for w in reports {
        d.verdict.extend(
            w.recommendations
                .iter()
                .map(|r| format!("{} — {}", w.workload, r.text)),
        );
    }
    for (w, plots) in reports
        .iter()
        .zip(svgs.into_iter().chain(std::iter::repeat(vec![])))
    {
        let mut s = Section::new(format!("{} ({})", w.workload, w.unit))
            .note(w.description.clone())
            .table(table(w));
        for n in &w.notes {
            s = s.note(n.clone());
        }
        for t in &w.results.truth {
            s = s
                .note(format!(
                    "Top stacks of the exact run ({}), innermost first:",
                    t.unwinder
                ))
                .table(truth_table(t));
        }
        for svg in plots {
            s = s.plot(svg);
        }
        d.sections.push(s);
    }
    for u in &plan.unwinders {
        if let Some(t) = comparison(reports, u) {
            d.sections.push(
                Section::new(format!(
                    "Overhead by interval ({u}): synthetic vs realistic workload, published beside"
                ))
                .table(t)
                .note(PUBLISHED_LABEL),
            );
        }
    }
    let missing = missing_baselines(plan);
    if !missing.is_empty() {
        let mut s = Section::new("Baselines left out");
        for m in missing {
            s = s.note(m);
        }
        d.sections.push(s);
    }
    d
}

/// One CSV line per configuration: the numbers of a [`Row`], flat; an empty cell is not measured
/// or does not apply.
#[derive(Serialize)]
struct CsvRow<'a> {
    workload: &'a str,
    configuration: &'a str,
    family: &'a str,
    interval: Option<u64>,
    unwinder: Option<&'a str>,
    unit: &'a str,
    median: f64,
    min: f64,
    max: f64,
    overhead_pct: Option<f64>,
    ci_low_pct: Option<f64>,
    ci_high_pct: Option<f64>,
    tie: bool,
    pair_cycles: Option<f64>,
    pair_delta_cycles: Option<f64>,
    p99_ns: Option<f64>,
    coverage_pct: Option<f64>,
    total_error_pct: Option<f64>,
    top_error_pct: Option<f64>,
    samples: Option<u64>,
    truncated_pct: Option<f64>,
    published_pct: Option<f64>,
}

fn csv_rows(reports: &[WorkloadReport]) -> Vec<CsvRow<'_>> {
    let finite = |x: Option<f64>| x.filter(|v| v.is_finite());
    reports
        .iter()
        .flat_map(|w| w.rows.iter().map(move |r| (w, r)))
        .map(|(w, r)| CsvRow {
            workload: &w.workload,
            configuration: &r.config,
            family: &r.engine.family,
            interval: r.engine.interval,
            unwinder: r.unwinder.as_deref(),
            unit: &w.unit,
            median: r.engine.metric.median,
            min: r.engine.metric.min,
            max: r.engine.metric.max,
            overhead_pct: finite(r.overhead_pct),
            ci_low_pct: finite(r.ci_low_pct),
            ci_high_pct: finite(r.ci_high_pct),
            tie: r.engine.tie,
            pair_cycles: finite(r.engine.pair_cycles),
            pair_delta_cycles: finite(r.engine.pair_delta_cycles),
            p99_ns: finite(r.engine.p99_ns),
            coverage_pct: finite(r.coverage_pct),
            total_error_pct: finite(r.total_error_pct),
            top_error_pct: finite(r.top_error_pct),
            samples: r.samples,
            truncated_pct: finite(r.truncated_pct),
            published_pct: r.engine.published_pct,
        })
        .collect()
}

#[derive(Serialize)]
struct JsonOut<'a> {
    published: Published,
    missing_baselines: Vec<String>,
    intervals: &'a [u64],
    unwinders: &'a [String],
    repeats: u32,
    min_coverage_pct: f64,
    max_overhead_pct: Option<f64>,
    workloads: &'a [WorkloadReport],
}

#[derive(Serialize)]
struct Published {
    label: &'static str,
    synthetic_overhead_pct: Vec<(u64, f64)>,
    trading_overhead_pct: Vec<(u64, f64)>,
}

/// Print the document and write every file asked for.
pub fn emit(plan: &Plan, results: &[WorkloadResults], args: &StudyArgs) -> Result<()> {
    let reports = reports(plan, results);
    let mut svgs = Vec::with_capacity(reports.len());
    for w in &reports {
        let named = plots(w)?;
        if let Some(dir) = &args.plots {
            std::fs::create_dir_all(dir)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
            for (name, svg) in &named {
                output::write_text(&dir.join(name), svg)?;
            }
        }
        svgs.push(named.into_iter().map(|(_, svg)| svg).collect());
    }
    let d = document(plan, &reports, svgs);
    d.print();
    if let Some(p) = &args.out.json {
        let j = JsonOut {
            published: Published {
                label: PUBLISHED_LABEL,
                synthetic_overhead_pct: PUBLISHED_SYNTHETIC.to_vec(),
                trading_overhead_pct: PUBLISHED_TRADING.to_vec(),
            },
            missing_baselines: missing_baselines(plan),
            intervals: &plan.intervals,
            unwinders: &plan.unwinders,
            repeats: plan.repeats,
            min_coverage_pct: plan.min_coverage,
            max_overhead_pct: plan.max_overhead,
            workloads: &reports,
        };
        output::write_json(p, &j)?;
    }
    if let Some(p) = &args.out.csv {
        output::write_csv_rows(p, &csv_rows(&reports))?;
    }
    if let Some(p) = &args.out.html {
        output::write_text(p, &d.to_html())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quality::{Quality, TopStack};
    use crate::unpaired::configs::all;
    use crate::unpaired::runner::Run;
    use crate::unpaired::workload::{Measure, Workload};

    fn plan() -> Plan {
        Plan {
            workloads: vec![Workload::Pipeline {
                quotes: 1,
                instruments: 1,
                seed: 1,
            }],
            intervals: vec![64 << 10, 2 << 20],
            unwinders: vec!["fp".into()],
            baselines: vec![],
            repeats: 2,
            exact_repeats: 1,
            exact: true,
            min_coverage: 90.0,
            max_overhead: None,
        }
    }

    /// Pipeline results: `off` at 100 ns, every profiled configuration at 110 ns, the sampled
    /// ones covering 95% (64K) and 50% (2M) of the bytes; a truth of long C++ stacks.
    fn results(p: &Plan) -> WorkloadResults {
        let cfgs = all(&p.intervals, &p.unwinders, &p.baselines, p.exact);
        let configs = cfgs
            .into_iter()
            .map(|config| {
                let (ns, cov) = match config.interval {
                    None if config.name == "off" => (100.0, None),
                    None => (110.0, None),
                    Some(i) => (110.0, Some(if i == 64 << 10 { 95.0 } else { 50.0 })),
                };
                let runs = (0..2)
                    .map(|repeat| Run {
                        repeat,
                        measure: Measure {
                            primary: ns + repeat as f64,
                            extra: [("p99_ns".to_string(), 4.0 * ns)].into(),
                        },
                        wall_s: 1.0,
                        samples: cov.map(|_| 10),
                        truncated_share: cov.map(|_| 0.0),
                        quality: cov.map(|c| Quality {
                            coverage_pct: c,
                            total_error_pct: -1.0,
                            top_errors_pct: vec![1.0],
                            top_max_abs_error_pct: 1.0,
                            stacks: 3,
                        }),
                    })
                    .collect();
                ConfigRuns { config, runs }
            })
            .collect();
        let frame =
            "std::vector<std::pair<int, std::string>>::emplace_back(int const&, std::string&&)";
        let stack = |site: &str| {
            let mut f = vec!["malloc", "operator new(unsigned long)", site];
            f.extend(std::iter::repeat_n(frame, 6));
            f.join(" ← ")
        };
        WorkloadResults {
            workload: "pipeline".into(),
            description: "a pipeline ".repeat(20),
            unit: "ns".into(),
            configs,
            truth: vec![TruthSummary {
                unwinder: "fp".into(),
                total_bytes: 100.0,
                stacks: 2,
                top: [
                    "Book::apply(Quote const&)",
                    "Strategy::decide(Signal const&)",
                ]
                .iter()
                .map(|site| TopStack {
                    stack: stack(site),
                    bytes: 50.0,
                    share_pct: 50.0,
                })
                .collect(),
            }],
            quality_note: None,
        }
    }

    /// The unpaired rows' JSON: the contract's fields (null where the unpaired study does not
    /// measure them) and this engine's columns, nothing else; samples a whole count.
    #[test]
    fn rows_keep_the_json_contract() {
        let p = plan();
        let r = reports(&p, &[results(&p)]);
        let own = [
            "family",
            "interval",
            "reference",
            "metric",
            "tie",
            "pair_cycles",
            "pair_delta_cycles",
            "p99_ns",
            "published_pct",
        ];
        for row in &r[0].rows {
            let v = serde_json::to_value(row).unwrap();
            let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            keys.sort_unstable();
            let mut want: Vec<&str> = crate::row::CONTRACT.iter().chain(&own).copied().collect();
            want.sort_unstable();
            assert_eq!(keys, want, "{v}");
            assert!(v["direct_cost_pct"].is_null() && v["indirect_cost_pct"].is_null());
            let back: Row = serde_json::from_value(v).unwrap();
            assert_eq!(&back, row);
        }
        let sampled = r[0].rows.iter().find(|x| x.config == "memlens fp 64K");
        let v = serde_json::to_value(sampled.unwrap()).unwrap();
        assert_eq!(v["samples"], serde_json::Value::from(10u64), "{v}");
    }

    #[test]
    fn the_document_fits_the_width_and_opens_with_the_recommendation() {
        let p = plan();
        let r = reports(&p, &[results(&p)]);
        let row = |c: &str| r[0].rows.iter().find(|x| x.config == c).unwrap();
        assert!(!row("off").paired && row("off").overhead_pct.is_none());
        assert!((row("memlens fp 2M").overhead_pct.unwrap() - 9.95).abs() < 0.1);
        assert_eq!(r[0].recommendations[0].interval, Some(64 << 10));
        let d = document(&p, &r, vec![vec!["<svg></svg>".into()]]);
        for w in [80, 100, 120] {
            let text = d.to_text(w);
            assert!(doc::text_width(&text) <= w, "width {w}:\n{text}");
            assert!(text.contains("pipeline — fp: use 64K"), "{text}");
        }
        // the stacks skip the allocator frames they share, and read short
        let text = d.to_text(100);
        assert!(
            text.contains("… ← Book::apply ← std::vector::emplace_back"),
            "{text}"
        );
        let cells = text.lines().filter(|l| l.starts_with('│'));
        assert!(
            cells.clone().any(|l| l.contains(" - ")) && !cells.clone().any(|l| l.contains('—')),
            "one mark per meaning: {text}"
        );
        let html = d.to_html();
        let verdict = html.find("use 64K").unwrap();
        assert!(verdict < html.find("<table").unwrap(), "verdict first");
        assert!(html.contains("<svg></svg>"));
        let csv = csv_rows(&r);
        assert_eq!(csv.len(), r[0].rows.len());
        assert_eq!(csv[0].configuration, "off");
    }
}
