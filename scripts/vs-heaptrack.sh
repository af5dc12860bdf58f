#!/usr/bin/env bash
# memlens (512K and 64K) against heaptrack, which traces every call, on real programs: python3
# (lists, dicts, strings, JSON), redis-server under redis-benchmark, cc1plus (gcc's C++ compiler
# proper) compiling a large generated file, ripgrep (2 threads over /usr/share and /usr/include),
# sqlite3 (an in-memory table of 200,000 rows, an index and a GROUP BY), git pack-objects (a repository
# made here: 1,500 files over 6 commits) and perl (hashes and arrays). Per program and tool: peak heap,
# bytes live at exit (leaked), temporaries (each tool's own measure: see below), the top peak site and
# the CPU time (user + system) of the recording, every tool's process tree included (memlens run's
# symbolizing at exit, heaptrack_interpret).
# Rounds run the configurations interleaved (bare, memlens 512K, memlens 64K, heaptrack, then again),
# so drift hits all alike; medians over the rounds, min-max of the cost.
#   scripts/vs-heaptrack.sh [ROUNDS] [WORKLOADS] [TOOLS]
#     (default 3 rounds; python3 redis gcc; bare m512 m64 ht)
#   scripts/vs-heaptrack.sh 8 "rg sqlite3 git perl redis" "m512 m64 ht"   (docs/heap-views.md's accuracy table)
# memlens's peak is the split-sample estimate with its 95 % interval (report --view timeline's
# peak_estimate_bytes, peak_interval_bytes: the upper end is what the highest estimate allows, a brief
# spike being out of the samples' reach; docs/heap-views.md); its leak's interval is ±1.96·√(L·R), or [0, the bound the
# leaks view prints] when L is below 3.84 R (not resolved). The second table says, per program and
# interval, the median and range of memlens's figure over the rounds, the median as a share of
# heaptrack's median, and in how many rounds the printed interval holds heaptrack's median (the
# truth of another run: a program whose heap differs run to run, as ripgrep's does with its threads'
# timing, widens this).
# Temporaries: heaptrack counts the allocations freed before any other allocation is made (share of
# all calls); memlens measures lifetimes, and gives the share of freed bytes that lived under 1 ms.
# VS_HEAPTRACK_KEEP=DIR keeps memlens's profiles there (WORKLOAD.TOOL.ROUND.pb.gz), to read again.
# Not a test; the tables go to stdout and out/vs-heaptrack.txt, the raw figures to
# out/vs-heaptrack.tsv. Needs heaptrack, redis-server, redis-benchmark, g++, go, rg, sqlite3, git, perl
# (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-3}
WORKLOADS=${2:-"python3 redis gcc"}
TOOLS=${3:-"bare m512 m64 ht"}
PORT=${VS_HEAPTRACK_PORT:-21379}
cargo build --release -q
M=$PWD/target/release/memlens
for t in heaptrack heaptrack_print redis-server redis-benchmark redis-cli g++ go rg sqlite3 git perl /usr/bin/time; do
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
cat >"$W/work.sql" <<'EOF'
PRAGMA cache_size = -65536;
CREATE TABLE t(id INTEGER PRIMARY KEY, name TEXT, grp INTEGER, payload BLOB);
WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 200000)
INSERT INTO t SELECT x, 'name' || x, x % 997, randomblob(40 + x % 60) FROM c;
CREATE INDEX t_name ON t(name);
SELECT grp, count(*), sum(length(payload)) FROM t GROUP BY grp ORDER BY 3 DESC LIMIT 3;
SELECT count(DISTINCT substr(name, 1, 6)) FROM t;
EOF
cat >"$W/work.pl" <<'EOF'
my (%h, @a);
for my $i (1 .. 300000) { $h{"key$i"} = "v" x ($i % 64); }
for my $i (1 .. 200000) { push @a, [$i, "x$i", { n => $i }]; }
my %inv = map { $h{$_} => $_ } keys %h;
print scalar(keys %h), " ", scalar(@a), " ", scalar(keys %inv), "\n";
EOF
# a repository of 1,500 generated files over 6 commits, made once for every round
git init -q "$W/repo"
for c in 1 2 3 4 5 6; do
    for f in $(seq 1 1500); do
        [ $((f % c)) -eq 0 ] || continue
        seq "$f" $((f + 200 + c * 7)) | sed "s/^/line $c $f /" >"$W/repo/f$f.txt"
    done
    git -C "$W/repo" add -A && git -C "$W/repo" -c user.name=v -c user.email=v@x commit -qm "c$c"
