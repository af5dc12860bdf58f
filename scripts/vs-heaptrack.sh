#!/usr/bin/env bash
# memlens (512K and 64K) against heaptrack, which traces every call, on real programs: python3
# (lists, dicts, strings, JSON), redis-server under redis-benchmark, and cc1plus (gcc's C++ compiler
# proper) compiling a large generated file. Per program and tool: peak heap, bytes live at exit
# (leaked), temporaries (each tool's own measure: see below) and the CPU time (user + system) of the
# recording, every tool's process tree included (memlens run's symbolizing at exit, heaptrack_interpret).
# Rounds run the four configurations interleaved (bare, memlens 512K, memlens 64K, heaptrack, then
# again), so drift hits all alike; medians over the rounds, min-max of the cost.
#   scripts/vs-heaptrack.sh [ROUNDS] [WORKLOADS]     (default 3 rounds; python3 redis gcc)
# Temporaries: heaptrack counts the allocations freed before any other allocation is made (share of
# all calls); memlens measures lifetimes, and gives the share of freed bytes that lived under 1 ms.
# Not a test; the table goes to stdout and out/vs-heaptrack.txt, the raw figures to
# out/vs-heaptrack.tsv. Needs heaptrack, redis-server, redis-benchmark, g++, go (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
WORKLOADS=${2:-"python3 redis gcc"}
PORT=${VS_HEAPTRACK_PORT:-21379}
cargo build --release -q
M=$PWD/target/release/memlens
for t in heaptrack heaptrack_print redis-server redis-benchmark redis-cli g++ go /usr/bin/time; do
    command -v "$t" >/dev/null || { echo "vs-heaptrack.sh: $t missing (scripts/install-deps.sh)" >&2; exit 2; }
done
W=$(mktemp -d)
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$W"' EXIT
export MEMLENS_CTL_DIR=$W/ctl
mkdir -p out

# --- the programs ---
PY=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))') # not pyenv's shim script
cat >"$W/work.py" <<'EOF'
import json
def records(n):
    return [{"id": i, "name": "user%d" % i, "tags": ["t%d" % (i % 7)] * (i % 5), "score": i * 0.5}
            for i in range(n)]
def grow(n):
    l, b = [], bytearray()
    for i in range(n):
        l.append(str(i))
        b += b"x" * 64
    return l, b
kept = []
for r in range(5):
    rs = records(100000)
    text = json.dumps(rs)
    back = json.loads(text)
    index = {d["name"]: d for d in back}
    l, b = grow(300000)
    kept.append(text[:1000])
    del rs, text, back, index, l, b
print(len(kept))
EOF
{
    echo '#include <bits/stdc++.h>'
    echo 'template <int N> struct S { std::map<std::string, std::vector<std::array<int, N>>> m;'
    echo '  std::unordered_map<int, std::set<std::string>> u;'
    echo '  std::string f(int k) { std::ostringstream o; for (auto& [a, b] : m) o << a << b.size() << k;'
    echo '    for (auto& [a, b] : u) o << a << b.size(); return o.str(); } };'
    for i in $(seq 1 40); do
        echo "std::string f$i(int k) { S<$i> s; s.m[\"a\"].push_back({}); s.u[k].insert(\"b\"); return s.f(k); }"
    done
} >"$W/big.cc"
CC1=$(g++ -print-prog-name=cc1plus)

# run TOOL OUT CMD...: CMD under TOOL (bare, m512, m64, ht), its CPU time into $W/cpu
run() {
    local tool=$1 out=$2; shift 2
    case $tool in
    bare) /usr/bin/time -o "$W/cpu" -f "%U %S" "$@" ;;
    m512) /usr/bin/time -o "$W/cpu" -f "%U %S" "$M" run --interval 512K -o "$out.pb.gz" -- "$@" ;;
    m64) /usr/bin/time -o "$W/cpu" -f "%U %S" "$M" run --interval 64K -o "$out.pb.gz" -- "$@" ;;
    ht) /usr/bin/time -o "$W/cpu" -f "%U %S" heaptrack -o "$out" "$@" ;;
    esac
}

workload() {
    local name=$1 tool=$2 out=$3
    case $name in
    python3) run "$tool" "$out" "$PY" "$W/work.py" ;;
    gcc) (cd "$W" && run "$tool" "$out" "$CC1" -quiet -imultiarch x86_64-linux-gnu -D_GNU_SOURCE -O2 big.cc -o big.s) ;;
    redis)
        run "$tool" "$out" redis-server --port "$PORT" --save '' --appendonly no --daemonize no &
        local pid=$! i
        for i in $(seq 200); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
        redis-benchmark -p "$PORT" -q -n 100000 -d 256 -r 100000 -t set,get,lpush,lpop,sadd,hset,mset >/dev/null
        redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
        wait "$pid"
        ;;
    esac
}

