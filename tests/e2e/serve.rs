//! `memlens serve` and `memlens run --serve`: the pprof endpoints scraped by real clients (`go tool
//! pprof`, curl, plain HTTP over TCP), with programs running under the real runtime.
//!
//! Every test uses its own control directory (MEMLENS_CTL_DIR) and a loopback port chosen by the
//! kernel, so tests never see each other's processes. `load_*` runs for MEMLENS_SERVE_LOAD_SECS
//! seconds (default 3; scripts/serve-load.sh runs the 30-second version and prints its numbers).
use crate::util::*;
use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The program under test. `steady`: allocates in steady_alloc() (keeping a ring of blocks live),
/// checking every block it fills, until DIR/stop; prints its check count and errors. `phases`:
/// allocates in before_window(), writes DIR/a-done, waits for DIR/go, allocates in
/// inside_window(), writes DIR/b-done, waits for DIR/stop.
const PROG: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char dir[4096];
static int exists(const char *name) {
    char p[4200]; snprintf(p, sizeof p, "%s/%s", dir, name); return access(p, F_OK) == 0;
}
static void touch(const char *name) {
    char p[4200]; snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w"); if (f) fclose(f);
}
static unsigned long checks, errors;
static void *ring[4096]; /* ~10 MB live: a heap profile always has samples */

__attribute__((noinline)) void *steady_alloc(size_t n) {
    unsigned char *p = malloc(n);
    memset(p, (int)(n & 0xff), n);
    for (size_t i = 0; i < n; i += 64) errors += p[i] != (unsigned char)(n & 0xff);
    checks++;
    return p;
}
__attribute__((noinline)) void *before_window(size_t n) { void *p = malloc(n); memset(p, 1, 8); return p; }
__attribute__((noinline)) void *inside_window(size_t n) { void *p = malloc(n); memset(p, 2, 8); return p; }

static void burst(void *(*fn)(size_t), int n) {
    for (int i = 0; i < n; i++) free(fn(8192));
}

int main(int argc, char **argv) {
    snprintf(dir, sizeof dir, "%s", argv[1]);
    char p[4200]; snprintf(p, sizeof p, "%s/pid.tmp", dir);
    FILE *f = fopen(p, "w"); fprintf(f, "%d\n", (int)getpid()); fclose(f);
    char q[4200]; snprintf(q, sizeof q, "%s/pid", dir); rename(p, q);
    if (strcmp(argv[2], "phases") == 0) {
        burst(before_window, 20000);
        touch("a-done");
        while (!exists("go")) usleep(2000);
        burst(inside_window, 20000);
        touch("b-done");
        while (!exists("stop")) usleep(5000);
        return 0;
    }
    for (unsigned i = 0; !exists("stop"); i++) {
        for (int k = 0; k < 64; k++, i++) {
            void *b = steady_alloc(1024 + (i % 13) * 256);
            free(ring[i % 4096]);
            ring[i % 4096] = b;
        }
        usleep(2000);
    }
    printf("checks>0=%d errors=%lu\n", checks > 0, errors);
    return errors != 0;
}
"#;

pub(crate) fn program(dir: &Path) -> PathBuf {
    let src = dir.join("serve_target.c");
    std::fs::write(&src, PROG).unwrap();
    compile(&src, dir, "serve_target", &["-fno-omit-frame-pointer"])
}

/// A program under `memlens run` with its own directory; stopped and reaped on drop.
pub(crate) struct Target {
    child: Option<Child>,
    pub(crate) dir: PathBuf,
    pub(crate) pid: i32,
}

impl Target {
    /// `memlens run RUN_ARGS -- PROG DIR MODE`: the program writes DIR/pid and ends when DIR/stop
    /// appears (every test program of the serve tests follows this).
    pub(crate) fn start(
        ctl: &Path,
        dir: &Path,
        prog: &Path,
        mode: &str,
        run_args: &[&str],
    ) -> Target {
        Target::start_with(ctl, dir, prog, &[mode], run_args)
    }

