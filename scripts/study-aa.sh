#!/usr/bin/env bash
# The false-resolution rate of `memlens study`: how often a difference between placebos (A/A: the
# same switch, sampling off on both sides) is called resolved. Runs N paired studies with four
# placebos per process (each study: 3 placebos against off and 3 against each other, per workload)
# and sums what their JSON says. With BUSY=K, K busy loops run beside the studies (a loaded
# machine); the load average is printed with the result. Not a test: docs/study.md has the table.
#   scripts/study-aa.sh [N] [extra study options…]     (default N=10; about 1 min per study)
#   BUSY=4 scripts/study-aa.sh 10
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-10}
shift || true
cargo build --release -q
OUT=$(mktemp -d /tmp/memlens-aa.XXXXXX)
pids=()
for _ in $(seq 1 "${BUSY:-0}"); do
  sh -c 'while :; do :; done' &
  pids+=($!)
done
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done' EXIT
loads=()
for i in $(seq 1 "$N"); do
  ./target/release/memlens study --placebos 4 --workload synthetic,redis,pipeline --working-sets llc \
    --intervals 64K,2M --max-time 0 --no-exact --json "$OUT/aa-$i.json" "$@" > "$OUT/aa-$i.txt"
  loads+=("$(cut -d' ' -f1 /proc/loadavg)")
  echo "study $i of $N done (load average ${loads[-1]})" >&2
done
python3 - "$OUT" "${loads[*]}" <<'PY'
import json, glob, sys
out, loads = sys.argv[1], sys.argv[2].split()
n = r = z = 0
for f in sorted(glob.glob(out + "/aa-*.json")):
    aa = json.load(open(f)).get("aa") or {}
    n += aa.get("comparisons", 0); r += aa.get("resolved", 0); z += aa.get("excludes_zero", 0)
lf = [float(x) for x in loads]
print(f"studies {len(loads)}, load average {min(lf)}-{max(lf)}: {n} A/A comparisons, "
      f"{r} called resolved ({100*r/max(n,1):.1f}%); {z} excluded 0 ({100*z/max(n,1):.1f}%, the rate without the placebo's band)")
PY
echo "results in $OUT"
