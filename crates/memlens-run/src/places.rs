//! Where a run's files go and where its runtime is loaded from, wherever the program runs.
//!
//! Containers make the usual places unusable in ways a program must never pay for: podman and
//! Docker mount `/dev/shm` noexec (a preloaded library there fails in ld.so), it may be read-only
//! or a few MiB, HOME may be read-only, and another user may have created `/dev/shm/memlens-<uid>`
//! first. So each place is tried in turn, and memlens says once (one line) what it could not use
//! and where it went instead:
//!
//! * the run's files: `MEMLENS_RUN_ROOT` when set (alone), else `/dev/shm/memlens-<uid>` (tmpfs:
//!   the runtime's state pages are written back to no disk), else `$TMPDIR/memlens-runs-<uid>`;
//!   a place must be a directory of ours nobody else can write to, on a writable filesystem with
//!   at least [`MIN_FREE`] free;
//! * the runtime: for a user other than root the cached copy (`memlens_native::runtime`, in
//!   `~/.cache`), for root — whose children may drop their privileges and exec — a copy in a
//!   root-owned `lib-<hash>` directory beside the runs; any of them only on a filesystem that
//!   allows exec; failing all, a sealed memfd the program inherits (`/proc/self/fd/N`, as `memlens
//!   attach` loads it).
//!
//! When no place at all can hold the run's files, [`Places::find`] says why and `memlens run`
//! runs the program without the runtime.
use anyhow::{anyhow, bail, Context, Result};
use std::fs;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The least free space a place for the run's files must have: less, and the first profile of a
/// few thousand stacks would not fit (a 2 MiB tmpfs lost every profile).
pub const MIN_FREE: u64 = 32 << 20;

fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The places a run's files may go, in order of preference.
fn candidates() -> Vec<PathBuf> {
    let me = euid();
    if let Some(d) = std::env::var_os("MEMLENS_RUN_ROOT").filter(|v| !v.is_empty()) {
        return vec![PathBuf::from(d)];
    }
    let mut v = Vec::new();
    if Path::new("/dev/shm").is_dir() {
        v.push(PathBuf::from(format!("/dev/shm/memlens-{me}")));
    }
    v.push(std::env::temp_dir().join(format!("memlens-runs-{me}")));
    v
}

/// Where the run's files go, and why the places before it were not used.
#[derive(Debug)]
pub struct Places {
    /// The directory all runs of this user live in (created and checked).
    pub root: PathBuf,
    /// The places not used, each with its reason.
    pub skipped: Vec<String>,
}

impl Places {
    /// The first usable place; an error (every reason) when there is none.
    pub fn find() -> Result<Places> {
        let mut skipped = Vec::new();
        for dir in candidates() {
            match usable(&dir) {
                Ok(()) => return Ok(Places { root: dir, skipped }),
                Err(e) => skipped.push(format!("{e:#}")),
            }
        }
        Err(anyhow!("{}", skipped.join("; ")))
    }
}

/// Create `dir` if needed and check it can hold the run's files.
fn usable(dir: &Path) -> Result<()> {
    let me = euid();
    // Root's children may drop their privileges: they must be able to reach their run directory
    // (and the runtime) by a name they know, never to list what is there.
    let mode = if me == 0 { 0o711 } else { 0o700 };
    match fs::DirBuilder::new().mode(mode).create(dir) {
        Ok(()) => fs::set_permissions(dir, fs::Permissions::from_mode(mode))
            .with_context(|| format!("cannot set the mode of {}", dir.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
    }
    own_dir(dir, me)?;
    let fs = statvfs(dir)?;
    if fs.f_flag & libc::ST_RDONLY != 0 {
        bail!("{} is on a read-only filesystem", dir.display());
    }
    let free = fs.f_bavail.saturating_mul(fs.f_frsize);
    if free < MIN_FREE {
        bail!(
            "{} has {} free (memlens wants {})",
            dir.display(),
            memlens_measure::units::format_size(free),
            memlens_measure::units::format_size(MIN_FREE)
        );
    }
    Ok(())
}

/// `dir` is a real directory (not a link) of uid `me` that nobody else can write to.
fn own_dir(dir: &Path, me: u32) -> Result<()> {
    match memlens_native::not_own_dir(dir, me)? {
        None => Ok(()),
        Some(why) => bail!("{why}"),
    }
}

fn statvfs(dir: &Path) -> Result<libc::statvfs> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: a zeroed statvfs is valid; statvfs fills it for a NUL-terminated path.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return Err(std::io::Error::last_os_error())
            .context(format!("cannot read {}", dir.display()));
    }
    Ok(s)
}

