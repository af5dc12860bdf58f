//! Hostile files (issue 29, item 6): what a dump, a state file, a live process or another local
//! user can make memlens read must never exhaust the host. A process that names `/dev/zero` and a
//! FIFO as its modules (in its live dumps, in its state file), files another user plants in root's
//! run directory, and gzip bombs made of valid profile fields: each ends with memlens's work done
//! (the bad module's frames as addresses, the planted files ignored) or with one error line, and
//! memlens's own peak RSS (from wait4) within the bound. Nothing here is timed: a FIFO
//! opened by mistake would hang the command, and the test with it.
use crate::util::*;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The most memory memlens may take on any input of 10 MB or less (issue 29).
const MAX_RSS_KB: i64 = 512 << 10;

/// The lying program, the library it allocates through, and a FIFO nobody writes to.
struct Lying {
    prog: PathBuf,
    lib: PathBuf,
    fifo: PathBuf,
}

fn lying(dir: &Path) -> Lying {
    let progs = root().join("tests/e2e/progs");
    let lib = compile(
        &progs.join("liblie.c"),
        dir,
        "liblie.so",
        &["-shared", "-fPIC", "-O0"],
    );
    let prog = compile(&progs.join("lying_modules.c"), dir, "lying_modules", &[]);
    let fifo = dir.join("fifo");
    mkfifo(&fifo);
    Lying { prog, lib, fifo }
}

fn mkfifo(p: &Path) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(
        unsafe { libc::mkfifo(c.as_ptr(), 0o600) },
        0,
        "mkfifo {p:?}"
    );
}

/// `memlens run` of the lying program (`honest`: it keeps its modules' names), its run
/// directories under `DIR/runs`, its raw dumps kept in `DIR/raw`; returns memlens run and the program's pid once it holds its
/// memory.
fn start(dir: &Path, l: &Lying, honest: bool) -> (Child, u32) {
    let mut cmd = memlens();
    cmd.args(["run", "--interval", "64K", "-o"])
        .arg(dir.join("run.pb.gz"))
        .arg("--keep-raw")
        .arg(dir.join("raw"))
        .env("MEMLENS_RUN_ROOT", dir.join("runs"))
        .env("MEMLENS_CTL_DIR", ctl_dir(dir))
        .arg("--")
        .arg(&l.prog)
        .arg(&l.lib)
        .arg(&l.fifo)
        .arg(dir);
    if honest {
        cmd.arg("honest");
    }
    let run = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = dir.join("ready");
    wait_for("the program to hold its memory", 60, || ready.exists());
    let pid = std::fs::read_to_string(&ready)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (run, pid)
}

