//! Whether the machine was busy with other work while something was measured, and the warning
//! every measuring command prints when it was (`bench alloc`, `bench latency`, `bench bandwidth`,
//! `study`): times taken beside other programs include their work, and small differences are not
//! resolved.
//!
//! At the start, [`Watch::start`] samples how much of the CPUs other programs use right now
//! (`/proc/stat` over a fifth of a second, before the command runs anything) and says so at once
//! when that is half a CPU or more. At the end, [`Load`] holds the load average before and after;
//! [`warning`] words both checks the way `bench alloc` always has.
use std::time::Duration;

/// Other programs' use of the CPUs at the start (in CPUs) from which the machine counts as busy.
pub const BUSY_CPUS: f64 = 0.5;
/// Median share of their time a command's threads waited for a CPU above which the machine counts
/// as busy: on an idle machine it stays near 0 (our threads never outnumber the CPUs unless asked).
pub const BUSY_WAITED_PCT: f64 = 5.0;

/// The 1-, 5- and 15-minute load averages (/proc/loadavg).
pub fn loadavg() -> Option<[f64; 3]> {
    let s = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = s.split_whitespace().map(|x| x.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// How busy the machine was around the runs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Load {
    /// Load averages before the first and after the last run.
    pub before: Option<[f64; 3]>,
    /// Load averages after the last run.
    pub after: Option<[f64; 3]>,
    /// The CPUs the load is shared by.
    pub cpus: u64,
}

impl Load {
    /// The load averages before and after, on `cpus` CPUs.
    pub fn new(before: Option<[f64; 3]>, after: Option<[f64; 3]>, cpus: u64) -> Load {
        Load {
            before,
            after,
            cpus,
        }
    }

    /// `load average 0.40 → 2.10 on 2 CPUs` (1-minute figures).
    pub fn describe(&self) -> String {
        let f = |l: Option<[f64; 3]>| l.map(|l| format!("{:.2}", l[0])).unwrap_or("?".into());
        format!(
            "load average {} → {} on {} CPUs",
            f(self.before),
            f(self.after),
            self.cpus
        )
    }

    /// The 1-minute load average exceeded the CPUs before the runs (after them, when not read
    /// before): after, it counts the command's own threads too.
    pub fn over(&self) -> bool {
        self.before
            .or(self.after)
            .is_some_and(|l| l[0] > self.cpus as f64)
    }
}

/// The warning for a run on `load`. `waited` is how long the command's threads (e.g. "the
/// workers") waited for a CPU, as a median share of their time in percent, when the command
/// measures it (None in the share: the kernel did not say); without it, the load average decides.
pub fn warning(load: &Load, waited: Option<(&str, Option<f64>)>) -> Option<String> {
    match waited {
        Some((threads, Some(x))) if x > BUSY_WAITED_PCT => Some(format!(
            "warning: the machine was busy: {threads} waited for a CPU {x:.0}% of their time (median over runs; {}), so times include other programs' work and small differences are not resolved; rerun on a quiet machine",
            load.describe()
        )),
        Some((_, Some(_))) => None,
        _ if load.over() => Some(format!(
            "warning: the machine was busy ({}{}), so times include other programs' work and small differences are not resolved; rerun on a quiet machine",
            load.describe(),
            waited.map_or(String::new(), |(t, _)| format!("; this kernel does not say how long {t} waited for a CPU"))
        )),
        _ => None,
    }
}

/// CPU time of all CPUs from /proc/stat: (busy, total) in ticks.
fn cpu_ticks() -> Option<(u64, u64)> {
    let s = std::fs::read_to_string("/proc/stat").ok()?;
    let line = s.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum(); // user … steal (guest time is within user)
    let idle = v.get(3)? + v.get(4).unwrap_or(&0); // idle + iowait
    Some((total - idle, total))
}

/// How many CPUs' worth of work ran over `window`, from /proc/stat (None where it cannot be read).
pub fn cpus_in_use(window: Duration) -> Option<f64> {
    let (b0, t0) = cpu_ticks()?;
    std::thread::sleep(window);
    let (b1, t1) = cpu_ticks()?;
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    (t1 > t0).then(|| (b1 - b0) as f64 / (t1 - t0) as f64 * cpus)
}

/// A measuring command's watch over how busy the machine is: started before it runs anything.
#[derive(Debug, Clone)]
pub struct Watch {
    before: Option<[f64; 3]>,
    cpus: u64,
    /// Other programs' use of the CPUs at the start, in CPUs (None: not readable).
    pub others_at_start: Option<f64>,
}

impl Watch {
    /// Look at the machine before `what` (e.g. `memlens study`) runs anything, and warn on stderr
    /// at once when other programs keep half a CPU or more busy.
    pub fn start(what: &str) -> Watch {
        let w = Watch {
            before: loadavg(),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()) as u64,
            others_at_start: cpus_in_use(Duration::from_millis(200)),
        };
        if let Some(m) = w.start_warning(what) {
            eprintln!("memlens: {m}");
        }
        w
    }

    /// The warning [`Watch::start`] prints, if any.
    pub fn start_warning(&self, what: &str) -> Option<String> {
        let used = self.others_at_start.filter(|&u| u >= BUSY_CPUS)?;
        Some(format!(
            "warning: the machine is busy: other programs keep {used:.1} of its {} CPUs busy ({}); {what} measures beside them, so its times include their work; rerun on a quiet machine for figures to rely on",
            self.cpus,
            self.before.map_or("load average ?".into(), |l| format!("load average {:.2}", l[0]))
        ))
    }

    /// The load averages from the start until now.
    pub fn load(&self) -> Load {
        Load::new(self.before, loadavg(), self.cpus)
    }

    /// The warning at the end of the run ([`warning`] on the load since the start).
    pub fn end_warning(&self, waited: Option<(&str, Option<f64>)>) -> Option<String> {
        warning(&self.load(), waited)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_machine_is_said_in_words() {
        let quiet = Load::new(Some([0.3, 0.2, 0.1]), Some([1.1, 0.5, 0.2]), 2);
        assert!(warning(&quiet, Some(("the workers", Some(1.0)))).is_none());
        assert!(warning(&quiet, None).is_none());
        let busy = Load::new(Some([2.5, 2.0, 1.0]), Some([3.0, 2.1, 1.0]), 2);
        let w = warning(&busy, Some(("the workers", Some(12.0)))).unwrap();
        assert!(
            w.contains("waited for a CPU 12%") && w.contains("2.50 → 3.00 on 2 CPUs"),
            "{w}"
        );
        // measured and short: not busy, whatever the load average says
        assert!(warning(&busy, Some(("the workers", Some(1.0)))).is_none());
        let w = warning(&busy, Some(("the workers", None))).unwrap();
        assert!(
            w.starts_with("warning: the machine was busy (") && w.contains("does not say"),
            "{w}"
        );
        assert!(warning(&busy, None)
            .unwrap()
            .starts_with("warning: the machine was busy ("));
        let w = Watch {
            before: Some([1.7, 1.0, 0.5]),
            cpus: 2,
            others_at_start: Some(1.6),
        };
        let s = w.start_warning("memlens study").unwrap();
        assert!(
            s.contains("1.6 of its 2 CPUs") && s.contains("memlens study"),
            "{s}"
        );
        let idle = Watch {
            others_at_start: Some(0.1),
            ..w
        };
        assert!(idle.start_warning("memlens study").is_none());
    }

    #[test]
    fn cpus_in_use_reads_proc_stat() {
        let u = cpus_in_use(Duration::from_millis(50)).expect("/proc/stat");
        let cpus = std::thread::available_parallelism().unwrap().get() as f64;
        assert!((0.0..=cpus + 0.01).contains(&u), "{u}");
    }
}
