/* malloc_test: the synthetic malloc-test loop of the heap-profiling study (`memlens study`;
 * docs/published-studies.md, study 1).
 *
 *   malloc_test THREADS SIZE DEPTH OPS
 *   malloc_test --paired THREADS SIZE DEPTH BLOCK_MS ROUNDS SEED CONFIGS
 *   malloc_test --window THREADS SIZE DEPTH OPS INTERVAL
 *
 * Each of THREADS threads descends DEPTH noinline frames (so a profiler's unwinder has a stack of about
 * DEPTH frames to walk, as in the published test) and then mallocs SIZE-byte blocks it never touches.
 *
 * Plain mode, for profilers that cannot be switched at run time (one process per configuration):
 *   pairs:   OPS times malloc(SIZE); free()             -> cycles per malloc/free pair
 *   mallocs: OPS mallocs in batches of BATCH, each batch timed alone and freed untimed
 *                                                          -> cycles per malloc
 * and one line of key=value pairs, means over threads. With MALLOC_TEST_WARMUP_MS=N each thread first
 * runs untimed pairs for N ms: a tracer such as heaptrack blocks the program until its consumer
 * process is up (~0.5 s here), which is start-up, not per-call cost.
 *
 * Paired mode (in one process, as runtime/bench/fastpath.c pairs): the threads time batches of mallocs without pause
 * while the main thread switches the profiler between configurations in blocks of BLOCK_MS; each
 * round is off, c1, off, c2, ..., off with the CONFIGS in an order shuffled per round (SEED). A batch
 * counts for the block it started and ended in (batches across a switch are dropped). CONFIGS is a
 * comma-separated list of `m<BYTES>` (memlens at that interval, under the runtime loaded inactive) and
 * `j<LG>` (jemalloc's profiler at 2^LG bytes, under MALLOC_CONF=prof:true,prof_active:false) and
 * `p<K>` (the K-th placebo: switched to exactly as off is, so it measures what the pairing reads when
 * nothing changes); the functions are found with dlsym. Prints `block ROUND CONFIG MALLOCS CYCLES` per block (CONFIG 0 is
 * off, i is the i-th of CONFIGS) and `switch THREADS PENDING MAX_NS` for memlens.
 *
 * Window mode, for the profile's quality: OPS untimed pairs to warm up, memlens_reset(), sampling at
 * INTERVAL (0 = exact) for OPS pairs, stop: the dump at exit holds exactly that window, the same in
 * every run. Times come from the TSC around batches (rdtsc costs as much as a malloc). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <x86intrin.h>

#define BATCH 64
#define PREEMPTED 2000000

#define MAX_CONFIGS 64

enum mode { PLAIN, PAIRED, WINDOW };

struct params {
    enum mode mode;
    long threads, size, depth, ops, warmup_ms;
    long block_ms, rounds, seed, interval;
    int nconfigs;
    char kind[MAX_CONFIGS]; /* 'm' memlens, 'j' jemalloc, 'p' placebo */
    long value[MAX_CONFIGS]; /* interval in bytes, or lg of it */
    long nblocks;            /* paired: blocks in all (rounds x (2 configs + 1)) */
};

/* Paired mode: the block under way (-1 = warm-up, not counted); every thread's sums per block. */
static _Atomic long cur_block = -1;
static _Atomic int done;

struct result {
    double pair_cycles;   /* cycles per malloc+free pair */
    double malloc_cycles; /* cycles per malloc */
};

