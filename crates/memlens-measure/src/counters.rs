//! Hardware and software counters around a measured region, with honest gaps.
//!
//! Hardware events are opened in one perf group (so ratios such as CPI compare the same interval) with
//! time_enabled/time_running read back; software events (task clock, page faults, context switches)
//! in a second group. A hardware event is *unavailable* — shown as `n/a (reason)`, never as a number —
//! when it cannot be opened (a VM often exposes no PMU, or only part of one) or when its group was
//! never scheduled; a command may also mark one unavailable after its own plausibility probe
//! ([`CounterSet::disable_event`]). Counters observe the thread that opened them.
use perf_event::events::{Cache, CacheId, CacheOp, CacheResult, Hardware, Software};
use perf_event::{Builder, Counter, Group};
use serde::Serialize;
use std::os::fd::AsRawFd;

/// Which counters a run collects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Hardware events (where they work) and software events.
    All,
    /// Software events only: works everywhere, exercises the same group machinery.
    Software,
    /// Nothing is opened.
    Off,
}

#[derive(Debug, Clone, Copy)]
enum Ev {
    Hw(Hardware),
    DtlbMiss,
    Sw(Software),
}

/// The software events every set opens.
const SW_EVENTS: [&str; 3] = ["task-clock", "page-faults", "context-switches"];

fn event(name: &str) -> Option<Ev> {
    Some(match name {
        "cycles" => Ev::Hw(Hardware::CPU_CYCLES),
        "instructions" => Ev::Hw(Hardware::INSTRUCTIONS),
        "stalled-cycles-frontend" => Ev::Hw(Hardware::STALLED_CYCLES_FRONTEND),
        "stalled-cycles-backend" => Ev::Hw(Hardware::STALLED_CYCLES_BACKEND),
        "cache-references" => Ev::Hw(Hardware::CACHE_REFERENCES),
        "cache-misses" => Ev::Hw(Hardware::CACHE_MISSES),
        "bus-cycles" => Ev::Hw(Hardware::BUS_CYCLES),
        "dTLB-load-misses" => Ev::DtlbMiss,
        "task-clock" => Ev::Sw(Software::TASK_CLOCK),
        "page-faults" => Ev::Sw(Software::PAGE_FAULTS),
        "context-switches" => Ev::Sw(Software::CONTEXT_SWITCHES),
        _ => return None,
    })
}

fn builder(ev: Ev) -> Builder<'static> {
    match ev {
        Ev::Hw(h) => Builder::new(h),
        Ev::Sw(s) => Builder::new(s),
        Ev::DtlbMiss => Builder::new(Cache {
            which: CacheId::DTLB,
            operation: CacheOp::READ,
            result: CacheResult::MISS,
        }),
    }
}

fn open_error(e: &std::io::Error) -> String {
    let virt = std::fs::read_to_string("/proc/cpuinfo").is_ok_and(|c| c.contains(" hypervisor"));
    match e.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) if virt => {
            "not supported by this virtual CPU".into()
        }
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) => "not supported by this CPU".into(),
        Some(libc::EACCES) | Some(libc::EPERM) => format!(
            "perf_event_paranoid={} forbids it",
            std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .unwrap_or_default()
                .trim()
        ),
        Some(libc::EINVAL) => "rejected by the kernel (EINVAL)".into(),
        _ => format!("cannot open: {e}"),
    }
}

struct Member {
    name: String,
    hardware: bool,
    /// Index into `CounterSet::groups`.
    group: usize,
    counter: Option<Counter>,
    /// Why this event shows `n/a`.
    unavailable: Option<String>,
}

/// An open set of counters for the calling thread.
pub struct CounterSet {
    groups: Vec<Group>,
    members: Vec<Member>,
}

/// One event's value over a measured region: scaled count, or why there is none.
#[derive(Debug, Clone, Serialize)]
pub struct Value {
    /// Event name (`cache-misses`, `task-clock`, ...).
    pub name: String,
    /// Count over the region, scaled for multiplexing.
    pub value: Option<f64>,
    /// Why there is no value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// time_running / time_enabled of the event's group (1.0 = counted all the time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub running_fraction: Option<f64>,
}

/// Every event of a set over one region.
pub type Reading = Vec<Value>;

/// Value of `name` in a reading, if measured.
pub fn get(r: &Reading, name: &str) -> Option<f64> {
    r.iter().find(|v| v.name == name).and_then(|v| v.value)
}

/// Why `name` is missing from a reading.
pub fn why(r: &Reading, name: &str) -> Option<String> {
    r.iter()
        .find(|v| v.name == name)
        .and_then(|v| v.unavailable.clone())
}

