#!/usr/bin/env bash
# The screens behind docs/report-ui.md: one four-thread C++ program (runtime/tests/cxx_service.cc)
# profiled by memlens and by heaptrack, seen in memlens's page and pprof's web UI (headless
# Chromium) and in heaptrack_gui (on Xvfb): what each shows first, and the screens one or two
# actions away. PNGs go to out/report-ui/.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh --ui-compare
cargo build --release -q
out=$PWD/out/report-ui
rm -rf "$out"
mkdir -p "$out"
M=$PWD/target/release/memlens
g++ -O2 -g -fno-omit-frame-pointer -pthread -o "$out/cxx_service" runtime/tests/cxx_service.cc
(cd "$out" && "$M" run -o cxx.pb.gz -- ./cxx_service && heaptrack -o heaptrack.cxx ./cxx_service >/dev/null)
"$M" report "$out/cxx.pb.gz" --html "$out/cxx.html" >/dev/null

profile=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null || true; done
  rm -rf "$profile"
}
trap cleanup EXIT
shot() { # URL PNG: the first 1280×900 of a page
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync \
    --user-data-dir="$profile" --window-size=1280,900 --screenshot="$2" "$1" 2>/dev/null
}

shot "file://$out/cxx.html" "$out/memlens-first.png"

# pprof's web UI on memlens's profile: first screen, then SAMPLE → inuse_space and → peak_space
# (the menu's choice is the si= parameter of the URL)
port=$((18000 + RANDOM % 1000))
setsid go tool pprof -http="127.0.0.1:$port" -no_browser "$out/cxx.pb.gz" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port/ui/" && break; sleep 0.2; done
shot "http://127.0.0.1:$port/ui/" "$out/pprof-first.png"
for si in inuse_space peak_space; do
  shot "http://127.0.0.1:$port/ui/?si=$si" "$out/pprof-$si.png"
done

# heaptrack_gui on heaptrack's own file, on a virtual display: first screen, then the Flame Graph
# tab (its default cost is the peak). The tab's place is that of heaptrack_gui 1.4 at 1280×900.
display=:$((70 + RANDOM % 20))
setsid Xvfb "$display" -screen 0 1280x900x24 >/dev/null 2>&1 &
pids+=($!)
sleep 1
DISPLAY=$display setsid heaptrack_gui "$out/heaptrack.cxx.zst" >/dev/null 2>&1 &
pids+=($!)
DISPLAY=$display xdotool search --sync --name heaptrack >/dev/null
sleep 8 # it reads the file after its window shows
DISPLAY=$display import -window root "$out/heaptrack-first.png"
DISPLAY=$display xdotool mousemove 443 37 click 1
sleep 3
DISPLAY=$display import -window root "$out/heaptrack-flamegraph.png"
echo "memlens: screens in $out"
