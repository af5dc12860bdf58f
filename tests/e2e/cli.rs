//! The command line itself: help with examples, one-line errors, exit codes.
use crate::util::*;

#[test]
fn help_lists_commands_with_examples() {
    let s = memlens().arg("--help").ok_stdout();
    for c in [
        "run",
        "ctl",
        "report",
        "diff",
        "check",
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
        &["check"],
        &["study"],
        &["bench", "alloc"],
        &["bench", "latency"],
        &["bench", "bandwidth"],
        &["sysinfo"],
    ] {
        let mut args: Vec<&str> = sub.to_vec();
        args.push("--help");
        let out = memlens().args(&args).ok_stdout();
        assert!(out.contains("Example"), "{sub:?} --help has no example");
    }
}

#[test]
fn unknown_option_is_a_one_line_usage_error() {
    memlens().args(["run", "--no-such-option"]).error(2);
    memlens().arg("no-such-command").error(2);
    // --top 0 used to print two empty tables.
    for cmd in [&["report", "p.pb.gz"][..], &["diff", "a.pb.gz", "b.pb.gz"]] {
        let o = memlens().args(cmd).args(["--top", "0"]).error(2);
        assert!(stderr(&o).contains("--top"), "{}", stderr(&o));
    }
}

/// Values too large to mean anything are one-line usage errors naming the option, before anything
/// runs: never a silent default (an interval the runtime cannot take) nor a panic (a duration
/// that overflows the clock). A missing argument is named.
#[test]
fn out_of_range_values_and_missing_arguments_are_named() {
    let huge = "99999999999999999h";
    let cases: [(&[&str], &str); 9] = [
        (
            &["run", "--interval", "9223372036854775808", "--", "true"],
            "--interval",
        ),
        (
            &["run", "--interval", "18446744073709551615", "--", "true"],
            "--interval",
        ),
        (&["run", "--dump-every", huge, "--", "true"], "--dump-every"),
        (
            &[
                "run",
                "--start-on-growth",
                &format!("1M/{huge}"),
                "--",
                "true",
            ],
            "--start-on-growth",
        ),
        (
            &[
                "run",
                "--start-on-growth",
                "1M/1s",
                "--profile-for",
                huge,
                "--",
                "true",
            ],
            "--profile-for",
        ),
        (&["attach", "1", "--for", huge], "--for"),
        (&["attach", "1", "--interval", "2T"], "--interval"),
        (
            &["ctl", "1", "start", "--interval", "9223372036854775808"],
            "--interval",
        ),
        (&["run", "--"], "<CMD>"),
    ];
    for (args, named) in cases {
        let o = memlens().args(args).error(2);
        assert!(stderr(&o).contains(named), "{args:?}: {}", stderr(&o));
    }
    for args in [["attach"], ["report"]] {
        let o = memlens().args(args).error(2);
        assert!(
            stderr(&o).contains("<"),
            "{args:?} names no argument: {}",
            stderr(&o)
        );
    }
}

#[test]
fn sysinfo_reports_machine_and_json() {
    let d = test_dir();
    let j = d.path().join("m.json");
    let out = memlens()
        .args(["sysinfo", "--json", j.to_str().unwrap()])
        .ok_stdout();
    assert!(out.contains("TSC"), "{out}");
    let v: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(j).unwrap()).unwrap();
    assert!(v["logical_cpus"].as_u64().unwrap() >= 1);
    assert!(v["tsc_hz"].as_f64().unwrap() > 1e8);
}

#[test]
fn report_and_diff_on_bad_files_are_one_line_errors() {
    let d = test_dir();
    let junk = d.path().join("junk.pb.gz");
    std::fs::write(&junk, [0x1fu8, 0x8b, 8, 0, 1, 2, 3]).unwrap();
    let text = d.path().join("notes.txt");
    std::fs::write(&text, "just some text\n").unwrap();
    let cut = d.path().join("cut.raw");
    std::fs::write(&cut, "memlens-raw 1\npid 1\nexe /x\ninterval 0\n").unwrap();
    for f in [d.path().join("absent.pb.gz"), junk, text, cut] {
        let f = f.to_str().unwrap();
        memlens().args(["report", f]).error(1);
        assert_one_line_error(&run(&["diff", f, f]));
    }
    memlens()
        .args(["report", "x.pb.gz", "--sample-index", "cpu"])
        .error(2);
}

#[test]
fn report_of_a_profile_whose_binaries_are_absent_shows_addresses() {
    let d = test_dir();
    let raw = d.path().join("x.raw");
    std::fs::write(
        &raw,
        "memlens-raw 1\npid 9\nexe /gone/app\ninterval 524288\nsamples 1\n\
         module 0x400000 0123abcd loaded /gone/app\nsegment 0x1000 0x1000 0x1000 r-x\n\
         maps\nend maps\nstack 1 65536 600000 65536 600000 0 0x401234 0x401500\nend\n",
    )
    .unwrap();
    let o = memlens().args(["report", raw.to_str().unwrap()]).ok();
    assert!(stdout(&o).contains("app+0x1233"), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("memlens: warning: cannot symbolize /gone/app"),
        "{}",
        stderr(&o)
    );
    let folded = memlens()
        .args(["report", raw.to_str().unwrap(), "--format", "folded"])
        .ok_stdout();
    assert_eq!(folded.trim(), "app+0x14ff;app+0x1233 600000");
}

