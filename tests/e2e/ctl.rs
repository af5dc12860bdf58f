//! Profiling a running process: `memlens run --inactive`, `memlens ctl`, `--start-on-growth`,
//! `--dump-every`, the C API, and the control channel's errors and ownership check.
//! The program under test is runtime/tests/ctl_leaker.c (two threads allocating steadily, a leak on
//! demand) run under the real runtime.
use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn leaker(dir: &Path) -> PathBuf {
    compile(
        &root().join("runtime/tests/ctl_leaker.c"),
        dir,
        "ctl_leaker",
        &[],
    )
}

/// A `memlens run … ctl_leaker DIR` in the background; stopped (DIR/stop) and reaped on drop.
struct Running {
    child: Option<Child>,
    dir: PathBuf,
    pid: i32,
}

impl Running {
    fn start(dir: &Path, run_args: &[&str], prog_args: &[&str]) -> Running {
        let prog = leaker(dir);
        let child = memlens()
            .arg("run")
            .args(run_args)
            .arg("--")
            .arg(&prog)
            .arg(dir)
            .args(prog_args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start memlens run");
        let mut r = Running {
            child: Some(child),
            dir: dir.to_path_buf(),
            pid: 0,
        };
        wait_for("ctl_leaker to start", 20, || {
            if let Ok(s) = std::fs::read_to_string(dir.join("pid")) {
                r.pid = s.trim().parse().unwrap();
            }
            r.pid != 0
        });
        // The control socket appears during the runtime's start-up: wait until it answers.
        wait_for("the control socket to answer", 20, || {
            ctl(r.pid, &["status"]).status.success()
        });
        r
    }

    /// Stop the program and return (memlens run's exit status, its stderr).
    fn finish(mut self) -> (i32, String) {
        std::fs::write(self.dir.join("stop"), "").unwrap();
        let out = self.child.take().unwrap().wait_with_output().unwrap();
        (out.status.code().unwrap_or(-1), stderr(&out))
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            stop_via_file(c, &self.dir);
        }
    }
}

fn ctl(pid: i32, args: &[&str]) -> std::process::Output {
    let p = pid.to_string();
    let mut a = vec!["ctl", p.as_str()];
    a.extend_from_slice(args);
    run(&a)
}

fn ctl_ok(pid: i32, args: &[&str]) -> String {
    memlens()
        .args(["ctl", &pid.to_string()])
        .args(args)
        .ok_stdout()
}

/// `samples` of a raw dump's header and the sum of its per-stack sample counts, read by memlens's
/// own strict reader (a dump that is not one, or is cut short, fails the test).
fn raw_samples(path: &Path) -> (u64, u64) {
    let d = memlens_profile::read_raw(path).unwrap_or_else(|e| panic!("{e:#}"));
    (d.meta.samples, d.stacks.iter().map(|s| s.samples).sum())
}

/// The first of `names` to appear in `text` (a report or diff listing, largest first).
fn first_of<'a>(text: &str, names: &[&'a str]) -> Option<&'a str> {
    names
        .iter()
        .filter_map(|n| text.find(n).map(|i| (i, *n)))
        .min()
        .map(|(_, n)| n)
}

/// One request line on the control socket of `pid`, its reply (the protocol itself: no process
/// to start, so the cycles below cost the program's lifetime little on a busy machine).
fn ask(pid: i32, line: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket_of(pid)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    s.write_all(format!("{line}\n").as_bytes()).unwrap();
    let mut r = String::new();
    s.read_to_string(&mut r).ok();
    r
}

/// Cycle `i` of the live-control test: start, dump, stop; the dump's path. One cycle in ten goes
/// through `memlens ctl` (a pprof dump, after a raw one whose totals must equal the sum of its
/// stacks, taken while both threads allocate); the others through the control protocol itself.
fn cycle(pid: i32, dir: &Path, i: usize) -> PathBuf {
    if i.is_multiple_of(10) {
        let s = ctl_ok(pid, &["start", "--interval", "64K"]);
        assert!(s.contains("sampling started"), "{s}");
        let raw = dir.join(format!("cycle-{i}.raw"));
        ctl_ok(pid, &["dump", "--raw", "-o", raw.to_str().unwrap()]);
        let (header, sum) = raw_samples(&raw);
        assert_eq!(
            header,
            sum,
            "{}: header samples vs sum of stacks",
            raw.display()
        );
        let pb = dir.join(format!("cycle-{i}.pb.gz"));
        ctl_ok(pid, &["dump", "-o", pb.to_str().unwrap()]);
        ctl_ok(pid, &["stop"]);
        return pb;
    }
    let s = ask(pid, "start 65536");
    assert!(s.starts_with("ok"), "start: {s}");
    // the runtime writes a dump into its control directory, under a name given
    let name = format!("{pid}.dump-cycle-{i}.raw");
    let s = ask(pid, &format!("dump {name}"));
    assert!(s.starts_with("ok"), "dump: {s}");
    let raw = dir.join(format!("cycle-{i}.raw"));
    let written = socket_of(pid).with_file_name(&name);
    std::fs::copy(&written, &raw).unwrap();
    std::fs::remove_file(&written).unwrap();
    let s = ask(pid, "stop");
    assert!(s.starts_with("ok"), "stop: {s}");
    raw
}

