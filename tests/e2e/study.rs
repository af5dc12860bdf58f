//! End-to-end tests of `memlens study` and the built-in workloads (small sizes: the whole file runs
//! in well under a minute). They check behaviour — the JSON contract, the switch reaching every
//! thread, clear errors — never speed. The pairing statistics and the recommendation are tested on
//! synthetic data in the crate (stats.rs, verdict.rs).
use crate::util::*;
use serde_json::Value;

fn json(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("no JSON written"))
        .expect("invalid JSON")
}

fn rows<'a>(v: &'a Value, workload: &str) -> &'a Vec<Value> {
    let w = v["workloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|w| w["workload"] == workload);
    w.unwrap_or_else(|| panic!("no workload {workload} in {v}"))["rows"]
        .as_array()
        .unwrap()
}

#[test]
fn synthetic_workload_runs_and_reports() {
    let dir = test_dir();
    let j = dir.path().join("s.json");
    let o = memlens()
        .args([
            "study",
            "--unpaired",
            "--workload",
            "synthetic",
            "--threads",
            "1,2",
            "--ops",
            "20000",
            "--repeats",
            "2",
            "--unwinders",
            "none",
            "--baselines",
            "none",
            "--no-exact",
            "--json",
            j.to_str().unwrap(),
        ])
        .ok();
    let v = json(&j);
    for w in ["synthetic-1t", "synthetic-2t"] {
        let names: Vec<&str> = rows(&v, w)
            .iter()
            .map(|r| r["config"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["off", "inactive"]);
        for r in rows(&v, w) {
            assert!(
                r["metric"]["median"].as_f64().unwrap() > 0.0
                    && r["pair_cycles"].as_f64().unwrap() > 0.0
            );
            assert_eq!(r["metric"]["n"], 2);
        }
    }
    assert!(stdout(&o).contains("cyc/pair"));
    assert_unpaired_contract(&v);
}

/// Unpaired rows (separate processes) carry the paired study's contract fields, marked
/// `paired: false`, with the same interval estimate; references have no overhead.
fn assert_unpaired_contract(v: &Value) {
    for w in v["workloads"].as_array().unwrap() {
        for r in w["rows"].as_array().unwrap() {
            for k in [
                "workload",
                "config",
                "interval_bytes",
                "unwinder",
                "paired",
                "overhead_pct",
                "ci_low_pct",
                "ci_high_pct",
                "coverage_pct",
            ] {
                assert!(r.get(k).is_some(), "row lacks {k}: {r}");
            }
            assert_eq!(r["paired"], false, "{r}");
            assert_eq!(r["workload"], w["workload"], "{r}");
            if r["reference"].is_null() {
                assert!(
                    r["overhead_pct"].is_null() && r["ci_low_pct"].is_null(),
                    "{r}"
                );
                continue;
            }
            let (lo, x, hi) = (
                r["ci_low_pct"].as_f64().unwrap(),
                r["overhead_pct"].as_f64().unwrap(),
                r["ci_high_pct"].as_f64().unwrap(),
            );
            assert!(lo <= x && x <= hi, "{r}");
            let sampled = r["config"].as_str().unwrap().contains('K');
            assert_eq!(r["interval_bytes"].is_number(), sampled, "{r}");
        }
    }
}

/// tcmalloc cannot switch at run time: it runs unpaired, and its rows say so.
#[test]
fn unpaired_baseline_meets_the_json_contract() {
    let tc = "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4";
    assert!(
        std::path::Path::new(tc).exists(),
        "{tc} missing: scripts/install-deps.sh installs libgoogle-perftools4"
    );
    let dir = test_dir();
    let j = dir.path().join("s.json");
    memlens()
        .args([
            "study",
            "--unpaired",
            "--workload",
            "synthetic",
            "--threads",
            "1",
            "--ops",
            "20000",
            "--repeats",
            "3",
            "--intervals",
            "64K",
            "--unwinders",
            "fp",
            "--baselines",
            "tcmalloc",
            "--json",
            j.to_str().unwrap(),
        ])
        .ok();
    let v = json(&j);
    let r = rows(&v, "synthetic-1t");
    let names: Vec<&str> = r.iter().map(|r| r["config"].as_str().unwrap()).collect();
    assert!(
        names.contains(&"tcmalloc") && names.iter().any(|n| n.starts_with("tcmalloc ")),
        "{names:?}"
    );
    assert_unpaired_contract(&v);
    let fp = r.iter().find(|r| r["config"] == "memlens fp 64K").unwrap();
    assert_eq!(fp["unwinder"], "fp");
    assert_eq!(fp["interval_bytes"], 64 << 10);
    // the exact run scores the sampled one: at 64K it finds the stacks of at least the published
    // 90% of the bytes (measured: 99.98%) and estimates the total within 25% (measured: 2-4%)
    let cov = fp["coverage_pct"].as_f64().unwrap();
    assert!((90.0..=100.0).contains(&cov), "{fp}");
    assert!(fp["total_error_pct"].as_f64().unwrap().abs() < 25.0, "{fp}");
    let off = r.iter().find(|r| r["config"] == "off").unwrap();
    assert!(off["interval_bytes"].is_null() && off["unwinder"].is_null());
}

#[test]
fn pipeline_workload_runs_reports_and_is_deterministic() {
    let args = [
        "workload",
        "pipeline",
        "--seed",
        "7",
        "--quotes",
        "2000",
        "--instruments",
        "128",
        "--rate",
        "0",
    ];
    let a = memlens().args(args).ok_stdout();
    let b = memlens().args(args).ok_stdout();
    let (va, vb): (Value, Value) = (
        serde_json::from_str(&a).unwrap(),
        serde_json::from_str(&b).unwrap(),
    );
    assert_eq!(va["orders"], 2000);
    assert_eq!(
        va["checksum"], vb["checksum"],
        "same seed, different orders"
    );
    for k in ["mean", "p50", "p99", "p999"] {
        assert!(va["latency_ns"][k].as_f64().unwrap() > 0.0, "{k}");
    }
    let c = memlens()
        .args([
            "workload",
            "pipeline",
            "--seed",
            "8",
            "--quotes",
            "2000",
            "--instruments",
            "128",
            "--rate",
            "0",
        ])
        .ok_stdout();
    let vc: Value = serde_json::from_str(&c).unwrap();
    assert_ne!(va["checksum"], vc["checksum"]);
}

/// The contract scripts rely on: every row carries these fields, with the interval inside its CI.
#[test]
fn quick_paired_study_meets_the_json_contract() {
    let dir = test_dir();
    let (j, h, c) = (
        dir.path().join("s.json"),
        dir.path().join("s.html"),
        dir.path().join("s.csv"),
    );
    let o = memlens()
        .env("COLUMNS", "100")
        .args([
            "study",
            "--quick",
            "--json",
            j.to_str().unwrap(),
            "--html",
            h.to_str().unwrap(),
            "--csv",
            c.to_str().unwrap(),
        ])
        .ok();
    assert!(stdout(&o).starts_with("VERDICT"), "{}", stdout(&o));
    // fitted to the terminal: wide tables are split by topic, notes wrapped
    for l in stdout(&o).lines() {
        assert!(l.chars().count() <= 100, "wider than COLUMNS=100: {l}");
    }
    let v = json(&j);
    let rows = v["rows"].as_array().unwrap();
    let je = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
    assert!(
        std::path::Path::new(je).exists(),
        "{je} missing: scripts/install-deps.sh installs libjemalloc2"
    );
    // 2 workloads x 2 intervals x (memlens fp + jemalloc)
    assert_eq!(rows.len(), 8, "{rows:?}");
    for r in rows {
        for k in [
            "workload",
            "config",
            "interval_bytes",
            "unwinder",
            "paired",
            "overhead_pct",
            "ci_low_pct",
            "ci_high_pct",
            "coverage_pct",
            "direct_cost_pct",
            "indirect_cost_pct",
        ] {
            assert!(r.get(k).is_some(), "row lacks {k}: {r}");
        }
        assert_eq!(r["paired"], true);
        let (lo, x, hi) = (
            r["ci_low_pct"].as_f64().unwrap(),
            r["overhead_pct"].as_f64().unwrap(),
            r["ci_high_pct"].as_f64().unwrap(),
        );
        assert!(lo <= x && x <= hi, "{r}");
        // every row says whether its CI reached the target, and the verdict counts the misses
        let target = r["ci_target_pct"].as_f64().unwrap();
        assert_eq!(r["ci_met"], (hi - lo) / 2.0 <= target, "{r}");
        let memlens = r["profiler"] == "memlens";
        assert_eq!(r["unwinder"].is_null(), !memlens, "{r}");
        let pipeline = r["workload"] == "pipeline-l2";
        // direct/indirect: only where ticks are tagged by the runtime's per-thread sample count
        assert_eq!(r["direct_cost_pct"].is_number(), pipeline && memlens, "{r}");
        assert_eq!(
            r["indirect_cost_pct"].is_number(),
            pipeline && memlens,
            "{r}"
        );
        // quality: the pipeline's profile window, memlens only (judged below)
        if !(pipeline && memlens) {
            assert!(r["coverage_pct"].is_null(), "{r}");
        }
    }
    // The quality figures measure: at 64K the sampled profile finds the stacks of at least the
    // published 90% of the bytes (measured: 99.5-100%, ~340 samples) and estimates the total within
    // 25% (measured: within 5%; 25% is over four standard errors); 2M samples 32 times less often,
    // so it has fewer samples and cannot find more of the bytes (measured: 70-80%, ~12 samples).
    let quality = |interval: u64| {
        let r = rows
            .iter()
            .find(|r| {
                r["workload"] == "pipeline-l2"
                    && r["profiler"] == "memlens"
                    && r["interval_bytes"] == interval
            })
            .unwrap_or_else(|| panic!("no pipeline row at {interval}: {rows:?}"));
        (
            r["coverage_pct"].as_f64().unwrap(),
            r["samples"].as_u64().unwrap(),
            r["total_error_pct"].as_f64().unwrap(),
            r.to_string(),
        )
    };
    let (cov64, samples64, err64, row64) = quality(64 << 10);
    let (cov2m, samples2m, _, row2m) = quality(2 << 20);
    assert!((90.0..=100.0).contains(&cov64), "{row64}");
    assert!(err64.abs() < 25.0, "{row64}");
    assert!(samples2m > 0 && samples2m < samples64, "{row2m}\n{row64}");
    assert!(cov2m > 0.0 && cov2m <= cov64, "{row2m}\n{row64}");
    assert!(v["machine"].is_object() && v["switch"]["threads"].as_u64().unwrap() >= 2);
    // cache/TLB misses per tick: counted, or n/a with the reason — never a stub
    let counters = v["counters"].as_str().unwrap();
    assert!(
        counters.starts_with("n/a (") || v["counter_events"].is_array(),
        "{counters}"
    );
    assert!(!counters.contains("not collected"), "{counters}");
    let out = stdout(&o);
    assert!(out.contains("64K vs 2M (fp)"), "{out}");
    assert!(out.contains("CI target"), "{out}");
    let page = std::fs::read_to_string(&h).unwrap();
    let verdict = page.find("Verdict").unwrap();
    assert!(verdict < page.find("Cost:").unwrap(), "verdict first");
    assert_eq!(
        std::fs::read_to_string(&c).unwrap().lines().count(),
        rows.len() + 1
    );
}

/// A switch reaches every thread at its next allocation (not after ~1 MiB of it), also while
/// threads are created and exit.
#[test]
fn switch_reaches_every_thread_at_its_next_allocation() {
    let tmp = test_dir();
    let inc = format!("-I{}", root().join("runtime/include").display());
    let prog = compile(
        &root().join("runtime/tests/switch.c"),
        tmp.path(),
        "switch",
        &[inc.as_str()],
    );
    let text = memlens()
        .args([
            "run",
            "--inactive",
            "-o",
            tmp.path().join("s.pb.gz").to_str().unwrap(),
            "--",
            prog.to_str().unwrap(),
            "4",
            "60",
        ])
        .ok_stdout();
    let val = |k: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k} ")))
            .unwrap_or_else(|| panic!("no {k} in:\n{text}"))
            .parse()
            .unwrap()
    };
    // on: the next allocation re-arms (interval 1 byte), the one after it is sampled
    assert!(val("max_allocs_to_on") <= 2, "{text}");
    assert!(val("max_allocs_to_off") <= 1, "{text}");
}

