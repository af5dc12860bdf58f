//! Allocators linked into the program (issue 35): memlens finds them by their symbols and hooks
//! their entry points, under `run` and under `attach`, and says so; where it cannot, it says that.
//!
//! Each program holds 32 MiB at one known site (`hold`) and churns at another; the bytes memlens
//! shows in use at `hold` must be within ±10 % of the program's own count and of the allocator's
//! own statistics (jemalloc's `stats.allocated`, gperftools' `generic.current_allocated_bytes`,
//! each as the program printed it from a run without memlens; a release mimalloc keeps no byte
//! count, and its committed bytes are only an upper bound). The programs: tests/programs/
//! alloc_sites.c linked with libjemalloc_pic.a, libtcmalloc_minimal.a and mimalloc's sources;
//! tests/programs/rust-allocs (tikv-jemallocator, mimalloc, and memlens_alloc::Profiled over
//! jemalloc, from crates.io), built at test time into a cache outside the clone keyed by content;
//! and ruff's PyPI wheel (a stripped Rust binary with jemalloc inside), which must get the honest
//! warning rather than an empty profile.
use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// Interval of the accuracy runs: 32 MiB at 16 KiB is ~2000 samples (±2.2 % one sigma).
const INTERVAL: &str = "16K";
const HELD: f64 = 32.0 * 1024.0 * 1024.0;

/// `${XDG_CACHE_HOME:-$HOME/.cache}/memlens-test-programs`: programs built from registries, kept
/// across runs and clones.
pub(crate) fn cache_root() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache"));
    let d = base.join("memlens-test-programs");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// FNV-1a over the files under `dirs` (names and bytes, `target/` skipped), as 16 hex digits.
fn content_hash(dirs: &[PathBuf]) -> String {
    fn walk(d: &Path, out: &mut Vec<PathBuf>) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() && p.file_name().is_some_and(|n| n != "target") {
                walk(&p, out);
            } else if p.is_file() {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    for d in dirs {
        walk(d, &mut files);
    }
    files.sort();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for f in files {
        let rel = f
            .strip_prefix(root())
            .unwrap_or(&f)
            .to_string_lossy()
            .into_owned();
        for b in rel.bytes().chain(std::fs::read(&f).unwrap()) {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

fn rust_project() -> PathBuf {
    root().join("tests/programs/rust-allocs")
}

/// The Rust programs' directory, built once per test process (cargo's own lock keeps parallel
/// builds of one target directory apart).
fn rust_programs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let hash = content_hash(&[rust_project(), root().join("crates/memlens-alloc")]);
        let target = cache_root().join(format!("rust-allocs-{hash}"));
        let bins = target.join("release");
        if !bins.join("sites-profiled").exists() {
            eprintln!(
                "building tests/programs/rust-allocs into {} (cached)",
                target.display()
            );
            Command::new(env!("CARGO"))
                .args(["build", "--release", "--locked", "--manifest-path"])
                .arg(rust_project().join("Cargo.toml"))
                .arg("--target-dir")
                .arg(&target)
                .stdout(Stdio::null())
                .ok();
        }
        bins
    })
}

/// mimalloc's C sources, as the libmimalloc-sys crate of the Rust programs carries them.
fn mimalloc_sources() -> PathBuf {
    rust_programs();
    let out = Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--locked",
            "--manifest-path",
        ])
        .arg(rust_project().join("Cargo.toml"))
        .ok_stdout();
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let manifest = v["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "libmimalloc-sys")
        .and_then(|p| p["manifest_path"].as_str())
        .expect("libmimalloc-sys in the Rust programs' dependencies")
        .to_string();
    Path::new(&manifest)
        .parent()
        .unwrap()
        .join("c_src/mimalloc/v2")
}

/// tests/programs/alloc_sites.c linked with `alloc` ("jemalloc", "tcmalloc", "mimalloc").
fn c_program(dir: &Path, alloc: &str) -> PathBuf {
    c_program_of(dir, "alloc_sites.c", alloc)
}

