//! `memlens run --exact` keeps the live heap (every block is served from memlens's range, so its
//! free is seen): a program holding 32 MiB shows it in use, to the byte of its own count, through
//! `memlens ctl PID dump`, the served /debug/pprof/heap and /metrics, and the profile at exit, whose
//! heap maximum and peak set are exact too.
use crate::serve::Server;
use crate::util::*;
use std::path::Path;

/// The profile's in-use bytes, checked against what the program holds: exact mode records every
/// block, so nothing but the few the C library keeps itself (none here before `done`) may differ.
fn holds(what: &str, prof: &Path, held: f64) {
    let j = report_json(prof, &[]);
    let inuse = j["totals"]["inuse_space"].as_f64().unwrap();
    let objs = j["totals"]["inuse_objects"].as_f64().unwrap();
    assert!(
        inuse >= held && inuse - held <= 64.0 * 1024.0,
        "{what}: inuse_space {inuse} ({objs} objects) vs the program's held {held}"
    );
    assert_eq!(
        j["meta"]["interval"].as_u64(),
        Some(0),
        "{what}: exact mode"
    );
}

#[test]
fn exact_mode_serves_and_dumps_the_live_heap() {
    let dir = test_dir();
    let ctl = ctl_dir(&dir);
    let exe = compile(
        &root().join("runtime/tests/usdt_target.c"),
        &dir,
        "exact_hold",
        &[],
    );
    let mut cmd = memlens();
    cmd.args(["run", "--exact", "--serve", "127.0.0.1:0", "-o"])
        .arg(dir.join("exit.pb.gz"))
        .arg("--")
        .arg(&exe)
        .arg(dir.path())
        .arg("256") // allocates 256 MiB, keeps an eighth: 32 MiB
        .env("MEMLENS_CTL_DIR", &ctl);
    let mut server = Server::spawn(&mut cmd);
    wait_for("the program's pid", 60, || dir.join("pid").exists());
    let pid = std::fs::read_to_string(dir.join("pid")).unwrap();
    let pid = pid.trim();
    std::fs::write(dir.join("go"), "").unwrap();
    wait_for("the program's allocations", 300, || {
        dir.join("done").exists()
    });
    let done = std::fs::read_to_string(dir.join("done")).unwrap();
    let held: f64 = done.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(held > 30.0 * 1024.0 * 1024.0, "{done}");

    let dumped = dir.join("dump.pb.gz");
    memlens()
        .args(["ctl", pid, "dump", "-o", dumped.to_str().unwrap()])
        .env("MEMLENS_CTL_DIR", &ctl)
        .ok_stdout();
    holds("memlens ctl dump", &dumped, held);

    let (st, body) = server.get("/debug/pprof/heap");
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    let served = dir.join("served.pb.gz");
    std::fs::write(&served, body).unwrap();
    holds("served /debug/pprof/heap", &served, held);

    let (st, body) = server.get("/metrics");
    assert_eq!(st, 200);
    let text = String::from_utf8_lossy(&body);
    let metric = text
        .lines()
        .find(|l| {
            l.starts_with("memlens_heap_inuse_bytes{") && l.contains(&format!("pid=\"{pid}\""))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no memlens_heap_inuse_bytes of pid {pid}:\n{text}"));
    assert!(
        metric >= held && metric - held <= 64.0 * 1024.0,
        "/metrics: memlens_heap_inuse_bytes {metric} vs held {held}"
    );

    std::fs::write(dir.join("stop"), "").unwrap();
    let status = server.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", server.stderr());
    holds("the profile at exit", &dir.join("exit.pb.gz"), held);
    // The views are exact too: the heap's maximum is what the program held at its end plus at most
    // its one block in flight (32 KiB), and the peak set is snapshotted within 1/32 of it
    // (record/peak.c).
    let exit = dir.join("exit.pb.gz");
    let tl = report_json(&exit, &["--view", "timeline"]);
    let max = tl["heap_max_bytes"].as_f64().unwrap();
    assert!(
        max >= held && max - held <= 64.0 * 1024.0,
        "heap_max_bytes {max} vs held {held}"
    );
    let peak = report_json(&exit, &["--view", "peak"]);
    let at_peak: f64 = peak["stacks"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["peak_space"].as_f64())
        .sum();
    assert!(
        at_peak >= held * (1.0 - 1.0 / 32.0) && at_peak <= max,
        "peak set {at_peak} vs held {held}, maximum {max}"
    );
}
