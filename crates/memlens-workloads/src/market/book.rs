//! Per-instrument order books: price levels on the heap in a BTreeMap per side, as a feed handler
//! keeps them. A few thousand instruments × dozens of levels make a working set of tens of MiB, far
//! beyond L2, so anything that evicts the books' lines (a profiler walking stacks, say) shows up in
//! latency.
use std::collections::BTreeMap;

/// One price level: total quantity and the sizes of the last updates that built it.
pub struct Level {
    pub qty: u64,
    pub updates: Vec<u64>,
    pub seq: u64,
}

#[derive(Default)]
pub struct Book {
    pub bids: BTreeMap<i64, Box<Level>>,
    pub asks: BTreeMap<i64, Box<Level>>,
}

/// What the strategy needs to know after an update.
pub struct Signal {
    /// The quote's stamp, carried as a real signal carries it (not read by this strategy).
    #[allow(dead_code)]
    pub stamp: u64,
    pub seq: u64,
    pub instrument: usize,
    pub symbol: String,
    pub best_bid: Option<i64>,
    pub best_ask: Option<i64>,
    pub bid_depth: u64,
    pub ask_depth: u64,
    pub auction: bool,
}

const KEEP_UPDATES: usize = 8;
const TOP: usize = 5;

impl Book {
    /// Set level `price` of one side to `qty` (0 removes it); keep at most `max_levels` per side by
    /// dropping the level farthest from the touch.
    pub fn apply(&mut self, bid: bool, price: i64, qty: u64, seq: u64, max_levels: usize) {
        let side = if bid { &mut self.bids } else { &mut self.asks };
        if qty == 0 {
            side.remove(&price);
            return;
        }
        let lvl = side.entry(price).or_insert_with(|| {
            Box::new(Level {
                qty: 0,
                updates: Vec::with_capacity(2),
                seq,
            })
        });
        lvl.qty = qty;
        lvl.seq = seq;
        if lvl.updates.len() == KEEP_UPDATES {
            lvl.updates.remove(0);
        }
        lvl.updates.push(qty);
        if side.len() > max_levels {
            if bid {
                side.pop_first();
            } else {
                side.pop_last();
            }
        }
    }

    pub fn signal(
        &self,
        stamp: u64,
        seq: u64,
        instrument: usize,
        symbol: &str,
        auction: bool,
    ) -> Box<Signal> {
        Box::new(Signal {
            stamp,
            seq,
            instrument,
            symbol: symbol.to_string(),
            best_bid: self.bids.last_key_value().map(|(p, _)| *p),
            best_ask: self.asks.first_key_value().map(|(p, _)| *p),
            bid_depth: self.bids.values().rev().take(TOP).map(|l| l.qty).sum(),
            ask_depth: self.asks.values().take(TOP).map(|l| l.qty).sum(),
            auction,
        })
    }
}