/// The one run directory under `DIR/runs`.
fn the_run_dir(dir: &Path) -> PathBuf {
    let dirs: Vec<PathBuf> = std::fs::read_dir(dir.join("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir() && !p.file_name().unwrap().to_string_lossy().starts_with("lib-"))
        .collect();
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs[0].clone()
}

/// memlens (`args`) must succeed within the memory bound; the two lying modules' frames stay
/// addresses in `profile` (named after the modules: `zero+0x…`, `fifo+0x…`), the program's own
/// frames are symbolized. Returns what memlens printed on stderr.
#[track_caller]
fn converts_despite_lies(args: &[&std::ffi::OsStr], dir: &Path, profile: &Path) -> String {
    let m = measured(memlens().args(args).env("MEMLENS_CTL_DIR", ctl_dir(dir)));
    let what = format!("memlens {args:?}");
    assert!(m.out.status.success(), "{what}{}", printed(&m.out));
    assert!(
        m.max_rss_kb < MAX_RSS_KB,
        "{what}: peak RSS {} KiB",
        m.max_rss_kb
    );
    let top = top_stacks(profile);
    for frame in ["fifo+0x", "main lying_modules.c"] {
        assert!(top.contains(frame), "{what}: no {frame} in\n{top}");
    }
    libc_never_read_from_dev_zero(profile, &what);
    stderr(&m.out)
}

/// The C library, renamed /dev/zero in the link map, is left as addresses (`zero+0x…`) or named
/// from the file its build ID finds through the process's own mapping; either way nothing was read
/// from /dev/zero (the peak RSS bound says so).
#[track_caller]
fn libc_never_read_from_dev_zero(profile: &Path, what: &str) {
    let folded = memlens()
        .args(["report", "--format", "folded"])
        .arg(profile)
        .ok_stdout();
    assert!(
        folded.contains("zero+0x") || folded.contains("__libc_start"),
        "{what}: the C library's frames are neither addresses in /dev/zero nor named:\n{folded}"
    );
}

/// The top stacks of a profile.
fn top_stacks(profile: &Path) -> String {
    memlens()
        .args(["report", "--top", "5"])
        .arg(profile)
        .ok_stdout()
}

/// The warnings `memlens report` gives for the two lying modules: the FIFO is said; /dev/zero is
/// said only when the C library's build ID found no file (through the process's own mapping it
/// usually does, and then its frames are named and there is nothing to say).
#[track_caller]
fn says_why(err: &str, fifo: &Path) {
    if err.contains("cannot symbolize /dev/zero") {
        assert!(
            err.contains("/dev/zero is a character device, not a regular file"),
            "{err}"
        );
    }
    assert!(
        err.contains(&format!("{} is a FIFO, not a regular file", fifo.display())),
        "{err}"
    );
}

/// A process renames its C library to /dev/zero and a library it loaded to a FIFO in its own link
/// map: `memlens ctl PID dump` (pprof and raw), `memlens report` of the raw dump (which says why)
/// and `memlens run`'s conversion of its exit dump all finish, leave those two modules' frames as
/// addresses and name the program's own functions. (Before: /dev/zero was read until the OOM
/// killer ended memlens, at 23.9 GB; the FIFO hung it.)
#[test]
fn a_process_naming_dev_zero_and_a_fifo_as_its_modules() {
    let dir = test_dir();
    let l = lying(&dir);
    let (run, pid) = start(&dir, &l, false);
    let pid_s = pid.to_string();
    let pprof = dir.join("live.pb.gz");
    let ctl_dump: [&std::ffi::OsStr; 5] = [
        "ctl".as_ref(),
        pid_s.as_ref(),
        "dump".as_ref(),
        "-o".as_ref(),
        pprof.as_os_str(),
    ];
    converts_despite_lies(&ctl_dump, &dir, &pprof);
    let raw = dir.join("live.raw");
    memlens()
        .args(["ctl", &pid_s, "dump", "--raw", "-o"])
        .arg(&raw)
        .env("MEMLENS_CTL_DIR", ctl_dir(&dir))
        .ok();
    let text = std::fs::read_to_string(&raw).unwrap();
    assert!(
        text.contains(" loaded /dev/zero\n"),
        "the lie did not reach the dump"
    );
    let err = converts_despite_lies(&["report".as_ref(), raw.as_os_str()], &dir, &raw);
    says_why(&err, &l.fifo);
    std::fs::write(dir.join("stop"), "").unwrap();
    let o = run.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", printed(&o));
    assert!(stdout(&o).contains("lying_modules done"), "{}", printed(&o));
    assert!(stderr(&o).contains("written to"), "{}", printed(&o));
    let run_pb = dir.join("run.pb.gz");
    let top = top_stacks(&run_pb);
    assert!(top.contains("main lying_modules.c"), "{top}");
    libc_never_read_from_dev_zero(&run_pb, "the run's own profile");
}

/// Replace the NUL-terminated path that contains `needle`, past the header page of a state file,
/// by `by` (shorter).
fn patch_path(state: &[u8], needle: &str, by: &str) -> Vec<u8> {
    let mut b = state.to_vec();
    let at = b[4096..]
        .windows(needle.len())
        .position(|w| w == needle.as_bytes())
        .unwrap_or_else(|| panic!("no {needle} in the module table"))
        + 4096;
    let start = b[..at].iter().rposition(|&c| c == 0).unwrap() + 1;
    let end = at + b[at..].iter().position(|&c| c == 0).unwrap();
    assert!(by.len() < end - start, "{by} does not fit");
    b[start..end].fill(0);
    b[start..start + by.len()].copy_from_slice(by.as_bytes());
    b
}

/// A state file whose module table names /dev/zero and a FIFO (what a process of another user, or
/// one that scribbled over its own mapping, leaves in a run directory): `memlens report RUNDIR`
/// renders it, symbolizes what it can, and says why the rest stays addresses.
#[test]
fn a_state_file_naming_dev_zero_and_a_fifo_as_modules() {
    let dir = test_dir();
    let l = lying(&dir);
    let (mut run, pid) = start(&dir, &l, true);
    // memlens run goes first (it would collect the run itself), then the program, by SIGKILL: only
    // its state file is left.
    run.kill().unwrap();
    run.wait().unwrap();
    let rundir = the_run_dir(&dir);
    let state = rundir.join(format!("{pid}.0.state"));
    let b = std::fs::read(&state).unwrap();
    let b = patch_path(&b, "libc.so", "/dev/zero");
    let b = patch_path(&b, "liblie.so", l.fifo.to_str().unwrap());
    std::fs::write(&state, b).unwrap();
    // SAFETY: our own child's child; kill has no memory effects.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    wait_for("the program to end", 30, || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        })
    });
    let err = converts_despite_lies(
        &["report".as_ref(), rundir.as_os_str()],
        &dir,
        &dir.join("run.pb.gz"),
    );
    assert!(err.contains("read from its state file"), "{err}");
}

