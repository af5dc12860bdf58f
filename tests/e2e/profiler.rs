//! End-to-end tests of the heap profiler: the runtime (libmemlens.so) under `memlens run`.
//!
//! Profiles are checked from the runtime's raw dumps (`--keep-raw`), which carry the unbiased
//! estimates; site names come from the test program's own symbol table (`nm`).
use crate::util::*;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

// ---------- reading raw dumps ----------

/// A raw dump read by memlens's own strict reader (a truncated dump fails the read), with the file
/// it came from.
#[derive(Debug)]
struct Raw {
    file: PathBuf,
    dump: memlens_profile::RawDump,
}

impl std::ops::Deref for Raw {
    type Target = memlens_profile::RawDump;
    fn deref(&self) -> &Self::Target {
        &self.dump
    }
}

impl Raw {
    fn pid(&self) -> u32 {
        self.meta.pid
    }
    fn exe_name(&self) -> String {
        Path::new(&self.meta.exe)
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }
}

fn parse_raw(path: &Path) -> Raw {
    Raw {
        file: path.to_path_buf(),
        dump: memlens_profile::read_raw(path)
            .unwrap_or_else(|e| panic!("{}: {e:#}", path.display())),
    }
}

fn raws_in(dir: &Path) -> Vec<Raw> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.sort();
    v.iter()
        .filter(|p| p.extension().is_some_and(|e| e == "raw"))
        .map(|p| parse_raw(p))
        .collect()
}

// ---------- running things ----------

/// `memlens run OPTS -- CMD` in `dir`, keeping raw dumps in a fresh subdirectory.
fn profile(dir: &Path, opts: &[&str], cmd: &[&str]) -> (Output, Vec<Raw>) {
    profile_env(dir, opts, cmd, &[])
}

fn profile_env(
    dir: &Path,
    opts: &[&str],
    cmd: &[&str],
    env: &[(&str, &str)],
) -> (Output, Vec<Raw>) {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let raw = dir.join(format!(
        "raw{}",
        N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    ));
    let out = memlens()
        .current_dir(dir)
        .arg("run")
        .arg("--keep-raw")
        .arg(&raw)
        .arg("-o")
        .arg(dir.join("main.pb.gz"))
        .args(opts)
        .arg("--")
        .args(cmd)
        .envs(env.iter().copied())
        .out();
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
    (out, raws_in(&raw))
}

fn plain(dir: &Path, cmd: &[&str]) -> Output {
    Command::new(cmd[0]).args(&cmd[1..]).current_dir(dir).out()
}

/// The program behaves the same under the profiler: same stdout and exit status.
fn same_behaviour(dir: &Path, cmd: &[&str]) -> Vec<Raw> {
    let want = plain(dir, cmd);
    let (got, raws) = profile(dir, &[], cmd);
    assert_eq!(
        stdout(&got),
        stdout(&want),
        "stdout differs for {cmd:?}; stderr: {}",
        stderr(&got)
    );
    assert_eq!(
        got.status.code(),
        want.status.code(),
        "exit status differs for {cmd:?}: {}",
        stderr(&got)
    );
    // The main process's pprof profile is there and memlens report reads it.
    let main = dir.join("main.pb.gz");
    assert!(main.exists(), "no profile written: {}", stderr(&got));
    report_json(&main, &["--sample-index", "alloc_space"]);
    raws
}

/// A profile is sensible: complete, has modules, and its stacks carry samples with non-empty stacks.
fn assert_sensible(r: &Raw) {
    assert!(
        r.modules.iter().any(|m| m.loaded),
        "no modules in {}",
        r.file.display()
    );
    assert!(
        !r.stacks.is_empty(),
        "no stacks in {} ({})",
        r.file.display(),
        r.exe_name()
    );
    assert!(
        r.stacks.iter().all(|s| !s.pcs.is_empty()),
        "empty stack in {}",
        r.file.display()
    );
    assert!(r.meta.samples > 0 || r.stacks.iter().any(|s| s.inuse_bytes > 0));
    // Every recorded sample belongs to exactly one stack.
    let per_stack: u64 = r.stacks.iter().map(|s| s.samples).sum();
    assert_eq!(per_stack, r.meta.samples, "{}", r.file.display());
}

/// The last dump of every pid (a pid that exec'd has several).
fn last_per_pid(raws: &[Raw]) -> BTreeMap<u32, &Raw> {
    let mut m = BTreeMap::new();
    for r in raws {
        m.insert(r.pid(), r); // raws are sorted by file name: <pid>.<seq>
    }
    m
}

