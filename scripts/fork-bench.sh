#!/usr/bin/env bash
# What `memlens run` costs a fork-heavy program (issue 29, item 10): a program that forks N short
# children one after the other (runtime/tests/many_children.c: each allocates eight 1 MiB blocks and
# exits, so each leaves a profile), alone and under `memlens run`, in adjacent pairs (bare, memlens,
# bare, memlens, ...) so that a drift of the machine's speed hits both alike.
#
# Per pair it measures (GNU time, wall seconds):
#   bare      the program alone
#   run       `memlens run -- PROGRAM N`: start, the program under the runtime, every child's profile
#   program   the program itself inside that run (GNU time inside memlens run): what the runtime
#             costs the program while it runs
# and prints, over the pairs, the median and min..max of each, of run - bare (what memlens adds)
# and of program - bare (the runtime's share of it; the rest is memlens converting the profiles
# after the program ended). The goal (issue 29): run - bare <= 1 s for 300 children on a quiet
# machine. The load average is printed before and after: a figure taken at a load above the
# number of CPUs is not a quiet machine's.
#
#   scripts/fork-bench.sh [N] [PAIRS]        (default 300 children, 7 pairs)
# Needs gcc and GNU time (/usr/bin/time, package time: scripts/install-deps.sh). Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-300}
PAIRS=${2:-7}
TIME=/usr/bin/time
[ -x "$TIME" ] || { echo "fork-bench: needs GNU time ($TIME): scripts/install-deps.sh" >&2; exit 2; }
cargo build --release -q
M=$PWD/target/release/memlens
W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
gcc -O2 -g runtime/tests/many_children.c -o "$W/many_children"
load() { cut -d' ' -f1-3 /proc/loadavg; }

# seconds of one timed command (its wall time as GNU time reports it)
wall() { "$TIME" -f %e -o "$W/t" "$@" >/dev/null 2>"$W/err" || { cat "$W/err" >&2; exit 1; }; cat "$W/t"; }

echo "fork benchmark: $(date -u +%F), $(nproc) CPUs, load before $(load)"
echo "program: many_children $N (each child allocates 8 MiB and exits), $PAIRS pairs, memlens run at the default interval"
printf '%-5s %9s %9s %9s %10s %10s\n' pair "bare s" "run s" "program s" "run-bare" "prog-bare"
: >"$W/rows"
for ((i = 1; i <= PAIRS; i++)); do
  b=$(wall "$W/many_children" "$N")
  r=$(wall "$M" run -o "$W/f.pb.gz" -- "$TIME" -f %e -o "$W/p" "$W/many_children" "$N")
  p=$(tail -1 "$W/p")
  rm -f "$W"/f*.pb.gz
  echo "$b $r $p" >>"$W/rows"
  awk -v i="$i" '{printf "%-5s %9.2f %9.2f %9.2f %10.2f %10.2f\n", i, $1, $2, $3, $2 - $1, $3 - $1}' <<<"$b $r $p"
done
# median and min..max of a column expression over the pairs
summary() {
  awk "{print $2}" "$W/rows" | sort -g |
    awk -v what="$1" '{a[NR]=$1} END {m = (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2;
      printf "%-28s median %6.2f s   min..max %.2f..%.2f\n", what, m, a[1], a[NR]}'
}
summary "bare" '$1'
summary "memlens run" '$2'
summary "the program inside the run" '$3'
summary "run - bare (memlens adds)" '$2 - $1'
summary "program - bare (runtime)" '$3 - $1'
echo "load after $(load)"