struct worker {
    pthread_t tid;
    const struct params *p;
    pthread_barrier_t *start;
    struct result r;
    uint64_t *cycles, *mallocs; /* paired: per block */
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

/* Paired mode: batches of mallocs, timed, until the main thread says done. */
static void paired_loop(struct worker *w) {
    void *blocks[BATCH];
    size_t size = (size_t)w->p->size;
    while (!atomic_load_explicit(&done, memory_order_relaxed)) {
        long b = atomic_load_explicit(&cur_block, memory_order_relaxed);
        uint64_t t0 = __rdtsc();
        for (int i = 0; i < BATCH; i++) {
            blocks[i] = malloc(size);
            keep(blocks[i]);
        }
        uint64_t dt = __rdtsc() - t0;
        /* A batch of 64 mallocs takes microseconds; one over PREEMPTED cycles (~1 ms) was preempted by
         * another program of a loaded machine, which is not the cost we measure. */
        if (b >= 0 && dt < PREEMPTED && atomic_load_explicit(&cur_block, memory_order_relaxed) == b) {
            w->cycles[b] += dt;
            w->mallocs[b] += BATCH;
        }
        for (int i = 0; i < BATCH; i++)
            free(blocks[i]);
    }
}

/* The C API of the runtime and jemalloc's mallctl, found at run time (absent: NULL). */
static struct {
    int (*start)(void), (*stop)(void), (*set_interval)(size_t), (*reset)(void);
    int (*mallctl)(const char *, void *, size_t *, void *, size_t);
} api;

static void find_api(void) {
    api.start = (int (*)(void))dlsym(RTLD_DEFAULT, "memlens_start");
    api.stop = (int (*)(void))dlsym(RTLD_DEFAULT, "memlens_stop");
    api.set_interval = (int (*)(size_t))dlsym(RTLD_DEFAULT, "memlens_set_interval");
    api.reset = (int (*)(void))dlsym(RTLD_DEFAULT, "memlens_reset");
    api.mallctl = (int (*)(const char *, void *, size_t *, void *, size_t))dlsym(RTLD_DEFAULT, "mallctl");
}

static int je_active(bool on) { return api.mallctl("prof.active", NULL, NULL, &on, sizeof on); }

/* Switch to configuration c (0 = off): off stops each profiler the configurations use, once. */
static int apply(const struct params *p, int c) {
    if (c == 0) {
        bool m = false, j = false;
        for (int i = 0; i < p->nconfigs; i++)
            m |= p->kind[i] == 'm', j |= p->kind[i] == 'j';
        if (m)
            api.stop();
        return j ? je_active(false) : 0;
    }
    if (p->kind[c - 1] == 'p') /* A/A: the same switch as to off, sampling stays off */
        return apply(p, 0);
    long v = p->value[c - 1];
    if (p->kind[c - 1] == 'm') {
        api.set_interval((size_t)v);
        api.start();
        return 0;
    }
    size_t lg = (size_t)v;
    if (api.mallctl("prof.reset", NULL, NULL, &lg, sizeof lg))
        return -1;
    return je_active(true);
}

/* The loops run at the bottom of a chain of `depth` real frames. noinline plus work after the call
 * keeps each frame (no inlining, no tail call), so every sampled stack has depth + a few frames. */
__attribute__((noinline)) static long descend(struct worker *w, long depth) {
    if (depth <= 1) {
        if (w->p->mode == PAIRED) {
            paired_loop(w);
        } else if (w->p->mode == WINDOW) {
            time_pairs(w->p); /* warm-up, before the window opens */
            pthread_barrier_wait(w->start);
            pthread_barrier_wait(w->start); /* main: reset, set the interval, start */
            time_pairs(w->p);
        } else {
            warm_up(w->p);
            w->r.pair_cycles = time_pairs(w->p);
            w->r.malloc_cycles = time_mallocs(w->p);
        }
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

static int parse_configs(struct params *p, const char *list) {
    char buf[1024];
    if (strlen(list) >= sizeof buf)
        return -1;
    strcpy(buf, list);
    p->nconfigs = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (p->nconfigs == MAX_CONFIGS || (tok[0] != 'm' && tok[0] != 'j' && tok[0] != 'p'))
            return -1;
        p->kind[p->nconfigs] = tok[0];
        if (parse_arg(tok + 1, tok[0] == 'm' ? 1 : 0, &p->value[p->nconfigs]))
            return -1;
        if (tok[0] != 'p' && (tok[0] == 'm' ? !api.start || !api.set_interval : !api.mallctl)) {
            fprintf(stderr, "malloc_test: configuration %s needs %s, which is not loaded\n", tok,
                    tok[0] == 'm' ? "the memlens runtime" : "jemalloc");
            return -2;
        }
        p->nconfigs++;
    }
    return p->nconfigs ? 0 : -1;
}

static long now_rand(uint64_t *x) {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return (long)(*x >> 1);
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) && errno == EINTR)
        ;
}

