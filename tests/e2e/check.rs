//! `memlens check`: limits on the heap of real programs (python3 building a dict, sqlite3 running a
//! script, git, redis-server under redis-benchmark), a leak regression against a baseline caught
//! and named, a run against its own baseline passing 20 times of 20, the exit statuses, known
//! stacks set aside, the JSON and JUnit outputs, and `memlens diff`'s differential flame graph.
//!
//! Margins. A verdict errs with at most 5 % when the figure is near its limit; these tests keep
//! every figure far from it, so that none can go either way on a loaded machine. A figure is first
//! measured (a check at a fine interval, its 95 % interval asserted to be within ±10 %); limits are
//! then set at twice and at half of it. The check samples at the interval its limits call for
//! (figures 5 % from the limit settled; 1 KiB at least), where a peak's lower bound is its estimate
//! less 4.06 standard errors of at most √(figure·R) — for the smallest figure judged here (4 MB at
//! 1 KiB) 6 %, for the others less: a figure at the limit's double or half is 10 to 50 standard
//! errors from it.
use crate::util::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `memlens check ARGS -- CMD`, run in `dir` (where a profile kept by default goes), the program's
/// stdout thrown away (the check writes to stderr).
fn check(dir: &Path, args: &[&str], cmd: &[&str]) -> Command {
    let mut c = memlens();
    c.current_dir(dir)
        .arg("check")
        .args(args)
        .arg("--")
        .args(cmd)
        .stdout(Stdio::null());
    c
}

/// The JSON a check wrote.
#[track_caller]
fn json(f: &Path) -> Value {
    let t = std::fs::read_to_string(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
    serde_json::from_str(&t).unwrap_or_else(|e| panic!("{}: {e}\n{t}", f.display()))
}

/// A program's peak and leak at exit (bytes), as a check at `interval` measures them (its largest
/// process's), each known within ±10 % at 95 % (the peak's upper end within +30 %).
#[derive(Debug, Clone, Copy)]
struct Measured {
    peak: f64,
    leak: f64,
}

#[track_caller]
fn measure(dir: &Path, interval: &str, cmd: &[&str]) -> Measured {
    let j = dir.join("measure.json");
    let js = j.to_str().unwrap();
    let args = [
        "--interval",
        interval,
        "--max-peak",
        "1T",
        "--max-leak",
        "1T",
        "--json",
        js,
    ];
    check(dir, &args, cmd).ok();
    let v = json(&j);
    let of = |opt: &str| {
        let l = v["limits"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["option"] == opt)
            .max_by(|a, b| {
                a["figure"]
                    .as_f64()
                    .unwrap()
                    .total_cmp(&b["figure"].as_f64().unwrap())
            })
            .unwrap_or_else(|| panic!("no {opt} in {v:#}"));
        let (f, lo, hi) = (
            l["figure"].as_f64().unwrap(),
            l["low"].as_f64().unwrap(),
            l["high"].as_f64().unwrap(),
        );
        // a peak's upper end is also what the run's highest estimate allows, which leans above
        // the split figure by up to a few of its standard errors (4 % each at 1K on git's 0.7 MB)
        let up = if opt == "--max-peak" { 1.3 } else { 1.1 };
        assert!(
            f > 0.0 && lo >= 0.9 * f && hi <= up * f,
            "{opt} not measured within -10%/+{:.0}%: {l:#}",
            (up - 1.0) * 100.0
        );
        f
    };
    Measured {
        peak: of("--max-peak"),
        leak: of("--max-leak"),
    }
}

fn size(x: f64) -> String {
    (x as u64).to_string()
}

/// The check's lines (stderr), without the program's own.
fn check_lines(o: &std::process::Output) -> Vec<String> {
    stderr(o)
        .lines()
        .filter(|l| l.starts_with("memlens check: ") || l.starts_with("  "))
        .map(str::to_string)
        .collect()
}

/// Limits above the measured figures hold (exit 0, one line); a peak limit at half and a leak
/// limit at half are each broken (exit 3), named in the output with the figure against the limit,
/// the profile kept where the output says. `extra`: options of every check (an interval).
#[track_caller]
fn above_and_below(dir: &Path, m: Measured, extra: &[&str], cmd: &[&str]) {
    let (p2, l2) = (size(2.0 * m.peak), size(2.0 * m.leak));
    let (ph, lh) = (size(0.5 * m.peak), size(0.5 * m.leak));
    let with = |limits: [&str; 4]| {
        let mut v = limits.to_vec();
        v.extend_from_slice(extra);
        check(dir, &v, cmd)
    };
    let o = with(["--max-peak", &p2, "--max-leak", &l2]).ok();
    let lines = check_lines(&o);
    assert_eq!(lines.len(), 1, "success is one line{}", printed(&o));
    assert!(
        lines[0].starts_with("memlens check: passed: --max-peak"),
        "{}",
        printed(&o)
    );
    assert_eq!(
        kept_files(dir),
        Vec::<PathBuf>::new(),
        "a passing check keeps no profile"
    );

    let o = with(["--max-peak", &ph, "--max-leak", &l2]).exits(3);
    let e = stderr(&o);
    assert!(e.contains(&format!("--max-peak {ph} BROKEN")), "{e}");
    assert!(e.contains(&format!("--max-leak {l2} held")), "{e}");
    assert!(
        e.contains("largest stacks, the program's own frames first"),
        "{e}"
    );
    assert!(
        e.lines()
            .last()
            .unwrap()
            .starts_with("memlens check: FAILED (exit 3)"),
        "{e}"
    );
    assert_kept(dir, &e);

    let o = with(["--max-peak", &p2, "--max-leak", &lh]).exits(3);
    let e = stderr(&o);
    assert!(e.contains(&format!("--max-leak {lh} BROKEN")), "{e}");
    assert!(e.contains(&format!("--max-peak {p2} held")), "{e}");
    assert_kept(dir, &e);
}

/// Profiles a check left in `dir`.
fn kept_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".pb.gz"))
        .collect();
    v.sort();
    v
}

