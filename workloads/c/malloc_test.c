/* malloc_test: the synthetic malloc-test loop of the heap-profiling study (docs/published-studies.md, study 1).
 *
 *   malloc_test THREADS SIZE DEPTH OPS
 *
 * Each of THREADS threads descends DEPTH noinline frames (so a profiler's unwinder has a stack of about
 * DEPTH frames to walk, as in the published test) and then runs two timed phases without touching the
 * memory it gets:
 *   pairs:   OPS times malloc(SIZE); free()             -> cycles per malloc/free pair
 *   mallocs: OPS mallocs in batches of BATCH, each batch timed alone and freed untimed
 *                                                          -> cycles per malloc
 * Times come from the TSC around each loop (not around each call: rdtsc costs as much as a malloc).
 * With MALLOC_TEST_WARMUP_MS=N each thread first runs untimed pairs for N ms: a tracer such as heaptrack
 * blocks the program until its consumer process is up (~0.5 s here), which is start-up, not per-call cost.
 * The result is one line of key=value pairs, means over threads, for `memlens study` to parse. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

#define BATCH 64

struct params {
    long threads, size, depth, ops, warmup_ms;
};

struct result {
    double pair_cycles;   /* cycles per malloc+free pair */
    double malloc_cycles; /* cycles per malloc */
};

struct worker {
    pthread_t tid;
    const struct params *p;
    pthread_barrier_t *start;
    struct result r;
};

/* Keep the compiler from eliding a malloc/free pair whose memory is never used (gcc may do that). */
static inline void keep(void *p) { __asm__ volatile("" : : "r"(p) : "memory"); }

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void warm_up(const struct params *p) {
    double until = now_ms() + (double)p->warmup_ms;
    while (p->warmup_ms > 0 && now_ms() < until)
        for (int i = 0; i < 1000; i++) {
            void *b = malloc((size_t)p->size);
            keep(b);
            free(b);
        }
}

static double time_pairs(const struct params *p) {
    uint64_t t0 = __rdtsc();
    for (long i = 0; i < p->ops; i++) {
        void *b = malloc((size_t)p->size);
        keep(b);
        free(b);
    }
    return (double)(__rdtsc() - t0) / (double)p->ops;
}

static double time_mallocs(const struct params *p) {
    void *blocks[BATCH];
    uint64_t total = 0;
    long done = 0;
    while (done < p->ops) {
        long n = p->ops - done < BATCH ? p->ops - done : BATCH;
        uint64_t t0 = __rdtsc();
        for (long i = 0; i < n; i++) {
            blocks[i] = malloc((size_t)p->size);
            keep(blocks[i]);
        }
        total += __rdtsc() - t0;
        for (long i = 0; i < n; i++)
            free(blocks[i]);
        done += n;
    }
    return (double)total / (double)p->ops;
}

/* The loops run at the bottom of a chain of `depth` real frames. noinline plus work after the call
 * keeps each frame (no inlining, no tail call), so every sampled stack has depth + a few frames. */
__attribute__((noinline)) static long descend(struct worker *w, long depth) {
    if (depth <= 1) {
        warm_up(w->p);
        w->r.pair_cycles = time_pairs(w->p);
        w->r.malloc_cycles = time_mallocs(w->p);
        return 1;
    }
    long n = descend(w, depth - 1);
    __asm__ volatile("" : "+r"(n));
    return n + 1;
}

static void *worker_main(void *arg) {
    struct worker *w = arg;
    pthread_barrier_wait(w->start);
    descend(w, w->p->depth);
    return NULL;
}

static int parse_arg(const char *s, long min, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s || v < min)
        return -1;
    *out = v;
    return 0;
}

int main(int argc, char **argv) {
    struct params p;
    if (argc != 5 || parse_arg(argv[1], 1, &p.threads) || parse_arg(argv[2], 0, &p.size) ||
        parse_arg(argv[3], 1, &p.depth) || parse_arg(argv[4], 1, &p.ops)) {
        fprintf(stderr, "usage: malloc_test THREADS SIZE DEPTH OPS (THREADS, DEPTH, OPS >= 1)\n");
        return 2;
    }
    const char *warm = getenv("MALLOC_TEST_WARMUP_MS");
    p.warmup_ms = 0;
    if (warm && *warm && parse_arg(warm, 0, &p.warmup_ms)) {
        fprintf(stderr, "malloc_test: MALLOC_TEST_WARMUP_MS must be a number of milliseconds\n");
        return 2;
    }
    struct worker *ws = calloc((size_t)p.threads, sizeof *ws);
    pthread_barrier_t start;
    if (!ws || pthread_barrier_init(&start, NULL, (unsigned)p.threads)) {
        fprintf(stderr, "malloc_test: out of memory\n");
        return 1;
    }
    for (long i = 0; i < p.threads; i++) {
        ws[i] = (struct worker){.p = &p, .start = &start};
        if (pthread_create(&ws[i].tid, NULL, worker_main, &ws[i])) {
            fprintf(stderr, "malloc_test: cannot create thread %ld\n", i);
            return 1;
        }
    }
    double pair = 0, mal = 0;
    for (long i = 0; i < p.threads; i++) {
        pthread_join(ws[i].tid, NULL);
        pair += ws[i].r.pair_cycles;
        mal += ws[i].r.malloc_cycles;
    }
    printf("malloc_test threads=%ld size=%ld depth=%ld ops=%ld cycles_per_pair=%.3f cycles_per_malloc=%.3f\n",
           p.threads, p.size, p.depth, p.ops, pair / (double)p.threads, mal / (double)p.threads);
    free(ws);
    return 0;
}
