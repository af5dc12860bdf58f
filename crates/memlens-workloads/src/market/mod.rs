//! The market the pipeline trades in (`rtc.rs`): a seeded feed of quote lines and their parser
//! (`feed.rs`), an instrument's order book and the signal it gives (`book.rs`), and the strategy
//! that turns a signal into an order on the wire (`strategy.rs`). Every stage allocates as real code
//! does (strings, boxed messages, vectors, BTreeMap nodes); given the seed, the quotes, decisions
//! and orders are the same on every run.
pub(crate) mod book;
pub(crate) mod feed;
pub(crate) mod strategy;