// ---------- the accuracy program ----------

struct Built {
    _dir: tempfile::TempDir,
    fp: PathBuf,
    nofp: PathBuf,
}

fn accuracy_programs() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        // Shared by the tests for the whole run (a static is never dropped): a plain directory.
        let dir = tempfile::Builder::new()
            .prefix("memlens-profiler-test-")
            .tempdir()
            .unwrap();
        let src = root().join("runtime/tests/accuracy.cc");
        let fp = compile(
            &src,
            dir.path(),
            "accuracy_fp",
            &["-fno-omit-frame-pointer"],
        );
        let nofp = compile(&src, dir.path(), "accuracy_nofp", &["-fomit-frame-pointer"]);
        Built {
            _dir: dir,
            fp,
            nofp,
        }
    })
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

/// Function symbols of an executable: (start, end, name).
fn symbols(exe: &Path) -> Vec<(u64, u64, String)> {
    let out = Command::new("nm")
        .args(["-S", "--defined-only"])
        .arg(exe)
        .ok_stdout();
    let mut v = Vec::new();
    for l in out.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.len() == 4 && (f[2] == "T" || f[2] == "t") {
            let start = hex(f[0]);
            v.push((start, start + hex(f[1]), f[3].to_string()));
        }
    }
    v
}

/// The site function a stack belongs to: the innermost frame in the program named `site_*`.
fn site_of(
    stack: &memlens_profile::RawStack,
    exe: &memlens_profile::RawModule,
    syms: &[(u64, u64, String)],
) -> Option<String> {
    for &pc in &stack.pcs {
        let Some(v) = (pc - 1).checked_sub(exe.base) else {
            continue;
        };
        if let Some((_, _, name)) = syms.iter().find(|(a, b, _)| *a <= v && v < *b) {
            if name.starts_with("site_") {
                return Some(name.clone());
            }
        }
    }
    None
}

struct Truth {
    sites: BTreeMap<String, (u64, u64)>, // name -> (bytes, count)
    held: u64,
}

fn truth(out: &str) -> Truth {
    let mut t = Truth {
        sites: BTreeMap::new(),
        held: 0,
    };
    for l in out.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        match f[0] {
            "site" => {
                t.sites.insert(
                    f[1].to_string(),
                    (f[2].parse().unwrap(), f[3].parse().unwrap()),
                );
            }
            "held" => t.held = f[1].parse().unwrap(),
            _ => {}
        }
    }
    t
}

/// Run the accuracy program under `opts` and compare each big site's estimate with the truth.
/// Sites in `unreachable` are not checked (see the fp-unwinder test for why).
fn check_accuracy(exe: &Path, opts: &[&str], tolerance: f64, exact: bool, unreachable: &[&str]) {
    check_accuracy_env(exe, opts, tolerance, exact, unreachable, &[])
}

