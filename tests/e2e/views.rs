//! The views beyond "who allocated" on programs of known behaviour: `memlens report --view
//! peak|leaks|temporaries|timeline`, the `<stem>.peak.pb.gz` profile, lifetimes in pprof for
//! `go tool pprof`, flamegraphs per view and the HTML report.
use crate::util::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const JEMALLOC: &str = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";

/// Run `cmd` under `memlens run` (default interval) with `extra` options and environment; returns
/// the main profile and the program's stdout.
fn profile(dir: &Path, extra: &[&str], env: &[(&str, &str)], cmd: &[&str]) -> (PathBuf, String) {
    let out = dir.join("p.pb.gz");
    let text = memlens()
        .arg("run")
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg("--")
        .args(cmd)
        .envs(env.iter().copied())
        .ok_stdout();
    (out, text)
}

fn report_json(file: &Path, view: &str) -> Value {
    let o = memlens()
        .args([
            "report",
            file.to_str().unwrap(),
            "--view",
            view,
            "--format",
            "json",
        ])
        .ok();
    serde_json::from_slice(&o.stdout).expect("report JSON")
}

/// Innermost function of each stack of a view, in the view's order.
fn leaders(j: &Value) -> Vec<String> {
    j["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["frames"][0]["function"].as_str().unwrap().to_string())
        .collect()
}

fn sites(flags: &[&str], run_opts: &[&str], env: &[(&str, &str)]) {
    let dir = tempfile::tempdir().unwrap();
    let src = root().join("runtime/tests/views_sites.c");
    let exe = compile(&src, dir.path(), "views_sites", flags);
    let (p, out) = profile(dir.path(), run_opts, env, &[exe.to_str().unwrap()]);
    let true_peak: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("true_peak "))
        .expect("the program prints its true peak")
        .parse()
        .unwrap();

    let peak = report_json(&p, "peak");
    assert_eq!(peak["view"], "peak");
    assert_eq!(leaders(&peak)[0], "peak_builder", "{peak:#}");
    let leaks = report_json(&p, "leaks");
    let l = leaders(&leaks);
    assert_eq!(l[0], "leak_site", "{leaks:#}");
    assert!(!l.iter().any(|f| f == "long_lived_site"), "{l:?}");
    assert_eq!(leaks["stacks"][0]["suspect"], true, "{leaks:#}");
    let temps = report_json(&p, "temporaries");
    let t = leaders(&temps);
    assert_eq!(t[0], "churn_site", "{temps:#}");
    assert!(!t
        .iter()
        .any(|f| f == "peak_builder" || f == "long_lived_site"));
    assert!(temps["stacks"][0]["freed_1ms_share"].as_f64().unwrap() > 0.9);
    let tl = report_json(&p, "timeline");
    let points = tl["points"].as_array().unwrap();
    assert!(points.len() >= 3, "{tl:#}");
    let max = points
        .iter()
        .map(|p| p["heap_bytes"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(
        (max - true_peak).abs() <= 0.10 * true_peak,
        "timeline max {max} vs true peak {true_peak}"
    );
    assert!(points
        .iter()
        .all(|p| p["rss_bytes"].as_f64().unwrap() > 0.0));
    // The allocator's own figures: jemalloc's when it is preloaded, else glibc's mallinfo2 (not in
    // the point a dump takes: a dump must be async-signal-safe, and they take locks).
    let je = env.iter().any(|(_, v)| v.contains("jemalloc"));
    assert_eq!(tl["allocator"], if je { "jemalloc" } else { "glibc" });
    assert!(points[..points.len() - 1]
        .iter()
        .all(|p| p["allocator_in_use"].as_f64().unwrap() > 0.0));
    assert!(points[points.len() - 1]["allocator_in_use"].is_null());

    // The peak set as its own profile, with the four sample types, read like any other.
    let pp = dir.path().join("p.peak.pb.gz");
    assert!(pp.exists(), "no {}", pp.display());
    let o = memlens()
        .args([
            "report",
            pp.to_str().unwrap(),
            "--sample-index",
            "inuse_space",
            "--format",
            "json",
        ])
        .ok();
    let j: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["stacks"][0]["frames"][0]["function"], "peak_builder");
}

#[test]
fn four_sites_frame_pointers() {
    sites(&["-fno-omit-frame-pointer"], &["--unwinder", "fp"], &[]);
}

#[test]
fn four_sites_without_frame_pointers() {
    sites(&["-fomit-frame-pointer"], &[], &[]);
}

#[test]
fn four_sites_over_jemalloc() {
    assert!(
        Path::new(JEMALLOC).exists(),
        "{JEMALLOC} missing: install libjemalloc2 (scripts/install-deps.sh)"
    );
    sites(&["-fomit-frame-pointer"], &[], &[("LD_PRELOAD", JEMALLOC)]);
}

#[test]
fn flamegraphs_html_and_go_pprof() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = root().join("runtime/tests/views_sites.c");
    let exe = compile(&src, d, "views_sites", &[]);
    let (p, _) = profile(d, &[], &[], &[exe.to_str().unwrap()]);
    let ps = p.to_str().unwrap();
    for view in ["peak", "leaks", "temporaries"] {
        let svg = d.join(format!("{view}.svg"));
        memlens()
            .args([
                "report",
                ps,
                "--view",
                view,
                "--flamegraph",
                svg.to_str().unwrap(),
            ])
            .ok();
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("<svg"), "{view}");
    }
    // Table of the timeline, and the HTML report with its chart above the views.
    let table = memlens()
        .args(["report", ps, "--view", "timeline"])
        .ok_stdout();
    assert!(table.contains("RSS"), "{table}");
    let html = d.join("p.html");
    memlens()
        .args(["report", ps, "--html", html.to_str().unwrap()])
        .ok();
    let h = std::fs::read_to_string(&html).unwrap();
    let chart = h.find("heap vs RSS").expect("timeline chart");
    let views = h.find("peak_builder").expect("peak view");
    assert!(chart < views && h.contains("churn_site") && h.contains("leak_site"));
    // A usage error for a view without stacks.
    let o = run(&["report", ps, "--view", "timeline", "--format", "folded"]);
    assert_one_line_error(&o);

    // go tool pprof: lifetimes as sample types and labels it can filter on.
    let go = |args: &[&str]| -> String {
        Command::new("go")
            .args(["tool", "pprof"])
            .args(args)
            .ok_stdout()
    };
    let first = |out: &str| -> String {
        out.lines()
            .skip_while(|l| !l.trim_start().starts_with("flat"))
            .nth(1)
            .unwrap_or("")
            .to_string()
    };
    let t = go(&["-top", "-sample_index=freed_1ms_space", ps]);
    assert!(first(&t).ends_with("churn_site"), "{t}");
    let t = go(&["-top", "-sample_index=peak_space", ps]);
    assert!(first(&t).ends_with("peak_builder"), "{t}");
    let t = go(&[
        "-top",
        "-sample_index=alloc_space",
        "-tagfocus=lifetime_median=:1ms",
        ps,
    ]);
    assert!(first(&t).ends_with("churn_site"), "{t}");
    assert!(!t.contains("peak_builder"), "{t}");
    let t = go(&["-top", d.join("p.peak.pb.gz").to_str().unwrap()]);
    assert!(
        t.contains("Type: inuse_space") && first(&t).ends_with("peak_builder"),
        "{t}"
    );
}

