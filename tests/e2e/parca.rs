//! A real continuous-profiling engine takes `memlens serve` at its word: the Parca server in
//! `../shared/tools/parca` (see its README) scrapes `memlens run --serve` of a program that holds a
//! known heap and allocates at a logged rate, and `memlens serve` of a program loaded `--inactive`
//! found through `/sd`; its query API (QueryService over the HTTP/JSON gateway) is asked back:
//!
//! * `inuse_space` is stored as a snapshot type, its latest value within 10 % of what the program
//!   holds (the program's own count of the bytes it asked malloc for and kept);
//! * `alloc_space` of `allocs?seconds=N` windows is stored as a delta type and the windows add up
//!   to the bytes the program allocated in them within 10 % (its log, read at each window's ends);
//! * function names and source lines come through (Parca's own pprof of what it stored).
//!
//! Without `../shared/tools/parca` (a user's clone) each test prints one `SKIPPED:` line.
use crate::serve::{Server, Target};
use crate::util::*;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

/// How often Parca scrapes, and the `seconds` of its windows (Parca sets them to the interval).
const INTERVAL: &str = "1s";
/// Windows each test waits for.
const WINDOWS: usize = 6;

/// parca_target.c: holds a known heap, leaks at a given rate and allocates at a steady, logged
/// rate (also the leaking program of scripts/pyroscope-push.sh).
const TARGET: &str = include_str!("parca_target.c");

/// The source line whose text contains `marker`, 1-based.
fn line_of(marker: &str) -> usize {
    TARGET
        .lines()
        .position(|l| l.contains(marker))
        .expect("marker in the source")
        + 1
}

/// The test program, compiled in `dir`.
pub(crate) fn target_program(dir: &Path) -> PathBuf {
    let src = dir.join("parca_target.c");
    std::fs::write(&src, TARGET).unwrap();
    compile(&src, dir, "parca_target", &[])
}

/// A point of a Parca series: (time ns, value, duration ns; 0 for a snapshot).
pub(crate) type Point = (u64, i64, u64);

/// The program's log: (realtime ns, bytes allocated so far, bytes held).
pub(crate) struct Log(pub(crate) Vec<(u64, u64, u64)>);

impl Log {
    pub(crate) fn read(dir: &Path) -> Log {
        let text = std::fs::read_to_string(dir.join("log")).unwrap_or_default();
        Log(text
            .lines()
            .filter_map(|l| {
                let v: Vec<u64> = l.split(' ').filter_map(|x| x.parse().ok()).collect();
                (v.len() == 3).then(|| (v[0], v[1], v[2]))
            })
            .collect())
    }

    /// Bytes allocated by time `ns`, interpolated between the log's lines (a millisecond apart).
    pub(crate) fn allocated_at(&self, ns: u64) -> f64 {
        let i = self.0.partition_point(|e| e.0 < ns);
        match (i.checked_sub(1).map(|j| self.0[j]), self.0.get(i)) {
            (Some(a), Some(b)) => {
                a.1 as f64 + (b.1 - a.1) as f64 * (ns - a.0) as f64 / (b.0 - a.0).max(1) as f64
            }
            (Some(a), None) => a.1 as f64,
            (None, Some(b)) => b.1 as f64,
            (None, None) => 0.0,
        }
    }

    fn held(&self) -> u64 {
        self.0.last().map_or(0, |e| e.2)
    }

    /// Bytes held at time `ns`: the last line's at or before it.
    pub(crate) fn held_at(&self, ns: u64) -> u64 {
        let i = self.0.partition_point(|e| e.0 <= ns);
        i.checked_sub(1).map_or(0, |j| self.0[j].2)
    }
}

/// The script `path` of a real server in `../shared/tools` (`parca/parca.sh`), or None (after
/// printing why) when this clone has none.
pub(crate) fn shared_tool(test: &str, path: &str) -> Option<PathBuf> {
    let sh = root().join("../shared/tools").join(path);
    if sh.exists() {
        return Some(sh);
    }
    eprintln!(
        "SKIPPED: {test}: no {} (a clone without ../shared)",
        sh.display()
    );
    None
}

/// The Parca server for tests (see [`shared_tool`]).
pub(crate) fn parca_sh(test: &str) -> Option<PathBuf> {
    shared_tool(test, "parca/parca.sh")
}

