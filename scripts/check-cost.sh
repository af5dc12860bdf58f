#!/usr/bin/env bash
# What `memlens check` costs a test suite: the suite (scripts/check-suite.sh, eight sqlite3
# scripts, 42 processes with the shell's) run bare and under `memlens check`, alternated
# (A B A B …) so that a drift of the machine's speed hits both alike; per pair the ratio of wall
# and of CPU (user + system) time, whole process trees, measured by /usr/bin/time. Prints the
# median and min–max of each time and of the paired ratios, with the load average.
#   scripts/check-cost.sh [PAIRS] [CHECK OPTIONS…]   (default 10 pairs; --max-peak 1G --max-leak 1M)
# Not a test.
set -euo pipefail
cd "$(dirname "$0")/.."
PAIRS=${1:-10}
shift || true
OPTS=("$@")
[ ${#OPTS[@]} -gt 0 ] || OPTS=(--max-peak 1G --max-leak 1M)
cargo build --release -q
M=$PWD/target/release/memlens
command -v /usr/bin/time >/dev/null || { echo "check-cost.sh: /usr/bin/time missing (apt-get install time)" >&2; exit 2; }
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
timed() { /usr/bin/time -f '%e %U %S' -o "$W/t" "$@" >/dev/null 2>&1 || true; cat "$W/t"; }
load0=$(cut -d' ' -f1 /proc/loadavg)
for _ in $(seq "$PAIRS"); do
    echo "bare $(timed bash scripts/check-suite.sh)"
    echo "check $(cd "$W" && timed "$M" check "${OPTS[@]}" -- bash "$OLDPWD/scripts/check-suite.sh")"
done >"$W/rows"
python3 - "$W/rows" "$load0" "$(cut -d' ' -f1 /proc/loadavg)" "${OPTS[*]}" <<'EOF'
import sys, statistics as st
rows = [l.split() for l in open(sys.argv[1])]
bare = [(float(r[1]), float(r[2]) + float(r[3])) for r in rows if r[0] == "bare"]
chk = [(float(r[1]), float(r[2]) + float(r[3])) for r in rows if r[0] == "check"]
def line(name, xs):
    return f"{name:<22} median {st.median(xs):6.2f}  min {min(xs):6.2f}  max {max(xs):6.2f}"
print(f"memlens check {sys.argv[4]} -- bash scripts/check-suite.sh; {len(bare)} pairs; "
      f"load average {sys.argv[2]} at the start, {sys.argv[3]} at the end")
for i, what in ((0, "wall s"), (1, "cpu s")):
    print(line(f"bare {what}", [b[i] for b in bare]))
    print(line(f"check {what}", [c[i] for c in chk]))
    print(line(f"check/bare {what}", [c[i] / b[i] for b, c in zip(bare, chk)]))
EOF
