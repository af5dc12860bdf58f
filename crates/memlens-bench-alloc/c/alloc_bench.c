/* alloc_bench: the child process of `memlens bench alloc`. It runs one allocation pattern on T threads
 * under whatever allocator was preloaded, and prints one JSON line on stdout:
 *   wall time of the timed region, malloc/free counts, per-call latency quantiles (TSC ticks, clock
 *   cost already subtracted), how long the workers were on a CPU and how long they waited for one
 *   (/proc/thread-self/schedstat: a busy machine shows as waiting), and which object malloc resolved
 *   to (so the parent can prove the preload took effect).
 * With THREADS = 1 the work runs on the process's only thread, as in a single-threaded program (where
 * glibc and memlens's reference allocators skip their locks); with more, on THREADS new threads.
 * Usage: alloc_bench PATTERN SIZE THREADS OPS LIVE TOUCH SAMPLE_EVERY SEED
 *   PATTERN  split | pairs | batch-lifo | batch-fifo | cross | larson
 *   OPS      total malloc calls over all threads (each thread does OPS/THREADS)
 *   LIVE     ring length (split), batch length (batch, cross), slots per thread (larson)
 * Everything the harness itself needs (rings, queues, latency samples) is mmap'd, never malloc'd, so
 * the only malloc/free calls are the pattern's own. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

enum pattern { SPLIT, PAIRS, BATCH_LIFO, BATCH_FIFO, CROSS, LARSON };

static struct {
    enum pattern pattern;
    size_t size;
    unsigned threads;
    uint64_t ops;
    size_t live;
    int touch;
    unsigned sample_every;
    uint64_t seed;
} cfg;

/* ---- harness memory: straight from the kernel so it never disturbs the allocator under test ---- */

static void *raw_alloc(size_t bytes)
{
    void *p = mmap(NULL, bytes ? bytes : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        fprintf(stderr, "alloc_bench: cannot map %zu bytes of harness memory\n", bytes);
        exit(1);
    }
    return p;
}

/* ---- timing: lfence;rdtsc before, rdtscp;lfence after, so the call is fenced on both sides ---- */

static inline uint64_t t_begin(void)
{
    _mm_lfence();
    return __rdtsc();
}

static inline uint64_t t_end(void)
{
    unsigned aux;
    uint64_t t = __rdtscp(&aux);
    _mm_lfence();
    return t;
}

static uint64_t clock_cost;
static uint64_t clock_jitter; /* p95 - p50 of an empty region: smaller differences are noise */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* Median cost of an empty timed region; subtracted from every sample. Its spread (p95 - p50) is
 * the resolution of a sample: a call that reads below it cannot be told from no call at all. */
static uint64_t measure_clock_cost(void)
{
    static uint64_t v[2001];
    for (int i = 0; i < 2001; i++) {
        uint64_t a = t_begin();
        v[i] = t_end() - a;
    }
    qsort(v, 2001, sizeof v[0], cmp_u64); /* before the run: any allocation here is untimed */
    clock_jitter = v[1900] - v[1000];
    return v[1000];
}

/* ---- time on a CPU and time waiting for one ---- */

/* The calling thread's time on a CPU (CLOCK_THREAD_CPUTIME_ID: exact, where schedstat's first field
 * lags by up to a tick) and time runnable but waiting for a CPU (/proc/thread-self/schedstat's second
 * field, brought up to date each time the thread is put on a CPU, so current while it runs), in ns,
 * and the monotonic times at which the reading began and ended. Read with raw system calls: no
 * malloc. `ok` is 0 where the kernel has no schedstat. */
struct sched {
    long long begin, end, on_cpu, waiting;
    int ok;
};

static long long ns_of(const struct timespec *t)
{
    return (long long)t->tv_sec * 1000000000ll + t->tv_nsec;
}

static struct sched sched_now(void)
{
    struct sched r = {0, 0, 0, 0, 0};
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    r.begin = ns_of(&t);
    char buf[128];
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (n > 0) {
            buf[n] = 0;
            char *end;
            strtoll(buf, &end, 10);
            r.waiting = strtoll(end, NULL, 10);
            r.ok = end != buf;
        }
    }
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    r.on_cpu = ns_of(&t);
    clock_gettime(CLOCK_MONOTONIC, &t);
    r.end = ns_of(&t);
    return r;
}

/* ---- per-thread state ---- */

