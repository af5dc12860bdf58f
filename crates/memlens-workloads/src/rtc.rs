//! The realistic hot path of the study: a run-to-completion trading pipeline, as latency-critical
//! systems are built. One thread per core owns its instruments and takes every quote from the wire
//! to the order itself:
//!
//! ```text
//!  quote text (pre-generated, copied into a message: the receive)
//!   → parse → Box<Quote> → update the instrument's order book (BTreeMap levels, boxed, with vectors)
//!   → Box<Signal> → strategy → Box<Order> → serialise (String)                 = one tick, TSC-timed
//! ```
//!
//! The quotes are generated before the clock starts, so a tick's latency is the work alone; the
//! books' working set is chosen against the machine's caches (`--working-set`). Every tick reads the
//! runtime's per-thread sample count before and after, so each is tagged: it took a sample, it is
//! one of the [`AFTER`] ticks after one, or it is far from any — the split of
//! direct and indirect cost.
//!
//! Modes: `--paired CONFIGS` switches the profiler in blocks inside this process and prints one
//! [`Block`] line per block; `--window INTERVAL` runs a warm-up, resets memlens, then a fixed number
//! of ticks at INTERVAL (0 = exact), so the dump at exit holds the same window in every run.
use crate::paired::{self, Block, Config, Switch, AFTER};
use crate::pipeline::book::Book;
use crate::pipeline::feed::{self, Feed, RawQuote};
use crate::pipeline::strategy::{self, Strategy};
use anyhow::{Context, Result};
use memlens_measure::{tsc, units, usage};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// Run the run-to-completion trading pipeline (quote → book → strategy → order on each core)
#[derive(Debug, Clone, clap::Args)]
#[command(after_help = "Examples:
  memlens run --inactive -- memlens workload rtc --paired m65536,m2097152 --rounds 10
  memlens workload rtc --ticks 200000 --working-set 64M")]
pub struct RtcArgs {
    /// Seed of the quotes (same seed → same quotes, books and orders)
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Working set of the order books, all threads together (e.g. 4M, 64M)
    #[arg(long, default_value = "16M", value_name = "SIZE")]
    pub working_set: String,
    /// Price levels kept per side of each book
    #[arg(long, default_value_t = 32)]
    pub levels: usize,
    /// Worker threads (default: one per CPU)
    #[arg(long)]
    pub threads: Option<usize>,
    /// Paired mode: configurations to alternate with off (m<BYTES> memlens, j<LG> jemalloc)
    #[arg(long, value_name = "LIST")]
    pub paired: Option<String>,
    /// Paired mode: block length in milliseconds
    #[arg(long, default_value_t = 20)]
    pub block_ms: u64,
    /// Paired mode: rounds (each: every configuration once, between off blocks)
    #[arg(long, default_value_t = 20)]
    pub rounds: u32,
    /// Window mode: sampling interval of the window (0 = exact)
    #[arg(long, value_name = "BYTES")]
    pub window: Option<u64>,
    /// Window and plain mode: ticks per thread
    #[arg(long, default_value_t = 100_000)]
    pub ticks: u64,
}

/// Bytes of heap one book takes per price level (a boxed level, its vector of updates and its share
/// of the BTreeMap node, with allocator headers): sizes the books to a working set.
const LEVEL_BYTES: u64 = 160;
/// Ticks longer than this many TSC cycles (1 ms at 2 GHz and more) were preempted: not counted.
const PREEMPTED: u64 = 2_000_000;
/// Quote lines pre-generated per thread (replayed in a cycle).
const LINES: usize = 1 << 15;

/// Everything a worker owns: its books, quotes and strategy (built before the clock starts).
struct Desk {
    books: Vec<Book>,
    ids: HashMap<String, usize>,
    lines: Vec<String>,
    strat: Strategy,
    levels: usize,
    next: usize,
    checksum: u64,
}

impl Desk {
    fn new(seed: u64, instruments: usize, levels: usize) -> Desk {
        let books = (0..instruments)
            .map(|i| {
                let mut b = Book::default();
                let mid = feed::start_mid(i);
                for k in 1..=levels as i64 {
                    b.apply(true, mid - k, 100 * k as u64, 0, levels);
                    b.apply(false, mid + k, 100 * k as u64, 0, levels);
                }
                b
            })
            .collect();
        let mut f = Feed::new(seed, instruments, levels);
        Desk {
            books,
            ids: (0..instruments).map(|i| (feed::symbol(i), i)).collect(),
            lines: (0..LINES).map(|_| f.next_line()).collect(),
            strat: Strategy::new(instruments),
            levels,
            next: 0,
            checksum: 0xcbf2_9ce4_8422_2325,
        }
    }

