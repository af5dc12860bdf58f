//! What the paired workloads print, typed: one [`Block`] per block of a paired run, and the
//! profiler [`Switch`] that changes configuration inside the process.
//!
//! A paired run alternates configurations in short blocks inside one process: each round is
//! `off, c1, off, c2, …, off` with the configurations in an order shuffled per round. The study
//! compares each configuration's block with the two `off` blocks beside it.
use anyhow::{bail, Context, Result};
use std::ffi::CStr;

/// One block of a paired run, as printed on one line (`block ROUND CONFIG TICKS CYCLES …`).
///
/// The synthetic loop (C) prints the first four numbers (a tick there is one malloc); the pipeline
/// adds the split of its ticks by distance from a sample and per-block latency quantiles.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Block {
    /// Round the block belongs to.
    pub round: u32,
    /// Configuration: 0 = off, i = the i-th configuration of the run's list.
    pub config: u32,
    /// Operations timed in the block (mallocs, or pipeline ticks).
    pub ticks: u64,
    /// TSC cycles they took.
    pub cycles: u64,
    /// Ticks in which the profiler took a sample, and their cycles (pipeline only).
    pub sampled: Option<(u64, u64)>,
    /// Ticks within [`AFTER`] ticks after a sampled one, and their cycles (pipeline only).
    pub after: Option<(u64, u64)>,
    /// Per-block latency quantiles in cycles: p50, p99, p99.9 (pipeline only).
    pub quantiles: Option<[f64; 3]>,
    /// Counter deltas of the two per-tick events ([`crate::rtc`] names them on its `counters`
    /// line) summed over the sampled ticks, the ticks after, and the far ticks, in that order
    /// (pipeline, where the events could be opened).
    pub counts: Option<[u64; 6]>,
    /// The runtime's own account of the block: nanoseconds spent in its sampled path, and the
    /// process's CPU nanoseconds, both over the block (where the runtime accounts its cost).
    /// Printed as a trailing `own=NS/CPU_NS`.
    #[serde(default)]
    pub own: Option<(u64, u64)>,
}

/// Ticks after a sampled tick that count as "after" (the indirect cost's window).
pub const AFTER: u64 = 8;

impl Block {
    /// Mean cycles per tick.
    pub fn mean(&self) -> f64 {
        self.cycles as f64 / self.ticks.max(1) as f64
    }

    /// The line this block is printed as.
    pub fn line(&self) -> String {
        let mut s = format!(
            "block {} {} {} {}",
            self.round, self.config, self.ticks, self.cycles
        );
        if let (Some(a), Some(b), Some(q)) = (self.sampled, self.after, self.quantiles) {
            s += &format!(
                " {} {} {} {} {:.0} {:.0} {:.0}",
                a.0, a.1, b.0, b.1, q[0], q[1], q[2]
            );
            if let Some(c) = self.counts {
                for x in c {
                    s += &format!(" {x}");
                }
            }
        }
        if let Some((ns, cpu)) = self.own {
            s += &format!(" own={ns}/{cpu}");
        }
        s
    }

    /// Parse a line made by [`Block::line`] (or by malloc_test); `None` for other lines.
    pub fn parse(line: &str) -> Option<Result<Block>> {
        let rest = line.strip_prefix("block ")?;
        Some(Self::parse_fields(rest).with_context(|| format!("bad block line '{line}'")))
    }

    fn parse_fields(rest: &str) -> Result<Block> {
        let mut own = None;
        let mut v: Vec<f64> = Vec::new();
        for f in rest.split_whitespace() {
            match f.strip_prefix("own=") {
                Some(o) => {
                    let (a, b) = o.split_once('/').context("own=NS/CPU_NS")?;
                    own = Some((a.parse()?, b.parse()?));
                }
                None => v.push(f.parse::<f64>()?),
            }
        }
        if ![4, 11, 17].contains(&v.len()) {
            bail!("expected 4, 11 or 17 numbers, found {}", v.len());
        }
        let mut b = Block {
            round: v[0] as u32,
            config: v[1] as u32,
            ticks: v[2] as u64,
            cycles: v[3] as u64,
            own,
            ..Block::default()
        };
        if v.len() == 17 {
            let mut c = [0u64; 6];
            for (x, y) in c.iter_mut().zip(&v[11..]) {
                *x = *y as u64;
            }
            b.counts = Some(c);
        }
        if v.len() >= 11 {
            b.sampled = Some((v[4] as u64, v[5] as u64));
            b.after = Some((v[6] as u64, v[7] as u64));
            b.quantiles = Some([v[8], v[9], v[10]]);
        }
        Ok(b)
    }
}

