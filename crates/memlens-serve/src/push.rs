//! `memlens serve --push URL`: every process the server covers, sent to Pyroscope once a window,
//! shaped for what Pyroscope does with what it is given.
//!
//! Pyroscope stores every profile it receives and, asked for a range, *adds them up* (its flame
//! graph always; its series per step with `sum`, or averages the profiles of a step with
//! `average`, the aggregation its documentation gives for gauges such as memory in use). So each
//! window's push holds, per stack:
//!
//! * `alloc_objects`, `alloc_space`: what was allocated in the window (the difference of two dumps):
//!   windows add up to what was allocated over any range, and a series point is one window's;
//! * `inuse_objects`, `inuse_space`: what is held at the window's end (the heap then, a snapshot):
//!   the series with `average` is what the process holds, and a flame graph over one window (one
//!   push) is the heap at that time; over N windows it is N snapshots added up (Pyroscope does the
//!   same to Go's heap profiles).
//!
//! Windows are aligned to the clock (every N seconds since the epoch), one push per process per
//! window: `POST URL/ingest?name=SERVICE{pid=…,host=…}&from=…&until=…&format=pprof` with the
//! window's pprof (its time the end dump's, its duration the window's). A process's first window
//! has no allocations (nothing to subtract from), only its heap. A push that fails leaves its
//! window to the next one (whose duration then spans both): no allocation is lost or counted
//! twice.
use crate::http::State;
use crate::profiles;
use crate::served::{self, Kind};
use crate::stop::Stop;
use crate::{discovery, facts};
use anyhow::{anyhow, bail, Result};
use memlens_measure::error::usage;
use memlens_profile::Profile;
use memlens_target::Target;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Pushes to one Pyroscope server.
pub struct Pusher {
    /// Its `/ingest` URL.
    url: String,
    /// The window, in seconds.
    every: u64,
    /// The Authorization header of every push.
    auth: Option<String>,
    agent: ureq::Agent,
}

impl Pusher {
    /// A pusher to the Pyroscope at `url` (`http[s]://HOST[:PORT]`, or its `/ingest`) every
    /// `every` seconds, authenticated by the first line of `auth_file` if given.
    pub fn new(url: &str, every: u64, auth_file: Option<&Path>) -> Result<Pusher> {
        let url = ingest_url(url)?;
        let auth = auth_file.map(auth_header).transpose()?;
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false)
            .build();
        Ok(Pusher {
            url,
            every,
            auth,
            agent: config.into(),
        })
    }

    pub fn announce(&self, only: Option<i32>) {
        let what = match only {
            Some(p) => format!("process {p}"),
            None => format!("{} under memlens", discovery::whose()),
        };
        eprintln!(
            "memlens: pushing the heap and allocations of {what} to {} every {} s",
            self.url, self.every
        );
    }

    /// Push every window until `stop` is set or `keep_going` says stop (checked every 200 ms).
    pub fn run(&self, st: &State, stop: &Stop, keep_going: impl Fn() -> bool) {
        let mut bases: HashMap<i32, Arc<Profile>> = HashMap::new();
        let mut said: HashMap<String, Instant> = HashMap::new();
        while self.sleep_to_next_window(stop, &keep_going) {
            let targets = discovery::discover(st.cfg.only);
            bases.retain(|pid, _| targets.iter().any(|t| t.pid == *pid));
            for t in &targets {
                match self.push_one(st, t, bases.get(&t.pid).cloned()) {
                    Ok(dump) => {
                        bases.insert(t.pid, dump);
                    }
                    Err(e) => {
                        let e = format!("{e:#}");
                        // Said once a minute per reason, not once per window and process.
                        if said
                            .get(&e)
                            .is_none_or(|t| t.elapsed() > Duration::from_secs(60))
                        {
                            eprintln!("memlens: warning: push of process {}: {e}", t.pid);
                            said.insert(e, Instant::now());
                        }
                    }
                }
            }
        }
    }

    /// Sleep until the next multiple of the window on the wall clock; false when told to stop.
    fn sleep_to_next_window(&self, stop: &Stop, keep_going: &impl Fn() -> bool) -> bool {
        let every = self.every * 1_000_000_000;
        let next = (wall_ns() / every + 1) * every;
        loop {
            if stop.is_set() || !keep_going() {
                return false;
            }
            let left = next.saturating_sub(wall_ns());
            if left == 0 {
                return true;
            }
            stop.sleep(Duration::from_nanos(left.min(200_000_000)));
        }
    }

    /// Push `t`'s window since `base` (its dump at the last push that went through): the dump it
    /// took, to be the next window's base.
    fn push_one(&self, st: &State, t: &Target, base: Option<Arc<Profile>>) -> Result<Arc<Profile>> {
        let dump = st.prof.dump(t)?;
        let (mut p, duration_ns) = profiles::pushed(base.as_deref(), &dump);
        served::name_every_location(&mut p);
        let body = served::encode(&p, Kind::Push { duration_ns }, &[])?;
        let until = dump.meta.time_ns;
        let mut req = self
            .agent
            .post(&self.url)
            .query("name", series_name(&st.cfg.labels_for(t)))
            .query("from", ((until - duration_ns) / 1_000_000_000).to_string())
            .query("until", (until / 1_000_000_000).to_string())
            .query("format", "pprof")
            .query("spyName", "memlens")
            .header("Content-Type", "application/octet-stream");
        if let Some(a) = &self.auth {
            req = req.header("Authorization", a);
        }
        let mut resp = req
            .send(&body[..])
            .map_err(|e| anyhow!("{}: {e}", self.url))?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp
                .body_mut()
                .with_config()
                .limit(4096)
                .read_to_string()
                .unwrap_or_default();
            let first = text.lines().next().unwrap_or("").trim();
            bail!("{}: HTTP {status}: {first}", self.url);
        }
        Ok(dump)
    }
}

