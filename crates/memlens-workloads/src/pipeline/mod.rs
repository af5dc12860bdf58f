//! The realistic workload of the study: a latency-critical trading pipeline, quote in → order out.
//!
//! ```text
//!  feed thread            book thread                      strategy thread
//!  generate quote text ─▶ parse → Box<Quote> → update  ─▶  decide → Box<Order> → serialise
//!  (TSC stamp)            the instrument's order book       (TSC again: tick-to-order latency)
//!                         → Box<Signal>
//! ```
//!
//! Three threads connected by bounded queues (`sync_channel`), so a quote waits behind at most a
//! queue's worth of others and the latency reflects the cost of the work, not an ever-growing backlog.
//! Every stage allocates as real code does (strings, boxed messages, vectors, BTreeMap nodes), and the
//! books are pre-populated to a working set well beyond L2. Given the seed, the quotes, decisions and
//! orders are the same on every run (their checksum is reported); only the timings vary.
use anyhow::{bail, Context, Result};
use memlens_measure::tsc;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use std::thread;

pub(crate) mod book;
pub(crate) mod feed;
pub(crate) mod strategy;

use book::Book;
use feed::{Feed, RawQuote};

/// Run the trading pipeline and print tick-to-order latency as one JSON line
#[derive(Debug, Clone, clap::Args)]
#[command(
    after_help = "Example:\n  memlens workload pipeline --seed 1 --quotes 50000 --instruments 4096"
)]
pub struct PipelineArgs {
    /// Seed of the quote generator (same seed → same quotes, decisions and orders)
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Quotes to push through the pipeline
    #[arg(long, default_value_t = 10_000)]
    pub quotes: u64,
    /// Instruments (order books)
    #[arg(long, default_value_t = 4096)]
    pub instruments: usize,
    /// Price levels kept per side of each book
    #[arg(long, default_value_t = 32)]
    pub levels: usize,
    /// Capacity of each queue between threads, in packets of 1-32 quotes
    #[arg(long, default_value_t = 64)]
    pub queue: usize,
    /// Quotes per second the feed delivers (0 = as fast as the pipeline takes them)
    #[arg(long, default_value_t = 40_000)]
    pub rate: u64,
}

/// Validated parameters.
#[derive(Debug, Clone)]
pub struct Config {
    pub seed: u64,
    pub quotes: u64,
    pub instruments: usize,
    pub levels: usize,
    pub queue: usize,
    pub rate: u64,
}

impl PipelineArgs {
    pub fn config(&self) -> Result<Config> {
        use memlens_measure::usage;
        if self.quotes == 0 {
            return Err(usage("--quotes must be at least 1"));
        }
        if self.instruments == 0 || self.instruments > 1_000_000 {
            return Err(usage("--instruments must be between 1 and 1000000"));
        }
        if self.levels == 0 || self.levels > 10_000 {
            return Err(usage("--levels must be between 1 and 10000"));
        }
        if self.queue == 0 {
            return Err(usage("--queue must be at least 1"));
        }
        Ok(Config {
            seed: self.seed,
            quotes: self.quotes,
            instruments: self.instruments,
            levels: self.levels,
            queue: self.queue,
            rate: self.rate,
        })
    }
}

/// Tick-to-order latency in one unit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Latency {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

/// What one run reports (one JSON line on stdout, starting with [`Metrics::PREFIX`]); programs
/// that start the workload read it back with serde, so a renamed field fails to compile there.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Metrics {
    /// Always `pipeline`.
    pub workload: String,
    /// Seed of the quote generator.
    pub seed: u64,
    /// Quotes pushed through.
    pub quotes: u64,
    /// Instruments (order books).
    pub instruments: usize,
    /// Price levels kept per side of each book.
    pub levels: usize,
    /// Orders sent (one per quote).
    pub orders: u64,
    /// FNV-1a of every serialised order, in order: equal across runs with the same seed.
    pub checksum: String,
    /// Price levels in all books after pre-population (the working set's size in levels).
    pub book_levels: usize,
    /// Tick-to-order latency in TSC cycles.
    pub latency_cycles: Latency,
    /// Tick-to-order latency in nanoseconds.
    pub latency_ns: Latency,
    /// Wall time of the run.
    pub seconds: f64,
}

