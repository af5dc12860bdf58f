//! Loading the runtime into a running process with ptrace, without gdb.
//!
//! One thread is seized and interrupted. Unless it is inside the allocator or the dynamic loader
//! (then it is resumed and another moment or thread is tried), it makes two calls into the
//! process's own libc — mmap (a two-page work area for `loader.S` and its data) and pthread_create
//! — and is put back exactly as it was (registers and the whole x87/SSE/AVX state) and released.
//! Everything else happens while the process runs: the new loader thread creates a memfd, memlens
//! writes the runtime into it through /proc/PID/fd/N, and the loader dlopens /proc/thread-self/fd/N (so
//! the library need not be visible in the process's mount namespace) and calls
//! `memlens_attach_entry`, which patches the GOTs. memlens follows its status word.
//!
//! A call is made by pointing the thread at the function with a return address of 0: the return
//! faults, the fault stops the thread for us, and the signal is never delivered.
use crate::tracee::{seize_denied, Tracee};
use crate::unwind::{after_call, Unwinder};
use anyhow::{anyhow, bail, Context, Result};
use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::time::{Duration, Instant};

/// `loader.S`, assembled (`as --64 loader.S && objcopy -O binary -j .text`).
pub const LOADER: &[u8] = &[
    0x53, 0x48, 0x89, 0xfb, 0xb8, 0x0e, 0x00, 0x00, 0x00, 0x31, 0xff, 0x48, 0x8d, 0xb3, 0x20, 0x04,
    0x00, 0x00, 0x31, 0xd2, 0x41, 0xba, 0x08, 0x00, 0x00, 0x00, 0x0f, 0x05, 0xff, 0x53, 0x20, 0x48,
    0x89, 0xc7, 0xff, 0x53, 0x18, 0x48, 0x8d, 0xbb, 0x00, 0x04, 0x00, 0x00, 0xbe, 0x01, 0x00, 0x00,
    0x00, 0xff, 0x53, 0x50, 0x89, 0x43, 0x58, 0xc7, 0x43, 0x38, 0x05, 0x00, 0x00, 0x00, 0x8b, 0x43,
    0x5c, 0x83, 0xf8, 0x01, 0x74, 0x27, 0x85, 0xc0, 0x75, 0x17, 0xff, 0x43, 0x78, 0x81, 0x7b, 0x78,
    0x20, 0x4e, 0x00, 0x00, 0x73, 0x0b, 0x48, 0x8d, 0x7b, 0x60, 0x31, 0xf6, 0xff, 0x53, 0x70, 0xeb,
    0xdd, 0xc7, 0x43, 0x3c, 0x06, 0x00, 0x00, 0x00, 0xe9, 0xbb, 0x00, 0x00, 0x00, 0x48, 0x8d, 0xbb,
    0x80, 0x00, 0x00, 0x00, 0xbe, 0x02, 0x10, 0x00, 0x00, 0xff, 0x13, 0x48, 0x85, 0xc0, 0x74, 0x66,
    0x48, 0x89, 0xc7, 0x48, 0x8d, 0xb3, 0xc0, 0x00, 0x00, 0x00, 0xff, 0x53, 0x08, 0x48, 0x85, 0xc0,
    0x74, 0x5d, 0x48, 0x8d, 0xbb, 0x00, 0x01, 0x00, 0x00, 0x48, 0x8d, 0xb3, 0x00, 0x02, 0x00, 0x00,
    0xba, 0x00, 0x02, 0x00, 0x00, 0xff, 0xd0, 0x85, 0xc0, 0x75, 0x76, 0xc7, 0x43, 0x38, 0x01, 0x00,
    0x00, 0x00, 0xc7, 0x43, 0x78, 0x00, 0x00, 0x00, 0x00, 0x83, 0x7b, 0x5c, 0x01, 0x77, 0x17, 0xff,
    0x43, 0x78, 0x81, 0x7b, 0x78, 0x88, 0x13, 0x00, 0x00, 0x73, 0x0b, 0x48, 0x8d, 0x7b, 0x60, 0x31,
    0xf6, 0xff, 0x53, 0x70, 0xeb, 0xe3, 0x48, 0x89, 0xdf, 0x48, 0x8b, 0x73, 0x40, 0x48, 0x8b, 0x43,
    0x30, 0x5b, 0x50, 0xff, 0x67, 0x28, 0xc7, 0x43, 0x3c, 0x02, 0x00, 0x00, 0x00, 0xeb, 0x07, 0xc7,
    0x43, 0x3c, 0x03, 0x00, 0x00, 0x00, 0xff, 0x53, 0x10, 0x48, 0x85, 0xc0, 0x74, 0x2a, 0x48, 0x8d,
    0xbb, 0x00, 0x02, 0x00, 0x00, 0xb9, 0xff, 0x01, 0x00, 0x00, 0x8a, 0x10, 0x88, 0x17, 0x84, 0xd2,
    0x74, 0x16, 0x48, 0xff, 0xc0, 0x48, 0xff, 0xc7, 0xff, 0xc9, 0x75, 0xee, 0xc6, 0x07, 0x00, 0xeb,
    0x07, 0xc7, 0x43, 0x3c, 0x04, 0x00, 0x00, 0x00, 0x8b, 0x7b, 0x58, 0x85, 0xff, 0x78, 0x07, 0xb8,
    0x03, 0x00, 0x00, 0x00, 0x0f, 0x05, 0x8b, 0x43, 0x3c, 0x89, 0x43, 0x38, 0xc7, 0x43, 0x78, 0x00,
    0x00, 0x00, 0x00, 0xe9, 0x71, 0xff, 0xff, 0xff,
];

