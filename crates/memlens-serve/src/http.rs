//! The endpoints: request → reply, independent of the socket (tests call [`handle`] directly).
//!
//! Paths follow Go's net/http/pprof so scrape configs written for Go services work unchanged:
//! `/debug/pprof/heap`, `/debug/pprof/allocs[?seconds=N]`; plus `/targets` (JSON) and `/metrics`
//! (Prometheus text). Every refusal is an HTTP error with a one-line reason in the body.
use crate::discovery::{self, Refusal};
use crate::facts;
use crate::metrics;
use crate::profiles::{self, Profiler};
use memlens_profile::model::SampleIndex;
use memlens_target::Target;

/// Longest `allocs?seconds=N` window.
pub const MAX_SECONDS: u64 = 600;

/// What the server was asked to serve.
pub struct Config {
    /// Serve only this process (`--pid`), at the bare paths.
    pub only: Option<i32>,
    /// `--label KEY=VALUE`s (a `service` among them replaces the name from the command).
    pub labels: Vec<(String, String)>,
    pub host: String,
}

impl Config {
    fn service(&self) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == "service")
            .map(|(_, v)| v.as_str())
    }

    /// The `--label`s other than service.
    fn extra_labels(&self) -> Vec<(String, String)> {
        self.labels
            .iter()
            .filter(|(k, _)| k != "service")
            .cloned()
            .collect()
    }

    /// Labels of `t`'s profiles: service, pid, host, then the extra `--label`s.
    fn labels_for(&self, t: &Target) -> Vec<(String, String)> {
        let service = self
            .service()
            .map(str::to_string)
            .unwrap_or_else(|| facts::service_of(t.pid, &t.comm));
        let mut l = vec![
            ("service".to_string(), service),
            ("pid".to_string(), t.pid.to_string()),
            ("host".to_string(), self.host.clone()),
        ];
        l.extend(self.extra_labels());
        l
    }
}

/// An HTTP answer.
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    /// `Content-Disposition` file name of a profile.
    pub file: Option<&'static str>,
    pub body: Vec<u8>,
}

impl Reply {
    fn text(status: u16, content_type: &'static str, body: String) -> Reply {
        Reply {
            status,
            content_type,
            file: None,
            body: body.into_bytes(),
        }
    }

    /// An error: the reason on one line.
    pub fn error(status: u16, reason: &str) -> Reply {
        let one_line = reason.replace(['\n', '\r'], " ");
        Reply::text(status, "text/plain; charset=utf-8", format!("{one_line}\n"))
    }
}

impl From<Refusal> for Reply {
    fn from(r: Refusal) -> Reply {
        Reply::error(r.status, &r.reason)
    }
}

/// The query's `key=value` pairs (values are numbers here: no percent-decoding needed).
fn query(url: &str) -> (&str, Vec<(&str, &str)>) {
    let (path, q) = url.split_once('?').unwrap_or((url, ""));
    let pairs = q
        .split('&')
        .filter(|kv| !kv.is_empty())
        .map(|kv| kv.split_once('=').unwrap_or((kv, "")))
        .collect();
    (path, pairs)
}

fn param<'a>(q: &[(&str, &'a str)], key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
}

const INDEX: &str = "memlens serve: pprof endpoints of processes running under memlens
  GET /debug/pprof/heap?pid=PID                live heap now (gzipped pprof)
  GET /debug/pprof/allocs?pid=PID              allocations since sampling started
  GET /debug/pprof/allocs?pid=PID&seconds=N    allocations made in the next N seconds
  GET /targets                                 the processes (JSON)
  GET /metrics                                 heap, RSS and sampling counters (Prometheus text)
  GET /sd                                      the processes as scrape targets (Prometheus HTTP SD)
";

/// Answer one request. `authority` is how the client reached us (its Host header), for `/sd`.
pub fn handle(cfg: &Config, prof: &Profiler, method: &str, url: &str, authority: &str) -> Reply {
    if method != "GET" && method != "HEAD" {
        return Reply::error(405, &format!("method {method} not allowed (use GET)"));
    }
    let (path, q) = query(url);
    match path.trim_end_matches('/') {
        "" | "/debug/pprof" => Reply::text(200, "text/plain; charset=utf-8", INDEX.into()),
        "/debug/pprof/heap" => heap(cfg, prof, &q),
        "/debug/pprof/allocs" => allocs(cfg, prof, &q),
        "/targets" => {
            let list = metrics::all_facts(cfg.only, cfg.service());
            match serde_json::to_string_pretty(&list) {
                Ok(j) => Reply::text(200, "application/json", j + "\n"),
                Err(e) => Reply::error(500, &format!("cannot encode the targets: {e}")),
            }
        }
        "/sd" => {
            let list = metrics::all_facts(cfg.only, cfg.service());
            let sd = metrics::service_discovery(&list, authority, &cfg.host);
            Reply::text(200, "application/json", sd.to_string() + "\n")
        }
        "/metrics" => {
            let list = metrics::all_facts(cfg.only, cfg.service());
            Reply::text(
                200,
                "text/plain; version=0.0.4; charset=utf-8",
                metrics::prometheus(&list, &cfg.host, &cfg.extra_labels()),
            )
        }
        _ => Reply::error(
            404,
            &format!("no endpoint {path} (try /debug/pprof/heap, /debug/pprof/allocs, /targets, /metrics)"),
        ),
    }
}

