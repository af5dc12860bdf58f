//! `memlens report --html`: one self-contained page to explore a profile, offline (no network, no
//! server; everything inlined). Each view (allocated, in use, peak, leaks, temporaries) has an
//! interactive flame graph drawn by inferno (its own script zooms on a click and searches; each
//! graph sits in a frame of its own, as inferno's script expects a document to itself) and tables
//! the page's script builds: stacks, functions, top-down and bottom-up trees, callers and callees,
//! sortable and filtered by one search box that also highlights in every flame graph. The
//! timeline draws the estimated heap, RSS and the allocator's figures over time, and the top sites
//! stacked where their bytes were measured (periodic dumps of the process beside the file, the
//! peak set, the dump itself).
//!
//! The numbers behind the page are the JSON `report --format json` prints (per view, its first
//! [`PAGE_STACKS`] stacks and functions, the rest said), embedded as is; the page only adds the
//! short form of each name and whether it is a library's.
use crate::agg::{FrameId, Frames, Stacks};
use crate::model::{Profile, SampleIndex};
use crate::names::{is_library, short_name};
use crate::present::program_name;
use crate::views::{page_view, summary, View};
use anyhow::Result;
use serde_json::{json, Map, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// Stacks (and functions) of each view embedded in the page; the rest are counted, not shown.
const PAGE_STACKS: usize = 2000;
/// Sites drawn as their own band in the timeline; the others are one band.
const SITES: usize = 8;
/// Periodic dumps read for the timeline at most (evenly spread over those found).
const MAX_DUMPS: usize = 120;

const CSS: &str = include_str!("page/page.css");
const JS: &str = include_str!("page/page.js");

/// The page of profile `p` read from `file`.
pub(crate) fn html(p: &Profile, file: &Path) -> Result<String> {
    let mut fr = Frames::default();
    let mut stacks = Stacks::by_line(p, &mut fr);
    let mut views = Map::new();
    let mut flames = Map::new();
    let mut totals = Map::new();
    for view in [
        View::Peak,
        View::Leaks,
        View::Temporaries,
        View::Inuse,
        View::Alloc,
    ] {
        let Some((json, total, count, folded)) = one_view(p, &fr, &mut stacks, file, view)? else {
            continue;
        };
        let name = view_name(view);
        if let Some(svg) = flame(&fr, &folded, view)? {
            flames.insert(name.into(), svg.into());
        }
        views.insert(name.into(), serde_json::from_str(&json)?);
        totals.insert(name.into(), json!({ "value": total, "stacks": count }));
    }
    let timeline = match crate::views::timeline_json(p, file) {
        Ok(t) if p.views.as_ref().is_some_and(|v| !v.timeline.is_empty()) => {
            serde_json::from_str(&t)?
        }
        _ => Value::Null,
    };
    let program = program_name(p);
    let data = json!({
        "program": program,
        "pid": p.meta.pid,
        "file": file.display().to_string(),
        "pprof": file.to_string_lossy().ends_with(".pb.gz").then(|| format!("go tool pprof -http=: {}", file.display())),
        "header": crate::present::header(p, file, SampleIndex::AllocSpace),
        "summaries": {
            "peak": summary(p, View::Peak),
            "leaks": summary(p, View::Leaks),
            "temporaries": summary(p, View::Temporaries),
        },
        "order": ["peak", "leaks", "temporaries", "inuse", "alloc"],
        "views": views,
        "totals": totals,
        "limit": PAGE_STACKS,
        "names": names(&views, &fr),
        "timeline": timeline,
        "sites": sites_over_time(p, file),
        "flames": flames,
    });
    let title = format!("memlens: {program} (pid {})", p.meta.pid);
    Ok(format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width\"><title>{}</title>\n\
         <style>{CSS}</style></head>\n<body>\n<script type=\"application/json\" id=\"data\">{}</script>\n\
         <script>{JS}</script>\n</body></html>\n",
        memlens_render::html::escape(&title),
        memlens_render::html::script_json(&data.to_string()),
    ))
}

/// The JSON, value total, stack count and stacks (frames, value) of one view; None when the
/// profile does not have it.
type Part = (String, f64, usize, Vec<(Vec<FrameId>, f64)>);

