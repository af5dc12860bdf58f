//! Tables, files and plots of a latency run: the latency table, the detected levels beside the
//! declared caches, counter metrics, the representativeness table next to the published study, and
//! the correlation of each metric with time.
use crate::chase::Order;
use crate::latency_model::{LatencyArgs, Point, Results};
use crate::levels::{self, Level};
use anyhow::Result;
use memlens_measure::stats::pearson;
use memlens_measure::sysinfo::{caches, tlbs, Cache, Tlb};
use memlens_measure::units::format_size;
use memlens_render::doc::{
    not_measured, num, Document, Section, Table, NOT_APPLICABLE, NOT_MEASURED,
};
use memlens_render::output::{write_csv, write_json, write_text};
use memlens_render::plot::{line_chart, LineChart, Series};
use serde::Serialize;

type MetricFn = fn(&Point) -> Result<f64, String>;

fn ratio(p: &Point, a: &str, b: &str) -> Result<f64, String> {
    let (x, y) = (p.counter(a)?, p.counter(b)?);
    if y == 0.0 {
        return Err(format!("{b} is 0"));
    }
    Ok(x / y)
}

/// The derived metrics, by name. SCPI needs both stall events (it is their sum per instruction);
/// the frontend and backend parts are shown on their own too, since VMs often expose only one.
pub const METRICS: [(&str, MetricFn); 10] = [
    ("core cycles/elem", |p| p.counter("cycles")),
    ("CPI", |p| ratio(p, "cycles", "instructions")),
    ("SCPI", |p| {
        Ok(ratio(p, "stalled-cycles-frontend", "instructions")?
            + ratio(p, "stalled-cycles-backend", "instructions")?)
    }),
    ("SCPI frontend", |p| {
        ratio(p, "stalled-cycles-frontend", "instructions")
    }),
    ("SCPI backend", |p| {
        ratio(p, "stalled-cycles-backend", "instructions")
    }),
    ("miss rate", |p| {
        ratio(p, "cache-misses", "cache-references")
    }),
    ("cache misses/elem", |p| p.counter("cache-misses")),
    ("bus cycles/elem", |p| p.counter("bus-cycles")),
    ("dTLB misses/elem", |p| p.counter("dTLB-load-misses")),
    ("task-clock ns/elem", |p| p.counter("task-clock")),
];

fn metric(name: &str) -> MetricFn {
    METRICS
        .iter()
        .find(|m| m.0 == name)
        .map(|m| m.1)
        .expect("known metric")
}

/// The published study (docs/published-studies.md, study 3): normalised to sequential/8 B = 1 on a Sandy Bridge Xeon.
const PUBLISHED: [(Order, u64, [f64; 5]); 5] = [
    (Order::Seq, 8, [1.0, 1.0, 1.0, 1.0, 1.0]),
    (Order::Seq, 64, [5.0, 6.25, 6.0, 12.0, 4.0]),
    (Order::Seq, 256, [28.0, 25.0, 27.0, 67.0, 23.0]),
    (Order::Page, 8, [84.0, 100.0, 92.0, 72.5, 71.0]),
    (Order::Random, 8, [46.0, 20.0, 18.0, 21.0, 42.0]),
];
const REPR_METRICS: [&str; 5] = ["time", "CPI", "SCPI", "miss rate", "bus cycles/elem"];

fn series_name(o: Order, e: u64) -> String {
    format!("{}/{e}B", o.name())
}

fn series(r: &Results) -> Vec<(Order, u64)> {
    let mut v = Vec::new();
    for &o in &r.config.orders {
        for &e in &r.config.sizes {
            v.push((o, e));
        }
    }
    v
}

fn find(r: &Results, o: Order, e: u64, ws: u64) -> Option<&Point> {
    r.points
        .iter()
        .find(|p| p.order == o && p.element_bytes == e && p.working_set == ws)
}

/// Relative spread above which a cell is flagged as noisy.
const NOISY: f64 = 0.10;

