//! `memlens attach` / `memlens detach` on real programs that were not started under memlens:
//! runtime/tests/attach_target.c (three threads, blocks allocated before the attach, a library
//! dlopen'ed after it), python3, redis-server under redis-benchmark, the refusals, and a stress
//! run (runtime/tests/attach_busy.c: every thread in malloc or dlopen).
use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `memlens ARGS` with the socket directory of `dir`.
fn ml(dir: &Path, args: &[&str]) -> Command {
    let mut c = memlens();
    c.args(args).env("MEMLENS_CTL_DIR", ctl_dir(dir));
    c
}

fn late_lib(dir: &Path) -> PathBuf {
    let out = dir.join("libattach_late.so");
    Command::new("gcc")
        .args(["-O2", "-g", "-shared", "-fPIC"])
        .arg(root().join("runtime/tests/attach_late.c"))
        .arg("-o")
        .arg(&out)
        .ok();
    out
}

fn spawn(dir: &Path, cmd: &mut Command) -> Child {
    cmd.env("MEMLENS_CTL_DIR", ctl_dir(dir))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start the target")
}

/// The state letter of `/proc/PID/stat` (`R`, `S`, `T`, `Z`…), or None when there is no such process.
fn state(pid: u32) -> Option<char> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    s.rsplit(')').next()?.trim_start().chars().next()
}

fn alive(pid: u32) -> bool {
    state(pid).is_some_and(|c| c != 'Z' && c != 'X')
}

#[test]
fn three_threads_attached_at_1s_sampled_2s_detached() {
    let dir = test_dir();
    let prog = compile(
        &root().join("runtime/tests/attach_target.c"),
        &dir,
        "attach_target",
        &[],
    );
    let lib = late_lib(&dir);
    // Reference run, never attached.
    let plain = Command::new(&prog).arg(&lib).exits(3);

    let child = spawn(&dir, Command::new(&prog).arg(&lib));
    let pid = child.id().to_string();
    // On purpose a point in the program's timeline, not a condition: attached one second into a
    // four-second run, after "old" allocated its blocks and before "late" dlopens at 1.8 s.
    std::thread::sleep(Duration::from_secs(1));
    let prof = dir.join("attach.pb.gz");
    let out = ml(
        &dir,
        &[
            "attach",
            &pid,
            "--interval",
            "256K",
            "--for",
            "2s",
            "-o",
            prof.to_str().unwrap(),
        ],
    )
    .ok_stdout();
    assert!(out.contains("attached"), "{out}");
    assert!(out.contains("detached"), "{out}");
    let done = child.wait_with_output().unwrap();
    assert_eq!(done.status.code(), plain.status.code(), "{}", stderr(&done));
    assert_eq!(stdout(&done), stdout(&plain));
    assert!(!stderr(&done).contains("memlens"), "{}", stderr(&done));
    let top = go_pprof_top(&prof, Some("alloc_space"), &dir);
    assert!(top.contains("attach_site_alloc"), "{top}");
    assert!(top.contains("late_alloc_work"), "{top}");
}

/// attach, dump, detach, attach again, dump, detach.
fn twice(dir: &Path, pid: &str, tag: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for round in 0..2 {
        let a = ml(dir, &["attach", pid, "--interval", "64K"]).ok_stdout();
        assert!(
            (round == 0) ^ a.contains("re-attached"),
            "round {round}: {a}"
        );
        let status = || ml(dir, &["ctl", pid, "status"]).ok_stdout();
        let at_attach = status_samples(&status());
        wait_for("samples after the attach", 20, || {
            status_samples(&status()) > at_attach
        });
        let f = dir.join(format!("{tag}{round}.pb.gz"));
        ml(dir, &["ctl", pid, "dump", "-o", f.to_str().unwrap()]).ok_stdout();
        let d = ml(dir, &["detach", pid]).ok_stdout();
        assert!(d.contains("detached"), "{d}");
        files.push(f);
    }
    files
}

