//! One test per C unit-test file of `runtime/tests/unit/` (each a list of TEST()s, see `unit.h`):
//! built against the runtime's lower floors with ASan, UBSan and the debug invariants, run, and
//! required to exit 0. A failure shows every failed CHECK with its values.
use crate::cbuild;

/// Build and run `runtime/tests/unit/<name>.c`; a hang past `secs` is a failure.
fn unit(name: &str, secs: u64) {
    let bin = cbuild::unit(name, &[]);
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
/// clearing and sparseness, pages given back past 64 MiB, size classes, a random model check, and
/// the range mapped on demand under `ulimit -v`.
#[test]
fn range() {
    unit("range_test", 300);
}
