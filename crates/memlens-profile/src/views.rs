//! `memlens report --view peak|leaks|temporaries|timeline` and `memlens report --html`: what was on
//! the heap at its peak, what is still live and old, which sites churn short-lived blocks, and the
//! heap against RSS over time. All from the runtime's samples (see `life`).
//!
//! JSON (`--format json`) keeps the report's shape (`file`, `sample_index`, `unit`, `meta`, `totals`,
//! `functions`, `stacks`) with `view` added; `sample_index` names the view's value (`peak_space`,
//! `inuse_space` for leaks, `freed_1ms_space` for temporaries) and each stack adds the view's columns:
//!
//! ```text
//! "stacks": [ { "value", "share", "samples", "values": {…}, "frames": […],
//!               "peak_objects", "peak_space",                        // peak
//!               "live_age_ns", "age_share", "growth_bytes", "suspect", // leaks
//!               "freed_space", "freed_1ms_share", "freed_1s_share",
//!               "median_lifetime_range_ns": [lo, hi] } ] // temporaries (hi null: ≥ 100 s)
//! ```
//! The timeline's JSON is `{ "file", "view": "timeline", "meta", "heap_max_bytes", "heap_max_time_s",
//! "peak_bytes", "peak_time_s", "peak_estimate_bytes", "peak_interval_bytes": [lo, hi], "allocator", "points": [ { "time_s", "heap_bytes", "rss_bytes",
//! "allocator_in_use", "allocator_footprint", "mmap_bytes" } … ] }` (time from the start of
//! profiling; `heap_bytes` without the anonymous mappings, which are `mmap_bytes`; a figure the
//! process did not expose is null, as `mmap_bytes` from runtimes before the split).
use crate::agg::{self, fmt_value, pct, share, FrameId, Frames, Stack, Stacks};
use crate::model::{Frame, Life, Meta, Profile, SampleIndex, TimePoint};
use crate::present::{stack_cell, Format, JsonFunc, Values};
use anyhow::{bail, Result};
use memlens_render::doc::{terminal_width, wrap, Table};
use memlens_render::output::fit_table;
use serde::Serialize;
use std::path::Path;

/// What `memlens report` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum View {
    /// Bytes allocated per stack (cumulative)
    Alloc,
    /// Bytes live when the profile was written
    Inuse,
    /// Bytes live at the heap's high-water mark
    Peak,
    /// Bytes still live at the dump, with their age and growth since the previous dump
    Leaks,
    /// Sites whose blocks mostly die within 1 ms
    Temporaries,
    /// Estimated heap, RSS and the allocator's figures over time
    Timeline,
}

/// Young: freed within this many ns. A site is a temporary when most of its freed bytes were young.
const YOUNG_NS: f64 = 1e6;
/// Live bytes older than this share of the run are suspected leaks.
const OLD_SHARE: f64 = 0.25;

/// One stack of a view: the report's merged stack, its views' columns and the view's value.
struct VStack {
    st: Stack,
    life: Life,
    value: f64,
}

fn need_views(p: &Profile, view: View) -> Result<()> {
    if p.views.as_ref().is_some_and(|v| v.disabled) && view != View::Timeline {
        bail!(
            "the runtime's views were switched off (MEMLENS_VIEWS=0) when this profile was written"
        );
    }
    if p.samples.iter().any(|s| s.life.is_some()) || p.views.is_some() {
        return Ok(());
    }
    bail!(
        "this profile has no {} data (it was written without lifetimes: by another tool, \
         with MEMLENS_VIEWS=0, or by an older memlens, whose exact mode tracked no live blocks)",
        match view {
            View::Timeline => "timeline",
            View::Peak => "peak",
            _ => "lifetime",
        }
    )
}

/// The stacks merged by their frames' functions and lines (two call sites of one function are two
/// rows, as in `go tool pprof -lines` and heaptrack; [`Stacks::by_line`], one pass for every view)
/// with the view's value, largest first, those without any left out.
fn vstacks(stacks: &Stacks, view: View) -> Vec<VStack> {
    let mut out: Vec<VStack> = stacks
        .list
        .iter()
        .map(|st| {
            let life = stacks.life_of(st);
            let value = match view {
                View::Alloc => st.get(SampleIndex::AllocSpace),
                View::Inuse | View::Leaks => st.get(SampleIndex::InuseSpace),
                View::Peak => life.peak_bytes,
                View::Temporaries => {
                    let young = life.freed_within(YOUNG_NS);
                    if young > 0.0 && young >= 0.5 * life.freed_total() {
                        young
                    } else {
                        0.0
                    }
                }
                View::Timeline => 0.0,
            };
            VStack {
                st: *st,
                life,
                value,
            }
        })
        .filter(|v| v.value > 0.0)
        .collect();
    out.sort_by(|a, b| b.value.total_cmp(&a.value));
    out
}