fn latency_table(r: &Results) -> Table {
    let ser = series(r);
    let mut t = Table::new(&["working set"]);
    for &(o, e) in &ser {
        t = t.topic(o.name(), &[&format!("{} ns (cyc)", series_name(o, e))]);
    }
    t.rows = r
        .config
        .working_sets
        .iter()
        .map(|&ws| {
            let mut row = vec![format_size(ws)];
            for &(o, e) in &ser {
                row.push(match find(r, o, e, ws) {
                    Some(p) => format!(
                        "{} ({}){}",
                        num(p.ns.median),
                        num(p.tsc_cycles.median),
                        if p.ns.rel_spread() > NOISY { "*" } else { "" }
                    ),
                    None => NOT_APPLICABLE.into(),
                });
            }
            row
        })
        .collect();
    t
}

/// The series levels are detected on: random order defeats the prefetchers, and 64 B elements put
/// every element on its own line.
fn level_series(r: &Results) -> Option<(Order, u64)> {
    let s = series(r);
    let pick = |o: Order| {
        let mut v: Vec<_> = s.iter().filter(|x| x.0 == o).collect();
        v.sort_by_key(|x| (x.1 != 64, std::cmp::Reverse(x.1)));
        v.first().map(|x| **x)
    };
    pick(Order::Random)
        .or_else(|| pick(Order::Page))
        .or_else(|| s.first().copied())
}

/// The page size the lists were backed with: 2 MiB when --hugepages got transparent huge pages for
/// most of the lists, else 4 KiB.
fn page_bytes(r: &Results) -> u64 {
    match r.huge_pages_check {
        Some((mapped, huge)) if r.config.hugepages && huge >= mapped / 2 => 2 << 20,
        _ => 4 << 10,
    }
}

fn detect_levels(r: &Results, cs: &[Cache], tlbs: &[Tlb]) -> Option<((Order, u64), Vec<Level>)> {
    let (o, e) = level_series(r)?;
    let pts: Vec<(u64, f64, f64)> = r
        .config
        .working_sets
        .iter()
        .filter_map(|&ws| find(r, o, e, ws).map(|p| (ws, p.ns.median, p.tsc_cycles.median)))
        .collect();
    Some(((o, e), levels::detect(&pts, cs, tlbs, page_bytes(r))))
}

fn levels_table(lv: &[Level]) -> Table {
    let mut t = Table::new(&["level", "working sets"])
        .topic("time", &["ns/elem", "TSC cyc/elem"])
        .topic("named", &["cache (sysfs), TLB reach (CPUID)"]);
    t.rows = lv
        .iter()
        .enumerate()
        .map(|(i, l)| {
            vec![
                format!("{}", i + 1),
                format!("{}–{}", format_size(l.from_ws), format_size(l.to_ws)),
                num(l.ns),
                num(l.cycles),
                l.fits_in.clone(),
            ]
        })
        .collect();
    t
}

const COUNTER_COLS: [&str; 9] = [
    "core cycles/elem",
    "CPI",
    "SCPI",
    "SCPI frontend",
    "SCPI backend",
    "miss rate",
    "bus cycles/elem",
    "dTLB misses/elem",
    "task-clock ns/elem",
];

/// The largest working set of the published study (2^28 bytes).
pub const STUDY_MAX_WS: u64 = 1 << 28;

/// The working set the counter and representativeness tables use: where the study stopped (256M),
/// or the largest measured below it — normalising at 1G instead doubles random/8 B's figure.
pub fn reference_ws(r: &Results) -> u64 {
    let ws = &r.config.working_sets;
    ws.iter()
        .rev()
        .find(|&&w| w <= STUDY_MAX_WS)
        .or(ws.first())
        .copied()
        .unwrap_or(0)
}

/// Metrics that are n/a on every point, with the reason (shown once under the table).
fn na_reasons(r: &Results, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .filter_map(|&m| {
            let f = metric(m);
            let errs: Vec<String> = r.points.iter().filter_map(|p| f(p).err()).collect();
            (errs.len() == r.points.len() && !r.points.is_empty())
                .then(|| format!("{m}: {}", not_measured(&errs[0])))
        })
        .collect()
}

/// The topic a counter column is shown with when the table is split.
fn counter_topic(m: &str) -> &'static str {
    match m {
        "core cycles/elem" | "CPI" | "task-clock ns/elem" => "time",
        "SCPI" | "SCPI frontend" | "SCPI backend" => "stalls",
        _ => "memory",
    }
}

