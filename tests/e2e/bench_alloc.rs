//! End-to-end tests of `memlens bench alloc` and of the reference allocators it ships.

use crate::util::{assert_ok, compile, memlens, root, stderr, stdout, test_dir, TestCommand};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

use memlens_bench_alloc::ALL_PATTERNS as PATTERNS;

/// The allocators the tests require, and where each comes from: a missing one fails the test with
/// the Debian package to install (scripts/install-deps.sh installs them all), never drops out.
const REQUIRED: &[(&str, &str)] = &[
    ("system", "glibc"),
    ("jemalloc", "the Debian package libjemalloc2"),
    ("tcmalloc", "the Debian package libtcmalloc-minimal4"),
    ("mimalloc", "the Debian package libmimalloc2.0"),
    ("tbbmalloc", "the Debian package libtbbmalloc2"),
    ("global-lock", "memlens itself"),
    ("pooled", "memlens itself"),
];

/// The shared Hoard build (../shared/tools/hoard, see its README): CI has it; a user's clone may
/// not, and then the Hoard checks print one SKIPPED line. The product never looks there.
fn shared_hoard() -> Option<PathBuf> {
    let p = root().join("../shared/tools/hoard/libhoard.so");
    if p.is_file() {
        Some(p)
    } else {
        println!(
            "SKIPPED: Hoard checks: {} is absent (no ../shared beside this clone)",
            p.display()
        );
        None
    }
}

/// `--allocator hoard=PATH` when the shared Hoard build is there.
fn hoard_args() -> Vec<String> {
    shared_hoard()
        .map(|p| vec!["--allocator".into(), format!("hoard={}", p.display())])
        .unwrap_or_default()
}

/// (name, preloaded library or None for glibc) of every allocator `--list` reports as available,
/// with `extra` arguments (e.g. `--allocator hoard=…`).
fn listed(extra: &[String]) -> Vec<(String, Option<PathBuf>)> {
    memlens()
        .args(["bench", "alloc", "--list"])
        .args(extra)
        .env("COLUMNS", "400")
        .ok_stdout()
        .lines()
        .filter(|l| l.contains(" available "))
        .map(|l| {
            let cols: Vec<&str> = l
                .trim_matches(|c: char| c == '│' || c.is_whitespace())
                .split_whitespace()
                .collect();
            let lib = cols[2].starts_with('/').then(|| PathBuf::from(cols[2]));
            (cols[0].to_string(), lib)
        })
        .collect()
}

/// Every required allocator (plus Hoard where the shared build is), in REQUIRED order; panics
/// naming the package of any that is missing.
fn required() -> Vec<(String, Option<PathBuf>)> {
    let found = listed(&hoard_args());
    let mut out = Vec::new();
    for (name, from) in REQUIRED {
        match found.iter().find(|(n, _)| n == name) {
            Some(a) => out.push(a.clone()),
            None => panic!("allocator {name} is missing: install {from} (scripts/install-deps.sh)"),
        }
    }
    if shared_hoard().is_some() {
        let h = found
            .iter()
            .find(|(n, _)| n == "hoard")
            .expect("--allocator hoard=<shared build> must make Hoard available");
        out.push(h.clone());
    }
    out
}

fn names(allocs: &[(String, Option<PathBuf>)]) -> String {
    allocs
        .iter()
        .map(|a| a.0.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

fn json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).expect("JSON written")).expect("valid JSON")
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn list_shows_every_required_allocator() {
    let all = required();
    assert!(all.len() >= REQUIRED.len());
    // glibc is the one with nothing preloaded; every other one names an existing library.
    for (name, lib) in &all {
        match lib {
            None => assert_eq!(name, "system"),
            Some(p) => assert!(p.is_file(), "{name}: {} does not exist", p.display()),
        }
    }
}