    /// `memlens run RUN_ARGS -- PROG DIR PROG_ARGS…`, as [`Target::start`].
    pub(crate) fn start_with(
        ctl: &Path,
        dir: &Path,
        prog: &Path,
        prog_args: &[&str],
        run_args: &[&str],
    ) -> Target {
        std::fs::create_dir_all(dir).unwrap();
        let child = memlens()
            .arg("run")
            .args(run_args)
            .arg("-o")
            .arg(dir.join("exit.pb.gz"))
            .arg("--")
            .arg(prog)
            .arg(dir)
            .args(prog_args)
            .env("MEMLENS_CTL_DIR", ctl)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start memlens run");
        let mut t = Target {
            child: Some(child),
            dir: dir.to_path_buf(),
            pid: 0,
        };
        wait_for("the program's pid", 20, || {
            t.pid = std::fs::read_to_string(dir.join("pid"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
                .unwrap_or(0);
            t.pid != 0
        });
        wait_for("the control socket", 20, || {
            ctl_cmd(ctl, t.pid, "status").status.success()
        });
        t
    }

    /// Stop the program; (exit code, stdout, stderr) of `memlens run`.
    pub(crate) fn finish(mut self) -> (i32, String, String) {
        std::fs::write(self.dir.join("stop"), "").unwrap();
        let o = self.child.take().unwrap().wait_with_output().unwrap();
        (o.status.code().unwrap_or(-1), stdout(&o), stderr(&o))
    }
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(c) = self.child.take() {
            stop_via_file(c, &self.dir);
        }
    }
}

fn ctl_cmd(ctl: &Path, pid: i32, what: &str) -> std::process::Output {
    memlens()
        .args(["ctl", &pid.to_string(), what])
        .env("MEMLENS_CTL_DIR", ctl)
        .out()
}

/// A running `memlens serve` (or `memlens run --serve`): its process, the port it announced and
/// the token every request must carry (read from the file it named).
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) port: u16,
    pub(crate) token: String,
    /// The token's file.
    pub(crate) token_file: PathBuf,
    /// What it printed on stderr after its address line.
    err: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    pub(crate) fn start(ctl: &Path, args: &[&str]) -> Server {
        let mut cmd = memlens();
        cmd.arg("serve")
            .args(["--listen", "127.0.0.1:0"])
            .args(args);
        Server::spawn(cmd.env("MEMLENS_CTL_DIR", ctl))
    }

    /// `memlens run --serve` on a loopback port of the system's choosing, sampling every
    /// `interval`: `prog DIR ARGS…` with its profile at `DIR/exit.pb.gz`.
    pub(crate) fn run_serve(
        ctl: &Path,
        interval: &str,
        dir: &Path,
        prog: &Path,
        args: &[&str],
    ) -> Server {
        let mut cmd = memlens();
        cmd.args([
            "run",
            "--serve",
            "127.0.0.1:0",
            "--interval",
            interval,
            "-o",
        ])
        .arg(dir.join("exit.pb.gz"))
        .arg("--")
        .arg(prog)
        .arg(dir)
        .args(args)
        .env("MEMLENS_CTL_DIR", ctl);
        Server::spawn(&mut cmd)
    }

    /// Start `cmd` and read the port from its `memlens: serving … http://127.0.0.1:PORT/…; every
    /// request needs the token of FILE (…)` line, and the token from FILE.
    pub(crate) fn spawn(cmd: &mut Command) -> Server {
        let mut child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let port = loop {
            line.clear();
            assert!(
                err.read_line(&mut line).unwrap() > 0,
                "the server ended without announcing its address"
            );
            if let Some(rest) = line.split("http://127.0.0.1:").nth(1) {
                let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
                break digits.parse().unwrap();
            }
        };
        let token_file = PathBuf::from(
            line.split("the token of ")
                .nth(1)
                .and_then(|r| r.split(" (").next())
                .unwrap_or_else(|| panic!("no token file in: {line}")),
        );
        let token = std::fs::read_to_string(&token_file)
            .unwrap()
            .trim()
            .to_string();
        // Keep draining its stderr so it never blocks on a full pipe.
        let text = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let t2 = text.clone();
        std::thread::spawn(move || {
            let mut line = String::new();
            while err.read_line(&mut line).is_ok_and(|n| n > 0) {
                t2.lock().unwrap().push_str(&line);
                line.clear();
            }
        });
        Server {
            child,
            port,
            token,
            token_file,
            err: text,
        }
    }

    /// The URL of `path` with the token as the password of basic auth, as `go tool pprof` and
    /// curl send it.
    pub(crate) fn url(&self, path: &str) -> String {
        format!(
            "http://memlens:{}@127.0.0.1:{}{path}",
            self.token, self.port
        )
    }

    pub(crate) fn get(&self, path: &str) -> (u16, Vec<u8>) {
        get(self.port, &self.token, path)
    }

    /// Its stderr so far (after the address line).
    pub(crate) fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }
}

