//! End-to-end tests of `memlens study` and the built-in workloads (small sizes: the whole file runs
//! in well under a minute). They check behaviour — the JSON contract of both schedules, the switch
//! reaching every thread, clear errors — never speed. The pairing statistics, the row builder and
//! the recommendation are tested on synthetic data in the crate (stats.rs, rows.rs, recommend.rs).
use crate::util::*;
use serde_json::Value;

fn json(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("no JSON written"))
        .expect("invalid JSON")
}

/// The rows of one workload, of either schedule.
fn rows<'a>(v: &'a Value, workload: &str) -> Vec<&'a Value> {
    let r: Vec<&Value> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["workload"] == workload)
        .collect();
    assert!(!r.is_empty(), "no rows of {workload} in {v}");
    r
}

fn configs<'a>(rows: &[&'a Value]) -> Vec<&'a str> {
    rows.iter().map(|r| r["config"].as_str().unwrap()).collect()
}

/// The contract's fields every row carries (docs/study.md).
const CONTRACT: [&str; 15] = [
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
    "total_error_pct",
    "top_error_pct",
    "samples",
    "truncated_pct",
];

fn assert_has_fields(r: &Value, keys: &[&str]) {
    for k in keys {
        assert!(r.get(k).is_some(), "row lacks {k}: {r}");
    }
}

/// The contract of a row of either schedule: its fields, the median inside its CI, whether the
/// CI reached its target, an interval exactly where the configuration samples at one, and
/// `resolved` for every row but the calibrating placebo of its schedule.
fn assert_contract(r: &Value) {
    assert_has_fields(r, &CONTRACT);
    assert_has_fields(r, &["profiler", "rounds", "processes", "resolved"]);
    let (lo, x, hi) = (
        r["ci_low_pct"].as_f64().unwrap(),
        r["overhead_pct"].as_f64().unwrap(),
        r["ci_high_pct"].as_f64().unwrap(),
    );
    assert!(lo <= x && x <= hi, "{r}");
    let target = r["ci_target_pct"].as_f64().unwrap();
    assert_eq!(r["ci_met"], (hi - lo) / 2.0 <= target, "{r}");
    let config = r["config"].as_str().unwrap();
    let sampled = config.ends_with('K') || config.ends_with('M');
    assert_eq!(r["interval_bytes"].is_number(), sampled, "{r}");
    assert_eq!(r["resolved"].is_null(), config == "placebo", "{r}");
    if r["resolved"] == true {
        // resolved: the whole interval lies beyond the placebo's band, so it excludes 0
        assert!(lo > 0.0 || hi < 0.0, "{r}");
    }
    if r["paired"] == false {
        // whole processes: every round is processes of its own
        assert_eq!(r["processes"], r["rounds"], "{r}");
    }
}

/// `--schedule processes`: the cost of loading the runtime inactive against not loading it, one
/// whole process per block, with the placebo (a run as off is) in every part.
#[test]
fn whole_processes_measure_loading_the_runtime() {
    let dir = test_dir();
    let j = dir.path().join("s.json");
    memlens()
        .args([
            "study",
            "--schedule",
            "processes",
            "--workload",
            "synthetic",
        ])
        .args(["--threads", "1,2", "--ops", "20000", "--rounds", "2"])
        .args(["--unwinders", "none", "--baselines", "none", "--no-exact"])
        .args(["--max-time", "0", "--json", j.to_str().unwrap()])
        .ok();
    let v = json(&j);
    for w in ["synthetic-1t", "synthetic-2t"] {
        let r = rows(&v, w);
        assert_eq!(configs(&r), ["placebo", "memlens inactive"]);
        for r in r {
            assert_contract(r);
            assert_eq!(r["paired"], false, "{r}");
            assert_eq!(r["rounds"], 2, "{r}");
        }
    }
}

