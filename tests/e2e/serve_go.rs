//! `memlens serve` speaks Go's `net/http/pprof` as Go does: profiles shaped as a real Go server
//! shapes them (snapshot or delta, period and sample types), `go tool pprof` over HTTP on a C++
//! program with `std::thread` (frames no symbol names), `/debug/pprof/symbol`, and a window whose
//! sampling ends when its seconds are over.
use crate::serve::{program, Server, Target};
use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `go tool pprof -raw WHAT` (a file or a URL), which must succeed: the profile as pprof parsed it.
fn go_pprof_raw(what: &str, tmp: &Path) -> String {
    Command::new("go")
        .args(["tool", "pprof", "-raw", what])
        .env("PPROF_TMPDIR", tmp)
        .ok_stdout()
}

/// What of a profile tells an engine its kind, as `pprof -raw` prints it: the period type line,
/// the duration (None for a snapshot) and the sample types line (`[dflt]` marks the default).
fn shape(raw: &str) -> (String, Option<f64>, String) {
    let line = |p: &str| raw.lines().find(|l| l.starts_with(p)).map(str::to_string);
    let duration = line("Duration: ").map(|l| {
        l.trim_start_matches("Duration: ")
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("duration in {l}"))
    });
    let types = raw
        .lines()
        .skip_while(|l| *l != "Samples:")
        .nth(1)
        .unwrap_or_else(|| panic!("no samples in\n{raw}"))
        .to_string();
    (line("PeriodType: ").unwrap_or_default(), duration, types)
}

/// A Go program that allocates (keeping some) and serves net/http/pprof; it writes DIR/port.
const GO_SERVER: &str = r#"package main

import (
	"fmt"
	"net"
	"net/http"
	_ "net/http/pprof"
	"os"
	"time"
)

var keep [][]byte

func main() {
	go func() {
		for {
			keep = append(keep, make([]byte, 64<<10))
			if len(keep) > 100 {
				keep = keep[1:]
			}
			time.Sleep(time.Millisecond)
		}
	}()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	os.WriteFile(os.Args[1]+"/port.tmp", []byte(fmt.Sprint(l.Addr().(*net.TCPAddr).Port)), 0o644)
	os.Rename(os.Args[1]+"/port.tmp", os.Args[1]+"/port")
	http.Serve(l, nil)
}
"#;

/// The Go server built and running in `dir`; killed on drop.
struct GoServer(std::process::Child);

impl GoServer {
    fn start(dir: &Path) -> (GoServer, u16) {
        std::fs::write(dir.join("main.go"), GO_SERVER).unwrap();
        std::fs::write(dir.join("go.mod"), "module gopprof\n\ngo 1.19\n").unwrap();
        Command::new("go")
            .args(["build", "-o", "gopprof", "."])
            .current_dir(dir)
            .env("GOTOOLCHAIN", "local")
            .env("GOFLAGS", "-mod=mod")
            .ok();
        let child = Command::new(dir.join("gopprof"))
            .arg(dir)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let mut port = 0;
        wait_for("the Go server's port", 20, || {
            port = std::fs::read_to_string(dir.join("port"))
                .ok()
                .and_then(|p| p.trim().parse().ok())
                .unwrap_or(0);
            port != 0
        });
        (GoServer(child), port)
    }
}

impl Drop for GoServer {
    fn drop(&mut self) {
        self.0.kill().ok();
        self.0.wait().ok();
    }
}

