//! Each limit against each process's figures: a verdict at 95 %, the stacks behind it, and how to
//! settle it when this interval cannot tell.
//!
//! * A limit of SIZE bytes is broken when the figure's lower bound is above it and held when its
//!   upper bound is at or below it (each bound one-sided 97.5 %, a peak's lower bound wider: see
//!   `estimate.rs`); anything between is inconclusive.
//! * Against a baseline, the figure C may be at most (1 + g)·B (or B + SIZE for a stack): broken
//!   when C's lower bound passes (1 + g) times B's upper bound, held when C's upper bound is within
//!   (1 + g) times B's lower bound. Each of the two bounds errs with at most 2.5 %, so a verdict
//!   errs with at most 5 %.
//! * A per-stack limit is judged on every stack; it is broken by any stack beyond it, and
//!   inconclusive if any stack cannot be told — or if the limit is so small that a stack that
//!   large could go unsampled altogether (under ln 40 ≈ 3.7 intervals).
use crate::estimate::{interval_to_settle, pow2_at_most, Est, Verdict, Z, Z_PEAK};
use crate::figures::{Figures, StackFig};
use crate::limits::{Bound, Limit};
use memlens_measure::units::format_size;

/// A stack behind a verdict.
#[derive(Debug)]
pub struct StackJudged<'a> {
    /// The stack.
    pub stack: &'a StackFig,
    /// Its verdict (per-stack limits), or None (a contributor to a total).
    pub verdict: Option<Verdict>,
    /// Its figure.
    pub figure: Est,
    /// Its bounds.
    pub lo: f64,
    /// Upper bound.
    pub hi: f64,
    /// Its limit, bytes (per-stack limits).
    pub bound: f64,
    /// Its figure in the baseline (limits against one; None: not in the baseline).
    pub base: Option<Est>,
}

/// One limit judged on one process.
#[derive(Debug)]
pub struct Judged<'a> {
    /// The limit.
    pub limit: &'a Limit,
    /// The process's figures.
    pub proc: &'a Figures,
    /// The verdict.
    pub verdict: Verdict,
    /// The figure (a per-stack limit: its worst stack's).
    pub figure: Est,
    /// Lower bound.
    pub lo: f64,
    /// Upper bound.
    pub hi: f64,
    /// The limit, bytes (against a baseline: where it is drawn from the baseline's estimate).
    pub bound: f64,
    /// The baseline's figure (limits against one).
    pub base: Option<Est>,
    /// The stacks behind the verdict, most telling first: per-stack, those broken then those
    /// inconclusive; for a total, its largest contributors (or what grew most).
    pub stacks: Vec<StackJudged<'a>>,
    /// Stacks behind the verdict not listed.
    pub more: usize,
    /// How to settle an inconclusive verdict, or why it could not be judged.
    pub settle: Option<String>,
}

/// Judge `limit` on `proc` (with `base`, the baseline's figures, for limits against one),
/// listing at most `top` stacks.
pub fn judge<'a>(
    limit: &'a Limit,
    proc: &'a Figures,
    base: Option<&'a Figures>,
    top: usize,
) -> Judged<'a> {
    let kind = limit.kind;
    let mut j = Judged {
        limit,
        proc,
        verdict: Verdict::Inconclusive,
        figure: *proc.total(kind),
        lo: 0.0,
        hi: 0.0,
        bound: 0.0,
        base: None,
        stacks: Vec::new(),
        more: 0,
        settle: None,
    };
    if let Some(why) = &proc.missing[kind.index()] {
        j.settle = Some(format!("not judged: {why}"));
        return j;
    }
    match (limit.per_stack, limit.bound, base) {
        (false, Bound::Size(l), _) => total_against(&mut j, l, None, top),
        (false, Bound::Growth(g), Some(b)) => {
            if let Some(why) = &b.missing[kind.index()] {
                j.settle = Some(format!("not judged: the baseline's {why}"));
                return j;
            }
            total_against(&mut j, 1.0 + g, Some(b), top)
        }
        (true, _, _) => per_stack(&mut j, base, top),
        (false, _, None) | (false, Bound::GrowthBytes(_), _) => {
            j.settle = Some("not judged: no baseline".into());
        }
    }
    j
}

/// Verdict of bounds `lo..=hi` held at or below `held_at`, broken above `broken_at`.
fn compare(lo: f64, hi: f64, held_at: f64, broken_at: f64) -> Verdict {
    if lo > broken_at {
        Verdict::Broken
    } else if hi <= held_at {
        Verdict::Held
    } else {
        Verdict::Inconclusive
    }
}