/// tests/programs/`source` linked with `alloc`.
fn c_program_of(dir: &Path, source: &str, alloc: &str) -> PathBuf {
    let lib = "/usr/lib/x86_64-linux-gnu";
    let src = root().join("tests/programs").join(source);
    let out = dir.join(format!("{}_{alloc}", source.trim_end_matches(".c")));
    let mut c = Command::new("gcc");
    c.args(["-O2", "-g", "-fno-omit-frame-pointer", "-o"])
        .arg(&out);
    match alloc {
        "jemalloc" => c
            .args(["-DUSE_JEMALLOC"])
            .arg(&src)
            .arg(format!("{lib}/libjemalloc_pic.a"))
            .args(["-lpthread", "-ldl", "-lm", "-lstdc++"]),
        "tcmalloc" => c
            .args(["-DUSE_TCMALLOC"])
            .arg(&src)
            .arg(format!("{lib}/libtcmalloc_minimal.a"))
            .args(["-lpthread", "-lstdc++", "-lm"]),
        _ => {
            let mi = mimalloc_sources();
            c.args(["-DUSE_MIMALLOC", "-DMI_MALLOC_OVERRIDE", "-DNDEBUG", "-I"])
                .arg(mi.join("include"))
                .arg(&src)
                .arg(mi.join("src/static.c"))
                .args(["-lpthread"])
        }
    };
    c.ok();
    out
}

/// What a program printed: its own count and its allocator's (`allocator_after - _before`).
pub(crate) struct Said {
    pub(crate) held: f64,
    pub(crate) allocator: f64,
}

pub(crate) fn said(out: &str) -> Said {
    let kv = |k: &str| figure(out, k);
    Said {
        held: kv("held_bytes"),
        allocator: kv("allocator_after") - kv("allocator_before"),
    }
}

