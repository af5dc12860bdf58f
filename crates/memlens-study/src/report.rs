//! Summaries of the runs, the recommendation, and every output: tables on stdout, JSON, CSV, SVG
//! plots and the HTML page. Published figures (docs/design.md, published studies) are printed beside ours,
//! always labelled as published.
use crate::configs::{Config, Setup};
use crate::runner::{ConfigRuns, WorkloadResults};
use crate::{Plan, StudyArgs};
use anyhow::Result;
use memlens_measure::stats::{overhead_pct, Summary};
use memlens_measure::units::format_size;
use memlens_measure::{html, output, plot};
use serde::Serialize;

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

/// One configuration, summarised over its repeats. Carries the fields of the paired study's JSON
/// contract (`workload`, `config`, `interval_bytes`, `unwinder`, `paired`, `overhead_pct`,
/// `ci_low_pct`, `ci_high_pct`, `coverage_pct`) so scripts read both alike.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub workload: String,
    pub config: String,
    pub family: String,
    pub interval: Option<u64>,
    /// Sampling interval, bytes (null for off and the baselines' references).
    pub interval_bytes: Option<u64>,
    pub unwinder: Option<String>,
    /// Always false: separate processes, not blocks of one process.
    pub paired: bool,
    pub reference: Option<String>,
    pub metric: Summary,
    /// Median over repeats of (this run / the reference's run of the same repeat) − 1, percent
    /// (null for a reference).
    pub overhead_pct: Option<f64>,
    /// Bootstrap 95% interval of that median, low end.
    pub ci_low_pct: Option<f64>,
    /// Bootstrap 95% interval of that median, high end.
    pub ci_high_pct: Option<f64>,
    /// The interval contains 0: the difference is within the noise.
    pub tie: bool,
    /// synthetic: cycles per malloc/free pair (median) and its difference over the reference's median.
    pub pair_cycles: Option<f64>,
    pub pair_delta_cycles: Option<f64>,
    /// pipeline: p99 latency (median over repeats), ns.
    pub p99_ns: Option<f64>,
    pub coverage_pct: Option<f64>,
    pub total_error_pct: Option<f64>,
    pub top_error_pct: Option<f64>,
    pub samples: Option<f64>,
    pub truncated_pct: Option<f64>,
    pub published_pct: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Recommendation {
    pub unwinder: String,
    /// Largest interval with coverage ≥ --min-coverage.
    pub interval: Option<u64>,
    pub overhead_pct: Option<f64>,
    pub coverage_pct: Option<f64>,
    /// Smallest interval whose overhead ≤ --max-overhead (if given).
    pub under_max_overhead: Option<u64>,
    pub under_max_overhead_pct: Option<f64>,
    pub under_max_overhead_coverage: Option<f64>,
    pub text: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct WorkloadReport {
    pub workload: String,
    pub description: String,
    pub unit: String,
    pub rows: Vec<Row>,
    pub recommendations: Vec<Recommendation>,
    pub notes: Vec<String>,
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
            crate::stats::estimate(&ratios)
        });
        let pair = extra(cr, "cycles_per_pair");
        let ref_pair = reference.and_then(|r| extra(r, "cycles_per_pair"));
        let q = |f: fn(&crate::quality::Quality) -> f64| {
            median_of(cr.runs.iter().filter_map(|r| r.quality.as_ref().map(f)))
        };
        out.push(Row {
            workload: w.workload.clone(),
            config: cr.config.name.clone(),
            family: cr.config.family.clone(),
            interval: cr.config.interval,
            interval_bytes: cr.config.interval,
            paired: false,
            unwinder: match &cr.config.setup {
                Setup::Sampled { unwinder, .. } | Setup::Exact { unwinder } => {
                    Some(unwinder.clone())
                }
                _ => None,
            },
            reference: cr.config.reference.clone(),
            overhead_pct: est.map(|e| e.pct),
            ci_low_pct: est.map(|e| e.lo),
            ci_high_pct: est.map(|e| e.hi),
            tie: est.is_some_and(|e| e.lo <= 0.0 && 0.0 <= e.hi),
            metric,
            pair_cycles: pair,
            pair_delta_cycles: pair.zip(ref_pair).map(|(a, b)| a - b),
            p99_ns: extra(cr, "p99_ns"),
            coverage_pct: q(|q| q.coverage_pct),
            total_error_pct: q(|q| q.total_error_pct),
            top_error_pct: q(|q| q.top_max_abs_error_pct),
            samples: median_of(cr.runs.iter().filter_map(|r| r.samples.map(|s| s as f64))),
            truncated_pct: median_of(
                cr.runs
                    .iter()
                    .filter_map(|r| r.truncated_share.map(|s| s * 100.0)),
            ),
            published_pct: published_for(&w.workload, &cr.config),
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
            .filter(|r| r.unwinder.as_deref() == Some(u.as_str()) && r.interval.is_some())
            .collect();
        sampled.sort_by_key(|r| r.interval);
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
                format_size(r.interval.unwrap_or(0)),
                r.coverage_pct.unwrap_or(f64::NAN),
                fmt_pct(r.overhead_pct, r.tie)
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
                    format_size(r.interval.unwrap_or(0)),
                    fmt_pct(r.overhead_pct, r.tie),
                    r.coverage_pct
                        .map(|c| format!("{c:.1}%"))
                        .unwrap_or_else(|| "n/a".into())
                )),
                None => text.push_str(&format!("; no interval stays under {m}% overhead")),
            }
        }
        out.push(Recommendation {
            unwinder: u.clone(),
            interval: best.and_then(|r| r.interval),
            overhead_pct: best.and_then(|r| r.overhead_pct),
            coverage_pct: best.and_then(|r| r.coverage_pct),
            under_max_overhead: under.and_then(|r| r.interval),
            under_max_overhead_pct: under.and_then(|r| r.overhead_pct),
            under_max_overhead_coverage: under.and_then(|r| r.coverage_pct),
            text,
        });
    }
    out
}