/// A total against `x` bytes, or against `x` times the baseline's total.
fn total_against<'a>(j: &mut Judged<'a>, x: f64, base: Option<&'a Figures>, top: usize) {
    let kind = j.limit.kind;
    let f = j.figure;
    (j.lo, j.hi) = (f.lower(f.z_lower(kind.z_lower())), f.upper());
    let (held_at, broken_at) = match base {
        None => (x, x),
        Some(b) => {
            let be = *b.total(kind);
            j.base = Some(be);
            (x * be.lower(be.z_lower(kind.z_lower())), x * be.upper())
        }
    };
    j.bound = match j.base {
        Some(be) => x * be.value,
        None => x,
    };
    j.verdict = compare(j.lo, j.hi, held_at, broken_at);
    if j.verdict == Verdict::Inconclusive {
        j.settle = settle_hint(j, f.value, j.bound, base.is_some());
    }
    contributors(j, base, top);
}

/// The stacks behind a total: the largest (or, against a baseline, those that grew most).
fn contributors<'a>(j: &mut Judged<'a>, base: Option<&'a Figures>, top: usize) {
    let kind = j.limit.kind;
    let i = kind.index();
    let mut list: Vec<(f64, StackJudged<'a>)> = j
        .proc
        .stacks
        .iter()
        .filter(|s| s.allowed[i].is_none() && s.figs[i].value > 0.0)
        .map(|s| {
            let b = base.and_then(|b| b.find(&s.key())).map(|b| *b.fig(kind));
            let rank = s.figs[i].value - b.map_or(0.0, |b| b.value);
            let sj = StackJudged {
                stack: s,
                verdict: None,
                figure: s.figs[i],
                lo: s.figs[i].lower(kind.z_lower()),
                hi: s.figs[i].upper(),
                bound: 0.0,
                base: b,
            };
            (rank, sj)
        })
        .filter(|(rank, _)| base.is_none() || *rank > 0.0)
        .collect();
    list.sort_by(|a, b| b.0.total_cmp(&a.0));
    j.more = list.len().saturating_sub(top);
    j.stacks = list.into_iter().take(top).map(|(_, s)| s).collect();
}

/// A per-stack limit: every stack judged, the worst listed.
fn per_stack<'a>(j: &mut Judged<'a>, base: Option<&'a Figures>, top: usize) {
    let kind = j.limit.kind;
    let i = kind.index();
    let zl = kind.z_lower();
    let r_base = base.map_or(0, |b| b.interval);
    let mut judged: Vec<StackJudged<'a>> = Vec::new();
    for s in j.proc.stacks.iter().filter(|s| s.allowed[i].is_none()) {
        let f = s.figs[i];
        if f.value <= 0.0 {
            continue;
        }
        let (lo, hi) = (f.lower(zl), f.upper());
        let (held_at, broken_at, bound, b) = match (j.limit.bound, base) {
            (Bound::GrowthBytes(g), Some(bp)) => {
                // a stack the baseline lacks was 0 there, give or take what went unsampled
                let be = bp
                    .find(&s.key())
                    .map_or(Est::of(0.0, 0.0, r_base), |x| *x.fig(kind));
                (be.lower(zl) + g, be.upper() + g, be.value + g, Some(be))
            }
            (Bound::Size(l), _) => (l, l, l, None),
            _ => continue,
        };
        judged.push(StackJudged {
            stack: s,
            verdict: Some(compare(lo, hi, held_at, broken_at)),
            figure: f,
            lo,
            hi,
            bound,
            base: b,
        });
    }
    // worst first: broken, then inconclusive, then held; within each, furthest beyond its limit
    judged.sort_by(|a, b| {
        b.verdict
            .cmp(&a.verdict)
            .then((b.figure.value - b.bound).total_cmp(&(a.figure.value - a.bound)))
    });
    match judged.first() {
        Some(w) => {
            j.verdict = w.verdict.unwrap_or(Verdict::Held);
            (j.figure, j.lo, j.hi, j.bound, j.base) = (w.figure, w.lo, w.hi, w.bound, w.base);
        }
        None => {
            j.verdict = Verdict::Held;
            if let Bound::Size(l) = j.limit.bound {
                j.bound = l;
            }
        }
    }
    if j.verdict == Verdict::Inconclusive {
        j.settle = settle_hint(j, j.figure.value, j.bound, base.is_some());
    }
    unseen_stacks(j);
    judged.retain(|s| s.verdict != Some(Verdict::Held));
    j.more = judged.len().saturating_sub(top);
    judged.truncate(top);
    j.stacks = judged;
}

