//! Where a target's control socket is, and how we reach it.
//!
//! The runtime (runtime/src/control/ctl_dir.c) listens on `$MEMLENS_CTL_DIR/<pid>.<pidns>.sock` (default
//! `/tmp/memlens-<euid>`, directory 0700, socket 0600) and checks every peer's credentials
//! (SO_PEERCRED: our uid or root). It names the socket, the directory and the uid as it sees them
//! from inside its namespaces: its own pid, its own `/tmp`, its uid in its user namespace. From
//! here the socket is under the process's root (`/proc/PID/root/tmp/…`) when that is not ours
//! ([`crate::ns`]).
use crate::ns::{foreign_root, ns_inode, ns_pid, our_root_is_mapped_in, uid_inside, under};
use crate::proc::ProcStatus;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// `MEMLENS_CTL_DIR` of this process, when set and not empty.
fn env_dir() -> Option<PathBuf> {
    std::env::var_os("MEMLENS_CTL_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
}

/// Whether this process was given a control directory (`MEMLENS_CTL_DIR`): then it looks only
/// there, for processes started with the same.
pub fn ctl_dir_given() -> bool {
    env_dir().is_some()
}

/// The runtime's default control directory for processes of `uid`.
fn default_dir(uid: u32) -> PathBuf {
    PathBuf::from(format!("/tmp/memlens-{uid}"))
}

/// The control directory of this process's own user: `$MEMLENS_CTL_DIR`, else the runtime's
/// default for our effective uid. (A process started with its own MEMLENS_CTL_DIR is found here
/// only when we have the same.)
pub fn ctl_dir() -> PathBuf {
    // SAFETY: geteuid has no preconditions.
    env_dir().unwrap_or_else(|| default_dir(unsafe { libc::geteuid() }))
}

/// `MEMLENS_CTL_DIR` in the environment of process `pid` (readable for its owner and root).
fn environ_dir(pid: i32) -> Option<PathBuf> {
    let env = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    env.split(|&b| b == 0).find_map(|kv| {
        let v = kv.strip_prefix(b"MEMLENS_CTL_DIR=".as_slice())?;
        (!v.is_empty()).then(|| PathBuf::from(String::from_utf8_lossy(v).into_owned()))
    })
}

/// Where the control socket of one process is, as we reach it.
#[derive(Debug, Clone)]
pub(crate) struct Location {
    /// Its directory, from here (`/proc/PID/root/tmp/memlens-0` for a process in a container).
    pub dir: PathBuf,
    /// The socket, from here.
    pub sock: PathBuf,
    /// The process's root when it is not ours.
    pub root: Option<PathBuf>,
    /// The pid the process has in its own pid namespace (its socket's name).
    pub ns_pid: i32,
    /// The uid to connect as: the process's own (host) uid when root of ours is not a uid in its
    /// user namespace (the runtime would see us as the overflow uid and refuse us).
    pub connect_uid: Option<u32>,
}

/// The control socket of process `pid` (owned by `uid`, as we see it): `<pid>.<pidns>.sock`,
/// named by the process's own pid and the inode of its pid namespace (so containers sharing the
/// directory never collide), in the directory the runtime chose from inside: ours if
/// MEMLENS_CTL_DIR is set here and the process shares our root, else the one in its environment,
/// else the default of its uid inside its user namespace — under its root when that is not ours.
pub(crate) fn locate(pid: i32, uid: u32, status: &ProcStatus) -> Location {
    let root = foreign_root(pid);
    let inside = match (&root, env_dir()) {
        (None, Some(d)) => d,
        _ => environ_dir(pid).unwrap_or_else(|| default_dir(uid_inside(pid, uid))),
    };
    let dir = under(root.as_deref(), &inside);
    let own_pid = ns_pid(pid, status);
    let ns = ns_inode(&pid.to_string(), "pid").unwrap_or(0);
    let mut sock = dir.join(format!("{own_pid}.{ns}.sock"));
    let legacy = dir.join(format!("{own_pid}.sock"));
    if !sock.exists() && legacy.exists() {
        sock = legacy; // a runtime older than the namespace-qualified names
    }
    // SAFETY: geteuid has no preconditions.
    let connect_uid =
        (unsafe { libc::geteuid() } == 0 && uid != 0 && !our_root_is_mapped_in(pid)).then_some(uid);
    Location {
        dir,
        sock,
        root,
        ns_pid: own_pid,
        connect_uid,
    }
}

/// Connect to the unix socket `sock`, as `uid` when given (root only). A path longer than a
/// socket address holds (`/proc/PID/root/…` of a long control directory), or one to be
/// reached as another uid, goes through a descriptor of its directory opened with our own rights
/// first (`/proc/self/fd/N/NAME`): the uid we connect as may not be allowed to walk
/// `/proc/PID/root`.
pub(crate) fn connect(sock: &Path, uid: Option<u32>) -> std::io::Result<UnixStream> {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::OpenOptionsExt;
    if uid.is_none() && sock.as_os_str().len() < 100 {
        return UnixStream::connect(sock);
    }
    let (Some(dir), Some(name)) = (sock.parent(), sock.file_name()) else {
        return UnixStream::connect(sock);
    };
    let d = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(dir)?;
    let short = PathBuf::from(format!("/proc/self/fd/{}", d.as_raw_fd())).join(name);
    match uid {
        Some(u) => as_euid(u, || UnixStream::connect(&short))?,
        None => UnixStream::connect(&short),
    }
}

/// Run `f` with this thread's effective uid set to `uid`, then set it back. The raw system call
/// changes this thread's credentials only (glibc's `setresuid` would change every thread's); the
/// real and saved uids stay 0, so the capabilities come back with the effective uid.
fn as_euid<T>(uid: u32, f: impl FnOnce() -> T) -> std::io::Result<T> {
    let keep = libc::uid_t::MAX; // -1: unchanged
                                 // SAFETY: setresuid on this thread; no memory is involved.
    if unsafe { libc::syscall(libc::SYS_setresuid, keep, uid, keep) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let r = f();
    // SAFETY: as above; back to the effective uid 0 we had (the saved uid is still 0).
    if unsafe { libc::syscall(libc::SYS_setresuid, keep, 0 as libc::uid_t, keep) } != 0 {
        // A thread that cannot become root again must not serve anything else.
        eprintln!(
            "memlens: error: cannot switch back to uid 0 after connecting as uid {uid}: {}",
            std::io::Error::last_os_error()
        );
        std::process::exit(1);
    }
    Ok(r)
}

/// Pids with a control socket in `dir` (`<pid>….sock`), ascending. Stale sockets are listed too:
/// [`crate::Target::ready`] tells them apart.
pub fn socket_pids(dir: &Path) -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = rd
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            if !name.ends_with(".sock") {
                return None;
            }
            let digits: String = name.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok().filter(|&p| p > 0)
        })
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

/// Remove the control sockets `pid` left in `dir` when it ended without unlinking them (killed,
/// or gone through `_exit`): only sockets nobody listens on, of a pid that is no longer running.
pub fn remove_stale_sockets(dir: &Path, pid: u32) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let prefix = format!("{pid}.");
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !name.starts_with(&prefix) || !name.ends_with(".sock") {
            continue;
        }
        let path = e.path();
        let refused = matches!(
            std::os::unix::net::UnixStream::connect(&path),
            Err(err) if err.kind() == std::io::ErrorKind::ConnectionRefused
        );
        if refused {
            std::fs::remove_file(&path).ok();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids_of_the_sockets_in_a_directory() {
        let d = tempfile::tempdir().unwrap();
        for f in [
            "12.4026531836.sock",
            "7.sock",
            "12.9.sock",
            "3.raw",
            "x.sock",
        ] {
            std::fs::write(d.path().join(f), "").unwrap();
        }
        assert_eq!(socket_pids(d.path()), vec![7, 12]);
        assert!(socket_pids(&d.path().join("absent")).is_empty());
    }
}
