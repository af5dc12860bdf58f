/* Four allocation sites of known behaviour, for the peak, leaks, temporaries and timeline views:
 *   peak_builder    holds 96 MiB (4 MiB blocks) for a while in the middle of the run, then frees it
 *   leak_site       leaks 4 KiB blocks steadily (about 6 MiB by the end)
 *   churn_site      allocates and frees 256 B blocks at once (about 512 MiB in all)
 *   long_lived_site 8 MiB (2 MiB blocks) kept from the start until just before exit
 * Big blocks are sampled with probability near 1, so the estimate of the peak is close to exact; the
 * small blocks (leak, churn) carry the sampling error of about sqrt(R x bytes).
 * Prints `true_peak <bytes>`: the most bytes this program held at once.
 *   views_sites [ROUNDS]   (default 10 rounds of about 50 ms) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define KEEP(p) __asm__ volatile("" : : "r"(p) : "memory")

static size_t live, true_peak;
static void held(long delta)
{
    live += (size_t)delta;
    if (live > true_peak)
        true_peak = live;
}

static void nap(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

#define NLONG 4
#define LONG_SIZE (2l << 20)
#define NPEAK 24
#define PEAK_SIZE (4l << 20)
static void *longs[NLONG], *peaks[NPEAK];

__attribute__((noinline)) void long_lived_site(void)
{
    for (int i = 0; i < NLONG; i++) {
        longs[i] = malloc(LONG_SIZE);
        memset(longs[i], 1, LONG_SIZE);
        held(LONG_SIZE);
    }
}

__attribute__((noinline)) void leak_site(int n)
{
    for (int i = 0; i < n; i++) {
        void *p = malloc(4096);
        memset(p, 2, 4096);
        KEEP(p);
        held(4096);
    }
}

__attribute__((noinline)) void churn_site(long n)
{
    for (long i = 0; i < n; i++) {
        char *p = malloc(256);
        p[0] = (char)i;
        KEEP(p);
        free(p);
    }
}

__attribute__((noinline)) void peak_builder(void)
{
    for (int i = 0; i < NPEAK; i++) {
        peaks[i] = malloc(PEAK_SIZE);
        memset(peaks[i], 3, PEAK_SIZE);
        held(PEAK_SIZE);
    }
}

__attribute__((noinline)) void peak_release(void)
{
    for (int i = 0; i < NPEAK; i++) {
        free(peaks[i]);
        held(-PEAK_SIZE);
    }
}

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 10; /* more rounds: a longer run, a bigger leak */
    long_lived_site();
    for (int round = 0; round < rounds; round++) {
        leak_site(150);
        churn_site(200000);
        if (round == 5) {
            peak_builder();
            churn_site(200000);
            nap(150);
            peak_release();
        }
        nap(20);
    }
    for (int i = 0; i < NLONG; i++) {
        free(longs[i]);
        held(-LONG_SIZE);
    }
    printf("true_peak %zu\n", true_peak);
    return 0;
}