#[test]
fn diff_names_the_stack_that_grew() {
    let d = test_dir();
    let dump = |leak: u64| {
        format!(
            "memlens-raw 1\npid 9\nexe /gone/app\ninterval 524288\nsamples 2\n\
             module 0x400000 - loaded /gone/app\nsegment 0x1000 0x1000 0x1000 r-x\nmaps\nend maps\n\
             stack 1 65536 4096 65536 4096 0 0x401100 0x401500\n\
             stack 1 65536 {leak} 65536 {leak} 0 0x401200 0x401500\nend\n"
        )
    };
    let (a, b) = (d.path().join("a.raw"), d.path().join("b.raw"));
    std::fs::write(&a, dump(1000)).unwrap();
    std::fs::write(&b, dump(901000)).unwrap();
    let out = d.path().join("d.pb.gz");
    let json = memlens()
        .args([
            "diff",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--format",
            "json",
            "-o",
            out.to_str().unwrap(),
        ])
        .ok_stdout();
    let j: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(j["sample_index"], "inuse_space");
    assert_eq!(j["delta"], 900000.0);
    assert_eq!(j["stacks"][0]["frames"][0]["function"], "app+0x11ff");
    assert_eq!(j["functions"][0]["flat_delta"], 900000.0);
    let folded = memlens()
        .args([
            "report",
            out.to_str().unwrap(),
            "--sample-index",
            "inuse_space",
            "--format",
            "folded",
        ])
        .ok_stdout();
    assert!(folded.contains("app+0x14ff;app+0x11ff 900000"), "{folded}");
    let text = memlens()
        .args(["diff", a.to_str().unwrap(), b.to_str().unwrap()])
        .ok_stdout();
    assert!(
        text.contains("stacks that grew most") && text.contains("+879 KiB"),
        "{text}"
    );
}

/// The widest line of `s`, in characters (each is one terminal column).
fn widest(s: &str) -> usize {
    s.lines().map(|l| l.chars().count()).max().unwrap_or(0)
}

fn with_columns(cols: &str, args: &[&str]) -> String {
    memlens().env("COLUMNS", cols).args(args).ok_stdout()
}

#[test]
fn output_fits_a_terminal_of_100_columns() {
    let d = test_dir();
    let prof = profile_of("long_names.cc", d.path(), &[], &["--interval", "64K"]);
    let p = prof.to_str().unwrap();

    // The report: pprof-style short names, stacks wrapped into the width.
    let wide = with_columns("400", &["report", p]);
    let narrow = with_columns("100", &["report", p]);
    assert!(widest(&narrow) <= 100, "wider than 100:\n{narrow}");
    assert!(
        narrow.contains("Registry::add_entry") && !narrow.contains("std::allocator<"),
        "names not shortened:\n{narrow}"
    );
    assert!(
        widest(&wide) > 100,
        "the stacks need more than 100 columns:\n{wide}"
    );
    // JSON keeps the full names.
    let json = with_columns("100", &["report", p, "--format", "json"]);
    assert!(json.contains("std::allocator<"), "full names lost in JSON");
    // Every view, and a diff against a second run (stacks grown and shrunk), fit as well.
    for view in ["peak", "leaks", "temporaries", "timeline"] {
        let out = with_columns("100", &["report", p, "--view", view]);
        assert!(widest(&out) <= 100, "--view {view} wider than 100:\n{out}");
    }
    let prof2 = d.path().join("q.pb.gz");
    memlens()
        .args(["run", "--interval", "16K", "-o"])
        .arg(&prof2)
        .arg("--")
        .arg(d.path().join("long_names"))
        .ok();
    let diff = with_columns("100", &["diff", p, prof2.to_str().unwrap()]);
    assert!(widest(&diff) <= 100, "diff wider than 100:\n{diff}");

    // bench alloc: its wide table is split by topic; no latency reads 0.
    let alloc = with_columns(
        "100",
        &["bench", "alloc", "--quick", "--allocators", "system,pooled"],
    );
    assert!(widest(&alloc) <= 100, "wider than 100:\n{alloc}");
    assert!(alloc.contains("(continued: latency"), "{alloc}");
    let cells: Vec<&str> = alloc
        .split(['│', ' ', '/'])
        .filter(|c| !c.is_empty())
        .collect();
    assert!(
        !cells.contains(&"0.0"),
        "a per-call latency reads 0.0 instead of <resolution:\n{alloc}"
    );

    // bench latency, small: three orders × three sizes of columns, split by order.
    let lat = with_columns(
        "100",
        &[
            "bench",
            "latency",
            "--min-ws",
            "4K",
            "--max-ws",
            "64K",
            "--repeats",
            "2",
            "--min-time",
            "1ms",
            "--counters",
            "software",
        ],
    );
    assert!(widest(&lat) <= 100, "wider than 100:\n{lat}");
    assert!(lat.contains("(continued: random"), "{lat}");
}