#[test]
fn every_pattern_runs_with_every_allocator_on_1_and_2_threads() {
    let dir = test_dir();
    let (j, csv, svg, html) = (
        dir.path().join("r.json"),
        dir.path().join("r.csv"),
        dir.path().join("svg"),
        dir.path().join("r.html"),
    );
    let allocs = required();
    let o = memlens()
        .args(["bench", "alloc", "--pattern", "all", "--sizes", "200"])
        .args(["--threads", "1,2", "--ops", "3000", "--repeats", "1"])
        .args(["--allocators", &names(&allocs)])
        .args(hoard_args())
        .args([
            "--json",
            j.to_str().unwrap(),
            "--csv",
            csv.to_str().unwrap(),
        ])
        .args([
            "--svg",
            svg.to_str().unwrap(),
            "--html",
            html.to_str().unwrap(),
        ])
        .ok();
    let v = json(&j);
    assert!(
        v["dropped"].as_array().unwrap().is_empty() && v["missing"].as_array().unwrap().is_empty(),
        "an allocator failed or is missing: {} {}",
        v["dropped"],
        v["missing"]
    );
    let rows = v["summary"]["rows"].as_array().unwrap();
    let runs = v["runs"].as_array().unwrap();
    assert_eq!(runs.len(), allocs.len() * PATTERNS.len() * 2);
    let find = |set: &[Value], name: &str, p: &str, t: u64| -> Value {
        set.iter()
            .find(|r| r["allocator"] == name && r["pattern"] == p && r["threads"] == t)
            .unwrap_or_else(|| panic!("no result for {name} {p} {t} threads"))
            .clone()
    };
    for (name, lib) in &allocs {
        // The child proved that malloc and free came from the library preloaded.
        let decl = v["allocators"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["name"] == name.as_str())
            .unwrap();
        assert_eq!(decl["lib"].as_str().map(PathBuf::from), *lib, "{decl}");
        for p in PATTERNS {
            let base = f(&find(rows, "system", p, 1)["time_ms"]["median"]);
            for t in [1u64, 2] {
                let row = find(rows, name, p, t);
                let run = find(runs, name, p, t);
                let (mallocs, frees) = (
                    run["mallocs"].as_u64().unwrap(),
                    run["frees"].as_u64().unwrap(),
                );
                let live = run["live"].as_u64().unwrap();
                // Each pattern makes exactly the objects asked for (larson: whole rounds of
                // --live per thread), and frees what its shape says it frees in the timed part.
                let (lo, hi) = if *p == "larson" {
                    (3000, 3000 + t * live)
                } else {
                    (3000, 3000)
                };
                assert!(
                    (lo..=hi).contains(&mallocs),
                    "{name} {p} {t}: {mallocs} mallocs, {run}"
                );
                let expect_frees = match *p {
                    // split frees an object once --live newer ones exist; the ring's last --live
                    // are freed after the timed part.
                    "split" => t * (3000 / t).saturating_sub(live),
                    _ => mallocs,
                };
                assert_eq!(frees, expect_frees, "{name} {p} {t}: {run}");
                let wall_ms = run["wall_ns"].as_u64().unwrap() as f64 / 1e6;
                assert!(
                    wall_ms > 0.001 && wall_ms < 30_000.0,
                    "{name} {p} {t}: {wall_ms} ms"
                );
                // One repeat: the row's figures are this run's, and derived exactly from it.
                let time = f(&row["time_ms"]["median"]);
                assert!((time - wall_ms).abs() < 1e-9, "{row}");
                let rel = f(&row["rel_pct"]["median"]);
                assert!(
                    (rel - time / base * 100.0).abs() < 1e-6 * rel,
                    "{name} {p} {t}: rel {rel}"
                );
                let mops = f(&row["mops"]);
                assert!(
                    (mops - mallocs as f64 / wall_ms / 1e3).abs() < 1e-6 * mops,
                    "{row}"
                );
                // About 1 call in 64 (random gaps) is timed.
                for (k, n) in [("malloc_ns", mallocs), ("free_ns", frees)] {
                    let s = row[k]["samples"].as_u64().unwrap();
                    assert!(
                        n < 64 || (n / 256..=n / 16).contains(&s),
                        "{name} {p} {t}: {s} {k} samples of {n} calls"
                    );
                }
                let rss = f(&row["rss_mib"]);
                assert!(rss > 0.5 && rss < 512.0, "{name} {p} {t}: {rss} MiB");
                let on_cpu = f(&row["on_cpu_pct"]);
                assert!((0.0..=100.0).contains(&on_cpu), "{row}");
                if let Some(w) = row["waited_pct"].as_f64() {
                    assert!((0.0..=100.0).contains(&w), "{row}");
                }
                assert!((1..=allocs.len() as u64).contains(&row["rank"].as_u64().unwrap()));
            }
        }
    }
    // system on 1 thread is the 100% baseline.
    assert!((f(&find(rows, "system", "split", 1)["rel_pct"]["median"]) - 100.0).abs() < 1e-9);
    assert!(v["machine"]["logical_cpus"].as_u64().unwrap() >= 1);
    let table = stdout(&o);
    for p in PATTERNS {
        assert!(
            table.contains(&format!("{p}, 200 B objects")),
            "no table for {p}"
        );
    }
    // --ops 3000 makes runs of well under 20 ms: the output says they are too short to judge.
    assert!(
        table.contains("too short to judge; raise --ops"),
        "no short-run warning:\n{table}"
    );
    let csv = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(csv.lines().count(), 1 + allocs.len() * PATTERNS.len() * 2);
    assert!(csv.starts_with("pattern,size,threads,allocator,"), "{csv}");
    assert!(csv.lines().next().unwrap().contains("malloc_p50_ns"));
    let plot = std::fs::read_to_string(svg.join("alloc-split-200.svg")).unwrap();
    let mut series: Vec<&str> = allocs.iter().map(|a| a.0.as_str()).collect();
    series.push("ideal scaling");
    legend_beside_points(&plot, &series, allocs.len() * 2);
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && page.contains("larson, 200 B objects"));
    // The page opens with the answer, not with the widest table.
    let verdict = page
        .find("class=\"verdict\"")
        .expect("no verdict on the page");
    assert!(verdict < page.find("<table").unwrap());
}

