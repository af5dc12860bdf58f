//! Which processes the server shows: those with a control socket in the control directory that
//! run the memlens runtime and belong to the server's own user; a refusal (HTTP status and reason)
//! for any other pid.
//!
//! Root may control anyone's process with `memlens ctl`, but an HTTP endpoint must not hand one
//! user's heap to whoever can reach the port, so the server refuses processes of other users
//! whatever its own uid.
use memlens_target::{ctl_dir, socket_pids, ProcStatus, Target};

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

/// Every process we may serve: `only` when the server was given one, else the control directory's.
pub fn discover(only: Option<i32>) -> Vec<Target> {
    let pids = match only {
        Some(p) => vec![p],
        None => socket_pids(&ctl_dir()),
    };
    pids.into_iter().filter_map(|p| resolve(p).ok()).collect()
}