fn counters_table(r: &Results) -> Table {
    let ws = reference_ws(r);
    let mut t = Table::new(&["order/element", "ns/elem"]);
    for m in COUNTER_COLS {
        t = t.topic(counter_topic(m), &[m]);
    }
    t = t.topic("memory", &["page faults"]);
    t.rows = series(r)
        .iter()
        .filter_map(|&(o, e)| find(r, o, e, ws))
        .map(|p| {
            let mut row = vec![series_name(p.order, p.element_bytes), num(p.ns.median)];
            row.extend(COUNTER_COLS.iter().map(|&m| {
                metric(m)(p)
                    .map(num)
                    .unwrap_or_else(|_| NOT_MEASURED.into())
            }));
            row.push(
                p.counter("page-faults")
                    .map(|f| num(f * p.loads_per_measurement as f64))
                    .unwrap_or_else(|_| NOT_MEASURED.into()),
            );
            row
        })
        .collect();
    t
}

#[derive(Debug, Serialize)]
struct ReprRow {
    order: Order,
    element_bytes: u64,
    /// Normalised to seq/8 B, in REPR_METRICS order; None = n/a.
    measured: Vec<Option<f64>>,
    published: Option<[f64; 5]>,
}

fn repr_value(p: &Point, m: &str) -> Option<f64> {
    if m == "time" {
        Some(p.ns.median)
    } else {
        metric(m)(p).ok()
    }
}

fn representativeness(r: &Results) -> Vec<ReprRow> {
    let ws = reference_ws(r);
    let Some(base) = find(r, Order::Seq, 8, ws) else {
        return Vec::new();
    };
    series(r)
        .iter()
        .filter_map(|&(o, e)| find(r, o, e, ws))
        .map(|p| ReprRow {
            order: p.order,
            element_bytes: p.element_bytes,
            measured: REPR_METRICS
                .iter()
                .map(|m| Some(repr_value(p, m)? / repr_value(base, m).filter(|&b| b != 0.0)?))
                .collect(),
            published: PUBLISHED
                .iter()
                .find(|x| x.0 == p.order && x.1 == p.element_bytes)
                .map(|x| x.2),
        })
        .collect()
}

fn repr_table(rows: &[ReprRow]) -> Table {
    let mut t = Table::new(&["order/element"]);
    for m in REPR_METRICS {
        t = t.topic(m, &[&format!("{m} here / study")]);
    }
    t.rows = rows
        .iter()
        .map(|r| {
            let mut row = vec![series_name(r.order, r.element_bytes)];
            for (i, m) in r.measured.iter().enumerate() {
                let here = m.map(num).unwrap_or_else(|| NOT_MEASURED.into());
                let study = r
                    .published
                    .map(|p| num(p[i]))
                    .unwrap_or_else(|| NOT_APPLICABLE.into());
                row.push(format!("{here} / {study}"));
            }
            row
        })
        .collect();
    t
}

#[derive(Debug, Serialize)]
struct Correlation {
    metric: String,
    /// Pearson r with ns/elem per order (None: n/a), then over all points.
    by_order: Vec<(Order, Option<f64>)>,
    all: Option<f64>,
}

/// The column correlated with nothing: task-clock is time itself, so its r with time says nothing.
const TIME_COL: &str = "task-clock ns/elem";

fn correlations(r: &Results) -> Vec<Correlation> {
    let r_of = |pts: &[&Point], m: &str| {
        let f = metric(m);
        let pairs: Vec<(f64, f64)> = pts
            .iter()
            .filter_map(|p| Some((f(p).ok()?, p.ns.median)))
            .collect();
        if pairs.len() < 3 || pairs.len() < pts.len() {
            return None;
        }
        let (x, y): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
        pearson(&x, &y)
    };
    COUNTER_COLS
        .iter()
        .filter(|&&m| m != TIME_COL)
        .map(|&m| {
            let by_order = r
                .config
                .orders
                .iter()
                .map(|&o| {
                    (
                        o,
                        r_of(
                            &r.points.iter().filter(|p| p.order == o).collect::<Vec<_>>(),
                            m,
                        ),
                    )
                })
                .collect();
            Correlation {
                metric: m.into(),
                by_order,
                all: r_of(&r.points.iter().collect::<Vec<_>>(), m),
            }
        })
        .collect()
}

