//! Profiles of one process as the endpoints serve them: a dump now, or the difference of a window.
//!
//! Dumps go through the control client, one at a time per process. Scrapes of one process that
//! arrive while its dump is being taken and symbolized share that dump instead of queueing for
//! one each: twenty concurrent scrapers cost one dump, not twenty in a row. The raw dump is read
//! back from the control directory and removed at once; nothing is written anywhere else.
//!
//! A window (`?seconds=N`) switches sampling on if it was off, and the last window of a process to
//! end switches it off again, right when its N seconds are over and before its end dump is
//! symbolized, so overlapping windows never cut each other short, sampling lasts N seconds and no
//! longer, and the process is left as it was found.
use crate::stop::Stop;
use anyhow::{anyhow, Result};
use memlens_profile::Profile;
use memlens_profile::RawDump;
use memlens_profile::Symbolizer;
use memlens_target::Target;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// A dump's outcome, shared by every request that waited for it.
type Shared = Result<Arc<Profile>, String>;

/// Per-process state: the dump in progress and the count of open windows.
#[derive(Default)]
struct Slot {
    flight: Mutex<Flight>,
    landed: Condvar,
    window: Mutex<Window>,
}

#[derive(Default)]
struct Flight {
    /// A dump is being taken and symbolized.
    running: bool,
    /// Dumps finished so far (a waiter knows its dump landed when this moves).
    finished: u64,
    last: Option<Shared>,
}

#[derive(Default)]
struct Window {
    open: u32,
    /// Sampling was off when the first open window began: switch it off when the last one ends.
    restore_off: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Dumps and windows of every process the server has touched.
pub struct Profiler {
    slots: Mutex<HashMap<i32, Arc<Slot>>>,
    /// Modules that could not be symbolized, said once each on stderr (not once per scrape).
    warned: Mutex<HashSet<String>>,
    /// Ends windows early when the server stops.
    stop: Arc<Stop>,
}

impl Profiler {
    pub fn new(stop: Arc<Stop>) -> Profiler {
        Profiler {
            slots: Mutex::new(HashMap::new()),
            warned: Mutex::new(HashSet::new()),
            stop,
        }
    }

    fn slot(&self, pid: i32) -> Arc<Slot> {
        let mut slots = lock(&self.slots);
        // Forget processes that are gone (and not in use), so a long-lived server stays small.
        slots.retain(|p, s| {
            Arc::strong_count(s) > 1 || std::path::Path::new(&format!("/proc/{p}")).exists()
        });
        slots.entry(pid).or_default().clone()
    }

    /// The process's profile now, symbolized. A request that arrives while a dump of the same
    /// process is under way gets that dump.
    pub fn dump(&self, t: &Target) -> Result<Arc<Profile>> {
        let slot = self.slot(t.pid);
        let mut f = lock(&slot.flight);
        if f.running {
            let seen = f.finished;
            while f.finished == seen {
                f = slot.landed.wait(f).unwrap_or_else(|p| p.into_inner());
            }
            return share(f.last.clone());
        }
        f.running = true;
        drop(f);
        let mut landing = Landing {
            slot: &slot,
            result: Err("the dump was abandoned".into()),
        };
        landing.result = t
            .read_dump()
            .map(|d| Arc::new(self.symbolize(&d, t)))
            .map_err(|e| format!("{e:#}"));
        share(Some(landing.result.clone()))
    }

    /// Symbolize `d` (of `t`, whose files may be in its own root) with the process's shared symbolizer, whose cache (per build ID) lives across
    /// scrapes: a process scraped again costs only its new addresses. Modules that cannot be
    /// symbolized are said once per server, and their frames named `module+0xOFFSET` when served.
    fn symbolize(&self, d: &RawDump, t: &Target) -> Profile {
        let (p, warnings) = memlens_profile::symbolize_dump_in(d, Symbolizer::global(), &t.files());
        let mut warned = lock(&self.warned);
        for w in warnings {
            if warned.insert(w.clone()) {
                eprintln!("memlens: warning: {w}");
            }
        }
        p
    }

