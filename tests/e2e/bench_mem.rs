//! End-to-end tests of `memlens bench latency` and `memlens bench bandwidth`: small real runs on this
//! machine, checked for sane ordering, the counter paths, the n/a path and usage errors.
use crate::util::{memlens, stdout, test_dir, TestCommand};
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
    let dir = test_dir();
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
    // Page order's missing 4K row is said once, not once per element size.
    assert_eq!(
        out.matches("page order below 8K: fewer than two elements fit")
            .count(),
        1,
        "{out}"
    );
    let tsc_ghz = v["machine"]["tsc_hz"].as_f64().unwrap() / 1e9;
    for p in points {
        // A dependent load takes from an L1 hit (~1 ns) to a DRAM miss with a page walk (~100 ns on
        // a server, a few hundred on a loaded VM); within L1 (≤ 16K, every order) a few ns at most.
        let m = p["ns"]["median"].as_f64().unwrap();
        let ws = p["working_set"].as_u64().unwrap();
        let cap = if ws <= 16 << 10 { 5.0 } else { 2000.0 };
        assert!(m > 0.2 && m < cap, "implausible {m} ns at {ws}: {p}");
        // Cycles are the same time at the TSC's rate.
        let cyc = p["tsc_cycles"]["median"].as_f64().unwrap();
        assert!(
            (cyc / m - tsc_ghz).abs() < 1e-6 * tsc_ghz,
            "{cyc} cycles for {m} ns: {p}"
        );
        // Software counters were collected with the group machinery on every point: task-clock
        // (CPU ns per element, a mean where the time is a median of chunks, so other programs'
        // cache pollution can raise it) within a small factor of the time, page faults rare.
        let cs = p["counters"].as_array().unwrap();
        let tc = cs
            .iter()
            .find(|c| c["name"] == "task-clock")
            .expect("task-clock")["per_element"]
            .as_f64()
            .unwrap();
        assert!(
            tc > 0.3 * m && tc < 20.0 * m,
            "task-clock {tc} ns/elem vs {m} ns: {p}"
        );
        let pf = cs
            .iter()
            .find(|c| c["name"] == "page-faults")
            .expect("page-faults")["per_element"]
            .as_f64()
            .unwrap();
        assert!((0.0..0.01).contains(&pf), "{pf} page faults per load: {p}");
        assert!(
            !cs.iter().any(|c| c["name"] == "cycles"),
            "software mode opened hardware events"
        );
    }
    // Every level is named from the declared caches (or DRAM), slowest last.
    let levels = v["levels"][1].as_array().expect("levels");
    assert!(levels.len() >= 2, "{out}");
    for w in levels.windows(2) {
        assert!(w[0]["ns"].as_f64() < w[1]["ns"].as_f64(), "{levels:?}");
    }
    for l in levels {
        let c = l["cache"].as_str().unwrap();
        assert!(
            ["L1 ", "L2 ", "L3 ", "L4 ", "DRAM"]
                .iter()
                .any(|k| c.starts_with(k)),
            "{l}"
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
    // Both log axes are labelled at 1, 2 and 5 times each power of ten, not only at the powers.
    let svg = std::fs::read_to_string(&s).unwrap();
    let labels: Vec<&str> = svg
        .split("<text ")
        .skip(1)
        .filter_map(|t| Some(t.split('>').nth(1)?.split("</text").next()?.trim()))
        .filter(|t| !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || "kMG.".contains(c)))
        .collect();
    for lead in ['1', '2', '5'] {
        assert!(
            labels.iter().filter(|l| l.starts_with(lead)).count() >= 2,
            "no axis labels starting with {lead}: {labels:?}"
        );
    }
    let html = std::fs::read_to_string(&h).unwrap();
    assert!(html.contains("<svg") && html.contains("Detected levels"));
}