/// Heap and allocs snapshots have no duration, `?seconds=N` has N; period type and sample types
/// are those of a real Go server's (its `net/http/pprof`, built here), line for line. The one
/// difference: our allocs window keeps `alloc_space` as its default type (Go's delta loses it).
#[test]
fn profiles_have_the_shape_go_gives_them() {
    let tmp = test_dir();
    let ctl = ctl_dir(&tmp);
    let prog = program(&tmp);
    let t = Target::start(&ctl, &tmp.join("a"), &prog, "steady", &[]);
    let server = Server::start(&ctl, &["--pid", &t.pid.to_string()]);
    let go_dir = tmp.join("go");
    std::fs::create_dir(&go_dir).unwrap();
    let (_go, go_port) = GoServer::start(&go_dir);
    let pp = tmp.join("pprof");
    for path in [
        "/debug/pprof/heap",
        "/debug/pprof/allocs",
        "/debug/pprof/heap?seconds=1",
        "/debug/pprof/allocs?seconds=1",
    ] {
        let t0 = std::time::Instant::now();
        let ours = shape(&go_pprof_raw(&server.url(path), &pp));
        let ours_took = t0.elapsed().as_secs_f64();
        let go = shape(&go_pprof_raw(
            &format!("http://127.0.0.1:{go_port}{path}"),
            &pp,
        ));
        assert_eq!(ours.0, go.0, "{path}: period type");
        assert_eq!(ours.0, "PeriodType: space bytes");
        let window = path.contains("seconds=1");
        assert_eq!(ours.1.is_some(), window, "{path}: duration {:?}", ours.1);
        assert_eq!(go.1.is_some(), window, "{path}: Go's duration {:?}", go.1);
        if let Some(d) = ours.1 {
            // Between the window's two dumps: at least the second asked for, and no more than the
            // request itself took (measured by its client).
            assert!(
                d >= 1.0 && d <= ours_took,
                "{path}: duration {d}, the request took {ours_took}"
            );
        }
        if path == "/debug/pprof/allocs?seconds=1" {
            assert_eq!(go.2.replace("[dflt]", ""), ours.2.replace("[dflt]", ""));
            assert!(ours.2.contains("alloc_space/bytes[dflt]"), "{}", ours.2);
        } else {
            assert_eq!(ours.2, go.2, "{path}: sample types");
        }
    }
    drop(server);
    let (code, _, err) = t.finish();
    assert_eq!(code, 0, "{err}");
}

/// A C++ program whose allocations run on `std::thread`s: its stacks pass through a frame of the
/// (stripped) libstdc++ that no symbol names. Until DIR/stop.
const THREADS: &str = r#"
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

int main(int argc, char **argv) {
    std::string dir = argv[1];
    if (FILE *f = fopen((dir + "/pid.tmp").c_str(), "w")) { fprintf(f, "%d\n", (int)getpid()); fclose(f); }
    rename((dir + "/pid.tmp").c_str(), (dir + "/pid").c_str());
    while (access((dir + "/stop").c_str(), F_OK) != 0) {
        std::thread t([] {
            std::vector<char *> v;
            for (int i = 0; i < 1000; i++) v.push_back((char *)malloc(4096));
            for (char *p : v) free(p);
        });
        t.join();
        usleep(1000);
    }
}
"#;

