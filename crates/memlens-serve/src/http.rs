//! The endpoints: request → reply, independent of the socket (tests call [`handle`] directly).
//!
//! Paths and semantics follow Go's net/http/pprof so scrape configs written for Go services work
//! unchanged: `/debug/pprof/heap`, `/debug/pprof/allocs` (snapshots), either with `?seconds=N`
//! (the difference over the next N seconds), `/debug/pprof/symbol`; plus `/debug/pprof/lifetimes`
//! (memlens' own values), `/targets` (JSON), `/metrics` (Prometheus text) and `/sd` (Prometheus
//! HTTP service discovery). Every refusal is an HTTP error with a one-line reason in the body.
use crate::discovery;
use crate::facts;
use crate::metrics;
use crate::profiles::Profiler;
use crate::served::{self, Kind};
use crate::symbols::Symbols;
use memlens_profile::Profile;
use memlens_target::Target;

/// Longest `?seconds=N` window.
pub const MAX_SECONDS: u64 = 600;

/// What the server was asked to serve.
#[derive(Debug, Clone)]
pub struct Config {
    /// Serve only this process (`--pid`), at the bare paths.
    pub only: Option<i32>,
    /// `--label KEY=VALUE`s (a `service` among them replaces the name from the command).
    pub labels: Vec<(String, String)>,
    pub host: String,
    /// `/targets` shows each process's command line (`--show-cmdline`; arguments may be secrets).
    pub show_cmdline: bool,
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

    /// Labels of `t`'s profiles: service, pid, host, where it runs (exe, and ns_pid,
    /// container_id, pod_uid when it has them), then the extra `--label`s.
    pub fn labels_for(&self, t: &Target) -> Vec<(String, String)> {
        let service = self
            .service()
            .map(str::to_string)
            .unwrap_or_else(|| facts::service_of(t.pid, &t.comm));
        let mut l = vec![
            ("service".to_string(), service),
            ("pid".to_string(), t.pid.to_string()),
            ("host".to_string(), self.host.clone()),
        ];
        l.extend(facts::Place::of(t).labels());
        l.extend(self.extra_labels());
        l
    }
}

/// Everything a request (or a push) may need.
pub struct State {
    pub cfg: Config,
    pub prof: Profiler,
    pub symbols: Symbols,
}

impl State {
    /// A server's state; `stop` ends its windows early.
    pub fn new(cfg: Config, stop: std::sync::Arc<crate::stop::Stop>) -> State {
        State {
            cfg,
            prof: Profiler::new(stop),
            symbols: Symbols::default(),
        }
    }
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    /// `Content-Disposition` file name of a profile.
    pub file: Option<&'static str>,
    /// The `Allow` header of a 405.
    pub allow: Option<&'static str>,
    pub body: Vec<u8>,
}

impl Reply {
    fn text(status: u16, content_type: &'static str, body: String) -> Reply {
        Reply {
            status,
            content_type,
            file: None,
            allow: None,
            body: body.into_bytes(),
        }
    }