/// The output names a kept profile that exists and reads; it is removed for the next check.
#[track_caller]
fn assert_kept(dir: &Path, err: &str) {
    let line = err
        .lines()
        .find_map(|l| l.strip_prefix("memlens check: profile kept: "))
        .unwrap_or_else(|| panic!("no profile kept in: {err}"));
    let file = PathBuf::from(line.split(" (memlens report").next().unwrap());
    assert!(file.exists(), "{}: {err}", file.display());
    report_json(&file, &[]);
    clear_kept(dir);
}

/// Remove the profiles checks kept in `dir`.
fn clear_kept(dir: &Path) {
    for f in kept_files(dir) {
        std::fs::remove_file(f).unwrap();
    }
}

/// The python3 executable itself (not a version manager's shell wrapper).
fn python3() -> String {
    let o = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .ok_stdout();
    o.trim().to_string()
}

#[test]
fn python3_building_a_dict_against_limits_above_and_below() {
    let dir = test_dir();
    // os._exit leaves the heap as it is: the dict is the leak at exit as well as the peak
    let script = dir.join("dict.py");
    std::fs::write(
        &script,
        "import os\nd = {}\nfor i in range(300000):\n    d[i] = str(i) * 3\nos._exit(0)\n",
    )
    .unwrap();
    let py = python3();
    let cmd = [py.as_str(), script.to_str().unwrap()];
    let m = measure(&dir, "4K", &cmd);
    assert!(m.peak > 8e6 && m.leak > 8e6, "{m:?}");
    above_and_below(&dir, m, &[], &cmd);
}

#[test]
fn sqlite3_running_a_script_against_limits_above_and_below() {
    let dir = test_dir();
    let sql = dir.join("s.sql");
    std::fs::write(
        &sql,
        "PRAGMA cache_size=-20000;\n\
         CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, v REAL);\n\
         WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x < 100000)\n\
         INSERT INTO t SELECT x, hex(randomblob(16)), x*1.5 FROM c;\n\
         CREATE INDEX t_name ON t(name);\n\
         SELECT count(*) FROM t WHERE name LIKE 'A%';\n",
    )
    .unwrap();
    let cmd = ["sqlite3", ":memory:", &format!(".read {}", sql.display())];
    // sqlite3 frees nearly all at exit (some 9 KB stay live): measured, and judged, at an
    // interval of 64 bytes, where such a leak is some 140 samples (±17 % at 95 %; at the default
    // 1K, nine samples could not tell 9 KB from a limit of 18 KB)
    let m = measure(&dir, "64", &cmd);
    assert!(m.peak > 4e6 && m.leak > 1e3 && m.leak < 1e6, "{m:?}");
    above_and_below(&dir, m, &["--interval", "64"], &cmd);
}

