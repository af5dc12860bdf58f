//! memlens where services run: processes in their own pid, mount and user namespaces, and in real
//! podman containers, reached from the host by their host pid (docs/containers.md).
//!
//! * `unshare` (no container runtime needed): a program in its own pid and mount namespaces with
//!   a `/tmp` of its own, whose binary exists only inside — under `memlens run` there, controlled,
//!   dumped (names read through `/proc/PID/root`) and served from the host; attached from the host;
//!   a rootless user namespace (uid 65534 mapped to root inside: host root is nobody there);
//! * a failed attach (a program that moved its control directory) leaves the runtime inactive
//!   and says so;
//! * podman (Debian's, with runc) running a Debian rootfs made by `mmdebstrap --variant=minbase
//!   --include=redis-server` from the archive apt uses, cached outside the clone by the recipe's
//!   hash and imported once: redis-server under redis-benchmark attached from the host, listed by
//!   a root `memlens serve` under its host pid with its container id, scraped by the real Parca
//!   (`../shared/tools/parca`) with function names; `memlens run` inside the container (the
//!   binary bind-mounted) seen from the host.
//!
//! Each needs root (CI runs as root); without podman, mmdebstrap or the Debian archive a podman
//! test prints one `SKIPPED:` line.
use crate::parca::{parca_sh, sd_allocs_job, target_program, Parca};
use crate::serve::{get, get_over, Server};
use crate::util::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

// ---- processes in namespaces made with unshare ----

/// A program started in new pid and mount namespaces (and a user namespace with `user`): inside,
/// the test directory is `/mnt`, `/tmp` is a tmpfs of its own, and the test program is copied to
/// `/tmp/prog-<test dir>` — a path that does not exist on the host. `inner` runs after that (it
/// names the program `$P`).
struct Namespaced {
    child: Child,
    dir: PathBuf,
    /// The program's name inside (`/tmp/prog-…`).
    exe: String,
}

impl Namespaced {
    fn start(tmp: &Path, prog: &Path, inner: &str, user: Option<u32>) -> Namespaced {
        let exe = format!("/tmp/prog-{}", tmp.file_name().unwrap().to_string_lossy());
        let dir = tmp.join("a");
        std::fs::create_dir_all(&dir).unwrap();
        let script = format!(
            "set -e; mount --bind {} /mnt; mount -t tmpfs tmpfs /tmp; cp /mnt/{} {exe}; P={exe}; {inner}",
            tmp.display(),
            prog.file_name().unwrap().to_string_lossy()
        );
        let mut cmd = match user {
            Some(u) => {
                let mut c = Command::new("setpriv");
                c.args([
                    &format!("--reuid={u}"),
                    &format!("--regid={u}"),
                    "--clear-groups",
                ])
                .args(["unshare", "--user", "--map-root-user"]);
                c
            }
            None => Command::new("unshare"),
        };
        cmd.args([
            "--pid",
            "--mount",
            "--fork",
            "--mount-proc",
            "sh",
            "-c",
            &script,
        ]);
        let child = cmd
            .env_remove("MEMLENS_CTL_DIR")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(tmp.join("ns.err")).unwrap())
            .spawn()
            .unwrap();
        Namespaced { child, dir, exe }
    }

    /// The program's host pid and its pid inside, once it has leaked its 48 MiB.
    fn pids(&mut self, tmp: &Path) -> (i32, i32) {
        wait_for("the program in its namespaces", 60, || {
            assert!(
                self.child.try_wait().unwrap().is_none(),
                "the namespace ended: {}",
                std::fs::read_to_string(tmp.join("ns.err")).unwrap_or_default()
            );
            self.dir.join("leaked").exists()
        });
        let inside: i32 = std::fs::read_to_string(self.dir.join("pid"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let host = host_pid(&self.exe, inside).expect("the program's host pid");
        (host, inside)
    }
}

impl Drop for Namespaced {
    fn drop(&mut self) {
        std::fs::write(self.dir.join("stop"), "").ok();
        if !holds_within(10, || self.child.try_wait().is_ok_and(|s| s.is_some())) {
            // the namespace's init: killing it ends everything inside
            self.child.kill().ok();
            self.child.wait().ok();
        }
    }
}

/// The host pid of the process whose executable is `exe` (as it sees it) and whose pid in its
/// own namespace is `inside`.
fn host_pid(exe: &str, inside: i32) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let pid: i32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        let link = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
        let link = link.to_string_lossy();
        if link.strip_suffix(" (deleted)").unwrap_or(&link) != exe {
            return None;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let ns: i32 = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))?
            .split_whitespace()
            .last()?
            .parse()
            .ok()?;
        (ns == inside).then_some(pid)
    })
}