    /// What the process allocated (and freed) in the next `secs` seconds: a dump now and one at
    /// the end, and their difference, as Go's `?seconds=N` gives it. Sampling is switched on for
    /// the window if it was off. `None` when the server stopped before the window ended.
    pub fn window(&self, t: &Target, secs: u64) -> Result<Option<Delta>> {
        let w = self.open_window(t)?;
        let base = self.dump(t)?;
        // The window runs from the base dump's moment in the process; symbolizing it was part of
        // the wait.
        let since_base = Duration::from_nanos(wall_ns().saturating_sub(base.meta.time_ns));
        let whole = self
            .stop
            .sleep(Duration::from_secs(secs).saturating_sub(since_base));
        // Sampling ends now (when this is the last window and it was off before), not after the
        // end dump has been symbolized.
        drop(w);
        if !whole {
            return Ok(None);
        }
        let new = self.dump(t)?;
        Ok(Some(Delta {
            duration_ns: new.meta.time_ns.saturating_sub(base.meta.time_ns),
            profile: delta(&base, &new),
        }))
    }

    fn open_window(&self, t: &Target) -> Result<OpenWindow> {
        let slot = self.slot(t.pid);
        {
            let mut w = lock(&slot.window);
            if w.open == 0 {
                let st = t.status()?;
                if st.active != Some(true) {
                    let r = t.start(None)?;
                    // Someone else started it between our status and start: theirs to stop.
                    w.restore_off = r.was != Some(true);
                }
            }
            w.open += 1;
        }
        Ok(OpenWindow {
            slot,
            target: t.clone(),
        })
    }
}

/// CLOCK_REALTIME now, in nanoseconds (the clock of the runtime's dump times).
fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Hands a dump's outcome to the requests waiting for it when dropped: also when taking it
/// panicked, so that they get an error instead of waiting for ever.
struct Landing<'a> {
    slot: &'a Slot,
    result: Shared,
}

impl Drop for Landing<'_> {
    fn drop(&mut self) {
        let mut f = lock(&self.slot.flight);
        f.running = false;
        f.finished += 1;
        f.last = Some(self.result.clone());
        drop(f);
        self.slot.landed.notify_all();
    }
}

fn share(r: Option<Shared>) -> Result<Arc<Profile>> {
    match r {
        Some(Ok(p)) => Ok(p),
        Some(Err(e)) => Err(anyhow!(e)),
        None => Err(anyhow!("the dump was lost")),
    }
}

/// A window's profile and how long it lasted (between its two dumps).
pub struct Delta {
    pub profile: Profile,
    pub duration_ns: u64,
}

/// Closes a window when dropped (also when a dump failed), restoring the state found.
struct OpenWindow {
    slot: Arc<Slot>,
    target: Target,
}

impl Drop for OpenWindow {
    fn drop(&mut self) {
        let mut w = lock(&self.slot.window);
        w.open -= 1;
        if w.open == 0 && w.restore_off {
            w.restore_off = false;
            // The process may have exited meanwhile: nothing left to restore then.
            self.target.stop().ok();
        }
    }
}

/// A stack's identity across two dumps of one process: the addresses of its frames (location ids
/// differ between dumps; addresses do not).
fn stack_key(p: &Profile, s: &memlens_profile::Sample) -> Vec<u64> {
    s.locations
        .iter()
        .map(|&id| {
            p.locations
                .get((id as usize).wrapping_sub(1))
                .map_or(0, |l| l.address)
        })
        .collect()
}

/// `p`'s values and sample counts summed per stack.
fn by_stack(p: &Profile) -> HashMap<Vec<u64>, ([f64; 4], u64)> {
    let mut m: HashMap<Vec<u64>, ([f64; 4], u64)> = HashMap::new();
    for s in &p.samples {
        let e = m.entry(stack_key(p, s)).or_insert(([0.0; 4], 0));
        for (a, b) in e.0.iter_mut().zip(s.values()) {
            *a += b;
        }
        e.1 += s.samples;
    }
    m
}

