//! Helpers shared by the end-to-end tests: the binary under test, commands whose failures show
//! everything needed to understand them, the C test programs, root and ports.
#![allow(dead_code)]
use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `memlens` binary under test.
pub fn memlens() -> Command {
    Command::new(memlens_path())
}

pub fn memlens_path() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_memlens"))
}

/// Run memlens with `args`, returning its output whatever its exit status (for the tests of how it
/// fails; a run that must succeed is `memlens().args(…).ok()`).
#[track_caller]
pub fn run(args: &[&str]) -> Output {
    memlens().args(args).out()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// How a command ended and all it printed, for a failure message.
pub fn printed(o: &Output) -> String {
    format!(
        "\nstatus: {}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        o.status,
        stdout(o),
        stderr(o)
    )
}

/// What ran (a command line, or any description), how it ended and all it printed.
pub fn describe(what: &dyn Debug, o: &Output) -> String {
    format!("\ncommand: {what:?}{}", printed(o))
}

/// Panic, with [`describe`], unless `o` (the output of `what`) is a success.
#[track_caller]
pub fn assert_ok(what: &dyn Debug, o: &Output) {
    assert!(o.status.success(), "expected success{}", describe(what, o));
}

/// Running a command in a test: each method runs it once, and when the expectation fails it panics
/// (at the test's line) with the command line, the exit status, stdout and stderr.
pub trait TestCommand {
    /// Its output, whatever the exit status (only starting it must work).
    fn out(&mut self) -> Output;
    /// Its output; it must exit with status 0.
    fn ok(&mut self) -> Output;
    /// Its stdout; it must exit with status 0.
    fn ok_stdout(&mut self) -> String;
    /// Its output; it must fail (a non-zero status or a signal).
    fn fails(&mut self) -> Output;
    /// Its output; it must exit with `code`.
    fn exits(&mut self, code: i32) -> Output;
    /// Its output; memlens must exit with `code` after one `memlens: error: …` line and no panic.
    fn error(&mut self, code: i32) -> Output;
}

impl TestCommand for Command {
    #[track_caller]
    fn out(&mut self) -> Output {
        self.output()
            .unwrap_or_else(|e| panic!("cannot start {self:?}: {e}"))
    }

    #[track_caller]
    fn ok(&mut self) -> Output {
        let o = self.out();
        assert_ok(self, &o);
        o
    }

    #[track_caller]
    fn ok_stdout(&mut self) -> String {
        stdout(&self.ok())
    }

    #[track_caller]
    fn fails(&mut self) -> Output {
        let o = self.out();
        assert!(
            !o.status.success(),
            "expected failure{}",
            describe(self, &o)
        );
        o
    }

    #[track_caller]
    fn exits(&mut self, code: i32) -> Output {
        let o = self.out();
        assert_eq!(
            o.status.code(),
            Some(code),
            "expected exit status {code}{}",
            describe(self, &o)
        );
        o
    }

    #[track_caller]
    fn error(&mut self, code: i32) -> Output {
        let o = self.exits(code);
        assert_one_line_error(&o);
        o
    }
}

/// The repository root (for test programs under runtime/tests, workloads/…).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Compile a C or C++ test program into `dir`, returning the executable's path.
#[track_caller]
pub fn compile(src: &Path, dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let cxx = src.extension().is_some_and(|e| e == "cc" || e == "cpp");
    Command::new(if cxx { "g++" } else { "gcc" })
        .args(["-O2", "-g", "-pthread"])
        .args(flags)
        .arg(src)
        .arg("-o")
        .arg(&out)
        .arg("-ldl")
        .ok();
    out
}

/// `runtime/tests/SRC` compiled into `dir` (with `flags`) and run under `memlens run RUN_OPTS -o
/// dir/p.pb.gz`: the profile it wrote.
pub fn profile_of(src: &str, dir: &Path, flags: &[&str], run_opts: &[&str]) -> PathBuf {
    let name = src.split('.').next().unwrap_or(src);
    let exe = compile(&root().join("runtime/tests").join(src), dir, name, flags);
    let prof = dir.join("p.pb.gz");
    memlens()
        .arg("run")
        .args(run_opts)
        .arg("-o")
        .arg(&prof)
        .arg("--")
        .arg(&exe)
        .ok();
    prof
}

/// Assert an error is a single `memlens: error: …` line and no panic trace.
#[track_caller]
pub fn assert_one_line_error(o: &Output) {
    let e = stderr(o);
    let lines: Vec<&str> = e.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!o.status.success(), "expected failure{}", printed(o));
    assert!(!e.contains("panicked"), "panic: {e}");
    assert!(
        lines.iter().any(|l| l.starts_with("memlens: error: ")),
        "no 'memlens: error:' line in: {e}"
    );
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.starts_with("memlens: error: "))
            .count(),
        1,
        "{e}"
    );
}