/// Another local user plants files in root's run directory (mode 1733: anyone may create files
/// there): a forged dump and a state file of their own, a FIFO and a link to /dev/zero named like
/// dumps. memlens run collects only the run's files, says once which it ignored, and finishes.
#[test]
fn files_another_user_plants_in_a_run_directory_are_ignored() {
    if !root_or_skip("planting files as another user in root's run directory") {
        return;
    }
    let dir = test_dir();
    let l = lying(&dir);
    let (run, pid) = start(&dir, &l, true);
    let rundir = the_run_dir(&dir);
    assert_eq!(
        std::fs::metadata(&rundir).unwrap().mode() & 0o7777,
        0o1733,
        "root's run directory"
    );
    // A dump that would name /dev/zero, for the program's own pid: only its owner betrays it.
    let forged = rundir.join(format!("d.{pid}.7.raw"));
    std::fs::write(
        &forged,
        format!(
            "memlens-raw 1\npid {pid}\nreason exit\nsamples 1\n\
             module 0x1000 - loaded /dev/zero\nsegment 0x0 0x100000 0x0 r-x\n\
             stack 1 65536 4096 65536 4096 0 0x1010\nend\n"
        ),
    )
    .unwrap();
    let state = rundir.join(format!("{}.0.state", pid + 1));
    std::fs::write(&state, vec![0u8; 8192]).unwrap();
    mkfifo(&rundir.join(format!("d.{pid}.8.raw")));
    std::os::unix::fs::symlink("/dev/zero", rundir.join(format!("d.{pid}.9.raw"))).unwrap();
    for f in [&forged, &state, &rundir.join(format!("d.{pid}.8.raw"))] {
        std::os::unix::fs::chown(f, Some(65534), Some(65534)).unwrap();
    }
    std::os::unix::fs::lchown(
        rundir.join(format!("d.{pid}.9.raw")),
        Some(65534),
        Some(65534),
    )
    .unwrap();
    std::fs::write(dir.join("stop"), "").unwrap();
    let o = run.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", printed(&o));
    let err = stderr(&o);
    let ignored: Vec<&str> = err.lines().filter(|l| l.contains("ignored")).collect();
    assert_eq!(ignored.len(), 1, "{err}");
    for want in [
        "ignored 2 files".to_string(),
        "owned by uid 65534".to_string(),
        format!("d.{pid}.7.raw"),
        format!("{}.0.state", pid + 1),
    ] {
        assert!(ignored[0].contains(&want), "{want}: {err}");
    }
    assert!(!err.contains("/dev/zero"), "a planted file was read: {err}");
    assert!(!dir.join(format!("run.{pid}.7.pb.gz")).exists());
    assert!(
        err.contains(&format!("profile of pid {pid} written to")),
        "{err}"
    );
    assert!(top_stacks(&dir.join("run.pb.gz")).contains("main lying_modules.c"));
}