fn corr_table(r: &Results, c: &[Correlation]) -> Table {
    let mut t = Table::new(&["metric"]);
    for o in &r.config.orders {
        t = t.topic(o.name(), &[&format!("r ({})", o.name())]);
    }
    t = t.topic("all", &["r (all runs)"]);
    let f = |x: Option<f64>| {
        x.map(|v| format!("{v:+.2}"))
            .unwrap_or_else(|| NOT_MEASURED.into())
    };
    t.rows = c
        .iter()
        .map(|c| {
            let mut row = vec![c.metric.clone()];
            row.extend(c.by_order.iter().map(|x| f(x.1)));
            row.push(f(c.all));
            row
        })
        .collect();
    t
}

fn chart(r: &Results, cs: &[Cache]) -> LineChart {
    LineChart {
        title: "Dependent-load latency by working set".into(),
        x_label: "working set (bytes)".into(),
        y_label: "ns per element".into(),
        log_x: true,
        log_y: true,
        series: series(r)
            .iter()
            .map(|&(o, e)| Series {
                name: series_name(o, e),
                points: r
                    .points
                    .iter()
                    .filter(|p| p.order == o && p.element_bytes == e)
                    .map(|p| (p.working_set as f64, p.ns.median))
                    .collect(),
                dashed: false,
            })
            .collect(),
        markers: cs
            .iter()
            .map(|c| {
                (
                    c.size_bytes as f64,
                    format!("L{} {}", c.level, format_size(c.size_bytes)),
                )
            })
            .collect(),
    }
}

fn csv_rows(r: &Results) -> (Vec<String>, Vec<Vec<String>>) {
    let names: Vec<String> = r
        .points
        .first()
        .map(|p| p.counters.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    let mut header: Vec<String> = [
        "order",
        "element_bytes",
        "working_set",
        "elements",
        "threads",
        "hugepages",
        "ns_median",
        "ns_min",
        "ns_max",
        "tsc_cycles_median",
        "tsc_cycles_min",
        "tsc_cycles_max",
    ]
    .map(String::from)
    .to_vec();
    header.extend(names.iter().map(|n| format!("{n}_per_elem")));
    let rows = r
        .points
        .iter()
        .map(|p| {
            let mut row = vec![
                p.order.name().to_string(),
                p.element_bytes.to_string(),
                p.working_set.to_string(),
                p.elements.to_string(),
                r.config.threads.to_string(),
                r.config.hugepages.to_string(),
                format!("{:.4}", p.ns.median),
                format!("{:.4}", p.ns.min),
                format!("{:.4}", p.ns.max),
                format!("{:.3}", p.tsc_cycles.median),
                format!("{:.3}", p.tsc_cycles.min),
                format!("{:.3}", p.tsc_cycles.max),
            ];
            // Empty cell = not measured (n/a); the JSON carries the reason.
            row.extend(
                names
                    .iter()
                    .map(|n| p.counter(n).map(|v| format!("{v:.6}")).unwrap_or_default()),
            );
            row
        })
        .collect();
    (header, rows)
}

/// The answer in sentences: the plateaus found, and per order which metrics track time (the
/// published finding: all of them for sequential and per-page order, only bus cycles for random).
fn verdict(
    r: &Results,
    levels: &Option<((Order, u64), Vec<Level>)>,
    corr: &[Correlation],
) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(((o, e), lv)) = levels {
        let steps: Vec<String> = lv
            .iter()
            .map(|l| {
                format!(
                    "{} ns up to {} ({})",
                    num(l.ns),
                    format_size(l.to_ws),
                    l.fits_in
                )
            })
            .collect();
        v.push(format!(
            "{} plateau(s) of the {} series: {}.",
            lv.len(),
            series_name(*o, *e),
            steps.join("; ")
        ));
    }
    let has_counters = !r.points.first().is_none_or(|p| p.counters.is_empty());
    if !has_counters {
        v.push(format!(
            "counter metrics: {}",
            not_measured("--counters off")
        ));
        return v;
    }
    if corr
        .iter()
        .all(|c| c.by_order.iter().all(|x| x.1.is_none()))
    {
        v.push(format!(
            "which metric tracks time: {}",
            not_measured(
                "no metric was counted on every point; the reasons are under the counters table"
            )
        ));
    }
    for (i, o) in r.config.orders.iter().enumerate() {
        let (mut yes, mut no) = (Vec::new(), Vec::new());
        for c in corr {
            match c.by_order.get(i).and_then(|x| x.1) {
                Some(x) if x >= 0.9 => yes.push(c.metric.as_str()),
                Some(_) => no.push(c.metric.as_str()),
                None => {}
            }
        }
        if yes.is_empty() && no.is_empty() {
            continue;
        }
        let list = |l: &[&str]| {
            if l.is_empty() {
                "none".to_string()
            } else {
                l.join(", ")
            }
        };
        v.push(format!(
            "{} order: time is tracked (Pearson r ≥ 0.9) by {}; not by {}.",
            o.name(),
            list(&yes),
            list(&no)
        ));
    }
    v.push("Published (docs/published-studies.md, study 3): for sequential and per-page order every metric tracks time; for random order only bus cycles do.".into());
    v
}

