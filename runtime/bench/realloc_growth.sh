#!/bin/sh
# The realloc-growth loop (runtime/tests/realloc_growth.c: one buffer grown by realloc in 64-byte
# steps to 256 KiB and freed, 2000 times) under the runtime against the bare program: CPU time
# (user + system, the program's own getrusage) of each, in adjacent pairs of processes (bare, then
# under the runtime), REPS pairs. Prints the median of the per-pair ratios with a bootstrap 95%
# interval, the medians of both, and the load average.
#   runtime/bench/realloc_growth.sh LIBMEMLENS.so [REPS] [ARGS...]
# ARGS go to the program (default: inplace 256 2000 64; e.g. `moving 256 2000 64`).
set -eu
LIB=${1:?usage: realloc_growth.sh LIBMEMLENS.so [REPS] [ARGS...]}
REPS=${2:-11}
shift; [ $# -gt 0 ] && shift
[ -r "$LIB" ] || { echo "realloc_growth.sh: cannot read $LIB" >&2; exit 2; }
[ $# -gt 0 ] || set -- inplace 256 2000 64
DIR=$(mktemp -d); trap 'rm -rf "$DIR"' EXIT
gcc -O2 "$(dirname "$0")/../tests/realloc_growth.c" -o "$DIR/rg"
cpu() { sed -n 's/^cpu_us //p'; }
for i in $(seq "$REPS"); do
    printf '\rrealloc_growth: pair %d of %d   ' "$i" "$REPS" >&2
    bare=$("$DIR/rg" "$@" | cpu)
    prof=$(LD_PRELOAD=$LIB "$DIR/rg" "$@" | cpu)
    echo "$bare $prof"
done >"$DIR/pairs"
printf '\r%40s\r' '' >&2
awk -v load="$(cut -d' ' -f1-3 /proc/loadavg)" -v args="$*" '
function median(a, n,   i, j, t, b) {
    for (i = 1; i <= n; i++) b[i] = a[i]
    for (i = 2; i <= n; i++) { t = b[i]; for (j = i - 1; j >= 1 && b[j] > t; j--) b[j + 1] = b[j]; b[j + 1] = t }
    return n % 2 ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2
}
{ n++; bare[n] = $1; prof[n] = $2; r[n] = $2 / ($1 > 0 ? $1 : 1) }
END {
    srand(1)
    for (k = 1; k <= 2000; k++) {
        for (i = 1; i <= n; i++) s[i] = r[int(rand() * n) + 1]
        m[k] = median(s, n)
    }
    lo_hi_n = 2000
    for (i = 2; i <= lo_hi_n; i++) { t = m[i]; for (j = i - 1; j >= 1 && m[j] > t; j--) m[j + 1] = m[j]; m[j + 1] = t }
    printf "realloc growth (%s), %d pairs; load: %s\n", args, n, load
    printf "CPU time: bare %.1f ms, under the runtime %.1f ms (medians)\n", median(bare, n) / 1e3, median(prof, n) / 1e3
    printf "ratio (runtime / bare, per pair): median %.2f, 95%% interval [%.2f, %.2f]\n", median(r, n), m[51], m[1950]
}' "$DIR/pairs"
