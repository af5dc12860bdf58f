#!/usr/bin/env bash
# How memlens scales with the number of distinct stacks in a profile (docs/scale.md).
#
# A real program (runtime/tests/many_stacks.c: recursion through two functions, one level per bit
# of the path, one 8 MiB block per path, so that every path is sampled at the default interval)
# is profiled with N distinct allocation stacks, for each N; then, per N:
#   runtime   the profiled program's peak RSS minus the bare program's (the runtime's memory), and
#             that per distinct stack
#   run       `memlens run` wall time, and the conversion of its dump (as `memlens run` reports it)
#   report    `memlens report --top 5` wall time and peak RSS
#   diff      `memlens diff` of two runs' profiles (different block sizes), time and peak RSS
#   pprof     `go tool pprof -top` on the same file, and `go tool pprof -top -diff_base`
# Times are medians of REPS runs (min..max in the raw lines), peak RSS is GNU time's %M (KiB).
#   scripts/scale-bench.sh [N…]         (default: 10000 100000 1000000; REPS=3)
#   BEFORE=/path/to/old/memlens scripts/scale-bench.sh   adds an older memlens' report/diff, up to
#                                   N = BEFORE_MAX (default 100000: the old one needed 5 GB at 10^6)
# Needs gcc, GNU time (/usr/bin/time) and, for the pprof columns, go. Not a test: the table goes to
# stdout and out/scale-bench.txt. The machine's load average is printed with it.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZES=("$@")
[ ${#SIZES[@]} -gt 0 ] || SIZES=(10000 100000 1000000)
REPS=${REPS:-3}
TIME=/usr/bin/time
[ -x "$TIME" ] || { echo "scale-bench: needs GNU time ($TIME): apt-get install time" >&2; exit 2; }
cargo build --release -q
M=$PWD/target/release/memlens
# A 10^6-stack profile holds ~90x its gzipped size, past the default 32x of an input's bytes
# (crates/memlens-profile/src/input.rs): the benchmark's inputs are trusted, so the budget alone applies.
export MEMLENS_MAX_INPUT=${MEMLENS_MAX_INPUT:-4G}
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
gcc -O2 -g -fno-omit-frame-pointer runtime/tests/many_stacks.c -o "$W/many_stacks"
GO=$(command -v go || true)
mkdir -p out

# median of numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
# measure LABEL CMD…: REPS runs; prints "median_s max_rss_kib" and logs each run
measure() {
  local label=$1; shift
  local t=() m=()
  for ((i = 0; i < REPS; i++)); do
    "$TIME" -o "$W/t" -f "%e %M" "$@" >/dev/null 2>"$W/err" || { echo "scale-bench: $label failed:" >&2; cat "$W/err" >&2; exit 1; }
    read -r s k <"$W/t"
    t+=("$s"); m+=("$k")
    echo "  $label run $((i + 1)): ${s} s, ${k} KiB" >&2
  done
  echo "$(printf '%s\n' "${t[@]}" | median) $(printf '%s\n' "${m[@]}" | sort -n | tail -1)"
}

{
echo "memlens scale benchmark: $(date -u +%F), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "program: many_stacks N 8388608 (default interval 512K, dwarf unwinder), REPS=$REPS"
printf '%-9s %-8s %-18s %-9s %-9s %-14s %-14s %-14s %-14s' \
  "N" "stacks" "runtime MiB (/st)" "run s" "conv s" "report s,MiB" "diff s,MiB" "pprof s,MiB" "pprof-diff s,MiB"
[ -n "${BEFORE:-}" ] && printf ' %-14s %-14s' "before rep" "before diff"
echo
} | tee out/scale-bench.txt

for n in "${SIZES[@]}"; do
  max=$(( n + n / 10 + 1024 ))
  bare=$("$W/many_stacks" "$n" 8388608 | awk '{print $6}')
  t0=$(date +%s.%N)
  "$M" run --max-stacks "$max" -o "$W/a.pb.gz" -- "$W/many_stacks" "$n" 8388608 >"$W/out" 2>"$W/run.err"
  t1=$(date +%s.%N)
  "$M" run --max-stacks "$max" -o "$W/b.pb.gz" -- "$W/many_stacks" "$n" 4194304 >/dev/null 2>&1
  prof=$(awk '{print $6}' "$W/out")
  stacks=$(grep -o '[0-9]* stacks' "$W/run.err" | head -1 | cut -d' ' -f1)
  conv=$(grep -o 'converted in [0-9.]* s' "$W/run.err" | head -1 | awk '{print $3}')
  rt_mib=$(awk -v a="$prof" -v b="$bare" 'BEGIN {printf "%.1f", (a - b) / 1024}')
  per=$(awk -v a="$prof" -v b="$bare" -v s="$stacks" 'BEGIN {printf "%.0f B", (a - b) * 1024 / s}')
  run_s=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}')
  echo "N=$n: $stacks stacks, $(stat -c %s "$W/a.pb.gz") bytes gzipped" >&2
  fmt() { awk '{printf "%.2f,%.0f", $1, $2 / 1024}'; }
  rep=$(measure "report N=$n" "$M" report "$W/a.pb.gz" --top 5 | fmt)
  dif=$(measure "diff N=$n" "$M" diff "$W/b.pb.gz" "$W/a.pb.gz" --top 5 | fmt)
  if [ -n "$GO" ]; then
    pp=$(measure "pprof N=$n" "$GO" tool pprof -top "$W/a.pb.gz" | fmt)
    ppd=$(measure "pprof-diff N=$n" "$GO" tool pprof -top -diff_base "$W/b.pb.gz" "$W/a.pb.gz" | fmt)
  else
    pp="n/a (no go)"; ppd="n/a (no go)"
  fi
  brep="skipped"; bdif="skipped"
  if [ -n "${BEFORE:-}" ] && [ "$n" -le "${BEFORE_MAX:-100000}" ]; then
    brep=$(measure "before report N=$n" "$BEFORE" report "$W/a.pb.gz" --top 5 | fmt)
    bdif=$(measure "before diff N=$n" "$BEFORE" diff "$W/b.pb.gz" "$W/a.pb.gz" --top 5 | fmt)
  fi
  {
    printf '%-9s %-8s %-18s %-9s %-9s %-14s %-14s %-14s %-14s' "$n" "$stacks" "$rt_mib ($per)" "$run_s" "$conv" "$rep" "$dif" "$pp" "$ppd"
    [ -n "${BEFORE:-}" ] && printf ' %-14s %-14s' "$brep" "$bdif"
    echo
  } | tee -a out/scale-bench.txt
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a out/scale-bench.txt
