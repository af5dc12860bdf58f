//! The tracee: the process `memlens attach` is about to ptrace, what we need to know about it
//! before touching it (maps, program, loader, symbols), and the refusals: a process we may not or
//! cannot attach to is turned away here, before it is stopped even for a moment.
use anyhow::{anyhow, bail, Context, Result};
use memlens_target::{is_runtime_path, ProcStatus};
use object::read::elf::ProgramHeader;
use object::{Object, ObjectSymbol};
use std::collections::HashMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// One line of /proc/PID/maps.
#[derive(Debug, Clone)]
pub struct Mapping {
    pub lo: u64,
    pub hi: u64,
    pub perms: String,
    pub offset: u64,
    pub path: String,
}

/// A process that passed the checks.
#[derive(Debug)]
pub struct Tracee {
    pub pid: i32,
    /// `/proc/PID`, or `/proc/PID/task/TID` of a live thread when main() has called pthread_exit
    /// (a zombie leader has no maps, exe or fd entries).
    pub proc_dir: String,
    pub comm: String,
    pub maps: Vec<Mapping>,
    /// Path of the dynamic loader (the program's PT_INTERP).
    pub interp: String,
}

impl Tracee {
    /// `process 1234 (name)`, the prefix of every message about it.
    pub fn label(&self) -> String {
        format!("process {} ({})", self.pid, self.comm)
    }

    /// A task id whose memory calls work (process_vm_readv refuses a zombie leader).
    pub fn mem_pid(&self) -> i32 {
        self.proc_dir
            .rsplit('/')
            .next()
            .and_then(|t| t.parse().ok())
            .unwrap_or(self.pid)
    }

    /// The runtime is already in the process (an earlier attach, or `memlens run`).
    pub fn has_runtime(&self) -> bool {
        self.maps.iter().any(|m| is_runtime_path(&m.path))
    }

    /// Executable spans of the modules whose path satisfies `f`.
    pub fn code_of(&self, f: impl Fn(&str) -> bool) -> Vec<(u64, u64)> {
        self.maps
            .iter()
            .filter(|m| m.perms.contains('x') && f(&m.path))
            .map(|m| (m.lo, m.hi))
            .collect()
    }

    /// Load address of the module mapped from `path` (its mapping at file offset 0).
    pub fn base_of(&self, path: &str) -> Option<u64> {
        self.maps
            .iter()
            .find(|m| m.path == path && m.offset == 0)
            .map(|m| m.lo)
    }

    /// Paths of the mapped ELF modules, in map order (unique).
    pub fn modules(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for m in &self.maps {
            if m.path.starts_with('/') && m.offset == 0 && !v.contains(&m.path) {
                v.push(m.path.clone());
            }
        }
        v
    }

    /// The bytes of a file the process has mapped, seen from its mount namespace — or, when its
    /// name leads nowhere (deleted since it was mapped, `PATH (deleted)` in the maps: a service
    /// whose package was upgraded under it), through the mapping itself (`map_files`, root only).
    /// The process chose that name (it may have mapped `/dev/zero` or a FIFO): only a regular
    /// file is opened, without blocking, and read up to the input budget
    /// (`memlens_profile::read_regular`).
    pub fn read_file(&self, path: &str) -> Result<Vec<u8>> {
        use memlens_profile::{budget, read_regular, Links};
        let inside = PathBuf::from(format!("{}/root{}", self.proc_dir, path));
        read_regular(&inside, Links::Follow, budget())
            .or_else(|_| read_regular(Path::new(path), Links::Resolve, budget()))
            .or_else(|e| self.read_mapped(path).ok_or(e))
            .with_context(|| format!("cannot read {path} of {}", self.label()))
    }

    /// The file behind a mapping of `path`, through `map_files/LO-HI`.
    fn read_mapped(&self, path: &str) -> Option<Vec<u8>> {
        use memlens_profile::{budget, read_regular, Links};
        let m = self.maps.iter().find(|m| m.path == path && m.offset == 0)?;
        let file = format!("{}/map_files/{:x}-{:x}", self.proc_dir, m.lo, m.hi);
        // a link to the name the process sees: followed by open(2), never resolved here
        read_regular(Path::new(&file), Links::Follow, budget()).ok()
    }

    /// `f` of module `path` parsed, with the amount its symbols' addresses move by at run time.
    fn with_elf<T>(&self, path: &str, f: impl FnOnce(&object::File, u64) -> T) -> Result<T> {
        let data = self.read_file(path)?;
        let file = object::File::parse(&*data)
            .with_context(|| format!("{path} of {} is not an ELF file", self.label()))?;
        let base = self
            .base_of(path)
            .ok_or_else(|| anyhow!("{path} is not mapped in {}", self.label()))?;
        let first_vaddr = first_load_vaddr(&file).unwrap_or(0) & !0xfff;
        Ok(f(&file, base.wrapping_sub(first_vaddr)))
    }

