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

/// `memlens report FILE --view VIEW --format json`, parsed.
#[track_caller]
fn view_json(file: &Path, view: &str) -> Value {
    report_json(file, &["--view", view])
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
    let dir = test_dir();
    let src = root().join("runtime/tests/views_sites.c");
    let exe = compile(&src, dir.path(), "views_sites", flags);
    let (p, out) = profile(dir.path(), run_opts, env, &[exe.to_str().unwrap()]);
    let true_peak: f64 = out
        .lines()
        .find_map(|l| l.strip_prefix("true_peak "))
        .expect("the program prints its true peak")
        .parse()
        .unwrap();

    let peak = view_json(&p, "peak");
    assert_eq!(peak["view"], "peak");
    assert_eq!(leaders(&peak)[0], "peak_builder", "{peak:#}");
    let leaks = view_json(&p, "leaks");
    let l = leaders(&leaks);
    assert_eq!(l[0], "leak_site", "{leaks:#}");
    assert!(!l.iter().any(|f| f == "long_lived_site"), "{l:?}");
    assert_eq!(leaks["stacks"][0]["suspect"], true, "{leaks:#}");
    let temps = view_json(&p, "temporaries");
    let t = leaders(&temps);
    assert_eq!(t[0], "churn_site", "{temps:#}");
    assert!(!t
        .iter()
        .any(|f| f == "peak_builder" || f == "long_lived_site"));
    assert!(temps["stacks"][0]["freed_1ms_share"].as_f64().unwrap() > 0.9);
    let tl = view_json(&p, "timeline");
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
    // the point a dump takes: a dump must be async-signal-safe, and they take locks). They are read
    // on the runtime's thread (issue 29, item 1), so points taken before its first read, or while
    // its last read is over two periods old, have none; those that have them have real ones.
    let je = env.iter().any(|(_, v)| v.contains("jemalloc"));
    assert_eq!(tl["allocator"], if je { "jemalloc" } else { "glibc" });
    let inner = &points[..points.len() - 1];
    assert!(
        inner.iter().any(|p| !p["allocator_in_use"].is_null()),
        "{tl:#}"
    );
    assert!(inner
        .iter()
        .all(|p| p["allocator_in_use"].is_null() || p["allocator_in_use"].as_f64().unwrap() > 0.0));
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
    let dir = test_dir();
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
    // (what the page does in a browser: report_page.rs)
    let h = std::fs::read_to_string(&html).unwrap();
    for site in ["peak_builder", "churn_site", "leak_site", "\"timeline\":{"] {
        assert!(h.contains(site), "the page's data lacks {site}");
    }
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
    let dir = test_dir();
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
        let j = view_json(f, "leaks");
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
    let dir = test_dir();
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
    let peak = view_json(&p, "peak");
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
    let dir = test_dir();
    let src = root().join("runtime/tests/first_block.c");
    let exe = compile(&src, dir.path(), "first_block", &[]);
    let (p, _) = profile(dir.path(), &[], &[], &[exe.to_str().unwrap()]);
    let leaks = view_json(&p, "leaks");
    assert_eq!(
        leaks["stacks"][0]["frames"][0]["function"],
        "first_block_site"
    );
    let v = leaks["stacks"][0]["value"].as_f64().unwrap();
    assert!((v - 64.0 * 1048576.0).abs() < 1048576.0, "{v}");
}

