//! Which processes the server may show, and what it knows of each.
//!
//! A process is a target when it runs the memlens runtime (it has a control socket in the control
//! directory) and belongs to the server's own user. Root may control anyone's process with
//! `memlens ctl`, but an HTTP endpoint must not hand one user's heap to whoever can reach the port,
//! so the server refuses processes of other users whatever its own uid.
use memlens_run::{ProcStatus, Reply, Target};
use serde::Serialize;
use std::path::PathBuf;

/// Why a pid cannot be served: an HTTP status and a one-line reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: u16,
    pub reason: String,
}

impl Refusal {
    pub fn new(status: u16, reason: impl Into<String>) -> Refusal {
        Refusal {
            status,
            reason: reason.into(),
        }
    }
}

/// Our effective uid.
pub fn my_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// The control directory this server lists: `$MEMLENS_CTL_DIR`, else the runtime's default for our
/// uid. (A process started with its own MEMLENS_CTL_DIR is found only when the server has the same.)
pub fn ctl_dir() -> PathBuf {
    match std::env::var_os("MEMLENS_CTL_DIR").filter(|d| !d.is_empty()) {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(format!("/tmp/memlens-{}", my_uid())),
    }
}

/// Owner uid of a running process, or a 404 when there is none.
fn owner(pid: i32) -> Result<u32, Refusal> {
    let status = match ProcStatus::read(pid) {
        Ok(Some(s)) => s,
        Ok(None) => return Err(Refusal::new(404, format!("no process with PID {pid}"))),
        Err(e) => {
            return Err(Refusal::new(
                500,
                format!("cannot read /proc/{pid}/status: {e}"),
            ))
        }
    };
    status
        .uid()
        .ok_or_else(|| Refusal::new(500, format!("cannot read the owner of process {pid}")))
}

/// The control client of `pid`, after checking it exists, is ours and runs the runtime.
pub fn resolve(pid: i32) -> Result<Target, Refusal> {
    let uid = owner(pid)?;
    let me = my_uid();
    if uid != me {
        return Err(Refusal::new(
            403,
            format!(
                "process {pid} belongs to uid {uid}; this server shows only processes of uid {me}"
            ),
        ));
    }
    let t = Target::find(pid).map_err(|e| Refusal::new(404, format!("{e:#}")))?;
    if !t.sock.exists() {
        return Err(Refusal::new(
            404,
            format!(
                "process {pid} ({}) is not running under memlens (no control socket {})",
                t.comm,
                t.sock.display()
            ),
        ));
    }
    Ok(t)
}

/// Pids with a control socket in the control directory (`<pid>….sock`), ascending. Stale sockets
/// and processes of other users are left out by [`resolve`] later.
pub fn socket_pids() -> Vec<i32> {
    let Ok(rd) = std::fs::read_dir(ctl_dir()) else {
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

/// Every process we may serve: `only` when the server was given one, else the control directory's.
pub fn discover(only: Option<i32>) -> Vec<Target> {
    let pids = match only {
        Some(p) => vec![p],
        None => socket_pids(),
    };
    pids.into_iter().filter_map(|p| resolve(p).ok()).collect()
}

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
        rss_bytes: memlens_run::rss_bytes(t.pid),
        error,
    }
}
