//! Entry hooks on allocators linked into the program, written with every thread stopped.
//!
//! The runtime, once loaded, finds the allocators by their symbols and plans their hooks (a jump at
//! each entry point to a stub and trampoline it built near the module: runtime/src/intercept/
//! finder.c, patch.c), but it cannot write a jump over code another thread may be running. It
//! leaves the jumps in its exported table `memlens_pending`; here every thread of the process is
//! stopped (ptrace), none may be stopped inside the bytes a jump replaces (else all are let go and
//! stopped again a moment later), the bytes there must still be what the runtime saw, and the
//! jumps are written through /proc/PID/mem — free-side entry points first, so a block the runtime
//! hands out never meets an unhooked free. Then every thread goes on. Everything that can be done
//! before the stop is: the table read, the bytes checked once, /proc/PID/mem opened, the threads
//! listed and raised; the stop itself interrupts every thread at once, then waits for each.
//!
//! `memlens detach` puts the original bytes back the same way (`restore`), once sampling is off:
//! the entry points that only allocate always, those that take a pointer (free, realloc, usable
//! size) only when no sampled block is live and no hook is taking a sample — read in the runtime's
//! `memlens_hooks_quiet` with every thread stopped — since such a block must never reach the
//! allocator. Whatever stays keeps forwarding through its hook, sampling off.
//!
//! One more jump goes in and out with them: the one over the loader's `_dl_debug_state` that has
//! libraries loaded later (dlopen) scanned for allocators linked into them and hooked before their
//! code runs (runtime/src/intercept/loadwatch.c, its exported table `memlens_loadwatch`). It is not
//! an entry point of an allocator (no block reaches it): a detach always puts it back.
use crate::inject::{ptrace, read_mem, tids, wait, Boost};
use crate::tracee::{read_maps, Tracee};
use anyhow::{anyhow, bail, Context, Result};
use memlens_target::is_runtime_path;
use object::{Object, ObjectSymbol};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// `struct ml_pending` of runtime/src/intercept/finder.c: keep the two in step.
const MAGIC: u64 = 0x6d6c_686f_6f6b_7332;
/// Its state: the jumps are planned (1), written (2), or some were put back by a detach (3); which
/// jumps are to write, or to put back, is read in the sites' bytes.
const WRITTEN: u32 = 2;
const RESTORED: u32 = 3;
/// `struct ml_hooks_quiet` of runtime/src/intercept/hooks.c.
const QUIET_MAGIC: u64 = 0x6d6c_7175_6965_7431;
const HEADER: usize = 16;
const SUMMARY: usize = 1024;
const ENTRY: usize = 48;
const PATCH_MAX: usize = 16;
const MAX_ENTRIES: usize = 512;
/// `struct ml_loadwatch` of runtime/src/intercept/loadwatch.c: keep the two in step.
const WATCH_MAGIC: u64 = 0x6d6c_6c64_7761_7431;
const WATCH_CODE: usize = 17;
const WATCH_WHY: usize = 56;
const WATCH_SIZE: usize = WATCH_WHY + 256;

/// One jump to write.
#[derive(Debug, Clone)]
struct Patch {
    site: u64,
    code: Vec<u8>,
    old: Vec<u8>,
    counts: bool,
    /// It takes a pointer (free, realloc, usable size): a sampled block may reach it.
    pointer: bool,
    /// The jump at the loader's notification (loadwatch.c), not an allocator's entry point.
    loader: bool,
}

/// What writing the hooks did.
#[derive(Debug)]
pub struct Hooked {
    /// The runtime's account of what it found (one or more sentences), empty if nothing.
    pub summary: String,
    /// Entry points hooked.
    pub hooks: usize,
    /// How long every thread was stopped (the last, successful round).
    pub stopped: Duration,
    /// Rounds that found a thread inside a site and let everything go again.
    pub retries: u32,
    /// The loader's notification was hooked now: libraries loaded from now on are scanned.
    pub watching: bool,
}

/// The address of the runtime's exported `name` in the process.
fn runtime_symbol(p: &Tracee, lib: &[u8], name: &str) -> Result<u64> {
    let maps = read_maps(&p.proc_dir)?;
    let base = maps
        .iter()
        .filter(|m| is_runtime_path(&m.path) && m.offset == 0)
        .map(|m| m.lo)
        .min()
        .ok_or_else(|| anyhow!("the runtime is not mapped in {}", p.label()))?;
    let file = object::File::parse(lib).context("the runtime is not an ELF file")?;
    let sym = file
        .dynamic_symbols()
        .find(|s| s.name() == Ok(name))
        .ok_or_else(|| anyhow!("the runtime exports no {name}"))?;
    Ok(base + sym.address())
}

