#!/usr/bin/env bash
# Load benchmarks of `memlens serve` (docs/serve.md, "Scrape latency").
#
#   scripts/serve-load.sh [SECS]
#       The end-to-end load test for SECS seconds (default 30): 20 concurrent clients scrape 3
#       programs under memlens (heap, allocs, allocs?seconds=1, /metrics, /targets in rotation; plus a
#       client that never sends its request and one that leaves in the middle of a window). Prints
#       requests and latency per endpoint; fails on any error, on a program left sampling, or on a
#       program whose own output changed. The test suite runs the same test for 3 s.
#
#   scripts/serve-load.sh redis [SCRAPES] [CLIENTS]
#       Scrape latency of one busy process: redis-server runs under `memlens run` (sampling on)
#       with 200k keys loaded while redis-benchmark keeps it busy; CLIENTS concurrent clients
#       (default 20) make SCRAPES heap scrapes in all (default 500) through `memlens serve`.
#       Prints p50/p99/max of the scrape latency and the load average. Uses target/release/memlens
#       (run `cargo build --release` first), or the binary in MEMLENS (another build, to compare).
#       Ports: MEMLENS_LOAD_PORT (default 24100) for redis, +1 for the server.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" != redis ]; then
  MEMLENS_SERVE_LOAD_SECS=${1:-30} exec cargo test --release --test e2e serve::load_20_clients_3_processes -- --nocapture
fi

scrapes=${2:-500}
clients=${3:-20}
port=${MEMLENS_LOAD_PORT:-24100}
sport=$((port + 1))
memlens=${MEMLENS:-$PWD/target/release/memlens}
[ -x "$memlens" ] || { echo "serve-load.sh: build first: cargo build --release" >&2; exit 2; }
for t in redis-server redis-benchmark redis-cli curl; do
  command -v $t >/dev/null || { echo "serve-load.sh: $t is needed (scripts/install-deps.sh)" >&2; exit 2; }
done

work=$(mktemp -d /tmp/memlens-serve-load.XXXXXX)
export MEMLENS_CTL_DIR=$work/ctl
mkdir -m 700 "$MEMLENS_CTL_DIR"
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

"$memlens" run -o "$work/redis.pb.gz" -- redis-server --port "$port" --save '' --appendonly no \
  >"$work/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-benchmark -p "$port" -q -t set -n 200000 -r 200000 -d 128 >/dev/null
redis_pid=$(redis-cli -p "$port" info server | sed -n 's/^process_id:\([0-9]*\).*/\1/p')
# Busy for the whole measurement: a benchmark in a loop (gets, sets, lists).
(while :; do redis-benchmark -p "$port" -q -t get,set,lpush,lpop -n 100000 -r 200000 -d 128 >/dev/null 2>&1; done) &
pids+=($!)

"$memlens" serve --listen "127.0.0.1:$sport" --pid "$redis_pid" >"$work/serve.log" 2>&1 &
pids+=($!)
# Every request carries the server's token (made in the control directory when it starts), from
# a header file: not on curl's command line, where any local user could read it.
for _ in $(seq 100); do [ -s "$MEMLENS_CTL_DIR/serve.token" ] && break; sleep 0.1; done
printf 'Authorization: Bearer %s\n' "$(cat "$MEMLENS_CTL_DIR/serve.token")" >"$work/auth"
for _ in $(seq 100); do curl -sf -H @"$work/auth" "http://127.0.0.1:$sport/targets" >/dev/null 2>&1 && break; sleep 0.1; done
url="http://127.0.0.1:$sport/debug/pprof/heap"
curl -sf -H @"$work/auth" -o "$work/first.pb.gz" "$url" || { echo "serve-load.sh: the first scrape failed:" >&2; cat "$work/serve.log" >&2; exit 1; }

seq "$scrapes" | xargs -P "$clients" -I{} \
  curl -s -H @"$work/auth" -o /dev/null -w '%{http_code} %{time_total}\n' "$url" >"$work/times"
load=$(cut -d' ' -f1-3 /proc/loadavg)
bad=$(awk '$1 != 200' "$work/times" | wc -l)
sort -k2 -g "$work/times" | awk -v n="$scrapes" -v c="$clients" -v bad="$bad" -v load="$load" \
  -v size="$(stat -c %s "$work/first.pb.gz")" '
  { t[NR] = $2 * 1000 }
  END {
    i50 = int(0.50 * (NR - 1)) + 1; i99 = int(0.99 * (NR - 1)) + 1
    printf "busy redis-server, %d heap scrapes, %d concurrent clients (profile %d bytes), load %s\n", n, c, size, load
    printf "%-10s %8s %8s %8s %8s %8s\n", "endpoint", "scrapes", "errors", "p50 ms", "p99 ms", "max ms"
    printf "%-10s %8d %8d %8.0f %8.0f %8.0f\n", "heap", NR, bad, t[i50], t[i99], t[NR]
  }'
[ "$bad" -eq 0 ] || { echo "serve-load.sh: $bad scrapes failed" >&2; exit 1; }
