//! `memlens run`: start a program under the runtime (LD_PRELOAD), forward signals, keep its exit
//! status, and turn each raw dump the runtime wrote into a gzipped pprof profile.
//!
//! Built for extension: [`spawn`] returns a [`Launch`], [`wait`] polls it and calls a hook on every
//! tick (for periodic dumps, timed profiling windows…), then [`collect`] converts the dumps.
use anyhow::{Context, Result};
use memlens_measure::error::usage;
use memlens_target::{raw_dumps, Dump};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Run a command under the sampling heap profiler and write a pprof profile at exit
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  memlens run -- ./server --port 8080\n  \
memlens run --interval 64K -o heap.pb.gz -- python3 script.py\n  \
memlens run --exact --unwinder libgcc -- ./a.out\n  \
memlens run --max-stacks 2M -- ./compiler big.c")]
pub struct RunArgs {
    /// Mean sampling interval in bytes (64K, 512KiB, 2M); 0 records every allocation
    #[arg(long, value_name = "SIZE", default_value = "512K")]
    pub interval: String,
    /// Record every allocation (same as --interval 0)
    #[arg(long, conflicts_with = "interval")]
    pub exact: bool,
    /// Stack unwinder: dwarf (memlens's own CFI walker with a stack cache; hands the stacks it cannot
    /// follow to libunwind), fp (frame pointers), libgcc, libunwind [default: dwarf]
    #[arg(long, value_name = "NAME", value_parser = ["dwarf", "fp", "libgcc", "libunwind"])]
    pub unwinder: Option<String>,
    /// Distinct stacks the runtime's table holds (1K … 32M; about 230 bytes + 8 per frame each,
    /// used as stacks appear); samples of new stacks beyond it are dropped and counted
    #[arg(long, value_name = "N", default_value = "256K")]
    pub max_stacks: String,
    /// Profile of the main process [default: memlens.CMD.PID.pb.gz]; other processes go beside it
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Also keep the runtime's raw dumps in DIR (format: runtime/README.md)
    #[arg(long, value_name = "DIR")]
    pub keep_raw: Option<PathBuf>,
    /// Profiling on demand: --inactive, --start-on-growth, --profile-for, --dump-every (live.rs)
    #[command(flatten)]
    pub live: crate::live::LiveArgs,
    /// Also serve the program's pprof endpoints (/debug/pprof/heap, /debug/pprof/allocs, /metrics)
    /// on HOST:PORT while it runs, as `memlens serve --pid` does
    #[arg(long, value_name = "HOST:PORT")]
    pub serve: Option<String>,
    /// The program to run and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// The runtime's dumps go to `<Launch::dumps>/d.<pid>.<seq>.raw`.
const DUMP_STEM: &str = "d";

/// A program started under the runtime.
pub struct Launch {
    /// The running program.
    pub child: Child,
    /// Its process id.
    pub pid: u32,
    /// Basename of the program, for default file names.
    pub name: String,
    /// Private directory the runtime dumps into (`MEMLENS_OUT=<dir>/`[`DUMP_STEM`]); removed on drop.
    pub dumps: tempfile::TempDir,
}

/// Sampling interval in bytes from the command line.
pub fn interval_bytes(args: &RunArgs) -> Result<u64> {
    if args.exact {
        return Ok(0);
    }
    memlens_measure::units::parse_size(&args.interval)
        .map_err(|e| usage(format!("bad --interval '{}': {e:#}", args.interval)))
}

/// The stack table's size from the command line (the runtime's MEMLENS_MAX_STACKS).
pub fn max_stacks(args: &RunArgs) -> Result<u64> {
    let n = memlens_measure::units::parse_size(&args.max_stacks)
        .map_err(|e| usage(format!("bad --max-stacks '{}': {e:#}", args.max_stacks)))?;
    if !(1024..=1 << 25).contains(&n) {
        return Err(usage(format!(
            "--max-stacks {} is out of range (1K … 32M stacks)",
            args.max_stacks
        )));
    }
    Ok(n)
}

/// What went wrong starting the program, as the one-line message and exit code a shell would use.
fn spawn_failure(cmd: &OsString, e: &std::io::Error) -> (String, i32) {
    let code = if e.kind() == std::io::ErrorKind::NotFound {
        127
    } else {
        126
    };
    let msg = e.to_string();
    let msg = msg.split(" (os error").next().unwrap_or(&msg).to_string();
    (
        format!("cannot run '{}': {msg}", cmd.to_string_lossy()),
        code,
    )
}

/// Error returned when the program cannot be started; `run_run` turns it into exit 126/127.
#[derive(Debug)]
pub struct SpawnError {
    /// What went wrong.
    pub message: String,
    /// Exit status memlens returns (126 or 127).
    pub code: i32,
}
impl std::fmt::Display for SpawnError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
impl std::error::Error for SpawnError {}

/// Start `args.command` with the runtime preloaded. `env` adds MEMLENS_* settings (e.g. MEMLENS_ACTIVE=0).
pub fn spawn(args: &RunArgs, env: &[(&str, String)]) -> Result<Launch> {
    let interval = interval_bytes(args)?;
    let max_stacks = max_stacks(args)?;
    let runtime = memlens_native::runtime().context("cannot extract the memlens runtime")?;
    let dumps = tempfile::Builder::new()
        .prefix("memlens-run-")
        .tempdir()
        .context("cannot create a temporary directory for the profile dumps")?;
    let prog = &args.command[0];
    let name = Path::new(prog)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "prog".into());
    let mut preload = OsString::from(runtime.as_os_str());
    if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
        preload.push(" ");
        preload.push(old);
    }
    let mut cmd = Command::new(prog);
    cmd.args(&args.command[1..])
        .env("LD_PRELOAD", preload)
        .env("MEMLENS_INTERVAL", interval.to_string())
        .env("MEMLENS_MAX_STACKS", max_stacks.to_string())
        .env("MEMLENS_OUT", dumps.path().join(DUMP_STEM))
        .env("MEMLENS_ACTIVE", "1");
    match &args.unwinder {
        Some(u) => cmd.env("MEMLENS_UNWINDER", u),
        None => cmd.env_remove("MEMLENS_UNWINDER"),
    };
    for (k, v) in env {
        cmd.env(k, v);
    }
    install_forwarding();
    let child = cmd.spawn().map_err(|e| {
        let (message, code) = spawn_failure(prog, &e);
        anyhow::Error::new(SpawnError { message, code })
    })?;
    let pid = child.id();
    Ok(Launch {
        child,
        pid,
        name,
        dumps,
    })
}

