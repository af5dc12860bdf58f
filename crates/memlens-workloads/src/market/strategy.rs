//! The strategy: a simple market maker that re-prices its own order on every tick of an instrument
//! (so every quote yields one order message), crossing the spread when the book is lopsided. Orders
//! are built as heap objects and serialised to FIX-like text, as an order gateway would.
use super::book::Signal;
use std::fmt::Write;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    New,
    Replace,
    Cancel,
    Take,
}

pub struct Order {
    pub id: u64,
    pub kind: Kind,
    pub symbol: String,
    pub buy: bool,
    pub price: i64,
    pub qty: u64,
    pub tags: Vec<(u16, String)>,
}

/// Our resting order and position in one instrument.
#[derive(Default)]
pub struct Position {
    pub net: i64,
    pub resting: Option<Box<(u64, bool, i64)>>,
}

pub struct Strategy {
    pub positions: Vec<Position>,
    next_id: u64,
}

const LIMIT: i64 = 5_000;

impl Strategy {
    pub fn new(instruments: usize) -> Strategy {
        Strategy {
            positions: (0..instruments).map(|_| Position::default()).collect(),
            next_id: 1,
        }
    }

    pub fn decide(&mut self, s: &Signal) -> Box<Order> {
        let pos = &mut self.positions[s.instrument];
        let id = self.next_id;
        self.next_id += 1;
        let total = (s.bid_depth + s.ask_depth).max(1) as i64;
        let imbalance = (s.bid_depth as i64 - s.ask_depth as i64) * 100 / total;
        let (kind, buy, price, qty) = match (s.best_bid, s.best_ask) {
            _ if s.auction => (Kind::Cancel, pos.net < 0, 0, 0),
            (Some(_), Some(a)) if imbalance > 60 && pos.net < LIMIT => (Kind::Take, true, a, 100),
            (Some(b), Some(_)) if imbalance < -60 && pos.net > -LIMIT => {
                (Kind::Take, false, b, 100)
            }
            (Some(b), Some(a)) => {
                // Lean the quote against the position: long → offer, short or flat → bid.
                let buy = pos.net <= 0;
                let px = if buy { b.min(a - 1) } else { a.max(b + 1) };
                (
                    if pos.resting.is_some() {
                        Kind::Replace
                    } else {
                        Kind::New
                    },
                    buy,
                    px,
                    200,
                )
            }
            _ => (Kind::Cancel, pos.net < 0, 0, 0),
        };
        match kind {
            Kind::Take => {
                pos.net += if buy { qty as i64 } else { -(qty as i64) };
            }
            Kind::New | Kind::Replace => pos.resting = Some(Box::new((id, buy, price))),
            Kind::Cancel => pos.resting = None,
        }
        let mut tags = vec![(60u16, s.seq.to_string())];
        if kind == Kind::Take {
            tags.push((59, "3".to_string()));
        }
        Box::new(Order {
            id,
            kind,
            symbol: s.symbol.clone(),
            buy,
            price,
            qty,
            tags,
        })
    }
}

/// FIX-like wire text of an order.
pub fn serialise(o: &Order) -> String {
    let msg_type = match o.kind {
        Kind::New | Kind::Take => 'D',
        Kind::Replace => 'G',
        Kind::Cancel => 'F',
    };
    let mut s = String::with_capacity(64);
    let _ = write!(
        s,
        "35={msg_type}|11={}|55={}|54={}|44={}|38={}|",
        o.id,
        o.symbol,
        if o.buy { 1 } else { 2 },
        o.price,
        o.qty
    );
    for (tag, v) in &o.tags {
        let _ = write!(s, "{tag}={v}|");
    }
    s
}
