//! Reader of the runtime's raw dump (format version 1, described in `runtime/README.md`).
//!
//! Strict: every malformed line is an error naming the line number, and a dump without its final
//! `end` line is "truncated" (the process died while writing it). Unknown `key value` lines in the
//! header are skipped so that the runtime can add facts without breaking older readers.
//!
//! Paths (`exe`, `module`) are written by the runtime with control bytes and `\\` escaped as `\xHH`,
//! so a file name with a newline cannot forge records; bytes that are not UTF-8 (in paths or
//! the maps section) are read as U+FFFD instead of rejecting the dump.
use anyhow::{anyhow, bail, Context, Result};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// One PT_LOAD program header of a module.
#[derive(Debug, Clone, PartialEq)]
pub struct Segment {
    /// ELF virtual address (p_vaddr).
    pub vaddr: u64,
    /// Size in memory (p_memsz).
    pub memsz: u64,
    /// File offset (p_offset).
    pub offset: u64,
    /// `rwx`, `-` for unset.
    pub flags: String,
}

/// A module from `dl_iterate_phdr` (or one dlclose'd since start).
#[derive(Debug, Clone, PartialEq)]
pub struct RawModule {
    /// Load bias: ELF virtual address + base = run-time address.
    pub base: u64,
    /// Lower-case hex, empty when the module has none.
    pub build_id: String,
    /// Still loaded at the dump (else dlclose'd since start).
    pub loaded: bool,
    /// Path of the module.
    pub path: String,
    /// Its PT_LOAD segments.
    pub segments: Vec<Segment>,
}

impl RawModule {
    /// The segment containing run-time address `pc`, if any.
    pub fn segment_of(&self, pc: u64) -> Option<&Segment> {
        let v = pc.checked_sub(self.base)?;
        self.segments
            .iter()
            .find(|s| v >= s.vaddr && v - s.vaddr < s.memsz)
    }
}

/// One `stack` line: values are already unbiased by the runtime.
#[derive(Debug, Clone, PartialEq)]
pub struct RawStack {
    /// Samples of this stack.
    pub samples: u64,
    /// Objects allocated, fixed point (16 fractional bits).
    pub alloc_objects_fx: i64,
    /// Bytes allocated.
    pub alloc_bytes: i64,
    /// Objects in use, fixed point (16 fractional bits).
    pub inuse_objects_fx: i64,
    /// Bytes in use.
    pub inuse_bytes: i64,
    /// Bit 0: truncated stack.
    pub flags: u64,
    /// Return addresses, innermost first.
    pub pcs: Vec<u64>,
    /// The `life` line that followed it (peak set, lifetimes, live age), when the runtime wrote one.
    pub life: Option<RawLife>,
}

/// A `life` line: the views' per-stack columns (see `runtime/README.md`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawLife {
    /// Live objects at the last peak snapshot (16.16 fixed point).
    pub peak_objects_fx: i64,
    /// Live bytes at the last peak snapshot.
    pub peak_bytes: i64,
    /// Mean age of the live bytes at the dump, in ticks.
    pub age_ticks: u64,
    /// Live bytes at the previous dump of the process (0 before the first).
    pub prev_inuse_bytes: i64,
    /// Bytes freed by lifetime bucket: with `view life_decades 1` the decades of
    /// `model::LIFE_BOUNDS_NS`; from an older runtime, bucket 0 is < 2^lg0 ticks, bucket k ≥ 1 is
    /// [2^(lg0-2+2k), 2^(lg0+2k)), the last is open.
    pub freed: Vec<u64>,
}

