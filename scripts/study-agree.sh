#!/usr/bin/env bash
# Do repeated `memlens study` runs agree? For every configuration in all the given JSON files: its
# overhead interval in each, and whether the intervals overlap pairwise; then how many do. The runs'
# files are the study's --json output (scripts/main.sh writes out/study.json). Not a test:
# docs/study.md has the table of three default studies.
#   scripts/study-agree.sh A.json B.json [C.json …] [--all]   (--all: every row, not just the summary)
set -euo pipefail
exec python3 - "$@" <<'PY'
import json, sys
args = [a for a in sys.argv[1:] if a != "--all"]
show_all = "--all" in sys.argv[1:]
if len(args) < 2:
    sys.exit("usage: study-agree.sh A.json B.json [C.json …] [--all]")
runs = [json.load(open(f)) for f in args]
# a row is named by its workload, schedule (both have a placebo) and configuration
name = lambda r: (r["workload"] + ("" if r.get("paired", True) else ", whole processes"), r["config"])
rows = [{name(r): r for r in run["rows"]} for run in runs]
keys = [k for k in rows[0] if all(k in r for r in rows[1:])]
fmt = lambda r: f'{r["overhead_pct"]:+.1f} [{r["ci_low_pct"]:+.1f}, {r["ci_high_pct"]:+.1f}]'
agree = 0
bad = []
for k in keys:
    iv = [r[k] for r in rows]
    ok = all(a["ci_low_pct"] <= b["ci_high_pct"] and b["ci_low_pct"] <= a["ci_high_pct"]
             for i, a in enumerate(iv) for b in iv[i + 1:])
    agree += ok
    line = f'| {k[0]} | {k[1]} | ' + " | ".join(fmt(r) for r in iv) + f' | {"yes" if ok else "NO"} |'
    if show_all or not ok:
        bad.append(line)
print(f"| workload | config | " + " | ".join(f"run {i + 1}" for i in range(len(runs))) + " | overlap |")
print("|---|---|" + "---|" * len(runs) + "---|")
print("\n".join(bad))
secs = ", ".join("%.0f s" % r["seconds"] for r in runs)
print(f"\n{agree} of {len(keys)} configurations: the {len(runs)} intervals overlap pairwise; run times {secs}")
PY