#[test]
fn git_log_against_limits_above_and_below() {
    let dir = test_dir();
    let repo = dir.join("repo");
    make_repo(&repo, 300);
    let r = repo.to_str().unwrap();
    let cmd = ["git", "-C", r, "--no-pager", "log", "-p"];
    // git leaves what it allocated live at exit: its leak is most of its peak (some 0.7 MB here,
    // at 1K within ±4 %; its half is some 10 standard errors below even the peak's lower bound)
    let m = measure(&dir, "1K", &cmd);
    assert!(m.peak > 3e5 && m.leak > 0.5 * m.peak, "{m:?}");
    above_and_below(&dir, m, &[], &cmd);
}

/// A repository of `commits` commits of five files each, made by git fast-import.
fn make_repo(repo: &Path, commits: usize) {
    Command::new("git")
        .args(["init", "-q", "-b", "main"])
        .arg(repo)
        .ok();
    let mut stream = String::new();
    let mut mark = 0;
    for c in 0..commits {
        let mut files = Vec::new();
        for f in 0..5 {
            mark += 1;
            let data = format!("line {c} of file {f}\n").repeat(50 + c % 50);
            stream += &format!("blob\nmark :{mark}\ndata {}\n{data}\n", data.len());
            files.push((f, mark));
        }
        let msg = format!("commit {c}\n");
        stream += &format!(
            "commit refs/heads/main\ncommitter T <t@example.com> {} +0000\ndata {}\n{msg}",
            1_700_000_000 + c,
            msg.len()
        );
        for (f, m) in files {
            stream += &format!("M 100644 :{m} dir{}/file{f}.txt\n", f % 3);
        }
        stream += "\n";
    }
    let mut fi = Command::new("git")
        .args(["fast-import", "--quiet"])
        .current_dir(repo)
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    fi.stdin
        .take()
        .unwrap()
        .write_all(stream.as_bytes())
        .unwrap();
    assert!(fi.wait().unwrap().success());
    Command::new("git")
        .args(["-C", repo.to_str().unwrap(), "checkout", "-q", "main"])
        .ok();
}

/// redis-server checked while redis-benchmark loads it, stopped by SHUTDOWN NOSAVE: what it held
/// is its leak at exit (it does not free its dataset), its peak a little more.
#[test]
fn redis_under_benchmark_against_limits_above_and_below() {
    let dir = test_dir();
    let run = |limits: &[&str]| {
        let port = free_port().to_string();
        let mut args = limits.to_vec();
        let js = dir.join("r.json");
        args.extend(["--json", js.to_str().unwrap()]);
        // Without jemalloc's background thread: the runtime can deadlock redis at start-up (jemalloc
        // holds its lock while it creates that thread, the thread's TLS calloc is sampled, and a
        // timeline point reads jemalloc's statistics under that lock). Seen at 64K; a runtime bug
        // this test is not about (docs/check.md).
        let cmd = [
            "redis-server",
            "--port",
            &port,
            "--save",
            "",
            "--appendonly",
            "no",
            "--jemalloc-bg-thread",
            "no",
        ];
        let child = check(&dir, &args, &cmd)
            .stderr(Stdio::piped())
            .spawn()
            .expect("redis-server (scripts/install-deps.sh installs it)");
        let cli = |a: &[&str]| {
            Command::new("redis-cli")
                .args(["-p", &port])
                .args(a)
                .output()
        };
        wait_for("redis to answer PING", 20, || {
            cli(&["ping"]).is_ok_and(|o| stdout(&o).contains("PONG"))
        });
        Command::new("redis-benchmark")
            .args([
                "-p", &port, "-q", "-n", "20000", "-c", "8", "-r", "20000", "-d", "256",
            ])
            .args(["-t", "set,get,lpush,sadd"])
            .stdout(Stdio::null())
            .ok();
        cli(&["shutdown", "nosave"]).unwrap();
        (
            wait_deadline(child, 60, "redis-server under memlens check"),
            json(&js),
        )
    };
    let (o, v) = run(&["--interval", "4K", "--max-peak", "1T", "--max-leak", "1T"]);
    assert_ok(&"redis measured", &o);
    let fig = |opt: &str| {
        let l = v["limits"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["option"] == opt)
            .unwrap();
        let f = l["figure"].as_f64().unwrap();
        // a peak's upper end is also what the highest estimate allows (measure's note)
        let up = if opt == "--max-peak" { 1.3 } else { 1.1 };
        assert!(l["low"].as_f64().unwrap() >= 0.9 * f && l["high"].as_f64().unwrap() <= up * f);
        f
    };
    let m = Measured {
        peak: fig("--max-peak"),
        leak: fig("--max-leak"),
    };
    assert!(m.peak > 2e6 && m.leak > 0.5 * m.peak, "{m:?}");
    let (p2, l2, ph, lh) = (
        size(2.0 * m.peak),
        size(2.0 * m.leak),
        size(m.peak / 2.0),
        size(m.leak / 2.0),
    );
    let (o, _) = run(&["--max-peak", &p2, "--max-leak", &l2]);
    assert_ok(&"redis, limits above", &o);
    assert!(
        stderr(&o).contains("memlens check: passed:"),
        "{}",
        printed(&o)
    );
    let (o, v) = run(&["--max-peak", &ph, "--max-leak", &l2]);
    assert_eq!(o.status.code(), Some(3), "{}", printed(&o));
    assert_eq!(
        verdicts(&v),
        [("--max-peak", "broken"), ("--max-leak", "held")]
    );
    let (o, v) = run(&["--max-peak", &p2, "--max-leak", &lh]);
    assert_eq!(o.status.code(), Some(3), "{}", printed(&o));
    assert_eq!(
        verdicts(&v),
        [("--max-peak", "held"), ("--max-leak", "broken")]
    );
    for f in kept_files(&dir) {
        report_json(&f, &[]);
    }
}

