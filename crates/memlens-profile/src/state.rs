//! Reader of the runtime's state file (`<run dir>/<pid>.<n>.state`, runtime/src/store/state.c): what a
//! process sampled, readable after the process is gone however it ended (SIGKILL, the OOM killer,
//! exit_group). [`render`] turns it into a raw dump (format version 1, `runtime/README.md`), so
//! everything that reads dumps reads it.
//!
//! The file describes itself: its header page holds, at byte 2048, a directory of the fields this
//! reader uses (`name@offset:size`), so the runtime's structs may change without a change here.
use anyhow::{anyhow, bail, Context, Result};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;

const MAGIC: &[u8] = b"memlens-state\n";
const PAGE: usize = 4096;
const DIR_AT: usize = 2048;

/// How an image ended, as its header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Running, or gone without its final dump.
    Running,
    /// Its final dump (exit, exec, fork-child-exit) was written: `<MEMLENS_OUT>.<pid>.<seq>.raw`.
    Dumped(u64),
    /// Ended with nothing of its own: a fork child that exec'd or exited without sampling.
    Nothing,
}

/// The header of a state file: who the process was and how it ended.
#[derive(Debug, Clone)]
pub struct StateInfo {
    /// Process id.
    pub pid: u32,
    /// Parent process id at start (or fork).
    pub ppid: u32,
    /// Effective uid at start.
    pub uid: u32,
    /// `/proc/PID/stat` starttime: with the pid, the process.
    pub start_ticks: u64,
    /// Program path.
    pub exe: String,
    /// A fork child (not exec'd since).
    pub fork_child: bool,
    /// How it ended.
    pub status: Status,
}

/// An open state file: its header page, its field directory and the file.
struct State {
    page: Vec<u8>,
    dir: HashMap<String, (usize, usize)>,
    file: std::fs::File,
    len: u64,
    /// The most one region may take: the input budget, and no more than the file's allocated
    /// blocks (a sparse file's holes read as zeros, and a header may claim any size).
    max_read: u64,
}

impl State {
    fn open(path: &Path) -> Result<State> {
        // In a run directory others may write to: a regular file only, not a link, no FIFO.
        let (file, meta) = crate::input::open_regular(path, crate::input::Links::Refuse)?;
        let len = meta.len();
        let max_read = crate::input::budget().min(meta.blocks().saturating_mul(512));
        let mut page = vec![0u8; PAGE];
        file.read_exact_at(&mut page, 0)
            .with_context(|| format!("{}: shorter than a state header", path.display()))?;
        if !page.starts_with(MAGIC) {
            bail!("{}: not a memlens state file", path.display());
        }
        let text = &page[DIR_AT..];
        let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
        let mut dir = HashMap::new();
        for e in String::from_utf8_lossy(&text[..end]).split_whitespace() {
            let parse = || -> Option<(String, usize, usize)> {
                let (name, rest) = e.split_once('@')?;
                let (off, size) = rest.split_once(':')?;
                Some((name.to_string(), off.parse().ok()?, size.parse().ok()?))
            };
            if let Some((n, o, s)) = parse() {
                dir.insert(n, (o, s));
            }
        }
        let s = State {
            page,
            dir,
            file,
            len,
            max_read,
        };
        if s.h("version")? != 1 {
            bail!(
                "{}: state format version {} (this memlens reads 1)",
                path.display(),
                s.h("version")?
            );
        }
        Ok(s)
    }

    fn field(&self, name: &str) -> Result<(usize, usize)> {
        self.dir
            .get(name)
            .copied()
            .ok_or_else(|| anyhow!("the state file has no field {name}"))
    }

    /// A header field as an unsigned number.
    fn h(&self, name: &str) -> Result<u64> {
        let (o, s) = self.field(&format!("h.{name}"))?;
        num(&self.page, o, s)
    }

    /// A header field as a signed number.
    fn hi(&self, name: &str) -> Result<i64> {
        let (o, s) = self.field(&format!("h.{name}"))?;
        Ok(match s {
            4 => num(&self.page, o, 4)? as u32 as i32 as i64,
            _ => num(&self.page, o, s)? as i64,
        })
    }

    fn h_str(&self, name: &str) -> Result<String> {
        let (o, s) = self.field(&format!("h.{name}"))?;
        let b = bytes(&self.page, o, s).with_context(|| format!("bad field {name}"))?;
        let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
        Ok(String::from_utf8_lossy(&b[..end]).into_owned())
    }

