//! The machine facts every result file carries (`memlens sysinfo`).
use serde::Serialize;
use std::fs;

#[derive(Debug, Clone, Serialize)]
/// One CPU cache as sysfs declares it.
pub struct Cache {
    /// 1, 2, 3…
    pub level: u32,
    /// `Data`, `Instruction` or `Unified`.
    pub kind: String,
    /// Capacity.
    pub size_bytes: u64,
    /// Line size.
    pub line_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
/// One data TLB (or unified second-level TLB) for one page size, as CPUID declares it.
pub struct Tlb {
    /// 1 or 2.
    pub level: u32,
    /// `Data` or `Unified`.
    pub kind: String,
    /// The page size its entries map.
    pub page_bytes: u64,
    /// Number of entries.
    pub entries: u64,
}

impl Tlb {
    /// Memory its entries map at once: entries × page size.
    pub fn reach(&self) -> u64 {
        self.entries * self.page_bytes
    }
}

#[derive(Debug, Clone, Serialize)]
/// The facts of the machine a result was measured on.
pub struct SysInfo {
    /// Host name.
    pub hostname: String,
    /// CPU model name (/proc/cpuinfo).
    pub cpu_model: String,
    /// Logical CPUs online.
    pub logical_cpus: usize,
    /// Total memory.
    pub memory_bytes: u64,
    /// Kernel release.
    pub kernel: String,
    /// glibc version.
    pub glibc: String,
    /// Running under a hypervisor.
    pub virtualized: bool,
    /// Caches of CPU 0.
    pub caches: Vec<Cache>,
    /// Data TLBs (CPUID), by level and page size; empty where the CPU does not say.
    pub tlbs: Vec<Tlb>,
    /// Transparent huge pages setting.
    pub thp: String,
    /// Calibrated TSC rate.
    pub tsc_hz: f64,
    /// The CPU says its TSC is invariant.
    pub tsc_invariant: bool,
    /// Cost of one TSC read.
    pub tsc_read_ns: f64,
    /// `None` when hardware counters work, else why they don't.
    pub pmu_unavailable: Option<String>,
    /// Version of memlens that measured.
    pub memlens_version: String,
}

fn read(p: &str) -> String {
    fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn parse_cache_size(s: &str) -> u64 {
    let s = s.trim();
    if let Some(k) = s.strip_suffix('K') {
        k.parse::<u64>().unwrap_or(0) << 10
    } else if let Some(m) = s.strip_suffix('M') {
        m.parse::<u64>().unwrap_or(0) << 20
    } else {
        s.parse().unwrap_or(0)
    }
}

/// Data and unified caches of CPU 0 as sysfs declares them, smallest level first.
pub fn caches() -> Vec<Cache> {
    let mut out = Vec::new();
    for i in 0..8 {
        let base = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        let kind = read(&format!("{base}/type"));
        if kind.is_empty() {
            break;
        }
        if kind == "Instruction" {
            continue;
        }
        out.push(Cache {
            level: read(&format!("{base}/level")).parse().unwrap_or(0),
            kind,
            size_bytes: parse_cache_size(&read(&format!("{base}/size"))),
            line_bytes: read(&format!("{base}/coherency_line_size"))
                .parse()
                .unwrap_or(64),
        });
    }
    out.sort_by_key(|c| c.level);
    out
}

fn cpuid(leaf: u32, sub: u32) -> [u32; 4] {
    // CPUID exists on every x86-64 CPU; leaves above the maximum return zeros or the highest
    // leaf's data, so the callers check against the maximum first.
    let r = std::arch::x86_64::__cpuid_count(leaf, sub);
    [r.eax, r.ebx, r.ecx, r.edx]
}

/// AMD: CPUID 0x80000005 (L1 TLBs) and 0x80000006 (L2 TLBs), for 4 KiB and 2 MiB pages.
fn amd_tlbs() -> Vec<Tlb> {
    let mut out = Vec::new();
    if cpuid(0x8000_0000, 0)[0] < 0x8000_0006 {
        return out;
    }
    let tlb = |level, kind: &str, page_bytes, entries: u32| Tlb {
        level,
        kind: kind.into(),
        page_bytes,
        entries: entries as u64,
    };
    let l1 = cpuid(0x8000_0005, 0);
    // EBX: 4 KiB pages, EAX: 2 MiB pages; data TLB entries in bits 23:16.
    out.push(tlb(1, "Data", 4 << 10, (l1[1] >> 16) & 0xff));
    out.push(tlb(1, "Data", 2 << 20, (l1[0] >> 16) & 0xff));
    let l2 = cpuid(0x8000_0006, 0);
    // The same for the L2 TLB: entries in bits 27:16, associativity 0 = no such TLB.
    for (reg, page) in [(l2[1], 4u64 << 10), (l2[0], 2 << 20)] {
        if reg >> 28 != 0 {
            out.push(tlb(2, "Unified", page, (reg >> 16) & 0xfff));
        }
    }
    out
}

/// Intel: CPUID leaf 0x18 (deterministic address translation parameters).
fn intel_tlbs() -> Vec<Tlb> {
    let mut out = Vec::new();
    if cpuid(0, 0)[0] < 0x18 {
        return out;
    }
    let max_sub = cpuid(0x18, 0)[0];
    for sub in 0..=max_sub.min(16) {
        let [_, ebx, ecx, edx] = cpuid(0x18, sub);
        let kind = match edx & 0x1f {
            1 => "Data",
            3 => "Unified",
            4 => "Data", // load-only TLB
            _ => continue,
        };
        let level = (edx >> 5) & 7;
        let entries = ((ebx >> 16) & 0xffff) as u64 * ecx as u64;
        for (bit, page) in [(0, 4u64 << 10), (1, 2 << 20)] {
            if ebx & (1 << bit) != 0 && entries > 0 {
                out.push(Tlb {
                    level,
                    kind: kind.into(),
                    page_bytes: page,
                    entries,
                });
            }
        }
    }
    out
}

/// The data TLBs CPUID declares (AMD leaves 0x80000005/6, Intel leaf 0x18), smallest level first,
/// entries > 0 only. A hypervisor may hide or rewrite these; empty when nothing is declared.
pub fn tlbs() -> Vec<Tlb> {
    let v = cpuid(0, 0);
    let vendor: Vec<u8> = [v[1], v[3], v[2]]
        .iter()
        .flat_map(|r| r.to_le_bytes())
        .collect();
    let mut out = match &vendor[..] {
        b"AuthenticAMD" | b"HygonGenuine" => amd_tlbs(),
        _ => intel_tlbs(),
    };
    out.retain(|t| t.entries > 0);
    out.sort_by_key(|t| (t.level, t.page_bytes));
    out.dedup();
    out
}

/// Size of the last-level cache in bytes (8 MiB if sysfs says nothing).
pub fn llc_bytes() -> u64 {
    caches()
        .last()
        .map(|c| c.size_bytes)
        .filter(|&s| s > 0)
        .unwrap_or(8 << 20)
}

/// Probe whether a hardware cycle counter can be opened for this process; `Err(reason)` if not.
fn pmu_probe() -> Result<(), String> {
    // struct perf_event_attr (PERF_ATTR_SIZE_VER5 = 112 bytes): type u32, size u32, config u64,
    // then flags at byte 40 (bit 0 disabled, bit 5 exclude_kernel, bit 6 exclude_hv).
    let mut attr = [0u8; 112];
    attr[0..4].copy_from_slice(&0u32.to_ne_bytes()); // PERF_TYPE_HARDWARE
    attr[4..8].copy_from_slice(&112u32.to_ne_bytes());
    attr[8..16].copy_from_slice(&0u64.to_ne_bytes()); // PERF_COUNT_HW_CPU_CYCLES
    attr[40..48].copy_from_slice(&((1u64 << 0) | (1 << 5) | (1 << 6)).to_ne_bytes());
    // SAFETY: attr is a valid, fully initialised perf_event_attr of the size it declares.
    let fd = unsafe { libc::syscall(libc::SYS_perf_event_open, attr.as_ptr(), 0, -1, -1, 0u64) };
    if fd >= 0 {
        unsafe { libc::close(fd as i32) };
        return Ok(());
    }
    let err = std::io::Error::last_os_error();
    let virt = read("/proc/cpuinfo").contains(" hypervisor");
    Err(match err.raw_os_error() {
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) if virt => {
            "no PMU: virtual machine without counters".into()
        }
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) => {
            "no PMU: the CPU exposes no cycle counter".into()
        }
        Some(libc::EACCES) | Some(libc::EPERM) => {
            format!(
                "perf_event_paranoid={} forbids counters",
                read("/proc/sys/kernel/perf_event_paranoid")
            )
        }
        _ => format!("perf_event_open failed: {err}"),
    })
}

