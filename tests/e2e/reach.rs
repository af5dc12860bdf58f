//! Reach (issue 30 item 4): programs memlens could not reach. A child forked after an attach (or
//! under `run --inactive`) answers `memlens ctl` at once, though it never allocates. (musl
//! programs, item 5: tests/e2e/musl.rs.)
use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `runtime/tests/prefork_server.c` started (stdin and stdout piped) by `cmd`: the process, its
/// input, its output lines, and its pid (from its "ready PID" line).
struct Prefork {
    child: std::process::Child,
    input: std::process::ChildStdin,
    lines: std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
    pid: i32,
}

impl Prefork {
    fn start(mut cmd: Command) -> Prefork {
        use std::io::BufRead;
        use std::process::Stdio;
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {cmd:?}: {e}"));
        let input = child.stdin.take().unwrap();
        let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let pid = Self::number(&mut lines, "ready");
        Prefork {
            child,
            input,
            lines,
            pid,
        }
    }

    fn number(
        lines: &mut std::io::Lines<std::io::BufReader<std::process::ChildStdout>>,
        word: &str,
    ) -> i32 {
        let l = lines.next().expect("a line").expect("a line");
        l.strip_prefix(word)
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("expected '{word} PID', got '{l}'"))
    }

    /// Fork a worker that never allocates: its pid.
    fn fork(&mut self) -> i32 {
        use std::io::Write;
        self.input.write_all(b"fork\n").unwrap();
        self.input.flush().unwrap();
        Self::number(&mut self.lines, "child")
    }

    fn quit(mut self) {
        use std::io::Write;
        self.input.write_all(b"quit\n").unwrap();
        drop(self.input);
        let st = self.child.wait().unwrap();
        assert!(st.success(), "the pre-fork server ended with {st}");
    }
}

/// The test program built into `dir`.
fn prefork_server(dir: &Path) -> PathBuf {
    compile(
        &root().join("runtime/tests/prefork_server.c"),
        dir,
        "prefork_server",
        &[],
    )
}

/// `memlens ARGS` with the test's control directory.
fn ml(ctl: &Path, args: &[&str]) -> Command {
    let mut c = memlens();
    c.args(args).env("MEMLENS_CTL_DIR", ctl);
    c
}

