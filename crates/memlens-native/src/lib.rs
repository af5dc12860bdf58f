//! The C parts of memlens, embedded in the binary and written out on first use.
//!
//! Artifacts are extracted into a directory named after a hash of their contents
//! (`$XDG_CACHE_HOME/memlens/<hash>`, else `~/.cache/memlens/<hash>`, else `/tmp/memlens-<uid>/<hash>`),
//! so every build of memlens finds its own runtime with no environment variable and two builds never
//! mix their libraries.
#![warn(missing_docs)]
use anyhow::{bail, Context, Result};
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

/// File name of the profiler runtime.
pub const RUNTIME: &str = "libmemlens.so";

/// Names of every embedded artifact.
pub fn names() -> impl Iterator<Item = &'static str> {
    ARTIFACTS.iter().map(|(n, _)| *n)
}

/// Names of the reference allocators shipped with memlens (`libmemlens-<name>.so`).
pub fn reference_allocators() -> Vec<&'static str> {
    names()
        .filter_map(|n| n.strip_prefix("libmemlens-")?.strip_suffix(".so"))
        .collect()
}

fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(format!("/tmp/memlens-{}", unsafe { libc::getuid() })));
    base.join("memlens").join(CONTENT_HASH)
}

/// Path of an embedded artifact on disk, writing it out first if needed.
pub fn path(name: &str) -> Result<PathBuf> {
    let Some((_, bytes)) = ARTIFACTS.iter().find(|(n, _)| *n == name) else {
        bail!("memlens was built without {name}");
    };
    let dir = cache_dir();
    let dest = dir.join(name);
    if fs::metadata(&dest)
        .map(|m| m.len() == bytes.len() as u64)
        .unwrap_or(false)
    {
        return Ok(dest);
    }
    fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    // Write to a private temporary name and rename, so concurrent memlens processes never see a
    // half-written library.
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    let mut f =
        fs::File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.set_permissions(fs::Permissions::from_mode(0o755))?;
    drop(f);
    fs::rename(&tmp, &dest).with_context(|| format!("cannot create {}", dest.display()))?;
    Ok(dest)
}

/// Path of `libmemlens.so`.
pub fn runtime() -> Result<PathBuf> {
    path(RUNTIME)
}
