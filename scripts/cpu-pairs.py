#!/usr/bin/env python3
"""CPU time of one program bare and under one or more builds of the runtime, in adjacent runs.

    scripts/cpu-pairs.py LIB[,LIB...] ROUNDS INTERVAL -- PROGRAM [ARGS...]
    e.g. scripts/cpu-pairs.py target/release/build/memlens-native-*/out/libmemlens.so 31 512K \\
             -- perl runtime/bench/hashes.pl

Each round runs the program bare, then preloaded with each LIB (as `memlens run` does: the run
directory on /dev/shm, sampling at INTERVAL), and takes each run's user + system CPU from
getrusage (microseconds: GNU time's 10 ms steps are 2 % of a half-second program). Prints the
median ratio to the round's bare run for each LIB with a 95 % interval of that median (order
statistics of the binomial). Not a test: run it on a quiet machine and say the load.
"""
import math
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile


def usage():
    sys.exit(__doc__.split("\n\n")[1])


def cpu_of(cmd, env):
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def median_interval(v):
    v = sorted(v)
    k = len(v)
    lo = max(0, int(k / 2 - 1.96 * math.sqrt(k) / 2))
    hi = min(k - 1, int(math.ceil(k / 2 + 1.96 * math.sqrt(k) / 2)))
    return statistics.median(v), v[lo], v[hi]


def main():
    if "--" not in sys.argv or sys.argv.index("--") != 4:
        usage()
    libs, rounds, interval = sys.argv[1].split(","), sys.argv[2], sys.argv[3]
    cmd = sys.argv[5:]
    if not rounds.isdigit() or int(rounds) < 1 or not cmd:
        usage()
    for lib in libs:
        if not os.access(lib, os.R_OK):
            sys.exit(f"cpu-pairs: cannot read {lib}")
    run_dir = tempfile.mkdtemp(prefix="cpu-pairs.", dir="/dev/shm")
    ctl = os.path.join(run_dir, "ctl")
    os.mkdir(ctl, 0o700)
    ratios = {lib: [] for lib in libs}
    bare = []
    try:
        for _ in range(int(rounds)):
            b = cpu_of(cmd, dict(os.environ))
            bare.append(b)
            for lib in libs:
                env = dict(os.environ, LD_PRELOAD=lib, MEMLENS_INTERVAL=interval, MEMLENS_RUN_DIR=run_dir,
                           MEMLENS_OUT=os.path.join(run_dir, "d"), MEMLENS_CTL_DIR=ctl,
                           MEMLENS_MAX_STACKS="262144")
                ratios[lib].append(cpu_of(cmd, env) / b)
                for f in os.listdir(run_dir):
                    if f != "ctl":
                        os.remove(os.path.join(run_dir, f))
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    print(f"load {os.getloadavg()[0]:.2f}; bare CPU median {statistics.median(bare):.3f} s; "
          f"{rounds} rounds at {interval}")
    for lib in libs:
        m, lo, hi = median_interval(ratios[lib])
        print(f"  {lib}: {m:.3f}x bare (95 % interval of the median {lo:.3f}..{hi:.3f})")


if __name__ == "__main__":
    main()
