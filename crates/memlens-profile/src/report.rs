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
//!   "functions": [ { "function", "file", "flat", "flat_share", "cum", "cum_share" } … ],  // by flat, desc
//!   "stacks": [ { "value", "share", "samples",
//!                 "values": { "alloc_objects", "alloc_space", "inuse_objects", "inuse_space" },
//!                 "frames": [ { "function", "file", "line", "inlined" } … ] } … ] }        // by value, desc
//! ```
//! Frames are innermost first (`frames[0]` called the allocator); `inlined` marks a frame inlined into
//! the next one. `file`/`line` are omitted when unknown; unsymbolized frames are named `module+0xOFF`.
//! Shares are fractions (0..1) of the total of the chosen sample index.
use crate::agg::{self, fmt_value, pct, share, FrameId, Frames, Func, SerSeq, Stacks};
use crate::model::{Frame, Meta, Profile, SampleIndex};
use crate::names::{is_library, short_name};
use anyhow::{Context, Result};
use memlens_render::doc::{terminal_width, wrap};
use memlens_render::output::fit_table;
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
/// Output of `memlens report`.
pub enum Format {
    /// Top functions and stacks as tables.
    Table,
    /// Every function and stack, as JSON.
    Json,
    /// Folded stacks (`root;…;leaf value`).
    Folded,
}

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

/// One function of the JSON report (also used by the views' JSON).
#[derive(Serialize)]
pub(crate) struct JsonFunc<'a> {
    pub(crate) function: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    pub(crate) file: &'a str,
    pub(crate) flat: f64,
    pub(crate) flat_share: f64,
    pub(crate) cum: f64,
    pub(crate) cum_share: f64,
}

/// The four sample values of a function, a stack or the whole profile in the JSON report.
#[derive(Serialize)]
pub(crate) struct Values {
    alloc_objects: f64,
    alloc_space: f64,
    inuse_objects: f64,
    inuse_space: f64,
}

impl From<[f64; 4]> for Values {
    fn from(v: [f64; 4]) -> Self {
        Values {
            alloc_objects: v[0],
            alloc_space: v[1],
            inuse_objects: v[2],
            inuse_space: v[3],
        }
    }
}

#[derive(Serialize)]
struct JsonStack<F> {
    value: f64,
    share: f64,
    samples: u64,
    values: Values,
    frames: F,
}

#[derive(Serialize)]
struct JsonReport<'a, F, S> {
    file: String,
    sample_index: SampleIndex,
    unit: &'static str,
    meta: &'a Meta,
    totals: Values,
    functions: F,
    stacks: S,
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

/// Functions by their flat value of sample index `i`, then by their cumulative one, largest first.
pub(crate) fn sorted(mut funcs: Vec<Func>, i: usize) -> Vec<Func> {
    funcs.sort_by(|x, y| {
        y.flat[i]
            .total_cmp(&x.flat[i])
            .then(y.cum[i].total_cmp(&x.cum[i]))
    });
    funcs
}

/// The name column of a table of functions: each function's short name and, where two rows would
/// read alike, where it is (its file, else its module) to tell them apart.
pub(crate) fn function_names<'a>(
    fr: &Frames,
    funcs: impl Iterator<Item = &'a Func>,
) -> Vec<String> {
    let funcs: Vec<&Func> = funcs.collect();
    let short: Vec<String> = funcs.iter().map(|f| short_name(fr.str(f.name))).collect();
    short
        .iter()
        .zip(&funcs)
        .map(|(s, f)| {
            if short.iter().filter(|t| *t == s).count() < 2 {
                return s.clone();
            }
            let file = fr.str(f.file).rsplit('/').next().unwrap_or("");
            let module = fr.str(f.module).rsplit('/').next().unwrap_or("");
            let at = if file.is_empty() { module } else { file };
            if at.is_empty() {
                s.clone()
            } else {
                format!("{s} ({at})")
            }
        })
        .collect()
}

fn totals(p: &Profile) -> [f64; 4] {
    SampleIndex::ALL.map(|i| p.total(i))
}

/// One function of the JSON report, names resolved.
pub(crate) fn json_func<'a>(fr: &'a Frames, f: &Func, i: usize, total: f64) -> JsonFunc<'a> {
    JsonFunc {
        function: fr.str(f.name),
        file: fr.str(f.file),
        flat: f.flat[i],
        flat_share: share(f.flat[i], total),
        cum: f.cum[i],
        cum_share: share(f.cum[i], total),
    }
}

