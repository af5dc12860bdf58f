//! Building the C unit tests: the runtime's lower floors (`base/`, `store/`, `unwind/`, `sample/`,
//! `record/`, and the dump writer of `control/`) once into an archive, then each
//! `runtime/tests/unit/<name>.c` linked against it. Everything is compiled with the build's own flags
//! (`memlens_native::C_FLAGS`, `RUNTIME_CFLAGS`: what libmemlens.so is made with) plus gcc's
//! AddressSanitizer and UndefinedBehaviorSanitizer, which stop at the first error; unit tests also
//! with the debug invariants (`-DMEMLENS_DEBUG=1`: every `ML_ASSERT`), the dump harness without
//! them (it writes states the invariants forbid, to see the writer's guards). Results are kept
//! under the target directory, named after a hash of the flags and every source they are made of,
//! so a second `cargo test` compiles nothing.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The floors a unit test may link: everything below `intercept/`, which holds the interposed
/// malloc (a test's own allocations must stay the C library's), plus the raw dump writer.
const FLOORS: &[&str] = &["base", "store", "unwind", "sample", "record"];
const EXTRA: &[&str] = &["control/dump.c"];

/// Sanitizers on top of the build's flags.
const SANITIZE: &[&str] = &["-fsanitize=address,undefined", "-fno-sanitize-recover=all"];

/// Which invariants a build checks.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Checks {
    /// `-DMEMLENS_DEBUG=1`: every `ML_ASSERT` (base/check.h).
    Debug,
    /// As shipped: no assertions.
    Release,
}

/// What the sanitizers print and where they stop: leaks are not a unit test's concern (the
/// runtime maps its tables for the life of the process) and need ptrace, which a container may
/// refuse.
pub const SANITIZER_ENV: &[(&str, &str)] = &[
    (
        "ASAN_OPTIONS",
        "detect_leaks=0:halt_on_error=1:allocator_may_return_null=1",
    ),
    ("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1"),
];

pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

fn out_dir() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cunit");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn cc() -> String {
    std::env::var("CC").unwrap_or_else(|_| "cc".into())
}

/// FNV-1a over byte strings: names a build after what it is made of.
fn hash(parts: &[&[u8]]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p.iter().chain(&[0xffu8]) {
            h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
    }
    format!("{h:016x}")
}

/// Every file under `dir` (recursively), sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            v.extend(files_under(&p));
        } else {
            v.push(p);
        }
    }
    v.sort();
    v
}

fn flags(checks: Checks) -> Vec<String> {
    let inc = format!(
        "-I{}",
        root().join(memlens_native::RUNTIME_INCLUDE).display()
    );
    let debug: &[&str] = if checks == Checks::Debug {
        &["-DMEMLENS_DEBUG=1"]
    } else {
        &[]
    };
    memlens_native::C_FLAGS
        .iter()
        .chain(memlens_native::RUNTIME_CFLAGS)
        .chain(SANITIZE)
        .chain(debug)
        .map(|s| s.to_string())
        .chain([inc])
        .collect()
}

/// Hash of the flags and every runtime source and header (a change anywhere rebuilds).
fn runtime_hash(checks: Checks) -> String {
    let r = root();
    let mut parts: Vec<Vec<u8>> = vec![flags(checks).join(" ").into_bytes(), cc().into_bytes()];
    for dir in ["runtime/src", "runtime/include"] {
        for f in files_under(&r.join(dir)) {
            parts.push(f.to_string_lossy().into_owned().into_bytes());
            parts.push(std::fs::read(&f).unwrap());
        }
    }
    let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
    hash(&refs)
}

