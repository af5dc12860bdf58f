//! Helpers shared by the end-to-end tests.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The `memlens` binary under test.
pub fn memlens() -> Command {
    Command::new(env!("CARGO_BIN_EXE_memlens"))
}

/// Run memlens with `args`, returning its output.
pub fn run(args: &[&str]) -> Output {
    memlens().args(args).output().expect("cannot start memlens")
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The repository root (for test programs under runtime/tests, workloads/…).
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// Compile a C or C++ test program into `dir`, returning the executable's path.
pub fn compile(src: &Path, dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let cxx = src.extension().is_some_and(|e| e == "cc" || e == "cpp");
    let st = Command::new(if cxx { "g++" } else { "gcc" })
        .args(["-O2", "-g", "-pthread"])
        .args(flags)
        .arg(src)
        .arg("-o")
        .arg(&out)
        .arg("-ldl")
        .status()
        .expect("cannot run the C compiler");
    assert!(st.success(), "compiling {} failed", src.display());
    out
}

/// Assert an error is a single `memlens: error: …` line and no panic trace.
pub fn assert_one_line_error(o: &Output) {
    let e = stderr(o);
    let lines: Vec<&str> = e.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(
        !o.status.success(),
        "expected failure, got success; stderr: {e}"
    );
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
