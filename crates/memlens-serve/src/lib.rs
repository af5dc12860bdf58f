//! `memlens serve`: pprof endpoints of the processes running under memlens, for continuous-profiling
//! systems (Grafana Pyroscope via Alloy, Parca) and `go tool pprof` to scrape, and a pusher of
//! their heaps and allocations to Pyroscope. docs/serve.md is the user's side of it.
//!
//! * `discovery.rs`: which processes (the control directory, our user only); refusals of the others.
//! * `facts.rs`: what is shown of each (name, counters, RSS; command lines only when asked) and of
//!   the host.
//! * `profiles.rs`: dumps through the control client, shared by concurrent scrapes; `seconds`
//!   windows; the difference of two dumps (a window, and what a push sends).
//! * `served.rs`: a profile in the shape Go's net/http/pprof gives it (snapshot or delta).
//! * `push.rs`: `--push URL`: every window, each process's heap and allocations to Pyroscope.
//! * `symbols.rs`: `/debug/pprof/symbol`.
//! * `http.rs`: the endpoints, request → reply.
//! * `metrics.rs`: `/targets` JSON and `/metrics` Prometheus text.
//! * `auth.rs`: who may read the server (a token over TCP); `listen.rs`: TCP or a unix socket.
//! * `server.rs`: HTTP/1.1 with a cap on connections and timeouts; `stop.rs`: signals.
//!
//! The server never makes a target wait for a client: a process is only ever asked for a status,
//! a start/stop or a dump over its control socket, and the reply is sent to the client after that
//! exchange is over, from the connection's own thread.
#![warn(missing_docs)]
mod auth;
mod discovery;
mod facts;
mod http;
mod listen;
mod metrics;
mod profiles;
mod push;
mod served;
mod server;
mod stop;
mod symbols;

use anyhow::{anyhow, Result};
use memlens_measure::error::usage;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Requests answered at once; more get 503 (a scraper retries at its next interval).
const MAX_IN_FLIGHT: usize = 64;

/// Where `memlens serve` listens when not told.
const DEFAULT_LISTEN: &str = "127.0.0.1:6060";

