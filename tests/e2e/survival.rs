//! No profile lost, however a process ends (issue 21): a raw `exit_group` (what a cgo program does),
//! SIGKILL, SIGTERM without a handler, the OOM killer, a double-fork daemon, children that drop
//! privileges (with and without exec), nginx in daemon mode with its workers running as nobody, and an
//! address-space limit too small for the sampled-blocks range. Each process's profile must be there
//! and its totals must match the program's own count (runtime/tests/survive.c writes it into a shared
//! page after every allocation, so the count survives the same ends) within the sampling error.
use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Sampling interval of these tests: 64 MiB allocated per process gives ~1000 samples, so the
/// estimates' relative error is about 3% (allocated) and 4.5% (live, half of it).
const INTERVAL: &str = "64K";
const TOLERANCE: f64 = 0.15;

fn survive(dir: &Path) -> PathBuf {
    compile(
        &root().join("runtime/tests/survive.c"),
        dir,
        "survive",
        &["-fno-omit-frame-pointer"],
    )
}

/// The program's own count, per role (0: main, 1: child or daemon, 2: exec'd child).
#[derive(Debug, Clone, Copy)]
struct Slot {
    pid: u64,
    allocated: u64,
    live: u64,
    done: u64,
}

/// A fresh truth file (world-writable: a child running as nobody reopens nothing, but an exec'd
/// one maps it again through the descriptor it inherited).
fn truth_file(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let t = dir.join("truth");
    std::fs::write(&t, vec![0u8; 4096]).unwrap();
    std::fs::set_permissions(&t, std::fs::Permissions::from_mode(0o666)).unwrap();
    t
}

fn slot(truth: &Path, role: usize) -> Slot {
    let b = std::fs::read(truth).unwrap();
    let w = |i: usize| {
        u64::from_le_bytes(
            b[role * 32 + i * 8..role * 32 + i * 8 + 8]
                .try_into()
                .unwrap(),
        )
    };
    Slot {
        pid: w(0),
        allocated: w(1),
        live: w(2),
        done: w(3),
    }
}

/// `memlens run -o OUT --interval 64K [extra] -- survive MODE` with TRUTH set, in `dir`.
fn run_survive(dir: &Path, out: &Path, extra: &[&str], cmd: &[&str]) -> Command {
    let mut c = memlens();
    c.current_dir(dir)
        .env("TRUTH", dir.join("truth"))
        .args(["run", "--interval", INTERVAL, "-o"])
        .arg(out)
        .args(extra)
        .arg("--")
        .args(cmd);
    c
}

fn within(what: &str, estimate: f64, truth: u64, tol: f64) {
    let t = truth as f64;
    assert!(
        t > 0.0 && (estimate - t).abs() <= tol * t,
        "{what}: profile says {estimate:.0}, the program counted {truth} ({:+.1}%, tolerance ±{:.0}%)",
        (estimate / t - 1.0) * 100.0,
        tol * 100.0
    );
}

/// The profile's totals against the program's count.
#[track_caller]
fn matches_truth(profile: &Path, s: Slot, what: &str) {
    assert!(
        profile.exists(),
        "{what}: no profile {} (pid {})",
        profile.display(),
        s.pid
    );
    let r = report_json(profile, &[]);
    let total = |k: &str| r["totals"][k].as_f64().unwrap();
    within(
        &format!("{what}: alloc_space"),
        total("alloc_space"),
        s.allocated,
        TOLERANCE,
    );
    within(
        &format!("{what}: inuse_space"),
        total("inuse_space"),
        s.live,
        TOLERANCE,
    );
}

/// `<stem>.<pid>.pb.gz` beside the main profile `out`.
fn beside(out: &Path, pid: u64) -> PathBuf {
    let name = out.file_name().unwrap().to_string_lossy();
    let stem = name.strip_suffix(".pb.gz").unwrap();
    out.with_file_name(format!("{stem}.{pid}.pb.gz"))
}

