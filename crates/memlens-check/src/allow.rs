//! Known stacks that no limit counts: `--allow REGEX` and suppressions files.
//!
//! A suppressions file has one rule a line: a regular expression, optionally after `peak:`,
//! `leak:` or `allocated:` to apply it to that figure only (LeakSanitizer's files use `leak:`).
//! Blank lines and lines starting with `#` are skipped. A rule matches a stack when it matches
//! any of its frames' function name, source file or module (the file it was loaded from).
use crate::limits::Kind;
use anyhow::{Context, Result};
use memlens_measure::error::usage;
use regex::Regex;
use std::path::Path;

/// One rule: the figure it applies to (all when None), the expression, and where it came from.
#[derive(Debug)]
struct Rule {
    kind: Option<Kind>,
    re: Regex,
    source: String,
}

/// The rules of a check.
#[derive(Debug, Default)]
pub struct Allow {
    rules: Vec<Rule>,
}

/// What a rule is matched against: one frame's function, file and module.
pub struct FrameText<'a> {
    /// Function name (or `module+0x…` unsymbolized).
    pub function: &'a str,
    /// Source file (may be empty).
    pub file: &'a str,
    /// The module's path (may be empty).
    pub module: &'a str,
}

impl Allow {
    /// The rules of `--allow` options and suppressions files; a bad expression is a usage error
    /// naming where it is.
    pub fn new(allow: &[String], files: &[impl AsRef<Path>]) -> Result<Allow> {
        let mut rules = Vec::new();
        for a in allow {
            rules.push(rule(None, a, format!("--allow '{a}'"))?);
        }
        for f in files {
            let f = f.as_ref();
            let text = std::fs::read_to_string(f)
                .with_context(|| format!("cannot read the suppressions file {}", f.display()))?;
            for (i, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let (kind, expr) = match line.split_once(':') {
                    Some((k, e)) => match Kind::ALL.iter().find(|x| x.name() == k.trim()) {
                        Some(&kind) => (Some(kind), e.trim()),
                        None => (None, line),
                    },
                    None => (None, line),
                };
                rules.push(rule(kind, expr, format!("{}:{}", f.display(), i + 1))?);
            }
        }
        Ok(Allow { rules })
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The first rule that allows a stack of these frames for `kind`: where it was given.
    pub fn matching<'a>(
        &self,
        kind: Kind,
        frames: impl Iterator<Item = FrameText<'a>> + Clone,
    ) -> Option<&str> {
        self.rules
            .iter()
            .filter(|r| r.kind.is_none_or(|k| k == kind))
            .find(|r| {
                frames.clone().any(|f| {
                    r.re.is_match(f.function)
                        || (!f.file.is_empty() && r.re.is_match(f.file))
                        || (!f.module.is_empty() && r.re.is_match(f.module))
                })
            })
            .map(|r| r.source.as_str())
    }
}

fn rule(kind: Option<Kind>, expr: &str, source: String) -> Result<Rule> {
    let re = Regex::new(expr).map_err(|e| {
        let e = e.to_string().replace('\n', " ");
        usage(format!("bad expression in {source}: {e}"))
    })?;
    Ok(Rule { kind, re, source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames<'a>(names: &'a [(&'a str, &'a str)]) -> impl Iterator<Item = FrameText<'a>> + Clone {
        names.iter().map(|(f, m)| FrameText {
            function: f,
            file: "",
            module: m,
        })
    }

    #[test]
    fn rules_from_options_and_files() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("supp.txt");
        std::fs::write(
            &f,
            "# known\n\nleak:^PyUnicode_\npeak:cache_(grow|fill)\nlibfoo\\.so\nstd::rt::lang_start\n",
        )
        .unwrap();
        let a = Allow::new(&["^intern_".to_string()], &[&f]).unwrap();
        assert_eq!(a.rules.len(), 5);
        let py = [("PyUnicode_New", "/usr/bin/python3"), ("main", "")];
        assert!(a.matching(Kind::Leak, frames(&py)).unwrap().ends_with(":3"));
        assert_eq!(a.matching(Kind::Peak, frames(&py)), None);
        let lib = [("f", "/usr/lib/libfoo.so"), ("main", "")];
        assert!(a.matching(Kind::Allocated, frames(&lib)).is_some());
        let ours = [("intern_string", ""), ("main", "")];
        assert_eq!(
            a.matching(Kind::Peak, frames(&ours)),
            Some("--allow '^intern_'")
        );
        // a C++ name with a colon is an expression, not a kind
        assert!(a
            .matching(Kind::Leak, frames(&[("std::rt::lang_start", "")]))
            .is_some());
    }

    #[test]
    fn bad_expressions_say_where() {
        let e = Allow::new(&["(".to_string()], &[] as &[&Path]).unwrap_err();
        assert!(memlens_measure::error::is_usage(&e));
        assert!(format!("{e:#}").contains("--allow '('"), "{e:#}");
        let e = Allow::new(&[], &[Path::new("/nonexistent/supp")]).unwrap_err();
        assert!(format!("{e:#}").contains("suppressions file"), "{e:#}");
    }
}
