//! The OpenTelemetry memory design's USDT probes (`otel_memory:alloc(ptr, size, weight)` and
//! `otel_memory:free(ptr)`, runtime/src/record/usdt.c) counted by a real tracer, bpftrace, on a
//! program under `memlens run` and on one `memlens attach`ed (whose runtime is a memfd, reached
//! through /proc/PID/map_files as an eBPF profiler reaches it): as many allocs as the profile has
//! samples, their weights summing to its alloc_space and to the program's own count within the
//! sampling error, every free one of a block an alloc announced, and the weight still announced
//! what the profile holds in use. Needs root and bpftrace (scripts/install-deps.sh), else one
//! SKIPPED line.
use crate::util::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// Whether bpftrace can trace here (root, the tool, a kernel that loads its programs); else one
/// SKIPPED line.
fn bpftrace_or_skip(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("SKIPPED: {what}: bpftrace needs root");
        return false;
    }
    let ok = Command::new("bpftrace")
        .args(["-e", "BEGIN { exit(); }"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!(
            "SKIPPED: {what}: bpftrace is missing or cannot load a program on this kernel \
             (scripts/install-deps.sh installs it)"
        );
    }
    ok
}

/// Counts every probe of the process named COMM in the runtime at LIB: allocs, their weights, the
/// allocs without a block (`untracked`), frees, and of those the frees of a block an alloc
/// announced and its weight. (`@live` is the in-kernel table an eBPF profiler keeps for in-use.)
const SCRIPT: &str = r#"
usdt:LIB:otel_memory:alloc /comm == "COMM"/ {
    @allocs = count(); @weight = sum(arg2); @untracked = sum(arg0 == 0 ? 1 : 0); @live[arg0] = arg2;
}
usdt:LIB:otel_memory:free /comm == "COMM"/ {
    @frees = count(); @known = sum(@live[arg0] != 0 ? 1 : 0); @freed_weight = sum(@live[arg0]);
    delete(@live[arg0]);
}
BEGIN { printf("ready\n"); }
END { clear(@live); }
"#;

/// bpftrace running SCRIPT, its probes attached.
struct Tracer {
    child: Child,
    out: PathBuf,
    err: PathBuf,
}

fn trace(dir: &Path, lib: &Path, comm: &str) -> Tracer {
    let script = SCRIPT
        .replace("LIB", lib.to_str().unwrap())
        .replace("COMM", comm);
    let (out, err) = (dir.join("bpftrace.out"), dir.join("bpftrace.err"));
    let child = Command::new("bpftrace")
        .arg("-e")
        .arg(&script)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("cannot start bpftrace");
    let mut t = Tracer { child, out, err };
    // BEGIN runs once every probe is attached; compiling the script takes seconds on a busy machine.
    wait_for("bpftrace to attach its probes", 120, || {
        if let Ok(Some(st)) = t.child.try_wait() {
            panic!("bpftrace ended ({st}): {}", t.stderr());
        }
        std::fs::read_to_string(&t.out).is_ok_and(|s| s.contains("ready"))
    });
    t
}

impl Tracer {
    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.err).unwrap_or_default()
    }

    /// Stop it (SIGINT: its END runs and it prints its maps): `@name` → value (0 when never set).
    fn finish(mut self) -> HashMap<String, u64> {
        // bpftrace sometimes takes a SIGINT and goes on waiting (seen once beside three builds: still
        // running an hour later; a second SIGINT ended it at once), and ending can take a minute at
        // load 9: the signal is sent again every 5 s.
        let pid = self.child.id() as i32;
        let mut last: Option<std::time::Instant> = None;
        wait_for("bpftrace to end", 240, || {
            if last.is_none_or(|t| t.elapsed() >= std::time::Duration::from_secs(5)) {
                // SAFETY: a signal to our own child, not yet reaped.
                unsafe { libc::kill(pid, libc::SIGINT) };
                last = Some(std::time::Instant::now());
            }
            self.child.try_wait().is_ok_and(|s| s.is_some())
        });
        let text = std::fs::read_to_string(&self.out).unwrap();
        let mut m: HashMap<String, u64> = HashMap::new();
        for l in text.lines() {
            if let Some((k, v)) = l.split_once(": ") {
                if let (true, Ok(v)) = (k.starts_with('@'), v.trim().parse()) {
                    m.insert(k[1..].to_string(), v);
                }
            }
        }
        for k in [
            "allocs",
            "weight",
            "untracked",
            "frees",
            "known",
            "freed_weight",
        ] {
            m.entry(k.into()).or_insert(0);
        }
        eprintln!("bpftrace: {m:?}");
        m
    }
}