/// Wait until the sample count of `pid`, inactive, has settled: threads notice the stop within
/// ~1 MiB of their own allocation (about 250 ms here, longer on a loaded machine). A runtime that
/// kept sampling would never settle.
fn settle(pid: i32) {
    let samples = || status_samples(&ctl_ok(pid, &["status"]));
    let t0 = Instant::now();
    let mut last = samples();
    loop {
        // the window over which an unchanged count means "settled": a time, on purpose
        std::thread::sleep(Duration::from_millis(300));
        let now = samples();
        if now == last {
            break;
        }
        last = now;
        // a hang guard, not a speed: threads notice the stop within their next MiB
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "samples kept growing for 2 minutes while inactive"
        );
    }
}

/// Live control: a program loaded inactive survives 100 start → dump → stop cycles while two
/// threads allocate; every dump reads back; dumps are consistent; once stopped, dumps taken while
/// the threads keep allocating add nothing. (ctl_leaker leaves after 120 s: the cycles go through
/// the control protocol, one in ten through `memlens ctl`, and the dumps are read back once the
/// program is done.)
#[test]
fn inactive_program_survives_100_cycles_and_adds_nothing_when_stopped() {
    let tmp = test_dir();
    let dir = tmp.path();
    let out = dir.join("run.pb.gz");
    let r = Running::start(dir, &["--inactive", "-o", out.to_str().unwrap()], &[]);
    let pid = r.pid;
    let st = ctl_ok(pid, &["status"]);
    assert!(st.contains("inactive"), "{st}");
    let dumps: Vec<PathBuf> = (0..100).map(|i| cycle(pid, dir, i)).collect();
    let st = ctl_ok(pid, &["status"]);
    assert!(st.contains("inactive"), "{st}");

    settle(pid);
    let (a, b) = (dir.join("idle-a.raw"), dir.join("idle-b.raw"));
    ctl_ok(pid, &["dump", "--raw", "-o", a.to_str().unwrap()]);
    // on purpose: 400 ms of the threads allocating while inactive, which must add no sample
    std::thread::sleep(Duration::from_millis(400));
    ctl_ok(pid, &["dump", "--raw", "-o", b.to_str().unwrap()]);
    let (sa, _) = raw_samples(&a);
    let (sb, _) = raw_samples(&b);
    assert!(sa > 0, "the cycles recorded nothing");
    assert_eq!(sa, sb, "samples grew while inactive");

    let (code, err) = r.finish();
    assert_eq!(code, 0, "memlens run: {err}");

    // Every dump reads back with our reader; a sample of the pprof ones with the real go tool.
    for (i, d) in dumps.iter().enumerate() {
        memlens().args(["report", d.to_str().unwrap()]).ok();
        if i % 40 == 0 {
            go_pprof_top(d, Some("alloc_space"), dir);
        }
    }
}

/// The diff of the dumps around the leak phase by `index`: leak_site comes first and holds most of
/// the growth.
fn leak_dominates(base: &Path, new: &Path, index: &str) {
    let diff = |more: &[&str]| {
        memlens()
            .args(["diff", base.to_str().unwrap(), new.to_str().unwrap()])
            .args(["--sample-index", index])
            .args(more)
            .ok()
    };
    let d = stdout(&diff(&[]));
    assert_eq!(
        first_of(&d, &["leak_site", "steady_site"]),
        Some("leak_site"),
        "diff by {index}:\n{d}"
    );
    // Dominates: the leaking function holds most of the growth.
    let j: serde_json::Value = serde_json::from_slice(&diff(&["--format", "json"]).stdout).unwrap();
    let total = j["delta"].as_f64().unwrap();
    let leak = j["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"] == "leak_site")
        .and_then(|f| f["flat_delta"].as_f64())
        .unwrap_or(0.0);
    assert!(
        total > 0.0 && leak / total > 0.6,
        "leak_site has {leak} of {total} ({index})"
    );
}

