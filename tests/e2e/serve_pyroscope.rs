//! The two roads from `memlens serve` to Grafana Pyroscope, checked against the program's own
//! count (the logging program of `parca.rs`: 48 MiB held, ~20 MB/s allocated and freed, a leak of
//! a given rate on top):
//!
//! * **Alloy scrapes** `/debug/pprof/allocs` (cumulative) and sends Pyroscope the difference of
//!   consecutive scrapes, matching samples by stack *and every label*: a stack keeps its labels from
//!   one scrape to the next, and the difference computed Alloy's way is what the program allocated
//!   between the two scrapes.
//! * **`memlens serve --push`** sends each window's allocations and the heap at its end to the real
//!   Pyroscope server in `../shared/tools/pyroscope` (its README): asked back, the `inuse_space`
//!   series (averaged, as Pyroscope's documentation says to read a gauge) is what each process
//!   held, the `alloc_space` series what it allocated in each window, and the flame graphs of one
//!   window the same; within 5 % of the program's own count. Without `../shared` (a user's clone)
//!   that test prints one `SKIPPED:` line.
use crate::parca::{shared_tool, target_program, Log};
use crate::serve::{Server, Target};
use crate::util::*;
use memlens_profile::proto;
use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A label as Alloy hashes it: key, string value, number, unit (all resolved to text).
type Label = (String, String, i64, String);

/// A sample's identity for Alloy: its location addresses and its labels, sorted.
type Identity = (Vec<u64>, Vec<Label>);

/// A gzipped pprof, decoded.
fn decode(gz: &[u8]) -> proto::Profile {
    use prost::Message;
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(gz)
        .read_to_end(&mut raw)
        .expect("a gzip stream");
    proto::Profile::decode(&raw[..]).expect("a pprof profile")
}

/// Each sample of `m` as Alloy identifies it: the addresses of its locations and its labels
/// sorted, with its values.
fn identified(m: &proto::Profile) -> Vec<(Identity, Vec<i64>)> {
    let st = |i: i64| m.string_table[i as usize].clone();
    let addr: HashMap<u64, u64> = m.location.iter().map(|l| (l.id, l.address)).collect();
    m.sample
        .iter()
        .map(|s| {
            let stack = s.location_id.iter().map(|id| addr[id]).collect();
            let mut labels: Vec<Label> = s
                .label
                .iter()
                .map(|l| (st(l.key), st(l.str), l.num, st(l.num_unit)))
                .collect();
            labels.sort();
            ((stack, labels), s.value.clone())
        })
        .collect()
}

