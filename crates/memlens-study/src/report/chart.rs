//! The study's answer as a picture: overhead (with its 95% interval) against the sampling
//! interval, one panel per workload and schedule, one line per profiler, the placebo's band behind
//! them and the coverage on a second axis — as SVG for the HTML page and as characters for the
//! terminal. A line joins only intervals measured side by side: where a profiler skips an interval
//! of its panel, its line breaks.
//!
//! Overheads run from about 0 to +200% (jemalloc's profiler at 64K on the synthetic loop), so the
//! overhead axis is symmetric-logarithmic: `sign(y) · log10(1 + |y|)`, linear near 0 and
//! logarithmic beyond, with ticks at 0, ±1, ±3, ±10, …, labelled outside the plot.
use crate::estimate::Estimate;
use crate::model::{Results, Row, Schedule};
use anyhow::{anyhow, Result};
use memlens_measure::units::format_size;
use memlens_render::doc::wrap;
use plotters::chart::DualCoordChartContext;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// The symmetric-log transform of the overhead axis.
pub fn symlog(y: f64) -> f64 {
    y.signum() * (1.0 + y.abs()).log10()
}

/// The ticks of the overhead axis.
const TICKS: [f64; 15] = [
    -1000.0, -300.0, -100.0, -30.0, -10.0, -3.0, -1.0, 0.0, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0,
    1000.0,
];

/// One line of a panel: a profiler's points by interval.
struct Line {
    /// `memlens dwarf`, `jemalloc prof`.
    name: String,
    /// One letter for the terminal.
    glyph: char,
    /// (interval bytes, overhead, coverage).
    points: Vec<(u64, Estimate, Option<f64>)>,
}

/// One workload's panel.
struct Panel {
    workload: String,
    lines: Vec<Line>,
    placebo: Option<Estimate>,
    intervals: Vec<u64>,
}

fn family(r: &Row) -> Option<(String, char)> {
    match (r.profiler.as_str(), r.unwinder.as_deref()) {
        ("memlens", Some(u)) => Some((
            format!("memlens {u}"),
            match u {
                "dwarf" => 'd',
                "fp" => 'f',
                "libgcc" => 'g',
                _ => 'u',
            },
        )),
        ("jemalloc", _) => Some(("jemalloc prof".into(), 'j')),
        ("tcmalloc", _) => Some(("tcmalloc sampler".into(), 't')),
        _ => None,
    }
}

fn panels(r: &Results) -> Vec<Panel> {
    let mut out = Vec::new();
    for (w, sched) in r
        .settings
        .workloads
        .iter()
        .flat_map(|w| [Schedule::Blocks, Schedule::Processes].map(|s| (w.name(), s)))
    {
        let mut p = Panel {
            workload: format!("{w}{}", sched.suffix()),
            lines: Vec::new(),
            placebo: None,
            intervals: Vec::new(),
        };
        for row in r
            .rows
            .iter()
            .filter(|x| x.workload == w && x.schedule() == sched)
        {
            if row.config == "placebo" {
                p.placebo = Some(row.overhead());
                continue;
            }
            let (Some((fam, glyph)), Some(iv)) = (family(row), row.interval_bytes) else {
                continue;
            };
            let e = row.overhead();
            if !(e.lo.is_finite() && e.hi.is_finite()) {
                continue;
            }
            match p.lines.iter_mut().find(|l| l.name == fam) {
                Some(l) => l.points.push((iv, e, row.coverage_pct)),
                None => p.lines.push(Line {
                    name: fam,
                    glyph,
                    points: vec![(iv, e, row.coverage_pct)],
                }),
            }
            if !p.intervals.contains(&iv) {
                p.intervals.push(iv);
            }
        }
        p.intervals.sort_unstable();
        for l in &mut p.lines {
            l.points.sort_by_key(|x| x.0);
        }
        if !p.lines.is_empty() {
            out.push(p);
        }
    }
    out
}