/// The process-wide `view` and `tl` lines.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawViews {
    /// The views were on (`MEMLENS_VIEWS` not 0).
    pub enabled: bool,
    /// TSC ticks per second (0 when nothing was sampled).
    pub tsc_hz: u64,
    /// log2 of the first lifetime bucket's bound, in ticks (older runtimes).
    pub life_lg0: u32,
    /// The lifetime buckets are decades of ns (`view life_decades 1`), not powers of 4 of ticks.
    pub life_decades: bool,
    /// Estimated live heap at the dump.
    pub heap: i64,
    /// Highest estimate seen.
    pub heap_max: i64,
    /// When it was seen (CLOCK_REALTIME ns).
    pub heap_max_ns: u64,
    /// The estimate when the peak set was taken.
    pub peak: u64,
    /// When the peak set was taken (CLOCK_REALTIME ns).
    pub peak_ns: u64,
    /// The split-sample peak (`view split`): half B's estimate when half A was highest and the
    /// time, then A's when B was; None from older runtimes.
    pub split: Option<[(i64, u64); 2]>,
    /// The allocator the program ran on: glibc, jemalloc, tcmalloc, mimalloc or unknown (older
    /// runtimes: the source of the figures, or none).
    pub allocator: String,
    /// `tl` points: ns, estimated heap (without anonymous mappings), RSS, allocator in use,
    /// allocator footprint, estimated anonymous mappings (-1 unknown: a dump of 5 fields, from a
    /// runtime before the split, counted them in the heap).
    pub timeline: Vec<[i64; 6]>,
}

#[derive(Debug, Clone, Default, PartialEq)]
/// A raw dump, as read.
pub struct RawDump {
    /// Process and sampling facts.
    pub meta: crate::model::Meta,
    /// Loaded (and unloaded) modules.
    pub modules: Vec<RawModule>,
    /// Verbatim /proc/self/maps lines.
    pub maps: Vec<String>,
    /// One per distinct stack.
    pub stacks: Vec<RawStack>,
    /// Present when the runtime wrote `view` lines.
    pub views: Option<RawViews>,
}

/// Read and parse a raw dump file that memlens asked for (a run directory's, a control
/// directory's): a regular file only, not a link (bounded like every input: [`crate::input`]).
pub fn read(path: &Path) -> Result<RawDump> {
    read_from(open(path)?.reader()).with_context(|| format!("{}", path.display()))
}

/// Open a raw dump file that memlens asked for: a regular file only, not a link, and a raw dump by
/// its first bytes.
fn open(path: &Path) -> Result<crate::input::Input> {
    let input = crate::input::open_regular_input(path, crate::input::Links::Refuse)?;
    if !looks_raw(&input.head) {
        bail!(
            "{}: not a memlens raw dump (first line is not 'memlens-raw 1')",
            path.display()
        );
    }
    Ok(input)
}

/// The longest line a raw dump may have (a stack of 128 frames is about 2.5 KB, a path 4 KB).
pub const MAX_LINE: usize = 1 << 20;

/// Parse a raw dump from a reader, a line at a time.
pub fn read_from(r: impl Read) -> Result<RawDump> {
    let mut p = Parser::default();
    if each_line(r, |n, line| p.line(n, line))? {
        return Ok(p.d);
    }
    p.end()
}

/// The header of a raw dump (its process and sampling facts) and whether a `stack` line follows it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RawHead {
    /// Process and sampling facts.
    pub meta: crate::model::Meta,
    /// The dump has at least one `stack` line.
    pub has_stacks: bool,
}

/// Read a raw dump only up to its first `stack` line (a regular file, not a link, as [`read`]):
/// what `memlens run` needs to tell whether a dump is worth a profile, without reading its stacks.
/// The lines read are checked as [`read`] checks them; a dump that ends before any stack (its
/// `end` line or not) has no stacks.
pub fn read_head(path: &Path) -> Result<RawHead> {
    let (mut p, mut has_stacks) = (Parser::default(), false);
    each_line(open(path)?.reader(), |n, line| {
        has_stacks = line.starts_with("stack ");
        Ok(has_stacks || p.line(n, line)?)
    })
    .with_context(|| format!("{}", path.display()))?;
    Ok(RawHead {
        meta: p.d.meta,
        has_stacks,
    })
}

/// Does the raw dump at `path` end with its `end` line, that is, did the runtime finish writing
/// it? A regular file only, not a link; only its last bytes are read.
pub fn is_complete(path: &Path) -> bool {
    use std::os::unix::fs::FileExt;
    let Ok((f, meta)) = crate::input::open_regular(path, crate::input::Links::Refuse) else {
        return false;
    };
    let mut tail = [0u8; 4];
    meta.len() >= 4 && f.read_exact_at(&mut tail, meta.len() - 4).is_ok() && &tail == b"end\n"
}

