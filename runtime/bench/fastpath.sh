#!/bin/sh
# Cost of the runtime on a malloc-test loop (512 B malloc/free pairs at depth ~10), TSC ticks per pair.
# Configurations run interleaved (A B C A B C ...), REPS times; prints the median and min-max.
#   runtime/bench/fastpath.sh LIBMEMLENS.so [THREADS] [REPS]
# A quick check for the runtime's author; the documented benchmark is `memlens study`.
set -eu
LIB=$1; THREADS=${2:-1}; REPS=${3:-5}
DIR=$(mktemp -d); trap 'rm -rf "$DIR"' EXIT
HERE=$(dirname "$0")
gcc -O2 -pthread -fno-omit-frame-pointer "$HERE/fastpath.c" -o "$DIR/fp"
JE=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
N=2000000; NX=200000
configs="none off 2M/fp 2M/libgcc 2M/libunwind 512K/fp 512K/libgcc 512K/libunwind 64K/fp 64K/libgcc 64K/libunwind exact je je-prof512K je-prof64K memlens512K+je heaptrack"
run() {
    case $1 in
    none) "$DIR/fp" "$THREADS" $N ;;
    off) LD_PRELOAD=$LIB MEMLENS_ACTIVE=0 "$DIR/fp" "$THREADS" $N ;;
    exact) LD_PRELOAD=$LIB MEMLENS_INTERVAL=0 "$DIR/fp" "$THREADS" $NX ;;
    je) LD_PRELOAD=$JE "$DIR/fp" "$THREADS" $N ;;
    je-prof512K) LD_PRELOAD=$JE MALLOC_CONF=prof:true,lg_prof_sample:19 "$DIR/fp" "$THREADS" $N ;;
    je-prof64K) LD_PRELOAD=$JE MALLOC_CONF=prof:true,lg_prof_sample:16 "$DIR/fp" "$THREADS" $N ;;
    memlens512K+je) LD_PRELOAD="$LIB $JE" "$DIR/fp" "$THREADS" $N ;;
    heaptrack) (cd "$DIR" && heaptrack -o "$DIR/ht" "$DIR/fp" "$THREADS" $NX) ;;
    */*) LD_PRELOAD=$LIB MEMLENS_INTERVAL=${1%/*} MEMLENS_UNWINDER=${1#*/} "$DIR/fp" "$THREADS" $N ;;
    esac
}
for r in $(seq "$REPS"); do
    for c in $configs; do echo "$c $(run "$c" 2>/dev/null | grep -E "^[0-9.]+$" | tail -1)"; done
done >"$DIR/all"
echo "threads=$THREADS reps=$REPS load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-16s %10s %20s\n' config median min-max
for c in $configs; do
    grep "^$c " "$DIR/all" | awk '{print $2}' | sort -g | awk -v c="$c" \
        '{v[NR]=$1} END {printf "%-16s %10.1f %9.1f-%-10.1f\n", c, v[int((NR+1)/2)], v[1], v[NR]}'
done
