//! `memlens detach` of a process whose linked-in allocator memlens hooked under `attach` (issue
//! 35): the entry points get their original bytes back where that is safe — with every thread
//! stopped and none inside a patched range — and the program goes on allocating correctly.
//!
//! The program (progs/hook_restore.c, linked with libjemalloc_pic.a, so `malloc` and `free` are
//! defined in it) checks every block it made, and prints its entry points' addresses, whose bytes
//! the test reads in /proc/PID/mem before the attach, under it, and after the detach.
//!
//! A library loaded with dlopen after the attach, with jemalloc linked into it (progs of
//! allocators.rs: tests/programs/dlopen_alloc.c): the jump at the loader's notification, written by
//! memlens with every thread stopped, has it scanned and hooked before its code runs, and the bytes
//! it holds are counted; a detach puts the loader's bytes back, a re-attach writes the jump again.
use crate::allocators::{dlopen_programs, inuse_at_hold, said, within, STATIC_TLS};
use crate::util::*;
use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Stdio};

const JEMALLOC_A: &str = "/usr/lib/x86_64-linux-gnu/libjemalloc_pic.a";

/// The running program: its pid, stdout, and the addresses of its malloc and free.
struct Prog {
    child: Child,
    out: BufReader<ChildStdout>,
    pid: String,
    entries: [u64; 2],
}

impl Prog {
    fn start(d: &Path) -> Prog {
        let exe = d.join("hook_restore");
        Command::new("gcc")
            .args(["-O2", "-g", "-o"])
            .arg(&exe)
            .arg(root().join("tests/e2e/progs/hook_restore.c"))
            .args([JEMALLOC_A, "-lpthread", "-ldl", "-lm", "-lstdc++"]) // after the source
            .ok();
        let (child, mut out, first) = spawn_talking(Command::new(&exe).arg(d), d);
        let a: Vec<u64> = first
            .split_whitespace()
            .skip(1)
            .map(|h| u64::from_str_radix(h.trim_start_matches("0x"), 16).unwrap())
            .collect();
        assert_eq!(line(&mut out), "ready");
        let pid = child.id().to_string();
        Prog {
            child,
            out,
            pid,
            entries: [a[0], a[1]],
        }
    }

    /// The first 16 bytes of malloc and of free, as they are now.
    fn bytes(&self) -> Entries {
        let mem = std::fs::File::open(format!("/proc/{}/mem", self.pid)).unwrap();
        self.entries.map(|a| {
            let mut b = vec![0u8; 16];
            mem.read_exact_at(&mut b, a).unwrap();
            b
        })
    }

    fn memlens(&self, d: &Path, args: &[&str]) -> String {
        memlens()
            .args(args)
            .env("MEMLENS_CTL_DIR", ctl_dir(d))
            .ok_stdout()
    }

    /// Let it finish; it must exit 0 having found every block it made intact.
    fn end(&mut self, d: &Path) {
        std::fs::write(d.join("end"), "").unwrap();
        let last = line(&mut self.out);
        let st = self.child.wait().unwrap();
        assert!(
            st.success() && last.starts_with("done") && last.ends_with("bad=0"),
            "{st}: {last}"
        );
    }
}

impl Drop for Prog {
    fn drop(&mut self) {
        let _ = self.child.kill(); // a failed test leaves no program running
        let _ = self.child.wait();
    }
}

/// `cmd` started with the control directory of `d` and its stdout piped: the child, its stdout,
/// and the first line it printed.
fn spawn_talking(cmd: &mut Command, d: &Path) -> (Child, BufReader<ChildStdout>, String) {
    let mut child = cmd
        .env("MEMLENS_CTL_DIR", ctl_dir(d))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let first = line(&mut out);
    (child, out, first)
}

fn line(out: &mut BufReader<ChildStdout>) -> String {
    let mut l = String::new();
    out.read_line(&mut l).unwrap();
    l.trim().to_string()
}

