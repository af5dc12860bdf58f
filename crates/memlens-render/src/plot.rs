//! SVG charts (plotters, SVG backend, no system fonts needed).
use anyhow::{anyhow, Result};
use plotters::prelude::*;

/// One line of a [`LineChart`].
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend entry.
    pub name: String,
    /// (x, y) points in drawing order.
    pub points: Vec<(f64, f64)>,
    /// Draw dashed (for reference lines such as "ideal scaling" or published figures).
    pub dashed: bool,
}

#[derive(Debug, Clone, Default)]
/// A line chart of one or more series, optionally on log axes.
pub struct LineChart {
    /// Chart title.
    pub title: String,
    /// X axis label.
    pub x_label: String,
    /// Y axis label.
    pub y_label: String,
    /// Logarithmic x axis.
    pub log_x: bool,
    /// Logarithmic y axis.
    pub log_y: bool,
    /// The lines.
    pub series: Vec<Series>,
    /// Vertical markers, e.g. cache sizes: (x, label).
    pub markers: Vec<(f64, String)>,
}

/// Grouped bars: one group per category, one bar per series.
#[derive(Debug, Clone, Default)]
pub struct BarChart {
    /// Chart title.
    pub title: String,
    /// Y axis label.
    pub y_label: String,
    /// The groups along the x axis.
    pub categories: Vec<String>,
    /// (legend entry, one value per category); NaN = no bar.
    pub series: Vec<(String, Vec<f64>)>,
}

const W: u32 = 900;
const H: u32 = 520;

fn color(i: usize) -> RGBColor {
    const P: [RGBColor; 10] = [
        RGBColor(31, 119, 180),
        RGBColor(255, 127, 14),
        RGBColor(44, 160, 44),
        RGBColor(214, 39, 40),
        RGBColor(148, 103, 189),
        RGBColor(140, 86, 75),
        RGBColor(227, 119, 194),
        RGBColor(127, 127, 127),
        RGBColor(188, 189, 34),
        RGBColor(23, 190, 207),
    ];
    P[i % P.len()]
}

fn err<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow!("cannot draw chart: {e:?}")
}