/// A configuration a paired run switches to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Config {
    /// No profiling.
    Off,
    /// memlens sampling at this interval (bytes; the runtime must be loaded, inactive).
    Memlens(u64),
    /// jemalloc's profiler at 2^lg bytes (jemalloc loaded with `prof:true,prof_active:false`).
    Jemalloc(u32),
    /// The k-th placebo: switched to exactly as [`Config::Off`] is, so its blocks show what the
    /// pairing reads when nothing changes (an A/A comparison).
    Placebo(u32),
}

/// Parse a configuration list: `m<BYTES>`, `j<LG>` or `p<K>`, comma-separated (the same syntax
/// as malloc_test's `--paired`).
pub fn parse_configs(list: &str) -> Result<Vec<Config>> {
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (k, v) = s.split_at(1);
            let n: u64 = v
                .parse()
                .with_context(|| format!("bad configuration '{s}'"))?;
            match k {
                "m" if n > 0 => Ok(Config::Memlens(n)),
                "j" if n < 40 => Ok(Config::Jemalloc(n as u32)),
                "p" if n < 1000 => Ok(Config::Placebo(n as u32)),
                _ => bail!("bad configuration '{s}' (m<BYTES>, j<LG> or p<K>)"),
            }
        })
        .collect()
}

type StartFn = unsafe extern "C" fn() -> i32;
type IntervalFn = unsafe extern "C" fn(usize) -> i32;
type SamplesFn = unsafe extern "C" fn() -> u64;
/// `memlens_cost(struct memlens_cost *)`: sampled_ns, calls, cpu_ns.
type CostFn = unsafe extern "C" fn(*mut [u64; 3]) -> i32;
type MallctlFn = unsafe extern "C" fn(
    *const libc::c_char,
    *mut libc::c_void,
    *mut usize,
    *mut libc::c_void,
    usize,
) -> i32;

fn sym(name: &CStr) -> Option<*mut libc::c_void> {
    // SAFETY: dlsym with a NUL-terminated name; a null result means absent.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
    (!p.is_null()).then_some(p)
}

/// The profilers' controls found in this process with dlsym: memlens's C API and jemalloc's
/// `mallctl`. Either may be absent (then configurations that need it are refused).
#[derive(Clone, Copy)]
pub struct Switch {
    start: Option<StartFn>,
    stop: Option<StartFn>,
    reset: Option<StartFn>,
    interval: Option<IntervalFn>,
    samples: Option<SamplesFn>,
    cost: Option<CostFn>,
    mallctl: Option<MallctlFn>,
}

impl Switch {
    /// Look the controls up.
    pub fn find() -> Switch {
        // SAFETY: each symbol, when present, has the C signature memlens.h / jemalloc declare.
        unsafe {
            Switch {
                start: sym(c"memlens_start").map(|p| std::mem::transmute::<_, StartFn>(p)),
                stop: sym(c"memlens_stop").map(|p| std::mem::transmute::<_, StartFn>(p)),
                reset: sym(c"memlens_reset").map(|p| std::mem::transmute::<_, StartFn>(p)),
                interval: sym(c"memlens_set_interval")
                    .map(|p| std::mem::transmute::<_, IntervalFn>(p)),
                samples: sym(c"memlens_thread_samples")
                    .map(|p| std::mem::transmute::<_, SamplesFn>(p)),
                cost: sym(c"memlens_cost").map(|p| std::mem::transmute::<_, CostFn>(p)),
                mallctl: sym(c"mallctl").map(|p| std::mem::transmute::<_, MallctlFn>(p)),
            }
        }
    }

    /// Can this process switch to `c`?
    pub fn check(&self, c: Config) -> Result<()> {
        match c {
            Config::Memlens(_) if self.start.is_none() || self.interval.is_none() => {
                bail!("memlens configurations need the runtime (memlens run --inactive)")
            }
            Config::Jemalloc(_) if self.mallctl.is_none() => {
                bail!("jemalloc configurations need jemalloc preloaded with MALLOC_CONF=prof:true")
            }
            _ => Ok(()),
        }
    }

    /// Samples the memlens runtime took in the calling thread (0 without the runtime).
    #[inline]
    pub fn thread_samples(&self) -> u64 {
        // SAFETY: memlens_thread_samples takes no argument and only reads TLS.
        self.samples.map_or(0, |f| unsafe { f() })
    }

    /// The runtime's own account so far: (ns in its sampled path, the process's CPU ns); None
    /// without a runtime that keeps it.
    pub fn own_cost(&self) -> Option<(u64, u64)> {
        let f = self.cost?;
        let mut c = [0u64; 3];
        // SAFETY: struct memlens_cost is three uint64_t, written through the pointer.
        (unsafe { f(&mut c) } == 0).then_some((c[0], c[2]))
    }