/// The state letter of /proc/PID/stat; None when the process is gone.
fn state(pid: u64) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit(')').next()?.trim_start().chars().next()
}

fn gone(pid: u64) -> bool {
    state(pid).is_none_or(|c| c == 'Z' || c == 'X')
}

/// The run directory `memlens run` named for the processes still running (`memlens report DIR`).
fn run_dir_named(err: &str) -> PathBuf {
    let at = err
        .find("memlens report ")
        .unwrap_or_else(|| panic!("no 'memlens report DIR' in: {err}"));
    PathBuf::from(
        err[at + "memlens report ".len()..]
            .split_whitespace()
            .next()
            .unwrap(),
    )
}

// ---------- ends that skip the exit handlers ----------

/// The Go runtime (and any cgo program) ends with the exit_group system call: no atexit, no
/// destructor, no _exit.
#[test]
fn raw_exit_group_leaves_its_profile() {
    let dir = test_dir();
    let p = survive(&dir);
    truth_file(&dir);
    let out = dir.join("eg.pb.gz");
    let o = run_survive(&dir, &out, &[], &[p.to_str().unwrap(), "exit_group"]).exits(0);
    let err = stderr(&o);
    assert!(!err.contains("left no profile"), "{err}");
    matches_truth(&out, slot(&dir.join("truth"), 0), "exit_group");
}

/// SIGKILL and SIGTERM without a handler: memlens exits as a shell would (128+signal), says how
/// the program ended, and the profile is there.
#[test]
fn killed_by_a_signal_leaves_its_profile() {
    let dir = test_dir();
    let p = survive(&dir);
    for (mode, sig) in [("sigkill", 9), ("sigterm", 15)] {
        truth_file(&dir);
        let out = dir.join(format!("{mode}.pb.gz"));
        let o = run_survive(&dir, &out, &[], &[p.to_str().unwrap(), mode]).exits(128 + sig);
        let err = stderr(&o);
        let name = if sig == 9 { "SIGKILL" } else { "SIGTERM" };
        assert!(
            err.contains(name),
            "{mode}: how it ended is not said: {err}"
        );
        matches_truth(&out, slot(&dir.join("truth"), 0), mode);
    }
}

/// A memory cgroup the test creates (v2 memory.max, else v1 memory.limit_in_bytes), removed on drop.
struct MemCgroup {
    path: PathBuf,
}

