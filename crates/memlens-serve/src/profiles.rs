//! Profiles of one process as the endpoints serve them: a dump now, or the allocations of a window.
//!
//! Every dump goes through the control client (`Target::dump_pprof`), one at a time per process: a
//! second scrape waits for the first instead of interleaving with it. A window (`allocs?seconds=N`)
//! switches sampling on if it was off, and the last window of a process to end switches it off
//! again, so overlapping windows never cut each other short and the process is left as it was found.
use anyhow::{Context, Result};
use memlens_profile::model::{Profile, SampleIndex};
use memlens_profile::pprof::proto;
use memlens_target::Target;
use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// Per-process serialisation: dumps one at a time, and the count of open windows.
#[derive(Default)]
struct Slot {
    dump: Mutex<()>,
    window: Mutex<Window>,
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
    /// Private directory for the converted dumps (removed with the server).
    tmp: tempfile::TempDir,
    seq: AtomicU64,
}

impl Profiler {
    pub fn new() -> Result<Profiler> {
        let tmp = tempfile::Builder::new()
            .prefix("memlens-serve-")
            .tempdir()
            .context("cannot create a temporary directory for the dumps")?;
        Ok(Profiler {
            slots: Mutex::new(HashMap::new()),
            tmp,
            seq: AtomicU64::new(0),
        })
    }

    fn slot(&self, pid: i32) -> Arc<Slot> {
        let mut slots = lock(&self.slots);
        // Forget processes that are gone (and not in use), so a long-lived server stays small.
        slots.retain(|p, s| {
            Arc::strong_count(s) > 1 || std::path::Path::new(&format!("/proc/{p}")).exists()
        });
        slots.entry(pid).or_default().clone()
    }

    /// The process's profile now (all four values, symbolized).
    pub fn dump(&self, t: &Target) -> Result<Profile> {
        let slot = self.slot(t.pid);
        let _one_at_a_time = lock(&slot.dump);
        let out: PathBuf = self.tmp.path().join(format!(
            "{}.{}.pb.gz",
            t.pid,
            self.seq.fetch_add(1, Ordering::Relaxed)
        ));
        let r = t.dump_pprof(&out).and_then(|_| memlens_profile::load(&out));
        std::fs::remove_file(&out).ok();
        r
    }

    /// What the process allocated during the next `secs` seconds: a dump before and one after, and
    /// their difference. Sampling is switched on for the window if it was off.
    pub fn window(&self, t: &Target, secs: u64) -> Result<Profile> {
        let _w = self.open_window(t)?;
        let base = self.dump(t)?;
        std::thread::sleep(Duration::from_secs(secs));
        let new = self.dump(t)?;
        Ok(delta(&base, &new))
    }