/// A program loaded inactive, sampling started by `memlens ctl`: the leaking site dominates the
/// diff of the dumps around its leak phase, by live and by allocated bytes.
#[test]
fn diff_of_live_dumps_finds_the_leak() {
    let tmp = test_dir();
    let dir = tmp.path();
    let out = dir.join("run.pb.gz");
    let r = Running::start(dir, &["--inactive", "-o", out.to_str().unwrap()], &[]);
    let pid = r.pid;
    let samples = || status_samples(&ctl_ok(pid, &["status"]));
    ctl_ok(pid, &["reset"]);
    ctl_ok(pid, &["start"]);
    let at_start = samples();
    wait_for("samples after start", 20, || samples() > at_start);
    let base = dir.join("base.pb.gz");
    let new = dir.join("new.pb.gz");
    ctl_ok(pid, &["dump", "-o", base.to_str().unwrap()]);
    // Leak until the sampled live heap holds 64 MiB more than at the base dump (the other threads
    // keep a ring of small blocks: the live heap grows only by what leak_site leaks).
    let inuse = || {
        let t = memlens_target::Target::find(pid).unwrap();
        t.status().unwrap().inuse_bytes.unwrap()
    };
    let before = inuse();
    std::fs::write(dir.join("leak"), "").unwrap();
    wait_for("leak_site to leak 64 MiB under sampling", 30, || {
        inuse() >= before + (64 << 20)
    });
    std::fs::remove_file(dir.join("leak")).unwrap();
    ctl_ok(pid, &["dump", "-o", new.to_str().unwrap()]);
    ctl_ok(pid, &["stop"]);
    go_pprof_top(&new, Some("inuse_space"), dir);
    for index in ["inuse_space", "alloc_space"] {
        leak_dominates(&base, &new, index);
    }
    let (code, err) = r.finish();
    assert_eq!(code, 0, "memlens run: {err}");
}

/// Unattended profiling: --start-on-growth starts sampling in the growth phase and the profile it
/// writes after --profile-for names the growing site; --dump-every writes numbered dumps.
#[test]
fn start_on_growth_catches_the_growing_site() {
    let tmp = test_dir();
    let dir = tmp.path();
    let out = dir.join("g.pb.gz");
    let r = Running::start(
        dir,
        &[
            "--start-on-growth",
            "40M/1s",
            "--profile-for",
            "1s",
            "--dump-every",
            "1s",
            "-o",
            out.to_str().unwrap(),
        ],
        &["growth"],
    );
    let st = ctl_ok(r.pid, &["status"]);
    assert!(
        st.contains("inactive"),
        "--start-on-growth must load the runtime inactive: {st}"
    );
    // Growth runs from 1 s to 5 s of the program's life; the growth profile is written ~1 s after
    // the start.
    let growth = dir.join("g.growth.pb.gz");
    let periodic = [dir.join("g.1.pb.gz"), dir.join("g.2.pb.gz")];
    wait_for("the growth profile and two periodic dumps", 15, || {
        growth.exists() && periodic.iter().all(|p| p.exists())
    });
    let (code, err) = r.finish();
    assert_eq!(code, 0, "memlens run: {err}");
    assert!(err.contains("sampling started"), "{err}");
    assert!(growth.exists(), "no growth profile; stderr: {err}");
    let rep = memlens()
        .args([
            "report",
            growth.to_str().unwrap(),
            "--sample-index",
            "alloc_space",
        ])
        .ok();
    let text = stdout(&rep);
    assert_eq!(
        first_of(&text, &["leak_site", "steady_site"]),
        Some("leak_site"),
        "{text}"
    );
    go_pprof_top(&growth, Some("alloc_space"), dir);
}