impl MemCgroup {
    fn new(limit: u64) -> Option<MemCgroup> {
        let name = format!("memlens-oom-{}", std::process::id());
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        // (mount point, fstype, super options) of each cgroup mount
        let cg_mounts: Vec<(String, String, String)> = mounts
            .lines()
            .filter_map(|l| {
                let (pre, post) = l.split_once(" - ")?;
                let mnt = pre.split_whitespace().nth(4)?.to_string();
                let mut p = post.split_whitespace();
                let fstype = p.next()?.to_string();
                let opts = p.nth(1).unwrap_or("").to_string();
                fstype.starts_with("cgroup").then_some((mnt, fstype, opts))
            })
            .collect();
        let try_make = |base: PathBuf, file: &str| -> Option<MemCgroup> {
            let path = base.join(&name);
            std::fs::create_dir(&path).ok()?;
            let cg = MemCgroup { path };
            std::fs::write(cg.path.join(file), limit.to_string()).ok()?;
            let swap = if file == "memory.max" {
                "memory.swap.max"
            } else {
                "memory.memsw.limit_in_bytes"
            };
            std::fs::write(cg.path.join(swap), limit.to_string()).ok();
            Some(cg)
        };
        // cgroup v2: "0::/path"
        if let Some(rel) = own.lines().find_map(|l| l.strip_prefix("0::")) {
            for (mnt, fstype, _) in &cg_mounts {
                if fstype == "cgroup2" {
                    let base = PathBuf::from(format!("{mnt}{rel}"));
                    let ctl = std::fs::read_to_string(base.join("cgroup.subtree_control"))
                        .unwrap_or_default();
                    if ctl.split_whitespace().any(|c| c == "memory") {
                        if let Some(cg) = try_make(base, "memory.max") {
                            return Some(cg);
                        }
                    }
                }
            }
        }
        // cgroup v1: "N:memory:/path"
        let rel = own
            .lines()
            .find_map(|l| l.split_once(":memory:").map(|(_, r)| r.to_string()))?;
        let (mnt, _, _) = cg_mounts
            .iter()
            .find(|(_, t, o)| t == "cgroup" && o.split(',').any(|x| x == "memory"))?;
        try_make(
            PathBuf::from(format!("{mnt}{rel}")),
            "memory.limit_in_bytes",
        )
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            if std::fs::remove_dir(&self.path).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// The OOM killer: the program grows inside a 192 MiB memory cgroup until the kernel kills it
/// (SIGKILL). Where no cgroup can be created, an address-space limit makes it abort instead
/// (SIGABRT, also without exit handlers).
#[test]
fn oom_killed_program_leaves_its_profile() {
    let dir = test_dir();
    let p = survive(&dir);
    truth_file(&dir);
    let out = dir.join("oom.pb.gz");
    let limit: u64 = 192 << 20;
    let cg = if root_or_skip("a memory cgroup for the OOM killer") {
        MemCgroup::new(limit)
    } else {
        None
    };
    let script = match &cg {
        Some(cg) => format!(
            "echo $$ > {}/cgroup.procs && exec \"$@\"",
            cg.path.display()
        ),
        None => {
            eprintln!("no memory cgroup could be created here: the address-space limit instead");
            format!("ulimit -v {} && exec \"$@\"", (limit + (64 << 20)) >> 10)
        }
    };
    let o = run_survive(
        &dir,
        &out,
        &[],
        &["sh", "-c", &script, "sh", p.to_str().unwrap(), "oom"],
    )
    .out();
    let err = stderr(&o);
    let code = o.status.code();
    assert!(
        code == Some(128 + 9) || code == Some(128 + 6),
        "the program was not killed: {}",
        printed(&o)
    );
    let s = slot(&dir.join("truth"), 0);
    assert!(s.allocated > limit / 2, "{s:?}");
    matches_truth(&out, s, "oom");
    assert!(!err.contains("left no profile"), "{err}");
}

// ---------- daemons ----------

/// A double-fork daemon: `memlens run` returns with its launcher (the program's behaviour is
/// unchanged), names the daemon as still running and where its profile will be; once the daemon has
/// ended, `memlens report RUNDIR` writes its profile.
#[test]
fn double_fork_daemon_is_followed_and_collected_later() {
    let dir = test_dir();
    let p = survive(&dir);
    let truth = truth_file(&dir);
    let out = dir.join("daemon.pb.gz");
    let child = run_survive(&dir, &out, &[], &[p.to_str().unwrap(), "daemon"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = wait_deadline(child, 20, "memlens run of a daemon's launcher");
    assert_ok(&"memlens run -- survive daemon", &o);
    let err = stderr(&o);
    let d = slot(&truth, 1);
    assert!(
        d.pid != 0 && !gone(d.pid),
        "the daemon is not running: {d:?}"
    );
    assert!(
        err.contains(&format!("pid {} ", d.pid)) && err.contains("still running"),
        "the daemon is not named as still running: {err}"
    );
    let run_dir = run_dir_named(&err);
    std::fs::write(dir.join("truth.go"), "").unwrap();
    wait_for("the daemon to finish", 60, || gone(d.pid));
    let o = memlens()
        .current_dir(&*dir)
        .arg("report")
        .arg(&run_dir)
        .ok();
    let profile = beside(&out, d.pid);
    assert!(
        stderr(&o).contains(&profile.display().to_string()),
        "{}",
        printed(&o)
    );
    matches_truth(&profile, slot(&truth, 1), "daemon");
    assert!(!run_dir.exists(), "the run directory is left behind");
}

/// `--wait-all`: memlens waits for every process of the run (daemons too) and writes all profiles.
#[test]
fn wait_all_waits_for_the_daemon() {
    let dir = test_dir();
    let p = survive(&dir);
    let truth = truth_file(&dir);
    let out = dir.join("daemon.pb.gz");
    let child = run_survive(
        &dir,
        &out,
        &["--wait-all"],
        &[p.to_str().unwrap(), "daemon"],
    )
    .env("ALLOC_MIB", "32")
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    wait_for("the daemon to start", 20, || slot(&truth, 1).pid != 0);
    std::fs::write(dir.join("truth.go"), "").unwrap();
    let o = wait_deadline(child, 60, "memlens run --wait-all of a daemon");
    assert_ok(&"memlens run --wait-all -- survive daemon", &o);
    let d = slot(&truth, 1);
    assert_eq!(d.done, 1, "{d:?}");
    assert!(beside(&out, d.pid).exists(), "{}", printed(&o));
}

/// `memlens run` itself killed (SIGKILL) while its program runs: the program goes on, writes what it
/// sampled into the run directory, and `memlens report RUNDIR` writes its profile afterwards.
#[test]
fn a_killed_memlens_run_is_collected_later() {
    let dir = test_dir();
    let p = survive(&dir);
    let truth = truth_file(&dir);
    let out = dir.join("later.pb.gz");
    let mut run = run_survive(&dir, &out, &[], &[p.to_str().unwrap(), "later"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the program to start", 20, || slot(&truth, 0).pid != 0);
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    let root = PathBuf::from(format!("/dev/shm/memlens-{uid}"));
    let prefix = format!("survive.{}.", run.id());
    let find = || {
        std::fs::read_dir(&root)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|d| {
                d.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&prefix)
            })
    };
    // killed once it has written its plan (on a busy machine the program can be running before
    // memlens has: killed before, it leaves nothing to collect, by design)
    wait_for("memlens run's plan", 60, || {
        find().is_some_and(|d| d.join("run").exists())
    });
    run.kill().unwrap();
    run.wait().unwrap();
    std::fs::write(dir.join("truth.go"), "").unwrap();
    let s = slot(&truth, 0);
    wait_for("the program to finish", 60, || gone(s.pid));
    let run_dir =
        find().unwrap_or_else(|| panic!("no run directory {prefix}* in {}", root.display()));
    memlens().arg("report").arg(&run_dir).ok();
    matches_truth(&out, slot(&truth, 0), "after memlens run was killed");
    assert!(!run_dir.exists());
}

// ---------- privileges ----------

/// A child that drops to uid 65534 (as nginx and postgres workers do) keeps its profile, and so does
/// one that execs a program after dropping them.
#[test]
fn children_that_drop_privileges_keep_their_profiles() {
    if !root_or_skip("dropping privileges") {
        return;
    }
    let dir = test_dir();
    let p = survive(&dir);
    for (mode, role) in [("setuid", 1), ("setuid-exec", 2)] {
        let truth = truth_file(&dir);
        let out = dir.join(format!("{mode}.pb.gz"));
        let o = run_survive(&dir, &out, &[], &[p.to_str().unwrap(), mode]).exits(0);
        let err = stderr(&o);
        // (A root-owned /tmp/memlens-65534, which older runtimes left after `unshare -U`, costs
        // the exec'd child its control socket and says so; that is not what is checked here.)
        let profile_lines: Vec<&str> = err
            .lines()
            .filter(|l| !l.contains("control socket"))
            .collect();
        assert!(
            !profile_lines.iter().any(|l| l.contains("cannot")),
            "{mode}: {err}"
        );
        assert!(
            !err.contains("ld.so"),
            "{mode}: the exec'd child lost the runtime: {err}"
        );
        matches_truth(&out, slot(&truth, 0), &format!("{mode}: the parent"));
        let c = slot(&truth, role);
        matches_truth(
            &beside(&out, c.pid),
            c,
            &format!("{mode}: the child as uid 65534"),
        );
    }
}

/// A fork child copies its parent's stack table at its first sample, out of the parent's file; the
/// parent goes on allocating meanwhile. runtime/tests/fork_late.c holds 16 MiB (`kept`) at the fork,
/// then the parent frees half of it and allocates 32 MiB more (`parent_on`) before the child
/// allocates 8 MiB (`child_own`). The child's profile holds its own: all 16 MiB of `kept`, its 8 MiB,
/// nothing of `parent_on`. (The copy took the parent's live counts of the moment: `kept` read half,
/// and `parent_on` came along whenever the parent had listed it before the child's fork handler
/// ran: the +12..+22 % the privilege-dropping child read on a busy machine.) 64K: ±25 % is 4
/// standard errors for 16 MiB, ±35 % 3.9 for 8 MiB.
#[test]
fn a_fork_child_counts_its_own_live_blocks_not_its_parents_later_ones() {
    let dir = test_dir();
    let exe = compile(
        &root().join("runtime/tests/fork_late.c"),
        &dir,
        "fork_late",
        &["-fno-omit-frame-pointer"],
    );
    let out = dir.join("fl.pb.gz");
    let o = run_survive(&dir, &out, &[], &[exe.to_str().unwrap()]).exits(0);
    let child: u64 = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    let r = report_json(&beside(&out, child), &[]);
    let held = |f: &str| -> f64 {
        r["stacks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| {
                s["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x["function"] == f)
            })
            .map(|s| s["values"]["inuse_space"].as_f64().unwrap())
            .sum()
    };
    let mib = |x: f64| x / 1048576.0;
    assert_eq!(
        held("parent_on"),
        0.0,
        "the parent's blocks in the child: {r}"
    );
    let (kept, own) = (mib(held("kept")), mib(held("child_own")));
    assert!(
        (kept - 16.0).abs() <= 4.0,
        "kept: {kept:.2} MiB of 16 in the child"
    );
    assert!((own - 8.0).abs() <= 2.8, "child_own: {own:.2} MiB of 8");
}

/// nginx as a daemon (master_process on, workers as nobody): `memlens run` returns with nginx's
/// launcher and names the master and the workers as still running; after requests and
/// `nginx -s quit`, `memlens report RUNDIR` writes a profile for the master and every worker, and
/// nothing the daemon logged comes from memlens.
#[test]
fn nginx_daemon_and_its_workers_leave_profiles() {
    if !root_or_skip("nginx workers running as nobody") {
        return;
    }
    let dir = test_dir();
    let prefix = dir.join("nginx");
    std::fs::create_dir_all(prefix.join("logs")).unwrap();
    std::fs::create_dir_all(prefix.join("html")).unwrap();
    std::fs::write(prefix.join("html/index.html"), "x".repeat(100_000)).unwrap();
    let port = free_port();
    let conf = prefix.join("nginx.conf");
    std::fs::write(
        &conf,
        format!(
            "daemon on; master_process on; worker_processes 2; user nobody nogroup;\n\
             pid {p}/nginx.pid; error_log {p}/logs/error.log info;\n\
             events {{ worker_connections 64; }}\n\
             http {{ access_log {p}/logs/access.log; client_body_temp_path {p}/tmp;\n\
               server {{ listen 127.0.0.1:{port}; root {p}/html; }} }}\n",
            p = prefix.display()
        ),
    )
    .unwrap();
    // the workers (nobody) read html/ and write the logs; the test directory is root's 0700
    Command::new("chmod").arg("755").arg(&*dir).ok();
    Command::new("chmod")
        .arg("-R")
        .arg("a+rwX")
        .arg(&prefix)
        .ok();
    let out = dir.join("nginx.pb.gz");
    // A failed assertion must not leave nginx running: stopped on the way out whatever happens.
    let _stop = OnDrop(|| {
        Command::new("nginx")
            .arg("-p")
            .arg(&prefix)
            .arg("-c")
            .arg(&conf)
            .args(["-s", "stop"])
            .stderr(Stdio::null())
            .status()
            .ok();
    });
    let o = memlens()
        .current_dir(&*dir)
        .args(["run", "--interval", "4K", "-o"])
        .arg(&out)
        .args(["--", "nginx", "-p"])
        .arg(&prefix)
        .arg("-c")
        .arg(&conf)
        .ok();
    let err = stderr(&o);
    let master: u64 = wait_pid_file(&prefix.join("nginx.pid"));
    let run_dir = run_dir_named(&err);
    // What `memlens report RUNDIR` says of the run's processes (stderr).
    let report_run = || {
        stderr(
            &memlens()
                .current_dir(&*dir)
                .arg("report")
                .arg(&run_dir)
                .ok(),
        )
    };
    assert!(
        err.contains(&format!("pid {master} ")),
        "master not named: {err}"
    );
    for _ in 0..50 {
        Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                &format!("http://127.0.0.1:{port}/"),
            ])
            .ok();
    }
    let workers: Vec<u64> = children_of(master);
    assert_eq!(workers.len(), 2, "workers of {master}: {workers:?}");
    for w in &workers {
        let st = std::fs::read_to_string(format!("/proc/{w}/status")).unwrap();
        assert!(
            st.lines()
                .any(|l| l.starts_with("Uid:") && l.contains("65534")),
            "worker {w} does not run as nobody"
        );
    }
    // Collected while they run: each is named as running (their state files say they live).
    let e = report_run();
    for pid in std::iter::once(master).chain(workers.iter().copied()) {
        assert!(
            e.contains(&format!("pid {pid} (nginx) is still running")),
            "{pid}: {e}"
        );
    }
    assert!(
        !e.contains("written to"),
        "a running process was collected: {e}"
    );
    Command::new("nginx")
        .arg("-p")
        .arg(&prefix)
        .arg("-c")
        .arg(&conf)
        .args(["-s", "quit"])
        .ok();
    wait_for("nginx to quit", 30, || {
        gone(master) && workers.iter().all(|&w| gone(w))
    });
    let e = report_run();
    for pid in std::iter::once(master).chain(workers.iter().copied()) {
        let f = beside(&out, pid);
        assert!(f.exists(), "no profile of nginx pid {pid}: {e}");
        let r = report_json(&f, &[]);
        // The workers served the requests: they sampled allocations of their own. The master (a
        // fork child of the launcher) is collected too, but what its profile holds depends on the
        // draws: it allocates little after the fork, and on `quit` it frees the pools it inherited,
        // so an empty profile is a true one (as it was in CI once).
        let t = &r["totals"];
        let own = r["meta"]["samples"].as_u64().unwrap();
        if pid != master {
            assert!(own > 0, "worker {pid} sampled nothing: {t}");
        }
    }
    let log = std::fs::read_to_string(prefix.join("logs/error.log")).unwrap_or_default();
    assert!(
        !log.contains("memlens"),
        "memlens wrote into nginx's log: {log}"
    );
}

/// Runs its closure when dropped (also when a failed assertion unwinds).
struct OnDrop<F: FnMut()>(F);

impl<F: FnMut()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}

fn wait_pid_file(f: &Path) -> u64 {
    let mut pid = 0;
    wait_for("nginx's pid file", 20, || {
        pid = std::fs::read_to_string(f)
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        pid != 0
    });
    pid
}

/// Pids whose parent is `pid`.
fn children_of(pid: u64) -> Vec<u64> {
    let mut v = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u64>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let ppid: u64 = stat
            .rsplit(')')
            .next()
            .and_then(|r| r.split_whitespace().nth(1)?.parse().ok())
            .unwrap_or(0);
        if ppid == pid {
            v.push(p);
        }
    }
    v.sort_unstable();
    v
}

