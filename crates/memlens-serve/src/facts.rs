//! What the server tells of a process (`/targets`, `/metrics`, the labels of its profiles) and of
//! the machine it runs on.
use memlens_target::{rss_bytes, Reply, Target};
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

/// The service name a backend groups by: the basename of the program (`argv[0]`), else its comm.
pub fn service_of(pid: i32, comm: &str) -> String {
    let argv0 = std::fs::read(format!("/proc/{pid}/cmdline"))
        .ok()
        .and_then(|b| {
            let first = b.split(|&c| c == 0).next()?;
            let s = String::from_utf8_lossy(first).into_owned();
            let base = s.rsplit('/').next()?.to_string();
            (!base.is_empty()).then_some(base)
        });
    argv0.unwrap_or_else(|| comm.to_string())
}

/// This machine's host name.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// What `/targets` and `/metrics` show of one process.
#[derive(Debug, Clone, Serialize)]
pub struct Facts {
    pub pid: i32,
    /// The process's name (comm).
    pub command: String,
    pub cmdline: String,
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

/// The facts of `t`; the runtime's fields are null when its status cannot be read.
pub fn facts(t: &Target, service: Option<&str>) -> Facts {
    let (st, error): (Option<Reply>, _) = match t.status() {
        Ok(r) => (Some(r), None),
        Err(e) => (None, Some(format!("{e:#}"))),
    };
    let num = |k: &str| st.as_ref().and_then(|r| r.num(k));
    Facts {
        pid: t.pid,
        command: t.comm.clone(),
        cmdline: cmdline(t.pid),
        service: service
            .map(str::to_string)
            .unwrap_or_else(|| service_of(t.pid, &t.comm)),
        interval: num("interval"),
        active: st.as_ref().and_then(|r| r.get("active")).map(|v| v == "1"),
        samples: num("samples"),
        alloc_bytes: num("alloc_bytes"),
        inuse_bytes: num("inuse_bytes"),
        dropped: num("dropped"),
        rss_bytes: rss_bytes(t.pid),
        cost_ns: num("cost_ns"),
        cpu_ns: num("cpu_ns"),
        error,
    }
}