fn fmt_pct(p: Option<f64>, tie: bool) -> String {
    match p {
        Some(p) if p.is_finite() => format!("{p:+.1}%{}", if tie { " ~" } else { "" }),
        _ => "—".into(),
    }
}

fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        "—".into()
    } else if x.abs() >= 1000.0 {
        format!("{x:.0}")
    } else if x.abs() >= 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

fn opt(x: Option<f64>, f: impl Fn(f64) -> String) -> String {
    x.filter(|v| v.is_finite())
        .map(f)
        .unwrap_or_else(|| "—".into())
}

fn is_synthetic(w: &str) -> bool {
    w.starts_with("synthetic")
}

/// Table header and rows for the terminal, the CSV-like HTML table.
fn table(w: &WorkloadReport) -> (Vec<String>, Vec<Vec<String>>) {
    let synth = is_synthetic(&w.workload);
    let pipe = w.workload == "pipeline";
    let mut h: Vec<String> = vec![
        "configuration".into(),
        format!("{} median", w.unit),
        "min–max".into(),
        "overhead".into(),
        "95% CI".into(),
    ];
    if synth {
        h.extend(["cyc/pair".into(), "Δ cyc/pair".into()]);
    }
    if pipe {
        h.push("p99 ns".into());
    }
    h.extend([
        "coverage".into(),
        "total err".into(),
        "top err".into(),
        "samples".into(),
        "trunc.".into(),
    ]);
    if synth || pipe {
        h.push("published".into());
    }
    let rows = w
        .rows
        .iter()
        .map(|r| {
            let mut c = vec![
                r.config.clone(),
                fmt_num(r.metric.median),
                format!("{}–{}", fmt_num(r.metric.min), fmt_num(r.metric.max)),
                fmt_pct(r.overhead_pct, r.tie),
                match (r.ci_low_pct, r.ci_high_pct) {
                    (Some(l), Some(h)) => format!("[{l:+.1}, {h:+.1}]"),
                    _ => "—".into(),
                },
            ];
            if synth {
                c.push(opt(r.pair_cycles, fmt_num));
                c.push(opt(r.pair_delta_cycles, |d| format!("{d:+.1}")));
            }
            if pipe {
                c.push(opt(r.p99_ns, fmt_num));
            }
            c.push(opt(r.coverage_pct, |v| format!("{v:.1}%")));
            c.push(opt(r.total_error_pct, |v| format!("{v:+.1}%")));
            c.push(opt(r.top_error_pct, |v| format!("{v:.1}%")));
            c.push(opt(r.samples, |v| format!("{v:.0}")));
            c.push(opt(r.truncated_pct, |v| format!("{v:.1}%")));
            if synth || pipe {
                c.push(opt(r.published_pct, |v| format!("+{v:.0}%")));
            }
            c
        })
        .collect();
    (h, rows)
}

