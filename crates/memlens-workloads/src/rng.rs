//! The pipeline's deterministic RNG: the one seeded generator the project shares (memlens-measure), so
//! the same seed makes the same decisions on every run and every machine.
pub use memlens_measure::rng::Rng;