/// What the program says it allocated and holds (DIR/done: `allocated N held N`).
fn truth(dir: &Path) -> (f64, f64) {
    let s = std::fs::read_to_string(dir.join("done")).unwrap();
    let f: Vec<f64> = s
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (f[0], f[1])
}

/// Trace process `pid` (named `comm`) through its runtime, the mapping whose path contains
/// `mapped`, reached as an eBPF profiler reaches it: /proc/PID/map_files/RANGE (the file under
/// `memlens run`, a memfd under attach). Also: the samples the runtime had taken before the
/// tracer was in place (`memlens ctl PID status`; the program allocates nothing meanwhile).
fn trace_pid(dir: &Path, ctl: &Path, pid: &str, comm: &str, mapped: &str) -> (Tracer, u64) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    let range = maps
        .lines()
        .find(|l| l.contains(mapped))
        .and_then(|l| l.split_whitespace().next())
        .unwrap_or_else(|| panic!("no {mapped} mapped:\n{maps}"));
    let lib = PathBuf::from(format!("/proc/{pid}/map_files/{range}"));
    let t = trace(dir, &lib, comm);
    let status = memlens()
        .args(["ctl", pid, "status"])
        .env("MEMLENS_CTL_DIR", ctl)
        .ok_stdout();
    (t, status_samples(&status))
}

/// The probes against the profile `prof` of the same process and its own count; `before`: the
/// samples the profile has from before the tracer attached.
fn agree(c: &HashMap<String, u64>, prof: &Path, dir: &Path, before: u64) {
    let j = report_json(prof, &[]);
    let (allocated, held) = truth(dir);
    let samples = j["meta"]["samples"].as_u64().unwrap();
    let alloc_space = j["totals"]["alloc_space"].as_f64().unwrap();
    let inuse_space = j["totals"]["inuse_space"].as_f64().unwrap();
    let (n, w) = (c["allocs"], c["weight"] as f64);
    let ctx = format!("{c:?}, profile: samples {samples} alloc_space {alloc_space} inuse_space {inuse_space}, program: allocated {allocated} held {held}");
    assert!(n > 1000, "too few samples to judge: {ctx}");
    assert_eq!(
        n + before,
        samples,
        "one alloc per sample ({before} before the tracer): {ctx}"
    );
    assert_eq!(c["untracked"], 0, "{ctx}");
    // The same unbiased bytes the profile adds (each weight is the runtime's own rounding of it),
    // but for the samples taken before the tracer: each weighs about R = 64K (1/p ≈ 1 for blocks
    // of R and more; the program allocates nothing bigger than 32K before DIR/go).
    let slack = |x: f64| x * 1e-3 + before as f64 * 2.0 * 65536.0;
    assert!(
        (w - alloc_space).abs() <= slack(alloc_space),
        "weights vs alloc_space: {ctx}"
    );
    // A Poisson count of n samples: relative error 1/√n; 4σ, and 1% for the program's
    // allocations memlens sees that it does not count (its stdio).
    let tol = |k: f64| 4.0 / k.sqrt() + 0.01;
    assert!(
        (w / allocated - 1.0).abs() < tol(n as f64),
        "weights vs the program's count: {ctx}"
    );
    // It frees 7 blocks in 8 of every size alike: about 7/8 of the samples.
    assert_eq!(
        c["known"], c["frees"],
        "a free of a block never announced: {ctx}"
    );
    let share = c["frees"] as f64 / n as f64;
    assert!(
        (share - 0.875).abs() < 0.05,
        "frees / allocs {share}: {ctx}"
    );
    let live = w - c["freed_weight"] as f64;
    assert!(
        (live - inuse_space).abs() <= slack(inuse_space),
        "announced and not freed vs inuse_space: {ctx}"
    );
    eprintln!("{ctx}; samples before the tracer: {before}");
    let kept = (n - c["frees"]) as f64;
    assert!(
        (live / held - 1.0).abs() < tol(kept),
        "announced and not freed vs the program's held bytes: {ctx}"
    );
}

