//! A program must never behave differently under memlens: real programs (redis-server, unshare, the C
//! programs in runtime/tests) run with and without the runtime, and the failure modes the runtime
//! used to have (lost profiles, quadratic realloc, resident calloc, hangs and crashes in _exit, fork
//! and exec, foreign stacks, exhausted or unmappable ranges, hostile control peers, odd paths) are
//! each provoked on purpose.
use crate::util::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A C program of runtime/tests compiled into `dir`.
fn prog(dir: &Path, name: &str) -> PathBuf {
    let inc = format!("-I{}", root().join("runtime/include").display());
    compile(
        &root().join(format!("runtime/tests/{name}.c")),
        dir,
        name,
        &[inc.as_str(), "-fno-omit-frame-pointer"],
    )
}

/// `memlens run -o OUT --keep-raw DIR/raw [extra] -- cmd…` in `cwd`.
fn memlens_run(cwd: &Path, out: &Path, extra: &[&str], cmd: &[&str]) -> Command {
    let mut c = memlens();
    c.current_dir(cwd)
        .arg("run")
        .arg("-o")
        .arg(out)
        .args(extra)
        .arg("--")
        .args(cmd);
    c
}

fn total(r: &serde_json::Value, key: &str) -> f64 {
    r["totals"][key].as_f64().unwrap()
}

