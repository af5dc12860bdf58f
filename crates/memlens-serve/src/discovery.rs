//! Which processes the server shows: those with a control socket that run the memlens runtime, in
//! any pid and mount namespace (containers: [`memlens_target::socket_hosts`] maps each socket to
//! its host pid), belonging to the server's own user — or to anyone when the server runs as root,
//! the node agent; a refusal for any other pid.
//!
//! A server of an ordinary user must not hand another user's heap to whoever can reach its port,
//! so it refuses their processes. Root's server covers the node: every user's and every
//! container's processes, readable only with root's token (`auth.rs`) or over a unix socket only
//! root may open. Nor does the server tell an HTTP client anything of a process it does not show
//! (whether it exists, whose it is, its command): every refusal reads the same to it
//! ([`Refusal::public`]); the detailed reason is for `memlens serve --pid` on the command line.
use memlens_target::{socket_hosts, ProcStatus, Target};

/// Why a pid cannot be served.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The whole reason, for the local user of the command line.
    pub reason: String,
    /// What an HTTP client is told: the same for every pid this server does not show.
    pub public: String,
}

impl Refusal {
    pub fn new(pid: i32, reason: impl Into<String>) -> Refusal {
        Refusal {
            reason: reason.into(),
            public: format!(
                "process {pid} is not one this server shows ({} running under memlens; GET \
                 /targets lists them)",
                whose()
            ),
        }
    }
}

/// Our effective uid.
pub fn my_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Whose processes this server shows, for messages: `processes of uid N`, or every user's.
pub fn whose() -> String {
    match my_uid() {
        0 => "the processes of every user and container".to_string(),
        me => format!("processes of uid {me}"),
    }
}

/// Owner uid of a running process.
fn owner(pid: i32) -> Result<u32, Refusal> {
    let status = match ProcStatus::read(pid) {
        Ok(Some(s)) => s,
        Ok(None) => return Err(Refusal::new(pid, format!("no process with PID {pid}"))),
        Err(e) => {
            return Err(Refusal::new(
                pid,
                format!("cannot read /proc/{pid}/status: {e}"),
            ))
        }
    };
    status
        .uid()
        .ok_or_else(|| Refusal::new(pid, format!("cannot read the owner of process {pid}")))
}

/// The control client of `pid`, after checking it exists, is ours and runs the runtime.
pub fn resolve(pid: i32) -> Result<Target, Refusal> {
    let uid = owner(pid)?;
    let me = my_uid();
    if uid != me && me != 0 {
        return Err(Refusal::new(
            pid,
            format!(
                "process {pid} belongs to uid {uid}; this server shows only processes of uid {me} \
                 (root's shows every user's)"
            ),
        ));
    }
    let t = Target::find(pid).map_err(|e| Refusal::new(pid, format!("{e:#}")))?;
    if !t.sock.exists() {
        return Err(Refusal::new(
            pid,
            format!(
                "process {pid} ({}) is not running under memlens (no control socket {})",
                t.comm,
                t.sock.display()
            ),
        ));
    }
    Ok(t)
}

/// Every process we may serve: `only` when the server was given one, else every process with a
/// control socket we can see (in `MEMLENS_CTL_DIR` when it is set, else in every user's and every
/// container's default directory).
pub fn discover(only: Option<i32>) -> Vec<Target> {
    let pids = match only {
        Some(p) => vec![p],
        None => socket_hosts(),
    };
    pids.into_iter().filter_map(|p| resolve(p).ok()).collect()
}
