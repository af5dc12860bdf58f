//! What the server tells of a process (`/targets`, `/metrics`, the labels of its profiles) and of
//! the machine it runs on.
use memlens_target::{ns_inode, rss_bytes, Container, Reply, Target};
use serde::Serialize;

/// The program's command line, arguments joined by spaces (empty when unreadable).
pub fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(String::from_utf8_lossy)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// The service name a backend groups by: the program's name, valid everywhere a service name goes
/// (Pyroscope takes letters, digits and `_ . - /`; Prometheus label values anything). The program's
/// name is the basename of its `argv[0]`; a program that rewrote `argv[0]` into a process title
/// (`redis-server *:16379`, `postgres: checkpointer`, `nginx: worker process`) is named by the
/// title's first word. Else its comm.
pub fn service_of(pid: i32, comm: &str) -> String {
    let argv0 = std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .and_then(|b| {
            let first = b.split(|&c| c == 0).next()?;
            Some(String::from_utf8_lossy(first).into_owned())
        })
        .unwrap_or_default();
    [program_name(&argv0), comm.to_string()]
        .iter()
        .map(|n| sanitize(n))
        .find(|n| !n.is_empty())
        .unwrap_or_else(|| "unknown".into())
}

/// The name in `argv0`: the basename of the path when it names a file (a path may hold spaces),
/// else of the first word of a process title, without the title's `:`.
fn program_name(argv0: &str) -> String {
    let path = if std::path::Path::new(argv0).is_file() {
        argv0
    } else {
        argv0.split_whitespace().next().unwrap_or("")
    };
    let base = path.rsplit('/').next().unwrap_or("");
    base.trim_end_matches(':').to_string()
}

/// `name` with every character a Pyroscope service name cannot hold (anything but ASCII letters,
/// digits, `_ . -`) replaced by `_`, runs of them by one, none at either end.
pub fn sanitize(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
            out.push(c);
        } else if !out.ends_with('_') {
            out.push('_');
        }
    }
    out.trim_matches('_').to_string()
}

/// Whether `name` is a valid service name as it is (what `--label service=` must give).
pub fn valid_service(name: &str) -> bool {
    !name.is_empty() && sanitize(name) == name
}

/// This machine's host name.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// Where a process runs, as the labels a Kubernetes user filters by: `exe`, its executable's
/// name; `ns_pid`, its pid in its own pid namespace (only when that is not ours); `container_id`
/// and `pod_uid`, from its cgroup path (only when it names them). None of them changes while the
/// process lives, so a sample's identity stays the same between scrapes.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Place {
    pub exe: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ns_pid: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
}

impl Place {
    /// Where `t` runs.
    pub fn of(t: &Target) -> Place {
        let other_ns = ns_inode(&t.pid.to_string(), "pid") != ns_inode("self", "pid");
        let c = Container::of(t.pid);
        Place {
            exe: exe_name(t.pid, &t.comm),
            ns_pid: (other_ns || t.ns_pid != t.pid).then_some(t.ns_pid),
            container_id: c.id,
            pod_uid: c.pod_uid,
        }
    }

    /// As labels, in a fixed order.
    pub fn labels(&self) -> Vec<(String, String)> {
        let mut l = vec![("exe".to_string(), self.exe.clone())];
        if let Some(n) = self.ns_pid {
            l.push(("ns_pid".into(), n.to_string()));
        }
        if let Some(c) = &self.container_id {
            l.push(("container_id".into(), c.clone()));
        }
        if let Some(u) = &self.pod_uid {
            l.push(("pod_uid".into(), u.clone()));
        }
        l
    }
}

