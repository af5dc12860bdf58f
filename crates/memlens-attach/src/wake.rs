//! Making a process that runs the runtime but has no control socket open one now: a child forked
//! after an attach or under `run --inactive` opens its own only once it has lived 200 ms *and*
//! allocates, and a pre-fork server's worker (a postgres backend idle in `recv()`) may not allocate
//! for minutes.
//!
//! One thread is stopped as attach stops one (never inside the allocator, the loader, fork or
//! pthread_create: `inject.rs` decides), made to call the runtime's `memlens_ctl_open` (its control
//! thread and socket, started as the lazy start would), and put back. The thread that call creates
//! is reported to us (traced from birth) and let go at once, untraced. Nothing runs in processes
//! nobody asks about: forked children that exec or exit pay nothing.
use crate::inject::{in_unsafe_spot, plan, stop, tids, wait, HoldSignals};
use crate::tracee::{check, seize_denied};
use anyhow::{anyhow, bail, Result};
use memlens_target::is_runtime_path;
use std::time::{Duration, Instant};

/// The runtime's exported entry (runtime/src/control/reach.c).
const ENTRY: &str = "memlens_ctl_open";

/// Make process `pid`, which maps the runtime, open its control socket now. Ok(true) if the runtime
/// started its control thread, Ok(false) if it had one already.
pub fn open_control(pid: i32) -> Result<bool> {
    let p = check(pid)?;
    let Some(module) = p
        .maps
        .iter()
        .find(|m| is_runtime_path(&m.path) && m.offset == 0)
        .map(|m| m.path.clone())
    else {
        bail!("{} does not run the memlens runtime", p.label());
    };
    let entry = p
        .symbols(&module, &[ENTRY])?
        .get(ENTRY)
        .map(|s| s.0)
        .ok_or_else(|| {
            anyhow!(
                "the runtime in {} is older than this memlens (no {ENTRY})",
                p.label()
            )
        })?;
    let plan = plan(&p)?;
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        for tid in tids(p.pid) {
            let _hold = HoldSignals::new();
            let mut s = match stop(tid)? {
                Ok(s) => s,
                Err(libc::ESRCH) => continue,
                Err(e) => return Err(seize_denied(&p.label(), e)),
            };
            if in_unsafe_spot(&s, &plan) {
                s.release()?;
                continue;
            }
            let r = s.call(entry, &[]);
            let born = s.clone_tid;
            s.release()?;
            if let Some(t) = born {
                let_go(t);
            }
            match r? as i32 {
                1 => return Ok(true),
                0 => return Ok(false),
                -2 => continue, // that thread was starting or ending ours: another moment
                _ => bail!(
                    "{} could not open its control socket (the program's stderr may say why)",
                    p.label()
                ),
            }
        }
        if Instant::now() > deadline {
            bail!(
                "for 5 s every thread of {} was inside the allocator, the dynamic loader or the start of memlens's thread when stopped; try again",
                p.label()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Have every control client of this process (`memlens_target::Target`: ctl, dump, serve, attach)
/// make a socketless process under memlens open its socket with [`open_control`].
pub fn install_socket_opener() {
    memlens_target::set_socket_opener(open_control);
}

/// The runtime's new thread starts traced by us (PTRACE_O_TRACECLONE) and stopped: let it go.
fn let_go(tid: i32) {
    if wait(tid).is_ok() {
        // SAFETY: detaching a stopped tracee of ours.
        unsafe { libc::ptrace(libc::PTRACE_DETACH, tid, 0, 0) };
    }
}
