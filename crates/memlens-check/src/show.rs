//! What a check prints on stderr: on failure the offending stacks first (each with the program's
//! own frames first), every figure against its limit, and the profile kept; on success one line.
//! The verdict comes last, where it stays in view.
use crate::estimate::{Est, Verdict};
use crate::figures::StackFig;
use crate::judge::{Judged, StackJudged};
use crate::limits::{Bound, Kind};
use crate::outcome::Outcome;
use memlens_profile::{fmt_value, short_name, SampleIndex};
use std::fmt::Write;

/// Bytes as `23.4 MiB`.
pub fn bytes(v: f64) -> String {
    fmt_value(v, SampleIndex::AllocSpace, false)
}

/// A growth in bytes as `+2.10 MiB`.
fn signed(v: f64) -> String {
    fmt_value(v, SampleIndex::AllocSpace, true)
}

/// `95%: 1.20 MiB..1.45 MiB`.
fn interval(lo: f64, hi: f64) -> String {
    format!("95%: {}..{}", bytes(lo), bytes(hi))
}

/// Frames shown per stack: the program's own, then a line of the library frames.
const OWN_SHOWN: usize = 8;
const LIB_SHOWN: usize = 3;

/// A stack's frames, the program's own first (innermost first), then the library frames on one
/// line; every frame innermost first when none is the program's own.
pub fn stack_lines(s: &StackFig, indent: &str) -> String {
    let mut o = String::new();
    let own: Vec<_> = s.frames.iter().filter(|f| f.own).collect();
    let lib: Vec<_> = s.frames.iter().filter(|f| !f.own).collect();
    let (first, rest) = if own.is_empty() {
        (lib.clone(), Vec::new())
    } else {
        (own, lib)
    };
    for f in first.iter().take(OWN_SHOWN) {
        let at = match (f.file.rsplit('/').next(), f.line) {
            (Some(file), l) if !file.is_empty() && l > 0 => format!("  {file}:{l}"),
            (Some(file), _) if !file.is_empty() => format!("  {file}"),
            _ => String::new(),
        };
        let _ = writeln!(o, "{indent}{}{at}", short_name(&f.function));
    }
    if first.len() > OWN_SHOWN {
        let _ = writeln!(o, "{indent}… {} more", first.len() - OWN_SHOWN);
    }
    if !rest.is_empty() {
        let names: Vec<String> = rest
            .iter()
            .take(LIB_SHOWN)
            .map(|f| {
                let m = f.module.rsplit('/').next().unwrap_or("");
                if m.is_empty() {
                    short_name(&f.function)
                } else {
                    format!("{} ({m})", short_name(&f.function))
                }
            })
            .collect();
        let more = if rest.len() > LIB_SHOWN {
            format!(" … {} more", rest.len() - LIB_SHOWN)
        } else {
            String::new()
        };
        let _ = writeln!(o, "{indent}in libraries: {}{more}", names.join(", "));
    }
    o
}

/// How a figure compares with its limit, as the verdict says.
fn rel(v: Verdict) -> &'static str {
    match v {
        Verdict::Held => "≤",
        Verdict::Inconclusive => "vs",
        Verdict::Broken => ">",
    }
}

/// The figure's name and value: `leak 12.0 MiB`.
fn figure(kind: Kind, e: &Est) -> String {
    format!("{} {}", kind.name(), bytes(e.value))
}

/// One stack behind a verdict.
fn stack_block(o: &mut String, n: usize, j: &Judged, s: &StackJudged) {
    let kind = j.limit.kind;
    let head = match (s.verdict, s.base) {
        (Some(v), Some(b)) => format!(
            "{} {} over the baseline's {} (limit {}; {}) {}",
            figure(kind, &s.figure),
            signed(s.figure.value - b.value),
            bytes(b.value),
            signed(s.bound - b.value),
            interval(s.lo, s.hi),
            v.word()
        ),
        (Some(v), None) => format!(
            "{} {} limit {} ({}) {}",
            figure(kind, &s.figure),
            rel(v),
            bytes(s.bound),
            interval(s.lo, s.hi),
            v.word()
        ),
        (None, Some(b)) => format!(
            "{} (baseline {})",
            signed(s.figure.value - b.value),
            bytes(b.value)
        ),
        (None, None) if j.base.is_some() => format!("{} (new stack)", signed(s.figure.value)),
        (None, None) => format!(
            "{} ({:.0}% of the {})",
            bytes(s.figure.value),
            100.0 * s.figure.value / j.figure.value.max(1.0),
            kind.name()
        ),
    };
    let _ = writeln!(o, "  {n}. {head}");
    o.push_str(&stack_lines(s.stack, "       "));
}