fn one_view(
    p: &Profile,
    fr: &Frames,
    stacks: &mut Stacks,
    file: &Path,
    view: View,
) -> Result<Option<Part>> {
    let idx = match view {
        View::Alloc => SampleIndex::AllocSpace,
        View::Inuse => SampleIndex::InuseSpace,
        _ => {
            return Ok(page_view(p, fr, stacks, file, view, PAGE_STACKS)?
                .map(|v| (v.json, v.total, v.count, v.stacks)))
        }
    };
    if !p.has(idx) || p.total(idx) == 0.0 {
        return Ok(None);
    }
    stacks.sort_by(idx);
    let values = stacks.list.iter().map(|s| (stacks.frames(s), s.values));
    let funcs = crate::present::sorted(crate::agg::functions(fr, values), idx as usize);
    let mut out = Vec::new();
    crate::present::json(p, file, fr, stacks, &funcs, idx, PAGE_STACKS, &mut out)?;
    let list: Vec<(Vec<FrameId>, f64)> = stacks
        .list
        .iter()
        .filter(|s| s.get(idx) > 0.0)
        .map(|s| (stacks.frames(s).collect(), s.get(idx)))
        .collect();
    Ok(Some((
        String::from_utf8(out)?,
        p.total(idx),
        list.len(),
        list,
    )))
}

fn view_name(v: View) -> &'static str {
    match v {
        View::Alloc => "alloc",
        View::Inuse => "inuse",
        View::Peak => "peak",
        View::Leaks => "leaks",
        View::Temporaries => "temporaries",
        View::Timeline => "timeline",
    }
}

/// A view's flame graph (short names: the graph is for reading; JSON keeps the full ones).
fn flame(fr: &Frames, stacks: &[(Vec<FrameId>, f64)], view: View) -> Result<Option<String>> {
    let mut short: HashMap<FrameId, String> = HashMap::new();
    let mut text = String::new();
    for (frames, v) in stacks {
        let v = v.round() as i64;
        if v <= 0 {
            continue;
        }
        for (k, f) in frames.iter().rev().enumerate() {
            if k > 0 {
                text.push(';');
            }
            let name = short
                .entry(*f)
                .or_insert_with(|| short_name(fr.name(*f)).replace(';', ":"));
            text.push_str(name);
        }
        text += &format!(" {v}\n");
    }
    if text.is_empty() {
        return Ok(None);
    }
    let style = crate::flame::Style {
        title: format!("{}: click a frame to zoom, search above", value_title(view)),
        count: "bytes".into(),
        width: None,
        memory_colors: true,
    };
    Ok(Some(crate::flame::svg(text.as_bytes(), &style)?))
}

fn value_title(v: View) -> &'static str {
    match v {
        View::Alloc => "bytes allocated",
        View::Inuse => "bytes in use at the dump",
        View::Peak => "bytes live at the peak",
        View::Leaks => "bytes still live at the dump",
        View::Temporaries => "short-lived bytes",
        View::Timeline => "",
    }
}

/// Every function name the page's data holds (its views' stacks and functions): its short form and
/// whether it is a library's (1) or the program's own (0), for the page to show and fold names as
/// the terminal does (classified by the first frame of that name, with its file and module).
fn names(views: &Map<String, Value>, fr: &Frames) -> Value {
    let mut held: HashMap<&str, Option<u8>> = HashMap::new();
    for v in views.values() {
        let stacks = v["stacks"].as_array().into_iter().flatten();
        let frames = stacks.flat_map(|s| s["frames"].as_array().into_iter().flatten());
        let funcs = v["functions"].as_array().into_iter().flatten();
        for f in frames.chain(funcs) {
            held.insert(f["function"].as_str().unwrap_or(""), None);
        }
    }
    for id in 0..fr.count() {
        let f = fr.frame(id);
        if let Some(slot @ None) = held.get_mut(f.function.as_str()) {
            *slot = Some(is_library(&f.function, &f.file, &f.module) as u8);
        }
    }
    let m: Map<String, Value> = held
        .into_iter()
        .map(|(name, lib)| {
            (
                name.to_string(),
                json!([short_name(name), lib.unwrap_or(0)]),
            )
        })
        .collect();
    Value::Object(m)
}

/// The site a stack is shown under in the timeline (the page's script names sites the same way):
/// its first frame of the program's own code past the program's allocation functions (`zmalloc`,
/// `xmalloc`: a name whose last part holds `alloc`), as short name and file:line; else its first
/// frame of its own, else its first frame.
fn site(fr: &Frames, frames: &[FrameId]) -> String {
    let own: Vec<_> = frames
        .iter()
        .map(|&f| fr.frame(f))
        .filter(|f| !is_library(&f.function, &f.file, &f.module))
        .collect();
    let wrapper = |name: &str| {
        let last = name.rsplit("::").next().unwrap_or("").to_lowercase();
        last.contains("alloc") || last.contains("strdup")
    };
    let f = own
        .iter()
        .find(|f| !wrapper(&short_name(&f.function)))
        .or(own.first())
        .cloned()
        .or_else(|| frames.first().map(|&f| fr.frame(f)));
    match f {
        None => "?".into(),
        Some(f) if f.file.is_empty() => short_name(&f.function),
        Some(f) => format!(
            "{} {}:{}",
            short_name(&f.function),
            f.file.rsplit('/').next().unwrap_or(""),
            f.line
        ),
    }
}