/// The figure `key=…` of the line a program printed first (`held_bytes=… key=…`); 0 if absent.
fn figure(out: &str, key: &str) -> f64 {
    let line = out
        .lines()
        .find(|l| l.starts_with("held_bytes="))
        .unwrap_or_else(|| panic!("no held_bytes line in:\n{out}"));
    line.split(' ')
        .find_map(|f| f.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or("0")
        .parse()
        .unwrap()
}

/// Bytes in use at the `hold` site of a profile: stacks with a frame named `hold`, or, in Rust,
/// inside `rust_allocs::hold` (its closure; `hold` itself tail-calls `collect` and leaves no frame).
pub(crate) fn inuse_at_hold(file: &Path) -> f64 {
    at_site(file, "inuse_space", "hold")
}

/// The `index` column (inuse_space, alloc_space) of the stacks with a frame named `site` (or a
/// Rust path ending in `::site`, or inside `rust_allocs::site`).
fn at_site(file: &Path, index: &str, site: &str) -> f64 {
    let folded = memlens()
        .arg("report")
        .arg(file)
        .args(["--format", "folded", "--sample-index", index])
        .ok_stdout();
    let (suffix, inside) = (format!("::{site}"), format!("rust_allocs::{site}::"));
    folded
        .lines()
        .filter(|l| {
            let (stack, _) = l.rsplit_once(' ').unwrap();
            stack
                .split(';')
                .any(|f| f == site || f.ends_with(&suffix) || f.contains(&inside))
        })
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum()
}

/// `memlens run --interval INTERVAL -o file -- prog`, for the caller to add arguments and run.
fn memlens_run(file: &Path, prog: &Path) -> Command {
    let mut c = memlens();
    c.args(["run", "--interval", INTERVAL, "-o"])
        .arg(file)
        .arg("--")
        .arg(prog);
    c
}

/// `memlens run OPTIONS -o file -- prog`, which must succeed.
fn run_ok(options: &[&str], file: &Path, prog: &Path) -> std::process::Output {
    let o = memlens()
        .arg("run")
        .args(options)
        .arg("-o")
        .arg(file)
        .arg("--")
        .arg(prog)
        .output()
        .unwrap();
    assert_ok(&prog, &o);
    o
}

/// `memlens ctl PID dump -o file`, with the test's private control directory.
pub(crate) fn ctl_dump(pid: &str, file: &Path, dir: &Path) {
    memlens()
        .args(["ctl", pid, "dump", "-o"])
        .arg(file)
        .env("MEMLENS_CTL_DIR", ctl_dir(dir))
        .ok();
}

#[track_caller]
pub(crate) fn within(what: &str, got: f64, want: f64) {
    let err = (got - want) / want;
    assert!(
        err.abs() <= 0.10,
        "{what}: {got:.0} bytes at `hold`, {want:.0} expected ({:+.1} %)",
        err * 100.0
    );
}

/// The program's run without memlens: the allocator's own count of what `hold` keeps.
fn bare(prog: &Path) -> Said {
    said(&Command::new(prog).ok_stdout())
}

/// `memlens run` of prog: the profile's bytes at `hold` against both references; the runtime must
/// have said which allocator it hooked.
fn check_run(prog: &Path, alloc: &str, label: &str, allocator_counts: bool) {
    let dir = test_dir();
    let reference = bare(prog);
    let file = dir.path().join("p.pb.gz");
    let o = memlens_run(&file, prog).output().unwrap();
    assert_ok(&prog, &o);
    let err = stderr(&o);
    let found = format!("allocates through {alloc} linked into it ({label}): hooked");
    assert!(err.contains(&found), "no '{found}' in:\n{err}");
    let s = said(&stdout(&o));
    let got = inuse_at_hold(&file);
    within("vs the program's own count", got, s.held);
    if allocator_counts {
        within("vs the allocator's statistics", got, reference.allocator);
    } else {
        assert!(
            got <= reference.allocator * 1.10,
            "{got} > the allocator's committed bytes {}",
            reference.allocator
        );
    }
    let header = memlens().arg("report").arg(&file).ok_stdout();
    assert!(
        header.contains(&found),
        "the profile's notes lack '{found}':\n{header}"
    );
}

/// `memlens attach` to prog while it waits, then its sites run again: the dump's bytes at `hold`.
fn check_attach(prog: &Path, alloc: &str, label: &str) {
    let dir = test_dir();
    let file = attach_and_dump(prog, alloc, label, dir.path());
    within(
        "under attach, vs the program's own count",
        inuse_at_hold(&file),
        HELD,
    );
}

/// Start prog (it runs its sites once and waits), `memlens attach` to it, let it run its sites
/// again, and dump: the profile (in `d`).
fn attach_and_dump(prog: &Path, alloc: &str, label: &str, d: &Path) -> PathBuf {
    let (go, end) = (d.join("go"), d.join("end"));
    let mut child = Command::new(prog)
        .arg(&go)
        .arg(&end)
        .env("MEMLENS_CTL_DIR", ctl_dir(d))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    use std::io::BufRead;
    out.read_line(&mut line).unwrap(); // the first round is done: it waits for `go`
    let a = memlens()
        .args(["attach", &pid, "--interval", INTERVAL])
        .env("MEMLENS_CTL_DIR", ctl_dir(d))
        .ok_stdout();
    let found = format!("allocates through {alloc} linked into it ({label})");
    assert!(
        a.contains(&found) && a.contains("entry points hooked: every thread stopped"),
        "{a}"
    );
    second_round(
        &mut child,
        &mut out,
        &pid,
        d,
        "a.pb.gz",
        &format!("{prog:?} under attach"),
    )
}

/// A program of alloc_sites' protocol (tests/programs: its first round done, it waits for d/go)
/// runs its sites again; then its dump (d/`name`) is taken and it is let end (d/end), successfully.
fn second_round(
    child: &mut std::process::Child,
    out: &mut impl std::io::BufRead,
    pid: &str,
    d: &Path,
    name: &str,
    what: &str,
) -> PathBuf {
    std::fs::write(d.join("go"), "").unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap(); // "again …": the sites ran again
    assert!(line.starts_with("again"), "{line}");
    let file = d.join(name);
    ctl_dump(pid, &file, d);
    std::fs::write(d.join("end"), "").unwrap();
    let st = child.wait().unwrap();
    assert!(st.success(), "{what}: {st}");
    file
}

#[test]
fn c_with_jemalloc_linked_in_run() {
    let dir = test_dir();
    let p = c_program(dir.path(), "jemalloc");
    check_run(&p, "jemalloc", "malloc, free, mallocx, …", true);
}

#[test]
fn c_with_jemalloc_linked_in_attach() {
    let dir = test_dir();
    let p = c_program(dir.path(), "jemalloc");
    check_attach(&p, "jemalloc", "malloc, free, mallocx, …");
}

#[test]
fn c_with_tcmalloc_linked_in_run() {
    let dir = test_dir();
    let p = c_program(dir.path(), "tcmalloc");
    check_run(&p, "tcmalloc", "tc_*", true);
}

#[test]
fn c_with_tcmalloc_linked_in_attach() {
    let dir = test_dir();
    let p = c_program(dir.path(), "tcmalloc");
    check_attach(&p, "tcmalloc", "tc_*");
}

#[test]
fn c_with_mimalloc_linked_in_run() {
    let dir = test_dir();
    let p = c_program(dir.path(), "mimalloc");
    check_run(&p, "mimalloc", "mi_*", false);
}

#[test]
fn c_with_mimalloc_linked_in_attach() {
    let dir = test_dir();
    let p = c_program(dir.path(), "mimalloc");
    check_attach(&p, "mimalloc", "mi_*");
}

/// `memlens run --inactive`: prog runs its sites once unsampled and waits; `memlens ctl PID start`,
/// then it runs them again: the bytes at `hold` are seen. While sampling is off the hooks jump over
/// their countdown (runtime/src/intercept/patch.h, ml_patch_sampling); a start must put it back.
fn check_started_after_inactive(prog: &Path) {
    let dir = test_dir();
    let d = dir.path();
    let (go, end, ctl) = (d.join("go"), d.join("end"), ctl_dir(d));
    let mut child = memlens()
        .args(["run", "--inactive", "--interval", INTERVAL, "-o"])
        .arg(d.join("run.pb.gz"))
        .arg("--")
        .arg(prog)
        .arg(&go)
        .arg(&end)
        .env("MEMLENS_CTL_DIR", &ctl)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::BufRead;
    let mut out = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap(); // the first round is done, unsampled: it waits for `go`
    let mut pid = String::new();
    wait_for("the program's control socket", 20, || {
        let sock = std::fs::read_dir(&ctl).unwrap().flatten().find_map(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.ends_with(".sock")
                .then(|| n.split('.').next().unwrap().to_string())
        });
        pid = sock.unwrap_or_default();
        !pid.is_empty()
    });
    memlens()
        .args(["ctl", &pid, "start"])
        .env("MEMLENS_CTL_DIR", &ctl)
        .ok();
    let what = format!("{prog:?} under memlens run --inactive");
    let file = second_round(&mut child, &mut out, &pid, d, "started.pb.gz", &what);
    within(
        "started after --inactive, vs the program's own count",
        inuse_at_hold(&file),
        HELD,
    );
}