/// A limit's verdict in one line.
pub fn verdict_line(j: &Judged) -> String {
    let kind = j.limit.kind;
    let who = format!("{} (pid {})", j.proc.program(), j.proc.pid);
    let what = match (j.limit.per_stack, j.base) {
        _ if j
            .settle
            .as_deref()
            .is_some_and(|s| s.starts_with("not judged")) =>
        {
            String::new()
        }
        (true, Some(b)) if j.stacks.is_empty() && j.verdict == Verdict::Held => {
            format!("most grown stack {}", signed(j.figure.value - b.value))
        }
        (true, None) if j.stacks.is_empty() && j.verdict == Verdict::Held => {
            format!("largest stack {}", figure(kind, &j.figure))
        }
        (true, _) => format!(
            "{} stack{} not within it",
            j.stacks.len() + j.more,
            if j.stacks.len() + j.more == 1 {
                ""
            } else {
                "s"
            }
        ),
        (false, Some(b)) => format!(
            "{} vs the baseline's {} ({:+.1}%; limit {}, {})",
            figure(kind, &j.figure),
            bytes(b.value),
            100.0 * (j.figure.value / b.value.max(1.0) - 1.0),
            bytes(j.bound),
            interval(j.lo, j.hi)
        ),
        (false, None) => format!(
            "{} {} limit {} ({})",
            figure(kind, &j.figure),
            rel(j.verdict),
            bytes(j.bound),
            interval(j.lo, j.hi)
        ),
    };
    let mut line = format!(
        "memlens check: {} {} in {who}",
        j.limit.shown(),
        j.verdict.word()
    );
    if !what.is_empty() {
        let _ = write!(line, ": {what}");
    }
    if let Some(s) = &j.settle {
        let _ = write!(line, "; {s}");
    }
    line
}

/// Everything printed for a limit that is not held: its line, then the stacks behind it.
fn limit_block(o: &mut String, j: &Judged) {
    let _ = writeln!(o, "{}", verdict_line(j));
    if j.stacks.is_empty() {
        return;
    }
    let intro = match (j.limit.per_stack, j.limit.bound) {
        (true, _) => "stacks not within it",
        (false, Bound::Size(_)) => "largest stacks",
        (false, _) => "stacks that grew most",
    };
    let _ = writeln!(o, "  {intro}, the program's own frames first:");
    for (n, s) in j.stacks.iter().enumerate() {
        stack_block(o, n + 1, j, s);
    }
    if j.more > 0 {
        let _ = writeln!(o, "  … and {} more", j.more);
    }
}

/// The held verdicts of one limit in one line: the verdict itself when there is one, else how
/// many processes held it and the largest figure among them.
fn held_line(held: &[&Judged]) -> Option<String> {
    let largest = held
        .iter()
        .max_by(|a, b| a.figure.value.total_cmp(&b.figure.value))?;
    if held.len() == 1 {
        return Some(verdict_line(largest));
    }
    Some(format!(
        "memlens check: {} held in {} processes (largest: {} in {} pid {})",
        largest.limit.shown(),
        held.len(),
        figure(largest.limit.kind, &largest.figure),
        largest.proc.program(),
        largest.proc.pid
    ))
}