/// Bytes per site at the moments a profile measured them: each periodic dump of the process
/// beside `file` (`<stem>.<n>.pb.gz`, in use at its time), the peak set (at the peak) and `p`
/// itself (in use at its dump). The top [`SITES`] sites by their largest value, the rest summed.
fn sites_over_time(p: &Profile, file: &Path) -> Value {
    let mut moments: Vec<(f64, &'static str, HashMap<String, f64>)> = Vec::new();
    let start = p.meta.start_ns;
    let secs = |ns: u64| ns.saturating_sub(start) as f64 / 1e9;
    for d in periodic_dumps(file) {
        if let Ok(q) = crate::convert::load(&d) {
            if q.meta.pid == p.meta.pid && q.meta.start_ns == start {
                moments.push((secs(q.meta.time_ns), "dump", by_site(&q, false)));
            }
        }
    }
    if let Some(v) = p.views.as_ref().filter(|v| v.peak_ns > 0) {
        moments.push((secs(v.peak_ns), "peak", by_site(p, true)));
    }
    moments.push((secs(p.meta.time_ns), "dump", by_site(p, false)));
    moments.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut top: HashMap<&str, f64> = HashMap::new();
    for (_, _, m) in &moments {
        for (k, v) in m {
            let e = top.entry(k).or_default();
            *e = e.max(*v);
        }
    }
    let mut names: Vec<(&str, f64)> = top.into_iter().filter(|x| x.1 > 0.0).collect();
    names.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    names.truncate(SITES);
    let sites: Vec<Value> = names
        .iter()
        .map(|(n, _)| {
            let v: Vec<f64> = moments
                .iter()
                .map(|m| *m.2.get(*n).unwrap_or(&0.0))
                .collect();
            json!({ "name": n, "values": v })
        })
        .collect();
    let other: Vec<f64> = moments
        .iter()
        .map(|m| {
            m.2.iter()
                .filter(|(k, _)| !names.iter().any(|(n, _)| n == k))
                .map(|x| x.1)
                .sum()
        })
        .collect();
    json!({
        "times_s": moments.iter().map(|m| m.0).collect::<Vec<_>>(),
        "kinds": moments.iter().map(|m| m.1).collect::<Vec<_>>(),
        "sites": sites,
        "other": other,
    })
}

/// Bytes in use (or, `peak`, live at the peak) per site of `p`.
fn by_site(p: &Profile, peak: bool) -> HashMap<String, f64> {
    let mut fr = Frames::default();
    let stacks = Stacks::by_line(p, &mut fr);
    let mut m: HashMap<String, f64> = HashMap::new();
    for st in &stacks.list {
        let v = if peak {
            stacks.life_of(st).peak_bytes
        } else {
            st.get(SampleIndex::InuseSpace)
        };
        if v > 0.0 {
            let frames: Vec<FrameId> = stacks.frames(st).collect();
            *m.entry(site(&fr, &frames)).or_default() += v;
        }
    }
    m
}

/// The periodic dumps of the process whose final profile is `file` (`memlens run --dump-every`
/// writes `<stem>.<n>.pb.gz` beside `<stem>.pb.gz`), in order, at most [`MAX_DUMPS`].
fn periodic_dumps(file: &Path) -> Vec<PathBuf> {
    let name = file.file_name().unwrap_or_default().to_string_lossy();
    let Some(stem) = name.strip_suffix(".pb.gz") else {
        return Vec::new();
    };
    let dir = match file.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Ok(rd) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found: Vec<(u64, PathBuf)> = rd
        .filter_map(|e| {
            let n = e.ok()?.file_name().into_string().ok()?;
            let seq = n
                .strip_prefix(stem)?
                .strip_prefix('.')?
                .strip_suffix(".pb.gz")?;
            Some((seq.parse().ok()?, dir.join(&n)))
        })
        .collect();
    found.sort();
    let step = found.len().div_ceil(MAX_DUMPS).max(1);
    found.into_iter().step_by(step).map(|x| x.1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periodic_dumps_are_the_numbered_siblings_in_order() {
        let d = tempfile::tempdir().unwrap();
        for n in [
            "a.pb.gz",
            "a.2.pb.gz",
            "a.10.pb.gz",
            "a.1.pb.gz",
            "a.1.peak.pb.gz",
            "ab.3.pb.gz",
        ] {
            std::fs::write(d.path().join(n), "").unwrap();
        }
        let got: Vec<String> = periodic_dumps(&d.path().join("a.pb.gz"))
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(got, ["a.1.pb.gz", "a.2.pb.gz", "a.10.pb.gz"]);
    }
}