/// The bytes free (to an unprivileged user) on the filesystem of `dir`.
pub fn free_bytes(dir: &Path) -> Option<u64> {
    statvfs(dir)
        .ok()
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
}

/// Does the filesystem of `dir` refuse to map files executable (`mount -o noexec`)?
fn noexec(dir: &Path) -> bool {
    statvfs(dir).is_ok_and(|s| s.f_flag & libc::ST_NOEXEC != 0)
}

/// The runtime to preload, and why the places before it were not used.
pub struct Runtime {
    /// What LD_PRELOAD names.
    pub path: PathBuf,
    /// The memfd behind `/proc/self/fd/N` (kept open, and inherited by the program).
    _memfd: Option<OwnedFd>,
    /// The places not used, each with its reason.
    pub skipped: Vec<String>,
}

impl Runtime {
    /// The runtime for a run whose files go to `places`: the first place that allows exec (see the
    /// module docs), else a memfd.
    pub fn find(places: &Places) -> Result<Runtime> {
        let mut skipped = Vec::new();
        let found = |path: PathBuf, skipped: Vec<String>| Runtime {
            path,
            _memfd: None,
            skipped,
        };
        if euid() != 0 {
            match memlens_native::preload() {
                Ok(p) if !p.parent().and_then(Path::parent).is_some_and(noexec) => {
                    return Ok(found(p, skipped))
                }
                Ok(p) => skipped.push(format!("{} is on a noexec filesystem", p.display())),
                Err(e) => skipped.push(format!("{e:#}")),
            }
        }
        // the run's own place first, then the others that can be made ours
        let others = candidates().into_iter().filter(|c| *c != places.root);
        for root in std::iter::once(places.root.clone()).chain(others) {
            if root != places.root {
                if let Err(e) = usable(&root) {
                    skipped.push(format!("{e:#}"));
                    continue;
                }
            }
            if noexec(&root) {
                skipped.push(format!("{} is on a noexec filesystem", root.display()));
                continue;
            }
            match copy_beside_runs(&root) {
                Ok(p) => return Ok(found(p, skipped)),
                Err(e) => skipped.push(format!("{e:#}")),
            }
        }
        let (fd, path) = memfd()?;
        Ok(Runtime {
            path,
            _memfd: Some(fd),
            skipped,
        })
    }
}

fn runtime_bytes() -> Result<&'static [u8]> {
    memlens_native::bytes(memlens_native::RUNTIME)
        .ok_or_else(|| anyhow!("memlens was built without its runtime"))
}

/// A copy of the runtime in `root/lib-<hash>` (a directory of ours others can traverse but not
/// write), so that a child which dropped its privileges and exec'd a program can still load it;
/// laid out as `memlens_native::preload_layout` says (a build for each C library), and named by
/// `memlens_native::PRELOAD_NAME` below it.
fn copy_beside_runs(root: &Path) -> Result<PathBuf> {
    let layout = memlens_native::preload_layout();
    if layout.is_empty() {
        runtime_bytes()?;
    }
    // named by a hash of the bytes, as the cache is: two builds never share a copy
    let hash = {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for (rel, bytes) in &layout {
            rel.hash(&mut h);
            bytes.hash(&mut h);
        }
        h.finish()
    };
    let dir = root.join(format!("lib-{hash:016x}"));
    make_own_dir(&dir)?;
    // the glibc runtime under each of its names is one file (hard links): the runs' place is
    // usually a tmpfs, i.e. memory
    let mut first: Option<(&[u8], PathBuf)> = None;
    for d in memlens_native::preload_dirs() {
        make_own_dir(&dir.join(d))?;
    }
    for (rel, bytes) in &layout {
        let dest = dir.join(rel);
        let same = first.as_ref().filter(|(b, _)| b.as_ptr() == bytes.as_ptr());
        write_copy(&dest, bytes, same.map(|(_, p)| p.as_path()))?;
        if first.is_none() {
            first = Some((bytes, dest));
        }
    }
    Ok(dir.join(memlens_native::PRELOAD_NAME))
}