    /// `len` bytes of the file at `at` (bounded by the file and by what it holds).
    fn read(&self, at: u64, len: u64) -> Result<Vec<u8>> {
        if at.checked_add(len).is_none_or(|e| e > self.len) {
            bail!("a region of the state file lies outside it");
        }
        if len > self.max_read {
            bail!(
                "the state file claims a region of {len} bytes, more than it holds ({} bytes \
                 written)",
                self.max_read
            );
        }
        let mut b = vec![0u8; len as usize];
        self.file.read_exact_at(&mut b, at)?;
        Ok(b)
    }

    fn info(&self) -> Result<StateInfo> {
        let status = match self.h("status")? {
            2 => Status::Dumped(self.h("final_seq")?),
            3 => Status::Nothing,
            // a fork child that never wrote to its table: whatever ended it, nothing of its own
            _ if self.h("table_own")? == 0 => Status::Nothing,
            _ => Status::Running,
        };
        Ok(StateInfo {
            pid: self.h("pid")? as u32,
            ppid: self.h("ppid")? as u32,
            uid: self.h("uid")? as u32,
            start_ticks: self.h("start_ticks")?,
            exe: self.h_str("exe")?,
            fork_child: self.h("fork_child")? != 0,
            status,
        })
    }
}

/// `n × size` bytes, or an error when a header claims more than can be.
fn times(n: u64, size: u64) -> Result<u64> {
    n.checked_mul(size)
        .ok_or_else(|| anyhow!("the state file claims {n} records of {size} bytes"))
}

/// `size` bytes at `off` of a record.
fn bytes(b: &[u8], off: usize, size: usize) -> Result<&[u8]> {
    off.checked_add(size)
        .and_then(|end| b.get(off..end))
        .ok_or_else(|| anyhow!("a field lies outside its record"))
}

/// Little-endian unsigned integer of `size` bytes at `off`.
fn num(b: &[u8], off: usize, size: usize) -> Result<u64> {
    let s = bytes(b, off, size)?;
    let mut v = [0u8; 8];
    v[..size.min(8)].copy_from_slice(&s[..size.min(8)]);
    Ok(u64::from_le_bytes(v))
}

/// The header of a state file.
pub fn read_info(path: &Path) -> Result<StateInfo> {
    State::open(path)?.info()
}

/// Paths as the runtime writes them: control bytes and `\` as `\xHH`.
fn escape(s: &str, out: &mut String) {
    for b in s.bytes() {
        if b < 0x20 || b == b'\\' || b == 0x7f {
            let _ = write!(out, "\\x{b:02x}");
        } else {
            out.push(b as char);
        }
    }
}

/// Render the state file as a raw dump: the header lines (`reason` as given, `time_ns` the end
/// time when known, else the time of the latest timeline point), the modules, an empty maps
/// section, every record with counts and its `life` line, the views and the timeline.
pub fn render(path: &Path, reason: &str, end_ns: Option<u64>) -> Result<String> {
    let s = State::open(path)?;
    let info = s.info()?;
    let mut o = String::new();
    let unwinder = match s.h("unwinder")? {
        0 => "fp",
        1 => "libgcc",
        2 => "libunwind",
        _ => "dwarf",
    };
    let clock_ns = s.h("clock_ns")?;
    let time_ns = end_ns.unwrap_or(if clock_ns != 0 {
        clock_ns
    } else {
        s.h("start_ns")?
    });
    let _ = writeln!(o, "memlens-raw 1\npid {}\nppid {}", info.pid, info.ppid);
    o.push_str("exe ");
    escape(&info.exe, &mut o);
    o.push('\n');
    let _ = write!(
        o,
        "interval {}\nunwinder {unwinder}\nactive {}\nreason {reason}\nstart_ns {}\ntime_ns {time_ns}\n",
        s.h("interval")?,
        s.h("active")?,
        s.h("start_ns")?
    );
    let samples_at = o.len();
    o.push_str("samples ");
    o.push('\n');
    for k in ["truncated", "dropped", "unwind_fallbacks"] {
        let _ = writeln!(o, "{k} {}", s.h(k)?);
    }
    let _ = writeln!(o, "max_depth {}", s.h("max_depth")?);
    for k in ["dropped_bytes", "max_stacks", "table_full", "untracked"] {
        let _ = writeln!(o, "{k} {}", s.h(k)?);
    }
    modules(&s, &mut o)?;
    o.push_str("maps\nend maps\n");
    let total = stacks(&s, &mut o)?;
    o.insert_str(samples_at + "samples ".len(), &total.to_string());
    views(&s, &mut o)?;
    o.push_str("end\n");
    Ok(o)
}

