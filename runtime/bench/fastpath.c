/* The runtime's cost on a malloc-test loop, measured in pairs so that this machine's slow and fast
 * phases (a KVM guest's timing drifts by up to 2x over seconds) cancel out.
 *
 * Each thread calls down 10 frames, then alternates blocks of PAIRS malloc(512)/free pairs made two
 * ways: through glibc's own entry points (__libc_malloc/__libc_free, which no preloaded library
 * interposes) and through malloc/free (which the preloaded library, if any, interposes). The blocks
 * run back to back, in alternating order, so both see the same machine state; the difference of each
 * adjacent pair of blocks is the preloaded library's cost. Without a preloaded library the two ways
 * reach the same code, which makes that run the measurement's own noise floor.
 *
 * Cost is counted twice: in core cycles with a per-thread perf counter (user and kernel where the
 * kernel allows, else user only; absent without hardware counters), and in TSC ticks of wall time,
 * which also charge time spent blocked (a tracer waiting on its pipe).
 *   fastpath THREADS BLOCKS PAIRS
 * prints: unit=cycles|cycles:u|ticks direct=D interposed=I delta=X wall_direct=.. wall_interposed=..
 * wall_delta=..  (medians over blocks, then over threads; without counters the first three are ticks)
 *
 * FASTPATH_VIEWS=1 (with libmemlens.so preloaded) pairs the runtime against itself instead: both
 * blocks call malloc/free, "direct" with the peak/lifetime/timeline views switched off
 * (memlens_views(0)) and "interposed" with them on, so delta is what the views add.
 *
 * FASTPATH_HOOKED=1 (one thread; built with an allocator linked in, libmemlens.so preloaded): both
 * blocks call malloc/free, which the runtime hooked at their entry points; "direct" runs with the
 * entry points' original bytes put back (memlens_hooks_write(0)), "interposed" with the hooks in,
 * so delta is what a hook costs over the bare allocator, paired in time.
 *
 * FASTPATH_INLINE=1 (with FASTPATH_HOOKED=1; built with -DFASTPATH_INLINE_LOOP, so that the other
 * configurations time a program without this loop): the entry points' original bytes stay in both blocks;
 * "interposed" runs the hook's two checks inline in this loop instead (the countdown `subq` on a
 * thread-local before malloc, the range compare before free; neither branch is ever taken), with
 * no jump and no code moved: the floor of any hook that counts bytes, paired in time. Hooked minus
 * this floor is what the jumps and the relocated code cost. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <x86intrin.h>

void *__libc_malloc(size_t);
void __libc_free(void *);

#define MAX_THREADS 64
#define MAX_BLOCKS 4096

static long blocks, pairs;
/* Keeps a value alive without storing it: a shared variable written by every thread would bounce
 * its cache line between cores and swamp what is measured. */
#define KEEP(v) __asm__ volatile("" : : "r"(v) : "memory")
enum { DIRECT, INTERPOSED, DELTA, WALL_DIRECT, WALL_INTERPOSED, WALL_DELTA, NRES };
static double res[NRES][MAX_THREADS];
static int use_cycles = 1, user_only;

static int open_cycles(void)
{
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_HARDWARE;
    a.config = PERF_COUNT_HW_CPU_CYCLES;
    a.exclude_kernel = user_only;
    a.exclude_hv = 1;
    return (int)syscall(SYS_perf_event_open, &a, 0, -1, -1, 0);
}

static unsigned long long count(int fd)
{
    unsigned long long v;
    if (fd >= 0 && read(fd, &v, sizeof v) == (ssize_t)sizeof v)
        return v;
    return __rdtsc();
}

struct cost {
    double count, wall; /* per pair */
};

/* The two loops are one definition, so they can differ only in the functions they call. */
#define PAIRS_LOOP(name, alloc, release)                                                               \
    static __attribute__((noinline)) struct cost name(int fd)                                          \
    {                                                                                                  \
        unsigned long long c0 = count(fd), t0 = __rdtsc();                                             \
        for (long i = 0; i < pairs; i++) {                                                             \
            void *p = alloc(512);                                                                      \
            KEEP(p);                                                                                   \
            release(p);                                                                                \
        }                                                                                              \
        unsigned long long t1 = __rdtsc(), c1 = count(fd);                                             \
        return (struct cost){(double)(c1 - c0) / (double)pairs, (double)(t1 - t0) / (double)pairs};    \
    }
PAIRS_LOOP(run_direct, __libc_malloc, __libc_free)
PAIRS_LOOP(run_interposed, malloc, free)

#ifdef FASTPATH_INLINE_LOOP
/* FASTPATH_INLINE: the checks of runtime/src/intercept/patch.c's emit_check, as the hook runs them
 * (a thread-local countdown, a range that holds nothing), in front of the bare allocator. */