/// A running Parca, its API on `port`; killed on drop.
pub(crate) struct Parca {
    child: Child,
    port: u16,
}

impl Parca {
    /// Start Parca in `dir` with `scrape_configs` (YAML, indented as a list under the key).
    fn start(sh: &Path, dir: &Path, scrape_configs: &str) -> Parca {
        let config = format!(
            "object_storage:\n  bucket: {{type: \"FILESYSTEM\", config: {{directory: \"{}\"}}}}\nscrape_configs:\n{scrape_configs}",
            dir.join("data").display()
        );
        std::fs::write(dir.join("parca.yaml"), config).unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.join("parca.log")).unwrap();
        let child = Command::new(sh)
            .arg(format!(
                "--config-path={}",
                dir.join("parca.yaml").display()
            ))
            .arg(format!("--http-address=127.0.0.1:{port}"))
            .arg("--storage-active-memory=67108864")
            .current_dir(dir)
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("cannot start parca.sh");
        let mut p = Parca { child, port };
        wait_for("Parca's API", 60, || {
            assert!(
                p.child.try_wait().unwrap().is_none(),
                "Parca ended: {}",
                std::fs::read_to_string(dir.join("parca.log")).unwrap_or_default()
            );
            p.api("/profiles/types", &[]).is_some()
        });
        p
    }

    /// Parca with `scrape_configs`, its files in `tmp/parca`.
    pub(crate) fn start_in(sh: &Path, tmp: &Path, scrape_configs: &str) -> Parca {
        let dir = tmp.join("parca");
        std::fs::create_dir(&dir).unwrap();
        Parca::start(sh, &dir, scrape_configs)
    }

    /// GET `/api{path}` with `params`: the JSON answer, or None for an error (Parca's gateway
    /// answers one with its web UI's placeholder page, e.g. when there is no data yet).
    fn api(&self, path: &str, params: &[(&str, &str)]) -> Option<serde_json::Value> {
        let mut cmd = Command::new("curl");
        cmd.args([
            "-sS",
            "-G",
            &format!("http://127.0.0.1:{}/api{path}", self.port),
        ]);
        for (k, v) in params {
            cmd.arg("--data-urlencode").arg(format!("{k}={v}"));
        }
        let o = cmd.out();
        serde_json::from_slice(&o.stdout).ok()
    }

    /// The profile types Parca has: (name:sample_type, delta).
    fn types(&self) -> Vec<(String, bool)> {
        let v = self.api("/profiles/types", &[]).unwrap();
        v["types"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                (
                    format!(
                        "{}:{}",
                        t["name"].as_str().unwrap(),
                        t["sampleType"].as_str().unwrap()
                    ),
                    t["delta"].as_bool().unwrap_or(false),
                )
            })
            .collect()
    }

    /// QueryRange over the last two minutes with a step of a millisecond (one point per profile),
    /// series split by the labels `sum_by` (a delta query sums all series into one without):
    /// (labels, [(time ns, value, duration ns)]) of each series.
    pub(crate) fn range(
        &self,
        query: &str,
        sum_by: &[&str],
    ) -> Vec<(serde_json::Value, Vec<Point>)> {
        let now = now_s();
        let (start, end) = (rfc3339(now - 120), rfc3339(now + 1));
        let mut params = vec![
            ("query", query),
            ("start", &start),
            ("end", &end),
            ("step", "0.001s"),
        ];
        params.extend(sum_by.iter().map(|l| ("sum_by", *l)));
        let Some(v) = self.api("/profiles/query_range", &params) else {
            return Vec::new();
        };
        v["series"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                let points = s["samples"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| {
                        let num = |k: &str| p[k].as_str().and_then(|x| x.parse::<i64>().ok());
                        (
                            parse_rfc3339(p["timestamp"].as_str().unwrap()),
                            num("value").unwrap_or(0),
                            num("duration").unwrap_or(0) as u64,
                        )
                    })
                    .collect();
                (s["labelset"].clone(), points)
            })
            .collect()
    }

    /// What Parca stored for `query` over the last 3 s, as pprof (its REPORT_TYPE_PPROF), read
    /// by `go tool pprof -raw`.
    pub(crate) fn pprof_raw(&self, query: &str, tmp: &Path) -> String {
        let now = now_s();
        let (start, end) = (rfc3339(now - 3), rfc3339(now + 1));
        let v = self
            .api(
                "/profiles/query",
                &[
                    ("mode", "MODE_MERGE"),
                    ("merge.query", query),
                    ("merge.start", &start),
                    ("merge.end", &end),
                    ("report_type", "REPORT_TYPE_PPROF"),
                ],
            )
            .unwrap_or_else(|| panic!("no pprof report for {query}"));
        let b64 = v["pprof"].as_str().expect("a pprof field");
        let mut dec = Command::new("base64")
            .arg("-d")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        dec.stdin.take().unwrap().write_all(b64.as_bytes()).unwrap();
        let o = dec.wait_with_output().unwrap();
        let f = tmp.join("parca-report.pb.gz");
        std::fs::write(&f, &o.stdout).unwrap();
        Command::new("go")
            .args(["tool", "pprof", "-raw"])
            .arg(&f)
            .env("PPROF_TMPDIR", tmp)
            .ok_stdout()
    }
}

