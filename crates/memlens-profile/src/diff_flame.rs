//! `memlens diff --flamegraph` and `--html`: the differential flame graph of two profiles, drawn by
//! inferno (its `differential` merge of two folded profiles, then its flame graph of two-count
//! lines), and the HTML page that shows it beside the tables.
//!
//! A differential flame graph is sized by one profile and coloured by the difference: red where
//! NEW has more than BASE (growth), blue where it has less (shrinkage), the deeper the colour the
//! larger the change relative to the largest one. Sized by NEW (the SVG, and first in the HTML), a
//! stack that vanished has no width; the HTML therefore adds the same graph sized by BASE, in the
//! same colours (inferno's negated differentials), where what shrank or vanished is seen.
use crate::agg::{fmt_value, pct, share};
use crate::compared::Compared;
use crate::model::SampleIndex;
use anyhow::{bail, Context, Result};
use memlens_render::doc::{Document, Section, Table};
use std::path::Path;

/// Which profile sizes the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizedBy {
    /// NEW: what is there now, coloured by how it changed.
    New,
    /// BASE: what was there before, so what shrank or vanished keeps its width.
    Base,
}

/// Folded stacks (`root;…;leaf value`) of one side of a comparison.
fn folded_side(c: &Compared, side: usize) -> Result<Vec<u8>> {
    let mut text = Vec::new();
    let stacks = c.stacks.iter().map(|d| {
        let v = if side == 0 { d.base } else { d.new };
        (c.ids_of(d), v.max(0.0))
    });
    crate::present::folded(&c.frames, stacks, &mut text)?;
    Ok(text)
}

/// The differential flame graph of a comparison as an SVG document; `scripts`: with inferno's
/// JavaScript (search, zoom) for a file of its own — not inside our HTML pages, which run no
/// scripts (and two graphs' scripts on one page would act on each other's elements); a frame's
/// figures show on hover either way.
pub fn differential_svg(
    c: &Compared,
    idx: SampleIndex,
    by: SizedBy,
    scripts: bool,
) -> Result<String> {
    let (base, new) = (folded_side(c, 0)?, folded_side(c, 1)?);
    // inferno sizes by the second column and colours by second − first: swapping the sides sizes
    // by BASE, and negating keeps red for growth
    let (first, second) = match by {
        SizedBy::New => (&base, &new),
        SizedBy::Base => (&new, &base),
    };
    if second.is_empty() {
        bail!(
            "cannot draw a differential flame graph: the {} profile has no {} values",
            if by == SizedBy::New { "new" } else { "base" },
            idx.name()
        );
    }
    let mut merged = Vec::new();
    inferno::differential::from_readers(
        inferno::differential::Options::default(),
        first.as_slice(),
        second.as_slice(),
        &mut merged,
    )
    .context("cannot merge the two profiles' stacks")?;
    let mut opt = inferno::flamegraph::Options::default();
    opt.title = match by {
        SizedBy::New => format!("memlens diff: {} (sized by NEW)", idx.name()),
        SizedBy::Base => format!("memlens diff: {} (sized by BASE)", idx.name()),
    };
    opt.subtitle = Some("red: grew from BASE to NEW, blue: shrank".into());
    opt.count_name = idx.unit().to_string();
    opt.negate_differentials = by == SizedBy::Base;
    opt.no_javascript = !scripts;
    let mut svg = Vec::new();
    let text = String::from_utf8_lossy(&merged);
    inferno::flamegraph::from_lines(&mut opt, text.lines(), &mut svg)
        .context("cannot draw the differential flame graph")?;
    Ok(String::from_utf8_lossy(&svg).into_owned())
}

/// Write the differential flame graph (sized by NEW) to `out`.
pub fn write_svg(c: &Compared, idx: SampleIndex, out: &Path) -> Result<()> {
    let svg = differential_svg(c, idx, SizedBy::New, true)?;
    std::fs::write(out, svg).with_context(|| format!("cannot write {}", out.display()))?;
    eprintln!(
        "memlens: differential flame graph written to {} (red: grew, blue: shrank)",
        out.display()
    );
    Ok(())
}

/// The page of `memlens diff --html`: the totals, both differential flame graphs, and the
/// functions and stacks that grew and shrank most.
pub fn html(c: &Compared, idx: SampleIndex, top: usize, base: &Path, new: &Path) -> Result<String> {
    let v = |x: f64| fmt_value(x, idx, false);
    let dv = |x: f64| fmt_value(x, idx, true);
    let total = |side: usize| c.sides[side].profile.total(idx);
    let mut doc = Document::new(format!(
        "memlens diff: {} → {}",
        base.display(),
        new.display()
    ));
    doc.verdict.push(format!(
        "{}: base {}, new {}, change {} ({})",
        idx.name(),
        v(total(0)),
        v(total(1)),
        dv(total(1) - total(0)),
        pct(share(total(1) - total(0), total(0)))
    ));
    let graph = |by: SizedBy, note: &str| -> Result<Section> {
        let s = Section::new(match by {
            SizedBy::New => "Differential flame graph, sized by NEW",
            SizedBy::Base => "Differential flame graph, sized by BASE",
        })
        .note(note);
        Ok(match differential_svg(c, idx, by, false) {
            Ok(svg) => s.plot(svg),
            Err(e) => s.note(format!("{e:#}")),
        })
    };
    doc.sections.push(graph(
        SizedBy::New,
        "Each frame is as wide as its bytes in NEW; red where it grew from BASE, blue where it \
         shrank (deeper: a larger change). Hover a frame for its figures.",
    )?);
    doc.sections.push(graph(
        SizedBy::Base,
        "The same, as wide as in BASE: what shrank or vanished keeps its width here.",
    )?);
    let grew = c.functions.iter().filter(|f| f.flat_delta > 0.0).take(top);
    let rows = grew
        .map(|f| {
            vec![
                crate::names::short_name(&f.function),
                dv(f.flat_delta),
                v(f.flat_base),
                v(f.flat_new),
                dv(f.cum_delta),
            ]
        })
        .collect();
    doc.sections.push(
        Section::new("Functions that grew most").table(Table::simple(
            &["function", "flat Δ", "base", "new", "cum Δ"],
            rows,
        )),
    );
    for (heading, grew) in [
        ("Stacks that grew most", true),
        ("Stacks that shrank most", false),
    ] {
        let mut list: Vec<_> = c
            .stacks
            .iter()
            .filter(|d| if grew { d.delta > 0.0 } else { d.delta < 0.0 })
            .collect();
        if !grew {
            list.reverse();
        }
        let rows = list
            .iter()
            .take(top)
            .map(|d| {
                vec![
                    crate::present::stack_cell(&c.frames_of(d), 6).replace('\n', " ← "),
                    dv(d.delta),
                    v(d.base),
                    v(d.new),
                ]
            })
            .collect();
        doc.sections
            .push(Section::new(heading).table(Table::simple(&["stack", "Δ", "base", "new"], rows)));
    }
    Ok(doc.to_html())
}
