//! Live control of a program started by `memlens run`: `--inactive`, `--start-on-growth`,
//! `--profile-for` and `--dump-every`.
//!
//! A watcher thread in memlens polls the child's resident memory (`/proc/PID/statm`, every 100 ms) and
//! talks to the child's control socket (see ctl.rs) exactly as `memlens ctl` would.
use crate::ctl::Target;
use anyhow::Result;
use memlens_measure::error::usage;
use memlens_measure::units::{format_size, parse_duration, parse_size};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const POLL: Duration = Duration::from_millis(100);

/// Options of `memlens run` for profiling on demand (flattened into RunArgs).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LiveArgs {
    /// Load the runtime with sampling off; switch it on later with `memlens ctl PID start`
    #[arg(long)]
    pub inactive: bool,
    /// Start sampling when resident memory grows by SIZE within DURATION, e.g. 200M/10s (starts inactive)
    #[arg(long, value_name = "SIZE/DURATION")]
    pub start_on_growth: Option<String>,
    /// With --start-on-growth: after sampling this long, write <stem>.growth.pb.gz and stop sampling
    #[arg(long, value_name = "DURATION", requires = "start_on_growth")]
    pub profile_for: Option<String>,
    /// While the program runs, write a numbered profile <stem>.<n>.pb.gz every DURATION
    #[arg(long, value_name = "DURATION")]
    pub dump_every: Option<String>,
}

/// The validated plan.
#[derive(Debug, Clone, Default)]
pub struct LivePlan {
    pub inactive: bool,
    pub growth: Option<(u64, Duration)>,
    pub profile_for: Option<Duration>,
    pub dump_every: Option<Duration>,
}

impl LiveArgs {
    /// Check the options (usage errors) before the program is started.
    pub fn plan(&self) -> Result<LivePlan> {
        let growth = self
            .start_on_growth
            .as_deref()
            .map(parse_growth)
            .transpose()?;
        let profile_for = self
            .profile_for
            .as_deref()
            .map(parse_duration)
            .transpose()?;
        let dump_every = self.dump_every.as_deref().map(parse_duration).transpose()?;
        if dump_every.is_some_and(|d| d < POLL) {
            return Err(usage("--dump-every must be at least 100ms"));
        }
        Ok(LivePlan {
            inactive: self.inactive || growth.is_some(),
            growth,
            profile_for,
            dump_every,
        })
    }
}

impl LivePlan {
    /// Value for MEMLENS_ACTIVE in the child's environment, if the plan sets one.
    pub fn active_env(&self) -> Option<&'static str> {
        self.inactive.then_some("0")
    }

    fn needs_watcher(&self) -> bool {
        self.growth.is_some() || self.dump_every.is_some()
    }
}

fn parse_growth(s: &str) -> Result<(u64, Duration)> {
    let (size, dur) = s.split_once('/').ok_or_else(|| {
        usage(format!(
            "--start-on-growth wants SIZE/DURATION (e.g. 200M/10s), got '{s}'"
        ))
    })?;
    let size = parse_size(size)?;
    let dur = parse_duration(dur)?;
    if size == 0 || dur < POLL {
        return Err(usage(format!(
            "--start-on-growth '{s}': SIZE must be > 0 and DURATION at least 100ms"
        )));
    }
    Ok((size, dur))
}

/// `prof.pb.gz` → `prof`: the stem numbered and growth dumps are named after.
pub fn stem_of(out: &Path) -> PathBuf {
    let s = out.to_string_lossy();
    let s = s.strip_suffix(".gz").unwrap_or(&s);
    let s = s.strip_suffix(".pb").unwrap_or(s);
    PathBuf::from(s)
}

/// The running watcher; `finish` it when the program has exited.
pub struct Watcher {
    done: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Start watching `pid` if the plan asks for it. `out` is the run's profile path (dumps are named
    /// after its stem).
    pub fn spawn(plan: &LivePlan, pid: i32, out: &Path) -> Watcher {
        let done = Arc::new(AtomicBool::new(false));
        let handle = plan.needs_watcher().then(|| {
            let mut w = Watch::new(plan.clone(), pid, stem_of(out), done.clone());
            std::thread::spawn(move || w.run())
        });
        Watcher { done, handle }
    }

    pub fn finish(mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            h.join().ok();
        }
    }
}

struct Watch {
    plan: LivePlan,
    pid: i32,
    stem: PathBuf,
    done: Arc<AtomicBool>,
    target: Option<Target>,
    window: VecDeque<(Instant, u64)>,
    started: Option<Instant>,
    next_dump: Option<Instant>,
    dumps: u32,
}

impl Watch {
    fn new(plan: LivePlan, pid: i32, stem: PathBuf, done: Arc<AtomicBool>) -> Watch {
        let next_dump = plan.dump_every.map(|d| Instant::now() + d);
        Watch {
            plan,
            pid,
            stem,
            done,
            target: None,
            window: VecDeque::new(),
            started: None,
            next_dump,
            dumps: 0,
        }
    }

