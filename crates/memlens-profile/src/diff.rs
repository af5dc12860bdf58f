//! `memlens diff BASE NEW`: what grew between two profiles, per stack and per function.
//!
//! Stacks are matched by their symbolized frames (function names, or `module+0xOFF` when
//! unsymbolized), so dumps of two different processes of the same program compare. `-o` writes
//! NEW − BASE as a pprof file (NEW's samples plus BASE's with negated values), which pprof
//! shows like the result of `go tool pprof -diff_base BASE NEW` (that command also works directly
//! on memlens profiles).
//!
//! JSON shape (`--format json`, on stdout):
//! ```text
//! { "base": path, "new": path, "sample_index", "unit", "base_total", "new_total", "delta",
//!   "functions": [ { "function", "flat_base", "flat_new", "flat_delta",
//!                    "cum_base", "cum_new", "cum_delta" } … ],          // by flat_delta, desc
//!   "stacks": [ { "base", "new", "delta", "frames": [ { "function", "file", "line", "inlined" } … ] } … ] }
//! ```
use crate::agg::{fmt_value, pct, share, SerSeq};
use crate::compared::{compare, Compared, FuncDelta, StackDelta};
use crate::model::{Location, Profile, Sample, SampleIndex};
use anyhow::{Context, Result};
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
/// Output of `memlens diff`.
pub enum DiffFormat {
    /// Tables of the functions and stacks that grew.
    Table,
    /// Every function and stack with both values, as JSON.
    Json,
}

/// What grew between two heap profiles (pprof files or raw dumps), per stack and per function
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  memlens diff before.pb.gz after.pb.gz -o growth.pb.gz\n  \
    memlens diff before.pb.gz after.pb.gz --flamegraph diff.svg --html diff.html\n  \
    go tool pprof -top growth.pb.gz\n  go tool pprof -top -diff_base before.pb.gz after.pb.gz"
)]
pub struct DiffArgs {
    /// The earlier profile
    #[arg(value_name = "BASE")]
    pub base: PathBuf,
    /// The later profile
    #[arg(value_name = "NEW")]
    pub new: PathBuf,
    /// Value to compare [default: inuse_space, or alloc_space when neither profile tracks live blocks]
    #[arg(long, value_enum)]
    pub sample_index: Option<SampleIndex>,
    /// Number of functions and stacks shown
    #[arg(long, default_value_t = 10, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000_000))]
    pub top: usize,
    /// Also write NEW − BASE as a gzipped pprof profile (negative values where memory shrank)
    #[arg(short = 'o', long = "output", value_name = "DIFF.pb.gz")]
    pub output: Option<PathBuf>,
    /// Output format on stdout
    #[arg(long, value_enum, default_value = "table")]
    pub format: DiffFormat,
    /// Also draw the differential flame graph as SVG: sized by NEW, red where it grew, blue where
    /// it shrank
    #[arg(long, value_name = "FILE.svg")]
    pub flamegraph: Option<PathBuf>,
    /// Also write an HTML page: the differential flame graph sized by NEW and by BASE (where what
    /// vanished is seen), and the tables
    #[arg(long, value_name = "FILE.html")]
    pub html: Option<PathBuf>,
}

/// NEW − BASE as one profile: NEW's samples, then BASE's (with its own locations, functions and
/// mappings) with negated values. pprof sums by function, so it shows the difference.
pub fn difference_profile(base: &Profile, new: &Profile) -> Profile {
    let mut p = new.clone();
    let (mo, fo, lo) = (
        p.mappings.len() as u64,
        p.functions.len() as u64,
        p.locations.len() as u64,
    );
    p.mappings.extend(base.mappings.iter().cloned());
    p.functions.extend(base.functions.iter().cloned());
    p.locations.extend(base.locations.iter().map(|l| {
        Location {
            mapping: if l.mapping == 0 { 0 } else { l.mapping + mo },
            address: l.address,
            lines: l
                .lines
                .iter()
                .map(|x| crate::model::Line {
                    function: x.function + fo,
                    line: x.line,
                })
                .collect(),
        }
    }));
    p.samples.extend(base.samples.iter().map(|s| {
        let mut n = Sample {
            locations: s.locations.iter().map(|id| id + lo).collect(),
            samples: 0,
            diff_base: true,
            ..Sample::default()
        };
        n.set_values(s.values().map(|v| -v));
        n
    }));
    p.meta.samples = 0;
    p.meta.truncated = 0;
    p.meta.dropped = 0;
    p.meta.reason = "diff".into();
    p
}

fn default_index(base: &Profile, new: &Profile) -> SampleIndex {
    let live =
        base.total(SampleIndex::InuseSpace) != 0.0 || new.total(SampleIndex::InuseSpace) != 0.0;
    if live {
        SampleIndex::InuseSpace
    } else {
        SampleIndex::AllocSpace
    }
}

#[derive(Serialize)]
/// The difference of two profiles for one sample index, as JSON writes it.
struct Diff<'a, S> {
    base: String,
    new: String,
    sample_index: SampleIndex,
    unit: &'static str,
    base_total: f64,
    new_total: f64,
    delta: f64,
    functions: &'a [FuncDelta],
    stacks: S,
}