fn check_accuracy_env(
    exe: &Path,
    opts: &[&str],
    tolerance: f64,
    exact: bool,
    unreachable: &[&str],
    env: &[(&str, &str)],
) {
    let dir = test_dir();
    let (out, raws) = profile_env(dir.path(), opts, &[exe.to_str().unwrap()], env);
    assert_ok(&format!("memlens run {opts:?} -- {}", exe.display()), &out);
    let t = truth(&stdout(&out));
    assert_eq!(raws.len(), 1, "one process, one dump");
    let r = &raws[0];
    assert_sensible(r);
    let name = exe.file_name().unwrap().to_string_lossy();
    let module = r
        .modules
        .iter()
        .find(|m| m.path.ends_with(&*name))
        .expect("program module in dump");
    let syms = symbols(exe);
    let mut est: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    let mut inuse_total = 0i64;
    for s in &r.stacks {
        inuse_total += s.inuse_bytes;
        if let Some(site) = site_of(s, module, &syms) {
            let e = est.entry(site).or_default();
            e.0 += s.alloc_bytes as f64;
            e.1 += s.alloc_objects_fx as f64 / 65536.0;
        }
    }
    let total: u64 = t.sites.values().map(|v| v.0).sum();
    let mut report = String::new();
    let mut bad = Vec::new();
    for (site, &(bytes, count)) in &t.sites {
        let (eb, ec) = est.get(site).copied().unwrap_or_default();
        let err = eb / bytes as f64 - 1.0;
        report += &format!("{site}: true {bytes} est {eb:.0} ({:+.2}%)\n", err * 100.0);
        if bytes as f64 >= 0.05 * total as f64 && !unreachable.contains(&site.as_str()) {
            if err.abs() > tolerance {
                bad.push(site.clone());
            }
            if exact && (ec / count as f64 - 1.0).abs() > tolerance {
                bad.push(format!("{site} (count {count} est {ec:.0})"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "sites off by more than {}%: {bad:?}\n{report}",
        tolerance * 100.0
    );
    // Exact mode keeps every live block too: in use is what the program holds, plus what the C++
    // runtime keeps (its emergency pool, iostream buffers).
    let err = inuse_total as f64 / t.held as f64 - 1.0;
    assert!(
        err.abs() <= if exact { 0.02 } else { 0.10 },
        "inuse at exit {inuse_total} vs held {} ({:+.1}%)",
        t.held,
        err * 100.0
    );
    check_report(
        &dir.path().join("main.pb.gz"),
        &t,
        tolerance,
        exact,
        unreachable,
    );
    let truncated = r.meta.truncated as f64 / r.meta.samples.max(1) as f64;
    eprintln!(
        "{name} {opts:?}: truncated {:.1}%\n{report}",
        truncated * 100.0
    );
}

/// `memlens report FILE --format FORMAT --sample-index INDEX`, which must succeed: its output.
fn report(file: &Path, format: &str, index: &str) -> String {
    memlens()
        .args([
            "report",
            file.to_str().unwrap(),
            "--format",
            format,
            "--sample-index",
            index,
        ])
        .ok_stdout()
}

/// The same checks through the whole pipeline: pprof written by `memlens run`, symbolized offline,
/// read back by `memlens report`: each big site is named and its cumulative value is right.
fn check_report(file: &Path, t: &Truth, tolerance: f64, exact: bool, unreachable: &[&str]) {
    let total: u64 = t.sites.values().map(|v| v.0).sum();
    let space = report_json(file, &["--sample-index", "alloc_space"]);
    let objects = report_json(file, &["--sample-index", "alloc_objects"]);
    let cum = |j: &serde_json::Value, site: &str| -> f64 {
        j["functions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["function"] == site)
            .map(|f| f["cum"].as_f64().unwrap())
            .unwrap_or(0.0)
    };
    for (site, &(bytes, count)) in &t.sites {
        if (bytes as f64) < 0.05 * total as f64 || unreachable.contains(&site.as_str()) {
            continue;
        }
        let err = cum(&space, site) / bytes as f64 - 1.0;
        assert!(
            err.abs() <= tolerance,
            "report: {site} alloc_space off by {:+.2}%",
            err * 100.0
        );
        if exact {
            let err = cum(&objects, site) / count as f64 - 1.0;
            assert!(
                err.abs() <= tolerance,
                "report: {site} alloc_objects off by {:+.2}%",
                err * 100.0
            );
        }
    }
    {
        let inuse = space["totals"]["inuse_space"].as_f64().unwrap();
        let err = inuse / t.held as f64 - 1.0;
        assert!(
            err.abs() <= if exact { 0.02 } else { 0.10 },
            "report: inuse_space {inuse} vs held {}",
            t.held
        );
    }
}

#[test]
fn accuracy_frame_pointers_fp_unwinder() {
    // site_new is found too: the runtime defines operator new itself, so the caller of `new` is the
    // first frame even though libstdc++ keeps no frame pointers.
    check_accuracy(
        &accuracy_programs().fp,
        &["--unwinder", "fp"],
        0.10,
        false,
        &[],
    );
}

#[test]
fn accuracy_no_frame_pointers_default_unwinder() {
    check_accuracy(&accuracy_programs().nofp, &[], 0.10, false, &[]);
}

#[test]
fn accuracy_no_frame_pointers_libgcc() {
    check_accuracy(
        &accuracy_programs().nofp,
        &["--unwinder", "libgcc"],
        0.10,
        false,
        &[],
    );
}

#[test]
fn accuracy_no_frame_pointers_libunwind() {
    check_accuracy(
        &accuracy_programs().nofp,
        &["--unwinder", "libunwind"],
        0.10,
        false,
        &[],
    );
}

/// Every stack (symbolized, with its exact count) of `cmd` in exact mode under `unwinder`, sorted.
/// Also returns the share of samples the unwinder handed to its fallback.
fn exact_stacks(dir: &Path, unwinder: &str, cmd: &[&str]) -> (Vec<String>, f64) {
    let file = dir.join(format!("{unwinder}.pb.gz"));
    let raw_dir = dir.join(format!("raw-{unwinder}"));
    let mut args = vec!["run", "--exact", "--unwinder", unwinder, "-o"];
    args.push(file.to_str().unwrap());
    args.extend_from_slice(&["--keep-raw", raw_dir.to_str().unwrap()]);
    args.push("--");
    args.extend_from_slice(cmd);
    // Which allocation makes pymalloc map a new arena (anonymous mmap) differs from run to run
    // (object addresses order what is freed when): the malloc stacks alone are compared.
    memlens()
        .args(&args)
        .env("PYTHONHASHSEED", "0")
        .env("MEMLENS_MMAP", "0")
        .ok();
    let mut lines: Vec<String> = report(&file, "folded", "alloc_objects")
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    let raws = raws_in(&raw_dir);
    let (fallbacks, samples) = raws.iter().fold((0, 0), |(f, s), r| {
        (f + r.meta.unwind_fallbacks, s + r.meta.samples)
    });
    std::fs::remove_dir_all(&raw_dir).ok();
    (lines, fallbacks as f64 / samples.max(1) as f64)
}

#[test]
fn dwarf_unwinder_finds_the_same_stacks_as_libunwind() {
    // Exact mode makes both runs record the same allocations, so the folded stacks (frames and
    // counts) must agree line for line: on our C++ program without frame pointers (operator new,
    // aligned allocations, two threads) and on python3, a large C program.
    let dir = test_dir();
    let py = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .ok_stdout();
    let script = "d={str(i): [i]*5 for i in range(20000)}\nimport json\nprint(len(json.dumps(d)))";
    let acc = accuracy_programs().nofp.to_str().unwrap().to_string();
    for (cmd, min_stacks) in [
        (vec![acc.as_str()], 8),
        (vec![py.trim(), "-c", script], 200),
    ] {
        let (dwarf, fallback_share) = exact_stacks(dir.path(), "dwarf", &cmd);
        let (libunwind, _) = exact_stacks(dir.path(), "libunwind", &cmd);
        // The comparison means something only if the dwarf unwinder found the stacks itself.
        assert!(
            fallback_share < 0.01,
            "{cmd:?}: {:.1}% of the stacks went to the fallback",
            fallback_share * 100.0
        );
        assert!(
            dwarf.len() >= min_stacks,
            "{cmd:?}: only {} stacks",
            dwarf.len()
        );
        // A stack cut at the depth limit (64 frames) keeps whichever 64 frames its unwinder reached
        // first; where the two count a leaf frame differently the cut falls one frame apart. Whole
        // stacks must agree line for line.
        let whole = |v: &[String]| -> Vec<String> {
            v.iter()
                .filter(|l| l.split(';').count() < 64)
                .cloned()
                .collect()
        };
        let (dwarf, libunwind) = (whole(&dwarf), whole(&libunwind));
        let differ: Vec<_> = dwarf
            .iter()
            .filter(|l| !libunwind.contains(l))
            .take(3)
            .collect();
        assert_eq!(
            dwarf.len(),
            libunwind.len(),
            "{cmd:?}: first differences {differ:?}"
        );
        assert!(differ.is_empty(), "{cmd:?}: dwarf-only stacks {differ:?}");
    }
}

#[test]
fn dwarf_stack_cache_tells_callers_apart() {
    // leaf() is called from a() and b(), whose frames are the same size: every allocation starts
    // from the same return address, stack pointer and rbp, and only the word holding leaf's return
    // address differs. A cache that trusted the start would put every byte on one caller.
    for flags in [
        &["-O2", "-fomit-frame-pointer"],
        &["-O2", "-fno-omit-frame-pointer"],
    ] {
        let (dir, exe) = torture("same_start", flags);
        let file = dir.path().join("p.pb.gz");
        let o = memlens()
            .args([
                "run",
                "--exact",
                "-o",
                file.to_str().unwrap(),
                "--",
                exe.to_str().unwrap(),
            ])
            .ok();
        let truth: BTreeMap<String, u64> = stdout(&o)
            .lines()
            .map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (f[0].to_string(), f[2].parse().unwrap())
            })
            .collect();
        let folded = report(&file, "folded", "alloc_space");
        for (caller, bytes) in &truth {
            let found: u64 = folded
                .lines()
                .filter(|l| l.contains(&format!(";{caller}")) && l.contains(";leaf "))
                .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
                .sum();
            assert_eq!(found, *bytes, "{flags:?}: bytes from {caller}\n{folded}");
        }
    }
}

#[test]
fn accuracy_exact_mode() {
    check_accuracy(&accuracy_programs().fp, &["--exact"], 0.01, true, &[]);
}

#[test]
fn accuracy_over_jemalloc() {
    // LD_PRELOAD given to memlens run is kept after the runtime, so memlens forwards to jemalloc.
    let je = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
    assert!(
        Path::new(je).exists(),
        "{je} missing: install libjemalloc2 (scripts/install-deps.sh)"
    );
    check_accuracy_env(
        &accuracy_programs().nofp,
        &[],
        0.10,
        false,
        &[],
        &[("LD_PRELOAD", je)],
    );
}

// ---------- real programs ----------

#[test]
fn python_unchanged_and_profiled() {
    let dir = test_dir();
    let script = dir.path().join("alloc.py");
    std::fs::write(
        &script,
        "import json\nd=[{'k':i,'v':str(i)*20,'l':list(range(i%50))} for i in range(100000)]\n\
         s=json.dumps(d)\nprint(len(s), sum(len(x['l']) for x in json.loads(s)))\n",
    )
    .unwrap();
    let raws = same_behaviour(dir.path(), &["python3", script.to_str().unwrap()]);
    let last = last_per_pid(&raws);
    let py = last
        .values()
        .find(|r| r.exe_name().starts_with("python3"))
        .expect("a python3 profile");
    assert_sensible(py);
}

#[test]
fn sqlite_unchanged_and_profiled() {
    let dir = test_dir();
    let sql = "drop table if exists t;create table t(a integer primary key, b text);\
               with recursive c(x) as (select 1 union all select x+1 from c where x<50000) \
               insert into t select x, printf('%0100d', x) from c;\
               create index tb on t(b);\
               select count(*), sum(length(b)) from t where a % 7 = 3;";
    let db = dir.path().join("w.db");
    let raws = same_behaviour(dir.path(), &["sqlite3", db.to_str().unwrap(), sql]);
    std::fs::remove_file(&db).ok();
    assert_eq!(raws.len(), 1);
    assert_sensible(&raws[0]);
}

#[test]
fn git_unchanged_and_profiled() {
    let dir = test_dir();
    let d = dir.path();
    let git = |args: &[&str]| -> Vec<Raw> {
        let mut cmd = vec!["git", "-c", "user.name=t", "-c", "user.email=t@example.com"];
        cmd.extend_from_slice(args);
        let (out, raws) = profile(d, &[], &cmd);
        assert_ok(&cmd, &out);
        raws
    };
    git(&["init", "-q", "repo"]);
    std::fs::write(d.join("repo/a.txt"), "hello\n".repeat(1000)).unwrap();
    git(&["-C", "repo", "add", "a.txt"]);
    git(&["-C", "repo", "commit", "-q", "-m", "first"]);
    // git log of this repository: same output with and without the profiler.
    let r = root();
    let raws = same_behaviour(
        d,
        &[
            "git",
            "-C",
            r.to_str().unwrap(),
            "log",
            "--oneline",
            "-n",
            "50",
            "--stat",
        ],
    );
    assert_sensible(last_per_pid(&raws).values().next().unwrap());
}

#[test]
fn gcc_unchanged_and_profiled_one_per_process() {
    let dir = test_dir();
    let src = dir.path().join("hello.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\nint main(void){puts(\"hi\");return 0;}\n",
    )
    .unwrap();
    let exe = dir.path().join("hello");
    let raws = same_behaviour(
        dir.path(),
        &[
            "gcc",
            "-O2",
            src.to_str().unwrap(),
            "-o",
            exe.to_str().unwrap(),
        ],
    );
    let names: BTreeSet<String> = last_per_pid(&raws).values().map(|r| r.exe_name()).collect();
    // gcc drives cc1, as, collect2 and ld as child processes: each leaves its own profile.
    assert!(
        names.iter().any(|n| n == "cc1"),
        "no cc1 profile among {names:?}"
    );
    assert!(last_per_pid(&raws).len() >= 3, "{names:?}");
    let cc1 = raws.iter().find(|r| r.exe_name() == "cc1").unwrap();
    assert_sensible(cc1);
    assert_eq!(stdout(&plain(dir.path(), &[exe.to_str().unwrap()])), "hi\n");
}

// ---------- torture programs ----------

fn pprof_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.ends_with(".pb.gz") && !n.ends_with(".peak.pb.gz") // the peak set rides along
        })
        .count()
}

