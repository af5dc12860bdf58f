/* The allocator's own figures for the timeline: bytes in use and bytes held from the system, as the
 * allocator our malloc forwards to tells them (jemalloc's mallctl stats, tcmalloc's numeric
 * properties, mimalloc's committed bytes, glibc's mallinfo2; looked up with dlsym in the file that
 * holds that allocator, never linked).
 *
 * Read by the runtime's thread (control/ctl.c), never on the program's allocation or free paths:
 * glibc's mallinfo2 walks every free chunk of every arena with that arena's lock held, so its cost
 * grows with the heap (a fragmented heap of a few hundred MB takes tens of ms per call), and while
 * it runs, the program's threads that allocate from the arena being walked wait for it. Called
 * from the sampled path it made programs 6-50x slower (issue 29). So, on the runtime's thread:
 *
 *  - every read is timed (the thread's CPU time: what it cost, whatever else runs on the machine),
 *    and the next one comes no sooner than max(100 ms, 100 x that read's time) after it ended:
 *    reading takes at most 1 % of one CPU, and the program's threads are held up by it (when not
 *    preempted) at most 1 % of the time;
 *  - a read predicted to take longer than READ_MAX_NS (the last read's time, scaled by how much the
 *    resident set grew since) is skipped, and so is the very first one when the process is larger
 *    than FIRST_RSS_MAX (a glibc heap that big may hold millions of free chunks): the timeline's
 *    points then have no allocator figures (-1), and the dump says how many reads were skipped
 *    (`view allocator_stats`);
 *  - glibc's walk costs what its free chunks number, and those grow when the program frees more
 *    blocks than it reuses: perl making and freeing a list of 360 000 temporaries before it exits
 *    leaves glibc that many free chunks in an unchanged resident set, and the next read took 12-42
 *    ms (against 10-60 us for each read before; the program's frees wait on the arena's lock
 *    meanwhile): up to 7 % of perl's CPU at 512K. So the prediction adds what the objects freed
 *    since the last read (as the samples estimate them) would add to the walk, at NS_PER_CHUNK
 *    each, when they are a large part of the heap (too_costly);
 *  - a read that took longer than GIVE_UP_NS ends the reading for good (said the same way): the
 *    prediction cannot see every jump.
 * Points take the latest figures only while they are recent (two timeline periods); older ones
 * would draw yesterday's allocator under today's heap. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <time.h>
#include <unistd.h>

#include "../base/proc.h"
#include "../store/stacks.h"
#include "../store/state.h"
#include "allocstats.h"

#define PERIOD_MS 100
#define DUTY 100                        /* wait 100x a read's time: 1 % */
#define READ_MAX_NS (2u * 1000 * 1000)  /* skip a read predicted to hold arenas longer */
#define GIVE_UP_NS (10u * 1000 * 1000)  /* a read this long ends reading */
#define FIRST_RSS_MAX (512ll << 20)
#define FRESH_NS (2u * PERIOD_MS * 1000 * 1000)
#define NS_PER_CHUNK 50 /* a free chunk's share of glibc's walk: a linked list, mostly cache misses */

/* The allocator is the one our malloc forwards to, named by the file that holds it; its figures are
 * read only from that same file. Its kind is in the state header (stats_kind), where it outlives us. */
static void *(*forwarded)(size_t);
enum { ST_UNSEEN, ST_UNKNOWN, ST_GLIBC, ST_JEMALLOC, ST_TCMALLOC, ST_MIMALLOC };
#define stats_kind (ml_st->stats_kind)
static int (*je_mallctl)(const char *, void *, size_t *, void *, size_t);
static int (*tc_property)(const char *, size_t *);
static struct mallinfo2 (*glibc_mallinfo2)(void);
static void (*mi_info)(size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *);
static const char *const kind_names[] = {"unknown", "unknown", "glibc", "jemalloc", "tcmalloc", "mimalloc"};

