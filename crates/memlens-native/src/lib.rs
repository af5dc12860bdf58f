//! The C parts of memlens, embedded in the binary and written out on first use.
//!
//! Artifacts are extracted into a directory named after a hash of their contents
//! (`$XDG_CACHE_HOME/memlens/<hash>`, else `~/.cache/memlens/<hash>`, else `/tmp/memlens-<uid>/<hash>`),
//! so every build of memlens finds its own runtime with no environment variable and two builds never
//! mix their libraries. Since the runtime is preloaded into the user's programs, the directories must
//! be the user's own and not writable by others, and a file is trusted only if its bytes are the
//! embedded ones.
#![warn(missing_docs)]
use anyhow::{bail, Context, Result};
use std::fs;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

include!(concat!(env!("OUT_DIR"), "/embedded.rs"));

mod flags;
pub use flags::{
    runtime_sources, C_FLAGS, RUNTIME_CFLAGS, RUNTIME_INCLUDE, RUNTIME_LIBS, RUNTIME_SOURCES,
    SHARED_LDFLAGS,
};

/// What a build of the runtime needs besides [`runtime_sources`] and the flags: the includes and
/// defines of its x86-64 decoder (Zydis) and the decoder's objects, as build.rs compiled them. A test
/// building a variant of the runtime passes them after the sources.
pub fn runtime_extra_args() -> &'static [&'static str] {
    RUNTIME_EXTRA
}

/// File name of the profiler runtime.
pub const RUNTIME: &str = "libmemlens.so";

/// File name of the runtime built for musl (with musl-gcc; absent when the build had none).
pub const RUNTIME_MUSL: &str = "libmemlens.musl.so";

/// What `LD_PRELOAD` names below a runtime directory laid out by [`preload_layout`]. glibc's loader
/// expands `$LIB` in LD_PRELOAD (to `lib/x86_64-linux-gnu` on Debian, `lib64` on Fedora, `lib` on
/// Arch), musl's takes it literally: each loader finds its own build of the runtime, so a glibc
/// program that execs a musl one (or the reverse) is profiled in both. Without a musl build the
/// literal directory is empty, and musl's loader, which skips a preload it cannot find, runs the
/// program unprofiled (never `Error relocating …`, rc 127).
pub const PRELOAD_NAME: &str = "$LIB/libmemlens.so";

/// The files of a runtime directory: (path below it, bytes). The glibc runtime under every
/// directory glibc's `$LIB` may be, the musl runtime (when built) under a literal `$LIB`.
pub fn preload_layout() -> Vec<(PathBuf, &'static [u8])> {
    let mut v = Vec::new();
    if let Some(glibc) = bytes(RUNTIME) {
        let multiarch = format!("lib/{}-linux-gnu", std::env::consts::ARCH);
        for d in [multiarch.as_str(), "lib64", "lib"] {
            v.push((Path::new(d).join(RUNTIME), glibc));
        }
    }
    if let Some(musl) = bytes(RUNTIME_MUSL) {
        v.push((Path::new(PRELOAD_NAME).to_path_buf(), musl));
    }
    v
}

/// The directories [`preload_layout`] puts its files in, below the runtime directory, each after
/// its parent (so creating them in order works).
pub fn preload_dirs() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = Vec::new();
    for (rel, _) in preload_layout() {
        let mut up: Vec<&Path> = rel.ancestors().skip(1).collect();
        up.reverse();
        for d in up.into_iter().filter(|d| !d.as_os_str().is_empty()) {
            if !v.iter().any(|k| k == d) {
                v.push(d.to_path_buf());
            }
        }
    }
    v
}

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

/// The cache base, whether it is memlens's own fallback in /tmp, and below it the directory of this
/// build's artifacts.
fn cache_dirs() -> (PathBuf, bool, PathBuf) {
    let chosen = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .filter(|v| !v.is_empty())
                .map(|h| PathBuf::from(h).join(".cache"))
        });
    let fallback = chosen.is_none();
    // SAFETY: geteuid has no preconditions.
    let base = chosen
        .unwrap_or_else(|| PathBuf::from(format!("/tmp/memlens-{}", unsafe { libc::geteuid() })));
    let dir = base.join("memlens").join(CONTENT_HASH);
    (base, fallback, dir)
}

/// What keeps `dir` from being `me`'s own: not a real directory (a link is not), another user's,
/// or writable by others (who could plant code or files in it); `None` when it is ours alone.
pub fn not_own_dir(dir: &Path, me: u32) -> Result<Option<String>> {
    let m = fs::symlink_metadata(dir).with_context(|| format!("cannot read {}", dir.display()))?;
    Ok(if !m.file_type().is_dir() {
        Some(format!("{} is not a directory", dir.display()))
    } else if m.uid() != me {
        Some(format!(
            "{} belongs to uid {}, not to uid {me}",
            dir.display(),
            m.uid()
        ))
    } else if m.mode() & 0o022 != 0 {
        Some(format!(
            "{} is writable by other users (mode {:o})",
            dir.display(),
            m.mode() & 0o7777
        ))
    } else {
        None
    })
}