#[test]
fn c_with_mimalloc_linked_in_started_after_inactive() {
    let dir = test_dir();
    check_started_after_inactive(&c_program(dir.path(), "mimalloc"));
}

#[test]
fn c_with_jemalloc_linked_in_started_after_inactive() {
    let dir = test_dir();
    check_started_after_inactive(&c_program(dir.path(), "jemalloc"));
}

#[test]
fn rust_with_tikv_jemallocator_run() {
    check_run(
        &rust_programs().join("sites-jemalloc"),
        "jemalloc",
        "_rjem_*",
        true,
    );
}

#[test]
fn rust_with_tikv_jemallocator_attach() {
    check_attach(
        &rust_programs().join("sites-jemalloc"),
        "jemalloc",
        "_rjem_*",
    );
}

#[test]
fn rust_with_mimalloc_run() {
    check_run(
        &rust_programs().join("sites-mimalloc"),
        "mimalloc",
        "mi_*",
        false,
    );
}

#[test]
fn rust_with_mimalloc_attach() {
    check_attach(&rust_programs().join("sites-mimalloc"), "mimalloc", "mi_*");
}

/// mimalloc's first-class heaps (tests/programs/mi_heaps.c): what `keep` allocates through
/// mi_heap_malloc and its kin into a heap that stays is in use within ±10 % of the program's own
/// count and of mimalloc's (mi_heap_visit_blocks over that heap, from the run without memlens);
/// what `doomed` put in a heap that mi_heap_destroy freed whole is allocated but no longer in use;
/// what `moved` put in a heap that mi_heap_delete gave to the backing heap is still in use, and so
/// is what `spared` put in a heap made without allow_destroy, which mi_heap_destroy only deletes;
/// the strings of mi_heap_strdup & co. (`dups`) and mi_heap_realpath & co. (`paths`) are counted.
#[test]
fn c_with_mimalloc_heaps_run() {
    let dir = test_dir();
    let prog = c_program_of(dir.path(), "mi_heaps.c", "mimalloc");
    let reference = Command::new(&prog).ok_stdout();
    let file = dir.path().join("p.pb.gz");
    let o = memlens_run(&file, &prog).output().unwrap();
    assert_ok(&prog, &o);
    let out = stdout(&o);
    let keep = heap_sites(&file, "", &reference);
    within("keep, vs the program's own count", keep, said(&out).held);
    within(
        "keep, vs mimalloc's own count",
        keep,
        said(&reference).allocator,
    );
}

