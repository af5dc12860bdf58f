/* The realloc-growth loop: one buffer grown with realloc in STEP-byte steps up to MAX, then freed,
 * ROUNDS times. The live heap is never above MAX (plus, in `moving` mode, a second buffer grown in
 * turn with the first, so neither can grow in place: each step moves one of them).
 *   realloc_growth [inplace|moving] [MAX_KIB] [ROUNDS] [STEP]   (defaults: inplace 256 2000 64)
 * Prints `true_peak <bytes>` (the most bytes this program held at once, by its own exact count),
 * `checksum <n>`, `maxrss_kib <n>` and `cpu_us <n>` (user + system time, getrusage). Used by tests/e2e/views.rs (live, peak and
 * timeline must follow what the program holds) and by the realloc-growth benchmark of
 * docs/heap-views.md (its CPU time under memlens against the bare program's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static size_t live, true_peak;

static void held(size_t from, size_t to)
{
    live = live - from + to;
    if (live > true_peak)
        true_peak = live;
}

/* One call site for every step, so the profile has one growing stack per mode. */
static __attribute__((noinline)) char *grow(char *p, size_t from, size_t to)
{
    char *q = realloc(p, to);
    if (!q) {
        fprintf(stderr, "realloc_growth: out of memory at %zu bytes\n", to);
        exit(1);
    }
    held(from, to);
    q[to - 1] = (char)to; /* touch the new end: the program uses what it grew */
    return q;
}

int main(int argc, char **argv)
{
    int moving = argc > 1 && strcmp(argv[1], "moving") == 0;
    size_t max = (argc > 2 ? strtoull(argv[2], NULL, 0) : 256) << 10;
    long rounds = argc > 3 ? atol(argv[3]) : 2000;
    size_t step = argc > 4 ? strtoull(argv[4], NULL, 0) : 64;
    unsigned long sum = 0;
    for (long r = 0; r < rounds; r++) {
        char *a = NULL, *b = NULL;
        for (size_t n = step; n <= max; n += step) {
            a = grow(a, n - step, n);
            if (moving)
                b = grow(b, n - step, n);
        }
        sum += (unsigned char)a[max - 1] + (b ? (unsigned char)b[max - 1] : 0);
        free(a);
        held(max, 0);
        if (b) {
            free(b);
            held(max, 0);
        }
    }
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    long cpu_us = (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000l + ru.ru_utime.tv_usec + ru.ru_stime.tv_usec;
    printf("true_peak %zu\nchecksum %lu\nmaxrss_kib %ld\ncpu_us %ld\n", true_peak, sum, ru.ru_maxrss, cpu_us);
    return 0;
}