#[test]
fn views_off_says_so_and_exact_mode_keeps_the_leak() {
    let dir = test_dir();
    let src = root().join("runtime/tests/first_block.c");
    let exe = compile(&src, dir.path(), "first_block", &[]);
    let exe = exe.to_str().unwrap();
    let (p, _) = profile(dir.path(), &[], &[("MEMLENS_VIEWS", "0")], &[exe]);
    let o = run(&["report", p.to_str().unwrap(), "--view", "peak"]);
    assert_one_line_error(&o);
    assert!(stderr(&o).contains("MEMLENS_VIEWS=0"), "{}", stderr(&o));
    // Exact mode keeps the live blocks: its leaks view has the 64 MiB block, to the byte.
    let (p, _) = profile(dir.path(), &["--exact"], &[], &[exe]);
    let leaks = view_json(&p, "leaks");
    let held: f64 = leaks["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["frames"][0]["function"] == "first_block_site")
        .filter_map(|s| s["value"].as_f64())
        .sum();
    assert_eq!(held, 64.0 * 1048576.0, "{leaks}");
}

// ---------- heap numbers you can take at face value (issue 23) ----------

/// `key value` printed by a test program.
fn printed_value(out: &str, key: &str) -> f64 {
    out.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .unwrap_or_else(|| panic!("no '{key}' in the program's output:\n{out}"))
        .trim()
        .parse()
        .unwrap()
}

/// The estimated heap when the peak set was taken, its highest estimate, and the timeline's highest
/// point.
fn peak_figures(p: &Path) -> (f64, f64, f64) {
    let tl = view_json(p, "timeline");
    let max = tl["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["heap_bytes"].as_f64().unwrap())
        .fold(0.0, f64::max);
    (
        tl["peak_bytes"].as_f64().unwrap(),
        tl["heap_max_bytes"].as_f64().unwrap(),
        max,
    )
}

/// The peak set's estimate, the highest estimate and the timeline's maximum are within 10% of the
/// program's exact peak, and never above its peak RSS (which holds the runtime's own memory too:
/// sampled blocks live in its range).
#[track_caller]
fn assert_peak_follows(p: &Path, exact: f64, maxrss: Option<f64>, what: &str) {
    let (peak, max, tl) = peak_figures(p);
    for (name, v) in [
        ("peak set", peak),
        ("highest estimate", max),
        ("timeline", tl),
    ] {
        assert!(
            (v - exact).abs() <= 0.10 * exact,
            "{what}: {name} {v:.0} bytes vs the exact peak {exact:.0}"
        );
        if let Some(rss) = maxrss {
            assert!(
                v <= rss,
                "{what}: {name} {v:.0} bytes above peak RSS {rss:.0}"
            );
        }
    }
}

/// A buffer grown by realloc in 64-byte steps to 8 MiB and freed, 10 times (in place: its pages
/// follow it), and two buffers grown in turn to 4 MiB each (so each step moves one): the heap
/// estimate, the peak set and the timeline follow what the program holds. The in-place path used to
/// add every resize to the estimate (992 GiB for a 256 KiB buffer).
#[test]
fn realloc_growth_in_place_and_moving_follows_the_program() {
    let dir = test_dir();
    let src = root().join("runtime/tests/realloc_growth.c");
    let exe = compile(&src, dir.path(), "realloc_growth", &[]);
    let exe = exe.to_str().unwrap();
    for args in [
        ["inplace", "8192", "10", "64"],
        ["moving", "4096", "10", "4096"],
    ] {
        let mut cmd = vec![exe];
        cmd.extend(args);
        let (p, out) = profile(dir.path(), &[], &[], &cmd);
        let exact = printed_value(&out, "true_peak");
        let rss = printed_value(&out, "maxrss_kib") * 1024.0;
        assert_peak_follows(&p, exact, Some(rss), args[0]);
        // Every reallocation counts as an allocation of its new size (as jemalloc and heaptrack
        // count it): sum over the steps of their sizes, estimated.
        let step: f64 = args[3].parse().unwrap();
        let steps = exact / if args[0] == "moving" { 2.0 } else { 1.0 } / step;
        let buffers = if args[0] == "moving" { 2.0 } else { 1.0 };
        let want = 10.0 * buffers * step * steps * (steps + 1.0) / 2.0;
        let j = view_json(&p, "peak");
        let alloc = j["totals"]["alloc_space"].as_f64().unwrap();
        assert!(
            (alloc - want).abs() < 0.05 * want,
            "{}: alloc_space {alloc:.0} vs {want:.0} reallocated",
            args[0]
        );
    }
}

/// Rust growing Vecs (push), Strings (push_str) and a byte buffer (extend): every growth is a
/// realloc. The program counts its own heap exactly (a counting global allocator).
#[test]
fn rust_vec_and_string_growth_follows_the_program() {
    let dir = test_dir();
    let exe = dir.path().join("vec_growth");
    Command::new("rustc")
        .args(["-O", "-g", "-o"])
        .arg(&exe)
        .arg(root().join("runtime/tests/vec_growth.rs"))
        .ok();
    let (p, out) = profile(dir.path(), &[], &[], &[exe.to_str().unwrap(), "20"]);
    // Vec capacity beyond what was pushed is never touched, so the exact heap can exceed RSS: the
    // RSS bound does not apply here.
    assert_peak_follows(&p, printed_value(&out, "true_peak"), None, "vec_growth");
}

/// heaptrack's figures for a command: (peak heap, leaked at exit) in bytes, from heaptrack_print.
fn heaptrack_figures(dir: &Path, cmd: &[&str]) -> (f64, f64) {
    let out = dir.join("ht");
    Command::new("heaptrack").arg("-o").arg(&out).args(cmd).ok();
    let data = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("ht."))
        .expect("heaptrack wrote its data file");
    let text = Command::new("heaptrack_print")
        .arg(&data)
        .args(["--print-peaks", "0", "--print-allocators", "0"])
        .ok_stdout();
    // heaptrack prints sizes in powers of 1000: "47.89M".
    let size = |key: &str| -> f64 {
        let v = text
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .unwrap_or_else(|| panic!("no '{key}' in heaptrack_print's output:\n{text}"))
            .split_whitespace()
            .next()
            .unwrap();
        let (num, mult) = match v.chars().last().unwrap() {
            'K' => (&v[..v.len() - 1], 1e3),
            'M' => (&v[..v.len() - 1], 1e6),
            'G' => (&v[..v.len() - 1], 1e9),
            'B' => (&v[..v.len() - 1], 1.0),
            _ => (v, 1.0),
        };
        num.parse::<f64>().unwrap() * mult
    };
    (
        size("peak heap memory consumption: "),
        size("total memory leaked: "),
    )
}

/// python3 appending to a list and growing bytes and a bytearray: CPython grows them with realloc.
/// heaptrack (which traces every call) gives the exact peak.
#[test]
fn python_list_and_bytes_growth_follows_heaptrack() {
    let dir = test_dir();
    let d = dir.path();
    let script = d.join("grow.py");
    std::fs::write(
        &script,
        "import resource\n\
         def grow_list(n):\n    l = []\n    for i in range(n):\n        l.append(None)\n    return l\n\
         def grow_bytes(n):\n    b = b''\n    for i in range(n):\n        b += b'x' * 100\n    return b\n\
         def grow_bytearray(n):\n    ba = bytearray()\n    for i in range(n):\n        ba += b'y' * 100\n    return ba\n\
         for r in range(4):\n    L = grow_list(3000000)\n    B = grow_bytes(5000)\n    BA = grow_bytearray(200000)\n    del L, B, BA\n\
         print('maxrss_kib', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n",
    )
    .unwrap();
    // The interpreter itself, not a wrapper script (pyenv's shim) that heaptrack would trace.
    let py = Command::new("python3")
        .args([
            "-c",
            "import os, sys; print(os.path.realpath(sys.executable))",
        ])
        .ok_stdout();
    let cmd = [py.trim(), script.to_str().unwrap()];
    let ht = test_dir();
    let (exact, _) = heaptrack_figures(ht.path(), &cmd);
    // heaptrack traces malloc only: pymalloc's arenas (anonymous mmap, which memlens counts as
    // its own kind) are left out here as well.
    let (p, out) = profile(d, &[], &[("MEMLENS_MMAP", "0")], &cmd);
    let rss = printed_value(&out, "maxrss_kib") * 1024.0;
    assert_peak_follows(&p, exact, Some(rss), "python3");
}

/// A leak made right after sampling starts: its age is the run's, and it is a suspect.
#[test]
fn startup_leak_has_its_age_and_is_suspect() {
    let dir = test_dir();
    let src = root().join("runtime/tests/startup_leak.c");
    let exe = compile(&src, dir.path(), "startup_leak", &[]);
    let (p, _) = profile(dir.path(), &[], &[], &[exe.to_str().unwrap(), "800"]);
    let leaks = view_json(&p, "leaks");
    let s = leaks["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["frames"][0]["function"] == "startup_leak_site")
        .unwrap_or_else(|| panic!("{leaks:#}"));
    let run_ns = (leaks["meta"]["time_ns"].as_f64().unwrap()
        - leaks["meta"]["start_ns"].as_f64().unwrap())
    .max(1.0);
    let age = s["live_age_ns"].as_f64().unwrap();
    assert!(
        age > 0.7 * run_ns && age <= 1.01 * run_ns,
        "start-up leak of age {age} ns in a run of {run_ns} ns: {s:#}"
    );
    assert_eq!(s["suspect"], true, "{s:#}");
}

/// Two call sites in one function are two rows, each with its own line and bytes (as `go tool
/// pprof -lines` and heaptrack show them), in the views and in the plain report.
#[test]
fn two_call_sites_in_one_function_are_two_rows() {
    let dir = test_dir();
    let src = root().join("runtime/tests/twosites.c");
    let exe = compile(&src, dir.path(), "twosites", &["-O0"]);
    // At 64K a 2 MiB block is sampled with probability 1 - e^-32 (at the default 512K, 1 - e^-4:
    // the small site went missing about once in 55 runs).
    let (p, out) = profile(
        dir.path(),
        &["--interval", "64K"],
        &[],
        &[exe.to_str().unwrap()],
    );
    let (big, small) = (
        printed_value(&out, "big_line") as i64,
        printed_value(&out, "small_line") as i64,
    );
    for view in ["leaks", "inuse"] {
        let j = view_json(&p, view);
        let rows: Vec<(i64, f64)> = j["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["frames"][0]["function"] == "main")
            .map(|s| {
                (
                    s["frames"][0]["line"].as_i64().unwrap(),
                    s["value"].as_f64().unwrap(),
                )
            })
            .collect();
        assert_eq!(rows.len(), 2, "{view}: {j:#}");
        let mib = 1048576.0;
        assert_eq!(rows[0].0, big, "{view}: {rows:?}");
        assert!(
            (rows[0].1 - 20.0 * mib).abs() < 2.0 * mib,
            "{view}: {rows:?}"
        );
        assert_eq!(rows[1].0, small, "{view}: {rows:?}");
        assert!(
            (rows[1].1 - 2.0 * mib).abs() < 0.5 * mib,
            "{view}: {rows:?}"
        );
    }
}

/// Lifetimes are what was measured: blocks that lived ~1.4 s are in the 1–10 s decade and blocks
/// that lived ~300 ms in 100 ms–1 s, nothing of the latter labelled as freed after 1 s; the median
/// `go tool pprof` filters on is the upper bound of that decade.
#[test]
fn lifetimes_are_the_decades_measured() {
    let dir = test_dir();
    let src = root().join("runtime/tests/lifetimes.c");
    let exe = compile(&src, dir.path(), "lifetimes", &[]);
    let (p, _) = profile(dir.path(), &[], &[], &[exe.to_str().unwrap()]);
    let ps = p.to_str().unwrap();
    let tags = |site: &str| -> String {
        Command::new("go")
            .args(["tool", "pprof", "-tags", &format!("-focus={site}"), ps])
            .ok_stdout()
    };
    let long = tags("long_site");
    assert!(long.contains("freed_lt_10s:"), "{long}");
    assert!(!long.contains("freed_lt_1s:"), "{long}");
    assert!(
        long.contains("): 10s"),
        "lifetime_median of long_site: {long}"
    );
    let short = tags("short_site");
    assert!(short.contains("freed_lt_1s:"), "{short}");
    assert!(!short.contains("freed_lt_10s:"), "{short}");
    assert!(!short.contains("freed_lt_100ms:"), "{short}");
    assert!(
        short.contains("): 1s"),
        "lifetime_median of short_site: {short}"
    );
}

/// The allocator's figures are named by the allocator the program ran on.
#[test]
fn timeline_names_the_allocator_loaded() {
    let mimalloc = "/usr/lib/x86_64-linux-gnu/libmimalloc.so.2";
    assert!(
        Path::new(mimalloc).exists(),
        "{mimalloc} missing: install libmimalloc2.0 (scripts/install-deps.sh)"
    );
    let dir = test_dir();
    let src = root().join("runtime/tests/views_sites.c");
    let exe = compile(&src, dir.path(), "views_sites", &[]);
    let (p, _) = profile(
        dir.path(),
        &[],
        &[("LD_PRELOAD", mimalloc)],
        // 10 rounds (~0.5 s): the figures are read every 100 ms on the runtime's thread, and 3
        // rounds could end before the first read
        &[exe.to_str().unwrap(), "10"],
    );
    let tl = view_json(&p, "timeline");
    assert_eq!(tl["allocator"], "mimalloc", "{tl:#}");
    // mimalloc tells what it committed, not what is in use: footprint only.
    // (Read on the runtime's thread: points before its first read have no figures.)
    let points = tl["points"].as_array().unwrap();
    let inner = &points[..points.len() - 1];
    assert!(inner.iter().all(|p| p["allocator_in_use"].is_null()));
    assert!(
        inner.iter().any(|p| !p["allocator_footprint"].is_null()),
        "{tl:#}"
    );
    assert!(inner
        .iter()
        .all(|p| p["allocator_footprint"].is_null()
            || p["allocator_footprint"].as_f64().unwrap() > 0.0));
    let table = memlens()
        .args(["report", p.to_str().unwrap(), "--view", "timeline"])
        .ok_stdout();
    assert!(table.contains("allocator: mimalloc"), "{table}");
}

/// A run of a program of runtime/tests that prints `true_peak`, profiled at the default interval:
/// the split-sample peak and the highest estimate over the exact peak, whether the printed 95 %
/// interval holds it, and the peak view's text.
struct PeakRun {
    est: f64,
    highest: f64,
    inside: bool,
    text: String,
}

fn peak_runs(program: &str, n: usize, args: &[&str]) -> Vec<PeakRun> {
    let dir = test_dir();
    let src = root().join(format!("runtime/tests/{program}.c"));
    let exe = compile(&src, dir.path(), program, &[]);
    (0..n)
        .map(|_| {
            let cmd: Vec<&str> = [exe.to_str().unwrap()]
                .into_iter()
                .chain(args.iter().copied())
                .collect();
            let (p, out) = profile(dir.path(), &[], &[], &cmd);
            let exact = printed_value(&out, "true_peak");
            let tl = view_json(&p, "timeline");
            let e = tl["peak_estimate_bytes"]
                .as_f64()
                .expect("a split-sample peak");
            let iv = &tl["peak_interval_bytes"];
            let (lo, hi) = (iv[0].as_f64().unwrap(), iv[1].as_f64().unwrap());
            PeakRun {
                est: e / exact,
                highest: tl["heap_max_bytes"].as_f64().unwrap() / exact,
                inside: lo <= exact && exact <= hi,
                text: report_text(&p, "peak"),
            }
        })
        .collect()
}

/// A heap that churns at a steady size: 800 blocks of 32 KiB replaced one at a time 400,000 times,
/// whose peak is exact (25 MiB and the array). The highest of the sampled estimate's thousands of
/// moments reads 1.5-1.65x that at 512 KiB (issue 34); the split-sample estimate the report
/// prints must be near the truth and its printed 95 % interval must hold it. Over 8 runs: the
/// median within ±25 % and at least 6 of 8 intervals holding the true peak. One run's estimate
/// has a standard error of √(R/H) = 14 % here, the median of 8 about 6 %: ±25 % is 4 of them.
/// With 200 blocks (6.25 MiB, the earlier shape) one run's error was 28 %, the median's 12 %, and
/// the median left ±25 % by chance (0.65x once, beside the whole suite at load 5).
#[test]
fn peak_interval_covers_a_churning_heap() {
    let runs = peak_runs("churn_peak", 8, &["800"]);
    let mut est: Vec<f64> = runs.iter().map(|r| r.est).collect();
    let mut highest: Vec<f64> = runs.iter().map(|r| r.highest).collect();
    let inside = runs.iter().filter(|r| r.inside).count();
    for r in &runs {
        assert!(r.text.contains("(95 %"), "{}", r.text);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (v[3] + v[4]) / 2.0
    };
    let (m, mh) = (median(&mut est), median(&mut highest));
    assert!(
        mh > 1.3,
        "the churn no longer shows the highest estimate's lean: {highest:?}"
    );
    assert!(
        (0.75..=1.25).contains(&m),
        "split-sample peak / exact: {est:?}"
    );
    // A 95 % interval misses 2 of 8 about 6 % of the time even when it is right; at least 6 of 8
    // fails a right interval 0.6 % of the time and still fails one that covers only half the runs
    // (the old highest estimate's) almost always.
    assert!(
        inside >= 6,
        "{inside} of 8 intervals hold the exact peak: {est:?}"
    );
}

/// A brief spike over a churning heap (git pack-objects' shape, issue 34): 100 blocks of 64 KiB
/// replaced 300,000 times (6.25 MiB), and halfway 1600 blocks of 4 KiB allocated and freed at once
/// (the exact peak: 12.5 MiB, for a moment). At 512 KiB a half-sample's highest moment lies on the
/// plateau in ~90 % of halves (the spike's estimate, 12.5 ± 3.5 MiB, against the highest of thousands
/// of the plateau's draws, ~17 MiB), so the split estimate reads the plateau, and an interval of its
/// own ± held the peak in about 1 run of 5 (7 of 8 then: < 10^-3). The printed interval reaches up
/// to what the highest estimate allows (≥ 14 MiB here whatever the draws: the plateau's thousands
/// of draws pass 7.9 MiB, the least that holds 12.5 MiB, almost surely), so it holds the peak but
/// when the split estimate itself reads more than 1.96 standard errors above it (< 2.5 % of the
/// runs whose halves both chose the spike, ~1 %): 7 of 8 fails with probability < 10^-4.
#[test]
fn peak_interval_holds_a_brief_spike() {
    let runs = peak_runs("spike_peak", 8, &[]);
    let est: Vec<f64> = runs.iter().map(|r| r.est).collect();
    let inside = runs.iter().filter(|r| r.inside).count();
    for r in &runs {
        assert!(r.text.contains("a spike briefer"), "{}", r.text);
    }
    assert!(
        inside >= 7,
        "{inside} of 8 intervals hold the exact peak: {est:?}"
    );
}

/// A 40 KiB leak is far below what 512 KiB sampling resolves: the leaks view says so with a bound
/// that holds it, not a figure ± 100 %. At 1 KiB (about 40 samples) it gets a figure.
#[test]
fn small_leak_is_said_unresolved_at_a_coarse_interval() {
    let dir = test_dir();
    let exe = compile(
        &root().join("runtime/tests/small_leak.c"),
        dir.path(),
        "small_leak",
        &[],
    );
    let (p, out) = profile(dir.path(), &[], &[], &[exe.to_str().unwrap()]);
    let leaked = printed_value(&out, "leaked");
    let text = report_text(&p, "leaks");
    let bound = text
        .split("leaks: < ")
        .nth(1)
        .and_then(|s| s.split(" still live").next())
        .unwrap_or_else(|| panic!("no bound in:\n{text}"));
    assert!(text.contains("not resolved at this interval"), "{text}");
    assert!(
        parse_bytes(bound) >= leaked,
        "{bound} below the {leaked} leaked:\n{text}"
    );
    let (p, _) = profile(
        dir.path(),
        &["--interval", "1K"],
        &[],
        &[exe.to_str().unwrap()],
    );
    let j = view_json(&p, "leaks");
    let live = j["totals"]["inuse_space"]
        .as_f64()
        .unwrap_or_else(|| panic!("{j:#}"));
    assert!(
        (0.5 * leaked..=1.5 * leaked + 8192.0).contains(&live),
        "{live} vs {leaked}"
    );
    let text = report_text(&p, "leaks");
    assert!(!text.contains("not resolved"), "{text}");
}

/// `memlens report FILE --view VIEW` with its lines joined (the summary wraps at the terminal's
/// width).
fn report_text(p: &Path, view: &str) -> String {
    let text = memlens()
        .args(["report", p.to_str().unwrap(), "--view", view])
        .ok_stdout();
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// "1.48 MiB" as bytes.
fn parse_bytes(s: &str) -> f64 {
    let (num, unit) = s.trim().split_once(' ').unwrap_or((s, "B"));
    let mult = match unit {
        "KiB" => 1024.0,
        "MiB" => 1048576.0,
        "GiB" => 1073741824.0,
        _ => 1.0,
    };
    num.parse::<f64>().unwrap() * mult
}

/// The ripgrep realloc site of issue 34 ("counted 2x at 512K"), by a stand-in whose buffer size is
/// exact: runtime/tests/thread_doubling.c grows a buffer by doubling realloc from 64 KiB to 4 MiB on
/// two worker threads in turn, churning 4-16 KiB blocks beside it. The realloc site's peak bytes are
/// the buffer's size (one object, sampled almost surely at 4 MiB) in each of 6 runs at 512K. For
/// ripgrep itself the "2x" was the program's own: its buffer ends at 2.125 or 4.25 MiB from run to
/// run as its threads' timing goes (docs/heap-views.md), and memlens read each run's size.
#[test]
fn a_buffer_doubled_by_realloc_on_worker_threads_is_counted_once() {
    let dir = test_dir();
    let exe = compile(
        &root().join("runtime/tests/thread_doubling.c"),
        dir.path(),
        "thread_doubling",
        &["-pthread"],
    );
    for _ in 0..4 {
        let (p, out) = profile(
            dir.path(),
            &["--interval", "512K"],
            &[],
            &[exe.to_str().unwrap()],
        );
        let exact = printed_value(&out, "buffer_bytes");
        let j = view_json(&p, "peak");
        let site: f64 = j["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["frames"][0]["function"] == "grow_buffer")
            .map(|s| s["value"].as_f64().unwrap())
            .sum();
        assert!(
            (0.97 * exact..=1.1 * exact).contains(&site),
            "grow_buffer's peak bytes {site} for a buffer of {exact}: {j:#}"
        );
    }
}