// The work area: a data page (layout below, offsets used by loader.S) and a code page.
const AREA: u64 = 0x2000;
const CODE: u64 = 0x1000;
const OFF_FUNCS: u64 = 0x00; // dlopen dlsym dlerror pthread_detach pthread_self munmap pthread_exit
const OFF_STATUS: u64 = 0x38; // 0 running, 5 memfd ready, 1 done, 2-4 failed, 6 given up
const OFF_LEN: u64 = 0x40;
const OFF_TID: u64 = 0x48;
const OFF_MEMFD_CREATE: u64 = 0x50;
const OFF_FD: u64 = 0x58;
const OFF_GO: u64 = 0x5c; // set by memlens: 1 load, 2 give up, 3 acknowledged
const OFF_NAP: u64 = 0x60; // struct timespec of 1 ms
const OFF_NANOSLEEP: u64 = 0x70;
const OFF_NAPS: u64 = 0x78; // the loader's count of naps waiting for the acknowledgement
const OFF_PATH: u64 = 0x80;
const OFF_SYM: u64 = 0xc0;
const OFF_ARGS: u64 = 0x100;
const OFF_MSG: u64 = 0x200;
const OFF_NAME: u64 = 0x400;
const OFF_SIGSET: u64 = 0x420; // every signal: the loader blocks them all
const LOADER_FUNCS: [&str; 7] = [
    "dlopen",
    "dlsym",
    "dlerror",
    "pthread_detach",
    "pthread_self",
    "munmap",
    "pthread_exit",
];
const CALLED: [&str; 4] = ["mmap", "memfd_create", "nanosleep", "pthread_create"];
/// A thread stopped inside one of these (or anywhere in ld.so or a non-libc allocator) may hold the
/// lock pthread_create needs: it is not used.
const UNSAFE: [&str; 22] = [
    "malloc",
    "free",
    "calloc",
    "realloc",
    "reallocarray",
    "memalign",
    "posix_memalign",
    "aligned_alloc",
    "valloc",
    "pvalloc",
    "malloc_usable_size",
    "malloc_trim",
    "malloc_info",
    "malloc_stats",
    "mallinfo",
    "mallinfo2",
    "mallopt",
    "fork",
    "_Fork",
    "pthread_create",
    "dlopen",
    "dlclose",
];

/// What the attach cost the process.
#[derive(Debug, Clone)]
pub struct Injected {
    /// How long the interrupted thread was stopped (the rest of the process ran on).
    pub stopped: Duration,
    pub tid: i32,
    /// Interruptions that found the thread in the allocator or loader and let it go at once.
    pub retries: u32,
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

pub(crate) fn ptrace(
    req: libc::c_uint,
    tid: i32,
    addr: u64,
    data: u64,
) -> Result<libc::c_long, i32> {
    // SAFETY: ptrace requests that read or write only the buffers we pass (or none).
    unsafe {
        *libc::__errno_location() = 0;
        let r = libc::ptrace(
            req,
            tid,
            addr as *mut libc::c_void,
            data as *mut libc::c_void,
        );
        if r == -1 && errno() != 0 {
            return Err(errno());
        }
        Ok(r)
    }
}

pub(crate) fn wait(tid: i32) -> Result<i32> {
    wait_until(tid, None).map(|st| st.expect("no deadline"))
}

/// How long an injected call may take: mmap and pthread_create return in microseconds, but one
/// that waits on a lock its own thread held where it was stopped never returns.
const CALL_LIMIT: Duration = Duration::from_secs(10);

/// A limit on this thread's blocking waits: a timer of its own (SIGEV_THREAD_ID) that, from
/// `at` on, sends it SIGALRM every 100 ms, whose handler does nothing but interrupt the wait
/// (EINTR; repeated, so an expiry just before the wait began is not lost). Deleted when dropped.
pub(crate) struct Deadline {
    timer: libc::timer_t,
    at: Instant,
}

extern "C" fn on_alarm(_: libc::c_int) {}

impl Deadline {
    pub(crate) fn after(d: Duration) -> Result<Deadline> {
        static HANDLER: std::sync::Once = std::sync::Once::new();
        // SAFETY: sigaction, timer_create and timer_settime with structures on our stack; the
        // handler is async-signal-safe (it does nothing), installed without SA_RESTART.
        unsafe {
            HANDLER.call_once(|| {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = on_alarm as *const () as libc::sighandler_t;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(libc::SIGALRM, &sa, std::ptr::null_mut());
            });
            let mut ev: libc::sigevent = std::mem::zeroed();
            ev.sigev_notify = libc::SIGEV_THREAD_ID;
            ev.sigev_signo = libc::SIGALRM;
            ev.sigev_notify_thread_id = libc::gettid();
            let mut timer: libc::timer_t = std::mem::zeroed();
            if libc::timer_create(libc::CLOCK_MONOTONIC, &mut ev, &mut timer) != 0 {
                bail!("timer_create: {}", std::io::Error::last_os_error());
            }
            let ts = |d: Duration| libc::timespec {
                tv_sec: d.as_secs() as libc::time_t,
                tv_nsec: d.subsec_nanos() as libc::c_long,
            };
            let spec = libc::itimerspec {
                it_value: ts(d.max(Duration::from_nanos(1))),
                it_interval: ts(Duration::from_millis(100)),
            };
            let dl = Deadline {
                timer,
                at: Instant::now() + d,
            };
            if libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) != 0 {
                bail!("timer_settime: {}", std::io::Error::last_os_error());
            }
            Ok(dl)
        }
    }