/// Axis label: compact SI form (`10M`, `2.5k`, `0.5`) instead of `10000000.0`.
fn compact(v: f64) -> String {
    let trim = |x: f64| {
        let s = format!("{x:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    };
    let a = v.abs();
    if a >= 1e9 {
        format!("{}G", trim(v / 1e9))
    } else if a >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if a >= 1e4 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

/// Label of a log axis: only at 1, 2 and 5 times a power of ten (the other key points keep their
/// grid line but no text), so a log axis reads 1, 2, 5, 10, 20, 50… instead of only 10 and 100.
fn log_label(v: f64) -> String {
    if !(v.is_finite() && v > 0.0) {
        return String::new();
    }
    let mantissa = v / 10f64.powf(v.log10().floor());
    if [1.0, 2.0, 5.0, 10.0]
        .iter()
        .any(|m| (mantissa - m).abs() < 1e-6)
    {
        compact(v)
    } else {
        String::new()
    }
}

/// Key points to ask of a log axis over [lo, hi]: ten per decade makes plotters place one at every
/// 1…9 × 10^k (fewer gives only the powers of ten, a hundred or more per decade a grey smear).
fn log_key_points(lo: f64, hi: f64) -> usize {
    10 * ((hi / lo).log10().floor().max(1.0) as usize)
}

/// Label of an axis of counts: whole numbers only.
fn integer_label(v: f64) -> String {
    if v.fract().abs() < 1e-9 {
        compact(v)
    } else {
        String::new()
    }
}

/// How a legend entry is drawn.
#[derive(Clone, Copy)]
enum Swatch {
    Line,
    Dashed,
    Bar,
}

/// Width of the legend column for these names: it sits right of the plot, so it never covers data.
fn legend_width<'a>(names: impl Iterator<Item = &'a str>) -> u32 {
    let longest = names.map(|n| n.chars().count()).max().unwrap_or(0) as u32;
    (40 + longest * 7).clamp(90, 280)
}

/// The legend, one entry per line, in its own area beside the plot.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: &[(String, RGBColor, Swatch)],
) -> Result<()> {
    let font = ("sans-serif", 13).into_font();
    for (i, (name, col, kind)) in entries.iter().enumerate() {
        let y = 60 + 20 * i as i32;
        let style = ShapeStyle::from(col).stroke_width(2);
        match kind {
            Swatch::Line => area
                .draw(&PathElement::new(vec![(6, y), (26, y)], style))
                .map_err(err)?,
            Swatch::Dashed => {
                for x in [6, 16] {
                    area.draw(&PathElement::new(vec![(x, y), (x + 6, y)], style))
                        .map_err(err)?;
                }
            }
            Swatch::Bar => area
                .draw(&Rectangle::new([(8, y - 5), (22, y + 5)], col.filled()))
                .map_err(err)?,
        }
        area.draw(&Text::new(name.clone(), (32, y - 7), font.clone()))
            .map_err(err)?;
    }
    Ok(())
}

/// Axis range of `vals`; a linear axis starts at zero when `from_zero` (values compared to a baseline
/// read better from zero), log axes get a margin on both sides.
fn range(vals: impl Iterator<Item = f64>, log: bool, from_zero: bool) -> (f64, f64) {
    let v: Vec<f64> = vals
        .filter(|x| x.is_finite() && (!log || *x > 0.0))
        .collect();
    let (mut lo, mut hi) = v
        .iter()
        .fold((f64::MAX, f64::MIN), |(a, b), &x| (a.min(x), b.max(x)));
    if v.is_empty() {
        return (if log { 1.0 } else { 0.0 }, 1.0);
    }
    if log {
        return (lo / 1.5, hi * 1.5);
    }
    if from_zero && lo > 0.0 {
        lo = 0.0;
    }
    if hi <= lo {
        hi = lo + 1.0;
    }
    (lo, hi + (hi - lo) * 0.05)
}

/// Render a line chart to an SVG string.
pub fn line_chart(c: &LineChart) -> Result<String> {
    line_chart_with_ranges(c, &[])
}

/// A spread drawn on a [`LineChart`]: a vertical bar with caps from `low` to `high` at `x`, in the
/// colour of series `series` (e.g. min–max over repeats around a median), so that two lines whose
/// bars overlap read as what they are: not told apart.
#[derive(Debug, Clone, Copy)]
pub struct Range {
    /// Index of the series it belongs to.
    pub series: usize,
    /// Where along x.
    pub x: f64,
    /// Bottom of the bar.
    pub low: f64,
    /// Top of the bar.
    pub high: f64,
}

/// [`line_chart`] with spread bars.
pub fn line_chart_with_ranges(c: &LineChart, ranges: &[Range]) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (plot, legend) =
            root.split_horizontally(W - legend_width(c.series.iter().map(|s| s.name.as_str())));
        let entries: Vec<(String, RGBColor, Swatch)> = c
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let kind = if s.dashed {
                    Swatch::Dashed
                } else {
                    Swatch::Line
                };
                (s.name.clone(), color(i), kind)
            })
            .collect();
        draw_legend(&legend, &entries)?;
        let xs = c
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .chain(c.markers.iter().map(|m| m.0));
        let ys = c
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .chain(ranges.iter().flat_map(|r| [r.low, r.high]));
        let integral_x = c
            .series
            .iter()
            .flat_map(|s| s.points.iter())
            .all(|p| p.0.fract() == 0.0);
        let (mut x0, x1) = range(xs, c.log_x, false);
        if !ranges.is_empty() && !c.log_x {
            x0 -= (x1 - x0) * 0.04; // room for the first point's bar beside the axis
        }
        let (y0, y1) = range(ys, c.log_y, true);
        let mut b = ChartBuilder::on(&plot);
        b.caption(&c.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70);
        // The four axis combinations have different coordinate types, so each is drawn by the same
        // generic body.
        macro_rules! draw {
            ($chart:expr) => {{
                let mut chart = $chart;
                let label = |log: bool| if log { log_label } else { compact };
                let (fx, fy) = (label(c.log_x), label(c.log_y));
                // Counts (threads) on a linear x axis: no label at 1.1, 1.2…
                let fx = if !c.log_x && integral_x {
                    integer_label
                } else {
                    fx
                };
                let (fx, fy) = (move |v: &f64| fx(*v), move |v: &f64| fy(*v));
                let mut mesh = chart.configure_mesh();
                mesh.x_desc(&c.x_label)
                    .y_desc(&c.y_label)
                    .x_label_formatter(&fx)
                    .y_label_formatter(&fy);
                if c.log_x {
                    mesh.x_labels(log_key_points(x0, x1));
                }
                if c.log_y {
                    mesh.y_labels(log_key_points(y0, y1));
                }
                mesh.draw().map_err(err)?;
                draw_content(&mut chart, c, ranges, (x0, x1), (y0, y1))?;
            }};
        }
        match (c.log_x, c.log_y) {
            (false, false) => draw!(b.build_cartesian_2d(x0..x1, y0..y1).map_err(err)?),
            (true, false) => draw!(b
                .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
                .map_err(err)?),
            (false, true) => draw!(b
                .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
                .map_err(err)?),
            (true, true) => draw!(b
                .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
                .map_err(err)?),
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

/// The markers, spread bars and lines of a line chart, on any of its four axis kinds.
fn draw_content<DB: DrawingBackend, X, Y>(
    chart: &mut ChartContext<'_, DB, Cartesian2d<X, Y>>,
    c: &LineChart,
    ranges: &[Range],
    (x0, x1): (f64, f64),
    (y0, y1): (f64, f64),
) -> Result<()>
where
    X: Ranged<ValueType = f64>,
    Y: Ranged<ValueType = f64>,
{
    for (x, label) in &c.markers {
        let style = ShapeStyle::from(&RGBColor(160, 160, 160)).stroke_width(1);
        chart
            .draw_series(std::iter::once(PathElement::new(
                vec![(*x, y0), (*x, y1)],
                style,
            )))
            .map_err(err)?;
        chart
            .draw_series(std::iter::once(Text::new(
                label.clone(),
                (*x, y1),
                ("sans-serif", 12).into_font(),
            )))
            .map_err(err)?;
    }
    // spreads under the lines, the bars of series at one x side by side, not over each other
    let (cap, n) = ((x1 - x0) * 0.008, c.series.len().max(1) as f64);
    for r in ranges
        .iter()
        .filter(|r| r.low.is_finite() && r.high.is_finite())
    {
        let style = ShapeStyle::from(&color(r.series)).stroke_width(1);
        let (lo, hi) = (r.low.max(y0), r.high.min(y1));
        let dodge = if c.log_x {
            0.0
        } else {
            (r.series as f64 - (n - 1.0) / 2.0) * cap * 1.5
        };
        let x = r.x + dodge;
        let caps = [
            vec![(x, lo), (x, hi)],
            vec![(x - cap, lo), (x + cap, lo)],
            vec![(x - cap, hi), (x + cap, hi)],
        ];
        chart
            .draw_series(caps.into_iter().map(|p| PathElement::new(p, style)))
            .map_err(err)?;
    }
    for (i, s) in c.series.iter().enumerate() {
        let col = color(i);
        let pts: Vec<(f64, f64)> = s
            .points
            .iter()
            .copied()
            .filter(|p| p.0.is_finite() && p.1.is_finite())
            .collect();
        let style = ShapeStyle::from(&col).stroke_width(if s.dashed { 1 } else { 2 });
        if s.dashed {
            chart
                .draw_series(DashedLineSeries::new(pts, 6, 4, style))
                .map_err(err)?;
        } else {
            chart
                .draw_series(LineSeries::new(pts.clone(), style))
                .map_err(err)?;
            chart
                .draw_series(pts.iter().map(|p| Circle::new(*p, 3, col.filled())))
                .map_err(err)?;
        }
    }
    Ok(())
}

/// Render grouped bars to an SVG string.
pub fn bar_chart(c: &BarChart) -> Result<String> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (W, H)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let (plot, legend) =
            root.split_horizontally(W - legend_width(c.series.iter().map(|s| s.0.as_str())));
        let entries: Vec<(String, RGBColor, Swatch)> = c
            .series
            .iter()
            .enumerate()
            .map(|(i, s)| (s.0.clone(), color(i), Swatch::Bar))
            .collect();
        draw_legend(&legend, &entries)?;
        let ncat = c.categories.len().max(1);
        let nser = c.series.len().max(1);
        let (_, ymax) = range(
            c.series.iter().flat_map(|s| s.1.iter().copied()),
            false,
            true,
        );
        let mut chart = ChartBuilder::on(&plot)
            .caption(&c.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..ncat as f64, 0f64..ymax)
            .map_err(err)?;
        let cats = c.categories.clone();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_labels(ncat * 2 + 1)
            .x_label_formatter(&move |x| {
                let i = x.floor() as usize;
                if (x - x.floor() - 0.5).abs() < 0.26 {
                    cats.get(i).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .y_desc(&c.y_label)
            .draw()
            .map_err(err)?;
        let w = 0.8 / nser as f64;
        for (si, (_, vals)) in c.series.iter().enumerate() {
            let col = color(si);
            chart
                .draw_series(vals.iter().enumerate().filter(|(_, v)| v.is_finite()).map(
                    |(ci, v)| {
                        let x = ci as f64 + 0.1 + si as f64 * w;
                        Rectangle::new([(x, 0.0), (x + w * 0.9, *v)], col.filled())
                    },
                ))
                .map_err(err)?;
        }
        root.present().map_err(err)?;
    }
    Ok(svg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_render_svg_with_labels() {
        let c = LineChart {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log_x: true,
            log_y: false,
            series: vec![Series {
                name: "alpha".into(),
                points: vec![(1.0, 2.0), (10.0, 3.0)],
                dashed: false,
            }],
            markers: vec![(4.0, "L1".into())],
        };
        let s = line_chart(&c).unwrap();
        assert!(s.starts_with("<svg") && s.contains("alpha") && s.contains("L1"));
        let b = BarChart {
            title: "b".into(),
            y_label: "GB/s".into(),
            categories: vec!["copy".into(), "triad".into()],
            series: vec![("1 thread".into(), vec![1.0, 2.0])],
        };
        let s = bar_chart(&b).unwrap();
        assert!(s.contains("1 thread"));
        assert_eq!(compact(10_000_000.0), "10M");
        assert_eq!(compact(2500.0), "2500");
        assert_eq!(compact(65536.0), "65.54k");
        assert_eq!(compact(0.5), "0.5");
    }
}