    /// One quote from receive to order.
    #[inline(never)]
    fn tick(&mut self, stamp: u64) -> Result<()> {
        let text = self.lines[self.next].clone();
        self.next = (self.next + 1) % self.lines.len();
        let q = feed::parse(RawQuote { stamp, text }).context("rtc: malformed quote")?;
        let &i = self.ids.get(&q.symbol).context("rtc: unknown instrument")?;
        self.books[i].apply(q.bid, q.price, q.qty, q.seq, self.levels);
        let auction = q.conditions.iter().any(|c| c == "AUCT");
        let sig = self.books[i].signal(q.stamp, q.seq, i, &q.symbol, auction);
        let order = self.strat.decide(&sig);
        let wire = strategy::serialise(&order);
        for b in wire.as_bytes() {
            self.checksum = (self.checksum ^ *b as u64).wrapping_mul(0x100_0000_01b3);
        }
        Ok(())
    }
}

/// Per-block sums of one worker.
#[derive(Clone, Default)]
struct Acc {
    ticks: u64,
    cycles: u64,
    sampled: (u64, u64),
    after: (u64, u64),
    q: [f64; 3],
}

struct Shared {
    block: AtomicI64,
    done: AtomicBool,
}

fn quantiles(v: &mut [u32]) -> [f64; 3] {
    if v.is_empty() {
        return [0.0; 3];
    }
    v.sort_unstable();
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize] as f64;
    [at(0.5), at(0.99), at(0.999)]
}

/// A worker of a paired run: ticks until done, each attributed to the block it ran in.
fn paired_worker(mut desk: Desk, sw: Switch, sh: Arc<Shared>, blocks: usize) -> Result<Vec<Acc>> {
    let mut acc = vec![Acc::default(); blocks];
    let mut lat: Vec<u32> = Vec::with_capacity(1 << 16);
    let (mut cur, mut since) = (-1i64, u64::MAX);
    while !sh.done.load(Ordering::Relaxed) {
        let b = sh.block.load(Ordering::Relaxed);
        if b != cur {
            if cur >= 0 {
                acc[cur as usize].q = quantiles(&mut lat);
            }
            lat.clear();
            cur = b;
        }
        let s0 = sw.thread_samples();
        let t0 = tsc::now();
        desk.tick(t0)?;
        let dt = tsc::now() - t0;
        let sampled = sw.thread_samples() != s0;
        since = if sampled { 0 } else { since.saturating_add(1) };
        if b < 0 || sh.block.load(Ordering::Relaxed) != b || dt > PREEMPTED {
            // warm-up, a tick that straddled a switch, or one the scheduler preempted (the other
            // programs of a loaded machine, not our work: at ~5 µs a tick, 1 ms is never work)
            continue;
        }
        let a = &mut acc[b as usize];
        a.ticks += 1;
        a.cycles += dt;
        if sampled {
            a.sampled.0 += 1;
            a.sampled.1 += dt;
        } else if since <= AFTER {
            a.after.0 += 1;
            a.after.1 += dt;
        }
        lat.push(dt.min(u32::MAX as u64) as u32);
    }
    if cur >= 0 {
        acc[cur as usize].q = quantiles(&mut lat);
    }
    Ok(acc)
}

/// Validated layout: threads and instruments per thread.
fn layout(a: &RtcArgs) -> Result<(usize, usize)> {
    let ws =
        units::parse_size(&a.working_set).map_err(|e| usage(format!("bad --working-set: {e}")))?;
    let threads = a
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if threads == 0 || threads > 256 {
        return Err(usage("--threads must be between 1 and 256"));
    }
    if a.levels == 0 || a.levels > 10_000 {
        return Err(usage("--levels must be between 1 and 10000"));
    }
    let per_book = LEVEL_BYTES * 2 * a.levels as u64;
    let instruments = (ws / threads as u64 / per_book).max(1) as usize;
    if instruments > 2_000_000 {
        return Err(usage("--working-set is too large"));
    }
    Ok((threads, instruments))
}

fn desks(a: &RtcArgs, threads: usize, instruments: usize) -> Vec<Desk> {
    (0..threads)
        .map(|k| Desk::new(a.seed.wrapping_add(k as u64 * 7919), instruments, a.levels))
        .collect()
}