fn torture(name: &str, flags: &[&str]) -> (TestDir, PathBuf) {
    let dir = test_dir();
    let exe = compile(
        &root().join(format!("runtime/tests/{name}.c")),
        dir.path(),
        name,
        flags,
    );
    (dir, exe)
}

#[test]
fn fork_exec_chain_one_profile_per_process() {
    let (dir, exe) = torture("torture_fork", &[]);
    let raws = same_behaviour(dir.path(), &[exe.to_str().unwrap(), "chain", "4"]);
    let last = last_per_pid(&raws);
    assert_eq!(last.len(), 5, "5 processes in the chain: {:?}", last.keys());
    assert_eq!(pprof_files(dir.path()), 5, "one pprof profile per process");
    for r in last.values() {
        assert_eq!(r.meta.reason, "exit");
        assert_sensible(r);
    }
}

#[test]
fn fork_without_exec_children_profile_themselves() {
    let (dir, exe) = torture("torture_fork", &[]);
    let raws = same_behaviour(dir.path(), &[exe.to_str().unwrap(), "spawn", "4"]);
    let last = last_per_pid(&raws);
    assert_eq!(last.len(), 5, "parent + 4 children: {:?}", last.keys());
    assert_eq!(pprof_files(dir.path()), 5, "one pprof profile per process");
    let children: Vec<_> = last
        .values()
        .filter(|r| r.meta.reason == "fork-child-exit")
        .collect();
    assert_eq!(
        children.len(),
        4,
        "children leaving by exit() and by _exit() both dump"
    );
    for r in last.values() {
        assert_sensible(r);
    }
}

