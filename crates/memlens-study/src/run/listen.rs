//! Whether a server we started listens yet, and what a load's processes are doing.
//!
//! The runtime's control socket answers before the program's `main` runs, so a server that
//! answers it may not listen on its own port yet. A load started then is not guaranteed to fail
//! (and be retried): redis-benchmark 7.0 (Debian 12's) spins on a refused connection forever,
//! its error turned into EAGAIN (redis/redis#11366, fixed in later releases). So the first load
//! waits until the server (or a process it started) has a listening socket of its own: TCP, UDP
//! or a Unix socket other than the runtime's control socket.
use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

/// `pid` and every process below it (`/proc/PID/task/*/children`).
fn tree(pid: i32) -> Vec<i32> {
    let mut all = vec![pid];
    let mut i = 0;
    while i < all.len() && all.len() < 4096 {
        let tasks = std::fs::read_dir(format!("/proc/{}/task", all[i]));
        for t in tasks.into_iter().flatten().flatten() {
            let kids = std::fs::read_to_string(t.path().join("children")).unwrap_or_default();
            all.extend(
                kids.split_whitespace()
                    .filter_map(|k| k.parse::<i32>().ok()),
            );
        }
        i += 1;
    }
    all
}

/// The inodes of the sockets among `pid`'s descriptors.
fn socket_inodes(pid: i32, out: &mut HashSet<u64>) {
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"));
    for fd in fds.into_iter().flatten().flatten() {
        let Ok(link) = std::fs::read_link(fd.path()) else {
            continue; // closed meanwhile
        };
        let link = link.to_string_lossy();
        if let Some(n) = link
            .strip_prefix("socket:[")
            .and_then(|s| s.strip_suffix(']'))
        {
            out.extend(n.parse::<u64>().ok());
        }
    }
}

/// Inodes of the sockets of `/proc/net/{tcp,tcp6,udp,udp6}` text that wait for peers: TCP in
/// LISTEN (st 0A), UDP bound and unconnected (st 07).
fn inet_listeners(text: &str) -> impl Iterator<Item = u64> + '_ {
    text.lines().skip(1).filter_map(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let waits = matches!(f.get(3), Some(&"0A") | Some(&"07"));
        waits.then(|| f.get(9)?.parse().ok()).flatten()
    })
}

/// Inodes of the listening Unix sockets (flag __SO_ACCEPTCON) of `/proc/net/unix` text, but the
/// runtime's control socket `ours` (known by its file name, `PID.PIDNS.sock`, whichever path the
/// runtime bound it at).
fn unix_listeners<'a>(text: &'a str, ours: &'a Path) -> impl Iterator<Item = u64> + 'a {
    text.lines().skip(1).filter_map(move |l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        let listening = f.get(3) == Some(&"00010000");
        let mine = f
            .get(7)
            .is_some_and(|p| Path::new(p).file_name() == ours.file_name());
        (listening && !mine)
            .then(|| f.get(6)?.parse().ok())
            .flatten()
    })
}

/// Does `pid` (or a process it started) listen on a socket of its own?
pub fn listens(pid: i32, ours: &Path) -> bool {
    let mut inodes = HashSet::new();
    for p in tree(pid) {
        socket_inodes(p, &mut inodes);
    }
    if inodes.is_empty() {
        return false;
    }
    // /proc/PID/net is the table of the process's own network namespace
    let net = |f: &str| std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).unwrap_or_default();
    let unix = net("unix");
    let found = ["tcp", "tcp6", "udp", "udp6"]
        .iter()
        .any(|f| inet_listeners(&net(f)).any(|i| inodes.contains(&i)));
    found || unix_listeners(&unix, ours).any(|i| inodes.contains(&i))
}

/// Wait, at most `limit`, until `pid` listens (see [`listens`]) or `alive` says it ended. Whether
/// it listens: a server that does not (a worker, a program reached otherwise) is then studied all
/// the same, its first load retried as before.
pub fn wait_listening(pid: i32, ours: &Path, limit: Duration, alive: impl Fn() -> bool) -> bool {
    let t0 = Instant::now();
    loop {
        if listens(pid, ours) {
            return true;
        }
        if t0.elapsed() >= limit || !alive() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One process, as `ps` would say it, for a message: `NAME PID STATE, S s of CPU[, in WCHAN]`.
pub fn describe(pid: i32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // comm is in parentheses and may hold spaces: the fields after it are counted from its end
    let (name, rest) = stat.split_once(" (")?.1.rsplit_once(") ")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    let cpu = (ticks(11) + ticks(12)) / hz; // utime, stime (fields 14, 15)
    let state = match f.first().copied() {
        Some("R") => "running",
        Some("S") | Some("D") => "waiting",
        Some("Z") => "ended (not reaped)",
        Some("T") | Some("t") => "stopped",
        _ => "in an unknown state",
    };
    let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
    let wchan = match wchan.trim() {
        "" | "0" => String::new(),
        w => format!(", in {w}"),
    };
    Some(format!("{name} {pid} {state}, {cpu:.1} s of CPU{wchan}"))
}

/// The processes of process group `pgid`, each [`describe`]d.
pub fn group(pgid: i32) -> Vec<String> {
    let mut pids: Vec<i32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .filter(|&p| {
            // SAFETY: getpgid has no preconditions; a pid that is gone gives -1.
            unsafe { libc::getpgid(p) == pgid }
        })
        .collect();
    pids.sort_unstable();
    pids.into_iter().filter_map(describe).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcp_listen_and_udp_bound_count_established_does_not() {
        let tcp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0100007F:C901 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2204738 1 0000000000000000 100 0 0 10 0\n\
   1: 0100007F:C901 0100007F:8ED4 01 00000000:00000000 02:000E6C8E 00000000     0        0 2204759 1 0000000000000000 20 4 30 10 -1\n\
   2: 00000000:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 55 2 0000000000000000 0\n";
        assert_eq!(inet_listeners(tcp).collect::<Vec<_>>(), [2204738, 55]);
    }

    #[test]
    fn listening_unix_sockets_but_the_control_socket() {
        let unix = "Num       RefCount Protocol Flags    Type St Inode Path\n\
0000000000000000: 00000002 00000000 00010000 0001 01 2204712 /tmp/ctl/28200.4026531836.sock\n\
0000000000000000: 00000002 00000000 00010000 0001 01 2204790 /run/app.sock\n\
0000000000000000: 00000003 00000000 00000000 0001 03 2204791 /run/app.sock\n\
0000000000000000: 00000002 00000000 00010000 0001 01 2204792 @abstract\n";
        let ours = Path::new("/elsewhere/28200.4026531836.sock");
        assert_eq!(
            unix_listeners(unix, ours).collect::<Vec<_>>(),
            [2204790, 2204792]
        );
    }

    #[test]
    fn a_process_of_ours_listening_on_tcp_is_seen() {
        let me = std::process::id() as i32;
        let none = Path::new("/nonexistent");
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        assert!(listens(me, none));
        drop(l);
        let d = describe(me).unwrap();
        assert!(
            d.contains(&format!(" {me} ")) && d.contains("s of CPU"),
            "{d}"
        );
    }
}