/// `memlens ctl PID ARGS…` from the host (no MEMLENS_CTL_DIR: found through the process's root).
fn ctl(pid: i32, args: &[&str]) -> Command {
    let mut c = memlens();
    c.arg("ctl")
        .arg(pid.to_string())
        .args(args)
        .env_remove("MEMLENS_CTL_DIR");
    c
}

/// `memlens report FILE` as text.
fn report(file: &Path) -> String {
    memlens().arg("report").arg(file).ok_stdout()
}

/// A root `memlens serve` covering the node (no MEMLENS_CTL_DIR) on a unix socket in `dir`: its
/// `/targets`.
fn node_targets(dir: &Path) -> Vec<serde_json::Value> {
    let sock = dir.join("serve.sock");
    let mut server = memlens()
        .args(["serve", "--listen"])
        .arg(format!("unix:{}", sock.display()))
        .env_remove("MEMLENS_CTL_DIR")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for("the server's socket", 30, || sock.exists());
    let (status, body) = get_over(
        std::os::unix::net::UnixStream::connect(&sock).unwrap(),
        "",
        "/targets",
    );
    server.kill().ok();
    server.wait().ok();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    serde_json::from_slice::<Vec<serde_json::Value>>(&body).unwrap()
}

/// The `/targets` entry of host pid `pid`.
#[track_caller]
fn entry(targets: &[serde_json::Value], pid: i32) -> serde_json::Value {
    targets
        .iter()
        .find(|t| t["pid"] == pid)
        .unwrap_or_else(|| panic!("process {pid} not among the server's targets: {targets:?}"))
        .clone()
}

/// `memlens run` inside pid and mount namespaces with a `/tmp` of their own: from the host, by
/// its host pid, `memlens ctl` reaches it (status, start, dump: function names read from the
/// program that exists only in its root), and a root `memlens serve` lists it with its pid inside.
#[test]
fn memlens_run_in_its_own_namespaces_is_reached_from_the_host() {
    if !root_or_skip("memlens_run_in_its_own_namespaces_is_reached_from_the_host") {
        return;
    }
    let tmp = test_dir();
    let prog = target_program(&tmp);
    // memlens itself through the test directory (/mnt inside): a clone under /tmp (CI's) would be
    // hidden by the namespace's own /tmp.
    std::fs::copy(memlens_path(), tmp.join("memlens")).unwrap();
    let inner = "exec /mnt/memlens run --inactive --interval 32K -o /mnt/exit.pb.gz -- $P /mnt/a";
    let mut ns = Namespaced::start(&tmp, &prog, inner, None);
    let (pid, inside) = ns.pids(&tmp);
    assert_ne!(
        pid, inside,
        "the program runs in a pid namespace of its own"
    );
    assert!(
        !Path::new(&ns.exe).exists(),
        "{} must exist only inside",
        ns.exe
    );
    let st = ctl(pid, &["status"]).ok_stdout();
    assert!(st.contains("inactive"), "{st}");
    ctl(pid, &["start"]).ok();
    wait_for("samples", 30, || {
        status_samples(&ctl(pid, &["status"]).ok_stdout()) > 100
    });
    let out = tmp.join("now.pb.gz");
    ctl(pid, &["dump", "-o"]).arg(&out).ok();
    let r = report(&out);
    assert!(r.contains("leak_alloc") || r.contains("churn_alloc"), "{r}");
    let t = entry(&node_targets(&tmp), pid);
    assert_eq!(t["ns_pid"], inside, "{t}");
    assert_eq!(
        t["exe"],
        Path::new(&ns.exe).file_name().unwrap().to_str().unwrap()
    );
    assert_eq!(t["active"], true, "{t}");
}

/// `memlens attach` from the host into a program in its own pid and mount namespaces (its
/// `/tmp` its own, its binary only inside): attached and sampling at once, dumped from the host
/// with function names, detached.
#[test]
fn attach_from_the_host_into_pid_and_mount_namespaces() {
    if !root_or_skip("attach_from_the_host_into_pid_and_mount_namespaces") {
        return;
    }
    let tmp = test_dir();
    let prog = target_program(&tmp);
    let mut ns = Namespaced::start(&tmp, &prog, "exec $P /mnt/a", None);
    let (pid, inside) = ns.pids(&tmp);
    attach_dump_detach(&tmp, pid, inside);
}

/// Attach (sampling every 32 KiB), see it sample, dump with names, detach.
#[track_caller]
fn attach_dump_detach(tmp: &Path, pid: i32, inside: i32) {
    let o = memlens()
        .args(["attach", &pid.to_string(), "--interval", "32K"])
        .env_remove("MEMLENS_CTL_DIR")
        .ok_stdout();
    assert!(o.contains(&format!("pid {inside} in its namespace")), "{o}");
    assert!(o.contains("sampling every 32K"), "{o}");
    wait_for("samples", 30, || {
        status_samples(&ctl(pid, &["status"]).ok_stdout()) > 100
    });
    let out = tmp.join("attached.pb.gz");
    ctl(pid, &["dump", "-o"]).arg(&out).ok();
    let r = report(&out);
    assert!(r.contains("churn_alloc"), "{r}");
    let d = memlens()
        .args(["detach", &pid.to_string()])
        .env_remove("MEMLENS_CTL_DIR")
        .ok_stdout();
    assert!(d.contains("detached"), "{d}");
    assert!(ctl(pid, &["status"]).ok_stdout().contains("inactive"));
}