/// `go tool pprof -top` over HTTP on a C++ `std::thread` program: every location has a function
/// (`module+0xOFFSET` for what no symbol names), so pprof has nothing to ask `/debug/pprof/symbol`;
/// and that endpoint answers as Go's does all the same (GET: the count; POST: names).
#[test]
fn go_pprof_over_http_reads_a_cpp_std_thread_program() {
    let tmp = test_dir();
    let ctl = ctl_dir(&tmp);
    let src = tmp.join("threads.cc");
    std::fs::write(&src, THREADS).unwrap();
    let prog = compile(&src, &tmp, "threads", &[]);
    let dir = tmp.join("a");
    std::fs::create_dir(&dir).unwrap();
    let mut server = Server::run_serve(&ctl, "64K", &dir, &prog, &[]);
    let pp = tmp.join("pprof");
    wait_for("samples of the threads", 20, || {
        server.get("/debug/pprof/allocs").1.len() > 500
    });
    let top = go_pprof_top(server.url("/debug/pprof/allocs"), None, &pp);
    assert!(top.contains("Type: alloc_space"), "{top}");
    assert!(top.contains("operator()"), "the lambda: {top}");
    let raw = go_pprof_raw(&server.url("/debug/pprof/allocs"), &pp);
    // `N: 0xADDR M=K name file:line …` for every location, and never a bare address.
    let locations: Vec<&str> = raw
        .lines()
        .skip_while(|l| *l != "Locations")
        .skip(1)
        .take_while(|l| *l != "Mappings")
        .filter(|l| {
            l.trim_start()
                .split(':')
                .next()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .collect();
    assert!(locations.len() > 3, "{raw}");
    let bare: Vec<&&str> = locations
        .iter()
        .filter(|l| l.split_whitespace().count() < 4)
        .collect();
    assert!(
        bare.is_empty(),
        "locations without a function: {bare:?}\n{raw}"
    );
    // The mapping of every location says it has functions ([FN]).
    let mappings: Vec<&str> = raw
        .lines()
        .skip_while(|l| *l != "Mappings")
        .skip(1)
        .collect();
    assert!(mappings.iter().all(|m| m.contains("[FN]")), "{mappings:?}");

    let (st, body) = server.get("/debug/pprof/symbol");
    assert_eq!(
        (st, String::from_utf8_lossy(&body).as_ref()),
        (200, "num_symbols: 1\n")
    );
    // POST the address of a location of the profile just served: Go's `0xADDR name` line back
    // (one whose name pprof shows unsimplified: it ends in ` s=0`, not ` s=0(full name)`).
    let first = locations
        .iter()
        .find(|l| l.ends_with(" s=0"))
        .unwrap_or_else(|| panic!("a location with a plain name in {locations:?}"))
        .split_whitespace()
        .collect::<Vec<_>>();
    let (addr, name) = (first[1], first[3]);
    let out = Command::new("curl")
        .args([
            "-sS",
            "--data-binary",
            &format!("{addr}+0x1"),
            &server.url("/debug/pprof/symbol"),
        ])
        .ok_stdout();
    assert_eq!(out, format!("num_symbols: 1\n{addr} {name}\n"), "{first:?}");

    std::fs::write(dir.join("stop"), "").unwrap();
    assert_eq!(server.child.wait().unwrap().code(), Some(0));
}

/// Polls memlens_status() every millisecond in a thread of its own (the public C API, weak) and
/// writes `ON_MS OFF_MS` (CLOCK_MONOTONIC) to DIR/switches each time sampling went on and off
/// again, while the main thread allocates; until DIR/stop.
const CLOCK: &str = r#"
#define MEMLENS_WEAK
#include <memlens.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static char dir[4000];
static double now_ms(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
static int stopped(void) {
    char p[4100]; snprintf(p, sizeof p, "%s/stop", dir); return access(p, F_OK) == 0;
}
static void *watch(void *arg) {
    (void)arg;
    double on = -1;
    while (!stopped()) {
        struct memlens_status st;
        if (memlens_status && memlens_status(&st) == 0) {
            if (st.active && on < 0) on = now_ms();
            if (!st.active && on >= 0) {
                char p[4100]; snprintf(p, sizeof p, "%s/switches", dir);
                FILE *f = fopen(p, "a"); fprintf(f, "%.1f %.1f\n", on, now_ms()); fclose(f);
                on = -1;
            }
        }
        usleep(1000);
    }
    return NULL;
}
__attribute__((noinline)) void *work(size_t n) { void *p = malloc(n); memset(p, 1, 16); return p; }
int main(int argc, char **argv) {
    (void)argc;
    snprintf(dir, sizeof dir, "%s", argv[1]);
    pthread_t t; pthread_create(&t, NULL, watch, NULL);
    char p[4100]; snprintf(p, sizeof p, "%s/pid.tmp", dir);
    FILE *f = fopen(p, "w"); fprintf(f, "%d\n", (int)getpid()); fclose(f);
    char q[4100]; snprintf(q, sizeof q, "%s/pid", dir); rename(p, q);
    while (!stopped()) { for (int i = 0; i < 100; i++) free(work(4096)); usleep(500); }
    pthread_join(t, NULL);
    return 0;
}
"#;

fn clock_program(dir: &Path) -> PathBuf {
    let src = dir.join("clock.c");
    std::fs::write(&src, CLOCK).unwrap();
    let inc = format!("-I{}", root().join("runtime/include").display());
    compile(&src, dir, "clock", &[&inc])
}

/// An `allocs?seconds=2` window on a program loaded inactive: sampling is on for two seconds, as
/// the program itself sees it, and off again before the end dump is symbolized and the reply
/// sent (it used to stay on for that long too).
#[test]
fn a_window_samples_for_its_seconds_and_no_longer() {
    let tmp = test_dir();
    let ctl = ctl_dir(&tmp);
    let prog = clock_program(&tmp);
    let t = Target::start(&ctl, &tmp.join("a"), &prog, "-", &["--inactive"]);
    let server = Server::start(&ctl, &[]);
    let (st, body) = server.get(&format!("/debug/pprof/allocs?pid={}&seconds=2", t.pid));
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    let switches = t.dir.join("switches");
    let mut text = String::new();
    wait_for("the program to see sampling switched off", 10, || {
        text = std::fs::read_to_string(&switches).unwrap_or_default();
        !text.is_empty()
    });
    let v: Vec<f64> = text
        .split_whitespace()
        .map(|x| x.parse().unwrap())
        .collect();
    assert_eq!(v.len(), 2, "one window: {text}");
    let on_ms = v[1] - v[0];
    // Two seconds between the window's start and its end, plus the stop request's round trip
    // and the program's 1 ms polling; the base dump (taken once sampling is on) adds to neither.
    eprintln!("window clock: sampling on for {on_ms:.1} ms");
    assert!(
        (1900.0..2075.0).contains(&on_ms),
        "sampling was on for {on_ms:.0} ms in a 2 s window"
    );
    drop(server);
    let (code, _, err) = t.finish();
    assert_eq!(code, 0, "{err}");
}