/// Hardware events are grouped by the ratios computed from them, at most four per group so each
/// group fits a PMU with four general counters; groups are multiplexed (and scaled) if the PMU cannot
/// hold them all at once, but the ratios within a group always cover the same cycles.
const HW_GROUPS: [&[&str]; 2] = [
    &[
        "cycles",
        "instructions",
        "stalled-cycles-frontend",
        "stalled-cycles-backend",
    ],
    &[
        "cache-references",
        "cache-misses",
        "bus-cycles",
        "dTLB-load-misses",
    ],
];

impl CounterSet {
    /// Open the events of `mode`. Events named in `broken` are opened with a generic hardware event
    /// number no kernel defines, so the kernel really refuses them: how tests exercise the `n/a`
    /// path on a machine whose PMU works.
    pub fn open(mode: Mode, broken: &[String]) -> CounterSet {
        let mut set = CounterSet {
            groups: Vec::new(),
            members: Vec::new(),
        };
        if mode == Mode::Off {
            return set;
        }
        let mut plan: Vec<(bool, Vec<String>)> = Vec::new();
        if mode == Mode::All {
            for g in HW_GROUPS {
                plan.push((true, g.iter().map(|s| s.to_string()).collect()));
            }
        }
        plan.push((false, SW_EVENTS.iter().map(|s| s.to_string()).collect()));
        set.open_plan(plan, broken);
        set
    }

    /// Open exactly these events, one group of the calling thread (hardware ones are marked so:
    /// their absence is the CPU's, not the kernel's). Events that cannot be opened are `n/a` with
    /// the reason ([`CounterSet::unavailable`]).
    pub fn open_group(names: &[&str]) -> CounterSet {
        let mut set = CounterSet {
            groups: Vec::new(),
            members: Vec::new(),
        };
        let hardware = names
            .iter()
            .any(|n| matches!(event(n), Some(Ev::Hw(_) | Ev::DtlbMiss)));
        set.open_plan(
            vec![(hardware, names.iter().map(|s| s.to_string()).collect())],
            &[],
        );
        set
    }

    fn open_plan(&mut self, plan: Vec<(bool, Vec<String>)>, broken: &[String]) {
        let set = self;
        for (hardware, names) in plan {
            let mut group = match Group::new() {
                Ok(g) => Some(g),
                Err(e) => {
                    let why = format!("cannot create a perf group: {}", open_error(&e));
                    for n in names.iter() {
                        set.members.push(Member {
                            name: n.clone(),
                            hardware,
                            group: 0,
                            counter: None,
                            unavailable: Some(why.clone()),
                        });
                    }
                    None
                }
            };
            let Some(g) = group.as_mut() else { continue };
            let gi = set.groups.len();
            for n in names {
                let ev = if broken.contains(&n) {
                    Some(Ev::Hw(Hardware::from(0x7fff_u64)))
                } else {
                    event(&n)
                };
                let (counter, unavailable) = match ev {
                    Some(ev) => match g.add(&builder(ev)) {
                        Ok(c) => (Some(c), None),
                        Err(e) => (None, Some(open_error(&e))),
                    },
                    None => (None, Some("unknown event".into())),
                };
                set.members.push(Member {
                    name: n,
                    hardware,
                    group: gi,
                    counter,
                    unavailable,
                });
            }
            set.groups.extend(group);
        }
    }

    /// Names of the events and why each one is missing (`None`: open).
    pub fn unavailable(&self) -> Vec<(String, Option<String>)> {
        self.members
            .iter()
            .map(|m| (m.name.clone(), m.unavailable.clone()))
            .collect()
    }

