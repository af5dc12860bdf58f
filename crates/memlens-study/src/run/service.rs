//! A program of the user's studied under its own load, paired in time inside its one process.
//!
//! The program — a server memlens starts with the runtime loaded inactive (`-- SERVER ARGS`), or
//! a running process (`--pid`: its control socket, or `memlens attach` when it has no runtime) —
//! is switched through its control socket between blocks, in the built-in study's schedule
//! (`off, c1, off, c2, …, off`, shuffled per round). A block is one run of the load command
//! (`sh -c LOAD`), and its value is, by `--metric`: the process's CPU time over the run (the sum of
//! `/proc/PID/task/*/schedstat`, the default: what the work cost the process, less sensitive to
//! the load generator's own scheduling than its wall time), the run's wall time, or a figure of
//! the load's output (the first capture group of a regex; `--metric-rate` when higher is better).
//!
//! A placebo block is switched to as off is (the runtime's `stop` while stopped: the same request,
//! the same reach of every thread), so it reads what the pairing shows when nothing changes.
//! jemalloc's profiler is switched by the runtime (`jemalloc start LG` / `jemalloc stop` on the
//! socket), where the process runs jemalloc with `prof:true`.
use super::launch::{cost, cost_block, jemalloc_conf, last_line, regex_of, runtime, scale_of};
use super::listen;
use crate::model::{Key, Part, ProcOut, Service, Settings, PORT};
use crate::profilers::{lg_of, SCRUB};
use anyhow::{anyhow, bail, Context, Result};
use memlens_target::{is_runtime_path, Reply, Target};
use memlens_workloads::schedule;
use regex::Regex;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// CPU nanoseconds `pid` has run, all its threads (`/proc/PID/task/*/schedstat`, first field);
/// threads that ended are no longer counted, so it is read around each block, not across them.
pub fn cpu_ns(pid: i32) -> Result<u64> {
    let dir = format!("/proc/{pid}/task");
    let mut sum = 0u64;
    let tasks =
        std::fs::read_dir(&dir).with_context(|| format!("process {pid} is gone ({dir})"))?;
    for t in tasks.flatten() {
        let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) else {
            continue; // the thread ended meanwhile
        };
        sum += s
            .split_whitespace()
            .next()
            .and_then(|x| x.parse::<u64>().ok())
            .unwrap_or(0);
    }
    Ok(sum)
}

/// The process a service study switches: started by us, or found running.
struct Server {
    target: Target,
    /// The load command, its `{PORT}` filled in.
    load: String,
    child: std::cell::RefCell<Option<Child>>,
    /// Which process it is, for the hierarchical bootstrap: a pid found running, or a number of
    /// our own for a server we started.
    group: u64,
    /// Started with `memlens attach` by us: detach at the end.
    attached: bool,
    /// Found sampling at this interval: restart it at the end.
    restore: Option<u64>,
    log: Option<PathBuf>,
}

static STARTED: AtomicU64 = AtomicU64::new(0);

fn free_port() -> Result<String> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .context("cannot find a free port for the server")?
        .port()
        .to_string())
}

impl Server {
    /// Start `argv` with the runtime loaded inactive (and jemalloc's profiler inactive where it is
    /// asked for), and wait until its control socket answers.
    fn start(svc: &Service, unwinder: &str, jemalloc: bool, tmp: &Path) -> Result<Server> {
        let port = if svc.server.iter().any(|a| a.contains(PORT)) {
            free_port()?
        } else {
            String::new()
        };
        let argv: Vec<String> = svc.server.iter().map(|a| a.replace(PORT, &port)).collect();
        let n = STARTED.fetch_add(1, Ordering::Relaxed);
        let log = tmp.join(format!("server-{n}.log"));
        let file = std::fs::File::create(&log)
            .with_context(|| format!("cannot create {}", log.display()))?;
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file);
        let user = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        for k in SCRUB {
            cmd.env_remove(k);
        }
        let mut preload = runtime()?;
        if let Some(p) = user("LD_PRELOAD") {
            preload = format!("{preload}:{p}");
        }
        cmd.env("LD_PRELOAD", preload)
            .env("MEMLENS_ACTIVE", "0")
            .env("MEMLENS_UNWINDER", unwinder);
        if jemalloc {
            let ours = jemalloc_conf(tmp);
            cmd.env(
                "MALLOC_CONF",
                match user("MALLOC_CONF") {
                    Some(u) => format!("{u},{ours}"),
                    None => ours,
                },
            );
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", argv[0]))?;
        let pid = child.id() as i32;
        let target = Target::find(pid)?;
        let child = std::cell::RefCell::new(child);
        let alive = std::cell::Cell::new(true);
        let up = || {
            let up = matches!(child.borrow_mut().try_wait(), Ok(None));
            alive.set(up);
            up
        };
        let ready = target.wait_ready(Duration::from_secs(15), up);
        // Its control socket answers before main() runs, its own port may open later: the first
        // load waits for it (listen.rs says why a load refused is not always retried).
        if ready {
            listen::wait_listening(pid, &target.sock, Duration::from_secs(15), up);
        }
        let child = child.into_inner();
        let s = Server {
            target,
            load: svc.load.replace(PORT, &port),
            child: std::cell::RefCell::new(Some(child)),
            group: 1 << 40 | n,
            attached: false,
            restore: None,
            log: Some(log),
        };
        if !ready || !alive.get() {
            let why = if alive.get() {
                "its control socket did not answer within 15 s".to_string()
            } else {
                format!("it ended at start-up: {}", s.last_log_line())
            };
            bail!("cannot study {}: {why}", argv[0]);
        }
        Ok(s)
    }

