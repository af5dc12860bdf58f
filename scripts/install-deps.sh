#!/usr/bin/env bash
# Installs the Debian packages memlens uses: the allocators it compares, the unwinder it loads, the
# programs its tests run under the runtime, and the baselines its study measures against.
# Idempotent and quiet when everything is already there; needs root (or sudo) for apt-get.
set -euo pipefail

PKGS=(
  # allocators for `bench alloc` and the study's baselines
  libjemalloc2 libtcmalloc-minimal4 libgoogle-perftools4 libmimalloc2.0 libtbbmalloc2
  # DWARF unwinder the runtime dlopens (libunwind-dev for the unversioned .so name)
  libunwind8 libunwind-dev
  # exact-tracing baseline, perf tooling, real programs the tests run under the runtime
  heaptrack linux-perf sqlite3 git g++ python3
  # /usr/bin/time: whole-process times in scripts/vs-heaptrack.sh and scripts/check-cost.sh
  time
  # zstd unpacks the Parca server the e2e tests run (../shared/tools/parca/parca.sh)
  zstd
  # real servers the reliability, attach and serve tests drive (redis-benchmark/redis-cli come with redis-tools)
  redis-server redis-tools curl
  # daemons and privilege-dropping workers the survival tests run under memlens (tests/e2e/survival.rs):
  # nginx in daemon mode, postgres with pgbench (postgresql-15 holds postgres, initdb, pg_ctl and pgbench)
  nginx postgresql
  # `go tool pprof`: the tests check that pprof itself reads our profiles
  golang-go
  # persistent-memory pool for `bench bandwidth` (indirection case)
  libpmemobj1 libpmemobj-dev
  # real programs whose peak RSS scripts/rss-bench.sh compares with and without memlens (issue 29)
  ripgrep nodejs
  # GNU time: the peak RSS of a command (tests/e2e/util.rs measured(), scripts/rss-bench.sh, scale-bench.sh)
  time
  # debug symbols live in /usr/lib/debug when -dbgsym packages are present; elfutils for eu-readelf in tests
  elfutils
  # objdump: the fast-path shape test disassembles libmemlens.so; ar: the C unit tests' archive
  # (gcc brings binutils and its sanitizers, libasan/libubsan, which the C unit tests run under)
  binutils
  # glibc DWARF under /usr/lib/debug/.build-id: `memlens report` shows libc frames with file:line
  libc6-dbg
  # tests/e2e/harmless.rs: a service under systemd's @system-service seccomp list (libseccomp, the list
  # from systemd-analyze), setpriv (util-linux)
  libseccomp-dev systemd util-linux
  # allocators linked statically into the programs tests/e2e/allocators.rs builds (libjemalloc.a,
  # libtcmalloc_minimal.a; Debian's libmimalloc-dev ships no static library: the test compiles
  # mimalloc's sources from the libmimalloc-sys crate instead), and cmake, which the zydis crate's
  # build script runs (memlens-native compiles Zydis's decoder from that crate's sources)
  libjemalloc-dev libmimalloc-dev libgoogle-perftools-dev cmake
  # pip, to fetch the ruff wheel (a stripped binary with jemalloc inside) the allocators test runs
  python3-pip
  # sys/sdt.h: the runtime's otel_memory USDT probes (runtime/src/record/usdt.c); bpftrace counts them in
  # tests/e2e/usdt.rs, as an eBPF profiler would consume them
  systemtap-sdt-dev bpftrace
  # strace: tests/e2e/harmless.rs counts the runtime thread's opens of its /proc files
  strace
  # containers (tests/e2e/containers.rs): podman with its OCI runtimes, mmdebstrap for the test
  # rootfs, systemd-nspawn; python3-yaml checks docs/containers.md's Kubernetes manifest
  podman runc crun mmdebstrap systemd-container python3-yaml
  # musl-gcc: tests/e2e/reach.rs builds a musl program (memlens run says it cannot profile it, runs it)
  musl-tools
  # headless Chromium: the tests click, type and search in `memlens report --html` (report_page.rs)
  chromium
)
# `scripts/install-deps.sh --ui-compare`: also what scripts/report-ui-compare.sh runs to set
# memlens's page beside heaptrack_gui (it needs a display: Xvfb) and pprof's web UI (docs/report-ui.md)
if [ "${1:-}" = "--ui-compare" ]; then
  PKGS+=(heaptrack-gui xvfb xdotool imagemagick)
fi

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "memlens: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
# A system whose package manager has no Chromium (some architectures, some releases) goes on
# without it: the browser tests then say SKIPPED, and only there.
if [[ " ${missing[*]} " == *" chromium "* ]] && ! apt-cache policy chromium 2>/dev/null | grep -q "Candidate: [0-9]"; then
  echo "memlens: no chromium package here: the report page's browser tests will be skipped" >&2
  keep=()
  for m in "${missing[@]}"; do [ "$m" = chromium ] || keep+=("$m"); done
  missing=("${keep[@]}")
  [ ${#missing[@]} -eq 0 ] && exit 0
fi
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