// ---------- an address-space limit ----------

/// Under `ulimit -v` with 1 MiB blocks, allocating until malloc fails: the program gets within the
/// documented reserve of what it gets alone, and the profile is written (sampling may lose live
/// tracking, never stop).
#[test]
fn address_space_limit_degrades_sampling_instead_of_stopping() {
    let dir = test_dir();
    let p = survive(&dir);
    truth_file(&dir);
    let limit_kib = 400 << 10;
    let out = dir.join("ulimit.pb.gz");
    let grab = |under: bool| -> (u64, Output) {
        let script = format!("ulimit -v {limit_kib} && exec \"$@\"");
        let mut c = if under {
            let mut c = memlens();
            c.args(["run", "-o"]).arg(&out).arg("--");
            c
        } else {
            Command::new("env")
        };
        c.current_dir(&*dir).env("TRUTH", dir.join("truth")).args([
            "sh",
            "-c",
            &script,
            "sh",
            p.to_str().unwrap(),
            "grab",
        ]);
        let o = c.out();
        let got: u64 = stdout(&o)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{}", printed(&o)));
        (got, o)
    };
    let (alone, _) = grab(false);
    let (under, o) = grab(true);
    let err = stderr(&o);
    assert!(!err.contains("profiling stopped"), "{err}");
    assert!(out.exists(), "no profile: {err}");
    let r = report_json(&out, &[]);
    within(
        "alloc_space under the limit",
        r["totals"]["alloc_space"].as_f64().unwrap(),
        under << 20,
        0.25,
    );
    // docs/survival.md: what the runtime may take of the program's address space under a limit L:
    // its stack table (L/64) and 8 MiB (its code, tables, the control thread's stack, the range's
    // boot arena and growth step)
    let reserve_mib = (limit_kib >> 10) / 64 + 8;
    assert!(
        under + reserve_mib >= alone,
        "the program got {under} MiB under memlens, {alone} MiB alone (reserve {reserve_mib} MiB)"
    );
}

