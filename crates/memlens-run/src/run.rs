//! `memlens run`: start a program under the runtime (LD_PRELOAD), forward signals, keep its exit
//! status, and turn each raw dump the runtime wrote into a gzipped pprof profile.
//!
//! Built for extension: [`spawn`] returns a [`Launch`], [`wait`] polls it and calls a hook on every
//! tick (for periodic dumps, timed profiling windows…), then [`collect`] converts the dumps.
use crate::collect::{collect, Notes};
use crate::places::{Places, Runtime};
use crate::rundir::{Plan, RunDir};
use anyhow::Result;
use memlens_measure::error::usage;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};

/// Run a command under the sampling heap profiler and write a pprof profile at exit
#[derive(Debug, clap::Args)]
#[command(after_help = "Example:\n  memlens run -- ./server --port 8080\n  \
memlens run --interval 64K -o heap.pb.gz -- python3 script.py\n  \
memlens run --exact --unwinder libgcc -- ./a.out\n  \
memlens run --max-stacks 2M -- ./compiler big.c\n  \
memlens run --wait-all -o pg.pb.gz -- pg_ctl -D data start   (waits for the postmaster pg_ctl leaves running)")]
pub struct RunArgs {
    /// Mean sampling interval in bytes (64K, 512KiB, 2M); 0 records every allocation
    #[arg(long, value_name = "SIZE", default_value = "512K")]
    pub(crate) interval: String,
    /// Record every allocation (same as --interval 0): every block is served from memlens's own
    /// range (176 bytes of header each, and one lock), so the live heap, peak, leaks and
    /// lifetimes are exact too
    #[arg(long, conflicts_with = "interval")]
    pub(crate) exact: bool,
    /// Stack unwinder: dwarf (memlens's own CFI walker with a stack cache; hands the stacks it cannot
    /// follow to libgcc), fp (frame pointers), libgcc, libunwind [default: dwarf]
    #[arg(long, value_name = "NAME", value_parser = ["dwarf", "fp", "libgcc", "libunwind"])]
    pub(crate) unwinder: Option<String>,
    /// Distinct stacks the runtime's table holds (1K … 32M; about 230 bytes + 8 per frame each,
    /// used as stacks appear); samples of new stacks beyond it are dropped and counted
    #[arg(long, value_name = "N", default_value = "256K")]
    pub(crate) max_stacks: String,
    /// Profile of the main process [default: memlens.CMD.PID.pb.gz]; other processes go beside it
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub(crate) output: Option<PathBuf>,
    /// Also keep the runtime's raw dumps in DIR (format: runtime/README.md)
    #[arg(long, value_name = "DIR")]
    pub(crate) keep_raw: Option<PathBuf>,
    /// Profiling on demand: --inactive, --start-on-growth, --profile-for, --dump-every (live.rs)
    #[command(flatten)]
    pub(crate) live: crate::live::LiveArgs,
    /// Also serve the program's pprof endpoints (/debug/pprof/heap, /debug/pprof/allocs, /metrics)
    /// on HOST:PORT while it runs, as `memlens serve --pid` does
    #[arg(long, value_name = "HOST:PORT")]
    pub(crate) serve: Option<String>,
    /// Wait until every process of the run has ended, daemons included, then write all profiles
    /// [default: return when the program ends and name the processes it left running]
    #[arg(long)]
    pub(crate) wait_all: bool,
    /// The program to run and its arguments
    #[arg(required = true, trailing_var_arg = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// A program started under the runtime (or without it, when no place could take the run).
pub struct Launch {
    /// The program's process id (memlens reaps it, and every orphan of the run, itself).
    pub pid: u32,
    /// Basename of the program, for default file names.
    pub name: String,
    /// Where the run's processes leave their dumps (`MEMLENS_OUT=<dir>/d`); `None`: the program
    /// runs without the runtime (memlens said why).
    pub dir: Option<RunDir>,
    /// The runtime it preloads (a memfd stays open while memlens runs).
    _runtime: Option<Runtime>,
}

/// Sampling interval in bytes from the command line.
pub fn interval_bytes(args: &RunArgs) -> Result<u64> {
    if args.exact {
        return Ok(0);
    }
    memlens_target::parse_interval(&args.interval, "--interval")
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

/// Where the run goes and what it preloads: a place for its files, the runtime, its directory.
fn prepare(name: &str) -> Result<(Places, Runtime, RunDir)> {
    let places = Places::find()?;
    let runtime = Runtime::find(&places)?;
    let dir = RunDir::create(&places.root, name)?;
    Ok((places, runtime, dir))
}

/// [`prepare`], or None (said in one line) when the program is to run without the runtime: its
/// C library is one no runtime of this build can be loaded into (musl, when memlens was built
/// without musl-gcc, or when the runtime could only be put in a memfd, whose name has no `$LIB`
/// layout), or no place could be prepared.
fn prepare_for(prog: &OsString, name: &str) -> Option<(Places, Runtime, RunDir)> {
    let other = crate::loader::unsupported_libc(prog);
    let unprofiled = |libc: &str, loader: &str, why: &str| {
        eprintln!(
            "memlens: {} runs on {libc} (its loader is {loader}){why}: it runs unprofiled",
            prog.to_string_lossy()
        )
    };
    if let Some((libc, loader)) = &other {
        if !crate::loader::runtime_built_for(libc) {
            unprofiled(
                libc,
                loader,
                ", a C library this build of memlens has no runtime for",
            );
            return None;
        }
    }
    let ready = prepare(name)
        .map_err(|e| {
            eprintln!(
                "memlens: cannot profile {}: {e:#}; it runs without memlens",
                prog.to_string_lossy()
            )
        })
        .ok()?;
    match &other {
        Some((libc, loader)) if !ready.1.path.ends_with(memlens_native::PRELOAD_NAME) => {
            unprofiled(
                libc,
                loader,
                ", whose runtime cannot be loaded from a memfd",
            );
            None
        }
        _ => Some(ready),
    }
}

/// One line when a usual place could not be used: why, and where the run went instead.
fn fallback_note(places: &Places, runtime: &Runtime) -> Option<String> {
    let mut why: Vec<&str> = Vec::new();
    for s in places.skipped.iter().chain(&runtime.skipped) {
        if !why.contains(&s.as_str()) {
            why.push(s);
        }
    }
    if why.is_empty() {
        return None;
    }
    let from = if runtime.path.starts_with("/proc/self/fd") {
        format!("a memfd ({})", runtime.path.display())
    } else {
        runtime.path.display().to_string()
    };
    Some(format!(
        "memlens: {}: the run's files go to {}, the runtime is loaded from {from}",
        why.join("; "),
        places.root.display()
    ))
}

/// Start `args.command` with the runtime preloaded. `env` adds MEMLENS_* settings (e.g. MEMLENS_ACTIVE=0).
/// memlens becomes the subreaper of everything the program starts: a daemon that forks away from
/// its parent is still ours to wait for and to name. When no place can take the run's files or
/// the runtime, the program runs without it, and memlens says why in one line: the program always
/// starts.
pub fn spawn(args: &RunArgs, env: &[(&str, String)]) -> Result<Launch> {
    let interval = interval_bytes(args)?;
    let max_stacks = max_stacks(args)?;
    let prog = &args.command[0];
    let name = Path::new(prog)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "prog".into());
    let mut cmd = Command::new(prog);
    cmd.args(&args.command[1..]);
    let (dir, runtime) = match prepare_for(prog, &name) {
        Some((places, runtime, dir)) => {
            if let Some(note) = fallback_note(&places, &runtime) {
                eprintln!("{note}");
            }
            let mut preload = OsString::from(runtime.path.as_os_str());
            if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|v| !v.is_empty()) {
                preload.push(" ");
                preload.push(old);
            }
            cmd.env("LD_PRELOAD", preload)
                .env("MEMLENS_INTERVAL", interval.to_string())
                .env("MEMLENS_MAX_STACKS", max_stacks.to_string())
                .env("MEMLENS_OUT", dir.dump_prefix())
                .env("MEMLENS_RUN_DIR", &dir.path)
                .env("MEMLENS_ACTIVE", "1");
            match &args.unwinder {
                Some(u) => cmd.env("MEMLENS_UNWINDER", u),
                None => cmd.env_remove("MEMLENS_UNWINDER"),
            };
            for (k, v) in env {
                cmd.env(k, v);
            }
            (Some(dir), Some(runtime))
        }
        None => (None, None),
    };
    install_forwarding();
    // SAFETY: prctl on ourselves; a failure only means orphans go to init as before.
    unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            if let Some(d) = &dir {
                d.remove();
            }
            let (message, code) = spawn_failure(prog, &e);
            return Err(anyhow::Error::new(SpawnError { message, code }));
        }
    };
    let pid = child.id();
    Ok(Launch {
        pid,
        name,
        dir,
        _runtime: runtime,
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

extern "C" fn on_child(_: libc::c_int) {}

/// SIGCHLD interrupts our wait (a handler without SA_RESTART), so an orphan's end is seen at once.
fn install_child_wakeup() {
    // SAFETY: installs a handler that does nothing.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_child as *const () as usize;
        sa.sa_flags = libc::SA_NOCLDSTOP;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGCHLD, &sa, std::ptr::null_mut());
    }
}

