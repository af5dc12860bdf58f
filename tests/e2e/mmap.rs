//! Anonymous mmap as a kind of its own (issue 31 item 4): the runtime's mmap/munmap/mremap
//! interposer samples mappings by bytes like malloc (on by default); the profile shows them under an
//! `[anonymous mmap]` frame at the call site that mapped them, and the report says how much of the
//! total they are. An allocator's own arenas (jemalloc, tcmalloc, mimalloc preloaded) are not
//! counted again: their blocks are the heap.

use crate::util::*;
use std::process::Command;

const MMAP_FRAME: &str = "[anonymous mmap]";

/// In-use bytes of the stacks whose innermost frame is the mmap frame and whose next is `caller`
/// (or any caller when `None`).
fn mmap_inuse(report: &serde_json::Value, caller: Option<&str>) -> f64 {
    let stacks = report["stacks"].as_array().expect("stacks");
    stacks
        .iter()
        .filter(|s| {
            let f = &s["frames"];
            f[0]["function"] == MMAP_FRAME && caller.is_none_or(|c| f[1]["function"] == c)
        })
        .map(|s| s["value"].as_f64().unwrap())
        .sum()
}

/// tests/e2e/progs/NAME.c, built in `dir` with frame pointers.
fn prog(dir: &TestDir, name: &str) -> std::path::PathBuf {
    let src = root().join(format!("tests/e2e/progs/{name}.c"));
    compile(&src, dir.path(), name, &["-O1", "-fno-omit-frame-pointer"])
}

#[test]
fn a_kept_mapping_shows_at_its_call_site() {
    let dir = test_dir();
    let prof = dir.path().join("p.pb.gz");
    memlens()
        .arg("run")
        .arg("-o")
        .arg(&prof)
        .arg("--")
        .arg(prog(&dir, "mmap_keep"))
        .ok();
    let r = report_json(&prof, &["--sample-index", "inuse_space"]);
    let at_site = mmap_inuse(&r, Some("keep_mapping"));
    // A 64 MiB mapping against a 512 KiB interval is sampled with certainty, its weight exact.
    let want = (64u64 << 20) as f64;
    assert!(
        (at_site - want).abs() <= want * 0.01,
        "64 MiB at keep_mapping, got {at_site}\n{r:#}"
    );
    // The 8 MiB mapping was unmapped: nothing else is in use as mmap.
    assert_eq!(mmap_inuse(&r, None), at_site, "{r:#}");
    assert_eq!(
        r["mmap_totals"]["inuse_space"].as_f64(),
        Some(at_site),
        "{r:#}"
    );
    let text = memlens()
        .args(["report", "--sample-index", "inuse_space"])
        .arg(&prof)
        .ok_stdout();
    assert!(
        text.contains(
            "of which anonymous mmap (frame `[anonymous mmap]`): alloc 72.00 MiB, in use 64.00 MiB"
        ),
        "{text}"
    );
    // The peak: both mappings were live at once (72 MiB, each sampled with certainty). A shadow's
    // peak weights are drawn at the size it stands for, not at its one byte (which weighed ~1 MiB).
    let peak = memlens()
        .args(["report", "--view", "peak"])
        .arg(&prof)
        .ok_stdout();
    assert!(
        peak.contains("estimated live heap at its peak 72.00 MiB"),
        "{peak}"
    );
    if Command::new("go").arg("version").output().is_err() {
        println!("SKIPPED: go tool pprof (go not installed)");
        return;
    }
    let top = go_pprof_top(&prof, Some("inuse_space"), dir.path());
    let line = top
        .lines()
        .find(|l| l.ends_with(MMAP_FRAME))
        .unwrap_or_else(|| panic!("no {MMAP_FRAME} row in pprof -top:\n{top}"));
    assert!(line.trim_start().starts_with("64MB"), "{line}\n{top}");
}

const DICT_PY: &str = r#"
import os
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
def heap_rss():
    with open("/proc/self/smaps") as f:
        lines = f.read().splitlines()
    for i, l in enumerate(lines):
        if l.endswith("[heap]"):
            return next(int(x.split()[1]) * 1024 for x in lines[i + 1:] if x.startswith("Rss:"))
    return 0