const EXAMPLE: &str = "Example:
  memlens run --inactive -- ./server &          # any number of programs under memlens
  memlens serve &                               # http://127.0.0.1:6060, with a token:
  auth() { printf 'Authorization: Bearer %s\\n' \"$(cat /tmp/memlens-$(id -u)/serve.token)\"; }
  curl -H @<(auth) http://127.0.0.1:6060/targets     # the token never on a command line
  curl -H @<(auth) -o a.pb.gz 'http://127.0.0.1:6060/debug/pprof/allocs?pid=1234&seconds=10'
  go tool pprof -top a.pb.gz
  memlens serve --listen unix:/tmp/memlens-$(id -u)/serve.sock   # no token: only you and root
  curl --unix-socket /tmp/memlens-$(id -u)/serve.sock http://x/targets
  memlens serve --pid 1234 --label service=orders   # one process at the bare Go paths
  memlens serve --push http://pyroscope:4040 --push-every 15   # to Pyroscope, nothing served

Endpoints (as Go's net/http/pprof: a snapshot has no duration, ?seconds=N is the difference over
the next N seconds): /debug/pprof/heap?pid=PID (live heap now), /debug/pprof/allocs?pid=PID
(allocations since sampling started), either with &seconds=N (sampling is switched on for the
window if it was off, and off again after), /debug/pprof/lifetimes?pid=PID (peak, freed and
lifetime values too), /debug/pprof/symbol, /targets (JSON), /metrics (Prometheus text), /sd (the
processes as scrape targets for Alloy's discovery.http or Parca's http_sd_configs). Over TCP every
request carries the token (Authorization: Bearer TOKEN, or basic auth with the token as the
password: Parca's and Alloy's authorization/bearer_token_file/basic_auth). Only processes of the
server's own user are shown, in any pid or mount namespace (containers: by their host pid); a
server of root is the node agent and shows every user's and every container's, labelled exe,
ns_pid, container_id, pod_uid (docs/containers.md); command lines only with --show-cmdline.
At most 128 connections (the longest idle one is closed to make room), idle ones closed after
15 s. See docs/serve.md.";

/// Serve pprof endpoints of the processes running under memlens (for Pyroscope, Parca, go tool pprof)
#[derive(Debug, clap::Args)]
#[command(after_help = EXAMPLE)]
pub struct ServeArgs {
    /// Where to listen: HOST:PORT (TCP, loopback by default; every request must carry the token)
    /// or unix:PATH (a socket only this user and root can open; no token) [default:
    /// 127.0.0.1:6060; with --push, nowhere unless given]
    #[arg(long, value_name = "HOST:PORT|unix:PATH")]
    pub(crate) listen: Option<String>,
    /// Serve only this process, also at the bare paths (/debug/pprof/heap without ?pid=)
    #[arg(long, value_name = "PID")]
    pub(crate) pid: Option<String>,
    /// Label added to every profile and metric (repeatable); `service=NAME` replaces the name taken
    /// from the command
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub(crate) labels: Vec<String>,
    /// The token TCP clients must send, in FILE (mode 0600; a new token is made there if FILE
    /// does not exist) [default: serve.token in the control directory, /tmp/memlens-UID]
    #[arg(long, value_name = "FILE")]
    pub(crate) token_file: Option<PathBuf>,
    /// Show each process's whole command line in /targets (arguments may hold passwords)
    #[arg(long)]
    pub(crate) show_cmdline: bool,
    /// Push each process's heap (a snapshot) and allocations (per window) to the Pyroscope server
    /// at URL (http://HOST:4040, or its /ingest)
    #[arg(long, value_name = "URL")]
    pub(crate) push: Option<String>,
    /// The push window: every SECONDS (1-3600), aligned to the clock
    #[arg(long, value_name = "SECONDS", default_value = "15", requires = "push")]
    pub(crate) push_every: String,
    /// Authenticate pushes with FILE's first line: USER:PASSWORD (basic auth, as Grafana Cloud
    /// takes) or a bearer token
    #[arg(long, value_name = "FILE", requires = "push")]
    pub(crate) push_auth_file: Option<PathBuf>,
}

/// A bound server, not yet serving.
pub struct Endpoint {
    listener: listen::Listener,
    cfg: http::Config,
    /// The token TCP requests must carry (None on a unix socket: the peer's credentials do).
    auth: Option<auth::Auth>,
}

fn parse_labels(raw: &[String]) -> Result<Vec<(String, String)>> {
    raw.iter()
        .map(|l| {
            let (k, v) = l.split_once('=').unwrap_or((l, ""));
            let name_ok = !k.is_empty()
                && !k.starts_with(|c: char| c.is_ascii_digit())
                && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            // A value goes into Pyroscope's `name{k=v,…}` too: nothing that would end it early.
            let value_ok =
                !v.is_empty() && !v.chars().any(|c| c.is_whitespace() || ",{}=\"\\".contains(c));
            if !name_ok || !value_ok {
                return Err(usage(format!(
                    "bad --label '{l}': expected KEY=VALUE with KEY of letters, digits and _, and a \
                     VALUE without spaces or any of , {{ }} = \" \\"
                )));
            }
            if ["pid", "host"].contains(&k) {
                return Err(usage(format!("--label {k}=…: {k} is set by memlens")));
            }
            if k == "service" && !facts::valid_service(v) {
                return Err(usage(format!(
                    "bad --label service={v}: a service name is ASCII letters, digits, _ . and -"
                )));
            }
            Ok((k.to_string(), v.to_string()))
        })
        .collect()
}

/// The push window from `--push-every`: whole seconds (`15` or `15s`), 1 to 3600.
fn parse_every(s: &str) -> Result<u64> {
    match s.trim_end_matches('s').parse::<u64>() {
        Ok(n) if (1..=3600).contains(&n) => Ok(n),
        _ => Err(usage(format!(
            "bad --push-every '{s}': expected whole seconds from 1 to 3600"
        ))),
    }
}

impl Endpoint {
    /// Listen on `listen` (HOST:PORT, port 0 picks a free one; or unix:PATH) with the default
    /// token (`memlens run --serve`).
    pub fn bind(listen: &str, only: Option<i32>, labels: &[String]) -> Result<Endpoint> {
        let cfg = http::Config {
            only,
            labels: parse_labels(labels)?,
            host: facts::host_name(),
            show_cmdline: false,
        };
        Endpoint::bind_with(listen, cfg, None)
    }

    fn bind_with(
        listen: &str,
        cfg: http::Config,
        token_file: Option<&std::path::Path>,
    ) -> Result<Endpoint> {
        let listener = listen::Listener::bind(listen)?;
        let auth = if listener.is_unix() {
            None
        } else {
            Some(auth::Auth::load(token_file)?)
        };
        Ok(Endpoint {
            listener,
            cfg,
            auth,
        })
    }

    /// Serve until `keep_going` says stop (checked about every 200 ms) or, with `signals`, a
    /// signal arrives; each connection in its own thread. `state` is shared with a pusher.
    fn run(
        self,
        state: Arc<http::State>,
        stop: Arc<stop::Stop>,
        keep_going: impl Fn() -> bool,
        signals: bool,
    ) -> Result<()> {
        let addr = self.listener.addr();
        let auth = self.auth;
        let in_flight = Arc::new(AtomicUsize::new(0));
        let handler = move |req: &server::Request| -> http::Reply {
            if let Some(a) = &auth {
                if !req.trusted && !a.allows(req.authorization.as_deref()) {
                    return http::Reply::error(401, &a.refusal());
                }
            }
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
        let mut ep = self;
        ep.cfg.only = Some(pid);
        ep.cfg.labels.clear();
        announce(&ep, Some(pid));
        std::thread::spawn(move || {
            let stop = Arc::new(stop::Stop::default());
            let state = Arc::new(http::State::new(ep.cfg.clone(), stop.clone()));
            if let Err(e) = ep.run(state, stop, || true, false) {
                eprintln!("memlens: error: serving process {pid}: {e:#}; no longer serving it");
            }
        });
    }
}

/// Where the server says it listens and how to get in (tests and scripts read the address from
/// this line).
fn announce(ep: &Endpoint, only: Option<i32>) {
    let base = ep.listener.url();
    let at = |path: &str| {
        if ep.listener.is_unix() {
            format!("{base} (GET {path})")
        } else {
            format!("{base}{path}")
        }
    };
    let access = match &ep.auth {
        Some(a) => format!(
            "; every request needs the token of {} (Authorization: Bearer TOKEN)",
            a.file.display()
        ),
        None => match discovery::my_uid() {
            0 => "; only root can connect".to_string(),
            me => format!("; only uid {me} and root can connect"),
        },
    };
    match only {
        Some(p) => eprintln!(
            "memlens: serving process {p} on {}{access}",
            at("/debug/pprof/heap")
        ),
        None => eprintln!(
            "memlens: serving {} under memlens ({}) on {}{access}",
            discovery::whose(),
            where_found(),
            at("/targets")
        ),
    }
}

/// Where the server looks for processes, for its first line.
fn where_found() -> String {
    if memlens_target::ctl_dir_given() {
        format!(
            "control directory {}, any pid namespace",
            memlens_target::ctl_dir().display()
        )
    } else {
        "/tmp/memlens-UID of every root: the host's and each container's".to_string()
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
    let cfg = http::Config {
        only,
        labels: parse_labels(&a.labels)?,
        host: facts::host_name(),
        show_cmdline: a.show_cmdline,
    };
    let pusher = match &a.push {
        Some(url) => Some(push::Pusher::new(
            url,
            parse_every(&a.push_every)?,
            a.push_auth_file.as_deref(),
        )?),
        None => None,
    };
    let listen = match (&a.listen, &pusher) {
        (Some(l), _) => Some(l.as_str()),
        (None, None) => Some(DEFAULT_LISTEN),
        (None, Some(_)) => None,
    };
    let ep = listen
        .map(|l| Endpoint::bind_with(l, cfg.clone(), a.token_file.as_deref()))
        .transpose()?;
    if let Some(ep) = &ep {
        announce(ep, only);
    }
    if let Some(p) = &pusher {
        p.announce(only);
    }
    stop::catch_signals();
    let stop = Arc::new(stop::Stop::default());
    let state = Arc::new(http::State::new(cfg, stop.clone()));
    let alive = move || only.is_none_or(|p| std::path::Path::new(&format!("/proc/{p}")).exists());
    std::thread::scope(|scope| -> Result<()> {
        if let Some(p) = &pusher {
            let (state, stop) = (state.clone(), stop.clone());
            scope.spawn(move || p.run(&state, &stop, || alive() && stop::signalled().is_none()));
        }
        if let Some(ep) = ep {
            ep.run(state.clone(), stop.clone(), alive, true)?;
        }
        Ok(())
    })?;
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
        for bad in [
            "service",
            "=x",
            "a-b=1",
            "pid=3",
            "1a=2",
            "k=",
            "k=a,b",
            "k=a b",
            "service=a b",
            "service=a/b",
        ] {
            assert!(parse_labels(&[bad.into()]).is_err(), "{bad}");
        }
        assert_eq!(parse_every("15s").unwrap(), 15);
        assert_eq!(parse_every("1").unwrap(), 1);
        for bad in ["0", "3601", "x", "1m", ""] {
            assert!(parse_every(bad).is_err(), "{bad}");
        }
    }
}