/// The whole text of a check's outcome.
pub fn text(r: &Outcome) -> String {
    let mut o = String::new();
    let mut order: Vec<&Judged> = r.judged.iter().collect();
    order.sort_by_key(|j| std::cmp::Reverse(j.verdict));
    let failing = r.status != 0;
    for j in order.iter().filter(|j| j.verdict != Verdict::Held) {
        limit_block(&mut o, j);
    }
    if failing {
        let mut limits: Vec<String> = r.judged.iter().map(|j| j.limit.shown()).collect();
        limits.dedup();
        for l in limits {
            let held: Vec<&Judged> = order
                .iter()
                .copied()
                .filter(|j| j.verdict == Verdict::Held && j.limit.shown() == l)
                .collect();
            if let Some(line) = held_line(&held) {
                let _ = writeln!(o, "{line}");
            }
        }
    }
    let show_notes = failing || order.iter().any(|j| j.verdict != Verdict::Held);
    if show_notes {
        for n in &r.notes {
            let _ = writeln!(o, "memlens check: note: {n}");
        }
    }
    for k in &r.kept {
        // the view of the first limit not held on this process
        let view = order
            .iter()
            .find(|j| &j.proc.file == k && j.verdict != Verdict::Held)
            .or(order.first())
            .map_or("peak", |j| j.limit.kind.view());
        let _ = writeln!(
            o,
            "memlens check: profile kept: {} (memlens report {} --view {view})",
            k.display(),
            k.display()
        );
    }
    o.push_str(&last_line(r));
    o.push('\n');
    o
}

/// The programs of the run, each named once, at most four.
fn programs(r: &Outcome) -> String {
    let mut v: Vec<&str> = Vec::new();
    for p in r.procs {
        if !v.contains(&p.program()) {
            v.push(p.program());
        }
    }
    let more = v.len().saturating_sub(4);
    v.truncate(4);
    let mut s = v.join(", ");
    if more > 0 {
        let _ = write!(s, " and {more} more");
    }
    if r.procs.len() > 1 {
        s = format!("{} processes of {s}", r.procs.len());
    }
    s
}

/// The verdict of the whole check, in one line.
fn last_line(r: &Outcome) -> String {
    let count = |v: Verdict| r.judged.iter().filter(|j| j.verdict == v).count();
    let (broken, open) = (count(Verdict::Broken), count(Verdict::Inconclusive));
    let progs = programs(r);
    let at = format!(
        "interval {}, 95%",
        memlens_measure::units::format_size(r.interval)
    );
    if let Some(failed) = &r.program_failed {
        return format!(
            "memlens check: FAILED (exit {}): the program failed ({failed}); {broken} limit{} broken",
            r.status,
            if broken == 1 { "" } else { "s" }
        );
    }
    if broken > 0 || (r.strict && open > 0) {
        let strict = if broken == 0 {
            " (inconclusive counts as broken under --strict)".to_string()
        } else {
            String::new()
        };
        return format!(
            "memlens check: FAILED (exit {}): {broken} of {} limits broken, {open} inconclusive, \
             in {} ({at}){strict}",
            r.status,
            r.judged.len(),
            progs
        );
    }
    // per limit, its figure nearest the limit over the processes
    let mut held: Vec<(String, f64, String)> = Vec::new();
    for j in r.judged.iter().filter(|j| j.verdict == Verdict::Held) {
        let margin = j.figure.value - j.bound;
        let what = match (j.limit.per_stack, j.base) {
            (true, Some(b)) => format!("most grown stack {}", signed(j.figure.value - b.value)),
            (true, None) => format!("largest stack {}", bytes(j.figure.value)),
            (false, _) => figure(j.limit.kind, &j.figure),
        };
        let shown = j.limit.shown();
        match held.iter_mut().find(|h| h.0 == shown) {
            Some(h) if margin > h.1 => (h.1, h.2) = (margin, what),
            Some(_) => {}
            None => held.push((shown, margin, what)),
        }
    }
    let held: Vec<String> = held
        .iter()
        .map(|(shown, _, what)| format!("{shown} ({what})"))
        .collect();
    let open = if open > 0 {
        format!(", {open} inconclusive (not counted: see above; --strict fails on them)")
    } else {
        String::new()
    };
    let held = if held.is_empty() {
        "no limit broken".to_string()
    } else {
        format!("{} held", held.join(", "))
    };
    format!("memlens check: passed: {held}{open} in {progs} ({at})")
}