/// Overhead at each interval: synthetic vs pipeline vs published, for one unwinder.
fn comparison(
    reports: &[WorkloadReport],
    unwinder: &str,
) -> Option<(Vec<String>, Vec<Vec<String>>)> {
    let synth = reports.iter().rfind(|w| is_synthetic(&w.workload))?;
    let pipe = reports.iter().find(|w| w.workload == "pipeline")?;
    let get = |w: &WorkloadReport, r: u64| {
        w.rows
            .iter()
            .find(|x| x.unwinder.as_deref() == Some(unwinder) && x.interval == Some(r))
            .map(|x| fmt_pct(x.overhead_pct, x.tie))
    };
    let mut intervals: Vec<u64> = synth
        .rows
        .iter()
        .filter_map(|r| r.interval.filter(|_| r.unwinder.is_some()))
        .collect();
    intervals.sort_unstable();
    intervals.dedup();
    let pubf = |t: &[(u64, f64)], r: u64| {
        t.iter()
            .find(|x| x.0 == r)
            .map(|x| format!("+{:.0}%", x.1))
            .unwrap_or_else(|| "—".into())
    };
    let rows = intervals
        .iter()
        .map(|&r| {
            vec![
                format_size(r),
                get(synth, r).unwrap_or_else(|| "—".into()),
                get(pipe, r).unwrap_or_else(|| "—".into()),
                pubf(&PUBLISHED_SYNTHETIC, r),
                pubf(&PUBLISHED_TRADING, r),
            ]
        })
        .collect();
    let h = vec![
        "interval".into(),
        format!("{} ({unwinder})", synth.workload),
        format!("pipeline ({unwinder})"),
        "published synthetic".into(),
        "published trading".into(),
    ];
    Some((h, rows))
}