/// The build ID of an ELF file (`readelf -n`).
fn build_id(file: &Path) -> String {
    let notes = Command::new("readelf").arg("-n").arg(file).ok_stdout();
    notes
        .lines()
        .find_map(|l| l.trim().strip_prefix("Build ID: "))
        .unwrap_or_else(|| panic!("no build id in {}", file.display()))
        .trim()
        .to_string()
}

/// Names where the binary cannot name them, both read from inside a namespace: a stripped
/// program whose debug file exists only in its own root (`/usr/lib/debug/.build-id/…` there, a
/// tmpfs over the host's), and a program deleted after it started (only its mapping,
/// `/proc/PID/map_files/…`, still has it). Attached from the host, each dump names `churn_alloc`.
#[test]
fn names_from_a_debug_file_in_the_root_and_from_the_mapping_of_a_deleted_program() {
    if !root_or_skip(
        "names_from_a_debug_file_in_the_root_and_from_the_mapping_of_a_deleted_program",
    ) {
        return;
    }
    // Stripped, its debug file beside it in the test directory (the host has none by that id).
    let tmp = test_dir();
    let prog = target_program(&tmp);
    let id = build_id(&prog);
    Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&prog)
        .arg(tmp.join("prog.debug"))
        .ok();
    let stripped = tmp.join("stripped");
    Command::new("strip")
        .args(["--strip-all", "-o"])
        .arg(&stripped)
        .arg(&prog)
        .ok();
    let on_host = format!("/usr/lib/debug/.build-id/{}/{}.debug", &id[..2], &id[2..]);
    assert!(!Path::new(&on_host).exists());
    let inner = format!(
        "mount -t tmpfs tmpfs /usr/lib/debug; mkdir -p $(dirname {on_host}); \
         cp /mnt/prog.debug {on_host}; exec $P /mnt/a"
    );
    let mut ns = Namespaced::start(&tmp, &stripped, &inner, None);
    let (pid, inside) = ns.pids(&tmp);
    attach_dump_detach(&tmp, pid, inside);

    // Deleted once it runs: its path names nothing, in its root or here.
    let tmp = test_dir();
    let prog = target_program(&tmp);
    let inner = "$P /mnt/a & while [ ! -e /mnt/a/pid ]; do sleep 0.05; done; rm -f $P; wait";
    let mut ns = Namespaced::start(&tmp, &prog, inner, None);
    let (pid, inside) = ns.pids(&tmp);
    // the shell removes it after the program wrote its pid, possibly after it leaked too
    wait_for("the program's removal", 30, || {
        std::fs::read_link(format!("/proc/{pid}/exe"))
            .is_ok_and(|exe| exe.to_string_lossy().ends_with(" (deleted)"))
    });
    attach_dump_detach(&tmp, pid, inside);
}

/// A rootless user namespace: uid 65534 is root inside, and the host's root is nobody there (the
/// runtime would refuse its connections as the overflow uid): host root attaches, controls and
/// dumps it all the same, connecting as the process's own uid.
#[test]
fn attach_from_host_root_into_a_rootless_user_namespace() {
    if !root_or_skip("attach_from_host_root_into_a_rootless_user_namespace") {
        return;
    }
    let tmp = test_dir();
    let prog = target_program(&tmp);
    std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::create_dir_all(tmp.join("a")).unwrap();
    std::os::unix::fs::chown(tmp.join("a"), Some(65534), Some(65534)).unwrap();
    let mut ns = Namespaced::start(&tmp, &prog, "exec $P /mnt/a", Some(65534));
    let (pid, inside) = ns.pids(&tmp);
    let map = std::fs::read_to_string(format!("/proc/{pid}/uid_map")).unwrap();
    assert_eq!(
        map.split_whitespace().collect::<Vec<_>>(),
        ["0", "65534", "1"],
        "root inside is uid 65534 outside, and nothing else is mapped"
    );
    attach_dump_detach(&tmp, pid, inside);
}