/// Tokens of a report's text as a name may be broken (at spaces and after `::`), borders dropped:
/// the same at any width when names are wrapped between their parts, never inside one.
fn name_tokens(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s
        .split(|c: char| c.is_whitespace() || c == '│')
        .flat_map(|w| w.split_inclusive("::"))
        .filter(|t| !t.is_empty() && !t.chars().all(|c| "─═┌┐└┘╞╡├┤┬┴┼".contains(c)))
        .map(String::from)
        .collect();
    v.sort();
    v
}

/// A C++ service's report at 80 columns, piped (not a terminal): every table whole and within 80
/// columns, names wrapped only between their parts, the program's own frame in every stack
/// (library frames folded, never the program's function hidden behind them), one row per
/// function as displayed, and where to go next.
#[test]
fn report_at_80_columns_keeps_the_programs_own_frames() {
    let d = test_dir();
    let prof = profile_of(
        "cxx_service.cc",
        d.path(),
        &["-pthread"],
        &["--interval", "64K"],
    );
    let p = prof.to_str().unwrap();
    for view in ["alloc", "peak", "leaks", "temporaries", "timeline"] {
        let out = with_columns("80", &["report", p, "--view", view, "--top", "20"]);
        assert!(widest(&out) <= 80, "--view {view} wider than 80:\n{out}");
        assert!(
            !out.contains("(continued"),
            "--view {view} split in parts:\n{out}"
        );
        if view == "timeline" {
            continue;
        }
        assert!(out.contains("go tool pprof -http"), "{out}");
        // each stack: from its row's first line to the next row's, the program's own frame
        // (service:: or main) shown, and no "… N more" before it
        let stacks = out.split("top stacks by").nth(1).unwrap();
        // a row starts where its first column (as wide as its header) holds a number
        let lines: Vec<&str> = stacks.lines().filter(|l| l.starts_with('│')).collect();
        let w = lines[0]
            .trim_start_matches('│')
            .trim_start()
            .split(' ')
            .next()
            .unwrap()
            .len()
            + 2;
        let mut rows: Vec<String> = Vec::new();
        for l in &lines[1..] {
            let new_row = l.chars().skip(1).take(w).any(|c| c.is_ascii_digit());
            match rows.last_mut() {
                Some(r) if !new_row => r.push_str(&format!("\n{l}")),
                _ => rows.push(l.to_string()),
            }
        }
        assert!(!rows.is_empty(), "--view {view}: no stacks\n{out}");
        for r in rows {
            let own = r.find("service::").or_else(|| r.find(" main "));
            assert!(
                own.is_some(),
                "--view {view}: a stack without the program's frame:\n{r}"
            );
            if let Some(more) = r.find(" more") {
                assert!(
                    more > own.unwrap(),
                    "--view {view}: '… more' before the program's frame:\n{r}"
                );
            }
        }
    }
    // names are wrapped, never cut: the words at 80 columns are those at 400
    for args in [&["report", p][..], &["report", p, "--view", "peak"]] {
        let narrow = with_columns("80", args);
        let wide = with_columns("400", args);
        assert_eq!(name_tokens(&narrow), name_tokens(&wide), "{narrow}");
    }
    // one row per function as displayed: a template's instantiations are one
    let out = with_columns("80", &["report", p, "--top", "40"]);
    let funcs = out.split("top stacks by").next().unwrap();
    assert_eq!(
        funcs.matches("std::__new_allocator::allocate").count(),
        1,
        "{funcs}"
    );
}

/// Every measuring command says at once when other programs keep the machine busy.
#[test]
fn measuring_commands_warn_when_the_machine_is_busy() {
    let cpus = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .min(4);
    let mut loops: Vec<std::process::Child> = (0..cpus)
        .map(|_| {
            std::process::Command::new("sh")
                .args(["-c", "while :; do :; done"])
                .spawn()
                .unwrap()
        })
        .collect();
    let cases: [&[&str]; 3] = [
        &[
            "bench",
            "latency",
            "--min-ws",
            "4K",
            "--max-ws",
            "8K",
            "--repeats",
            "2",
            "--min-time",
            "1ms",
            "--counters",
            "software",
        ],
        &[
            "bench",
            "bandwidth",
            "--size",
            "64K",
            "--repeats",
            "1",
            "--threads",
            "1",
            "--no-pmem",
        ],
        &[
            "bench",
            "alloc",
            "--quick",
            "--allocators",
            "system",
            "--threads",
            "1",
            "--sizes",
            "128",
        ],
    ];
    let outs: Vec<String> = cases
        .iter()
        .map(|c| stderr(&memlens().args(*c).ok()))
        .collect();
    for l in &mut loops {
        let _ = l.kill();
        let _ = l.wait();
    }
    for (c, e) in cases.iter().zip(outs) {
        assert!(
            e.contains("warning: the machine is busy: other programs keep"),
            "{c:?} said nothing of the busy loops: {e}"
        );
    }
}