/// The detected levels: the series they were found in, and the levels.
type Levels = Option<((Order, u64), Vec<Level>)>;

pub fn emit(r: &Results, a: &LatencyArgs) -> Result<()> {
    let cs = caches();
    let tl = tlbs();
    let svg = line_chart(&chart(r, &cs))?;
    let mut doc = Document::new("memlens bench latency");
    doc.sections.push(latency_section(r).plot(svg.clone()));
    let levels = detect_levels(r, &cs, &tl);
    if let Some(sec) = levels_section(r, &cs, &tl, &levels) {
        doc.sections.push(sec);
    }
    let corr = correlations(r);
    let repr = representativeness(r);
    if let Some(sec) = counters_section(r, &repr, &corr) {
        doc.sections.push(sec);
    }
    doc.verdict = verdict(r, &levels, &corr);
    doc.print();
    write_files(r, a, &doc, &svg, &levels, &repr, &corr)
}

/// The latency table with what it was measured under: threads, pages, repeats, the timing's cost.
fn latency_section(r: &Results) -> Section {
    let cfg = &r.config;
    let mut lat = Section::new("Latency per element").note(format!(
        "Linked-list chase, reading only the 8-byte next pointer (dependent loads). {} thread(s), {} pages, {} repeats interleaved across orders, ~{:.0} ms per timed chase. \
         Each timed chase runs in 16 chunks; time per element = TSC ticks of the median chunk minus the measured cost of timing an empty chase ({:.0} ticks), divided by its loads (a preempted chunk does not skew the point); \
         TSC cycles at {:.3} GHz. Cells: median ns (TSC cycles); * = min–max spread above {:.0}% of the median.",
        cfg.threads,
        if cfg.hugepages { "transparent huge (madvise)" } else { "4 KiB (MADV_NOHUGEPAGE)" },
        cfg.repeats,
        cfg.target_seconds * 1e3,
        r.timer_overhead_ticks,
        memlens_measure::tsc::Clock::get().hz / 1e9,
        NOISY * 100.0
    ));
    if cfg.orders.contains(&Order::Page) {
        lat = lat.note("page order: one element per 4 KiB page at a random offset, pages in a random cycle; its working set is the memory the pages span.");
    }
    lat = lat.table(latency_table(r));
    if !r.skipped.is_empty() {
        lat = lat.note(format!(
            "{NOT_APPLICABLE}: not measured, {}",
            r.skipped.join("; ")
        ));
    }
    if let Some((mapped, huge)) = r.huge_pages_check {
        lat = lat.note(format!(
            "Huge pages: {} of the process's memory was backed by transparent huge pages (AnonHugePages) while {} of lists were mapped at the largest working set{}.",
            format_size(huge),
            format_size(mapped),
            if cfg.hugepages { " (--hugepages: MADV_HUGEPAGE)" } else { " (MADV_NOHUGEPAGE)" }
        ));
    }
    lat
}