impl Drop for Server {
    /// SIGTERM first: `memlens serve` stops (ending its windows), `memlens run --serve` passes it
    /// on to its program, which a SIGKILL of memlens alone would leave running after a failed
    /// test. SIGKILL after 5 s.
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            // SAFETY: a signal to our own child, not yet reaped.
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(5) {
                if let Ok(Some(_)) = self.child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// A plain HTTP/1.0 GET over TCP with `token` as a bearer token (none when empty): (status, body).
pub(crate) fn get(port: u16, token: &str, path: &str) -> (u16, Vec<u8>) {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    get_over(s, token, path)
}

/// A plain HTTP/1.0 GET over a connected stream (TCP or a unix socket): (status, body).
pub(crate) fn get_over<S: Read + Write>(mut s: S, token: &str, path: &str) -> (u16, Vec<u8>) {
    let auth = if token.is_empty() {
        String::new()
    } else {
        format!("Authorization: Bearer {token}\r\n")
    };
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{auth}\r\n").unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("no end of headers");
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    (status, raw[end + 4..].to_vec())
}

pub(crate) fn curl(url: &str) -> String {
    Command::new("curl").args(["-sSf", url]).ok_stdout()
}

/// Lines of a `-top` listing whose function is `name`, with a non-zero flat value.
pub(crate) fn flat_has(top: &str, name: &str) -> bool {
    top.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() >= 6 && f[5] == name && !f[0].starts_with('0')
    })
}

/// Parsed exposition: metric name → its series (labels, value).
pub(crate) type Families = BTreeMap<String, Vec<(BTreeMap<String, String>, f64)>>;

/// A validating parser of the Prometheus text format (0.0.4): every sample line is `name{labels}
/// value` with a legal name, well-formed and escaped label values, a float value, a `# TYPE`
/// declared before it, `_total` names for counters, and no series twice. Returns name → series.
pub(crate) fn parse_prometheus(text: &str) -> Families {
    fn legal(name: &str) -> bool {
        let mut c = name.chars();
        c.next()
            .is_some_and(|f| f.is_ascii_alphabetic() || f == '_' || f == ':')
            && c.all(|x| x.is_ascii_alphanumeric() || x == '_' || x == ':')
    }
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut out = Families::new();
    let mut seen = HashSet::new();
    assert!(text.ends_with('\n'), "exposition must end with a newline");
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let f: Vec<&str> = rest.splitn(3, ' ').collect();
            match f[0] {
                "TYPE" => {
                    assert!(legal(f[1]), "bad name in {line}");
                    assert!(
                        ["counter", "gauge", "histogram", "summary", "untyped"].contains(&f[2]),
                        "bad type in {line}"
                    );
                    assert!(
                        types.insert(f[1].into(), f[2].into()).is_none(),
                        "TYPE twice: {line}"
                    );
                }
                "HELP" => assert!(legal(f[1]) && f.len() == 3, "bad HELP: {line}"),
                _ => {}
            }
            continue;
        }
        assert!(!line.trim().is_empty(), "blank line in the exposition");
        let (series, value) = line.rsplit_once(' ').expect("no value");
        let value: f64 = value
            .parse()
            .unwrap_or_else(|_| panic!("bad value: {line}"));
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((n, rest)) => {
                let body = rest.strip_suffix('}').unwrap_or_else(|| panic!("{line}"));
                let mut labels = BTreeMap::new();
                let mut chars = body.chars().peekable();
                while chars.peek().is_some() {
                    let key: String = chars.by_ref().take_while(|&c| c != '=').collect();
                    assert!(legal(&key), "bad label name in {line}");
                    assert_eq!(chars.next(), Some('"'), "unquoted label value: {line}");
                    let mut v = String::new();
                    loop {
                        match chars
                            .next()
                            .unwrap_or_else(|| panic!("unterminated: {line}"))
                        {
                            '"' => break,
                            '\\' => match chars.next() {
                                Some('n') => v.push('\n'),
                                Some(c @ ('\\' | '"')) => v.push(c),
                                _ => panic!("bad escape in {line}"),
                            },
                            c => v.push(c),
                        }
                    }
                    assert!(labels.insert(key, v).is_none(), "label twice: {line}");
                    match chars.next() {
                        None => break,
                        Some(',') => {}
                        Some(c) => panic!("unexpected {c:?} in {line}"),
                    }
                }
                (n, labels)
            }
        };
        assert!(legal(name), "bad metric name: {line}");
        let kind = types
            .get(name)
            .unwrap_or_else(|| panic!("no TYPE before {line}"));
        if kind == "counter" {
            assert!(name.ends_with("_total"), "counter without _total: {line}");
        }
        assert!(seen.insert(series.to_string()), "series twice: {line}");
        out.entry(name.into()).or_default().push((labels, value));
    }
    out
}

/// The value of `name` for `pid`.
fn metric(m: &Families, name: &str, pid: i32) -> f64 {
    m.get(name)
        .and_then(|s| {
            s.iter()
                .find(|(l, _)| l.get("pid") == Some(&pid.to_string()))
        })
        .unwrap_or_else(|| panic!("no {name} for pid {pid}"))
        .1
}

pub(crate) fn targets_json(server: &Server) -> Vec<serde_json::Value> {
    let v: serde_json::Value = serde_json::from_str(&curl(&server.url("/targets"))).unwrap();
    v.as_array().expect("/targets is a JSON array").clone()
}

