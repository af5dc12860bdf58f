//! Compiles the C parts of memlens by convention, so adding a file needs no edit here:
//!
//! * `runtime/src/<floor>/*.c`    -> `libmemlens.so` (the preloaded profiler runtime)
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
    shared: bool,
    cflags: Vec<&'static str>,
    libs: Vec<&'static str>,
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

fn artifacts(root: &Path) -> Vec<Artifact> {
    let mut out = Vec::new();
    let rt = runtime_sources(root);
    if !rt.is_empty() {
        out.push(Artifact {
            name: "libmemlens.so".into(),
            sources: rt,
            shared: true,
            cflags: RUNTIME_CFLAGS.to_vec(),
            libs: RUNTIME_LIBS.to_vec(),
        });
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
                shared: true,
                cflags: vec![
                    "-fPIC",
                    "-ftls-model=initial-exec",
                    "-pthread",
                    "-I",
                    "allocators/common",
                ],
                libs: vec!["-pthread"],
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
            shared: false,
            cflags: vec!["-pthread"],
            libs: vec!["-pthread", "-lm"],
        });
    }
    out
}

fn build(root: &Path, out_dir: &Path, a: &Artifact) -> PathBuf {
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
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
    cmd.args(&a.sources).arg("-o").arg(&dest).args(&a.libs);
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
    for a in artifacts(&root) {
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
        "/// Hash of all artifacts: names the directory they are written to.\nconst CONTENT_HASH: &str = \"{hash:016x}\";\n"
    ));
    fs::write(out_dir.join("embedded.rs"), table).unwrap();
}