/// `(x of a <text> element, its content)` for every text of an SVG.
fn svg_texts(svg: &str) -> Vec<(f64, String)> {
    svg.split("<text ")
        .skip(1)
        .filter_map(|t| {
            let x = t.split("x=\"").nth(1)?.split('"').next()?.parse().ok()?;
            let body = t
                .split('>')
                .nth(1)?
                .split("</text")
                .next()?
                .trim()
                .to_string();
            Some((x, body))
        })
        .collect()
}

/// The chart draws a point for each of `points` results and a legend entry for every series, and
/// every legend entry (swatch included, 26 px left of its text) lies right of every point.
fn legend_beside_points(svg: &str, series: &[&str], points: usize) {
    let cx: Vec<f64> = svg
        .split("<circle cx=\"")
        .skip(1)
        .map(|c| c.split('"').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(cx.len(), points, "points drawn");
    let texts = svg_texts(svg);
    let right_of_points = cx.iter().cloned().fold(0.0, f64::max) + 3.0;
    for s in series {
        let (x, _) = texts
            .iter()
            .find(|t| t.1 == *s)
            .unwrap_or_else(|| panic!("no legend entry {s} in {texts:?}"));
        assert!(
            x - 26.0 > right_of_points,
            "legend entry {s} at x={x} overlaps points reaching x={right_of_points}"
        );
    }
}

#[test]
fn the_global_lock_allocator_runs_alone_and_with_threads() {
    // What the study's shape is measured from: CPU time per configuration, repeat by repeat. Its
    // figure (the global lock keeps up with glibc on one thread and pays for its one lock on two)
    // is a benchmark's, measured by the command in docs/benchmarks.md: other programs' load moves
    // CPU times too, and a test must pass on a busy machine.
    let dir = test_dir();
    let j = dir.path().join("r.json");
    memlens()
        .args([
            "bench",
            "alloc",
            "--allocators",
            "system,global-lock",
            "--sizes",
            "128",
        ])
        .args([
            "--threads",
            "1,2",
            "--ops",
            "400000",
            "--repeats",
            "3",
            "--sample-every",
            "0",
        ])
        .args(["--json", j.to_str().unwrap()])
        .ok();
    let v = json(&j);
    let rows = v["summary"]["rows"].as_array().unwrap();
    for (a, t) in [("system", 1), ("global-lock", 1), ("global-lock", 2)] {
        let row = rows
            .iter()
            .find(|r| r["allocator"] == a && r["threads"] == t)
            .unwrap_or_else(|| panic!("no {a} row on {t} thread(s): {v}"));
        // CPU time: the median of three repeats, within their range, more than nothing
        let cpu = f(&row["cpu_ms"]);
        let (lo, hi) = (
            f(&row["cpu_range_ms"]["min"]),
            f(&row["cpu_range_ms"]["max"]),
        );
        assert!(cpu > 0.0 && lo <= cpu && cpu <= hi, "{a} {t}: {row}");
        assert_eq!(row["repeats"], 3, "{row}");
    }
    let runs = v["runs"].as_array().unwrap();
    for r in runs.iter().filter(|r| r["allocator"] == "global-lock") {
        // split frees an object once --live newer ones exist (the ring's last are freed after)
        let (t, live) = (r["threads"].as_u64().unwrap(), r["live"].as_u64().unwrap());
        assert_eq!(r["mallocs"].as_u64(), Some(400_000), "{r}");
        assert_eq!(r["frees"].as_u64(), Some(t * (400_000 / t - live)), "{r}");
    }
}

#[test]
fn hoard_is_measured_when_named_and_how_to_get_it_is_said_when_absent() {
    let found = listed(&[]);
    if found.iter().any(|a| a.0 == "hoard") {
        println!(
            "SKIPPED: the absent-Hoard message: libhoard.so is installed where the loader finds it"
        );
    } else {
        let o = memlens()
            .args([
                "bench",
                "alloc",
                "--allocators",
                "system,hoard",
                "--sizes",
                "64",
            ])
            .args(["--threads", "1", "--ops", "2000", "--repeats", "1"])
            .ok();
        let said: Vec<String> = stderr(&o)
            .lines()
            .filter(|l| l.contains("hoard"))
            .map(String::from)
            .collect();
        assert_eq!(said.len(), 1, "one line about Hoard: {said:?}");
        assert!(
            said[0].contains("libhoard.so not found")
                && said[0].contains("not packaged by Debian")
                && said[0].contains("--allocator hoard=PATH"),
            "{said:?}"
        );
        assert!(stdout(&o).contains("not measured: hoard"));
    }
    let Some(lib) = shared_hoard() else { return };
    let dir = test_dir();
    let j = dir.path().join("h.json");
    memlens()
        .args([
            "bench",
            "alloc",
            "--allocator",
            &format!("hoard={}", lib.display()),
        ])
        .args([
            "--allocators",
            "system,hoard",
            "--sizes",
            "128,1M",
            "--threads",
            "1,2",
        ])
        .args([
            "--ops",
            "4000",
            "--repeats",
            "1",
            "--json",
            j.to_str().unwrap(),
        ])
        .ok();
    let v = json(&j);
    let hoard_rows: Vec<&Value> = v["summary"]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["allocator"] == "hoard")
        .collect();
    assert_eq!(hoard_rows.len(), 4, "hoard × 2 sizes × 2 thread counts");
    for r in hoard_rows {
        // a malloc/free pair takes at least ~1 ns (≤ 1000 Mops/s per thread, 2 threads) and
        // even a starved VM thread does 10k of them a second; a run ends within the 30 s timeout
        let (ms, mops) = (f(&r["time_ms"]["median"]), f(&r["mops"]));
        assert!(ms > 0.001 && ms < 30_000.0, "{r}");
        assert!(mops > 0.01 && mops < 2000.0, "{r}");
    }
    assert!(
        v["dropped"].as_array().unwrap().is_empty(),
        "{}",
        v["dropped"]
    );
}

