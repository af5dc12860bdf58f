//! `memlens serve`: pprof endpoints of the processes running under memlens, for continuous-profiling
//! systems (Grafana Pyroscope via Alloy, Parca) and `go tool pprof` to scrape.
//!
//! * `discovery.rs`: which processes (the control directory, our user only); refusals of the others.
//! * `facts.rs`: what is shown of each (name, command line, counters, RSS) and of the host.
//! * `profiles.rs`: dumps through the control client, one at a time per process; `seconds` windows.
//! * `http.rs`: the endpoints, request → reply.
//! * `metrics.rs`: `/targets` JSON and `/metrics` Prometheus text.
//!
//! The server never makes a target wait for a client: a process is only ever asked for a status or
//! a dump over its control socket, and the reply is sent to the client after that exchange is over,
//! from the request's own thread.
#![warn(missing_docs)]
mod discovery;
mod facts;
mod http;
mod metrics;
mod profiles;

use anyhow::{anyhow, Result};
use memlens_measure::error::usage;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Requests answered at once; more get 503 (a scraper retries at its next interval).
const MAX_IN_FLIGHT: usize = 64;

const EXAMPLE: &str = "Example:
  memlens run --inactive -- ./server &          # any number of programs under memlens
  memlens serve --listen 127.0.0.1:6060 &
  curl http://127.0.0.1:6060/targets
  go tool pprof -top 'http://127.0.0.1:6060/debug/pprof/allocs?pid=1234&seconds=10'
  go tool pprof -top 'http://127.0.0.1:6060/debug/pprof/heap?pid=1234'
  memlens serve --pid 1234 --label service=orders   # one process at the bare Go paths

Endpoints: /debug/pprof/heap?pid=PID (live heap now), /debug/pprof/allocs?pid=PID[&seconds=N]
(allocations; with seconds, those of the next N seconds: sampling is switched on for the window if
it was off, and off again after), /targets (JSON), /metrics (Prometheus text), /sd (the processes
as scrape targets for Alloy's discovery.http or Parca's http_sd_configs). Only processes of
the server's own user are shown (others get 403), whatever its uid.";

/// Serve pprof endpoints of the processes running under memlens (for Pyroscope, Parca, go tool pprof)
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLE)]
pub struct ServeArgs {
    /// Address to listen on (loopback by default; 0.0.0.0:6060 exposes it to the network)
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:6060")]
    pub listen: String,
    /// Serve only this process, also at the bare paths (/debug/pprof/heap without ?pid=)
    #[arg(long, value_name = "PID")]
    pub pid: Option<String>,
    /// Label added to every profile and metric (repeatable); `service=NAME` replaces the name taken
    /// from the command
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
}

/// A bound server, not yet serving.
pub struct Endpoint {
    server: Arc<tiny_http::Server>,
    cfg: Arc<http::Config>,
    prof: Arc<profiles::Profiler>,
}