/// Run the workload in the mode the arguments ask for; prints its lines on stdout.
pub fn run(a: &RtcArgs) -> Result<()> {
    let (threads, instruments) = layout(a)?;
    let sw = Switch::find();
    println!(
        "rtc threads={threads} instruments_per_thread={instruments} levels={} working_set_bytes={}",
        a.levels,
        LEVEL_BYTES * 2 * a.levels as u64 * instruments as u64 * threads as u64
    );
    if let Some(list) = &a.paired {
        let configs = paired::parse_configs(list).map_err(|e| usage(format!("{e:#}")))?;
        for c in &configs {
            sw.check(*c)?;
        }
        return run_paired(a, sw, &configs, desks(a, threads, instruments));
    }
    if let Some(r) = a.window {
        return run_window(a, sw, r, desks(a, threads, instruments));
    }
    let mut d = desks(a, 1, instruments).pop().context("rtc: no desk")?;
    let clock = tsc::Clock::get();
    let mut lat: Vec<u32> = Vec::with_capacity(a.ticks as usize);
    for _ in 0..a.ticks {
        let t0 = tsc::now();
        d.tick(t0)?;
        lat.push((tsc::now() - t0).min(u32::MAX as u64) as u32);
    }
    let mean = lat.iter().map(|&x| x as f64).sum::<f64>() / lat.len().max(1) as f64;
    let q = quantiles(&mut lat);
    println!(
        "rtc ticks={} mean_ns={:.1} p50_ns={:.1} p99_ns={:.1} p999_ns={:.1} checksum={:016x}",
        a.ticks,
        clock.ticks_to_ns(mean),
        clock.ticks_to_ns(q[0]),
        clock.ticks_to_ns(q[1]),
        clock.ticks_to_ns(q[2]),
        d.checksum
    );
    Ok(())
}

fn run_paired(a: &RtcArgs, sw: Switch, configs: &[Config], desks: Vec<Desk>) -> Result<()> {
    if a.block_ms == 0 || a.rounds == 0 {
        return Err(usage("--block-ms and --rounds must be at least 1"));
    }
    let sched = paired::schedule(configs.len(), a.rounds, a.seed);
    let sh = Arc::new(Shared {
        block: AtomicI64::new(-1),
        done: AtomicBool::new(false),
    });
    let n = sched.len();
    let workers: Vec<_> = desks
        .into_iter()
        .map(|d| {
            let sh = sh.clone();
            std::thread::spawn(move || paired_worker(d, sw, sh, n))
        })
        .collect();
    let block = Duration::from_millis(a.block_ms);
    let to = |c: u32| {
        if c == 0 {
            Config::Off
        } else {
            configs[c as usize - 1]
        }
    };
    // Warm-up, uncounted: every configuration once (first samples intern their stacks).
    for c in 0..=configs.len() as u32 {
        sw.apply(to(c))?;
        std::thread::sleep(block);
    }
    for (i, &(_, c)) in sched.iter().enumerate() {
        sh.block.store(-1, Ordering::Relaxed);
        sw.apply(to(c))?;
        sh.block.store(i as i64, Ordering::Relaxed);
        std::thread::sleep(block);
    }
    sh.block.store(-1, Ordering::Relaxed);
    sw.apply(Config::Off)?;
    sh.done.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for w in workers {
        all.push(
            w.join()
                .map_err(|_| anyhow::anyhow!("rtc: a worker panicked"))??,
        );
    }
    for (i, &(round, config)) in sched.iter().enumerate() {
        let mut b = Block {
            round,
            config,
            sampled: Some((0, 0)),
            after: Some((0, 0)),
            ..Block::default()
        };
        let mut q = [0.0; 3];
        for acc in all.iter().map(|v| &v[i]) {
            b.ticks += acc.ticks;
            b.cycles += acc.cycles;
            let (s, f) = (b.sampled.as_mut().unwrap(), b.after.as_mut().unwrap());
            (s.0, s.1) = (s.0 + acc.sampled.0, s.1 + acc.sampled.1);
            (f.0, f.1) = (f.0 + acc.after.0, f.1 + acc.after.1);
            for (x, a) in q.iter_mut().zip(acc.q) {
                *x += a * acc.ticks as f64;
            }
        }
        // Quantiles of the block: the workers' own, weighted by their ticks.
        b.quantiles = Some(q.map(|x| x / b.ticks.max(1) as f64));
        println!("{}", b.line());
    }
    Ok(())
}

fn run_window(a: &RtcArgs, sw: Switch, interval: u64, desks: Vec<Desk>) -> Result<()> {
    let warm = (a.ticks / 4).max(1000);
    let bar = Arc::new(Barrier::new(desks.len() + 1));
    let ticks = a.ticks;
    let workers: Vec<_> = desks
        .into_iter()
        .map(|mut d| {
            let bar = bar.clone();
            std::thread::spawn(move || -> Result<u64> {
                for _ in 0..warm {
                    d.tick(0)?;
                }
                bar.wait();
                bar.wait();
                for _ in 0..ticks {
                    d.tick(0)?;
                }
                Ok(d.checksum)
            })
        })
        .collect();
    bar.wait();
    sw.reset()?;
    sw.apply(Config::Memlens(interval))?; // 0: exact mode
    bar.wait();
    let mut sum = 0u64;
    for w in workers {
        sum ^= w
            .join()
            .map_err(|_| anyhow::anyhow!("rtc: a worker panicked"))??;
    }
    sw.apply(Config::Off)?;
    println!("rtc window interval={interval} ticks={ticks} checksum={sum:016x}");
    Ok(())
}
