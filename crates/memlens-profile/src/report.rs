//! `memlens report`: top functions (flat and cumulative) and top stacks of a profile, as a table,
//! JSON or folded stacks, plus an optional flamegraph.
//!
//! JSON shape (`--format json`, on stdout; every function and every stack, not only the top N):
//!
//! ```text
//! { "file": "p.pb.gz", "sample_index": "alloc_space", "unit": "bytes",
//!   "meta": { "pid", "ppid", "exe", "interval", "unwinder", "active", "reason", "start_ns", "time_ns",
//!             "samples", "truncated", "dropped", "max_depth" },
//!   "totals": { "alloc_objects", "alloc_space", "inuse_objects", "inuse_space" },
//!   "mmap_totals": { … the same, of anonymous mmap only (issue 31): the heap is the difference },
//!   "functions": [ { "function", "file", "flat", "flat_share", "cum", "cum_share" } … ],  // by flat, desc
//!   "stacks": [ { "value", "share", "samples",
//!                 "values": { "alloc_objects", "alloc_space", "inuse_objects", "inuse_space" },
//!                 "frames": [ { "function", "file", "line", "inlined" } … ] } … ] }        // by value, desc
//! ```
//! Frames are innermost first (`frames[0]` called the allocator); `inlined` marks a frame inlined into
//! the next one. `file`/`line` are omitted when unknown; unsymbolized frames are named `module+0xOFF`.
//! Shares are fractions (0..1) of the total of the chosen sample index.
use crate::agg::{self, fmt_value, pct, share, Frames, Func, Stacks};
use crate::model::{Profile, SampleIndex};
use crate::present::{drill_down, folded, function_names, header, json, sorted, stack_cell};
use crate::present::{program_name, write_flamegraph, Format};
use anyhow::{Context, Result};
use memlens_render::doc::{terminal_width, wrap};
use memlens_render::output::fit_table;
use std::io::Write;
use std::path::{Path, PathBuf};

/// Show the top allocating functions and stacks of a heap profile (pprof or raw dump)
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Example:\n  memlens report memlens.server.1234.pb.gz --sample-index inuse_space --top 20\n  \
    memlens report p.pb.gz --format folded > p.folded\n  memlens report p.pb.gz --flamegraph p.svg\n  \
    memlens report p.pb.gz --view peak --flamegraph peak.svg --html p.html\n  \
    memlens report /dev/shm/memlens-0/nginx.1234.5f3a9c01   (a run directory: the profiles of its \
    processes that have ended since memlens run returned)"
)]
pub struct ReportArgs {
    /// Profile to read: gzipped or plain pprof (.pb.gz, .pb) or a memlens raw dump (.raw); or a run
    /// directory `memlens run` named: writes the profiles of its processes that have ended
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Value to rank by
    #[arg(long, value_enum, default_value = "alloc_space")]
    pub sample_index: SampleIndex,
    /// Number of functions and stacks shown in the table
    #[arg(long, default_value_t = 10, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000_000))]
    pub top: usize,
    /// Output: a table, JSON (every function and stack; shape in the docs), or folded stacks
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Also write a flamegraph SVG of the chosen value to this file
    #[arg(long, value_name = "OUT.svg")]
    pub flamegraph: Option<PathBuf>,
    /// What to show: alloc, inuse, peak (live at the heap's high-water mark), leaks (live at the dump,
    /// with age), temporaries (short-lived sites) or timeline (heap vs RSS) [default: by --sample-index]
    #[arg(long, value_enum)]
    pub view: Option<crate::views::View>,
    /// Also write an HTML report of the profile (timeline chart above the views) to this file
    #[arg(long, value_name = "OUT.html")]
    pub html: Option<PathBuf>,
}

/// Run `memlens report`; returns the exit status.
pub fn run_report(a: ReportArgs) -> Result<i32> {
    let p = crate::convert::load(&a.file)?;
    if let Some(out) = &a.html {
        let page = crate::page::html(&p, &a.file)?;
        std::fs::write(out, page).with_context(|| format!("cannot write {}", out.display()))?;
        eprintln!("memlens: HTML report written to {}", out.display());
    }
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    render_to(&p, &a, &mut w)?;
    w.flush().context("cannot write the report")?;
    Ok(0)
}