/// mi_heaps.c's profile: `doomed` allocated HELD and holds nothing, `moved` and `spared` hold
/// HELD (`spared` also within ±10 % of what mimalloc's backing heap gained when its heap was
/// destroyed), `dups` and `paths` what the program counted; returns what `keep` holds. `how`
/// prefixes the messages; `bare`: what the program printed in a run without memlens.
fn heap_sites(file: &Path, how: &str, bare: &str) -> f64 {
    let at = |index: &str, site: &str| at_site(file, index, site);
    let spared = at("inuse_space", "spared");
    within(
        &format!("{how}spared, in use after mi_heap_destroy of a heap it only deletes"),
        spared,
        figure(bare, "spared_bytes"),
    );
    within(
        &format!("{how}spared, vs what mimalloc's backing heap gained"),
        spared,
        figure(bare, "spared_allocator"),
    );
    within(
        &format!("{how}dups, mi_heap_strdup & co."),
        at("inuse_space", "dups"),
        figure(bare, "dups_bytes"),
    );
    within(
        &format!("{how}paths, mi_heap_realpath & co."),
        at("inuse_space", "paths"),
        figure(bare, "paths_bytes"),
    );
    within(
        &format!("{how}doomed, allocated"),
        at("alloc_space", "doomed"),
        HELD,
    );
    let doomed = at("inuse_space", "doomed");
    assert!(
        doomed <= 0.01 * HELD,
        "{how}{doomed} bytes in use at `doomed` after mi_heap_destroy of its heap"
    );
    within(
        &format!("{how}moved, in use after mi_heap_delete"),
        at("inuse_space", "moved"),
        HELD,
    );
    at("inuse_space", "keep")
}