    fn open_window(&self, t: &Target) -> Result<OpenWindow> {
        let slot = self.slot(t.pid);
        {
            let mut w = lock(&slot.window);
            if w.open == 0 {
                let st = t.status()?;
                if st.get("active") != Some("1") {
                    let r = t.start(None)?;
                    // Someone else started it between our status and start: theirs to stop.
                    w.restore_off = r.get("was") != Some("1");
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

/// The profile of a window: `new − base` of the cumulative values (what was allocated in between),
/// stack by stack (stacks are the same addresses in both dumps of one process), and the live heap
/// as it is at the end of the window, as Grafana's godeltaprof does for Go: a live heap has no
/// "delta" a backend could add up, and Pyroscope averages inuse values over time. Stacks with
/// nothing allocated in the window and nothing live are left out.
pub fn delta(base: &Profile, new: &Profile) -> Profile {
    let key = |p: &Profile, s: &memlens_profile::model::Sample| -> Vec<u64> {
        s.locations
            .iter()
            .map(|&id| {
                p.locations
                    .get((id as usize).wrapping_sub(1))
                    .map_or(0, |l| l.address)
            })
            .collect()
    };
    let mut before: HashMap<Vec<u64>, ([f64; 4], u64)> = HashMap::new();
    for s in &base.samples {
        let e = before.entry(key(base, s)).or_insert(([0.0; 4], 0));
        for (a, b) in e.0.iter_mut().zip(s.values()) {
            *a += b;
        }
        e.1 += s.samples;
    }
    let mut out = Profile {
        samples: Vec::new(),
        ..new.clone()
    };
    for s in &new.samples {
        let (vals, n) = before.remove(&key(new, s)).unwrap_or(([0.0; 4], 0));
        let mut d = s.clone();
        let mut v = s.values();
        // alloc_objects and alloc_space are cumulative; inuse_* stay as they are now.
        for (x, b) in v.iter_mut().zip(vals).take(2) {
            *x -= b;
        }
        if v.iter().all(|x| x.abs() < 0.5) {
            continue;
        }
        d.set_values(v);
        d.samples = s.samples.saturating_sub(n);
        out.samples.push(d);
    }
    let m = &mut out.meta;
    m.start_ns = base.meta.time_ns;
    m.samples = new.meta.samples.saturating_sub(base.meta.samples);
    m.truncated = new.meta.truncated.saturating_sub(base.meta.truncated);
    m.dropped = new.meta.dropped.saturating_sub(base.meta.dropped);
    m.reason = "window".into();
    out
}

/// The gzipped pprof bytes a scraper gets: `p` with `labels` on every sample (backends group by
/// them) and in a comment, and `default` as the sample type pprof shows first.
pub fn encode(p: &Profile, default: SampleIndex, labels: &[(String, String)]) -> Result<Vec<u8>> {
    use prost::Message;
    let mut m = memlens_profile::pprof::to_proto(p);
    let mut ids: HashMap<String, i64> = m
        .string_table
        .iter()
        .enumerate()
        .map(|(i, s)| (s.clone(), i as i64))
        .collect();
    let mut id = |m: &mut proto::Profile, s: &str| -> i64 {
        *ids.entry(s.to_string()).or_insert_with(|| {
            m.string_table.push(s.to_string());
            m.string_table.len() as i64 - 1
        })
    };
    let pairs: Vec<(i64, i64)> = labels
        .iter()
        .map(|(k, v)| (id(&mut m, k), id(&mut m, v)))
        .collect();
    for s in &mut m.sample {
        for &(key, str) in &pairs {
            s.label.push(proto::Label {
                key,
                str,
                num: 0,
                num_unit: 0,
            });
        }
    }
    let text: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let c = id(&mut m, &format!("memlens serve: {}", text.join(" ")));
    m.comment.push(c);
    m.default_sample_type = id(&mut m, default.name());
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&m.encode_to_vec())?;
    Ok(gz.finish()?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use memlens_profile::model::{Function, Line, Location, Sample};

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

    #[test]
    fn window_holds_new_allocations_and_the_live_heap_now() {
        // Location ids differ between the two dumps; addresses match the stacks. 0x20 allocated
        // nothing in between and holds nothing live: left out.
        let base = profile(&[
            (0x10, [1.0, 100.0, 1.0, 100.0]),
            (0x20, [2.0, 64.0, 0.0, 0.0]),
        ]);
        let new = profile(&[
            (0x20, [2.0, 64.0, 0.0, 0.0]),
            (0x10, [3.0, 300.0, 2.0, 200.0]),
            (0x30, [1.0, 8.0, 1.0, 8.0]),
        ]);
        let d = delta(&base, &new);
        let got: Vec<(String, [f64; 4])> = d
            .samples
            .iter()
            .map(|s| (d.frames(s)[0].function.clone(), s.values()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("f16".to_string(), [2.0, 200.0, 2.0, 200.0]),
                ("f48".to_string(), [1.0, 8.0, 1.0, 8.0]),
            ]
        );
    }

    #[test]
    fn labels_on_every_sample() {
        use prost::Message;
        use std::io::Read;
        let p = profile(&[(0x10, [1.0, 100.0, 1.0, 100.0])]);
        let labels = vec![("service".to_string(), "redis-server".to_string())];
        let gz = encode(&p, SampleIndex::InuseSpace, &labels).unwrap();
        let mut raw = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut raw)
            .unwrap();
        let m = proto::Profile::decode(&raw[..]).unwrap();
        let st = &m.string_table;
        assert_eq!(st[m.default_sample_type as usize], "inuse_space");
        let l = &m.sample[0].label;
        assert!(l
            .iter()
            .any(|l| st[l.key as usize] == "service" && st[l.str as usize] == "redis-server"));
        // Still a profile our own reader accepts.
        assert_eq!(
            memlens_profile::pprof::decode(&gz).unwrap().samples.len(),
            1
        );
    }
}
