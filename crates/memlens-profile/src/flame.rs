//! Flame graphs, drawn by inferno from folded stacks (`root;…;leaf value` lines): the
//! `--flamegraph` SVG files and the interactive graphs of `report --html` (inferno's own script
//! zooms on a click and searches). The one place inferno's options are set.
use anyhow::{Context, Result};
use std::path::Path;

/// How a flame graph is drawn.
#[derive(Debug, Clone, Default)]
pub(crate) struct Style {
    /// The title drawn above the frames.
    pub title: String,
    /// What a frame's value counts (`bytes`).
    pub count: String,
    /// A fixed width in pixels (the page's graphs: drawn while hidden in a tab); None: as wide as
    /// the window.
    pub width: Option<usize>,
    /// The memory palette (greens and blues) rather than the default reds and yellows.
    pub memory_colors: bool,
}

/// The SVG of folded stacks `text` (an error when there is nothing to draw).
pub(crate) fn svg(text: &[u8], style: &Style) -> Result<String> {
    use inferno::flamegraph::{color, Options};
    if text.is_empty() {
        anyhow::bail!("nothing to draw");
    }
    let mut opt = Options::default();
    opt.title = style.title.clone();
    opt.count_name = style.count.clone();
    opt.image_width = style.width;
    if style.memory_colors {
        opt.colors = color::Palette::Basic(color::BasicPalette::Mem);
        opt.hash = true;
    }
    let mut out = Vec::new();
    let text = String::from_utf8_lossy(text);
    inferno::flamegraph::from_lines(&mut opt, text.lines(), &mut out)
        .context("cannot draw the flame graph")?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// [`svg`] written to `out`, said on stderr.
pub(crate) fn write(text: &[u8], style: &Style, out: &Path) -> Result<()> {
    let s =
        svg(text, style).with_context(|| format!("cannot draw flamegraph {}", out.display()))?;
    std::fs::write(out, s).with_context(|| format!("cannot write {}", out.display()))?;
    eprintln!("memlens: flamegraph written to {}", out.display());
    Ok(())
}
