//! Where containers put programs (issue 29, items 7 and 8): `/dev/shm` noexec (podman's and
//! Docker's default), read-only, a few MiB, or a `/dev/shm/memlens-<uid>` another user created
//! first; a HOME nobody may write to; and nowhere at all to put a run. Each case runs in a private
//! mount namespace (`unshare -m`, a tmpfs mounted over /dev/shm), so the machine's own /dev/shm is
//! untouched. Whatever the case, the program starts and finishes with its own output and exit
//! status, and memlens says in one line what it could not use and where it went instead (or why
//! it cannot profile).
use crate::util::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A real program: python3 allocates about 20 MB and says so.
const PY: &str = "x = [bytes(1000) for i in range(20000)]; print('python ok', len(x))";

/// `memlens run --interval 64K -o DIR/out.pb.gz -- python3 -c PY` in a private mount namespace
/// after the shell commands `setup`, with `env` set.
fn run_in_namespace(dir: &Path, setup: &str, env: &[(&str, &Path)]) -> Output {
    let mut c = Command::new("unshare");
    c.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!("set -e; {setup}; exec \"$@\""))
        .arg("sh")
        .arg(memlens_path())
        .args(["run", "--interval", "64K", "-o"])
        .arg(dir.join("out.pb.gz"))
        .args(["--", "/usr/bin/python3", "-c", PY]);
    for (k, v) in env {
        c.env(k, v);
    }
    c.out()
}

/// The program ran as it does alone; memlens wrote its profile, with samples, and said once, in
/// one line, `why` it went elsewhere (and never let ld.so speak in the program's output).
#[track_caller]
fn profiled_elsewhere(dir: &Path, o: &Output, why: &str) -> String {
    assert!(o.status.success(), "{}", printed(o));
    assert_eq!(stdout(o).trim(), "python ok 20000", "{}", printed(o));
    let err = stderr(o);
    assert!(
        !err.contains("ld.so") && !err.contains("cannot be preloaded"),
        "{err}"
    );
    let lines: Vec<&str> = err.lines().filter(|l| l.contains(why)).collect();
    assert_eq!(lines.len(), 1, "one line saying '{why}':\n{err}");
    assert!(lines[0].contains("the runtime is loaded from"), "{err}");
    let samples = report_json(&dir.join("out.pb.gz"))["meta"]["samples"]
        .as_u64()
        .unwrap();
    assert!(samples > 0, "no samples: {err}");
    lines[0].to_string()
}

fn report_json(p: &Path) -> serde_json::Value {
    let out = memlens()
        .args(["report", "--format", "json"])
        .arg(p)
        .ok_stdout();
    serde_json::from_str(&out).unwrap()
}

/// `DIR/tmp`, created: the test's own TMPDIR.
fn tmp_in(dir: &Path) -> PathBuf {
    let tmp = dir.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    tmp
}

/// A tmpfs over `at` with `opts`, in the namespace's setup.
fn tmpfs(opts: &str, at: &Path) -> String {
    format!("mount -t tmpfs -o {opts} tmpfs {}", at.display())
}

/// podman and Docker mount /dev/shm noexec: the runtime, which root's `memlens run` used to copy
/// there and preload from there, failed in ld.so ("failed to map segment"), memlens blamed a
/// static or setuid program, and there was no profile. It now loads from an exec-able place (the
/// run's files stay in /dev/shm); with none, from a memfd.
#[test]
fn noexec_dev_shm_loads_the_runtime_from_elsewhere() {
    if !root_or_skip("mounting a noexec tmpfs over /dev/shm") {
        return;
    }
    let dir = test_dir();
    let o = run_in_namespace(&dir, &tmpfs("noexec", Path::new("/dev/shm")), &[]);
    let line = profiled_elsewhere(&dir, &o, "/dev/shm/memlens-0 is on a noexec filesystem");
    assert!(
        line.contains("the run's files go to /dev/shm/memlens-0"),
        "{line}"
    );
    // No exec-able directory at all (TMPDIR noexec too): a memfd the program inherits.
    let tmp = tmp_in(&dir);
    let setup = format!(
        "{}; {}",
        tmpfs("noexec", Path::new("/dev/shm")),
        tmpfs("noexec", &tmp)
    );
    let o = run_in_namespace(&dir, &setup, &[("TMPDIR", &tmp)]);
    let line = profiled_elsewhere(&dir, &o, "/dev/shm/memlens-0 is on a noexec filesystem");
    assert!(
        line.contains("loaded from a memfd (/proc/self/fd/"),
        "{line}"
    );
}

/// A read-only /dev/shm made memlens refuse to start the program; a 2 MiB or 8 MiB one lost the
/// whole profile. Both now send the run's files to $TMPDIR, and say so.
#[test]
fn read_only_or_small_dev_shm_sends_the_run_elsewhere() {
    if !root_or_skip("mounting a tmpfs over /dev/shm") {
        return;
    }
    let dir = test_dir();
    let tmp = tmp_in(&dir);
    let shm = Path::new("/dev/shm");
    for (opts, why) in [
        (
            "ro",
            "cannot create /dev/shm/memlens-0: Read-only file system",
        ),
        ("size=2m", "/dev/shm/memlens-0 has 2M free"),
        ("size=8m", "/dev/shm/memlens-0 has 8M free"),
    ] {
        let o = run_in_namespace(&dir, &tmpfs(opts, shm), &[("TMPDIR", &tmp)]);
        let line = profiled_elsewhere(&dir, &o, why);
        let fallback = format!(
            "the run's files go to {}",
            tmp.join("memlens-runs-0").display()
        );
        assert!(line.contains(&fallback), "{opts}: {line}");
    }
}