/* What the runtime's thread last read (written by it, read by the program's threads at a point). */
static _Atomic int64_t last_in_use = -1, last_footprint = -1;
static _Atomic uint64_t last_ns; /* CLOCK_MONOTONIC when that read ended, 0: none */
/* What the samples say of the program's heap: objects in use, bytes allocated and bytes freed (each
 * an estimate; the last two cumulative). */
struct heap_est {
    int64_t objects, alloc_objects, alloc_bytes, freed_bytes;
};

/* The thread's own bookkeeping. */
static uint64_t next_ns, cost_ns;
static int64_t cost_rss;              /* the resident set at that read */
static struct heap_est cost_est;     /* and the heap the samples saw then (below) */
static _Atomic uint64_t reads, skipped, max_ns;
enum { AS_READING, AS_GAVE_UP, AS_NONE };
static _Atomic int state = AS_READING;

static uint64_t clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}
static uint64_t mono_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

static _Atomic int refind; /* the allocator changed (attach): find its figures again */

void ml_allocstats_allocator(void *(*malloc_fn)(size_t))
{
    forwarded = malloc_fn;
    atomic_store(&refind, 1);
}

static int contains(const char *s, const char *word)
{
    for (; *s; s++) {
        const char *a = s, *b = word;
        while (*a && *a == *b)
            a++, b++;
        if (!*b)
            return 1;
    }
    return 0;
}

/* `name` from the same file as the allocator's malloc (whose load base is `base`), or NULL. */
static void *same_file(const void *base, const char *name)
{
    void *f = dlsym(RTLD_DEFAULT, name);
    Dl_info di;
    return f && dladdr(f, &di) && di.dli_fbase == base ? f : NULL;
}

static void find_stats(void)
{
    Dl_info di;
    stats_kind = ST_UNKNOWN;
    if (!forwarded || !dladdr((void *)forwarded, &di) || !di.dli_fname)
        return;
    const char *slash = di.dli_fname, *file = di.dli_fname;
    for (; *slash; slash++)
        if (*slash == '/')
            file = slash + 1;
    if (contains(file, "jemalloc")) {
        stats_kind = ST_JEMALLOC;
        je_mallctl = (int (*)(const char *, void *, size_t *, void *, size_t))same_file(di.dli_fbase, "mallctl");
    } else if (contains(file, "tcmalloc")) {
        stats_kind = ST_TCMALLOC;
        tc_property = (int (*)(const char *, size_t *))same_file(di.dli_fbase,
                                                                 "MallocExtension_GetNumericProperty");
    } else if (contains(file, "mimalloc")) {
        stats_kind = ST_MIMALLOC;
        mi_info = (void (*)(size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *,
                            size_t *))same_file(di.dli_fbase, "mi_process_info");
    } else if (contains(file, "libc.so") || contains(file, "libc-")) {
        stats_kind = ST_GLIBC;
        glibc_mallinfo2 = (struct mallinfo2(*)(void))same_file(di.dli_fbase, "mallinfo2");
    }
}

/* Can this allocator's figures be read? */
static int readable(void)
{
    return (stats_kind == ST_JEMALLOC && je_mallctl) || (stats_kind == ST_TCMALLOC && tc_property) ||
           (stats_kind == ST_MIMALLOC && mi_info) || (stats_kind == ST_GLIBC && glibc_mallinfo2);
}

