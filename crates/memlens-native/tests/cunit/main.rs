//! Tests beside the runtime's C: its pure parts unit-tested in C (`runtime/tests/unit/`, one file
//! per runtime file, built here with the sanitizers and run by `cargo test`), the CFI interpreter
//! fuzzed, the raw dump writer read back by the Rust reader, the raw and state readers fed
//! arbitrary bytes, and the shape of the built fast paths checked in their disassembly.
//!
//! Run one part: `cargo test --release -p memlens-native --test cunit units::` (or `raw_writer::`,
//! `readers::`, `fastpath::`); docs/development.md says how to run the fuzzers longer by hand.
mod cbuild;
mod fastpath;
mod raw_writer;
mod readers;
mod units;