    /// An error: the reason on one line.
    pub fn error(status: u16, reason: &str) -> Reply {
        let one_line = reason.replace(['\n', '\r'], " ");
        Reply::text(status, "text/plain; charset=utf-8", format!("{one_line}\n"))
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
  GET /debug/pprof/heap?pid=PID[&seconds=N]    live heap now; with seconds, its change over N s
  GET /debug/pprof/allocs?pid=PID[&seconds=N]  allocations since sampling started; with seconds,
                                               those made in the next N seconds
  GET /debug/pprof/lifetimes?pid=PID           live heap now with peak, freed and lifetime values
  GET|POST /debug/pprof/symbol                 addresses to function names (as Go answers it)
  GET /targets                                 the processes (JSON)
  GET /metrics                                 heap, RSS and sampling counters (Prometheus text)
  GET /sd                                      the processes as scrape targets (Prometheus HTTP SD)
See docs/serve.md.
";

/// Answer one request. `authority` is how the client reached us (its Host header), for `/sd`.
pub fn handle(st: &State, method: &str, url: &str, authority: &str, body: &[u8]) -> Reply {
    let cfg = &st.cfg;
    let (path, q) = query(url);
    let path = path.trim_end_matches('/');
    if path == "/debug/pprof/symbol" {
        return match method {
            "GET" | "HEAD" => Reply::text(
                200,
                "text/plain; charset=utf-8",
                st.symbols
                    .answer(url.split_once('?').map_or("", |(_, q)| q)),
            ),
            "POST" => Reply::text(
                200,
                "text/plain; charset=utf-8",
                st.symbols.answer(&String::from_utf8_lossy(body)),
            ),
            _ => not_allowed(method, "GET, HEAD, POST"),
        };
    }
    if method != "GET" && method != "HEAD" {
        return not_allowed(method, "GET, HEAD");
    }
    match path {
        "" | "/debug/pprof" => Reply::text(200, "text/plain; charset=utf-8", INDEX.into()),
        "/debug/pprof/heap" => profile(st, &q, false),
        "/debug/pprof/allocs" => profile(st, &q, true),
        "/debug/pprof/lifetimes" => lifetimes(st, &q),
        "/targets" => {
            let list = metrics::all_facts(cfg.only, cfg.service(), cfg.show_cmdline);
            match serde_json::to_string_pretty(&list) {
                Ok(j) => Reply::text(200, "application/json", j + "\n"),
                Err(e) => Reply::error(500, &format!("cannot encode the targets: {e}")),
            }
        }
        "/sd" => {
            let list = metrics::all_facts(cfg.only, cfg.service(), false);
            let sd = metrics::service_discovery(&list, authority, &cfg.host);
            Reply::text(200, "application/json", sd.to_string() + "\n")
        }
        "/metrics" => {
            let list = metrics::all_facts(cfg.only, cfg.service(), false);
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

fn not_allowed(method: &str, allow: &'static str) -> Reply {
    Reply {
        allow: Some(allow),
        ..Reply::error(405, &format!("method {method} not allowed (use {allow})"))
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
    // Whatever the reason (no such process, another user's, not under memlens), the client learns
    // only that this server does not show it: it may not be allowed to know more of that process.
    discovery::resolve(pid).map_err(|r| Reply::error(404, &r.public))
}

/// The `seconds` parameter: None, or a whole number of seconds in 1..=MAX_SECONDS.
fn seconds(q: &[(&str, &str)]) -> Result<Option<u64>, Reply> {
    match param(q, "seconds") {
        None => Ok(None),
        Some(s) => match s.parse::<u64>() {
            Ok(n) if (1..=MAX_SECONDS).contains(&n) => Ok(Some(n)),
            _ => Err(Reply::error(
                400,
                &format!("seconds '{s}' must be a whole number from 1 to {MAX_SECONDS}"),
            )),
        },
    }
}

/// `/heap` or `/allocs`: a snapshot, or with `seconds` the window's difference.
fn profile(st: &State, q: &[(&str, &str)], allocs: bool) -> Reply {
    let secs = match seconds(q) {
        Ok(s) => s,
        Err(r) => return r,
    };
    let t = match target(&st.cfg, q) {
        Ok(t) => t,
        Err(r) => return r,
    };
    let r = match secs {
        None => st.prof.dump(&t).map(|p| {
            let kind = if allocs { Kind::Allocs } else { Kind::Heap };
            Some(((*p).clone(), kind))
        }),
        Some(n) => st.prof.window(&t, n).map(|w| {
            w.map(|w| {
                let kind = Kind::Window {
                    allocs,
                    duration_ns: w.duration_ns,
                };
                (w.profile, kind)
            })
        }),
    };
    match r {
        Ok(Some((p, kind))) => reply(st, &t, p, kind),
        Ok(None) => Reply::error(503, "memlens serve is stopping; the window was cut short"),
        Err(e) => failed(&t, e),
    }
}

/// `/lifetimes`: every value memlens has, as a snapshot.
fn lifetimes(st: &State, q: &[(&str, &str)]) -> Reply {
    if param(q, "seconds").is_some() {
        return Reply::error(
            400,
            "lifetimes is a snapshot and takes no seconds (allocs?seconds=N is the window)",
        );
    }
    let t = match target(&st.cfg, q) {
        Ok(t) => t,
        Err(r) => return r,
    };
    match st.prof.dump(&t) {
        Ok(p) => reply(st, &t, (*p).clone(), Kind::Lifetimes),
        Err(e) => failed(&t, e),
    }
}

/// A dump or window that failed: the process may have ended while we talked to it.
fn failed(t: &Target, e: anyhow::Error) -> Reply {
    match discovery::resolve(t.pid) {
        Err(r) => Reply::error(404, &r.public),
        Ok(_) => Reply::error(500, &format!("{e:#}")),
    }
}

fn reply(st: &State, t: &Target, mut p: Profile, kind: Kind) -> Reply {
    served::name_every_location(&mut p);
    st.symbols.remember(t.pid, &p);
    match served::encode(&p, kind, &st.cfg.labels_for(t)) {
        Ok(body) => Reply {
            status: 200,
            content_type: "application/octet-stream",
            file: Some(kind.file_name()),
            allow: None,
            body,
        },
        Err(e) => Reply::error(500, &format!("cannot encode the profile: {e:#}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stop::Stop;
    use std::sync::Arc;

    fn state(only: Option<i32>) -> State {
        State {
            cfg: Config {
                only,
                labels: Vec::new(),
                host: "h".into(),
                show_cmdline: false,
            },
            prof: Profiler::new(Arc::new(Stop::default())),
            symbols: Symbols::default(),
        }
    }

    #[test]
    fn refusals() {
        let s = state(None);
        let r = |url: &str| {
            let r = handle(&s, "GET", url, "h:1", b"");
            (r.status, String::from_utf8(r.body).unwrap())
        };
        assert_eq!(r("/debug/pprof/heap").0, 400);
        assert_eq!(r("/debug/pprof/heap?pid=abc").0, 400);
        assert_eq!(r("/debug/pprof/allocs?pid=1&seconds=0").0, 400);
        assert_eq!(r("/debug/pprof/allocs?pid=1&seconds=x").0, 400);
        assert_eq!(r("/debug/pprof/heap?pid=1&seconds=601").0, 400);
        assert_eq!(r("/debug/pprof/lifetimes?pid=1&seconds=1").0, 400);
        assert_eq!(r("/nope").0, 404);
        // pid 2^31-1 does not exist; pid 1 is not under memlens: the same answer, naming nothing.
        let (st, body) = r("/debug/pprof/heap?pid=2147483647");
        assert_eq!((st, body.lines().count()), (404, 1), "{body}");
        let (st1, body1) = r("/debug/pprof/heap?pid=1");
        assert_eq!(st1, 404);
        assert_eq!(body1.replace(" 1 ", " 2147483647 "), body);
        let post = handle(&s, "POST", "/metrics", "h:1", b"");
        assert_eq!((post.status, post.allow), (405, Some("GET, HEAD")));
        assert_eq!(
            handle(&s, "PUT", "/debug/pprof/symbol", "h:1", b"").status,
            405
        );
        let only = state(Some(7));
        assert_eq!(
            handle(&only, "GET", "/debug/pprof/heap?pid=8", "h:1", b"").status,
            404
        );
    }

    #[test]
    fn symbol_counts_and_names() {
        let s = state(None);
        let get = handle(&s, "GET", "/debug/pprof/symbol", "h:1", b"");
        assert_eq!((get.status, get.body), (200, b"num_symbols: 1\n".to_vec()));
        let post = handle(&s, "POST", "/debug/pprof/symbol", "h:1", b"0x1234");
        assert_eq!(post.body, b"num_symbols: 1\n".to_vec());
    }
}