/// A directory we preload code from must be a real directory (not a symlink), ours, and writable by
/// nobody else: otherwise another local user could plant a library in it.
fn check_private_dir(dir: &Path) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    match not_own_dir(dir, me)? {
        None => Ok(()),
        Some(why) => bail!(
            "{why}: memlens will not load its runtime from there (remove it, or set \
             XDG_CACHE_HOME to a directory of your own)"
        ),
    }
}

fn create_private_dir(dir: &Path) -> Result<()> {
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e).with_context(|| format!("cannot create {}", dir.display())),
    }
}

/// Path of an embedded artifact on disk, writing it out first if needed. The directories memlens
/// creates are checked (ours, not writable by others) and an existing file is used only when its
/// content is exactly the embedded one; anything else is rewritten.
pub fn path(name: &str) -> Result<PathBuf> {
    let Some((_, bytes)) = ARTIFACTS.iter().find(|(n, _)| *n == name) else {
        bail!("memlens was built without {name}");
    };
    let (base, fallback, dir) = cache_dirs();
    if !base.exists() {
        fs::create_dir_all(&base).with_context(|| format!("cannot create {}", base.display()))?;
    }
    let mine = base.join("memlens");
    // /tmp/memlens-<uid> lives in a directory everybody may write to: check it too.
    if fallback {
        create_private_dir(&base)?;
        check_private_dir(&base)?;
    }
    for d in [&mine, &dir] {
        create_private_dir(d)?;
        check_private_dir(d)?;
    }
    let dest = dir.join(name);
    write_checked(&dest, bytes, None)?;
    Ok(dest)
}

/// `dest` with exactly `bytes` in it: kept when it already has them, else (re)written, as a hard
/// link to `same` (a checked file holding them) when one can be made.
fn write_checked(dest: &Path, bytes: &[u8], same: Option<&Path>) -> Result<()> {
    if fs::read(dest).is_ok_and(|b| b == *bytes) {
        return Ok(());
    }
    // Write to a private temporary name and rename, so concurrent memlens processes never see a
    // half-written library.
    let name = dest.file_name().context("a file name")?.to_string_lossy();
    let dir = dest.parent().context("a directory")?;
    let tmp = dir.join(format!(".{name}.{}", std::process::id()));
    fs::remove_file(&tmp).ok();
    if same.is_some_and(|s| fs::hard_link(s, &tmp).is_ok()) {
        fs::rename(&tmp, dest).with_context(|| format!("cannot create {}", dest.display()))?;
        return Ok(());
    }
    let mut f =
        fs::File::create(&tmp).with_context(|| format!("cannot write {}", tmp.display()))?;
    f.write_all(bytes)?;
    f.set_permissions(fs::Permissions::from_mode(0o755))?;
    drop(f);
    fs::rename(&tmp, dest).with_context(|| format!("cannot create {}", dest.display()))?;
    Ok(())
}

/// The embedded bytes of an artifact (to check a copy of it made elsewhere).
pub fn bytes(name: &str) -> Option<&'static [u8]> {
    ARTIFACTS.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

/// Path of `libmemlens.so`.
pub fn runtime() -> Result<PathBuf> {
    path(RUNTIME)
}

/// What `LD_PRELOAD` names for a program of either C library: the cache's runtime directory laid
/// out by [`preload_layout`] (written, and checked as [`path`] checks), then [`PRELOAD_NAME`].
pub fn preload() -> Result<PathBuf> {
    let glibc = path(RUNTIME)?;
    let dir = glibc
        .parent()
        .map(Path::to_path_buf)
        .context("the runtime's directory")?;
    for d in preload_dirs() {
        create_private_dir(&dir.join(&d))?;
        check_private_dir(&dir.join(&d))?;
    }
    for (rel, data) in preload_layout() {
        // the glibc runtime under its `$LIB` names is the cache's file again: hard links
        let same = bytes(RUNTIME).is_some_and(|g| g.as_ptr() == data.as_ptr());
        write_checked(&dir.join(&rel), data, same.then_some(glibc.as_path()))?;
    }
    Ok(dir.join(PRELOAD_NAME))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of the layout has its directory listed, each directory after its parent; the
    /// glibc runtime is under glibc's `$LIB` names, the musl one (when built) under a literal `$LIB`.
    #[test]
    fn the_preload_layout_is_creatable_in_order() {
        let dirs = preload_dirs();
        for (i, d) in dirs.iter().enumerate() {
            let parent = d.parent().filter(|p| !p.as_os_str().is_empty());
            assert!(
                parent.is_none_or(|p| dirs[..i].iter().any(|k| k == p)),
                "{d:?} before its parent in {dirs:?}"
            );
        }
        let layout = preload_layout();
        for (rel, _) in &layout {
            assert!(
                dirs.iter().any(|d| Some(d.as_path()) == rel.parent()),
                "{rel:?}"
            );
        }
        let glibc = format!("lib/{}-linux-gnu/{RUNTIME}", std::env::consts::ARCH);
        assert!(layout
            .iter()
            .any(|(r, b)| *r == Path::new(&glibc) && Some(*b) == bytes(RUNTIME)));
        let musl = layout.iter().find(|(r, _)| r == Path::new(PRELOAD_NAME));
        assert_eq!(musl.map(|(_, b)| *b), bytes(RUNTIME_MUSL));
    }
}
