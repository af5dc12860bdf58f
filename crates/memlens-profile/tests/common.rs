//! Builds the fixture program (a fake runtime that prints a raw dump with real stacks) once per test.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::process::Command;

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn cc(args: &[&str], dir: &Path) {
    let (prog, rest) = args.split_first().unwrap();
    let st = Command::new(prog)
        .args(rest)
        .current_dir(dir)
        .status()
        .expect("cannot run the C compiler");
    assert!(st.success(), "{args:?} failed");
}

/// Compile the fixture into `dir` (PIE main program, a shared library, a C++ object) and return
/// the raw dump it prints.
pub fn build_and_dump(dir: &Path) -> String {
    let f = fixtures();
    let src = |n: &str| f.join(n).display().to_string();
    let d = dir.display().to_string();
    cc(
        &[
            "gcc",
            "-g",
            "-O2",
            "-fPIC",
            "-shared",
            &src("libsite.c"),
            "-o",
            "libsite.so",
        ],
        dir,
    );
    cc(
        &[
            "g++",
            "-g",
            "-O2",
            "-fPIC",
            "-c",
            &src("cxxsite.cc"),
            "-o",
            "cxxsite.o",
        ],
        dir,
    );
    let rpath = format!("-Wl,-rpath,{d}");
    cc(
        &[
            "gcc",
            "-g",
            "-O2",
            "-fPIE",
            "-pie",
            &src("fakeprof.c"),
            "cxxsite.o",
            "-L.",
            "-lsite",
            &rpath,
            "-lstdc++",
            "-o",
            "fakeprof",
        ],
        dir,
    );
    let out = Command::new(dir.join("fakeprof"))
        .output()
        .expect("cannot run fixture");
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

/// Line number of the line containing `marker` in fixture `file`.
pub fn line_of(file: &str, marker: &str) -> i64 {
    let text = std::fs::read_to_string(fixtures().join(file)).unwrap();
    text.lines()
        .position(|l| l.contains(marker))
        .expect("marker") as i64
        + 1
}

/// Run `go tool pprof ARGS` in an empty environment: no binaries, no symbolization server.
pub fn go_pprof(args: &[&str], cwd: &Path) -> String {
    let empty = tempfile::tempdir().unwrap();
    // Keep go's build cache: `go tool pprof` is built on first use and cached there.
    let cache = Command::new("go")
        .args(["env", "GOCACHE"])
        .output()
        .expect("go env");
    let cache = String::from_utf8_lossy(&cache.stdout).trim().to_string();
    let out = Command::new("go")
        .args(["tool", "pprof"])
        .args(args)
        .current_dir(cwd)
        .env("HOME", empty.path())
        .env("PPROF_BINARY_PATH", empty.path())
        .env("PPROF_TMPDIR", empty.path())
        .env("GOCACHE", cache)
        .output()
        .expect("go tool pprof");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "go tool pprof {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}