#[test]
fn python_attach_dump_detach_twice() {
    let dir = test_dir();
    let script = dir.join("alloc.py");
    std::fs::write(
        &script,
        "import sys, time\n\
         open(sys.argv[2], 'w').close()\n\
         total = 0\n\
         rounds = 250\n\
         for r in range(rounds):\n\
         \x20   d = {}\n\
         \x20   for i in range(2000):\n\
         \x20       s = ('x%d' % (i * r)) * (1 + i % 7)\n\
         \x20       d[s] = [i, s, (i, r)]\n\
         \x20   total += sum(len(k) for k in d)\n\
         \x20   b = [bytearray(3000 + i) for i in range(50)]\n\
         \x20   total += sum(len(x) for x in b)\n\
         \x20   time.sleep(float(sys.argv[1]) / rounds)\n\
         print('total', total)\n",
    )
    .unwrap();
    let py = "/usr/bin/python3";
    let plain = Command::new(py)
        .arg(&script)
        .arg("0")
        .arg(dir.join("plain-started"))
        .ok();
    let started = dir.join("started");
    let child = spawn(&dir, Command::new(py).arg(&script).arg("5").arg(&started));
    let pid = child.id().to_string();
    wait_for("python to run the script", 20, || started.exists());
    let files = twice(&dir, &pid, "py");
    let done = child.wait_with_output().unwrap();
    assert_ok(&format!("{py} {} 5 …", script.display()), &done);
    assert_eq!(stdout(&done), stdout(&plain));
    for f in files {
        let top = go_pprof_top(&f, Some("alloc_space"), &dir);
        assert!(top.contains("python3"), "{top}");
    }
}

#[test]
fn redis_under_benchmark_attach_dump_detach_twice() {
    let dir = test_dir();
    let p = free_port().to_string();
    let mut server = spawn(
        &dir,
        Command::new("redis-server").args([
            "--port",
            &p,
            "--save",
            "",
            "--appendonly",
            "no",
            "--loglevel",
            "warning",
        ]),
    );
    let pid = server.id().to_string();
    wait_for("redis to answer", 10, || {
        Command::new("redis-cli")
            .args(["-p", &p, "ping"])
            .output()
            .is_ok_and(|o| stdout(&o).contains("PONG"))
    });
    let bench = || {
        let out = Command::new("redis-benchmark")
            .args(["-p", &p, "-q", "-n", "20000", "-c", "8", "-r", "1000"])
            .args(["-t", "set,get,lpush,lpop,incr", "--csv"])
            .ok_stdout();
        assert!(!out.to_lowercase().contains("error"), "{out}");
        assert_eq!(
            out.lines().filter(|l| l.contains("\"SET\"")).count(),
            1,
            "{out}"
        );
        assert_eq!(out.lines().count(), 6, "{out}");
    };
    let mut files = Vec::new();
    for round in 0..2 {
        ml(&dir, &["attach", &pid, "--interval", "64K"]).ok_stdout();
        bench();
        let f = dir.join(format!("redis{round}.pb.gz"));
        ml(&dir, &["ctl", &pid, "dump", "-o", f.to_str().unwrap()]).ok_stdout();
        ml(&dir, &["detach", &pid]).ok_stdout();
        files.push(f);
    }
    bench(); // and after the last detach
    let set = Command::new("redis-cli")
        .args(["-p", &p, "set", "k", "v"])
        .ok_stdout();
    assert!(set.contains("OK"), "{set}");
    for f in &files {
        let top = go_pprof_top(f, Some("alloc_space"), &dir);
        assert!(top.contains("zmalloc") || top.contains("zrealloc"), "{top}");
    }
    // SAFETY: signalling our own child.
    unsafe { libc::kill(server.id() as i32, libc::SIGTERM) };
    let st = server.wait().unwrap();
    assert!(st.success(), "redis-server exited with {st}");
}

/// A refusal: one error line naming the reason; the target still runs (and was never stopped).
fn refused(dir: &Path, child: &mut Child, expect: &str) {
    let pid = child.id();
    let o = ml(dir, &["attach", &pid.to_string()]).out();
    assert_one_line_error(&o);
    assert!(stderr(&o).contains(expect), "{}", stderr(&o));
    assert!(alive(pid), "the target died");
    assert!(
        !std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .unwrap()
            .contains("memfd:memlens"),
        "the runtime was loaded"
    );
}

fn loop_program(dir: &Path, name: &str, extra: &str, flags: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(
        &src,
        format!(
            "#include <stdlib.h>\n#include <unistd.h>\n{extra}\n#ifndef ROUNDS\n#define ROUNDS 300\n#endif\n\
             int main(void) {{ for (int i = 0; i < ROUNDS; i++) {{ free(malloc(100)); usleep(10000); }} return 0; }}\n"
        ),
    )
    .unwrap();
    compile(&src, dir, name, flags)
}

/// A target that runs `prog` (a [`loop_program`]) is refused with `expect`, then killed.
fn refused_and_killed(dir: &Path, prog: &Path, expect: &str) {
    let mut c = spawn(dir, &mut Command::new(prog));
    refused(dir, &mut c, expect);
    c.kill().ok();
    c.wait().ok();
}

// The refusals, one scenario each: one error line naming the reason, the target left running
// (and never stopped).

