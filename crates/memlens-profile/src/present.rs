//! The pieces that every printed form of a profile shares: `report`'s tables, JSON and folded
//! stacks, its `--view`s (`views`), the HTML page (`page`) and `diff`. The output format, the JSON
//! report and its parts, folded stacks, the header and program lines, stack cells and the line
//! that says where to go next. It sits below those modules so that they call one way.
use crate::agg::{fmt_value, pct, share, FrameId, Frames, Func, SerSeq, Stacks};
use crate::model::{Frame, Meta, Profile, SampleIndex};
use crate::names::{is_library, short_name};
use anyhow::Result;
use memlens_render::doc::{terminal_width, wrap};
use serde::Serialize;
use std::io::Write;
use std::path::Path;

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
    mmap_totals: Values,
    functions: F,
    stacks: S,
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

fn mmap_totals(p: &Profile) -> [f64; 4] {
    SampleIndex::ALL.map(|i| p.mmap_total(i))
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
        mmap_totals: mmap_totals(p).into(),
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
    let mm = mmap_totals(p);
    if mm[1] > 0.0 || mm[3] > 0.0 {
        let f = |k: usize| fmt_value(mm[k], SampleIndex::ALL[k], false);
        let heap = fmt_value(t[3] - mm[3], SampleIndex::InuseSpace, false);
        s += &format!(
            "of which anonymous mmap (frame `{}`): alloc {}, in use {}; heap in use {heap}\n",
            crate::convert::MMAP_FRAME,
            f(1),
            f(3)
        );
    }
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

/// The name the program was started as (`redis-server`, not the file its symlink points to).
pub(crate) fn program_name(p: &Profile) -> String {
    let m = &p.meta;
    let path = if m.command.is_empty() {
        &m.exe
    } else {
        &m.command
    };
    path.rsplit('/').next().unwrap_or("").to_string()
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