/// The view's value under its pprof-style name.
fn value_name(view: View) -> &'static str {
    match view {
        View::Alloc => "alloc_space",
        View::Inuse | View::Leaks => "inuse_space",
        View::Peak => "peak_space",
        View::Temporaries => "freed_1ms_space",
        View::Timeline => "heap_bytes",
    }
}

/// The view's stacks as (frames, values) with the view's value in the alloc_space slot (for
/// functions and folded stacks).
fn view_values<'a>(
    stacks: &'a Stacks,
    vs: &'a [VStack],
) -> impl Iterator<Item = (impl Iterator<Item = FrameId> + 'a, [f64; 4])> + 'a {
    vs.iter()
        .map(|v| (stacks.frames(&v.st), [0.0, v.value, 0.0, 0.0]))
}

fn bytes(v: f64) -> String {
    fmt_value(v, SampleIndex::AllocSpace, false)
}

/// A lifetime decade `[lo, hi)` in ns as `100 ms–1 s`, `< 1 µs`, `≥ 100 s`: the bucket the
/// median fell in, which is all the runtime measured of it.
pub fn fmt_ns_range((lo, hi): (f64, f64)) -> String {
    let short = |ns: f64| {
        let (v, unit) = if ns < 1e3 {
            (ns, "ns")
        } else if ns < 1e6 {
            (ns / 1e3, "µs")
        } else if ns < 1e9 {
            (ns / 1e6, "ms")
        } else {
            (ns / 1e9, "s")
        };
        format!("{v} {unit}")
    };
    if lo <= 0.0 {
        format!("< {}", short(hi))
    } else if !hi.is_finite() {
        format!("≥ {}", short(lo))
    } else {
        format!("{}–{}", short(lo), short(hi))
    }
}

/// A duration in ns as `850 ns`, `12.3 µs`, `4.56 ms`, `1.20 s`.
pub fn fmt_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.0} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// Render one view of `p` (not alloc/inuse, which the plain report shows).
pub fn render(
    p: &Profile,
    file: &Path,
    view: View,
    format: Format,
    top: usize,
    flamegraph: Option<&Path>,
) -> Result<String> {
    need_views(p, view)?;
    if view == View::Timeline {
        if flamegraph.is_some() {
            bail!("the timeline view has no stacks to draw as a flamegraph (try --html for its chart)");
        }
        return match format {
            Format::Json => Ok(timeline_json(p, file)? + "\n"),
            Format::Folded => {
                bail!("the timeline view has no stacks to fold (use --format table or json)")
            }
            Format::Table => Ok(timeline_table(p, file, top)),
        };
    }
    let mut fr = Frames::default();
    let stacks = Stacks::by_line(p, &mut fr);
    let c = Ctx {
        p,
        fr: &fr,
        stacks: &stacks,
    };
    let vs = vstacks(&stacks, view);
    if let Some(out) = flamegraph {
        write_flamegraph(&c, &vs, view, out)?;
    }
    Ok(match format {
        Format::Folded => {
            let mut text = Vec::new();
            let folded = vs.iter().map(|v| (stacks.frames(&v.st), v.value));
            crate::present::folded(&fr, folded, &mut text)?;
            String::from_utf8_lossy(&text).into_owned()
        }
        Format::Json => json(&c, file, view, &vs, usize::MAX)? + "\n",
        Format::Table => table(&c, file, view, &vs, top),
    })
}

/// A profile and its merged stacks, what a view is made from.
struct Ctx<'a, 'p> {
    p: &'p Profile,
    fr: &'a Frames,
    stacks: &'a Stacks<'p>,
}

impl Ctx<'_, '_> {
    fn frames(&self, v: &VStack) -> Vec<Frame> {
        self.fr.resolve(self.stacks.frames(&v.st))
    }
}

fn write_flamegraph(c: &Ctx, vs: &[VStack], view: View, out: &Path) -> Result<()> {
    let mut text = Vec::new();
    let folded = vs.iter().map(|v| (c.stacks.frames(&v.st), v.value));
    crate::present::folded(c.fr, folded, &mut text)?;
    if text.is_empty() {
        bail!("cannot draw a flamegraph: the {view:?} view is empty for this profile");
    }
    let exe = crate::present::program_name(c.p);
    let title = format!("memlens: {} {exe}", value_name(view));
    crate::present::write_flamegraph(&text, title.trim_end(), "bytes", out)
}

fn run_ns(m: &Meta) -> f64 {
    m.time_ns.saturating_sub(m.start_ns) as f64
}