/// A line's points in stretches of intervals measured side by side in its panel: a line is
/// drawn only along a stretch, never across an interval it did not measure.
fn stretches<'a>(l: &'a Line, intervals: &[u64]) -> Vec<&'a [(u64, Estimate, Option<f64>)]> {
    let at = |iv: u64| intervals.iter().position(|&x| x == iv);
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=l.points.len() {
        let joined = i < l.points.len()
            && matches!((at(l.points[i - 1].0), at(l.points[i].0)), (Some(a), Some(b)) if b == a + 1);
        if !joined {
            out.push(&l.points[start..i]);
            start = i;
        }
    }
    out
}

/// The range of the overhead axis (symlog units) that holds every interval, the placebo's and 0.
fn y_range(p: &Panel) -> (f64, f64) {
    let ends = p
        .lines
        .iter()
        .flat_map(|l| l.points.iter().flat_map(|x| [x.1.lo, x.1.hi]))
        .chain(p.placebo.iter().flat_map(|e| [e.lo, e.hi]))
        .chain([0.0, 1.0, -1.0]);
    let (lo, hi) = ends.fold((f64::MAX, f64::MIN), |(a, b), y| {
        (a.min(symlog(y)), b.max(symlog(y)))
    });
    (lo, hi)
}

// ---- the terminal ----

/// One panel as lines of characters: the overhead axis down the left, a column per profiler in
/// a slot per interval, `│` the 95% interval, the letter the median, `░` the placebo's band; under
/// it the intervals and, per unwinder, the coverage (the second axis).
fn text_panel(p: &Panel) -> Vec<String> {
    let nf = p.lines.len();
    let slot = (nf + 2).max(5);
    let (t0, t1) = y_range(p);
    // about 5 rows per decade, at most 14 rows
    let step = ((t1 - t0) / 13.0).max(0.2);
    let rows = ((t1 - t0) / step).ceil() as usize + 1;
    let row_of = |t: f64| (((t1 - t) / step).round().max(0.0) as usize).min(rows - 1);
    let width = slot * p.intervals.len();
    let mut grid = vec![vec![' '; width]; rows];
    if let Some(e) = p.placebo {
        for row in grid
            .iter_mut()
            .take(row_of(symlog(e.lo)) + 1)
            .skip(row_of(symlog(e.hi)))
        {
            row.iter_mut().for_each(|c| *c = '░');
        }
    }
    let zero = row_of(0.0);
    for c in grid[zero].iter_mut().filter(|c| **c == ' ') {
        *c = '·';
    }
    for (f, l) in p.lines.iter().enumerate() {
        for (iv, e, _) in &l.points {
            let Some(s) = p.intervals.iter().position(|x| x == iv) else {
                continue;
            };
            let col = s * slot + (slot - nf) / 2 + f;
            for row in grid
                .iter_mut()
                .take(row_of(symlog(e.lo)) + 1)
                .skip(row_of(symlog(e.hi)))
            {
                row[col] = '│';
            }
            grid[row_of(symlog(e.pct))][col] = l.glyph;
        }
    }
    // a tick label on the row nearest each tick that falls inside the range
    let mut labels = vec![String::new(); rows];
    for v in TICKS {
        let t = symlog(v);
        if t < t0 - step / 2.0 || t > t1 + step / 2.0 {
            continue;
        }
        let r = row_of(t);
        if labels[r].is_empty() {
            labels[r] = format!("{v:+.0}").replace("+0", "0");
        }
    }
    let mut out = Vec::new();
    for (r, g) in grid.iter().enumerate() {
        let axis = if labels[r].is_empty() { '│' } else { '┤' };
        out.push(format!(
            "{:>6} {axis}{}",
            labels[r],
            g.iter().collect::<String>()
        ));
    }
    out.push(format!("{:>6} └{}", "", "─".repeat(width)));
    let names: String = p
        .intervals
        .iter()
        .map(|&iv| format!("{:^slot$}", format_size(iv)))
        .collect();
    out.push(format!("{:>6}  {names}", ""));
    for l in p
        .lines
        .iter()
        .filter(|l| l.points.iter().any(|x| x.2.is_some()))
    {
        let cov: String = p
            .intervals
            .iter()
            .map(|iv| {
                let c = l.points.iter().find(|x| x.0 == *iv).and_then(|x| x.2);
                format!("{:^slot$}", c.map_or("-".into(), |c| format!("{c:.0}")))
            })
            .collect();
        out.push(format!("{:>6}  {cov}", format!("cov {}", l.glyph)));
    }
    out
}