fn glibc_version() -> String {
    extern "C" {
        fn gnu_get_libc_version() -> *const libc::c_char;
    }
    // SAFETY: glibc returns a static NUL-terminated string.
    unsafe {
        std::ffi::CStr::from_ptr(gnu_get_libc_version())
            .to_string_lossy()
            .into_owned()
    }
}

/// Gather the machine facts (takes ~50 ms for the TSC calibration the first time).
pub fn collect() -> SysInfo {
    let cpuinfo = read("/proc/cpuinfo");
    let cpu_model = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let memory_bytes = read("/proc/meminfo")
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|k| k.parse::<u64>().ok())
        .unwrap_or(0)
        * 1024;
    let clock = crate::tsc::Clock::get();
    let thp = read("/sys/kernel/mm/transparent_hugepage/enabled");
    let thp = thp
        .split('[')
        .nth(1)
        .and_then(|s| s.split(']').next())
        .unwrap_or(&thp)
        .to_string();
    SysInfo {
        hostname: read("/proc/sys/kernel/hostname"),
        cpu_model,
        logical_cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        memory_bytes,
        kernel: read("/proc/sys/kernel/osrelease"),
        glibc: glibc_version(),
        virtualized: cpuinfo.contains(" hypervisor"),
        caches: caches(),
        tlbs: tlbs(),
        thp,
        tsc_hz: clock.hz,
        tsc_invariant: clock.invariant,
        tsc_read_ns: clock.ticks_to_ns(clock.read_cost_ticks),
        pmu_unavailable: pmu_probe().err(),
        memlens_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

impl SysInfo {
    /// Human-readable lines for `memlens sysinfo` and report headers.
    pub fn lines(&self) -> Vec<(String, String)> {
        use crate::units::format_size;
        let caches = self
            .caches
            .iter()
            .map(|c| format!("L{} {}", c.level, format_size(c.size_bytes)))
            .collect::<Vec<_>>()
            .join(", ");
        vec![
            (
                "cpu".into(),
                format!(
                    "{} ({} logical CPUs{})",
                    self.cpu_model,
                    self.logical_cpus,
                    if self.virtualized {
                        ", virtual machine"
                    } else {
                        ""
                    }
                ),
            ),
            ("memory".into(), format_size(self.memory_bytes)),
            ("caches".into(), caches),
            (
                "data TLBs".into(),
                if self.tlbs.is_empty() {
                    "not declared by CPUID".into()
                } else {
                    self.tlbs
                        .iter()
                        .map(|t| {
                            format!(
                                "L{} {} × {} (reach {})",
                                t.level,
                                t.entries,
                                format_size(t.page_bytes),
                                format_size(t.reach())
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            ),
            (
                "kernel / glibc".into(),
                format!("{} / {}", self.kernel, self.glibc),
            ),
            ("transparent huge pages".into(), self.thp.clone()),
            (
                "TSC".into(),
                format!(
                    "{:.3} GHz, {}, read costs {:.1} ns",
                    self.tsc_hz / 1e9,
                    if self.tsc_invariant {
                        "invariant"
                    } else {
                        "NOT invariant (timings unreliable)"
                    },
                    self.tsc_read_ns
                ),
            ),
            (
                "hardware counters".into(),
                self.pmu_unavailable
                    .clone()
                    .map(|r| format!("n/a ({r})"))
                    .unwrap_or_else(|| "available".into()),
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn collects_sane_facts() {
        let s = super::collect();
        assert!(s.logical_cpus >= 1);
        assert!(s.memory_bytes > 0);
        assert!(s.glibc.starts_with('2'));
        assert!(super::llc_bytes() > 0);
    }
}
