//! One document per measuring command: a verdict, then sections of notes, tables and plots. The
//! command builds it once and hands it over; [`Document::to_text`] renders it for the terminal
//! (fitted to a width: paragraphs wrapped, wide tables split by topic) and [`Document::to_html`]
//! for a self-contained page that opens with the verdict. The rows behind the tables go to CSV and
//! JSON as plain serialisable structs ([`crate::output::write_csv_rows`]).
use crate::html::escape;
use comfy_table::{presets::UTF8_BORDERS_ONLY, Cell, CellAlignment, ContentArrangement};
use std::fmt::Write;

/// The terminal width output is fitted to: `COLUMNS` if set, else the width of the terminal on
/// stdout, else 120 (output piped into a file or another program).
pub fn terminal_width() -> usize {
    if let Some(w) = std::env::var("COLUMNS")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|&w| w > 0)
    {
        return w;
    }
    // SAFETY: TIOCGWINSZ fills a winsize we own; a failed call leaves it zeroed.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    if unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) } == 0 && ws.ws_col > 0
    {
        return ws.ws_col as usize;
    }
    120
}

/// A column of a `Table`: its header and the topic it belongs to. Key columns name the row and
/// are repeated in every part when a wide table is split.
#[derive(Debug, Clone)]
pub(crate) struct Column {
    /// Header text.
    pub name: String,
    /// Columns of one topic stay together when a table is split.
    pub topic: String,
    /// Identifies the row (repeated in every part of a split table).
    pub key: bool,
}

