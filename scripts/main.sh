#!/usr/bin/env bash
# Build everything and run the main job on its built-in defaults: `memlens study`, which measures
# what heap profiling costs on this machine and recommends a sampling interval (report in out/).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cargo build --release
mkdir -p out
./target/release/memlens study --json out/study.json --csv out/study.csv --html out/study.html "$@"