static __thread int64_t inline_countdown = (int64_t)1 << 62;
static uintptr_t inline_base, inline_span; /* the runtime's ml_range_base and ml_range_span */
static inline void *counted_malloc(size_t n)
{
    __asm__ goto("subq %1, %0\n\tjle %l[out]" : : "m"(inline_countdown), "r"(n) : "cc", "memory" : out);
    return malloc(n);
out:
    abort();
}
static inline void checked_free(void *p)
{
    if ((uintptr_t)p - *(volatile uintptr_t *)&inline_base < *(volatile uintptr_t *)&inline_span)
        abort();
    free(p);
}
PAIRS_LOOP(run_inline, counted_malloc, checked_free)
#else
static struct cost run_inline(int fd) { return run_interposed(fd); } /* never called: main refuses */
#endif

/* FASTPATH_VIEWS: the runtime's switch, else NULL. FASTPATH_HOOKED: the hooks' switch. */
static void (*views_set)(int);
static int (*hooks_set)(int);
static int inline_checks; /* FASTPATH_INLINE */

static struct cost run_a(int fd)
{
    if (hooks_set) {
        hooks_set(0);
        return run_interposed(fd);
    }
    if (!views_set)
        return run_direct(fd);
    views_set(0);
    return run_interposed(fd);
}

static struct cost run_b(int fd)
{
    if (hooks_set && inline_checks) {
        hooks_set(0);
        return run_inline(fd);
    }
    if (hooks_set)
        hooks_set(1);
    if (views_set)
        views_set(1);
    return run_interposed(fd);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static __attribute__((noinline)) void measure(long id)
{
    static __thread double v[NRES][MAX_BLOCKS];
    int fd = use_cycles ? open_cycles() : -1;
    run_a(fd); /* warm both paths (and the runtime's first-sample setup) */
    run_b(fd);
    for (long b = 0; b < blocks; b++) {
        struct cost d, x;
        if (b % 2) {
            x = run_b(fd);
            d = run_a(fd);
        } else {
            d = run_a(fd);
            x = run_b(fd);
        }
        v[DIRECT][b] = d.count;
        v[INTERPOSED][b] = x.count;
        v[DELTA][b] = x.count - d.count;
        v[WALL_DIRECT][b] = d.wall;
        v[WALL_INTERPOSED][b] = x.wall;
        v[WALL_DELTA][b] = x.wall - d.wall;
    }
    if (fd >= 0)
        close(fd);
    for (int k = 0; k < NRES; k++)
        res[k][id] = median(v[k], blocks);
}

static __attribute__((noinline)) void descend(int depth, long id)
{
    if (depth == 0) {
        measure(id);
        return;
    }
    descend(depth - 1, id);
    KEEP(&depth); /* not a tail call: keep the frames */
}

static void *worker(void *arg)
{
    descend(9, (long)arg);
    return NULL;
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    blocks = argc > 2 ? atol(argv[2]) : 100;
    pairs = argc > 3 ? atol(argv[3]) : 20000;
    if (threads < 1 || threads > MAX_THREADS || blocks < 1 || blocks > MAX_BLOCKS || pairs < 1) {
        fprintf(stderr, "usage: fastpath THREADS(1-%d) BLOCKS(1-%d) PAIRS\n", MAX_THREADS, MAX_BLOCKS);
        return 2;
    }
    const char *v = getenv("FASTPATH_VIEWS");
    if (v && v[0] == '1') {
        views_set = (void (*)(int))dlsym(RTLD_DEFAULT, "memlens_views");
        if (!views_set) {
            fprintf(stderr, "fastpath: FASTPATH_VIEWS=1 needs libmemlens.so preloaded\n");
            return 2;
        }
    }
    const char *in = getenv("FASTPATH_INLINE");
    inline_checks = in && in[0] == '1';
#ifndef FASTPATH_INLINE_LOOP
    if (inline_checks) {
        fprintf(stderr, "fastpath: FASTPATH_INLINE=1 needs a build with -DFASTPATH_INLINE_LOOP\n");
        return 2;
    }
#endif
    const char *h = getenv("FASTPATH_HOOKED");
    if (h && h[0] == '1') {
        hooks_set = (int (*)(int))dlsym(RTLD_DEFAULT, "memlens_hooks_write");
        if (!hooks_set || hooks_set(1) <= 0 || threads != 1) {
            fprintf(stderr, "fastpath: FASTPATH_HOOKED=1 needs one thread, libmemlens.so preloaded and an "
                            "allocator it hooked\n");
            return 2;
        }
    }
    int probe = open_cycles(); /* user and kernel cycles need perf_event_paranoid <= 1 (or root) */
    if (probe < 0) {
        user_only = 1;
        probe = open_cycles();
    }
    if (probe < 0)
        use_cycles = 0;
    else
        close(probe);
    pthread_t t[MAX_THREADS];
    for (long i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    printf("unit=%s", !use_cycles ? "ticks" : user_only ? "cycles:u" : "cycles");
    static const char *names[NRES] = {"direct", "interposed", "delta", "wall_direct", "wall_interposed",
                                      "wall_delta"};
    for (int k = 0; k < NRES; k++)
        printf(" %s=%.2f", names[k], median(res[k], threads));
    printf("\n");
    return 0;
}