#[test]
fn dlopen_dlclose_loop_keeps_unloaded_module() {
    let dir = test_dir();
    let src = root().join("runtime/tests/torture_dlopen.c");
    let plugin = compile(
        &src,
        dir.path(),
        "plugin.so",
        &["-DPLUGIN", "-fPIC", "-shared"],
    );
    let exe = compile(&src, dir.path(), "torture_dlopen", &[]);
    let raws = same_behaviour(
        dir.path(),
        &[exe.to_str().unwrap(), plugin.to_str().unwrap(), "150"],
    );
    assert_eq!(raws.len(), 1);
    let r = &raws[0];
    assert_sensible(r);
    let m = r
        .modules
        .iter()
        .find(|m| m.path.ends_with("plugin.so"))
        .expect("plugin listed");
    assert!(!m.loaded, "the plugin is marked unloaded");
    let hi = m.segments.iter().map(|s| s.vaddr + s.memsz).max().unwrap();
    let in_plugin = r
        .stacks
        .iter()
        .any(|s| s.pcs.iter().any(|&pc| pc >= m.base && pc < m.base + hi));
    assert!(in_plugin, "no sample has a frame in the unloaded plugin");
}

#[test]
fn threads_created_and_joined_repeatedly() {
    let (dir, exe) = torture("torture_threads", &[]);
    let raws = same_behaviour(dir.path(), &[exe.to_str().unwrap(), "15"]);
    assert_eq!(raws.len(), 1);
    assert_sensible(&raws[0]);
    assert_eq!(raws[0].meta.dropped, 0);
    assert!(raws[0].meta.samples > 100);
}