/// A gzip file of about 5 MB (the bomb was 4.9 MB) made of `unit` repeated: valid profile
/// fields that inflate a thousandfold. Written as gzip members of 64 MiB each (one stream to a
/// reader of concatenated members, as gzip's own).
fn bomb(path: &Path, unit: &[u8]) {
    use std::io::Write;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    let chunk = unit.repeat((1 << 20) / unit.len());
    for _ in 0..64 {
        gz.write_all(&chunk).unwrap();
    }
    let member = gz.finish().unwrap();
    let n = (5_000_000 / member.len()).max(1);
    std::fs::write(path, member.repeat(n)).unwrap();
}

/// Gzip bombs of valid fields (about 5 MB each, gigabytes inflated): empty strings (which took
/// `report` to 2.16 GB before it refused), tiny samples, comment ids. `report` and `diff` refuse
/// each with one error line, within the memory bound.
#[test]
fn gzip_bombs_of_valid_fields_are_refused_in_bounded_memory() {
    let dir = test_dir();
    let cases: [(&str, &[u8]); 3] = [
        ("strings", &[0x32, 0x00]),
        ("samples", &[0x12, 0x02, 0x08, 0x01]),
        ("comments", &[0x68, 0x00]),
    ];
    for (name, unit) in cases {
        let b = dir.join(format!("{name}.pb.gz"));
        bomb(&b, unit);
        let size = std::fs::metadata(&b).unwrap().len();
        assert!(
            (4_500_000..5_100_000).contains(&size),
            "{name}: {size} bytes"
        );
        for args in [vec!["report"], vec!["diff", b.to_str().unwrap()]] {
            let m = measured(
                memlens()
                    .args(&args)
                    .arg(&b)
                    .env_remove("MEMLENS_MAX_INPUT"),
            );
            let what = format!("memlens {} {name}", args.join(" "));
            assert_eq!(m.out.status.code(), Some(1), "{what}{}", printed(&m.out));
            assert_one_line_error(&m.out);
            assert!(
                stderr(&m.out).contains("a gzip bomb?"),
                "{what}{}",
                printed(&m.out)
            );
            assert!(
                m.max_rss_kb < MAX_RSS_KB,
                "{what}: peak RSS {} KiB",
                m.max_rss_kb
            );
        }
    }
}

/// A module file whose debug link leads to a FIFO beside it is not handed to the symbolizer (which
/// would open the FIFO and wait forever); the rest of the profile is.
#[test]
fn a_debug_link_to_a_fifo_is_not_followed() {
    let dir = test_dir();
    let l = lying(&dir);
    // The library's DWARF moves to a debug file its .gnu_debuglink names; then a FIFO takes the
    // debug file's place beside it.
    let dbg = dir.join("liblie.debug");
    Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&l.lib)
        .arg(&dbg)
        .ok();
    Command::new("objcopy")
        .arg("--strip-debug")
        .arg(format!("--add-gnu-debuglink={}", dbg.display()))
        .arg(&l.lib)
        .ok();
    std::fs::remove_file(&dbg).unwrap();
    mkfifo(&dbg);
    let (run, pid) = start(&dir, &l, true);
    std::fs::write(dir.join("stop"), "").unwrap();
    let o = run.wait_with_output().unwrap();
    assert!(o.status.success(), "{}", printed(&o));
    let top = top_stacks(&dir.join("run.pb.gz"));
    assert!(
        top.contains("liblie.so+0x") && top.contains("main lying_modules.c"),
        "{top}"
    );
    // what `memlens report` says of the raw dump memlens run converted
    let raw = dir.join(format!("raw/d.{pid}.0.raw"));
    let m = measured(memlens().arg("report").arg(&raw));
    assert!(m.out.status.success(), "{}", printed(&m.out));
    let err = stderr(&m.out);
    assert!(
        err.contains(&format!(
            "its debug link leads to {}, a FIFO",
            dbg.display()
        )),
        "{err}"
    );
}
