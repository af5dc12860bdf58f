//! What `/proc/PID` says of a process: its status, its resident memory, whether it has the runtime.
use anyhow::{anyhow, Context, Result};
use memlens_measure::error::usage;
use std::io::ErrorKind;

/// A process id from the command line (a usage error when it is not one).
pub fn parse_pid(s: &str) -> Result<i32> {
    match s.parse::<i32>() {
        Ok(p) if p > 0 => Ok(p),
        _ => Err(usage(format!("'{s}' is not a process id"))),
    }
}

/// A process's `/proc/PID/status`: who owns it, what it is called, what state it is in.
pub struct ProcStatus(String);

impl ProcStatus {
    /// Read it: `Ok(None)` when there is no such process.
    pub fn read(pid: i32) -> std::io::Result<Option<ProcStatus>> {
        match std::fs::read_to_string(format!("/proc/{pid}/status")) {
            Ok(s) => Ok(Some(ProcStatus(s))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Read it, or the one-line error a command gives for a process that is not there.
    pub fn of(pid: i32) -> Result<ProcStatus> {
        Self::read(pid)
            .with_context(|| format!("cannot read /proc/{pid}/status"))?
            .ok_or_else(|| anyhow!("no process with PID {pid} (it is not running)"))
    }

    /// The value of a field (`"Name:"`, `"State:"`, …), trimmed.
    pub fn field(&self, name: &str) -> Option<&str> {
        self.0
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    }

    /// The owner: the process's effective uid (the second of `Uid:`).
    pub fn uid(&self) -> Option<u32> {
        self.field("Uid:")?.split_whitespace().nth(1)?.parse().ok()
    }
}

/// Resident memory of `pid` in bytes (second field of /proc/PID/statm, in pages).
pub fn rss_bytes(pid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    Some(pages * if page > 0 { page as u64 } else { 4096 })
}

/// Is this mapping (a `/proc/PID/maps` path, or the whole line) the memlens runtime — preloaded
/// from its file, or attached from a memfd?
pub fn is_runtime_path(path: &str) -> bool {
    path.contains("memfd:memlens") || path.ends_with("/libmemlens.so")
}

/// Is the memlens runtime loaded into `pid` — its code mapped executable? (A preload the loader
/// refused, from a `noexec` mount, leaves a read-only mapping of the file behind.)
pub fn runtime_loaded(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/maps")).is_ok_and(|m| {
        m.lines()
            .any(|l| is_runtime_path(l) && l.split(' ').nth(1).is_some_and(|p| p.contains('x')))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pids() {
        assert!(parse_pid("0").is_err());
        assert!(parse_pid("-3").is_err());
        assert!(parse_pid("abc").is_err());
        assert_eq!(parse_pid("42").unwrap(), 42);
    }

    #[test]
    fn runtime_mappings() {
        assert!(is_runtime_path("/home/u/.cache/memlens/ab12/libmemlens.so"));
        assert!(is_runtime_path(
            "7f00-7f10 r-xp 0 00:01 5 /memfd:memlens (deleted)"
        ));
        assert!(!is_runtime_path("/usr/lib/libmemlens.so.1"));
        assert!(!is_runtime_path("/usr/lib/x86_64-linux-gnu/libc.so.6"));
    }
}
