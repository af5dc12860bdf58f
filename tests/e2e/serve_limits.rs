//! `memlens serve` survives its clients and leaves nothing behind: idle connections cannot use up
//! its descriptors (the longest idle one makes room for a new one), idle ones are closed after
//! 15 s, scrapes write no file anywhere, and a SIGTERM in the middle of a window ends the server
//! with the window's process switched off again.
use crate::serve::{get, program, targets_json, Server, Target};
use crate::util::*;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Descriptors the process has open.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// Files under `dir`, recursively, by name.
fn files_under(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p.display().to_string());
        }
    }
    out
}

/// A client holding 300 idle connections (more than twice the cap) and one sending its request a
/// byte at a time cannot stop the server nor lock a scraper out: the scrape that follows is
/// answered, the server's descriptors stay bounded, and it still answers once they are gone. An
/// idle connection is then closed by the server after 15 s.
#[test]
fn idle_connections_cannot_stop_the_server() {
    let tmp = test_dir();
    let ctl = ctl_dir(&tmp);
    let prog = program(&tmp);
    let t = Target::start(&ctl, &tmp.join("a"), &prog, "steady", &[]);
    // With 256 descriptors at most, as a small `ulimit -n` gives it: 300 connections used to be
    // the end of it (accept failed, and the server exited with status 0, silently).
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -n 256 && exec \"$0\" serve --listen 127.0.0.1:0")
        .arg(memlens_path())
        .env("MEMLENS_CTL_DIR", &ctl);
    let server = Server::spawn(&mut cmd);
    let port = server.port;
    let pid = server.child.id();
    // The slow client connects first: the longest idle when the others arrive.
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let slow = std::thread::spawn(move || {
        for b in b"GET /targets HTTP/1.1\r\nHost: x\r\n" {
            if s.write_all(&[*b]).is_err() {
                return "closed by the server";
            }
            // pacing on purpose: a slow client, one byte every 50 ms
            std::thread::sleep(Duration::from_millis(50));
        }
        "never closed"
    });
    let mut idle: Vec<TcpStream> = (0..300)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
        .collect();
    assert_eq!(idle.len(), 300, "connections refused by the kernel");
    // Served while the 300 idle connections are open (a server that waited for them would
    // time the scrape's client out first); how fast is serve-load.sh's figure, not a test's.
    let (st, body) = get(
        port,
        &server.token,
        &format!("/debug/pprof/heap?pid={}", t.pid),
    );
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    // Every connection made before the scrape has been accepted by now: 128 connections, the
    // listening socket, stdio and a few more are open, not 300.
    let fds = open_fds(pid);
    assert!(fds < 128 + 20, "the server has {fds} descriptors open");
    assert_eq!(slow.join().unwrap(), "closed by the server");
    // The oldest idle connections were closed to make room: reading them ends at once.
    let first = &mut idle[0];
    first
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut b = [0u8; 1];
    assert!(matches!(first.read(&mut b), Ok(0) | Err(_)));
    drop(idle);
    assert!(server.child.id() == pid && std::path::Path::new(&format!("/proc/{pid}")).exists());
    assert_eq!(targets_json(&server).len(), 1);

    drop(server);

    // An idle connection is closed after 15 s (it does not keep its thread and descriptor). On a
    // server of its own: the 300 connections dropped above may still reach the first server's
    // accept queue seconds later (their handshakes were retried), and a new arrival at the cap
    // rightly evicts the connection idle the longest, which could be this one.
    let server = Server::spawn(
        Command::new(memlens_path())
            .args(["serve", "--listen", "127.0.0.1:0"])
            .env("MEMLENS_CTL_DIR", &ctl),
    );
    let mut one = TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    one.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let t0 = Instant::now();
    // A signal for this test process (another test's child ending) interrupts the read: with a
    // read timeout set, the kernel does not restart it. Only the server's close (0 bytes, or a
    // reset) ends the wait.
    let r = loop {
        match one.read(&mut b) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            r => break r,
        }
    };
    let waited = t0.elapsed();
    let mut server = server;
    let mut why = || {
        format!(
            "{r:?} after {waited:?}; the server: {:?}, its stderr: {}",
            server.child.try_wait(),
            server.stderr()
        )
    };
    assert!(
        matches!(&r, Ok(0))
            || matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "the idle connection ended with {}",
        why()
    );
    // never before its 15 s (later, on a busy machine, is not the server's doing)
    assert!(
        waited >= Duration::from_secs(14),
        "an idle connection was closed early: {}",
        why()
    );
    drop(server);
    let (code, _, err) = t.finish();
    assert_eq!(code, 0, "{err}");
}

/// Scrapes of every kind write no file (not in TMPDIR, not in the control directory), and SIGTERM
/// in the middle of a window ends the server at once, saying so, with the process it had switched
/// on for the window switched off again; nothing is left behind then either.
#[test]
fn nothing_is_left_behind_and_sigterm_ends_open_windows() {
    let tmp = test_dir();
    let ctl = ctl_dir(&tmp);
    let prog = program(&tmp);
    let t = Target::start(&ctl, &tmp.join("a"), &prog, "steady", &["--inactive"]);
    let server_tmp = tmp.join("tmp");
    std::fs::create_dir(&server_tmp).unwrap();
    let mut cmd = memlens();
    cmd.args(["serve", "--listen", "127.0.0.1:0"])
        .env("MEMLENS_CTL_DIR", &ctl)
        .env("TMPDIR", &server_tmp);
    let mut server = Server::spawn(&mut cmd);
    let before = files_under(&ctl);
    let pid = t.pid;
    for path in [
        format!("/debug/pprof/allocs?pid={pid}&seconds=1"),
        format!("/debug/pprof/heap?pid={pid}"),
        format!("/debug/pprof/allocs?pid={pid}"),
        format!("/debug/pprof/lifetimes?pid={pid}"),
        format!("/debug/pprof/heap?pid={pid}&seconds=1"),
    ] {
        let (st, body) = server.get(&path);
        assert_eq!(st, 200, "{path}: {}", String::from_utf8_lossy(&body));
    }
    assert_eq!(files_under(&server_tmp), Vec::<String>::new());
    assert_eq!(files_under(&ctl), before, "the control directory");

    // A 60 s window; SIGTERM once it has switched sampling on.
    let (port, token) = (server.port, server.token.clone());
    let window = std::thread::spawn(move || {
        get(
            port,
            &token,
            &format!("/debug/pprof/allocs?pid={pid}&seconds=60"),
        )
        .0
    });
    wait_for("the window to switch sampling on", 20, || {
        targets_json(&server)[0]["active"] == true
    });
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(server.child.id() as i32, libc::SIGTERM) };
    let status = server.child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{}", server.stderr());
    // stopped without waiting out the 60 s window: its client is told so (a 503, not the window)
    assert_eq!(window.join().unwrap(), 503, "the window's client is told");
    wait_for("its stderr", 5, || server.stderr().contains("SIGTERM"));
    assert!(
        server
            .stderr()
            .contains("memlens: SIGTERM: stopped serving"),
        "{}",
        server.stderr()
    );
    let st = memlens()
        .args(["ctl", &pid.to_string(), "status"])
        .env("MEMLENS_CTL_DIR", &ctl)
        .ok_stdout();
    assert!(st.contains("inactive"), "left sampling: {st}");
    assert_eq!(files_under(&server_tmp), Vec::<String>::new());
    assert_eq!(files_under(&ctl), before, "the control directory");
    let (code, out, err) = t.finish();
    assert_eq!((code, out.trim()), (0, "checks>0=1 errors=0"), "{err}");
}