/// A runtime whose control socket memlens cannot reach (here a program that set its own
/// MEMLENS_CTL_DIR after it started: `/proc/PID/environ` still shows its first environment) must
/// not be left sampling: `memlens attach --interval` fails saying the runtime stays inactive, and
/// it is — the socket, reached by naming its directory, says so and that nothing was sampled.
#[test]
fn a_failed_attach_leaves_the_runtime_inactive_and_says_so() {
    if !root_or_skip("a_failed_attach_leaves_the_runtime_inactive_and_says_so") {
        return;
    }
    let tmp = test_dir();
    let hidden = ctl_dir(&tmp.join("hidden"));
    let script = tmp.join("moves.py");
    std::fs::write(
        &script,
        "import os, sys, time\nos.environ['MEMLENS_CTL_DIR'] = sys.argv[1]\nopen(sys.argv[2], 'w').close()\nkeep = []\nwhile not os.path.exists(sys.argv[3]):\n    keep.append(bytearray(8192))\n    keep = keep[-2000:]\n    time.sleep(0.0005)\n",
    )
    .unwrap();
    let mut child = Command::new("/usr/bin/python3")
        .arg(&script)
        .arg(&hidden)
        .arg(tmp.join("ready"))
        .arg(tmp.join("stop"))
        .env_remove("MEMLENS_CTL_DIR")
        .spawn()
        .unwrap();
    wait_for("the program", 30, || tmp.join("ready").exists());
    let pid = child.id() as i32;
    let o = memlens()
        .args(["attach", &pid.to_string(), "--interval", "4K"])
        .env_remove("MEMLENS_CTL_DIR")
        .error(1);
    let e = stderr(&o);
    assert!(
        e.contains("stays inactive") && e.contains("nothing is sampled"),
        "{e}"
    );
    assert!(!e.contains("forked"), "{e}");
    assert!(child.try_wait().unwrap().is_none(), "the program runs on");
    let st = memlens()
        .args(["ctl", &pid.to_string(), "status"])
        .env("MEMLENS_CTL_DIR", &hidden)
        .ok_stdout();
    assert!(st.contains("inactive"), "{st}");
    assert_eq!(status_samples(&st), 0, "{st}");
    stop_via_file(child, &tmp);
}

// ---- podman ----

/// The Debian suite and mirror apt uses here (`/etc/apt/sources.list*`, one-line or deb822).
fn debian_archive() -> Option<(String, String)> {
    let mut texts = vec![std::fs::read_to_string("/etc/apt/sources.list").unwrap_or_default()];
    if let Ok(rd) = std::fs::read_dir("/etc/apt/sources.list.d") {
        let mut files: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        files.sort();
        texts.extend(files.iter().filter_map(|f| std::fs::read_to_string(f).ok()));
    }
    let is_main = |uri: &str, suite: &str| {
        uri.contains("/debian") && !uri.contains("security") && !suite.contains('-')
    };
    for text in &texts {
        for l in text.lines() {
            let w: Vec<&str> = l.split_whitespace().collect();
            if w.len() >= 3 && w[0] == "deb" && is_main(w[1], w[2]) {
                return Some((w[2].to_string(), w[1].to_string()));
            }
        }
        for stanza in text.split("\n\n") {
            let field = |k: &str| {
                stanza
                    .lines()
                    .find_map(|l| l.strip_prefix(k))
                    .map(|v| v.split_whitespace().next().unwrap_or("").to_string())
            };
            if let (Some(uri), Some(suite)) = (field("URIs:"), field("Suites:")) {
                if is_main(&uri, &suite) {
                    return Some((suite, uri));
                }
            }
        }
    }
    None
}

/// FNV-1a, 64 bits: names the cache by the recipe (stable across builds, unlike std's hasher).
fn fnv(s: &str) -> String {
    let h = s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    });
    format!("{h:016x}")
}

/// podman as the tests run it: a store of their own beside the cached rootfs, the cgroupfs
/// manager, events to a file, the host's limits (a machine without CAP_SYS_RESOURCE cannot raise
/// them), runc (crun refuses hybrid cgroup hierarchies).
struct Podman {
    store: PathBuf,
    runtime: String,
    image: String,
}

impl Podman {
    fn cmd(&self) -> Command {
        let mut c = Command::new("podman");
        c.arg(format!("--root={}", self.store.display()))
            // one run state per store (another XDG_CACHE_HOME is another store): stores must not
            // share the run state podman keeps of their containers and mounts
            .arg(format!(
                "--runroot=/run/memlens-test-podman-{}",
                fnv(&self.store.to_string_lossy())
            ))
            .args([
                "--storage-driver=overlay",
                "--cgroup-manager=cgroupfs",
                "--events-backend=file",
            ]);
        c
    }

