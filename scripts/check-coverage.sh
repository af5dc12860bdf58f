#!/usr/bin/env bash
# How often the 95 % intervals `memlens check` judges by miss the truth, on programs whose true
# figures are known: tests/e2e/check_leaker.c (it counts every byte it asks for: peak 44.8 MB, leak
# 13.6 MB, in blocks of 160..256 bytes); "usable", 1500 buffers grown by 270 bytes to 8 KB over
# jemalloc, each realloc'd only when malloc_usable_size says it is full, as redis grows its
# listpacks and strings (it counts its bytes: 12.17 MB); and redis-server under redis-benchmark
# (truth: the mean of three checks at --interval 1, where every block of 8 bytes or more is
# sampled; heaptrack agrees within 2.5 %). Per program and interval, ROUNDS checks; for the peak and
# the leak, how many intervals lie wholly below the truth (a "held" that should not be) and wholly
# above it (a "broken" that should not be). Each side should miss in at most 2.5 % of rounds (the
# peak's lower bound is wider: see docs/check.md).
#   scripts/check-coverage.sh [ROUNDS] [PROGRAMS]      (default 40 rounds; leaker usable redis)
# Not a test; the table goes to stdout and out/check-coverage.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-40}
PROGRAMS=${2:-"leaker usable redis"}
PORT=${CHECK_COVERAGE_PORT:-21479}
cargo build --release -q
M=$PWD/target/release/memlens
W=$(mktemp -d)
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$W"' EXIT
mkdir -p out
gcc -O2 -g -o "$W/leaker" tests/e2e/check_leaker.c
cat >"$W/usable.c" <<'EOF'
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(void) {
    size_t total = 0;
    for (int i = 0; i < 1500; i++) {
        size_t n = 16;
        char *p = malloc(n);
        while (n + 270 <= 8192) {
            n += 270;
            if (n > malloc_usable_size(p)) // grown only when full, as redis's listpacks are
                p = realloc(p, n);
            memset(p + n - 270, 1, 270);
        }
        total += n; // kept to the end
    }
    printf("peak %zu\nleak %zu\n", total, total);
    return 0;
}
EOF
gcc -O2 -g -o "$W/usable" "$W/usable.c"
JEMALLOC=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2

# what the last check's JSON says: "peak_low peak_high peak leak_low leak_high leak"
figures() {
    python3 - "$W/c.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
l = {x["option"]: x for x in d["limits"]}
p, k = l["--max-peak"], l["--max-leak"]
print(p["low"], p["high"], p["figure"], k["low"], k["high"], k["figure"])
EOF
}

# one check at interval $1 of the command after it; prints its figures
check_once() {
    local r=$1
    shift
    "$M" check --interval "$r" --max-peak 1T --max-leak 1T --json "$W/c.json" -- "$@" >/dev/null 2>&1 || true
    figures
}

# redis-server checked under a fixed load, then shut down. Without jemalloc's background thread:
# the runtime can deadlock redis at start-up when jemalloc, holding its lock to create that thread,
# has the thread's TLS calloc sampled and a timeline point reads jemalloc's statistics (seen at
# 64K; docs/check.md).
redis_once() {
    local r=$1
    "$M" check --interval "$r" --max-peak 1T --max-leak 1T --json "$W/c.json" -- \
        redis-server --port "$PORT" --save '' --appendonly no --jemalloc-bg-thread no >/dev/null 2>&1 &
    local pid=$!
    for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-benchmark -p "$PORT" -q -n 50000 -c 8 -r 50000 -d 256 -t set,lpush,sadd >/dev/null
    redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
    wait "$pid" || true
    figures
}

# count the intervals that miss "$1 $2" (true peak, true leak) among the lines on stdin
tally() {
    python3 -c '
import sys, statistics
tp, tl = float(sys.argv[1]), float(sys.argv[2])
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
def side(lo, hi, t):
    below = sum(1 for r in rows if r[hi] < t)
    above = sum(1 for r in rows if r[lo] > t)
    return below, above
pb, pa = side(0, 1, tp)
lb, la = side(3, 4, tl)
med = lambda i: statistics.median(r[i] for r in rows)
print(f"{len(rows):>6} {tp/1e6:>9.2f} {med(2)/1e6:>9.2f} {pb:>5} {pa:>5} {tl/1e6:>9.2f} {med(5)/1e6:>9.2f} {lb:>5} {la:>5}")
' "$1" "$2"
}

{
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"
    printf '%-8s %-6s %6s %9s %9s %5s %5s %9s %9s %5s %5s\n' program interval rounds "peak MB" median "hi<t" "lo>t" "leak MB" median "hi<t" "lo>t"
    for prog in $PROGRAMS; do
        case $prog in
        leaker)
            read -r _ tp _ tl < <("$W/leaker" 200 4 0 0 | tr '\n' ' '; echo)
            for r in 512K 64K 8K; do
                printf '%-8s %-6s ' leaker "$r"
                for _ in $(seq "$ROUNDS"); do check_once "$r" "$W/leaker" 200 4 0 0; done | tally "$tp" "$tl"
            done
            ;;
        usable)
            read -r _ tp _ tl < <("$W/usable" | tr '\n' ' '; echo)
            for r in 512K 64K 8K; do
                printf '%-8s %-6s ' usable "$r"
                for _ in $(seq "$ROUNDS"); do LD_PRELOAD=$JEMALLOC check_once "$r" "$W/usable"; done | tally "$tp" "$tl"
            done
            ;;
        redis)
            truth=$(for _ in 1 2 3; do redis_once 1; done | python3 -c '
import sys, statistics
rows = [list(map(float, l.split())) for l in sys.stdin if l.strip()]
print(statistics.mean(r[2] for r in rows), statistics.mean(r[5] for r in rows))')
            for r in 512K 64K; do
                printf '%-8s %-6s ' redis "$r"
                for _ in $(seq "$ROUNDS"); do redis_once "$r"; done | tally $truth
            done
            ;;
        esac
    done
} | tee out/check-coverage.txt
