//! Where a process lives, seen from here: its pid in its own pid namespace, whether its root (its
//! mount namespace, a chroot) is ours, its uid inside its user namespace, and the container its
//! cgroup names.
//!
//! Everything memlens does to a process is addressed by the pid *we* see (the host pid), but the
//! runtime inside knows itself by the pid of its own namespace and writes its control socket into
//! its own `/tmp`. The kernel gives us both sides: `NSpid:` in `/proc/PID/status` (the pid in every
//! nested namespace, ours first, its own last), `/proc/PID/ns/*` (a namespace's identity is the
//! inode of that link), `/proc/PID/root` (its root directory, whatever mount namespace it is in)
//! and `/proc/PID/uid_map`.
use crate::proc::ProcStatus;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The inode of namespace `kind` (`pid`, `mnt`, `user`) of process `pid` (`self` for ours).
pub fn ns_inode(pid: &str, kind: &str) -> Option<u64> {
    std::fs::metadata(format!("/proc/{pid}/ns/{kind}"))
        .ok()
        .map(|m| m.ino())
}

/// The process's pid in its own pid namespace (the last `NSpid:` entry; `pid` where there is none).
pub fn ns_pid(pid: i32, status: &ProcStatus) -> i32 {
    status
        .field("NSpid:")
        .and_then(|v| v.split_whitespace().last()?.parse::<i32>().ok())
        .unwrap_or(pid)
}

/// `/proc/PID/root` when the process's root is not ours — another mount namespace (a container,
/// `unshare --mount`: the same root directory may hold other mounts, a private `/tmp`), or a
/// chroot: the prefix its paths take from here. `None` when it shares our mounts and root (or we
/// may not look: then its paths are tried as they are).
pub fn foreign_root(pid: i32) -> Option<PathBuf> {
    root_key(&pid.to_string())
        .filter(|k| Some(k) != root_key("self").as_ref())
        .map(|_| PathBuf::from(format!("/proc/{pid}/root")))
}

/// What tells two roots apart: the mount namespace and the root directory in it.
pub(crate) fn root_key(pid: &str) -> Option<(u64, u64, u64)> {
    let mnt = ns_inode(pid, "mnt")?;
    let m = std::fs::metadata(format!("/proc/{pid}/root")).ok()?;
    Some((mnt, m.dev(), m.ino()))
}

/// `path` (as the process sees it) as we reach it: under `root` when it has its own.
pub fn under(root: Option<&Path>, path: &Path) -> PathBuf {
    match root {
        Some(r) => r.join(path.strip_prefix("/").unwrap_or(path)),
        None => path.to_path_buf(),
    }
}

/// The uid `host_uid` (a uid of our user namespace) is inside the user namespace of process
/// `pid`: its `uid_map` read from here says `inside outside count` per range. The unmapped
/// overflow uid 65534 when no range holds it; `host_uid` itself when the map cannot be read.
pub fn uid_inside(pid: i32, host_uid: u32) -> u32 {
    let Ok(map) = std::fs::read_to_string(format!("/proc/{pid}/uid_map")) else {
        return host_uid;
    };
    map_uid(&map, host_uid).unwrap_or(65534)
}

fn map_uid(map: &str, host_uid: u32) -> Option<u32> {
    map.lines().find_map(|l| {
        let v: Vec<u64> = l
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        let (inside, outside, count) = (*v.first()?, *v.get(1)?, *v.get(2)?);
        let h = u64::from(host_uid);
        (h >= outside && h < outside + count).then(|| (inside + h - outside) as u32)
    })
}

/// Whether root of our user namespace is a uid in process `pid`'s user namespace: when it is
/// not (a rootless container, a `--userns` with a uid map that leaves 0 out), the runtime there
/// sees a connection of ours as the overflow uid and refuses it, and we must connect as the
/// process's own uid.
pub fn our_root_is_mapped_in(pid: i32) -> bool {
    if ns_inode(&pid.to_string(), "user") == ns_inode("self", "user") {
        return true;
    }
    std::fs::read_to_string(format!("/proc/{pid}/uid_map"))
        .map(|m| map_uid(&m, 0).is_some())
        .unwrap_or(true)
}

/// What a process's cgroup path says of the container it runs in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Container {
    /// The container runtime's id (64 hex digits: docker, podman, containerd, CRI-O).
    pub id: Option<String>,
    /// The Kubernetes pod's uid (with dashes, as `kubectl get pod -o jsonpath={.metadata.uid}`).
    pub pod_uid: Option<String>,
}

impl Container {
    /// The container of process `pid`, from `/proc/PID/cgroup`.
    pub fn of(pid: i32) -> Container {
        std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
            .map(|c| Container::from_cgroup(&c))
            .unwrap_or_default()
    }

