//! Self-contained HTML reports: tables and inline SVG, no scripts, no external resources, so the file
//! opens in any browser without a server.
use std::fmt::Write;

#[derive(Debug, Clone, Default)]
/// A heading and what it holds.
pub struct Section {
    /// The heading.
    pub heading: String,
    /// Paragraphs of plain text (escaped on output).
    pub paragraphs: Vec<String>,
    /// Tables: header and rows.
    pub tables: Vec<(Vec<String>, Vec<Vec<String>>)>,
    /// SVG documents embedded inline.
    pub svgs: Vec<String>,
}

#[derive(Debug, Clone, Default)]
/// A page: a title and its sections (the machine facts are added last).
pub struct Report {
    /// The page title.
    pub title: String,
    /// The sections, in order.
    pub sections: Vec<Section>,
}

/// Escape `&`, `<`, `>` and `"` for HTML text and attributes.
pub(crate) fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Render the report; the machine facts are appended as a last section.
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let _ = write!(
        o,
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{}</title><style>\
         body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}\
         table{{border-collapse:collapse;margin:1em 0;font-size:14px}}\
         td,th{{border:1px solid #ccc;padding:3px 8px;text-align:right}}th{{background:#f0f0f0}}\
         td:first-child,th:first-child{{text-align:left}}svg{{max-width:100%;height:auto}}\
         </style></head><body><h1>{}</h1>\n",
        escape(&r.title),
        escape(&r.title)
    );
    let machine = memlens_measure::sysinfo::collect();
    let facts = Section {
        heading: "Machine".into(),
        tables: vec![(
            vec!["fact".into(), "value".into()],
            machine
                .lines()
                .into_iter()
                .map(|(k, v)| vec![k, v])
                .collect(),
        )],
        ..Default::default()
    };
    for s in r.sections.iter().chain(std::iter::once(&facts)) {
        let _ = writeln!(o, "<h2>{}</h2>", escape(&s.heading));
        for p in &s.paragraphs {
            let _ = writeln!(o, "<p>{}</p>", escape(p));
        }
        for (h, rows) in &s.tables {
            o.push_str("<table><tr>");
            for c in h {
                let _ = write!(o, "<th>{}</th>", escape(c));
            }
            o.push_str("</tr>\n");
            for row in rows {
                o.push_str("<tr>");
                for c in row {
                    let _ = write!(o, "<td>{}</td>", escape(c));
                }
                o.push_str("</tr>\n");
            }
            o.push_str("</table>\n");
        }
        for svg in &s.svgs {
            // Drop any XML prolog: inline SVG in HTML must start at the <svg> element.
            let start = svg.find("<svg").unwrap_or(0);
            let _ = writeln!(o, "<div>{}</div>", &svg[start..]);
        }
    }
    o.push_str("</body></html>\n");
    o
}

#[cfg(test)]
mod tests {
    #[test]
    fn renders_escaped_self_contained_page() {
        let r = super::Report {
            title: "a<b".into(),
            sections: vec![super::Section {
                heading: "h".into(),
                paragraphs: vec!["x & y".into()],
                tables: vec![(vec!["c".into()], vec![vec!["1".into()]])],
                svgs: vec!["<?xml version=\"1.0\"?><svg></svg>".into()],
            }],
        };
        let h = super::render(&r);
        assert!(h.contains("a&lt;b") && h.contains("x &amp; y") && h.contains("<div><svg></svg>"));
        assert!(!h.contains("<script") && !h.contains("http://") && !h.contains("https://"));
    }
}