/// (option, verdict) of every judged limit.
fn verdicts(v: &Value) -> Vec<(&str, &str)> {
    v["limits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["option"].as_str().unwrap(),
                l["verdict"].as_str().unwrap(),
            )
        })
        .collect()
}

// ---------- a program of known figures ----------

/// tests/e2e/check_leaker.c, built in `dir`.
fn leaker(dir: &Path) -> String {
    let src = root().join("tests/e2e/check_leaker.c");
    compile(&src, dir, "check_leaker", &[])
        .to_str()
        .unwrap()
        .to_string()
}

/// `memlens run --interval INTERVAL -o DIR/NAME -- CMD`: the profile (a baseline).
fn run_profile(dir: &Path, name: &str, interval: &str, cmd: &[&str]) -> PathBuf {
    let f = dir.join(name);
    memlens()
        .args(["run", "--interval", interval, "-o"])
        .arg(&f)
        .arg("--")
        .args(cmd)
        .stdout(Stdio::null())
        .ok();
    f
}

/// The leaker's exact figures (it counts what it asks for) when run with `args`.
fn exact(exe: &str, args: &[&str]) -> Measured {
    let out = Command::new(exe).args(args).ok_stdout();
    let get = |k: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(k)?.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("no {k} in {out}"))
    };
    Measured {
        peak: get("peak "),
        leak: get("leak "),
    }
}

/// A baseline from the unchanged program (keeping a quarter of 200 000 records: peak 44.8 MB,
/// leak 13.6 MB); the regressed one adds a cache it never frees (20.8 MB). Each growth limit and the
/// per-stack one are broken, the cache's stack named first with the program's own function first,
/// the figure against the limit, and the profile kept; the figures are the program's own within
/// their intervals.
#[test]
fn a_leak_regression_against_a_baseline_is_caught_and_named() {
    let dir = test_dir();
    let exe = leaker(&dir);
    let base = run_profile(&dir, "base.pb.gz", "4K", &[&exe, "200", "4", "0", "0"]);
    let truth = exact(&exe, &["200", "4", "1", "0"]);
    let js = dir.join("c.json");
    let args = [
        "--baseline",
        base.to_str().unwrap(),
        "--max-leak-growth",
        "10%",
        "--max-peak-growth",
        "10%",
        "--max-leak-growth-per-stack",
        "1M",
        "--json",
        js.to_str().unwrap(),
    ];
    let o = check(&dir, &args, &[&exe, "200", "4", "1", "0"]).exits(3);
    let e = stderr(&o);
    // the per-stack limit names the cache: its first line is the program's own code
    let block = e
        .split("--max-leak-growth-per-stack 1M BROKEN")
        .nth(1)
        .unwrap_or_else(|| panic!("{e}"));
    let first_frames: Vec<&str> = block.lines().skip(3).take(3).map(str::trim).collect();
    assert!(
        first_frames[0].starts_with("take  check_leaker.c"),
        "{block}"
    );
    assert!(
        first_frames[1].starts_with("cache_insert_leaky  check_leaker.c"),
        "{block}"
    );
    assert!(e.contains("--max-leak-growth 10% BROKEN"), "{e}");
    assert!(e.contains("--max-peak-growth 10% held"), "{e}");
    assert_kept(&dir, &e);
    let v = json(&js);
    assert_eq!(
        verdicts(&v),
        [
            ("--max-peak-growth", "held"),
            ("--max-leak-growth", "broken"),
            ("--max-leak-growth-per-stack", "broken")
        ]
    );
    let lim = |i: usize| &v["limits"][i];
    // the figures: the program's own counts lie within the 95 % intervals (the leak's sampling
    // error is some 1 %, so this holds 19 times in 20 in principle; the interval is checked
    // against the count with a 5 % allowance for what the count leaves out — stdio's buffer, the
    // runtime's rounding — so that the assertion is about the figure, not the odds)
    let within = |l: &Value, truth: f64| {
        let (lo, hi) = (l["low"].as_f64().unwrap(), l["high"].as_f64().unwrap());
        assert!(lo <= truth * 1.05 && hi >= truth * 0.95, "{truth} vs {l:#}");
    };
    within(lim(0), truth.peak);
    within(lim(1), truth.leak);
    let stack = &lim(2)["stacks"][0];
    assert_eq!(stack["verdict"], "broken");
    assert_eq!(
        stack["frames"][1]["function"], "cache_insert_leaky",
        "{stack:#}"
    );
    assert_eq!(stack["frames"][1]["own"], true);
    // a new stack: 0 in the baseline, give or take what its interval could leave unsampled
    assert_eq!(stack["baseline"]["figure"], 0.0, "{stack:#}");
}