/* What each allocator says: bytes in use by the program and bytes it holds from the system. */
static void read_stats(int64_t *in_use, int64_t *footprint)
{
    *in_use = *footprint = -1;
    if (stats_kind == ST_JEMALLOC) {
        uint64_t epoch = 1;
        size_t a = 0, r = 0, sz = sizeof a;
        je_mallctl("epoch", NULL, NULL, &epoch, sizeof epoch);
        if (je_mallctl("stats.allocated", &a, &sz, NULL, 0) == 0)
            *in_use = (int64_t)a;
        sz = sizeof r;
        if (je_mallctl("stats.resident", &r, &sz, NULL, 0) == 0)
            *footprint = (int64_t)r;
    } else if (stats_kind == ST_TCMALLOC) {
        size_t a = 0, h = 0;
        if (tc_property("generic.current_allocated_bytes", &a))
            *in_use = (int64_t)a;
        if (tc_property("generic.heap_size", &h))
            *footprint = (int64_t)h;
    } else if (stats_kind == ST_MIMALLOC) {
        /* mimalloc tells what it has committed, not what is in use */
        size_t elapsed, user, sys, rss, peak_rss, commit = 0, peak_commit, faults;
        mi_info(&elapsed, &user, &sys, &rss, &peak_rss, &commit, &peak_commit, &faults);
        *footprint = (int64_t)commit;
    } else if (stats_kind == ST_GLIBC) {
        struct mallinfo2 m = glibc_mallinfo2();
        *in_use = (int64_t)(m.uordblks + m.hblkhd);
        *footprint = (int64_t)(m.arena + m.hblkhd);
    }
}

/* Resident bytes; -1 unknown. */
static int64_t rss_now(void) { return ml_proc_rss_own(); }

static void add_est(struct ml_stack *r, void *arg)
{
    struct heap_est *e = arg;
    e->objects += atomic_load_explicit(&r->inuse_fx, memory_order_relaxed) >> 16;
    e->alloc_objects += (int64_t)(atomic_load_explicit(&r->alloc_fx, memory_order_relaxed) >> 16);
    e->alloc_bytes += (int64_t)atomic_load_explicit(&r->alloc_bytes, memory_order_relaxed);
    for (int i = 0; i < 10; i++) /* ML_LIFE_BUCKETS */
        e->freed_bytes += (int64_t)atomic_load_explicit(&r->life[i], memory_order_relaxed);
}

/* A sum over the stack table's listed records: a few thousand, once per period, by this thread. */
static struct heap_est heap_now(void)
{
    struct heap_est e = {0, 0, 0, 0};
    ml_stacks_each(add_est, &e);
    return e;
}

/* Would a read now take longer than READ_MAX_NS? The last read's time, scaled by the growth of the
 * resident set since (a heap's free chunks grow with it); for glibc, plus the walk over the chunks
 * the objects freed since may have left, when that is a large part of the heap: frees outweighing
 * allocations two to one (a heap torn down), or frees of a quarter or more of the objects in use (a
 * burst of temporaries made and freed: perl's `map` over 360 000 keys before it exits). A steady
 * churn reuses its chunks and frees a small share of its objects per period; its estimates move by
 * a few samples either way (at 512K one sample of a 32-byte block stands for 16 K objects). Before
 * any read, only a small process is read. */
static int too_costly(int64_t rss, const struct heap_est *e)
{
    if (!cost_rss)
        return rss < 0 || rss > FIRST_RSS_MAX;
    double grow = rss > cost_rss ? (double)rss / (double)cost_rss : 1.0;
    int64_t made = e->alloc_objects - cost_est.alloc_objects;
    int64_t gone = made - (e->objects - cost_est.objects); /* objects freed since */
    int64_t alloc = e->alloc_bytes - cost_est.alloc_bytes, freed = e->freed_bytes - cost_est.freed_bytes;
    int big = gone > 0 && (freed > 2 * (alloc > 0 ? alloc : 0) || gone >= (e->objects > 0 ? e->objects : 0) / 4);
    double walk = stats_kind == ST_GLIBC && big ? (double)gone * NS_PER_CHUNK : 0;
    return (double)cost_ns * grow + walk > READ_MAX_NS;
}