/// `dir` created (others may traverse it, not write) or found, and checked to be ours alone.
fn make_own_dir(dir: &Path) -> Result<()> {
    match fs::DirBuilder::new().mode(0o755).create(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", dir.display())),
    }
    own_dir(dir, euid())
}

/// `dest` holding exactly `bytes`: kept when it does (read without following a link), else
/// written under a private name (a hard link to `same`, a file already holding them, when it can
/// be made) and renamed over it.
fn write_copy(dest: &Path, bytes: &[u8], same: Option<&Path>) -> Result<()> {
    if memlens_profile::read_regular(dest, memlens_profile::Links::Refuse, bytes.len() as u64)
        .is_ok_and(|b| b == bytes)
    {
        return Ok(());
    }
    let name = dest.file_name().map(|n| n.to_string_lossy().into_owned());
    let tmp = dest.with_file_name(format!(
        ".{}.{}",
        name.unwrap_or_default(),
        std::process::id()
    ));
    fs::remove_file(&tmp).ok();
    let linked = same.is_some_and(|s| fs::hard_link(s, &tmp).is_ok());
    if !linked {
        fs::write(&tmp, bytes).with_context(|| format!("cannot write {}", tmp.display()))?;
        fs::set_permissions(&tmp, fs::Permissions::from_mode(0o755))?;
    }
    fs::rename(&tmp, dest).with_context(|| format!("cannot write {}", dest.display()))?;
    Ok(())
}

/// The runtime in a sealed memfd, at a high descriptor number the program inherits (no
/// close-on-exec), named `/proc/self/fd/N`: the name resolves in every process that still holds
/// it, whatever its uid. (A program that closes every descriptor and then execs loses it there:
/// ld.so says so and runs the program without it.)
fn memfd() -> Result<(OwnedFd, PathBuf)> {
    let bytes = runtime_bytes()?;
    // (`memfd:memlens…` in /proc/PID/maps: what memlens_target::runtime_loaded looks for)
    let name = c"memlens-runtime";
    // SAFETY: a valid name; flags without close-on-exec, on purpose.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error())
            .context("cannot create a memfd for the runtime");
    }
    // SAFETY: a descriptor we just created and own.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut f = fs::File::from(fd);
    std::io::Write::write_all(&mut f, bytes).context("cannot write the runtime to a memfd")?;
    let fd = OwnedFd::from(f);
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_WRITE | libc::F_SEAL_SEAL;
    // SAFETY: fcntl on our own descriptor.
    unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) };
    // Out of the program's way: the lowest free number at or above half the descriptor limit.
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit fills `lim`.
    unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) };
    let floor = (lim.rlim_cur / 2).clamp(3, 1 << 16) as libc::c_int;
    // SAFETY: fcntl on our own descriptor; F_DUPFD leaves close-on-exec off.
    let high = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD, floor) };
    let fd = if high >= 0 {
        // SAFETY: the duplicate is ours; the original closes when `fd` drops.
        unsafe { OwnedFd::from_raw_fd(high) }
    } else {
        fd
    };
    let path = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
    Ok((fd, path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memfd_runtime_is_sealed_and_inherited() {
        let (fd, path) = memfd().unwrap();
        let bytes = fs::read(&path).unwrap();
        assert_eq!(bytes, runtime_bytes().unwrap());
        // SAFETY: fcntl on our own descriptor.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(flags & libc::FD_CLOEXEC, 0, "the program must inherit it");
        assert!(
            fs::OpenOptions::new().write(true).open(&path).is_err() || {
                // writing through a sealed memfd fails even when the open succeeds
                std::io::Write::write_all(
                    &mut fs::OpenOptions::new().write(true).open(&path).unwrap(),
                    b"x",
                )
                .is_err()
            }
        );
    }
}
