//! Which processes the server shows: those with a control socket in the control directory that
//! run the memlens runtime and belong to the server's own user; a refusal for any other pid.
//!
//! Root may control anyone's process with `memlens ctl`, but an HTTP endpoint must not hand one
//! user's heap to whoever can reach the port, so the server refuses processes of other users
//! whatever its own uid. Nor does it tell an HTTP client anything of a process it does not show
//! (whether it exists, whose it is, its command): every refusal reads the same to it
//! ([`Refusal::public`]); the detailed reason is for `memlens serve --pid` on the command line.
use memlens_target::{ctl_dir, socket_pids, ProcStatus, Target};

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
                "process {pid} is not one this server shows (processes of uid {} running under \
                 memlens; GET /targets lists them)",
                my_uid()
            ),
        }
    }
}

/// Our effective uid.
pub fn my_uid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
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
    if uid != me {
        return Err(Refusal::new(
            pid,
            format!(
                "process {pid} belongs to uid {uid}; this server shows only processes of uid {me}"
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

/// Every process we may serve: `only` when the server was given one, else the control directory's.
pub fn discover(only: Option<i32>) -> Vec<Target> {
    let pids = match only {
        Some(p) => vec![p],
        None => socket_pids(&ctl_dir()),
    };
    pids.into_iter().filter_map(|p| resolve(p).ok()).collect()
}
