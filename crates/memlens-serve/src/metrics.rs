//! `/targets` and `/metrics`: the processes and their counters.
use crate::discovery;
use crate::facts::{self, Facts};

/// The facts of every process served (command lines with `show_cmdline`).
pub fn all_facts(only: Option<i32>, service: Option<&str>, show_cmdline: bool) -> Vec<Facts> {
    discovery::discover(only)
        .iter()
        .map(|t| facts::facts(t, service, show_cmdline))
        .collect()
}

/// The processes as Prometheus HTTP service discovery (`[{"targets": [...], "labels": {...}}]`):
/// one target per process, this server at `authority`, `__param_pid` making the scraper add
/// `?pid=PID` to every profile path, and `service_name` naming the series in Pyroscope.
pub fn service_discovery(facts: &[Facts], authority: &str, host: &str) -> serde_json::Value {
    let list: Vec<serde_json::Value> = facts
        .iter()
        .map(|f| {
            let mut labels = serde_json::json!({
                "__param_pid": f.pid.to_string(),
                "service_name": f.service,
                "pid": f.pid.to_string(),
                "host": host,
            });
            for (k, v) in f.place.labels() {
                labels[k] = serde_json::Value::String(v);
            }
            serde_json::json!({"targets": [authority], "labels": labels})
        })
        .collect();
    serde_json::Value::Array(list)
}

/// A label value in the exposition format: backslash, double quote and newline escaped.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

struct Metric {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: fn(&Facts) -> Option<u64>,
}

const METRICS: &[Metric] = &[
    Metric {
        name: "memlens_heap_inuse_bytes",
        kind: "gauge",
        help: "Live heap estimated from the samples (blocks sampled while sampling was on, not yet freed).",
        value: |f| f.inuse_bytes,
    },
    Metric {
        name: "memlens_mmap_inuse_bytes",
        kind: "gauge",
        help: "Live anonymous mmap (mmap/mremap/munmap, not the allocator's own arenas) estimated from its samples, apart from the heap.",
        value: |f| f.mmap_inuse_bytes,
    },
    Metric {
        name: "memlens_rss_bytes",
        kind: "gauge",
        help: "Resident set size of the process (/proc/PID/statm).",
        value: |f| f.rss_bytes,
    },
    Metric {
        name: "memlens_alloc_bytes_total",
        kind: "counter",
        help: "Bytes allocated while sampling was on, estimated from the samples (since start or reset).",
        value: |f| f.alloc_bytes,
    },
    Metric {
        name: "memlens_samples_total",
        kind: "counter",
        help: "Allocation samples recorded (since start or reset).",
        value: |f| f.samples,
    },
    Metric {
        name: "memlens_dropped_samples_total",
        kind: "counter",
        help: "Samples lost because a table of the runtime was full.",
        value: |f| f.dropped,
    },
    Metric {
        name: "memlens_sampling_active",
        kind: "gauge",
        help: "1 while the process samples allocations, 0 when the runtime is loaded but inactive.",
        value: |f| f.active.map(u64::from),
    },
    Metric {
        name: "memlens_profiler_cpu_nanoseconds_total",
        kind: "counter",
        help: "CPU time the profiler's sampled path (unwinding, recording, views) has taken in the process, by the runtime's own account; over memlens_process_cpu_nanoseconds_total it is the profiler's direct share.",
        value: |f| f.cost_ns,
    },
    Metric {
        name: "memlens_process_cpu_nanoseconds_total",
        kind: "counter",
        help: "CPU time of the process (CLOCK_PROCESS_CPUTIME_ID), read by the runtime with its own account.",
        value: |f| f.cpu_ns,
    },
    Metric {
        name: "memlens_sampling_interval_bytes",
        kind: "gauge",
        help: "Mean bytes between samples (0 = every allocation).",
        value: |f| f.interval,
    },
];

/// The Prometheus text exposition of `facts`: one family per counter, one series per process
/// (labels pid, service, host, where it runs — exe, ns_pid, container_id, pod_uid — then `extra`:
/// the `--label`s other than service). A value the
/// process did not report is left out, never invented.
pub fn prometheus(facts: &[Facts], host: &str, extra: &[(String, String)]) -> String {
    let more: String = extra
        .iter()
        .map(|(k, v)| format!(",{k}=\"{}\"", escape(v)))
        .collect();
    let mut s = String::new();
    s += "# HELP memlens_targets Processes running under memlens that this server shows.\n";
    s += "# TYPE memlens_targets gauge\n";
    s += &format!("memlens_targets {}\n", facts.len());
    for m in METRICS {
        s += &format!(
            "# HELP {} {}\n# TYPE {} {}\n",
            m.name, m.help, m.name, m.kind
        );
        for f in facts {
            if let Some(v) = (m.value)(f) {
                let place: String = f
                    .place
                    .labels()
                    .iter()
                    .map(|(k, v)| format!(",{k}=\"{}\"", escape(v)))
                    .collect();
                s += &format!(
                    "{}{{pid=\"{}\",service=\"{}\",host=\"{}\"{place}{more}}} {v}\n",
                    m.name,
                    f.pid,
                    escape(&f.service),
                    escape(host)
                );
            }
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition() {
        let f = Facts {
            pid: 12,
            place: crate::facts::Place {
                exe: "srv".into(),
                ns_pid: Some(1),
                container_id: Some("ab12".into()),
                pod_uid: None,
            },
            command: "srv".into(),
            cmdline: None,
            service: "a\"b".into(),
            interval: Some(524288),
            active: Some(false),
            samples: Some(3),
            alloc_bytes: Some(100),
            inuse_bytes: None,
            mmap_inuse_bytes: None,
            dropped: Some(0),
            rss_bytes: Some(4096),
            cost_ns: Some(5000),
            cpu_ns: None,
            error: None,
        };
        let t = prometheus(&[f], "h", &[("env".into(), "prod".into())]);
        let labels = "pid=\"12\",service=\"a\\\"b\",host=\"h\",exe=\"srv\",ns_pid=\"1\",container_id=\"ab12\",env=\"prod\"";
        assert!(
            t.contains(&format!("memlens_rss_bytes{{{labels}}} 4096\n")),
            "{t}"
        );
        assert!(
            t.contains(&format!("memlens_sampling_active{{{labels}}} 0\n")),
            "{t}"
        );
        assert!(!t.contains("memlens_heap_inuse_bytes{"), "{t}");
        assert!(
            t.contains("memlens_profiler_cpu_nanoseconds_total{pid=\"12\""),
            "{t}"
        );
        assert!(!t.contains("memlens_process_cpu_nanoseconds_total{"), "{t}");
        assert!(t.contains("memlens_targets 1\n"));
    }
}
