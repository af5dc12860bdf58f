//! End-to-end tests (being written).
mod common;