/// The frames of a stack as JSON writes them, resolved while written.
pub(crate) fn json_frames<'a>(
    fr: &'a Frames,
    it: impl Iterator<Item = FrameId> + 'a,
) -> SerSeq<impl Iterator<Item = Frame> + 'a> {
    SerSeq::new(it.map(|f| fr.frame(f)))
}

/// The JSON report (the first `limit` functions and stacks) written to `w`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn json(
    p: &Profile,
    file: &Path,
    fr: &Frames,
    stacks: &Stacks,
    funcs: &[Func],
    idx: SampleIndex,
    limit: usize,
    w: &mut dyn Write,
) -> Result<()> {
    let total = p.total(idx);
    let i = idx as usize;
    let r = JsonReport {
        file: file.display().to_string(),
        sample_index: idx,
        unit: idx.unit(),
        meta: &p.meta,
        totals: totals(p).into(),
        functions: SerSeq::new(funcs.iter().take(limit).map(|f| json_func(fr, f, i, total))),
        stacks: SerSeq::new(stacks.list.iter().take(limit).map(|s| JsonStack {
            value: s.get(idx),
            share: share(s.get(idx), total),
            samples: s.samples,
            values: s.values.into(),
            frames: json_frames(fr, stacks.frames(s)),
        })),
    };
    serde_json::to_writer_pretty(w, &r)?;
    Ok(())
}

