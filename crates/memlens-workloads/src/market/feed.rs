//! The market-data side: quotes generated as text lines (as they would arrive from a feed handler),
//! then parsed into heap messages. Both ends allocate the way real feed code does: a String per
//! line, a boxed message with an owned symbol and a Vec of condition codes of varying length.
use crate::rng::Rng;

/// A quote as it comes off the wire: text, stamped with the TSC when it was generated.
pub struct RawQuote {
    pub stamp: u64,
    pub text: String,
}

/// A parsed quote: one price level of one side of one instrument changed to `qty` (0 = removed).
pub struct Quote {
    pub stamp: u64,
    pub seq: u64,
    pub symbol: String,
    pub bid: bool,
    pub price: i64,
    pub qty: u64,
    pub conditions: Vec<String>,
}

const CONDITIONS: [&str; 6] = ["R", "OPEN", "AUCT", "ODDLOT", "XPIT", "FAST"];

/// Generates a deterministic stream of quotes for `symbols`, each moving around its own mid price.
pub struct Feed {
    rng: Rng,
    symbols: Vec<String>,
    mids: Vec<i64>,
    levels: u64,
    seq: u64,
}

pub fn symbol(i: usize) -> String {
    format!("I{i:05}.X")
}

/// Starting mid price of instrument `i`, in ticks (also used to pre-populate the books).
pub fn start_mid(i: usize) -> i64 {
    10_000 + (i as i64 * 37) % 5_000
}

impl Feed {
    pub fn new(seed: u64, instruments: usize, levels: usize) -> Feed {
        Feed {
            rng: Rng::new(seed),
            symbols: (0..instruments).map(symbol).collect(),
            mids: (0..instruments).map(start_mid).collect(),
            levels: levels as u64,
            seq: 0,
        }
    }

    /// The next quote as a text line: `seq|symbol|B or S|price|qty|cond,cond…`.
    pub fn next_line(&mut self) -> String {
        let r = &mut self.rng;
        let n = self.symbols.len() as u64;
        // Activity is skewed as in real markets: a third of the quotes hit the busiest 5% of names,
        // the rest spread over all of them (so the books' whole working set is touched).
        let i = if r.chance(33) {
            r.below((n / 20).max(1))
        } else {
            r.below(n)
        } as usize;
        if r.chance(10) {
            self.mids[i] += r.below(3) as i64 - 1;
        }
        let bid = r.chance(50);
        let off = 1 + r.below(self.levels) as i64;
        let price = if bid {
            self.mids[i] - off
        } else {
            self.mids[i] + off
        };
        let qty = if r.chance(15) {
            0
        } else {
            1 + r.below(50) * 100
        };
        let ncond = r.below(4) as usize;
        let mut conds = String::new();
        for k in 0..ncond {
            if k > 0 {
                conds.push(',');
            }
            conds.push_str(CONDITIONS[r.below(CONDITIONS.len() as u64) as usize]);
        }
        self.seq += 1;
        format!(
            "{}|{}|{}|{}|{}|{}",
            self.seq,
            self.symbols[i],
            if bid { 'B' } else { 'S' },
            price,
            qty,
            conds
        )
    }
}

/// Parse a line made by [`Feed::next_line`]; `None` if it is malformed (never happens for our feed,
/// but a parser that trusts its input is not what latency-critical code looks like).
pub fn parse(raw: RawQuote) -> Option<Box<Quote>> {
    let mut f = raw.text.split('|');
    let seq = f.next()?.parse().ok()?;
    let symbol = f.next()?.to_string();
    let bid = f.next()? == "B";
    let price = f.next()?.parse().ok()?;
    let qty = f.next()?.parse().ok()?;
    let conditions = f
        .next()?
        .split(',')
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect();
    Some(Box::new(Quote {
        stamp: raw.stamp,
        seq,
        symbol,
        bid,
        price,
        qty,
        conditions,
    }))
}