/// The one-paragraph summary above a view's tables.
pub(crate) fn summary(p: &Profile, view: View) -> String {
    let v = p.views.clone().unwrap_or_default();
    let at = |ns: u64| {
        if ns > p.meta.start_ns {
            format!(" at +{:.2} s", (ns - p.meta.start_ns) as f64 / 1e9)
        } else {
            String::new()
        }
    };
    match view {
        View::Peak => match peak_estimate(p) {
            Some((lo, est, hi)) => format!(
                "peak: estimated live heap at its peak {}{}{}; the sites below are the live set \
                 when the highest estimate was seen ({}{}, {} at the set), which leans high \
                 on a heap that churns",
                bytes(est),
                peak_range(p, lo, est, hi),
                at(v.split_peak_ns),
                bytes(v.heap_max_bytes),
                at(v.heap_max_ns),
                bytes(v.peak_bytes),
            ),
            None => format!(
                "peak: estimated live heap {}{} when the peak set was taken (highest estimate {}{}){}",
                bytes(v.peak_bytes),
                at(v.peak_ns),
                bytes(v.heap_max_bytes),
                at(v.heap_max_ns),
                sampling_error(p, v.peak_bytes, true)
            ),
        },
        View::Leaks => {
            let live = p.total(SampleIndex::InuseSpace);
            let (figure, error) = match unresolved_bound(p, live) {
                Some(u) => (
                    format!("< {}", bytes(u)),
                    format!(
                        ", not resolved at this interval ({}: 95 % bound; profile with a smaller \
                         --interval for a figure)",
                        bytes(p.meta.interval as f64)
                    ),
                ),
                None => (bytes(live), sampling_error(p, live, false)),
            };
            format!(
                "leaks: {figure} still live {} (run {}){error}; suspect = live bytes older than \
                 {:.0}% of the run on average, or grown since the previous dump",
                if p.meta.reason.contains("exit") {
                    "at exit"
                } else {
                    "at the dump"
                },
                fmt_ns(run_ns(&p.meta)),
                OLD_SHARE * 100.0
            )
        }
        View::Temporaries => format!(
            "temporaries: sites whose freed bytes mostly lived under {}, ranked by those bytes",
            fmt_ns(YOUNG_NS)
        ),
        _ => String::new(),
    }
}

/// The peak's 95 % interval as a clause, and why its upper end lies where it does (`peak_estimate`).
fn peak_range(p: &Profile, lo: f64, est: f64, hi: f64) -> String {
    if hi <= lo {
        return String::new(); // exact mode: the figure alone
    }
    let brief = if hi > est + interval_95(p, est) * 1.001 {
        "; the upper end is what the highest estimate allows: a spike briefer than the heap's \
         churn is not told from sampling noise at this interval"
    } else {
        ""
    };
    format!(
        " (95 %: {} to {}, interval {}{brief})",
        bytes(lo),
        bytes(hi),
        bytes(p.meta.interval as f64)
    )
}

/// Half the width of the 95 % interval of a live-heap estimate of `heap` bytes at interval R
/// (0 in exact mode): 1.96 standard errors, the standard error at most √(heap·R) (`sampling_error`).
pub(crate) fn interval_95(p: &Profile, heap: f64) -> f64 {
    1.96 * (heap.max(0.0) * p.meta.interval as f64).sqrt()
}

/// The split-sample estimate of the peak and its 95 % interval [lo, hi], when the runtime wrote one.
/// Each half-sample (peak.c) estimates the heap with twice the variance of the whole; the mean of
/// B at A's highest and A at B's highest is two such estimates of (nearly) independent halves,
/// whose variance is about that of the whole sample: √(heap·R) bounds its standard error as it
/// does one estimate's, and `lo` is 1.96 of them below it. What it estimates is the true heap at the
/// moments the halves chose: the peak when the heap holds it long enough for a half's highest to
/// fall there, less on a brief spike over a churning heap (git pack-objects: 11 ms of 11 s above
/// 1.5 MB, to 2.02 MB over a plateau of 1.3 MB, read 0.66x at 64K; docs/heap-views.md). Nothing in
/// the samples tells such a spike from the churn's noise, so `hi` is the highest estimate's bound
/// when that is higher: the peak P is at most X(t*) + 1.96·√(P·R) with 97.5 % (X(t*), the estimate
/// at the peak's moment, is at most the highest estimate M), so P ≤ (0.98·√R + √(0.96·R + M))²
/// (`peak_interval_covers_a_churning_heap`, `peak_interval_holds_a_brief_spike`).
pub(crate) fn peak_estimate(p: &Profile) -> Option<(f64, f64, f64)> {
    let v = p.views.as_ref()?;
    // A split whose halves both read 0 at the other's highest (a heap of a few intervals at 512K:
    // git's 2 MB) is an estimate of 0, not a missing one: the moments are known.
    let est = v.split_peak_bytes.max(0.0);
    if est <= 0.0 && v.split_peak_ns == 0 {
        return None;
    }
    let r = p.meta.interval as f64;
    if r <= 0.0 {
        return Some((est, est, est)); // exact mode: the halves are the heap
    }
    let hw = interval_95(p, est);
    let from_max = peak_bound_from_highest(v.heap_max_bytes, r);
    Some(((est - hw).max(0.0), est, (est + hw).max(from_max)))
}