/// `root;…;leaf value` lines of the stacks (each: its frames and its value) whose value rounds to
/// non-zero (what flamegraph tools expect).
pub fn folded<I>(
    fr: &Frames,
    stacks: impl Iterator<Item = (I, f64)>,
    w: &mut dyn Write,
) -> Result<()>
where
    I: Iterator<Item = FrameId>,
{
    let mut names: Vec<&str> = Vec::new();
    for (frames, value) in stacks {
        let v = value.round() as i64;
        if v == 0 {
            continue;
        }
        names.clear();
        names.extend(frames.map(|f| fr.name(f)));
        for (k, n) in names.iter().rev().enumerate() {
            if k > 0 {
                w.write_all(b";")?;
            }
            // `;` separates frames in the folded format; keep it out of C++ names.
            if n.contains(';') {
                w.write_all(n.replace(';', ":").as_bytes())?;
            } else {
                w.write_all(n.as_bytes())?;
            }
        }
        writeln!(w, " {v}")?;
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
    let exe = crate::page::program_name(p);
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

/// Draw folded stacks `text` as a flamegraph SVG to `out`.
pub(crate) fn write_flamegraph(text: &[u8], title: &str, count: &str, out: &Path) -> Result<()> {
    let style = crate::flame::Style {
        title: title.to_string(),
        count: count.to_string(),
        ..Default::default()
    };
    crate::flame::write(text, &style, out)
}

pub(crate) fn header(p: &Profile, file: &Path, idx: SampleIndex) -> String {
    let m = &p.meta;
    let mut s = format!("profile: {}\n", file.display());
    s += &program_line(m);
    let interval = if m.interval == 0 {
        "exact (every allocation)".to_string()
    } else {
        fmt_value(m.interval as f64, SampleIndex::AllocSpace, false)
    };
    s += &format!("sampling: interval {interval}");
    if !m.unwinder.is_empty() {
        s += &format!(", unwinder {}", m.unwinder);
    }
    if m.samples > 0 {
        s += &format!(
            ", {} samples, {} truncated stacks, {} dropped",
            m.samples,
            pct(m.truncated_share()),
            m.dropped
        );
        if m.dropped_bytes > 0 {
            s += &format!(
                " ({} not in this profile)",
                fmt_value(m.dropped_bytes as f64, SampleIndex::AllocSpace, false)
            );
        }
        if m.table_full > 0 {
            s += &format!(
                "; {} of them because the stack table was full ({} stacks: raise --max-stacks)",
                m.table_full, m.max_stacks
            );
        }
        if m.untracked > 0 {
            s += &format!(
                "; {} not tracked live (an address-space limit: in use leaves them out)",
                m.untracked
            );
        }
    }
    s += "\n";
    // What the runtime said it could and could not see (allocators hooked, blind spots).
    for n in &m.notes {
        s += &format!("memlens: {n}\n");
    }
    let t = totals(p);
    let v = |k: usize| {
        let i = SampleIndex::ALL[k];
        if p.has(i) {
            fmt_value(t[k], i, false)
        } else {
            "n/a".into()
        }
    };
    s += &format!(
        "totals: alloc {} in {} objects, in use {} in {} objects\n",
        v(1),
        v(0),
        v(3),
        v(2)
    );
    if m.interval == 0 && m.samples > 0 && t[3] == 0.0 && idx.name().starts_with("inuse") {
        s += "note: nothing in use (exact-mode profiles written before exact mode kept live \
              blocks have none)\n";
    }
    s
}

/// One frame as a stack cell shows it: `(inline) name file:line`.
fn frame_line(f: &Frame) -> String {
    let file = f.file.rsplit('/').next().unwrap_or("");
    let at = if file.is_empty() {
        String::new()
    } else {
        format!(" {file}:{}", f.line)
    };
    let inline = if f.inlined { "(inline) " } else { "" };
    format!("{inline}{}{at}", short_name(&f.function))
}

/// `program: redis-server (/usr/bin/redis-check-rdb, pid 12)`: the name it was started as, and the
/// file that ran when that was a link to another name; empty when nothing is known.
pub(crate) fn program_line(m: &Meta) -> String {
    let name = m.command.rsplit('/').next().unwrap_or("");
    let linked = !name.is_empty() && !m.exe.is_empty() && !m.exe.ends_with(&format!("/{name}"));
    if linked {
        format!("program: {name} ({}, pid {})\n", m.exe, m.pid)
    } else if !m.exe.is_empty() || !name.is_empty() {
        let shown = if m.exe.is_empty() { name } else { &m.exe };
        format!("program: {shown} (pid {})\n", m.pid)
    } else {
        String::new()
    }
}

/// Stack frames one per line, innermost first: the frame that called the allocator, then the
/// program's own frames, each run of library frames ([`is_library`]) before one of them folded to
/// its outermost frame (the call the program made) and a count; at most `max` of the program's
/// frames, the rest counted on the last line. The program's first frame is always shown, however
/// many library frames lie before it. A stack with no frame of the program's shows its first
/// `max` frames.
pub fn stack_cell(frames: &[Frame], max: usize) -> String {
    let lib: Vec<bool> = frames
        .iter()
        .map(|f| is_library(&f.function, &f.file, &f.module))
        .collect();
    let mut lines: Vec<String> = Vec::new();
    if !lib.iter().any(|l| !l) {
        lines.extend(frames.iter().take(max).map(frame_line));
        if frames.len() > max {
            lines.push(format!("… {} more", frames.len() - max));
        }
        return lines.join("\n");
    }
    let fold = |n: usize| format!("  ⋮ {n} library frame{}", if n == 1 { "" } else { "s" });
    let mut shown = 0;
    let mut i = 0;
    while i < frames.len() {
        if i > 0 && lib[i] {
            // a run of library frames: up to the next frame of the program's, or the end
            let end = (i..frames.len()).find(|&k| !lib[k]).unwrap_or(frames.len());
            if end == frames.len() {
                lines.push(fold(end - i));
                break;
            }
            if end - i > 2 {
                lines.push(fold(end - 1 - i));
                i = end - 1;
            }
            lines.push(frame_line(&frames[i]));
            i += 1;
            continue;
        }
        if !lib[i] {
            if shown == max.max(1) {
                let rest = frames.len() - i;
                lines.push(format!("… {rest} more"));
                break;
            }
            shown += 1;
        }
        lines.push(frame_line(&frames[i]));
        i += 1;
    }
    lines.join("\n")
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

/// Where to go from a table: the interactive page, and pprof's own UI for a file pprof reads.
pub(crate) fn drill_down(file: &Path) -> String {
    let f = file.display();
    let html = Path::new(&file.file_name().unwrap_or_default())
        .with_extension("")
        .with_extension("html");
    let mut s = format!(
        "\nto explore: memlens report {f} --html {} (flame graphs, search, callers and callees)",
        html.display()
    );
    let name = file.to_string_lossy();
    if name.ends_with(".pb.gz") || name.ends_with(".pb") {
        s += &format!("; go tool pprof -http=: {f} (pprof's own web UI)");
    }
    wrap(&(s + "\n"), terminal_width(), "  ")
}