/// How the processes memlens waited for ended.
#[derive(Debug, Default)]
pub struct Ended {
    /// The program's raw wait status.
    pub main: i32,
    /// Every process memlens reaped (the program and orphans of the run): raw wait status.
    pub all: BTreeMap<u32, i32>,
    /// Some child of memlens (a descendant of the program) was still running.
    pub children_left: bool,
}

/// Reap every child that has ended; false when there is none left at all.
fn reap(ended: &mut BTreeMap<u32, i32>) -> bool {
    loop {
        let mut st = 0;
        // SAFETY: waitpid writes the status into `st`.
        let r = unsafe { libc::waitpid(-1, &mut st, libc::WNOHANG | libc::__WALL) };
        if r > 0 {
            ended.insert(r as u32, st);
            continue;
        }
        return !(r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD));
    }
}

/// Wait for the program (and, with `all`, for every process of the run), forwarding signals to it.
/// Woken by the program's end (a pidfd) or any child's (SIGCHLD), never by a fixed sleep: a short
/// program returns as soon as it has ended.
pub fn wait(launch: &mut Launch, all: bool) -> Result<Ended> {
    install_child_wakeup();
    // SAFETY: pidfd_open on our own child; -1 (an old kernel) falls back to the timeout.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, launch.pid as libc::pid_t, 0) } as i32;
    let mut ended = BTreeMap::new();
    let mut main = None;
    loop {
        if main.is_none() {
            forward_pending(launch.pid);
        }
        let any_left = reap(&mut ended);
        if main.is_none() {
            main = ended.get(&launch.pid).copied();
        }
        if let Some(st) = main {
            if !all || !any_left {
                break Ok::<(i32, bool), anyhow::Error>((st, any_left));
            }
        }
        let mut p = libc::pollfd {
            fd: if main.is_none() { pidfd } else { -1 },
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd (a negative fd is ignored).
        unsafe { libc::poll(&mut p, 1, 100) };
    }
    .map(|(st, children_left)| {
        if pidfd >= 0 {
            // SAFETY: our own descriptor.
            unsafe { libc::close(pidfd) };
        }
        Ended {
            main: st,
            all: ended,
            children_left,
        }
    })
}

/// The exit code a shell would report for a raw wait status.
pub fn exit_code_of(st: i32) -> i32 {
    if libc::WIFEXITED(st) {
        libc::WEXITSTATUS(st)
    } else if libc::WIFSIGNALED(st) {
        128 + libc::WTERMSIG(st)
    } else {
        1
    }
}

/// Live processes below `pid` (its children, theirs, …) that run the memlens runtime.
fn descendants_with_runtime(pid: u32) -> Vec<u32> {
    let mut parent: BTreeMap<u32, u32> = BTreeMap::new();
    if let Ok(rd) = std::fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
                continue;
            };
            if let Some(pp) = stat
                .rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().nth(1)?.parse().ok())
            {
                parent.insert(p, pp);
            }
        }
    }
    let below = |mut p: u32| {
        for _ in 0..4096 {
            match parent.get(&p) {
                Some(&pp) if pp == pid => return true,
                Some(&pp) if pp > 1 => p = pp,
                _ => return false,
            }
        }
        false
    };
    parent
        .keys()
        .copied()
        .filter(|&p| {
            below(p) && crate::collect::alive(p) && memlens_target::runtime_loaded(p as i32)
        })
        .collect()
}

