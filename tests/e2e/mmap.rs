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
/// the 96 MiB the program keeps once (tcmalloc's and mimalloc's `tc_*`/`mi_*` entry points were
/// hooked behind the interposed malloc too, and the heap read 1.8x: only their pointer-taking ones
/// are guarded now).
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
        // 1536 blocks of 64 KiB against 512 KiB: about 190 samples, a standard error of ~7 %. The
        // heap once: tcmalloc's and mimalloc's tc_malloc / mi_malloc are the malloc the interposed
        // one forwards to, and hooking them too counted every block twice (1.8x).
        assert!(
            (total - held).abs() <= held * 0.25,
            "{so}: {total} in use against {held} held\n{r:#}"
        );
        // Debian's libjemalloc is stripped: its malloc is interposed, nothing is missing.
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("cannot hook"), "{so}: {err}");
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

/// The timeline's points of a profile, as `report --view timeline --format json` prints them.
fn timeline_points(prof: &std::path::Path) -> Vec<serde_json::Value> {
    let tl = report_json(prof, &["--view", "timeline"]);
    tl["points"].as_array().expect("points").clone()
}

#[test]
fn the_timeline_shows_a_kept_mapping_apart_from_the_heap() {
    let dir = test_dir();
    let prof = dir.path().join("p.pb.gz");
    let raw = dir.path().join("raw");
    memlens()
        .arg("run")
        .arg("-o")
        .arg(&prof)
        .args(["--interval", "16K"])
        .arg("--keep-raw")
        .arg(&raw)
        .arg("--")
        .arg(prog(&dir, "mmap_timeline"))
        .ok();
    let pts = timeline_points(&prof);
    let last = pts.last().expect("a timeline point at the exit dump");
    let (mib, heap_want) = (f64::from(1u32 << 20), f64::from(32u32 << 20));
    let (heap, mmap) = (
        last["heap_bytes"].as_f64().unwrap(),
        last["mmap_bytes"]
            .as_f64()
            .expect("mmap_bytes in each point"),
    );
    // 64 MiB in one mapping against a 16 KiB interval: sampled with certainty, its weight exact.
    assert!((mmap - 64.0 * mib).abs() <= 0.01 * 64.0 * mib, "{last:#}");
    // 512 blocks of 64 KiB, each sampled with p = 1 - e^-4: the heap's relative standard error is
    // sqrt((1 - p) / (p n)) = 0.6 %; 10 % is far outside it, and far below the 64 MiB a heap that
    // counted the mapping would add.
    assert!((heap - heap_want).abs() <= 0.1 * heap_want, "{last:#}");
    // The churn's periodic points (those with glibc's figures, read by the runtime's thread) split
    // them the same way, and their heap agrees with what malloc says is in use (mallinfo2, which
    // does not see the program's own mappings) within the sampling error.
    let periodic: Vec<_> = pts
        .iter()
        .filter(|p| p["allocator_in_use"].as_f64().is_some())
        .collect();
    assert!(periodic.len() >= 2, "periodic points: {pts:#?}");
    // glibc's figures are the latest the runtime's thread read (in the program's pause after the
    // 32 MiB were held; it skips reads during the churn): the points that carry them are compared.
    // The sampled blocks are in glibc's own figure, as without memlens (their placeholders).
    let churn: Vec<_> = periodic
        .iter()
        .filter(|p| p["allocator_in_use"].as_f64().unwrap() >= 0.9 * heap_want)
        .collect();
    assert!(!churn.is_empty(), "periodic points of the churn: {pts:#?}");
    for p in churn {
        let (h, m) = (p["heap_bytes"].as_f64().unwrap(), p["mmap_bytes"].as_f64());
        let in_use = p["allocator_in_use"].as_f64().unwrap();
        assert!(
            (m.unwrap() - 64.0 * mib).abs() <= 0.01 * 64.0 * mib,
            "{p:#}"
        );
        assert!((h - in_use).abs() <= 0.1 * in_use, "{p:#}");
    }
    let text = memlens()
        .args(["report", "--view", "timeline"])
        .arg(&prof)
        .ok_stdout();
    assert!(
        text.contains("mmap (est.)") && text.contains("64.00 MiB"),
        "{text}"
    );

    // A dump of a runtime before the split: `tl` lines of 5 fields (the heap counted the mapping)
    // still read, with the mmap series unknown.
    let dump = std::fs::read_dir(&raw)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "raw"))
        .expect("a kept raw dump");
    let text = std::fs::read_to_string(&dump).unwrap();
    let mut old_heap = Vec::new();
    let old: String = text
        .lines()
        .map(|l| match l.strip_prefix("tl ") {
            Some(rest) => {
                let f: Vec<i64> = rest.split(' ').map(|x| x.parse().unwrap()).collect();
                assert_eq!(f.len(), 6, "{l}");
                old_heap.push(f[1] + f[5]);
                format!("tl {} {} {} {} {}\n", f[0], f[1] + f[5], f[2], f[3], f[4])
            }
            None => format!("{l}\n"),
        })
        .collect();
    assert!(!old_heap.is_empty(), "no tl lines in {}", dump.display());
    let old_dump = dir.path().join("old.raw");
    std::fs::write(&old_dump, old).unwrap();
    let pts = timeline_points(&old_dump);
    assert_eq!(pts.len(), old_heap.len());
    for (p, h) in pts.iter().zip(&old_heap) {
        assert!(p["mmap_bytes"].is_null(), "{p:#}");
        assert_eq!(p["heap_bytes"].as_f64(), Some(*h as f64), "{p:#}");
    }
}

#[test]
fn the_html_timeline_draws_the_mapping_as_a_line_of_its_own() {
    let Some(chrome) = crate::browser::chromium_or_skip("the report page's mmap line") else {
        return;
    };
    let dir = test_dir();
    let (prof, html) = (dir.path().join("p.pb.gz"), dir.path().join("p.html"));
    memlens()
        .arg("run")
        .arg("-o")
        .arg(&prof)
        .args(["--interval", "16K", "--"])
        .arg(prog(&dir, "mmap_timeline"))
        .ok();
    memlens()
        .arg("report")
        .arg(&prof)
        .arg("--html")
        .arg(&html)
        .ok();
    let url = format!("file://{}", html.display());
    let mut b = crate::browser::Browser::open(&chrome, &url, 1280, 1400);
    b.wait_until("document.querySelector('#tl polyline.line')", 30);
    // The last point's height of each line (SVG y grows downwards): the mapping's 64 MiB above
    // the heap's 32 MiB, both drawn.
    let last_y = b.eval(
        "Object.fromEntries([...document.querySelectorAll('#tl polyline.line')].map(l => \
         [l.dataset.line, +l.getAttribute('points').trim().split(' ').pop().split(',')[1]]))",
    );
    let y = |name: &str| {
        last_y[name]
            .as_f64()
            .unwrap_or_else(|| panic!("no {name} line: {last_y}"))
    };
    assert!(y("anonymous mmap (est.)") < y("estimated heap"), "{last_y}");
    let legend = b.eval("document.querySelector('section.timeline .legend').textContent");
    assert!(
        legend.as_str().unwrap().contains("anonymous mmap (est.)"),
        "{legend}"
    );
}