/// A table: columns in order of importance (the first parts to be shown when it is split), and
/// rows of already formatted cells.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// The columns, key columns first.
    pub(crate) columns: Vec<Column>,
    /// One formatted cell per column.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// A table whose first columns, named `keys`, identify each row.
    pub fn new(keys: &[&str]) -> Table {
        Table {
            columns: keys
                .iter()
                .map(|k| Column {
                    name: k.to_string(),
                    topic: String::new(),
                    key: true,
                })
                .collect(),
            rows: Vec::new(),
        }
    }

    /// Append the columns of one topic (kept together when the table is split).
    pub fn topic(mut self, topic: &str, names: &[&str]) -> Table {
        self.columns.extend(names.iter().map(|n| Column {
            name: n.to_string(),
            topic: topic.to_string(),
            key: false,
        }));
        self
    }

    /// A table from a header and rows: the first column is the key, the rest one topic each.
    pub fn simple<S: AsRef<str>>(header: &[S], rows: Vec<Vec<String>>) -> Table {
        let mut t = Table::new(
            &header[..1.min(header.len())]
                .iter()
                .map(|s| s.as_ref())
                .collect::<Vec<_>>(),
        );
        for h in header.iter().skip(1) {
            t = t.topic(h.as_ref(), &[h.as_ref()]);
        }
        t.rows = rows;
        t
    }

    /// Append a row (one cell per column).
    pub fn push(&mut self, row: Vec<String>) {
        debug_assert_eq!(row.len(), self.columns.len(), "one cell per column");
        self.rows.push(row);
    }

    /// The header texts.
    pub fn header(&self) -> Vec<String> {
        self.columns.iter().map(|c| c.name.clone()).collect()
    }

    /// The table as text no wider than `width` columns where it can be: whole if it fits, else
    /// split into parts of whole topics, each repeating the key columns; a part that still does
    /// not fit has its cells wrapped.
    pub fn to_text(&self, width: usize) -> String {
        let all: Vec<usize> = (0..self.columns.len()).collect();
        if let Some(whole) = self.fitted(&all, width) {
            return whole;
        }
        let keys: Vec<usize> = all
            .iter()
            .copied()
            .filter(|&i| self.columns[i].key)
            .collect();
        let mut topics: Vec<(String, Vec<usize>)> = Vec::new();
        for i in all.iter().copied().filter(|&i| !self.columns[i].key) {
            let t = &self.columns[i].topic;
            match topics.iter_mut().find(|(name, _)| name == t) {
                Some((_, v)) => v.push(i),
                None => topics.push((t.clone(), vec![i])),
            }
        }
        let fits = |cols: &[usize]| {
            let v: Vec<usize> = keys.iter().chain(cols).copied().collect();
            text_width(&self.render(&v, None)) <= width
        };
        let mut parts: Vec<(Vec<String>, Vec<usize>)> = Vec::new();
        for (name, cols) in topics {
            match parts.last_mut() {
                Some((names, cur)) if fits(&[cur.as_slice(), &cols].concat()) => {
                    cur.extend(cols);
                    names.push(name);
                }
                _ => parts.push((vec![name], cols)),
            }
        }
        let mut out = String::new();
        for (n, (names, cols)) in parts.iter().enumerate() {
            let v: Vec<usize> = keys.iter().chain(cols).copied().collect();
            if n > 0 {
                let names: Vec<&str> = names
                    .iter()
                    .map(String::as_str)
                    .filter(|s| !s.is_empty())
                    .collect();
                let _ = writeln!(out, "\n(continued: {})", names.join(", "));
            }
            let part = self.fitted(&v, width);
            out.push_str(&part.unwrap_or_else(|| self.render(&v, Some(width))));
        }
        out
    }

    /// Columns `cols` rendered no wider than `width`, the widest text columns (names, stacks)
    /// wrapped at word and `::` boundaries, never inside a name; None when that cannot be done
    /// without a text column narrower than 16.
    fn fitted(&self, cols: &[usize], width: usize) -> Option<String> {
        let mut t = self.clone();
        for _ in 0..cols.len() {
            let text = t.render(cols, None);
            let over = text_width(&text).saturating_sub(width);
            if over == 0 {
                return Some(text);
            }
            let widest = |i: usize| t.rows.iter().map(|r| text_width(&r[i])).max().unwrap_or(0);
            let Some(&c) = cols
                .iter()
                .filter(|&&i| t.rows.iter().any(|r| !is_numeric(&r[i])))
                .max_by_key(|&&i| widest(i))
            else {
                break;
            };
            let to = widest(c)
                .saturating_sub(over)
                .max(t.columns[c].name.chars().count());
            if to < 16 || to >= widest(c) {
                break;
            }
            for r in &mut t.rows {
                r[c] = wrap_words(&r[c], to);
            }
        }
        let text = t.render(cols, None);
        (text_width(&text) <= width).then_some(text)
    }

    fn render(&self, cols: &[usize], wrap_at: Option<usize>) -> String {
        let mut t = comfy_table::Table::new();
        t.load_preset(UTF8_BORDERS_ONLY);
        match wrap_at {
            Some(w) => {
                t.set_content_arrangement(ContentArrangement::Dynamic)
                    .set_width(w.min(u16::MAX as usize) as u16);
            }
            None => {
                t.set_content_arrangement(ContentArrangement::Disabled);
            }
        }
        t.set_header(cols.iter().map(|&i| Cell::new(&self.columns[i].name)));
        for r in &self.rows {
            t.add_row(cols.iter().map(|&i| {
                let c = r.get(i).map(String::as_str).unwrap_or("");
                Cell::new(c).set_alignment(if is_numeric(c) {
                    CellAlignment::Right
                } else {
                    CellAlignment::Left
                })
            }));
        }
        t.to_string()
    }
}

/// Numbers (and missing-value marks) are right-aligned; text is left-aligned.
fn is_numeric(c: &str) -> bool {
    c.starts_with(NOT_MEASURED)
        || c == NOT_APPLICABLE
        || c.starts_with('<')
        || c.trim_start_matches(['+', '-', '±'])
            .chars()
            .next()
            .is_some_and(|ch| ch.is_ascii_digit())
}