#[test]
fn probes_under_run_agree_with_the_profile() {
    if !bpftrace_or_skip("usdt::probes_under_run_agree_with_the_profile") {
        return;
    }
    let dir = test_dir();
    let ctl = ctl_dir(&dir);
    let exe = compile(
        &root().join("runtime/tests/usdt_target.c"),
        &dir,
        "usdt_run",
        &[],
    );
    let prof = dir.join("run.pb.gz");
    let child = memlens()
        .args(["run", "--interval", "64K", "-o"])
        .arg(&prof)
        .arg("--")
        .arg(&exe)
        .arg(dir.path())
        .env("MEMLENS_CTL_DIR", &ctl)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the program's pid", 60, || dir.join("pid").exists());
    let pid = std::fs::read_to_string(dir.join("pid")).unwrap();
    let (t, before) = trace_pid(&dir, &ctl, pid.trim(), "usdt_run", "libmemlens.so");
    std::fs::write(dir.join("go"), "").unwrap();
    wait_for("the program's allocations", 120, || {
        dir.join("done").exists()
    });
    std::fs::write(dir.join("stop"), "").unwrap();
    let out = wait_deadline(child, 120, "memlens run");
    assert_ok(&"memlens run", &out);
    let c = t.finish();
    agree(&c, &prof, &dir, before);
}

#[test]
fn probes_of_an_attached_process_agree_with_its_dump() {
    if !bpftrace_or_skip("usdt::probes_of_an_attached_process_agree_with_its_dump") {
        return;
    }
    let dir = test_dir();
    let ctl = ctl_dir(&dir);
    let exe = compile(
        &root().join("runtime/tests/usdt_target.c"),
        &dir,
        "usdt_attach",
        &[],
    );
    let child = Command::new(&exe)
        .arg(dir.path())
        .env("MEMLENS_CTL_DIR", &ctl)
        .spawn()
        .unwrap();
    wait_for("the program's pid", 60, || dir.join("pid").exists());
    let pid = child.id().to_string();
    let ml = |args: &[&str]| {
        let mut c = memlens();
        c.args(args).env("MEMLENS_CTL_DIR", &ctl);
        c
    };
    let a = ml(&["attach", &pid, "--interval", "64K"]).ok_stdout();
    assert!(a.contains("attached"), "{a}");
    // The runtime is a memfd in there (`/memfd:memlens (deleted)`).
    let (t, before) = trace_pid(&dir, &ctl, &pid, "usdt_attach", "memfd:memlens");
    std::fs::write(dir.join("go"), "").unwrap();
    wait_for("the program's allocations", 120, || {
        dir.join("done").exists()
    });
    let prof = dir.join("attached.pb.gz");
    ml(&["ctl", &pid, "dump", "-o", prof.to_str().unwrap()]).ok_stdout();
    let c = t.finish();
    ml(&["detach", &pid]).ok_stdout();
    stop_via_file(child, &dir);
    agree(&c, &prof, &dir, before);
}