/// Feed `take` each line of `r` (numbered from 1, without its newline; bytes that are not UTF-8
/// as U+FFFD) until it answers true; whether it did.
fn each_line(r: impl Read, mut take: impl FnMut(usize, &str) -> Result<bool>) -> Result<bool> {
    let mut r = BufReader::with_capacity(1 << 16, r);
    let mut buf = Vec::new();
    for n in 1.. {
        buf.clear();
        let got = (&mut r)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut buf)?;
        if got == 0 {
            break;
        }
        if buf.len() > MAX_LINE {
            bail!(
                "line {n} is longer than {} KiB: not a raw dump",
                MAX_LINE >> 10
            );
        }
        let mut line = &buf[..];
        line = line.strip_suffix(b"\n").unwrap_or(line);
        line = line.strip_suffix(b"\r").unwrap_or(line);
        // A path that is not UTF-8 must not cost the whole profile: such bytes become U+FFFD.
        if take(n, &String::from_utf8_lossy(line))? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// True when `bytes` start like a raw dump (used to pick the reader).
pub fn looks_raw(bytes: &[u8]) -> bool {
    bytes.starts_with(b"memlens-raw ")
}

#[derive(PartialEq, Default)]
enum Part {
    #[default]
    Magic,
    Header,
    Maps,
    Stacks,
}

/// Parse the text of a raw dump.
pub fn parse(text: &str) -> Result<RawDump> {
    let mut p = Parser::default();
    for (i, line) in text.lines().enumerate() {
        if p.line(i + 1, line)? {
            return Ok(p.d);
        }
    }
    p.end()
}

/// The parser's state between lines.
#[derive(Default)]
struct Parser {
    d: RawDump,
    part: Part,
    seen: Seen,
}

impl Parser {
    /// The input ended before the `end` line.
    fn end(self) -> Result<RawDump> {
        if self.part == Part::Magic {
            bail!("not a memlens raw dump (first line is not 'memlens-raw 1')");
        }
        bail!(
            "truncated raw dump (no final 'end' line: the process may have died while writing it)"
        )
    }

    /// Take line `n`; true at the final `end`.
    fn line(&mut self, n: usize, line: &str) -> Result<bool> {
        match self.part {
            Part::Magic => {
                magic(line)?;
                self.part = Part::Header;
            }
            Part::Maps if line == "end maps" => self.part = Part::Stacks,
            Part::Maps => self.d.maps.push(line.to_string()),
            _ if line == "end" => {
                self.seen.check().with_context(|| format!("line {n}"))?;
                return Ok(true);
            }
            _ if line == "maps" => {
                if self.part == Part::Stacks {
                    bail!("line {n}: second 'maps' section");
                }
                self.part = Part::Maps;
            }
            _ => self.record(n, line)?,
        }
        Ok(false)
    }

    /// Take line `n`, a `key rest` record of the header or after the maps section.
    fn record(&mut self, n: usize, line: &str) -> Result<()> {
        let d = &mut self.d;
        let at = || format!("line {n}");
        let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
        match key {
            "stack" => d.stacks.push(parse_stack(rest).with_context(at)?),
            "life" => {
                let st = d
                    .stacks
                    .last_mut()
                    .ok_or_else(|| anyhow!("line {n}: 'life' before any 'stack'"))?;
                st.life = Some(parse_life(rest).with_context(at)?);
            }
            "view" | "tl" => {
                let v = d.views.get_or_insert_with(RawViews::default);
                parse_view(v, key, rest).with_context(at)?
            }
            "module" => d.modules.push(parse_module(rest).with_context(at)?),
            "segment" => {
                let m = d
                    .modules
                    .last_mut()
                    .ok_or_else(|| anyhow!("line {n}: 'segment' before any 'module'"))?;
                m.segments.push(parse_segment(rest).with_context(at)?);
            }
            _ if self.part == Part::Header => {
                header(&mut d.meta, &mut self.seen, key, rest).with_context(at)?
            }
            _ => bail!("line {n}: unexpected record '{key}' after the maps section"),
        }
        Ok(())
    }
}

/// The first line: `memlens-raw 1`, the only version this reader knows.
fn magic(line: &str) -> Result<()> {
    match line {
        "memlens-raw 1" => Ok(()),
        l if l.starts_with("memlens-raw ") => bail!(
            "unsupported raw dump version '{}' (this memlens reads version 1)",
            &l[12..]
        ),
        _ => bail!("not a memlens raw dump (first line is not 'memlens-raw 1')"),
    }
}

/// Which required header fields were present.
#[derive(Default)]
struct Seen {
    pid: bool,
    exe: bool,
    interval: bool,
}

impl Seen {
    fn check(&self) -> Result<()> {
        for (ok, k) in [
            (self.pid, "pid"),
            (self.exe, "exe"),
            (self.interval, "interval"),
        ] {
            if !ok {
                bail!("raw dump lacks its '{k}' line");
            }
        }
        Ok(())
    }
}

fn header(m: &mut crate::model::Meta, seen: &mut Seen, key: &str, v: &str) -> Result<()> {
    match key {
        "pid" => (m.pid, seen.pid) = (num(v, key)?, true),
        "ppid" => m.ppid = num(v, key)?,
        "exe" => (m.exe, seen.exe) = (unescape(v), true),
        "cmd" => m.command = unescape(v),
        "interval" => (m.interval, seen.interval) = (num(v, key)?, true),
        "unwinder" => m.unwinder = v.to_string(),
        "active" => m.active = num::<u8>(v, key)? != 0,
        "reason" => m.reason = v.to_string(),
        "start_ns" => m.start_ns = num(v, key)?,
        "time_ns" => m.time_ns = num(v, key)?,
        "samples" => m.samples = num(v, key)?,
        "truncated" => m.truncated = num(v, key)?,
        "dropped" => m.dropped = num(v, key)?,
        "unwind_fallbacks" => m.unwind_fallbacks = num(v, key)?,
        "max_depth" => m.max_depth = num(v, key)?,
        "dropped_bytes" => m.dropped_bytes = num(v, key)?,
        "max_stacks" => m.max_stacks = num(v, key)?,
        "table_full" => m.table_full = num(v, key)?,
        "untracked" => m.untracked = num(v, key)?,
        "cost_ns" => m.cost.sampled_ns = num(v, key)?,
        "cost_calls" => m.cost.calls = num(v, key)?,
        "cpu_ns" => m.cost.cpu_ns = num(v, key)?,
        "note" => m.notes.push(unescape(v)),
        // A newer runtime may add facts; they are not needed to build the profile.
        _ if !key.is_empty()
            && key
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b == b'_' || b.is_ascii_digit()) => {}
        _ => bail!("unrecognised record '{key}'"),
    }
    Ok(())
}