/// tcmalloc's sampler and heaptrack cannot switch at run time: they run as whole processes, beside
/// memlens switched in blocks, in one study, one JSON — each judged against its own placebo.
#[test]
fn what_cannot_switch_runs_as_whole_processes_beside_the_blocks() {
    for lib in ["libtcmalloc.so.4", "libjemalloc.so.2"] {
        let p = std::path::Path::new("/usr/lib/x86_64-linux-gnu").join(lib);
        assert!(
            p.exists(),
            "{p:?} missing: scripts/install-deps.sh installs it"
        );
    }
    let dir = test_dir();
    let j = dir.path().join("s.json");
    let o = memlens()
        .env("COLUMNS", "100")
        .args(["study", "--workload", "synthetic", "--threads", "1"])
        .args(["--ops", "20000", "--rounds", "4", "--intervals", "64K"])
        // one process of 30 ms blocks: on a loaded machine a 10 ms block may get no CPU at all
        // (its round is then not counted), and every schedule needs its placebo's rounds
        .args(["--processes", "1", "--block-ms", "30"])
        .args(["--unwinders", "fp", "--baselines", "tcmalloc,heaptrack"])
        .args(["--max-time", "0", "--json", j.to_str().unwrap()])
        .ok();
    let v = json(&j);
    let r = rows(&v, "synthetic-1t");
    let of = |c: &str, paired: bool| {
        *r.iter()
            .find(|x| x["config"] == c && x["paired"] == paired)
            .unwrap_or_else(|| panic!("no {c} (paired {paired}) in {r:?}"))
    };
    for x in &r {
        assert_contract(x);
    }
    let (fp, tc, ht) = (
        of("memlens fp 64K", true),
        of("tcmalloc sampler 64K", false),
        of("heaptrack", false),
    );
    of("placebo", true);
    of("placebo", false);
    assert_eq!(
        (fp["unwinder"].as_str(), fp["interval_bytes"].as_u64()),
        (Some("fp"), Some(65536))
    );
    assert!(
        tc["unwinder"].is_null() && tc["interval_bytes"] == 65536,
        "{tc}"
    );
    assert!(ht["interval_bytes"].is_null(), "{ht}");
    // the exact window scores the sampled one: at 64K it finds the stacks of at least the
    // published 90% of the bytes (measured: 100%) and estimates the total within 25% (measured:
    // 3%); the recommendation rests on it
    let cov = fp["coverage_pct"].as_f64().unwrap();
    assert!((90.0..=100.0).contains(&cov), "{fp}");
    assert!(fp["total_error_pct"].as_f64().unwrap().abs() < 25.0, "{fp}");
    let rec = &v["recommendations"][0];
    assert_eq!(
        (rec["workload"].as_str(), rec["unwinder"].as_str()),
        (Some("synthetic-1t"), Some("fp")),
        "{rec}"
    );
    assert_eq!(rec["recommendation"]["pick"]["interval"], 65536, "{rec}");
    let out = stdout(&o);
    assert!(
        out.contains("placebo on synthetic-1t, whole processes"),
        "{out}"
    );
    assert!(
        out.contains("memlens fp vs tcmalloc sampler at 64K"),
        "{out}"
    );
    for l in out.lines() {
        assert!(l.chars().count() <= 100, "wider than COLUMNS=100: {l}");
    }
}