/// The widest line of `s`, in characters (every character memlens prints is one column wide).
pub fn text_width(s: &str) -> usize {
    s.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

/// Each line of `text` wrapped to `width` columns at spaces and after `::` (a C++ or Rust name
/// breaks between its parts, never inside one), continuation lines indented by two; a part
/// longer than a line keeps its end, the most specific part of a name, after `…`.
pub fn wrap_words(text: &str, width: usize) -> String {
    let width = width.max(8);
    let mut out: Vec<String> = Vec::new();
    for line in text.split('\n') {
        let mut cur = String::new();
        for piece in pieces(line) {
            let (cl, pl) = (cur.chars().count(), piece.chars().count());
            if cl > 0 && cl + pl > width {
                out.push(cur.trim_end().to_string());
                cur = "  ".into();
            }
            let room = width - cur.chars().count();
            let piece = if piece.chars().count() > room {
                let tail: String = piece.chars().skip(pl - (room - 1)).collect();
                format!("…{tail}")
            } else {
                piece.to_string()
            };
            if cur.trim().is_empty() {
                cur.push_str(piece.trim_start());
            } else {
                cur.push_str(&piece);
            }
        }
        out.push(cur.trim_end().to_string());
    }
    out.join("\n")
}

/// `line` cut after each space and each `::`: the places a name may be broken.
fn pieces(line: &str) -> Vec<&str> {
    let mut v = Vec::new();
    let mut start = 0;
    let b = line.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let end = if b[i] == b' ' {
            Some(i + 1)
        } else if b[i] == b':' && b.get(i + 1) == Some(&b':') {
            Some(i + 2)
        } else {
            None
        };
        if let Some(e) = end {
            v.push(&line[start..e]);
            start = e;
            i = e;
        } else {
            i += 1;
        }
    }
    if start < line.len() {
        v.push(&line[start..]);
    }
    v
}

/// Greedy word wrap of `text` to `width` columns, continuation lines starting with `indent`;
/// a word longer than a line stays whole. Line breaks in `text` are kept.
pub fn wrap(text: &str, width: usize, indent: &str) -> String {
    let mut lines = Vec::new();
    for para in text.split('\n') {
        let mut line = String::new();
        let (mut len, mut words) = (0, 0);
        for word in para.split(' ').filter(|w| !w.is_empty()) {
            let wl = word.chars().count();
            if words > 0 && len + 1 + wl > width {
                lines.push(std::mem::take(&mut line));
                line.push_str(indent);
                len = indent.chars().count();
                words = 0;
            }
            if words > 0 {
                line.push(' ');
                len += 1;
            }
            line.push_str(word);
            len += wl;
            words += 1;
        }
        lines.push(line);
    }
    lines.join("\n")
}

/// The mark of a value that could have been measured here but was not; the reason goes beside
/// it, or into a note under the table when cells must stay narrow.
pub const NOT_MEASURED: &str = "n/a";

/// The mark of a value that has no meaning in its row (a ratio against itself, a column that
/// belongs to another kind of run).
pub const NOT_APPLICABLE: &str = "-";

/// `n/a (reason)`: a value that was not measured, and why.
pub fn not_measured(reason: impl std::fmt::Display) -> String {
    format!("{NOT_MEASURED} ({reason})")
}