#[test]
fn suspected_leak_grows_across_dumps() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let src = root().join("runtime/tests/views_sites.c");
    let exe = compile(&src, d, "views_sites", &[]);
    // 30 rounds: about 1.5 s, a dozen periodic dumps.
    let (_, _) = profile(
        d,
        &["--dump-every", "100ms"],
        &[],
        &[exe.to_str().unwrap(), "30"],
    );
    // A periodic dump taken mid-run: the leak has grown since the dump before it.
    let mut numbered: Vec<PathBuf> = std::fs::read_dir(d)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy().into_owned();
            n.starts_with("p.") && n.ends_with(".pb.gz") && !n.contains("peak") && n != "p.pb.gz"
        })
        .collect();
    numbered.sort();
    assert!(numbered.len() >= 2, "{numbered:?}");
    // Each dump's growth is the leak's increase since the dump before (noisy: a few samples);
    // summed over the run it is the whole increase, well above the sampling noise.
    let mut total = 0.0;
    for f in &numbered[1..] {
        let j = report_json(f, "leaks");
        let leak = j["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["frames"][0]["function"] == "leak_site")
            .unwrap_or_else(|| panic!("{j:#}"))
            .clone();
        total += leak["growth_bytes"].as_f64().unwrap_or(0.0);
        assert_eq!(leak["suspect"], true, "{leak:#}");
    }
    assert!(
        total > 1e6,
        "leak grew by {total} bytes over the periodic dumps"
    );
}

