#!/usr/bin/env bash
# The whole test suite: system packages, formatting and lints, then every unit and end-to-end test
# (C runtime tests included: they are driven from the end-to-end tests in tests/e2e). Heavy measurements are benchmarks,
# not tests: see docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo fmt --all -- --check
cargo clippy --release --workspace --all-targets -q -- -D warnings
cargo test --release --workspace 2>&1