/// The index of sample type `name` in `m`.
fn type_index(m: &proto::Profile, name: &str) -> usize {
    m.sample_type
        .iter()
        .position(|t| m.string_table[t.r#type as usize] == name)
        .unwrap_or_else(|| panic!("no sample type {name}"))
}

/// Grafana Alloy's delta of a memory profile, as `pyroscope.scrape` computes it before sending
/// (grafana/alloy at 66ebea8, internal/component/pyroscope/scrape/internal/fastdelta: `DeltaMap`'s
/// `UpdateSample` and `Delta` in delta_map.go, keyed by `Hasher.Sample` in hasher.go, the hash of
/// the location addresses and of each label's key, num_unit, num and str, sorted; the delta types
/// of `pprofMemory` in delta_profiles.go are `alloc_objects` and `alloc_space`): samples of one
/// identity are added up, `alloc_*` minus what the previous scrape had under the same identity (0
/// for an identity it did not have), other values as they are, all-zero samples dropped. Returns
/// the `alloc_space` of every sample of the delta.
fn alloy_delta(prev: &proto::Profile, next: &proto::Profile) -> Vec<i64> {
    let sum = |m: &proto::Profile| {
        let (objects, space) = (type_index(m, "alloc_objects"), type_index(m, "alloc_space"));
        let mut by_id: BTreeMap<Identity, [i64; 2]> = BTreeMap::new();
        for (id, v) in identified(m) {
            let e = by_id.entry(id).or_default();
            e[0] += v[objects];
            e[1] += v[space];
        }
        by_id
    };
    let old = sum(prev);
    sum(next)
        .into_iter()
        .filter_map(|(id, v)| {
            let o = old.get(&id).copied().unwrap_or_default();
            let d = [v[0] - o[0], v[1] - o[1]];
            (d != [0, 0]).then_some(d[1])
        })
        .collect()
}

/// Two consecutive scrapes of `/debug/pprof/allocs` (cumulative, as Alloy asks for a memory
/// profile with `delta = false`): every stack has the same labels in both, and the difference
/// Alloy computes from them is what the program allocated between the two (its own count, at the
/// profiles' times) within 5 %. Before memlens dropped the per-stack sample count label, each stack
/// read as new at every scrape and the difference was the whole cumulative profile (2.0× … 8.1×).
#[test]
fn alloy_deltas_of_consecutive_allocs_scrapes_are_what_was_allocated_between_them() {
    let tmp = test_dir();
    let ctl = ctl_dir(&tmp);
    let prog = target_program(&tmp);
    let t = Target::start(&ctl, &tmp.join("a"), &prog, "0", &["--interval", "8K"]);
    wait_for("the leak", 30, || t.dir.join("leaked").exists());
    let server = Server::start(&ctl, &[]);
    let path = format!("/debug/pprof/allocs?pid={}", t.pid);
    let scrape = || {
        let (st, body) = server.get(&path);
        assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
        decode(&body)
    };
    let mut scrapes = vec![scrape()];
    for _ in 0..2 {
        // pacing on purpose: a scrape interval, for the program to allocate ~60 MB in
        std::thread::sleep(Duration::from_secs(3));
        scrapes.push(scrape());
    }
    let log = Log::read(&t.dir);
    for pair in scrapes.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        // The same stack, the same labels.
        let labels = |m: &proto::Profile| -> BTreeMap<Vec<u64>, Vec<Label>> {
            identified(m).into_iter().map(|(id, _)| id).collect()
        };
        let (la, lb) = (labels(a), labels(b));
        let common: Vec<&Vec<u64>> = la.keys().filter(|k| lb.contains_key(*k)).collect();
        assert!(common.len() >= 2, "stacks in both scrapes: {common:?}");
        for k in common {
            assert_eq!(la[k], lb[k], "the labels of stack {k:x?} changed");
        }
        let delta: i64 = alloy_delta(a, b).iter().sum();
        let allocated =
            log.allocated_at(b.time_nanos as u64) - log.allocated_at(a.time_nanos as u64);
        let ratio = delta as f64 / allocated;
        eprintln!(
            "alloy delta: {delta} bytes of alloc_space over {:.2} s, the program allocated {allocated:.0} (ratio {ratio:.3})",
            (b.time_nanos - a.time_nanos) as f64 / 1e9
        );
        assert!(allocated > 20e6, "the program allocated {allocated} bytes");
        assert!((ratio - 1.0).abs() < 0.05, "delta {delta} vs {allocated}");
    }
    drop(server);
    let (code, _, err) = t.finish();
    assert_eq!(code, 0, "{err}");
}

/// A running Pyroscope (single process, every listener on 127.0.0.1), its HTTP API on `port`;
/// killed on drop.
pub(crate) struct Pyroscope {
    child: Child,
    pub(crate) port: u16,
}

impl Pyroscope {
    pub(crate) fn start(sh: &Path, dir: &Path) -> Pyroscope {
        // It listens on the port and the next two (gRPC, memberlist): a free port whose next two
        // are free too.
        let port = loop {
            let p = free_port();
            let free = |q: u16| std::net::TcpListener::bind(("127.0.0.1", q)).is_ok();
            if p < 65000 && free(p + 1) && free(p + 2) {
                break p;
            }
        };
        let log = std::fs::File::create(dir.join("pyroscope.log")).unwrap();
        let child = Command::new(sh)
            .arg(dir.join("data"))
            .arg(port.to_string())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("cannot start pyroscope.sh");
        let mut p = Pyroscope { child, port };
        wait_for("Pyroscope to be ready", 120, || {
            assert!(
                p.child.try_wait().unwrap().is_none(),
                "Pyroscope ended: {}",
                std::fs::read_to_string(dir.join("pyroscope.log")).unwrap_or_default()
            );
            Command::new("curl")
                .args(["-s", &format!("http://127.0.0.1:{port}/ready")])
                .out()
                .stdout
                .starts_with(b"ready")
        });
        p
    }

    /// POST `body` to the querier's Connect API method `method`: its JSON answer.
    pub(crate) fn query(&self, method: &str, body: serde_json::Value) -> serde_json::Value {
        let url = format!(
            "http://127.0.0.1:{}/querier.v1.QuerierService/{method}",
            self.port
        );
        let o = Command::new("curl")
            .args(["-sS", "-H", "Content-Type: application/json", "-d"])
            .arg(body.to_string())
            .arg(url)
            .ok_stdout();
        serde_json::from_str(&o).unwrap_or_else(|e| panic!("{method}: {e}: {o}"))
    }

    /// The points (ms, value) of `profile_type`'s series for `selector` over the last `secs`
    /// seconds: one point per profile (a step of a millisecond), aggregated by `aggregation`.
    pub(crate) fn series(
        &self,
        profile_type: &str,
        selector: &str,
        aggregation: &str,
        secs: u64,
    ) -> Vec<(u64, f64)> {
        let end = now_ms() + 1000;
        let v = self.query(
            "SelectSeries",
            serde_json::json!({
                "profileTypeID": profile_type,
                "labelSelector": selector,
                "start": end - secs * 1000,
                "end": end,
                "step": 0.001,
                "aggregation": aggregation,
            }),
        );
        let series = v["series"].as_array().cloned().unwrap_or_default();
        assert!(series.len() <= 1, "one series for {selector}: {v}");
        series
            .iter()
            .flat_map(|s| s["points"].as_array().cloned().unwrap_or_default())
            .map(|p| {
                let ts = p["timestamp"]
                    .as_str()
                    .and_then(|t| t.parse().ok())
                    .unwrap_or_else(|| p["timestamp"].as_u64().unwrap());
                (ts, p["value"].as_f64().unwrap_or(0.0))
            })
            .collect()
    }

    /// The flame graph of `profile_type` for `selector` over [start, end] ms: its total and the
    /// self value of each function.
    pub(crate) fn flame(
        &self,
        profile_type: &str,
        selector: &str,
        start: u64,
        end: u64,
    ) -> (f64, HashMap<String, f64>) {
        let v = self.query(
            "SelectMergeStacktraces",
            serde_json::json!({
                "profileTypeID": profile_type,
                "labelSelector": selector,
                "start": start,
                "end": end,
            }),
        );
        let fg = &v["flamegraph"];
        let num = |x: &serde_json::Value| {
            x.as_str()
                .and_then(|s| s.parse::<f64>().ok())
                .or_else(|| x.as_f64())
                .unwrap_or(0.0)
        };
        let names: Vec<String> = fg["names"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| n.as_str().unwrap_or("").to_string())
            .collect();
        let mut selfs: HashMap<String, f64> = HashMap::new();
        for level in fg["levels"].as_array().into_iter().flatten() {
            // Each node is four numbers: offset, total, self, name index.
            let vals: Vec<f64> = level["values"]
                .as_array()
                .into_iter()
                .flatten()
                .map(num)
                .collect();
            for node in vals.chunks(4).filter(|n| n.len() == 4) {
                *selfs.entry(names[node[3] as usize].clone()).or_default() += node[2];
            }
        }
        (num(&fg["total"]), selfs)
    }
}

impl Drop for Pyroscope {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The push window of the test, in seconds.
const EVERY: u64 = 5;
/// Windows each process must have pushed before the test reads them back.
const WINDOWS: usize = 7;

/// `memlens serve --push` of two programs that hold 48 MiB, leak 2 MB/s more and allocate ~20 MB/s,
/// their command lines rewritten to `push_target *:16379` as redis does: Pyroscope has a series per
/// process (service_name `push_target`, pid, host); the `inuse_space` series (averaged, one point
/// per push) is what each process held at each push, the `alloc_space` series (summed) what it
/// allocated in each window, and the flame graphs of one window and of a range the same, all within
/// 5 % of the program's own count.
#[test]
fn pyroscope_shows_the_heap_held_and_the_allocations_of_each_window_pushed() {
    let name =
        "serve_pyroscope::pyroscope_shows_the_heap_held_and_the_allocations_of_each_window_pushed";
    let Some(sh) = shared_tool(name, "pyroscope/pyroscope.sh") else {
        return;
    };
    let tmp = test_dir();
    let ctl = ctl_dir(&tmp);
    let prog = target_program(&tmp);
    let pdir = tmp.join("pyroscope");
    std::fs::create_dir(&pdir).unwrap();
    let pyro = Pyroscope::start(&sh, &pdir);
    let targets: Vec<Target> = (0..2)
        .map(|i| {
            let dir = tmp.join(format!("t{i}"));
            std::fs::create_dir_all(&dir).unwrap();
            // Target::start passes DIR MODE: MODE is the leak's rate; the title follows it.
            start_titled(&ctl, &dir, &prog, "2000000", "push_target *:16379")
        })
        .collect();
    for t in &targets {
        wait_for("the leak", 30, || t.dir.join("leaked").exists());
    }
    let log_file = tmp.join("push.log");
    let mut pusher = memlens()
        .args(["serve", "--push"])
        .arg(format!("http://127.0.0.1:{}", pyro.port))
        .args(["--push-every", &EVERY.to_string()])
        .env("MEMLENS_CTL_DIR", &ctl)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_file).unwrap())
        .spawn()
        .unwrap();
    let inuse = "memory:inuse_space:bytes:space:bytes";
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    let host = host.trim();
    let secs = 300;
    wait_for("the pushes", 120, || {
        assert!(
            pusher.try_wait().unwrap().is_none(),
            "the pusher ended: {}",
            std::fs::read_to_string(&log_file).unwrap_or_default()
        );
        targets.iter().all(|t| {
            let sel = format!("{{service_name=\"push_target\",pid=\"{}\"}}", t.pid);
            pyro.series(inuse, &sel, "TIME_SERIES_AGGREGATION_TYPE_AVERAGE", secs)
                .len()
                > WINDOWS
        })
    });
    for t in &targets {
        let sel = format!("{{service_name=\"push_target\",pid=\"{}\"}}", t.pid);
        let labels = pyro.query(
            "Series",
            serde_json::json!({"matchers": [sel.clone()], "start": now_ms() - secs * 1000, "end": now_ms() + 1000}),
        );
        let text = labels.to_string();
        for (k, v) in [("service_name", "push_target"), ("pid", &t.pid.to_string())] {
            let l = format!("{{\"name\":\"{k}\",\"value\":\"{v}\"}}");
            assert!(text.contains(&l), "{l} in {text}");
        }
        // The host as it is, when it is a valid name already (else sanitized as a service name).
        if host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
        {
            let l = format!("{{\"name\":\"host\",\"value\":\"{host}\"}}");
            assert!(text.contains(&l), "{l} in {text}");
        }
        check_pushed(&pyro, t, &sel, secs);
    }
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(pusher.id() as i32, libc::SIGTERM) };
    assert_eq!(pusher.wait().unwrap().code(), Some(0));
    let said = std::fs::read_to_string(&log_file).unwrap();
    assert!(!said.contains("warning"), "{said}");
    for t in targets {
        let (code, _, err) = t.finish();
        assert_eq!(code, 0, "{err}");
    }
}

