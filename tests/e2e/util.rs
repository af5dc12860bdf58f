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