#[test]
fn run_to_completion_pipeline_is_deterministic() {
    let args = ["workload", "rtc", "--ticks", "5000", "--working-set", "2M"];
    let (a, b) = (
        memlens().args(args).ok_stdout(),
        memlens().args(args).ok_stdout(),
    );
    let sum = |out: &str| {
        out.lines()
            .find_map(|l| l.split("checksum=").nth(1).map(str::to_string))
            .expect("no checksum")
    };
    assert_eq!(sum(&a), sum(&b));
    let c = memlens()
        .args([
            "workload",
            "rtc",
            "--ticks",
            "5000",
            "--working-set",
            "2M",
            "--seed",
            "2",
        ])
        .ok_stdout();
    assert_ne!(sum(&a), sum(&c));
}

#[test]
fn bad_input_gives_usage_errors() {
    for args in [
        &["study", "--intervals", "64Q"][..],
        &["study", "--intervals", ""][..],
        &["study", "--workload", "nosuch"][..],
        &["study", "--unwinders", "frames"][..],
        &["study", "--baselines", "valgrind"][..],
        &["study", "--rounds", "0"][..],
        &["study", "--baselines", "heaptrack"][..],
        &["study", "--unpaired", "--repeats", "0"][..],
    ] {
        memlens().args(args).error(2);
    }
}

#[test]
fn failing_command_is_reported_with_its_status_and_no_overhead() {
    let dir = test_dir();
    let j = dir.path().join("s.json");
    let o = memlens()
        .args([
            "study",
            "--repeats",
            "1",
            "--unwinders",
            "none",
            "--baselines",
            "none",
            "--json",
            j.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "exit 3",
        ])
        .error(1);
    let e = stderr(&o);
    assert!(
        e.contains("exit status 3") && e.contains("no overhead"),
        "{e}"
    );
    assert!(!j.exists(), "results written from a failed command");
}

#[test]
fn any_command_with_a_metric_regex() {
    let dir = test_dir();
    let j = dir.path().join("s.json");
    memlens()
        .args([
            "study",
            "--repeats",
            "2",
            "--intervals",
            "512K",
            "--unwinders",
            "fp",
            "--baselines",
            "none",
            "--metric",
            "value=([0-9.]+)",
            "--json",
            j.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "echo value=42.5",
        ])
        .ok();
    let v = json(&j);
    let r = rows(&v, "sh");
    assert!(r
        .iter()
        .all(|r| r["metric"]["median"].as_f64() == Some(42.5)));
}
