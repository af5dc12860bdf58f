//! Compiles the C parts of memlens by convention, so adding a file needs no edit here:
//!
//! * `runtime/src/<floor>/*.c`    -> `libmemlens.so` (the preloaded profiler runtime)
//! * the same + `runtime/musl/`   -> `libmemlens.musl.so` (the runtime for programs on musl, built
//!   with `musl-gcc` when it exists; see [`musl_runtime`])
//! * `allocators/<name>/*.c` (+ `allocators/common/*.c`) -> `libmemlens-<name>.so`
//! * `workloads/c/<name>.c`       -> executable `<name>` (workloads the study runs)
//! * `crates/memlens-bench-alloc/c/<name>.c` -> executable `<name>` (the allocator benchmark's
//!   driver, beside the command that runs it)
//!
//! Every artifact is embedded in the `memlens` binary (see `src/lib.rs`), so the binary works on its
//! own. `cc` (the crate) only builds static archives, so the compiler is driven directly.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Artifact {
    name: String,
    sources: Vec<PathBuf>,
    /// Objects compiled beforehand and linked in (the runtime's Zydis decoder).
    objects: Vec<PathBuf>,
    shared: bool,
    cflags: Vec<&'static str>,
    libs: Vec<&'static str>,
    /// The compiler, when not `$CC` (musl-gcc for the musl runtime).
    cc: Option<String>,
}

include!("src/flags.rs");

fn c_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "c"));
    v.sort();
    v
}

fn artifacts(root: &Path, out_dir: &Path) -> Vec<Artifact> {
    let mut out = Vec::new();
    let rt = runtime_sources(root);
    if !rt.is_empty() {
        let zydis = zydis_sources();
        out.push(Artifact {
            name: "libmemlens.so".into(),
            sources: rt,
            objects: build_zydis(&zydis, out_dir),
            shared: true,
            cflags: RUNTIME_CFLAGS.to_vec(),
            libs: RUNTIME_LIBS.to_vec(),
            cc: None,
        });
        out.extend(musl_runtime(root, out_dir));
    }
    let alloc_dir = root.join("allocators");
    let common = c_files(&alloc_dir.join("common"));
    if let Ok(rd) = fs::read_dir(&alloc_dir) {
        let mut dirs: Vec<PathBuf> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        dirs.sort();
        for d in dirs {
            let name = d.file_name().unwrap().to_string_lossy().to_string();
            // common/ is linked into every allocator; tests/ holds test programs, not an allocator.
            if name == "common" || name == "tests" {
                continue;
            }
            let mut sources = c_files(&d);
            if sources.is_empty() {
                continue;
            }
            sources.extend(common.iter().cloned());
            out.push(Artifact {
                name: format!("libmemlens-{name}.so"),
                sources,
                objects: Vec::new(),
                shared: true,
                cflags: vec![
                    "-fPIC",
                    "-ftls-model=initial-exec",
                    "-pthread",
                    "-I",
                    "allocators/common",
                ],
                libs: vec!["-pthread"],
                cc: None,
            });
        }
    }
    let programs = [
        root.join("workloads/c"),
        root.join("crates/memlens-bench-alloc/c"),
    ];
    for src in programs.iter().flat_map(|d| c_files(d)) {
        let name = src.file_stem().unwrap().to_string_lossy().to_string();
        out.push(Artifact {
            name,
            sources: vec![src],
            objects: Vec::new(),
            shared: false,
            cflags: vec!["-pthread"],
            libs: vec!["-pthread", "-lm"],
            cc: None,
        });
    }
    out
}

// ---- The musl runtime ----
//
// A program whose loader is musl's cannot load the glibc runtime (`Error relocating …`). The same
// sources compiled with musl-gcc make its runtime: `runtime/musl/compat.h` is force-included to map
// the few glibc extensions the runtime uses (its comment lists them), `runtime/musl/include` stands
// in for two glibc-only headers, `runtime/musl/compat.c` implements the mappings. musl-gcc's specs
// leave out --eh-frame-hdr, without which no FDE of the runtime can be found (libgcc's unwinder,
// linked in statically by musl-gcc, aborts at its first backtrace). No libgcc_s: glibc's is the only
// one, and musl's loader cannot use it. `MEMLENS_MUSL_CC` names another compiler; empty, none.

