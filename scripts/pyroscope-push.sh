#!/usr/bin/env bash
# `memlens serve --push` into a real Pyroscope for SECS seconds (default 300), then what Pyroscope
# gives back against each program's own count (docs/serve.md, "Pushed to Pyroscope"):
#   - a leaking program (tests/e2e/parca_target.c: 48 MiB held, a leak of 1 MB/s on top, ~20 MB/s
#     allocated and freed), which logs what it holds and has allocated every millisecond;
#   - redis-server under redis-benchmark (sets, gets, lists on a growing key space), with heaptrack
#     recording every allocation call in the same process (LD_PRELOAD heaptrack first, then the
#     memlens runtime): its live bytes and the bytes allocated per window are the reference (redis's
#     own used_memory, in the allocator's size classes, is printed beside it).
# Per process: the inuse_space series read with Pyroscope's `average` (one point per push) against
# what the process held at each push; the alloc_space series (`sum`) against what it allocated in
# each window; the inuse_space flame graph of each single push, and the alloc_space flame graph of
# the whole run. Prints the median and worst ratio of each.
#   scripts/pyroscope-push.sh [SECS] [EVERY] [INTERVAL]    (default 300 s, windows of 15 s, 16K)
# Needs ../shared/tools/pyroscope (or PYROSCOPE_SH=path/to/pyroscope.sh), redis-server,
# redis-benchmark, redis-cli, heaptrack, zstd, gcc, curl, python3 (scripts/install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-300}
EVERY=${2:-15}
INTERVAL=${3:-16K}
SH=${PYROSCOPE_SH:-$PWD/../shared/tools/pyroscope/pyroscope.sh}
[ -x "$SH" ] || { echo "pyroscope-push.sh: no Pyroscope at $SH (set PYROSCOPE_SH)" >&2; exit 2; }
for t in redis-server redis-benchmark redis-cli heaptrack zstd gcc curl python3; do
  command -v "$t" >/dev/null || { echo "pyroscope-push.sh: $t is needed (scripts/install-deps.sh)" >&2; exit 2; }
done
HT_LIB=$(dirname "$(readlink -f "$(command -v heaptrack)")")/../lib/heaptrack/libheaptrack_preload.so
HT_INTERPRET=$(dirname "$(readlink -f "$(command -v heaptrack)")")/../lib/heaptrack/libexec/heaptrack_interpret
[ -f "$HT_LIB" ] && [ -x "$HT_INTERPRET" ] || { echo "pyroscope-push.sh: heaptrack's preload library or interpreter not found" >&2; exit 2; }
cargo build --release -q
M=$PWD/target/release/memlens
W=$(mktemp -d /tmp/memlens-pyroscope-push.XXXXXX)
export MEMLENS_CTL_DIR=$W/ctl
mkdir -m 700 "$MEMLENS_CTL_DIR"
PORT=${PYROSCOPE_PORT:-14140}
RPORT=${REDIS_PORT:-16379}
pids=()
cleanup() {
  touch "$W/leak/stop" 2>/dev/null || true
  redis-cli -p "$RPORT" shutdown nosave >/dev/null 2>&1 || true
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$W"
}
trap cleanup EXIT

