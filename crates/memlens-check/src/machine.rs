//! A check's outcome for machines: JSON (`--json FILE`) and JUnit XML (`--junit FILE`).
//!
//! JSON:
//! ```text
//! { "result": "passed" | "failed" | "program_failed", "exit_status": 0 | 1 | 3,
//!   "command": [...], "program": { "ending": "exit 0", "exit_code": 0 },
//!   "interval": 16384, "interval_chosen": "…" | null, "confidence": 0.95, "seconds": 1.2,
//!   "profiles_kept": [ path ],
//!   "processes": [ { "pid", "exe", "profile" } ],
//!   "limits": [ { "option", "value", "kind", "per_stack", "pid", "exe", "verdict",
//!                 "figure", "low", "high", "limit", "baseline": { "figure", "low", "high" } | null,
//!                 "settle": text | null,
//!                 "stacks": [ { "verdict" | null, "figure", "low", "high", "limit" | null,
//!                               "baseline" | null, "frames": [ { "function", "file", "line",
//!                               "module", "own" } ] } ], "more_stacks": n } ],
//!   "notes": [ text ] }
//! ```
//! JUnit: one `<testsuite>` per program, one `<testcase>` per limit and process: a broken limit is
//! a `<failure>`, an inconclusive one `<skipped>` (a `<failure>` under `--strict`), the program's
//! own failure an `<error>` test case of its own.
use crate::estimate::{Est, Verdict};
use crate::figures::ShownFrame;
use crate::judge::{Judged, StackJudged};
use crate::outcome::Outcome;
use crate::show::{stack_lines, verdict_line};
use serde::Serialize;
use std::fmt::Write;

#[derive(Serialize)]
struct Json<'a> {
    result: &'static str,
    exit_status: i32,
    command: &'a [String],
    program: Program<'a>,
    interval: u64,
    interval_chosen: Option<&'a str>,
    confidence: f64,
    seconds: f64,
    profiles_kept: Vec<String>,
    processes: Vec<Proc<'a>>,
    limits: Vec<JsonLimit<'a>>,
    notes: &'a [String],
}

#[derive(Serialize)]
struct Program<'a> {
    ending: &'a str,
    exit_code: i32,
}

#[derive(Serialize)]
struct Proc<'a> {
    pid: u32,
    exe: &'a str,
    profile: String,
}

#[derive(Serialize)]
struct Bounds {
    figure: f64,
    low: f64,
    high: f64,
}

impl Bounds {
    fn of(e: &Est, z: f64) -> Bounds {
        Bounds {
            figure: e.value,
            low: e.lower(z),
            high: e.upper(),
        }
    }
}

#[derive(Serialize)]
struct JsonLimit<'a> {
    option: &'static str,
    value: &'a str,
    kind: &'static str,
    per_stack: bool,
    pid: u32,
    exe: &'a str,
    verdict: Verdict,
    figure: f64,
    low: f64,
    high: f64,
    limit: f64,
    baseline: Option<Bounds>,
    settle: Option<&'a str>,
    stacks: Vec<JsonStack<'a>>,
    more_stacks: usize,
}

#[derive(Serialize)]
struct JsonStack<'a> {
    verdict: Option<Verdict>,
    figure: f64,
    low: f64,
    high: f64,
    limit: Option<f64>,
    baseline: Option<Bounds>,
    frames: &'a [ShownFrame],
}

fn json_stack<'a>(j: &Judged, s: &'a StackJudged) -> JsonStack<'a> {
    let z = j.limit.kind.z_lower();
    JsonStack {
        verdict: s.verdict,
        figure: s.figure.value,
        low: s.lo,
        high: s.hi,
        limit: s.verdict.map(|_| s.bound),
        baseline: s.base.map(|b| Bounds::of(&b, z)),
        frames: &s.stack.frames,
    }
}