/// What a run left behind: how the program ended, the profiles written, what still runs.
#[derive(Debug)]
pub struct RunOutcome {
    /// The program's raw wait status ([`exit_code_of`] turns it into a shell's exit code).
    pub status: i32,
    /// Each profile written: the process and the file, in pid order.
    pub profiles: Vec<(u32, PathBuf)>,
    /// Processes of the run still running (their profiles come later: `memlens report RUNDIR`).
    pub running: Vec<u32>,
    /// What collecting said, when it was asked to keep its lines ([`Notes::kept`]).
    pub notes: Vec<String>,
}

impl RunArgs {
    /// The options another command runs a program with (`memlens check`): `command` sampled at
    /// `interval` bytes (0: exact) with `unwinder` (None: the runtime's default), the main
    /// process's profile written to `output`; nothing of profiling on demand.
    pub fn for_command(
        command: Vec<OsString>,
        interval: u64,
        unwinder: Option<String>,
        output: PathBuf,
    ) -> RunArgs {
        RunArgs {
            interval: interval.to_string(),
            exact: false,
            unwinder,
            max_stacks: "256K".into(),
            output: Some(output),
            keep_raw: None,
            live: crate::live::LiveArgs::default(),
            serve: None,
            wait_all: false,
            command,
        }
    }
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
    match execute(&args, &live, serve, Notes::stderr()) {
        Ok(o) => Ok(exit_code_of(o.status)),
        Err(e) => match e.downcast_ref::<SpawnError>() {
            Some(s) => {
                eprintln!("memlens: error: {}", s.message);
                Ok(s.code)
            }
            None => Err(e),
        },
    }
}