/// Whether the test runs as root. What must act as another user needs it: without root it fails
/// rather than pass unchecked, unless MEMLENS_TEST_NO_ROOT is set (then the caller skips that part,
/// and this says so).
pub fn root_or_skip(what: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    assert!(
        std::env::var_os("MEMLENS_TEST_NO_ROOT").is_some(),
        "{what} needs root: run the tests as root, or set MEMLENS_TEST_NO_ROOT=1 to skip it"
    );
    eprintln!("SKIPPED (MEMLENS_TEST_NO_ROOT): {what} needs root");
    false
}

/// A loopback TCP port that was free a moment ago. The tests run in parallel in one process, so a
/// port derived from the pid would be the same for all of them.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// End a test program that leaves when `DIR/stop` appears (runtime/tests/ctl_leaker.c and its
/// kind): create the file, wait up to 10 s, then kill it.
pub fn stop_via_file(mut c: std::process::Child, dir: &Path) {
    std::fs::write(dir.join("stop"), "").ok();
    let t0 = std::time::Instant::now();
    while t0.elapsed() < std::time::Duration::from_secs(10) {
        if let Ok(Some(_)) = c.try_wait() {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    c.kill().ok();
    c.wait().ok();
}

// ---- per-test directories, waiting, and the checks several modules share ----

/// A directory for one test's files (`/tmp/memlens-test-XXXXXX`). Removed when the test passes;
/// when it fails (a panic is unwinding) it is kept and its path printed with the test's name, so
/// what the test left behind can be read. Use it as a `&Path` (`dir.join(…)`, `&dir`), or
/// `dir.path()`. (Its name does not carry the test's: tests check what memlens prints, paths
/// included, for words such as the name of the program they run.)
pub struct TestDir {
    path: PathBuf,
    test: String,
}

/// A new [`TestDir`] for the running test.
#[track_caller]
pub fn test_dir() -> TestDir {
    let dir = tempfile::Builder::new()
        .prefix("memlens-test-")
        .tempdir()
        .unwrap_or_else(|e| panic!("cannot create a test directory: {e}"));
    TestDir {
        path: dir.keep(),
        // libtest names each test's thread after the test (`attach::refusals_are_…`).
        test: std::thread::current().name().unwrap_or("?").to_string(),
    }
}

impl TestDir {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl std::ops::Deref for TestDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl AsRef<Path> for TestDir {
    fn as_ref(&self) -> &Path {
        &self.path
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "{}: test directory kept: {}",
                self.test,
                self.path.display()
            );
        } else {
            std::fs::remove_dir_all(&self.path).ok();
        }
    }
}

/// Wait until `cond` holds, checking every 20 ms; fail the test (naming `what`) after `secs`.
/// Use it instead of a sleep whenever the test waits for something it can observe.
#[track_caller]
pub fn wait_for(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let t0 = std::time::Instant::now();
    while !cond() {
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(secs),
            "timed out after {secs} s waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A private control directory `DIR/ctl` (0700, as the runtime requires), created if needed: pass
/// it as `MEMLENS_CTL_DIR` to the programs and the memlens commands of one test, so no other test
/// (nor another user's `memlens serve`) sees them.
pub fn ctl_dir(dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let d = dir.join("ctl");
    std::fs::create_dir_all(&d).unwrap();
    std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
    d
}

/// `go tool pprof -top [-sample_index=INDEX] WHAT` (a file or a URL), which must succeed: its
/// listing. Profiles pprof fetches are saved under `tmp` (PPROF_TMPDIR), not in `$HOME/pprof`.
#[track_caller]
pub fn go_pprof_top(what: impl AsRef<std::ffi::OsStr>, index: Option<&str>, tmp: &Path) -> String {
    let mut cmd = Command::new("go");
    cmd.args(["tool", "pprof", "-top"]);
    if let Some(i) = index {
        cmd.arg(format!("-sample_index={i}"));
    }
    cmd.arg(what).env("PPROF_TMPDIR", tmp).ok_stdout()
}

/// `memlens report FILE --format json ARGS…` (e.g. `["--sample-index", "inuse_space"]`,
/// `["--view", "leaks"]`), which must succeed: its output, parsed.
#[track_caller]
pub fn report_json(file: &Path, args: &[&str]) -> serde_json::Value {
    let out = memlens()
        .arg("report")
        .arg(file)
        .args(["--format", "json"])
        .args(args)
        .ok_stdout();
    serde_json::from_str(&out).unwrap_or_else(|e| {
        panic!(
            "memlens report {} --format json: {e}\n{out}",
            file.display()
        )
    })
}

/// The runtime (`libmemlens.so`) of this very build, as `memlens` itself extracts it — never a
/// stale copy from another build under target/.
pub fn runtime_lib() -> PathBuf {
    memlens_native::runtime().expect("the runtime embedded in this build")
}

/// The files written in a directory from now on, as the kernel reports them (inotify
/// IN_CLOSE_WRITE: a file opened for writing was closed). For a test that must act right after a
/// program wrote a file that may be gone a moment later: [`wait_for`] can miss it, this cannot.
pub struct Written {
    fd: std::os::fd::OwnedFd,
    seen: Vec<String>,
}

impl Written {
    /// Watch `dir` (set up before whatever writes there is started).
    #[track_caller]
    pub fn watch(dir: &Path) -> Written {
        use std::os::fd::FromRawFd;
        use std::os::unix::ffi::OsStrExt;
        // SAFETY: plain system calls; the descriptor is owned from here on.
        let fd = unsafe { libc::inotify_init1(libc::IN_CLOEXEC | libc::IN_NONBLOCK) };
        assert!(
            fd >= 0,
            "inotify_init1: {}",
            std::io::Error::last_os_error()
        );
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor and a NUL-terminated path.
        let wd =
            unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), libc::IN_CLOSE_WRITE) };
        assert!(
            wd >= 0,
            "inotify_add_watch {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        );
        Written {
            fd,
            seen: Vec::new(),
        }
    }

    /// Wait until a file whose name satisfies `name` has been written (since the watch began);
    /// fail the test (naming `what`) after `secs`. Returns its name.
    #[track_caller]
    pub fn wait(&mut self, what: &str, secs: u64, name: impl Fn(&str) -> bool) -> String {
        use std::os::fd::AsRawFd;
        let t0 = std::time::Instant::now();
        loop {
            if let Some(n) = self.seen.iter().find(|n| name(n)) {
                return n.clone();
            }
            let left = std::time::Duration::from_secs(secs).saturating_sub(t0.elapsed());
            assert!(
                !left.is_zero(),
                "timed out after {secs} s waiting for {what}"
            );
            let mut p = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            unsafe { libc::poll(&mut p, 1, left.as_millis().min(1000) as libc::c_int) };
            let mut buf = [0u8; 4096];
            // SAFETY: reading into our own buffer.
            let n = unsafe { libc::read(p.fd, buf.as_mut_ptr().cast(), buf.len()) };
            let mut at = 0usize;
            // struct inotify_event { int wd; uint32_t mask, cookie, len; char name[len]; }
            while n > 0 && at + 16 <= n as usize {
                let len = u32::from_ne_bytes(buf[at + 12..at + 16].try_into().unwrap()) as usize;
                let raw = &buf[at + 16..(at + 16 + len).min(n as usize)];
                let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
                self.seen
                    .push(String::from_utf8_lossy(&raw[..end]).into_owned());
                at += 16 + len;
            }
        }
    }
}

/// How long process `pid` has run (from its start time in `/proc/PID/stat`, in clock ticks);
/// zero when it is gone.
pub fn process_age(pid: i32) -> std::time::Duration {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return std::time::Duration::ZERO;
    };
    // the fields after `(comm)`: state is field 3, starttime field 22
    let start: f64 = stat
        .rsplit(')')
        .next()
        .and_then(|rest| rest.split_whitespace().nth(19)?.parse().ok())
        .unwrap_or(0.0);
    let up: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()
        .and_then(|u| u.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    std::time::Duration::from_secs_f64((up - start / hz).max(0.0))
}

/// The sample count in the text `memlens ctl PID status` prints (its `samples N` line).
#[track_caller]
pub fn status_samples(status: &str) -> u64 {
    status
        .lines()
        .find(|l| l.trim_start().starts_with("samples"))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or_else(|| panic!("no samples line in: {status}"))
}

/// Like [`wait_for`], but answers whether `cond` came to hold within `secs` instead of failing,
/// so the caller's own assertion says what was wrong.
pub fn holds_within(secs: u64, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = std::time::Instant::now();
    while !cond() {
        if t0.elapsed() >= std::time::Duration::from_secs(secs) {
            return cond();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    true
}

/// Wait for a child with a deadline: kill it and fail the test when it hangs.
#[track_caller]
pub fn wait_deadline(mut c: std::process::Child, secs: u64, what: &str) -> Output {
    let t0 = std::time::Instant::now();
    while c.try_wait().unwrap().is_none() {
        if t0.elapsed() > std::time::Duration::from_secs(secs) {
            c.kill().ok();
            c.wait().ok();
            panic!("{what}: still running after {secs} s (hung)");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    c.wait_with_output().unwrap()
}

/// The number of threads of process `pid` (0 when it is gone).
pub fn thread_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |d| d.count())
}

/// How a command ended: its output, wall time, peak resident memory and minor page faults (its
/// own and those of the children it waited for).
pub struct Measured {
    pub out: std::process::Output,
    pub wall: std::time::Duration,
    pub max_rss_kb: i64,
    pub minor_faults: u64,
}

/// Run `cmd` (stdin closed) under GNU time (`/usr/bin/time`, package `time`), for its own peak
/// RSS. Not wait4's rusage of a child of ours: Linux keeps a process's peak RSS across exec, so
/// a child forked from this test binary (hundreds of MB, with the other tests running) would
/// report the test binary's peak; GNU time's child is forked from a small process.
#[track_caller]
pub fn measured(cmd: &mut Command) -> Measured {
    let time = Path::new("/usr/bin/time");
    assert!(
        time.exists(),
        "{} is missing: scripts/install-deps.sh installs it (package time)",
        time.display()
    );
    let rss = tempfile::NamedTempFile::new().unwrap();
    let mut timed = Command::new(time);
    timed
        .arg("-f")
        .arg("%M %R")
        .arg("-o")
        .arg(rss.path())
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => timed.env(k, v),
            None => timed.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        timed.current_dir(d);
    }
    let t0 = std::time::Instant::now();
    let out = timed
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot start {timed:?}: {e}"));
    let wall = t0.elapsed();
    // GNU time writes "Command exited with non-zero status N" before the figures when it fails.
    let text = std::fs::read_to_string(rss.path()).unwrap();
    let figures: Vec<u64> = text
        .lines()
        .last()
        .map(|l| {
            l.split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let [max_rss_kb, minor_faults] = figures[..] else {
        panic!(
            "no peak RSS and faults from GNU time: {text:?}{}",
            printed(&out)
        );
    };
    Measured {
        out,
        wall,
        max_rss_kb: max_rss_kb as i64,
        minor_faults,
    }
}

/// `memlens` run as an ordinary user: as uid 65534 (setpriv) when the tests run as root, else as
/// the user running them. True when it is uid 65534 (whose files the caller may need to chown).
pub fn memlens_as_a_user() -> (Command, bool) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return (memlens(), false);
    }
    let mut c = Command::new("setpriv");
    c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(memlens_path());
    (c, true)
}