"$SH" "$W/pyroscope" "$PORT" >"$W/pyroscope.log" 2>&1 &
pids+=($!)
for _ in $(seq 120); do [ "$(curl -s "http://127.0.0.1:$PORT/ready")" = ready ] && break; sleep 1; done
[ "$(curl -s "http://127.0.0.1:$PORT/ready")" = ready ] || { echo "pyroscope-push.sh: Pyroscope did not start" >&2; tail "$W/pyroscope.log" >&2; exit 1; }

# The leaking program, named `leaker`.
gcc -O1 -g -o "$W/leaker" tests/e2e/parca_target.c
mkdir -p "$W/leak"
"$M" run --interval "$INTERVAL" -o "$W/leak.pb.gz" -- "$W/leaker" "$W/leak" 1000000 >"$W/leak.log" 2>&1 &
pids+=($!)

# redis under heaptrack then memlens: heaptrack's interpreter reads a pipe (outside memlens).
mkfifo "$W/ht.pipe"
"$HT_INTERPRET" <"$W/ht.pipe" 2>"$W/ht.log" | zstd -q -c >"$W/ht.zst" &
pids+=($!)
"$M" run --interval "$INTERVAL" -o "$W/redis.pb.gz" -- sh -c \
  'LD_PRELOAD="$0${LD_PRELOAD:+:$LD_PRELOAD}" DUMP_HEAPTRACK_OUTPUT="$1" exec redis-server --port "$2" --save "" --appendonly no' \
  "$HT_LIB" "$W/ht.pipe" "$RPORT" >"$W/redis.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do redis-cli -p "$RPORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
rpid=$(redis-cli -p "$RPORT" info server | sed -n 's/^process_id:\([0-9]*\).*/\1/p')
for _ in $(seq 100); do [ -s "$W/leak/pid" ] && break; sleep 0.1; done
# heaptrack's clock starts with the process: its start on the wall clock (1/100 s), for its `c` lines.
python3 - "$rpid" >"$W/redis.start" <<'EOF'
import sys, time
pid = sys.argv[1]
uptime = float(open('/proc/uptime').read().split()[0])
boot = time.time() - uptime
start = int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[19])
print(int((boot + start / 100.0) * 1000))
EOF

# Load for the whole run: a benchmark in a loop over a key space that grows, and redis's own count.
(while :; do redis-benchmark -p "$RPORT" -q -t set,get,lpush,lpop -n 100000 -r 2000000 -d 100 >/dev/null 2>&1; done) &
bench=$!
pids+=($bench)
(while :; do echo "$(date +%s%3N) $(redis-cli -p "$RPORT" info memory | sed -n 's/^used_memory:\([0-9]*\).*/\1/p')"; sleep 1; done) >"$W/used.log" 2>/dev/null &
used=$!
pids+=($used)

"$M" serve --push "http://127.0.0.1:$PORT" --push-every "$EVERY" >"$W/push.log" 2>&1 &
push=$!
pids+=($push)
echo "pushing for $SECS s (windows of $EVERY s, sampling interval $INTERVAL): leaker pid $(cat "$W/leak/pid"), redis-server pid $rpid; load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
sleep "$SECS"
kill "$push" "$bench" "$used"
load=$(cut -d' ' -f1-3 /proc/loadavg)
touch "$W/leak/stop"
redis-cli -p "$RPORT" shutdown nosave >/dev/null 2>&1 || true
for _ in $(seq 600); do [ -s "$W/ht.zst" ] && ! kill -0 "$rpid" 2>/dev/null && break; sleep 0.1; done
sleep 2 # heaptrack's interpreter and zstd finish the file
if grep -q warning "$W/push.log"; then cat "$W/push.log" >&2; fi

mkdir -p out
python3 - "$PORT" "$W" "$(cat "$W/leak/pid")" "$rpid" "$SECS" "$EVERY" "$INTERVAL" "$load" <<'EOF' | tee out/pyroscope-push.md
import bisect, json, statistics, subprocess, sys, urllib.request
port, w, lpid, rpid, secs, every, interval, load = sys.argv[1:]
every = int(every)

def q(method, body):
    req = urllib.request.Request(f'http://127.0.0.1:{port}/querier.v1.QuerierService/{method}',
                                 data=json.dumps(body).encode(), headers={'Content-Type': 'application/json'})
    return json.load(urllib.request.urlopen(req))

def series(pt, sel, agg, start, end):
    v = q('SelectSeries', {'profileTypeID': pt, 'labelSelector': sel, 'start': start, 'end': end,
                           'step': 0.001, 'aggregation': agg})
    return [(int(p['timestamp']), p.get('value', 0.0)) for s in v.get('series', []) for p in s['points']]

def flame_total(pt, sel, start, end):
    v = q('SelectMergeStacktraces', {'profileTypeID': pt, 'labelSelector': sel, 'start': start, 'end': end})
    return float(v.get('flamegraph', {}).get('total', 0))

class Ref:
    """A program's reference: cumulative allocated bytes and live bytes, by wall-clock ms."""
    def __init__(self, pts):  # [(ms, allocated, held)]
        self.t = [p[0] for p in pts]; self.p = pts
    def at(self, ms):
        i = bisect.bisect_right(self.t, ms) - 1
        return self.p[max(i, 0)]
    def allocated(self, ms):
        i = bisect.bisect_left(self.t, ms)
        if i == 0 or i >= len(self.p): return self.at(ms)[1]
        a, b = self.p[i - 1], self.p[i]
        return a[1] + (b[1] - a[1]) * (ms - a[0]) / max(b[0] - a[0], 1)
    def held(self, ms): return self.at(ms)[2]

def leaker_ref():
    pts = []
    for line in open(f'{w}/leak/log'):
        f = line.split()
        if len(f) == 3: pts.append((int(f[0]) / 1e6, int(f[1]), int(f[2])))
    return Ref(pts)

def heaptrack_ref():
    """heaptrack's interpreted stream: `a SIZE TRACE` defines an allocation (index from 0), `+ I`
    and `- I` allocate and free one, `c MS` is the time since start (hex)."""
    start = int(open(f'{w}/redis.start').read())
    sizes, pts, alloc, live, now = [], [], 0, 0, 0
    out = subprocess.Popen(['zstd', '-dc', f'{w}/ht.zst'], stdout=subprocess.PIPE, text=True, bufsize=1 << 20)
    for line in out.stdout:
        k = line[0]
        if k == '+':
            s = sizes[int(line[2:], 16)]; alloc += s; live += s
        elif k == '-':
            live -= sizes[int(line[2:], 16)]
        elif k == 'a':
            sizes.append(int(line.split()[1], 16))
        elif k == 'c':
            now = int(line[2:], 16); pts.append((start + now, alloc, live))
    return Ref(pts)

def used_memory():
    pts = []
    for line in open(f'{w}/used.log'):
        f = line.split()
        if len(f) == 2: pts.append((int(f[0]), int(f[1])))
    return pts

def check(name, sel, ref):
    end = int(__import__('time').time() * 1000) + 1000
    start = end - (int(secs) + 4 * every) * 1000
    heap = series('memory:inuse_space:bytes:space:bytes', sel, 'TIME_SERIES_AGGREGATION_TYPE_AVERAGE', start, end)
    allocs = series('memory:alloc_space:bytes:space:bytes', sel, 'TIME_SERIES_AGGREGATION_TYPE_SUM', start, end)
    # Pushes of the last partial moments (after the program stopped) are left out.
    heap = [h for h in heap if h[0] <= ref.t[-1]]
    allocs = [a for a in allocs if a[0] <= ref.t[-1]]
    r_heap = [v / ref.held(t) for t, v in heap]
    r_alloc, r_fg = [], []
    for t, v in allocs:
        prev = max(h[0] for h in heap if h[0] < t)
        r_alloc.append(v / (ref.allocated(t) - ref.allocated(prev)))
    for t, _ in heap:
        r_fg.append(flame_total('memory:inuse_space:bytes:space:bytes', sel, t - every * 500, t + every * 500) / ref.held(t))
    first, last = heap[0][0], allocs[-1][0]
    fg_alloc = flame_total('memory:alloc_space:bytes:space:bytes', sel, first + 1, last)
    r_fga = fg_alloc / (ref.allocated(last) - ref.allocated(first))
    def s(r): return f'{statistics.median(r):.3f} [{min(r):.3f}, {max(r):.3f}]'
    worst = max(abs(x - 1) for x in r_heap + r_alloc + r_fg + [r_fga])
    held = f'{ref.held(heap[0][0]) / 1e6:.0f} → {ref.held(heap[-1][0]) / 1e6:.0f} MB'
    per_window = statistics.median(v / r for (_, v), r in zip(allocs, r_alloc)) / 1e6
    print(f'| {name} | {len(heap)} | {held} | {per_window:.0f} MB | {s(r_heap)} | {s(r_alloc)} | {s(r_fg)} | {r_fga:.3f} | {worst * 100:.1f} % |')
    return heap

print(f'memlens serve --push, {secs} s, windows of {every} s, sampling interval {interval}; load average at the end {load}')
print('ratios Pyroscope / reference: median [min, max] over the pushes (windows)')
print()
print('| process | pushes | held (reference) | allocated per window (median) | inuse_space series (average) / held | alloc_space series (sum) / allocated in the window | inuse_space flame graph of one push / held | alloc_space flame graph of the run / allocated | worst |')
print('|---|---|---|---|---|---|---|---|---|')
check('leaker (its own count)', f'{{service_name="leaker",pid="{lpid}"}}', leaker_ref())
ht = heaptrack_ref()
heap = check('redis-server (heaptrack, same process)', f'{{service_name="redis-server",pid="{rpid}"}}', ht)
used = used_memory()
if used:
    ratios = []
    for t, v in heap:
        i = bisect.bisect_right([u[0] for u in used], t) - 1
        if i >= 0: ratios.append(v / used[i][1])
    if ratios:
        print()
        print(f'redis-server inuse_space / its own used_memory (size classes, allocator overhead): '
              f'median {statistics.median(ratios):.3f} [{min(ratios):.3f}, {max(ratios):.3f}]; '
              f'heaptrack live / used_memory at the end {ht.p[-1][2] / used[-1][1]:.3f}')
EOF
