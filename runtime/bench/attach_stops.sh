#!/bin/sh
# How long `memlens attach` holds the thread it interrupts, over many attaches, on a machine as busy
# as asked: N fresh processes (attach_wait.c, waiting in nanosleep as an idle service does), each
# attached once by ptrace (a second attach would go through the control socket), with BUSY
# busy-looping processes running meanwhile (default: two per CPU, a saturated machine).
#   runtime/bench/attach_stops.sh MEMLENS [N] [BUSY]
# Prints p50, p90, p99 and max of the stop times memlens reports, and the load average.
# ATTACH_STOPS_ALLOC=jemalloc links the target with libjemalloc_pic.a: memlens then also hooks the
# allocator's entry points with every thread stopped (docs/allocators.md), and that stop is reported
# on a second line. ATTACH_STOPS_ALLOC=mimalloc does the same with mimalloc built from the
# libmimalloc-sys crate's sources (MIMALLOC_SRC, else found in cargo's registry): the allocator with
# the most entry points memlens hooks.
set -eu
ML=${1:?usage: attach_stops.sh MEMLENS [N] [BUSY]}
N=${2:-200}
BUSY=${3:-$((2 * $(nproc)))}
DIR=$(mktemp -d)
HERE=$(dirname "$0")
busy=""
cleanup() { for p in $busy; do kill "$p" 2>/dev/null || true; done; rm -rf "$DIR"; }
trap cleanup EXIT INT TERM
case ${ATTACH_STOPS_ALLOC:-} in
jemalloc) LINK="/usr/lib/x86_64-linux-gnu/libjemalloc_pic.a -ldl -lm -lstdc++" ;;
mimalloc)
    MI=${MIMALLOC_SRC:-$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/libmimalloc-sys-*/c_src/mimalloc/v2 2>/dev/null | tail -1)}
    [ -n "$MI" ] && [ -r "$MI/src/static.c" ] || { echo "attach_stops.sh: no mimalloc sources (MIMALLOC_SRC)" >&2; exit 2; }
    LINK="-DNDEBUG -DMI_MALLOC_OVERRIDE -I$MI/include $MI/src/static.c -ldl" ;;
*) LINK="" ;;
esac
gcc -O2 -pthread -fno-omit-frame-pointer -I"$HERE" "$HERE/attach_wait.c" -o "$DIR/target" $LINK
export MEMLENS_CTL_DIR="$DIR/ctl"; mkdir -m 700 "$MEMLENS_CTL_DIR"
for _ in $(seq "$BUSY"); do sh -c 'while :; do :; done' & busy="$busy $!"; done
sleep 1
for i in $(seq "$N"); do
    printf '\rattach_stops.sh: %d of %d   ' "$i" "$N" >&2
    rm -f "$DIR/out"
    ATTACH_GO="$DIR/never" "$DIR/target" 1 1 1 >"$DIR/out" &
    pid=$!
    until grep -q waiting "$DIR/out" 2>/dev/null; do sleep 0.01; done
    "$ML" attach "$pid" >"$DIR/att" 2>&1 || cat "$DIR/att" >&2
    sed -n 's/^[^[]*\[thread [0-9]* stopped \([0-9.]*\) ms.*/\1/p' "$DIR/att" >>"$DIR/stops"
    sed -n 's/.*every thread stopped \([0-9.]*\) ms.*/\1/p' "$DIR/att" >>"$DIR/hooks"
    kill "$pid"; wait "$pid" 2>/dev/null || true
done
printf '\r%60s\r' '' >&2
load=$(cut -d' ' -f1-3 /proc/loadavg)
pct() {
    sort -g "$1" | awk -v busy="$BUSY" -v load="$load" -v what="$2" '{v[NR]=$1} END {
    if (NR) printf "%s (ms), %d attaches, %d busy loops, load %s: p50 %.3f  p90 %.3f  p99 %.3f  max %.3f\n",
        what, NR, busy, load, v[int(NR*0.50+0.5)], v[int(NR*0.90+0.5)], v[int(NR*0.99+0.5)], v[NR] }'
}
pct "$DIR/stops" "attach stop"
if [ -s "$DIR/hooks" ]; then pct "$DIR/hooks" "every thread stopped to hook the allocator"; fi