/// The profile of a window: `new − base` of every value, stack by stack (stacks are the same
/// addresses in both dumps of one process), as Go's `serveDeltaProfile` computes it: allocations
/// made in the window, and the change of the live heap over it (negative where it shrank). Stacks
/// whose values are all zero are left out (Go's merge drops them too).
pub fn delta(base: &Profile, new: &Profile) -> Profile {
    let mut before = by_stack(base);
    let mut out = Profile {
        samples: Vec::new(),
        ..new.clone()
    };
    for s in &new.samples {
        let (vals, n) = before.remove(&stack_key(new, s)).unwrap_or(([0.0; 4], 0));
        let mut d = s.clone();
        let mut v = s.values();
        for (x, b) in v.iter_mut().zip(vals) {
            *x -= b;
        }
        if v.iter().all(|x| x.abs() < 0.5) {
            continue;
        }
        d.set_values(v);
        d.samples = s.samples.saturating_sub(n);
        d.life = None;
        out.samples.push(d);
    }
    // Stacks whose blocks were all freed in the window (the base had live ones): a shrinking heap.
    // Their locations are the base's: add them to the new profile's tables.
    for s in &base.samples {
        let Some((vals, _)) = before.remove(&stack_key(base, s)) else {
            continue;
        };
        let gone = [0.0, 0.0, -vals[2], -vals[3]];
        if gone.iter().all(|x| x.abs() < 0.5) {
            continue;
        }
        let mut d = s.clone();
        d.locations = s
            .locations
            .iter()
            .map(|&id| import_location(&mut out, base, id))
            .collect();
        d.set_values(gone);
        d.samples = 0;
        d.life = None;
        out.samples.push(d);
    }
    window_meta(&mut out, base, new);
    out
}

/// What a push sends for the window from `base` to `new` (two dumps of one process): each stack's
/// allocations in the window (`alloc_*` of `new` − `base`: Pyroscope adds these up over a range,
/// as it should) and what it holds at the window's end (`inuse_*` of `new`, a snapshot: the value
/// at a time, which Pyroscope averages over a range). Stacks with neither are left out. Without a
/// base (the process's first window, or its runtime was reset or the pid reused) `alloc_*` are
/// zero: what was allocated since the runtime started is no window's. With the window's duration
/// (0 without a base).
pub fn pushed(base: Option<&Profile>, new: &Profile) -> (Profile, u64) {
    let base = base.filter(|b| b.meta.pid == new.meta.pid && b.meta.start_ns == new.meta.start_ns);
    let mut before = base.map(by_stack).unwrap_or_default();
    let mut out = Profile {
        samples: Vec::new(),
        ..new.clone()
    };
    for s in &new.samples {
        let v = s.values();
        let (alloc_objects, alloc_space) = match (base, before.remove(&stack_key(new, s))) {
            (None, _) => (0.0, 0.0),
            (Some(_), None) => (v[0], v[1]),
            (Some(_), Some((b, _))) => (v[0] - b[0], v[1] - b[1]),
        };
        let w = [alloc_objects, alloc_space, v[2], v[3]];
        if w.iter().all(|x| x.abs() < 0.5) {
            continue;
        }
        let mut d = s.clone();
        d.set_values(w);
        d.life = None;
        out.samples.push(d);
    }
    let duration_ns = match base {
        Some(b) => {
            window_meta(&mut out, b, new);
            // A window lasts at least a nanosecond: a zero duration would read as a snapshot.
            new.meta.time_ns.saturating_sub(b.meta.time_ns).max(1)
        }
        None => 0,
    };
    (out, duration_ns)
}

/// The meta of a window's profile: its start, and the runtime's counters over it.
fn window_meta(out: &mut Profile, base: &Profile, new: &Profile) {
    let m = &mut out.meta;
    m.start_ns = base.meta.time_ns;
    m.samples = new.meta.samples.saturating_sub(base.meta.samples);
    m.truncated = new.meta.truncated.saturating_sub(base.meta.truncated);
    m.dropped = new.meta.dropped.saturating_sub(base.meta.dropped);
    m.reason = "window".into();
    out.views = None;
}