before, hb = rss(), heap_rss()
d = {}
for i in range(920_000):
    d[i] = str(i) * 3
print(f"rss_growth {rss() - before} brk_growth {heap_rss() - hb}", flush=True)
os._exit(0)  # keep the dict: the profile is taken at exit
"#;

/// The `rss_growth` and `brk_growth` the script printed.
fn growth(out: &str) -> (f64, f64) {
    let nums: Vec<f64> = out
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    let [rss, brk] = nums[..] else {
        panic!("no rss line: {out}")
    };
    (rss, brk)
}

/// python3 building a ~150 MB dict (920 000 entries): pymalloc's arenas are mmap, its big table malloc. Heap + mmap
/// in the profile against the RSS the same script grows by when run without memlens (its own
/// /proc count): under memlens the RSS also holds the runtime's range, which keeps the pages of
/// freed sampled blocks (the dict's old tables), so that is not the program's memory.
#[test]
fn python_dict_heap_and_mmap_cover_its_rss() {
    let dir = test_dir();
    let script = dir.path().join("dict.py");
    std::fs::write(&script, DICT_PY).unwrap();
    let plain = Command::new("/usr/bin/python3")
        .arg(&script)
        .output()
        .unwrap();
    assert_ok(&"python3 alone", &plain);
    let (rss, _) = growth(&stdout(&plain));
    let prof = dir.path().join("p.pb.gz");
    let o = memlens()
        .arg("run")
        .arg("-o")
        .arg(&prof)
        .args(["--", "/usr/bin/python3"])
        .arg(&script)
        .output()
        .unwrap();
    assert_ok(&"memlens run python3", &o);
    let (rss_under, brk) = growth(&stdout(&o));
    let r = report_json(&prof, &["--sample-index", "inuse_space"]);
    let total = r["totals"]["inuse_space"].as_f64().unwrap();
    let mmap = mmap_inuse(&r, None);
    let share = total / rss;
    let mib = |b: f64| b / 1048576.0;
    println!(
        "python3 dict: RSS grew {:.1} MiB alone ({:.1} MiB under memlens, [heap] {:.1} MiB), \
         profile in use {:.1} MiB ({:.1} MiB mmap): {:.1} % of the growth alone",
        mib(rss),
        mib(rss_under),
        mib(brk),
        mib(total),
        mib(mmap),
        share * 100.0
    );
    assert!(
        mmap > 0.3 * rss,
        "pymalloc's arenas seen as mmap: {mmap} of {rss}"
    );
    // ~1 MiB arenas and one big table against a 512 KiB interval: the estimate's error is a few %.
    assert!(
        (0.9..=1.2).contains(&share),
        "heap + mmap cover {:.1} % of RSS growth",
        share * 100.0
    );
}

/// A mapping cut by munmap keeps the live bytes of what is left, and one that mremap shrinks and
/// grows those of its new length (mmap_partial.c: 48 MiB and 24 MiB left of 64 and 32).
#[test]
fn a_mapping_partly_unmapped_or_remapped_keeps_what_is_left() {
    let dir = test_dir();
    let prof = dir.path().join("p.pb.gz");
    memlens()
        .arg("run")
        .arg("-o")
        .arg(&prof)
        .arg("--")
        .arg(prog(&dir, "mmap_partial"))
        .ok();
    let r = report_json(&prof, &["--sample-index", "inuse_space"]);
    let mib = |n: u64| (n << 20) as f64;
    for (site, want) in [("cut_mapping", mib(48)), ("remap_mapping", mib(24))] {
        let got = mmap_inuse(&r, Some(site));
        // 64 and 32 MiB against a 512 KiB interval: sampled with certainty, the weights exact.
        assert!(
            (got - want).abs() <= want * 0.01,
            "{site}: {got} bytes in use, {want} expected\n{r:#}"
        );
    }
    assert_eq!(mmap_inuse(&r, None), mib(72), "{r:#}");
}

