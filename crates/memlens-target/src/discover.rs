//! Every process with a control socket we can see, by the pid we know it by (its host pid), in
//! any pid and mount namespace.
//!
//! A socket is named `<nspid>.<pidns>.sock` by the runtime inside: the pid in its own namespace
//! and that namespace's inode. So the directories are listed in every root there is (ours, and
//! `/proc/PID/root` of one process per other root: each container's `/tmp`), and each name is
//! mapped to the process whose pid namespace has that inode and whose last `NSpid:` is that pid.
use crate::ns::{ns_inode, root_key};
use crate::proc::ProcStatus;
use crate::socket::{ctl_dir, ctl_dir_given};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// A socket's name: the pid inside and the pid namespace's inode (None: a runtime older than the
/// namespace-qualified names, whose pid is ours).
fn parse_name(name: &str) -> Option<(i32, Option<u64>)> {
    let stem = name.strip_suffix(".sock")?;
    let (pid, ns) = match stem.split_once('.') {
        Some((p, n)) => (p, Some(n.parse().ok()?)),
        None => (stem, None),
    };
    let pid: i32 = pid.parse().ok()?;
    (pid > 0).then_some((pid, ns))
}

/// The socket names in `dir`.
fn names_in(dir: &Path) -> Vec<(i32, Option<u64>)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.filter_map(|e| parse_name(&e.ok()?.file_name().into_string().ok()?))
        .collect()
}

/// The runtime's default control directories under `root` (`root/tmp/memlens-*`).
fn default_dirs(root: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(root.join("tmp")) else {
        return Vec::new();
    };
    rd.filter_map(|e| {
        let e = e.ok()?;
        let name = e.file_name().into_string().ok()?;
        let uid = name.strip_prefix("memlens-")?;
        (uid.parse::<u32>().is_ok() && e.file_type().ok()?.is_dir()).then(|| e.path())
    })
    .collect()
}

/// The numeric entries of /proc.
fn all_pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Host pids of the processes with a control socket, ascending (a stale socket's process may be
/// listed when a new one has its pid: [`crate::Target::ready`] tells). With `MEMLENS_CTL_DIR`
/// set here, only that directory is looked in (processes started with the same, in any pid
/// namespace); else the default directories of every user we may read, in our root and in every
/// other root (container) of a process we may look into.
pub fn socket_hosts() -> Vec<i32> {
    let pids = all_pids();
    let mut dirs: Vec<PathBuf> = Vec::new();
    if ctl_dir_given() {
        dirs.push(ctl_dir());
    } else {
        dirs.extend(default_dirs(Path::new("/")));
        let mut roots = HashSet::new();
        roots.insert(root_key("self"));
        for &p in &pids {
            let key = root_key(&p.to_string());
            if key.is_some() && roots.insert(key) {
                dirs.extend(default_dirs(Path::new(&format!("/proc/{p}/root"))));
            }
        }
    }
    let mut wanted: HashMap<u64, HashSet<i32>> = HashMap::new();
    let mut hosts: Vec<i32> = Vec::new();
    for d in &dirs {
        for (pid, ns) in names_in(d) {
            match ns {
                Some(ns) => {
                    wanted.entry(ns).or_default().insert(pid);
                }
                None => hosts.push(pid),
            }
        }
    }
    for &p in &pids {
        let Some(set) = ns_inode(&p.to_string(), "pid").and_then(|ns| wanted.get(&ns)) else {
            continue;
        };
        let inside = ProcStatus::read(p)
            .ok()
            .flatten()
            .map(|st| crate::ns::ns_pid(p, &st));
        if inside.is_some_and(|i| set.contains(&i)) {
            hosts.push(p);
        }
    }
    hosts.sort_unstable();
    hosts.dedup();
    hosts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_names() {
        assert_eq!(
            parse_name("12.4026531836.sock"),
            Some((12, Some(4026531836)))
        );
        assert_eq!(parse_name("7.sock"), Some((7, None)));
        for bad in ["x.sock", "12.x.sock", "0.5.sock", "12.5.raw", "serve.sock"] {
            assert_eq!(parse_name(bad), None, "{bad}");
        }
    }
}