/* Paired mode, main thread: the schedule of blocks, then one line per block. */
static void paired_main(const struct params *p, struct worker *ws) {
    uint64_t x = (uint64_t)p->seed * 0x9E3779B97F4A7C15ull + 1;
    int order[MAX_CONFIGS];
    int *sched = calloc((size_t)p->nblocks, sizeof *sched);
    long *round = calloc((size_t)p->nblocks, sizeof *round);
    long b = 0;
    for (long r = 0; r < p->rounds; r++) {
        for (int i = 0; i < p->nconfigs; i++)
            order[i] = i + 1;
        for (int i = p->nconfigs - 1; i > 0; i--) { /* Fisher-Yates */
            int j = (int)(now_rand(&x) % (i + 1)), t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        for (int i = 0; i < p->nconfigs; i++) {
            round[b] = r, sched[b++] = 0;
            round[b] = r, sched[b++] = order[i];
        }
        round[b] = r, sched[b++] = 0;
    }
    /* Warm-up: every configuration once, uncounted (first samples intern stacks, jemalloc sets up). */
    for (int c = 0; c <= p->nconfigs; c++) {
        apply(p, c);
        sleep_ms(p->block_ms);
    }
    struct { uint64_t threads, pending, ns; } sw = {0, 0, 0};
    int (*last)(void *) = (int (*)(void *))dlsym(RTLD_DEFAULT, "memlens_last_switch");
    /* The runtime's own account (struct memlens_cost: sampled_ns, calls, cpu_ns) around each block. */
    int (*cost)(uint64_t *) = (int (*)(uint64_t *))dlsym(RTLD_DEFAULT, "memlens_cost");
    uint64_t (*own)[2] = calloc((size_t)p->nblocks, sizeof *own), c0[3], c1[3];
    uint64_t sw_max = 0, pending_max = 0;
    for (long i = 0; i < p->nblocks; i++) {
        atomic_store(&cur_block, -1);
        if (apply(p, sched[i])) {
            fprintf(stderr, "malloc_test: switching the profiler failed\n");
            exit(1);
        }
        if (last && !last(&sw)) {
            sw_max = sw.ns > sw_max ? sw.ns : sw_max;
            pending_max = sw.pending > pending_max ? sw.pending : pending_max;
        }
        atomic_store(&cur_block, i);
        int timed = cost && !cost(c0);
        sleep_ms(p->block_ms);
        if (timed && !cost(c1))
            own[i][0] = c1[0] - c0[0], own[i][1] = c1[2] - c0[2];
    }
    atomic_store(&cur_block, -1);
    apply(p, 0);
    atomic_store(&done, 1);
    for (long t = 0; t < p->threads; t++)
        pthread_join(ws[t].tid, NULL);
    for (long i = 0; i < p->nblocks; i++) {
        uint64_t n = 0, c = 0;
        for (long t = 0; t < p->threads; t++)
            n += ws[t].mallocs[i], c += ws[t].cycles[i];
        printf("block %ld %d %llu %llu", round[i], sched[i], (unsigned long long)n, (unsigned long long)c);
        if (own[i][1])
            printf(" own=%llu/%llu", (unsigned long long)own[i][0], (unsigned long long)own[i][1]);
        printf("\n");
    }
    if (last)
        printf("switch %llu %llu %llu\n", (unsigned long long)sw.threads, (unsigned long long)pending_max,
               (unsigned long long)sw_max);
    free(sched);
    free(round);
    free(own);
}

static int usage(void) {
    fprintf(stderr, "usage: malloc_test THREADS SIZE DEPTH OPS\n"
                    "       malloc_test --paired THREADS SIZE DEPTH BLOCK_MS ROUNDS SEED CONFIGS\n"
                    "       malloc_test --window THREADS SIZE DEPTH OPS INTERVAL\n");
    return 2;
}

/* --paired THREADS SIZE DEPTH BLOCK_MS ROUNDS SEED CONFIGS into *p: 0, or the exit status. */
static int parse_paired(int argc, char **argv, struct params *p) {
    p->mode = PAIRED;
    if (argc != 9 || parse_arg(argv[2], 1, &p->threads) || parse_arg(argv[3], 0, &p->size) ||
        parse_arg(argv[4], 1, &p->depth) || parse_arg(argv[5], 1, &p->block_ms) ||
        parse_arg(argv[6], 1, &p->rounds) || parse_arg(argv[7], 0, &p->seed))
        return usage();
    int e = parse_configs(p, argv[8]);
    if (e)
        return e == -2 ? 1 : usage();
    p->nblocks = p->rounds * (2 * p->nconfigs + 1);
    return 0;
}

/* --window THREADS SIZE DEPTH OPS INTERVAL into *p: 0, or the exit status (1 without the
 * runtime's API to switch the profiler with). */
static int parse_window(int argc, char **argv, struct params *p) {
    p->mode = WINDOW;
    if (argc != 7 || parse_arg(argv[2], 1, &p->threads) || parse_arg(argv[3], 0, &p->size) ||
        parse_arg(argv[4], 1, &p->depth) || parse_arg(argv[5], 1, &p->ops) ||
        parse_arg(argv[6], 0, &p->interval))
        return usage();
    if (!api.reset || !api.set_interval || !api.start) {
        fprintf(stderr, "malloc_test: --window needs the memlens runtime (memlens run --inactive)\n");
        return 1;
    }
    return 0;
}

/* The command line (and MALLOC_TEST_WARMUP_MS) into *p: 0, or the exit status of a bad one
 * (2: usage, 1: cannot run as asked). */
static int parse_params(int argc, char **argv, struct params *p) {
    int bad;
    if (argc > 1 && strcmp(argv[1], "--paired") == 0)
        bad = parse_paired(argc, argv, p);
    else if (argc > 1 && strcmp(argv[1], "--window") == 0)
        bad = parse_window(argc, argv, p);
    else if (argc != 5 || parse_arg(argv[1], 1, &p->threads) || parse_arg(argv[2], 0, &p->size) ||
             parse_arg(argv[3], 1, &p->depth) || parse_arg(argv[4], 1, &p->ops))
        bad = usage();
    else
        bad = 0;
    if (bad)
        return bad;
    const char *warm = getenv("MALLOC_TEST_WARMUP_MS");
    if (warm && *warm && parse_arg(warm, 0, &p->warmup_ms)) {
        fprintf(stderr, "malloc_test: MALLOC_TEST_WARMUP_MS must be a number of milliseconds\n");
        return 2;
    }
    return 0;
}

/* --window: the profiler is reset and started once every worker has warmed up, and stopped when
 * they are done, so its window holds exactly the timed operations. */
static void window_main(const struct params *p, struct worker *ws, pthread_barrier_t *start) {
    pthread_barrier_wait(start); /* the workers start */
    pthread_barrier_wait(start); /* and have warmed up */
    api.reset();
    api.set_interval((size_t)p->interval);
    api.start();
    pthread_barrier_wait(start);
    for (long i = 0; i < p->threads; i++)
        pthread_join(ws[i].tid, NULL);
    api.stop();
    printf("malloc_test window threads=%ld ops=%ld interval=%ld\n", p->threads, p->ops, p->interval);
}

/* The plain run: cycles per pair and per malloc, averaged over the workers. */
static void plain_main(const struct params *p, struct worker *ws) {
    double pair = 0, mal = 0;
    for (long i = 0; i < p->threads; i++) {
        pthread_join(ws[i].tid, NULL);
        pair += ws[i].r.pair_cycles;
        mal += ws[i].r.malloc_cycles;
    }
    printf("malloc_test threads=%ld size=%ld depth=%ld ops=%ld cycles_per_pair=%.3f cycles_per_malloc=%.3f\n",
           p->threads, p->size, p->depth, p->ops, pair / (double)p->threads, mal / (double)p->threads);
}

int main(int argc, char **argv) {
    struct params p = {0};
    find_api();
    int bad = parse_params(argc, argv, &p);
    if (bad)
        return bad;
    struct worker *ws = calloc((size_t)p.threads, sizeof *ws);
    pthread_barrier_t start;
    unsigned parties = (unsigned)p.threads + (p.mode == WINDOW);
    if (!ws || pthread_barrier_init(&start, NULL, parties)) {
        fprintf(stderr, "malloc_test: out of memory\n");
        return 1;
    }
    for (long i = 0; i < p.threads; i++) {
        ws[i] = (struct worker){.p = &p, .start = &start};
        if (p.mode == PAIRED) {
            ws[i].cycles = calloc((size_t)p.nblocks, sizeof(uint64_t));
            ws[i].mallocs = calloc((size_t)p.nblocks, sizeof(uint64_t));
            if (!ws[i].cycles || !ws[i].mallocs) {
                fprintf(stderr, "malloc_test: out of memory\n");
                return 1;
            }
        }
    }
    for (long i = 0; i < p.threads; i++) {
        if (pthread_create(&ws[i].tid, NULL, worker_main, &ws[i])) {
            fprintf(stderr, "malloc_test: cannot create thread %ld\n", i);
            return 1;
        }
    }
    if (p.mode == PAIRED) {
        paired_main(&p, ws);
        return 0;
    }
    if (p.mode == WINDOW) {
        window_main(&p, ws, &start);
        return 0;
    }
    plain_main(&p, ws);
    free(ws);
    return 0;
}
