//! Where a target's control socket is.
//!
//! The runtime (runtime/src/control/ctl_dir.c) listens on `$MEMLENS_CTL_DIR/<pid>.<pidns>.sock` (default
//! `/tmp/memlens-<euid>`, directory 0700, socket 0600) and checks every peer's credentials
//! (SO_PEERCRED: our uid or root).
use crate::proc::ProcStatus;
use std::path::{Path, PathBuf};

/// `MEMLENS_CTL_DIR` of this process, when set and not empty.
fn env_dir() -> Option<PathBuf> {
    std::env::var_os("MEMLENS_CTL_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
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

/// The socket directory of process `pid`: ours if MEMLENS_CTL_DIR is set here, else the one in the
/// process's environment (readable for its owner and root), else the default of its owner.
pub(crate) fn ctl_dir_of(pid: i32, uid: u32) -> PathBuf {
    if let Some(d) = env_dir() {
        return d;
    }
    if let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) {
        for kv in env.split(|&b| b == 0) {
            if let Some(v) = kv.strip_prefix(b"MEMLENS_CTL_DIR=".as_slice()) {
                if !v.is_empty() {
                    return PathBuf::from(String::from_utf8_lossy(v).into_owned());
                }
            }
        }
    }
    default_dir(uid)
}

/// The control socket of `pid` in `dir`: `<pid>.<pidns>.sock`, named by the process's own pid and
/// the inode of its pid namespace (so containers sharing the directory never collide). A process in
/// another pid namespace knows itself by the last `NSpid:` entry of its status.
pub(crate) fn socket_path(dir: &Path, pid: i32, status: &ProcStatus) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let own_pid = status
        .field("NSpid:")
        .and_then(|v| v.split_whitespace().last()?.parse::<i32>().ok())
        .unwrap_or(pid);
    let ns = std::fs::metadata(format!("/proc/{pid}/ns/pid"))
        .map(|m| m.ino())
        .unwrap_or(0);
    let sock = dir.join(format!("{own_pid}.{ns}.sock"));
    let legacy = dir.join(format!("{own_pid}.sock"));
    if !sock.exists() && legacy.exists() {
        return legacy; // a runtime older than the namespace-qualified names
    }
    sock
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