/// A per-stack limit under ln 40 intervals: a stack that large may have gone unsampled, so the
/// limit cannot be held at 95 % (it can still be broken).
fn unseen_stacks(j: &mut Judged) {
    let r = j.proc.interval as f64;
    let Bound::Size(l) = j.limit.bound else {
        return;
    };
    let unseen = Est::of(0.0, 0.0, j.proc.interval).upper();
    if r > 0.0 && l < unseen && j.verdict == Verdict::Held {
        j.verdict = Verdict::Inconclusive;
        j.settle = Some(format!(
            "a stack of {} can go unsampled at interval {}: settle it with --interval {}",
            format_size(l as u64),
            format_size(r as u64),
            pow2_at_most(l / 3.7).map_or("1".into(), format_size)
        ));
    }
}

/// How to settle an inconclusive verdict on a figure of `value` bytes against `bound`.
fn settle_hint(j: &Judged, value: f64, bound: f64, against_base: bool) -> Option<String> {
    let kind = j.limit.kind;
    let now = j.proc.interval;
    if bound <= 0.0 && now > 0 {
        return Some(
            "a limit of 0 is broken by any block sampled beyond it, and never held at 95% (what \
             went unsampled may be there): nothing was seen"
                .into(),
        );
    }
    let margin = (value - bound).abs();
    let z = if value > bound {
        j.figure.z_lower(kind.z_lower())
    } else if j.figure.upper_floor > bound {
        // held back by the highest estimate's bound: the highest of a run's estimates leans
        // high by up to Z_PEAK of their standard errors
        Z_PEAK
    } else {
        Z
    };
    // against a baseline both runs' errors count: their bounds' confidences add up
    let (size, z) = if against_base {
        (2.0 * value.max(bound), z + Z)
    } else {
        (value, z)
    };
    let finer = interval_to_settle(size, margin, z)
        .filter(|&r| r < now)
        .map_or_else(
            || "--interval 1 (nearly every block recorded)".to_string(),
            |r| format!("--interval {}", format_size(r)),
        );
    let exact = " or --exact";
    let both = if against_base {
        " (and a baseline made at that interval)"
    } else {
        ""
    };
    Some(format!(
        "inconclusive at interval {}: settle it with {finer}{exact}{both}",
        format_size(now)
    ))
}

