#!/bin/sh
# The runtime's cost on a malloc-test loop (512 B malloc/free pairs at call depth 10), in core
# cycles per pair (TSC ticks where the kernel gives no hardware counters), for every configuration
# of docs/benchmarks.md's table. Each run times glibc called directly and the interposed malloc/free
# in alternating blocks of the same process (see fastpath.c), so "delta" is paired in time and
# immune to this VM's slow and fast phases; "none" (nothing preloaded) is the method's own noise
# floor and "forward" (a preloaded library that only forwards) the floor of any LD_PRELOAD
# interposer.
#   runtime/bench/fastpath.sh LIBMEMLENS.so [THREADS] [REPS]
# Prints one table; configurations run interleaved (A B C A B C ...), REPS times; median (min-max).
set -eu
LIB=${1:?usage: fastpath.sh LIBMEMLENS.so [THREADS] [REPS]}
THREADS=${2:-1}; REPS=${3:-5}
[ -r "$LIB" ] || { echo "fastpath.sh: cannot read $LIB" >&2; exit 2; }
DIR=$(mktemp -d); trap 'rm -rf "$DIR"' EXIT
HERE=$(dirname "$0")
gcc -O2 -pthread -fno-omit-frame-pointer "$HERE/fastpath.c" -o "$DIR/fp" -ldl
gcc -O2 -fPIC -shared "$HERE/forward.c" -o "$DIR/forward.so" -ldl
JE=/usr/lib/x86_64-linux-gnu/libjemalloc.so.2
# hk-*: an allocator linked into the program, hooked at its entry points (docs/allocators.md): the
# same loop over the bare allocator and the hooked one in alternating blocks (FASTPATH_HOOKED).
# jemalloc from libjemalloc-dev; mimalloc from the libmimalloc-sys crate's sources (MIMALLOC_SRC, else
# found in cargo's registry, as tests/programs/rust-allocs fetches it).
JE_A=/usr/lib/x86_64-linux-gnu/libjemalloc_pic.a
[ -r "$JE_A" ] && gcc -O2 -pthread -fno-omit-frame-pointer "$HERE/fastpath.c" -o "$DIR/fp_je" "$JE_A" -ldl -lm -lstdc++
MI=${MIMALLOC_SRC:-$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/libmimalloc-sys-*/c_src/mimalloc/v2 2>/dev/null | tail -1)}
[ -n "$MI" ] && [ -r "$MI/src/static.c" ] && gcc -O2 -DNDEBUG -DMI_MALLOC_OVERRIDE -pthread -fno-omit-frame-pointer \
    -I"$MI/include" "$HERE/fastpath.c" "$MI/src/static.c" -o "$DIR/fp_mi" -ldl
# The same two programs with the inline checks' loop compiled in (fp_*_in): hk-A-inline, and hk-A-off-b, the
# hook timed again in this second build. Bare mimalloc's pair here runs in one of two steady states ~3 ticks
# apart, chosen by details of the program's build (docs/allocators.md): when -off and -off-b disagree,
# the bare reference moved, not the hook.
[ -x "$DIR/fp_je" ] && gcc -O2 -DFASTPATH_INLINE_LOOP -pthread -fno-omit-frame-pointer "$HERE/fastpath.c" \
    -o "$DIR/fp_je_in" "$JE_A" -ldl -lm -lstdc++
[ -x "$DIR/fp_mi" ] && gcc -O2 -DNDEBUG -DMI_MALLOC_OVERRIDE -DFASTPATH_INLINE_LOOP -pthread -fno-omit-frame-pointer \
    -I"$MI/include" "$HERE/fastpath.c" "$MI/src/static.c" -o "$DIR/fp_mi_in" -ldl
# FASTPATH_CONFIGS picks configurations. Sizes can be overridden (FASTPATH_BLOCKS, FASTPATH_PAIRS, FASTPATH_XBLOCKS, FASTPATH_XPAIRS): the
# test suite runs this script on tiny ones.
BLOCKS=${FASTPATH_BLOCKS:-60}; PAIRS=${FASTPATH_PAIRS:-20000}      # 1.2 M pairs each way
XBLOCKS=${FASTPATH_XBLOCKS:-3}; XPAIRS=${FASTPATH_XPAIRS:-100000}  # exact mode and heaptrack record every allocation; long blocks
                                # so that heaptrack's pipe stays full (steady state, back-pressure counted)
