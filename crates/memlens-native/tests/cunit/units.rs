//! One test per C unit-test file of `runtime/tests/unit/` (each a list of TEST()s, see `unit.h`):
//! built against the runtime's lower floors with ASan, UBSan and the debug invariants, run, and
//! required to exit 0. A failure shows every failed CHECK with its values.
use crate::cbuild;

/// Build and run `runtime/tests/unit/<name>.c`; a hang past `secs` is a failure.
fn unit(name: &str, secs: u64) {
    let bin = cbuild::unit(name, cbuild::Checks::Debug, &[]);
    let ran = cbuild::run(&bin, &[], &[], secs).ok(&format!("runtime/tests/unit/{name}.c"));
    print!("{}", ran.stdout);
}

/// base/fmt.c, base/out.c and log.c's printf subset against stdio's formatting.
#[test]
fn fmt() {
    unit("fmt_test", 300);
}

/// sample/sample.c: the countdown's draws against Exp(R), sampling probabilities, the weights'
/// values and the estimates' bias, the modes (exact, inactive, busy) and the fast switch.
#[test]
fn sample() {
    unit("sample_test", 300);
}

/// store/stacks.c: interning (what makes stacks equal), recursion's stacks, four threads publishing
/// at once, the walks, totals and reset, a fork child's stale counts, a full table.
#[test]
fn stacks() {
    unit("stacks_test", 300);
}

/// record/range.c: the boot arena, first fit, runs merged and split, resizing in place, calloc's
/// clearing and sparseness, freed pages given back when the live blocks grow past them and past
/// 64 MiB, size classes, a random model check, and the range mapped on demand under `ulimit -v`.
#[test]
fn range() {
    unit("range_test", 300);
}

/// unwind/cfi.c: rules from hand-built tables (every instruction it follows, every frame it hands
/// to libunwind, tables cut short or lying), and this program's and libc's own tables walked frame
/// by frame against the compiler's return addresses.
#[test]
fn cfi() {
    unit("cfi_test", 300);
}

/// The CFI fuzzer (`runtime/tests/unit/cfi_fuzz.c`), a bounded run from a fixed seed: arbitrary and
/// mutated tables give well-formed rules with no read outside them (ASan), no undefined behaviour
/// (UBSan) and no hang. Most inputs must reach the interpreter and come out as frame rules, or the
/// fuzzer would only be exercising the header checks.
#[test]
fn cfi_fuzz() {
    let bin = cbuild::unit("cfi_fuzz", cbuild::Checks::Debug, &[]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("failure.bin");
    let ran = cbuild::run(
        &bin,
        &["--iterations", "300000", "--seed", "1"],
        &[("CFI_FUZZ_OUT", out.to_str().unwrap())],
        600,
    )
    .ok("runtime/tests/unit/cfi_fuzz.c");
    print!("{}", ran.stdout);
    // "cfi_fuzz: N inputs from seed S in T s: F frame rules, O outermost, U unsupported"
    let field = |word: &str| -> u64 {
        let w: Vec<&str> = ran.stdout.split_whitespace().collect();
        let i = w
            .iter()
            .position(|x| x.trim_end_matches(',') == word)
            .unwrap();
        w[i - 1]
            .parse()
            .unwrap_or_else(|_| panic!("{word} in {}", ran.stdout))
    };
    let (inputs, frames) = (field("inputs"), field("frame"));
    assert_eq!(inputs, 300_000, "{}", ran.stdout);
    assert!(
        frames * 10 > inputs,
        "too few inputs reached a frame rule: {}",
        ran.stdout
    );
    assert!(field("outermost") > 0, "{}", ran.stdout);
}

/// Every C file of runtime/tests/unit is run by a test here (or is a helper a test builds): a new
/// `*_test.c` without its line above would otherwise never run.
#[test]
fn every_unit_file_is_run() {
    let run = [
        "fmt_test",
        "sample_test",
        "stacks_test",
        "range_test",
        "cfi_test",
        "cfi_fuzz",
    ];
    let elsewhere = ["dump_test", "dump_plugin"]; // raw_writer.rs and readers.rs build these
    let dir = cbuild::root().join("runtime/tests/unit");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "c"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut known: Vec<String> = run
        .iter()
        .chain(&elsewhere)
        .map(|s| s.to_string())
        .collect();
    known.sort();
    assert_eq!(
        found,
        known,
        "C files in {} without a test that runs them",
        dir.display()
    );
}
