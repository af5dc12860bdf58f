//! `memlens serve`: pprof endpoints of the processes running under memlens, for continuous-profiling
//! systems (Grafana Pyroscope via Alloy, Parca) and `go tool pprof` to scrape. docs/serve.md is
//! the user's side of it.
//!
//! * `discovery.rs`: which processes (the control directory, our user only); refusals of the others.
//! * `facts.rs`: what is shown of each (name, command line, counters, RSS) and of the host.
//! * `profiles.rs`: dumps through the control client, shared by concurrent scrapes; `seconds` windows.
//! * `served.rs`: a profile in the shape Go's net/http/pprof gives it (snapshot or delta).
//! * `symbols.rs`: `/debug/pprof/symbol`.
//! * `http.rs`: the endpoints, request → reply.
//! * `metrics.rs`: `/targets` JSON and `/metrics` Prometheus text.
//! * `server.rs`: HTTP/1.1 on TCP with a cap on connections and timeouts; `stop.rs`: signals.
//!
//! The server never makes a target wait for a client: a process is only ever asked for a status,
//! a start/stop or a dump over its control socket, and the reply is sent to the client after that
//! exchange is over, from the connection's own thread.
#![warn(missing_docs)]
mod discovery;
mod facts;
mod http;
mod metrics;
mod profiles;
mod served;
mod server;
mod stop;
mod symbols;

use anyhow::{anyhow, Result};
use memlens_measure::error::usage;
use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Requests answered at once; more get 503 (a scraper retries at its next interval).
const MAX_IN_FLIGHT: usize = 64;

const EXAMPLE: &str = "Example:
  memlens run --inactive -- ./server &          # any number of programs under memlens
  memlens serve --listen 127.0.0.1:6060 &
  curl http://127.0.0.1:6060/targets
  go tool pprof -top 'http://127.0.0.1:6060/debug/pprof/allocs?pid=1234&seconds=10'
  go tool pprof -top 'http://127.0.0.1:6060/debug/pprof/heap?pid=1234'
  memlens serve --pid 1234 --label service=orders   # one process at the bare Go paths

Endpoints (as Go's net/http/pprof: a snapshot has no duration, ?seconds=N is the difference over
the next N seconds): /debug/pprof/heap?pid=PID (live heap now), /debug/pprof/allocs?pid=PID
(allocations since sampling started), either with &seconds=N (sampling is switched on for the
window if it was off, and off again after), /debug/pprof/lifetimes?pid=PID (peak, freed and
lifetime values too), /debug/pprof/symbol, /targets (JSON), /metrics (Prometheus text), /sd (the
processes as scrape targets for Alloy's discovery.http or Parca's http_sd_configs). Only processes
of the server's own user are shown, whatever its uid. At most 128 connections (the longest idle
one is closed to make room), idle ones closed after 15 s. See docs/serve.md.";

/// Serve pprof endpoints of the processes running under memlens (for Pyroscope, Parca, go tool pprof)
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLE)]
pub struct ServeArgs {
    /// Address to listen on (loopback by default; 0.0.0.0:6060 exposes it to the network)
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:6060")]
    pub(crate) listen: String,
    /// Serve only this process, also at the bare paths (/debug/pprof/heap without ?pid=)
    #[arg(long, value_name = "PID")]
    pub(crate) pid: Option<String>,
    /// Label added to every profile and metric (repeatable); `service=NAME` replaces the name taken
    /// from the command
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub(crate) labels: Vec<String>,
}

/// A bound server, not yet serving.
pub struct Endpoint {
    listener: TcpListener,
    cfg: http::Config,
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
        let listener =
            TcpListener::bind(addr).map_err(|e| anyhow!("cannot listen on {listen}: {e}"))?;
        Ok(Endpoint {
            listener,
            cfg: http::Config {
                only,
                labels: parse_labels(labels)?,
                host: facts::host_name(),
            },
        })
    }

    /// The address actually bound (with the port chosen when 0 was asked).
    fn addr(&self) -> String {
        match self.listener.local_addr() {
            Ok(a) => a.to_string(),
            Err(_) => "?".into(),
        }
    }

    /// Serve until `keep_going` says stop (checked about every 200 ms) or, with `signals`, a
    /// signal arrives; each connection in its own thread.
    fn run(self, keep_going: impl Fn() -> bool, signals: bool) -> Result<()> {
        let stop = Arc::new(stop::Stop::default());
        let addr = self.addr();
        let state = Arc::new(http::State {
            cfg: self.cfg,
            prof: profiles::Profiler::new(stop.clone()),
            symbols: symbols::Symbols::default(),
        });
        let in_flight = Arc::new(AtomicUsize::new(0));
        let handler = move |req: &server::Request| -> http::Reply {
            if in_flight.fetch_add(1, Ordering::SeqCst) >= MAX_IN_FLIGHT {
                in_flight.fetch_sub(1, Ordering::SeqCst);
                return http::Reply::error(503, "too many requests in flight; retry later");
            }
            let authority = req.host.as_deref().unwrap_or(&addr);
            let r = http::handle(&state, &req.method, &req.target, authority, &req.body);
            in_flight.fetch_sub(1, Ordering::SeqCst);
            r
        };
        server::serve(self.listener, Arc::new(handler), stop, keep_going, signals)
    }

    /// `memlens run --serve`: serve only `pid` (the program, started after the bind so that a bad
    /// address fails first), at the bare paths too, from a background thread for as long as this
    /// process lives.
    pub fn spawn_for(self, pid: i32) {
        let ep = Endpoint {
            cfg: http::Config {
                only: Some(pid),
                labels: Vec::new(),
                host: facts::host_name(),
            },
            ..self
        };
        announce(&ep.addr(), Some(pid));
        std::thread::spawn(move || {
            if let Err(e) = ep.run(|| true, false) {
                eprintln!("memlens: error: serving process {pid}: {e:#}; no longer serving it");
            }
        });
    }
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
    stop::catch_signals();
    let alive = move || only.is_none_or(|p| std::path::Path::new(&format!("/proc/{p}")).exists());
    ep.run(alive, true)?;
    match (stop::signalled(), only) {
        (Some(sig), _) => eprintln!("memlens: {sig}: stopped serving"),
        (None, Some(p)) => eprintln!("memlens: process {p} has ended; stopping"),
        (None, None) => {}
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