    /// The container named by a `/proc/PID/cgroup` file: the cgroup v2 line (`0::PATH`), else the
    /// first v1 line naming one. The shapes (systemd and cgroupfs drivers):
    ///
    /// * podman `…/libpod-ID.scope[/container]`, `/libpod_parent/libpod-ID`;
    /// * docker `…/docker-ID.scope`, `/docker/ID`;
    /// * containerd (Kubernetes) `…/kubepods-burstable-podUID.slice/cri-containerd-ID.scope`,
    ///   CRI-O `…/crio-ID.scope`, the cgroupfs driver `/kubepods/burstable/podUID/ID`;
    ///
    /// a conmon's scope (`libpod-conmon-ID`, `crio-conmon-ID`) is the runtime's monitor, not the
    /// container. Paths seen from another cgroup namespace (`/../../…`) read the same.
    pub fn from_cgroup(text: &str) -> Container {
        let mut paths: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("0::")).collect();
        paths.extend(text.lines().filter_map(|l| l.splitn(3, ':').nth(2)));
        paths
            .into_iter()
            .map(Container::from_path)
            .find(|c| c.id.is_some() || c.pod_uid.is_some())
            .unwrap_or_default()
    }

    fn from_path(path: &str) -> Container {
        let mut c = Container::default();
        for part in path.split('/') {
            if let Some(uid) = pod_uid(part) {
                c.pod_uid = Some(uid);
            }
            if let Some(id) = container_id(part) {
                c.id = Some(id);
            }
        }
        c
    }
}

/// A pod's uid in one cgroup path component: `kubepods-besteffort-pod<uid with _>.slice` or
/// `pod<uid>`.
fn pod_uid(part: &str) -> Option<String> {
    let part = part.strip_suffix(".slice").unwrap_or(part);
    let at = part.rfind("pod")?;
    let before = &part[..at];
    if !(before.is_empty() || before.ends_with('-')) {
        return None;
    }
    let uid = part[at + 3..].replace('_', "-");
    let shape = uid.len() == 36
        && uid.char_indices().all(|(i, ch)| {
            if [8, 13, 18, 23].contains(&i) {
                ch == '-'
            } else {
                ch.is_ascii_hexdigit()
            }
        });
    shape.then_some(uid)
}

/// A container id in one cgroup path component: `<runtime>-<64 hex>.scope`, `libpod-<64 hex>`
/// or a bare `<64 hex>`; not a conmon's.
fn container_id(part: &str) -> Option<String> {
    if part.contains("conmon") {
        return None;
    }
    let part = part.strip_suffix(".scope").unwrap_or(part);
    let id = part.rsplit('-').next()?;
    (id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit())).then(|| id.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "4f3c2a1b9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a291807f6e5d4c3b2a19080";

    #[test]
    fn containers_from_the_cgroup_paths_of_each_runtime() {
        let pod = "0f5e1c2a-3b4d-4e6f-8a9b-0c1d2e3f4a5b";
        let pod_ = pod.replace('-', "_");
        for (cgroup, id, uid) in [
            (format!("0::/machine.slice/libpod-{ID}.scope"), true, None),
            (format!("0::/machine.slice/libpod-{ID}.scope/container"), true, None),
            (format!("0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{ID}.scope"), true, None),
            (format!("0::/libpod_parent/libpod-{ID}"), true, None),
            (format!("0::/system.slice/docker-{ID}.scope"), true, None),
            (format!("0::/docker/{ID}"), true, None),
            (format!("0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{pod_}.slice/cri-containerd-{ID}.scope"), true, Some(pod)),
            (format!("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{pod_}.slice/crio-{ID}.scope"), true, Some(pod)),
            (format!("0::/kubepods.slice/kubepods-pod{pod_}.slice/cri-containerd-{ID}.scope"), true, Some(pod)),
            (format!("0::/kubepods/burstable/pod{pod}/{ID}"), true, Some(pod)),
            (format!("0::/kubepods/pod{pod}/{ID}"), true, Some(pod)),
            (format!("0::/../../kubepods-besteffort-pod{pod_}.slice/cri-containerd-{ID}.scope"), true, Some(pod)),
            (format!("12:memory:/docker/{ID}\n0::/"), true, None),
            (format!("0::/machine.slice/libpod-conmon-{ID}.scope"), false, None),
            (format!("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{pod_}.slice/crio-conmon-{ID}.scope"), false, Some(pod)),
            ("0::/user.slice/user-1000.slice/session-3.scope".to_string(), false, None),
            ("0::/system.slice/podman.service".to_string(), false, None),
            ("0::/".to_string(), false, None),
        ] {
            let c = Container::from_cgroup(&cgroup);
            assert_eq!(c.id.as_deref(), id.then_some(ID), "{cgroup}");
            assert_eq!(c.pod_uid.as_deref(), uid, "{cgroup}");
        }
    }

    #[test]
    fn uids_through_a_map() {
        let rootless = "         0       1000          1\n         1     100000      65536\n";
        assert_eq!(map_uid(rootless, 1000), Some(0));
        assert_eq!(map_uid(rootless, 100_032), Some(33));
        assert_eq!(map_uid(rootless, 0), None);
        assert_eq!(map_uid("0 0 4294967295\n", 0), Some(0));
    }

    #[test]
    fn our_own_process() {
        let me = std::process::id() as i32;
        assert!(foreign_root(me).is_none());
        assert!(our_root_is_mapped_in(me));
        let st = ProcStatus::read(me).unwrap().unwrap();
        assert_eq!(ns_pid(me, &st), me);
        assert_eq!(
            under(Some(Path::new("/proc/1/root")), Path::new("/tmp/x")),
            PathBuf::from("/proc/1/root/tmp/x")
        );
        assert_eq!(under(None, Path::new("/tmp/x")), PathBuf::from("/tmp/x"));
    }
}