/// The test program in its `steady` phase, loaded inactive, its control socket in `ctl`.
fn steady_inactive(dir: &Path, ctl: &Path) -> Target {
    let prog = program(dir);
    Target::start(ctl, &dir.join("a"), &prog, "steady", &["--inactive"])
}

/// A program loaded inactive, `go tool pprof` on the allocs window and on the heap, curl of
/// /targets and /metrics; the window leaves the program inactive again.
#[test]
fn go_pprof_reads_a_window_and_the_heap_and_targets_and_metrics_parse() {
    let tmp = test_dir();
    let ctl = ctl_dir(tmp.path());
    let t = steady_inactive(tmp.path(), &ctl);
    let server = Server::start(&ctl, &[]);

    let list = targets_json(&server);
    assert_eq!(list.len(), 1, "{list:?}");
    let e = &list[0];
    assert_eq!(e["pid"], t.pid);
    assert_eq!(e["command"], "serve_target");
    assert_eq!(e["service"], "serve_target");
    assert_eq!(e["active"], false);
    assert_eq!(e["interval"], 524288);
    assert_eq!(e["samples"], 0);
    // The same process as a scrape target (Prometheus HTTP SD, for Alloy and Parca).
    let sd: serde_json::Value = serde_json::from_str(&curl(&server.url("/sd"))).unwrap();
    assert_eq!(
        sd[0]["targets"][0],
        format!("127.0.0.1:{}", server.port),
        "{sd}"
    );
    assert_eq!(sd[0]["labels"]["__param_pid"], t.pid.to_string(), "{sd}");
    assert_eq!(sd[0]["labels"]["service_name"], "serve_target", "{sd}");

    // The window (20 s: what is read inside it must fit in it on a busy machine) in the background;
    // the metrics and the heap read while it samples: an inactive process has no live sampled
    // blocks to show (its ring of blocks is renewed in 0.1 s).
    let pp = tmp.path().join("pprof");
    let window = server.url(&format!("/debug/pprof/allocs?pid={}&seconds=20", t.pid));
    let pp2 = pp.clone();
    let scrape = std::thread::spawn(move || go_pprof_top(&window, None, &pp2));
    wait_for("the window to switch sampling on", 20, || {
        targets_json(&server)[0]["active"] == true
    });
    // ... and for the sampled blocks of the ring to make up a live heap
    wait_for("a sampled live heap", 20, || {
        targets_json(&server)[0]["inuse_bytes"].as_f64() > Some(1e6)
    });
    let m = parse_prometheus(&curl(&server.url("/metrics")));
    let heap = go_pprof_top(
        server.url(&format!("/debug/pprof/heap?pid={}", t.pid)),
        None,
        &pp,
    );
    assert!(heap.contains("Type: inuse_space"), "{heap}");
    assert!(flat_has(&heap, "steady_alloc"), "{heap}");

    assert_eq!(m["memlens_targets"][0].1, 1.0);
    assert!(metric(&m, "memlens_rss_bytes", t.pid) > 1e6);
    assert!(metric(&m, "memlens_heap_inuse_bytes", t.pid) > 1e6);
    assert!(metric(&m, "memlens_samples_total", t.pid) > 0.0);
    assert_eq!(metric(&m, "memlens_dropped_samples_total", t.pid), 0.0);
    assert_eq!(metric(&m, "memlens_sampling_active", t.pid), 1.0);
    let labels = &m["memlens_rss_bytes"][0].0;
    assert_eq!(labels["service"], "serve_target");
    assert!(!labels["host"].is_empty());

    let top = scrape.join().unwrap();
    assert!(top.contains("Type: alloc_space"), "{top}");
    assert!(flat_has(&top, "steady_alloc"), "{top}");
    assert!(top.contains(&format!("pid={}", t.pid)), "labels: {top}");
    // Sampling was switched on for the window only.
    let after = targets_json(&server);
    assert_eq!(after[0]["active"], false, "{after:?}");
    assert!(after[0]["samples"].as_u64().unwrap() > 0, "{after:?}");

    let (code, out, err) = t.finish();
    assert_eq!((code, out.trim()), (0, "checks>0=1 errors=0"), "{err}");
}