#[test]
fn latency_unopenable_counter_shows_na_with_reason() {
    // Whatever this machine's PMU does, a counter the kernel refuses must show as n/a with the
    // reason, and the run (and the other counters) go on.
    let dir = test_dir();
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
    // The probe either accepted a hardware event with a plausible count per probe load, or
    // rejected it with a reason, and then the event is n/a on every point: never a silent zero.
    let probe = v["results"]["counter_probe"].as_array().unwrap();
    let points = v["results"]["points"].as_array().unwrap();
    for e in probe {
        let (name, said) = (e[0].as_str().unwrap(), e[1].as_str().unwrap());
        if let Some(rest) = said.strip_prefix("ok (") {
            let per: f64 = rest.split(' ').next().unwrap().parse().unwrap();
            assert!(per > 0.0 && per < 1e4, "{e}");
        } else {
            assert!(said.len() > 8 && !said.starts_with("ok"), "{e}");
            for p in points {
                let c = p["counters"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["name"] == name)
                    .unwrap();
                assert!(
                    c["per_element"].is_null() && c["unavailable"].is_string(),
                    "{c}"
                );
            }
        }
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
    let dir = test_dir();
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
            // From a few hundredths of a GB/s (a loaded VM: a thread on a CPU 5% of the time) to a
            // few hundred (arrays in a big cache); a unit slip of 1000 lands outside.
            let best = r["best_gbps"].as_f64().unwrap();
            assert!(best > 0.02 && best < 2000.0, "{k}/{t}: {best} GB/s");
            let (lo, med) = (
                r["gbps"]["min"].as_f64().unwrap(),
                r["gbps"]["median"].as_f64().unwrap(),
            );
            assert!(lo <= med && med <= best, "{k}/{t}: {r}");
            let on_cpu = r["on_cpu"].as_f64().unwrap();
            assert!(on_cpu > 0.0 && on_cpu <= 1.0, "{k}/{t}: {r}");
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
        let pm: Vec<&Value> = ind
            .iter()
            .filter(|i| i["case"].as_str().unwrap().contains("libpmemobj"))
            .collect();
        assert_eq!(
            pm.len(),
            4,
            "inline and exported call × 2 thread counts: {out}"
        );
        // The study's code path: D_RO/D_RW, pmemobj_direct_inline per access. Three translations
        // per element cost several times the hoisted loop's time (3-4x here), with the arrays in
        // the cache no less; a ratio far above the published 2x comes with its explanation.
        let flat = out.replace("\n  ", " ");
        for i in pm
            .iter()
            .filter(|i| i["case"].as_str().unwrap().contains("D_RO/D_RW"))
        {
            // How much faster the hoisted loop is (3-4x per CPU-second here) is the benchmark's
            // figure (`memlens bench bandwidth`, docs/seed-benchmarks.md); what is checked is that
            // both loops were measured, on a CPU, and the explanation that goes with a ratio
            // above the published 2x.
            let ratio = i["ratio"].as_f64().unwrap();
            for k in ["hoisted", "per_element"] {
                let gbps = i[format!("{k}_median_gbps")].as_f64().unwrap();
                let on_cpu = i[format!("{k}_on_cpu")].as_f64().unwrap();
                assert!(gbps > 0.0 && on_cpu > 0.0 && on_cpu <= 1.0, "{k}: {i}");
            }
            let cached = i["per_element_in_cache_gbps"]
                .as_f64()
                .expect("in-cache run");
            assert!(cached > 0.01 && cached < 2000.0, "{i}");
            if ratio > 2.5 {
                assert!(
                    flat.contains(&format!(
                        "and not ~2× here ({} thread(s)): the per-element loop is CPU-bound",
                        i["threads"]
                    )),
                    "{out}"
                );
            }
        }
        for t in [1, 2] {
            let r = rows
                .iter()
                .find(|r| r["kernel"] == "PmemInline" && r["threads"] == t)
                .unwrap_or_else(|| panic!("no inline pmemobj row for {t} thread(s): {out}"));
            // the same bounds as every bandwidth here: above what a starved VM thread moves,
            // below any memory system's peak
            let best = r["best_gbps"].as_f64().unwrap();
            assert!(best > 0.01 && best < 2000.0, "{r}");
        }
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
    // One CSV line per kernel and thread count.
    assert_eq!(
        std::fs::read_to_string(&c).unwrap().lines().count(),
        1 + rows.len(),
        "{out}"
    );
    assert!(std::fs::read_to_string(&s).unwrap().contains("<svg"));
}

#[test]
fn latency_hugepages_and_loaded_threads_run() {
    let dir = test_dir();
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
    // a dependent random load over 4 MiB: between an L1 hit and a DRAM miss on a loaded VM (the
    // bounds of the latency test above)
    let m = ns(&v, "random", 64, 4 << 20);
    assert!(m > 0.2 && m < 2000.0, "{m} ns");
}

#[test]
fn latency_normalises_where_the_study_stopped() {
    // With working sets past 2^28, the counter and representativeness tables are still taken at
    // 256M, where the published study stopped: normalising at 1G doubles random/8 B's figure.
    let dir = test_dir();
    let j = dir.path().join("l.json");
    let o = memlens()
        .args(["bench", "latency", "--orders", "seq", "--sizes", "8,64"])
        .args(["--min-ws", "128M", "--max-ws", "512M", "--repeats", "1"])
        .args(["--min-time", "1ms", "--counters", "software"])
        .args(["--json", j.to_str().unwrap()])
        .ok();
    let v = json(&j);
    assert_eq!(v["reference_working_set"], 256u64 << 20);
    let repr = v["representativeness"].as_array().unwrap();
    let time = |e: u64| {
        repr.iter().find(|r| r["element_bytes"] == e).unwrap()["measured"][0]
            .as_f64()
            .unwrap()
    };
    assert_eq!(time(8), 1.0);
    let want = ns(&v, "seq", 64, 256 << 20) / ns(&v, "seq", 8, 256 << 20);
    assert!(
        (time(64) - want).abs() < 1e-9 * want,
        "{} vs {want}",
        time(64)
    );
    let out = stdout(&o).replace("\n  ", " ");
    assert!(out.contains("Representativeness at 256M"), "{out}");
}