/// The unchanged program against its own baseline, 20 checks: every one passes with every limit
/// held (--strict: an inconclusive verdict would fail it too). The interval is the default one the
/// limits call for (1 KiB here): each run's bounds then lie within a third of the 10 % allowed
/// (peak 44.8 MB: +0.9 % and −1.9 % for the peak's wider lower bound; leak 13.6 MB: ±1.7 %);
/// the difference of two runs has a standard error of 1.2 % (leak) and 0.7 % (peak), and a "held"
/// needs the ratio of the two estimates under 1.063 (leak) and 1.069 (peak): 5 and 10 standard
/// errors away. 20 of 20 is certain, not lucky.
#[test]
fn a_run_against_its_own_baseline_passes_20_times_of_20() {
    let dir = test_dir();
    let exe = leaker(&dir);
    let base = run_profile(&dir, "base.pb.gz", "1K", &[&exe, "200", "4", "0", "0"]);
    let js = dir.join("self.json");
    let args = [
        "--baseline",
        base.to_str().unwrap(),
        "--max-peak-growth",
        "10%",
        "--max-leak-growth",
        "10%",
        "--max-leak-growth-per-stack",
        "1M",
        "--strict",
        "--json",
        js.to_str().unwrap(),
    ];
    let mut passed = 0;
    for _ in 0..20 {
        let o = check(&dir, &args, &[&exe, "200", "4", "0", "0"]).out();
        assert_eq!(
            o.status.code(),
            Some(0),
            "after {passed} passed{}",
            printed(&o)
        );
        let v = json(&js);
        assert!(verdicts(&v).iter().all(|(_, x)| *x == "held"), "{v:#}");
        passed += 1;
    }
    assert_eq!(passed, 20);
    let kept: Vec<PathBuf> = kept_files(&dir)
        .into_iter()
        .filter(|f| f.to_string_lossy().contains("memlens.check."))
        .collect();
    assert_eq!(
        kept,
        Vec::<PathBuf>::new(),
        "passing checks keep no profile"
    );
}