// ---------- exit status, signals, bad input ----------

#[test]
fn exit_status_and_signals_pass_through() {
    let dir = test_dir();
    let (out, _) = profile(dir.path(), &[], &["sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    let (out, _) = profile(dir.path(), &[], &["sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.code(), Some(128 + 15));
    // A signal sent to memlens reaches the program.
    let mut child = memlens()
        .current_dir(dir.path())
        .args(["run", "-o"])
        .arg(dir.path().join("s.pb.gz"))
        .args(["--", "sleep", "30"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // memlens forwards signals once its program runs: wait for `sleep` to be its child
    let children = format!("/proc/{0}/task/{0}/children", child.id());
    wait_for("memlens run to start sleep", 20, || {
        std::fs::read_to_string(&children).is_ok_and(|c| {
            c.split_whitespace().any(|p| {
                std::fs::read_to_string(format!("/proc/{p}/comm"))
                    .is_ok_and(|n| n.trim() == "sleep")
            })
        })
    });
    Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .ok();
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(128 + 15));
}

#[test]
fn bad_input_is_one_line_errors() {
    memlens()
        .args(["run", "--no-such-option", "--", "true"])
        .error(2);
    memlens().args(["run"]).error(2);
    memlens()
        .args(["run", "--interval", "lots", "--", "true"])
        .error(2);
    let o = run(&["run", "--unwinder", "magic", "--", "true"]);
    assert_one_line_error(&o);
    let o = memlens().args(["run", "--", "/no/such/program"]).error(127);
    assert!(
        stderr(&o).contains("cannot run '/no/such/program': No such file or directory"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn fastpath_benchmark_runs_every_configuration() {
    // The profiler's speed benchmark (runtime/bench/fastpath.sh), on tiny sizes: every configuration
    // yields a row of numbers. Speed itself is measured by scripts/bench-profiler.sh, not here.
    let lib = runtime_lib();
    let out = Command::new("sh")
        .arg(root().join("runtime/bench/fastpath.sh"))
        .args([lib.to_str().unwrap(), "1", "1"])
        .envs([
            ("FASTPATH_BLOCKS", "3"),
            ("FASTPATH_PAIRS", "2000"),
            ("FASTPATH_XBLOCKS", "1"),
            ("FASTPATH_XPAIRS", "2000"),
        ])
        .ok_stdout();
    for config in [
        "none",
        "forward",
        "off",
        "512K/dwarf",
        "64K/dwarf",
        "64K/libunwind",
        "exact",
        "heaptrack",
        "je-prof64K",
        "views64K",
    ] {
        let row = out
            .lines()
            .find(|l| l.split_whitespace().next() == Some(config))
            .unwrap_or_else(|| panic!("no row for {config}:\n{out}"));
        let cost: f64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(cost > 0.0, "{row}");
    }
    assert!(out.contains("exact mode vs heaptrack:"), "{out}");
}

/// A debug build of the runtime (`-DMEMLENS_DEBUG=1`: every `ML_ASSERT` of `runtime/src/base/check.h`
/// compiled in) profiles real programs — a C++ program with deep template stacks, python3, which
/// loads and unloads modules, sqlite3 and a four-thread torture of the sampled blocks' range — at a
/// small interval without any invariant failing, and its dumps read back. The release build
/// carries none of the checks.
#[test]
fn debug_runtime_holds_its_invariants_on_real_programs() {
    let dir = test_dir();
    let d = dir.path();
    // The build's own flags (memlens-native compiles the runtime with them), at -O1, with the checks.
    let sources = memlens_native::runtime_sources(&root());
    let lib = d.join("libmemlens-debug.so");
    Command::new("gcc")
        .args(memlens_native::C_FLAGS)
        .args(memlens_native::RUNTIME_CFLAGS)
        .args(["-O1", "-DMEMLENS_DEBUG=1", "-I"])
        .arg(root().join(memlens_native::RUNTIME_INCLUDE))
        .args(memlens_native::SHARED_LDFLAGS)
        .args(&sources)
        .args(memlens_native::runtime_extra_args())
        .arg("-o")
        .arg(&lib)
        .args(memlens_native::RUNTIME_LIBS)
        .ok();
    let has_checks = |p: &Path| {
        let bytes = std::fs::read(p).unwrap();
        bytes
            .windows(b"internal assertion failed".len())
            .any(|w| w == b"internal assertion failed")
    };
    assert!(has_checks(&lib), "the debug build has no assertions");
    let release = runtime_lib();
    assert!(
        !has_checks(&release),
        "assertions left in the release build"
    );

    let prog = compile(
        &root().join("runtime/tests/long_names.cc"),
        d,
        "long_names",
        &[],
    );
    // range_torture: 4 threads of malloc/calloc/realloc/aligned/free from 1 B to 4 MiB, nearly all
    // sampled at this interval, so every class, page run and in-place resize of the range is checked.
    let torture = compile(
        &root().join("runtime/tests/range_torture.c"),
        d,
        "range_torture",
        &[],
    );
    let py = "import json, sqlite3, decimal\nprint(len(json.dumps([str(i) * 20 for i in range(20000)])))";
    let sql = "create table t(a, b); \
        with recursive c(x) as (select 1 union all select x + 1 from c where x < 20000) \
        insert into t select x, hex(randomblob(40)) from c; \
        create index i on t(b); select count(*) from t;";
    for (name, cmd) in [
        ("long_names", vec![prog.to_str().unwrap()]),
        ("python3", vec!["python3", "-c", py]),
        ("sqlite3", vec!["sqlite3", ":memory:", sql]),
        ("range_torture", vec![torture.to_str().unwrap(), "1000"]),
    ] {
        let out = d.join(format!("raw-{name}"));
        std::fs::create_dir(&out).unwrap();
        let o = Command::new(cmd[0])
            .args(&cmd[1..])
            .env("LD_PRELOAD", &lib)
            .env("MEMLENS_INTERVAL", "4096")
            .env("MEMLENS_OUT", out.join("p"))
            .ok();
        let err = stderr(&o);
        assert!(
            !err.contains("internal assertion"),
            "{name} under the debug runtime: {:?}\n{err}",
            o.status
        );
        // Every dump reads back (raws_in reads strictly). python3 may be a shim (pyenv: bash, env,
        // basename… run first), whose small helpers may leave dumps with nothing sampled; the
        // program's own dumps must be sensible, and it must leave one at exit.
        let raws: Vec<Raw> = raws_in(&out)
            .into_iter()
            .filter(|r| r.exe_name().starts_with(name))
            .collect();
        assert!(
            raws.iter().any(|r| r.meta.reason == "exit"),
            "{name} left no exit dump"
        );
        for r in &raws {
            assert_sensible(r);
        }
    }
}

// ---------- sampling that holds across fork, stacks that are whole (issue 23) ----------

/// 100 children forked one after another each allocate 200 KB once at a 1 MiB interval: each is
/// sampled with probability 1 - exp(-200000/2^20) ≈ 0.17, independently, so about 17 children have
/// a sample (Binomial(100, 0.17): 5..35 holds with probability above 0.9999). Children that kept
/// the parent's random state and countdown all took the same decision: 0 or 100. A child that
/// sampled nothing has nothing of its own and writes no dump (docs/survival.md).
#[test]
fn fork_children_sample_independently() {
    let (dir, exe) = torture("fork_children", &[]);
    let (out, raws) = profile(dir.path(), &["--interval", "1M"], &[exe.to_str().unwrap()]);
    assert_ok(&"fork_children", &out);
    let children: Vec<&Raw> = raws
        .iter()
        .filter(|r| r.meta.reason == "fork-child-exit")
        .collect();
    assert!(
        children.iter().all(|r| r.meta.samples > 0),
        "a child that sampled nothing wrote a dump"
    );
    let sampled = children.len();
    assert!(
        (5..=35).contains(&sampled),
        "{sampled} of 100 children sampled their 200 KB block (expected about 17)"
    );
}

/// A frame-pointer build under `--unwinder fp`: every stack reaches main and the outermost frame,
/// none is counted truncated (glibc's start-up code, built without frame pointers, leaves anything
/// in rbp above main: the walk goes on there with the DWARF rules).
#[test]
fn frame_pointer_build_has_no_truncated_stacks() {
    let (dir, exe) = torture("views_sites", &["-fno-omit-frame-pointer", "-O1"]);
    let (out, raws) = profile(
        dir.path(),
        &["--unwinder", "fp"],
        &[exe.to_str().unwrap(), "3"],
    );
    assert_ok(&"views_sites", &out);
    let r = raws
        .iter()
        .find(|r| r.meta.reason == "exit")
        .expect("an exit dump");
    assert!(r.meta.samples > 100, "{} samples", r.meta.samples);
    assert_eq!(
        r.meta.truncated, 0,
        "{} of {} stacks truncated",
        r.meta.truncated, r.meta.samples
    );
    assert!(r.stacks.iter().all(|s| s.flags & 1 == 0));
    let j = report_json(
        &dir.path().join("main.pb.gz"),
        &["--sample-index", "alloc_space"],
    );
    let outermost = j["stacks"][0]["frames"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"].as_str().unwrap().to_string())
        .collect::<Vec<_>>();
    assert!(
        outermost.iter().any(|f| f == "main") && outermost.last().unwrap() == "_start",
        "{outermost:?}"
    );
}

#[test]
fn realloc_growth_benchmark_runs() {
    // The realloc-growth benchmark (runtime/bench/realloc_growth.sh) on a small loop: it prints the
    // ratio of CPU times with its interval. The figure itself is measured by the command, not here.
    let lib = runtime_lib();
    let out = Command::new("sh")
        .arg(root().join("runtime/bench/realloc_growth.sh"))
        .args([lib.to_str().unwrap(), "3", "inplace", "64", "20", "64"])
        .ok_stdout();
    let ratio = out
        .lines()
        .find_map(|l| l.strip_prefix("ratio (runtime / bare, per pair): median "))
        .unwrap_or_else(|| panic!("no ratio in:\n{out}"));
    let median: f64 = ratio.split(',').next().unwrap().parse().unwrap();
    assert!(median > 0.0, "{out}");
    assert!(out.contains("95% interval ["), "{out}");
}