/// Run a compiler or archiver command; panic with its output if it fails.
fn must(mut cmd: Command, what: &str) {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{what} failed ({}): {cmd:?}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Compile `sources` to objects in `dir`, two compilers at a time (the machine is shared).
fn compile_all(sources: &[PathBuf], dir: &Path, checks: Checks) -> Vec<PathBuf> {
    let objs: Vec<PathBuf> = sources
        .iter()
        .map(|s| {
            let rel = s.strip_prefix(root().join("runtime/src")).unwrap_or(s);
            dir.join(rel.to_string_lossy().replace('/', "_"))
                .with_extension("o")
        })
        .collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let jobs = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
    std::thread::scope(|s| {
        for _ in 0..jobs {
            s.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(src) = sources.get(i) else { break };
                let mut c = Command::new(cc());
                c.current_dir(root())
                    .args(flags(checks))
                    .arg("-c")
                    .arg(src)
                    .arg("-o")
                    .arg(&objs[i]);
                must(c, &format!("compiling {}", src.display()));
            });
        }
    });
    objs
}

/// Earlier builds of the same thing (their sources changed since): removed, so the directory does
/// not grow with every edit of the runtime.
fn remove_stale(prefix: &str) {
    for e in std::fs::read_dir(out_dir()).into_iter().flatten().flatten() {
        if e.file_name().to_string_lossy().starts_with(prefix) {
            std::fs::remove_file(e.path()).ok();
        }
    }
}

