#!/usr/bin/env bash
# The runtime's own memory (issue 29, item 11): the peak RSS of real programs alone and under
# `memlens run`, in adjacent pairs (bare, memlens, bare, memlens, ...). The peak is the program's
# own (GNU time's %M of the program: inside memlens run, GNU time runs the program), so memlens's
# command-line process is not in it; the runtime's state file pages (a shared mapping) are.
#
#   python3   builds a dict of 300 000 strings and dumps it as JSON
#   rg        ripgrep searching /usr/include, the Python library and /usr/share/doc for 'malloc' (8 threads)
#   redis     redis-server under redis-benchmark (100 000 requests of SET, GET, LPUSH, LPOP, 256 B
#             values, 20 clients), then SHUTDOWN NOSAVE
#   sqlite3   an in-memory table of 200 000 rows with an index, and a query
#   node      an array of a million small objects
#
# Per program: the median peak RSS of each configuration (MiB, min..max in the raw lines), what
# memlens adds (MiB and %), and the issue's bound: at most 4 MiB or 5 % of the program's RSS,
# whichever is larger. The load average is printed with it.
#
#   scripts/rss-bench.sh [PAIRS]             (default 3 pairs; INTERVALS="512K 64K" adds configurations)
# Needs GNU time, ripgrep, redis-server and redis-tools, sqlite3, nodejs (scripts/install-deps.sh).
# A program that is missing is said, with the package that provides it, and the others run. Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${1:-3}
INTERVALS=${INTERVALS:-512K}
TIME=/usr/bin/time
[ -x "$TIME" ] || { echo "rss-bench: needs GNU time ($TIME): scripts/install-deps.sh" >&2; exit 2; }
cargo build --release -q
M=$PWD/target/release/memlens
W=$(mktemp -d)
trap 'redis-cli -p "${PORT:-0}" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$W"' EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }

PY='import json; d = {i: str(i) * 3 for i in range(300000)}; print(len(json.dumps(d)))'
NODE='let a = []; for (let i = 0; i < 1e6; i++) a.push({i, s: "x" + i}); console.log(a.length)'
SQL="create table t(a integer, b text);
with recursive c(x) as (select 1 union all select x + 1 from c limit 200000)
  insert into t select x, hex(randomblob(32)) from c;
create index i on t(b);
select count(*) from t where b like 'A%';"
PORT=$((20000 + RANDOM % 20000))

# peak RSS in KiB of `CMD…`, bare or under memlens at interval $1 ("bare" for none)
peak() {
  local how=$1; shift
  if [ "$how" = bare ]; then
    "$TIME" -f %M -o "$W/m" "$@" >/dev/null 2>"$W/err" </dev/null || { cat "$W/err" >&2; return 1; }
  else
    "$M" run --interval "$how" -o "$W/p.pb.gz" -- "$TIME" -f %M -o "$W/m" "$@" >/dev/null 2>"$W/err" </dev/null ||
      { cat "$W/err" >&2; return 1; }
    rm -f "$W"/p*.pb.gz
  fi
  tail -1 "$W/m"
}

# redis-server under redis-benchmark: its peak RSS in KiB
redis_peak() {
  local how=$1
  local cmd=(redis-server --port "$PORT" --save "" --appendonly no --bind 127.0.0.1)
  if [ "$how" = bare ]; then
    "$TIME" -f %M -o "$W/m" "${cmd[@]}" >/dev/null 2>&1 &
  else
    "$M" run --interval "$how" -o "$W/p.pb.gz" -- "$TIME" -f %M -o "$W/m" "${cmd[@]}" >/dev/null 2>&1 &
  fi
  local pid=$!
  for _ in $(seq 200); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.05; done
  redis-benchmark -q -p "$PORT" -n 100000 -c 20 -d 256 -t set,get,lpush,lpop >/dev/null
  redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" || true
  rm -f "$W"/p*.pb.gz
  tail -1 "$W/m"
}

run_one() { # name how
  case $1 in
    python3) peak "$2" /usr/bin/python3 -c "$PY" ;;
    rg) peak "$2" rg --no-config -j 8 -c malloc /usr/include /usr/lib/python3 /usr/share/doc ;;
    redis) redis_peak "$2" ;;
    sqlite3) echo "$SQL" >"$W/q.sql"; peak "$2" sh -c "exec sqlite3 :memory: < $W/q.sql" ;;
    node) peak "$2" node -e "$NODE" ;;
  esac
}

need() { # name command package
  command -v "$2" >/dev/null && return 0
  echo "$1: not measured: $2 is not installed (Debian package $3; scripts/install-deps.sh)"
  return 1
}

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }

echo "RSS benchmark: $(date -u +%F), $(nproc) CPUs, load before $(load); $PAIRS pairs; memlens run at ${INTERVALS}"
printf '%-8s %-6s %10s %10s %9s %8s %10s %s\n' program config "bare MiB" "MiB" "+MiB" "+%" "bound MiB" within
for prog in python3 rg redis sqlite3 node; do
  case $prog in
    python3) need python3 /usr/bin/python3 python3 || continue ;;
    rg) need rg rg ripgrep || continue ;;
    redis) { need redis redis-server redis-server && need redis redis-benchmark redis-tools; } || continue ;;
    sqlite3) need sqlite3 sqlite3 sqlite3 || continue ;;
    node) need node node nodejs || continue ;;
  esac
  for iv in $INTERVALS; do
    : >"$W/bare"; : >"$W/ml"
    for ((i = 0; i < PAIRS; i++)); do
      run_one "$prog" bare >>"$W/bare"
      run_one "$prog" "$iv" >>"$W/ml"
    done
    echo "  $prog raw KiB: bare $(tr '\n' ' ' <"$W/bare")| memlens $iv $(tr '\n' ' ' <"$W/ml")" >&2
    b=$(median <"$W/bare"); m=$(median <"$W/ml")
    awk -v p="$prog" -v iv="$iv" -v b="$b" -v m="$m" 'BEGIN {
      d = (m - b) / 1024; pct = (m - b) / b * 100; bound = b / 1024 * 0.05; if (bound < 4) bound = 4;
      printf "%-8s %-6s %10.1f %10.1f %9.1f %7.1f%% %10.1f %s\n", p, iv, b / 1024, m / 1024, d, pct, bound, (d <= bound) ? "yes" : "no"
    }'
  done
done
echo "load after $(load)"