/// The C API: harmless without the runtime, working under it.
#[test]
fn c_api_with_and_without_runtime() {
    let tmp = test_dir();
    let dir = tmp.path();
    let inc = format!("-I{}", root().join("runtime/include").display());
    let prog = compile(
        &root().join("runtime/tests/ctl_api.c"),
        dir,
        "ctl_api",
        &[inc.as_str()],
    );
    let alone = Command::new(&prog).ok_stdout();
    assert!(alone.contains("runtime: absent"), "{alone}");

    let raw = dir.join("api.raw");
    let text = memlens()
        .args([
            "run",
            "--inactive",
            "-o",
            dir.join("api.pb.gz").to_str().unwrap(),
            "--",
            prog.to_str().unwrap(),
            raw.to_str().unwrap(),
        ])
        .ok_stdout();
    let val = |k: &str| -> String {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k} ")))
            .unwrap_or_else(|| panic!("no {k} in:\n{text}"))
            .to_string()
    };
    assert_eq!(val("runtime:"), "present");
    assert_eq!(val("before.active"), "0");
    assert_eq!(val("start.was"), "0");
    assert_eq!(val("running.active"), "1");
    assert_eq!(val("running.interval"), "65536");
    assert!(val("running.samples").parse::<u64>().unwrap() > 0, "{text}");
    assert_eq!(val("dump"), "0");
    assert_eq!(
        val("dump_again"),
        "-17",
        "an existing dump file must not be overwritten"
    );
    assert_eq!(val("stop.was"), "1");
    assert_eq!(val("status_null"), "-22");
    assert_eq!(val("after.active"), "0");
    let (h, sum) = raw_samples(&raw);
    assert!(h > 0 && h == sum);
}

/// ctl on a dead PID, a process without the runtime, a bad PID: one-line errors.
#[test]
fn ctl_errors_are_one_line() {
    let mut c = Command::new("true").spawn().unwrap();
    let dead = c.id() as i32;
    c.wait().unwrap();
    let o = memlens()
        .args(["ctl", &dead.to_string(), "status"])
        .error(1);
    assert!(stderr(&o).contains("not running"), "{}", stderr(&o));

    let mut sleeper = Command::new("sleep").arg("30").spawn().unwrap();
    let o = ctl(sleeper.id() as i32, &["start"]);
    sleeper.kill().ok();
    sleeper.wait().ok();
    assert_one_line_error(&o);
    assert_eq!(o.status.code(), Some(1), "{}", printed(&o));
    assert!(
        stderr(&o).contains("is not running under memlens (no control socket"),
        "{}",
        stderr(&o)
    );

    memlens().args(["ctl", "abc", "status"]).error(2);
    memlens()
        .args(["ctl", "1", "start", "--interval", "lots"])
        .exits(2);
}

/// Only the owner (or root) controls a process: another user gets a permission error from the CLI,
/// cannot reach the socket, and is refused by the runtime's SO_PEERCRED check even when the socket's
/// file permissions would let them in.
#[test]
fn another_user_cannot_control_the_process() {
    // Acting as another user needs root (CI runs as root).
    if !root_or_skip("another_user_cannot_control_the_process") {
        return;
    }
    let tmp = test_dir();
    let dir = tmp.path();
    // A socket directory the other user can traverse, so that the last line of defence is tested.
    let sockdir = dir.join("sockets");
    std::fs::create_dir(&sockdir).unwrap();
    set_mode(dir, 0o755);
    set_mode(&sockdir, 0o755);
    let prog = leaker(dir);
    let mut child = Command::new(memlens_path())
        .args(["run", "--inactive", "-o"])
        .arg(dir.join("o.pb.gz"))
        .arg("--")
        .arg(&prog)
        .arg(dir)
        .env("MEMLENS_CTL_DIR", &sockdir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (mut pid, mut sock) = (String::new(), PathBuf::new());
    wait_for("the control socket", 20, || {
        let Ok(p) = std::fs::read_to_string(dir.join("pid")) else {
            return false;
        };
        pid = p.trim().to_string();
        // `<pid>.<pidns>.sock`
        let found = std::fs::read_dir(&sockdir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|s| {
                let n = s.file_name().unwrap().to_string_lossy().into_owned();
                n.starts_with(&format!("{pid}.")) && n.ends_with(".sock")
            });
        found.map(|s| sock = s).is_some()
    });
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .args(args)
            .output()
            .expect("cannot run setpriv")
    };
    // 1. The CLI refuses from /proc ownership.
    let o = as_nobody(&[memlens_path().to_str().unwrap(), "ctl", &pid, "status"]);
    let e = stderr(&o);
    // 2. The socket file itself (0600) refuses the connection.
    let py = format!(
        "import socket\ns=socket.socket(socket.AF_UNIX)\ntry:\n  s.connect({:?})\nexcept OSError as e:\n  print('refused', e.errno)\n  raise SystemExit\ntry:\n  s.sendall(b'status\\n')\nexcept OSError:\n  pass\nprint(s.recv(4096).decode())\n",
        sock.to_str().unwrap()
    );
    let o2 = as_nobody(&["/usr/bin/python3", "-c", &py]);
    // 3. With the file opened up, the runtime's peer-credential check still refuses.
    set_mode(&sock, 0o777);
    let o3 = as_nobody(&["/usr/bin/python3", "-c", &py]);
    std::fs::write(dir.join("stop"), "").unwrap();
    child.wait().unwrap();

    assert_one_line_error(&o);
    assert!(
        e.contains(&format!(
            "permission denied: process {pid} belongs to uid 0"
        )),
        "{e}"
    );
    assert!(
        stdout(&o2).starts_with("refused 13"),
        "{}{}",
        stdout(&o2),
        stderr(&o2)
    );
    assert!(
        stdout(&o3).starts_with("error permission denied"),
        "{}{}",
        stdout(&o3),
        stderr(&o3)
    );
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// The control socket of `pid` (in the default control directory).
fn socket_of(pid: i32) -> PathBuf {
    let dir = PathBuf::from(format!("/tmp/memlens-{}", unsafe { libc::geteuid() }));
    std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with(&format!("{pid}.")) && n.ends_with(".sock")
        })
        .unwrap_or_else(|| panic!("no control socket of {pid} in {}", dir.display()))
}