// ---- signal forwarding ----

const FORWARDED: [libc::c_int; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];
/// Bit n set = signal n arrived and must be passed on to the child.
static PENDING: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_signal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
    // Signals the kernel generates for the terminal (Ctrl-C…) already reach the child, which is in our
    // process group; pass on only those sent to memlens by someone (kill, a supervisor).
    let from_kernel = !info.is_null() && unsafe { (*info).si_code } == libc::SI_KERNEL;
    if !from_kernel {
        PENDING.fetch_or(1 << sig, Ordering::SeqCst);
    }
}

fn install_forwarding() {
    for sig in FORWARDED {
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            sa.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
}

fn forward_pending(pid: u32) {
    let bits = PENDING.swap(0, Ordering::SeqCst);
    for sig in FORWARDED {
        if bits & (1 << sig) != 0 {
            unsafe { libc::kill(pid as libc::pid_t, sig) };
        }
    }
}

/// Wait for the program, forwarding signals; `tick` runs about every 20 ms while it runs.
pub fn wait(
    launch: &mut Launch,
    tick: &mut dyn FnMut(&Launch) -> Result<()>,
) -> Result<ExitStatus> {
    loop {
        forward_pending(launch.pid);
        if let Some(st) = launch
            .child
            .try_wait()
            .context("cannot wait for the program")?
        {
            return Ok(st);
        }
        tick(launch)?;
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The exit code a shell would report for `st`.
pub fn exit_code(st: ExitStatus) -> i32 {
    st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0))
}

// ---- turning dumps into profiles ----

/// Where each dump's profile goes: the main process's last image to `main_out`, everything else to
/// `<stem>.<pid>[.<seq>].pb.gz` beside it (the sequence only when a pid left several dumps).
pub fn plan(dumps: &[Dump], main_pid: u32, main_out: &Path) -> Vec<(Dump, PathBuf)> {
    let stem = memlens_profile::profile_stem(main_out);
    let stem = stem.file_name().unwrap_or_default().to_string_lossy();
    let dir = main_out.parent().map(Path::to_path_buf).unwrap_or_default();
    let mut by_pid: BTreeMap<u32, Vec<&Dump>> = BTreeMap::new();
    for d in dumps {
        by_pid.entry(d.pid).or_default().push(d);
    }
    let mut out = Vec::new();
    for (pid, list) in by_pid {
        for (i, d) in list.iter().enumerate() {
            let last = i + 1 == list.len();
            let path = if pid == main_pid && last {
                main_out.to_path_buf()
            } else if last {
                dir.join(format!("{stem}.{pid}.pb.gz"))
            } else {
                dir.join(format!("{stem}.{pid}.{}.pb.gz", d.seq))
            };
            out.push(((*d).clone(), path));
        }
    }
    out
}

/// Convert one raw dump to gzipped pprof (the profile crate does the work); a one-line summary.
fn convert(raw: &Path, out: &Path) -> Result<String> {
    use memlens_measure::units::format_size;
    let t0 = std::time::Instant::now();
    let s = memlens_profile::convert_raw(raw, out)?;
    let took = t0.elapsed().as_secs_f64();
    let full = if s.table_full > 0 {
        format!(
            "; {} samples dropped: the stack table was full at {} stacks (raise --max-stacks)",
            s.table_full, s.max_stacks
        )
    } else {
        String::new()
    };
    Ok(format!(
        "{} samples, {} stacks, {:.1}% truncated, {} allocated, {} in use{full}; converted in {took:.2} s",
        s.samples,
        s.stacks,
        s.truncated_share * 100.0,
        format_size(s.alloc_bytes.max(0.0) as u64),
        format_size(s.inuse_bytes.max(0.0) as u64),
    ))
}

/// Is this (non-main) dump worth a profile of its own? Not when the image recorded nothing, nor when
/// it is the image a forked child replaced by exec without a sample of its own: what it held was
/// inherited from its parent (already in the parent's profile) and the exec discards it.
fn worth_a_profile(raw: &Path) -> bool {
    let Ok(t) = std::fs::read_to_string(raw) else {
        return true; // let the conversion report the problem
    };
    let header = |key: &str| {
        t.lines()
            .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
            .map(str::trim)
    };
    let sampled = header("samples").and_then(|v| v.parse::<u64>().ok()) != Some(0);
    t.contains("\nstack ") && (sampled || header("reason") != Some("exec"))
}

/// Convert every dump of `launch`; returns how many profiles were written. A dump that cannot be
/// converted is a warning: the program's exit status stays what memlens reports.
pub fn collect(launch: &Launch, main_out: &Path, keep_raw: Option<&Path>) -> Result<usize> {
    let dumps = raw_dumps(&launch.dumps.path().join(DUMP_STEM))?;
    if let Some(dir) = keep_raw {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        for d in &dumps {
            let dest = dir.join(d.path.file_name().unwrap_or_default());
            std::fs::copy(&d.path, &dest)
                .with_context(|| format!("cannot write {}", dest.display()))?;
        }
    }
    if !dumps.iter().any(|d| d.pid == launch.pid) {
        eprintln!(
            "memlens: warning: {} left no profile (killed by a signal, statically linked, or it cleared LD_PRELOAD)",
            launch.name
        );
    }
    let mut written = 0;
    for (d, out) in plan(&dumps, launch.pid, main_out) {
        // An image that allocated nothing worth a sample (typically a forked child that exec'd at
        // once) leaves an empty dump; only the main program's profile is written even when empty.
        if out != main_out && !worth_a_profile(&d.path) {
            continue;
        }
        match convert(&d.path, &out) {
            Ok(summary) => {
                eprintln!(
                    "memlens: profile of pid {} written to {} ({summary})",
                    d.pid,
                    out.display()
                );
                written += 1;
            }
            Err(e) => {
                eprintln!(
                    "memlens: warning: cannot convert the dump of pid {}: {e:#}",
                    d.pid
                );
            }
        }
    }
    Ok(written)
}

/// The whole `memlens run`.
pub fn run_run(args: RunArgs) -> Result<i32> {
    let live = args.live.plan()?;
    // Bind before the program starts, so a bad address fails first.
    let serve = args
        .serve
        .as_deref()
        .map(|addr| memlens_serve::Endpoint::bind(addr, None, &[]))
        .transpose()?;
    let env: Vec<(&str, String)> = live
        .active_env()
        .map(|v| ("MEMLENS_ACTIVE", v.to_string()))
        .into_iter()
        .collect();
    let mut launch = match spawn(&args, &env) {
        Ok(l) => l,
        Err(e) => {
            if let Some(s) = e.downcast_ref::<SpawnError>() {
                eprintln!("memlens: error: {}", s.message);
                return Ok(s.code);
            }
            return Err(e);
        }
    };
    let main_out = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("memlens.{}.{}.pb.gz", launch.name, launch.pid)));
    if let Some(ep) = serve {
        ep.spawn_for(launch.pid as i32);
    }
    let watcher = crate::watcher::Watcher::spawn(&live, launch.pid as i32, &main_out);
    let status = wait(&mut launch, &mut |_| Ok(()));
    watcher.finish();
    let status = status?;
    collect(&launch, &main_out, args.keep_raw.as_deref())?;
    Ok(exit_code(status))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(reason: &str, samples: u64, stack: bool) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        let mut t = format!("memlens-raw 1\npid 7\nreason {reason}\nsamples {samples}\n");
        if stack {
            t.push_str("stack 0 0 0 65536 4096 0 0x1234\n");
        }
        t.push_str("end\n");
        std::fs::write(f.path(), t).unwrap();
        f
    }

    #[test]
    fn which_dumps_get_a_profile() {
        // The pre-exec image of a forked child: only inherited live blocks, nothing sampled.
        assert!(!worth_a_profile(dump("exec", 0, true).path()));
        assert!(worth_a_profile(dump("exec", 3, true).path()));
        // A forked child that exits without exec keeps its inherited blocks in its own profile.
        assert!(worth_a_profile(dump("fork-child-exit", 0, true).path()));
        assert!(!worth_a_profile(dump("exit", 0, false).path()));
    }
}
