#!/usr/bin/env bash
# Harmless in production (issue 29): what the runtime costs real programs in CPU, measured on them.
#   scripts/harmless-bench.sh [REPS]      (default 5 repeats)
#
# CPU time (user + system) of each program under the runtime / bare, at 512K and 64K: the
# fragmenting 4-thread C++ service (runtime/bench/fragment.cc), perl building three hashes of
# 120 000 keys (runtime/bench/hashes.pl), python3 building a list of dicts and its JSON, sqlite3
# filling and indexing a table of 300 000 rows, redis-server under redis-benchmark (the server's CPU
# for the same requests). Bare, 512K and 64K run one after the other in each repeat; the ratio is
# taken within a repeat (adjacent runs share the machine's mood) and the median over repeats is
# shown with its range. The fork and RSS figures of issue 29 are scripts/fork-bench.sh and
# scripts/rss-bench.sh.
#
# The runtime is the one this build embeds, preloaded the way `memlens run` does it (MEMLENS_RUN_DIR
# on /dev/shm, MEMLENS_OUT, MEMLENS_MAX_STACKS 262144): only the program's own CPU is measured, not
# the CLI's conversion. The machine is shared: the load average is printed before and after;
# figures are only comparable at a similar load.
set -euo pipefail
cd "$(dirname "$0")/.."
REPS=${1:-5}
case $REPS in *[!0-9]* | "" | 0) echo "usage: scripts/harmless-bench.sh [REPS]" >&2; exit 2 ;; esac
cargo build --release -q
LIB=$(ls -t target/release/build/memlens-native-*/out/libmemlens.so | head -1)
W=$(mktemp -d /tmp/harmless-bench.XXXXXX)
RD=/dev/shm/harmless-bench.$$
mkdir -p "$RD" "$W/ctl"
chmod 700 "$W/ctl"
trap 'rm -rf "$W" "$RD"' EXIT
load() { echo "# load average: $(cut -d' ' -f1-3 /proc/loadavg)"; }
median() { sort -g | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}'; }
range() { sort -g | awk 'NR==1{lo=$1} {hi=$1} END{printf "%s-%s", lo, hi}'; }

g++ -O2 -g -pthread runtime/bench/fragment.cc -o "$W/fragment"
PY=$(python3 -c 'import sys; print(sys.executable)')
cat > "$W/py.py" <<'EOF'
import json
d = [{"key%d" % i: [i] * 5, "name": "x" * (i % 50)} for i in range(300000)]
print(len(json.dumps(d)))
EOF
cat > "$W/sq.sql" <<'EOF'
create table t(a integer primary key, b text, c real);
with recursive n(i) as (select 1 union all select i + 1 from n where i < 300000)
  insert into t select i, hex(randomblob(16)), random() from n;
create index tb on t(b);
select count(*), sum(length(b)) from t where c > 0;
EOF

# Run "$@" bare (interval "") or under the runtime at interval $1; print its user+system CPU seconds.
under() {
    local iv=$1; shift
    rm -rf "${RD:?}"/*
    if [ -z "$iv" ]; then
        /usr/bin/time -f '%U %S' -o "$W/t" "$@" >/dev/null 2>"$W/err" || { cat "$W/err" >&2; return 1; }
    else
        /usr/bin/time -f '%U %S' -o "$W/t" env LD_PRELOAD="$LIB" MEMLENS_INTERVAL="$iv" MEMLENS_RUN_DIR="$RD" \
            MEMLENS_OUT="$RD/d" MEMLENS_CTL_DIR="$W/ctl" MEMLENS_MAX_STACKS=262144 "$@" >/dev/null 2>"$W/err" \
            || { cat "$W/err" >&2; return 1; }
    fi
    tail -1 "$W/t" | awk '{print $1 + $2}'
}

# redis-server under redis-benchmark: the server's CPU (utime + stime) for the same requests.
redis_cpu() {
    local iv=$1 port
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    rm -rf "${RD:?}"/*
    local env=()
    [ -n "$iv" ] && env=(LD_PRELOAD="$LIB" MEMLENS_INTERVAL="$iv" MEMLENS_RUN_DIR="$RD" MEMLENS_OUT="$RD/d" \
        MEMLENS_CTL_DIR="$W/ctl" MEMLENS_MAX_STACKS=262144)
    env "${env[@]}" redis-server --port "$port" --save '' --appendonly no --dir "$W" >/dev/null 2>&1 &
    local pid=$!
    until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
    redis-benchmark -p "$port" -q -n 200000 -P 16 -t set,get,lpush,lpop,sadd >/dev/null 2>&1
    local ticks
    ticks=$(awk '{print $14 + $15}' "/proc/$pid/stat")
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$pid" 2>/dev/null || true
    awk -v t="$ticks" -v hz="$(getconf CLK_TCK)" 'BEGIN{print t / hz}'
}

cpu_one() {
    local name=$1; shift
    : > "$W/r512"; : > "$W/r64"
    for _ in $(seq "$REPS"); do
        if [ "$name" = redis ]; then
            b=$(redis_cpu ""); m5=$(redis_cpu 512K); m6=$(redis_cpu 64K)
        else
            b=$(under "" "$@"); m5=$(under 512K "$@"); m6=$(under 64K "$@")
        fi
        awk -v b="$b" -v m="$m5" 'BEGIN{printf "%.3f\n", m / b}' >> "$W/r512"
        awk -v b="$b" -v m="$m6" 'BEGIN{printf "%.3f\n", m / b}' >> "$W/r64"
        echo "$b" >> "$W/bare"
    done
    printf "%-26s %8s s  %6sx (%s)  %6sx (%s)\n" "$name" "$(median < "$W/bare")" \
        "$(median < "$W/r512")" "$(range < "$W/r512")" "$(median < "$W/r64")" "$(range < "$W/r64")"
    rm -f "$W/bare"
}

cpu() {
    load
    echo "# CPU (user+system) under the runtime / bare, median (min-max) of $REPS adjacent triples"
    printf "%-26s %10s  %-18s  %-18s\n" program "bare CPU" "512K" "64K"
    cpu_one "fragment (4 threads, C++)" "$W/fragment"
    cpu_one "perl, 3 hashes of 120 000" perl runtime/bench/hashes.pl
    cpu_one "python3, dicts + json" "$PY" "$W/py.py"
    cpu_one "sqlite3, 300 000 rows" sqlite3 :memory: ".read $W/sq.sql"
    cpu_one redis
    load
}

cpu
