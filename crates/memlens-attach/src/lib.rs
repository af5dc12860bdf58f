//! `memlens attach` and `memlens detach`: sampled heap profiling of a process that was started
//! without memlens.
//!
//! The first attach loads the runtime with ptrace (`inject.rs`, after the checks of `tracee.rs` and,
//! for a process under a seccomp filter, `seccomp.rs`);
//! from then on the process has a control socket like one started with `memlens run --inactive`,
//! and a later attach or detach is a request on that socket (`attach …`, `detach`). A process that
//! maps the runtime but has no socket (a fork child that has not allocated) is made to open one
//! (`wake.rs`), which `memlens ctl` asks for through `memlens_target::set_socket_opener`.
#![warn(missing_docs)]
mod hooks;
mod inject;
mod seccomp;
mod tracee;
mod unwind;
mod wake;

pub use wake::{install_socket_opener, open_control};

use anyhow::{bail, Context, Result};
use memlens_measure::error::usage;
use memlens_measure::units::{format_size, parse_duration};
use memlens_target::{default_dump_name, parse_pid, Target};
use std::path::PathBuf;
use std::time::Duration;

const ATTACH_EXAMPLE: &str = "Examples:
  memlens attach 1234                         load the profiler, inactive
  memlens ctl 1234 start --interval 512K      ... then sample
  memlens ctl 1234 dump -o now.pb.gz
  memlens detach 1234                         stop sampling and unhook
  memlens attach 1234 --for 30s -o 30s.pb.gz  one shot: attach, sample 30 s, write, detach

One thread of the process is held briefly (typically under a millisecond) while it starts a loader thread.
Needs ptrace rights over the process: its owner (kernel.yama.ptrace_scope 0) or root.";

/// Load the sampling profiler into a running process started without memlens
#[derive(Debug, clap::Args)]
#[command(after_help = ATTACH_EXAMPLE)]
pub struct AttachArgs {
    /// Process id
    #[arg(value_name = "PID")]
    pub(crate) pid: String,
    /// Start sampling at once with this mean interval (e.g. 64K, 512K, 2M) [default: inactive;
    /// 512K with --for]
    #[arg(long, value_name = "SIZE")]
    pub(crate) interval: Option<String>,
    /// Stack unwinder: dwarf, fp, libgcc or libunwind [default: dwarf]
    #[arg(long, value_name = "NAME")]
    pub(crate) unwinder: Option<String>,
    /// One shot: sample for this long (e.g. 30s, 2m), write the profile, detach
    #[arg(long = "for", value_name = "DURATION")]
    pub(crate) duration: Option<String>,
    /// Profile written by --for [default: memlens.COMM.PID.N.pb.gz]
    #[arg(short = 'o', long, value_name = "FILE", requires = "duration")]
    pub(crate) output: Option<PathBuf>,
}

const DETACH_EXAMPLE: &str = "Example:
  memlens detach 1234

Sampling stops and the allocation hooks are removed; the free-side hooks stay (blocks sampled
earlier may still be live and must come back to memlens), forwarding at the cost of one compare.
Entry points of an allocator linked into the program get their original bytes back with every
thread stopped: the allocating ones always, free and realloc once no sampled block is live; so does
the loader's notification (libraries loaded later are no longer scanned for allocators).
`memlens attach 1234` re-hooks later without ptrace.";

/// Stop sampling in an attached process and remove its allocation hooks
#[derive(Debug, clap::Args)]
#[command(after_help = DETACH_EXAMPLE)]
pub struct DetachArgs {
    /// Process id of a process memlens attached to
    #[arg(value_name = "PID")]
    pub(crate) pid: String,
}

/// The arguments the runtime's attach entry (and the socket's `attach`) understand: the
/// interval, whether to sample at once, the unwinder.
fn runtime_args(interval: Option<u64>, active: bool, unwinder: Option<&str>) -> Result<String> {
    let mut a = match interval {
        Some(iv) => format!("interval={iv} active={}", u8::from(active)),
        None => "active=0".to_string(),
    };
    if let Some(u) = unwinder {
        if !["dwarf", "fp", "libgcc", "libunwind"].contains(&u) {
            return Err(usage(format!(
                "unknown unwinder '{u}' (expected dwarf, fp, libgcc or libunwind)"
            )));
        }
        a.push_str(&format!(" unwinder={u}"));
    }
    Ok(a)
}