// ---------- postgres ----------

/// postgres's binaries (initdb, postgres, pg_ctl) from `pg_config --bindir`.
fn pg_bin(name: &str) -> PathBuf {
    let dir = Command::new("pg_config")
        .arg("--bindir")
        .ok_stdout()
        .trim()
        .to_string();
    PathBuf::from(dir).join(name)
}

/// `runuser -u postgres -- CMD…` (postgres refuses to run as root).
fn as_postgres(cmd: &Path) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--"]).arg(cmd);
    c
}

fn pg_ready(sock: &Path, port: u16) -> bool {
    Command::new("pg_isready")
        .arg("-h")
        .arg(sock)
        .args(["-p", &port.to_string(), "-q"])
        .status()
        .is_ok_and(|s| s.success())
}

fn psql(sock: &Path, port: u16, sql: &str) -> String {
    Command::new("psql")
        .arg("-h")
        .arg(sock)
        .args(["-p", &port.to_string(), "-U", "postgres", "-At", "-c", sql])
        .ok_stdout()
}

fn pgbench(sock: &Path, port: u16, args: &[&str]) -> Command {
    let mut c = Command::new("pgbench");
    c.arg("-h")
        .arg(sock)
        .args(["-p", &port.to_string(), "-U", "postgres"])
        .args(args)
        .arg("postgres");
    c
}