/// The detected levels beside the caches sysfs declares and the data TLBs of the page size used;
/// None when no levels were detected.
fn levels_section(r: &Results, cs: &[Cache], tl: &[Tlb], levels: &Levels) -> Option<Section> {
    let ((o, e), lv) = levels.as_ref()?;
    let declared = cs
        .iter()
        .map(|c| {
            format!(
                "L{} {} {}",
                c.level,
                c.kind.to_lowercase(),
                format_size(c.size_bytes)
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let page = page_bytes(r);
    let tlbs_declared = tl
        .iter()
        .filter(|t| t.page_bytes == page)
        .map(|t| {
            format!(
                "L{} {} entries × {} = {}",
                t.level,
                t.entries,
                format_size(t.page_bytes),
                format_size(t.reach())
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    Some(
        Section::new("Detected levels")
            .note(format!(
                "Levels (plateaus within ±15%) of the {} series, named by the smallest cache that holds the level's largest working set (DRAM past the last), the TLB reach it exceeds, and the cache size or TLB reach crossed before the next level (what ends it). Caches declared by sysfs: {declared}; data TLBs for the {} pages used, from CPUID: {}.",
                series_name(*o, *e),
                format_size(page),
                if tlbs_declared.is_empty() { "not declared".to_string() } else { tlbs_declared }
            ))
            .table(levels_table(lv)),
    )
}

/// Counter metrics, the representativeness table and the correlations; None when no counters
/// were collected.
fn counters_section(r: &Results, repr: &[ReprRow], corr: &[Correlation]) -> Option<Section> {
    if r.points.first().is_none_or(|p| p.counters.is_empty()) {
        return None;
    }
    let mut sec = Section::new("Counter metrics").note(format!("Counters per element at the {} working set (chaser 0; grouped, scaled by time enabled/running when multiplexed).", format_size(reference_ws(r))));
    for (ev, note) in &r.counter_probe {
        sec = sec.note(format!("probe {ev}: {note}"));
    }
    sec = sec.table(counters_table(r));
    for l in na_reasons(r, &COUNTER_COLS) {
        sec = sec.note(l);
    }
    if !repr.is_empty() {
        sec = sec
            .note(format!("Representativeness at {}, normalised to seq/8B = 1, beside the published figures (Sandy Bridge E5-2690, perf, largest working set 2^28 = 256M; docs/published-studies.md, study 3). SCPI = (stalled frontend + backend) / instructions.", format_size(reference_ws(r))))
            .table(repr_table(repr));
    }
    Some(sec
        .note("Pearson r of each metric with ns/elem across all measured points (n/a: the metric is missing on some point, or fewer than 3 points).")
        .table(corr_table(r, corr)))
}

/// The files asked for: JSON, CSV, SVG, HTML.
fn write_files(
    r: &Results,
    a: &LatencyArgs,
    doc: &Document,
    svg: &str,
    levels: &Levels,
    repr: &[ReprRow],
    corr: &[Correlation],
) -> Result<()> {
    #[derive(Serialize)]
    struct Out<'a> {
        results: &'a Results,
        /// Where the counter and representativeness tables were taken (≤ 256M, the study's largest).
        reference_working_set: u64,
        levels: Option<(String, &'a Vec<Level>)>,
        representativeness: &'a [ReprRow],
        representativeness_metrics: [&'static str; 5],
        correlations: &'a [Correlation],
    }
    if let Some(p) = &a.out.json {
        let out = Out {
            results: r,
            reference_working_set: reference_ws(r),
            levels: levels.as_ref().map(|((o, e), l)| (series_name(*o, *e), l)),
            representativeness: repr,
            representativeness_metrics: REPR_METRICS,
            correlations: corr,
        };
        write_json(p, &out)?;
    }
    if let Some(p) = &a.out.csv {
        let (h, rows) = csv_rows(r);
        write_csv(p, &h.iter().map(String::as_str).collect::<Vec<_>>(), &rows)?;
    }
    if let Some(p) = &a.svg {
        write_text(p, svg)?;
    }
    if let Some(p) = &a.out.html {
        write_text(p, &doc.to_html())?;
    }
    Ok(())
}