    /// `podman run -d` of `command` in the image, on the host's network, with `volumes`
    /// bind-mounted read-only and `extra` options: the container.
    fn run(&self, volumes: &[(&Path, &str)], extra: &[&str], command: &[&str]) -> Container {
        let mut c = self.cmd();
        c.args(["run", "-d", "--rm", "--network=host"])
            .args([
                "--ulimit",
                "nofile=4096:4096",
                "--ulimit",
                "nproc=4096:4096",
            ])
            .arg(format!("--runtime={}", self.runtime))
            .args(extra);
        for (from, to) in volumes {
            c.arg("-v").arg(format!("{}:{to}:ro", from.display()));
        }
        let id = c
            .arg(&self.image)
            .args(command)
            .ok_stdout()
            .trim()
            .to_string();
        let pid: i32 = self
            .cmd()
            .args(["inspect", "-f", "{{.State.Pid}}", &id])
            .ok_stdout()
            .trim()
            .parse()
            .unwrap();
        Container {
            podman: self.cmd(),
            id,
            pid,
        }
    }
}

/// A running container, removed on drop.
struct Container {
    podman: Command,
    id: String,
    /// Host pid of its first process.
    pid: i32,
}

impl Drop for Container {
    fn drop(&mut self) {
        let mut rm = Command::new(self.podman.get_program());
        rm.args(self.podman.get_args())
            .args(["rm", "-f", "-t", "0", &self.id])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok();
    }
}

/// podman ready to run the redis rootfs, or why not (printed as the test's `SKIPPED:` line).
/// The rootfs is made once (`mmdebstrap`, a few minutes) and kept in
/// `${XDG_CACHE_HOME:-$HOME/.cache}/memlens-test-rootfs/<hash of the recipe>/`, imported once
/// into the store beside it.
fn podman() -> Result<&'static Podman, String> {
    static P: OnceLock<Result<Podman, String>> = OnceLock::new();
    P.get_or_init(prepare_podman).as_ref().map_err(Clone::clone)
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The test rootfs, made once: `rootfs.tar` in `dir`, a directory of the cache named by the
/// recipe's hash.
struct Rootfs {
    cache: PathBuf,
    dir: PathBuf,
    hash: String,
}

impl Rootfs {
    fn tar(&self) -> PathBuf {
        self.dir.join("rootfs.tar")
    }

    /// The rootfs unpacked (once) as a directory tree, for systemd-nspawn (`--read-only`).
    fn tree(&self) -> PathBuf {
        let tree = self.dir.join("tree");
        if !tree.exists() {
            let part = self.dir.join(format!("tree.part-{}", std::process::id()));
            std::fs::remove_dir_all(&part).ok();
            std::fs::create_dir_all(&part).unwrap();
            Command::new("tar")
                .arg("-xf")
                .arg(self.tar())
                .arg("-C")
                .arg(&part)
                .ok();
            if std::fs::rename(&part, &tree).is_err() {
                // another test run unpacked it first
                assert!(tree.exists(), "cannot rename {}", part.display());
                std::fs::remove_dir_all(&part).ok();
            }
        }
        tree
    }
}

/// The rootfs, or why it cannot be had here (printed as a test's `SKIPPED:` line).
fn rootfs() -> Result<&'static Rootfs, String> {
    static R: OnceLock<Result<Rootfs, String>> = OnceLock::new();
    R.get_or_init(make_rootfs).as_ref().map_err(Clone::clone)
}

fn make_rootfs() -> Result<Rootfs, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("needs root".into());
    }
    if !have("mmdebstrap") {
        return Err("no mmdebstrap (scripts/install-deps.sh installs it)".into());
    }
    let (suite, mirror) = debian_archive().ok_or("no Debian archive in /etc/apt/sources.list*")?;
    let recipe = format!(
        "mmdebstrap --variant=minbase --include=redis-server --components=main {suite} OUT {mirror}"
    );
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or("/root".into())).join(".cache")
        })
        .join("memlens-test-rootfs");
    let hash = fnv(&recipe);
    let r = Rootfs {
        dir: cache.join(&hash),
        cache,
        hash,
    };
    std::fs::create_dir_all(&r.dir).map_err(|e| format!("{}: {e}", r.dir.display()))?;
    if !r.tar().exists() {
        // mmdebstrap picks the format by the name's extension: a tar, renamed when complete
        // (named by this process: test runs of two clones may make it at once)
        let part = r
            .dir
            .join(format!("rootfs.part-{}.tar", std::process::id()));
        eprintln!(
            "containers: making the test rootfs once: {recipe} (cached in {})",
            r.dir.display()
        );
        let o = Command::new("sh")
            .args(["-c", &recipe.replace("OUT", &part.display().to_string())])
            .out();
        if !o.status.success() {
            std::fs::remove_file(&part).ok();
            let err = stderr(&o);
            let tail: Vec<&str> = err.lines().rev().take(3).collect();
            return Err(format!(
                "mmdebstrap failed ({}): {}",
                o.status,
                tail.join(" / ")
            ));
        }
        std::fs::rename(&part, r.tar()).map_err(|e| e.to_string())?;
    }
    Ok(r)
}