/// The process a profile request names: `?pid=`, or the server's only one.
fn target(cfg: &Config, q: &[(&str, &str)]) -> Result<Target, Reply> {
    let pid = match (param(q, "pid"), cfg.only) {
        (None, Some(only)) => only,
        (None, None) => {
            return Err(Reply::error(
                400,
                "missing ?pid=PID (GET /targets lists the processes)",
            ))
        }
        (Some(s), only) => {
            let pid = s
                .parse::<i32>()
                .ok()
                .filter(|&p| p > 0)
                .ok_or_else(|| Reply::error(400, &format!("pid '{s}' is not a process id")))?;
            if only.is_some_and(|o| o != pid) {
                return Err(Reply::error(
                    404,
                    &format!(
                        "this server shows only process {}, not {pid}",
                        only.unwrap_or(0)
                    ),
                ));
            }
            pid
        }
    };
    discovery::resolve(pid).map_err(Reply::from)
}

fn profile_reply(
    cfg: &Config,
    t: &Target,
    p: anyhow::Result<memlens_profile::Profile>,
    default: SampleIndex,
    file: &'static str,
) -> Reply {
    let p = match p {
        Ok(p) => p,
        // The process may have ended while we talked to it.
        Err(e) => {
            return match discovery::resolve(t.pid) {
                Err(r) => r.into(),
                Ok(_) => Reply::error(500, &format!("{e:#}")),
            }
        }
    };
    match profiles::encode(&p, default, &cfg.labels_for(t)) {
        Ok(body) => Reply {
            status: 200,
            content_type: "application/octet-stream",
            file: Some(file),
            body,
        },
        Err(e) => Reply::error(500, &format!("cannot encode the profile: {e:#}")),
    }
}

fn heap(cfg: &Config, prof: &Profiler, q: &[(&str, &str)]) -> Reply {
    let t = match target(cfg, q) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let p = prof.dump(&t);
    profile_reply(cfg, &t, p, SampleIndex::InuseSpace, "heap")
}

fn allocs(cfg: &Config, prof: &Profiler, q: &[(&str, &str)]) -> Reply {
    let secs = match param(q, "seconds") {
        None => None,
        Some(s) => match s.parse::<u64>() {
            Ok(n) if (1..=MAX_SECONDS).contains(&n) => Some(n),
            _ => {
                return Reply::error(
                    400,
                    &format!("seconds '{s}' must be a whole number from 1 to {MAX_SECONDS}"),
                )
            }
        },
    };
    let t = match target(cfg, q) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let p = match secs {
        Some(n) => prof.window(&t, n),
        None => prof.dump(&t),
    };
    profile_reply(cfg, &t, p, SampleIndex::AllocSpace, "allocs")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(only: Option<i32>) -> Config {
        Config {
            only,
            labels: Vec::new(),
            host: "h".into(),
        }
    }

    #[test]
    fn refusals() {
        let p = Profiler::new().unwrap();
        let c = cfg(None);
        let r = |url: &str| {
            let r = handle(&c, &p, "GET", url, "h:1");
            (r.status, String::from_utf8(r.body).unwrap())
        };
        assert_eq!(r("/debug/pprof/heap").0, 400);
        assert_eq!(r("/debug/pprof/heap?pid=abc").0, 400);
        assert_eq!(r("/debug/pprof/allocs?pid=1&seconds=0").0, 400);
        assert_eq!(r("/debug/pprof/allocs?pid=1&seconds=x").0, 400);
        assert_eq!(r("/debug/pprof/allocs?pid=1&seconds=601").0, 400);
        assert_eq!(r("/nope").0, 404);
        // pid 2^31-1 does not exist.
        let (st, body) = r("/debug/pprof/heap?pid=2147483647");
        assert_eq!((st, body.lines().count()), (404, 1), "{body}");
        assert_eq!(handle(&c, &p, "POST", "/metrics", "h:1").status, 405);
        let only = cfg(Some(7));
        assert_eq!(
            handle(&only, &p, "GET", "/debug/pprof/heap?pid=8", "h:1").status,
            404
        );
    }
}
