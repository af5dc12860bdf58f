#!/usr/bin/env bash
# Harmless in production (issue 29): what the runtime costs real programs, measured on them.
#   scripts/harmless-bench.sh [cpu|fork|rss|all] [REPS]      (default: all, 5 repeats)
#
# cpu   CPU time (user + system) of each program under the runtime / bare, at 512K and 64K: the
#       fragmenting 4-thread C++ service (runtime/bench/fragment.cc), perl building three hashes of
#       120 000 keys (runtime/bench/hashes.pl), python3 building a list of dicts and its JSON,
#       sqlite3 filling and indexing a table of 300 000 rows, redis-server under redis-benchmark
#       (the server's CPU for the same requests). Bare, 512K and 64K run one after the other in each
#       repeat; the ratio is taken within a repeat (adjacent runs share the machine's mood) and the
#       median over repeats is shown with its range.
# fork  a program forking 300 short children that each sample and dump (runtime/tests/many_children.c):
#       wall time of `memlens run` and of the program with the runtime preloaded, against bare.
# rss   peak RSS (VmHWM, GNU time's %M) of python3, rg, redis-server, sqlite3 and node under the
#       runtime vs bare: the runtime's own memory (runtime/README.md, "The runtime's own memory").
#
# The runtime is the one this build embeds, preloaded the way `memlens run` does it (MEMLENS_RUN_DIR
# on /dev/shm, MEMLENS_OUT, MEMLENS_MAX_STACKS 262144): only the program's own CPU and memory are
# measured, not the CLI's conversion. The machine is shared: the load average is printed before and
# after each part; figures are only comparable at a similar load.
set -euo pipefail
cd "$(dirname "$0")/.."
WHAT=${1:-all}
REPS=${2:-5}
cargo build --release -q
ML=$PWD/target/release/memlens
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
gcc -O2 -g runtime/tests/many_children.c -o "$W/many_children"
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

fork() {
    load
    echo "# 300 forked children, each sampling 8 MiB and dumping: wall seconds, median (min-max) of $REPS"
    : > "$W/fb"; : > "$W/fp"; : > "$W/fr"
    for _ in $(seq "$REPS"); do
        /usr/bin/time -f '%e' -o "$W/t" "$W/many_children" 300; tail -1 "$W/t" >> "$W/fb"
        rm -rf "${RD:?}"/*
        /usr/bin/time -f '%e' -o "$W/t" env LD_PRELOAD="$LIB" MEMLENS_RUN_DIR="$RD" MEMLENS_OUT="$RD/d" \
            MEMLENS_CTL_DIR="$W/ctl" "$W/many_children" 300
        tail -1 "$W/t" >> "$W/fp"
        /usr/bin/time -f '%e' -o "$W/t" env MEMLENS_CTL_DIR="$W/ctl" "$ML" run -o "$W/f.pb.gz" -- \
            "$W/many_children" 300 2>/dev/null
        tail -1 "$W/t" >> "$W/fr"
        rm -f "$W"/f.*pb.gz
    done
    echo "bare                 $(median < "$W/fb") s ($(range < "$W/fb"))"
    echo "runtime preloaded    $(median < "$W/fp") s ($(range < "$W/fp"))"
    echo "memlens run          $(median < "$W/fr") s ($(range < "$W/fr"))  (301 profiles converted)"
    load
}

# Peak RSS in KB of "$@", bare (interval "") or under the runtime at 512K.
peak() {
    local iv=$1; shift
    rm -rf "${RD:?}"/*
    if [ -z "$iv" ]; then
        /usr/bin/time -f '%M' -o "$W/t" "$@" >/dev/null 2>&1
    else
        /usr/bin/time -f '%M' -o "$W/t" env LD_PRELOAD="$LIB" MEMLENS_INTERVAL="$iv" MEMLENS_RUN_DIR="$RD" \
            MEMLENS_OUT="$RD/d" MEMLENS_CTL_DIR="$W/ctl" MEMLENS_MAX_STACKS=262144 "$@" >/dev/null 2>&1
    fi || true
    tail -1 "$W/t"
}

redis_peak() {
    local iv=$1 port env=()
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    rm -rf "${RD:?}"/*
    [ -n "$iv" ] && env=(LD_PRELOAD="$LIB" MEMLENS_INTERVAL="$iv" MEMLENS_RUN_DIR="$RD" MEMLENS_OUT="$RD/d" \
        MEMLENS_CTL_DIR="$W/ctl" MEMLENS_MAX_STACKS=262144)
    /usr/bin/time -f '%M' -o "$W/t" env "${env[@]}" redis-server --port "$port" --save '' --appendonly no \
        --dir "$W" >/dev/null 2>&1 &
    local pid=$!
    until redis-cli -p "$port" ping >/dev/null 2>&1; do sleep 0.05; done
    redis-benchmark -p "$port" -q -n 200000 -P 16 -r 100000 -t set,lpush,sadd >/dev/null 2>&1
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
    wait "$pid" 2>/dev/null || true
    tail -1 "$W/t"
}

rss_one() {
    local name=$1; shift
    : > "$W/pb"; : > "$W/pm"
    for _ in $(seq "$REPS"); do
        if [ "$name" = redis-server ]; then
            redis_peak "" >> "$W/pb"; redis_peak 512K >> "$W/pm"
        else
            peak "" "$@" >> "$W/pb"; peak 512K "$@" >> "$W/pm"
        fi
    done
    local b m
    b=$(median < "$W/pb"); m=$(median < "$W/pm")
    awk -v n="$name" -v b="$b" -v m="$m" 'BEGIN{d = m - b; bound = (b * 0.05 > 4096 ? b * 0.05 : 4096);
        printf "%-14s %9.1f MB %9.1f MB %+8.1f MB %+6.1f%%   %s\n", n, b / 1024, m / 1024, d / 1024, d * 100 / b,
        (d <= bound ? "within" : "OVER")}'
}

rss() {
    load
    echo "# peak RSS (VmHWM) bare vs the runtime at 512K, medians of $REPS; bound: +4 MB or +5 %, whichever is larger"
    printf "%-14s %12s %12s %11s %7s\n" program bare memlens delta ""
    cat > "$W/n.js" <<'EOF'
let a = []; for (let i = 0; i < 1e6; i++) a.push({i, s: 'x' + i}); console.log(a.length);
EOF
    rss_one python3 "$PY" "$W/py.py"
    rss_one rg rg -c zzzzqq /usr/include /usr/share/doc /usr/lib/python3
    rss_one redis-server
    rss_one sqlite3 sqlite3 :memory: ".read $W/sq.sql"
    rss_one node node "$W/n.js"
    load
}

case $WHAT in
cpu) cpu ;;
fork) fork ;;
rss) rss ;;
all) cpu; echo; fork; echo; rss ;;
*) echo "usage: scripts/harmless-bench.sh [cpu|fork|rss|all] [REPS]" >&2; exit 2 ;;
esac