fn prepare_podman() -> Result<Podman, String> {
    if !have("podman") {
        return Err("no podman (scripts/install-deps.sh installs it)".into());
    }
    let runtime = ["runc", "crun"]
        .into_iter()
        .find(|r| have(r))
        .ok_or("neither runc nor crun is installed")?
        .to_string();
    let r = rootfs()?;
    let p = Podman {
        store: r.cache.join("podman"),
        runtime,
        image: format!("localhost/memlens-test-redis:{}", r.hash),
    };
    let exists = p.cmd().args(["image", "exists", &p.image]).status();
    if !exists.is_ok_and(|s| s.success()) {
        // podman is there and the rootfs was made: an import that fails is a failure, not a skip
        p.cmd().arg("import").arg(r.tar()).arg(&p.image).ok();
    }
    Ok(p)
}

/// Skip the test (one line) when podman cannot run here.
fn podman_or_skip(test: &str) -> Option<&'static Podman> {
    match podman() {
        Ok(p) => Some(p),
        Err(why) => {
            eprintln!("SKIPPED: containers::{test}: {why}");
            None
        }
    }
}

/// redis-benchmark against `port` in a loop (bounded: at most 5 minutes) until dropped.
struct Load {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(port: u16) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            while !s.load(Ordering::Relaxed) && t0.elapsed().as_secs() < 300 {
                Command::new("redis-benchmark")
                    .args([
                        "-p",
                        &port.to_string(),
                        "-n",
                        "20000",
                        "-q",
                        "-t",
                        "set,lpush",
                    ])
                    .args(["-r", "100000", "-d", "200"])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status()
                    .ok();
            }
        });
        Load {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.join().ok();
        }
    }
}

/// Wait until redis answers on `port`.
fn wait_redis(port: u16) {
    wait_for("redis in its container", 60, || {
        Command::new("redis-cli")
            .args(["-p", &port.to_string(), "ping"])
            .out()
            .stdout
            .starts_with(b"PONG")
    });
}

/// The redis command line of the tests (no persistence).
fn redis_args(port: &str) -> [&str; 7] {
    [
        "redis-server",
        "--port",
        port,
        "--save",
        "",
        "--appendonly",
        "no",
    ]
}

/// redis-server in a podman container under redis-benchmark: attached from the host by its host
/// pid (sampling at once), dumped from the host with redis's function names (its binary read
/// through the container's root), listed by a root `memlens serve` under its host pid with the
/// container's id, and scraped by the real Parca through `/sd` (kept by a relabelling on that
/// container id, as a Kubernetes user keeps one pod) with function names in what it stored.
#[test]
fn podman_redis_attached_from_the_host_served_and_scraped_by_parca() {
    let test = "podman_redis_attached_from_the_host_served_and_scraped_by_parca";
    let Some(pm) = podman_or_skip(test) else {
        return;
    };
    let tmp = test_dir();
    let port = free_port().to_string();
    let c = pm.run(&[], &[], &redis_args(&port));
    wait_redis(port.parse().unwrap());
    let _load = Load::start(port.parse().unwrap());
    attach_redis(&tmp, c.pid, 1);

    let server = Server::spawn(
        memlens()
            .args(["serve", "--listen", "127.0.0.1:0", "--token-file"])
            .arg(tmp.join("token"))
            .env_remove("MEMLENS_CTL_DIR"),
    );
    let (status, body) = get(server.port, &server.token, "/targets");
    assert_eq!(status, 200);
    let targets: Vec<serde_json::Value> = serde_json::from_slice(&body).unwrap();
    let t = entry(&targets, c.pid);
    assert_eq!(t["container_id"], c.id.as_str(), "{t}");
    assert_eq!(t["ns_pid"], 1, "{t}");
    assert_eq!(t["service"], "redis-server", "{t}");

    let Some(sh) = parca_sh(&format!("containers::{test} (the Parca part)")) else {
        return;
    };
    let keep = format!(
        "    relabel_configs:\n      - {{source_labels: [container_id], regex: \"{}\", action: keep}}\n",
        c.id
    );
    let configs = sd_allocs_job("node", server.port, &server.token_file, &keep);
    let parca = Parca::start_in(&sh, &tmp, &configs);
    let q = "memory:alloc_space:bytes:space:bytes:delta{job=\"node\"}";
    let mut series = Vec::new();
    wait_for("Parca to store windows of the container", 90, || {
        series = parca.range(q, &["container_id", "pid"]);
        series.iter().map(|s| s.1.len()).sum::<usize>() >= 3
    });
    assert_eq!(series.len(), 1, "only the container is kept: {series:?}");
    let labels = series[0].0.to_string();
    assert!(labels.contains(&c.id), "{labels}");
    assert!(labels.contains(&format!("\"{}\"", c.pid)), "{labels}");
    let raw = parca.pprof_raw(q, &tmp);
    assert!(
        raw.contains("zmalloc"),
        "redis's functions in what Parca stored:\n{raw}"
    );
}