#[test]
fn python_peak_names_the_builder() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("build.py");
    // Churn of ~1 KiB strings (malloc'd: above pymalloc's 512 B) before and after a 100 MB list of
    // bytearrays that is built and dropped: the churn leads the alloc view, the builder the peak.
    std::fs::write(
        &script,
        "def churn():\n    s = 0\n    for i in range(150000):\n        s += len(str(i) * 200)\n    return s\n\
         def build():\n    return [bytearray(4000) for _ in range(25000)]\n\
         churn()\nbig = build()\nprint(len(big))\ndel big\nchurn()\n",
    )
    .unwrap();
    let (p, out) = profile(dir.path(), &[], &[], &["python3", script.to_str().unwrap()]);
    assert!(out.contains("25000"));
    let peak = report_json(&p, "peak");
    let top = &peak["stacks"][0]["frames"];
    let names: Vec<&str> = top
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap())
        .collect();
    assert!(
        names
            .iter()
            .any(|n| n.contains("bytearray") || n.contains("ByteArray")),
        "{names:?}"
    );
    assert!(
        peak["stacks"][0]["share"].as_f64().unwrap() > 0.8,
        "{peak:#}"
    );
}

#[test]
fn first_block_of_a_thread_is_a_leak_seen() {
    let dir = tempfile::tempdir().unwrap();
    let src = root().join("runtime/tests/first_block.c");
    let exe = compile(&src, dir.path(), "first_block", &[]);
    let (p, _) = profile(dir.path(), &[], &[], &[exe.to_str().unwrap()]);
    let leaks = report_json(&p, "leaks");
    assert_eq!(
        leaks["stacks"][0]["frames"][0]["function"],
        "first_block_site"
    );
    let v = leaks["stacks"][0]["value"].as_f64().unwrap();
    assert!((v - 64.0 * 1048576.0).abs() < 1048576.0, "{v}");
}

#[test]
fn views_off_and_exact_mode_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let src = root().join("runtime/tests/first_block.c");
    let exe = compile(&src, dir.path(), "first_block", &[]);
    let exe = exe.to_str().unwrap();
    let (p, _) = profile(dir.path(), &[], &[("MEMLENS_VIEWS", "0")], &[exe]);
    let o = run(&["report", p.to_str().unwrap(), "--view", "peak"]);
    assert_one_line_error(&o);
    assert!(stderr(&o).contains("MEMLENS_VIEWS=0"), "{}", stderr(&o));
    let (p, _) = profile(dir.path(), &["--exact"], &[], &[exe]);
    let o = run(&["report", p.to_str().unwrap(), "--view", "leaks"]);
    assert_one_line_error(&o);
    assert!(stderr(&o).contains("exact mode"), "{}", stderr(&o));
}