/// `memlens attach PID`: load the runtime into the process (or re-hook it through its control socket
/// when it is already there), optionally sample for `--for` and write the profile; the exit status.
pub fn run_attach(a: AttachArgs) -> Result<i32> {
    let pid = parse_pid(&a.pid)?;
    let duration = a
        .duration
        .as_deref()
        .map(|s| parse_duration(s).map_err(|e| usage(format!("bad --for: {e:#}"))))
        .transpose()?;
    let mut interval = a
        .interval
        .as_deref()
        .map(|s| memlens_target::parse_interval(s, "--interval"))
        .transpose()?;
    if duration.is_some() && interval.is_none() {
        interval = Some(512 * 1024);
    }
    runtime_args(interval, true, a.unwinder.as_deref())?;
    let label = attach(pid, interval, a.unwinder.as_deref())?;
    match interval {
        Some(iv) => println!("{label}: attached, sampling every {}", format_size(iv)),
        None => println!(
            "{label}: attached, inactive (memlens ctl {pid} start to sample, memlens detach {pid} to leave)"
        ),
    }
    if let Some(d) = duration {
        one_shot(pid, d, a.output)?;
    }
    Ok(0)
}

/// How long a freshly loaded runtime may take to open its control socket.
const SOCKET_WAIT: Duration = Duration::from_secs(10);

/// Attach (or re-attach through the socket), sampling at `interval` when given, and return the
/// process's label.
///
/// A first attach loads the runtime inactive and switches sampling on only through the control
/// socket, once that answers: a runtime whose socket memlens cannot reach (a container's
/// directory it cannot see, a runtime that could not open one) would otherwise sample with nobody
/// able to stop it. Then the attach fails saying the runtime stays loaded but inactive, hooks
/// forwarding at the cost of a compare, as after `memlens detach`.
pub fn attach(pid: i32, interval: Option<u64>, unwinder: Option<&str>) -> Result<String> {
    let p = tracee::check(pid)?;
    let t = Target::find(pid)?;
    if p.has_runtime() {
        if !t.ready() {
            bail!(
                "cannot attach to {}: the memlens runtime is loaded but its control socket {} does not answer",
                p.label(),
                t.sock.display()
            );
        }
        t.request(&format!(
            "attach {}",
            runtime_args(interval, true, unwinder)?
        ))?;
        // Entry points a detach gave their original bytes back get their jumps again.
        let lib = std::fs::read(memlens_native::runtime()?)?;
        // Modules loaded while it was detached are planned by the runtime's `attach` and hooked
        // here too.
        match hooks::apply_pending(&p, &lib) {
            Ok(Some(h)) => {
                // (without new entry points, the summary is the first attach's)
                for s in h.summary.lines().filter(|s| !s.is_empty() && h.hooks > 0) {
                    println!("memlens: {s}");
                }
                if let Some(line) = hooked_again(&h) {
                    println!("{line}");
                }
            }
            Ok(None) => {}
            Err(e) => eprintln!(
                "memlens: warning: {}: the allocator entry points a detach restored stay unhooked, so \
                 allocations through them are not sampled: {e:#}",
                p.label()
            ),
        }
        return Ok(format!(
            "{} [re-attached through its control socket]",
            p.label()
        ));
    }
    seccomp::check(pid, &p.label())?;
    let lib = std::fs::read(memlens_native::runtime()?)?;
    let done = inject::inject(&p, &lib, &runtime_args(interval, false, unwinder)?)?;
    // The control thread is started by the runtime's constructor; wait until it answers.
    let alive = || std::path::Path::new(&format!("/proc/{pid}")).exists();
    if !t.wait_ready(SOCKET_WAIT, alive) {
        let why = match t.status() {
            Err(e) => format!("{e:#}"),
            Ok(_) => "it answered only after the wait".to_string(),
        };
        bail!(
            "{}: the runtime is loaded but its control socket did not answer within {} s, so it \
             stays inactive (nothing is sampled; its hooks forward every call): {why}",
            p.label(),
            SOCKET_WAIT.as_secs()
        );
    }
    // Allocators linked into the program: their entry points hooked with every thread stopped,
    // before sampling starts, so that it starts over every allocator at once; in the same stop, the
    // loader's notification, so that libraries loaded from now on are scanned as they load.
    let hooked = hooks::apply_pending(&p, &lib)?;
    if interval.is_some() {
        t.start(interval).with_context(|| {
            format!(
                "{}: the runtime is loaded, inactive, but sampling could not be switched on",
                p.label()
            )
        })?;
    }
    let retries = if done.retries > 0 {
        format!(
            ", {} retries: thread in the allocator or loader",
            done.retries
        )
    } else {
        String::new()
    };
    let place = match &t.root {
        Some(_) if t.ns_pid != t.pid => format!(", pid {} in its namespace", t.ns_pid),
        _ => String::new(),
    };
    let mut label = format!(
        "{} [thread {} stopped {:.3} ms{retries}{place}]",
        p.label(),
        done.tid,
        done.stopped.as_secs_f64() * 1e3
    );
    if let Some(h) = hooked {
        for s in h.summary.lines().filter(|s| !s.is_empty()) {
            println!("memlens: {s}");
        }
        let what = match (h.hooks, h.watching) {
            (0, false) => None,
            (0, true) => {
                Some("the loader's notification hooked, libraries loaded later are scanned".into())
            }
            (n, _) => Some(format!("{n} entry points hooked")),
        };
        if let Some(what) = what {
            label += &format!(
                " [{what}: every thread stopped {:.3} ms{}]",
                h.stopped.as_secs_f64() * 1e3,
                if h.retries > 0 {
                    format!(", {} retries: a thread inside one", h.retries)
                } else {
                    String::new()
                }
            );
        }
    }
    Ok(label)
}

