//! The end-to-end tests: one binary (`cargo test --release --test e2e`), one module per feature,
//! each driving the real `memlens` binary (CARGO_BIN_EXE_memlens) against real programs. Filter by
//! module: `cargo test --release --test e2e attach::`.
mod util;

mod allocators;
mod allocators_apps;
mod allocators_attach;
mod attach;
mod bench_alloc;
mod bench_mem;
mod browser;
mod check;
mod cli;
mod containers;
mod ctl;
mod exact;
mod harmless;
mod hostile;
mod mmap;
mod musl;
mod parca;
mod profiler;
mod reach;
mod reliability;
mod report_page;
mod scale;
mod serve;
mod serve_go;
mod serve_limits;
mod serve_pyroscope;
mod shm;
mod study;
mod survival;
mod usdt;
mod views;