/// The report of `p` as `a` asks (stdout text), writing the flamegraph when asked.
pub fn render(p: &Profile, a: &ReportArgs) -> Result<String> {
    let mut out = Vec::new();
    render_to(p, a, &mut out)?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// [`render`] written to `w` as it is made (JSON and folded stacks of every stack are not built
/// in memory first).
pub fn render_to(p: &Profile, a: &ReportArgs, w: &mut dyn Write) -> Result<()> {
    use crate::views::View;
    let idx = match a.view {
        None => a.sample_index,
        Some(View::Alloc) => SampleIndex::AllocSpace,
        Some(View::Inuse) => SampleIndex::InuseSpace,
        Some(v) => {
            let fg = a.flamegraph.as_deref();
            let text = crate::views::render(p, &a.file, v, a.format, a.top, fg)?;
            return Ok(w.write_all(text.as_bytes())?);
        }
    };
    p.require(idx)?;
    let mut fr = Frames::default();
    let mut stacks = Stacks::by_line(p, &mut fr); // two call sites of a function: two rows
    stacks.sort_by(idx);
    if let Some(out) = &a.flamegraph {
        flamegraph(p, &fr, &stacks, idx, out)?;
    }
    let values = stacks.list.iter().map(|s| (stacks.frames(s), s.values));
    match a.format {
        Format::Table => {
            // one row per function as displayed: a template's instantiations together
            let groups = agg::display_groups(&fr);
            let funcs = sorted(
                agg::functions_by(&fr, values, |f| groups[f as usize]),
                idx as usize,
            );
            w.write_all(table(p, &a.file, &fr, &stacks, &funcs, idx, a.top).as_bytes())?
        }
        Format::Folded => folded_by(&fr, &stacks, idx, w)?,
        Format::Json => {
            let funcs = sorted(agg::functions(&fr, values), idx as usize);
            json(p, &a.file, &fr, &stacks, &funcs, idx, usize::MAX, w)?;
            w.write_all(b"\n")?;
        }
    }
    Ok(())
}

/// [`folded`] of the merged stacks by one value.
fn folded_by(fr: &Frames, stacks: &Stacks, idx: SampleIndex, w: &mut dyn Write) -> Result<()> {
    folded(
        fr,
        stacks.list.iter().map(|s| (stacks.frames(s), s.get(idx))),
        w,
    )
}

fn flamegraph(
    p: &Profile,
    fr: &Frames,
    stacks: &Stacks,
    idx: SampleIndex,
    out: &Path,
) -> Result<()> {
    let mut text = Vec::new();
    folded_by(fr, stacks, idx, &mut text)?;
    let exe = program_name(p);
    let title = format!("memlens: {} {}", idx.name(), exe);
    write_flamegraph(&text, title.trim_end(), idx.unit(), out).map_err(|e| {
        if text.is_empty() {
            anyhow::anyhow!(
                "cannot draw a flamegraph: the profile has no {} values",
                idx.name()
            )
        } else {
            e
        }
    })
}

fn table(
    p: &Profile,
    file: &Path,
    fr: &Frames,
    stacks: &Stacks,
    funcs: &[Func],
    idx: SampleIndex,
    top: usize,
) -> String {
    let total = p.total(idx);
    let i = idx as usize;
    let mut s = wrap(&header(p, file, idx), terminal_width(), "  ");
    if p.samples.is_empty() || total == 0.0 {
        s += &format!("no {} recorded in this profile\n", idx.name());
        return s;
    }
    s += &format!(
        "\ntop functions by {} (flat: allocated here; cum: here or in callees)\n",
        idx.name()
    );
    let shown: Vec<&Func> = funcs
        .iter()
        .filter(|f| f.flat[i] != 0.0)
        .take(top)
        .collect();
    let names = function_names(fr, shown.iter().copied());
    let rows: Vec<Vec<String>> = shown
        .iter()
        .zip(names)
        .map(|(f, name)| {
            vec![
                fmt_value(f.flat[i], idx, false),
                pct(share(f.flat[i], total)),
                fmt_value(f.cum[i], idx, false),
                pct(share(f.cum[i], total)),
                name,
            ]
        })
        .collect();
    s += &fit_table(&["flat", "flat%", "cum", "cum%", "function"], &rows);
    s += &format!("\n\ntop stacks by {} (innermost frame first)\n", idx.name());
    let rows: Vec<Vec<String>> = stacks
        .list
        .iter()
        .filter(|st| st.get(idx) != 0.0)
        .take(top)
        .map(|st| {
            vec![
                fmt_value(st.get(idx), idx, false),
                pct(share(st.get(idx), total)),
                st.samples.to_string(),
                stack_cell(&fr.resolve(stacks.frames(st)), 8),
            ]
        })
        .collect();
    s += &fit_table(&[idx.name(), "share", "samples", "stack"], &rows);
    s += "\n";
    s += &drill_down(file);
    s
}
