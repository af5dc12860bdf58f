//! End-to-end tests of `memlens bench latency` and `memlens bench bandwidth`: small real runs on this
//! machine, checked for sane ordering, the counter paths, the n/a path and usage errors.
use crate::util::{memlens, stdout, TestCommand};
use serde_json::Value;
use std::path::Path;

fn json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).expect("JSON written")).expect("valid JSON")
}

/// Declared L2 size from the result's machine facts (512 KiB if sysfs says nothing).
fn l2_bytes(v: &Value) -> u64 {
    v["machine"]["caches"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["level"] == 2))
        .and_then(|c| c["size_bytes"].as_u64())
        .unwrap_or(512 << 10)
}

fn ns(v: &Value, order: &str, elem: u64, ws: u64) -> f64 {
    let p = v["results"]["points"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["order"] == order && p["element_bytes"] == elem && p["working_set"] == ws)
        .unwrap_or_else(|| panic!("no point {order}/{elem} at {ws}"));
    p["ns"]["median"].as_f64().unwrap()
}

#[test]
fn latency_small_sweep_is_sane_and_counts_software_events() {
    let dir = tempfile::tempdir().unwrap();
    let (j, c, s, h) = (
        dir.path().join("l.json"),
        dir.path().join("l.csv"),
        dir.path().join("l.svg"),
        dir.path().join("l.html"),
    );
    // Working sets up to 16× the L2 (8 MiB for a 512 KiB L2, at least 8 MiB), so that the orders
    // are compared beyond L2 on every machine.
    let facts = dir.path().join("m.json");
    memlens()
        .args(["sysinfo", "--json", facts.to_str().unwrap()])
        .ok();
    let l2 = l2_bytes(&serde_json::json!({ "machine": json(&facts) }));
    let max_ws = (16 * l2).next_power_of_two().max(8 << 20);
    let sizes = u64::from((max_ws / 4096).ilog2()) + 1; // 4K, 8K, … max_ws
    let o = memlens()
        .args([
            "bench",
            "latency",
            "--min-ws",
            "4K",
            "--max-ws",
            &max_ws.to_string(),
            "--repeats",
            "3",
            "--min-time",
            "2ms",
            "--counters",
            "software",
            "--json",
            j.to_str().unwrap(),
            "--csv",
            c.to_str().unwrap(),
            "--svg",
            s.to_str().unwrap(),
            "--html",
            h.to_str().unwrap(),
        ])
        .ok();
    let out = stdout(&o);
    assert!(
        out.contains("random/64B") && out.contains("Levels"),
        "{out}"
    );
    let v = json(&j);
    let points = v["results"]["points"].as_array().unwrap();
    // The working sets × 3 sizes × 3 orders, minus page order below two pages (4K).
    assert_eq!(points.len() as u64, sizes * 9 - 3, "{out}");
    for p in points {
        let m = p["ns"]["median"].as_f64().unwrap();
        assert!(m > 0.05 && m < 1e5, "implausible {m} ns in {p}");
        // Software counters were collected with the group machinery on every point.
        let cs = p["counters"].as_array().unwrap();
        let tc = cs
            .iter()
            .find(|c| c["name"] == "task-clock")
            .expect("task-clock");
        assert!(tc["per_element"].as_f64().unwrap() > 0.0, "{tc}");
        assert!(cs
            .iter()
            .any(|c| c["name"] == "page-faults" && c["per_element"].is_number()));
        assert!(
            !cs.iter().any(|c| c["name"] == "cycles"),
            "software mode opened hardware events"
        );
    }
    // Beyond L2 (at 4× and more), a random cycle cannot be faster than the prefetched sequence;
    // one element per page is never faster than sequential at the same working set (10% noise).
    assert_eq!(
        l2_bytes(&v),
        l2,
        "the result's machine facts differ from sysinfo's"
    );
    for ws in [(4 * l2).next_power_of_two(), max_ws] {
        for e in [8, 64, 256] {
            assert!(
                ns(&v, "random", e, ws) >= ns(&v, "seq", e, ws),
                "random < seq at {ws}/{e}: {out}"
            );
        }
    }
    // With one element per page, the page order's data is ws/4096 elements (a few lines at small
    // working sets), so it is compared where its pages outrun the caches and TLB: the largest one.
    for e in [8, 64, 256] {
        assert!(
            ns(&v, "page", e, max_ws) >= ns(&v, "seq", e, max_ws),
            "page < seq at {max_ws}/{e}: {out}"
        );
    }
    let csv = std::fs::read_to_string(&c).unwrap();
    assert!(
        csv.starts_with("order,element_bytes,working_set")
            && csv.lines().count() == points.len() + 1
    );
    assert!(std::fs::read_to_string(&s).unwrap().contains("<svg"));
    let html = std::fs::read_to_string(&h).unwrap();
    assert!(html.contains("<svg") && html.contains("Detected levels"));
}