#[test]
fn refuses_a_statically_linked_program() {
    let dir = test_dir();
    let stat = loop_program(&dir, "static", "", &["-static"]);
    refused_and_killed(&dir, &stat, "statically linked");
}

#[test]
fn attaches_to_a_program_with_its_own_allocator_and_says_so() {
    let dir = test_dir();
    let own = loop_program(
        &dir,
        "own_malloc",
        "#include <sys/mman.h>\n#include <string.h>\n\
         static char heap[1 << 24]; static size_t used;\n\
         void *malloc(size_t n) { void *p = heap + used; used += (n + 15) & ~15ul; return p; }\n\
         void free(void *p) { (void)p; }\n\
         void *calloc(size_t a, size_t b) { return malloc(a * b); }\n\
         void *realloc(void *p, size_t n) { void *q = malloc(n); if (p) memcpy(q, p, n); return q; }",
        &[],
    );
    // (no longer refused: its entry points are hooked, and memlens says which allocator it found;
    // tests/e2e/allocators.rs checks what such hooks count)
    let mut c = spawn(&dir, &mut Command::new(&own));
    let said = ml(&dir, &["attach", &c.id().to_string()]).ok_stdout();
    assert!(
        said.contains("allocates through an allocator memlens does not know linked into it"),
        "{said}"
    );
    assert!(alive(c.id()), "the target died");
    c.kill().ok();
    c.wait().ok();
}

/// The program strace runs: the child of strace that exec'd `name` while traced. Not just any
/// traced child: strace first forks children of its own to probe what ptrace can do, traces them
/// for a moment and kills them (the test once took one of those for the program, and found it dead).
fn traced_child(strace: &Child, name: &str) -> u32 {
    let mut traced = 0;
    wait_for("strace to run the program", 10, || {
        let kids = std::fs::read_to_string(format!(
            "/proc/{}/task/{}/children",
            strace.id(),
            strace.id()
        ))
        .unwrap_or_default();
        traced = kids
            .split_whitespace()
            .filter_map(|k| k.parse::<u32>().ok())
            .find(|k| {
                let st = std::fs::read_to_string(format!("/proc/{k}/status")).unwrap_or_default();
                st.lines().any(|l| l == format!("Name:\t{name}"))
                    && st.contains("TracerPid:\t")
                    && !st.contains("TracerPid:\t0")
            })
            .unwrap_or(0);
        traced != 0
    });
    traced
}

#[test]
fn refuses_a_process_already_traced() {
    let dir = test_dir();
    // strace holds it; a minute of run time, so that a loaded machine cannot end it before the
    // attach — it is killed below
    let long = loop_program(&dir, "plain_long", "", &["-DROUNDS=6000"]);
    let mut c = spawn(
        &dir,
        Command::new("strace").args(["-o", "/dev/null"]).arg(&long),
    );
    let traced = traced_child(&c, "plain_long");
    let o = ml(&dir, &["attach", &traced.to_string()]).out();
    assert_one_line_error(&o);
    assert!(stderr(&o).contains("already traced"), "{}", stderr(&o));
    assert!(alive(traced));
    c.kill().ok();
    c.wait().ok();
    // strace is gone; its tracee (if strace did not take it along) would run on for a minute.
    if std::fs::read_to_string(format!("/proc/{traced}/comm"))
        .is_ok_and(|c| c.trim() == "plain_long")
    {
        // SAFETY: the pid still names our program (checked just above).
        unsafe { libc::kill(traced as i32, libc::SIGKILL) };
    }
}

#[test]
fn refuses_a_stopped_process_which_then_finishes() {
    let dir = test_dir();
    // stopped (Ctrl+Z)
    let plain = loop_program(&dir, "plain", "", &[]);
    let mut c = spawn(&dir, &mut Command::new(&plain));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(c.id() as i32, libc::SIGSTOP) };
    wait_for("the program to stop", 10, || state(c.id()) == Some('T'));
    refused(&dir, &mut c, "is stopped");
    // SAFETY: as above.
    unsafe { libc::kill(c.id() as i32, libc::SIGCONT) };
    assert!(
        c.wait().unwrap().success(),
        "the stopped target did not finish"
    );
}

#[test]
fn refuses_a_process_of_another_user() {
    // no ptrace permission: another user
    if !root_or_skip("refusing another user's attach") {
        return;
    }
    let dir = test_dir();
    let plain = loop_program(&dir, "plain", "", &[]);
    let mut c = spawn(&dir, &mut Command::new(&plain));
    let o = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(memlens_path())
        .args(["attach", &c.id().to_string()])
        .out();
    assert_one_line_error(&o);
    assert!(stderr(&o).contains("belongs to uid 0"), "{}", stderr(&o));
    assert!(alive(c.id()));
    assert!(c.wait().unwrap().success());
}