    /// A running process: through its control socket, or attached (inactive) when it has no
    /// runtime.
    fn existing(pid: i32, unwinder: &str, load: &str) -> Result<Server> {
        let target = Target::find(pid)?;
        let mut attached = false;
        if !target.ready() {
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
            if maps.lines().any(is_runtime_path) {
                // the runtime is there but does not answer: let the client say why
                target.status()?;
            }
            memlens_attach::attach(pid, None, Some(unwinder))
                .with_context(|| format!("cannot attach to process {pid}"))?;
            attached = true;
        }
        let st = target.status()?;
        let restore = st.interval.filter(|_| st.active == Some(true));
        Ok(Server {
            target,
            load: load.to_string(),
            child: std::cell::RefCell::new(None),
            group: pid as u64,
            attached,
            restore,
            log: None,
        })
    }

    fn pid(&self) -> i32 {
        self.target.pid
    }

    fn last_log_line(&self) -> String {
        self.log
            .as_ref()
            .and_then(|l| std::fs::read_to_string(l).ok())
            .and_then(|t| last_line(&t).map(str::to_string))
            .unwrap_or_else(|| "(it printed nothing)".into())
    }

    /// A control request; when it fails because a server we started has ended, say so.
    fn request(&self, line: &str) -> Result<Reply> {
        self.target.request(line).map_err(|e| {
            let ended = match self.child.borrow_mut().as_mut().map(Child::try_wait) {
                Some(Ok(Some(st))) => st,
                _ => return e,
            };
            anyhow!(
                "the studied program ended ({ended}) during the study: {}",
                self.last_log_line()
            )
        })
    }

    /// Leave the process as we found it: stopped (or sampling again at its interval), detached
    /// if we attached; a server we started is asked to end (SIGTERM, then SIGKILL after 5 s).
    fn finish(mut self) -> Result<()> {
        let r = self.leave();
        if let Some(mut c) = self.child.get_mut().take() {
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = c.try_wait() {
                    return r;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            c.kill().ok();
            c.wait().ok();
        }
        r
    }

    fn leave(&mut self) -> Result<()> {
        if self.child.get_mut().is_some() {
            return Ok(());
        }
        if self.attached {
            self.target.request("detach")?;
        } else if let Some(iv) = self.restore {
            self.target.start(Some(iv))?;
        } else {
            self.target.stop()?;
        }
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.get_mut().take() {
            c.kill().ok();
            c.wait().ok();
        }
    }
}

/// What one run of the load gave.
struct Run {
    /// The value, as a cost (larger = slower).
    cost: f64,
    /// The process's CPU ns over the run.
    cpu: u64,
    /// Wall time, s.
    wall: f64,
}

/// The load command and how its runs are read.
struct Load<'a> {
    svc: &'a Service,
    /// The command (`sh -c`), its port filled in.
    cmd: String,
    regex: Option<Regex>,
    /// A run that takes longer than this is stopped (and the study fails).
    limit: Duration,
}