configs="none forward off 2M/dwarf 2M/fp 2M/libgcc 2M/libunwind 512K/dwarf 512K/fp 512K/libgcc 512K/libunwind 64K/dwarf 64K/fp 64K/libgcc 64K/libunwind exact exact/libunwind heaptrack je je-prof512K je-prof64K memlens512K+je"
configs="$configs views512K views64K" # viewsR: the peak/lifetime/timeline views on vs off at interval R (dwarf), paired
configs="$configs hk-je-off hk-je-512K hk-je-64K hk-mi-off hk-mi-512K hk-mi-64K" # hooked allocators, paired with their bare selves
configs="$configs hk-je-inline hk-je-off-b hk-mi-inline hk-mi-off-b" # the hook's checks inline, no jump: the floor of -off
configs=${FASTPATH_CONFIGS:-$configs} # a subset, e.g. FASTPATH_CONFIGS="none off 64K/dwarf"
[ -r "$JE" ] || configs=$(echo "$configs" | sed 's/ je[^ ]*//g; s/ memlens512K+je//')
command -v heaptrack >/dev/null || configs=$(echo "$configs" | sed 's/ heaptrack//')
[ -x "$DIR/fp_je" ] && [ -x "$DIR/fp_je_in" ] || configs=$(echo "$configs" | sed 's/ hk-je-[^ ]*//g')
[ -x "$DIR/fp_mi" ] && [ -x "$DIR/fp_mi_in" ] || configs=$(echo "$configs" | sed 's/ hk-mi-[^ ]*//g')
run() {
    fp="$DIR/fp $THREADS $BLOCKS $PAIRS"
    case $1 in
    none) $fp ;;
    forward) LD_PRELOAD=$DIR/forward.so $fp ;;
    off) LD_PRELOAD=$LIB MEMLENS_ACTIVE=0 $fp ;;
    exact) LD_PRELOAD=$LIB MEMLENS_INTERVAL=0 "$DIR/fp" "$THREADS" $XBLOCKS $XPAIRS ;;
    exact/*) LD_PRELOAD=$LIB MEMLENS_INTERVAL=0 MEMLENS_UNWINDER=${1#*/} "$DIR/fp" "$THREADS" $XBLOCKS $XPAIRS ;;
    heaptrack) (cd "$DIR" && heaptrack -o "$DIR/ht" "$DIR/fp" "$THREADS" $XBLOCKS $XPAIRS) ;;
    je) LD_PRELOAD=$JE $fp ;;
    je-prof512K) LD_PRELOAD=$JE MALLOC_CONF=prof:true,lg_prof_sample:19 $fp ;;
    je-prof64K) LD_PRELOAD=$JE MALLOC_CONF=prof:true,lg_prof_sample:16 $fp ;;
    memlens512K+je) LD_PRELOAD="$LIB $JE" $fp ;;
    views*) LD_PRELOAD=$LIB MEMLENS_INTERVAL=${1#views} FASTPATH_VIEWS=1 $fp ;;
    hk-*-off) a=${1#hk-}; LD_PRELOAD=$LIB MEMLENS_ACTIVE=0 FASTPATH_HOOKED=1 "$DIR/fp_${a%-off}" 1 $BLOCKS $PAIRS ;;
    hk-*-inline) a=${1#hk-}; LD_PRELOAD=$LIB MEMLENS_ACTIVE=0 FASTPATH_HOOKED=1 FASTPATH_INLINE=1 "$DIR/fp_${a%-inline}_in" 1 $BLOCKS $PAIRS ;;
    hk-*-off-b) a=${1#hk-}; LD_PRELOAD=$LIB MEMLENS_ACTIVE=0 FASTPATH_HOOKED=1 "$DIR/fp_${a%-off-b}_in" 1 $BLOCKS $PAIRS ;;
    hk-*) a=${1#hk-}; LD_PRELOAD=$LIB MEMLENS_INTERVAL=${a#*-} FASTPATH_HOOKED=1 "$DIR/fp_${a%%-*}" 1 $BLOCKS $PAIRS ;;
    */*) LD_PRELOAD=$LIB MEMLENS_INTERVAL=${1%/*} MEMLENS_UNWINDER=${1#*/} $fp ;;
    esac
}
i=0
for r in $(seq "$REPS"); do
    for c in $configs; do
        i=$((i + 1))
        printf '\r%s: run %d of %d (%s)   ' "fastpath" "$i" $((REPS * $(echo $configs | wc -w))) "$c" >&2
        line=$(run "$c" 2>/dev/null | grep '^unit=' | tail -1) || true
        [ -n "$line" ] && echo "$c $line"
    done
