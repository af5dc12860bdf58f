//! Diff of two dumps of the fixture: matching by function names across processes, the NEW − BASE
//! pprof, and `go tool pprof -diff_base` on our files.
mod common;
use memlens_profile::SampleIndex;
use memlens_profile::{compare, difference_profile};
use std::path::Path;
use std::process::Command;

/// Two runs of the fixture (different processes, different ASLR bases); in the second the
/// library site holds 900000 more live bytes.
fn two_dumps(dir: &Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let a = common::build_and_dump(dir);
    let b = String::from_utf8(Command::new(dir.join("fakeprof")).output().unwrap().stdout).unwrap();
    let b = b.replace(
        "stack 3 196608 3000 98304 1500 ",
        "stack 3 196608 3000 98304 901500 ",
    );
    assert_ne!(a, b);
    let (pa, pb) = (dir.join("a.raw"), dir.join("b.raw"));
    std::fs::write(&pa, a).unwrap();
    std::fs::write(&pb, b).unwrap();
    (pa, pb)
}

#[test]
fn growth_is_found_per_stack_and_function_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_dumps(dir.path());
    let (pa, pb) = (
        memlens_profile::load(&a).unwrap(),
        memlens_profile::load(&b).unwrap(),
    );
    let c = compare(&pa, &pb, SampleIndex::InuseSpace);
    let (stacks, funcs) = (&c.stacks, &c.functions);
    assert_eq!(
        stacks.len(),
        4,
        "stacks of two processes must match by names"
    );
    assert_eq!(c.frames_of(&stacks[0])[0].function, "lib_site");
    assert_eq!(stacks[0].delta, 900000.0);
    assert!(stacks[1..].iter().all(|s| s.delta == 0.0));
    assert_eq!(funcs[0].function, "lib_site");
    assert_eq!(funcs[0].flat_delta, 900000.0);
    let main = funcs.iter().find(|f| f.function == "main").unwrap();
    assert_eq!(main.cum_delta, 900000.0);
    assert_eq!(main.flat_delta, 0.0);

    let d = difference_profile(&pa, &pb);
    assert_eq!(d.total(SampleIndex::InuseSpace), 900000.0);
    assert_eq!(d.total(SampleIndex::AllocSpace), 0.0);
    // Written and read back, it still says the same.
    let out = dir.path().join("d.pb.gz");
    memlens_profile::write_pprof(&d, &out).unwrap();
    let back = memlens_profile::load(&out).unwrap();
    assert_eq!(back.total(SampleIndex::InuseSpace), 900000.0);
}

#[test]
fn go_tool_pprof_diff_base_works_on_our_files() {
    assert!(
        Command::new("go")
            .arg("version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "`go` is not installed: scripts/install-deps.sh installs golang-go, which provides `go tool pprof`"
    );
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = two_dumps(dir.path());
    let (ga, gb) = (dir.path().join("a.pb.gz"), dir.path().join("b.pb.gz"));
    memlens_profile::convert_raw(&a, &ga).unwrap();
    memlens_profile::convert_raw(&b, &gb).unwrap();
    let d = difference_profile(
        &memlens_profile::load(&ga).unwrap(),
        &memlens_profile::load(&gb).unwrap(),
    );
    let gd = dir.path().join("d.pb.gz");
    memlens_profile::write_pprof(&d, &gd).unwrap();
    let run = |args: &[&str]| common::go_pprof(args, dir.path());
    let top = run(&[
        "-top",
        "-sample_index=inuse_space",
        "-diff_base",
        "a.pb.gz",
        "b.pb.gz",
    ]);
    let first = first_row(&top);
    assert!(
        first.contains("lib_site") && first.contains("878.91kB"),
        "{top}"
    );
    let theirs = first.to_string();
    let top = run(&["-top", "-sample_index=inuse_space", "d.pb.gz"]);
    // Same row, percentages included: our base samples carry pprof's own diff-base label.
    assert_eq!(first_row(&top), theirs, "{top}");
}

/// The first data row of `pprof -top` output (the line after the column header).
fn first_row(top: &str) -> &str {
    top.lines()
        .skip_while(|l| !l.contains("flat%"))
        .nth(1)
        .unwrap_or("")
}