done

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
    rg) run "$tool" "$out" rg -j2 -c zzqx_vs_heaptrack /usr/share /usr/include || true ;;
    sqlite3) run "$tool" "$out" sqlite3 :memory: ".read $W/work.sql" ;;
    git) run "$tool" "$out" git -C "$W/repo" pack-objects --all --threads=1 --window=50 --stdout </dev/null ;;
    perl) run "$tool" "$out" perl "$W/work.pl" ;;
    gcc) (cd "$W" && run "$tool" "$out" "$CC1" -quiet -imultiarch x86_64-linux-gnu -D_GNU_SOURCE -O2 big.cc -o big.s) ;;
    redis)
        run "$tool" "$out" redis-server --port "$PORT" --save '' --appendonly no --daemonize no \
            --jemalloc-bg-thread no &
        local pid=$! i
        for i in $(seq 200); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
        redis-benchmark -p "$PORT" -q -n 100000 -d 256 -r 100000 -t set,get,lpush,lpop,sadd,hset,mset >/dev/null
        redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
        wait "$pid"
        ;;
    esac
}

# figures TOOL OUT -> "peak leaked temporaries peak_lo peak_hi leak_lo leak_hi top_peak_site" (bytes,
# a share, a name without spaces); heaptrack's figures are exact (its intervals are the figure)
figures() {
    local tool=$1 out=$2
    case $tool in
    bare) echo "- - - - - - - -" ;;
    ht)
        heaptrack_print "$out".*zst --print-peaks 1 --print-allocators 0 --print-leaks 0 \
            --print-temporary 0 2>/dev/null | awk '
            function bytes(v) { u = substr(v, length(v)); n = v + 0
                return u == "K" ? n * 1e3 : u == "M" ? n * 1e6 : u == "G" ? n * 1e9 : n }
            /^calls to allocation functions:/ { calls = $5 }
            /^temporary memory allocations:/ { temp = $4 }
            /^peak heap memory consumption:/ { peak = bytes($5) }
            /^total memory leaked:/ { leaked = bytes($4) }
            /^suppressed leaks:/ { leaked += bytes($3) }
            /peak memory consumed over/ { want = 1; next }
            want { top = $1; want = 0 }
            END { printf "%.0f %.0f %.4f %.0f %.0f %.0f %.0f %s\n", peak, leaked, calls ? temp / calls : 0,
                         peak, peak, leaked, leaked, top == "" ? "-" : substr(top, 1, 60) }'
        ;;
    *)
        local p=$out.pb.gz t1 tall
        tall=$(go tool pprof -top -sample_index=freed_space "$p" 2>/dev/null | sed -n 's/.* of \([0-9.]*[kMG]*B\) total.*/\1/p')
        t1=$(go tool pprof -top -sample_index=freed_1ms_space "$p" 2>/dev/null | sed -n 's/.* of \([0-9.]*[kMG]*B\) total.*/\1/p')
        "$M" report "$p" --view timeline --format json >"$W/tl.json"
        "$M" report "$p" --view leaks --format json >"$W/lk.json"
        "$M" report "$p" --view peak --format json >"$W/pk.json"
        python3 - "$W" "${tall:-0B}" "${t1:-0B}" <<'EOF'
import json, math, sys
w, tall, t1 = sys.argv[1:4]
def b(v):
    for u, m in (("kB", 1e3), ("MB", 1e6), ("GB", 1e9), ("B", 1)):
        if v.endswith(u):
            return float(v[: -len(u)] or 0) * m
tl, lk, pk = (json.load(open(f"{w}/{n}.json")) for n in ("tl", "lk", "pk"))
R = float(tl["meta"]["interval"])
peak = tl["peak_estimate_bytes"] if tl.get("peak_estimate_bytes") is not None else tl["heap_max_bytes"]
lo, hi = tl.get("peak_interval_bytes") or [peak, peak]
L = float(lk["totals"].get("inuse_space", 0))
if R and L <= 3.84 * R:  # the leaks view's bound (docs/heap-views.md): not resolved
    k = L / R
    llo, lhi = 0.0, R * (k + 1.96 * math.sqrt(k + 1) + 1)
else:
    e = 1.96 * math.sqrt(L * R)
    llo, lhi = max(0.0, L - e), L + e
top = pk["functions"][0]["function"].replace(" ", "")[:60] if pk.get("functions") else "-"
share = b(t1) / b(tall) if b(tall) else 0
print(f"{peak:.0f} {L:.0f} {share:.4f} {lo:.0f} {hi:.0f} {llo:.0f} {lhi:.0f} {top}")
EOF
        ;;
    esac
}

