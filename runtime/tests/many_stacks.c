/* N distinct allocation stacks, for the scale tests and scripts/scale-bench.sh.
 *
 *   many_stacks N [SIZE [STOPDIR]]
 *
 * Path p (0 <= p < N) walks k = ceil(log2 N) levels of rec0/rec1, one level per bit of p, and
 * allocates one block of SIZE bytes (default 64) at the bottom, freed at once: N stacks that differ
 * by their function names, not only their addresses (the two functions have different bodies, so
 * the compiler cannot fold them). It prints what it did, the count a profile must match:
 * `allocations N bytes N*SIZE vmhwm_kb PEAK_RSS`. With STOPDIR it waits, after the allocations,
 * until STOPDIR/stop exists (for `memlens ctl status`). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile unsigned long sink;

__attribute__((noinline)) static void rec1(unsigned long p, int d, size_t size);

__attribute__((noinline)) static void rec0(unsigned long p, int d, size_t size)
{
    if (d == 0) {
        void *x = malloc(size);
        sink += (unsigned long)x;
        free(x);
        return;
    }
    if (p & 1)
        rec1(p >> 1, d - 1, size);
    else
        rec0(p >> 1, d - 1, size);
    sink++; /* not a tail call: every level keeps its frame */
}

__attribute__((noinline)) static void rec1(unsigned long p, int d, size_t size)
{
    if (d == 0) {
        void *x = malloc(size);
        sink += (unsigned long)x;
        free(x);
        return;
    }
    if (p & 1)
        rec1(p >> 1, d - 1, size);
    else
        rec0(p >> 1, d - 1, size);
    sink += 2;
}

static long vmhwm_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kb = atol(line + 6);
    if (f)
        fclose(f);
    return kb;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: many_stacks N [SIZE [STOPDIR]]\n");
        return 2;
    }
    unsigned long n = strtoul(argv[1], 0, 10);
    size_t size = argc > 2 ? strtoul(argv[2], 0, 10) : 64;
    int k = 0;
    while ((1ul << k) < n)
        k++;
    for (unsigned long p = 0; p < n; p++)
        rec0(p, k, size);
    printf("allocations %lu bytes %lu vmhwm_kb %ld\n", n, n * size, vmhwm_kb());
    fflush(stdout);
    if (argc > 3) {
        char stop[4096];
        snprintf(stop, sizeof stop, "%s/stop", argv[3]);
        while (access(stop, F_OK) != 0)
            usleep(20000);
    }
    return 0;
}