/// The contract of the blocks schedule: `paired: true`, the processes of every configuration.
fn assert_paired_contract(r: &Value) {
    assert_contract(r);
    assert_eq!(r["paired"], true, "{r}");
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
    // the answer first: the recommendation, then the chart
    let out = stdout(&o);
    assert!(out.starts_with("ANSWER"), "{out}");
    let answer = &out[..out.find("VERDICT").expect("no verdict")];
    assert!(
        answer.contains("recommended on pipeline-l2, memlens fp"),
        "{answer}"
    );
    assert!(
        answer.contains("placebo's interval") && answer.contains("64K"),
        "{answer}"
    );
    // fitted to the terminal: wide tables are split by topic, notes wrapped
    for l in out.lines() {
        assert!(l.chars().count() <= 100, "wider than COLUMNS=100: {l}");
    }
    let v = json(&j);
    let rows = v["rows"].as_array().unwrap();
    let je = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
    assert!(
        std::path::Path::new(je).exists(),
        "{je} missing: scripts/install-deps.sh installs libjemalloc2"
    );
    // 2 workloads x (2 intervals x (memlens fp + jemalloc) + the placebo), all in blocks
    assert_eq!(rows.len(), 10, "{rows:?}");
    for r in rows {
        assert_paired_contract(r);
        // every configuration in two processes at least; the placebo in every process
        let procs = r["processes"].as_u64().unwrap();
        let placebo = r["profiler"] == "placebo";
        assert!(procs >= if placebo { 4 } else { 2 }, "{r}");
        let memlens = r["profiler"] == "memlens";
        assert_eq!(r["unwinder"].is_null(), !memlens, "{r}");
        let pipeline = r["workload"] == "pipeline-l2";
        // direct/indirect: only where ticks are tagged by the runtime's per-thread sample count
        // (or where the runtime accounts its own cost)
        if !memlens {
            assert!(r["direct_cost_pct"].is_null(), "{r}");
        }
        if pipeline && memlens {
            assert!(r["direct_cost_pct"].is_number(), "{r}");
            assert!(r["indirect_cost_pct"].is_number(), "{r}");
        }
        // quality: the pipeline's profile window, memlens only (judged below)
        if !(pipeline && memlens) {
            assert!(r["coverage_pct"].is_null(), "{r}");
        }
    }
    // The quality figures measure: at 64K the sampled profile finds the stacks of at least the
    // published 90% of the bytes (measured: 99.5-100%, ~340 samples) and estimates the total within
    // 25% (measured: within 5%; 25% is over four standard errors); 2M samples 32 times less often,
    // so it has fewer samples and cannot find more of the bytes (measured: 40-80%, ~12 samples).
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
    assert!(out.contains("64K vs 2M (fp)"), "{out}");
    assert!(out.contains("placebo on synthetic-2t"), "{out}");
    assert!(out.contains("CI target"), "{out}");
    // the page opens with the answer and its chart, then the verdict, then the tables
    let page = std::fs::read_to_string(&h).unwrap();
    let answer = page.find("Answer").unwrap();
    let chart = page.find("<svg").expect("no chart on the page");
    let verdict = page.find("Verdict").unwrap();
    assert!(answer < chart && chart < verdict, "answer and chart first");
    assert!(
        verdict < page.find("Cost:").unwrap(),
        "verdict before the tables"
    );
    assert!(page.contains("coverage %") && page.contains("placebo (A/A)"));
    // the overhead axis is labelled outside the plot, at its ticks
    let svg = &page[chart..page.find("</svg>").unwrap()];
    assert!(
        svg.contains("+10%") || svg.contains("+100%"),
        "no tick label: {svg}"
    );
    let rec = &v["recommendations"];
    assert!(
        rec.as_array()
            .unwrap()
            .iter()
            .any(|a| a["workload"] == "pipeline-l2"
                && a["recommendation"]["pick"]["interval"].is_number()),
        "{rec}"
    );
    assert_eq!(
        std::fs::read_to_string(&c).unwrap().lines().count(),
        rows.len() + 1
    );
}

/// `redis-benchmark … -q` against PORT: a load of ~0.02 s, for the tests' short service studies.
fn redis_load(port: &str) -> String {
    format!("redis-benchmark -h 127.0.0.1 -p {port} -n 2000 -c 4 -P 16 -t set,get -r 1000 -d 64 -q")
}

/// Run a service study (`cmd`), which must succeed within `secs`. Its own limits end a load that
/// hangs (the probe run after 120 s); this is the backstop, so that whatever hangs fails the test
/// with the state of every process under the study (`ps`: state, CPU time, kernel wait) and of
/// the connections to `port` (`ss`), instead of holding CI until its own timeout.
fn study_within(cmd: &mut std::process::Command, secs: u64, port: &str) -> std::process::Output {
    use std::process::Stdio;
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(child.wait_with_output()));
    let o = match rx.recv_timeout(std::time::Duration::from_secs(secs)) {
        Ok(o) => o.expect("cannot read memlens study's output"),
        Err(_) => {
            let ps = std::process::Command::new("ps")
                .args(["-eo", "pid,ppid,stat,time,wchan:24,args"])
                .output()
                .map(|o| stdout(&o))
                .unwrap_or_default();
            let tree = descendants(&ps, pid);
            let ss = std::process::Command::new("ss")
                .args(["-tnpi", &format!("( sport = :{port} or dport = :{port} )")])
                .output()
                .map(|o| stdout(&o))
                .unwrap_or_default();
            for line in tree.iter().rev() {
                let p = line.split_whitespace().next().unwrap_or("0");
                std::process::Command::new("kill")
                    .args(["-9", p])
                    .status()
                    .ok();
            }
            let o = rx.recv_timeout(std::time::Duration::from_secs(10));
            let printed = o.ok().and_then(|o| o.ok()).map(|o| printed(&o));
            panic!(
                "memlens study hung for {secs} s: {cmd:?}\n--- its processes ---\n{}\n\
                 --- connections to :{port} ---\n{ss}{}",
                tree.join("\n"),
                printed.unwrap_or_default()
            );
        }
    };
    assert_ok(cmd, &o);
    o
}