impl Metrics {
    /// How the JSON line of a run starts (the `workload` field comes first).
    pub const PREFIX: &'static str = "{\"workload\":\"pipeline\"";

    /// The metrics in the first line of `stdout` that starts with [`Metrics::PREFIX`].
    pub fn find(stdout: &str) -> Result<Metrics> {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(Self::PREFIX))
            .context("the pipeline printed no result line")?;
        serde_json::from_str(line).context("the pipeline's result line is not its metrics")
    }
}

struct StrategyOut {
    latencies: Vec<u64>,
    checksum: u64,
    orders: u64,
}

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h = (h ^ *b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Books filled to `levels` per side around each instrument's starting mid, before any quote is
/// stamped, so the measured part runs against the full working set.
fn populate(cfg: &Config) -> Vec<Book> {
    (0..cfg.instruments)
        .map(|i| {
            let mut b = Book::default();
            let mid = feed::start_mid(i);
            for k in 1..=cfg.levels as i64 {
                b.apply(true, mid - k, 100 * k as u64, 0, cfg.levels);
                b.apply(false, mid + k, 100 * k as u64, 0, cfg.levels);
            }
            b
        })
        .collect()
}

/// Quotes travel in packets (as market data does: several updates per datagram), 1 to 32 quotes
/// each: one queue hand-off per packet instead of per quote keeps thread wake-ups from swamping
/// the work on a machine with few cores.
const MAX_PACKET: u64 = 32;

fn feed_thread(cfg: Config, tx: SyncSender<Vec<RawQuote>>) {
    let mut feed = Feed::new(cfg.seed, cfg.instruments, cfg.levels);
    let mut sizes = crate::rng::Rng::new(cfg.seed ^ 0x5eed_0f9a_c4e7);
    let mut left = cfg.quotes;
    let start = std::time::Instant::now();
    while left > 0 {
        // Packets arrive on a schedule (--rate), not as fast as the feed can make them: with
        // queues that stay short the latency is that of the work, as on a real feed below capacity.
        if cfg.rate > 0 {
            let due = start
                + std::time::Duration::from_secs_f64((cfg.quotes - left) as f64 / cfg.rate as f64);
            let now = std::time::Instant::now();
            if due > now {
                thread::sleep(due - now);
            }
        }
        let n = (1 + sizes.below(MAX_PACKET)).min(left);
        let mut packet = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let text = feed.next_line();
            packet.push(RawQuote {
                stamp: tsc::now(),
                text,
            });
        }
        left -= n;
        if tx.send(packet).is_err() {
            return;
        }
    }
}

type Signals = Vec<Box<book::Signal>>;

fn book_thread(
    cfg: Config,
    mut books: Vec<Book>,
    rx: Receiver<Vec<RawQuote>>,
    tx: SyncSender<Signals>,
) -> Result<()> {
    let ids: HashMap<String, usize> = (0..cfg.instruments).map(|i| (feed::symbol(i), i)).collect();
    for packet in rx {
        let mut out = Vec::with_capacity(packet.len());
        for raw in packet {
            let q = feed::parse(raw).context("pipeline: malformed quote")?;
            let &i = ids
                .get(&q.symbol)
                .context("pipeline: quote for an unknown instrument")?;
            books[i].apply(q.bid, q.price, q.qty, q.seq, cfg.levels);
            // In an auction the strategy pulls its quotes: the condition codes reach the decision.
            let auction = q.conditions.iter().any(|c| c == "AUCT");
            out.push(books[i].signal(q.stamp, q.seq, i, &q.symbol, auction));
        }
        tx.send(out)
            .map_err(|_| anyhow::anyhow!("pipeline: strategy thread stopped"))?;
    }
    Ok(())
}

fn strategy_thread(cfg: Config, rx: Receiver<Signals>) -> StrategyOut {
    let mut strat = strategy::Strategy::new(cfg.instruments);
    let mut out = StrategyOut {
        latencies: Vec::with_capacity(cfg.quotes as usize),
        checksum: 0xcbf2_9ce4_8422_2325,
        orders: 0,
    };
    for batch in rx {
        for sig in batch {
            let order = strat.decide(&sig);
            let wire = strategy::serialise(&order);
            out.latencies.push(tsc::now().saturating_sub(sig.stamp));
            out.checksum = fnv(out.checksum, wire.as_bytes());
            out.orders += 1;
        }
    }
    out
}