done >"$DIR/all"
printf '\r%60s\r' '' >&2
unit=$(sed -n 's/^[^ ]* unit=\([a-z:]*\) .*/\1/p' "$DIR/all" | head -1)
# med CONFIG FIELD -> "median min max" of FIELD over the repeats
med() {
    grep "^$1 " "$DIR/all" | sed "s/.* $2=\([-0-9.]*\).*/\1/" | sort -g |
        awk '{v[NR]=$1} END {if (NR) printf "%.1f %.1f %.1f", (v[int((NR+1)/2)]+v[int(NR/2)+1])/2, v[1], v[NR]; else print "nan nan nan"}'
}
# This VM alternates between quiet stretches (glibc's pair ~35 cycles) and contended ones (~60): a
# run is "quiet" when its direct glibc cost is within 25% of the lowest seen in the whole table.
floor=$(sed 's/.* direct=\([0-9.]*\).*/\1/' "$DIR/all" | sort -g | head -1)
# quiet CONFIG -> "median n" of delta over the quiet runs
quiet() {
    grep "^$1 " "$DIR/all" | awk -v f="$floor" '{d=$0; sub(/.* direct=/, "", d); sub(/ .*/, "", d)
        x=$0; sub(/.* delta=/, "", x); sub(/ .*/, "", x); if (d <= 1.25 * f) print x}' | sort -g |
        awk '{v[NR]=$1} END {if (NR) printf "%+.1f %d", (v[int((NR+1)/2)]+v[int(NR/2)+1])/2, NR; else print "- 0"}'
}
je_delta=$(med je delta | cut -d' ' -f1)
echo "threads=$THREADS repeats=$REPS unit=$unit per malloc/free pair; load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "delta = interposed - glibc called directly, paired in time; wall = the same in TSC ticks;"
echo "quiet = median delta over the runs whose glibc pair cost <= 1.25 x the lowest ($floor)"
case " $configs " in *" views"*) echo "viewsR rows: delta = the runtime with its views on - off (both interposed), paired in time" ;; esac
case " $configs " in *" hk-"*) echo "hk-A-R rows: delta = allocator A linked in and hooked - its entry bytes put back, one thread, paired in time" ;; esac
case " $configs " in *"-inline "*) echo "hk-A-inline rows: delta = the hook's checks inline in the loop in front of bare A - bare A (no jump, no code moved);"
    echo "  hk-A-off-b: hk-A-off in that second build (the program with the inline loop compiled in)" ;; esac
printf '%-16s %9s %26s %12s %12s %9s\n' config "$unit" "delta (min..max)" "wall delta" "quiet (n)" "over je"
for c in $configs; do
    set -- $(med "$c" interposed) $(med "$c" delta) $(med "$c" wall_delta) $(quiet "$c")
    over=""
    case $c in je-prof*|memlens512K+je) over=$(awk -v a="$4" -v b="$je_delta" 'BEGIN{printf "%+.1f", a-b}') ;; esac
    printf '%-16s %9s %+10.1f (%+.1f..%+.1f) %+12.1f %8s (%s) %9s\n' "$c" "$1" "$4" "$5" "$6" "$7" "${10}" "${11}" "$over"
done
if grep -q '^heaptrack ' "$DIR/all" && grep -q '^exact ' "$DIR/all"; then
    awk -v e="$(med exact wall_delta | cut -d' ' -f1)" -v h="$(med heaptrack wall_delta | cut -d' ' -f1)" \
        -v ec="$(med exact delta | cut -d' ' -f1)" -v hc="$(med heaptrack delta | cut -d' ' -f1)" \
        'BEGIN {printf "exact mode vs heaptrack: %.1fx less wall time, %.1fx fewer cycles\n", h/e, hc/ec}'
fi