/// `memlens attach --interval 64K` of redis by its host pid (`inside` in its namespace), samples,
/// a dump with names.
#[track_caller]
fn attach_redis(tmp: &Path, pid: i32, inside: i32) {
    let o = memlens()
        .args(["attach", &pid.to_string(), "--interval", "64K"])
        .env_remove("MEMLENS_CTL_DIR")
        .ok_stdout();
    let there = format!("pid {inside} in its namespace");
    assert!(
        o.contains("sampling every 64K") && o.contains(&there),
        "{o}"
    );
    wait_for("samples", 60, || {
        status_samples(&ctl(pid, &["status"]).ok_stdout()) > 50
    });
    let out = tmp.join("redis.pb.gz");
    ctl(pid, &["dump", "-o"]).arg(&out).ok();
    let r = report(&out);
    assert!(r.contains("zmalloc"), "{r}");
}

/// `memlens run --inactive -- redis-server` inside a podman container (the memlens binary
/// bind-mounted into it), seen from the host: `memlens ctl` by redis's host pid starts it and
/// dumps it with redis's function names, and a root `memlens serve` lists it with the container
/// id and its pid inside.
#[test]
fn memlens_run_inside_a_podman_container_is_seen_from_the_host() {
    let Some(pm) = podman_or_skip("memlens_run_inside_a_podman_container_is_seen_from_the_host")
    else {
        return;
    };
    let tmp = test_dir();
    let port = free_port().to_string();
    let mut command = vec![
        "memlens",
        "run",
        "--inactive",
        "-o",
        "/tmp/exit.pb.gz",
        "--",
    ];
    command.extend(redis_args(&port));
    // podman's own /dev/shm (noexec): `memlens run` loads the runtime from elsewhere
    let c = pm.run(
        &[(&memlens_path(), "/usr/local/bin/memlens")],
        &[],
        &command,
    );
    wait_redis(port.parse().unwrap());
    // redis is the child of memlens, the container's first process
    let children = std::fs::read_to_string(format!("/proc/{}/task/{}/children", c.pid, c.pid))
        .unwrap_or_default();
    let pid: i32 = children
        .split_whitespace()
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no child of memlens ({}) in the container", c.pid));
    let _load = Load::start(port.parse().unwrap());
    wait_for("the runtime's socket", 30, || {
        ctl(pid, &["status"]).out().status.success()
    });
    ctl(pid, &["start", "--interval", "64K"]).ok();
    wait_for("samples", 60, || {
        status_samples(&ctl(pid, &["status"]).ok_stdout()) > 50
    });
    let out = tmp.join("run.pb.gz");
    ctl(pid, &["dump", "-o"]).arg(&out).ok();
    let r = report(&out);
    assert!(r.contains("zmalloc"), "{r}");
    let t = entry(&node_targets(&tmp), pid);
    assert_eq!(t["container_id"], c.id.as_str(), "{t}");
    let inside = t["ns_pid"].as_i64().unwrap_or(0);
    assert!(
        inside > 1 && inside != i64::from(pid),
        "memlens is 1 inside, redis its child: {t}"
    );
    assert_eq!(t["service"], "redis-server", "{t}");
}

/// redis-server in a systemd-nspawn container (the same rootfs, read-only, a tmpfs `/tmp`,
/// redis its pid 2) under redis-benchmark: attached from the host by its host pid, dumped with
/// redis's function names, detached.
#[test]
fn systemd_nspawn_redis_attached_from_the_host() {
    let test = "systemd_nspawn_redis_attached_from_the_host";
    if !have("systemd-nspawn") {
        eprintln!("SKIPPED: containers::{test}: no systemd-nspawn (systemd-container)");
        return;
    }
    let r = match rootfs() {
        Ok(r) => r,
        Err(why) => {
            eprintln!("SKIPPED: containers::{test}: {why}");
            return;
        }
    };
    let tmp = test_dir();
    let port = free_port();
    let mut nspawn = Command::new("systemd-nspawn")
        .arg("--directory")
        .arg(r.tree())
        .args(["--register=no", "--as-pid2", "--quiet", "--keep-unit"])
        .args(["--read-only", "--tmpfs=/tmp"])
        .args(redis_args(&port.to_string()))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(tmp.join("nspawn.err")).unwrap())
        .spawn()
        .unwrap();
    wait_redis(port);
    let title = format!("redis-server *:{port}");
    let pid = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .find(|p| {
            std::fs::read(format!("/proc/{p}/cmdline"))
                .is_ok_and(|c| c.starts_with(title.as_bytes()))
        })
        .expect("redis's host pid");
    let load = Load::start(port);
    attach_redis(&tmp, pid, 2);
    drop(load);
    memlens()
        .args(["detach", &pid.to_string()])
        .env_remove("MEMLENS_CTL_DIR")
        .ok();
    // SAFETY: a signal to our own child: nspawn stops the container on SIGTERM.
    unsafe { libc::kill(nspawn.id() as i32, libc::SIGTERM) };
    if !holds_within(10, || nspawn.try_wait().is_ok_and(|s| s.is_some())) {
        nspawn.kill().ok();
    }
    nspawn.wait().ok();
}