fn latency(sorted: &[f64], scale: f64) -> Latency {
    let q = |p| memlens_measure::stats::quantile_sorted(sorted, p) * scale;
    Latency {
        mean: sorted.iter().sum::<f64>() / sorted.len() as f64 * scale,
        p50: q(0.5),
        p99: q(0.99),
        p999: q(0.999),
        max: sorted.last().copied().unwrap_or(f64::NAN) * scale,
    }
}

/// Run the pipeline once.
pub fn run(cfg: &Config) -> Result<Metrics> {
    let clock = tsc::Clock::get();
    let books = populate(cfg);
    let book_levels = books.iter().map(|b| b.bids.len() + b.asks.len()).sum();
    let (qtx, qrx) = sync_channel::<Vec<RawQuote>>(cfg.queue);
    let (stx, srx) = sync_channel::<Signals>(cfg.queue);
    let t0 = std::time::Instant::now();
    let (c1, c2, c3) = (cfg.clone(), cfg.clone(), cfg.clone());
    let feed = thread::Builder::new()
        .name("feed".into())
        .spawn(move || feed_thread(c1, qtx))?;
    let bookt = thread::Builder::new()
        .name("book".into())
        .spawn(move || book_thread(c2, books, qrx, stx))?;
    let strat = thread::Builder::new()
        .name("strategy".into())
        .spawn(move || strategy_thread(c3, srx))?;
    feed.join()
        .map_err(|_| anyhow::anyhow!("pipeline: feed thread panicked"))?;
    bookt
        .join()
        .map_err(|_| anyhow::anyhow!("pipeline: book thread panicked"))??;
    let out = strat
        .join()
        .map_err(|_| anyhow::anyhow!("pipeline: strategy thread panicked"))?;
    let seconds = t0.elapsed().as_secs_f64();
    if out.latencies.len() as u64 != cfg.quotes {
        bail!(
            "pipeline: {} of {} quotes produced an order",
            out.latencies.len(),
            cfg.quotes
        );
    }
    let mut v: Vec<f64> = out.latencies.iter().map(|&c| c as f64).collect();
    v.sort_by(|a, b| a.total_cmp(b));
    Ok(Metrics {
        workload: "pipeline".into(),
        seed: cfg.seed,
        quotes: cfg.quotes,
        instruments: cfg.instruments,
        levels: cfg.levels,
        orders: out.orders,
        checksum: format!("{:016x}", out.checksum),
        book_levels,
        latency_cycles: latency(&v, 1.0),
        latency_ns: latency(&v, 1e9 / clock.hz),
        seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small(seed: u64) -> Config {
        Config {
            seed,
            quotes: 3000,
            instruments: 64,
            levels: 8,
            queue: 16,
            rate: 0,
        }
    }

    #[test]
    fn the_result_line_reads_back() {
        let m = run(&small(1)).unwrap();
        let line = serde_json::to_string(&m).unwrap();
        let back = Metrics::find(&format!("other output\n{line}\n")).unwrap();
        assert_eq!(back.checksum, m.checksum);
        assert!((back.latency_ns.p99 / m.latency_ns.p99 - 1.0).abs() < 1e-12);
        assert!(Metrics::find("{\"workload\":\"rtc\"}").is_err());
    }

    #[test]
    fn deterministic_given_a_seed() {
        let (a, b) = (run(&small(3)).unwrap(), run(&small(3)).unwrap());
        assert_eq!(a.checksum, b.checksum);
        assert_eq!(a.orders, 3000);
        assert_ne!(a.checksum, run(&small(4)).unwrap().checksum);
        assert!(a.latency_cycles.p50 > 0.0 && a.latency_cycles.p99 >= a.latency_cycles.p50);
        assert_eq!(a.book_levels, 64 * 16);
    }

    #[test]
    fn parses_what_the_feed_generates() {
        let mut f = Feed::new(1, 10, 4);
        for _ in 0..200 {
            let line = f.next_line();
            let q = feed::parse(RawQuote {
                stamp: 5,
                text: line.clone(),
            })
            .unwrap();
            assert!(line.contains(&q.symbol) && q.stamp == 5);
        }
    }
}