/// The archive of the runtime's lower floors, built once per test process (and kept across runs).
pub fn floors(checks: Checks) -> &'static Path {
    static DEBUG: OnceLock<PathBuf> = OnceLock::new();
    static RELEASE: OnceLock<PathBuf> = OnceLock::new();
    let once = if checks == Checks::Debug {
        &DEBUG
    } else {
        &RELEASE
    };
    once.get_or_init(|| {
        let prefix = format!("libfloors-{checks:?}-");
        let lib = out_dir().join(format!("{prefix}{}.a", runtime_hash(checks)));
        if lib.exists() {
            return lib;
        }
        remove_stale(&prefix);
        let r = root();
        let src = r.join(memlens_native::RUNTIME_SOURCES);
        let mut sources: Vec<PathBuf> = memlens_native::runtime_sources(&r)
            .into_iter()
            .filter(|p| {
                let rel = p.strip_prefix(&src).unwrap();
                FLOORS.iter().any(|f| rel.starts_with(f))
                    || EXTRA.iter().any(|e| rel == Path::new(e))
            })
            .collect();
        sources.sort();
        assert!(
            sources.len() > 10,
            "runtime sources not found under {}",
            src.display()
        );
        let dir = out_dir().join(format!("obj-{:?}-{}", checks, std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let objs = compile_all(&sources, &dir, checks);
        let tmp = lib.with_extension(format!("tmp{}", std::process::id()));
        let mut ar = Command::new("ar");
        ar.arg("rcs").arg(&tmp).args(&objs);
        must(ar, "archiving the runtime's floors");
        std::fs::rename(&tmp, &lib).unwrap();
        std::fs::remove_dir_all(&dir).ok();
        lib
    })
}

/// `runtime/tests/unit/<name>.c` built against the floors (with `extra` flags).
pub fn unit(name: &str, checks: Checks, extra: &[&str]) -> PathBuf {
    let lib = floors(checks);
    // two tests may want the same program: one builds it, the other finds it built
    static BUILDING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = BUILDING.lock().unwrap_or_else(|e| e.into_inner());
    let dir = root().join("runtime/tests/unit");
    let src = dir.join(format!("{name}.c"));
    assert!(src.exists(), "{} is missing", src.display());
    // the test, and every helper beside it (unit.h, shared harness code)
    let mut parts: Vec<Vec<u8>> = vec![
        lib.to_string_lossy().into_owned().into_bytes(),
        src.to_string_lossy().into_owned().into_bytes(),
        extra.join(" ").into_bytes(),
    ];
    for f in files_under(&dir) {
        parts.push(std::fs::read(&f).unwrap());
    }
    let refs: Vec<&[u8]> = parts.iter().map(|p| &p[..]).collect();
    let id = hash(&refs);
    let bin = out_dir().join(format!("{name}-{id}"));
    if bin.exists() {
        return bin;
    }
    remove_stale(&format!("{name}-"));
    let tmp = bin.with_extension(format!("tmp{}", std::process::id()));
    let mut c = Command::new(cc());
    c.current_dir(root())
        .args(flags(checks))
        .args(extra)
        .arg(&src)
        .arg("-o")
        .arg(&tmp)
        .arg(lib)
        .args(memlens_native::RUNTIME_LIBS)
        .arg("-fsanitize=address,undefined");
    must(c, &format!("building {}", src.display()));
    std::fs::rename(&tmp, &bin).unwrap();
    bin
}

/// What a test program did: its exit status, stdout and stderr.
pub struct Ran {
    pub ok: bool,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

impl Ran {
    /// Panic with everything it printed unless it exited 0.
    #[track_caller]
    pub fn ok(self, what: &str) -> Ran {
        assert!(
            self.ok,
            "{what}: {}\n--- stdout\n{}\n--- stderr\n{}",
            self.status, self.stdout, self.stderr
        );
        self
    }
}

/// Run `bin args` under the sanitizers' settings and `env`, killed after `secs` (a hang is a
/// failure, never a stuck `cargo test`). Output goes to files, so a chatty child never blocks.
pub fn run(bin: &Path, args: &[&str], env: &[(&str, &str)], secs: u64) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let (o, e) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = Command::new(bin)
        .args(args)
        .envs(SANITIZER_ENV.iter().copied())
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .spawn()
        .unwrap_or_else(|err| panic!("cannot run {}: {err}", bin.display()));
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break format!("{s}");
        }
        if t0.elapsed() > Duration::from_secs(secs) {
            child.kill().ok();
            child.wait().ok();
            break format!("still running after {secs} s: killed (a hang)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read =
        |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    Ran {
        ok: status == "exit status: 0",
        status,
        stdout: read(&o),
        stderr: read(&e),
    }
}

/// What one run of the dump harness (`runtime/tests/unit/dump_test.c`) left behind.
pub struct DumpRun {
    /// What it printed: the values it had in memory (raw_writer.rs's expectations).
    pub stdout: String,
    /// Where its two dumps are (`first.raw`, `second.raw`).
    pub out: PathBuf,
    /// The state file its runtime kept in the run directory.
    pub state: PathBuf,
    /// The harness's path (the dumps' exe).
    pub exe: PathBuf,
}

/// Build the dump harness (as shipped: it writes states the debug invariants forbid) and the
/// plugin it dlopens into `home`, and run it there with out/ and run/ beside `home` under `tmp`
/// and `env`; it must exit 0 and leave one state file.
pub fn dump_harness(tmp: &Path, home: &Path, env: &[(&str, &str)]) -> DumpRun {
    let bin = unit("dump_test", Checks::Release, &[]);
    std::fs::create_dir_all(home).unwrap();
    let exe = home.join("dump_test");
    std::fs::copy(&bin, &exe).unwrap();
    let plugin = home.join("libplugin.so");
    let mut c = Command::new(cc());
    c.args(["-shared", "-fPIC", "-Wl,--build-id", "-o"])
        .arg(&plugin)
        .arg(root().join("runtime/tests/unit/dump_plugin.c"));
    must(c, "building dump_plugin.c");
    let (out, run_dir) = (tmp.join("out"), tmp.join("run"));
    std::fs::create_dir_all(&out).unwrap();
    std::fs::create_dir_all(&run_dir).unwrap();
    let mut all = vec![("MEMLENS_RUN_DIR", run_dir.to_str().unwrap())];
    all.extend_from_slice(env);
    let ran = run(
        &exe,
        &[out.to_str().unwrap(), plugin.to_str().unwrap()],
        &all,
        120,
    )
    .ok("runtime/tests/unit/dump_test.c");
    let states: Vec<PathBuf> = std::fs::read_dir(&run_dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "state"))
        .collect();
    assert_eq!(states.len(), 1, "one state file in {}", run_dir.display());
    DumpRun {
        stdout: ran.stdout,
        out,
        state: states.into_iter().next().unwrap(),
        exe,
    }
}