#[test]
fn refuses_a_program_started_under_memlens_run() {
    let dir = test_dir();
    // started under memlens run: nothing to attach
    let plain = loop_program(&dir, "plain", "", &[]);
    let mut c = memlens()
        .env("MEMLENS_CTL_DIR", ctl_dir(&dir))
        .args(["run", "--inactive", "-o"])
        .arg(dir.join("run.pb.gz"))
        .arg("--")
        .arg(&plain)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut inner = 0;
    wait_for("the program's control socket under memlens run", 10, || {
        let kids = std::fs::read_to_string(format!("/proc/{}/task/{}/children", c.id(), c.id()))
            .unwrap_or_default();
        let Some(k) = kids.split_whitespace().next() else {
            return false;
        };
        inner = k.parse().unwrap();
        // `<pid>.<pidns>.sock`: the runtime's control socket is up
        std::fs::read_dir(ctl_dir(&dir))
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                let n = e.file_name().to_string_lossy().into_owned();
                n.starts_with(&format!("{inner}.")) && n.ends_with(".sock")
            })
    });
    let o = ml(&dir, &["attach", &inner.to_string()]).out();
    assert_one_line_error(&o);
    assert!(stderr(&o).contains("memlens run"), "{}", stderr(&o));
    assert!(c.wait().unwrap().success());
}

#[test]
fn refuses_what_is_not_a_process() {
    let dir = test_dir();
    let o = ml(&dir, &["attach", "999999999"]).out();
    assert_one_line_error(&o);
}

#[test]
fn stress_fifty_cycles_and_attach_inside_malloc_and_dlopen() {
    let dir = test_dir();
    let prog = compile(
        &root().join("runtime/tests/attach_busy.c"),
        &dir,
        "attach_busy",
        &[],
    );
    let lib = late_lib(&dir);
    // Fresh injections while every thread is in malloc/free/realloc and one loops on dlopen. That
    // thread holds the loader's lock nearly all the time: on a loaded machine (CI with four busy
    // loops) the injected loader thread may not get it within attach's 20 s, and attach then
    // refuses with that reason; the program must run on unharmed either way, and at least one of
    // the three injections must get through.
    let mut attached = 0;
    for _ in 0..3 {
        let child = spawn(&dir, Command::new(&prog).arg(&lib).arg("1.5"));
        let busy = child.id();
        wait_for("the four busy threads", 10, || thread_count(busy) >= 5);
        let o = ml(
            &dir,
            &["attach", &child.id().to_string(), "--interval", "8K"],
        )
        .output()
        .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        if o.status.success() {
            attached += 1;
        } else {
            assert!(
                err.contains("the loader thread did not finish"),
                "attach failed{}",
                printed(&o)
            );
            println!("attach refused under a busy loader: {err}");
        }
        let done = child.wait_with_output().unwrap();
        assert_ok(&format!("{} {} 1.5", prog.display(), lib.display()), &done);
        assert_eq!(stdout(&done), "ready\nok\n");
    }
    assert!(attached >= 1, "no injection of the three got through");
    // 50 attach/detach cycles on one busy process, sampling densely in between.
    let child = spawn(&dir, Command::new(&prog).arg(&lib).arg("60"));
    let pid = child.id().to_string();
    let busy = child.id();
    wait_for("the four busy threads", 10, || thread_count(busy) >= 5);
    for i in 0..50 {
        let iv = if i % 2 == 0 { "32K" } else { "256K" };
        ml(&dir, &["attach", &pid, "--interval", iv]).ok_stdout();
        // pacing, not a wait: a little dense sampling between the attach and the detach
        std::thread::sleep(Duration::from_millis(20));
        if i % 10 == 9 {
            let f = dir.join(format!("s{i}.pb.gz"));
            ml(&dir, &["ctl", &pid, "dump", "-o", f.to_str().unwrap()]).ok_stdout();
        }
        ml(&dir, &["detach", &pid]).ok_stdout();
    }
    assert!(alive(child.id()));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    let done = child.wait_with_output().unwrap();
    assert!(!stdout(&done).contains("corrupted"), "{}", stdout(&done));
    assert!(!stderr(&done).contains("memlens"), "{}", stderr(&done));
    let top = go_pprof_top(dir.join("s49.pb.gz"), None, &dir);
    assert!(top.contains("churn"), "{top}");
}