impl Load<'_> {
    fn run(&self, pid: i32) -> Result<Run> {
        let cpu0 = cpu_ns(pid)?;
        let t0 = Instant::now();
        let out = self.spawn(pid)?;
        let wall = t0.elapsed();
        let cpu = cpu_ns(pid)?.saturating_sub(cpu0);
        let cost = cost(
            &self.svc.metric,
            self.regex.as_ref(),
            &out,
            wall.as_secs_f64() * 1e9,
            cpu as f64,
        )
        .context("the load")?;
        Ok(Run {
            cost,
            cpu,
            wall: wall.as_secs_f64(),
        })
    }

    /// One run of `sh -c LOAD` against the server `server`; its output (stdout, then stderr). A
    /// failure is an error with its exit status and last line; a run past the limit, one that says
    /// what the load's processes and the server were doing.
    fn spawn(&self, server: i32) -> Result<String> {
        use std::os::unix::process::CommandExt;
        // its own process group, so that a load that hangs is stopped whole (sh and what it ran)
        let child = Command::new("sh")
            .arg("-c")
            .arg(&self.cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .context("cannot start sh for the load")?;
        let pid = child.id() as i32;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(child.wait_with_output()));
        let out = match rx.recv_timeout(self.limit) {
            Ok(o) => o.context("cannot read the load's output")?,
            Err(_) => {
                // What its processes were doing says whether it spins (running, its CPU time near
                // the limit) or waits (for the server, in the kernel function named).
                let doing = listen::group(pid).join("; ");
                let srv = listen::describe(server).unwrap_or_else(|| format!("{server} gone"));
                // SAFETY: a signal to the process group of our own child (sh and its children).
                unsafe { libc::kill(-pid, libc::SIGKILL) };
                let printed = match rx.recv_timeout(Duration::from_secs(5)) {
                    Ok(Ok(o)) => {
                        let (out, err) = (o.stdout, o.stderr);
                        let text =
                            String::from_utf8_lossy(if err.is_empty() { &out } else { &err });
                        last_line(&text.replace('\r', "\n"))
                            .unwrap_or("nothing")
                            .to_string()
                    }
                    _ => "(its output could not be read)".into(),
                };
                bail!(
                    "the load did not finish within {:.0} s: {}; its processes then: {doing}; \
                     the server: {srv}; it printed last: {printed}",
                    self.limit.as_secs_f64(),
                    self.cmd
                );
            }
        };
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            let why = last_line(&err).or_else(|| last_line(&text)).unwrap_or("");
            bail!("the load failed ({}): {why}", out.status);
        }
        text.push('\n');
        text.push_str(&err);
        Ok(text)
    }
}

/// The runtime's own account of its cost so far: (sampled-path ns, fast-path calls), where this
/// runtime reports it.
fn own_cost(r: &Reply) -> Option<u64> {
    r.cost_ns
}

/// How the process is switched to one configuration, as control requests.
fn requests(k: Option<&Key>, s: &Settings, jemalloc: bool) -> Vec<String> {
    match k {
        None | Some(Key::Placebo(_)) => {
            let mut v = vec!["stop".to_string()];
            if jemalloc {
                v.push("jemalloc stop".into());
            }
            v
        }
        Some(Key::Memlens(_, i)) => vec![format!("start {}", s.intervals[*i])],
        Some(Key::Jemalloc(i)) => vec![format!("jemalloc start {}", lg_of(s.intervals[*i]))],
        Some(k @ (Key::Inactive | Key::Tcmalloc(_) | Key::Heaptrack)) => {
            unreachable!("{k:?} runs as whole processes, never in a service (settings.rs)")
        }
    }
}

/// Can this process's jemalloc profiler be switched? `Err(reason)` when not.
fn jemalloc_ready(srv: &Server) -> std::result::Result<(), String> {
    match srv.target.request("jemalloc status") {
        Err(e) if e.to_string().contains("unknown command") => Err(
            "this build's runtime cannot switch jemalloc's profiler (no `jemalloc` control request)"
                .into(),
        ),
        Err(e) => Err(format!("{e:#}")),
        Ok(r) => match (r.allocator.as_deref(), r.prof) {
            (Some("jemalloc"), Some(true)) => Ok(()),
            (Some("jemalloc"), _) => Err(
                "it runs jemalloc without its profiler (start it with MALLOC_CONF=prof:true,prof_active:false)"
                    .into(),
            ),
            _ => Err("it does not run jemalloc".into()),
        },
    }
}