/// A number with about three significant digits (`1234`, `12.3`, `1.23`); not finite = not measured.
pub fn num(x: f64) -> String {
    if !x.is_finite() {
        NOT_MEASURED.into()
    } else if x.abs() >= 100.0 {
        format!("{x:.0}")
    } else if x.abs() >= 10.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// A part of a [`Section`].
#[derive(Debug, Clone)]
pub enum Block {
    /// A paragraph of plain text.
    Note(String),
    /// A table.
    Table(Table),
    /// An SVG document (HTML only; the terminal shows where it was written, if anywhere).
    Plot(String),
}

/// A heading and what it holds, in order.
#[derive(Debug, Clone, Default)]
pub struct Section {
    /// The heading.
    pub heading: String,
    /// Notes, tables and plots, in the order they are shown.
    pub blocks: Vec<Block>,
}

impl Section {
    /// An empty section under `heading`.
    pub fn new(heading: impl Into<String>) -> Section {
        Section {
            heading: heading.into(),
            blocks: Vec::new(),
        }
    }

    /// Append a paragraph.
    pub fn note(mut self, text: impl Into<String>) -> Section {
        self.blocks.push(Block::Note(text.into()));
        self
    }

    /// Append a table.
    pub fn table(mut self, t: Table) -> Section {
        self.blocks.push(Block::Table(t));
        self
    }

    /// Append an SVG plot.
    pub fn plot(mut self, svg: String) -> Section {
        self.blocks.push(Block::Plot(svg));
        self
    }
}

/// What a measuring command reports: the verdict (the answer, in sentences) and the sections that
/// support it.
#[derive(Debug, Clone, Default)]
pub struct Document {
    /// The page title, e.g. `memlens bench alloc`.
    pub title: String,
    /// The answer: first thing on the HTML page, last thing on the terminal (where it stays in view).
    pub verdict: Vec<String>,
    /// Notes, tables and plots supporting the verdict.
    pub sections: Vec<Section>,
}

impl Document {
    /// An empty document titled `title`.
    pub fn new(title: impl Into<String>) -> Document {
        Document {
            title: title.into(),
            ..Default::default()
        }
    }

    /// The document for the terminal, no line wider than `width` where it can be helped.
    pub fn to_text(&self, width: usize) -> String {
        let mut o = String::new();
        for s in &self.sections {
            if !s.heading.is_empty() {
                let _ = writeln!(o, "\n{}", wrap(&s.heading, width, ""));
            }
            for b in &s.blocks {
                match b {
                    Block::Note(t) => {
                        let _ = writeln!(o, "{}", wrap(t, width, "  "));
                    }
                    Block::Table(t) => {
                        let _ = writeln!(o, "{}", t.to_text(width));
                    }
                    Block::Plot(_) => {}
                }
            }
        }
        if !self.verdict.is_empty() {
            o.push('\n');
            for v in &self.verdict {
                let _ = writeln!(o, "{}", wrap(v, width, "  "));
            }
        }
        o
    }

    /// Print the document on stdout, fitted to [`terminal_width`].
    pub fn print(&self) {
        print!("{}", self.to_text(terminal_width()));
    }

    /// A self-contained HTML page (no scripts, no external resources): the verdict first, then
    /// the sections with their tables whole, then the machine facts.
    pub fn to_html(&self) -> String {
        let mut o = String::new();
        let _ = write!(
            o,
            "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{t}</title><style>\
             body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}\
             .verdict{{background:#f4f8ff;border-left:4px solid #36c;padding:.5em 1em}}\
             table{{border-collapse:collapse;margin:1em 0;font-size:14px}}\
             td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th{{background:#f0f0f0}}\
             td:first-child,th:first-child{{text-align:left}}svg{{max-width:100%;height:auto}}\
             </style></head><body><h1>{t}</h1>\n",
            t = escape(&self.title)
        );
        if !self.verdict.is_empty() {
            o.push_str("<div class=\"verdict\">\n");
            for v in &self.verdict {
                let _ = writeln!(o, "<p>{}</p>", escape(v));
            }
            o.push_str("</div>\n");
        }
        let machine = Table::simple(
            &["fact", "value"],
            memlens_measure::sysinfo::collect()
                .lines()
                .into_iter()
                .map(|(k, v)| vec![k, v])
                .collect(),
        );
        let facts = Section::new("Machine").table(machine);
        for s in self.sections.iter().chain(std::iter::once(&facts)) {
            let _ = writeln!(o, "<h2>{}</h2>", escape(&s.heading));
            for b in &s.blocks {
                match b {
                    Block::Note(t) => {
                        let _ = writeln!(o, "<p>{}</p>", escape(t));
                    }
                    Block::Table(t) => html_table(&mut o, t),
                    Block::Plot(svg) => {
                        // Inline SVG in HTML must start at the <svg> element: drop any XML prolog.
                        let start = svg.find("<svg").unwrap_or(0);
                        let _ = writeln!(o, "<div>{}</div>", &svg[start..]);
                    }
                }
            }
        }
        o.push_str("</body></html>\n");
        o
    }
}

fn html_table(o: &mut String, t: &Table) {
    o.push_str("<table><tr>");
    for c in &t.columns {
        let _ = write!(o, "<th>{}</th>", escape(&c.name));
    }
    o.push_str("</tr>\n");
    for row in &t.rows {
        o.push_str("<tr>");
        for c in row {
            let _ = write!(o, "<td>{}</td>", escape(c));
        }
        o.push_str("</tr>\n");
    }
    o.push_str("</table>\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wide() -> Table {
        let mut t = Table::new(&["name"])
            .topic("time", &["time ms", "min–max ms"])
            .topic(
                "latency",
                &["malloc ns p50/p99/p99.9/max", "free ns p50/p99/p99.9/max"],
            )
            .topic("memory", &["peak RSS MiB", "minor faults"]);
        for n in ["glibc", "jemalloc"] {
            t.push(vec![
                n.into(),
                "12.5".into(),
                "12.1–13.0".into(),
                "< 5/40/120/3000".into(),
                "< 5/38/100/2500".into(),
                "12.3".into(),
                not_measured("no counters here"),
            ]);
        }
        t
    }

    #[test]
    fn a_table_that_fits_is_whole() {
        let s = wide().to_text(500);
        assert_eq!(s.lines().count(), 6, "borders, header, 2 rows: {s}");
        assert!(!s.contains("continued"));
    }

    #[test]
    fn a_wide_table_splits_by_topic_and_repeats_the_keys() {
        for w in [40, 60, 80] {
            let s = wide().to_text(w);
            assert!(text_width(&s) <= w, "width {w}:\n{s}");
            assert!(s.contains("(continued"), "{s}");
            // the key column is in every part; every topic's columns are together
            let parts: Vec<&str> = s.split("(continued").collect();
            assert!(parts.iter().all(|p| p.contains("jemalloc")), "{s}");
            assert!(parts[0].contains("time ms"), "most important first: {s}");
        }
    }

    #[test]
    fn notes_wrap_and_the_verdict_comes_first_in_html_last_on_the_terminal() {
        let mut d = Document::new("t<");
        d.verdict.push("jemalloc fastest".into());
        d.sections.push(
            Section::new("h")
                .note("word ".repeat(50))
                .table(wide())
                .plot("<?xml version=\"1.0\"?><svg></svg>".into()),
        );
        let text = d.to_text(50);
        assert!(text_width(&text) <= 50, "{text}");
        assert!(text.trim_end().ends_with("jemalloc fastest"));
        let h = d.to_html();
        assert!(h.find("jemalloc fastest").unwrap() < h.find("<table").unwrap());
        assert!(h.contains("t&lt;") && h.contains("<div><svg></svg>"));
        assert!(!h.contains("<script") && !h.contains("http://") && !h.contains("https://"));
    }

    #[test]
    fn names_wrap_between_their_parts_never_inside_one() {
        let w = wrap_words(
            "std::__cxx11::basic_string::_M_mutate basic_string.h:1422\n\
             (inline) std::allocator_traits::allocate alloc_traits.h:464",
            30,
        );
        for l in w.lines() {
            assert!(l.chars().count() <= 30, "{w}");
        }
        assert!(
            w.contains("_M_mutate") && w.contains("allocator_traits::"),
            "{w}"
        );
        assert!(
            w.lines().all(|l| !l.ends_with(':') || l.ends_with("::")),
            "{w}"
        );
        // a part longer than the line keeps its end
        assert_eq!(
            wrap_words("a_very_long_identifier_without_breaks", 12),
            "…hout_breaks"
        );
    }

    #[test]
    fn a_table_of_names_fits_80_columns_without_splitting_a_name() {
        let mut t = Table::new(&[]).topic("", &["flat", "function"]);
        t.push(vec![
            "3.17 GiB".into(),
            "std::__cxx11::basic_string<char, std::char_traits<char> >::_M_mutate".into(),
        ]);
        t.push(vec![
            "1.00 KiB".into(),
            "outer_namespace_of_the_service::detail::Registry::add_entry".into(),
        ]);
        let s = t.to_text(40);
        assert!(text_width(&s) <= 40, "{s}");
        assert!(s.contains("_M_mutate") && s.contains("add_entry"), "{s}");
    }

    #[test]
    fn missing_values_have_one_mark_per_meaning() {
        assert_eq!(not_measured("no PMU"), "n/a (no PMU)");
        assert_eq!(num(f64::NAN), NOT_MEASURED);
        assert_ne!(NOT_MEASURED, NOT_APPLICABLE);
        assert_eq!(num(1234.4), "1234");
        assert_eq!(num(12.34), "12.3");
        assert_eq!(num(1.234), "1.23");
    }
}