/// A worker forked after the runtime came in, idle in read() without one allocation: it has no
/// socket (and would never open one), yet the first `memlens ctl` answers, then start and dump work,
/// and the worker has gained exactly the runtime's thread.
fn worker_answers_at_once(ctl: &Path, dir: &Path, server: &mut Prefork) {
    let w = server.fork();
    // The lazy start needs 200 ms of life and an allocation: after 400 ms idle there is still none.
    wait_for("the worker to live 400 ms", 10, || {
        process_age(w) >= std::time::Duration::from_millis(400)
    });
    let has_socket = || {
        std::fs::read_dir(ctl).unwrap().flatten().any(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(&format!("{w}."))
        })
    };
    assert!(!has_socket(), "the idle worker opened a socket by itself");
    assert_eq!(
        thread_count(w as u32),
        1,
        "the idle worker has a thread of ours"
    );
    let t0 = std::time::Instant::now();
    let status = ml(ctl, &["ctl", &w.to_string(), "status"]).ok_stdout();
    eprintln!(
        "the idle worker answered `memlens ctl status` in {:?} (load {})",
        t0.elapsed(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    assert!(status.starts_with(&format!("process {w} (")), "{status}");
    assert!(has_socket(), "no socket of the worker after ctl");
    assert_eq!(thread_count(w as u32), 2, "the worker's threads after ctl");
    ml(ctl, &["ctl", &w.to_string(), "start"]).ok();
    let out = dir.join(format!("worker.{w}.pb.gz"));
    ml(ctl, &["ctl", &w.to_string(), "dump", "-o"])
        .arg(&out)
        .ok();
    assert!(
        out.metadata().is_ok_and(|m| m.len() > 0),
        "no dump of the worker"
    );
    // Asked again, the worker answers through the socket it has now (no ptrace).
    let again = ml(ctl, &["ctl", &w.to_string(), "status"]).ok_stdout();
    assert!(
        again
            .lines()
            .any(|l| l.split_whitespace().eq(["sampling", "active"])),
        "{again}"
    );
}

#[test]
fn a_worker_forked_after_an_attach_answers_ctl_at_once() {
    if !root_or_skip("a_worker_forked_after_an_attach_answers_ctl_at_once") {
        return;
    }
    let dir = test_dir();
    let ctl = ctl_dir(&dir);
    let mut cmd = Command::new(prefork_server(&dir));
    cmd.env("MEMLENS_CTL_DIR", &ctl);
    let mut server = Prefork::start(cmd);
    ml(&ctl, &["attach", &server.pid.to_string()]).ok();
    worker_answers_at_once(&ctl, &dir, &mut server);
    worker_answers_at_once(&ctl, &dir, &mut server);
    server.quit();
}

#[test]
fn a_worker_forked_under_run_inactive_answers_ctl_at_once() {
    // ctl makes the worker open its socket with ptrace: root (or yama's ptrace_scope 0).
    if !root_or_skip("a_worker_forked_under_run_inactive_answers_ctl_at_once") {
        return;
    }
    let dir = test_dir();
    let ctl = ctl_dir(&dir);
    let mut cmd = ml(&ctl, &["run", "--inactive", "-o"]);
    cmd.arg(dir.join("server.pb.gz"))
        .arg("--")
        .arg(prefork_server(&dir))
        .env("MEMLENS_RUN_ROOT", dir.join("runs"));
    let mut server = Prefork::start(cmd);
    worker_answers_at_once(&ctl, &dir, &mut server);
    server.quit();
}

// ---- postgres: the real pre-fork server ----

/// postgres's binaries (initdb, postgres, pg_ctl) from `pg_config --bindir`, or None.
fn pg_bin(name: &str) -> Option<PathBuf> {
    let o = Command::new("pg_config").arg("--bindir").output().ok()?;
    let p = PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join(name);
    p.exists().then_some(p)
}

/// `runuser -u postgres -- CMD…` (postgres refuses to run as root).
fn as_postgres(cmd: &Path) -> Command {
    let mut c = Command::new("runuser");
    c.args(["-u", "postgres", "--"]).arg(cmd);
    c
}

/// `pg_ctl stop -m immediate` when dropped: a failed assertion leaves no postmaster running.
struct StopPostgres(PathBuf, PathBuf);

impl Drop for StopPostgres {
    fn drop(&mut self) {
        as_postgres(&self.0)
            .arg("-D")
            .arg(&self.1)
            .args(["stop", "-m", "immediate"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .ok();
    }
}

/// The idle postmaster attached; a backend started afterwards that sits in `pg_sleep` (no
/// allocation) answers `memlens ctl` on the first request, and pgbench against the attached
/// server reports 0 failed transactions.
#[test]
fn postgres_backend_started_after_attach_answers_ctl() {
    use std::process::Stdio;
    if !root_or_skip("postgres runs as its own user") {
        return;
    }
    let (Some(initdb), Some(postgres), Some(pg_ctl)) =
        (pg_bin("initdb"), pg_bin("postgres"), pg_bin("pg_ctl"))
    else {
        eprintln!("SKIPPED: no postgres (pg_config --bindir)");
        return;
    };
    let dir = test_dir();
    Command::new("chmod").arg("755").arg(&*dir).ok();
    let (data, sock) = (dir.join("data"), dir.join("sock"));
    std::fs::create_dir_all(&sock).unwrap();
    Command::new("chown")
        .arg("postgres:postgres")
        .arg(&sock)
        .arg(&*dir)
        .ok();
    as_postgres(&initdb)
        .arg("-D")
        .arg(&data)
        .args(["-A", "trust", "-U", "postgres", "--no-sync"])
        .stdout(Stdio::null())
        .ok();
    let port = free_port().to_string();
    let _stop = StopPostgres(pg_ctl, data.clone());
    let mut server = as_postgres(&postgres)
        .arg("-D")
        .arg(&data)
        .args(["-p", &port, "-c", "fsync=off", "-k"])
        .arg(&sock)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let client = |prog: &str| {
        let mut c = Command::new(prog);
        c.arg("-h").arg(&sock).args(["-p", &port, "-U", "postgres"]);
        c
    };
    wait_for("postgres to accept connections", 30, || {
        client("pg_isready")
            .arg("-q")
            .status()
            .is_ok_and(|s| s.success())
    });
    let postmaster = std::fs::read_to_string(data.join("postmaster.pid")).unwrap();
    let postmaster = postmaster.lines().next().unwrap().trim().to_string();
    memlens().args(["attach", &postmaster]).ok();
    // A backend forked after the attach, then idle in pg_sleep (a latch wait: no allocation).
    let mut sleeper = client("psql")
        .args(["-At", "-c", "select pg_sleep(60)", "postgres"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut backend = String::new();
    wait_for("the sleeping backend", 20, || {
        let o = client("psql")
            .args(["-At", "-c"])
            .arg("select pid from pg_stat_activity where query like 'select pg_sleep%' and pid <> pg_backend_pid()")
            .arg("postgres")
            .out();
        backend = stdout(&o).trim().to_string();
        !backend.is_empty()
    });
    let bpid: i32 = backend.parse().unwrap();
    wait_for("the backend to live 400 ms", 10, || {
        process_age(bpid) >= std::time::Duration::from_millis(400)
    });
    let t0 = std::time::Instant::now();
    let status = memlens().args(["ctl", &backend, "status"]).ok_stdout();
    eprintln!(
        "the idle postgres backend answered `memlens ctl status` in {:?} (load {})",
        t0.elapsed(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    assert!(
        status.starts_with(&format!("process {backend} (postgres)")),
        "{status}"
    );
    // The attached server under load: every transaction goes through.
    client("pgbench")
        .args(["-i", "-s", "1", "-q", "postgres"])
        .stderr(Stdio::null())
        .ok();
    let out = client("pgbench")
        .args(["-c", "4", "-T", "3", "postgres"])
        .ok_stdout();
    assert!(
        out.contains("number of failed transactions: 0 "),
        "pgbench:\n{out}"
    );
    sleeper.kill().ok();
    sleeper.wait().ok();
    drop(_stop);
    server.wait().ok();
}