# accuracy TSV: per program and memlens interval, the peak and the leak against heaptrack's median
accuracy() {
    python3 - "$1" <<'EOF'
import collections, statistics, sys
rows = collections.defaultdict(list)
for l in list(open(sys.argv[1]))[1:]:
    f = l.rstrip("\n").split("\t")
    if f[4] != "-":
        rows[f[0], f[1]].append(f)
progs = list(dict.fromkeys(w for w, _ in rows))
print("\naccuracy against heaptrack's median (memlens: the split-sample peak and the leak, each with its printed 95 % interval)")
print(f"{'program':8} {'tool':13} {'rounds':>6} {'peak MB median (range)':>26} {'/ht':>6} {'in':>5} "
      f"{'leak MB median (range)':>26} {'/ht':>6} {'in':>5}  top peak site (most rounds)")
for w in progs:
    ht = rows.get((w, "ht"), [])
    tp = statistics.median(float(r[4]) for r in ht) if ht else None
    tl = statistics.median(float(r[5]) for r in ht) if ht else None
    for t, name in (("m512", "memlens 512K"), ("m64", "memlens 64K"), ("ht", "heaptrack")):
        rs = rows.get((w, t))
        if not rs:
            continue
        def col(i, lo, hi, truth):
            v = [float(r[i]) for r in rs]
            m = statistics.median(v)
            rng = f"{m / 1e6:.2f} ({min(v) / 1e6:.2f}-{max(v) / 1e6:.2f})"
            if truth is None or t == "ht":
                return f"{rng:>26} {'':>6} {'':>5}"
            inside = sum(float(r[lo]) <= truth <= float(r[hi]) for r in rs)
            ratio = f"{m / truth:.2f}" if truth else "-"
            return f"{rng:>26} {ratio:>6} {inside:>2}/{len(rs):<2}"
        top = collections.Counter(r[11] for r in rs).most_common(1)[0][0]
        print(f"{w:8} {name:13} {len(rs):>6} {col(4, 7, 8, tp)} {col(5, 9, 10, tl)}  {top}")
EOF
}

TSV=out/vs-heaptrack.tsv
echo -e "workload\ttool\tround\tcpu_s\tpeak_bytes\tleaked_bytes\ttemporaries_share\tpeak_lo\tpeak_hi\tleak_lo\tleak_hi\ttop_peak_site" >"$TSV"
n=0 total=$((ROUNDS * $(echo $WORKLOADS | wc -w) * $(echo $TOOLS | wc -w)))
for r in $(seq "$ROUNDS"); do
    for w in $WORKLOADS; do
        for tool in $TOOLS; do
            n=$((n + 1))
            printf '\rvs-heaptrack: run %d of %d (%s, %s)   ' "$n" "$total" "$w" "$tool" >&2
            out=$W/$w.$tool.$r
            workload "$w" "$tool" "$out" >/dev/null 2>"$W/err" || { cat "$W/err" >&2; exit 1; }
            cpu=$(tail -n 1 "$W/cpu" | awk '{print $1 + $2}') # after "exited with non-zero status" (rg: no match)
            echo -e "$w\t$tool\t$r\t$cpu\t$(figures "$tool" "$out" | tr ' ' '\t')" >>"$TSV"
            [ -z "${VS_HEAPTRACK_KEEP:-}" ] || [ ! -e "$out.pb.gz" ] || cp "$out.pb.gz" "$VS_HEAPTRACK_KEEP/"
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
                b = order[w] SUBSEP "bare"; base = n[b] ? med(cpu, b, n[b]) : 0
                for (t = 1; t <= 4; t++) {
                    k = order[w] SUBSEP tools[t]; if (!n[k]) continue
                    lo = 1e9; hi = 0
                    for (i = 1; i <= n[k]; i++) { x = base ? cpu[k, i] / base : 0; if (x < lo) lo = x; if (x > hi) hi = x }
                    temp = tools[t] == "bare" ? "-" : tools[t] == "ht" ? sprintf("%.1f%% calls", 100 * med(tp, k, n[k])) : sprintf("%.1f%% <1ms", 100 * med(tp, k, n[k]))
                    printf "%-8s %-14s %12s %12s %12s %10.2f %8.2fx (%.2f-%.2f)\n", order[w], name[tools[t]],
                        tools[t] == "bare" ? "-" : mb(med(pk, k, n[k])), tools[t] == "bare" ? "-" : mb(med(lk, k, n[k])),
                        temp, med(cpu, k, n[k]), base ? med(cpu, k, n[k]) / base : 0, lo, hi
                }
            }
        }' "$TSV"
    accuracy "$TSV"
} | tee out/vs-heaptrack.txt
