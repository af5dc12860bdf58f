#!/usr/bin/env bash
# Issue-2 speed benchmark: the malloc-test loop (512 B malloc/free pairs at call depth 10, 1 and 2
# threads) with no runtime, the runtime inactive, sampling at 64K/512K/2M with every unwinder, exact
# mode, heaptrack, and jemalloc with and without its own profiler — cycles per pair and the difference
# over the underlying allocator. Not a test: run it on a quiet machine. Extra args go to `memlens study`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release
mkdir -p out
./target/release/memlens study --workload synthetic --threads 1,2 --size 512 --depth 10 --ops 1000000 \
  --intervals 64K,512K,2M --baselines jemalloc,heaptrack --repeats 7 --exact-repeats 3 \
  --json out/bench-profiler.json --csv out/bench-profiler.csv --html out/bench-profiler.html "$@"