/// The base name of the process's executable (`/proc/PID/exe`, a path in its own root), made a
/// valid label value as service names are; its comm when the link cannot be read.
fn exe_name(pid: i32, comm: &str) -> String {
    let link = std::fs::read_link(format!("/proc/{pid}/exe"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    let link = link.strip_suffix(" (deleted)").unwrap_or(&link);
    let base = sanitize(link.rsplit('/').next().unwrap_or(""));
    if base.is_empty() {
        sanitize(comm)
    } else {
        base
    }
}

/// What `/targets` and `/metrics` show of one process.
#[derive(Debug, Clone, Serialize)]
pub struct Facts {
    /// Its pid here (the host pid of a process in a container).
    pub pid: i32,
    /// Where it runs (executable, namespace pid, container, pod), flattened into the object.
    #[serde(flatten)]
    pub place: Place,
    /// The process's name (comm).
    pub command: String,
    /// The whole command line, only with `--show-cmdline` (its arguments may hold secrets).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cmdline: Option<String>,
    pub service: String,
    /// Mean sampling interval in bytes (0 = every allocation).
    pub interval: Option<u64>,
    pub active: Option<bool>,
    pub samples: Option<u64>,
    /// Bytes allocated while sampling, estimated from the samples.
    pub alloc_bytes: Option<u64>,
    /// Live heap estimated from the samples (blocks sampled while sampling was on and not yet freed);
    /// null when the runtime does not report it.
    pub inuse_bytes: Option<u64>,
    /// Live anonymous mmap estimated from its samples (issue 31), apart from the heap.
    pub mmap_inuse_bytes: Option<u64>,
    pub dropped: Option<u64>,
    /// Resident set size from /proc/PID/statm.
    pub rss_bytes: Option<u64>,
    /// What profiling has cost the process so far by the runtime's own account: CPU ns in its
    /// sampled path, and the process's CPU ns (their ratio is the share).
    pub cost_ns: Option<u64>,
    pub cpu_ns: Option<u64>,
    /// Why the status could not be read (the process is exiting, or its runtime is busy).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The facts of `t` (its command line with `show_cmdline`); the runtime's fields are null when
/// its status cannot be read.
pub fn facts(t: &Target, service: Option<&str>, show_cmdline: bool) -> Facts {
    let (st, error): (Option<Reply>, _) = match t.status() {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    let num = |f: fn(&Reply) -> Option<u64>| st.as_ref().and_then(f);
    Facts {
        pid: t.pid,
        place: Place::of(t),
        command: t.comm.clone(),
        cmdline: show_cmdline.then(|| cmdline(t.pid)),
        service: service
            .map(str::to_string)
            .unwrap_or_else(|| service_of(t.pid, &t.comm)),
        interval: num(|r| r.interval),
        active: st.as_ref().and_then(|r| r.active),
        samples: num(|r| r.samples),
        alloc_bytes: num(|r| r.alloc_bytes),
        inuse_bytes: num(|r| r.inuse_bytes),
        mmap_inuse_bytes: num(|r| r.mmap_inuse_bytes),
        dropped: num(|r| r.dropped),
        rss_bytes: rss_bytes(t.pid),
        cost_ns: num(|r| r.cost_ns),
        cpu_ns: num(|r| r.cpu_ns),
        error,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_names_are_program_names_valid_everywhere() {
        for (argv0, want) in [
            ("redis-server *:16379", "redis-server"),
            ("postgres: checkpointer", "postgres"),
            ("nginx: worker process", "nginx"),
            ("/usr/bin/python3.11", "python3.11"),
            ("./my server", "my"),
            ("/bin/sh", "sh"),
            ("", ""),
        ] {
            assert_eq!(sanitize(&program_name(argv0)), want, "{argv0}");
        }
        assert_eq!(sanitize("a b*:c"), "a_b_c");
        assert_eq!(sanitize("@@"), "");
        assert!(valid_service("orders-v2.eu_1"));
        assert!(!valid_service("orders v2") && !valid_service("") && !valid_service("a/b"));
        // Our own process: its program's name.
        let me = std::process::id() as i32;
        let comm = std::fs::read_to_string("/proc/self/comm").unwrap();
        assert!(valid_service(&service_of(me, comm.trim())));
    }
}