/// What the run's highest live-heap estimate `highest` at interval `r` allows the true peak to be,
/// at 97.5 % (`peak_estimate` derives it): the upper end of the peak's interval whenever it is above
/// the split estimate's own. `memlens check --max-peak` bounds the peak by it too.
pub fn peak_bound_from_highest(highest: f64, r: f64) -> f64 {
    (0.98 * r.sqrt() + (0.9604 * r + highest.max(0.0)).sqrt()).powi(2)
}

/// A live estimate too small to tell from nothing: None when it is resolved (its 95 % interval
/// excludes 0: 1.96·√(live·R) < live, i.e. live > 3.84 R, about four samples), else a 95 % upper
/// bound of the true bytes. With k = live/R samples' worth, the Poisson upper limit of the
/// sample count is within 3 % (above) of k + 1.96·√(k+1) + 1 for k ≤ 4 (3.0 for k = 0, 4.74 for 1,
/// 6.30 for 2): the bound is R times that. A sampled block of s bytes stands for s/p ≥ R of them,
/// so a small leak reads as 0 or as a multiple of about R: either is the same "< bound".
pub(crate) fn unresolved_bound(p: &Profile, live: f64) -> Option<f64> {
    let r = p.meta.interval as f64;
    if r <= 0.0 || live > 3.84 * r {
        return None;
    }
    let k = live.max(0.0) / r;
    Some(r * (k + 1.96 * (k + 1.0).sqrt() + 1.0))
}

/// How far a live-heap estimate of `heap` bytes may be from the truth, as a clause for a summary.
/// A block of s bytes is sampled with probability p = 1 − e^(−s/R) and weighs s/p, so its variance
/// is s²/(e^(s/R) − 1) ≤ s·R: the standard error of a heap of H bytes is at most √(H·R), whatever
/// its blocks' sizes. Nothing is said in exact mode or when the error is under 5%. The highest
/// estimate over a run (`peak`) is the top of a noisy curve and leans high by about that much.
fn sampling_error(p: &Profile, heap: f64, peak: bool) -> String {
    let r = p.meta.interval as f64;
    if r <= 0.0 || heap <= 0.0 {
        return String::new();
    }
    let rel = (heap * r).sqrt() / heap;
    if rel < 0.05 {
        return String::new();
    }
    format!(
        "; sampling error up to ±{:.0}% (one standard error at interval {}){}",
        rel * 100.0,
        bytes(r),
        if peak {
            ", and the highest estimate of a run leans high: profile with a smaller --interval \
             for a closer peak"
        } else {
            ""
        }
    )
}

fn suspect(p: &Profile, v: &VStack) -> bool {
    let run = run_ns(&p.meta);
    let grown = v.life.prev_inuse_bytes > 0.0
        && v.st.get(SampleIndex::InuseSpace) > v.life.prev_inuse_bytes;
    grown || (run > 0.0 && v.life.live_age_ns >= OLD_SHARE * run)
}

/// The view's extra columns for one stack (header names in `extra_header`).
fn extra_cells(p: &Profile, view: View, v: &VStack) -> Vec<String> {
    let l = &v.life;
    match view {
        View::Peak => vec![format!("{:.0}", l.peak_objects)],
        View::Leaks => vec![
            fmt_ns(l.live_age_ns),
            pct(share(l.live_age_ns, run_ns(&p.meta))),
            if l.prev_inuse_bytes > 0.0 {
                fmt_value(
                    v.st.get(SampleIndex::InuseSpace) - l.prev_inuse_bytes,
                    SampleIndex::AllocSpace,
                    true,
                )
            } else {
                "-".into()
            },
            if suspect(p, v) { "yes" } else { "" }.into(),
        ],
        View::Temporaries => vec![
            bytes(l.freed_total()),
            pct(share(l.freed_within(1e6), l.freed_total())),
            pct(share(l.freed_within(1e9), l.freed_total())),
            l.median_range_ns().map_or("-".into(), fmt_ns_range),
        ],
        _ => vec![],
    }
}