/// Each exit status of the documented table, and the program's own failure said as such.
#[test]
fn exit_statuses() {
    let dir = test_dir();
    let exe = leaker(&dir);
    let run = |extra: &[&str], prog: &[&str]| {
        let mut cmd = vec![exe.as_str()];
        cmd.extend_from_slice(prog);
        check(&dir, extra, &cmd)
    };
    // 0: held; 3: broken (a leak of 13.6 MB against 1 MB)
    run(&["--max-leak", "64M"], &["200", "4", "0", "0"]).exits(0);
    let o = run(&["--max-leak", "1M"], &["200", "4", "0", "0"]).exits(3);
    assert_kept(&dir, &stderr(&o));
    // 1: the program failed (its status said, its limits judged all the same)
    let o = run(&["--max-leak", "64M"], &["200", "4", "0", "7"]).exits(1);
    let e = stderr(&o);
    assert!(e.contains("the program failed (exit 7)"), "{e}");
    assert!(e.contains("--max-leak 64M held"), "{e}");
    assert_kept(&dir, &e);
    let o = check(&dir, &["--max-leak", "1M"], &["sh", "-c", "kill -SEGV $$"]).exits(1);
    assert!(
        stderr(&o).contains("the program failed (SIGSEGV"),
        "{}",
        printed(&o)
    );
    assert_kept(&dir, &stderr(&o));
    // 1: no program to run
    let o = check(&dir, &["--max-leak", "1M"], &["/nonexistent/prog"]).error(1);
    assert!(
        stderr(&o).contains("cannot run '/nonexistent/prog'"),
        "{}",
        printed(&o)
    );
    // 2: usage — no limit, a bad size, a baseline without a limit against it, a growth limit
    // without a baseline
    let prog = ["200", "4", "0", "0"];
    run(&[], &prog).error(2);
    run(&["--max-peak", "lots"], &prog).error(2);
    run(&["--max-leak", "1G", "--baseline", "x.pb.gz"], &prog).error(2);
    run(&["--max-leak-growth", "10%"], &prog).error(2);
    // inconclusive: a leak of one 8 MiB block against a limit of 8 MiB, at 512K. The block (16
    // intervals) is sampled with probability 1 − e^(−16) and then weighs its size: the estimate is
    // 8 MiB (and stdio's buffer, sampled once in 500). Its 95 % interval is ±0.8 MiB nonetheless:
    // one block's variance is bounded by 0.65·R² whatever its size, so the verdict cannot be
    // "held" nor "broken" — certainly, not by chance. It passes, says how to settle it, and fails
    // under --strict.
    let big = ["0", "4", "0", "0", "8"];
    let o = run(&["--max-leak", "8M", "--interval", "512K"], &big).exits(0);
    let e = stderr(&o);
    assert!(
        e.contains("inconclusive at interval 512K: settle it with --interval"),
        "{e}"
    );
    assert!(e.lines().last().unwrap().contains("1 inconclusive"), "{e}");
    assert_eq!(
        kept_files(&dir),
        Vec::<PathBuf>::new(),
        "a passing check keeps nothing"
    );
    let o = run(
        &["--max-leak", "8M", "--interval", "512K", "--strict"],
        &big,
    )
    .exits(3);
    assert!(
        stderr(&o).contains("inconclusive counts as broken under --strict"),
        "{}",
        printed(&o)
    );
    assert_kept(&dir, &stderr(&o));
    // a limit of 0: broken by any leaked block seen (13.6 MB here), never held when none is
    run(&["--max-leak", "0", "--interval", "64"], &prog).exits(3);
    clear_kept(&dir);
    let o = check(&dir, &["--max-leak", "0"], &["true"]).exits(0);
    assert!(
        stderr(&o).contains("a limit of 0 is broken by any block"),
        "{}",
        printed(&o)
    );
    // --exact settles a limit on the bytes allocated
    let o = run(&["--max-allocated", "1G", "--exact"], &prog).exits(0);
    assert!(stderr(&o).contains("(interval 0, 95%)"), "{}", printed(&o));
}

/// The leaker's stacks at exit with the cache (200 000 records, a quarter kept): the table's
/// (the registry, 10.4 MB, and the table itself, 1.6 MB: 12.0 MB), the sizes array's (1.6 MB) and
/// the cache's (20.8 MB); its peak, 44.8 MB, is the table's (43.2 MB) and the sizes'. A limit of
/// 15M per stack (15.7 MB) is 3.7 MB above the table's and 5.1 MB below the cache's: each some
/// 10 standard errors (√(figure·8 KiB), the interval that limit calls for) beyond its bound.
#[test]
fn known_stacks_are_set_aside() {
    let dir = test_dir();
    let exe = leaker(&dir);
    let prog = [exe.as_str(), "200", "4", "1", "0"];
    check(&dir, &["--max-leak-per-stack", "15M"], &prog).exits(3);
    clear_kept(&dir);
    check(
        &dir,
        &["--max-leak-per-stack", "15M", "--allow", "^cache_insert"],
        &prog,
    )
    .exits(0);
    let supp = dir.join("known.supp");
    std::fs::write(
        &supp,
        "# known leaks\npeak:build_table\nleak:cache_insert_leaky\n",
    )
    .unwrap();
    let s = supp.to_str().unwrap();
    // 34.4 MB in all: above 25M (26.2 MB); without the cache (13.6 MB) below it
    check(&dir, &["--max-leak", "25M"], &prog).exits(3);
    clear_kept(&dir);
    check(&dir, &["--max-leak", "25M", "--suppressions", s], &prog).exits(0);
    // the peak (44.8 MB) without the table's stack, set aside for the peak only: 1.6 MB
    check(&dir, &["--max-peak", "30M"], &prog).exits(3);
    clear_kept(&dir);
    let o = check(&dir, &["--max-peak", "30M", "--suppressions", s], &prog).exits(0);
    assert!(stderr(&o).contains("passed"), "{}", printed(&o));
    let bad = dir.join("bad.supp");
    std::fs::write(&bad, "leak:(unclosed\n").unwrap();
    let o = check(
        &dir,
        &["--max-leak", "1M", "--suppressions", bad.to_str().unwrap()],
        &prog,
    )
    .error(2);
    assert!(stderr(&o).contains("bad.supp:1"), "{}", printed(&o));
}