    fn passed(&self) -> bool {
        Instant::now() >= self.at
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        // SAFETY: a timer created in after().
        unsafe { libc::timer_delete(self.timer) };
    }
}

/// waitpid on `tid` (every stop of a traced thread), or None once `limit` has passed.
pub(crate) fn wait_until(tid: i32, limit: Option<&Deadline>) -> Result<Option<i32>> {
    let mut st = 0;
    loop {
        // SAFETY: waitpid writes the status into `st`.
        let r = unsafe { libc::waitpid(tid, &mut st, libc::__WALL) };
        if r == tid {
            if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
                bail!("the process exited during attach");
            }
            return Ok(Some(st));
        }
        if errno() != libc::EINTR {
            bail!("waitpid failed: {}", std::io::Error::last_os_error());
        }
        if limit.is_some_and(Deadline::passed) {
            return Ok(None);
        }
    }
}

fn is_event_stop(st: i32) -> bool {
    (st >> 16) == libc::PTRACE_EVENT_STOP
}

/// A seized, stopped thread. Dropping it without `release` (an early return, a panic) still puts
/// the thread back and lets it go: the target must never be left stopped or with our registers.
pub(crate) struct Stopped {
    released: bool,
    pub(crate) tid: i32,
    regs: libc::user_regs_struct,
    xstate: Vec<u8>,
    /// A signal that arrived while we held the thread: delivered when we let it go.
    pending: i32,
    /// The thread our pthread_create made (PTRACE_O_TRACECLONE reports it, traced from birth).
    pub(crate) clone_tid: Option<i32>,
    /// When it stopped.
    since: Instant,
}

fn get_regs(tid: i32) -> Result<libc::user_regs_struct> {
    // SAFETY: user_regs_struct is plain data; PTRACE_GETREGS fills it.
    let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    ptrace(libc::PTRACE_GETREGS, tid, 0, &mut r as *mut _ as u64)
        .map_err(|e| anyhow!("cannot read registers: errno {e}"))?;
    Ok(r)
}

fn set_regs(tid: i32, r: &libc::user_regs_struct) -> Result<()> {
    ptrace(libc::PTRACE_SETREGS, tid, 0, r as *const _ as u64)
        .map_err(|e| anyhow!("cannot write registers: errno {e}"))?;
    Ok(())
}

const NT_X86_XSTATE: u64 = 0x202;

fn get_xstate(tid: i32) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; 16384];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    ptrace(
        libc::PTRACE_GETREGSET,
        tid,
        NT_X86_XSTATE,
        &mut iov as *mut _ as u64,
    )
    .map_err(|e| anyhow!("cannot read the FPU/vector state: errno {e}"))?;
    buf.truncate(iov.iov_len);
    Ok(buf)
}

fn set_xstate(tid: i32, buf: &mut [u8]) -> Result<()> {
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    ptrace(
        libc::PTRACE_SETREGSET,
        tid,
        NT_X86_XSTATE,
        &mut iov as *mut _ as u64,
    )
    .map_err(|e| anyhow!("cannot restore the FPU/vector state: errno {e}"))?;
    Ok(())
}

/// Seize `tid` and stop it. Err(errno) if ptrace refused. The thread it creates for us is traced
/// from birth (PTRACE_O_TRACECLONE), so memlens keeps it running even if the process is stopped
/// (SIGSTOP) and can always make it leave.
pub(crate) fn stop(tid: i32) -> Result<Result<Stopped, i32>> {
    if let Err(e) = ptrace(libc::PTRACE_SEIZE, tid, 0, libc::PTRACE_O_TRACECLONE as u64) {
        return Ok(Err(e));
    }
    if let Err(e) = ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0) {
        let _ = ptrace(libc::PTRACE_DETACH, tid, 0, 0);
        return Ok(Err(e));
    }
    let mut pending = 0;
    loop {
        let st = wait(tid)?;
        if is_event_stop(st) {
            break;
        }
        // A signal arrived first: hold it back, deliver it when we let go.
        pending = libc::WSTOPSIG(st);
        ptrace(libc::PTRACE_CONT, tid, 0, 0).map_err(|e| anyhow!("ptrace cont: errno {e}"))?;
        let _ = ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0);
    }
    let since = Instant::now();
    let regs = get_regs(tid)?;
    let xstate = get_xstate(tid)?;
    Ok(Ok(Stopped {
        released: false,
        tid,
        regs,
        xstate,
        pending,
        clone_tid: None,
        since,
    }))
}

impl Drop for Stopped {
    fn drop(&mut self) {
        if !self.released {
            let _ = self.restore();
        }
    }
}

impl Stopped {
    /// Put the thread back as it was and let it go (also on every error path).
    pub(crate) fn release(mut self) -> Result<()> {
        self.restore()
    }

    fn restore(&mut self) -> Result<()> {
        self.released = true;
        let r1 = set_regs(self.tid, &self.regs);
        let r2 = set_xstate(self.tid, &mut self.xstate);
        let r3 = ptrace(libc::PTRACE_DETACH, self.tid, 0, self.pending as u64)
            .map_err(|e| anyhow!("cannot detach from thread {}: errno {e}", self.tid));
        r1.and(r2).and(r3.map(|_| ()))
    }

