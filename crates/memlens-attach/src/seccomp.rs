//! A target under a seccomp filter (systemd's `SystemCallFilter=`, a container's profile, a sandbox
//! the program installed itself): before loading anything, `memlens attach` reads the filter and
//! refuses, naming the calls, when it forbids a system call that the loader thread or the runtime
//! makes. Such a call would kill the service (SIGSYS) or fail in it.
//!
//! The filter is read with `PTRACE_SECCOMP_GET_FILTER` (root, CAP_SYS_ADMIN) from the thread memlens
//! stops for the attach (its filters are the ones the loader thread and the runtime's thread
//! inherit) and run here, a small classic-BPF interpreter, for every call of [`CALLS`] with the
//! arguments the runtime passes. The list is the runtime's minimal set under a filter
//! (runtime/README.md, "System calls"): no libunwind (mincore, a pipe) and no process_vm_readv there.
use crate::inject::ptrace;
use anyhow::{bail, Result};

/// A system call the loader thread or the runtime makes, with the arguments it makes it with
/// (where a filter may look at them: a socket's family, mmap's flags).
pub(crate) struct Call {
    pub name: &'static str,
    nr: u32,
    args: [u64; 6],
}

const fn call(name: &'static str, nr: u32) -> Call {
    Call {
        name,
        nr,
        args: [0; 6],
    }
}

const fn with(name: &'static str, nr: u32, args: [u64; 6]) -> Call {
    Call { name, nr, args }
}

const AT_FDCWD: u64 = -100i64 as u64;
const MINUS_ONE: u64 = u64::MAX;

/// x86-64 system call numbers, and the arguments that matter.
pub(crate) const CALLS: &[Call] = &[
    call("read", 0),
    call("write", 1),
    call("close", 3),
    call("lseek", 8),
    with("mmap", 9, [0, 4096, 3, 0x4022, MINUS_ONE, 0]), // rw, private|anonymous|noreserve
    with("mprotect", 10, [0, 4096, 3, 0, 0, 0]),
    call("munmap", 11),
    call("rt_sigprocmask", 14),
    call("pread64", 17),
    call("pwrite64", 18),
    call("access", 21),
    call("sched_yield", 24),
    with("mremap", 25, [0, 4096, 4096, 3, 0, 0]),
    with("madvise", 28, [0, 4096, 4, 0, 0, 0]), // MADV_DONTNEED
    call("nanosleep", 35),
    call("getpid", 39),
    with("socket", 41, [1, 0x80801, 0, 0, 0, 0]), // AF_UNIX, stream|cloexec|nonblock
    call("sendto", 44),
    call("recvfrom", 45),
    call("bind", 49),
    call("listen", 50),
    call("getsockopt", 55),
    call("exit", 60),
    with("kill", 62, [1, 0, 0, 0, 0, 0]), // signal 0: is a pid alive
    with("fcntl", 72, [3, 1030, 960, 0, 0, 0]), // F_DUPFD_CLOEXEC
    call("ftruncate", 77),
    call("mkdir", 83),
    call("unlink", 87),
    call("chmod", 90),
    call("readlink", 89),
    call("geteuid", 107),
    call("getppid", 110),
    call("gettid", 186),
    call("futex", 202),
    call("getdents64", 217),
    call("clock_gettime", 228),
    call("clock_nanosleep", 230),
    with("openat", 257, [AT_FDCWD, 0, 0x80000, 0, 0, 0]), // O_RDONLY|O_CLOEXEC
    with("newfstatat", 262, [3, 0, 0, 0x1000, 0, 0]),     // AT_EMPTY_PATH: fstat
    call("unlinkat", 263),
    call("poll", 7),
    call("set_robust_list", 273),
    call("accept4", 288),
    with("eventfd2", 290, [0, 0x80800, 0, 0, 0, 0]), // cloexec|nonblock
    with("fallocate", 285, [3, 0, 0, 65536, 0, 0]),
    with("prlimit64", 302, [0, 7, 0, 0, 0, 0]), // getrlimit(RLIMIT_NOFILE and others)
    call("memfd_create", 319),
    call("rseq", 334),
];

/// clone3 may be refused with an error (ENOSYS) where clone is allowed: glibc then uses clone.
const CLONE3: Call = call("clone3", 435);
const CLONE: Call = with("clone", 56, [0x3d0f00, 0, 0, 0, 0, 0]); // a pthread's flags

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const RET_ACTION_FULL: u32 = 0xffff_0000;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_LOG: u32 = 0x7ffc_0000;
const PTRACE_SECCOMP_GET_FILTER: libc::c_uint = 0x420c;

#[derive(Clone, Copy)]
#[repr(C)]
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

/// What a filter's action means, for the message.
fn action_name(ret: u32) -> &'static str {
    match ret & RET_ACTION_FULL {
        0x8000_0000 => "kills the process",
        0 => "kills the thread",
        0x0003_0000 => "traps (SIGSYS)",
        0x0005_0000 => "fails with an error",
        0x7fc0_0000 => "goes to a supervisor",
        0x7ff0_0000 => "goes to a tracer",
        _ => "is not allowed",
    }
}