/// `memlens run --interval 8K -- PROG DIR GROW TITLE` in the control directory `ctl`.
fn start_titled(ctl: &Path, dir: &Path, prog: &Path, grow: &str, title: &str) -> Target {
    Target::start_with(ctl, dir, prog, &[grow, title], &["--interval", "8K"])
}

/// The largest |got / want − 1| of `pairs` (got, want, what), asserting each is under 5 %.
fn within_5_percent(pairs: &[(f64, f64, String)]) -> f64 {
    let mut worst: f64 = 0.0;
    for (got, want, what) in pairs {
        let r = got / want;
        worst = worst.max((r - 1.0).abs());
        assert!((r - 1.0).abs() < 0.05, "{what}: {got} vs {want}");
    }
    worst
}

/// What Pyroscope holds of process `t` (`sel`) against its own log, within 5 %: each inuse point,
/// each alloc window, the flame graph of one push and of the allocations of a range.
fn check_pushed(pyro: &Pyroscope, t: &Target, sel: &str, secs: u64) {
    let log = Log::read(&t.dir);
    let heap = pyro.series(
        "memory:inuse_space:bytes:space:bytes",
        sel,
        "TIME_SERIES_AGGREGATION_TYPE_AVERAGE",
        secs,
    );
    let allocs = pyro.series(
        "memory:alloc_space:bytes:space:bytes",
        sel,
        "TIME_SERIES_AGGREGATION_TYPE_SUM",
        secs,
    );
    // One point per push, a window apart: nothing added up.
    for w in heap.windows(2) {
        let gap = w[1].0 - w[0].0;
        assert!(
            (EVERY * 1000 - 1500..EVERY * 1000 + 1500).contains(&gap),
            "pushes {gap} ms apart: {heap:?}"
        );
    }
    let pairs: Vec<(f64, f64, String)> = heap
        .iter()
        .map(|&(ts, v)| {
            let held = log.held_at(ts * 1_000_000) as f64;
            (v, held, format!("pid {}: inuse at {ts} vs held", t.pid))
        })
        .collect();
    let worst = within_5_percent(&pairs);
    eprintln!(
        "pyroscope: pid {} inuse_space series: {} points, each within {:.1} % of what it held ({:.1} → {:.1} MB)",
        t.pid,
        heap.len(),
        worst * 100.0,
        heap[0].1 / 1e6,
        heap.last().unwrap().1 / 1e6
    );
    // Each alloc point is the window that ended at its push, which began at the push before.
    assert!(allocs.len() + 1 >= heap.len(), "{allocs:?} vs {heap:?}");
    let pairs: Vec<(f64, f64, String)> = allocs
        .iter()
        .map(|&(ts, v)| {
            let prev = heap
                .iter()
                .rev()
                .find(|h| h.0 < ts)
                .unwrap_or_else(|| panic!("no push before {ts}: {heap:?}"))
                .0;
            let made = log.allocated_at(ts * 1_000_000) - log.allocated_at(prev * 1_000_000);
            (
                v,
                made,
                format!("pid {}: window ending {ts}: alloc vs allocated", t.pid),
            )
        })
        .collect();
    let worst = within_5_percent(&pairs);
    eprintln!(
        "pyroscope: pid {} alloc_space series: {} windows, each within {:.1} % of what it allocated (~{:.0} MB)",
        t.pid,
        allocs.len(),
        worst * 100.0,
        allocs[0].1 / 1e6
    );
    // The flame graph of one push (a range holding that push only) is the heap then.
    let (at, _) = heap[heap.len() / 2];
    let half = EVERY * 1000 / 2;
    let (total, selfs) = pyro.flame(
        "memory:inuse_space:bytes:space:bytes",
        sel,
        at - half,
        at + half,
    );
    let held = log.held_at(at * 1_000_000) as f64;
    let leak = selfs.get("leak_alloc").copied().unwrap_or(0.0);
    eprintln!(
        "pyroscope: pid {} inuse_space flame graph of one push: {total:.0} bytes, held {held:.0} (ratio {:.3}), leak_alloc {:.1} %",
        t.pid,
        total / held,
        leak / total * 100.0
    );
    assert!((total / held - 1.0).abs() < 0.05, "{total} vs {held}");
    assert!(
        leak > 0.95 * total,
        "leak_alloc {leak} of {total}: {selfs:?}"
    );
    // The flame graph of the allocations over the windows after the first push: what was
    // allocated from that push to the last.
    let (first, last) = (heap[0].0, allocs.last().unwrap().0);
    let (total, selfs) = pyro.flame("memory:alloc_space:bytes:space:bytes", sel, first + 1, last);
    let made = log.allocated_at(last * 1_000_000) - log.allocated_at(first * 1_000_000);
    eprintln!(
        "pyroscope: pid {} alloc_space flame graph of {:.0} s: {total:.0} bytes, allocated {made:.0} (ratio {:.3})",
        t.pid,
        (last - first) as f64 / 1e3,
        total / made
    );
    assert!((total / made - 1.0).abs() < 0.05, "{total} vs {made}");
    assert!(
        selfs.get("churn_alloc").copied().unwrap_or(0.0) > 0.8 * total,
        "{selfs:?}"
    );
}