/// Pyroscope's `name`: `SERVICE{pid=…,host=…,KEY=VALUE…}` from a process's labels (service first;
/// `--label` values were checked to fit, the host is sanitized like a service name).
fn series_name(labels: &[(String, String)]) -> String {
    let service = labels
        .iter()
        .find(|(k, _)| k == "service")
        .map_or("unknown", |(_, v)| v.as_str());
    let rest: Vec<String> = labels
        .iter()
        .filter(|(k, _)| k != "service")
        .map(|(k, v)| {
            let v = if k == "host" {
                facts::sanitize(v)
            } else {
                v.clone()
            };
            format!("{k}={v}")
        })
        .collect();
    format!("{service}{{{}}}", rest.join(","))
}

/// The `/ingest` URL of the Pyroscope at `url`.
fn ingest_url(url: &str) -> Result<String> {
    let u = url.trim_end_matches('/');
    let rest = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"))
        .ok_or_else(|| {
            usage(format!(
                "bad --push URL '{url}': expected http://HOST:PORT or https://HOST (Pyroscope's)"
            ))
        })?;
    let host = rest.split('/').next().unwrap_or("");
    if host.is_empty() || u.contains('?') || u.contains('#') {
        return Err(usage(format!(
            "bad --push URL '{url}': expected http://HOST:PORT[/PATH] without a query"
        )));
    }
    if host.contains('@') {
        return Err(usage(format!(
            "--push URL '{url}' holds credentials, which any local user can read in the process's \
             command line: put USER:PASSWORD in a file and give --push-auth-file FILE"
        )));
    }
    Ok(if u.ends_with("/ingest") {
        u.to_string()
    } else {
        format!("{u}/ingest")
    })
}

/// The Authorization header from `file`'s first line: `USER:PASSWORD` as basic auth, anything
/// else as a bearer token.
fn auth_header(file: &Path) -> Result<String> {
    use base64::Engine;
    let text = std::fs::read_to_string(file)
        .map_err(|e| anyhow!("cannot read --push-auth-file {}: {e}", file.display()))?;
    let line = text.lines().next().unwrap_or("").trim();
    if line.is_empty() {
        bail!(
            "--push-auth-file {}: its first line is empty",
            file.display()
        );
    }
    Ok(if line.contains(':') {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(line)
        )
    } else {
        format!("Bearer {line}")
    })
}

/// CLOCK_REALTIME now, in nanoseconds.
fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_names_and_credentials() {
        assert_eq!(
            ingest_url("http://127.0.0.1:4040/").unwrap(),
            "http://127.0.0.1:4040/ingest"
        );
        assert_eq!(
            ingest_url("https://p.example/ingest").unwrap(),
            "https://p.example/ingest"
        );
        for bad in [
            "127.0.0.1:4040",
            "ftp://x",
            "http://",
            "http://u:p@h:1",
            "http://h/?a=1",
        ] {
            assert!(ingest_url(bad).is_err(), "{bad}");
        }
        let l = |k: &str, v: &str| (k.to_string(), v.to_string());
        assert_eq!(
            series_name(&[
                l("service", "redis-server"),
                l("pid", "12"),
                l("host", "box 1"),
                l("env", "prod")
            ]),
            "redis-server{pid=12,host=box_1,env=prod}"
        );
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("a");
        std::fs::write(&f, "user:pa:ss\n").unwrap();
        assert_eq!(auth_header(&f).unwrap(), "Basic dXNlcjpwYTpzcw==");
        std::fs::write(&f, "tok\n").unwrap();
        assert_eq!(auth_header(&f).unwrap(), "Bearer tok");
        std::fs::write(&f, "\n").unwrap();
        assert!(auth_header(&f).is_err());
    }
}