    /// Run-time spans of the functions of module `path` (its `.symtab` and `.dynsym`) whose names
    /// `keep` accepts.
    pub fn function_spans(
        &self,
        path: &str,
        keep: impl Fn(&str) -> bool,
    ) -> Result<Vec<(u64, u64)>> {
        self.with_elf(path, |file, bias| {
            let mut out = Vec::new();
            for s in file.symbols().chain(file.dynamic_symbols()) {
                if s.is_undefined() || s.address() == 0 || s.kind() != object::SymbolKind::Text {
                    continue;
                }
                if s.name().is_ok_and(&keep) {
                    let lo = bias.wrapping_add(s.address());
                    out.push((lo, lo + s.size().max(1)));
                }
            }
            out
        })
    }

    /// Run-time addresses of the defined dynamic symbols `names` of module `path`:
    /// name -> (address, size).
    pub fn symbols(&self, path: &str, names: &[&str]) -> Result<HashMap<String, (u64, u64)>> {
        self.with_elf(path, |file, bias| {
            let mut out = HashMap::new();
            for s in file.dynamic_symbols() {
                if s.is_undefined() || s.address() == 0 {
                    continue;
                }
                let Ok(n) = s.name() else { continue };
                // versioned duplicates: the first (default) definition wins
                if names.contains(&n) && !out.contains_key(n) {
                    out.insert(n.to_string(), (bias.wrapping_add(s.address()), s.size()));
                }
            }
            out
        })
    }
}

fn first_load_vaddr(file: &object::File) -> Option<u64> {
    match file {
        object::File::Elf64(e) => {
            let endian = e.endian();
            e.elf_program_headers()
                .iter()
                .find(|ph| ph.p_type(endian) == object::elf::PT_LOAD)
                .map(|ph| ph.p_vaddr(endian))
        }
        _ => None,
    }
}

/// Facts about the program file that decide whether attach can work.
#[derive(Debug, PartialEq)]
pub struct ExeFacts {
    pub x86_64: bool,
    pub arch: String,
    pub interp: Option<String>,
}

pub fn exe_facts(data: &[u8]) -> Result<ExeFacts> {
    let file = object::File::parse(data).context("not an ELF file")?;
    let arch = format!("{:?}", file.architecture()).to_lowercase();
    let x86_64 = file.architecture() == object::Architecture::X86_64 && file.is_64();
    let mut interp = None;
    if let object::File::Elf64(e) = &file {
        let endian = e.endian();
        for ph in e.elf_program_headers() {
            if ph.p_type(endian) == object::elf::PT_INTERP {
                if let Ok(Some(bytes)) = ph.interpreter(endian, data) {
                    interp = Some(String::from_utf8_lossy(bytes).into_owned());
                }
            }
        }
    }
    Ok(ExeFacts {
        x86_64,
        arch,
        interp,
    })
}

/// Read the maps of `pid`.
pub fn read_maps(proc_dir: &str) -> Result<Vec<Mapping>> {
    let text = std::fs::read_to_string(format!("{proc_dir}/maps"))
        .with_context(|| format!("cannot read {proc_dir}/maps"))?;
    let mut out = Vec::new();
    for line in text.lines() {
        let mut it = line.splitn(6, ' ');
        let (Some(range), Some(perms), Some(off), _, _) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let path = it.next().unwrap_or("").trim().to_string();
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        out.push(Mapping {
            lo: u64::from_str_radix(lo, 16).unwrap_or(0),
            hi: u64::from_str_radix(hi, 16).unwrap_or(0),
            perms: perms.to_string(),
            offset: u64::from_str_radix(off, 16).unwrap_or(0),
            path,
        });
    }
    Ok(out)
}