fn read_exact(pid: i32, addr: u64, len: usize) -> Result<Vec<u8>> {
    let mut buf = vec![0u8; len];
    match read_mem(pid, addr, &mut buf) {
        Ok(n) if n == len => Ok(buf),
        Ok(n) => bail!("short read of the process's memory at {addr:#x} ({n} of {len} bytes)"),
        Err(e) => bail!("cannot read the process's memory at {addr:#x}: errno {e}"),
    }
}

fn u64_at(b: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(b[o..o + 8].try_into().unwrap())
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    u32::from_le_bytes(b[o..o + 4].try_into().unwrap())
}

/// The table: (state, summary, patches).
fn read_pending(pid: i32, at: u64) -> Result<(u32, String, Vec<Patch>)> {
    let head = read_exact(pid, at, HEADER + SUMMARY)?;
    if u64_at(&head, 0) != MAGIC {
        bail!("the runtime's memlens_pending has another layout than this memlens expects");
    }
    let count = (u32_at(&head, 8) as usize).min(MAX_ENTRIES);
    let state = u32_at(&head, 12);
    let text = &head[HEADER..];
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    let summary = String::from_utf8_lossy(&text[..end]).into_owned();
    let raw = read_exact(pid, at + (HEADER + SUMMARY) as u64, count * ENTRY)?;
    let patches = raw
        .chunks(ENTRY)
        .map(|e| {
            let len = (e[8] as usize).min(PATCH_MAX);
            Patch {
                site: u64_at(e, 0),
                code: e[9..9 + len].to_vec(),
                old: e[9 + PATCH_MAX..9 + PATCH_MAX + len].to_vec(),
                counts: e[9 + 2 * PATCH_MAX] != 0,
                pointer: e[10 + 2 * PATCH_MAX] != 0,
                loader: false,
            }
        })
        .collect();
    Ok((state, summary, patches))
}

/// The jump at the loader's notification the runtime planned (`memlens_loadwatch`), or None and
/// why the runtime could not plan it ("" when it did not try: a runtime of another memlens).
fn read_loadwatch(p: &Tracee, lib: &[u8]) -> Result<(Option<Patch>, String)> {
    let Ok(at) = runtime_symbol(p, lib, "memlens_loadwatch") else {
        return Ok((None, String::new()));
    };
    let b = read_exact(p.mem_pid(), at, WATCH_SIZE)?;
    if u64_at(&b, 0) != WATCH_MAGIC {
        bail!("the runtime's memlens_loadwatch has another layout than this memlens expects");
    }
    let text = &b[WATCH_WHY..];
    let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
    let why = String::from_utf8_lossy(&text[..end]).into_owned();
    let site = u64_at(&b, 8);
    if site == 0 {
        return Ok((None, why));
    }
    let len = (b[16] as usize).min(PATCH_MAX);
    let watch = Patch {
        site,
        code: b[WATCH_CODE..WATCH_CODE + len].to_vec(),
        old: b[WATCH_CODE + PATCH_MAX..WATCH_CODE + PATCH_MAX + len].to_vec(),
        counts: false,
        pointer: false,
        loader: true,
    };
    Ok((Some(watch), why))
}

/// The runtime's jumps, the allocators' and the loader's: (state of memlens_pending, the summary
/// of what it found, every jump it planned).
fn planned(p: &Tracee, lib: &[u8]) -> Result<(u32, String, Vec<Patch>)> {
    let at = runtime_symbol(p, lib, "memlens_pending")?;
    let (state, mut summary, mut all) = read_pending(p.mem_pid(), at)?;
    let (watch, why) = read_loadwatch(p, lib)?;
    all.extend(watch);
    if !why.is_empty() {
        if !summary.is_empty() {
            summary.push('\n');
        }
        summary += &format!(
            "libraries loaded later (dlopen) are not scanned for allocators linked into them: {why}"
        );
    }
    Ok((state, summary, all))
}

/// A thread we stopped, and the signal to hand back when we let it go.
struct Held {
    tid: i32,
    rip: u64,
    pending: i32,
}