/// The outcome as pretty JSON.
pub fn json(r: &Outcome) -> anyhow::Result<String> {
    let limits = r
        .judged
        .iter()
        .map(|j| JsonLimit {
            option: j.limit.flag,
            value: &j.limit.given,
            kind: j.limit.kind.name(),
            per_stack: j.limit.per_stack,
            pid: j.proc.pid,
            exe: &j.proc.exe,
            verdict: j.verdict,
            figure: j.figure.value,
            low: j.lo,
            high: j.hi,
            limit: j.bound,
            baseline: j
                .base
                .map(|b| Bounds::of(&b, b.z_lower(j.limit.kind.z_lower()))),
            settle: j.settle.as_deref(),
            stacks: j.stacks.iter().map(|s| json_stack(j, s)).collect(),
            more_stacks: j.more,
        })
        .collect();
    let doc = Json {
        result: result_word(r),
        exit_status: r.status,
        command: &r.command,
        program: Program {
            ending: &r.ending,
            exit_code: r.exit_code,
        },
        interval: r.interval,
        interval_chosen: r.interval_why.as_deref(),
        confidence: 0.95,
        seconds: r.seconds,
        profiles_kept: r.kept.iter().map(|k| k.display().to_string()).collect(),
        processes: r
            .procs
            .iter()
            .map(|p| Proc {
                pid: p.pid,
                exe: &p.exe,
                profile: p.file.display().to_string(),
            })
            .collect(),
        limits,
        notes: &r.notes,
    };
    Ok(serde_json::to_string_pretty(&doc)? + "\n")
}

fn result_word(r: &Outcome) -> &'static str {
    if r.program_failed.is_some() {
        "program_failed"
    } else if r.status != 0 {
        "failed"
    } else {
        "passed"
    }
}

/// Escape text for XML content and attributes.
fn xml(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            // characters XML 1.0 does not allow at all
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\t' | '\r') => o.push('?'),
            c => o.push(c),
        }
    }
    o
}

/// One test case's body: the verdict line and the stacks behind it.
fn case_text(j: &Judged) -> String {
    let mut t = verdict_line(j);
    t.push('\n');
    for (n, s) in j.stacks.iter().enumerate() {
        let _ = writeln!(
            t,
            "{}. {} {}",
            n + 1,
            j.limit.kind.name(),
            crate::show::bytes(s.figure.value)
        );
        t.push_str(&stack_lines(s.stack, "   "));
    }
    t
}

/// The outcome as JUnit XML.
pub fn junit(r: &Outcome) -> String {
    let mut cases = String::new();
    let (mut failures, mut errors, mut skipped) = (0, 0, 0);
    if let Some(f) = &r.program_failed {
        errors += 1;
        let _ = writeln!(
            cases,
            "    <testcase classname=\"memlens.check\" name=\"the program ran\">\n      \
             <error message=\"{}\" type=\"program\"/>\n    </testcase>",
            xml(&format!("the program failed ({f})"))
        );
    }
    for j in &r.judged {
        let name = format!(
            "{} ({} pid {})",
            j.limit.shown(),
            j.proc.program(),
            j.proc.pid
        );
        let _ = write!(
            cases,
            "    <testcase classname=\"memlens.check.{}\" name=\"{}\">",
            xml(j.proc.program()),
            xml(&name)
        );
        let line = verdict_line(j);
        let body = |tag: &str, kind: &str| {
            format!(
                "\n      <{tag} message=\"{}\" type=\"{kind}\">{}</{tag}>\n    ",
                xml(&line),
                xml(&case_text(j))
            )
        };
        match j.verdict {
            Verdict::Held => {}
            Verdict::Broken => {
                failures += 1;
                cases.push_str(&body("failure", "limit"));
            }
            Verdict::Inconclusive if r.strict => {
                failures += 1;
                cases.push_str(&body("failure", "inconclusive"));
            }
            Verdict::Inconclusive => {
                skipped += 1;
                let _ = write!(cases, "\n      <skipped message=\"{}\"/>\n    ", xml(&line));
            }
        }
        cases.push_str("</testcase>\n");
    }
    let tests = r.judged.len() + usize::from(r.program_failed.is_some());
    let suite = xml(&format!("memlens check: {}", r.command.join(" ")));
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <testsuites name=\"memlens check\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" \
         skipped=\"{skipped}\" time=\"{t:.3}\">\n  \
         <testsuite name=\"{suite}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" \
         skipped=\"{skipped}\" time=\"{t:.3}\">\n{cases}  </testsuite>\n</testsuites>\n",
        t = r.seconds
    )
}

#[cfg(test)]
mod tests {
    use super::xml;

    #[test]
    fn xml_escapes_markup_and_control_characters() {
        assert_eq!(
            xml("a<b & \"c\" 'd'>"),
            "a&lt;b &amp; &quot;c&quot; &apos;d&apos;&gt;"
        );
        assert_eq!(xml("x\u{1}y\nz"), "x?y\nz");
    }
}