    /// The injected call did not return in time: stop the thread where it waits (at once from a
    /// lock's wait; from an uninterruptible sleep, when it ends), so that the caller puts it back
    /// where it was (`restore`) and lets it go; what to say.
    fn abandon_call(&mut self) -> anyhow::Error {
        let _ = ptrace(libc::PTRACE_INTERRUPT, self.tid, 0, 0);
        loop {
            match wait(self.tid) {
                Err(e) => return e,
                Ok(st) if is_event_stop(st) => break,
                Ok(st) => {
                    // a signal of the program's on its way: held back for the release
                    self.pending = libc::WSTOPSIG(st);
                    let _ = ptrace(libc::PTRACE_CONT, self.tid, 0, 0);
                    let _ = ptrace(libc::PTRACE_INTERRUPT, self.tid, 0, 0);
                }
            }
        }
        anyhow!(
            "the call made in thread {} did not return within {} s (it waits, likely on a lock the \
             thread held where it was stopped); the thread was put back where it was and the \
             process runs on",
            self.tid,
            CALL_LIMIT.as_secs()
        )
    }

    /// Call `func(args…)` in the stopped thread and return its rax.
    pub(crate) fn call(&mut self, func: u64, args: &[u64]) -> Result<u64> {
        let mut r = self.regs;
        // Below the red zone, 16-byte aligned, then a return address of 0.
        let sp = ((self.regs.rsp - 1024) & !15) - 8;
        write_mem(self.tid, sp, &0u64.to_le_bytes())?;
        r.rsp = sp;
        r.rip = func;
        r.rax = 0;
        r.orig_rax = u64::MAX; // not in a syscall: the kernel must not "restart" our call
        let regs = [
            &mut r.rdi as *mut u64,
            &mut r.rsi,
            &mut r.rdx,
            &mut r.rcx,
            &mut r.r8,
            &mut r.r9,
        ];
        for (i, a) in args.iter().enumerate() {
            // SAFETY: the pointers are to fields of `r`, alive here.
            unsafe { *regs[i] = *a };
        }
        set_regs(self.tid, &r)?;
        let limit = Deadline::after(CALL_LIMIT)?;
        let mut sig = 0u64;
        loop {
            ptrace(libc::PTRACE_CONT, self.tid, 0, sig)
                .map_err(|e| anyhow!("ptrace cont: errno {e}"))?;
            let Some(st) = wait_until(self.tid, Some(&limit))? else {
                return Err(self.abandon_call());
            };
            sig = 0;
            if is_event_stop(st) {
                continue;
            }
            if (st >> 16) == libc::PTRACE_EVENT_CLONE {
                let mut msg: libc::c_ulong = 0;
                ptrace(
                    libc::PTRACE_GETEVENTMSG,
                    self.tid,
                    0,
                    &mut msg as *mut _ as u64,
                )
                .map_err(|e| anyhow!("ptrace geteventmsg: errno {e}"))?;
                self.clone_tid = Some(msg as i32);
                continue;
            }
            let s = libc::WSTOPSIG(st);
            if s == libc::SIGSEGV {
                let now = get_regs(self.tid)?;
                if now.rip == 0 {
                    return Ok(now.rax);
                }
                bail!("the injected call faulted at {:#x}", now.rip);
            }
            sig = s as u64; // the program's own signal: deliver it
        }
    }
}

