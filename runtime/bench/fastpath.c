/* malloc-test-style loop for checking the runtime's own cost (not a test, not the documented study):
 * each thread calls down ~10 frames, then times N pairs of malloc(512)/free with the TSC.
 * Prints the median over threads of TSC ticks per pair.
 *   fastpath THREADS PAIRS */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>

static long pairs;
static double ticks[64];
static void *volatile sink;

static __attribute__((noinline)) double loop(void)
{
    unsigned long long t0 = __rdtsc();
    for (long i = 0; i < pairs; i++) {
        void *p = malloc(512);
        sink = p;
        free(p);
    }
    return (double)(__rdtsc() - t0) / (double)pairs;
}

static __attribute__((noinline)) double descend(int depth)
{
    if (depth == 0)
        return loop();
    double r = descend(depth - 1);
    sink = &r; /* not a tail call: keep the frames */
    return r;
}

static void *worker(void *arg)
{
    ticks[(long)arg] = descend(9);
    return NULL;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    pairs = argc > 2 ? atol(argv[2]) : 10000000;
    if (threads < 1 || threads > 64)
        return 2;
    pthread_t t[64];
    for (long i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    qsort(ticks, (size_t)threads, sizeof ticks[0], cmp);
    printf("%.2f\n", ticks[threads / 2]);
    return 0;
}