/// JSON and JUnit XML of a failing check: the JUnit file is read by a real XML parser (python3's),
/// with one failure per broken limit and the program's stack in the failure's text.
#[test]
fn json_and_junit_outputs() {
    let dir = test_dir();
    let exe = leaker(&dir);
    let (js, xml) = (dir.join("o.json"), dir.join("o.xml"));
    let args = [
        "--max-leak-per-stack",
        "15M",
        "--max-peak",
        "1G",
        "--json",
        js.to_str().unwrap(),
        "--junit",
        xml.to_str().unwrap(),
    ];
    check(&dir, &args, &[&exe, "200", "4", "1", "0"]).exits(3);
    let v = json(&js);
    assert_eq!(v["result"], "failed");
    assert_eq!(v["exit_status"], 3);
    assert_eq!(v["program"]["exit_code"], 0);
    assert_eq!(v["profiles_kept"].as_array().unwrap().len(), 1);
    assert!(
        v["interval_chosen"]
            .as_str()
            .unwrap()
            .contains("--max-leak-per-stack 15M"),
        "{v:#}"
    );
    let counts = Command::new("python3")
        .arg("-c")
        .arg(
            "import sys, xml.etree.ElementTree as E\n\
             r = E.parse(sys.argv[1]).getroot()\n\
             s = r.find('testsuite')\n\
             f = [c.find('failure') for c in s.findall('testcase')]\n\
             print(r.get('tests'), r.get('failures'), s.get('failures'))\n\
             print([x.text for x in f if x is not None][0])",
        )
        .arg(&xml)
        .ok_stdout();
    let mut lines = counts.lines();
    assert_eq!(lines.next(), Some("2 1 1"), "{counts}");
    let text: String = lines.collect::<Vec<_>>().join("\n");
    assert!(text.contains("cache_insert_leaky"), "{counts}");
}

/// `memlens diff --flamegraph --html`: the regressed program against the unchanged one. The cache
/// that appeared is drawn in red (growth) in the SVG, the registry that shrank (an eighth of the
/// records kept instead of a quarter) in blue in the HTML's graph sized by BASE.
#[test]
fn diff_draws_a_differential_flame_graph() {
    let dir = test_dir();
    let exe = leaker(&dir);
    let (a, b) = (
        run_profile(&dir, "a.pb.gz", "16K", &[&exe, "200", "4", "0", "0"]),
        run_profile(&dir, "b.pb.gz", "16K", &[&exe, "200", "8", "1", "0"]),
    );
    let (svg, html) = (dir.join("d.svg"), dir.join("d.html"));
    memlens()
        .arg("diff")
        .args([&a, &b])
        .arg("--flamegraph")
        .arg(&svg)
        .arg("--html")
        .arg(&html)
        .ok();
    let svg = std::fs::read_to_string(&svg).unwrap();
    let red = |c: &Rgb| c.0 == 255 && c.1 < 250 && c.1 == c.2;
    let blue = |c: &Rgb| c.2 == 255 && c.0 < 250 && c.0 == c.1;
    let check_colours = |doc: &str| {
        let f = drawn(doc);
        for d in &f {
            if d.delta > 0.0 {
                assert!(red(&d.fill), "{d:?} grew but is not red");
            } else if d.delta < 0.0 {
                assert!(blue(&d.fill), "{d:?} shrank but is not blue");
            }
        }
        f
    };
    let f = check_colours(&svg);
    // the cache's leaf is red, at the cache's place; the table's is blue
    let at = |name: &str| {
        f.iter()
            .find(|d| d.name == name)
            .map(|d| d.x.clone())
            .unwrap()
    };
    let grew = f
        .iter()
        .find(|d| d.delta > 0.0 && d.x == at("cache_insert_leaky"));
    assert!(grew.is_some_and(|d| red(&d.fill)), "{f:?}");
    let shrank = f.iter().find(|d| d.delta < 0.0 && d.x == at("build_table"));
    assert!(shrank.is_some_and(|d| blue(&d.fill)), "{f:?}");
    let html = std::fs::read_to_string(&html).unwrap();
    assert!(html.contains("sized by NEW") && html.contains("sized by BASE"));
    assert_eq!(
        html.matches("<h2>Differential flame graph, sized by")
            .count(),
        2
    );
    let by_base = check_colours(html.split("sized by BASE").last().unwrap());
    assert!(
        by_base.iter().any(|d| d.delta < 0.0 && blue(&d.fill)),
        "{by_base:?}"
    );
}