/// seccomp_data for `c` as the kernel lays it out: nr, arch, instruction pointer, args.
fn data(c: &Call) -> [u8; 64] {
    let mut d = [0u8; 64];
    d[0..4].copy_from_slice(&c.nr.to_le_bytes());
    d[4..8].copy_from_slice(&AUDIT_ARCH_X86_64.to_le_bytes());
    for (i, a) in c.args.iter().enumerate() {
        d[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
    }
    d
}

/// Run one classic-BPF seccomp program on `d`; its return value, or why it could not be run.
fn run(prog: &[Insn], d: &[u8; 64]) -> Result<u32, String> {
    let (mut a, mut x, mut mem) = (0u32, 0u32, [0u32; 16]);
    let mut pc = 0usize;
    while let Some(i) = prog.get(pc) {
        pc += 1;
        let k = i.k;
        let src = if i.code & 0x08 != 0 { x } else { k };
        match i.code & 0x07 {
            0x00 | 0x01 => {
                // LD / LDX
                let v = match i.code & 0xe0 {
                    0x00 => k, // IMM
                    0x20 if (k as usize) + 4 <= 64 && k % 4 == 0 => {
                        u32::from_le_bytes(d[k as usize..k as usize + 4].try_into().unwrap())
                    } // ABS
                    0x60 => *mem.get(k as usize).ok_or("bad scratch index")?, // MEM
                    0x80 => 64, // LEN
                    _ => return Err(format!("unsupported load {:#x}", i.code)),
                };
                if i.code & 0x07 == 0 {
                    a = v
                } else {
                    x = v
                }
            }
            0x02 => *mem.get_mut(k as usize).ok_or("bad scratch index")? = a, // ST
            0x03 => *mem.get_mut(k as usize).ok_or("bad scratch index")? = x, // STX
            0x04 => {
                a = match i.code & 0xf0 {
                    0x00 => a.wrapping_add(src),
                    0x10 => a.wrapping_sub(src),
                    0x20 => a.wrapping_mul(src),
                    0x30 => a.checked_div(src).ok_or("division by zero")?,
                    0x40 => a | src,
                    0x50 => a & src,
                    0x60 => a.checked_shl(src).unwrap_or(0),
                    0x70 => a.checked_shr(src).unwrap_or(0),
                    0x80 => a.wrapping_neg(),
                    0x90 => a.checked_rem(src).ok_or("division by zero")?,
                    0xa0 => a ^ src,
                    _ => return Err(format!("unsupported alu {:#x}", i.code)),
                }
            }
            0x05 => {
                let taken = match i.code & 0xf0 {
                    0x00 => {
                        pc += k as usize;
                        continue;
                    }
                    0x10 => a == src,
                    0x20 => a > src,
                    0x30 => a >= src,
                    0x40 => a & src != 0,
                    _ => return Err(format!("unsupported jump {:#x}", i.code)),
                };
                pc += if taken { i.jt } else { i.jf } as usize;
            }
            0x06 => return Ok(if i.code & 0x18 == 0x10 { a } else { k }), // RET A / K
            _ => {
                if i.code & 0xf8 == 0x00 {
                    x = a // TAX
                } else {
                    a = x // TXA
                }
            }
        }
    }
    Err("the program ran past its end".into())
}

/// Allowed by every filter (the kernel applies the strictest action of all)? None, or the action.
fn verdict(filters: &[Vec<Insn>], c: &Call) -> Result<Option<u32>, String> {
    let d = data(c);
    for f in filters {
        let ret = run(f, &d)?;
        let action = ret & RET_ACTION_FULL;
        if action != RET_ALLOW && action != RET_LOG {
            return Ok(Some(ret));
        }
    }
    Ok(None)
}

/// The calls the filters forbid, each with what the filter does.
fn forbidden(filters: &[Vec<Insn>]) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for c in CALLS {
        if let Some(ret) = verdict(filters, c)? {
            out.push(format!("{} ({})", c.name, action_name(ret)));
        }
    }
    // pthread_create: clone3, or clone where clone3 fails with an error.
    if let Some(r3) = verdict(filters, &CLONE3)? {
        let errno_only = r3 & RET_ACTION_FULL == 0x0005_0000;
        if let Some(r) = verdict(filters, &CLONE)? {
            out.push(format!("clone ({})", action_name(r)));
        } else if !errno_only {
            out.push(format!("clone3 ({})", action_name(r3)));
        }
    }
    Ok(out)
}

