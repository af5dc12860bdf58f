#!/usr/bin/env bash
# The profiler's speed benchmark: the malloc-test loop (512 B malloc/free pairs at call depth 10, 1 and 2
# threads) with the runtime inactive, sampling at 64K/512K/2M with every unwinder, exact mode,
# heaptrack, and jemalloc with and without its own profiler: core cycles per pair over glibc,
# measured in pairs within each process (runtime/bench/fastpath.sh explains how). Not a test; the
# table goes to stdout and out/bench-profiler.txt.
#   scripts/bench-profiler.sh [REPEATS]      (default 7; about 2 minutes per thread count)
# For the same question on the study's workloads (and vs tcmalloc), see `memlens study`.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-7}
cargo build --release
LIB=$(ls -t target/release/build/memlens-native-*/out/libmemlens.so | head -1)
mkdir -p out
for threads in 1 2; do
  sh runtime/bench/fastpath.sh "$LIB" "$threads" "$REPS"
  echo
done | tee out/bench-profiler.txt