/// Value of `key N` in a program's output.
fn value(out: &str, key: &str) -> f64 {
    out.lines()
        .find_map(|l| l.strip_prefix(key)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no '{key}' in: {out}"))
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

// ---------- the cases real programs ran into ----------

/// redis-server overwrites its environment for its process title: the profile must still be
/// written where asked, and nothing left in the working directory.
#[test]
fn redis_keeps_its_profile_and_the_working_directory_clean() {
    let tmp = test_dir();
    let cwd = tmp.path().join("cwd");
    std::fs::create_dir(&cwd).unwrap();
    let out = tmp.path().join("redis.pb.gz");
    let port = free_port().to_string();
    let server = memlens()
        .current_dir(&cwd)
        .args(["run", "-o"])
        .arg(&out)
        .args([
            "--",
            "redis-server",
            "--port",
            &port,
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("redis-server (scripts/install-deps.sh installs it)");
    let cli = |args: &[&str]| {
        Command::new("redis-cli")
            .args(["-p", &port])
            .args(args)
            .output()
            .expect("redis-cli")
    };
    wait_for("redis to answer PING", 20, || {
        stdout(&cli(&["ping"])).trim() == "PONG"
    });
    for i in 0..200 {
        let v = "x".repeat(1000 + i * 100);
        assert_eq!(stdout(&cli(&["set", &format!("k{i}"), &v])).trim(), "OK");
    }
    cli(&["shutdown", "nosave"]);
    let o = wait_deadline(server, 30, "redis-server under memlens");
    let err = stderr(&o);
    assert!(o.status.success(), "exit {:?}: {err}", o.status);
    assert!(out.exists(), "no profile: {err}");
    assert!(!err.contains("left no profile"), "{err}");
    assert_eq!(names_in(&cwd), Vec::<String>::new(), "stray files in cwd");
    let r = report_json(&out, &[]);
    assert!(r["meta"]["samples"].as_u64().unwrap() > 0, "{r}");
}

/// A buffer grown by 64 KiB steps to 64 MiB: as small as without memlens (within 2x), never
/// copied step by step (a copy per step would fault in 32 GiB of fresh pages, ~8 million minor
/// faults, against the ~16 000 of writing 64 MiB once), and still sampled: the live buffer is in
/// the profile at its full size. (Its time is a benchmark's: runtime/bench/realloc_growth.sh.)
#[test]
fn realloc_growth_is_linear_and_still_counted() {
    let tmp = test_dir();
    let p = prog(tmp.path(), "realloc_grow");
    let alone = measured(Command::new(&p).env("KEEP", "1"));
    assert!(alone.out.status.success(), "{}", printed(&alone.out));
    let out = tmp.path().join("g.pb.gz");
    let o = memlens()
        .args(["run", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&p)
        .env("KEEP", "1")
        .ok();
    let (a, b) = (stdout(&alone.out), stdout(&o));
    assert_eq!(a.lines().next(), b.lines().next(), "output differs");
    let (rss_a, rss_m) = (value(&a, "maxrss_kib"), value(&b, "maxrss_kib"));
    assert!(
        rss_m < 2.0 * rss_a + 8192.0,
        "peak RSS {rss_m} KiB vs {rss_a} KiB"
    );
    let r = report_json(&out, &[]);
    let inuse = total(&r, "inuse_space");
    let want = 64.0 * 1048576.0;
    assert!(
        (inuse - want).abs() < 0.02 * want,
        "the live 64 MiB buffer shows as {inuse} bytes in use"
    );
    // The program's own faults under the runtime (GNU time runs it inside memlens run; the
    // runtime is in both, and time's child is the program alone).
    let faults = tmp.path().join("faults");
    memlens()
        .args(["run", "--interval", "4K", "-o"])
        .arg(tmp.path().join("f.pb.gz"))
        .args(["--", "/usr/bin/time", "-f", "%R", "-o"])
        .arg(&faults)
        .arg(&p)
        .ok();
    let under: u64 = std::fs::read_to_string(&faults)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        under < 2 * alone.minor_faults + 10_000,
        "{under} minor faults under memlens, {} alone: the buffer was copied as it grew",
        alone.minor_faults
    );
}

/// calloc(1, 4 GiB) with 16 pages touched: no memset, the pages stay untouched (the program's
/// peak RSS says so).
#[test]
fn sparse_calloc_stays_sparse() {
    let tmp = test_dir();
    let p = prog(tmp.path(), "calloc_sparse");
    let alone = Command::new(&p).ok();
    let o = memlens_run(
        tmp.path(),
        &tmp.path().join("c.pb.gz"),
        &[],
        &[p.to_str().unwrap()],
    )
    .ok();
    let (a, b) = (stdout(&alone), stdout(&o));
    assert_eq!(value(&a, "sum"), 0.0);
    assert_eq!(value(&b, "sum"), 0.0);
    let (rss_a, rss_m) = (value(&a, "maxrss_kib"), value(&b, "maxrss_kib"));
    assert!(
        rss_m < 2.0 * rss_a + 8192.0,
        "peak RSS {rss_m} KiB vs {rss_a} KiB"
    );
}

/// `unshare -U` needs a single-threaded process: the control thread must step aside.
#[test]
fn unshare_succeeds_under_memlens() {
    let tmp = test_dir();
    // -m needs privileges (root, or -U with it); -U alone does not.
    let mut cases = vec![
        vec!["unshare", "-U", "true"],
        vec!["unshare", "-U", "id", "-u"],
    ];
    if Command::new("unshare")
        .args(["-m", "true"])
        .status()
        .is_ok_and(|s| s.success())
    {
        cases.push(vec!["unshare", "-m", "true"]);
    } else {
        cases.push(vec!["unshare", "-Urm", "true"]);
    }
    for (i, cmd) in cases.iter().enumerate() {
        let alone = Command::new(cmd[0]).args(&cmd[1..]).output().unwrap();
        let out = tmp.path().join(format!("u{i}.pb.gz"));
        let o = memlens_run(tmp.path(), &out, &[], cmd).out();
        assert_eq!(
            o.status.code(),
            alone.status.code(),
            "{cmd:?}: {}",
            stderr(&o)
        );
        assert!(o.status.success(), "{cmd:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), stdout(&alone), "{cmd:?}");
        assert!(!stderr(&o).contains("unshare"), "{cmd:?}: {}", stderr(&o));
    }
}

/// A program entering a user namespace whose uid map it writes afterwards (`unshare -U`, `-Ur`)
/// leaves no directory and no socket: the runtime used to listen again at once, as uid 65534
/// (unmapped), creating a root-owned `/tmp/memlens-65534` (after which that user could not use
/// memlens) and leaving a socket there that nobody removed.
#[test]
fn unshare_leaves_no_directory_or_socket() {
    if !root_or_skip("a directory of another user's to remove and watch") {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let tmp = test_dir();
    let nobody = Path::new("/tmp/memlens-65534");
    for (i, flags) in ["-U", "-Ur"].iter().enumerate() {
        // A root-owned one is what this test looks for: remove it first (older runtimes, in other
        // tests running now, may make it again; a socket named by our pid cannot be theirs).
        if std::fs::metadata(nobody).is_ok_and(|m| m.uid() == 0) {
            std::fs::remove_dir_all(nobody).ok();
        }
        let out = tmp.path().join(format!("u{i}.pb.gz"));
        let o = memlens_run(tmp.path(), &out, &[], &["unshare", flags, "true"])
            .env_remove("MEMLENS_CTL_DIR")
            .ok();
        let err = stderr(&o);
        let pid: String = err
            .split("profile of pid ")
            .nth(1)
            .and_then(|r| r.split_whitespace().next())
            .unwrap_or_else(|| panic!("{err}"))
            .to_string();
        let ours: Vec<String> = std::fs::read_dir(nobody)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .filter(|n| n.starts_with(&format!("{pid}.")))
                    .collect()
            })
            .unwrap_or_default();
        assert!(
            ours.is_empty(),
            "unshare {flags} left {ours:?} in {}",
            nobody.display()
        );
        assert!(
            std::fs::metadata(nobody).map_or(true, |m| m.uid() != 0),
            "unshare {flags} made a root-owned {}",
            nobody.display()
        );
        assert_eq!(
            err.lines()
                .filter(|l| !l.contains("profile of pid"))
                .count(),
            0,
            "{err}"
        );
    }
}

/// Every command piped into `head -1` stops quietly (RUST_BACKTRACE set or not); a panic is one
/// `memlens: error:` line.
#[test]
fn every_command_into_head_exits_quietly() {
    let tmp = test_dir();
    let p = prog(tmp.path(), "realloc_grow");
    let prof = tmp.path().join("p.pb.gz");
    memlens_run(
        tmp.path(),
        &prof,
        &["--interval", "4K"],
        &[p.to_str().unwrap(), "8"],
    )
    .ok();
    let f = prof.to_str().unwrap();
    let cmds: Vec<Vec<&str>> = vec![
        vec!["report", f, "--format", "folded"],
        vec!["report", f, "--format", "json"],
        vec!["report", f, "--top", "1000"],
        vec!["diff", f, f],
        vec!["sysinfo"],
        vec!["--help"],
        vec!["report", "--help"],
        vec!["run", "--", "seq", "100000"],
    ];
    for bt in ["0", "1", "full"] {
        for c in &cmds {
            let mut child = memlens()
                .current_dir(tmp.path())
                .args(c)
                .env("RUST_BACKTRACE", bt)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            let mut first = String::new();
            BufReader::new(child.stdout.take().unwrap())
                .read_line(&mut first)
                .unwrap();
            // The reader (`head -1`) is gone now.
            let o = wait_deadline(child, 60, "memlens into a closed pipe");
            let e = stderr(&o);
            assert!(!first.is_empty(), "{c:?}: no output");
            assert!(
                !e.contains("panicked") && !e.contains("Broken pipe"),
                "{c:?}: {e}"
            );
            assert!(
                !e.contains("memlens: error"),
                "{c:?}: a closed pipe is not an error: {e}"
            );
            if c[0] != "run" {
                assert!(o.status.success(), "{c:?}: {:?} {e}", o.status);
            }
        }
        let o = memlens()
            .arg("sysinfo")
            .env("RUST_BACKTRACE", bt)
            .env("MEMLENS_DEBUG_PANIC", "1")
            .error(1);
        assert!(!stderr(&o).contains("backtrace"), "{}", stderr(&o));
    }
}

// ---------- the review's findings, one test each ----------

/// 1. The extracted runtime is trusted for its content, not its length, and only from directories
///    that are ours and not writable by others; a cache that is not is never loaded from, and
///    never stops the program: memlens says why in one line and loads the runtime from a place
///    of its own. (The cache is a user's: as root, the test runs memlens as uid 65534.)
#[test]
fn runtime_cache_is_verified() {
    let tmp = test_dir();
    // root's runtime is not the cache's (its children may drop privileges): test it as a user
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let cache = tmp.path().join("cache");
    let out = tmp.path().join("out");
    for d in [&cache, &out] {
        std::fs::create_dir(d).unwrap();
        if root {
            std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
        }
    }
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let run = |name: &str| {
        let (mut c, _) = memlens_as_a_user();
        c.current_dir(&out)
            .env("XDG_CACHE_HOME", &cache)
            .args(["run", "-o", name, "--", "true"]);
        let o = c.ok();
        assert!(out.join(name).exists(), "no profile{}", printed(&o));
        stderr(&o)
    };
    run("a.pb.gz");
    let hashdir = std::fs::read_dir(cache.join("memlens"))
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let lib = hashdir.join("libmemlens.so");
    let len = std::fs::metadata(&lib).unwrap().len() as usize;
    // A planted library of the same length is replaced, not preloaded.
    std::fs::write(&lib, vec![0x42u8; len]).unwrap();
    let e = run("b.pb.gz");
    assert!(!e.contains("cannot be preloaded"), "{e}");
    assert_ne!(std::fs::read(&lib).unwrap(), vec![0x42u8; len]);
    // A directory others may write to is not loaded from: the program still runs, profiled from
    // memlens's own place, and one line says why.
    let said = |e: &str, why: &str| {
        let lines: Vec<&str> = e.lines().filter(|l| l.contains(why)).collect();
        assert_eq!(lines.len(), 1, "{e}");
        assert!(lines[0].contains("the runtime is loaded from"), "{e}");
    };
    std::fs::set_permissions(&hashdir, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::write(&lib, vec![0x42u8; len]).unwrap();
    let e = run("c.pb.gz");
    said(&e, "writable by other users");
    assert_eq!(
        std::fs::read(&lib).unwrap(),
        vec![0x42u8; len],
        "rewritten in a foreign place"
    );
    assert!(!e.contains("cannot be preloaded"), "{e}");
    std::fs::set_permissions(&hashdir, std::fs::Permissions::from_mode(0o700)).unwrap();
    // So is one owned by someone else (needs root to arrange).
    if root_or_skip("a runtime cache owned by another user") {
        std::os::unix::fs::chown(&hashdir, Some(1), Some(1)).unwrap();
        said(&run("d.pb.gz"), "belongs to uid 1");
    }
}

/// 2. The exit dump from _exit in a signal handler: on an 8 KiB sigaltstack, while the thread
///    was dumping itself, and in a fork child whose parent had the loader lock taken.
#[test]
fn exit_dumps_are_signal_safe() {
    let tmp = test_dir();
    let p = prog(tmp.path(), "exit_signal");
    let spawn = |args: &[&str]| {
        memlens()
            .current_dir(tmp.path())
            .args(["run", "-o"])
            .arg(tmp.path().join(format!("{}.pb.gz", args[0])))
            .arg("--")
            .arg(&p)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let o = wait_deadline(spawn(&["altstack"]), 30, "_exit on a sigaltstack");
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    assert!(tmp.path().join("altstack.pb.gz").exists(), "{}", stderr(&o));
    let d = tmp.path().join("dumps");
    std::fs::create_dir(&d).unwrap();
    let o = wait_deadline(
        spawn(&["dumping", d.to_str().unwrap()]),
        30,
        "_exit while dumping",
    );
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));

    let f = prog(tmp.path(), "fork_lock");
    let child = memlens()
        .current_dir(tmp.path())
        .args(["run", "-o"])
        .arg(tmp.path().join("f.pb.gz"))
        .arg("--")
        .arg(&f)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = wait_deadline(child, 30, "fork child of a thread in dl_iterate_phdr");
    assert_ok(&format!("memlens run -- {}", f.display()), &o);
    assert_eq!(stdout(&o).trim(), "child exited 0");
}

/// 3. The private range: freed space merges and serves a bigger block, a size just over a power
///    of two does not take twice the room, and a full range is reported, never silent (its
///    samples still count as allocated, without live tracking).
#[test]
fn range_reuses_space_and_reports_what_it_drops() {
    let tmp = test_dir();
    let p = prog(tmp.path(), "range_pressure");
    // 40 live blocks of 1 GiB + 8 KiB (64 GiB of room), freed, then one of 4 GiB.
    let out = tmp.path().join("r.pb.gz");
    let o = memlens_run(
        tmp.path(),
        &out,
        &[],
        &[p.to_str().unwrap(), "40", "1048576", "4194304"],
    )
    .ok();
    assert_eq!(stdout(&o).trim(), "ok");
    let r = report_json(&out, &[]);
    assert_eq!(r["meta"]["dropped"], 0, "{}", r["meta"]);
    assert_eq!(total(&r, "alloc_objects").round(), 41.0);
    assert!((total(&r, "inuse_space") - 4294975488.0).abs() < 1e6);

    // 70 blocks of 1 GiB cannot all fit: the rest is still counted as allocated, not tracked live,
    // and said so.
    let out = tmp.path().join("full.pb.gz");
    let o = memlens_run(
        tmp.path(),
        &out,
        &[],
        &[p.to_str().unwrap(), "70", "1048576", "0"],
    )
    .ok();
    assert_eq!(stdout(&o).trim(), "ok");
    let r = report_json(&out, &[]);
    let untracked = r["meta"]["untracked"].as_u64().unwrap_or(0);
    assert!(untracked >= 5, "{}", r["meta"]);
    assert_eq!(r["meta"]["dropped"], 0, "{}", r["meta"]);
    assert_eq!(total(&r, "alloc_objects").round(), 70.0);
    let table = memlens().arg("report").arg(&out).ok_stdout();
    assert!(table.contains("not tracked live"), "{table}");
}

/// 3. Every path of the range (classes, page runs, in-place resize, retained and reused pages,
///    calloc of reused memory) under random malloc/calloc/realloc/posix_memalign/free on 4 threads,
///    each block's content checked.
#[test]
fn range_torture_keeps_every_byte() {
    let tmp = test_dir();
    let p = prog(tmp.path(), "range_torture");
    for iv in ["4K", "64K", "512K"] {
        let o = memlens_run(
            tmp.path(),
            &tmp.path().join(format!("t{iv}.pb.gz")),
            &["--interval", iv],
            &[p.to_str().unwrap(), "3000"],
        )
        .ok();
        assert_eq!(stdout(&o).trim(), "ok", "{iv}");
    }
}

/// 3 (and the fault-injection case). Under `ulimit -v` the runtime must not take the program's
/// address space (the old 64 GiB reservation did), and when its own mappings fail the program goes
/// on and one line says that profiling stopped.
#[test]
fn address_space_limit_never_costs_the_program() {
    let tmp = test_dir();
    let p = prog(tmp.path(), "range_pressure");
    let rt = runtime_lib();
    let with_limit = |kib: u64, preload: bool, args: &[&str]| {
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!("ulimit -v {kib} && exec \"$@\""))
            .arg("sh")
            .arg(&p)
            .args(args)
            .env("MEMLENS_OUT", tmp.path().join("d"));
        if preload {
            c.env("LD_PRELOAD", &rt);
        }
        c.output().unwrap()
    };
    // 100000 blocks of 68 KiB (most unsampled) under a 68 GiB limit.
    let big = ["100000", "64", "0"];
    let o = with_limit(68 << 20, false, &big);
    assert_eq!(stdout(&o).trim(), "ok");
    let o = with_limit(68 << 20, true, &big);
    assert_eq!(stdout(&o).trim(), "ok", "{}", stderr(&o));
    assert_eq!(stderr(&o), "");

    // 64 blocks of 4 MiB live: the smallest limit it runs under alone, and a sweep above it.
    let small = ["64", "4096", "0"];
    let mut min = 200 << 10;
    while stdout(&with_limit(min, false, &small)).trim() != "ok" {
        min += 4 << 10;
    }
    // Where the range cannot grow, sampling goes on without live tracking (`untracked` in the
    // dump), never stops; above the documented reserve (docs/survival.md: L/64 + 8 MiB) the
    // program runs as it does alone.
    let mut untracked = 0;
    for extra_mib in (0..=48).step_by(4) {
        let kib = min + (extra_mib << 10);
        let o = with_limit(kib, true, &small);
        let (out, err) = (stdout(&o), stderr(&o));
        assert!(
            o.status.code().is_some(),
            "+{extra_mib} MiB: killed by a signal: {err}"
        );
        assert!(
            !err.contains("profiling stopped"),
            "+{extra_mib} MiB: {err}"
        );
        assert!(err.lines().all(|l| l.starts_with("memlens: ")), "{err}");
        if extra_mib >= (kib >> 10) / 64 + 8 {
            assert_eq!(out.trim(), "ok", "+{extra_mib} MiB: {out}{err}");
        }
        for d in names_in(tmp.path()).iter().filter(|n| n.ends_with(".raw")) {
            let t = std::fs::read_to_string(tmp.path().join(d)).unwrap();
            untracked += value(&t, "untracked ") as u64;
            std::fs::remove_file(tmp.path().join(d)).ok();
        }
    }
    assert!(
        untracked > 0,
        "no limit of the sweep stopped the range from growing"
    );
}

/// 4. A fork child copies nothing of the stack table before it samples (its own state file gets the
///    table at its first write: docs/survival.md), and does not dump on every
///    execve attempt of a PATH search.
#[test]
fn fork_is_cheap_and_exec_attempts_do_not_dump() {
    let tmp = test_dir();
    let p = prog(tmp.path(), "fork_stacks");
    let out = memlens_run(
        tmp.path(),
        &tmp.path().join("cow.pb.gz"),
        &["--exact"],
        &[p.to_str().unwrap(), "cow"],
    )
    .ok_stdout();
    let child = value(&out, "child_dirty_kib");
    let parent = value(&out, "parent_dirty_kib");
    assert!(parent > 8192.0, "too few stacks recorded to tell: {out}");
    assert!(
        child < parent / 8.0,
        "the fork child copied the stack table: {out}"
    );

    let raw = tmp.path().join("raw");
    memlens_run(
        tmp.path(),
        &tmp.path().join("path.pb.gz"),
        &["--keep-raw", raw.to_str().unwrap()],
        &[p.to_str().unwrap(), "path"],
    )
    .ok();
    // d.<pid>.<seq>.raw: 50 failed attempts used to take sequence numbers (a dump each).
    for n in names_in(&raw) {
        let seq: u64 = n.split('.').nth(2).unwrap().parse().unwrap();
        assert!(seq < 2, "a dump per execve attempt: {n}");
    }
}

/// 4. A fork child starts no thread at the fork (a child that execs or exits at once stays
///    single-threaded, as without memlens); one that lives and allocates gets its control thread.
#[test]
fn fork_child_starts_its_control_thread_only_once_it_lives() {
    let tmp = test_dir();
    let p = prog(tmp.path(), "fork_stacks");
    let out = memlens_run(
        tmp.path(),
        &tmp.path().join("threads.pb.gz"),
        &[],
        &[p.to_str().unwrap(), "threads"],
    )
    .ok_stdout();
    let line = out
        .lines()
        .find(|l| l.starts_with("child_threads "))
        .unwrap_or_else(|| panic!("no child_threads line: {out}"));
    let n: Vec<i64> = line
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(
        n[0], 1,
        "a thread was started in the fork child at fork: {line}"
    );
    assert_eq!(n[2], 2, "the living child has no control thread: {line}");
}

/// 4. ... and `memlens ctl` on a fork child that has no channel (yet) makes it open one (ptrace,
///    as root: tests/e2e/reach.rs has the pre-fork servers), rather than say that the process does
///    not run under memlens.
#[test]
fn ctl_on_a_fork_child_without_a_channel_opens_it() {
    if !root_or_skip("ctl_on_a_fork_child_without_a_channel_opens_it") {
        return;
    }
    let tmp = test_dir();
    let p = prog(tmp.path(), "fork_stacks");
    let ctl = ctl_dir(tmp.path());
    let mut run = memlens_run(
        tmp.path(),
        &tmp.path().join("idle.pb.gz"),
        &[],
        &[p.to_str().unwrap(), "idle"],
    )
    .env("MEMLENS_CTL_DIR", &ctl)
    .stdout(Stdio::piped())
    .spawn()
    .unwrap();
    let mut out = BufReader::new(run.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let child = line
        .trim()
        .strip_prefix("child ")
        .unwrap_or_else(|| panic!("{line}"));
    // A fork child opens its channel once it has lived 200 ms and allocates: this idle one has
    // lived twice that, and still has none.
    wait_for("the fork child to live 400 ms", 10, || {
        process_age(child.parse().unwrap()) >= Duration::from_millis(400)
    });
    let status = memlens()
        .env("MEMLENS_CTL_DIR", &ctl)
        .args(["ctl", child, "status"])
        .ok_stdout();
    assert!(
        status.starts_with(&format!("process {child} (")),
        "{status}"
    );
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(run.wait().unwrap().success(), "{rest}");
}

/// 5. Two containers (pid namespaces) sharing the socket directory, whose programs have the same
///    pid, each keep their own control socket, and both can be controlled from outside.
#[test]
fn control_sockets_are_unique_across_pid_namespaces() {
    // Creating pid namespaces needs root (CI runs as root).
    if !root_or_skip("control_sockets_are_unique_across_pid_namespaces") {
        return;
    }
    Command::new("unshare")
        .args(["-pf", "--mount-proc", "true"])
        .ok();
    let tmp = test_dir();
    let sockdir = ctl_dir(tmp.path());
    let mut kids = Vec::new();
    for i in 0..2 {
        let c = Command::new("unshare")
            .args(["-pf", "--mount-proc"])
            .arg(env!("CARGO_BIN_EXE_memlens"))
            .args(["run", "--inactive", "-o"])
            .arg(tmp.path().join(format!("ns{i}.pb.gz")))
            .args(["--", "sleep", "30"])
            .env("MEMLENS_CTL_DIR", &sockdir)
            // memlens is killed below: its run directory goes with the test's
            .env("MEMLENS_RUN_ROOT", tmp.path().join("runs"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        kids.push(c);
        // The first one binds before the second sweeps the directory.
        holds_within(10, || socks_in(&sockdir).len() > i);
    }
    let socks = socks_in(&sockdir);
    // Host pids of the two `sleep`s (children of the namespaces' memlens).
    let sleeps: Vec<i32> = kids
        .iter()
        .filter_map(|k| {
            let t0 = Instant::now();
            loop {
                let o = Command::new("pgrep")
                    .args(["-f", "^sleep 30$"])
                    .output()
                    .unwrap();
                let pids: Vec<i32> = stdout(&o)
                    .split_whitespace()
                    .filter_map(|p| p.parse().ok())
                    .filter(|&p| is_descendant(p, k.id() as i32))
                    .collect();
                if let Some(&p) = pids.first() {
                    return Some(p);
                }
                if t0.elapsed() > Duration::from_secs(60) {
                    return None;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
        .collect();
    let statuses: Vec<Output> = sleeps
        .iter()
        .map(|p| {
            memlens()
                .env("MEMLENS_CTL_DIR", &sockdir)
                .args(["ctl", &p.to_string(), "status"])
                .output()
                .unwrap()
        })
        .collect();
    for mut k in kids {
        k.kill().ok();
        k.wait().ok();
    }
    assert_eq!(socks.len(), 2, "sockets: {socks:?}");
    assert_ne!(socks[0], socks[1]);
    assert_eq!(sleeps.len(), 2);
    for (p, o) in sleeps.iter().zip(&statuses) {
        assert_ok(&format!("memlens ctl {p} status"), o);
    }
}

/// The control sockets in `dir`.
fn socks_in(dir: &Path) -> Vec<String> {
    names_in(dir)
        .into_iter()
        .filter(|n| n.ends_with(".sock"))
        .collect()
}

fn is_descendant(pid: i32, ancestor: i32) -> bool {
    let mut p = pid;
    for _ in 0..16 {
        if p == ancestor {
            return true;
        }
        let Ok(s) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            return false;
        };
        let after = &s[s.rfind(')').unwrap() + 2..];
        p = after.split(' ').nth(1).unwrap().parse().unwrap();
        if p <= 1 {
            return false;
        }
    }
    false
}

/// 6. The control protocol: a client trickling bytes does not hold the channel, an overlong line
///    is rejected (not executed cut short), and dumps are written only into the control directory.
#[test]
fn control_protocol_is_robust() {
    let tmp = test_dir();
    let sockdir = ctl_dir(tmp.path());
    let mut server = Command::new(env!("CARGO_BIN_EXE_memlens"))
        .args(["run", "-o"])
        .arg(tmp.path().join("s.pb.gz"))
        .args(["--", "sleep", "60"])
        .env("MEMLENS_CTL_DIR", &sockdir)
        // memlens is killed below: its run directory goes with the test's
        .env("MEMLENS_RUN_ROOT", tmp.path().join("runs"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the program's control socket", 10, || {
        !socks_in(&sockdir).is_empty()
    });
    let sock = sockdir.join(&socks_in(&sockdir)[0]);
    let pid: String = sock
        .file_name()
        .unwrap()
        .to_string_lossy()
        .split('.')
        .next()
        .unwrap()
        .to_string();
    let ask = |line: &[u8]| -> String {
        let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(line).ok();
        let mut r = String::new();
        s.read_to_string(&mut r).ok();
        r
    };
    // A client trickling a byte every 0.5 s: the channel must answer someone else meanwhile. The
    // order of events says so, not a time: the status reply comes while the trickling client is
    // still unanswered (a channel that served one client at a time would answer, or drop, the
    // trickler first).
    let mut trickler = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    trickler.write_all(b"s").unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let trickle = {
        let (mut s, stop) = (trickler.try_clone().unwrap(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // pacing the trickle on purpose: a byte every 0.5 s
                std::thread::sleep(Duration::from_millis(500));
                if s.write_all(b"s").is_err() {
                    break;
                }
            }
        })
    };
    let r = ask(b"status\n");
    assert!(r.starts_with("ok "), "{r}");
    trickler.set_nonblocking(true).unwrap();
    let mut b = [0u8; 256];
    let pending =
        matches!(trickler.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(
        pending,
        "the trickling client was answered or dropped before another client's status"
    );
    // the CLI too, behind a trickler
    let st = memlens()
        .env("MEMLENS_CTL_DIR", &sockdir)
        .args(["ctl", &pid, "status"])
        .out();
    assert_ok(&format!("memlens ctl {pid} status"), &st);
    // An overlong `stop …` is rejected; sampling stays on.
    let mut long = b"stop ".to_vec();
    long.extend(std::iter::repeat_n(b'x', 5000));
    long.push(b'\n');
    let r = ask(&long);
    assert!(r.starts_with("error request too long"), "{r}");
    let r = ask(b"status\n");
    assert!(r.contains(" active=1 "), "{r}");
    // Dumps go into the control directory only.
    let outside = tmp.path().join("outside.raw");
    let r = ask(format!("dump {}\n", outside.display()).as_bytes());
    assert!(r.starts_with("error dump"), "{r}");
    assert!(!outside.exists());
    let r = ask(b"dump ../escape.raw\n");
    assert!(r.starts_with("error dump"), "{r}");
    // The CLI still writes wherever its user asks (it copies the file out).
    memlens()
        .env("MEMLENS_CTL_DIR", &sockdir)
        .args(["ctl", &pid, "dump", "--raw", "-o"])
        .arg(&outside)
        .ok();
    assert!(std::fs::read_to_string(&outside)
        .unwrap()
        .starts_with("memlens-raw 1\n"));
    assert!(
        !names_in(&sockdir).iter().any(|n| n.ends_with(".raw")),
        "the dump was not removed from the control directory"
    );
    trickle.join().unwrap();
    server.kill().ok();
    server.wait().ok();
}

/// 7. Allocations on a ucontext coroutine's stack whose outermost frame pointer leads into an
///    unreadable page: every unwinder stops safely, and the stacks are still recorded.
#[test]
fn coroutine_stacks_are_walked_safely() {
    let tmp = test_dir();
    let p = prog(tmp.path(), "coroutine");
    let alone = Command::new(&p).ok();
    for u in ["fp", "dwarf", "libgcc", "libunwind"] {
        let out = tmp.path().join(format!("{u}.pb.gz"));
        let o = memlens_run(tmp.path(), &out, &["--unwinder", u], &[p.to_str().unwrap()]).exits(0);
        assert_eq!(stdout(&o), stdout(&alone), "{u}");
        let r = report_json(&out, &[]);
        assert!(
            r["meta"]["samples"].as_u64().unwrap() > 50,
            "{u}: {}",
            r["meta"]
        );
    }
}

/// 8. A program whose path holds a newline and bytes that are not UTF-8: its profile is written
///    and reads back, and the newline forges no record.
#[test]
fn odd_paths_do_not_break_dumps() {
    let tmp = test_dir();
    let p = prog(tmp.path(), "realloc_grow");
    use std::os::unix::ffi::OsStrExt;
    let odd = tmp
        .path()
        .join(std::ffi::OsStr::from_bytes(b"we\nird \xff\x5cx0a dir"));
    std::fs::create_dir(&odd).unwrap();
    let exe = odd.join(std::ffi::OsStr::from_bytes(b"prog\nstack 1 1 1 1 1 0 0x1"));
    std::fs::copy(&p, &exe).unwrap();
    let out = tmp.path().join("odd.pb.gz");
    let raw = tmp.path().join("raw");
    let o = memlens()
        .current_dir(tmp.path())
        .args(["run", "--keep-raw"])
        .arg(&raw)
        .arg("-o")
        .arg(&out)
        .arg("--")
        .arg(&exe)
        .arg("8")
        .ok();
    let e = stderr(&o);
    // The file cannot be opened under a name that is not UTF-8 (its frames show as addresses),
    // but the dump itself is read and converted.
    assert!(
        !e.contains("cannot convert") && !e.contains("left no profile"),
        "{e}"
    );
    assert!(e.contains("profile of pid"), "{e}");
    let r = report_json(&out, &[]);
    assert!(r["meta"]["samples"].as_u64().unwrap() > 0);
    let exe_name = r["meta"]["exe"].as_str().unwrap();
    assert!(exe_name.contains("prog\nstack 1"), "{exe_name:?}");
    // No forged stack: every stack has real frames.
    for n in names_in(&raw) {
        let text = String::from_utf8_lossy(&std::fs::read(raw.join(n)).unwrap()).into_owned();
        assert!(!text.contains("\nstack 1 1 1 1 1 0 0x1\n"), "forged record");
    }
}

/// The runtime's messages say what failed, on which value or path, and why (errno, its name): a
/// bad setting names the value, a control directory that is not one names it and what it is, an
/// exit dump that cannot be written names the file and the errno. One line each, and the program
/// runs as it would alone.
#[test]
fn runtime_messages_name_the_value_path_and_errno() {
    let tmp = test_dir();
    let notdir = tmp.path().join("not-a-dir");
    std::fs::write(&notdir, "").unwrap();
    let out = tmp.path().join("missing").join("p");
    let child = Command::new("/bin/true")
        .env("LD_PRELOAD", runtime_lib())
        .env("MEMLENS_INTERVAL", "12Q")
        .env("MEMLENS_UNWINDER", "frames")
        .env("MEMLENS_CTL_DIR", &notdir)
        .env("MEMLENS_OUT", &out)
        .env_remove("MEMLENS_RUN_DIR")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let want = [
        "memlens: MEMLENS_INTERVAL=12Q is not a size of at most 1 TiB; using 524288".to_string(),
        "memlens: MEMLENS_UNWINDER=frames: must be dwarf, fp, libgcc or libunwind; using the default"
            .to_string(),
        format!(
            "memlens: control socket disabled: its directory {} must be a directory of ours",
            notdir.display()
        ),
        format!(
            "memlens: cannot write the profile dump at exit ({}.{pid}.<n>.raw): No such file or \
             directory (errno 2 ENOENT)",
            out.display()
        ),
    ];
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), want.len(), "{err}");
    for (line, want) in lines.iter().zip(&want) {
        assert!(line.starts_with(want.as_str()), "{line}\nwanted: {want}…");
    }
    assert!(lines[2].contains("it is not a directory of uid "), "{err}");
}