#[derive(Serialize)]
struct JsonStackDelta<F> {
    base: f64,
    new: f64,
    delta: f64,
    frames: F,
}

/// Run `memlens diff`; returns the exit status.
pub fn run_diff(a: DiffArgs) -> Result<i32> {
    let base = crate::convert::load(&a.base)?;
    let new = crate::convert::load(&a.new)?;
    let idx = a.sample_index.unwrap_or_else(|| default_index(&base, &new));
    for (p, f) in [(&base, &a.base), (&new, &a.new)] {
        p.require(idx)
            .with_context(|| format!("cannot compare {}", f.display()))?;
    }
    if let Some(out) = &a.output {
        crate::pprof::write(&difference_profile(&base, &new), out)?;
        eprintln!(
            "memlens: NEW − BASE written to {} (view: go tool pprof -top {})",
            out.display(),
            out.display()
        );
    }
    let c = compare(&base, &new, idx);
    if let Some(out) = &a.flamegraph {
        crate::diff_flame::write_svg(&c, idx, out)?;
    }
    if let Some(out) = &a.html {
        let page = crate::diff_flame::html(&c, idx, a.top, &a.base, &a.new)?;
        memlens_render::output::write_text(out, &page)?;
        eprintln!("memlens: HTML written to {}", out.display());
    }
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    match a.format {
        DiffFormat::Table => w.write_all(table(&c, idx, a.top, &a.base, &a.new).as_bytes())?,
        DiffFormat::Json => {
            let d = Diff {
                base: a.base.display().to_string(),
                new: a.new.display().to_string(),
                sample_index: idx,
                unit: idx.unit(),
                base_total: base.total(idx),
                new_total: new.total(idx),
                delta: new.total(idx) - base.total(idx),
                functions: &c.functions,
                stacks: SerSeq::new(c.stacks.iter().map(|s| JsonStackDelta {
                    base: s.base,
                    new: s.new,
                    delta: s.delta,
                    frames: crate::present::json_frames(&c.frames, c.ids_of(s)),
                })),
            };
            serde_json::to_writer_pretty(&mut w, &d)?;
            w.write_all(b"\n")?;
        }
    }
    w.flush()?;
    Ok(0)
}

fn table(c: &Compared, idx: SampleIndex, top: usize, base: &Path, new: &Path) -> String {
    let total = |side: usize| c.sides[side].profile.total(idx);
    let v = |x: f64| fmt_value(x, idx, false);
    let dv = |x: f64| fmt_value(x, idx, true);
    let width = memlens_render::doc::terminal_width();
    let mut s = memlens_render::doc::wrap(
        &format!(
            "{}: base {} = {}, new {} = {}, change {}\n",
            idx.name(),
            base.display(),
            v(total(0)),
            new.display(),
            v(total(1)),
            dv(total(1) - total(0))
        ),
        width,
        "  ",
    );
    let growth: f64 = c
        .stacks
        .iter()
        .filter(|x| x.delta > 0.0)
        .map(|x| x.delta)
        .sum();
    if growth == 0.0 {
        s += "nothing grew\n";
    } else {
        s += "\nfunctions that grew most (flat: allocated in the function itself; share of all growth)\n";
        let rows: Vec<Vec<String>> = c
            .functions
            .iter()
            .filter(|f| f.flat_delta > 0.0)
            .take(top)
            .map(|f| {
                vec![
                    dv(f.flat_delta),
                    pct(share(f.flat_delta, growth)),
                    v(f.flat_base),
                    v(f.flat_new),
                    dv(f.cum_delta),
                    crate::names::short_name(&f.function),
                ]
            })
            .collect();
        s += &memlens_render::output::fit_table(
            &["flat Δ", "share", "base", "new", "cum Δ", "function"],
            &rows,
        );
        s += "\n\nstacks that grew most (innermost frame first)\n";
        let rows: Vec<Vec<String>> = c
            .stacks
            .iter()
            .filter(|x| x.delta > 0.0)
            .take(top)
            .map(|x| {
                vec![
                    dv(x.delta),
                    pct(share(x.delta, growth)),
                    v(x.base),
                    v(x.new),
                    crate::present::stack_cell(&c.frames_of(x), 8),
                ]
            })
            .collect();
        s += &memlens_render::output::fit_table(&["Δ", "share", "base", "new", "stack"], &rows);
        s += "\n";
    }
    let shrank: Vec<&StackDelta> = c.stacks.iter().filter(|x| x.delta < 0.0).collect();
    if let Some(most) = shrank.last() {
        let f = c
            .ids_of(most)
            .next()
            .map_or("?".into(), |f| crate::names::short_name(c.frames.name(f)));
        s += &memlens_render::doc::wrap(
            &format!(
                "{} stacks shrank; most: {} in {}\n",
                shrank.len(),
                dv(most.delta),
                f
            ),
            width,
            "  ",
        );
    }
    s
}