impl Drop for Parca {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Days since 1970-01-01 of a proleptic Gregorian date, and back (H. Hinnant's algorithms).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719468;
    let era = z.div_euclid(146097);
    let doe = z - era * 146097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `secs` since the epoch as RFC 3339 (UTC), as Parca's gateway takes a timestamp.
fn rfc3339(secs: u64) -> String {
    let (days, rem) = ((secs / 86400) as i64, secs % 86400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// An RFC 3339 UTC timestamp (`2026-11-24T18:42:32.137Z`) in ns since the epoch.
fn parse_rfc3339(s: &str) -> u64 {
    let n = |a: usize, b: usize| s[a..b].parse::<i64>().unwrap();
    let days = days_from_civil(n(0, 4), n(5, 7), n(8, 10));
    let secs = days * 86400 + n(11, 13) * 3600 + n(14, 16) * 60 + n(17, 19);
    let frac = s[19..].trim_end_matches('Z').trim_start_matches('.');
    let nanos: u64 = format!("{frac:0<9}")[..9].parse().unwrap_or(0);
    secs as u64 * 1_000_000_000 + nanos
}

/// What a pprof job of one profile (others off) looks like in Parca's configuration, with the
/// server's token (its file) as the bearer token of every scrape.
fn job(name: &str, targets: &str, profiles: &str, token_file: &Path) -> String {
    format!(
        "  - job_name: \"{name}\"\n    scrape_interval: \"{INTERVAL}\"\n{}{targets}    profiling_config:\n      pprof_config:\n{profiles}        process_cpu: {{enabled: false}}\n        block: {{enabled: false}}\n        goroutine: {{enabled: false}}\n        mutex: {{enabled: false}}\n",
        authorization(token_file, "    ")
    )
}

/// A job of `allocs?seconds=` windows of every process that `memlens serve` on `port` lists at
/// `/sd` (the discovery request carries the token too), `more` (e.g. `relabel_configs`, indented
/// as a key of the job) after the discovery.
pub(crate) fn sd_allocs_job(name: &str, port: u16, token_file: &Path, more: &str) -> String {
    let sd = format!(
        "    http_sd_configs:\n      - url: \"http://127.0.0.1:{port}/sd\"\n        refresh_interval: \"1s\"\n{}{more}",
        authorization(token_file, "        ")
    );
    job(
        name,
        &sd,
        "        memory: {enabled: true, path: /debug/pprof/allocs, delta: true}\n",
        token_file,
    )
}

/// Parca's (Prometheus's) `authorization` block sending the token in `file` as a bearer token,
/// indented by `indent`.
fn authorization(file: &Path, indent: &str) -> String {
    format!(
        "{indent}authorization: {{type: Bearer, credentials_file: \"{}\"}}\n",
        file.display()
    )
}

/// The windows' `alloc_space` points (time, value, duration) against the bytes the program's log
/// says it allocated in each: (stored, allocated) in all. Points that began before the log did
/// are left out (nothing to compare with).
fn windows_vs_log(points: &[Point], log: &Log) -> (f64, f64) {
    let first = log.0.first().map_or(u64::MAX, |e| e.0);
    let mut stored = 0.0;
    let mut allocated = 0.0;
    for &(t, v, d) in points {
        assert!(d > 0, "a window without a duration: {points:?}");
        if t.saturating_sub(d) < first {
            continue;
        }
        stored += v as f64;
        allocated += log.allocated_at(t) - log.allocated_at(t - d);
    }
    (stored, allocated)
}

/// `memlens run --serve` of a program holding 48 MiB: Parca scrapes its heap (a snapshot type,
/// the latest value within 10 % of the bytes held), `allocs?seconds=1` windows (a delta type;
/// they add up to the bytes allocated within 10 %) and `/debug/pprof/lifetimes` (memlens' own
/// types, snapshots too); what it stored names leak_alloc and churn_alloc at their lines.
#[test]
fn parca_stores_heap_snapshots_and_alloc_windows_of_run_serve() {
    let Some(sh) = parca_sh("parca::parca_stores_heap_snapshots_and_alloc_windows_of_run_serve")
    else {
        return;
    };
    let tmp = test_dir();
    let ctl = ctl_dir(&tmp);
    let prog = target_program(&tmp);
    let dir = tmp.join("a");
    std::fs::create_dir(&dir).unwrap();
    let mut server = Server::run_serve(&ctl, "32K", &dir, &prog, &[]);
    wait_for("the leak", 30, || dir.join("leaked").exists());
    let static_target = format!(
        "    static_configs: [{{targets: [\"127.0.0.1:{}\"]}}]\n",
        server.port
    );
    let configs = job(
        "heap",
        &static_target,
        "        memory: {enabled: true, path: /debug/pprof/heap}\n        memlens_lifetimes: {enabled: true, path: /debug/pprof/lifetimes}\n",
        &server.token_file,
    ) + &job(
        "allocs",
        &static_target,
        "        memory: {enabled: true, path: /debug/pprof/allocs, delta: true}\n",
        &server.token_file,
    );
    let pdir = tmp.join("parca");
    std::fs::create_dir(&pdir).unwrap();
    let parca = Parca::start(&sh, &pdir, &configs);
    let heap_q = "memory:inuse_space:bytes:space:bytes{job=\"heap\"}";
    let allocs_q = "memory:alloc_space:bytes:space:bytes:delta{job=\"allocs\"}";
    let mut windows = Vec::new();
    wait_for("Parca to store the windows", 60, || {
        windows = parca
            .range(allocs_q, &[])
            .into_iter()
            .flat_map(|s| s.1)
            .collect();
        windows.len() > WINDOWS
    });

    let types = parca.types();
    for (t, delta) in [
        ("memory:inuse_space", false),
        ("memory:alloc_space", true),
        ("memlens_lifetimes:peak_space", false),
    ] {
        assert!(
            types.contains(&(t.to_string(), delta)),
            "{t} with delta={delta} in {types:?}"
        );
    }
    // The heap: snapshots, each the bytes held then (they do not add up over the scrapes).
    let log = Log::read(&dir);
    let held = log.held() as f64;
    let heap: Vec<Point> = parca
        .range(heap_q, &[])
        .into_iter()
        .flat_map(|s| s.1)
        .collect();
    assert!(heap.len() >= 3, "{heap:?}");
    let latest = heap.last().unwrap();
    eprintln!(
        "parca: inuse_space latest {} bytes, held {held} bytes (ratio {:.3}; {} snapshots)",
        latest.1,
        latest.1 as f64 / held,
        heap.len()
    );
    assert_eq!(latest.2, 0, "a snapshot has no duration");
    assert!(
        (latest.1 as f64 / held - 1.0).abs() < 0.10,
        "inuse_space {} vs {held} held",
        latest.1
    );
    // The windows add up to the bytes allocated in them.
    let (stored, allocated) = windows_vs_log(&windows, &log);
    eprintln!(
        "parca: alloc_space of {} windows {stored:.0} bytes, allocated {allocated:.0} bytes (ratio {:.3})",
        windows.len(),
        stored / allocated
    );
    assert!(allocated > 10e6, "the program allocated {allocated} bytes");
    assert!(
        (stored / allocated - 1.0).abs() < 0.10,
        "windows {stored} vs {allocated} allocated"
    );
    // memlens' own values, a snapshot too: the peak holds at least the leak.
    let peak: Vec<Point> = parca
        .range(
            "memlens_lifetimes:peak_space:bytes:space:bytes{job=\"heap\"}",
            &[],
        )
        .into_iter()
        .flat_map(|s| s.1)
        .collect();
    let p = peak.last().expect("a peak_space point");
    assert!(
        p.2 == 0 && p.1 as f64 > 0.9 * held,
        "peak {p:?} vs held {held}"
    );

    // Names and lines, as Parca stored them.
    let src = tmp.join("parca_target.c");
    let raw = parca.pprof_raw(heap_q, &tmp);
    let leak = format!(
        "leak_alloc {}:{}",
        src.display(),
        line_of("/* leak line */")
    );
    assert!(raw.contains(&leak), "{leak} in\n{raw}");
    let raw = parca.pprof_raw(allocs_q, &tmp);
    let churn = format!(
        "churn_alloc {}:{}",
        src.display(),
        line_of("/* churn line */")
    );
    assert!(raw.contains(&churn), "{churn} in\n{raw}");

    drop(parca);
    std::fs::write(dir.join("stop"), "").unwrap();
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
}

/// `memlens serve` of a program loaded `--inactive`: Parca finds it through `/sd` (labelled with
/// its service name and pid), its `allocs?seconds=1` windows switch sampling on and add up to the
/// bytes the program allocated in them within 10 %, and once Parca is gone the program is left
/// inactive as it was found.
#[test]
fn parca_discovers_inactive_programs_through_sd() {
    let Some(sh) = parca_sh("parca::parca_discovers_inactive_programs_through_sd") else {
        return;
    };
    let tmp = test_dir();
    let ctl = ctl_dir(&tmp);
    let prog = target_program(&tmp);
    let t = Target::start(
        &ctl,
        &tmp.join("a"),
        &prog,
        "-",
        &["--inactive", "--interval", "32K"],
    );
    wait_for("the leak", 30, || t.dir.join("leaked").exists());
    let server = Server::start(&ctl, &[]);
    let configs = sd_allocs_job("fleet", server.port, &server.token_file, "");
    let parca = Parca::start_in(&sh, &tmp, &configs);
    let q = "memory:alloc_space:bytes:space:bytes:delta{job=\"fleet\"}";
    let mut series = Vec::new();
    wait_for("Parca to store the windows", 60, || {
        series = parca.range(q, &["service_name", "pid"]);
        series.iter().map(|s| s.1.len()).sum::<usize>() > WINDOWS
    });
    assert_eq!(series.len(), 1, "one process: {series:?}");
    let labels: Vec<(String, String)> = series[0].0["labels"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| {
            let s = |k: &str| l[k].as_str().unwrap_or_default().to_string();
            (s("name"), s("value"))
        })
        .collect();
    for l in [
        ("service_name".to_string(), "parca_target".to_string()),
        ("pid".to_string(), t.pid.to_string()),
    ] {
        assert!(labels.contains(&l), "{l:?} in {labels:?}");
    }
    let log = Log::read(&t.dir);
    let (stored, allocated) = windows_vs_log(&series[0].1, &log);
    eprintln!(
        "parca (/sd, inactive): alloc_space of {} windows {stored:.0} bytes, allocated {allocated:.0} bytes (ratio {:.3})",
        series[0].1.len(),
        stored / allocated
    );
    assert!(allocated > 10e6, "the program allocated {allocated} bytes");
    assert!(
        (stored / allocated - 1.0).abs() < 0.10,
        "windows {stored} vs {allocated} allocated"
    );
    // Parca gone, the window under way ends (in a second) and sampling is off again.
    drop(parca);
    wait_for("the program to be inactive again", 10, || {
        memlens()
            .args(["ctl", &t.pid.to_string(), "status"])
            .env("MEMLENS_CTL_DIR", &ctl)
            .ok_stdout()
            .contains("inactive")
    });
    drop(server);
    let (code, _, err) = t.finish();
    assert_eq!(code, 0, "{err}");
}

#[test]
fn timestamps_round_trip() {
    assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
    assert_eq!(rfc3339(1_795_545_752), "2026-11-24T18:42:32Z");
    assert_eq!(
        parse_rfc3339("2026-11-24T18:42:32.137Z"),
        1_795_545_752_137_000_000
    );
    assert_eq!(
        parse_rfc3339("2026-11-24T18:42:32Z"),
        1_795_545_752_000_000_000
    );
}