fn notes(w: &WorkloadResults, rows: &[Row]) -> Vec<String> {
    let mut n = Vec::new();
    if let Some(q) = &w.quality_note {
        n.push(q.clone());
    }
    let ties = rows
        .iter()
        .filter(|r| r.tie && r.reference.is_some())
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
        // The exact-mode speed figure of issue 2: memlens exact vs heaptrack on the same loop.
        let ht = rows.iter().find(|r| r.config == "heaptrack");
        for ex in rows.iter().filter(|r| r.config.ends_with(" exact")) {
            if let (Some(h), Some(e)) = (ht.and_then(|h| h.pair_cycles), ex.pair_cycles) {
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
    n
}

fn plots(w: &WorkloadReport) -> Result<Vec<(String, String)>> {
    let mut families: Vec<String> = Vec::new();
    for r in &w.rows {
        if r.interval.is_some() && !families.contains(&r.family) {
            families.push(r.family.clone());
        }
    }
    let series_of = |f: &str, y: fn(&Row) -> Option<f64>| plot::Series {
        name: f.to_string(),
        points: w
            .rows
            .iter()
            .filter(|r| r.family == f)
            .filter_map(|r| Some((r.interval? as f64 / 1024.0, y(r)?)))
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

/// Print the tables and write every file asked for.
pub fn emit(plan: &Plan, results: &[WorkloadResults], args: &StudyArgs) -> Result<()> {
    let reports: Vec<WorkloadReport> = results
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
                notes: notes(w, &rows),
                rows,
                results: w.clone(),
            }
        })
        .collect();
    let missing: Vec<String> = plan
        .baselines
        .iter()
        .filter(|b| b.path.is_none())
        .map(|b| format!("{} (not installed; Debian package {})", b.name(), b.package))
        .collect();
    let mut page = html::Report {
        title: "memlens study: what heap profiling costs".into(),
        sections: Vec::new(),
    };
    for w in &reports {
        let (h, rows) = table(w);
        println!("\n== {} — {}", w.workload, w.description);
        println!(
            "{}",
            output::table(&h.iter().map(String::as_str).collect::<Vec<_>>(), &rows)
        );
        for n in &w.notes {
            println!("  note: {n}");
        }
        for r in &w.recommendations {
            println!("  recommendation: {}", r.text);
        }
        if w.rows.iter().any(|r| r.published_pct.is_some()) {
            println!("  published column = {PUBLISHED_LABEL}");
        }
        let svgs = plots(w)?;
        if let Some(dir) = &args.plots {
            std::fs::create_dir_all(dir)
                .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
            for (name, svg) in &svgs {
                output::write_text(&dir.join(name), svg)?;
            }
        }
        let mut paragraphs = vec![w.description.clone(), format!("Unpaired (separate processes). Overhead is the median over {} interleaved repeats of each run's ratio to its reference's run of the same repeat, with a bootstrap 95% interval.", plan.repeats)];
        paragraphs.extend(w.notes.iter().cloned());
        paragraphs.extend(
            w.recommendations
                .iter()
                .map(|r| format!("Recommendation — {}", r.text)),
        );
        if w.rows.iter().any(|r| r.published_pct.is_some()) {
            paragraphs.push(format!("Column 'published' = {PUBLISHED_LABEL}."));
        }
        let mut tables = vec![(h, rows)];
        for t in &w.results.truth {
            let th = vec![
                format!("top stacks of the exact run ({})", t.unwinder),
                "bytes".into(),
                "share".into(),
            ];
            let tr = t
                .top
                .iter()
                .map(|s| {
                    vec![
                        s.stack.clone(),
                        format!("{:.0}", s.bytes),
                        format!("{:.1}%", s.share_pct),
                    ]
                })
                .collect();
            tables.push((th, tr));
        }
        page.sections.push(html::Section {
            heading: format!("{} ({})", w.workload, w.unit),
            paragraphs,
            tables,
            svgs: svgs.into_iter().map(|s| s.1).collect(),
        });
    }
    for u in &plan.unwinders {
        if let Some((h, rows)) = comparison(&reports, u) {
            println!("\n== overhead by interval: synthetic vs realistic workload ({u}), published figures beside");
            println!(
                "{}",
                output::table(&h.iter().map(String::as_str).collect::<Vec<_>>(), &rows)
            );
            page.sections.push(html::Section {
                heading: format!("Synthetic vs realistic workload ({u})"),
                paragraphs: vec![format!("Published figures: {PUBLISHED_LABEL}.")],
                tables: vec![(h, rows)],
                svgs: vec![],
            });
        }
    }
    for m in &missing {
        println!("  baseline left out: {m}");
    }
    if let Some(p) = &args.out.json {
        let j = JsonOut {
            published: Published {
                label: PUBLISHED_LABEL,
                synthetic_overhead_pct: PUBLISHED_SYNTHETIC.to_vec(),
                trading_overhead_pct: PUBLISHED_TRADING.to_vec(),
            },
            missing_baselines: missing.clone(),
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
        let h = [
            "workload",
            "configuration",
            "family",
            "interval",
            "unwinder",
            "unit",
            "median",
            "min",
            "max",
            "overhead_pct",
            "ci_low_pct",
            "ci_high_pct",
            "tie",
            "pair_cycles",
            "pair_delta_cycles",
            "p99_ns",
            "coverage_pct",
            "total_error_pct",
            "top_error_pct",
            "samples",
            "truncated_pct",
            "published_pct",
        ];
        let f = |x: Option<f64>| x.map(|v| format!("{v}")).unwrap_or_default();
        let mut rows = Vec::new();
        for w in &reports {
            for r in &w.rows {
                rows.push(vec![
                    w.workload.clone(),
                    r.config.clone(),
                    r.family.clone(),
                    r.interval.map(|i| i.to_string()).unwrap_or_default(),
                    r.unwinder.clone().unwrap_or_default(),
                    w.unit.clone(),
                    r.metric.median.to_string(),
                    r.metric.min.to_string(),
                    r.metric.max.to_string(),
                    f(r.overhead_pct),
                    f(r.ci_low_pct),
                    f(r.ci_high_pct),
                    r.tie.to_string(),
                    f(r.pair_cycles),
                    f(r.pair_delta_cycles),
                    f(r.p99_ns),
                    f(r.coverage_pct),
                    f(r.total_error_pct),
                    f(r.top_error_pct),
                    f(r.samples),
                    f(r.truncated_pct),
                    f(r.published_pct),
                ]);
            }
        }
        output::write_csv(p, &h, &rows)?;
    }
    if let Some(p) = &args.out.html {
        if !missing.is_empty() {
            page.sections.push(html::Section {
                heading: "Baselines left out".into(),
                paragraphs: missing.clone(),
                ..Default::default()
            });
        }
        output::write_text(p, &html::render(&page))?;
    }
    Ok(())
}