# figures TOOL OUT -> "peak leaked temporaries" (bytes, bytes, share)
figures() {
    local tool=$1 out=$2
    case $tool in
    bare) echo "- - -" ;;
    ht)
        heaptrack_print "$out".*zst --print-peaks 0 --print-allocators 0 --print-leaks 0 \
            --print-temporary 0 2>/dev/null | awk '
            function bytes(v) { u = substr(v, length(v)); n = v + 0
                return u == "K" ? n * 1e3 : u == "M" ? n * 1e6 : u == "G" ? n * 1e9 : n }
            /^calls to allocation functions:/ { calls = $5 }
            /^temporary memory allocations:/ { temp = $4 }
            /^peak heap memory consumption:/ { peak = bytes($5) }
            /^total memory leaked:/ { leaked = bytes($4) }
            /^suppressed leaks:/ { leaked += bytes($3) }
            END { printf "%.0f %.0f %.4f\n", peak, leaked, calls ? temp / calls : 0 }'
        ;;
    *)
        local p=$out.pb.gz peak leaked t1 tall
        peak=$("$M" report "$p" --view timeline --format json | sed -n 's/^  "heap_max_bytes": \([0-9.e+]*\),*/\1/p')
        leaked=$("$M" report "$p" --view leaks --format json |
            awk '/"totals"/ {t = 1} t && /"inuse_space"/ {gsub(/[^0-9.e+]/, "", $2); print $2; exit}')
        tall=$(go tool pprof -top -sample_index=freed_space "$p" 2>/dev/null | sed -n 's/.* of \([0-9.]*[kMG]*B\) total.*/\1/p')
        t1=$(go tool pprof -top -sample_index=freed_1ms_space "$p" 2>/dev/null | sed -n 's/.* of \([0-9.]*[kMG]*B\) total.*/\1/p')
        awk -v p="$peak" -v l="$leaked" -v a="${tall:-0B}" -v b="${t1:-0B}" '
            function bytes(v) { u = substr(v, length(v) - 1); n = v + 0
                return u == "kB" ? n * 1e3 : u == "MB" ? n * 1e6 : u == "GB" ? n * 1e9 : n }
            BEGIN { printf "%.0f %.0f %.4f\n", p, l, bytes(a) ? bytes(b) / bytes(a) : 0 }'
        ;;
    esac
}

TSV=out/vs-heaptrack.tsv
echo -e "workload\ttool\tround\tcpu_s\tpeak_bytes\tleaked_bytes\ttemporaries_share" >"$TSV"
n=0 total=$((ROUNDS * $(echo $WORKLOADS | wc -w) * 4))
for r in $(seq "$ROUNDS"); do
    for w in $WORKLOADS; do
        for tool in bare m512 m64 ht; do
            n=$((n + 1))
            printf '\rvs-heaptrack: run %d of %d (%s, %s)   ' "$n" "$total" "$w" "$tool" >&2
            out=$W/$w.$tool.$r
            workload "$w" "$tool" "$out" >/dev/null 2>"$W/err" || { cat "$W/err" >&2; exit 1; }
            cpu=$(awk '{print $1 + $2}' "$W/cpu")
            echo -e "$w\t$tool\t$r\t$cpu\t$(figures "$tool" "$out" | tr ' ' '\t')" >>"$TSV"
            rm -f "$out".*
        done
    done
done
printf '\r%60s\r' '' >&2
{
    echo "memlens vs heaptrack, $ROUNDS rounds (medians; cost: CPU time of the recording / bare, min-max); load: $(cut -d' ' -f1-3 /proc/loadavg)"
    awk -F'\t' 'NR > 1 { k = $1 SUBSEP $2; n[k]++; cpu[k, n[k]] = $4; pk[k, n[k]] = $5; lk[k, n[k]] = $6; tp[k, n[k]] = $7
                   if (!($1 in seen)) { seen[$1] = 1; order[++nw] = $1 } }
        function med(a, k, m,   i, j, t, v) { for (i = 1; i <= m; i++) v[i] = a[k, i]
            for (i = 2; i <= m; i++) { t = v[i]; for (j = i - 1; j >= 1 && v[j] + 0 > t + 0; j--) v[j + 1] = v[j]; v[j + 1] = t }
            return m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2 }
        function mb(x) { return x == "-" ? "-" : sprintf("%.2f MB", x / 1e6) }
        END {
            printf "%-8s %-14s %12s %12s %12s %10s %22s\n", "program", "tool", "peak", "leaked", "temporaries", "CPU s", "cost vs bare"
            split("bare m512 m64 ht", tools, " ")
            name["bare"] = "bare"; name["m512"] = "memlens 512K"; name["m64"] = "memlens 64K"; name["ht"] = "heaptrack"
            for (w = 1; w <= nw; w++) {
                b = order[w] SUBSEP "bare"; base = med(cpu, b, n[b])
                for (t = 1; t <= 4; t++) {
                    k = order[w] SUBSEP tools[t]; if (!n[k]) continue
                    lo = 1e9; hi = 0
                    for (i = 1; i <= n[k]; i++) { x = cpu[k, i] / base; if (x < lo) lo = x; if (x > hi) hi = x }
                    temp = tools[t] == "bare" ? "-" : tools[t] == "ht" ? sprintf("%.1f%% calls", 100 * med(tp, k, n[k])) : sprintf("%.1f%% <1ms", 100 * med(tp, k, n[k]))
                    printf "%-8s %-14s %12s %12s %12s %10.2f %8.2fx (%.2f-%.2f)\n", order[w], name[tools[t]],
                        tools[t] == "bare" ? "-" : mb(med(pk, k, n[k])), tools[t] == "bare" ? "-" : mb(med(lk, k, n[k])),
                        temp, med(cpu, k, n[k]), med(cpu, k, n[k]) / base, lo, hi
                }
            }
        }' "$TSV"
} | tee out/vs-heaptrack.txt