/// The musl compiler: `MEMLENS_MUSL_CC`, else `musl-gcc` when it runs; None builds no musl runtime.
fn musl_cc() -> Option<String> {
    println!("cargo:rerun-if-env-changed=MEMLENS_MUSL_CC");
    let cc = env::var("MEMLENS_MUSL_CC").unwrap_or_else(|_| "musl-gcc".into());
    if cc.is_empty() {
        return None;
    }
    let runs = Command::new(&cc)
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    runs.then_some(cc)
}

fn musl_runtime(root: &Path, out_dir: &Path) -> Option<Artifact> {
    let cc = musl_cc()?;
    let mut sources = runtime_sources(root);
    sources.extend(c_files(&root.join("runtime/musl")));
    let mut cflags = RUNTIME_CFLAGS.to_vec();
    cflags.extend([
        "-include",
        "runtime/musl/compat.h",
        "-I",
        "runtime/musl/include",
    ]);
    Some(Artifact {
        name: "libmemlens.musl.so".into(),
        sources,
        objects: build_zydis_with(&zydis_sources(), &out_dir.join("zydis-musl"), &cc),
        shared: true,
        cflags,
        libs: vec!["-ldl", "-lm", "-pthread", "-Wl,--eh-frame-hdr"],
        cc: Some(cc),
    })
}

// ---- Zydis, the runtime's x86-64 decoder (intercept/patch.c) ----
//
// The entry hooks on allocators linked into a program (issue 35) decode and relocate the
// instructions they displace with Zydis, a maintained decoder. It must live inside libmemlens.so:
// a profiled program (in a container, say) has no libZydis.so, and Debian ships Zydis only as a
// shared library. The `zydis` crate (a build-dependency, pinned) carries Zydis's C sources; we
// compile its decoder files ourselves, position-independent and hidden (nothing of Zydis is
// exported from the runtime), without its formatter and encoder. The decoder allocates nothing.

/// The version of the `zydis` crate in Cargo.toml, whose sources we compile.
const ZYDIS_CRATE: &str = "zydis-4.1.1";
/// The decoder's files (the rest of Zydis is the formatter, encoder and disassembler).
const ZYDIS_FILES: &[&str] = &[
    "src/Decoder.c",
    "src/DecoderData.c",
    "src/SharedData.c",
    "src/Utils.c",
    "src/Register.c",
];
const ZYDIS_DEFINES: &[&str] = &[
    "-DZYDIS_STATIC_BUILD",
    "-DZYCORE_STATIC_BUILD",
    "-DZYDIS_DISABLE_FORMATTER",
    "-DZYDIS_DISABLE_ENCODER",
];

/// Zydis's C tree (`zydis-c/`) inside the `zydis` crate's sources, which cargo unpacked into its
/// registry because memlens-native has it as a build-dependency. `MEMLENS_ZYDIS_SRC` overrides.
fn zydis_sources() -> PathBuf {
    println!("cargo:rerun-if-env-changed=MEMLENS_ZYDIS_SRC");
    if let Some(p) = env::var_os("MEMLENS_ZYDIS_SRC") {
        return PathBuf::from(p);
    }
    let home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .expect("neither CARGO_HOME nor HOME is set: cannot find the zydis crate's sources");
    let reg = home.join("registry/src");
    let mut found: Vec<PathBuf> = fs::read_dir(&reg)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .collect::<Vec<PathBuf>>()
        })
        .unwrap_or_default()
        .into_iter()
        .map(|d| d.join(ZYDIS_CRATE).join("zydis-c"))
        .filter(|d| d.join("src/Decoder.c").is_file())
        .collect();
    found.sort();
    found.pop().unwrap_or_else(|| {
        panic!(
            "cannot find {ZYDIS_CRATE}/zydis-c under {}: run `cargo fetch`, or set MEMLENS_ZYDIS_SRC \
             to a Zydis 4.1 source tree",
            reg.display()
        )
    })
}

/// What compiling a runtime source that includes Zydis's headers needs (includes and defines).
fn zydis_args(z: &Path) -> Vec<String> {
    let mut v: Vec<String> = zydis_includes(z)
        .iter()
        .map(|i| format!("-I{}", i.display()))
        .collect();
    v.extend(ZYDIS_DEFINES.iter().map(|d| d.to_string()));
    v
}