#[test]
fn a_busy_machine_is_said() {
    // Two CPU hogs per CPU keep every CPU busy: the workers must wait for one, and the report says
    // so (and how long they waited) instead of judging allocators by what the hogs did.
    let ncpu = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let mut hogs: Vec<std::process::Child> = (0..2 * ncpu)
        .map(|_| {
            Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .expect("start a CPU hog")
        })
        .collect();
    let dir = test_dir();
    let j = dir.path().join("b.json");
    let o = memlens()
        .args([
            "bench",
            "alloc",
            "--allocators",
            "system,pooled",
            "--sizes",
            "128",
        ])
        // Calibrated runs (~150 ms, longer beside the hogs): a run of a few ms can get through on
        // the CPU a waking thread is given at once and wait for nothing.
        .args(["--threads", &ncpu.to_string(), "--repeats", "2"])
        .args(["--json", j.to_str().unwrap()])
        .out();
    for h in &mut hogs {
        let _ = h.kill();
        let _ = h.wait();
    }
    assert_ok(&"bench alloc beside CPU hogs", &o);
    let v = json(&j);
    let out = stdout(&o).replace("\n  ", " ");
    match v["summary"]["waited_pct"].as_f64() {
        Some(w) => {
            assert!(
                w > 20.0 && w <= 100.0,
                "waited {w}% beside {} hogs",
                2 * ncpu
            );
            assert!(
                out.contains("warning: the machine was busy: the workers waited for a CPU"),
                "{out}"
            );
        }
        // No schedstat: the load average must say it.
        None => assert!(out.contains("warning: the machine was busy ("), "{out}"),
    }
    assert!(out.contains("load average"), "{out}");
}