#[test]
fn latency_unopenable_counter_shows_na_with_reason() {
    // Whatever this machine's PMU does, a counter the kernel refuses must show as n/a with the
    // reason, and the run (and the other counters) go on.
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("l.json");
    let o = memlens()
        .args([
            "bench",
            "latency",
            "--min-ws",
            "64K",
            "--max-ws",
            "256K",
            "--sizes",
            "8",
            "--orders",
            "seq,random",
            "--repeats",
            "2",
            "--min-time",
            "2ms",
            "--test-break-event",
            "cycles",
            "--json",
            j.to_str().unwrap(),
        ])
        .ok();
    let out = stdout(&o);
    assert!(out.contains("CPI: n/a (cycles: "), "{out}");
    let v = json(&j);
    for p in v["results"]["points"].as_array().unwrap() {
        let cs = p["counters"].as_array().unwrap();
        let cyc = cs.iter().find(|c| c["name"] == "cycles").unwrap();
        assert!(
            cyc["per_element"].is_null()
                && cyc["unavailable"].as_str().is_some_and(|r| !r.is_empty()),
            "{cyc}"
        );
        // Software events are still reported.
        assert!(cs.iter().any(
            |c| c["name"] == "task-clock" && c["per_element"].as_f64().is_some_and(|x| x > 0.0)
        ));
    }
    // Every hardware event is either a number or n/a with a reason: never a silent zero.
    let probe = v["results"]["counter_probe"].as_array().unwrap();
    for e in probe {
        assert!(
            e[1].as_str().unwrap().starts_with("ok") || e[1].as_str().unwrap().contains(' '),
            "{e}"
        );
    }
}

#[test]
fn latency_bad_input_is_one_line_usage_error() {
    for args in [
        &["--sizes", "12"][..],
        &["--sizes", "8K"],
        &["--sizes", "abc"],
        &["--orders", "zigzag"],
        &["--min-ws", "1M", "--max-ws", "64K"],
        &["--counters", "maybe"],
        &["--threads", "0"],
    ] {
        let mut a = vec!["bench", "latency"];
        a.extend_from_slice(args);
        memlens().args(&a).error(2);
    }
    memlens()
        .args(["bench", "bandwidth", "--size", "1x"])
        .error(2);
}