/// The window holds only what was allocated inside it: before_window()'s allocations, made (and
/// sampled) before the request, are absent from it, though present in the cumulative profile.
#[test]
fn the_window_holds_only_allocations_made_inside_it() {
    let tmp = test_dir();
    let ctl = ctl_dir(tmp.path());
    let prog = program(tmp.path());
    let dir = tmp.path().join("p");
    let t = Target::start(&ctl, &dir, &prog, "phases", &["--interval", "64K"]);
    wait_for("phase A", 20, || dir.join("a-done").exists());
    let server = Server::start(&ctl, &[]);
    let (port, token) = (server.port, server.token.clone());
    let pid = t.pid;
    // The window's first dump is a raw dump the process writes into the control directory (and the
    // server removes once read): phase B starts once it is written, and ends (in milliseconds) well
    // before the window does.
    let mut written = Written::watch(&ctl);
    let req = std::thread::spawn(move || {
        get(
            port,
            &token,
            &format!("/debug/pprof/allocs?pid={pid}&seconds=4"),
        )
    });
    written.wait("the window's first dump", 20, |n| {
        n.starts_with(&format!("{pid}.dump-")) && n.ends_with(".raw")
    });
    std::fs::write(dir.join("go"), "").unwrap();
    wait_for("phase B", 20, || dir.join("b-done").exists());
    let (status, body) = req.join().unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let f = tmp.path().join("window.pb.gz");
    std::fs::write(&f, body).unwrap();
    let pp = tmp.path().join("pprof");
    let top = go_pprof_top(&f, Some("alloc_space"), &pp);
    assert!(flat_has(&top, "inside_window"), "{top}");
    assert!(!top.contains("before_window"), "{top}");
    // The cumulative profile has both: the test can tell the two apart.
    let all = go_pprof_top(
        server.url(&format!("/debug/pprof/allocs?pid={pid}")),
        None,
        &pp,
    );
    assert!(flat_has(&all, "before_window"), "{all}");
    assert!(flat_has(&all, "inside_window"), "{all}");
    // It was active before the window, so it stays active.
    assert_eq!(targets_json(&server)[0]["active"], true);
    let (code, _, err) = t.finish();
    assert_eq!(code, 0, "{err}");
}

/// Bad requests, and processes a server does not show (not under memlens, another user's), get an
/// HTTP error with a one-line reason that names no process it does not show.
#[test]
fn bad_requests_get_a_one_line_error() {
    let tmp = test_dir();
    let ctl = ctl_dir(tmp.path());
    let t = steady_inactive(tmp.path(), &ctl);
    let server = Server::start(&ctl, &[]);
    let me = std::process::id();
    let cases: Vec<(String, u16, String)> = vec![
        ("/debug/pprof/heap".into(), 400, "missing ?pid=PID".into()),
        (
            "/debug/pprof/heap?pid=x1".into(),
            400,
            "not a process id".into(),
        ),
        (
            format!("/debug/pprof/allocs?pid={}&seconds=0", t.pid),
            400,
            "seconds '0'".into(),
        ),
        (
            format!("/debug/pprof/allocs?pid={}&seconds=abc", t.pid),
            400,
            "seconds 'abc'".into(),
        ),
        // A pid that does not exist, one of ours not under memlens, and pid 1 (root's, when the
        // tests do not run as root) all read the same: nothing is told of a process not shown.
        (
            "/debug/pprof/heap?pid=2147483647".into(),
            404,
            "process 2147483647 is not one this server shows".into(),
        ),
        (
            format!("/debug/pprof/heap?pid={me}"),
            404,
            format!("process {me} is not one this server shows"),
        ),
        (
            "/debug/pprof/allocs?pid=1&seconds=1".into(),
            404,
            "process 1 is not one this server shows".into(),
        ),
        ("/debug/pprof/profile".into(), 404, "no endpoint".into()),
    ];
    let comm = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .unwrap()
            .trim()
            .to_string()
    };
    let (my_comm, init_comm) = (comm("self"), comm("1"));
    for (path, want, reason) in &cases {
        let (status, body) = server.get(path);
        let body = String::from_utf8_lossy(&body);
        assert_eq!(status, *want, "{path}: {body}");
        assert_eq!(body.lines().count(), 1, "{path}: {body}");
        assert!(body.contains(reason.as_str()), "{path}: {body}");
        for c in [&my_comm, &init_comm] {
            assert!(!body.contains(c.as_str()), "{path} names '{c}': {body}");
        }
    }
    drop(t);
}