fn parse_labels(raw: &[String]) -> Result<Vec<(String, String)>> {
    raw.iter()
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap_or((l, ""));
            let name_ok = !k.is_empty()
                && !k.starts_with(|c: char| c.is_ascii_digit())
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !name_ok || v.is_empty() {
                return Err(usage(format!(
                    "bad --label '{l}': expected KEY=VALUE with KEY of letters, digits and _"
                )));
            }
            if ["pid", "host"].contains(&k) {
                return Err(usage(format!("--label {k}=…: {k} is set by memlens")));
            }
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

impl Endpoint {
    /// Listen on `listen` (HOST:PORT; port 0 picks a free one).
    pub fn bind(listen: &str, only: Option<i32>, labels: &[String]) -> Result<Endpoint> {
        let addr: SocketAddr = listen
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| {
                usage(format!(
                    "bad listen address '{listen}': expected HOST:PORT, e.g. 127.0.0.1:6060"
                ))
            })?;
        let server =
            tiny_http::Server::http(addr).map_err(|e| anyhow!("cannot listen on {listen}: {e}"))?;
        Ok(Endpoint {
            server: Arc::new(server),
            cfg: Arc::new(http::Config {
                only,
                labels: parse_labels(labels)?,
                host: facts::host_name(),
            }),
            prof: Arc::new(profiles::Profiler::new()?),
        })
    }

    /// The address actually bound (with the port chosen when 0 was asked).
    fn addr(&self) -> String {
        match self.server.server_addr().to_ip() {
            Some(a) => a.to_string(),
            None => "?".into(),
        }
    }

    /// Serve until `keep_going` says stop (checked every second); each request in its own thread.
    fn run(self, keep_going: impl Fn() -> bool) {
        let in_flight = Arc::new(AtomicUsize::new(0));
        let addr = self.addr();
        while keep_going() {
            let req = match self.server.recv_timeout(Duration::from_secs(1)) {
                Ok(Some(r)) => r,
                Ok(None) => continue,
                Err(_) => break,
            };
            if in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_IN_FLIGHT {
                in_flight.fetch_sub(1, Ordering::SeqCst);
                respond(
                    req,
                    http::Reply::error(503, "too many requests in flight; retry later"),
                );
                continue;
            }
            let (cfg, prof, n) = (self.cfg.clone(), self.prof.clone(), in_flight.clone());
            let addr = addr.clone();
            let spawned = std::thread::Builder::new()
                .name("memlens-serve".into())
                .spawn(move || {
                    let method = req.method().as_str().to_string();
                    let authority = req
                        .headers()
                        .iter()
                        .find(|h| h.field.equiv("Host"))
                        .map(|h| h.value.as_str().to_string())
                        .unwrap_or_else(|| addr.clone());
                    let reply = http::handle(&cfg, &prof, &method, req.url(), &authority);
                    n.fetch_sub(1, Ordering::SeqCst);
                    respond(req, reply);
                });
            if spawned.is_err() {
                in_flight.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// `memlens run --serve`: serve only `pid` (the program, started after the bind so that a bad
    /// address fails first), at the bare paths too, from a background thread for as long as this
    /// process lives.
    pub fn spawn_for(self, pid: i32) {
        let ep = Endpoint {
            cfg: Arc::new(http::Config {
                only: Some(pid),
                labels: Vec::new(),
                host: facts::host_name(),
            }),
            ..self
        };
        announce(&ep.addr(), Some(pid));
        std::thread::spawn(move || ep.run(|| true));
    }
}

/// Send `r`; a client that went away is not our problem (the target was never waiting on it).
fn respond(req: tiny_http::Request, r: http::Reply) {
    let mut resp = tiny_http::Response::from_data(r.body).with_status_code(r.status);
    let mut add = |k: &str, v: &str| {
        if let Ok(h) = tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()) {
            resp.add_header(h);
        }
    };
    add("Content-Type", r.content_type);
    add("X-Content-Type-Options", "nosniff");
    if let Some(f) = r.file {
        add(
            "Content-Disposition",
            &format!("attachment; filename=\"{f}\""),
        );
    }
    req.respond(resp).ok();
}

/// Where the server says it listens (tests and scripts read the port from this line).
fn announce(addr: &str, only: Option<i32>) {
    match only {
        Some(p) => eprintln!("memlens: serving process {p} on http://{addr}/debug/pprof/heap"),
        None => eprintln!(
            "memlens: serving the processes of uid {} under memlens (control directory {}) on http://{addr}/targets",
            discovery::my_uid(),
            memlens_target::ctl_dir().display()
        ),
    }
}

/// The whole `memlens serve`. With `--pid`, it ends when that process does.
pub fn run_serve(a: ServeArgs) -> Result<i32> {
    let only = a
        .pid
        .as_deref()
        .map(memlens_target::parse_pid)
        .transpose()?;
    if let Some(p) = only {
        discovery::resolve(p).map_err(|r| anyhow!("{}", r.reason))?;
    }
    let ep = Endpoint::bind(&a.listen, only, &a.labels)?;
    announce(&ep.addr(), only);
    let alive = move || only.is_none_or(|p| std::path::Path::new(&format!("/proc/{p}")).exists());
    ep.run(alive);
    if let Some(p) = only {
        eprintln!("memlens: process {p} has ended; stopping");
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        assert_eq!(
            parse_labels(&["service=orders".into(), "env=prod".into()]).unwrap(),
            vec![
                ("service".to_string(), "orders".to_string()),
                ("env".to_string(), "prod".to_string())
            ]
        );
        for bad in ["service", "=x", "a-b=1", "pid=3", "1a=2", "k="] {
            assert!(parse_labels(&[bad.into()]).is_err(), "{bad}");
        }
    }
}