fn extra_header(view: View) -> &'static [&'static str] {
    match view {
        View::Peak => &["objects"],
        View::Leaks => &["mean age", "age/run", "growth", "suspect"],
        View::Temporaries => &["freed", "<1ms", "<1s", "median life in"],
        _ => &[],
    }
}

/// The lines above a view's tables: the file, the program and `summary`, wrapped to the terminal.
fn heading(p: &Profile, file: &Path, summary: &str) -> String {
    let mut s = format!("profile: {}\n", file.display());
    s += &crate::present::program_line(&p.meta);
    s += summary;
    s += "\n";
    wrap(&s, terminal_width(), "  ")
}

/// The functions of the view's stacks, most of the view's value (in column 1) first: by full
/// name, or (`display`) one per function as tables show it ([`agg::display_groups`]).
fn functions(c: &Ctx, vs: &[VStack], display: bool) -> Vec<agg::Func> {
    let values = view_values(c.stacks, vs);
    let funcs = if display {
        let groups = agg::display_groups(c.fr);
        agg::functions_by(c.fr, values, |f| groups[f as usize])
    } else {
        agg::functions(c.fr, values)
    };
    crate::present::sorted(funcs, 1)
}

fn table(c: &Ctx, file: &Path, view: View, vs: &[VStack], top: usize) -> String {
    let p = c.p;
    let name = value_name(view);
    let mut s = heading(p, file, &summary(p, view));
    let total: f64 = vs.iter().map(|v| v.value).sum();
    if vs.is_empty() {
        s += &format!("no stacks with {name} in this profile\n");
        return s;
    }
    let funcs = functions(c, vs, true);
    s += &format!("\ntop functions by {name} (flat: allocated here; cum: here or in callees)\n");
    let shown: Vec<&agg::Func> = funcs
        .iter()
        .filter(|f| f.flat[1] != 0.0)
        .take(top)
        .collect();
    let names = crate::present::function_names(c.fr, shown.iter().copied());
    let rows: Vec<Vec<String>> = shown
        .iter()
        .zip(names)
        .map(|(f, n)| {
            vec![
                bytes(f.flat[1]),
                pct(share(f.flat[1], total)),
                bytes(f.cum[1]),
                pct(share(f.cum[1], total)),
                n,
            ]
        })
        .collect();
    s += &fit_table(&["flat", "flat%", "cum", "cum%", "function"], &rows);
    s += &format!("\n\ntop stacks by {name} (innermost frame first)\n");
    s += &stacks_table(c, view, vs, top, total, terminal_width());
    s += "\n";
    s += &crate::present::drill_down(file);
    s
}

/// The view's top stacks: rank, value, share, the view's columns and the stack, as columns when
/// they fit `width` with room for the stack; else the figures of each stack in one cell beside it
/// (`objects 64`, `mean age 1.20 s`…), so the table stays whole and the stack readable.
fn stacks_table(
    c: &Ctx,
    view: View,
    vs: &[VStack],
    top: usize,
    total: f64,
    width: usize,
) -> String {
    let name = value_name(view);
    let extra = extra_header(view);
    let cells: Vec<(Vec<String>, String)> = vs
        .iter()
        .take(top)
        .map(|v| {
            let mut r = vec![bytes(v.value), pct(share(v.value, total))];
            r.extend(extra_cells(c.p, view, v));
            (r, stack_cell(&c.frames(v), 8))
        })
        .collect();
    let mut wide = Table::new(&["#"]).topic(name, &[&[name, "share"][..], extra].concat());
    wide = wide.topic("stack", &["stack"]);
    for (i, (r, st)) in cells.iter().enumerate() {
        let mut row = vec![(i + 1).to_string()];
        row.extend(r.iter().cloned());
        row.push(st.clone());
        wide.push(row);
    }
    let text = wide.to_text(width);
    if !text.contains("(continued") {
        return text;
    }
    let mut narrow = Table::new(&["#"]).topic(name, &[name, "stack"]);
    for (i, (r, st)) in cells.into_iter().enumerate() {
        let mut figures = vec![format!("{} {}", r[0], r[1])];
        for (h, v) in extra.iter().zip(&r[2..]) {
            match v.as_str() {
                "" | "-" => {}
                "yes" => figures.push((*h).to_string()),
                _ => figures.push(format!("{h} {v}")),
            }
        }
        narrow.push(vec![(i + 1).to_string(), figures.join("\n"), st]);
    }
    narrow.to_text(width)
}