/// The processes a baseline is compared with: all of them when the run left one profile, else
/// those running the baseline's program (by the executable's file name).
pub fn compared_with<'a>(procs: &'a [Figures], base: &Figures) -> Vec<&'a Figures> {
    if procs.len() == 1 {
        return procs.iter().collect();
    }
    procs
        .iter()
        .filter(|p| p.program() == base.program())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allow::Allow;
    use crate::limits::Kind;
    use memlens_profile::{Function, Line, Location, Mapping, Profile, Sample};
    use std::path::Path;

    #[test]
    fn verdicts_from_bounds() {
        assert_eq!(compare(11.0, 12.0, 10.0, 10.0), Verdict::Broken);
        assert_eq!(compare(8.0, 10.0, 10.0, 10.0), Verdict::Held);
        assert_eq!(compare(9.0, 11.0, 10.0, 10.0), Verdict::Inconclusive);
        // against a baseline the two thresholds differ: held within 9, broken beyond 12
        assert_eq!(compare(9.5, 10.5, 9.0, 12.0), Verdict::Inconclusive);
        assert_eq!(compare(12.5, 13.0, 9.0, 12.0), Verdict::Broken);
    }

    /// A profile at 4 KiB of `/app/bin` whose stacks (innermost first, by function index) leak
    /// the given bytes in 100-byte blocks: function 1 is libc's malloc, the others the program's.
    fn profile(stacks: &[(&[u64], f64)]) -> Profile {
        let mut p = Profile::default();
        p.meta.interval = 4096;
        p.meta.exe = "/app/bin".into();
        p.mappings = vec![
            Mapping {
                filename: "/app/bin".into(),
                ..Mapping::default()
            },
            Mapping {
                filename: "/usr/lib/x86_64-linux-gnu/libc.so.6".into(),
                ..Mapping::default()
            },
        ];
        for (i, name) in ["malloc", "cache_insert", "main", "build"]
            .iter()
            .enumerate()
        {
            p.functions.push(Function {
                name: name.to_string(),
                ..Function::default()
            });
            p.locations.push(Location {
                mapping: if i == 0 { 2 } else { 1 },
                address: 0x1000 + i as u64,
                lines: vec![Line {
                    function: i as u64 + 1,
                    line: 10,
                }],
            });
        }
        for (frames, bytes) in stacks {
            p.samples.push(Sample {
                locations: frames.to_vec(),
                inuse_bytes: *bytes,
                inuse_objects: bytes / 100.0,
                alloc_bytes: *bytes,
                alloc_objects: bytes / 100.0,
                ..Sample::default()
            });
        }
        p
    }

    fn figures(p: &Profile, allow: &[&str]) -> Figures {
        let allow: Vec<String> = allow.iter().map(|s| s.to_string()).collect();
        Figures::of(
            p,
            Path::new("p.pb.gz"),
            &Allow::new(&allow, &[] as &[&Path]).unwrap(),
        )
    }

    const CACHE: &[u64] = &[1, 2, 3];
    const BUILD: &[u64] = &[1, 4, 3];

    #[test]
    fn per_stack_limits_name_the_stacks_beyond_them() {
        let p = profile(&[(CACHE, 10e6), (BUILD, 1e6)]);
        let f = figures(&p, &[]);
        assert_eq!(f.stacks.len(), 2);
        assert!((f.total(Kind::Leak).value - 11e6).abs() < 1.0);
        let l = Limit::size(Kind::Leak, true, "--max-leak-per-stack", "5M").unwrap();
        let j = judge(&l, &f, None, 5);
        assert_eq!(j.verdict, Verdict::Broken);
        assert_eq!(j.stacks.len(), 1, "only the stack beyond the limit: {j:?}");
        let frames = &j.stacks[0].stack.frames;
        assert_eq!(frames[1].function, "cache_insert");
        assert!(!frames[0].own && frames[1].own && frames[2].own);
        // the program's own frames first, the library's after them
        let text = crate::show::stack_lines(j.stacks[0].stack, "");
        assert_eq!(
            text,
            "cache_insert\nmain\nin libraries: malloc (libc.so.6)\n"
        );
        // set aside, the stack is in no figure
        let f = figures(&p, &["^cache_"]);
        assert_eq!(judge(&l, &f, None, 5).verdict, Verdict::Held);
        assert!((f.total(Kind::Leak).value - 1e6).abs() < 1.0);
        assert_eq!(f.allowed[Kind::Leak.index()].0, 1);
    }

    #[test]
    fn a_new_stack_grows_from_nothing() {
        let base = profile(&[(BUILD, 1e6)]);
        let new = profile(&[(CACHE, 10e6), (BUILD, 1e6)]);
        let (b, n) = (figures(&base, &[]), figures(&new, &[]));
        let l = Limit::growth_bytes(Kind::Leak, "--max-leak-growth-per-stack", "1M").unwrap();
        let j = judge(&l, &n, Some(&b), 5);
        assert_eq!(j.verdict, Verdict::Broken);
        assert_eq!(j.stacks.len(), 1);
        assert_eq!(j.stacks[0].base.map(|e| e.value), Some(0.0));
        // the unchanged stack holds: it grew by nothing, its bounds well within 1 MiB
        let again = figures(&base, &[]);
        assert_eq!(judge(&l, &again, Some(&b), 5).verdict, Verdict::Held);
        // a total against the baseline: 11 MB vs 1 MB is more than 10 % more
        let g = Limit::growth(Kind::Leak, "--max-leak-growth", "10%").unwrap();
        assert_eq!(judge(&g, &n, Some(&b), 5).verdict, Verdict::Broken);
    }

    #[test]
    fn a_limit_a_stack_could_hide_under_is_never_held() {
        // 8 KiB per stack at 4 KiB: a stack that large goes unsampled one time in seven, so even
        // a profile without a stack cannot hold it
        let l = Limit::size(Kind::Leak, true, "--max-leak-per-stack", "8K").unwrap();
        let f = figures(&profile(&[]), &[]);
        let j = judge(&l, &f, None, 5);
        assert_eq!(j.verdict, Verdict::Inconclusive);
        assert!(
            j.settle.as_deref().unwrap().contains("--interval 2K"),
            "{:?}",
            j.settle
        );
        // one sample of a 100-byte block stands for 4 KiB: within 8 KiB, or not, it cannot say
        let f = figures(&profile(&[(BUILD, 4096.0)]), &[]);
        assert_eq!(judge(&l, &f, None, 5).verdict, Verdict::Inconclusive);
    }
}