fn modules(s: &State, o: &mut String) -> Result<()> {
    let n = s.h("nmodules")?.min(s.h("modules_cap")?);
    let size = s.h("module_bytes")?;
    if size == 0 {
        bail!("the state file's modules have no size");
    }
    let data = s.read(s.h("modules_at")?, times(n, size)?)?;
    let f = |name: &str| s.field(&format!("m.{name}"));
    let seg_bytes = s.field("m.seg_bytes")?.1;
    if seg_bytes == 0 {
        bail!("the state file's module segments have no size");
    }
    let ms = |name: &str| s.field(&format!("ms.{name}"));
    for m in data.chunks_exact(size as usize) {
        let state = num(m, f("state")?.0, 4)?;
        if state != 1 && state != 2 {
            continue;
        }
        let base = num(m, f("base")?.0, 8)?;
        let idlen = (num(m, f("idlen")?.0, 4)? as usize).min(f("id")?.1);
        let id = bytes(m, f("id")?.0, idlen)?;
        let (po, ps) = f("path")?;
        let pb = bytes(m, po, ps)?;
        let path = String::from_utf8_lossy(&pb[..pb.iter().position(|&c| c == 0).unwrap_or(ps)])
            .into_owned();
        let _ = write!(o, "module {base:#x} ");
        if id.is_empty() {
            o.push('-');
        }
        for b in id {
            let _ = write!(o, "{b:02x}");
        }
        o.push_str(if state == 1 { " loaded " } else { " unloaded " });
        escape(&path, o);
        o.push('\n');
        let (so, ss) = f("seg")?;
        let nseg = (num(m, f("nseg")?.0, 4)? as usize).min(ss / seg_bytes);
        for k in 0..nseg {
            let at = so + k * seg_bytes;
            let v = |name: &str| -> Result<u64> {
                let (off, size) = ms(name)?;
                num(m, at + off, size)
            };
            let flags = v("flags")?;
            let fl: String = [(4, 'r'), (2, 'w'), (1, 'x')]
                .iter()
                .map(|&(bit, c)| if flags & bit != 0 { c } else { '-' })
                .collect();
            let _ = writeln!(
                o,
                "segment {:#x} {:#x} {:#x} {fl}",
                v("vaddr")?,
                v("memsz")?,
                v("offset")?
            );
        }
    }
    Ok(())
}

/// The `stack` and `life` lines; returns the samples written.
fn stacks(s: &State, o: &mut String) -> Result<u64> {
    let n = s.h("nstacks")?.min(s.h("listed_cap")?);
    let listed = s.read(s.h("listed_at")?, times(n, 4)?)?;
    let used = s.h("arena_used")?.min(s.h("arena_cap")?);
    let arena = s.read(s.h("arena_at")?, used)?;
    let f = |name: &str| s.field(&format!("s.{name}"));
    let (pcs_at, _) = f("pcs")?;
    let life_n = s.h("life_n")? as usize;
    let snapped = s.h("snapped")? != 0;
    // ages: the latest tick the process is known to have lived to, in units of 2^20 ticks
    let (anchor, clock) = (s.h("anchor_tsc")?, s.h("clock_tsc")?);
    let units = |t: u64| (t.saturating_sub(anchor) >> 20) + 1;
    let mut total = 0;
    for e in listed.chunks_exact(4) {
        let id = u32::from_le_bytes(e.try_into().unwrap()) as u64;
        if id == 0 {
            continue;
        }
        let at = ((id - 1) * 8) as usize;
        let Some(r) = arena.get(at..) else { continue };
        let depth = num(r, f("depth")?.0, 4)? as usize;
        if depth > 128 || r.len() < pcs_at + depth * 8 {
            continue; // a record the process was writing when it died
        }
        let v = |name: &str| -> Result<u64> {
            let (off, size) = f(name)?;
            num(r, off, size)
        };
        let samples = v("samples")?;
        let (afx, ab) = (v("alloc_fx")?, v("alloc_bytes")?);
        let (ifx, ib) = (v("inuse_fx")? as i64, v("inuse_bytes")? as i64);
        if samples == 0 && afx == 0 && ifx == 0 && ib == 0 {
            continue;
        }
        total += samples;
        let _ = write!(
            o,
            "stack {samples} {afx} {ab} {} {} {}",
            ifx.max(0),
            ib.max(0),
            v("flags")? & 3 // truncated, anonymous mmap
        );
        for k in 0..depth {
            let _ = write!(o, " {:#x}", num(r, pcs_at + k * 8, 8)?);
        }
        o.push('\n');
        let (sum, w) = (v("age_sum")?, v("age_w")? as i64);
        let age = if w > 0 && anchor != 0 && clock != 0 {
            units(clock).saturating_sub(sum / w as u64) << 20
        } else {
            0
        };
        let (pfx, pb) = if snapped {
            (v("peak_fx")? as i64, v("peak_bytes")? as i64)
        } else {
            (0, 0)
        };
        let _ = write!(o, "life {pfx} {pb} {age} 0");
        let (lo, ls) = f("life")?;
        for k in 0..life_n.min(ls / 8) {
            let _ = write!(o, " {}", num(r, lo + k * 8, 8)?);
        }
        o.push('\n');
    }
    Ok(total)
}