pub(crate) fn write_mem(pid: i32, addr: u64, data: &[u8]) -> Result<()> {
    let local = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: reads only `data`.
    let n = unsafe { libc::process_vm_writev(pid, &local, 1, &remote, 1, 0) };
    if n != data.len() as isize {
        bail!(
            "cannot write the process's memory at {addr:#x}: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}

/// Read process memory; Err(errno) on failure (EFAULT: not mapped).
pub(crate) fn read_mem(pid: i32, addr: u64, buf: &mut [u8]) -> Result<usize, i32> {
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    let remote = libc::iovec {
        iov_base: addr as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: writes only into `buf`.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    if n < 0 {
        return Err(errno());
    }
    Ok(n as usize)
}

/// Addresses in the process that matter for the injection.
pub(crate) struct Plan {
    funcs: HashMap<String, u64>,
    /// Code a thread must not be stopped in (or return into).
    unsafe_spans: Vec<(u64, u64)>,
    /// The call frame information of its modules, to walk a stopped thread's calls.
    unwinder: Unwinder,
    /// The loader's `_r_debug` (its `r_state` says whether a dlopen or dlclose is under way).
    r_debug: Option<u64>,
}

fn file_name(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

pub(crate) fn plan(p: &Tracee) -> Result<Plan> {
    let modules = p.modules();
    let is_libc = |m: &str| {
        let f = file_name(m);
        f.starts_with("libc.so") || f.starts_with("libc-")
    };
    let Some(libc_path) = modules.iter().find(|m| is_libc(m)).cloned() else {
        bail!(
            "cannot attach to {}: it does not use glibc's libc.so.6 (musl, or a private loader); memlens attaches to glibc programs only",
            p.label()
        );
    };
    let mut wanted: Vec<&str> = LOADER_FUNCS.to_vec();
    wanted.extend(CALLED);
    wanted.extend(UNSAFE);
    let mut funcs = HashMap::new();
    let mut unsafe_spans = Vec::new();
    // libc first, then the others (older glibc keeps dlopen in libdl and pthread_* in libpthread).
    let mut order = vec![libc_path.clone()];
    order.extend(modules.iter().filter(|m| **m != libc_path).cloned());
    let interp = file_name(&p.interp).to_string();
    let exe = std::fs::read_link(format!("{}/exe", p.proc_dir))
        .ok()
        .map(|x| x.to_string_lossy().into_owned());
    for m in &order {
        if file_name(m) == interp || m.contains("memfd:") {
            continue;
        }
        let Ok(syms) = p.symbols(m, &wanted) else {
            continue;
        };
        if *m != libc_path && syms.contains_key("malloc") && exe.as_ref() == Some(m) {
            // the program with an allocator linked in: its locks are taken below its entry points,
            // which are then on the thread's call chain (the whole program would never be safe)
            for name in UNSAFE {
                if let Some(&(addr, size)) = syms.get(name) {
                    unsafe_spans.push((addr, addr + size.max(1)));
                }
            }
        } else if *m != libc_path && syms.contains_key("malloc") {
            // an allocator library: any point in it may hold its locks
            let path = m.clone();
            unsafe_spans.extend(p.code_of(|q| q == path));
        }
        if *m != libc_path {
            // an allocator linked in under a prefix (redis's je_*, Rust's tikv _rjem_*, mimalloc's
            // mi_*, tcmalloc's tc_*): not exported, and its locks are taken in those functions (a
            // remote pthread_create waited on one for ever)
            if let Ok(spans) = p.function_spans(m, linked_allocator_function) {
                unsafe_spans.extend(spans);
            }
        }
        for (name, (addr, size)) in syms {
            if *m == libc_path && UNSAFE.contains(&name.as_str()) {
                unsafe_spans.push((addr, addr + size.max(1)));
            }
            funcs.entry(name).or_insert(addr);
        }
    }
    for f in LOADER_FUNCS.iter().chain(CALLED.iter()) {
        if !funcs.contains_key(*f) {
            bail!(
                "cannot attach to {}: its libc has no {f} (glibc 2.27 or later is needed)",
                p.label()
            );
        }
    }
    unsafe_spans.extend(p.code_of(|q| file_name(q) == interp));
    let r_debug = modules
        .iter()
        .find(|m| file_name(m) == interp)
        .and_then(|m| {
            p.symbols(m, &["_r_debug"])
                .ok()?
                .get("_r_debug")
                .map(|s| s.0)
        });
    let mem = p.mem_pid();
    let unwinder = Unwinder::new(p, &|addr, buf| read_mem(mem, addr, buf).unwrap_or(0));
    Ok(Plan {
        funcs,
        unsafe_spans,
        unwinder,
        r_debug,
    })
}

/// A function of an allocator linked into a module, by its name's prefix.
fn linked_allocator_function(name: &str) -> bool {
    const PREFIXES: [&str; 6] = ["je_", "_rjem_", "mi_", "_mi_", "tc_", "_ZN8tcmalloc"];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

fn read_word(tid: i32, addr: u64) -> Option<u64> {
    let mut w = [0u8; 8];
    (read_mem(tid, addr, &mut w) == Ok(8)).then(|| u64::from_le_bytes(w))
}

/// Is the stopped thread somewhere pthread_create could deadlock from — inside the allocator or
/// the dynamic loader, which may hold the locks it takes? Decided from the functions the thread is
/// in: its instruction pointer and the return addresses of its call chain, walked with the modules'
/// CFI. Where the walk cannot go on, the rest of the top 16 KiB of its stack is scanned for return
/// addresses (words right after a call instruction) into that code, and a dlopen or dlclose under
/// way (the loader's `r_state`) counts as unsafe too.
pub(crate) fn in_unsafe_spot(s: &Stopped, plan: &Plan) -> bool {
    let hit = |v: u64| plan.unsafe_spans.iter().any(|&(lo, hi)| v >= lo && v < hi);
    if hit(s.regs.rip) {
        return true;
    }
    let read = |a: u64| read_word(s.tid, a);
    let chain = plan
        .unwinder
        .chain(s.regs.rip, s.regs.rsp, s.regs.rbp, &read);
    if chain.pcs.iter().any(|&pc| hit(pc)) {
        return true;
    }
    if chain.complete {
        return false;
    }
    // r_debug.r_state (after r_version and its padding, r_map and r_brk): 0 = RT_CONSISTENT
    if let Some(rd) = plan.r_debug {
        if read(rd + 24).is_none_or(|w| w as u32 != 0) {
            return true;
        }
    }
    let end = s.regs.rsp + 16 * 1024;
    let mut at = chain.sp.max(s.regs.rsp) & !7;
    while at < end {
        let Some(w) = read(at) else {
            break;
        };
        if hit(w) {
            let mut code = [0u8; 8];
            if read_mem(s.tid, w - 8, &mut code) == Ok(8) && after_call(&code) {
                return true;
            }
        }
        at += 8;
    }
    false
}

/// Live threads of `pid`, the main thread first.
pub(crate) fn tids(pid: i32) -> Vec<i32> {
    let live = |t: &i32| {
        std::fs::read_to_string(format!("/proc/{pid}/task/{t}/stat"))
            .map(|s| {
                let st = s.rsplit(')').next().unwrap_or("").trim_start();
                !st.starts_with('Z') && !st.starts_with('X')
            })
            .unwrap_or(false)
    };
    let mut v: Vec<i32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|rd| {
            rd.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .filter(live)
                .collect()
        })
        .unwrap_or_default();
    v.sort_by_key(|t| (*t != pid, *t));
    v
}

/// Block the signals that would kill us while a thread of the target runs with borrowed
/// registers: dying then would leave it to crash.
pub(crate) struct HoldSignals(libc::sigset_t);

impl HoldSignals {
    pub(crate) fn new() -> HoldSignals {
        // SAFETY: plain sigset manipulation on local values.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in [
                libc::SIGINT,
                libc::SIGTERM,
                libc::SIGHUP,
                libc::SIGQUIT,
                libc::SIGPIPE,
            ] {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            HoldSignals(old)
        }
    }
}

impl Drop for HoldSignals {
    fn drop(&mut self) {
        // SAFETY: restores the mask saved in new().
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

/// A thread's scheduling raised for as long as a thread of the target is stopped: each injected
/// call hands the CPU from memlens to the target thread and back, and on a saturated machine either
/// side waits for its turn behind the busy threads (a time slice or more per hand-off: tens of ms
/// were measured, still with nice -20 under EEVDF). Both memlens's thread and the stopped one run
/// SCHED_FIFO meanwhile (real-time: they preempt every ordinary thread at once), with
/// SCHED_RESET_ON_FORK so that the thread our pthread_create makes starts as an ordinary one; both
/// are put back as they were. Without the privilege (CAP_SYS_NICE, or RLIMIT_RTPRIO) the nice value
/// is raised instead where allowed, else nothing changes.
pub(crate) struct Boost {
    tid: i32,
    old_policy: Option<(i32, libc::sched_param)>,
    old_nice: Option<i32>,
}

/// A thread's nice value, or None.
fn nice_of(tid: i32) -> Option<i32> {
    // SAFETY: getpriority on one thread; errno tells a -1 nice value from an error.
    unsafe {
        *libc::__errno_location() = 0;
        let v = libc::getpriority(libc::PRIO_PROCESS, tid as libc::id_t);
        (*libc::__errno_location() == 0).then_some(v)
    }
}

fn set_nice(tid: i32, v: i32) -> bool {
    // SAFETY: setpriority on one thread.
    unsafe { libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, v) == 0 }
}

impl Boost {
    /// Raise thread `tid` (0: the caller).
    pub(crate) fn new(tid: i32) -> Boost {
        let mut b = Boost {
            tid,
            old_policy: None,
            old_nice: None,
        };
        // SAFETY: sched_* calls on one thread with parameters that live on our stack.
        unsafe {
            let policy = libc::sched_getscheduler(tid);
            let mut param: libc::sched_param = std::mem::zeroed();
            if policy >= 0 && libc::sched_getparam(tid, &mut param) == 0 {
                let fifo = libc::sched_param { sched_priority: 1 };
                if libc::sched_setscheduler(
                    tid,
                    libc::SCHED_FIFO | libc::SCHED_RESET_ON_FORK,
                    &fifo,
                ) == 0
                {
                    b.old_policy = Some((policy, param));
                    return b;
                }
            }
        }
        b.old_nice = nice_of(tid).filter(|_| set_nice(tid, -20));
        b
    }
}

impl Drop for Boost {
    fn drop(&mut self) {
        if let Some((policy, param)) = self.old_policy {
            // SAFETY: puts back the policy read in new() (sched_getscheduler's value carries
            // SCHED_RESET_ON_FORK when it was set).
            unsafe { libc::sched_setscheduler(self.tid, policy, &param) };
        }
        if let Some(old) = self.old_nice {
            set_nice(self.tid, old);
        }
    }
}

/// Load `lib` into the process and call its attach entry with `args`.
pub fn inject(p: &Tracee, lib: &[u8], args: &str) -> Result<Injected> {
    let plan = plan(p)?;
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut retries = 0;
    loop {
        for tid in tids(p.pid) {
            let _hold = HoldSignals::new();
            let _boost = Boost::new(0);
            let s = match stop(tid)? {
                Ok(s) => s,
                Err(libc::ESRCH) => continue, // the thread ended
                Err(e) => return Err(seize_denied(&p.label(), e)),
            };
            let target_boost = Boost::new(tid);
            if in_unsafe_spot(&s, &plan) {
                retries += 1;
                s.release()?;
                continue;
            }
            let since = s.since;
            let (page, loader, result) = load(s, p, &plan)?;
            let stopped = since.elapsed();
            // The loader thread (and the threads the runtime starts from it) must run as the
            // program's own do: SCHED_RESET_ON_FORK made it an ordinary thread of nice 0, or it
            // inherited the raised nice value.
            if let (Some(l), Some(old)) = (loader, nice_of(tid)) {
                let old = target_boost.old_nice.unwrap_or(old);
                set_nice(l, old);
            }
            drop(target_boost);
            drop(_boost);
            let mut loader = match (result, loader) {
                (Ok(()), Some(l)) => Loader::adopt(l, page)?,
                (Ok(()), None) => bail!(
                    "cannot attach to {}: the loader thread was not reported by the kernel",
                    p.label()
                ),
                (Err(e), l) => {
                    if let Some(l) = l {
                        Loader::adopt(l, page)?.abandon(p);
                    }
                    return Err(e);
                }
            };
            // Still holding our signals: a memlens killed now would leave the loader thread
            // waiting (it gives up by itself after 20 s).
            let r = hand_over(p, &mut loader, lib, args)
                .with_context(|| format!("cannot attach to {}", p.label()))
                .and_then(|()| wait_loaded(p, &mut loader));
            drop(_hold);
            if let Err(e) = r {
                loader.abandon(p);
                return Err(e);
            }
            loader.finish();
            return Ok(Injected {
                stopped,
                tid,
                retries,
            });
        }
        if Instant::now() > deadline {
            bail!(
                "cannot attach to {}: for 5 s every thread was inside the allocator or the dynamic loader when stopped; try again",
                p.label()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn check_ret(what: &str, v: u64) -> Result<u64> {
    if (-4095..0).contains(&(v as i64)) {
        bail!("{what} failed in the process");
    }
    Ok(v)
}

/// Work done while the thread is stopped: the work area and the loader thread. Always releases the
/// thread; returns the work area (0 if none), the loader thread (if one was made) and the outcome.
fn load(mut s: Stopped, p: &Tracee, plan: &Plan) -> Result<(u64, Option<i32>, Result<()>)> {
    let f = |n: &str| plan.funcs[n];
    let mut page = 0;
    let mut work = || -> Result<()> {
        page = check_ret(
            "mmap",
            s.call(
                f("mmap"),
                &[
                    0,
                    AREA,
                    (libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC) as u64,
                    (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS) as u64,
                    u64::MAX,
                    0,
                ],
            )?,
        )?;
        let mut data = vec![0u8; AREA as usize];
        let mut put = |off: u64, bytes: &[u8]| {
            data[off as usize..off as usize + bytes.len()].copy_from_slice(bytes);
        };
        for (i, name) in LOADER_FUNCS.iter().enumerate() {
            put(OFF_FUNCS + 8 * i as u64, &f(name).to_le_bytes());
        }
        put(OFF_LEN, &AREA.to_le_bytes());
        put(OFF_MEMFD_CREATE, &f("memfd_create").to_le_bytes());
        put(OFF_NANOSLEEP, &f("nanosleep").to_le_bytes());
        put(OFF_NAP + 8, &1_000_000u64.to_le_bytes());
        put(OFF_NAPS, &0u32.to_le_bytes());
        put(OFF_SYM, b"memlens_attach_entry\0");
        put(OFF_NAME, b"memlens\0");
        put(OFF_SIGSET, &u64::MAX.to_le_bytes());
        put(CODE, LOADER);
        write_mem(p.mem_pid(), page, &data)?;
        let rc = s
            .call(f("pthread_create"), &[page + OFF_TID, 0, page + CODE, page])
            .context("pthread_create")? as i32;
        if rc != 0 {
            bail!(
                "pthread_create failed in the process: {}",
                std::io::Error::from_raw_os_error(rc)
            );
        }
        Ok(())
    };
    let r = work();
    let loader = s.clone_tid;
    if r.is_err() && page != 0 && loader.is_none() {
        let _ = s.call(f("munmap"), &[page, AREA]); // best effort; the thread is still ours
    }
    s.release()?;
    Ok((
        page,
        loader,
        r.with_context(|| format!("cannot attach to {}", p.label())),
    ))
}

fn read_u32(pid: i32, addr: u64) -> Result<Option<u32>> {
    let mut w = [0u8; 4];
    match read_mem(pid, addr, &mut w) {
        Ok(4) => Ok(Some(u32::from_le_bytes(w))),
        Ok(_) | Err(libc::EFAULT) => Ok(None),
        Err(libc::ESRCH) => bail!("the process exited during attach"),
        Err(e) => bail!(
            "cannot read the attach status: {}",
            std::io::Error::from_raw_os_error(e)
        ),
    }
}

/// The loader thread, traced by memlens from its birth to its end: whatever stops the process
/// meanwhile (SIGSTOP, a terminal's Ctrl-Z), memlens keeps this one thread running, so an attach
/// never waits on a stopped process and, when it fails, the thread can always be made to leave
/// (closing its memfd and unmapping its page: nothing of the attach stays behind).
struct Loader {
    tid: i32,
    page: u64,
    gone: bool,
}

impl Loader {
    /// Take over the new thread: it starts stopped (traced from birth); it may create threads of
    /// its own (the runtime's), which must not be traced.
    fn adopt(tid: i32, page: u64) -> Result<Loader> {
        let mut l = Loader {
            tid,
            page,
            gone: false,
        };
        let st = wait(tid).context("the loader thread")?;
        let _ = st;
        ptrace(libc::PTRACE_SETOPTIONS, tid, 0, 0)
            .map_err(|e| anyhow!("ptrace setoptions on the loader thread: errno {e}"))?;
        ptrace(libc::PTRACE_CONT, tid, 0, 0)
            .map_err(|e| anyhow!("cannot start the loader thread: errno {e}"))?;
        l.pump();
        Ok(l)
    }

    /// Let it run through whatever stops it: a group stop is not ours to keep (the other threads
    /// stay stopped), a signal is passed on (the loader blocks every signal, so only the
    /// unblockable ones reach it). Notes its end.
    fn pump(&mut self) {
        while !self.gone {
            let mut st = 0;
            // SAFETY: waitpid writes the status into `st`.
            let r = unsafe { libc::waitpid(self.tid, &mut st, libc::WNOHANG | libc::__WALL) };
            if r == 0 {
                return;
            }
            if r < 0 {
                if errno() == libc::EINTR {
                    continue;
                }
                self.gone = true; // ECHILD: not ours any more
                return;
            }
            if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
                self.gone = true;
                return;
            }
            let sig = if is_event_stop(st) || (st >> 16) != 0 {
                0
            } else {
                libc::WSTOPSIG(st) as u64
            };
            let _ = ptrace(libc::PTRACE_CONT, self.tid, 0, sig);
        }
    }

    fn read_status(&mut self, p: &Tracee) -> Result<Option<u32>> {
        self.pump();
        read_u32(p.mem_pid(), self.page + OFF_STATUS)
    }

    /// The attach is done: the loader unmaps its page and ends; see it gone (a traced thread that
    /// ended lingers until its tracer has seen it).
    fn finish(mut self) {
        let t0 = Instant::now();
        while !self.gone && t0.elapsed() < Duration::from_secs(2) {
            self.pump();
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// The attach failed: tell the loader to give up (or acknowledge its failure) and keep it
    /// running until it has closed its memfd, unmapped its page and ended.
    fn abandon(mut self, p: &Tracee) {
        let _ = write_mem(p.mem_pid(), self.page + OFF_GO, &2u32.to_le_bytes());
        let t0 = Instant::now();
        while !self.gone && t0.elapsed() < Duration::from_secs(10) {
            self.pump();
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        if self.gone {
            return;
        }
        // Let it go untraced; it finishes (or gives up) on its own. A tracee is detached from a
        // stop only.
        if ptrace(libc::PTRACE_INTERRUPT, self.tid, 0, 0).is_ok() {
            let mut st = 0;
            // SAFETY: waitpid writes the status into `st`.
            let r = unsafe { libc::waitpid(self.tid, &mut st, libc::__WALL) };
            if r == self.tid && libc::WIFSTOPPED(st) {
                let _ = ptrace(libc::PTRACE_DETACH, self.tid, 0, 0);
            }
        }
    }
}

/// The loader thread has made its memfd: fill it with the runtime, then let the thread load it.
fn hand_over(p: &Tracee, loader: &mut Loader, lib: &[u8], args: &str) -> Result<()> {
    let page = loader.page;
    let t0 = Instant::now();
    while loader.read_status(p)? != Some(5) {
        if loader.gone {
            bail!("the loader thread ended before it was ready");
        }
        if t0.elapsed() > Duration::from_secs(20) {
            bail!("the loader thread did not start within 20 s");
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let fd = read_u32(p.mem_pid(), page + OFF_FD)?.unwrap_or(u32::MAX) as i32;
    if fd < 0 {
        bail!("memfd_create failed in the process");
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(format!("{}/fd/{fd}", p.proc_dir))
        .context("cannot open the memfd created in the process")?;
    file.write_all(lib)
        .context("cannot write the runtime into the process's memfd")?;
    // thread-self: /proc/self is the leader, whose fd table is gone once main() has called
    // pthread_exit.
    let path = format!("/proc/thread-self/fd/{fd}\0");
    let args = format!("fd={fd} {args}\0");
    if args.len() > (OFF_MSG - OFF_ARGS) as usize {
        bail!("attach arguments too long");
    }
    write_mem(p.mem_pid(), page + OFF_PATH, path.as_bytes())?;
    write_mem(p.mem_pid(), page + OFF_ARGS, args.as_bytes())?;
    write_mem(p.mem_pid(), page + OFF_GO, &1u32.to_le_bytes())
}

/// Wait for the loader thread's verdict, then acknowledge it (the loader unmaps its page only
/// then, so the status read here was never that of memory the program reused).
fn wait_loaded(p: &Tracee, loader: &mut Loader) -> Result<()> {
    let page = loader.page;
    let t0 = Instant::now();
    loop {
        let Some(status) = loader.read_status(p)? else {
            bail!(
                "cannot attach to {}: the loader thread's work area vanished",
                p.label()
            );
        };
        if status == 1 {
            write_mem(p.mem_pid(), page + OFF_GO, &3u32.to_le_bytes())?;
            return Ok(());
        }
        if status > 1 && status != 5 {
            let mut msg = vec![0u8; 512];
            let n = read_mem(p.mem_pid(), page + OFF_MSG, &mut msg).unwrap_or(0);
            let end = msg[..n].iter().position(|&b| b == 0).unwrap_or(n);
            let text = String::from_utf8_lossy(&msg[..end]).into_owned();
            let what = match status {
                2 => "loading the runtime failed",
                3 => "the runtime has no attach entry",
                6 => "the loader thread gave up",
                _ => "the runtime refused",
            };
            bail!("cannot attach to {}: {what}: {text}", p.label());
        }
        if loader.gone {
            bail!(
                "cannot attach to {}: the loader thread ended without a verdict",
                p.label()
            );
        }
        if t0.elapsed() > Duration::from_secs(20) {
            bail!(
                "cannot attach to {}: the loader thread did not finish within 20 s (the dynamic loader may be busy); see memlens ctl {} status",
                p.label(),
                p.pid
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A wait on a thread that never stops (here a child that sleeps) ends at its limit: an
    /// injected call that never returns cannot hang memlens attach.
    #[test]
    fn a_wait_ends_at_its_limit() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        let limit = Deadline::after(Duration::from_millis(300)).unwrap();
        let r = wait_until(child.id() as i32, Some(&limit));
        let waited = t0.elapsed();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(r.unwrap().is_none(), "the child should still be running");
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
    }

    /// LOADER must be loader.S assembled (when the assembler is installed).
    #[test]
    fn loader_bytes_match_the_source() {
        let dir = std::env::temp_dir().join(format!("memlens-loader-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = concat!(env!("CARGO_MANIFEST_DIR"), "/src/loader.S");
        let obj = dir.join("l.o");
        let bin = dir.join("l.bin");
        let ok = std::process::Command::new("as")
            .args(["--64", src, "-o"])
            .arg(&obj)
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
            && std::process::Command::new("objcopy")
                .args(["-O", "binary", "-j", ".text"])
                .arg(&obj)
                .arg(&bin)
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
        assert!(ok, "as/objcopy (binutils) are needed to check loader.S");
        assert_eq!(std::fs::read(&bin).unwrap(), LOADER);
        std::fs::remove_dir_all(&dir).ok();
    }
}
