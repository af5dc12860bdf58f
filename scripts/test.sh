#!/usr/bin/env bash
# The whole test suite: system packages, formatting and lints, then every unit and end-to-end test
# (the C runtime's included: its unit tests, fuzzers and fast-path shape in memlens-native's `cunit` test, the
# runtime under real programs in tests/e2e). Heavy measurements are benchmarks, not tests: see docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -q -- -D warnings
cargo test --release --workspace 2>&1