/// mimalloc's heaps under `memlens attach` (the program runs its sites again after it): the kept
/// heap in use within ±10 %, the destroyed one at ≤ 1 % in use, the deleted one's blocks in use,
/// and the other sites as under `run`.
#[test]
fn c_with_mimalloc_heaps_attach() {
    let dir = test_dir();
    let prog = c_program_of(dir.path(), "mi_heaps.c", "mimalloc");
    let reference = Command::new(&prog).ok_stdout();
    let file = attach_and_dump(&prog, "mimalloc", "mi_*", dir.path());
    let keep = heap_sites(&file, "under attach, ", &reference);
    within("under attach, keep", keep, HELD);
}

/// Blocks memlens sampled (every one, at a 64-byte interval) handed to mimalloc's reallocating
/// entry points that ask for an offset alignment (`mi_realloc_aligned_at` & co.) or an aligned
/// array (`mi_recalloc_aligned`), mimalloc linked statically (tests/programs/mi_aligned_at.c):
/// each keeps its bytes, is aligned as asked and zeroed where it should be, and none stays in use
/// once the program freed them all (mimalloc, handed blocks of memlens's range, freed them into its
/// own lists: they stayed in use in the profile, and some runs crashed).
#[test]
fn c_with_mimalloc_reallocating_sampled_blocks_aligned_at() {
    let dir = test_dir();
    let prog = c_program_of(dir.path(), "mi_aligned_at.c", "mimalloc");
    let file = dir.path().join("p.pb.gz");
    let o = run_ok(&["--interval", "64"], &file, &prog);
    assert!(stdout(&o).contains("kept=4000 of 4000"), "{}", printed(&o));
    let allocated = at_site(&file, "alloc_space", "main");
    assert!(
        allocated >= 4000.0 * 1000.0,
        "{allocated} bytes allocated at `main`, at least 4000 blocks of 1000 expected"
    );
    let inuse = at_site(&file, "inuse_space", "main");
    assert!(
        inuse <= 0.01 * allocated,
        "{inuse} bytes still in use at `main` of {allocated} allocated: every block was freed"
    );
}

/// The shared libmimalloc (its malloc is the interposed malloc's next, so memlens counts there and
/// only guards mimalloc's own entry points): mi_realloc and mi_heap_realloc of a block memlens
/// sampled (every block, in exact mode) keep its bytes, and the reallocations are counted.
#[test]
fn shared_mimalloc_reallocates_sampled_blocks() {
    let dir = test_dir();
    let prog = dir.path().join("mi_realloc_ours");
    Command::new("gcc")
        .args(["-O1", "-o"])
        .arg(&prog)
        .arg(root().join("tests/programs/mi_realloc_ours.c"))
        .arg("-lmimalloc")
        .ok();
    let file = dir.path().join("p.pb.gz");
    let o = run_ok(&["--exact"], &file, &prog);
    assert!(stdout(&o).contains("kept=2000 of 2000"), "{}", printed(&o));
    let allocated = at_site(&file, "alloc_space", "main");
    within("malloc and realloc, allocated", allocated, 2000.0 * 6000.0);
}

/// memlens_alloc::Profiled<Jemalloc>: the program reports through the API, the hooks on jemalloc
/// stop counting, and `hold` is counted once.
#[test]
fn rust_reporting_through_memlens_alloc_is_counted_once() {
    let prog = rust_programs().join("sites-profiled");
    let dir = test_dir();
    let file = dir.path().join("p.pb.gz");
    let o = memlens_run(&file, &prog).output().unwrap();
    assert_ok(&prog, &o);
    assert!(
        stderr(&o).contains("reports its allocations itself"),
        "{}",
        stderr(&o)
    );
    within(
        "reported, vs the program's own count",
        inuse_at_hold(&file),
        said(&stdout(&o)).held,
    );
}