fn zydis_includes(z: &Path) -> Vec<PathBuf> {
    vec![
        z.join("include"),
        z.join("src"),
        z.join("dependencies/zycore/include"),
    ]
}

/// Compile the decoder files into objects for the runtime's link: -fPIC, hidden, its own warnings
/// (it is not our code: -w, no -Werror).
fn build_zydis(z: &Path, out_dir: &Path) -> Vec<PathBuf> {
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    build_zydis_with(z, &out_dir.join("zydis"), &cc)
}

fn build_zydis_with(z: &Path, dir: &Path, cc: &str) -> Vec<PathBuf> {
    fs::create_dir_all(dir).unwrap();
    let mut objs = Vec::new();
    for f in ZYDIS_FILES {
        let src = z.join(f);
        println!("cargo:rerun-if-changed={}", src.display());
        let obj = dir
            .join(Path::new(f).file_stem().unwrap())
            .with_extension("o");
        let mut cmd = Command::new(cc);
        cmd.args([
            "-std=gnu11",
            "-O2",
            "-g",
            "-w",
            "-fPIC",
            "-fvisibility=hidden",
            "-c",
        ])
        .args(ZYDIS_DEFINES)
        .args(
            zydis_includes(z)
                .iter()
                .map(|i| format!("-I{}", i.display())),
        )
        .arg(&src)
        .arg("-o")
        .arg(&obj);
        let status = cmd
            .status()
            .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
        if !status.success() {
            panic!("compiling Zydis's {f} failed: {cmd:?}");
        }
        objs.push(obj);
    }
    objs
}

fn build(root: &Path, out_dir: &Path, a: &Artifact) -> PathBuf {
    let cc =
        a.cc.clone()
            .unwrap_or_else(|| env::var("CC").unwrap_or_else(|_| "cc".into()));
    let dest = out_dir.join(&a.name);
    let mut cmd = Command::new(&cc);
    cmd.current_dir(root)
        .args(C_FLAGS)
        .args(&a.cflags)
        .arg(format!("-I{RUNTIME_INCLUDE}"));
    if a.shared {
        cmd.args(SHARED_LDFLAGS);
    } else {
        cmd.arg("-Wl,--build-id");
    }
    if !a.objects.is_empty() {
        cmd.args(zydis_args(&zydis_sources()));
    }
    cmd.args(&a.sources)
        .args(&a.objects)
        .arg("-o")
        .arg(&dest)
        .args(&a.libs);
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    if !status.success() {
        panic!("compiling {} failed: {:?}", a.name, cmd);
    }
    dest
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.join("../..").canonicalize().unwrap();
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    // runtime/src and include only: runtime/tests (programs the tests build themselves, the C unit
    // tests) and runtime/bench are not part of the artifacts, and editing them rebuilt everything
    for d in [
        "runtime/src",
        "runtime/include",
        "runtime/musl",
        "allocators",
        "workloads/c",
        "crates/memlens-bench-alloc/c",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(d).display());
    }
    println!("cargo:rerun-if-env-changed=CC");
    let mut table = String::from(
        "/// Every built C artifact: (file name, contents).\nstatic ARTIFACTS: &[(&str, &[u8])] = &[\n",
    );
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    let mut extra: Vec<String> = Vec::new();
    for a in artifacts(&root, &out_dir) {
        if a.name == "libmemlens.so" {
            extra = zydis_args(&zydis_sources());
            extra.extend(a.objects.iter().map(|o| o.display().to_string()));
        }
        for s in &a.sources {
            println!("cargo:rerun-if-changed={}", s.display());
        }
        let path = build(&root, &out_dir, &a);
        for b in fs::read(&path).unwrap() {
            hash = (hash ^ b as u64).wrapping_mul(0x100_0000_01b3);
        }
        table.push_str(&format!(
            "    ({:?}, include_bytes!({:?})),\n",
            a.name,
            path.display().to_string()
        ));
    }
    table.push_str("];\n");
    table.push_str(&format!(
        "/// What a build of the runtime adds to its sources (Zydis's includes, defines and objects).\nconst RUNTIME_EXTRA: &[&str] = &{extra:?};\n"
    ));
    table.push_str(&format!(
        "/// Hash of all artifacts: names the directory they are written to.\nconst CONTENT_HASH: &str = \"{hash:016x}\";\n"
    ));
    fs::write(out_dir.join("embedded.rs"), table).unwrap();
}