    fn alive(&self) -> bool {
        !self.done.load(Ordering::Relaxed)
            && Path::new(&format!("/proc/{}/statm", self.pid)).exists()
    }

    /// The child's control socket, once it answers.
    fn target(&mut self) -> Option<Target> {
        if self.target.is_none() {
            let t = Target::find(self.pid).ok()?;
            if t.ready() {
                self.target = Some(t);
            }
        }
        self.target.clone()
    }

    fn run(&mut self) {
        while self.alive() {
            let now = Instant::now();
            if let Some(rss) = rss_bytes(self.pid) {
                self.watch_growth(now, rss);
            }
            self.profile_window_over(now);
            if self.next_dump.is_some_and(|t| now >= t) {
                self.periodic_dump();
            }
            std::thread::sleep(POLL);
        }
    }

    fn watch_growth(&mut self, now: Instant, rss: u64) {
        let Some((size, within)) = self.plan.growth else {
            return;
        };
        if self.started.is_some() {
            return;
        }
        while self
            .window
            .front()
            .is_some_and(|&(t, _)| now.duration_since(t) > within)
        {
            self.window.pop_front();
        }
        self.window.push_back((now, rss));
        let (t0, low) = *self
            .window
            .iter()
            .min_by_key(|&&(_, r)| r)
            .expect("window has the current sample");
        if rss < low + size {
            return;
        }
        let Some(t) = self.target() else { return };
        let took = now.duration_since(t0);
        match t.start(None) {
            Ok(_) => {
                self.started = Some(now);
                eprintln!(
                    "memlens: process {} grew by {} in {:.1}s (resident {} -> {}): sampling started",
                    self.pid,
                    format_size(rss - low),
                    took.as_secs_f64(),
                    format_size(low),
                    format_size(rss)
                );
            }
            Err(e) => eprintln!(
                "memlens: warning: cannot start sampling in process {}: {e:#}",
                self.pid
            ),
        }
    }

    fn profile_window_over(&mut self, now: Instant) {
        let (Some(s), Some(d)) = (self.started, self.plan.profile_for) else {
            return;
        };
        if now.duration_since(s) < d {
            return;
        }
        self.plan.profile_for = None; // once
        let Some(t) = self.target() else { return };
        let out = PathBuf::from(format!("{}.growth.pb.gz", self.stem.display()));
        // Stop even when the dump fails: the window the user asked for is over.
        let dumped = t.dump_pprof(&out);
        let stopped = t.stop();
        match (dumped, stopped) {
            (Ok(s), Ok(_)) => eprintln!(
                "memlens: wrote {} after {:.1}s of sampling ({} samples); sampling stopped",
                out.display(),
                d.as_secs_f64(),
                s.samples
            ),
            (Err(e), _) | (_, Err(e)) => {
                eprintln!(
                    "memlens: warning: growth profile of process {}: {e:#}",
                    self.pid
                )
            }
        }
    }

    fn periodic_dump(&mut self) {
        let every = self.plan.dump_every.expect("periodic dumps are planned");
        self.next_dump = Some(Instant::now() + every);
        let Some(t) = self.target() else { return };
        self.dumps += 1;
        let out = PathBuf::from(format!("{}.{}.pb.gz", self.stem.display(), self.dumps));
        match t.dump_pprof(&out) {
            Ok(s) => eprintln!("memlens: wrote {} ({} samples)", out.display(), s.samples),
            // The program may have exited between our check and the dump: not worth a warning then.
            Err(e) if self.alive() => {
                eprintln!("memlens: warning: periodic dump {}: {e:#}", out.display())
            }
            Err(_) => {}
        }
    }
}

/// Resident memory of `pid` in bytes (second field of /proc/PID/statm, in pages).
pub fn rss_bytes(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * if page > 0 { page as u64 } else { 4096 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_spec() {
        assert_eq!(
            parse_growth("200M/10s").unwrap(),
            (200 << 20, Duration::from_secs(10))
        );
        assert!(parse_growth("200M").is_err());
        assert!(parse_growth("0/1s").is_err());
        assert!(parse_growth("1M/1ms").is_err());
    }

    #[test]
    fn stems() {
        assert_eq!(stem_of(Path::new("a/prof.pb.gz")), PathBuf::from("a/prof"));
        assert_eq!(stem_of(Path::new("prof")), PathBuf::from("prof"));
    }

    #[test]
    fn plan_implies_inactive() {
        let a = LiveArgs {
            start_on_growth: Some("1M/1s".into()),
            ..Default::default()
        };
        assert_eq!(a.plan().unwrap().active_env(), Some("0"));
        assert_eq!(LiveArgs::default().plan().unwrap().active_env(), None);
    }
}