/// ruff's wheel from PyPI, cached: its binary.
fn ruff() -> PathBuf {
    let dir = cache_root().join("ruff-0.17.6");
    let bin = dir.join("ruff");
    if !bin.exists() {
        std::fs::create_dir_all(&dir).unwrap();
        Command::new("python3")
            .args([
                "-m",
                "pip",
                "download",
                "ruff==0.17.6",
                "--no-deps",
                "--only-binary",
                ":all:",
                "-q",
                "-d",
            ])
            .arg(&dir)
            .ok();
        let whl = std::fs::read_dir(&dir)
            .unwrap()
            .flatten()
            .map(|e| e.path())
            .find(|p| p.extension().is_some_and(|e| e == "whl"))
            .expect("the ruff wheel");
        Command::new("python3")
            .args(["-c", "import sys,zipfile; z=zipfile.ZipFile(sys.argv[1]); open(sys.argv[2],'wb').write(z.read('ruff-0.17.6.data/scripts/ruff'))"])
            .arg(&whl)
            .arg(&bin)
            .ok();
        Command::new("chmod").arg("+x").arg(&bin).ok();
    }
    bin
}

/// A program shipped stripped with its symbols in a separate debug file beside it, named by its
/// `.gnu_debuglink` (`objcopy --only-keep-debug`, Debian's -dbg packages before build-ids): memlens
/// finds the linked-in jemalloc through that file. The executable is read as /proc/self/exe, and
/// the link was looked for beside that (`/proc/self/<name>`), so such a program went unhooked.
#[test]
fn c_with_jemalloc_and_its_symbols_in_a_debug_file_beside_it_run() {
    let dir = test_dir();
    let p = c_program(dir.path(), "jemalloc");
    let dbg = dir.path().join("alloc_sites_jemalloc.debug");
    Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&p)
        .arg(&dbg)
        .ok();
    // no build-id either: the debug link is the only way to the symbols
    Command::new("objcopy")
        .args(["--strip-all", "--remove-section=.note.gnu.build-id"])
        .arg(format!("--add-gnu-debuglink={}", dbg.display()))
        .arg(&p)
        .ok();
    let syms = Command::new("nm").arg(&p).output().unwrap();
    assert!(stdout(&syms).trim().is_empty(), "not stripped");
    check_run(&p, "jemalloc", "malloc, free, mallocx, …", true);
}

/// A stripped binary with jemalloc inside cannot be hooked: memlens says so at start and in the
/// profile, rather than show an empty profile as if it were the truth.
#[test]
fn stripped_rust_binary_with_jemalloc_gets_the_honest_warning() {
    let bin = ruff();
    let dir = test_dir();
    let file = dir.path().join("ruff.pb.gz");
    let py = dir.path().join("lint_me.py");
    std::fs::write(
        &py,
        "import os\n\ndef f(x):\n    return [i * x for i in range(1000)]\n",
    )
    .unwrap();
    let o = memlens()
        .args(["run", "-o"])
        .arg(&file)
        .arg("--")
        .arg(&bin)
        .args(["check", "--no-cache", "--isolated", "--exit-zero"])
        .arg(&py)
        .output()
        .unwrap();
    assert_ok(&bin, &o);
    let want = "ruff contains jemalloc (its strings) but no symbol table and no debug file: memlens cannot hook it";
    assert!(stderr(&o).contains(want), "{}", stderr(&o));
    let header = memlens().arg("report").arg(&file).ok_stdout();
    assert!(header.contains(want), "{header}");
}

/// Memory memlens does not see (400 MiB of anonymous mmap, nothing sampled): it says so once, on
/// stderr and in the profile, rather than show a near-empty profile as the whole truth.
#[test]
fn a_heap_growing_unseen_is_said() {
    let dir = test_dir();
    let prog = compile(
        &root().join("tests/programs/blind_heap.c"),
        dir.path(),
        "blind_heap",
        &[],
    );
    let file = dir.path().join("blind.pb.gz");
    let o = run_ok(&[], &file, &prog);
    let want = "resident memory grew by";
    assert!(
        stderr(&o).contains(want) && stderr(&o).contains("cannot see"),
        "{}",
        stderr(&o)
    );
    let header = memlens().arg("report").arg(&file).ok_stdout();
    assert!(header.contains(want), "{header}");
}