/// Undo the runtime's path escaping: `\xHH` is the byte HH (a control byte or `\\`).
pub fn unescape(v: &str) -> String {
    if !v.contains("\\x") {
        return v.to_string();
    }
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 2..i + 4)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (b[i], b.get(i + 1), hex) {
            (b'\\', Some(b'x'), Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A counter the runtime writes as u64, kept as i64 by the model: saturate rather than fail.
fn counter(v: &str, what: &str) -> Result<i64> {
    let n: u64 = num(v, what)?;
    Ok(n.min(i64::MAX as u64) as i64)
}

fn num<T: std::str::FromStr>(v: &str, what: &str) -> Result<T> {
    v.trim()
        .parse()
        .map_err(|_| anyhow!("bad {what} value '{v}'"))
}

fn hex(v: &str, what: &str) -> Result<u64> {
    let h = v
        .strip_prefix("0x")
        .ok_or_else(|| anyhow!("bad {what} '{v}' (expected 0x…)"))?;
    u64::from_str_radix(h, 16).map_err(|_| anyhow!("bad {what} '{v}'"))
}

fn parse_module(rest: &str) -> Result<RawModule> {
    let mut f = rest.splitn(4, ' ');
    let (Some(base), Some(bid), Some(state), Some(path)) = (f.next(), f.next(), f.next(), f.next())
    else {
        bail!("module line needs: base build-id loaded|unloaded path");
    };
    let loaded = match state {
        "loaded" => true,
        "unloaded" => false,
        _ => bail!("bad module state '{state}' (expected loaded or unloaded)"),
    };
    let build_id = match bid {
        "-" => String::new(),
        b if !b.is_empty() && b.bytes().all(|c| c.is_ascii_hexdigit()) => b.to_ascii_lowercase(),
        b => bail!("bad build id '{b}'"),
    };
    Ok(RawModule {
        base: hex(base, "module base")?,
        build_id,
        loaded,
        path: unescape(path),
        segments: Vec::new(),
    })
}

fn parse_segment(rest: &str) -> Result<Segment> {
    let f: Vec<&str> = rest.split(' ').collect();
    let [vaddr, memsz, offset, flags] = f[..] else {
        bail!("segment line needs: p_vaddr p_memsz p_offset flags");
    };
    Ok(Segment {
        vaddr: hex(vaddr, "p_vaddr")?,
        memsz: hex(memsz, "p_memsz")?,
        offset: hex(offset, "p_offset")?,
        flags: flags.to_string(),
    })
}

fn parse_stack(rest: &str) -> Result<RawStack> {
    let mut f = rest.split(' ').filter(|s| !s.is_empty());
    let mut next = || {
        f.next().ok_or_else(|| {
            anyhow!("stack line needs: samples alloc_objects_fx alloc_bytes inuse_objects_fx inuse_bytes flags pc…")
        })
    };
    let samples = num(next()?, "samples")?;
    let alloc_objects_fx = counter(next()?, "alloc_objects_fx")?;
    let alloc_bytes = counter(next()?, "alloc_bytes")?;
    let inuse_objects_fx = num(next()?, "inuse_objects_fx")?;
    let inuse_bytes = num(next()?, "inuse_bytes")?;
    let flags = num(next()?, "flags")?;
    Ok(RawStack {
        samples,
        alloc_objects_fx,
        alloc_bytes,
        inuse_objects_fx,
        inuse_bytes,
        flags,
        pcs: f.map(|p| hex(p, "pc")).collect::<Result<_>>()?,
        life: None,
    })
}

fn parse_life(rest: &str) -> Result<RawLife> {
    let f: Vec<&str> = rest.split(' ').filter(|s| !s.is_empty()).collect();
    if f.len() < 5 {
        bail!("life line needs: peak_objects_fx peak_bytes age_ticks prev_inuse_bytes freed…");
    }
    Ok(RawLife {
        peak_objects_fx: num(f[0], "peak_objects_fx")?,
        peak_bytes: num(f[1], "peak_bytes")?,
        age_ticks: num(f[2], "age_ticks")?,
        prev_inuse_bytes: num(f[3], "prev_inuse_bytes")?,
        freed: f[4..]
            .iter()
            .map(|v| num(v, "freed bytes"))
            .collect::<Result<_>>()?,
    })
}

fn parse_view(v: &mut RawViews, key: &str, rest: &str) -> Result<()> {
    let f: Vec<&str> = rest.split(' ').collect();
    if key == "tl" {
        let (t, h, r, a, b, m) = match f[..] {
            [t, h, r, a, b] => (t, h, r, a, b, "-1"),
            [t, h, r, a, b, m] => (t, h, r, a, b, m),
            _ => bail!("tl line needs: ns heap rss in_use footprint [mmap]"),
        };
        v.timeline.push([
            num(t, "time")?,
            num(h, "heap")?,
            num(r, "rss")?,
            num(a, "in_use")?,
            num(b, "footprint")?,
            num(m, "mmap")?,
        ]);
        return Ok(());
    }
    let arg = |i: usize| f.get(i).copied().unwrap_or("");
    match arg(0) {
        "enabled" => v.enabled = num::<u8>(arg(1), "enabled")? != 0,
        "tsc_hz" => v.tsc_hz = num(arg(1), "tsc_hz")?,
        "life_lg0" => v.life_lg0 = num(arg(1), "life_lg0")?,
        "life_decades" => v.life_decades = num::<u8>(arg(1), "life_decades")? != 0,
        "heap" => v.heap = num(arg(1), "heap")?,
        "heap_max" => (v.heap_max, v.heap_max_ns) = (num(arg(1), key)?, num(arg(2), key)?),
        "peak" => (v.peak, v.peak_ns) = (num(arg(1), key)?, num(arg(2), key)?),
        "split" => {
            let half = |i| -> Result<(i64, u64)> { Ok((num(arg(i), key)?, num(arg(i + 1), key)?)) };
            v.split = Some([half(1)?, half(3)?]);
        }
        "allocator" => v.allocator = arg(1).to_string(),
        _ => {} // a newer runtime's fact
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const GOOD: &str = "memlens-raw 1
pid 42
ppid 1
exe /bin/true
interval 524288
unwinder fp
active 1
reason exit
start_ns 1000
time_ns 2000
samples 3
truncated 1
dropped 0
max_depth 64
module 0x555555554000 abcdef01 loaded /bin/true
segment 0x0 0x1000 0x0 r--
segment 0x1000 0x2000 0x1000 r-x
module 0x7f0000000000 - unloaded /lib/with space.so
segment 0x0 0x100 0x0 r-x
maps
555555554000-555555555000 r--p 00000000 08:01 1 /bin/true
end maps
stack 2 131072 1024 65536 512 0 0x555555555010 0x555555555020
stack 1 65536 100 0 0 1 0x555555555030
end
";

    #[test]
    fn parses_a_complete_dump() {
        let d = parse(GOOD).unwrap();
        assert_eq!(d.meta.pid, 42);
        assert_eq!(d.meta.exe, "/bin/true");
        assert_eq!(d.meta.interval, 524288);
        assert_eq!(d.meta.truncated, 1);
        assert_eq!(d.modules.len(), 2);
        assert_eq!(d.modules[0].segments.len(), 2);
        assert_eq!(d.modules[0].build_id, "abcdef01");
        assert_eq!(d.modules[1].path, "/lib/with space.so");
        assert!(!d.modules[1].loaded);
        assert_eq!(d.maps.len(), 1);
        assert_eq!(d.stacks.len(), 2);
        assert_eq!(d.stacks[0].pcs, vec![0x555555555010, 0x555555555020]);
        assert_eq!(d.stacks[1].flags, 1);
        assert_eq!(
            d.modules[0].segment_of(0x555555555010).unwrap().offset,
            0x1000
        );
        assert!(d.modules[0].segment_of(0x555555558000).is_none());
    }

    #[test]
    fn the_head_alone_and_whether_the_dump_is_complete() {
        let d = tempfile::tempdir().unwrap();
        let file = |name: &str, text: &str| {
            let p = d.path().join(name);
            std::fs::write(&p, text).unwrap();
            p
        };
        let good = file("good.raw", GOOD);
        let h = read_head(&good).unwrap();
        assert!(h.has_stacks);
        assert_eq!(h.meta, parse(GOOD).unwrap().meta);
        assert!(is_complete(&good));
        // Cut inside the stacks: the head is all there, the dump is not complete.
        let cut = file("cut.raw", &GOOD[..GOOD.find("stack 1 65536").unwrap()]);
        assert!(read_head(&cut).unwrap().has_stacks);
        assert!(!is_complete(&cut));
        // No stack at all, with or without the `end` line.
        let head = &GOOD[..GOOD.find("module").unwrap()];
        assert!(
            !read_head(&file("none.raw", &format!("{head}end\n")))
                .unwrap()
                .has_stacks
        );
        assert!(!read_head(&file("short.raw", head)).unwrap().has_stacks);
        // The head is checked as the whole dump is.
        let bad = file("bad.raw", &GOOD.replace("samples 3", "samples x"));
        let e = format!("{:#}", read_head(&bad).unwrap_err());
        assert!(e.contains("bad.raw") && e.contains("samples"), "{e}");
        assert!(read_head(&file("other.txt", "hello\n")).is_err());
        assert!(!is_complete(&d.path().join("missing.raw")));
        let link = d.path().join("link.raw");
        std::os::unix::fs::symlink(&good, &link).unwrap();
        assert!(!is_complete(&link) && read_head(&link).is_err());
    }

    #[test]
    fn missing_end_is_truncated() {
        let cut = GOOD.trim_end().trim_end_matches("end");
        let e = format!("{:#}", parse(cut).unwrap_err());
        assert!(e.contains("truncated raw dump"), "{e}");
        // Cut in the middle of the maps section too.
        let e = format!(
            "{:#}",
            parse(&GOOD[..GOOD.find("end maps").unwrap()]).unwrap_err()
        );
        assert!(e.contains("truncated raw dump"), "{e}");
    }

    #[test]
    fn errors_name_the_line() {
        let bad = GOOD.replace("stack 1 65536", "stack x 65536");
        let e = format!("{:#}", parse(&bad).unwrap_err());
        assert!(e.contains("line 24") && e.contains("samples"), "{e}");
        let bad = GOOD.replace("0x555555555030", "555555555030");
        let e = format!("{:#}", parse(&bad).unwrap_err());
        assert!(e.contains("line 24") && e.contains("pc"), "{e}");
        let bad = GOOD.replace("segment 0x1000 0x2000 0x1000 r-x", "segment 0x1000 0x2000");
        assert!(format!("{:#}", parse(&bad).unwrap_err()).contains("line 17"));
        let bad = GOOD.replace("abcdef01 loaded", "abcdef01 maybe");
        assert!(format!("{:#}", parse(&bad).unwrap_err()).contains("line 15"));
        let bad = GOOD.replace("pid 42\n", "");
        assert!(format!("{:#}", parse(&bad).unwrap_err()).contains("'pid'"));
    }

    #[test]
    fn view_records_attach_to_their_stack() {
        let text = GOOD
            .replace(
                "0x555555555020\n",
                "0x555555555020\nlife 65536 512 1000 256 0 7 0 0 0 0 0 0 0 0 0 0 0 0 0 9\n",
            )
            .replace(
                "0x555555555030\nend\n",
                "0x555555555030\nview tsc_hz 1000000000\nview heap_max 4096 77\n\
                 view allocator jemalloc\ntl 5 4096 8192 -1 -1\ntl 6 4096 8192 -1 -1 65536\nend\n",
            );
        let d = parse(&text).unwrap();
        let l = d.stacks[0].life.as_ref().unwrap();
        assert_eq!(
            (l.peak_bytes, l.age_ticks, l.prev_inuse_bytes),
            (512, 1000, 256)
        );
        assert_eq!((l.freed[1], l.freed[15]), (7, 9));
        assert!(d.stacks[1].life.is_none());
        let v = d.views.unwrap();
        assert_eq!(
            (v.tsc_hz, v.heap_max, v.heap_max_ns),
            (1000000000, 4096, 77)
        );
        assert_eq!(v.allocator, "jemalloc");
        // a point of a runtime before the split (5 fields: the mmap unknown) and one after
        assert_eq!(
            v.timeline,
            vec![[5, 4096, 8192, -1, -1, -1], [6, 4096, 8192, -1, -1, 65536]]
        );
        let long = text.replace("-1 65536\n", "-1 65536 7\n");
        assert!(format!("{:#}", parse(&long).unwrap_err()).contains("tl line needs"));
        let bad = text.replace("life 65536 512", "life 65536 x");
        assert!(format!("{:#}", parse(&bad).unwrap_err()).contains("peak_bytes"));
    }

    #[test]
    fn wrong_magic_and_version() {
        assert!(
            format!("{:#}", parse("hello\nend\n").unwrap_err()).contains("not a memlens raw dump")
        );
        assert!(format!("{:#}", parse("memlens-raw 7\nend\n").unwrap_err()).contains("version '7'"));
        assert!(format!("{:#}", parse("").unwrap_err()).contains("not a memlens raw dump"));
    }

    #[test]
    fn escaped_and_non_utf8_paths_and_u64_counters() {
        // A module whose name holds a newline and a forged record: one module, one stack.
        let forged = GOOD.replace(
            "/lib/with space.so",
            "/lib/evil\\x0astack 1 1 1 1 1 0 0x1\\x5cx.so",
        );
        let d = parse(&forged).unwrap();
        assert_eq!(d.modules[1].path, "/lib/evil\nstack 1 1 1 1 1 0 0x1\\x.so");
        assert_eq!(d.stacks.len(), 2);
        // Counters above i64::MAX saturate instead of rejecting the dump.
        let big = GOOD.replace("stack 1 65536 100", "stack 1 18446744073709551615 100");
        assert_eq!(parse(&big).unwrap().stacks[1].alloc_objects_fx, i64::MAX);
        // A path that is not UTF-8 does not cost the whole dump.
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("d.raw");
        let mut bytes = GOOD.as_bytes().to_vec();
        let at = GOOD.find("with space").unwrap();
        bytes[at] = 0xff;
        std::fs::write(&f, bytes).unwrap();
        let d = read(&f).unwrap();
        assert!(
            d.modules[1].path.contains('\u{fffd}'),
            "{}",
            d.modules[1].path
        );
    }

    #[test]
    fn unknown_header_keys_are_skipped_but_garbage_is_not() {
        let extra = GOOD.replace("max_depth 64\n", "max_depth 64\nfuture_fact 7\n");
        assert!(parse(&extra).is_ok());
        let garbage = GOOD.replace("max_depth 64\n", "max_depth 64\n\u{1}\u{2}garbage\n");
        assert!(parse(&garbage).is_err());
    }
}
