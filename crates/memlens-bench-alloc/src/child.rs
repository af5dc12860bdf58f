//! One measurement: the `alloc_bench` child under one preloaded allocator, reaped with wait4 for its
//! peak RSS and page faults, its JSON line parsed and checked (did the preload really replace malloc?).
use crate::allocators::Allocator;
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// What one child run is asked to do.
#[derive(Debug, Clone)]
pub struct Job {
    pub pattern: &'static str,
    pub size: u64,
    pub threads: u64,
    pub ops: u64,
    pub live: u64,
    pub touch: bool,
    pub sample_every: u64,
    pub seed: u64,
}

/// Per-call latency quantiles of one run, in TSC ticks with the clock cost already subtracted.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct Quantiles {
    pub n: u64,
    pub p50: Option<u64>,
    pub p99: Option<u64>,
    pub p999: Option<u64>,
    pub max: Option<u64>,
}

#[derive(Debug, Deserialize)]
struct ChildLine {
    wall_ns: u64,
    mallocs: u64,
    frees: u64,
    clock_cost: u64,
    clock_jitter: u64,
    malloc: Quantiles,
    free: Quantiles,
    thread_ns: u64,
    on_cpu_ns: u64,
    waiting_ns: Option<u64>,
    malloc_from: String,
    free_from: String,
}

/// Everything measured in one run.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub wall_ns: u64,
    pub mallocs: u64,
    pub frees: u64,
    pub clock_cost_ticks: u64,
    /// The spread (p95 − p50) of that cost: per-call times below it are not resolved.
    pub clock_jitter_ticks: u64,
    pub malloc_ticks: Quantiles,
    pub free_ticks: Quantiles,
    /// Peak resident set of the whole child (includes its ~2 MiB of program and libraries).
    pub max_rss_kib: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
    /// CPU time of the whole child (wait4), user and system: unlike wall time it does not grow
    /// while the machine is busy with other work.
    pub user_ms: f64,
    pub sys_ms: f64,
    /// The workers' timed spans added up, the part of them on a CPU, and (where the kernel has
    /// /proc/thread-self/schedstat) the part runnable but waiting for a CPU: other programs' load.
    pub thread_ns: u64,
    pub on_cpu_ns: u64,
    pub waiting_ns: Option<u64>,
}

fn reader(mut r: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let _ = r.read_to_string(&mut s);
        s
    })
}

/// Reap `pid` with wait4 on a helper thread so the caller can give up after `timeout`.
fn wait_with_rusage(pid: i32, timeout: Duration) -> Result<(i32, libc::rusage)> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut status = 0;
        // SAFETY: rusage is plain data; wait4 fills it.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let r = unsafe { libc::wait4(pid, &mut status, 0, &mut ru) };
        let _ = tx.send((r, status, ru));
    });
    let (r, status, ru) = match rx.recv_timeout(timeout) {
        Ok(v) => v,
        Err(_) => {
            // SAFETY: pid is our own child, not yet reaped.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = rx.recv();
            bail!(
                "did not finish within {} s and was killed",
                timeout.as_secs()
            );
        }
    };
    if r != pid {
        bail!("wait4 failed: {}", std::io::Error::last_os_error());
    }
    Ok((status, ru))
}

fn describe(status: i32) -> String {
    if libc::WIFEXITED(status) {
        format!("exit status {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("status {status}")
    }
}

/// True when `from` (where the child's malloc resolved) is the library we meant to measure.
fn preload_took_effect(alloc: &Allocator, from: &str) -> bool {
    let canon = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
    match &alloc.lib {
        None => Path::new(from)
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("libc.so")),
        Some(lib) => canon(lib) == canon(Path::new(from)),
    }
}

/// Run `job` under `alloc` and return what was measured.
pub fn run(exe: &Path, alloc: &Allocator, job: &Job, timeout: Duration) -> Result<Measured> {
    let mut cmd = Command::new(exe);
    cmd.args([
        job.pattern.to_string(),
        job.size.to_string(),
        job.threads.to_string(),
        job.ops.to_string(),
        job.live.to_string(),
        (job.touch as u8).to_string(),
        job.sample_every.to_string(),
        job.seed.to_string(),
    ]);
    cmd.env_remove("LD_PRELOAD")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(lib) = &alloc.lib {
        cmd.env("LD_PRELOAD", lib);
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot start {}", exe.display()))?;
    let out = reader(
        child
            .stdout
            .take()
            .ok_or_else(|| anyhow!("no stdout pipe"))?,
    );
    let err = reader(
        child
            .stderr
            .take()
            .ok_or_else(|| anyhow!("no stderr pipe"))?,
    );
    let waited = wait_with_rusage(child.id() as i32, timeout);
    let (stdout, stderr) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    let first_err = stderr
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string();
    let (status, ru) = waited
        .with_context(|| format!("{} {} B × {} threads", job.pattern, job.size, job.threads))?;
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!(
            "{} {} B × {} threads: the child failed ({}){}",
            job.pattern,
            job.size,
            job.threads,
            describe(status),
            if first_err.is_empty() {
                String::new()
            } else {
                format!(": {first_err}")
            }
        );
    }
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .ok_or_else(|| anyhow!("the child printed no result"))?;
    let c: ChildLine = serde_json::from_str(line)
        .with_context(|| format!("cannot parse the child's result '{line}'"))?;
    if !preload_took_effect(alloc, &c.malloc_from) || !preload_took_effect(alloc, &c.free_from) {
        bail!(
            "preloading did not replace malloc/free (they came from {} and {}){}",
            c.malloc_from,
            c.free_from,
            if first_err.is_empty() {
                String::new()
            } else {
                format!("; ld.so said: {first_err}")
            }
        );
    }
    Ok(Measured {
        wall_ns: c.wall_ns,
        mallocs: c.mallocs,
        frees: c.frees,
        clock_cost_ticks: c.clock_cost,
        clock_jitter_ticks: c.clock_jitter,
        malloc_ticks: c.malloc,
        free_ticks: c.free,
        max_rss_kib: ru.ru_maxrss as u64,
        minor_faults: ru.ru_minflt as u64,
        major_faults: ru.ru_majflt as u64,
        user_ms: ms(ru.ru_utime),
        sys_ms: ms(ru.ru_stime),
        thread_ns: c.thread_ns,
        on_cpu_ns: c.on_cpu_ns,
        waiting_ns: c.waiting_ns,
    })
}

fn ms(t: libc::timeval) -> f64 {
    t.tv_sec as f64 * 1e3 + t.tv_usec as f64 / 1e3
}

/// The child executable, written out of the memlens binary.
pub fn executable() -> Result<PathBuf> {
    memlens_native::path("alloc_bench")
}