/// Run `args.command` under the runtime to its end and collect its profiles, printing nothing:
/// what collecting says is in [`RunOutcome::notes`]. A program that cannot be started is a
/// [`SpawnError`].
pub fn run_quietly(args: &RunArgs) -> Result<RunOutcome> {
    execute(args, &args.live.plan()?, None, Notes::kept())
}

/// Start the program, wait for it (and what the plan asks for meanwhile), collect the profiles.
fn execute(
    args: &RunArgs,
    live: &crate::live::LivePlan,
    serve: Option<memlens_serve::Endpoint>,
    mut notes: Notes,
) -> Result<RunOutcome> {
    let env: Vec<(&str, String)> = live
        .active_env()
        .map(|v| ("MEMLENS_ACTIVE", v.to_string()))
        .into_iter()
        .collect();
    let mut launch = spawn(args, &env)?;
    let main_out = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("memlens.{}.{}.pb.gz", launch.name, launch.pid)));
    let mut plan = Plan {
        main_pid: launch.pid,
        output: std::path::absolute(&main_out).unwrap_or(main_out.clone()),
        keep_raw: args
            .keep_raw
            .as_ref()
            .map(|k| std::path::absolute(k).unwrap_or(k.clone())),
        ..Plan::default()
    };
    let Some(dir) = launch.dir.clone() else {
        // without the runtime: only the program's own end matters
        let status = wait(&mut launch, args.wait_all)?.main;
        return Ok(RunOutcome {
            status,
            profiles: Vec::new(),
            running: Vec::new(),
            notes: notes.lines,
        });
    };
    // Written at once: if memlens itself is killed, `memlens report RUNDIR` still collects the run.
    dir.write_plan(&plan)?;
    if let Some(ep) = serve {
        ep.spawn_for(launch.pid as i32);
    }
    let watcher = crate::watcher::Watcher::spawn(live, launch.pid as i32, &main_out);
    let ended = wait(&mut launch, args.wait_all);
    watcher.finish();
    let ended = ended?;
    plan.ended = ended.all;
    // Every live descendant is a child of ours (we are their subreaper) or below one: with none
    // left, there is nothing to look for.
    let running = if ended.children_left {
        descendants_with_runtime(std::process::id())
    } else {
        Vec::new()
    };
    let c = collect(&dir, &plan, &running, true, &mut notes)?;
    if c.running.is_empty() {
        dir.remove();
    } else {
        // what is left to collect later: the processes still running (how the others ended is
        // said already)
        plan.running = c.running.clone();
        plan.ended.clear();
        dir.write_plan(&plan)?;
    }
    Ok(RunOutcome {
        status: ended.main,
        profiles: c.profiles,
        running: c.running,
        notes: notes.lines,
    })
}

/// `memlens report RUNDIR`: collect what a run's processes left once they have ended.
pub fn run_collect(path: &Path) -> Result<i32> {
    let dir = RunDir::open(path)?;
    let mut plan = dir.read_plan()?;
    let running: Vec<u32> = plan
        .running
        .iter()
        .copied()
        .filter(|&p| crate::collect::alive(p) && memlens_target::runtime_loaded(p as i32))
        .collect();
    let c = collect(&dir, &plan, &running, false, &mut Notes::stderr())?;
    if c.running.is_empty() {
        dir.remove();
    } else {
        plan.running = c.running;
        dir.write_plan(&plan)?;
    }
    Ok(0)
}