/// Run one part of the schedule in a service process (a new one, or the `--pid` one): warm-up,
/// the blocks, then (when asked) the profile windows. Blocks are numbered by the part's
/// configurations that could run (jemalloc's are left out, with the reason, where its profiler
/// cannot be switched).
pub(super) fn run_process(
    svc: &Service,
    s: &Settings,
    unwinder: &str,
    part: &Part,
    tmp: &Path,
) -> Result<ProcOut> {
    let t0 = Instant::now();
    let wants_je = part.confs.iter().any(|k| matches!(k, Key::Jemalloc(_)));
    let srv = match svc.pid {
        Some(pid) => Server::existing(pid, unwinder, &svc.load)?,
        None => Server::start(svc, unwinder, wants_je, tmp)?,
    };
    let r = drive(&srv, svc, s, unwinder, part, tmp, wants_je);
    let done = srv.finish();
    let mut out = r?;
    done?;
    let k = out.confs.len() as f64;
    let runs = part.rounds as f64 * (2.0 * k + 1.0);
    out.overhead_s = (t0.elapsed().as_secs_f64() - runs * out.block_s).max(0.0);
    Ok(out)
}

fn drive(
    srv: &Server,
    svc: &Service,
    s: &Settings,
    unwinder: &str,
    part: &Part,
    tmp: &Path,
    wants_je: bool,
) -> Result<ProcOut> {
    let pid = srv.pid();
    let mut confs = part.confs.clone();
    let mut out = ProcOut::new(Vec::new());
    out.group = srv.group;
    let mut je = false;
    if wants_je {
        match jemalloc_ready(srv) {
            Ok(()) => je = true,
            Err(why) => {
                confs.retain(|k| !matches!(k, Key::Jemalloc(_)));
                out.notes.push(format!(
                    "jemalloc's profiler left out on {}: {why}",
                    svc.name
                ));
            }
        }
    }
    out.confs = confs.clone();
    let regex = regex_of(&svc.metric)?;
    let mut load = Load {
        svc,
        cmd: srv.load.clone(),
        regex,
        limit: Duration::from_secs(120),
    };
    // A server just started may not listen yet: the first run is retried for 15 s.
    let first = Instant::now();
    let probe = loop {
        match load.run(pid) {
            Ok(r) => break r,
            Err(e) if svc.pid.is_none() && first.elapsed() < Duration::from_secs(15) => {
                srv.request("status")
                    .with_context(|| format!("waiting for the load to succeed ({e:#})"))?;
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(e),
        }
    };
    load.limit = Duration::from_secs_f64((probe.wall * 50.0).max(60.0));
    let scale = scale_of(probe.cost);
    let switch = |k: Option<&Key>| -> Result<()> {
        for r in requests(k, s, je) {
            srv.request(&r)?;
        }
        Ok(())
    };
    // Warm-up, uncounted: every configuration once (first samples intern their stacks).
    for k in std::iter::once(None).chain(confs.iter().map(Some)) {
        switch(k)?;
        load.run(pid)?;
    }
    // The runtime's own account, read around each block where it has one.
    let accounts = own_cost(&srv.request("status")?).is_some();
    let own = |srv: &Server| -> Result<Option<u64>> {
        if !accounts {
            return Ok(None);
        }
        Ok(own_cost(&srv.request("status")?))
    };
    let mut wall = 0.0;
    let sched = schedule(confs.len(), part.rounds, part.seed);
    for &(round, c) in &sched {
        switch(if c == 0 {
            None
        } else {
            Some(&confs[c as usize - 1])
        })?;
        let o0 = own(srv)?;
        let run = load.run(pid)?;
        let o1 = own(srv)?;
        wall += run.wall;
        let mut b = cost_block(round, c, run.cost, scale, None);
        b.own = o0.zip(o1).map(|(a, b)| (b.saturating_sub(a), run.cpu));
        out.blocks.push(b);
    }
    switch(None)?;
    out.block_s = wall / sched.len().max(1) as f64;
    if part.windows {
        out.windows = Some(windows(srv, s, &load, tmp, unwinder)?);
    }
    Ok(out)
}

/// The profile windows in the process: the same load run `--window-loads` times exactly, then at
/// each interval, each after a reset; one raw dump each.
fn windows(
    srv: &Server,
    s: &Settings,
    load: &Load,
    tmp: &Path,
    unwinder: &str,
) -> Result<Vec<Vec<PathBuf>>> {
    let pid = srv.pid();
    let mut out = Vec::new();
    let intervals = load.svc.intervals.iter().map(|&i| s.intervals[i]);
    for (k, r) in std::iter::once(0).chain(intervals).enumerate() {
        srv.request("reset")?;
        srv.target.start(Some(r))?; // 0: exact
        for _ in 0..load.svc.window_loads.max(1) {
            load.run(pid)?;
        }
        srv.target.stop()?;
        let path = tmp.join(format!("svc-win-{pid}-{unwinder}-{k}.raw"));
        srv.target.dump_raw(&path)?;
        out.push(vec![path]);
    }
    Ok(out)
}