/// An allocator preloaded before the program maps its arenas through the same mmap: those bytes
/// are its blocks, which memlens counts through malloc. The profile holds no anonymous mmap, and
/// with jemalloc the 96 MiB the program keeps once. (With tcmalloc and mimalloc preloaded the heap
/// itself reads about twice what is held whether mmap is sampled or not: their `tc_*`/`mi_*`
/// entry points are hooked behind the interposed malloc, a double count of the hooks' own, not
/// checked here.)
#[test]
fn preloaded_allocators_arenas_are_not_counted_twice() {
    let dir = test_dir();
    let exe = prog(&dir, "mmap_heap");
    let lib = "/usr/lib/x86_64-linux-gnu";
    for so in [
        "libjemalloc.so.2",
        "libtcmalloc_minimal.so.4",
        "libmimalloc.so.2",
    ] {
        let path = format!("{lib}/{so}");
        assert!(
            std::path::Path::new(&path).exists(),
            "{path} missing: scripts/install-deps.sh installs it"
        );
        let prof = dir.path().join(format!("{so}.pb.gz"));
        let o = memlens()
            .env("LD_PRELOAD", &path)
            .arg("run")
            .arg("-o")
            .arg(&prof)
            .arg("--")
            .arg(&exe)
            .output()
            .unwrap();
        assert_ok(&so, &o);
        let held = (1536u64 * (64 << 10)) as f64;
        let r = report_json(&prof, &["--sample-index", "inuse_space"]);
        let total = r["totals"]["inuse_space"].as_f64().unwrap();
        let mmap = mmap_inuse(&r, None).max(0.0);
        println!(
            "{so}: in use {:.1} MiB ({:.1} MiB anonymous mmap), the program holds {:.1} MiB",
            total / 1048576.0,
            mmap / 1048576.0,
            held / 1048576.0
        );
        // 1536 blocks of 64 KiB against 512 KiB: about 190 samples, a standard error of ~7 %.
        assert!(
            !so.starts_with("libjemalloc") || (total - held).abs() <= held * 0.25,
            "{so}: {total} in use against {held} held\n{r:#}"
        );
        assert!(
            mmap <= held * 0.02,
            "{so}: arenas counted as mmap: {mmap}\n{r:#}"
        );
    }
}

/// Served: /metrics has the mapping as a series of its own beside the heap, and /heap (read by
/// `go tool pprof`) shows it at its call site, while the program holds it.
#[test]
fn a_kept_mapping_is_served_apart_from_the_heap() {
    use crate::serve::{curl, parse_prometheus, Server, Target};
    let dir = test_dir();
    let exe = prog(&dir, "mmap_keep");
    let ctl = ctl_dir(dir.path());
    let t = Target::start_with(&ctl, &dir.path().join("a"), &exe, &[], &[]);
    let server = Server::start(&ctl, &[]);
    let m = parse_prometheus(&curl(&server.url("/metrics")));
    let series = |name: &str| {
        m.get(name)
            .and_then(|s| {
                s.iter()
                    .find(|(l, _)| l.get("pid") == Some(&t.pid.to_string()))
            })
            .unwrap_or_else(|| panic!("no {name} for pid {}: {m:?}", t.pid))
            .1
    };
    let want = (64u64 << 20) as f64;
    assert_eq!(series("memlens_mmap_inuse_bytes"), want);
    assert!(series("memlens_heap_inuse_bytes") < want / 8.0, "{m:?}");
    if Command::new("go").arg("version").output().is_err() {
        println!("SKIPPED: go tool pprof (go not installed)");
        return;
    }
    let heap = go_pprof_top(
        server.url(&format!("/debug/pprof/heap?pid={}", t.pid)),
        None,
        dir.path(),
    );
    let line = heap
        .lines()
        .find(|l| l.ends_with(MMAP_FRAME))
        .unwrap_or_else(|| panic!("no {MMAP_FRAME} row in /heap:\n{heap}"));
    assert!(line.trim_start().starts_with("64MB"), "{line}\n{heap}");
    let (code, _, err) = t.finish();
    assert_eq!(code, 0, "{err}");
}