#[test]
fn attached_process_whose_main_called_pthread_exit_still_ends() {
    let dir = test_dir();
    let prog = compile(
        &root().join("runtime/tests/attach_pexit.c"),
        &dir,
        "attach_pexit",
        &[],
    );
    let mut child = spawn(&dir, &mut Command::new(&prog));
    // main() has called pthread_exit: the leader is a zombie while its worker runs on
    wait_for("main to call pthread_exit", 10, || {
        state(child.id()) == Some('Z')
    });
    ml(
        &dir,
        &["attach", &child.id().to_string(), "--interval", "64K"],
    )
    .ok_stdout();
    let mut ended = None;
    wait_for("the process to end after its last thread", 15, || {
        ended = child.try_wait().unwrap();
        ended.is_some()
    });
    assert!(ended.unwrap().success(), "{ended:?}");
}

/// What an attach may leave in a process: mappings both writable and executable, descriptors of
/// a memfd of memlens, and its threads.
fn leftovers(pid: u32) -> (usize, usize, usize) {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
    let rwx = maps
        .lines()
        .filter(|l| {
            l.split_whitespace()
                .nth(1)
                .is_some_and(|p| p.starts_with("rwx"))
        })
        .count();
    let memfds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|t| t.to_string_lossy().contains("memfd:memlens"))
                })
                .count()
        })
        .unwrap_or(0);
    let threads = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| rd.count())
        .unwrap_or(0);
    (rwx, memfds, threads)
}

fn select_program(dir: &Path) -> (Child, u32) {
    let prog = compile(
        &root().join("runtime/tests/attach_select.c"),
        dir,
        "attach_select",
        &[],
    );
    let child = spawn(dir, Command::new(&prog).arg(dir));
    let mut pid = 0;
    wait_for("attach_select to start", 20, || {
        pid = std::fs::read_to_string(dir.join("pid"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(0);
        pid != 0
    });
    (child, pid)
}

/// A process waiting in select() whose stack holds addresses in the dynamic loader's code (as
/// postgres's idle processes do) is attached at once: the walk of its calls shows it is in
/// select(), not in the loader.
#[test]
fn attach_to_a_process_waiting_in_select() {
    let dir = test_dir();
    let (child, pid) = select_program(&dir);
    let p = pid.to_string();
    let o = ml(&dir, &["attach", &p, "--interval", "4K"]).ok();
    assert!(stdout(&o).contains("attached"), "{}", printed(&o));
    ml(&dir, &["ctl", &p, "status"]).ok();
    let (rwx, memfds, _) = leftovers(pid);
    assert_eq!(
        (rwx, memfds),
        (0, 0),
        "the attach left a rwx mapping or a memfd"
    );
    ml(&dir, &["detach", &p]).ok();
    stop_via_file(child, &dir);
}

/// SIGSTOP arriving right after the loader thread was made (the process stays stopped while
/// memlens waits for it): the attach must not wait for ever, and nothing of it may stay behind —
/// no thread of ours, no rwx page, no memfd — whether it succeeded or not.
#[test]
fn sigstop_during_attach_leaves_nothing_behind() {
    let dir = test_dir();
    let (child, pid) = select_program(&dir);
    let (_, _, before) = leftovers(pid);
    let p = pid.to_string();
    let attach = ml(&dir, &["attach", &p])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The loader thread appears: stop the process at once, and keep it stopped.
    let t0 = std::time::Instant::now();
    while leftovers(pid).2 <= before && t0.elapsed() < Duration::from_secs(20) {
        std::hint::spin_loop();
    }
    // SAFETY: signals our own child.
    unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
    // The attach ends on its own while the process stays stopped (what it gives up after is its
    // own rule; the deadline here only keeps a hang from hanging the suite).
    let o = wait_deadline(attach, 120, "memlens attach of a stopped process");
    unsafe { libc::kill(pid as i32, libc::SIGCONT) };
    // Whatever the outcome, once it is over: the runtime's two threads at most, nothing else (the
    // loader thread may take a moment to be gone: its exit is not memlens's to wait for).
    holds_within(5, || {
        let (rwx, memfds, threads) = leftovers(pid);
        (rwx, memfds) == (0, 0) && threads <= before + 2
    });
    let (rwx, memfds, threads) = leftovers(pid);
    assert_eq!((rwx, memfds), (0, 0), "left behind: {}", printed(&o));
    if o.status.success() {
        assert!(
            threads <= before + 2,
            "{threads} threads, {before} before: {}",
            printed(&o)
        );
        ml(&dir, &["ctl", &p, "status"]).ok();
    } else {
        assert_one_line_error(&o);
        assert_eq!(threads, before, "{}", printed(&o));
    }
    assert!(alive(pid));
    stop_via_file(child, &dir);
}