/// postgres under `memlens run`, as its users run it: the postmaster in the foreground, started as
/// the postgres user by root (`runuser`: a privilege drop and an exec), `pgbench -i` and a short
/// `pgbench -c 4`, then `pg_ctl stop`: the postmaster and its children (checkpointer, writers,
/// launchers, one backend per connection, all forked) each have a profile. Then `memlens attach` to
/// a postgres started without memlens, to its idle postmaster (in select()/epoll), its background
/// writer and a backend serving pgbench: each attach goes through (they were all refused: a loader
/// address on their stacks) and writes a profile.
#[test]
fn postgres_under_run_and_attach() {
    if !root_or_skip("postgres runs as its own user") {
        return;
    }
    let dir = test_dir();
    Command::new("chmod").arg("755").arg(&*dir).ok();
    let data = dir.join("data");
    let sock = dir.join("sock");
    std::fs::create_dir_all(&sock).unwrap();
    Command::new("chown")
        .arg("postgres:postgres")
        .arg(&sock)
        .arg(&*dir)
        .ok();
    as_postgres(&pg_bin("initdb"))
        .arg("-D")
        .arg(&data)
        .args(["-A", "trust", "-U", "postgres", "--no-sync"])
        .stdout(Stdio::null())
        .ok();
    let postgres = |port: u16| -> Vec<String> {
        vec![
            "-D".into(),
            data.display().to_string(),
            "-p".into(),
            port.to_string(),
            "-k".into(),
            sock.display().to_string(),
            "-c".into(),
            "fsync=off".into(),
        ]
    };
    let stop = || {
        as_postgres(&pg_bin("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .args(["stop", "-m", "fast", "-w"])
            .stdout(Stdio::null())
            .ok();
    };
    // A failed assertion must not leave a postmaster running.
    let _stop = OnDrop(|| {
        as_postgres(&pg_bin("pg_ctl"))
            .arg("-D")
            .arg(&data)
            .args(["stop", "-m", "immediate"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok();
    });

    // 1. under memlens run
    let port = free_port();
    let out = dir.join("pg.pb.gz");
    let run = memlens()
        .current_dir(&*dir)
        .args(["run", "--interval", "64K", "-o"])
        .arg(&out)
        .args(["--", "runuser", "-u", "postgres", "--"])
        .arg(pg_bin("postgres"))
        .args(postgres(port))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("postgres under memlens to accept connections", 30, || {
        pg_ready(&sock, port)
    });
    pgbench(&sock, port, &["-i", "-s", "1", "-q"])
        .stderr(Stdio::null())
        .ok();
    pgbench(&sock, port, &["-c", "4", "-T", "3"])
        .stdout(Stdio::null())
        .ok();
    // (runuser, memlens run's program, waits for the postmaster in another process)
    let postmaster: u64 = std::fs::read_to_string(data.join("postmaster.pid"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    stop();
    let o = wait_deadline(run, 60, "memlens run of postgres");
    let err = stderr(&o);
    assert!(o.status.success(), "{}", printed(&o));
    let profiles = err.matches("memlens: profile of pid").count();
    // postmaster, checkpointer, background writer, walwriter, autovacuum launcher, the logical
    // replication launcher, and the backends of pgbench's connections
    assert!(profiles >= 6, "{profiles} profiles: {err}");
    let r = report_json(&beside(&out, postmaster), &[]);
    assert!(r["meta"]["samples"].as_u64().unwrap() > 0, "{}", r["meta"]);
    assert!(!err.contains("cannot"), "{err}");

    // 2. memlens attach to a postgres started without it
    let port = free_port();
    let mut plain = as_postgres(&pg_bin("postgres"))
        .args(postgres(port))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("postgres to accept connections", 30, || {
        pg_ready(&sock, port)
    });
    let mut load = pgbench(&sock, port, &["-c", "2", "-T", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let query = |what: &str| {
        psql(
            &sock,
            port,
            &format!(
                "select pid from pg_stat_activity where backend_type = '{what}' \
                 and pid <> pg_backend_pid() limit 1"
            ),
        )
        .trim()
        .to_string()
    };
    wait_for("pgbench's backends", 20, || {
        !query("client backend").is_empty()
    });
    // the postmaster itself (runuser, which started it, waits for it in another process)
    let postmaster = std::fs::read_to_string(data.join("postmaster.pid"))
        .unwrap()
        .lines()
        .next()
        .unwrap()
        .trim()
        .to_string();
    for what in ["client backend", "background writer", "postmaster"] {
        let pid = if what == "postmaster" {
            postmaster.clone()
        } else {
            query(what)
        };
        let f = dir.join(format!("attach-{pid}.pb.gz"));
        let o = memlens()
            .args(["attach", &pid, "--interval", "4K", "--for", "1s", "-o"])
            .arg(&f)
            .out();
        assert!(o.status.success(), "attach to the {what}: {}", printed(&o));
        assert!(f.exists(), "{what}: {}", printed(&o));
    }
    load.kill().ok();
    load.wait().ok();
    stop();
    plain.wait().ok();
}