    fn je_active(&self, on: bool) -> Result<()> {
        let Some(m) = self.mallctl else { return Ok(()) };
        let mut v = on;
        // SAFETY: prof.active is a bool written through a pointer of its size.
        let r = unsafe {
            m(
                c"prof.active".as_ptr(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                &mut v as *mut bool as *mut libc::c_void,
                1,
            )
        };
        if r != 0 {
            bail!("mallctl prof.active failed ({r}): is jemalloc started with prof:true?");
        }
        Ok(())
    }

    /// Switch to `c` (from whatever was on).
    pub fn apply(&self, c: Config) -> Result<()> {
        match c {
            Config::Off | Config::Placebo(_) => {
                if let Some(stop) = self.stop {
                    // SAFETY: C API without arguments.
                    unsafe { stop() };
                }
                self.je_active(false)
            }
            Config::Memlens(r) => {
                self.check(c)?;
                // SAFETY: checked present above; plain C calls.
                unsafe {
                    (self.interval.unwrap())(r as usize);
                    (self.start.unwrap())();
                }
                Ok(())
            }
            Config::Jemalloc(lg) => {
                self.check(c)?;
                let mut v: usize = lg as usize;
                // SAFETY: prof.reset takes the new lg_prof_sample as a size_t.
                let r = unsafe {
                    (self.mallctl.unwrap())(
                        c"prof.reset".as_ptr(),
                        std::ptr::null_mut(),
                        std::ptr::null_mut(),
                        &mut v as *mut usize as *mut libc::c_void,
                        std::mem::size_of::<usize>(),
                    )
                };
                if r != 0 {
                    bail!("mallctl prof.reset failed ({r})");
                }
                self.je_active(true)
            }
        }
    }

    /// Zero memlens's cumulative counts (the start of a measured window).
    pub fn reset(&self) -> Result<()> {
        let Some(f) = self.reset else {
            bail!("a profile window needs the memlens runtime (memlens run --inactive)")
        };
        // SAFETY: C API without arguments.
        unsafe { f() };
        Ok(())
    }
}

/// The block schedule of a paired run: per round `off, c, off, c', …, off`, configurations
/// (numbered from 1) shuffled per round by `seed`. Returns (round, config) per block.
pub fn schedule(configs: usize, rounds: u32, seed: u64) -> Vec<(u32, u32)> {
    let mut rng = crate::rng::Rng::new(seed);
    let mut out = Vec::with_capacity(rounds as usize * (2 * configs + 1));
    for r in 0..rounds {
        let mut order: Vec<u32> = (1..=configs as u32).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        for c in order {
            out.push((r, 0));
            out.push((r, c));
        }
        out.push((r, 0));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_lines_round_trip() {
        let b = Block {
            round: 3,
            config: 2,
            ticks: 100,
            cycles: 5000,
            sampled: Some((2, 900)),
            after: Some((10, 700)),
            quantiles: Some([40.0, 90.0, 300.0]),
            counts: None,
            own: None,
        };
        assert_eq!(Block::parse(&b.line()).unwrap().unwrap(), b);
        let with = Block {
            counts: Some([1, 2, 3, 4, 5, 6]),
            ..b.clone()
        };
        assert_eq!(Block::parse(&with.line()).unwrap().unwrap(), with);
        let own = Block {
            own: Some((1200, 5_000_000)),
            ..Block::default()
        };
        assert_eq!(Block::parse(&own.line()).unwrap().unwrap(), own);
        assert!(Block::parse("block 1 0 64 6400 own=1").unwrap().is_err());
        let c = Block::parse("block 1 0 64 6400").unwrap().unwrap();
        assert_eq!((c.mean(), c.sampled), (100.0, None));
        assert!(Block::parse("block 1 x").unwrap().is_err());
        assert!(Block::parse("switch 1 2 3").is_none());
    }

    #[test]
    fn schedule_alternates_with_off_and_covers_every_config() {
        let s = schedule(3, 4, 1);
        assert_eq!(s.len(), 4 * 7);
        for (i, (_, c)) in s.iter().enumerate() {
            assert_eq!(*c == 0, i % 7 % 2 == 0, "{s:?}");
        }
        for r in 0..4 {
            let mut cs: Vec<u32> = s
                .iter()
                .filter(|b| b.0 == r && b.1 > 0)
                .map(|b| b.1)
                .collect();
            cs.sort();
            assert_eq!(cs, [1, 2, 3]);
        }
        assert_ne!(schedule(3, 4, 1), schedule(3, 4, 2));
        assert_eq!(
            parse_configs("m65536,j19,p0").unwrap(),
            [
                Config::Memlens(65536),
                Config::Jemalloc(19),
                Config::Placebo(0)
            ]
        );
        assert!(parse_configs("x1").is_err() && parse_configs("m0").is_err());
    }
}