/// The lines of `ps -eo pid,ppid,…` for `root` and every process below it.
fn descendants(ps: &str, root: u32) -> Vec<String> {
    let mut pids = vec![root.to_string()];
    let mut out = Vec::new();
    let mut grew = true;
    while grew {
        grew = false;
        for l in ps.lines() {
            let f: Vec<&str> = l.split_whitespace().collect();
            if f.len() > 1 && pids.iter().any(|p| p == f[1]) && !pids.iter().any(|p| p == f[0]) {
                pids.push(f[0].to_string());
                grew = true;
            }
        }
    }
    for l in ps.lines() {
        if l.split_whitespace()
            .next()
            .is_some_and(|p| pids.iter().any(|q| q == p))
        {
            out.push(l.to_string());
        }
    }
    out
}

/// A redis-server a test started (directly or under `memlens run`): shut down and reaped when the
/// test ends, also when it fails.
struct Redis {
    child: std::process::Child,
    port: String,
}

impl Redis {
    fn start(mut cmd: std::process::Command, port: &str) -> Redis {
        let child = cmd
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (scripts/install-deps.sh installs it)");
        Redis {
            child,
            port: port.to_string(),
        }
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        std::process::Command::new("redis-cli")
            .args(["-p", &self.port, "shutdown", "nosave"])
            .output()
            .ok();
        let t0 = std::time::Instant::now();
        while self.running() && t0.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn redis_args(port: &str) -> Vec<String> {
    [
        "redis-server",
        "--port",
        port,
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The service study's JSON: every row paired with its CI, a placebo row, memlens rows with
/// coverage from the process's own profile windows. With `jemalloc`, jemalloc's rows too, and the
/// runtime's own account of its cost beside memlens's rows.
fn assert_service_rows(v: &Value, workload: &str, processes: u64, jemalloc: bool) {
    let rows: Vec<&Value> = v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["workload"] == workload)
        .collect();
    assert!(!rows.is_empty(), "no rows of {workload}: {v}");
    for r in &rows {
        assert_paired_contract(r);
        assert!(r["processes"].as_u64().unwrap() >= processes, "{r}");
    }
    assert!(rows.iter().any(|r| r["config"] == "placebo"), "{rows:?}");
    let memlens: Vec<&&Value> = rows.iter().filter(|r| r["profiler"] == "memlens").collect();
    assert_eq!(memlens.len(), 2, "{rows:?}");
    for r in &memlens {
        // coverage: the exact window of the same load against each interval's; at 64K the
        // window's ~1 MB of allocations give ~15 samples (2M: often none)
        let cov = r["coverage_pct"].as_f64().unwrap();
        assert!((0.0..=100.0).contains(&cov), "{r}");
        if r["interval_bytes"] == 64 << 10 {
            assert!(cov > 0.0 && r["samples"].as_u64().unwrap() > 0, "{r}");
        }
    }
    let je = rows.iter().filter(|r| r["profiler"] == "jemalloc").count();
    if jemalloc {
        assert_eq!(je, 2, "jemalloc's profiler switched in redis: {rows:?}");
        for r in &memlens {
            // the runtime's own account of its sampled path, beside the paired total
            let own = &r["own_cost_pct"];
            assert!(own["pct"].as_f64().is_some_and(|x| x >= 0.0), "{r}");
            assert_eq!(r["direct_cost_pct"], own["pct"], "{r}");
        }
    }
}

/// `memlens study --load 'redis-benchmark …' -- redis-server …`: memlens starts the server with the
/// runtime and jemalloc's profiler loaded inactive, in two processes, and switches both through
/// its control socket between runs of the load.
#[test]
fn service_study_of_redis_under_redis_benchmark() {
    let dir = test_dir();
    let j = dir.join("s.json");
    let port = free_port().to_string();
    let mut study = memlens();
    study
        .env("MEMLENS_CTL_DIR", ctl_dir(&dir))
        .env("COLUMNS", "100")
        .args(["study", "--load", &redis_load(&port)])
        .args(["--intervals", "64K,2M", "--rounds", "4", "--max-time", "0"])
        .args(["--window-loads", "1", "--json", j.to_str().unwrap(), "--"])
        .args(redis_args(&port));
    let o = study_within(&mut study, 300, &port);
    let out = stdout(&o);
    assert!(
        out.starts_with("ANSWER") && out.contains("recommended on redis-server"),
        "{out}"
    );
    assert!(out.contains("direct vs total on redis-server"), "{out}");
    let v = json(&j);
    assert_service_rows(&v, "redis-server", 2, true);
    // both servers ended with the study
    let left = std::process::Command::new("pgrep")
        .args(["-f", &format!("redis-server.*{port}")])
        .output()
        .unwrap();
    assert!(
        stdout(&left).trim().is_empty(),
        "a server was left: {}",
        stdout(&left)
    );
}

/// `--pid`: a redis started with `memlens run --inactive`, and one started without memlens
/// (attached for the study, detached after); each is left running and not sampling.
#[test]
fn service_study_of_a_running_process_by_pid() {
    for under_memlens in [true, false] {
        let dir = test_dir();
        let ctl = ctl_dir(&dir);
        let port = free_port().to_string();
        let args = redis_args(&port);
        let mut cmd = if under_memlens {
            let mut c = memlens();
            c.args(["run", "--inactive", "-o"])
                .arg(dir.join("r.pb.gz"))
                .arg("--");
            c.args(&args);
            c
        } else {
            let mut c = std::process::Command::new(&args[0]);
            c.args(&args[1..]);
            c
        };
        cmd.env("MEMLENS_CTL_DIR", &ctl);
        let mut server = Redis::start(cmd, &port);
        wait_for("redis to answer", 15, || {
            std::process::Command::new("redis-cli")
                .args(["-p", &port, "ping"])
                .output()
                .is_ok_and(|o| stdout(&o).contains("PONG"))
        });
        let pid = if under_memlens {
            // memlens run's child: the server itself
            let mut p = String::new();
            wait_for("the server's pid", 10, || {
                let o = std::process::Command::new("pgrep")
                    .args(["-f", &format!("^redis-server.*{port}")])
                    .output()
                    .unwrap();
                p = stdout(&o).trim().to_string();
                !p.is_empty()
            });
            p
        } else {
            server.child.id().to_string()
        };
        let j = dir.join("s.json");
        let mut study = memlens();
        study
            .env("MEMLENS_CTL_DIR", &ctl)
            .args(["study", "--pid", &pid, "--load", &redis_load(&port)])
            .args(["--intervals", "64K,2M", "--rounds", "4", "--max-time", "0"])
            .args(["--window-loads", "1", "--json", j.to_str().unwrap()]);
        let o = study_within(&mut study, 300, &port);
        let out = stdout(&o);
        assert!(out.contains("one process per configuration"), "{out}");
        let v = json(&j);
        // redis-server runs jemalloc, but these were not started with prof:true: no jemalloc rows
        assert_service_rows(&v, "redis-server", 1, false);
        assert!(
            out.contains("jemalloc's profiler left out on redis-server"),
            "{out}"
        );
        let st = memlens()
            .env("MEMLENS_CTL_DIR", &ctl)
            .args(["ctl", &pid, "status"])
            .ok_stdout();
        assert!(st.contains("inactive"), "left sampling: {st}");
        assert!(server.running(), "the studied process ended");
    }
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
        &["study", "--schedule", "processes", "--rounds", "0"][..],
        &["study", "--load", "true"][..],
        &["study", "--pid", "1"][..],
        &["study", "--load", "true", "--pid", "1", "--", "x"][..],
        &["study", "--load", "true", "--metric", "no group", "--", "x"][..],
        &["study", "--placebos", "0"][..],
        &["study", "--processes", "0"][..],
        &["study", "--ci-target", "2,4,4,4"][..],
        &["study", "--ops", "0", "--baselines", "tcmalloc"][..],
    ] {
        memlens().args(args).error(2);
    }
}

/// A flag the chosen schedule does not read is a usage error naming it and saying why — never
/// silently ignored; what cannot be switched is refused where only blocks can run.
#[test]
fn flags_the_study_would_not_read_are_usage_errors() {
    for (args, flag) in [
        (&["study", "--ops", "5000"][..], "--ops"),
        (
            &["study", "--block-ms", "5", "--", "true"][..],
            "--block-ms",
        ),
        (
            &["study", "--processes", "2", "--", "true"][..],
            "--processes",
        ),
        (
            &["study", "--workload", "synthetic", "--", "true"][..],
            "--workload",
        ),
        (
            &["study", "--window-loads", "2", "--workload", "synthetic"][..],
            "--window-loads",
        ),
        (
            &["study", "--working-sets", "llc", "--workload", "synthetic"][..],
            "--working-sets",
        ),
        (
            &["study", "--threads", "4", "--workload", "pipeline"][..],
            "--threads",
        ),
        (
            &["study", "--metric", "wall", "--workload", "synthetic"][..],
            "--metric",
        ),
        (
            &["study", "--schedule", "blocks", "--baselines", "heaptrack"][..],
            "heaptrack",
        ),
        (
            &["study", "--schedule", "blocks", "--", "true"][..],
            "--schedule blocks",
        ),
        (
            &[
                "study",
                "--load",
                "true",
                "--baselines",
                "tcmalloc",
                "--",
                "x",
            ][..],
            "tcmalloc",
        ),
        (
            &[
                "study",
                "--load",
                "true",
                "--schedule",
                "processes",
                "--",
                "x",
            ][..],
            "--schedule processes",
        ),
        // gone with the second engine, each saying what replaced it
        (&["study", "--quotes", "10"][..], "--quotes"),
        (&["study", "--max-overhead", "5"][..], "--max-overhead"),
        (&["study", "--plots", "d"][..], "--plots"),
        (&["study", "--repeats", "3"][..], "--repeats"),
    ] {
        let e = stderr(&memlens().args(args).error(2));
        assert!(e.contains(flag), "{args:?}: {e}");
    }
}

#[test]
fn failing_command_is_reported_with_its_status_and_no_overhead() {
    let dir = test_dir();
    let j = dir.path().join("s.json");
    let o = memlens()
        .args([
            "study",
            "--rounds",
            "1",
            "--unwinders",
            "none",
            "--baselines",
            "none",
        ])
        .args(["--json", j.to_str().unwrap(), "--", "sh", "-c", "exit 3"])
        .error(1);
    let e = stderr(&o);
    assert!(
        e.contains("exit status: 3") && e.contains("no overhead"),
        "{e}"
    );
    assert!(!j.exists(), "results written from a failed command");
}

/// A command that runs to completion is studied as whole processes, its metric read from its
/// output; its profile windows (whole runs, exact and sampled) give the coverage.
#[test]
fn any_command_with_a_metric_regex() {
    let dir = test_dir();
    let j = dir.path().join("s.json");
    memlens()
        .args([
            "study",
            "--rounds",
            "2",
            "--intervals",
            "512K",
            "--unwinders",
            "fp",
        ])
        .args([
            "--baselines",
            "none",
            "--metric",
            "value=([0-9.]+)",
            "--max-time",
            "0",
        ])
        .args([
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
    assert_eq!(
        configs(&r),
        ["placebo", "memlens inactive", "memlens fp 512K"]
    );
    for x in &r {
        assert_contract(x);
        // every run printed the same figure
        assert_eq!(
            (x["paired"].as_bool(), x["overhead_pct"].as_f64()),
            (Some(false), Some(0.0)),
            "{x}"
        );
    }
    assert!(r[2]["coverage_pct"].is_number(), "{}", r[2]);
}

/// The runtime accounts its own cost: `memlens ctl PID status`, the profile's comments (as
/// `go tool pprof` prints them) and `memlens serve`'s /metrics say what the sampled path has cost
/// redis under redis-benchmark, with the process's CPU time beside it.
#[test]
fn the_runtime_accounts_its_own_cost() {
    let dir = test_dir();
    let ctl = ctl_dir(&dir);
    let port = free_port().to_string();
    let mut cmd = memlens();
    cmd.env("MEMLENS_CTL_DIR", &ctl)
        .args(["run", "--inactive", "-o"])
        .arg(dir.join("r.pb.gz"))
        .arg("--")
        .args(redis_args(&port));
    let _server = Redis::start(cmd, &port);
    let mut pid = String::new();
    wait_for("redis under memlens", 15, || {
        let o = std::process::Command::new("pgrep")
            .args(["-f", &format!("^redis-server.*{port}")])
            .output()
            .unwrap();
        pid = stdout(&o).trim().to_string();
        !pid.is_empty()
            && memlens()
                .env("MEMLENS_CTL_DIR", &ctl)
                .args(["ctl", &pid, "start", "--interval", "64K"])
                .out()
                .status
                .success()
    });
    let bench = std::process::Command::new("sh")
        .args(["-c", &redis_load(&port)])
        .ok();
    assert!(
        stdout(&bench).contains("requests per second"),
        "{}",
        stdout(&bench)
    );
    let st = memlens()
        .env("MEMLENS_CTL_DIR", &ctl)
        .args(["ctl", &pid, "status"])
        .ok_stdout();
    let line = st
        .lines()
        .find(|l| l.trim_start().starts_with("profiler cost"))
        .unwrap_or_else(|| panic!("no profiler cost in:\n{st}"));
    // "profiler cost  0.000431 s CPU in its sampled path, 1.16% of the process's 0.037 s"
    let num = |after: &str| -> f64 {
        let rest = &line[line.find(after).unwrap() + after.len()..];
        rest.trim_start()
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let (secs, share, cpu) = (num("cost"), num("path,"), num("process's"));
    assert!(
        secs > 0.0 && share > 0.0 && share < 50.0 && cpu > secs,
        "{line}"
    );
    assert!(st.contains("allocations while sampling"), "{st}");
    let prof = dir.join("d.pb.gz");
    memlens()
        .env("MEMLENS_CTL_DIR", &ctl)
        .args(["ctl", &pid, "dump", "-o"])
        .arg(&prof)
        .ok();
    let raw = std::process::Command::new("go")
        .args(["tool", "pprof", "-raw"])
        .arg(&prof)
        .env("PPROF_TMPDIR", dir.path())
        .ok_stdout();
    assert!(
        raw.lines()
            .any(|l| l.starts_with("Comment: memlens-cost: the profiler's sampled path took")),
        "{raw}"
    );
    // memlens serve: the counters beside the process's CPU time
    let sp = free_port().to_string();
    let mut serve = memlens()
        .env("MEMLENS_CTL_DIR", &ctl)
        .args([
            "serve",
            "--pid",
            &pid,
            "--listen",
            &format!("127.0.0.1:{sp}"),
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut metrics = String::new();
    wait_for("memlens serve's /metrics", 15, || {
        // Every request carries the server's token (its file in the control directory).
        let token = std::fs::read_to_string(ctl.join("serve.token")).unwrap_or_default();
        let o = std::process::Command::new("curl")
            .args([
                "-sf",
                "-H",
                &format!("Authorization: Bearer {}", token.trim()),
            ])
            .arg(format!("http://127.0.0.1:{sp}/metrics"))
            .output()
            .unwrap();
        metrics = stdout(&o);
        o.status.success()
    });
    serve.kill().ok();
    serve.wait().ok();
    for m in [
        "memlens_profiler_cpu_nanoseconds_total{",
        "memlens_process_cpu_nanoseconds_total{",
    ] {
        assert!(metrics.contains(m), "{m} missing:\n{metrics}");
    }
}