#[derive(Serialize, Default)]
struct JsonStack {
    value: f64,
    share: f64,
    samples: u64,
    values: Option<Values>,
    frames: Vec<Frame>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peak_objects: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    peak_space: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    live_age_ns: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    age_share: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    growth_bytes: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    suspect: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    freed_space: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    freed_1ms_share: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    freed_1s_share: Option<f64>,
    /// The decade holding the median lifetime: `[lo, hi]` ns, hi null for the open last decade.
    #[serde(skip_serializing_if = "Option::is_none")]
    median_lifetime_range_ns: Option<(f64, Option<f64>)>,
}

#[derive(Serialize)]
struct JsonView<'a> {
    file: String,
    view: View,
    sample_index: &'static str,
    unit: &'static str,
    meta: &'a Meta,
    totals: Values,
    functions: Vec<JsonFunc<'a>>,
    stacks: Vec<JsonStack>,
}

fn values(v: [f64; 4]) -> Values {
    Values::from(v)
}

/// The view's JSON (its first `limit` functions and stacks).
fn json(c: &Ctx, file: &Path, view: View, vs: &[VStack], limit: usize) -> Result<String> {
    let p = c.p;
    let total: f64 = vs.iter().map(|v| v.value).sum();
    let funcs = functions(c, vs, false);
    let run = run_ns(&p.meta);
    let r = JsonView {
        file: file.display().to_string(),
        view,
        sample_index: value_name(view),
        unit: "bytes",
        meta: &p.meta,
        totals: values(SampleIndex::ALL.map(|i| p.total(i))),
        functions: funcs
            .iter()
            .take(limit)
            .map(|f| crate::present::json_func(c.fr, f, 1, total))
            .collect(),
        stacks: vs
            .iter()
            .take(limit)
            .map(|v| {
                let l = &v.life;
                let mut j = JsonStack {
                    value: v.value,
                    share: share(v.value, total),
                    samples: v.st.samples,
                    values: Some(values(v.st.values)),
                    frames: c.frames(v),
                    ..JsonStack::default()
                };
                match view {
                    View::Peak => {
                        j.peak_objects = Some(l.peak_objects);
                        j.peak_space = Some(l.peak_bytes);
                    }
                    View::Leaks => {
                        j.live_age_ns = Some(l.live_age_ns);
                        j.age_share = Some(share(l.live_age_ns, run));
                        j.growth_bytes = (l.prev_inuse_bytes > 0.0)
                            .then(|| v.st.get(SampleIndex::InuseSpace) - l.prev_inuse_bytes);
                        j.suspect = Some(suspect(p, v));
                    }
                    View::Temporaries => {
                        j.freed_space = Some(l.freed_total());
                        j.freed_1ms_share = Some(share(l.freed_within(1e6), l.freed_total()));
                        j.freed_1s_share = Some(share(l.freed_within(1e9), l.freed_total()));
                        j.median_lifetime_range_ns = l
                            .median_range_ns()
                            .map(|(lo, hi)| (lo, hi.is_finite().then_some(hi)));
                    }
                    _ => {}
                }
                j
            })
            .collect(),
    };
    Ok(serde_json::to_string_pretty(&r)?)
}

#[derive(Serialize)]
struct JsonPoint {
    time_s: f64,
    heap_bytes: f64,
    rss_bytes: Option<f64>,
    allocator_in_use: Option<f64>,
    allocator_footprint: Option<f64>,
    /// Anonymous mappings, apart from the heap (null from runtimes before the split).
    mmap_bytes: Option<f64>,
}

#[derive(Serialize)]
struct JsonTimeline<'a> {
    file: String,
    view: View,
    meta: &'a Meta,
    heap_max_bytes: f64,
    heap_max_time_s: f64,
    peak_bytes: f64,
    peak_time_s: f64,
    /// The split-sample estimate of the peak and its 95 % interval (null from older runtimes).
    peak_estimate_bytes: Option<f64>,
    peak_interval_bytes: Option<[f64; 2]>,
    allocator: String,
    points: Vec<JsonPoint>,
}

fn secs(p: &Profile, ns: u64) -> f64 {
    ns.saturating_sub(p.meta.start_ns) as f64 / 1e9
}

fn point(p: &Profile, t: &TimePoint) -> JsonPoint {
    JsonPoint {
        time_s: secs(p, t.time_ns),
        heap_bytes: t.heap_bytes,
        rss_bytes: t.rss_bytes,
        allocator_in_use: t.allocator_in_use,
        allocator_footprint: t.allocator_footprint,
        mmap_bytes: t.mmap_bytes,
    }
}