#[test]
fn allocators_pass_the_conformance_suite() {
    let dir = test_dir();
    let exe = compile(
        &root().join("allocators/tests/conformance.c"),
        dir.path(),
        "conformance",
        &["-fno-builtin"],
    );
    for (name, lib) in required() {
        let mut cmd = Command::new(&exe);
        cmd.env_remove("LD_PRELOAD");
        if let Some(l) = &lib {
            cmd.env("LD_PRELOAD", l);
        }
        let o = cmd.out();
        let out = stdout(&o);
        assert!(
            out.lines().last().is_some_and(|l| l.contains(" checks, ")),
            "the conformance suite did not run to the end under {name}:\n{out}{}",
            stderr(&o)
        );
        if name == "hoard" {
            // Hoard (the shared build) leaves aligned_alloc to glibc and mishandles impossible
            // sizes (malloc(SIZE_MAX) returns a block, larger ones abort): facts about it, which
            // bench alloc never meets. Anything else is a new failure.
            let other: Vec<&str> = out
                .lines()
                .filter(|l| l.starts_with("FAIL"))
                .filter(|l| {
                    !l.contains("aligned_alloc is not replaced")
                        && !l.starts_with("FAIL test_huge:")
                })
                .collect();
            assert!(
                other.is_empty(),
                "hoard fails the conformance suite anew:\n{out}"
            );
            eprintln!("hoard (known failures):\n{out}");
            continue;
        }
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
    let refs: Vec<(String, Option<PathBuf>)> = required()
        .into_iter()
        .filter(|(n, _)| n == "global-lock" || n == "pooled")
        .collect();
    assert_eq!(refs.len(), 2);
    let py_ref = output_under(None, "/usr/bin/python3", &["-c", PY], "");
    let sql_ref = output_under(None, "sqlite3", &[":memory:"], SQL);
    // The program's own answers: 4 threads' sums, a digest, the child's exit code (20000 % 256).
    assert!(
        py_ref.starts_with("[(0, ") && py_ref.trim_end().ends_with(" 32"),
        "unexpected python3 output: {py_ref}"
    );
    assert!(
        sql_ref
            .lines()
            .next()
            .is_some_and(|l| l.starts_with("2857|")),
        "unexpected sqlite3 output: {sql_ref}"
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
        .args(["bench", "alloc", "--allocator", "foo=/nonexistent.so"])
        .args([
            "--allocators",
            "system,foo,pooled",
            "--sizes",
            "128",
            "--threads",
            "1",
        ])
        .args(["--ops", "2000", "--repeats", "1"])
        .ok();
    assert!(
        stderr(&o).contains("foo is not measured: /nonexistent.so does not exist"),
        "{}",
        stderr(&o)
    );
    let out = stdout(&o);
    assert!(
        out.contains("│ pooled ") && out.contains("│ system ") && out.contains("not measured: foo"),
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