struct samples {
    uint64_t *v;
    size_t n, cap;
};

struct worker {
    unsigned id;
    pthread_t tid;
    uint64_t share;        /* malloc calls this thread makes */
    uint64_t mallocs, frees;
    uint64_t rng;          /* the pattern's random choices (larson) */
    uint64_t sample_rng;   /* which calls are timed: kept apart so timing never changes the pattern */
    unsigned m_countdown;  /* mallocs until the next timed one */
    unsigned f_countdown;  /* frees until the next timed one */
    struct samples m, f;
    void **slots;          /* ring / batch / larson slots */
    struct timespec t0, t1; /* this thread's start and end of work */
    struct sched sched0, sched1; /* its CPU time and wait for a CPU just before t0, just after t1 */
} __attribute__((aligned(64)));

static struct worker *workers;
static pthread_barrier_t start_line, finish_line, round_line;

static inline void escape(void *p)
{
    __asm__ volatile("" : : "g"(p) : "memory"); /* the compiler may not drop a malloc/free pair */
}

static inline uint64_t xorshift(uint64_t *state)
{
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *state = x;
}

static inline uint64_t next_rand(struct worker *w)
{
    return xorshift(&w->rng);
}

static inline void record(struct samples *s, uint64_t ticks)
{
    if (s->n < s->cap)
        s->v[s->n++] = ticks > clock_cost ? ticks - clock_cost : 0;
}

/* Whether this call is timed. The gap to the next timed call is random (uniform in
 * 1..2N-1, mean N): a fixed period would keep hitting the same position of a ring or batch of
 * N objects and sample only that position's cost. */
static inline int timed(struct worker *w, unsigned *countdown)
{
    if (!cfg.sample_every || --*countdown)
        return 0;
    *countdown = 1 + (unsigned)(xorshift(&w->sample_rng) % (2ull * cfg.sample_every - 1));
    return 1;
}

static inline void *do_malloc(struct worker *w, size_t n, int time_it)
{
    void *p;
    if (time_it) {
        uint64_t a = t_begin();
        p = malloc(n);
        record(&w->m, t_end() - a);
    } else {
        p = malloc(n);
    }
    escape(p);
    if (!p) {
        fprintf(stderr, "alloc_bench: malloc(%zu) failed\n", n);
        exit(1);
    }
    if (cfg.touch)
        memset(p, 0x5a, n);
    w->mallocs++;
    return p;
}

static inline void do_free(struct worker *w, void *p, int time_it)
{
    if (time_it) {
        uint64_t a = t_begin();
        free(p);
        record(&w->f, t_end() - a);
    } else {
        free(p);
    }
    w->frees++;
}

/* Frees are sampled at the same rate as mallocs, independently of which malloc they match. */
static inline void free_sampled(struct worker *w, void *p)
{
    do_free(w, p, timed(w, &w->f_countdown));
}

static inline void *malloc_sampled(struct worker *w, size_t n)
{
    return do_malloc(w, n, timed(w, &w->m_countdown));
}

/* ---- patterns ---- */

/* split: this thread's share of a fixed number of objects; each lives while the next LIVE are made. */
static void run_split(struct worker *w)
{
    for (uint64_t i = 0; i < w->share; i++) {
        size_t k = i % cfg.live;
        if (w->slots[k])
            free_sampled(w, w->slots[k]);
        w->slots[k] = malloc_sampled(w, cfg.size);
    }
}

/* pairs: malloc immediately followed by free (malloc-test). */
static void run_pairs(struct worker *w)
{
    for (uint64_t i = 0; i < w->share; i++)
        free_sampled(w, malloc_sampled(w, cfg.size));
}

/* batch: allocate LIVE blocks, then free them newest-first (LIFO) or oldest-first (FIFO). */
static void run_batch(struct worker *w, int lifo)
{
    for (uint64_t done = 0; done < w->share;) {
        size_t k = cfg.live < w->share - done ? cfg.live : (size_t)(w->share - done);
        for (size_t i = 0; i < k; i++)
            w->slots[i] = malloc_sampled(w, cfg.size);
        for (size_t i = 0; i < k; i++)
            free_sampled(w, w->slots[lifo ? k - 1 - i : i]);
        done += k;
    }
}

/* cross: producers allocate batches of LIVE blocks and hand them over through a single-producer
 * single-consumer ring of batches; consumers free them. Threads 0..P-1 produce, the rest consume;
 * producer i feeds consumer i mod C. With one thread the producer frees its own batches. */