/// Ask thread `tid` to stop, without waiting for it; false if it exited meanwhile.
fn interrupt(tid: i32) -> bool {
    if ptrace(libc::PTRACE_SEIZE, tid, 0, 0).is_err() {
        return false;
    }
    if ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0).is_err() {
        let _ = ptrace(libc::PTRACE_DETACH, tid, 0, 0);
        return false;
    }
    true
}

/// Wait until an interrupted thread is in its stop, and read its pc (a signal that arrives first
/// is kept for the detach).
fn settle(h: &mut Held) -> Result<()> {
    let tid = h.tid;
    loop {
        let st = wait(tid)?;
        if (st >> 16) == libc::PTRACE_EVENT_STOP {
            break;
        }
        h.pending = libc::WSTOPSIG(st);
        ptrace(libc::PTRACE_CONT, tid, 0, 0).map_err(|e| anyhow!("ptrace cont: errno {e}"))?;
        let _ = ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0);
    }
    // SAFETY: user_regs_struct is plain data; PTRACE_GETREGS fills it.
    let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    ptrace(libc::PTRACE_GETREGS, tid, 0, &mut r as *mut _ as u64)
        .map_err(|e| anyhow!("cannot read thread {tid}'s registers: errno {e}"))?;
    h.rip = r.rip;
    Ok(())
}

/// Every thread of the process, stopped (threads born meanwhile too). Let go when dropped. On a
/// saturated machine a thread asked to stop waits for a CPU before it does, while those already
/// stopped wait for it: memlens and each thread run SCHED_FIFO meanwhile where memlens may (root,
/// CAP_SYS_NICE), as for the injection (inject.rs). memlens is raised first; each thread is
/// raised only once interrupted, and put back while still stopped, so no code of the program ever
/// runs SCHED_FIFO. (Raising busy threads before interrupting them, and memlens last, starved
/// memlens on 2 cores: real-time threads that never sleep leave ordinary ones 5 % of the CPU, and a
/// stop took 1–37 s while the program ran at real-time priority.) All are interrupted at once and
/// waited for, so the stop lasts as long as the slowest thread takes to stop, not the sum.
struct World {
    held: Vec<Held>,
    boosts: Vec<Boost>,
    _me: Boost,
    /// When the first thread was interrupted.
    since: Instant,
}

impl World {
    fn stop(pid: i32) -> Result<World> {
        let me = Boost::new(0);
        let mut todo = tids(pid);
        let mut w = World {
            held: Vec::new(),
            boosts: Vec::new(),
            _me: me,
            since: Instant::now(),
        };
        while !todo.is_empty() {
            let from = w.held.len();
            for t in todo.iter().filter(|t| interrupt(**t)) {
                w.held.push(Held {
                    tid: *t,
                    rip: 0,
                    pending: 0,
                });
                w.boosts.push(Boost::new(*t)); // interrupted: it runs no code of its own now
            }
            for h in &mut w.held[from..] {
                settle(h)?;
            }
            todo = tids(pid)
                .into_iter()
                .filter(|t| !w.held.iter().any(|h| h.tid == *t))
                .collect();
        }
        Ok(w)
    }

    /// A thread whose pc lies in the bytes one of `ps` replaces.
    fn inside(&self, ps: &[Patch]) -> Option<(i32, u64)> {
        self.held
            .iter()
            .find(|h| {
                ps.iter()
                    .any(|p| h.rip >= p.site && h.rip < p.site + p.code.len() as u64)
            })
            .map(|h| (h.tid, h.rip))
    }

    /// Let every thread go, each put back to its scheduling policy first; how long the first was
    /// held, up to the last one's release. (memlens's own policy is put back after: once it is an
    /// ordinary task again, a loaded machine may keep it waiting for a CPU for milliseconds, while
    /// no thread is held.)
    fn release(mut self) -> Duration {
        self.boosts.clear();
        for h in self.held.drain(..) {
            let _ = ptrace(libc::PTRACE_DETACH, h.tid, 0, h.pending as u64);
        }
        self.since.elapsed()
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.boosts.clear(); // while they are still stopped: each is put back as it was
        for h in &self.held {
            let _ = ptrace(libc::PTRACE_DETACH, h.tid, 0, h.pending as u64);
        }
    }
}