type Rgb = (u8, u8, u8);

/// A frame of a differential flame graph as inferno draws it.
#[derive(Debug)]
struct Drawn {
    name: String,
    /// Its change, percent of the graph's total.
    delta: f64,
    /// Where it starts.
    x: String,
    fill: Rgb,
}

/// inferno colours each stack's leaf frame by its change (`<title>take (…; +64.36%)</title>
/// <rect x="25.36%" … fill="rgb(255,100,100)"`); the frames below it are white.
fn drawn(doc: &str) -> Vec<Drawn> {
    doc.split("<title>")
        .skip(1)
        .filter_map(|g| {
            let (title, rest) = g.split_once("</title>")?;
            let name = title.split(" (").next()?.to_string();
            let delta: f64 = title
                .rsplit("; ")
                .next()?
                .trim_end_matches("%)")
                .parse()
                .ok()?;
            let x = rest.split("x=\"").nth(1)?.split('"').next()?.to_string();
            let rgb = rest.split("fill=\"rgb(").nth(1)?.split(')').next()?;
            let c: Vec<u8> = rgb
                .split(',')
                .filter_map(|v| v.trim().parse().ok())
                .collect();
            Some(Drawn {
                name,
                delta,
                x,
                fill: (*c.first()?, *c.get(1)?, *c.get(2)?),
            })
        })
        .collect()
}

/// `--max-peak` judges the split-sample peak and the interval `report --view peak` prints, not the
/// highest estimate of the run. runtime/tests/churn_peak.c keeps 800 blocks of 32 KiB (exact peak
/// 25 MiB) and replaces them one at a time 400,000 times, so at 512K the highest of its estimates
/// reads 1.5-1.65x the peak while the split estimate reads 0.8-1.1x (sd about 0.09) with its own
/// upper bound 1.1-1.4x (measured 12 runs). The interval's upper end is what the highest estimate
/// allows (a spike briefer than the churn is not told from noise): about 1.9-2.0x here. So 42M
/// (1.6x) is inconclusive (held would need the highest estimate under 1.32x: it read 1.53-1.63x in
/// 12 of 12 runs, the highest of thousands of moments; broken would need the split's lower bound
/// past 1.6x) and 64M (2.56x) is held (it would need the highest past 2.2x). 200 blocks (the earlier shape) gave so few samples live (about 12) that the split bound
/// passed 1.6x in 2 runs of 30: a check that fails by chance is not a test.
#[test]
fn max_peak_judges_the_split_peak_on_a_churning_heap() {
    let dir = test_dir();
    let exe = compile(
        &root().join("runtime/tests/churn_peak.c"),
        dir.path(),
        "churn",
        &[],
    );
    let (j, p) = (
        dir.path().join("churn.json"),
        dir.path().join("churn.pb.gz"),
    );
    // 42M (1.6x) sits between the split estimate's own bound and what the highest estimate allows
    // (~2x): a brief spike could have passed it unseen, so it is not held; 64M (2.56x) is.
    for (limit, verdict) in [
        ("42M", "inconclusive"),
        ("64M", "held"),
        ("42M", "inconclusive"),
    ] {
        let args = [
            "--interval",
            "512K",
            "--max-peak",
            limit,
            "--json",
            j.to_str().unwrap(),
            "-o",
            p.to_str().unwrap(),
        ];
        let o = check(dir.path(), &args, &[exe.to_str().unwrap(), "800"])
            .output()
            .unwrap();
        let v = json(&j);
        let l = &v["limits"][0];
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(l["verdict"], verdict, "{l}\n{err}");
        // The figure judged is the split one the report prints, below the run's highest estimate.
        let figure = l["figure"].as_f64().unwrap();
        let tl = report_json(&p, &["--view", "timeline"]);
        let split = tl["peak_estimate_bytes"].as_f64().unwrap();
        let highest = tl["heap_max_bytes"].as_f64().unwrap();
        assert!(
            (figure - split).abs() <= 1.0 && figure < highest,
            "judged {figure}, split {split}, highest {highest}: {l}\n{err}"
        );
    }
}
