//! End-to-end tests of `memlens bench alloc` and of the reference allocators it ships.

use crate::util::{assert_ok, compile, memlens, root, stderr, stdout, TestCommand};
use std::path::PathBuf;
use std::process::Command;

use memlens_bench_alloc::ALL_PATTERNS as PATTERNS;

/// (name, preloaded library or None for glibc) of every allocator `--list` reports as available.
fn available() -> Vec<(String, Option<PathBuf>)> {
    memlens()
        .args(["bench", "alloc", "--list"])
        .ok_stdout()
        .lines()
        .filter(|l| l.contains(" available "))
        .map(|l| {
            let cols: Vec<&str> = l
                .trim_matches(|c: char| c == '│' || c.is_whitespace())
                .split_whitespace()
                .collect();
            let lib = if cols[2].starts_with('/') {
                Some(PathBuf::from(cols[2]))
            } else {
                None
            };
            (cols[0].to_string(), lib)
        })
        .collect()
}

fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("memlens-bench-alloc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn list_shows_system_and_reference_allocators() {
    let names: Vec<String> = available().into_iter().map(|a| a.0).collect();
    for n in ["system", "global-lock", "pooled"] {
        assert!(names.iter().any(|x| x == n), "{n} missing from {names:?}");
    }
}

#[test]
fn every_pattern_runs_with_every_allocator_on_1_and_2_threads() {
    let dir = tmpdir("all");
    let (json, csv, svg, html) = (
        dir.join("r.json"),
        dir.join("r.csv"),
        dir.join("svg"),
        dir.join("r.html"),
    );
    let o = memlens()
        .args([
            "bench",
            "alloc",
            "--pattern",
            "all",
            "--sizes",
            "200",
            "--threads",
            "1,2",
            "--ops",
            "3000",
            "--repeats",
            "1",
            "--json",
            json.to_str().unwrap(),
            "--csv",
            csv.to_str().unwrap(),
            "--svg",
            svg.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ])
        .ok();
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(
        v["dropped"].as_array().unwrap().is_empty(),
        "an allocator failed: {}",
        v["dropped"]
    );
    let allocs = available();
    let rows = v["summary"]["rows"].as_array().unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), allocs.len() * PATTERNS.len() * 2);
    for (name, _) in &allocs {
        for p in PATTERNS {
            for t in [1, 2] {
                let row = rows
                    .iter()
                    .find(|r| {
                        r["allocator"] == name.as_str() && r["pattern"] == *p && r["threads"] == t
                    })
                    .unwrap_or_else(|| panic!("no result for {name} {p} {t} threads"));
                assert!(row["time_ms"]["median"].as_f64().unwrap() > 0.0);
                assert!(row["rel_pct"]["median"].as_f64().unwrap() > 0.0);
                assert!(row["mops"].as_f64().unwrap() > 0.0);
                assert!(
                    row["malloc_ns"]["samples"].as_u64().unwrap() > 0,
                    "{name} {p}: no malloc latency samples"
                );
                assert!(
                    row["free_ns"]["samples"].as_u64().unwrap() > 0,
                    "{name} {p}: no free latency samples"
                );
                assert!(row["rss_mib"].as_f64().unwrap() > 0.0);
                let r = runs
                    .iter()
                    .find(|r| {
                        r["allocator"] == name.as_str() && r["pattern"] == *p && r["threads"] == t
                    })
                    .unwrap();
                // Every pattern makes at least the objects asked for (larson rounds up to whole rounds).
                assert!(
                    r["mallocs"].as_u64().unwrap() >= 3000,
                    "{name} {p} {t}: {r}"
                );
                assert!(r["frees"].as_u64().unwrap() > 0);
            }
        }
    }
    // system on 1 thread is the 100% baseline.
    let base = rows
        .iter()
        .find(|r| r["allocator"] == "system" && r["pattern"] == "split" && r["threads"] == 1)
        .unwrap();
    assert!((base["rel_pct"]["median"].as_f64().unwrap() - 100.0).abs() < 1e-6);
    assert!(v["machine"].is_object());
    let table = stdout(&o);
    for p in PATTERNS {
        assert!(
            table.contains(&format!("{p}, 200 B objects")),
            "no table for {p}"
        );
    }
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv.lines().count(), 1 + allocs.len() * PATTERNS.len() * 2);
    assert!(csv.starts_with("pattern,size,threads,allocator,"), "{csv}");
    assert!(csv.lines().next().unwrap().contains("malloc_p50_ns"));
    let plot = std::fs::read_to_string(svg.join("alloc-split-200.svg")).unwrap();
    assert!(
        plot.contains("<svg") && plot.contains("ideal scaling") && plot.contains("global-lock")
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains("larson, 200 B objects"));
    // The page opens with the answer, not with the widest table.
    let verdict = page
        .find("class=\"verdict\"")
        .expect("no verdict on the page");
    assert!(verdict < page.find("<table").unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn allocators_pass_the_conformance_suite() {
    let dir = tmpdir("conf");
    let exe = compile(
        &root().join("allocators/tests/conformance.c"),
        &dir,
        "conformance",
        &["-fno-builtin"],
    );
    for (name, lib) in available() {
        let mut cmd = Command::new(&exe);
        cmd.env_remove("LD_PRELOAD");
        if let Some(l) = &lib {
            cmd.env("LD_PRELOAD", l);
        }
        let o = cmd.out();
        let out = stdout(&o);
        assert!(
            o.status.success() && out.contains(" 0 failures"),
            "{name} fails the conformance suite:\n{out}{}",
            stderr(&o)
        );
        // glibc and our own allocators must be exact; others' deviations (errno, missing pvalloc) are
        // reported, not failed: they are facts about those libraries.
        if ["system", "global-lock", "pooled"].contains(&name.as_str()) {
            assert!(out.contains(" 0 deviations"), "{name} deviates:\n{out}");
        } else if !out.contains(" 0 deviations") {
            eprintln!("{name}:\n{out}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Output of `prog args` with stdin `input`, under `preload` (None: nothing preloaded).
fn output_under(preload: Option<&PathBuf>, prog: &str, args: &[&str], input: &str) -> String {
    use std::io::Write;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .env_remove("LD_PRELOAD")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    if let Some(p) = preload {
        cmd.env("LD_PRELOAD", p);
    }
    let mut child = cmd
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {prog}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_ok(&format!("{prog} {args:?} under {preload:?}"), &o);
    stdout(&o)
}

const PY: &str = "
import threading, json, hashlib, os, sqlite3
out = {}
def work(k):
    s = 0
    for i in range(3000):
        s += len(json.dumps({'k': [i] * (i % 50), 's': 'x' * (i % 300)}))
    out[k] = s
ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
d = {str(i): list(range(i % 40)) for i in range(20000)}
pid = os.fork()
if pid == 0:
    os._exit(len(d) % 256)
print(sorted(out.items()), hashlib.sha256(json.dumps(d).encode()).hexdigest(), os.waitpid(pid, 0)[1] >> 8)
";

const SQL: &str = "
create table t(a integer, b text);
with recursive c(x) as (select 1 union all select x + 1 from c where x < 20000)
  insert into t select x, printf('%.*c', x % 300, 'y') from c;
create index tb on t(b);
select count(*), sum(length(b)), max(a) from t where a % 7 = 3;
select b, count(*) from t group by length(b) order by 2 desc, 1 limit 3;
";

#[test]
fn reference_allocators_run_python3_and_sqlite3() {
    let refs: Vec<(String, Option<PathBuf>)> = available()
        .into_iter()
        .filter(|(n, _)| n == "global-lock" || n == "pooled")
        .collect();
    assert_eq!(refs.len(), 2);
    let py_ref = output_under(None, "/usr/bin/python3", &["-c", PY], "");
    let sql_ref = output_under(None, "sqlite3", &[":memory:"], SQL);
    assert!(
        py_ref.contains("[(0, ") && sql_ref.contains('|'),
        "unexpected reference output: {py_ref} {sql_ref}"
    );
    for (name, lib) in &refs {
        assert_eq!(
            output_under(lib.as_ref(), "/usr/bin/python3", &["-c", PY], ""),
            py_ref,
            "python3 under {name}"
        );
        assert_eq!(
            output_under(lib.as_ref(), "sqlite3", &[":memory:"], SQL),
            sql_ref,
            "sqlite3 under {name}"
        );
    }
}

#[test]
fn missing_allocator_is_reported_and_the_run_goes_on() {
    let o = memlens()
        .args([
            "bench",
            "alloc",
            "--allocator",
            "foo=/nonexistent.so",
            "--allocators",
            "system,foo,pooled",
            "--sizes",
            "128",
            "--threads",
            "1",
            "--ops",
            "2000",
            "--repeats",
            "1",
        ])
        .ok();
    assert!(
        stderr(&o).contains("foo is not measured: /nonexistent.so does not exist"),
        "{}",
        stderr(&o)
    );
    let out = stdout(&o);
    assert!(
        out.contains("pooled") && out.contains("system") && out.contains("not measured: foo"),
        "{out}"
    );
}

#[test]
fn bad_arguments_are_one_line_usage_errors() {
    for args in [
        &["--sizes", "12Q"][..],
        &["--sizes", "0"],
        &["--threads", "0"],
        &["--threads", "4..1"],
        &["--threads", "x"],
        &["--pattern", "zigzag"],
        &["--allocators", "nosuch"],
        &["--allocator", "nameonly"],
        &["--repeats", "0"],
    ] {
        let mut a = vec!["bench", "alloc"];
        a.extend_from_slice(args);
        memlens().args(&a).error(2);
    }
}