#[test]
fn methods_other_than_get_are_refused_with_an_allow_header() {
    let tmp = test_dir();
    let server = Server::start(&ctl_dir(tmp.path()), &[]);
    // Methods: POST only where Go takes one (the symbol endpoint), with an Allow header.
    let mut s = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    write!(
        s,
        "POST /metrics HTTP/1.0\r\nAuthorization: Bearer {}\r\nContent-Length: 0\r\n\r\n",
        server.token
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 405 "), "{raw}");
    assert!(raw.contains("\r\nAllow: GET, HEAD\r\n"), "{raw}");
}

#[test]
fn serve_command_line_refusals_are_one_line() {
    let tmp = test_dir();
    let ctl = ctl_dir(tmp.path());
    let me = std::process::id();
    // The command line's own refusals: one line, exit 2 for usage, 1 for a process we cannot serve.
    let me_s = me.to_string();
    for (args, code, why) in [
        (
            vec!["--pid", "2147483647"],
            1,
            "no process with PID 2147483647",
        ),
        (vec!["--pid", &me_s], 1, "not running under memlens"),
        (vec!["--pid", "x"], 2, "'x' is not a process id"),
        (vec!["--label", "pid=3"], 2, "pid is set by memlens"),
        (vec!["--label", "noequals"], 2, "bad --label 'noequals'"),
    ]
    .into_iter()
    .map(|(mut a, c, w)| {
        a.extend(["--listen", "127.0.0.1:0"]);
        (a, c, w)
    })
    .chain([(
        vec!["--listen", "nowhere"],
        2,
        "bad listen address 'nowhere'",
    )]) {
        let o = memlens()
            .arg("serve")
            .args(&args)
            .env("MEMLENS_CTL_DIR", &ctl)
            .error(code);
        assert!(stderr(&o).contains(why), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn another_user_s_server_never_shows_our_process() {
    if !root_or_skip("a server of another user") {
        return;
    }
    let tmp = test_dir();
    let ctl = ctl_dir(tmp.path());
    let t = steady_inactive(tmp.path(), &ctl);
    // A server of another user (uid 65534; acting as one needs root, as CI runs) never shows our
    // process, nor says whose it is or what it runs. (A server of root is the node agent and shows
    // every user's: docs/containers.md.)
    use std::os::unix::fs::PermissionsExt;
    let open = tmp.path().join("nobody");
    std::fs::create_dir(&open).unwrap();
    for d in [tmp.path(), open.as_path()] {
        std::fs::set_permissions(d, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let theirs = Server::spawn(
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(memlens_path())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("MEMLENS_CTL_DIR", open.join("ctl")),
    );
    let (status, body) = theirs.get(&format!("/debug/pprof/heap?pid={}", t.pid));
    let (s2, _) = theirs.get(&format!("/debug/pprof/allocs?pid={}&seconds=1", t.pid));
    let body = String::from_utf8_lossy(&body);
    assert_eq!((status, s2), (404, 404), "{body}");
    assert!(
        body.contains(&format!("process {} is not one this server shows", t.pid)),
        "{body}"
    );
    // Neither its owner nor its command.
    assert!(
        !body.contains("belongs to") && !body.contains("serve_target"),
        "{body}"
    );
    assert_eq!(body.lines().count(), 1, "{body}");
    drop(t);
}

/// Another local user reads nothing of the server: over TCP without the token every endpoint
/// answers 401 (naming no process), the token's file is the owner's alone (mode 0600), and the
/// unix socket (mode 0600) does not let them connect; the owner reaches both (the socket without
/// a token). Command lines (a `--db-password=…` among the arguments) are in `/targets` only when
/// the server is started with `--show-cmdline`.
#[test]
fn another_local_user_reads_nothing_and_command_lines_are_shown_only_when_asked() {
    let tmp = test_dir();
    let ctl = ctl_dir(tmp.path());
    let prog = program(tmp.path());
    // The program's arguments carry a secret (it ignores them).
    let secret = "--db-password=hunter2";
    let t = Target::start_with(&ctl, &tmp.path().join("a"), &prog, &["steady", secret], &[]);
    let pid = t.pid;
    let server = Server::start(&ctl, &[]);
    let shown = Server::start(&ctl, &["--show-cmdline"]);
    // Both servers of this user share one token.
    assert_eq!(server.token, shown.token);
    let targets = curl(&server.url("/targets"));
    assert!(targets.contains(&format!("\"pid\": {pid}")), "{targets}");
    assert!(
        !targets.contains("hunter2") && !targets.contains("cmdline"),
        "{targets}"
    );
    let all = curl(&shown.url("/targets"));
    assert!(all.contains(secret), "{all}");
    // Without the token: 401 with one line that names no process, whatever the path.
    for path in [
        "/targets".to_string(),
        "/metrics".into(),
        "/sd".into(),
        format!("/debug/pprof/heap?pid={pid}"),
        "/nope".into(),
    ] {
        let (st, body) = get(server.port, "", &path);
        let body = String::from_utf8_lossy(&body);
        assert_eq!((st, body.lines().count()), (401, 1), "{path}: {body}");
        assert!(
            !body.contains("serve_target") && !body.contains(&pid.to_string()),
            "{body}"
        );
        let (st, _) = get(server.port, "not-the-token-at-all", &path);
        assert_eq!(st, 401, "{path}");
    }
    let mode = |p: &Path| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    };
    assert_eq!(mode(&server.token_file), 0o600);
    // The unix socket, in a directory any user may enter: the owner needs no token.
    use std::os::unix::fs::PermissionsExt;
    let open = tmp.path().join("open");
    std::fs::create_dir(&open).unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let sock = open.join("serve.sock");
    let mut unix = memlens()
        .args(["serve", "--listen"])
        .arg(format!("unix:{}", sock.display()))
        .env("MEMLENS_CTL_DIR", &ctl)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the unix socket", 20, || sock.exists());
    assert_eq!(mode(&sock), 0o600);
    let s = std::os::unix::net::UnixStream::connect(&sock).unwrap();
    let (st, body) = get_over(s, "", "/targets");
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    assert!(String::from_utf8_lossy(&body).contains(&format!("\"pid\": {pid}")));
    // Acting as another local user (uid 65534) needs root (CI runs as root).
    if root_or_skip("reading memlens serve as another user") {
        let nobody = |args: &[&str]| {
            Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .args(args)
                .out()
        };
        let token = server.token_file.display().to_string();
        let cat = nobody(&["cat", &token]);
        assert!(
            !cat.status.success() && cat.stdout.is_empty(),
            "{}",
            stdout(&cat)
        );
        let url = format!("http://127.0.0.1:{}", server.port);
        for path in ["/targets", &format!("/debug/pprof/heap?pid={pid}")] {
            let o = nobody(&[
                "curl",
                "-s",
                "-w",
                "\n%{http_code}",
                &format!("{url}{path}"),
            ]);
            let out = stdout(&o);
            assert!(out.ends_with("\n401"), "{path}: {out}");
            assert!(
                !out.contains("hunter2") && !out.contains("serve_target"),
                "{out}"
            );
        }
        let sock_s = sock.display().to_string();
        let o = nobody(&["curl", "-s", "--unix-socket", &sock_s, "http://x/targets"]);
        // curl: 7, could not connect (permission denied on the socket).
        assert_eq!(o.status.code(), Some(7), "{}", stdout(&o));
        assert!(o.stdout.is_empty(), "{}", stdout(&o));
    }
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(unix.id() as i32, libc::SIGTERM) };
    assert_eq!(unix.wait().unwrap().code(), Some(0));
    assert!(!sock.exists(), "the socket is removed when the server ends");
    let (code, out, err) = t.finish();
    assert_eq!((code, out.trim()), (0, "checks>0=1 errors=0"), "{err}");
}

/// `memlens run --serve` serves the program it runs at the bare Go paths, labelled with its name.
#[test]
fn run_serve_serves_its_program() {
    let tmp = test_dir();
    let ctl = ctl_dir(tmp.path());
    let prog = program(tmp.path());
    let dir = tmp.path().join("a");
    std::fs::create_dir(&dir).unwrap();
    let mut server = Server::run_serve(&ctl, "64K", &dir, &prog, &["steady"]);
    wait_for("the program's pid", 20, || dir.join("pid").exists());
    let pid: i32 = std::fs::read_to_string(dir.join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let pp = tmp.path().join("pprof");
    let mut heap = String::new();
    wait_for("a heap profile with the program's function", 20, || {
        let (st, body) = server.get("/debug/pprof/heap");
        if st != 200 {
            return false;
        }
        let f = tmp.path().join("heap.pb.gz");
        std::fs::write(&f, body).unwrap();
        heap = go_pprof_top(&f, None, &pp);
        flat_has(&heap, "steady_alloc")
    });
    assert!(heap.contains("service=serve_target"), "{heap}");
    let list = targets_json(&server);
    assert_eq!(list.len(), 1);
    assert_eq!(list[0]["pid"], pid);
    let (st, _) = server.get("/debug/pprof/heap?pid=1");
    assert_eq!(st, 404);
    std::fs::write(dir.join("stop"), "").unwrap();
    let status = server.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert!(dir.join("exit.pb.gz").exists());
}

/// `memlens serve --pid` serves one process at the bare paths with the labels given, and ends with it.
#[test]
fn serve_pid_uses_bare_paths_and_labels_and_ends_with_its_process() {
    let tmp = test_dir();
    let ctl = ctl_dir(tmp.path());
    let prog = program(tmp.path());
    let t = Target::start(&ctl, &tmp.path().join("a"), &prog, "steady", &[]);
    let pid = t.pid.to_string();
    let mut server = Server::start(
        &ctl,
        &[
            "--pid",
            &pid,
            "--label",
            "service=orders",
            "--label",
            "env=prod",
        ],
    );
    let (st, body) = server.get("/debug/pprof/allocs");
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    let f = tmp.path().join("allocs.pb.gz");
    std::fs::write(&f, body).unwrap();
    let top = go_pprof_top(&f, None, &tmp.path().join("pprof"));
    assert!(top.contains(&format!("service=orders pid={pid} ")), "{top}");
    assert!(top.contains("env=prod"), "{top}");
    let m = parse_prometheus(&curl(&server.url("/metrics")));
    let l = &m["memlens_rss_bytes"][0].0;
    assert_eq!(
        (l["service"].as_str(), l["env"].as_str()),
        ("orders", "prod")
    );
    assert_eq!(l["pid"], pid);
    let (code, _, err) = t.finish();
    assert_eq!(code, 0, "{err}");
    wait_for("the server to end with its process", 10, || {
        matches!(server.child.try_wait(), Ok(Some(_)))
    });
}

/// Load: 20 concurrent clients scrape 3 processes (every endpoint, windows included), plus a client
/// that never sends its request and clients that vanish mid-window. No error, every process still
/// answers, is left inactive as found, and its own output is unchanged.
#[test]
fn load_20_clients_3_processes() {
    let secs: u64 = std::env::var("MEMLENS_SERVE_LOAD_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let tmp = test_dir();
    let ctl = ctl_dir(tmp.path());
    let prog = program(tmp.path());
    let targets: Vec<Target> = (0..3)
        .map(|i| {
            Target::start(
                &ctl,
                &tmp.path().join(format!("t{i}")),
                &prog,
                "steady",
                &["--inactive"],
            )
        })
        .collect();
    let server = Server::start(&ctl, &[]);
    let (port, token) = (server.port, server.token.clone());
    let pids: Vec<i32> = targets.iter().map(|t| t.pid).collect();
    // A client that connects and says nothing, and one that leaves in the middle of a window.
    let mut silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    silent.write_all(b"GET /debug/pprof/heap?pid=").unwrap();
    {
        let mut gone = TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(
            gone,
            "GET /debug/pprof/allocs?pid={}&seconds=1 HTTP/1.0\r\nAuthorization: Bearer {token}\r\n\r\n",
            pids[0]
        )
        .unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(secs);
    let clients: Vec<_> = (0..20)
        .map(|c| {
            let (pids, token) = (pids.clone(), token.clone());
            std::thread::spawn(move || {
                let mut stats: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
                let mut n = c;
                while Instant::now() < deadline {
                    let pid = pids[n % 3];
                    let (kind, path) = match n % 5 {
                        0 => ("heap", format!("/debug/pprof/heap?pid={pid}")),
                        1 => ("allocs", format!("/debug/pprof/allocs?pid={pid}")),
                        2 => (
                            "allocs?seconds=1",
                            format!("/debug/pprof/allocs?pid={pid}&seconds=1"),
                        ),
                        3 => ("metrics", "/metrics".to_string()),
                        _ => ("targets", "/targets".to_string()),
                    };
                    let t0 = Instant::now();
                    let (status, body) = get(port, &token, &path);
                    let took = t0.elapsed();
                    assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(&body));
                    if kind.starts_with("heap") || kind.starts_with("allocs") {
                        // A whole profile, of the process asked for (its label comment).
                        let mut raw = Vec::new();
                        flate2::read::GzDecoder::new(&body[..])
                            .read_to_end(&mut raw)
                            .unwrap_or_else(|e| panic!("{path}: not a whole gzip stream: {e}"));
                        let mark = format!("memlens serve: service=serve_target pid={pid} ");
                        assert!(
                            raw.windows(mark.len()).any(|w| w == mark.as_bytes()),
                            "{path}: no '{mark}'"
                        );
                    }
                    stats.entry(kind).or_default().push(took);
                    n += 7;
                }
                stats
            })
        })
        .collect();
    let mut all: BTreeMap<&'static str, Vec<Duration>> = BTreeMap::new();
    for c in clients {
        for (k, v) in c.join().expect("a client failed") {
            all.entry(k).or_default().extend(v);
        }
    }
    drop(silent);
    println!("load: 20 clients, 3 processes, {secs} s");
    println!(
        "{:<18} {:>8} {:>10} {:>10} {:>10}",
        "endpoint", "requests", "median ms", "p95 ms", "max ms"
    );
    for (k, mut v) in all {
        v.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let p = |q: f64| ms(v[((v.len() - 1) as f64 * q).round() as usize]);
        println!(
            "{k:<18} {:>8} {:>10.1} {:>10.1} {:>10.1}",
            v.len(),
            p(0.5),
            p(0.95),
            ms(*v.last().unwrap())
        );
    }
    // Every window has closed: each process is inactive again (as found) and still answers.
    wait_for("every window to close", 20, || {
        let all = targets_json(&server);
        all.len() == 3 && all.iter().all(|e| e["active"] == false)
    });
    for t in targets {
        let (code, out, err) = t.finish();
        assert_eq!((code, out.trim()), (0, "checks>0=1 errors=0"), "{err}");
    }
}