/// tests/programs/dlopen_alloc.c: the program, and the library it loads with dlopen, which links
/// libjemalloc_pic.a and keeps its symbols to itself (`--exclude-libs`: its malloc is local).
pub(crate) fn dlopen_programs(dir: &Path) -> (PathBuf, PathBuf) {
    dlopen_programs_with(dir, &[])
}

/// The same, the program compiled with `flags` too.
fn dlopen_programs_with(dir: &Path, flags: &[&str]) -> (PathBuf, PathBuf) {
    let src = root().join("tests/programs/dlopen_alloc.c");
    let lib = dir.join("libheld.so");
    Command::new("gcc")
        .args([
            "-O2",
            "-g",
            "-fno-omit-frame-pointer",
            "-fPIC",
            "-shared",
            "-DLIB",
            "-o",
        ])
        .arg(&lib)
        .arg(&src)
        .arg("/usr/lib/x86_64-linux-gnu/libjemalloc_pic.a")
        .args(["-Wl,--exclude-libs,ALL", "-lpthread", "-lm", "-lstdc++"])
        .ok();
    let flags: Vec<&str> = flags.iter().copied().chain(["-ldl"]).collect();
    (compile(&src, dir, "dlopen_alloc", &flags), lib)
}

/// jemalloc's initial-exec TLS needs more of the static TLS block than glibc keeps for libraries
/// loaded later (without it, dlopen fails: "cannot allocate memory in static TLS block").
pub(crate) const STATIC_TLS: (&str, &str) =
    ("GLIBC_TUNABLES", "glibc.rtld.optional_static_tls=65536");

/// A library loaded with dlopen after start, with jemalloc linked into it: memlens finds it and
/// hooks it while the loader maps it, before its code runs (the loader's r_brk notification), and
/// the bytes it holds are counted.
#[test]
fn library_dlopened_with_jemalloc_linked_in_run() {
    let dir = test_dir();
    let (prog, lib) = dlopen_programs(dir.path());
    check_dlopened(dir.path(), &prog, &lib);
}

/// The same when the program names `_r_debug` itself (tests/programs/dlopen_alloc.c, COPY_R_DEBUG):
/// its copy of the loader's r_debug, which every object's `_r_debug` then is, never changes, and
/// the runtime watched no dlopen through it (0 samples, nothing said); it now finds the loader's
/// own through the program's DT_DEBUG (base/rdebug.c).
#[test]
fn library_dlopened_by_a_program_that_copies_r_debug_run() {
    let dir = test_dir();
    let (prog, lib) = dlopen_programs_with(dir.path(), &["-DCOPY_R_DEBUG"]);
    let relocs = Command::new("readelf").arg("-rW").arg(&prog).ok_stdout();
    assert!(
        relocs
            .lines()
            .any(|l| l.contains("R_X86_64_COPY") && l.contains("_r_debug")),
        "no copy relocation of _r_debug:\n{relocs}"
    );
    check_dlopened(dir.path(), &prog, &lib);
}

/// `memlens run` of the dlopen program: the library's jemalloc hooked, its bytes counted.
fn check_dlopened(dir: &Path, prog: &Path, lib: &Path) {
    let reference = said(
        &Command::new(prog)
            .arg(lib)
            .env(STATIC_TLS.0, STATIC_TLS.1)
            .ok_stdout(),
    );
    let file = dir.join("p.pb.gz");
    let o = memlens_run(&file, prog)
        .arg(lib)
        .env(STATIC_TLS.0, STATIC_TLS.1)
        .output()
        .unwrap();
    assert_ok(&prog, &o);
    let found =
        "libheld.so (a library) allocates through jemalloc linked into it (malloc, free, mallocx, …): hooked";
    assert!(
        stderr(&o).contains(found),
        "no '{found}' in:\n{}",
        stderr(&o)
    );
    let got = inuse_at_hold(&file);
    within("vs the program's own count", got, said(&stdout(&o)).held);
    within("vs jemalloc's stats.allocated", got, reference.allocator);
}