#define RING 32
struct handoff {
    unsigned head __attribute__((aligned(64))); /* next batch to consume */
    unsigned tail __attribute__((aligned(64))); /* next batch to fill */
    unsigned done;
    void **batch[RING];
    size_t len[RING];
} __attribute__((aligned(64)));

static struct handoff *queues;
static unsigned producers, consumers;

static void backoff(unsigned *spins)
{
    if (++*spins < 200)
        _mm_pause();
    else
        sched_yield(); /* more threads than cores: let the other side run */
}

static void produce(struct worker *w)
{
    struct handoff *q = &queues[w->id];
    for (uint64_t done = 0; done < w->share;) {
        unsigned spins = 0;
        while (q->tail - __atomic_load_n(&q->head, __ATOMIC_ACQUIRE) == RING)
            backoff(&spins);
        unsigned s = q->tail % RING;
        size_t k = cfg.live < w->share - done ? cfg.live : (size_t)(w->share - done);
        for (size_t i = 0; i < k; i++)
            q->batch[s][i] = malloc_sampled(w, cfg.size);
        q->len[s] = k;
        __atomic_store_n(&q->tail, q->tail + 1, __ATOMIC_RELEASE);
        done += k;
    }
    __atomic_store_n(&q->done, 1, __ATOMIC_RELEASE);
}

/* Free one batch from `q` if there is one; returns 0 when the queue is empty. */
static int consume_one(struct worker *w, struct handoff *q)
{
    unsigned h = q->head;
    if (h == __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE))
        return 0;
    unsigned s = h % RING;
    for (size_t i = 0; i < q->len[s]; i++)
        free_sampled(w, q->batch[s][i]);
    __atomic_store_n(&q->head, h + 1, __ATOMIC_RELEASE);
    return 1;
}

static void consume(struct worker *w)
{
    unsigned me = w->id - producers, spins = 0;
    for (;;) {
        int any = 0, open = 0;
        for (unsigned p = me; p < producers; p += consumers) {
            struct handoff *q = &queues[p];
            int finished = __atomic_load_n(&q->done, __ATOMIC_ACQUIRE);
            any |= consume_one(w, q);
            open |= !finished || q->head != __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);
        }
        if (!open)
            return;
        if (!any)
            backoff(&spins);
        else
            spins = 0;
    }
}

static void run_cross(struct worker *w)
{
    if (cfg.threads == 1) {
        run_batch(w, 0);
        return;
    }
    if (w->id < producers)
        produce(w);
    else
        consume(w);
}

/* larson: LIVE slots per thread; each step frees a random slot's block (often made by another thread)
 * and puts a new one of random size in [size/8, size] there. After every LIVE steps all threads meet
 * and each moves on to the next thread's slots, so blocks outlive their allocating thread's turn. */
static void **larson_slots;

static size_t larson_size(struct worker *w)
{
    size_t lo = cfg.size / 8 > 8 ? cfg.size / 8 : (cfg.size < 8 ? cfg.size : 8);
    return lo + (size_t)(next_rand(w) % (cfg.size - lo + 1));
}

static void run_larson(struct worker *w)
{
    /* Every thread must run the same number of rounds (they meet at a barrier after each). */
    uint64_t per_thread = (cfg.ops + cfg.threads - 1) / cfg.threads;
    uint64_t rounds = (per_thread + cfg.live - 1) / cfg.live;
    for (uint64_t r = 0; r < rounds; r++) {
        void **slots = &larson_slots[((w->id + r) % cfg.threads) * cfg.live];
        for (size_t i = 0; i < cfg.live; i++) {
            size_t k = (size_t)(next_rand(w) % cfg.live);
            free_sampled(w, slots[k]);
            slots[k] = malloc_sampled(w, larson_size(w));
        }
        pthread_barrier_wait(&round_line);
    }
}

/* ---- setup, run, cleanup ---- */

static void setup(struct worker *w)
{
    if (cfg.pattern == LARSON) {
        /* Prefill this thread's slots (untimed, counts reset afterwards). */
        void **slots = &larson_slots[w->id * cfg.live];
        for (size_t i = 0; i < cfg.live; i++)
            slots[i] = malloc(larson_size(w));
    }
}

