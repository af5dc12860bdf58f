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
use crate::agg::{self, fmt_value, pct, share};
use crate::model::{Frame, Location, Profile, Sample, SampleIndex};
use anyhow::Result;
use serde::Serialize;
use std::collections::HashMap;
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
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Also write NEW − BASE as a gzipped pprof profile (negative values where memory shrank)
    #[arg(short = 'o', long = "output", value_name = "DIFF.pb.gz")]
    pub output: Option<PathBuf>,
    /// Output format on stdout
    #[arg(long, value_enum, default_value = "table")]
    pub format: DiffFormat,
}

/// One stack's values in both profiles.
#[derive(Debug, Clone, Serialize)]
pub struct StackDelta {
    /// Value in the base profile.
    pub base: f64,
    /// Value in the new profile.
    pub new: f64,
    /// new − base.
    pub delta: f64,
    /// Innermost first.
    pub frames: Vec<Frame>,
}

#[derive(Debug, Clone, Serialize)]
/// One function's flat and cumulative values in both profiles.
pub struct FuncDelta {
    /// Function name.
    pub function: String,
    /// Flat value in the base profile.
    pub flat_base: f64,
    /// Flat value in the new profile.
    pub flat_new: f64,
    /// Flat new − base.
    pub flat_delta: f64,
    /// Cumulative value in the base profile.
    pub cum_base: f64,
    /// Cumulative value in the new profile.
    pub cum_new: f64,
    /// Cumulative new − base.
    pub cum_delta: f64,
}

#[derive(Debug, Clone, Serialize)]
/// The difference of two profiles for one sample index.
pub struct Diff {
    /// Base file.
    pub base: String,
    /// New file.
    pub new: String,
    /// The value compared.
    pub sample_index: SampleIndex,
    /// Its unit (`bytes` or `count`).
    pub unit: &'static str,
    /// Total of the base profile.
    pub base_total: f64,
    /// Total of the new profile.
    pub new_total: f64,
    /// new − base of the totals.
    pub delta: f64,
    /// Functions, by growth.
    pub functions: Vec<FuncDelta>,
    /// Stacks, by growth.
    pub stacks: Vec<StackDelta>,
}

/// Compare two profiles on one value.
pub fn compare(
    base: &Profile,
    new: &Profile,
    idx: SampleIndex,
) -> (Vec<StackDelta>, Vec<FuncDelta>) {
    let (bs, ns) = (agg::stacks(base), agg::stacks(new));
    let mut stacks: Vec<StackDelta> = Vec::new();
    let mut at: HashMap<Vec<String>, usize> = HashMap::new();
    for (side, list) in [(0, &bs), (1, &ns)] {
        for s in list.iter() {
            let i = *at.entry(s.key()).or_insert_with(|| {
                stacks.push(StackDelta {
                    base: 0.0,
                    new: 0.0,
                    delta: 0.0,
                    frames: s.frames.clone(),
                });
                stacks.len() - 1
            });
            if side == 0 {
                stacks[i].base += s.get(idx);
            } else {
                stacks[i].new += s.get(idx);
            }
        }
    }
    for s in &mut stacks {
        s.delta = s.new - s.base;
    }
    stacks.sort_by(|a, b| b.delta.total_cmp(&a.delta));
    let k = idx as usize;
    let (bf, nf) = (agg::functions(&bs), agg::functions(&ns));
    let mut funcs: Vec<FuncDelta> = Vec::new();
    let mut fat: HashMap<String, usize> = HashMap::new();
    for (side, list) in [(0, &bf), (1, &nf)] {
        for f in list.iter() {
            let i = *fat.entry(f.name.clone()).or_insert_with(|| {
                funcs.push(FuncDelta {
                    function: f.name.clone(),
                    flat_base: 0.0,
                    flat_new: 0.0,
                    flat_delta: 0.0,
                    cum_base: 0.0,
                    cum_new: 0.0,
                    cum_delta: 0.0,
                });
                funcs.len() - 1
            });
            let d = &mut funcs[i];
            if side == 0 {
                (d.flat_base, d.cum_base) = (f.flat[k], f.cum[k]);
            } else {
                (d.flat_new, d.cum_new) = (f.flat[k], f.cum[k]);
            }
        }
    }
    for f in &mut funcs {
        f.flat_delta = f.flat_new - f.flat_base;
        f.cum_delta = f.cum_new - f.cum_base;
    }
    funcs.sort_by(|a, b| {
        b.flat_delta
            .total_cmp(&a.flat_delta)
            .then(b.cum_delta.total_cmp(&a.cum_delta))
    });
    (stacks, funcs)
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

/// Run `memlens diff`; returns the exit status.
pub fn run_diff(a: DiffArgs) -> Result<i32> {
    let base = crate::convert::load(&a.base)?;
    let new = crate::convert::load(&a.new)?;
    let idx = a.sample_index.unwrap_or_else(|| default_index(&base, &new));
    let (stacks, functions) = compare(&base, &new, idx);
    let d = Diff {
        base: a.base.display().to_string(),
        new: a.new.display().to_string(),
        sample_index: idx,
        unit: idx.unit(),
        base_total: base.total(idx),
        new_total: new.total(idx),
        delta: new.total(idx) - base.total(idx),
        functions,
        stacks,
    };
    if let Some(out) = &a.output {
        crate::pprof::write(&difference_profile(&base, &new), out)?;
        eprintln!(
            "memlens: NEW − BASE written to {} (view: go tool pprof -top {})",
            out.display(),
            out.display()
        );
    }
    match a.format {
        DiffFormat::Table => print!("{}", table(&d, a.top, &a.base, &a.new)),
        DiffFormat::Json => println!("{}", serde_json::to_string_pretty(&d)?),
    }
    Ok(0)
}

fn table(d: &Diff, top: usize, base: &Path, new: &Path) -> String {
    let idx = d.sample_index;
    let v = |x: f64| fmt_value(x, idx, false);
    let dv = |x: f64| fmt_value(x, idx, true);
    let width = memlens_measure::doc::terminal_width();
    let mut s = memlens_measure::doc::wrap(
        &format!(
            "{}: base {} = {}, new {} = {}, change {}\n",
            idx.name(),
            base.display(),
            v(d.base_total),
            new.display(),
            v(d.new_total),
            dv(d.delta)
        ),
        width,
        "  ",
    );
    let growth: f64 = d
        .stacks
        .iter()
        .filter(|x| x.delta > 0.0)
        .map(|x| x.delta)
        .sum();
    if growth == 0.0 {
        s += "nothing grew\n";
    } else {
        s += "\nfunctions that grew most (flat: allocated in the function itself; share of all growth)\n";
        let rows: Vec<Vec<String>> = d
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
                    memlens_measure::names::short_name(&f.function),
                ]
            })
            .collect();
        s += &memlens_measure::output::fit_table(
            &["flat Δ", "share", "base", "new", "cum Δ", "function"],
            &rows,
        );
        s += "\n\nstacks that grew most (innermost frame first)\n";
        let rows: Vec<Vec<String>> = d
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
                    crate::report::stack_cell(&x.frames, 8),
                ]
            })
            .collect();
        s += &memlens_measure::output::fit_table(&["Δ", "share", "base", "new", "stack"], &rows);
        s += "\n";
    }
    let shrank: Vec<&StackDelta> = d.stacks.iter().filter(|x| x.delta < 0.0).collect();
    if let Some(most) = shrank.last() {
        let f = most.frames.first().map_or("?".into(), |f| {
            memlens_measure::names::short_name(&f.function)
        });
        s += &memlens_measure::doc::wrap(
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
