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

/// Where the runtime's sources are (every `*.c` there), relative to the repository root.
pub const RUNTIME_SOURCES: &str = "runtime/src";

/// Link flags of every shared library (the runtime, the reference allocators).
pub const SHARED_LDFLAGS: &[&str] = &["-shared", "-Wl,-z,nodelete", "-Wl,--build-id"];

/// The libraries the runtime links, after its sources.
pub const RUNTIME_LIBS: &[&str] = &["-ldl", "-lgcc_s", "-lm", "-pthread"];