pub(crate) fn timeline_json(p: &Profile, file: &Path) -> Result<String> {
    let v = p.views.clone().unwrap_or_default();
    let r = JsonTimeline {
        file: file.display().to_string(),
        view: View::Timeline,
        meta: &p.meta,
        heap_max_bytes: v.heap_max_bytes,
        heap_max_time_s: secs(p, v.heap_max_ns),
        peak_bytes: v.peak_bytes,
        peak_time_s: secs(p, v.peak_ns),
        peak_estimate_bytes: peak_estimate(p).map(|e| e.1),
        peak_interval_bytes: peak_estimate(p).map(|(lo, _, hi)| [lo, hi]),
        allocator: v.allocator.clone(),
        points: v.timeline.iter().map(|t| point(p, t)).collect(),
    };
    Ok(serde_json::to_string_pretty(&r)?)
}

/// At most `n` points, evenly spread, always keeping the highest heap estimate.
fn thin(points: &[TimePoint], n: usize) -> Vec<&TimePoint> {
    let n = n.max(2);
    let top = points
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.heap_bytes.total_cmp(&b.1.heap_bytes))
        .map(|x| x.0);
    let step = points.len().div_ceil(n).max(1);
    points
        .iter()
        .enumerate()
        .filter(|(i, _)| i % step == 0 || Some(*i) == top || *i + 1 == points.len())
        .map(|x| x.1)
        .collect()
}

/// The allocator the program ran on and which of its figures the timeline has.
fn allocator_note(name: &str) -> String {
    match name {
        "glibc" => "glibc (mallinfo2: in use and footprint)".into(),
        "jemalloc" => "jemalloc (stats.allocated and stats.resident)".into(),
        "tcmalloc" => "tcmalloc (current_allocated_bytes and heap_size)".into(),
        "mimalloc" => "mimalloc (committed bytes as footprint; in use not exposed)".into(),
        "" | "none" | "unknown" => "not recognised (no allocator figures)".into(),
        other => format!("{other} (no figures)"),
    }
}

fn opt_bytes(v: Option<f64>) -> String {
    v.map_or("n/a".into(), bytes)
}

fn timeline_table(p: &Profile, file: &Path, top: usize) -> String {
    let v = p.views.clone().unwrap_or_default();
    let max_rss = v
        .timeline
        .iter()
        .filter_map(|t| t.rss_bytes)
        .fold(0.0, f64::max);
    let summary = format!(
        "timeline: {} points; estimated heap at most {} (+{:.2} s), RSS at most {}; allocator: {}",
        v.timeline.len(),
        bytes(v.heap_max_bytes),
        secs(p, v.heap_max_ns),
        bytes(max_rss),
        allocator_note(&v.allocator),
    );
    let mut s = heading(p, file, &summary);
    if v.timeline.is_empty() {
        s += "no timeline points in this profile\n";
        return s;
    }
    let rows: Vec<Vec<String>> = thin(&v.timeline, top.max(20))
        .into_iter()
        .map(|t| {
            vec![
                format!("{:.3}", secs(p, t.time_ns)),
                bytes(t.heap_bytes),
                opt_bytes(t.mmap_bytes),
                opt_bytes(t.rss_bytes),
                t.rss_bytes.map_or("n/a".into(), |r| {
                    let mapped = t.heap_bytes + t.mmap_bytes.unwrap_or(0.0);
                    fmt_value(r - mapped, SampleIndex::AllocSpace, true)
                }),
                opt_bytes(t.allocator_in_use),
                opt_bytes(t.allocator_footprint),
            ]
        })
        .collect();
    s += &fit_table(
        &[
            "time s",
            "heap (est.)",
            "mmap (est.)",
            "RSS",
            "RSS - heap - mmap",
            "allocator in use",
            "allocator footprint",
        ],
        &rows,
    );
    s += "\n";
    s
}

/// One view as the HTML page shows it (not the timeline; not alloc and inuse, which are the
/// report's own JSON): the JSON `report --view VIEW --format json` prints, cut to its first
/// `limit` functions and stacks; the view's value summed over every stack, and the number of
/// stacks; every stack's frames and value (for its flame graph). None when the profile has no
/// such view.
pub(crate) fn page_view(
    p: &Profile,
    fr: &Frames,
    stacks: &Stacks,
    file: &Path,
    view: View,
    limit: usize,
) -> Result<Option<PageView>> {
    if need_views(p, view).is_err() {
        return Ok(None);
    }
    let c = Ctx { p, fr, stacks };
    let vs = vstacks(stacks, view);
    Ok(Some(PageView {
        json: json(&c, file, view, &vs, limit)?,
        total: vs.iter().map(|v| v.value).sum(),
        count: vs.len(),
        stacks: vs
            .iter()
            .map(|v| (stacks.frames(&v.st).collect(), v.value))
            .collect(),
    }))
}