/// The chart for the terminal: the panels side by side where `width` allows, a legend on top.
pub fn text(r: &Results, width: usize) -> Vec<String> {
    let ps = panels(r);
    if ps.is_empty() {
        return vec![];
    }
    let mut legend: Vec<(char, String)> = Vec::new();
    for l in ps.iter().flat_map(|p| &p.lines) {
        if !legend.iter().any(|x| x.0 == l.glyph) {
            legend.push((l.glyph, l.name.clone()));
        }
    }
    let legend = format!(
        "overhead % against the sampling interval (symlog axis): letter = median, │ = 95% interval, \
         ░ = the placebo's interval (A/A), cov = coverage % of the exact window; {}",
        legend
            .iter()
            .map(|(g, n)| format!("{g} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut out: Vec<String> = wrap(&legend, width, "")
        .lines()
        .map(str::to_string)
        .collect();
    let blocks: Vec<(String, Vec<String>)> = ps
        .iter()
        .map(|p| (p.workload.clone(), text_panel(p)))
        .collect();
    let block_width = |b: &(String, Vec<String>)| {
        b.1.iter()
            .chain(std::iter::once(&b.0))
            .map(|l| l.chars().count())
            .max()
            .unwrap_or(0)
    };
    let mut i = 0;
    while i < blocks.len() {
        // as many panels as fit in a row, 3 columns apart
        let mut j = i + 1;
        let mut used = block_width(&blocks[i]);
        while j < blocks.len() && used + 3 + block_width(&blocks[j]) <= width {
            used += 3 + block_width(&blocks[j]);
            j += 1;
        }
        let row = &blocks[i..j];
        let height = row.iter().map(|b| b.1.len() + 1).max().unwrap_or(0);
        out.push(String::new());
        for k in 0..height {
            let mut line = String::new();
            for (n, b) in row.iter().enumerate() {
                let cell = if k == 0 {
                    b.0.clone()
                } else {
                    b.1.get(k - 1).cloned().unwrap_or_default()
                };
                if n + 1 < row.len() {
                    let w = block_width(b);
                    line.push_str(&format!("{cell:<w$}   "));
                } else {
                    line.push_str(&cell);
                }
            }
            out.push(line.trim_end().to_string());
        }
        i = j;
    }
    out
}

// ---- SVG ----

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("cannot draw the study's chart: {e:?}")
}

fn color(glyph: char) -> RGBColor {
    match glyph {
        'd' => RGBColor(31, 119, 180),
        'f' => RGBColor(255, 127, 14),
        'g' => RGBColor(44, 160, 44),
        'u' => RGBColor(148, 103, 189),
        't' => RGBColor(140, 86, 75),
        _ => RGBColor(214, 39, 40),
    }
}

/// The chart as SVG: one panel per workload, three to a row.
pub fn svg(r: &Results) -> Result<String> {
    let ps = panels(r);
    let cols = ps.len().clamp(1, 3);
    let nrows = ps.len().div_ceil(cols).max(1);
    let (pw, ph) = (380u32, 320u32);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (pw * cols as u32, ph * nrows as u32 + 40))
            .into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (legend_area, body) = root.split_vertically(40);
        let mut x = 10;
        for (g, name) in [
            ('d', "memlens dwarf"),
            ('f', "memlens fp"),
            ('g', "memlens libgcc"),
            ('u', "memlens libunwind"),
            ('j', "jemalloc prof"),
            ('t', "tcmalloc sampler"),
        ]
        .into_iter()
        .filter(|(g, _)| ps.iter().any(|p| p.lines.iter().any(|l| l.glyph == *g)))
        {
            let c = color(g);
            legend_area
                .draw(&Rectangle::new([(x, 14), (x + 22, 18)], c.filled()))
                .map_err(err)?;
            legend_area
                .draw(&Text::new(name, (x + 28, 8), ("sans-serif", 13)))
                .map_err(err)?;
            x += 40 + 8 * name.len() as i32;
        }
        legend_area
            .draw(&Rectangle::new(
                [(x, 10), (x + 22, 22)],
                RGBColor(200, 200, 200).filled(),
            ))
            .map_err(err)?;
        legend_area
            .draw(&Text::new("placebo (A/A)", (x + 28, 8), ("sans-serif", 13)))
            .map_err(err)?;
        x += 150;
        legend_area
            .draw(&PathElement::new(
                vec![(x, 16), (x + 22, 16)],
                BLACK.stroke_width(1),
            ))
            .map_err(err)?;
        legend_area
            .draw(&Text::new(
                "coverage % (right axis, dashed)",
                (x + 28, 8),
                ("sans-serif", 13),
            ))
            .map_err(err)?;
        let areas = body.split_evenly((nrows, cols));
        for (p, area) in ps.iter().zip(areas) {
            draw_panel(p, &area)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The label of an overhead tick (a symlog value).
fn tick_label(t: f64) -> String {
    let v = t.signum() * (10f64.powf(t.abs()) - 1.0);
    format!("{v:+.0}%").replace("+0%", "0%")
}

fn draw_panel<DB: DrawingBackend>(
    p: &Panel,
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<()> {
    let lg = |iv: u64| (iv as f64).log2();
    let x0 = lg(*p.intervals.first().unwrap_or(&65536)) - 0.4;
    let x1 = lg(*p.intervals.last().unwrap_or(&65536)) + 0.4;
    let (t0, t1) = y_range(p);
    let pad = (t1 - t0) * 0.05;
    let (y0, y1) = (t0 - pad, t1 + pad);
    let ticks: Vec<f64> = TICKS
        .iter()
        .map(|&v| symlog(v))
        .filter(|t| (y0..=y1).contains(t))
        .collect();
    let xs: Vec<f64> = p.intervals.iter().map(|&i| lg(i)).collect();
    let mut chart = ChartBuilder::on(area)
        .caption(&p.workload, ("sans-serif", 16))
        .margin(8)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .right_y_label_area_size(52)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(err)?
        .set_secondary_coord(x0..x1, 0f64..105f64);
    // x: a label at each interval measured; y: none of plotters' own (evenly spaced in symlog
    // units they would read +2.2%), ours at the ticks below
    chart
        .configure_mesh()
        .disable_y_mesh()
        .max_light_lines(0)
        .x_labels(12)
        .x_label_formatter(&|v| {
            let iv = 2f64.powf(v.round()) as u64;
            let near = (v - v.round()).abs() < 0.01;
            if near && xs.contains(&v.round()) {
                format_size(iv)
            } else {
                String::new()
            }
        })
        .y_labels(0)
        .x_desc("sampling interval")
        .y_desc("overhead %")
        .draw()
        .map_err(err)?;
    chart
        .configure_secondary_axes()
        .y_desc("coverage %")
        .y_labels(6)
        .y_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(err)?;
    // the overhead axis's grid: a line at each tick, 0 in black
    let grid = RGBColor(225, 225, 225);
    for t in ticks {
        let style = if t == 0.0 {
            BLACK.stroke_width(1)
        } else {
            grid.stroke_width(1)
        };
        let line = PathElement::new(vec![(x0, t), (x1, t)], style);
        chart.draw_series(std::iter::once(line)).map_err(err)?;
        // its label left of the plot, in the label area
        let (px, py) = chart.backend_coord(&(x0, t));
        let base = area.get_base_pixel();
        let font = ("sans-serif", 12).into_font().color(&RGBColor(60, 60, 60));
        let style = font.pos(Pos::new(HPos::Right, VPos::Center));
        let at = (px - base.0 - 5, py - base.1);
        area.draw(&Text::new(tick_label(t), at, style))
            .map_err(err)?;
    }
    if let Some(e) = p.placebo {
        let (a, b) = (symlog(e.lo), symlog(e.hi));
        let band = Rectangle::new(
            [(x0, a), (x1, b)],
            RGBColor(200, 200, 200).mix(0.5).filled(),
        );
        chart.draw_series(std::iter::once(band)).map_err(err)?;
    }
    for l in &p.lines {
        draw_line(&mut chart, l, &p.intervals)?;
    }
    Ok(())
}

/// A panel's chart: the overhead (symlog) on the left, the coverage on the right.
type Chart<'a, DB> = DualCoordChartContext<
    'a,
    DB,
    Cartesian2d<RangedCoordf64, RangedCoordf64>,
    Cartesian2d<RangedCoordf64, RangedCoordf64>,
>;

/// One profiler's line: along each stretch of intervals measured side by side, its 95% band, the
/// medians joined and the coverage dashed; an interval alone, its interval as a bar.
fn draw_line<DB: DrawingBackend>(chart: &mut Chart<DB>, l: &Line, intervals: &[u64]) -> Result<()> {
    let lg = |iv: u64| (iv as f64).log2();
    let c = color(l.glyph);
    for st in stretches(l, intervals) {
        let at = |(iv, e, _): &(u64, Estimate, Option<f64>), y: fn(&Estimate) -> f64| {
            (lg(*iv), symlog(y(e)))
        };
        let band: Vec<(f64, f64)> = st
            .iter()
            .map(|x| at(x, |e| e.hi))
            .chain(st.iter().rev().map(|x| at(x, |e| e.lo)))
            .collect();
        if st.len() > 1 {
            let poly = Polygon::new(band, c.mix(0.18).filled());
            chart.draw_series(std::iter::once(poly)).map_err(err)?;
        } else {
            let bar = PathElement::new(band, c.stroke_width(2));
            chart.draw_series(std::iter::once(bar)).map_err(err)?;
        }
        let pts: Vec<(f64, f64)> = st.iter().map(|x| at(x, |e| e.pct)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(err)?;
        chart
            .draw_series(pts.iter().map(|p| Circle::new(*p, 3, c.filled())))
            .map_err(err)?;
        let cov: Vec<(f64, f64)> = st
            .iter()
            .filter_map(|(iv, _, c)| Some((lg(*iv), (*c)?)))
            .collect();
        if cov.len() > 1 {
            chart
                .draw_secondary_series(DashedLineSeries::new(cov, 5, 4, c.stroke_width(1)))
                .map_err(err)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symlog_is_linear_near_zero_and_logarithmic_beyond() {
        assert_eq!(symlog(0.0), 0.0);
        assert!((symlog(9.0) - 1.0).abs() < 1e-12);
        assert!((symlog(-99.0) + 2.0).abs() < 1e-12);
        assert!(symlog(0.5) > 0.0 && symlog(-0.5) < 0.0);
        for v in TICKS {
            assert_eq!(
                tick_label(symlog(v)),
                format!("{v:+.0}%").replace("+0%", "0%")
            );
        }
    }

    /// A line breaks where its profiler skipped an interval of the panel.
    #[test]
    fn a_line_joins_only_intervals_measured_side_by_side() {
        let e = Estimate {
            pct: 1.0,
            lo: 0.0,
            hi: 2.0,
            n: 4,
        };
        let l = Line {
            name: "memlens fp".into(),
            glyph: 'f',
            points: [1u64, 2, 4, 5, 7].iter().map(|&i| (i, e, None)).collect(),
        };
        let got: Vec<Vec<u64>> = stretches(&l, &[1, 2, 3, 4, 5, 6, 7])
            .iter()
            .map(|s| s.iter().map(|x| x.0).collect())
            .collect();
        assert_eq!(got, [vec![1, 2], vec![4, 5], vec![7]]);
        assert_eq!(stretches(&l, &[1, 2, 4, 5, 7]).len(), 1);
    }
}