fn views(s: &State, o: &mut String) -> Result<()> {
    let hz = s.h("clock_hz")?;
    let (tick, ns) = (s.h("clock_tsc")?, s.h("clock_ns")?);
    // a tick as CLOCK_REALTIME ns, from the latest (tick, time, rate) the process wrote
    let tick_ns = |t: u64| -> u64 {
        if hz == 0 || t == 0 || tick == 0 {
            return 0;
        }
        let d = (tick as f64 - t as f64) * 1e9 / hz as f64;
        (ns as f64 - d).max(0.0) as u64
    };
    let timed = s.h("anchor_tsc")? != 0;
    let _ = writeln!(o, "view enabled {}", s.h("views_on")?);
    let _ = writeln!(o, "view tsc_hz {}", if timed { hz } else { 0 });
    o.push_str("view life_decades 1\n");
    let heap = s.hi("heap")?;
    let max = s.hi("heap_max")?.max(heap);
    let _ = writeln!(o, "view heap {heap}");
    let _ = writeln!(o, "view heap_max {max} {}", tick_ns(s.h("heap_max_tick")?));
    let _ = writeln!(o, "view peak {} {}", s.h("snap_heap")?, s.h("snap_ns")?);
    if let (Ok(a), Ok(b)) = (s.hi("split_a"), s.hi("split_b")) {
        let (ta, tb) = (tick_ns(s.h("split_a_tick")?), tick_ns(s.h("split_b_tick")?));
        let _ = writeln!(o, "view split {a} {ta} {b} {tb}");
    }
    let kinds = [
        "unknown", "unknown", "glibc", "jemalloc", "tcmalloc", "mimalloc",
    ];
    let kind = kinds.get(s.h("stats_kind")? as usize).unwrap_or(&"unknown");
    let _ = writeln!(o, "view allocator {kind}");
    let n = s.h("npoints")?.min(s.h("points_cap")?);
    let size = s.h("point_bytes")?;
    if size == 0 {
        bail!("the state file's timeline points have no size");
    }
    let data = s.read(s.h("points_at")?, times(n, size)?)?;
    let p = |name: &str| s.field(&format!("p.{name}"));
    for pt in data.chunks_exact(size as usize) {
        let v = |name: &str| -> Result<i64> {
            let (off, sz) = p(name)?;
            Ok(num(pt, off, sz)? as i64)
        };
        // p.mmap: runtimes before the split have none (their heap counted the mappings)
        let mmap = if p("mmap").is_ok() { v("mmap")? } else { -1 };
        let _ = writeln!(
            o,
            "tl {} {} {} {} {} {mmap}",
            v("ns")?,
            v("heap")?,
            v("rss")?,
            v("in_use")?,
            v("footprint")?
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_escaped_as_the_runtime_does() {
        let mut o = String::new();
        escape("/a b\\c\nd", &mut o);
        assert_eq!(o, "/a b\\x5cc\\x0ad");
    }

    #[test]
    fn not_a_state_file() {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), vec![7u8; 8192]).unwrap();
        assert!(read_info(f.path()).is_err());
        std::fs::write(f.path(), b"memlens-state\n").unwrap();
        assert!(read_info(f.path()).is_err());
    }
}
