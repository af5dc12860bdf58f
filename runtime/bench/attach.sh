#!/bin/sh
# What `memlens attach` costs: the time the interrupted thread is stopped, and the per-malloc cost
# afterwards compared with `memlens run` (preloaded). Every run is fastpath.c's paired measurement
# (malloc/free through the GOT vs glibc called directly, alternating blocks in one process), so each
# delta is paired in time; run and attach are separate processes, interleaved (unpaired between them).
#   runtime/bench/attach.sh MEMLENS LIBMEMLENS.so [REPS]
# LIBMEMLENS.so must be the runtime embedded in MEMLENS (same build), e.g.
#   runtime/bench/attach.sh target/release/memlens $(ls -t target/release/build/memlens-native-*/out/libmemlens.so | head -1) 5
set -eu
ML=${1:?usage: attach.sh MEMLENS LIBMEMLENS.so [REPS]}; LIB=${2:?usage: attach.sh MEMLENS LIBMEMLENS.so [REPS]}
REPS=${3:-5}
DIR=$(mktemp -d); trap 'rm -rf "$DIR"' EXIT
HERE=$(dirname "$0")
gcc -O2 -pthread -fno-omit-frame-pointer -I"$HERE" "$HERE/attach_wait.c" -o "$DIR/fp"
export MEMLENS_CTL_DIR="$DIR/ctl"; mkdir -m 700 "$MEMLENS_CTL_DIR"
BLOCKS=${FASTPATH_BLOCKS:-60}; PAIRS=${FASTPATH_PAIRS:-20000}
attached() { # attached INTERVAL|off
    rm -f "$DIR/go"
    ATTACH_GO="$DIR/go" "$DIR/fp" 1 "$BLOCKS" "$PAIRS" >"$DIR/out" &
    pid=$!
    until grep -q waiting "$DIR/out" 2>/dev/null; do sleep 0.01; done
    if [ "$1" = off ]; then "$ML" attach $pid >"$DIR/att"; else "$ML" attach $pid --interval "$1" >"$DIR/att"; fi
    sed -n 's/.* stopped \([0-9.]*\) ms.*/stop_ms=\1/p' "$DIR/att" >>"$DIR/stops"
    touch "$DIR/go"
    wait $pid
    grep '^unit=' "$DIR/out"
}
for r in $(seq "$REPS"); do
    for c in run-off attach-off run-512K attach-512K; do
        printf '\rattach.sh: run %d of %d (%s)   ' "$r" "$REPS" "$c" >&2
        case $c in
        run-off) line=$(LD_PRELOAD=$LIB MEMLENS_ACTIVE=0 "$DIR/fp" 1 "$BLOCKS" "$PAIRS" | grep '^unit=') ;;
        run-512K) line=$(LD_PRELOAD=$LIB MEMLENS_INTERVAL=512K "$DIR/fp" 1 "$BLOCKS" "$PAIRS" | grep '^unit=') ;;
        attach-off) line=$(attached off) ;;
        attach-512K) line=$(attached 512K) ;;
        esac
        echo "$c $line" >>"$DIR/all"
    done
done
printf '\r%60s\r' '' >&2
med() { # med CONFIG FIELD -> median (min..max)
    grep "^$1 " "$DIR/all" | sed "s/.* $2=\([-0-9.]*\).*/\1/" | sort -g |
        awk '{v[NR]=$1} END {printf "%+.1f (%+.1f..%+.1f)", (v[int((NR+1)/2)]+v[int(NR/2)+1])/2, v[1], v[NR]}'
}
unit=$(sed -n 's/^[^ ]* unit=\([a-z:]*\) .*/\1/p' "$DIR/all" | head -1)
echo "repeats=$REPS, $unit per malloc/free pair (delta = through memlens - glibc direct, paired in time); load: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-12s %26s %26s\n' config "delta (min..max)" "wall delta (min..max)"
for c in run-off attach-off run-512K attach-512K; do
    printf '%-12s %26s %26s\n' "$c" "$(med $c delta)" "$(med $c wall_delta)"
done
sort -t= -k2 -g "$DIR/stops" | awk -F= '{v[NR]=$2} END {printf "target thread stopped during attach: median %.3f ms, min %.3f, max %.3f (n=%d)\n", (v[int((NR+1)/2)]+v[int(NR/2)+1])/2, v[1], v[NR], NR}'