/// A number from the `memlens:` comment of a profile (`KEY=N`).
fn meta(file: &Path, key: &str) -> u64 {
    let raw = Command::new("gzip")
        .arg("-dc")
        .arg(file)
        .output()
        .unwrap()
        .stdout;
    let text = String::from_utf8_lossy(&raw);
    let at = text
        .find(&format!(" {key}="))
        .unwrap_or_else(|| panic!("no {key}= in {file:?}"));
    text[at + key.len() + 2..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

fn attach_hooked(p: &Prog, d: &Path) {
    let a = p.memlens(d, &["attach", &p.pid, "--interval", "16K"]);
    assert!(
        a.contains("allocates through jemalloc linked into it")
            && a.contains("entry points hooked: every thread stopped"),
        "{a}"
    );
}

/// The first bytes of malloc and of free.
type Entries = [Vec<u8>; 2];

/// The program started and attached (its entry points hooked), after 300 ms of sampled churn:
/// its directory, the program, and malloc's and free's bytes before and under the attach. None
/// (and a SKIPPED line) without libjemalloc_pic.a.
fn start_hooked() -> Option<(TestDir, Prog, Entries, Entries)> {
    if !Path::new(JEMALLOC_A).exists() {
        println!("SKIPPED: {JEMALLOC_A} is not installed (libjemalloc-dev)");
        return None;
    }
    let dir = test_dir();
    let p = Prog::start(dir.path());
    let original = p.bytes();
    // Attached while it waits: `memlens attach` injects by a call into the process, which would
    // wait forever on a lock of the allocator the interrupted thread holds (not what this tests).
    attach_hooked(&p, dir.path());
    std::fs::write(dir.path().join("churn"), "").unwrap();
    let hooked = p.bytes();
    assert!(
        hooked[0] != original[0] && hooked[1] != original[1],
        "malloc and free should hold jumps: {hooked:x?} vs {original:x?}"
    );
    std::thread::sleep(std::time::Duration::from_millis(300)); // it churns, sampled
    Some((dir, p, original, hooked))
}

#[test]
fn detach_puts_the_entry_points_back_when_no_sampled_block_is_live() {
    let Some((dir, mut p, original, _)) = start_hooked() else {
        return;
    };
    let d = dir.path();
    // Stacks sampled through the hooks are unwound by the dwarf unwinder itself, none handed to
    // its libgcc fallback (which the hooks' slow paths once forced on every sample, 20x slower).
    let file = d.join("a.pb.gz");
    p.memlens(d, &["ctl", &p.pid, "dump", "-o", file.to_str().unwrap()]);
    let (samples, fallbacks) = (meta(&file, "samples"), meta(&file, "unwind_fallbacks"));
    assert!(
        samples > 50 && fallbacks == 0,
        "samples={samples} unwind_fallbacks={fallbacks}"
    );
    // It frees every block it holds and stops allocating: no sampled block is live.
    std::fs::write(d.join("quiet"), "").unwrap();
    assert_eq!(line(&mut p.out), "quiet");
    let out = p.memlens(d, &["detach", &p.pid]);
    assert!(
        out.contains("allocator entry points given their original bytes back")
            && !out.contains("keep their hooks"),
        "{out}"
    );
    assert_eq!(
        p.bytes(),
        original,
        "after the detach, malloc and free should hold their original bytes"
    );
    std::fs::write(d.join("go"), "").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(200)); // it churns on the bare allocator
    p.end(d);
}

#[test]
fn detach_keeps_the_free_side_while_sampled_blocks_live_and_attach_hooks_again() {
    let Some((dir, mut p, original, hooked)) = start_hooked() else {
        return;
    };
    let d = dir.path();
    // It holds 256 blocks of 64 B..256 KiB: at 16K some are sampled, live in memlens's range — once
    // its churn has replaced some (beside four busy loops, 300 ms were not always enough: then no
    // sampled block was live and the detach rightly gave free back too).
    let file = d.join("live.pb.gz");
    wait_for("a sampled block live in the program", 60, || {
        p.memlens(d, &["ctl", &p.pid, "dump", "-o", file.to_str().unwrap()]);
        report_json(&file, &[])["totals"]["inuse_objects"]
            .as_f64()
            .is_some_and(|n| n > 0.0)
    });
    let out = p.memlens(d, &["detach", &p.pid]);
    assert!(
        out.contains("allocator entry points given their original bytes back")
            && out.contains("keep their hooks, forwarding: blocks sampled earlier are still live"),
        "{out}"
    );
    let now = p.bytes();
    assert_eq!(now[0], original[0], "malloc should hold its original bytes");
    assert_eq!(now[1], hooked[1], "free should keep its jump");
    std::thread::sleep(std::time::Duration::from_millis(200)); // sampled blocks come back to memlens
                                                               // A second attach (through the control socket) writes the jumps it took away again.
    let again = p.memlens(d, &["attach", &p.pid, "--interval", "16K"]);
    assert!(again.contains("entry points hooked again"), "{again}");
    assert_eq!(p.bytes(), hooked, "the jumps should be back");
    std::thread::sleep(std::time::Duration::from_millis(200));
    p.end(d);
}

/// The dlopen program started with a third argument: it waits for `go` before it loads the
/// library, having printed where the loader's notification is (r_debug.r_brk).
struct Loading {
    child: Child,
    out: BufReader<ChildStdout>,
    pid: String,
    brk: u64,
}

impl Loading {
    fn start(prog: &Path, lib: &Path, d: &Path) -> Loading {
        let mut cmd = Command::new(prog);
        cmd.arg(lib)
            .arg(d.join("end"))
            .arg(d.join("go"))
            .env(STATIC_TLS.0, STATIC_TLS.1);
        let (child, out, first) = spawn_talking(&mut cmd, d);
        let hex = first.strip_prefix("waiting brk=0x").expect(&first);
        let pid = child.id().to_string();
        Loading {
            child,
            out,
            pid,
            brk: u64::from_str_radix(hex, 16).unwrap(),
        }
    }

    /// The first 16 bytes of the loader's _dl_debug_state.
    fn brk_bytes(&self) -> Vec<u8> {
        let mem = std::fs::File::open(format!("/proc/{}/mem", self.pid)).unwrap();
        let mut b = vec![0u8; 16];
        mem.read_exact_at(&mut b, self.brk).unwrap();
        b
    }
}

impl Drop for Loading {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn library_dlopened_after_the_attach_with_jemalloc_linked_in() {
    if !Path::new(JEMALLOC_A).exists() {
        println!("SKIPPED: {JEMALLOC_A} is not installed (libjemalloc-dev)");
        return;
    }
    let dir = test_dir();
    let d = dir.path();
    let (prog, lib) = dlopen_programs(d);
    let reference = said(
        &Command::new(&prog)
            .arg(&lib)
            .env(STATIC_TLS.0, STATIC_TLS.1)
            .ok_stdout(),
    );
    let mut p = Loading::start(&prog, &lib, d);
    let original = p.brk_bytes();
    let run = |args: &[&str]| {
        memlens()
            .args(args)
            .env("MEMLENS_CTL_DIR", ctl_dir(d))
            .ok_stdout()
    };
    let attached = run(&["attach", &p.pid, "--interval", "16K"]);
    let watched = p.brk_bytes();
    std::fs::write(d.join("go"), "").unwrap(); // it loads the library and holds 32 MiB through it
    let own = said(&line(&mut p.out));
    let file = d.join("a.pb.gz");
    run(&["ctl", &p.pid, "dump", "-o", file.to_str().unwrap()]);
    let got = inuse_at_hold(&file);
    within(
        "after the attach, vs the program's own count",
        got,
        own.held,
    );
    within(
        "after the attach, vs jemalloc's stats.allocated",
        got,
        reference.allocator,
    );
    assert!(
        attached.contains("the loader's notification hooked") && watched != original,
        "the loader's notification should hold a jump: {watched:x?} vs {original:x?}\n{attached}"
    );
    let header = memlens().arg("report").arg(&file).ok_stdout();
    let found = "libheld.so (a library) allocates through jemalloc linked into it";
    assert!(header.contains(found), "no '{found}' in:\n{header}");
    // A detach puts the loader's bytes back, and the library's allocating entry points (their
    // jumps, written inside its dlopen, are listed with the others); a re-attach writes them again.
    let out = run(&["detach", &p.pid]);
    assert!(
        out.contains("the loader's notification given its original bytes back"),
        "{out}"
    );
    assert_eq!(p.brk_bytes(), original, "after the detach");
    let again = run(&["attach", &p.pid, "--interval", "16K"]);
    assert!(
        again.contains("the loader's notification and ")
            && again.contains("allocator entry points hooked again"),
        "{again}"
    );
    assert_eq!(p.brk_bytes(), watched, "after a second attach");
    std::fs::write(d.join("end"), "").unwrap();
    let st = p.child.wait().unwrap();
    assert!(st.success(), "{prog:?}: {st}");
}