/// What a re-attach wrote again: a line, or None.
fn hooked_again(h: &hooks::Hooked) -> Option<String> {
    let what = match (h.hooks, h.watching) {
        (0, false) => return None,
        (0, true) => "the loader's notification".to_string(),
        (n, false) => format!("{n} allocator entry points"),
        (n, true) => format!("the loader's notification and {n} allocator entry points"),
    };
    Some(format!(
        "memlens: {what} hooked again (every thread stopped {:.3} ms)",
        h.stopped.as_secs_f64() * 1e3
    ))
}

fn one_shot(pid: i32, d: Duration, output: Option<PathBuf>) -> Result<()> {
    let t = Target::find(pid)?;
    std::thread::sleep(d);
    let out = output.unwrap_or_else(|| default_dump_name(&t.comm, t.pid, false));
    let dumped = t.dump_pprof(&out);
    let detached = t.request("detach");
    let s = dumped?;
    for w in &s.warnings {
        eprintln!("memlens: warning: {w}");
    }
    detached?;
    println!(
        "process {} ({}): profile written to {} ({} samples, {} allocated, {} live); detached{}",
        t.pid,
        t.comm,
        out.display(),
        s.samples,
        memlens_measure::units::format_bytes(s.alloc_bytes),
        memlens_measure::units::format_bytes(s.inuse_bytes),
        put_back(pid)
    );
    Ok(())
}

/// After the runtime's `detach` (sampling off): the hooked allocator entry points given their
/// original bytes back where that is safe (hooks.rs); a phrase for the detach message, empty when
/// there were none.
fn put_back(pid: i32) -> String {
    let done = tracee::check(pid).and_then(|p| {
        let lib = std::fs::read(memlens_native::runtime()?)?;
        hooks::restore(&p, &lib)
    });
    match done {
        Ok(r) => {
            let ms = r.stopped.as_secs_f64() * 1e3;
            let mut s = String::new();
            if r.restored + r.kept > 0 {
                s += &format!(
                    "; {} allocator entry points given their original bytes back (every thread \
                     stopped {ms:.3} ms)",
                    r.restored,
                );
            }
            if r.kept > 0 {
                s += &format!(
                    ", {} keep their hooks, forwarding: {}",
                    r.kept,
                    r.why_kept.unwrap_or_default()
                );
            }
            if r.unwatched {
                s += "; the loader's notification given its original bytes back";
                if r.restored + r.kept == 0 {
                    s += &format!(" (every thread stopped {ms:.3} ms)");
                }
                s += ": libraries loaded from now on are not scanned";
            }
            if r.still_watching {
                s += "; the loader's notification keeps its jump (a thread stayed inside a patched range)";
            }
            s
        }
        Err(e) => format!("; the allocator entry points keep their hooks, forwarding ({e:#})"),
    }
}

/// `memlens detach PID`: stop sampling and remove the allocation hooks; the exit status.
pub fn run_detach(a: DetachArgs) -> Result<i32> {
    let pid = parse_pid(&a.pid)?;
    let t = Target::find(pid)?;
    let r = t.request("detach")?;
    println!(
        "process {} ({}): detached, sampling stopped ({} allocation hooks removed; free-side hooks stay){}",
        t.pid,
        t.comm,
        r.unhooked.unwrap_or(0),
        put_back(pid)
    );
    Ok(0)
}