/// The id in `out` of location `id` of `from`, added (with its functions and mapping) when `out`
/// has no location at that address.
fn import_location(out: &mut Profile, from: &Profile, id: u64) -> u64 {
    let Some(loc) = from.locations.get((id as usize).wrapping_sub(1)) else {
        return 0;
    };
    if let Some(i) = out.locations.iter().position(|l| l.address == loc.address) {
        return i as u64 + 1;
    }
    let mut l = loc.clone();
    l.mapping = match from.mappings.get((loc.mapping as usize).wrapping_sub(1)) {
        None => 0,
        Some(m) => match out.mappings.iter().position(|x| x == m) {
            Some(i) => i as u64 + 1,
            None => {
                out.mappings.push(m.clone());
                out.mappings.len() as u64
            }
        },
    };
    for line in &mut l.lines {
        if let Some(f) = from.functions.get((line.function as usize).wrapping_sub(1)) {
            line.function = match out.functions.iter().position(|x| x == f) {
                Some(i) => i as u64 + 1,
                None => {
                    out.functions.push(f.clone());
                    out.functions.len() as u64
                }
            };
        }
    }
    out.locations.push(l);
    out.locations.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlens_profile::{Function, Line, Location, Sample};

    fn profile(stacks: &[(u64, [f64; 4])]) -> Profile {
        let mut p = Profile::default();
        for (i, (addr, v)) in stacks.iter().enumerate() {
            p.functions.push(Function {
                name: format!("f{addr}"),
                ..Function::default()
            });
            p.locations.push(Location {
                mapping: 0,
                address: *addr,
                lines: vec![Line {
                    function: i as u64 + 1,
                    line: 1,
                }],
            });
            let mut s = Sample {
                locations: vec![i as u64 + 1],
                samples: 1,
                ..Sample::default()
            };
            s.set_values(*v);
            p.samples.push(s);
        }
        p
    }

    /// The first dump of the tests: three stacks.
    fn base() -> Profile {
        profile(&[
            (0x10, [1.0, 100.0, 1.0, 100.0]),
            (0x20, [2.0, 64.0, 0.0, 0.0]),
            (0x40, [1.0, 50.0, 1.0, 50.0]),
        ])
    }

    /// Each sample's function (named after its address) and values.
    fn values(p: &Profile) -> Vec<(String, [f64; 4])> {
        p.samples
            .iter()
            .map(|s| (p.frames(s)[0].function.clone(), s.values()))
            .collect()
    }

    #[test]
    fn a_window_is_the_difference_of_every_value_as_go_computes_it() {
        // Location ids differ between the two dumps; addresses match the stacks. 0x20 did nothing
        // in between: left out. 0x40's blocks were all freed: its live heap fell by 50.
        let new = profile(&[
            (0x20, [2.0, 64.0, 0.0, 0.0]),
            (0x10, [3.0, 300.0, 1.0, 40.0]),
            (0x30, [1.0, 8.0, 1.0, 8.0]),
        ]);
        let d = delta(&base(), &new);
        assert_eq!(
            values(&d),
            vec![
                ("f16".to_string(), [2.0, 200.0, 0.0, -60.0]),
                ("f48".to_string(), [1.0, 8.0, 1.0, 8.0]),
                ("f64".to_string(), [0.0, 0.0, -1.0, -50.0]),
            ]
        );
        // The live heap of the window adds up to the change: (40 + 8) - (100 + 50).
        let inuse: f64 = d.samples.iter().map(|s| s.values()[3]).sum();
        assert_eq!(inuse, 48.0 - 150.0);
    }

    #[test]
    fn a_push_is_the_window_s_allocations_and_the_heap_at_its_end() {
        let base = base();
        let mut new = profile(&[
            (0x20, [2.0, 64.0, 0.0, 0.0]),
            (0x10, [3.0, 300.0, 1.0, 40.0]),
            (0x30, [1.0, 8.0, 1.0, 8.0]),
            (0x40, [1.0, 50.0, 1.0, 50.0]),
        ]);
        // 0x20 allocated nothing and holds nothing: left out; 0x40 allocated nothing but holds 50.
        let want = vec![
            ("f16".to_string(), [2.0, 200.0, 1.0, 40.0]),
            ("f48".to_string(), [1.0, 8.0, 1.0, 8.0]),
            ("f64".to_string(), [0.0, 0.0, 1.0, 50.0]),
        ];
        new.meta.time_ns = 5_000;
        let (p, duration) = pushed(Some(&base), &new);
        assert_eq!((values(&p), duration), (want, 5_000));
        // The heap adds up to what is held at the end, not to its change.
        let inuse: f64 = p.samples.iter().map(|s| s.values()[3]).sum();
        assert_eq!(inuse, 40.0 + 8.0 + 50.0);
        // The first window of a process (or of a reset runtime): its heap, no allocations.
        let (first, duration) = pushed(None, &new);
        let first: Vec<[f64; 4]> = first.samples.iter().map(|s| s.values()).collect();
        assert_eq!(
            (first, duration),
            (
                vec![
                    [0.0, 0.0, 1.0, 40.0],
                    [0.0, 0.0, 1.0, 8.0],
                    [0.0, 0.0, 1.0, 50.0]
                ],
                0
            )
        );
        new.meta.start_ns = 7;
        let (reset, duration) = pushed(Some(&base), &new);
        assert_eq!((reset.samples.len(), duration), (3, 0));
        assert!(reset.samples.iter().all(|s| s.values()[1] == 0.0));
    }
}
