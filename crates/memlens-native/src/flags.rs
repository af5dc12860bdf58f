// How the C parts are compiled. One file, included by build.rs (which compiles them) and by lib.rs
// (so that a test building a variant of the runtime, e.g. with -DMEMLENS_DEBUG=1, uses the same
// flags as the build and cannot drift from it). Plain comments here: include! takes no `//!`.

/// Language, optimisation, debug info and warnings of every C artifact (warnings are errors).
pub const C_FLAGS: &[&str] = &[
    "-std=gnu11",
    "-O2",
    "-g",
    "-Wall",
    "-Wextra",
    "-Werror",
    "-fno-omit-frame-pointer",
];

/// The runtime's own compiler flags, after [`C_FLAGS`]. initial-exec TLS: the fast path reads its
/// countdown with one %fs-relative load and never calls __tls_get_addr (which may malloc and
/// recurse into us).
pub const RUNTIME_CFLAGS: &[&str] = &[
    "-fPIC",
    "-ftls-model=initial-exec",
    "-fvisibility=hidden",
    "-pthread",
];

/// The runtime's public headers (`memlens.h`), relative to the repository root.
pub const RUNTIME_INCLUDE: &str = "runtime/include";

/// Where the runtime's sources are, relative to the repository root: every `*.c` of its floor
/// folders (`base/`, `store/`, … `process/`; runtime/README.md), found by [`runtime_sources`].
pub const RUNTIME_SOURCES: &str = "runtime/src";

/// The runtime's `*.c` files under `root`/[`RUNTIME_SOURCES`], one folder deep (a floor each),
/// sorted: what build.rs compiles, and what a test building a variant of the runtime compiles.
pub fn runtime_sources(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let c_files = |dir: &std::path::Path| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir)
            .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).collect())
            .unwrap_or_default()
    };
    let mut v: Vec<std::path::PathBuf> = c_files(&root.join(RUNTIME_SOURCES))
        .into_iter()
        .filter(|p| p.is_dir())
        .flat_map(|d| c_files(&d))
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .collect();
    v.sort();
    v
}

/// Link flags of every shared library (the runtime, the reference allocators).
pub const SHARED_LDFLAGS: &[&str] = &["-shared", "-Wl,-z,nodelete", "-Wl,--build-id"];

/// The libraries the runtime links, after its sources.
pub const RUNTIME_LIBS: &[&str] = &["-ldl", "-lgcc_s", "-lm", "-pthread"];
