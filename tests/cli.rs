//! The command line itself: help with examples, one-line errors, exit codes.
mod common;
use common::*;

#[test]
fn help_lists_commands_with_examples() {
    let o = run(&["--help"]);
    assert!(o.status.success());
    let s = stdout(&o);
    for c in [
        "run",
        "ctl",
        "report",
        "diff",
        "study",
        "bench",
        "sysinfo",
        "Examples:",
    ] {
        assert!(s.contains(c), "--help lacks {c}");
    }
}

#[test]
fn every_subcommand_help_has_an_example() {
    for sub in [
        &["run"][..],
        &["ctl"],
        &["report"],
        &["diff"],
        &["study"],
        &["bench", "alloc"],
        &["bench", "latency"],
        &["bench", "bandwidth"],
        &["sysinfo"],
    ] {
        let mut args: Vec<&str> = sub.to_vec();
        args.push("--help");
        let o = run(&args);
        assert!(o.status.success(), "{sub:?} --help failed");
        assert!(
            stdout(&o).contains("Example"),
            "{sub:?} --help has no example"
        );
    }
}

#[test]
fn unknown_option_is_a_one_line_usage_error() {
    let o = run(&["run", "--no-such-option"]);
    assert_one_line_error(&o);
    assert_eq!(o.status.code(), Some(2));
    let o = run(&["no-such-command"]);
    assert_one_line_error(&o);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn sysinfo_reports_machine_and_json() {
    let d = tempfile::tempdir().unwrap();
    let j = d.path().join("m.json");
    let o = run(&["sysinfo", "--json", j.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("TSC"));
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(j).unwrap()).unwrap();
    assert!(v["logical_cpus"].as_u64().unwrap() >= 1);
    assert!(v["tsc_hz"].as_f64().unwrap() > 1e8);
}