/// Another user created /dev/shm/memlens-0 before root's first run (it could then have planted
/// a runtime or dumps there): memlens used to refuse to start the program. It now leaves that
/// directory alone and runs from $TMPDIR.
#[test]
fn a_foreign_memlens_dir_in_dev_shm_is_left_alone() {
    if !root_or_skip("creating a directory of uid 65534 in a private /dev/shm") {
        return;
    }
    let dir = test_dir();
    let tmp = tmp_in(&dir);
    let setup = format!(
        "{}; mkdir -m 755 /dev/shm/memlens-0; chown 65534:65534 /dev/shm/memlens-0",
        tmpfs("size=64m", Path::new("/dev/shm"))
    );
    let o = run_in_namespace(&dir, &setup, &[("TMPDIR", &tmp)]);
    profiled_elsewhere(
        &dir,
        &o,
        "/dev/shm/memlens-0 belongs to uid 65534, not to uid 0",
    );
}

/// Nowhere to put a run (/dev/shm and TMPDIR read-only): the program still runs, with its output
/// and its exit status, and memlens says in one line why it cannot profile it.
#[test]
fn with_nowhere_to_put_a_run_the_program_runs_without_memlens() {
    if !root_or_skip("mounting read-only tmpfs") {
        return;
    }
    let dir = test_dir();
    let tmp = tmp_in(&dir);
    let mut c = Command::new("unshare");
    c.args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "set -e; {}; {}; exec \"$@\"",
            tmpfs("ro", Path::new("/dev/shm")),
            tmpfs("ro", &tmp)
        ))
        .arg("sh")
        .arg(memlens_path())
        .args(["run", "-o"])
        .arg(dir.join("out.pb.gz"))
        .args(["--", "sh", "-c", "echo program ran; exit 3"])
        .env("TMPDIR", &tmp);
    let o = c.exits(3);
    assert_eq!(stdout(&o).trim(), "program ran", "{}", printed(&o));
    let err = stderr(&o);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("memlens: cannot profile sh: cannot create /dev/shm/memlens-0"),
        "{err}"
    );
    assert!(lines[0].ends_with("it runs without memlens"), "{err}");
    assert!(!dir.join("out.pb.gz").exists());
}

/// A HOME nobody may write to (a read-only root filesystem, a service user's `/`): the runtime
/// cache cannot be made there, which used to stop `memlens run`; the runtime now loads from the
/// run's place and the program is profiled. (Root's runtime never lives in HOME: the test runs
/// memlens as uid 65534 when it is root.)
#[test]
fn an_unwritable_home_does_not_stop_the_program() {
    let dir = test_dir();
    let home = dir.join("home");
    let out = dir.join("out");
    std::fs::create_dir(&home).unwrap();
    std::fs::create_dir(&out).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o555)).unwrap();
    std::fs::set_permissions(&*dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (mut c, as_user) = memlens_as_a_user();
    if as_user {
        std::os::unix::fs::chown(&out, Some(65534), Some(65534)).unwrap();
    }
    c.current_dir(&out)
        .env("HOME", &home)
        .env_remove("XDG_CACHE_HOME")
        .args(["run", "--interval", "64K", "-o", "out.pb.gz", "--"])
        .args(["/usr/bin/python3", "-c", PY]);
    let o = c.ok();
    let why = format!("cannot create {}", home.join(".cache").display());
    let dir_out: PathBuf = out.clone();
    std::fs::rename(dir_out.join("out.pb.gz"), dir.join("out.pb.gz")).unwrap();
    profiled_elsewhere(&dir, &o, &why);
}

/// /dev/shm has room when the run starts, and then fills up (the 2 MiB and 8 MiB tmpfs
/// lost the whole profile): the program still runs to its end with its own output and status,
/// and memlens either writes its profile (what the state file kept) or says in one line why not
/// (its dump was cut short, and how much room is left). Keeping what fits and counting the rest as
/// dropped is the runtime's part (issue 29, item 8).
#[test]
fn a_dev_shm_that_fills_during_the_run_costs_the_program_nothing() {
    if !root_or_skip("mounting a tmpfs over /dev/shm") {
        return;
    }
    let dir = test_dir();
    let fill =
        "try:\n  open('/dev/shm/fill', 'wb').write(bytes(48 << 20))\nexcept OSError:\n  pass\n";
    let o = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c"])
        .arg(format!(
            "set -e; {}; exec \"$@\"",
            tmpfs("size=40m", Path::new("/dev/shm"))
        ))
        .arg("sh")
        .arg(memlens_path())
        .args(["run", "--interval", "64K", "-o"])
        .arg(dir.join("out.pb.gz"))
        .args(["--", "/usr/bin/python3", "-c", &format!("{fill}{PY}")])
        .ok();
    assert_eq!(stdout(&o).trim(), "python ok 20000", "{}", printed(&o));
    let err = stderr(&o);
    let written = err.contains("memlens: profile of pid") && dir.join("out.pb.gz").exists();
    let why: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("was cut short"))
        .collect();
    assert!(
        written ^ (why.len() == 1),
        "a profile, or one line saying why not:\n{err}"
    );
    if let Some(l) = why.first() {
        assert!(l.contains("free)"), "{err}");
    }
}