/// The bytes at every site, read in one call, in the order of `ps`.
fn read_sites(pid: i32, ps: &[Patch]) -> Result<Vec<Vec<u8>>> {
    let mut bufs: Vec<Vec<u8>> = ps.iter().map(|q| vec![0u8; q.old.len()]).collect();
    let local: Vec<libc::iovec> = bufs
        .iter_mut()
        .map(|b| libc::iovec {
            iov_base: b.as_mut_ptr() as *mut libc::c_void,
            iov_len: b.len(),
        })
        .collect();
    let remote: Vec<libc::iovec> = ps
        .iter()
        .map(|q| libc::iovec {
            iov_base: q.site as *mut libc::c_void,
            iov_len: q.old.len(),
        })
        .collect();
    for (l, r) in local.chunks(512).zip(remote.chunks(512)) {
        let want: usize = l.iter().map(|v| v.iov_len).sum();
        // SAFETY: each local iovec points into a live buffer of its length.
        let n = unsafe {
            libc::process_vm_readv(pid, l.as_ptr(), l.len() as _, r.as_ptr(), r.len() as _, 0)
        };
        if n != want as isize {
            bail!(
                "cannot read the process's code at its hooked entry points: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    Ok(bufs)
}

/// Check every site holds what `expect` gives for it.
fn check_sites(pid: i32, ps: &[Patch], expect: impl Fn(&Patch) -> &[u8]) -> Result<()> {
    for (q, now) in ps.iter().zip(read_sites(pid, ps)?) {
        if now != expect(q) {
            bail!(
                "the code at {:#x} changed since the runtime read it (a debugger's breakpoint?)",
                q.site
            );
        }
    }
    Ok(())
}

fn open_mem(p: &Tracee) -> Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("{}/mem", p.proc_dir))
        .with_context(|| format!("cannot open the memory of {}", p.label()))
}

/// Write `bytes(q)` at each site of `ps`, those `first` picks before the others.
fn write_sites(
    p: &Tracee,
    mem: &std::fs::File,
    ps: &[Patch],
    first: impl Fn(&Patch) -> bool,
    bytes: impl Fn(&Patch) -> &[u8],
) -> Result<()> {
    for pass in [true, false] {
        for q in ps.iter().filter(|q| first(q) == pass) {
            mem.write_all_at(bytes(q), q.site).with_context(|| {
                format!(
                    "cannot write the entry point at {:#x} of {}",
                    q.site,
                    p.label()
                )
            })?;
        }
    }
    Ok(())
}

/// Stop every thread until none is inside the bytes of `ps` (letting all go and trying again a
/// moment later, up to `tries` rounds); None if one stayed there.
fn stop_outside(p: &Tracee, ps: &[Patch], tries: u32) -> Result<(Option<World>, u32)> {
    let mut retries = 0;
    loop {
        let world = World::stop(p.pid)?;
        if world.inside(ps).is_none() {
            return Ok((Some(world), retries));
        }
        drop(world);
        retries += 1;
        if retries == tries {
            return Ok((None, retries));
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// Write the hooks the runtime planned, if any, and the jump at the loader's notification.
/// Called right after the runtime came in, and on a re-attach through the control socket after a
/// detach put entry points back.
pub fn apply_pending(p: &Tracee, lib: &[u8]) -> Result<Option<Hooked>> {
    let at = runtime_symbol(p, lib, "memlens_pending")?;
    let pid = p.mem_pid();
    let (state, summary, all) = planned(p, lib)?;
    // Only the jumps not written (after a detach: those it put back; after a dlopen while
    // detached, or between the runtime's plan and this write: a library's, planned since).
    let now = read_sites(pid, &all)?;
    let ps: Vec<Patch> = all
        .into_iter()
        .zip(now)
        .filter(|(q, b)| *b != q.code)
        .map(|(q, _)| q)
        .collect();
    let hooks = ps.iter().filter(|q| !q.loader).count();
    let summary = if state == RESTORED {
        String::new()
    } else {
        summary
    };
    if ps.is_empty() {
        return Ok((!summary.is_empty()).then_some(Hooked {
            summary,
            hooks: 0,
            stopped: Duration::ZERO,
            retries: 0,
            watching: false,
        }));
    }
    check_sites(pid, &ps, |q| &q.old)?;
    let mem = open_mem(p)?;
    let (world, retries) = stop_outside(p, &ps, 200)?;
    let Some(world) = world else {
        bail!(
            "a thread of {} stays inside an allocator entry point being hooked",
            p.label()
        );
    };
    check_sites(pid, &ps, |q| &q.old)?;
    write_sites(p, &mem, &ps, |q| !q.counts, |q| &q.code)?;
    if hooks > 0 {
        crate::inject::write_mem(pid, at + 12, &WRITTEN.to_le_bytes())?;
    }
    let stopped = world.release();
    Ok(Some(Hooked {
        summary,
        hooks,
        stopped,
        retries,
        watching: ps.iter().any(|q| q.loader),
    }))
}

/// What a detach did to the entry points.
#[derive(Debug, Default)]
pub struct Restored {
    /// Entry points given their original bytes back.
    pub restored: usize,
    /// Entry points whose hook stays (forwarding, sampling off), and why.
    pub kept: usize,
    pub why_kept: Option<String>,
    /// The jump at the loader's notification was put back (libraries loaded from now on are not
    /// scanned), or stays (a thread stayed inside a patched range).
    pub unwatched: bool,
    pub still_watching: bool,
    /// How long every thread was stopped.
    pub stopped: Duration,
}

/// The runtime's `memlens_hooks_quiet`: (hooks taking a sample now, live bytes of sampled blocks).
fn read_quiet(pid: i32, at: u64) -> Result<(i64, i64)> {
    let b = read_exact(pid, at, 24)?;
    if u64_at(&b, 0) != QUIET_MAGIC {
        bail!("the runtime's memlens_hooks_quiet has another layout than this memlens expects");
    }
    let inflight = u64_at(&b, 8) as i64;
    let live_at = u64_at(&b, 16);
    if live_at == 0 {
        return Ok((inflight, i64::MAX));
    }
    Ok((inflight, u64_at(&read_exact(pid, live_at, 8)?, 0) as i64))
}

/// Put the original bytes back at the hooked entry points, sampling being off (the runtime's
/// `detach` answered): the allocating ones always, those that take a pointer when no sampled
/// block is live and no hook is taking a sample. With every thread stopped and none inside a
/// patched range; if one stays inside, every jump stays.
pub fn restore(p: &Tracee, lib: &[u8]) -> Result<Restored> {
    let at = runtime_symbol(p, lib, "memlens_pending")?;
    let quiet_at = runtime_symbol(p, lib, "memlens_hooks_quiet")?;
    let pid = p.mem_pid();
    let (_, _, all) = planned(p, lib)?;
    // The sites that still hold our jump (those planned and never written do not).
    let now = read_sites(pid, &all)?;
    let ps: Vec<Patch> = all
        .into_iter()
        .zip(now)
        .filter(|(q, b)| *b == q.code)
        .map(|(q, _)| q)
        .collect();
    if ps.is_empty() {
        return Ok(Restored::default());
    }
    let mem = open_mem(p)?;
    let (world, _) = stop_outside(p, &ps, 20)?;
    let watching = ps.iter().any(|q| q.loader);
    let Some(world) = world else {
        return Ok(Restored {
            kept: ps.iter().filter(|q| !q.loader).count(),
            why_kept: Some("a thread stayed inside one of them".into()),
            still_watching: watching,
            ..Restored::default()
        });
    };
    let (inflight, live) = read_quiet(pid, quiet_at)?;
    let all_safe = inflight == 0 && live == 0;
    let back: Vec<Patch> = ps
        .iter()
        .filter(|q| all_safe || !q.pointer)
        .cloned()
        .collect();
    check_sites(pid, &back, |q| &q.code)?;
    // Allocating entry points first: a block handed out meanwhile still meets a hooked free.
    write_sites(p, &mem, &back, |q| !q.pointer, |q| &q.old)?;
    crate::inject::write_mem(pid, at + 12, &RESTORED.to_le_bytes())?;
    let stopped = world.release();
    let kept = ps.len() - back.len();
    Ok(Restored {
        restored: back.iter().filter(|q| !q.loader).count(),
        unwatched: watching,
        still_watching: false,
        kept,
        why_kept: (kept > 0).then(|| {
            if live != 0 {
                format!(
                    "blocks sampled earlier are still live ({} bytes) and must come back to memlens",
                    live
                )
            } else {
                "a hook was taking a sample".to_string()
            }
        }),
        stopped,
    })
}