#[test]
fn bandwidth_small_run_has_all_kernels_and_indirection_ratios() {
    let dir = tempfile::tempdir().unwrap();
    let (j, c, s) = (
        dir.path().join("b.json"),
        dir.path().join("b.csv"),
        dir.path().join("b.svg"),
    );
    let o = memlens()
        .args([
            "bench",
            "bandwidth",
            "--size",
            "4M",
            "--threads",
            "1,2",
            "--repeats",
            "2",
            "--pool-dir",
            dir.path().to_str().unwrap(),
            "--json",
            j.to_str().unwrap(),
            "--csv",
            c.to_str().unwrap(),
            "--svg",
            s.to_str().unwrap(),
        ])
        .ok();
    let out = stdout(&o);
    assert!(
        out.contains("STREAM's way") && out.contains("write-allocate"),
        "{out}"
    );
    let v = json(&j);
    let rows = v["rows"].as_array().unwrap();
    for k in [
        "Copy",
        "Scale",
        "Add",
        "Triad",
        "TriadTranslated",
        "TriadHoisted",
    ] {
        for t in [1, 2] {
            let r = rows
                .iter()
                .find(|r| r["kernel"] == k && r["threads"] == t)
                .unwrap_or_else(|| panic!("no {k}/{t}: {out}"));
            let best = r["best_gbps"].as_f64().unwrap();
            assert!(best > 0.01 && best < 10_000.0, "{k}/{t}: {best} GB/s");
        }
    }
    let ind = v["indirection"].as_array().unwrap();
    let plain: Vec<_> = ind
        .iter()
        .filter(|i| i["case"].as_str().unwrap().starts_with("handle"))
        .collect();
    assert_eq!(plain.len(), 2);
    // Each ratio is hoisted over per-element, on the medians of the two triad kernels measured at
    // the same thread count, and the verdict states it beside the published 2×.
    let median = |k: &str, t: &serde_json::Value| {
        rows.iter()
            .find(|r| r["kernel"] == k && &r["threads"] == t)
            .unwrap_or_else(|| panic!("no {k}/{t}"))["gbps"]["median"]
            .as_f64()
            .unwrap()
    };
    for i in &plain {
        let (per, hoisted) = (
            median("TriadTranslated", &i["threads"]),
            median("TriadHoisted", &i["threads"]),
        );
        assert_eq!(i["per_element_median_gbps"].as_f64().unwrap(), per);
        assert_eq!(i["hoisted_median_gbps"].as_f64().unwrap(), hoisted);
        let ratio = i["ratio"].as_f64().unwrap();
        assert!((ratio - hoisted / per).abs() <= 1e-9 * ratio, "{i}");
        let said = format!(
            "{} thread(s): hoisting the translation out of the loop runs",
            i["threads"]
        );
        assert!(
            out.replace("\n  ", " ").contains(&said) && out.contains("published: ~2×"),
            "{out}"
        );
    }
    // libpmemobj is dlopened when installed; otherwise the output names the package.
    let pmem_installed = [
        "/usr/lib/x86_64-linux-gnu/libpmemobj.so.1",
        "/usr/lib64/libpmemobj.so.1",
    ]
    .iter()
    .any(|p| Path::new(p).exists());
    if pmem_installed {
        assert_eq!(
            ind.iter()
                .filter(|i| i["case"].as_str().unwrap().contains("pmemobj"))
                .count(),
            2,
            "{out}"
        );
        assert!(
            std::fs::read_dir(dir.path()).unwrap().all(|e| !e
                .unwrap()
                .file_name()
                .to_string_lossy()
                .ends_with(".pool")),
            "pool left behind"
        );
    } else {
        assert!(out.contains("libpmemobj1"), "{out}");
    }
    assert!(std::fs::read_to_string(&c).unwrap().lines().count() > 12);
    assert!(std::fs::read_to_string(&s).unwrap().contains("<svg"));
}

#[test]
fn latency_hugepages_and_loaded_threads_run() {
    let dir = tempfile::tempdir().unwrap();
    let j = dir.path().join("l.json");
    let o = memlens()
        .args([
            "bench",
            "latency",
            "--orders",
            "random",
            "--sizes",
            "64",
            "--min-ws",
            "4M",
            "--max-ws",
            "4M",
            "--threads",
            "2",
            "--hugepages",
            "--repeats",
            "2",
            "--min-time",
            "2ms",
            "--counters",
            "off",
            "--json",
            j.to_str().unwrap(),
        ])
        .ok();
    let v = json(&j);
    assert_eq!(v["results"]["config"]["threads"], 2);
    assert_eq!(v["results"]["config"]["hugepages"], true);
    // Two chasers of 4 MiB each were mapped; the AnonHugePages check is reported (its value is
    // whatever the kernel granted: THP may be disabled on the machine running the test).
    assert_eq!(v["results"]["huge_pages_check"][0], 8u64 << 20);
    assert!(stdout(&o).contains("Huge pages:"));
    assert!(ns(&v, "random", 64, 4 << 20) > 0.0);
}