static void cleanup(struct worker *w)
{
    if (cfg.pattern == SPLIT)
        for (size_t i = 0; i < cfg.live; i++)
            free(w->slots[i]);
    if (cfg.pattern == LARSON)
        for (size_t i = 0; i < cfg.live; i++)
            free(larson_slots[w->id * cfg.live + i]);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    setup(w);
    pthread_barrier_wait(&start_line);
    w->sched0 = sched_now();
    clock_gettime(CLOCK_MONOTONIC, &w->t0);
    switch (cfg.pattern) {
    case SPLIT: run_split(w); break;
    case PAIRS: run_pairs(w); break;
    case BATCH_LIFO: run_batch(w, 1); break;
    case BATCH_FIFO: run_batch(w, 0); break;
    case CROSS: run_cross(w); break;
    case LARSON: run_larson(w); break;
    }
    clock_gettime(CLOCK_MONOTONIC, &w->t1);
    w->sched1 = sched_now();
    pthread_barrier_wait(&finish_line);
    pthread_barrier_wait(&round_line); /* larson: no thread frees slots another is still using */
    cleanup(w);
    return NULL;
}

static void split_work(void)
{
    unsigned workers_with_share = cfg.threads;
    if (cfg.pattern == CROSS && cfg.threads > 1) {
        consumers = cfg.threads / 2;
        producers = cfg.threads - consumers;
        workers_with_share = producers;
    }
    for (unsigned i = 0; i < cfg.threads; i++) {
        struct worker *w = &workers[i];
        w->id = i;
        w->share = i < workers_with_share ? cfg.ops / workers_with_share + (i < cfg.ops % workers_with_share) : 0;
        w->rng = cfg.seed * 0x9e3779b97f4a7c15ull + i + 1;
        w->sample_rng = cfg.seed * 0xbf58476d1ce4e5b9ull + i + 7;
        w->m_countdown = w->f_countdown = 1 + (unsigned)(xorshift(&w->sample_rng) % (cfg.sample_every ? cfg.sample_every : 1));
        /* Room for every sample up to a cap: cross consumers free what producers allocated. */
        size_t cap = cfg.sample_every ? (size_t)(2 * cfg.ops / cfg.sample_every + 64) : 0;
        if (cap > (1u << 22))
            cap = 1u << 22;
        w->m = (struct samples){raw_alloc(cap * 8), 0, cap};
        w->f = (struct samples){raw_alloc(cap * 8), 0, cap};
        w->slots = raw_alloc(cfg.live * sizeof(void *));
    }
    if (cfg.pattern == CROSS) {
        queues = raw_alloc(sizeof(struct handoff) * cfg.threads);
        for (unsigned i = 0; i < cfg.threads; i++)
            for (unsigned s = 0; s < RING; s++)
                queues[i].batch[s] = raw_alloc(cfg.live * sizeof(void *));
    }
    if (cfg.pattern == LARSON)
        larson_slots = raw_alloc(cfg.live * cfg.threads * sizeof(void *));
}

/* ---- results ---- */

/* Merge every thread's samples of one kind, sort, and print the quantiles. */
static void print_quantiles(const char *name, int frees)
{
    size_t n = 0;
    for (unsigned i = 0; i < cfg.threads; i++)
        n += frees ? workers[i].f.n : workers[i].m.n;
    uint64_t *all = raw_alloc(n * 8);
    size_t k = 0;
    for (unsigned i = 0; i < cfg.threads; i++) {
        struct samples *s = frees ? &workers[i].f : &workers[i].m;
        memcpy(all + k, s->v, s->n * 8);
        k += s->n;
    }
    qsort(all, n, 8, cmp_u64);
    printf("\"%s\":{\"n\":%zu", name, n);
    if (n) {
        static const struct {
            const char *key;
            double q;
        } qs[] = {{"p50", 0.5}, {"p99", 0.99}, {"p999", 0.999}};
        for (size_t i = 0; i < 3; i++)
            printf(",\"%s\":%llu", qs[i].key, (unsigned long long)all[(size_t)(qs[i].q * (double)(n - 1))]);
        printf(",\"max\":%llu", (unsigned long long)all[n - 1]);
    }
    printf("}");
}

static const char *origin(const char *sym)
{
    Dl_info info;
    void *f = dlsym(RTLD_DEFAULT, sym);
    return f && dladdr(f, &info) && info.dli_fname ? info.dli_fname : "?";
}

