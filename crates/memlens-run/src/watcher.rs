//! The watcher thread of a program started by `memlens run` with a [`LivePlan`]: it polls the
//! child's resident memory (`/proc/PID/statm`, every 100 ms) to start sampling on growth, writes
//! the periodic and growth dumps, and talks to the child's control socket exactly as
//! `memlens ctl` would.
use crate::live::{LivePlan, POLL};
use memlens_measure::units::format_size;
use memlens_profile::profile_stem;
use memlens_target::{rss_bytes, Target};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

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
            let mut w = Watch::new(plan.clone(), pid, profile_stem(out), done.clone());
            std::thread::spawn(move || w.run())
        });
        Watcher { done, handle }
    }

    /// Stop the watcher and wait for it.
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