/// Clients that connect and say nothing delay nobody: one idle connection used to hold every other
/// client ~2 s, nine filled the backlog (18-20 s). Judged by the order of events, not by a time:
/// another client's `status` is answered while every idle connection is still unanswered (a
/// channel serving one client at a time would answer them, at their 2 s timeout, first).
#[test]
fn idle_connections_delay_no_other_client() {
    use std::io::{Read, Write};
    let dir = test_dir();
    let out = dir.join("idle.pb.gz");
    let r = Running::start(&dir, &["-o", out.to_str().unwrap()], &[]);
    let sock = socket_of(r.pid);
    let mut idle = Vec::new();
    for n in [1, 20] {
        idle = (0..n)
            .map(|_| std::os::unix::net::UnixStream::connect(&sock).unwrap())
            .collect();
        let mut s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.write_all(b"status\n").unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).ok();
        assert!(
            reply.starts_with("ok "),
            "with {n} idle connections: {reply:?}"
        );
        // keep the ones still pending
        idle.retain_mut(|c| {
            c.set_nonblocking(true).unwrap();
            let mut b = [0u8; 64];
            let r = c.read(&mut b);
            c.set_nonblocking(false).unwrap();
            match r {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => true,
                // one that made room: told so, never served a reply meant for another
                Ok(k) => {
                    assert!(
                        k == 0 || b.starts_with(b"error "),
                        "{:?}",
                        String::from_utf8_lossy(&b[..k])
                    );
                    false
                }
                Err(e) => panic!("idle connection: {e}"),
            }
        });
        let pending = idle.len();
        let want = n.min(15); // 16 slots: the status took one
        assert!(
            pending >= want,
            "{pending} of {n} idle connections still pending when the status was answered (want {want})"
        );
        // and through the CLI
        let o = ctl(r.pid, &["status"]);
        assert!(o.status.success(), "{}", printed(&o));
    }
    // The idle ones are answered (and closed) once their 2 s are up, or told they made room.
    for mut c in idle.drain(..) {
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut reply = String::new();
        c.read_to_string(&mut reply).ok();
        assert!(reply.starts_with("error "), "{reply:?}");
    }
    drop(idle);
    let (code, err) = r.finish();
    assert_eq!(code, 0, "{err}");
}

/// A program that leaves through `_exit` (`sh -c true`) or is killed leaves no control socket
/// behind: the next `memlens serve` or `ctl` would find a socket nobody answers.
#[test]
fn ended_processes_leave_no_socket() {
    let dir = test_dir();
    let sockets = ctl_dir(&dir);
    let names = || -> Vec<String> {
        std::fs::read_dir(&sockets)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect()
    };
    let cases: [&[&str]; 3] = [
        &["sh", "-c", "true"],
        &["sh", "-c", "sleep 0.3; kill -9 $$"],
        &[
            "python3",
            "-c",
            "import os,time; time.sleep(0.3); os._exit(0)",
        ],
    ];
    for cmd in cases {
        memlens()
            .env("MEMLENS_CTL_DIR", &sockets)
            .arg("run")
            .arg("-o")
            .arg(dir.join("s.pb.gz"))
            .arg("--")
            .args(cmd)
            .out();
        assert_eq!(names(), Vec::<String>::new(), "{cmd:?} left its socket");
    }
}