int64_t ml_allocstats_poll(void)
{
    if (atomic_exchange(&refind, 0)) {
        stats_kind = ST_UNSEEN;
        if (atomic_load(&state) == AS_NONE)
            atomic_store(&state, AS_READING);
    }
    if (atomic_load_explicit(&state, memory_order_relaxed) != AS_READING)
        return -1;
    if (stats_kind == ST_UNSEEN)
        find_stats();
    if (!readable()) {
        atomic_store(&state, AS_NONE);
        return -1;
    }
    /* Only while the program takes points (it samples): an idle program is not woken for nothing.
     * Before its first point, looked for every period during the first 2 s (a program that starts
     * sampling after our first look would else have no figures for a second: a short one, none). */
    static int early = 20;
    uint64_t last_point = atomic_load_explicit(&ml_st->clock_ns, memory_order_relaxed);
    if (!last_point && early > 0) {
        early--;
        return PERIOD_MS;
    }
    if (!last_point || ml_now_ns() - last_point > 1000000000u)
        return 1000;
    uint64_t now = mono_ns();
    if (now < next_ns)
        return (int64_t)((next_ns - now) / 1000000u) + 1;
    int64_t rss = rss_now();
    struct heap_est est = heap_now();
    if (too_costly(rss, &est)) {
        atomic_fetch_add_explicit(&skipped, 1, memory_order_relaxed);
        next_ns = now + (uint64_t)PERIOD_MS * 1000000u * 10; /* look again in a second */
        return PERIOD_MS * 10;
    }
    int64_t a, f;
    uint64_t cpu0 = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    read_stats(&a, &f);
    uint64_t took = clock_ns(CLOCK_THREAD_CPUTIME_ID) - cpu0, end = mono_ns();
    atomic_store_explicit(&last_in_use, a, memory_order_relaxed);
    atomic_store_explicit(&last_footprint, f, memory_order_relaxed);
    atomic_store_explicit(&last_ns, end, memory_order_release);
    atomic_fetch_add_explicit(&reads, 1, memory_order_relaxed);
    if (took > atomic_load_explicit(&max_ns, memory_order_relaxed))
        atomic_store_explicit(&max_ns, took, memory_order_relaxed);
    cost_ns = took;
    cost_rss = rss > 0 ? rss : 1;
    cost_est = est;
    if (took > GIVE_UP_NS) {
        atomic_store(&state, AS_GAVE_UP);
        return -1;
    }
    uint64_t wait = took * DUTY > (uint64_t)PERIOD_MS * 1000000u ? took * DUTY : (uint64_t)PERIOD_MS * 1000000u;
    next_ns = end + wait; /* from after the read: a slow read never runs back to back */
    return (int64_t)(wait / 1000000u) + 1;
}

void ml_allocstats_latest(int64_t *in_use, int64_t *footprint)
{
    uint64_t at = atomic_load_explicit(&last_ns, memory_order_acquire);
    int fresh = at && mono_ns() - at <= FRESH_NS;
    *in_use = fresh ? atomic_load_explicit(&last_in_use, memory_order_relaxed) : -1;
    *footprint = fresh ? atomic_load_explicit(&last_footprint, memory_order_relaxed) : -1;
}

/* view allocator <kind>
 * view allocator_stats <read|gave-up|none> <reads> <reads skipped> <longest read, CPU ns> */
void ml_allocstats_write(struct ml_out *o)
{
    static const char *const states[] = {"read", "gave-up", "none"};
    int s = atomic_load(&state);
    /* Not looked up here (a dump may run in a signal handler: no dladdr there). */
    ml_out_str(o, "view allocator ");
    ml_out_str(o, kind_names[stats_kind < 6 ? stats_kind : 0]);
    ml_out_str(o, "\nview allocator_stats ");
    ml_out_str(o, states[s == AS_READING && !atomic_load(&reads) && !atomic_load(&skipped) ? AS_NONE : s]);
    ml_out_str(o, " ");
    ml_out_u64(o, atomic_load(&reads));
    ml_out_str(o, " ");
    ml_out_u64(o, atomic_load(&skipped));
    ml_out_str(o, " ");
    ml_out_u64(o, atomic_load(&max_ns));
    ml_out_str(o, "\n");
}

void ml_allocstats_fork_child(void)
{
    atomic_store(&last_ns, 0);
    atomic_store(&reads, 0);
    atomic_store(&skipped, 0);
    atomic_store(&max_ns, 0);
    next_ns = 0;
    if (atomic_load(&state) == AS_NONE)
        atomic_store(&state, AS_READING); /* the child may start a thread of its own */
}
