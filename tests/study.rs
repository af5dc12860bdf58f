//! End-to-end tests of `memlens study` and the built-in workloads (small sizes: the whole file runs
//! in well under a minute). They check behaviour — every configuration measured, coverage of the
//! exact run against itself, clear errors — never speed.
mod common;
use common::*;
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
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("s.json");
    let o = run(&[
        "study",
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
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
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
    let a = run(&args);
    let b = run(&args);
    assert!(a.status.success(), "{}", stderr(&a));
    let (va, vb): (Value, Value) = (
        serde_json::from_str(&stdout(&a)).unwrap(),
        serde_json::from_str(&stdout(&b)).unwrap(),
    );
    assert_eq!(va["orders"], 2000);
    assert_eq!(
        va["checksum"], vb["checksum"],
        "same seed, different orders"
    );
    for k in ["mean", "p50", "p99", "p999"] {
        assert!(va["latency_ns"][k].as_f64().unwrap() > 0.0, "{k}");
    }
    let c = run(&[
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
    ]);
    let vc: Value = serde_json::from_str(&stdout(&c)).unwrap();
    assert_ne!(va["checksum"], vc["checksum"]);
}

#[test]
fn small_study_has_every_configuration_and_exact_covers_itself() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("s.json");
    let h = dir.path().join("s.html");
    let c = dir.path().join("s.csv");
    let o = run(&[
        "study",
        "--workload",
        "all",
        "--intervals",
        "64K,1M",
        "--repeats",
        "1",
        "--unwinders",
        "fp",
        "--baselines",
        "jemalloc",
        "--threads",
        "1",
        "--ops",
        "20000",
        "--quotes",
        "1500",
        "--instruments",
        "256",
        "--json",
        j.to_str().unwrap(),
        "--html",
        h.to_str().unwrap(),
        "--csv",
        c.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&j);
    let expected = [
        "off",
        "inactive",
        "memlens fp 64K",
        "memlens fp 1M",
        "memlens fp exact",
        "jemalloc",
        "jemalloc prof 64K",
        "jemalloc prof 1M",
    ];
    for w in ["synthetic-1t", "pipeline"] {
        let names: Vec<&str> = rows(&v, w)
            .iter()
            .map(|r| r["config"].as_str().unwrap())
            .collect();
        if std::path::Path::new("/usr/lib/x86_64-linux-gnu/libjemalloc.so.2").exists() {
            assert_eq!(names, expected, "{w}");
        } else {
            assert_eq!(names, expected[..5], "{w}");
        }
        let exact = rows(&v, w)
            .iter()
            .find(|r| r["config"] == "memlens fp exact")
            .unwrap();
        assert_eq!(
            exact["coverage_pct"].as_f64(),
            Some(100.0),
            "{w}: exact run against itself"
        );
        assert!(exact["samples"].as_f64().unwrap() > 0.0);
        let sampled = rows(&v, w)
            .iter()
            .find(|r| r["config"] == "memlens fp 64K")
            .unwrap();
        let cov = sampled["coverage_pct"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&cov));
        assert!(sampled["overhead_pct"].as_f64().is_some());
    }
    let page = std::fs::read_to_string(&h).unwrap();
    assert!(page.contains("<svg") && page.contains("memlens fp 64K") && page.contains("published"));
    assert!(std::fs::read_to_string(&c).unwrap().lines().count() > 10);
    assert!(stdout(&o).contains("recommendation"));
}

#[test]
fn bad_input_gives_usage_errors() {
    for args in [
        &["study", "--intervals", "64Q"][..],
        &["study", "--intervals", ""][..],
        &["study", "--workload", "nosuch"][..],
        &["study", "--unwinders", "frames"][..],
        &["study", "--baselines", "valgrind"][..],
        &["study", "--repeats", "0"][..],
    ] {
        let o = run(args);
        assert_one_line_error(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn failing_command_is_reported_with_its_status_and_no_overhead() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("s.json");
    let o = run(&[
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
    ]);
    assert_one_line_error(&o);
    assert_eq!(o.status.code(), Some(1));
    let e = stderr(&o);
    assert!(
        e.contains("exit status 3") && e.contains("no overhead"),
        "{e}"
    );
    assert!(!j.exists(), "results written from a failed command");
}

#[test]
fn any_command_with_a_metric_regex() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("s.json");
    let o = run(&[
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
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&j);
    let r = rows(&v, "sh");
    assert!(r
        .iter()
        .all(|r| r["metric"]["median"].as_f64() == Some(42.5)));
}
