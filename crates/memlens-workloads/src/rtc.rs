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
//! of ticks at INTERVAL (0 = exact), so the dump at exit holds the same window in every run; with
//! neither, every thread runs `--ticks` ticks and one line gives their mean and quantiles (the
//! study's runs as whole processes).
use crate::market::book::Book;
use crate::market::feed::{self, Feed, RawQuote};
use crate::market::strategy::{self, Strategy};
use crate::paired::{self, Block, Config, Switch, AFTER};
use anyhow::{Context, Result};
use memlens_measure::counters::CounterSet;
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
    /// Paired mode: configurations to alternate with off (mBYTES memlens, jLG jemalloc)
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
    /// Paired mode: seed of the block order (default: --seed); quotes and books stay those of --seed
    #[arg(long, value_name = "N")]
    pub order_seed: Option<u64>,
    /// Paired mode: per-tick counters — hw (cache and dTLB load misses, where the CPU counts them),
    /// sw (page faults and task clock: the same path on any machine), off
    #[arg(long, default_value = "off", value_name = "MODE")]
    pub counters: String,
}

/// The two events counted around each tick, by `--counters` mode.
pub fn tick_events(mode: &str) -> Result<Option<[&'static str; 2]>> {
    Ok(match mode {
        "hw" => Some(["cache-misses", "dTLB-load-misses"]),
        "sw" => Some(["page-faults", "task-clock"]),
        "off" => None,
        other => {
            return Err(usage(format!(
                "unknown --counters mode '{other}' (use hw, sw or off)"
            )))
        }
    })
}