/// What [`page_view`] gives.
pub(crate) struct PageView {
    pub json: String,
    pub total: f64,
    pub count: usize,
    pub stacks: Vec<(Vec<FrameId>, f64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at_interval(interval: u64) -> Profile {
        let mut p = Profile::default();
        p.meta.interval = interval;
        p
    }

    #[test]
    fn sampling_error_is_the_bound_of_one_standard_error() {
        // Two 256 KiB buffers at 512K: each sampled with p = 1 − e^(−1/2) weighs 655 KiB, so
        // estimates of 0, 655 KiB or 1.28 MiB for a heap of 512 KiB; √(H·R)/H at H = 1.28 MiB.
        let p = at_interval(512 << 10);
        let s = sampling_error(&p, 1.28 * 1048576.0, true);
        assert!(s.contains("±62%") && s.contains("512 KiB"), "{s}");
        assert!(s.contains("leans high"), "{s}");
        assert!(!sampling_error(&p, 1.28 * 1048576.0, false).contains("leans high"));
        // 400 intervals: ±5%, said; beyond that, not.
        assert!(sampling_error(&p, 400.0 * 524288.0, false).contains("±5%"));
        assert_eq!(sampling_error(&p, 500.0 * 524288.0, false), "");
        // Exact mode and an empty heap: nothing to say.
        assert_eq!(sampling_error(&at_interval(0), 1e6, true), "");
        assert_eq!(sampling_error(&p, 0.0, true), "");
    }

    #[test]
    fn leaks_under_four_samples_are_a_bound() {
        let r = 524288.0;
        let p = at_interval(512 << 10);
        // Nothing sampled: the Poisson 95 % limit of 3.0 samples' worth (here 2.96 R).
        assert!((unresolved_bound(&p, 0.0).unwrap() / r - 2.96).abs() < 1e-9);
        // One sample's worth (sqlite3's 10 kB leak read as 526 kB): 4.77 R, above the true 4.74.
        let one = unresolved_bound(&p, r).unwrap() / r;
        assert!((4.74..4.9).contains(&one), "{one}");
        // Resolved past 3.84 R; exact mode has no bound.
        assert!(unresolved_bound(&p, 3.8 * r).is_some());
        assert!(unresolved_bound(&p, 3.9 * r).is_none());
        assert!(unresolved_bound(&at_interval(0), 10.0).is_none());
    }

    #[test]
    fn peak_interval_reaches_what_the_highest_estimate_allows() {
        // git pack-objects at 64K: the split read the plateau (1.3 MB), the highest estimate 2.4 MB.
        let mut p = at_interval(64 << 10);
        p.views = Some(crate::model::Views {
            split_peak_bytes: 1.3e6,
            heap_max_bytes: 2.4e6,
            ..Default::default()
        });
        let (lo, est, hi) = peak_estimate(&p).unwrap();
        let r: f64 = 65536.0;
        assert_eq!(est, 1.3e6);
        assert!(
            (lo - (1.3e6 - 1.96 * (1.3e6 * r).sqrt())).abs() < 1.0,
            "{lo}"
        );
        // hi solves hi − 1.96·√(hi·R) = 2.4 MB: a peak above it would put the estimate at its
        // moment below the highest seen with less than 2.5 % probability
        assert!((hi - 1.96 * (hi * r).sqrt() - 2.4e6).abs() < 1.0, "{hi}");
        assert!(peak_range(&p, lo, est, hi).contains("a spike briefer"));
        // A highest estimate below the split one (halves that grew after the last dump's
        // flush): the split's own ±, no clause.
        p.views.as_mut().unwrap().heap_max_bytes = 1.0e6;
        let (lo, est, hi) = peak_estimate(&p).unwrap();
        assert!(
            (hi - (1.3e6 + 1.96 * (1.3e6 * r).sqrt())).abs() < 1.0,
            "{hi}"
        );
        assert!(!peak_range(&p, lo, est, hi).contains("spike"));
        // Both halves read 0 at the other's highest: an estimate of 0 up to the highest's bound.
        p.views.as_mut().unwrap().split_peak_bytes = 0.0;
        p.views.as_mut().unwrap().split_peak_ns = 1;
        let (lo, est, hi) = peak_estimate(&p).unwrap();
        assert_eq!((lo, est), (0.0, 0.0));
        assert!((hi - 1.96 * (hi * r).sqrt() - 1.0e6).abs() < 1.0, "{hi}");
        p.views.as_mut().unwrap().split_peak_ns = 0; // no split written (an older runtime)
        assert!(peak_estimate(&p).is_none());
        p.views.as_mut().unwrap().split_peak_bytes = 1.3e6;
        // Exact mode: the figure alone.
        let mut x = at_interval(0);
        x.views = p.views.clone();
        let (lo, est, hi) = peak_estimate(&x).unwrap();
        assert_eq!(peak_range(&x, lo, est, hi), "");
    }
}