/// The rootfs cache's key: its recipe names the suite and mirror apt uses, and the hash naming it
/// is FNV-1a's (the same in every build, so a clean clone finds the cache).
#[test]
fn apt_sources_name_a_debian_archive() {
    // The recipe's mirror and suite come from what apt uses; on a Debian machine there is one.
    if Path::new("/etc/debian_version").exists() {
        let (suite, mirror) = debian_archive().expect("a Debian archive in the apt sources");
        assert!(
            !suite.is_empty() && mirror.starts_with("http"),
            "{suite} {mirror}"
        );
    }
    assert_eq!(fnv(""), "cbf29ce484222325");
}

/// The YAML blocks of docs/containers.md, each parsed by PyYAML: the documents of each, as JSON.
fn doc_yaml_blocks() -> Vec<Vec<serde_json::Value>> {
    let doc = std::fs::read_to_string(root().join("docs/containers.md")).unwrap();
    let mut blocks = Vec::new();
    let mut rest = doc.as_str();
    while let Some(at) = rest.find("```yaml\n") {
        let body = &rest[at + 8..];
        let end = body.find("\n```").expect("a closed yaml block");
        let mut py = Command::new("/usr/bin/python3")
            .args([
                "-c",
                "import json, sys, yaml; print(json.dumps(list(yaml.safe_load_all(sys.stdin))))",
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python3 (with python3-yaml, scripts/install-deps.sh)");
        use std::io::Write;
        py.stdin
            .take()
            .unwrap()
            .write_all(&body.as_bytes()[..end])
            .unwrap();
        let o = py.wait_with_output().unwrap();
        assert_ok(
            &"python3 yaml.safe_load_all (a yaml block of docs/containers.md)",
            &o,
        );
        blocks.push(serde_json::from_slice(&o.stdout).unwrap());
        rest = &body[end + 4..];
    }
    blocks
}

/// docs/containers.md's Kubernetes manifest (not run on a cluster here) parses as YAML, and its
/// DaemonSet has what the page says the agent needs: the host's pid namespace, root with the
/// capabilities, the token mounted as a plain file in both containers and given to `memlens
/// serve`, which listens where the Alloy sidecar's discovery asks; the Parca job parses too.
#[test]
fn the_kubernetes_manifest_parses() {
    let blocks = doc_yaml_blocks();
    assert!(blocks.len() >= 2, "the Parca job and the manifest");
    let all: Vec<&serde_json::Value> = blocks.iter().flatten().collect();
    let kinds: Vec<&str> = all.iter().filter_map(|d| d["kind"].as_str()).collect();
    for k in ["Namespace", "Secret", "ConfigMap", "DaemonSet"] {
        assert!(kinds.contains(&k), "{k} in {kinds:?}");
    }
    let ds = all.iter().find(|d| d["kind"] == "DaemonSet").unwrap();
    let spec = &ds["spec"]["template"]["spec"];
    assert_eq!(spec["hostPID"], true);
    let containers = spec["containers"].as_array().unwrap();
    let agent = containers.iter().find(|c| c["name"] == "memlens").unwrap();
    let caps: Vec<&str> = agent["securityContext"]["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    for c in ["SYS_PTRACE", "DAC_READ_SEARCH", "DAC_OVERRIDE", "SETUID"] {
        assert!(caps.contains(&c), "{c} in {caps:?}");
    }
    assert_eq!(agent["securityContext"]["runAsUser"], 0);
    let args: Vec<&str> = agent["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|a| a.as_str())
        .collect();
    assert_eq!(args[0], "serve");
    let token = args[args.iter().position(|a| *a == "--token-file").unwrap() + 1];
    let listen = args[args.iter().position(|a| *a == "--listen").unwrap() + 1];
    for c in containers {
        let mounts = c["volumeMounts"].as_array().unwrap();
        assert!(
            mounts
                .iter()
                .any(|m| m["mountPath"] == token && m["subPath"] == "token"),
            "{} mounts the token as a file: {mounts:?}",
            c["name"]
        );
    }
    let cm = all.iter().find(|d| d["kind"] == "ConfigMap").unwrap();
    let alloy = cm["data"]["config.alloy"].as_str().unwrap();
    assert!(alloy.contains(&format!("http://{listen}/sd")), "{alloy}");
    assert_eq!(
        alloy
            .matches(&format!("bearer_token_file = \"{token}\""))
            .count(),
        2
    );
    let parca = all
        .iter()
        .find(|d| d.get("scrape_configs").is_some())
        .unwrap();
    assert!(parca["scrape_configs"][0]["http_sd_configs"].is_array());
}