    /// Hardware events that are open and not marked unavailable.
    pub fn hardware_open(&self) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| m.hardware && m.unavailable.is_none())
            .map(|m| m.name.clone())
            .collect()
    }

    /// The raw counts of every member, in the order they were asked for, while counting (after
    /// [`CounterSet::start`]): one `read` of each group into a buffer on the stack, nothing
    /// allocated — cheap enough to bracket a few microseconds of work. Unavailable events read 0.
    /// Returns false if a read failed or `out` is shorter than the members.
    pub fn read_raw(&self, out: &mut [u64]) -> bool {
        if out.len() < self.members.len() {
            return false;
        }
        // read_format = GROUP | ID | TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING (the perf-event2
        // group default): nr, enabled, running, then (value, id) per event, the leader first.
        const MAX: usize = 16;
        for (gi, g) in self.groups.iter().enumerate() {
            let mut buf = [0u64; 3 + 2 * (MAX + 1)];
            let fd = g.as_counter().as_raw_fd();
            // SAFETY: reads at most the buffer's size into memory we own.
            let n = unsafe {
                libc::read(
                    fd,
                    buf.as_mut_ptr() as *mut libc::c_void,
                    std::mem::size_of_val(&buf),
                )
            };
            if n <= 0 {
                return false;
            }
            let nr = (buf[0] as usize).min(MAX + 1);
            for (mi, m) in self.members.iter().enumerate() {
                out[mi] = match (&m.counter, m.group == gi) {
                    (Some(c), true) => (0..nr)
                        .find(|&k| buf[4 + 2 * k] == c.id())
                        .map_or(0, |k| buf[3 + 2 * k]),
                    (_, true) | (None, _) => 0,
                    (_, false) => out[mi],
                };
            }
        }
        true
    }

    /// Number of events asked for (the length [`CounterSet::read_raw`] fills).
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// No event was asked for.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Nothing was asked for.
    pub fn is_off(&self) -> bool {
        self.members.is_empty()
    }

    /// Reset and start counting.
    pub fn start(&mut self) {
        for g in self.groups.iter_mut() {
            let _ = g.reset();
            let _ = g.enable();
        }
        // A member enabled through its group's (dummy) leader from inside the running thread starts
        // counting only at the thread's next schedule-in: task-clock read 0 over whole regions on
        // this kernel (6.18) until something switched us out. Give the CPU up once, now.
        if !self.groups.is_empty() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    /// Stop counting and read every event.
    pub fn stop(&mut self) -> Reading {
        for g in self.groups.iter_mut() {
            let _ = g.disable();
        }
        let data: Vec<_> = self.groups.iter_mut().map(|g| g.read()).collect();
        self.members
            .iter()
            .map(|m| {
                let mut v = Value {
                    name: m.name.clone(),
                    value: None,
                    unavailable: m.unavailable.clone(),
                    running_fraction: None,
                };
                let (Some(c), None) = (&m.counter, &m.unavailable) else {
                    return v;
                };
                match &data[m.group] {
                    Ok(d) => {
                        let en = d.time_enabled().map(|t| t.as_nanos() as f64).unwrap_or(0.0);
                        let run = d.time_running().map(|t| t.as_nanos() as f64).unwrap_or(0.0);
                        match d.get(c) {
                            _ if run == 0.0 => {
                                v.unavailable = Some("group never scheduled on the PMU".into())
                            }
                            Some(e) => {
                                // Multiplexed: scale to the enabled time, and say by how much.
                                v.value = Some(e.value() as f64 * en / run);
                                v.running_fraction = Some(run / en);
                            }
                            None => v.unavailable = Some("missing from the group read".into()),
                        }
                    }
                    Err(e) => v.unavailable = Some(format!("read failed: {e}")),
                }
                v
            })
            .collect()
    }

    /// Mark an event unavailable for the rest of the run.
    pub fn disable_event(&mut self, name: &str, why: String) {
        if let Some(m) = self
            .members
            .iter_mut()
            .find(|m| m.name == name && m.unavailable.is_none())
        {
            m.unavailable = Some(why);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(mb: usize) {
        let mut v = vec![0u8; mb << 20];
        for i in (0..v.len()).step_by(4096) {
            v[i] = 1;
        }
        std::hint::black_box(&v);
    }

    /// The group machinery with software events works on any machine, PMU or not.
    #[test]
    fn software_group_counts_page_faults_and_task_clock() {
        let mut set = CounterSet::open(Mode::Software, &[]);
        set.start();
        touch(64);
        let reading = set.stop();
        let faults = get(&reading, "page-faults").expect("page-faults measured");
        assert!(
            faults >= 1000.0,
            "touching 16384 pages made only {faults} faults"
        );
        assert!(get(&reading, "task-clock").unwrap() > 0.0);
    }

    #[test]
    fn unopenable_event_is_na_with_reason() {
        let mut set = CounterSet::open(Mode::Software, &["page-faults".into()]);
        set.start();
        let r = set.stop();
        assert!(get(&r, "page-faults").is_none());
        assert!(!why(&r, "page-faults").unwrap().is_empty());
        assert!(get(&r, "task-clock").is_some());
    }

    /// The per-region raw read (no allocation) sees the same events grow, in the asked order.
    #[test]
    fn raw_reads_bracket_a_region() {
        let mut set = CounterSet::open_group(&["page-faults", "task-clock"]);
        assert_eq!(set.len(), 2);
        assert!(set.unavailable().iter().all(|(_, why)| why.is_none()));
        set.start();
        let (mut a, mut b) = ([0u64; 2], [0u64; 2]);
        assert!(set.read_raw(&mut a));
        touch(16);
        assert!(set.read_raw(&mut b));
        assert!(b[0] - a[0] >= 1000, "{a:?} {b:?}");
        assert!(b[1] > a[1], "{a:?} {b:?}");
        assert!(!set.read_raw(&mut [0u64; 1]));
    }
}