/// The refusals, in the order a user can act on them. Each error is one line: the reason and what
/// to do.
pub fn check(pid: i32) -> Result<Tracee> {
    let status = ProcStatus::of(pid)?;
    let comm = status.field("Name:").unwrap_or("?");
    let label = format!("process {pid} ({comm})");
    let uid = status
        .uid()
        .ok_or_else(|| anyhow!("cannot read the owner of {label}"))?;
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if me != 0 && me != uid {
        bail!("cannot attach to {label}: it belongs to uid {uid} (attach as its owner or as root)");
    }
    let state = status.field("State:").unwrap_or_default();
    let threads: usize = status
        .field("Threads:")
        .and_then(|t| t.parse().ok())
        .unwrap_or(1);
    // A zombie leader with live threads is a main() that called pthread_exit: still running.
    let zombie_leader = state.starts_with('Z') || state.starts_with('X');
    if zombie_leader && threads <= 1 {
        bail!("cannot attach to {label}: it has exited (zombie)");
    }
    let proc_dir = if zombie_leader {
        live_thread_dir(pid).ok_or_else(|| anyhow!("cannot attach to {label}: it is exiting"))?
    } else {
        format!("/proc/{pid}")
    };
    // A traced process is often in a tracing stop ('t'): say who traces it rather than "stopped".
    let tracer: i32 = status
        .field("TracerPid:")
        .and_then(|t| t.parse().ok())
        .unwrap_or(0);
    if tracer != 0 {
        let tcomm = std::fs::read_to_string(format!("/proc/{tracer}/comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into());
        bail!(
            "cannot attach to {label}: it is already traced by process {tracer} ({tcomm}); detach that debugger or tracer first"
        );
    }
    if state.starts_with('T') || state.starts_with('t') {
        bail!(
            "cannot attach to {label}: it is stopped (state {state}); resume it first (kill -CONT {pid})"
        );
    }
    ptrace_policy(me)?;
    let exe = std::fs::read(format!("{proc_dir}/exe")).map_err(|e| {
        if e.kind() == ErrorKind::PermissionDenied {
            anyhow!("cannot attach to {label}: permission denied reading its program (ptrace access is needed: attach as its owner or as root, with CAP_SYS_PTRACE in containers)")
        } else {
            anyhow!(e).context(format!("cannot read the program of {label}"))
        }
    })?;
    let facts =
        exe_facts(&exe).with_context(|| format!("cannot read the program file of {label}"))?;
    if !facts.x86_64 {
        bail!(
            "cannot attach to {label}: it is a {} program; memlens attaches to x86-64 programs only (use a memlens built for that architecture)",
            facts.arch
        );
    }
    let Some(interp) = facts.interp else {
        bail!("cannot attach to {label}: it is statically linked (no dynamic loader to load the runtime with); memlens can only profile dynamically linked programs");
    };
    // An allocator linked into the program (it defines malloc itself) is hooked at its entry points
    // (runtime/src/intercept/finder.c, hooks.rs), or the runtime says why it cannot be.
    let maps = read_maps(&proc_dir)?;
    Ok(Tracee {
        pid,
        proc_dir,
        comm: comm.to_string(),
        maps,
        interp,
    })
}

fn live_thread_dir(pid: i32) -> Option<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .filter_map(|e| e.ok())
        .map(|e| format!("/proc/{pid}/task/{}", e.file_name().to_string_lossy()))
        .find(|d| {
            std::fs::read_to_string(format!("{d}/stat"))
                .map(|s| {
                    let st = s.rsplit(')').next().unwrap_or("").trim_start();
                    !st.starts_with('Z') && !st.starts_with('X')
                })
                .unwrap_or(false)
        })
}

/// Yama's ptrace policy, when it forbids us outright.
fn ptrace_policy(euid: u32) -> Result<()> {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(0);
    match scope {
        3 => bail!("cannot attach: ptrace is disabled on this machine (kernel.yama.ptrace_scope=3, which only a reboot lifts); start the program with memlens run instead"),
        2 if euid != 0 => bail!("cannot attach: kernel.yama.ptrace_scope=2 lets only root (CAP_SYS_PTRACE) attach; run memlens attach as root"),
        _ => Ok(()),
    }
}

/// The message for a PTRACE_SEIZE that the kernel refused.
pub fn seize_denied(label: &str, errno: i32) -> anyhow::Error {
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "absent".into());
    if errno == libc::EPERM {
        anyhow!("cannot attach to {label}: ptrace permission denied (kernel.yama.ptrace_scope={scope}; attach as root, give memlens CAP_SYS_PTRACE, or set kernel.yama.ptrace_scope=0)")
    } else {
        anyhow!(
            "cannot attach to {label}: ptrace failed: {}",
            std::io::Error::from_raw_os_error(errno)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn facts_of_our_own_binary() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let f = exe_facts(&exe).unwrap();
        assert!(f.x86_64);
        assert!(f.interp.is_some());
    }

    #[test]
    fn another_architecture_is_named() {
        let mut exe = std::fs::read("/proc/self/exe").unwrap();
        exe[18] = 0xb7; // e_machine = EM_AARCH64
        exe[19] = 0;
        let f = exe_facts(&exe).unwrap();
        assert!(!f.x86_64);
        assert_eq!(f.arch, "aarch64");
    }
}
