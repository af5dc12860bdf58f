//! Entry hooks on allocators linked into the program, written with every thread stopped.
//!
//! The runtime, once loaded, finds the allocators by their symbols and plans their hooks (a jump at
//! each entry point to a stub and trampoline it built near the module: runtime/src/intercept/
//! finder.c, patch.c), but it cannot write a jump over code another thread may be running. It
//! leaves the jumps in its exported table `memlens_pending`; here every thread of the process is
//! stopped (ptrace), none may be stopped inside the bytes a jump replaces (else all are let go and
//! stopped again a moment later), the bytes there must still be what the runtime saw, and the
//! jumps are written through /proc/PID/mem — free-side entry points first, so a block the runtime
//! hands out never meets an unhooked free. Then every thread goes on.
use crate::inject::{ptrace, read_mem, tids, wait, Boost};
use crate::tracee::{read_maps, Tracee};
use anyhow::{anyhow, bail, Context, Result};
use memlens_target::is_runtime_path;
use object::{Object, ObjectSymbol};
use std::os::unix::fs::FileExt;
use std::time::{Duration, Instant};

/// `struct ml_pending` of runtime/src/intercept/finder.c: keep the two in step.
const MAGIC: u64 = 0x6d6c_686f_6f6b_7331;
const HEADER: usize = 16;
const SUMMARY: usize = 1024;
const ENTRY: usize = 48;
const PATCH_MAX: usize = 16;
const MAX_ENTRIES: usize = 512;

/// One jump to write.
#[derive(Debug, Clone)]
struct Patch {
    site: u64,
    code: Vec<u8>,
    old: Vec<u8>,
    counts: bool,
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
}

/// The address of the runtime's `memlens_pending` in the process.
fn pending_addr(p: &Tracee, lib: &[u8]) -> Result<u64> {
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
        .find(|s| s.name() == Ok("memlens_pending"))
        .ok_or_else(|| anyhow!("the runtime exports no memlens_pending"))?;
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
            }
        })
        .collect();
    Ok((state, summary, patches))
}

/// A thread we stopped, and the signal to hand back when we let it go.
struct Held {
    tid: i32,
    rip: u64,
    pending: i32,
}

fn seize(tid: i32) -> Result<Option<Held>> {
    if ptrace(libc::PTRACE_SEIZE, tid, 0, 0).is_err() {
        return Ok(None); // exited meanwhile
    }
    if ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0).is_err() {
        let _ = ptrace(libc::PTRACE_DETACH, tid, 0, 0);
        return Ok(None);
    }
    let mut pending = 0;
    loop {
        let st = wait(tid)?;
        if (st >> 16) == libc::PTRACE_EVENT_STOP {
            break;
        }
        pending = libc::WSTOPSIG(st);
        ptrace(libc::PTRACE_CONT, tid, 0, 0).map_err(|e| anyhow!("ptrace cont: errno {e}"))?;
        let _ = ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0);
    }
    // SAFETY: user_regs_struct is plain data; PTRACE_GETREGS fills it.
    let mut r: libc::user_regs_struct = unsafe { std::mem::zeroed() };
    ptrace(libc::PTRACE_GETREGS, tid, 0, &mut r as *mut _ as u64)
        .map_err(|e| anyhow!("cannot read thread {tid}'s registers: errno {e}"))?;
    Ok(Some(Held {
        tid,
        rip: r.rip,
        pending,
    }))
}

/// Every thread of the process, stopped (threads born meanwhile too). Let go when dropped. On a
/// saturated machine a thread asked to stop waits for a CPU before it does, while those already
/// stopped wait for it: memlens and each thread run SCHED_FIFO meanwhile where memlens may (root,
/// CAP_SYS_NICE), as for the injection (inject.rs), and are put back after.
struct World {
    held: Vec<Held>,
    boosts: Vec<Boost>,
    _me: Boost,
}

impl World {
    fn stop(pid: i32) -> Result<World> {
        let mut w = World {
            held: Vec::new(),
            boosts: Vec::new(),
            _me: Boost::new(0),
        };
        loop {
            let new: Vec<i32> = tids(pid)
                .into_iter()
                .filter(|t| !w.held.iter().any(|h| h.tid == *t))
                .collect();
            if new.is_empty() {
                return Ok(w);
            }
            for t in new {
                w.boosts.push(Boost::new(t));
                if let Some(h) = seize(t)? {
                    w.held.push(h);
                }
            }
        }
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
}

impl Drop for World {
    fn drop(&mut self) {
        for h in &self.held {
            let _ = ptrace(libc::PTRACE_DETACH, h.tid, 0, h.pending as u64);
        }
        self.boosts.clear(); // after the threads go: each is put back as it was
    }
}

/// Write every jump (guards first), after checking each site still holds what the runtime saw.
fn write_all(p: &Tracee, ps: &[Patch]) -> Result<()> {
    let pid = p.mem_pid();
    for q in ps {
        if read_exact(pid, q.site, q.old.len())? != q.old {
            bail!(
                "the code at {:#x} changed since the runtime read it (a debugger's breakpoint?)",
                q.site
            );
        }
    }
    let mem = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(format!("{}/mem", p.proc_dir))
        .with_context(|| format!("cannot open the memory of {}", p.label()))?;
    for pass in [false, true] {
        for q in ps.iter().filter(|q| q.counts == pass) {
            mem.write_all_at(&q.code, q.site).with_context(|| {
                format!("cannot write the hook at {:#x} of {}", q.site, p.label())
            })?;
        }
    }
    Ok(())
}

/// Write the hooks the runtime planned, if any. Called right after the runtime came in.
pub fn apply_pending(p: &Tracee, lib: &[u8]) -> Result<Option<Hooked>> {
    let at = pending_addr(p, lib)?;
    let pid = p.mem_pid();
    let (state, summary, ps) = read_pending(pid, at)?;
    if state != 1 || ps.is_empty() {
        return Ok((!summary.is_empty()).then_some(Hooked {
            summary,
            hooks: 0,
            stopped: Duration::ZERO,
            retries: 0,
        }));
    }
    let mut retries = 0;
    loop {
        let t0 = Instant::now();
        let world = World::stop(p.pid)?;
        if let Some((tid, rip)) = world.inside(&ps) {
            drop(world);
            retries += 1;
            if retries == 200 {
                bail!("thread {tid} of {} stays at {rip:#x}, inside an allocator entry point being hooked", p.label());
            }
            std::thread::sleep(Duration::from_micros(500));
            continue;
        }
        write_all(p, &ps)?;
        let done = 2u32.to_le_bytes();
        crate::inject::write_mem(pid, at + 12, &done)?;
        drop(world);
        return Ok(Some(Hooked {
            summary,
            hooks: ps.len(),
            stopped: t0.elapsed(),
            retries,
        }));
    }
}