/// Stop `tid` for a moment (as the attach does) and read its filters, newest first.
fn read_filters(tid: i32) -> Result<Vec<Vec<Insn>>, String> {
    let err = |what: &str, e: i32| format!("{what}: {}", std::io::Error::from_raw_os_error(e));
    ptrace(libc::PTRACE_SEIZE, tid, 0, 0).map_err(|e| err("PTRACE_SEIZE", e))?;
    let mut pending = 0;
    let out = (|| {
        ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0).map_err(|e| err("PTRACE_INTERRUPT", e))?;
        loop {
            let mut st = 0;
            // SAFETY: waitpid writes the status into `st`.
            if unsafe { libc::waitpid(tid, &mut st, libc::__WALL) } < 0 {
                return Err("waitpid failed".to_string());
            }
            if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
                return Err("the process exited".to_string());
            }
            if (st >> 16) == libc::PTRACE_EVENT_STOP {
                break;
            }
            pending = libc::WSTOPSIG(st); // delivered when we let go
            ptrace(libc::PTRACE_CONT, tid, 0, 0).map_err(|e| err("PTRACE_CONT", e))?;
            let _ = ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0);
        }
        let mut filters = Vec::new();
        for index in 0.. {
            let n = match ptrace(PTRACE_SECCOMP_GET_FILTER, tid, index, 0) {
                Ok(n) => n as usize,
                Err(libc::ENOENT) if index > 0 => break,
                Err(e) => return Err(err("PTRACE_SECCOMP_GET_FILTER", e)),
            };
            let mut prog = vec![
                Insn {
                    code: 0,
                    jt: 0,
                    jf: 0,
                    k: 0
                };
                n
            ];
            ptrace(
                PTRACE_SECCOMP_GET_FILTER,
                tid,
                index,
                prog.as_mut_ptr() as u64,
            )
            .map_err(|e| err("PTRACE_SECCOMP_GET_FILTER", e))?;
            filters.push(prog);
        }
        Ok(filters)
    })();
    let _ = ptrace(libc::PTRACE_DETACH, tid, 0, pending as u64);
    out
}

/// `Seccomp:` and `Seccomp_filters:` of /proc/PID/status (0 when absent).
fn mode(pid: i32) -> (u32, u32) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0)
    };
    (field("Seccomp:"), field("Seccomp_filters:"))
}

/// Refuse to attach to `pid` (`label` for messages) when its seccomp filter forbids a call the
/// loader thread or the runtime makes, or when the filter cannot be read.
pub(crate) fn check(pid: i32, label: &str) -> Result<()> {
    let (mode, n) = mode(pid);
    match mode {
        0 => return Ok(()),
        1 => bail!("cannot attach to {label}: it runs in seccomp strict mode (only read, write and exit are allowed); the runtime cannot run there"),
        _ => {}
    }
    let filters = read_filters(pid).map_err(|e| {
        anyhow::anyhow!("cannot attach to {label}: it runs under {n} seccomp filter(s) that memlens cannot read ({e}; reading them needs root), so it cannot tell whether the runtime's system calls are allowed; start it with memlens run instead")
    })?;
    let bad = forbidden(&filters).map_err(|e| {
        anyhow::anyhow!("cannot attach to {label}: its seccomp filter cannot be evaluated ({e})")
    })?;
    if !bad.is_empty() {
        bail!(
            "cannot attach to {label}: its seccomp filter forbids system calls the runtime makes: {}; allow them (systemd: SystemCallFilter=) or start it with memlens run",
            bad.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const fn ins(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
        Insn { code, jt, jf, k }
    }

    /// What libseccomp makes of "x86-64 only, allow read and socket(AF_UNIX), kill the rest".
    fn filter() -> Vec<Insn> {
        vec![
            ins(0x20, 0, 0, 4),                 // A = arch
            ins(0x15, 1, 0, AUDIT_ARCH_X86_64), // arch ok?
            ins(0x06, 0, 0, 0x8000_0000),       // kill process
            ins(0x20, 0, 0, 0),                 // A = nr
            ins(0x15, 0, 1, 0),                 // read?
            ins(0x06, 0, 0, RET_ALLOW),
            ins(0x15, 0, 3, 41), // socket?
            ins(0x20, 0, 0, 16), // A = args[0] low
            ins(0x15, 0, 1, 1),  // AF_UNIX?
            ins(0x06, 0, 0, RET_ALLOW),
            ins(0x06, 0, 0, 0x0005_0001), // errno EPERM
        ]
    }

    #[test]
    fn the_interpreter_follows_a_filter_on_numbers_and_arguments() {
        let f = vec![filter()];
        assert_eq!(verdict(&f, &call("read", 0)), Ok(None));
        let unix = CALLS.iter().find(|c| c.name == "socket").unwrap();
        assert_eq!(verdict(&f, unix), Ok(None), "socket(AF_UNIX) is allowed");
        let inet = with("socket", 41, [2, 1, 0, 0, 0, 0]);
        assert_eq!(verdict(&f, &inet), Ok(Some(0x0005_0001)));
        assert_eq!(verdict(&f, &call("write", 1)), Ok(Some(0x0005_0001)));
        let bad = forbidden(&f).unwrap();
        assert!(
            bad.iter().any(|b| b == "write (fails with an error)"),
            "{bad:?}"
        );
        assert!(!bad.iter().any(|b| b.starts_with("read ")), "{bad:?}");
    }

    #[test]
    fn a_program_that_runs_off_its_end_is_an_error_not_an_answer() {
        let f = vec![vec![ins(0x20, 0, 0, 0)]];
        assert!(verdict(&f, &call("read", 0)).is_err());
    }
}
