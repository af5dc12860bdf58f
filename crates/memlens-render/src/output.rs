//! Tables on stdout and result files (JSON, CSV). Every JSON result carries the machine facts.
use anyhow::{Context, Result};
use comfy_table::{presets::UTF8_BORDERS_ONLY, Cell, CellAlignment, ContentArrangement, Table};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// The result files every measuring command can write (`#[command(flatten)]` into its arguments), so
/// `--json`, `--csv` and `--html` mean the same everywhere.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct OutputArgs {
    /// Write all results, with the machine facts, as JSON
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the result rows as CSV
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write a self-contained HTML report (tables and plots; opens without a server)
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// A table with a header row; numeric-looking cells are right-aligned.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_BORDERS_ONLY)
        .set_content_arrangement(ContentArrangement::Disabled);
    t.set_header(header.iter().map(Cell::new));
    for r in rows {
        t.add_row(r.iter().map(|c| {
            let numeric = c
                .trim_start_matches(['+', '-', '±'])
                .chars()
                .next()
                .is_some_and(|ch| ch.is_ascii_digit());
            Cell::new(c).set_alignment(if numeric {
                CellAlignment::Right
            } else {
                CellAlignment::Left
            })
        }));
    }
    t.to_string()
}

/// A table fitted to the terminal ([`crate::doc::terminal_width`]) by wrapping its cells: for
/// tables whose wide column is a name or a stack, which must stay beside its numbers.
pub fn fit_table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut t = crate::doc::Table::new(&[]).topic("", header);
    t.rows = rows.to_vec();
    t.to_text(crate::doc::terminal_width())
}

/// Write `{ "machine": <sysinfo>, "command": <argv>, <payload fields…> }` as pretty JSON.
pub fn write_json<T: Serialize>(path: &Path, payload: &T) -> Result<()> {
    let mut v = serde_json::to_value(payload)?;
    if let serde_json::Value::Object(m) = &mut v {
        m.insert(
            "machine".into(),
            serde_json::to_value(memlens_measure::sysinfo::collect())?,
        );
        m.insert(
            "command".into(),
            serde_json::to_value(std::env::args().collect::<Vec<_>>())?,
        );
    }
    let s = serde_json::to_string_pretty(&v)?;
    std::fs::write(path, s + "\n").with_context(|| format!("cannot write {}", path.display()))
}

/// Write a CSV file with a header row.
pub fn write_csv(path: &Path, header: &[&str], rows: &[Vec<String>]) -> Result<()> {
    let mut w =
        csv::Writer::from_path(path).with_context(|| format!("cannot write {}", path.display()))?;
    w.write_record(header)?;
    for r in rows {
        w.write_record(r)?;
    }
    w.flush()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Write flat rows (structs of numbers, strings and options; `None` is an empty cell) as CSV, the
/// header from the field names.
pub fn write_csv_rows<T: Serialize>(path: &Path, rows: &[T]) -> Result<()> {
    let mut w =
        csv::Writer::from_path(path).with_context(|| format!("cannot write {}", path.display()))?;
    for r in rows {
        w.serialize(r)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    w.flush()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// Write a text file (SVG, HTML…) with the path in the error.
pub fn write_text(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

/// Pretty JSON of any serialisable value.
pub fn to_json_pretty<T: Serialize>(v: &T) -> Result<String> {
    Ok(serde_json::to_string_pretty(v)?)
}

#[cfg(test)]
mod tests {
    #[test]
    fn table_renders_all_cells() {
        let t = super::table(&["a", "b"], &[vec!["x".into(), "1.5".into()]]);
        assert!(t.contains('x') && t.contains("1.5") && t.contains('a'));
    }
}