static int parse_pattern(const char *s)
{
    static const char *names[] = {"split", "pairs", "batch-lifo", "batch-fifo", "cross", "larson"};
    for (int i = 0; i < 6; i++)
        if (!strcmp(s, names[i]))
            return i;
    return -1;
}

int main(int argc, char **argv)
{
    if (argc != 9 || parse_pattern(argv[1]) < 0) {
        fprintf(stderr, "usage: alloc_bench split|pairs|batch-lifo|batch-fifo|cross|larson SIZE THREADS OPS LIVE TOUCH SAMPLE_EVERY SEED\n");
        return 2;
    }
    cfg.pattern = (enum pattern)parse_pattern(argv[1]);
    cfg.size = strtoull(argv[2], NULL, 10);
    cfg.threads = (unsigned)strtoul(argv[3], NULL, 10);
    cfg.ops = strtoull(argv[4], NULL, 10);
    cfg.live = strtoull(argv[5], NULL, 10);
    cfg.touch = atoi(argv[6]);
    cfg.sample_every = (unsigned)strtoul(argv[7], NULL, 10);
    cfg.seed = strtoull(argv[8], NULL, 10);
    if (!cfg.threads || !cfg.live || !cfg.size) {
        fprintf(stderr, "alloc_bench: THREADS, LIVE and SIZE must be positive\n");
        return 2;
    }
    clock_cost = measure_clock_cost();
    workers = raw_alloc(sizeof(struct worker) * cfg.threads);
    split_work();
    /* One thread: this one does the work, so the process stays single-threaded. */
    unsigned spawn = cfg.threads == 1 ? 0 : cfg.threads;
    pthread_barrier_init(&start_line, NULL, cfg.threads + (spawn > 0));
    pthread_barrier_init(&finish_line, NULL, cfg.threads + (spawn > 0));
    pthread_barrier_init(&round_line, NULL, cfg.threads);
    for (unsigned i = 0; i < spawn; i++)
        if (pthread_create(&workers[i].tid, NULL, worker_main, &workers[i])) {
            fprintf(stderr, "alloc_bench: cannot create thread %u\n", i);
            return 1;
        }
    if (!spawn) {
        worker_main(&workers[0]);
    } else {
        /* The wall time is taken by the workers (first start to last end), not by this thread,
         * which may well be descheduled while they run. */
        pthread_barrier_wait(&start_line);
        pthread_barrier_wait(&finish_line);
        for (unsigned i = 0; i < spawn; i++)
            pthread_join(workers[i].tid, NULL);
    }
    uint64_t mallocs = 0, frees = 0;
    long long first = 0, last = 0, busy = 0, on_cpu = 0, waiting = 0;
    int sched_ok = 1;
    for (unsigned i = 0; i < cfg.threads; i++) {
        struct worker *w = &workers[i];
        mallocs += w->mallocs;
        frees += w->frees;
        long long a = ns_of(&w->t0), b = ns_of(&w->t1);
        first = i == 0 || a < first ? a : first;
        last = b > last ? b : last;
        /* The shares are taken over the span between the two readings, which encloses t0..t1: a
         * wait while reading (a system call returning is where a thread is preempted) counts in
         * both the span and the wait. */
        busy += w->sched1.end - w->sched0.begin;
        on_cpu += w->sched1.on_cpu - w->sched0.on_cpu;
        waiting += w->sched1.waiting - w->sched0.waiting;
        sched_ok &= w->sched0.ok & w->sched1.ok;
    }
    long long wall = last - first;
    printf("{\"wall_ns\":%lld,\"mallocs\":%llu,\"frees\":%llu,\"clock_cost\":%llu,\"clock_jitter\":%llu,", wall,
           (unsigned long long)mallocs, (unsigned long long)frees, (unsigned long long)clock_cost,
           (unsigned long long)clock_jitter);
    /* Summed over the workers, each over its own timed span: the share of that span on a CPU, and
     * (where schedstat exists) the share spent runnable but waiting for a CPU. */
    printf("\"thread_ns\":%lld,\"on_cpu_ns\":%lld,", busy, on_cpu);
    if (sched_ok)
        printf("\"waiting_ns\":%lld,", waiting);
    print_quantiles("malloc", 0);
    printf(",");
    print_quantiles("free", 1);
    printf(",\"malloc_from\":\"%s\",\"free_from\":\"%s\"}\n", origin("malloc"), origin("free"));
    return 0;
}
