//! Scale: profiles with 10^5 distinct stacks report correctly, a full stack table is said (in the
//! profile, by `memlens run`, in `ctl status`), hostile inputs to `report`/`diff` end within seconds
//! with one error and bounded memory, and a program forking 300 children is not slowed down by
//! the conversion of their profiles. Speed at 10^4…10^6 stacks is measured by
//! `scripts/scale-bench.sh` (docs/scale.md), not here.
use crate::util::*;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn many_stacks(dir: &Path) -> PathBuf {
    compile(
        &root().join("runtime/tests/many_stacks.c"),
        dir,
        "many_stacks",
        &["-fno-omit-frame-pointer"],
    )
}

/// A number after `key ` in `text`.
fn number_after(text: &str, key: &str) -> u64 {
    let at = text
        .find(key)
        .unwrap_or_else(|| panic!("no '{key}' in: {text}"));
    text[at + key.len()..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|d| d.parse().ok())
        .unwrap_or_else(|| panic!("no number after '{key}' in: {text}"))
}

/// 10^5 distinct stacks (exact mode: every allocation is a sample of weight 1): the profile has
/// every one of them, its totals are the runtime's own sample count, and the program's own count
/// of allocations and bytes is found exactly on its stacks, by us and by go tool pprof.
#[test]
fn report_of_100k_distinct_stacks_matches_the_runtime_and_the_program() {
    const N: u64 = 100_000;
    let tmp = test_dir();
    let prog = many_stacks(tmp.path());
    let out = tmp.path().join("p.pb.gz");
    let run = memlens()
        .args(["run", "--exact", "-o", out.to_str().unwrap(), "--"])
        .arg(&prog)
        .arg(N.to_string())
        .ok();
    let said = stdout(&run);
    assert_eq!(number_after(&said, "allocations"), N, "{said}");
    let bytes = number_after(&said, "bytes");

    let table = memlens()
        .env("COLUMNS", "1000")
        .args(["report", "--top", "3"])
        .arg(&out)
        .ok_stdout();
    let samples = number_after(&table, "every allocation), unwinder dwarf,");
    assert!(table.contains(" 0 dropped"), "{table}");
    assert_eq!(
        number_after(&table, "in "),
        samples,
        "alloc_objects total = the runtime's samples: {table}"
    );
    assert!((N..N + 100).contains(&samples), "{table}");

    // Every path's stack, with its one allocation, found exactly.
    for (index, want) in [("alloc_objects", N), ("alloc_space", bytes)] {
        let folded = memlens()
            .args(["report", "--format", "folded", "--sample-index", index])
            .arg(&out)
            .ok_stdout();
        let ours: Vec<u64> = folded
            .lines()
            .filter(|l| l.contains(";rec0") || l.contains(";rec1"))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert_eq!(ours.len() as u64, N, "{index}: distinct stacks");
        assert_eq!(ours.iter().sum::<u64>(), want, "{index}");
    }

    match Command::new("go")
        .args(["tool", "pprof", "-top", "-sample_index=alloc_objects"])
        .arg(&out)
        .output()
    {
        Ok(o) if o.status.success() => {
            let top = stdout(&o);
            assert!(
                top.contains(&format!("of {samples} total")),
                "go tool pprof reads another total: {top}"
            );
        }
        _ => eprintln!("SKIPPED: go tool pprof is not available to read the 10^5-stack profile"),
    }
}

