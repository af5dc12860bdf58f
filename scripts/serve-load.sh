#!/bin/sh
# Load benchmark of `memlens serve`: 20 concurrent clients scrape 3 programs running under memlens
# (heap, allocs, allocs?seconds=1, /metrics, /targets in rotation; plus a client that never sends its
# request and one that leaves in the middle of a window), on loopback only, for SECS seconds
# (default 30). Prints requests and latency per endpoint; fails on any error, on a program left
# sampling, or on a program whose own output changed. The test suite runs the same test for 3 s.
#   scripts/serve-load.sh [SECS]
set -eu
cd "$(dirname "$0")/.."
MEMLENS_SERVE_LOAD_SECS=${1:-30} cargo test --release --test e2e serve::load_20_clients_3_processes -- --nocapture