/// Open the per-tick events for the calling thread, or say why they cannot be.
fn open_tick_counters(events: [&str; 2]) -> std::result::Result<CounterSet, String> {
    let mut set = CounterSet::open_group(&events);
    if let Some((n, Some(why))) = set.unavailable().into_iter().find(|(_, w)| w.is_some()) {
        return Err(format!("{n}: {why}"));
    }
    set.start();
    if !set.read_raw(&mut [0u64; 2]) {
        return Err("reading the counters failed".into());
    }
    Ok(set)
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
    counts: [u64; 6],
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

/// What a worker of a paired run returns: its per-block sums, and the TSC cycles its counter reads
/// took with their number (the reads sit outside the timed tick).
struct WorkerOut {
    acc: Vec<Acc>,
    read_cycles: u64,
    reads: u64,
}

/// A worker of a paired run: ticks until done, each attributed to the block it ran in. With
/// `events`, the thread's counters are read before and after every tick, off the clock, and their
/// deltas added to the tick's class (sampled, after a sample, far).
fn paired_worker(
    mut desk: Desk,
    sw: Switch,
    sh: Arc<Shared>,
    blocks: usize,
    events: Option<[&'static str; 2]>,
) -> Result<WorkerOut> {
    let mut acc = vec![Acc::default(); blocks];
    let counters = match events {
        Some(e) => Some(open_tick_counters(e).map_err(|why| anyhow::anyhow!("rtc: {why}"))?),
        None => None,
    };
    let (mut c0, mut c1) = ([0u64; 2], [0u64; 2]);
    let (mut read_cycles, mut reads) = (0u64, 0u64);
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
        if let Some(c) = &counters {
            c.read_raw(&mut c0);
        }
        let s0 = sw.thread_samples();
        let t0 = tsc::now();
        desk.tick(t0)?;
        let t1 = tsc::now();
        let dt = t1 - t0;
        let sampled = sw.thread_samples() != s0;
        if let Some(c) = &counters {
            c.read_raw(&mut c1);
            read_cycles += tsc::now() - t1;
            reads += 1;
        }
        since = if sampled { 0 } else { since.saturating_add(1) };
        if b < 0 || sh.block.load(Ordering::Relaxed) != b || dt > PREEMPTED {
            // warm-up, a tick that straddled a switch, or one the scheduler preempted (the other
            // programs of a loaded machine, not our work: at ~5 µs a tick, 1 ms is never work)
            continue;
        }
        let a = &mut acc[b as usize];
        a.ticks += 1;
        a.cycles += dt;
        if counters.is_some() {
            let class = if sampled {
                0
            } else if since <= AFTER {
                2
            } else {
                4
            };
            for k in 0..2 {
                a.counts[class + k] += c1[k].wrapping_sub(c0[k]);
            }
        }
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
    Ok(WorkerOut {
        acc,
        read_cycles,
        reads,
    })
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
        let events = tick_events(&a.counters)?;
        let (blocks, note) =
            paired_blocks(a, sw, &configs, desks(a, threads, instruments), events)?;
        for b in &blocks {
            println!("{}", b.line());
        }
        println!("counters {note}");
        return Ok(());
    }
    if let Some(r) = a.window {
        return run_window(a, sw, r, desks(a, threads, instruments));
    }
    run_plain(a, desks(a, threads, instruments))
}

/// Plain mode: every worker runs `--ticks` ticks, each timed; one line of the mean and quantiles
/// over all of them and the orders' checksum (the same on every run with the same seed).
fn run_plain(a: &RtcArgs, desks: Vec<Desk>) -> Result<()> {
    let ticks = a.ticks;
    let workers: Vec<_> = desks
        .into_iter()
        .map(|mut d| {
            std::thread::spawn(move || -> Result<(Vec<u32>, u64)> {
                let mut lat: Vec<u32> = Vec::with_capacity(ticks as usize);
                for _ in 0..ticks {
                    let t0 = tsc::now();
                    d.tick(t0)?;
                    lat.push((tsc::now() - t0).min(u32::MAX as u64) as u32);
                }
                Ok((lat, d.checksum))
            })
        })
        .collect();
    let (mut lat, mut sum) = (Vec::new(), 0u64);
    for w in workers {
        let (l, c) = w
            .join()
            .map_err(|_| anyhow::anyhow!("rtc: a worker panicked"))??;
        lat.extend(l);
        sum ^= c;
    }
    let clock = tsc::Clock::get();
    let mean = lat.iter().map(|&x| x as f64).sum::<f64>() / lat.len().max(1) as f64;
    let q = quantiles(&mut lat);
    println!(
        "rtc ticks={} mean_ns={:.1} p50_ns={:.1} p99_ns={:.1} p999_ns={:.1} checksum={sum:016x}",
        a.ticks,
        clock.ticks_to_ns(mean),
        clock.ticks_to_ns(q[0]),
        clock.ticks_to_ns(q[1]),
        clock.ticks_to_ns(q[2]),
    );
    Ok(())
}

/// A paired run: the blocks, and the `counters` note — `EVENT EVENT read_cycles=N` when the
/// per-tick events were counted (N: mean TSC cycles of one read, outside the timed tick), else
/// `n/a (reason)`.
fn paired_blocks(
    a: &RtcArgs,
    sw: Switch,
    configs: &[Config],
    desks: Vec<Desk>,
    events: Option<[&'static str; 2]>,
) -> Result<(Vec<Block>, String)> {
    if a.block_ms == 0 || a.rounds == 0 {
        return Err(usage("--block-ms and --rounds must be at least 1"));
    }
    // Probe in this thread first: where the events cannot be opened, the workers read nothing
    // (no cost on the clock) and the note says why.
    let (events, mut note) = match events {
        None => (None, "n/a (not asked for: --counters off)".to_string()),
        Some(e) => match open_tick_counters(e) {
            Ok(_) => (Some(e), String::new()),
            Err(why) => (None, format!("n/a ({why})")),
        },
    };
    let sched = paired::schedule(configs.len(), a.rounds, a.order_seed.unwrap_or(a.seed));
    let sh = Arc::new(Shared {
        block: AtomicI64::new(-1),
        done: AtomicBool::new(false),
    });
    let n = sched.len();
    let workers: Vec<_> = desks
        .into_iter()
        .map(|d| {
            let sh = sh.clone();
            std::thread::spawn(move || paired_worker(d, sw, sh, n, events))
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
    // The runtime's own account around each block (where it keeps one).
    let mut own = Vec::with_capacity(sched.len());
    for (i, &(_, c)) in sched.iter().enumerate() {
        sh.block.store(-1, Ordering::Relaxed);
        sw.apply(to(c))?;
        sh.block.store(i as i64, Ordering::Relaxed);
        let o0 = sw.own_cost();
        std::thread::sleep(block);
        own.push(
            o0.zip(sw.own_cost())
                .map(|(a, b)| (b.0.saturating_sub(a.0), b.1.saturating_sub(a.1))),
        );
    }
    sh.block.store(-1, Ordering::Relaxed);
    sw.apply(Config::Off)?;
    sh.done.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    let (mut read_cycles, mut reads) = (0u64, 0u64);
    for w in workers {
        let out = w
            .join()
            .map_err(|_| anyhow::anyhow!("rtc: a worker panicked"))??;
        read_cycles += out.read_cycles;
        reads += out.reads;
        all.push(out.acc);
    }
    if let Some(e) = events {
        note = format!(
            "{} {} read_cycles={:.0}",
            e[0],
            e[1],
            read_cycles as f64 / reads.max(1) as f64
        );
    }
    let mut blocks = Vec::new();
    for (i, &(round, config)) in sched.iter().enumerate() {
        let mut b = Block {
            round,
            config,
            sampled: Some((0, 0)),
            after: Some((0, 0)),
            counts: events.map(|_| [0; 6]),
            own: own[i],
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
            if let Some(c) = b.counts.as_mut() {
                for (x, y) in c.iter_mut().zip(acc.counts) {
                    *x += y;
                }
            }
        }
        // Quantiles of the block: the workers' own, weighted by their ticks.
        b.quantiles = Some(q.map(|x| x / b.ticks.max(1) as f64));
        blocks.push(b);
    }
    Ok((blocks, note))
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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: RtcArgs,
    }

    fn args(extra: &[&str]) -> RtcArgs {
        let mut v = vec!["rtc", "--working-set", "256K", "--threads", "1"];
        v.extend_from_slice(extra);
        Cli::parse_from(v).a
    }

    /// The per-tick counter path really runs: with software events (any machine), every counted
    /// tick adds task-clock nanoseconds to its class (the far one: no runtime here), and the note
    /// names the events and the measured cost of a read. Blocks of 50 ms: with ten runnable tasks
    /// on two CPUs a worker can get no CPU at all during a 5 ms block (0 ticks; the study skips
    /// such blocks, but this test asserts every block counted some).
    #[test]
    fn per_tick_software_counters_are_attributed_to_blocks() {
        let a = args(&["--rounds", "3", "--block-ms", "50", "--counters", "sw"]);
        let (threads, instruments) = layout(&a).unwrap();
        let events = tick_events(&a.counters).unwrap();
        let (blocks, note) = paired_blocks(
            &a,
            Switch::find(),
            &[],
            desks(&a, threads, instruments),
            events,
        )
        .unwrap();
        assert_eq!(blocks.len(), 3, "{blocks:?}");
        assert!(
            note.starts_with("page-faults task-clock read_cycles="),
            "{note}"
        );
        // every counted tick was bracketed by two reads, and they cost something
        let cost: f64 = note["page-faults task-clock read_cycles=".len()..]
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{note}"));
        assert!(cost > 0.0, "{note}");
        for b in &blocks {
            let c = b.counts.expect("counts of every block");
            assert!(b.ticks > 0, "{b:?}");
            // no runtime here: nothing sampled, every tick is far from a sample
            assert_eq!((c[0], c[1], c[2], c[3]), (0, 0, 0, 0), "{b:?}");
            assert!(
                c[5] >= b.ticks,
                "task-clock ns over {} ticks: {}",
                b.ticks,
                c[5]
            );
            assert_eq!(Block::parse(&b.line()).unwrap().unwrap(), *b);
        }
    }

    /// Without counters nothing is read and the note says why; an unknown mode is a usage error.
    #[test]
    fn counters_off_reads_nothing() {
        let a = args(&["--rounds", "1", "--block-ms", "2"]);
        let (threads, instruments) = layout(&a).unwrap();
        let (blocks, note) = paired_blocks(
            &a,
            Switch::find(),
            &[],
            desks(&a, threads, instruments),
            None,
        )
        .unwrap();
        assert!(blocks.iter().all(|b| b.counts.is_none()));
        assert!(note.starts_with("n/a ("), "{note}");
        assert!(tick_events("cache").is_err());
    }
}