/// A stack table smaller than the program's stacks: the dropped samples are counted as such, and
/// said by `memlens run`, in the profile's header and by `memlens ctl status`.
#[test]
fn a_full_stack_table_is_said_never_silent() {
    let tmp = test_dir();
    let dir = tmp.path();
    let prog = many_stacks(dir);
    let ctl = dir.join("ctl");
    let out = dir.join("p.pb.gz");
    let mut child = memlens()
        .env("MEMLENS_CTL_DIR", &ctl)
        .args(["run", "--exact", "--max-stacks", "1K", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&prog)
        .args(["5000", "64"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The program says its count once its allocations are done; then ask its status.
    let mut said = String::new();
    // (read only up to the first line: the program waits for `stop` after it)
    let mut so = child.stdout.take().unwrap();
    let mut buf = [0u8; 256];
    let t0 = Instant::now();
    while !said.contains('\n') && t0.elapsed() < Duration::from_secs(60) {
        let n = so.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        said.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    let prog_pid = {
        let sock_pid = || {
            std::fs::read_dir(&ctl).ok().and_then(|d| {
                d.filter_map(|e| e.ok())
                    .filter_map(|e| {
                        let n = e.file_name().to_string_lossy().into_owned();
                        n.strip_suffix(".sock")?
                            .split('.')
                            .next()?
                            .parse::<u32>()
                            .ok()
                    })
                    .next()
            })
        };
        wait_for("the program's control socket", 5, || sock_pid().is_some());
        sock_pid().unwrap()
    };
    let status = memlens()
        .env("MEMLENS_CTL_DIR", &ctl)
        .args(["ctl", &prog_pid.to_string(), "status"])
        .ok_stdout();
    std::fs::write(dir.join("stop"), "").unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", printed(&o));
    assert!(status.contains("(table holds 1024)"), "{status}");
    assert!(
        status.contains("because the stack table was full (raise --max-stacks)"),
        "{status}"
    );
    let err = stderr(&o);
    assert!(
        err.contains("the stack table was full at 1024 stacks (raise --max-stacks)"),
        "{err}"
    );
    let table = memlens()
        .env("COLUMNS", "1000")
        .arg("report")
        .arg(&out)
        .ok_stdout();
    assert!(
        table.contains("because the stack table was full (1024 stacks: raise --max-stacks)"),
        "{table}"
    );
    let dropped = number_after(&table, "truncated stacks,");
    let full = number_after(&table, "not in this profile);");
    assert!(full >= 5000 - 1024 && full <= dropped, "{table}");

    // A value the runtime cannot take is a usage error, before the program starts.
    let bad = memlens()
        .args(["run", "--max-stacks", "10", "--", "true"])
        .error(2);
    assert!(stderr(&bad).contains("--max-stacks 10 is out of range"));
}

/// `report` and `diff` on what cannot be a profile: one error line, bounded memory (how fast is
/// `scripts/scale-bench.sh`'s and docs/scale.md's: a FIFO waits its 5 s by design).
#[test]
fn hostile_inputs_end_fast_with_one_error_and_bounded_memory() {
    use std::io::Write;
    let tmp = test_dir();
    let dir = tmp.path();
    // 1 GiB of zeros, gzipped (1 MB): a gzip bomb.
    let bomb = dir.join("bomb.pb.gz");
    {
        let f = std::fs::File::create(&bomb).unwrap();
        let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..1024 {
            gz.write_all(&zeros).unwrap();
        }
        gz.finish().unwrap();
    }
    // A bomb of what looks like profile fields (comment ids: field 13, varint 0), 256 MiB of them.
    let fields = dir.join("fields.pb.gz");
    {
        let f = std::fs::File::create(&fields).unwrap();
        let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::best());
        let chunk: Vec<u8> = [0x68u8, 0x00].repeat(1 << 19);
        for _ in 0..256 {
            gz.write_all(&chunk).unwrap();
        }
        gz.finish().unwrap();
    }
    let fifo = dir.join("fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let s = |p: &Path| p.to_str().unwrap().to_string();
    // (random bytes start like gzip once in 65536 runs)
    let cases: Vec<(Vec<String>, &str, &str)> = vec![
        (
            vec!["report".into(), "/dev/zero".into()],
            "",
            "field number 0",
        ),
        (
            vec!["report".into(), "/dev/urandom".into()],
            "",
            "not a pprof profile|corrupt gzip",
        ),
        (vec!["report".into(), s(&bomb)], "", "field number 0"),
        (
            vec!["diff".into(), "/dev/zero".into(), s(&bomb)],
            "",
            "field number 0",
        ),
        // The budget, lowered so the test stays light: what the decoder holds is bounded by it.
        (vec!["report".into(), s(&fields)], "64M", "larger than 64M "),
        (vec!["report".into(), s(&fifo)], "", "nothing to read from"),
    ];
    for (args, budget, says) in cases {
        let mut cmd = memlens();
        cmd.args(&args);
        if !budget.is_empty() {
            cmd.env("MEMLENS_MAX_INPUT", budget);
        }
        let m = measured(&mut cmd);
        let what = format!("memlens {}", args.join(" "));
        assert_eq!(m.out.status.code(), Some(1), "{what}{}", printed(&m.out));
        assert_one_line_error(&m.out);
        assert!(
            says.split('|').any(|x| stderr(&m.out).contains(x)),
            "{what}{}",
            printed(&m.out)
        );
        assert!(
            m.max_rss_kb < 300 << 10,
            "{what}: peak RSS {} KiB",
            m.max_rss_kb
        );
    }
}

/// A program forking 300 children, each leaving a profile: all 300 are converted. (How long
/// `memlens run` takes beside the program alone is `scripts/fork-bench.sh`'s: docs/benchmarks.md.)
#[test]
fn three_hundred_forked_children_all_leave_profiles() {
    let tmp = test_dir();
    let dir = tmp.path();
    let prog = compile(
        &root().join("runtime/tests/many_children.c"),
        dir,
        "many_children",
        &[],
    );
    let out = dir.join("f.pb.gz");
    let run = memlens()
        .args(["run", "-o"])
        .arg(&out)
        .arg("--")
        .arg(&prog)
        .arg("300")
        .ok();
    let written = stderr(&run)
        .lines()
        .filter(|l| l.contains("memlens: profile of pid") && l.contains("written to"))
        .count();
    assert_eq!(written, 301, "{}", printed(&run));
}
