/* Memory over time: every ~100 ms (checked on the sampled path only, against a tick deadline), on
 * every new peak snapshot and at every dump, one point: wall time, the estimated live heap, the
 * resident set (/proc/self/statm) and the allocator's own figures where it exposes them (jemalloc's
 * mallctl stats, tcmalloc's numeric properties, mimalloc's committed bytes, glibc's mallinfo2;
 * looked up with dlsym in the file that holds the allocator we forward to, never linked). Sampled blocks live in the runtime's own range, where the allocator does not see them, so
 * their real bytes are added to both of its figures.
 *
 * Points go to a fixed array; when it is full every other point is dropped and the period doubles,
 * so a long run keeps its whole span at a coarser grain. A point is taken under a try-lock: a thread
 * that finds it taken skips the point rather than wait. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include "../base/out.h"
#include "../base/proc.h"
#include "../sample/clock.h"
#include "../store/state.h"
#include "peak.h"
#include "range.h"
#include "timeline.h"

#define NPOINTS ML_STATE_POINTS
#define PERIOD_NS 100000000u

/* A point: ns, the estimated heap, RSS (bytes; -1 unknown), the allocator's figures (-1 unknown). */
#define point ml_state_point

_Atomic uint64_t ml_timeline_next = 0; /* 0: the first sample takes the first point */
/* In the state mapping (state.c), where they outlive the process: the points, how many, the
 * period between two (0 until the first point: PERIOD_NS) and which allocator the figures are of. */
#define points ml_st_points
#define npoints (ml_st->npoints)
#define period_ns (ml_st->period_ns)
#define stats_kind (ml_st->stats_kind)
static _Atomic int lock;

/* The allocator is the one our malloc forwards to (the next definition after us: ml_timeline_allocator),
 * named by the file that holds it; its figures are read only from that same file. */
static void *(*forwarded)(size_t);
enum { ST_UNSEEN, ST_UNKNOWN, ST_GLIBC, ST_JEMALLOC, ST_TCMALLOC, ST_MIMALLOC };
static int (*je_mallctl)(const char *, void *, size_t *, void *, size_t);
static int (*tc_property)(const char *, size_t *);
static struct mallinfo2 (*glibc_mallinfo2)(void);
static void (*mi_info)(size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *, size_t *);
static const char *const kind_names[] = {"unknown", "unknown", "glibc", "jemalloc", "tcmalloc", "mimalloc"};

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

/* What each allocator says: bytes in use by the program and bytes it holds from the system. */
static void allocator_stats(int64_t *in_use, int64_t *footprint)
{
    *in_use = *footprint = -1;
    if (stats_kind == ST_JEMALLOC && je_mallctl) {
        uint64_t epoch = 1;
        size_t a = 0, r = 0, sz = sizeof a;
        je_mallctl("epoch", NULL, NULL, &epoch, sizeof epoch);
        if (je_mallctl("stats.allocated", &a, &sz, NULL, 0) == 0)
            *in_use = (int64_t)a;
        sz = sizeof r;
        if (je_mallctl("stats.resident", &r, &sz, NULL, 0) == 0)
            *footprint = (int64_t)r;
    } else if (stats_kind == ST_TCMALLOC && tc_property) {
        size_t a = 0, h = 0;
        if (tc_property("generic.current_allocated_bytes", &a))
            *in_use = (int64_t)a;
        if (tc_property("generic.heap_size", &h))
            *footprint = (int64_t)h;
    } else if (stats_kind == ST_MIMALLOC && mi_info) {
        /* mimalloc tells what it has committed, not what is in use */
        size_t elapsed, user, sys, rss, peak_rss, commit = 0, peak_commit, faults;
        mi_info(&elapsed, &user, &sys, &rss, &peak_rss, &commit, &peak_commit, &faults);
        *footprint = (int64_t)commit;
    } else if (stats_kind == ST_GLIBC && glibc_mallinfo2) {
        struct mallinfo2 m = glibc_mallinfo2();
        *in_use = (int64_t)(m.uordblks + m.hblkhd);
        *footprint = (int64_t)(m.arena + m.hblkhd);
    }
}

/* Resident bytes from /proc/self/statm (second field, in pages). */
static int64_t rss_bytes(void)
{
    char buf[128];
    if (ml_proc_read("/proc/self/statm", buf, sizeof buf) < 0)
        return -1;
    char *p = buf;
    while (*p && *p != ' ')
        p++;
    int64_t pages = 0;
    for (p++; *p >= '0' && *p <= '9'; p++)
        pages = pages * 10 + (*p - '0');
    return pages * (int64_t)sysconf(_SC_PAGESIZE);
}

static void compact(void)
{
    for (uint32_t i = 0; i < NPOINTS / 2; i++)
        points[i] = points[2 * i + 1];
    npoints = NPOINTS / 2;
    period_ns *= 2;
}

/* A point at tick `now`; a dump's adds `unflushed` to the heap, as the dump counts it. */
static void take_point(uint64_t now, int why, int64_t unflushed)
{
    if (atomic_exchange_explicit(&lock, 1, memory_order_acquire))
        return;
    ml_tls.busy++; /* dlsym and the allocator's stats may allocate: straight to the real allocator */
    if (!period_ns)
        period_ns = PERIOD_NS;
    uint64_t hz = ml_views_tsc_hz_rough();
    ml_life_set_rate(hz);
    struct point pt = {.ns = ml_now_ns(), .heap = ml_heap_now(), .rss = rss_bytes(),
                        .in_use = -1, .footprint = -1};
    pt.heap += unflushed;
    if (why != ML_TL_DUMP) {
        if (stats_kind == ST_UNSEEN)
            find_stats();
        allocator_stats(&pt.in_use, &pt.footprint);
    }
    int64_t sampled = ml_range_live_bytes();
    if (pt.in_use >= 0)
        pt.in_use += sampled;
    if (pt.footprint >= 0)
        pt.footprint += sampled;
    /* the tick, the time and the rate of this moment: a reader of the state file converts ticks
     * with them once the process is gone */
    atomic_store_explicit(&ml_st->clock_hz, hz, memory_order_relaxed);
    atomic_store_explicit(&ml_st->clock_ns, pt.ns, memory_order_relaxed);
    atomic_store_explicit(&ml_st->clock_tsc, now, memory_order_relaxed);
    if (npoints == NPOINTS)
        compact();
    if (ml_state_points_room(npoints + 1) == 0)
        points[npoints++] = pt;
    atomic_store_explicit(&ml_timeline_next, now + (uint64_t)((double)period_ns * 1e-9 * (double)hz),
                          memory_order_relaxed);
    ml_tls.busy--;
    ml_spin_unlock(&lock);
}

void ml_timeline_allocator(void *(*malloc_fn)(size_t)) { forwarded = malloc_fn; }

void ml_timeline_tick(uint64_t now, int why)
{
    if (why == ML_TL_PERIODIC && now < atomic_load_explicit(&ml_timeline_next, memory_order_relaxed))
        return;
    take_point(now, why, 0);
}

void ml_timeline_dump(uint64_t now, int64_t unflushed) { take_point(now, ML_TL_DUMP, unflushed); }

void ml_timeline_fork_child(void)
{
    npoints = 0;
    period_ns = 0;
    atomic_store(&ml_timeline_next, 0); /* the child's first sample takes its first point */
    atomic_store(&lock, 0);
}

/* view allocator <kind> / tl <ns> <heap> <rss> <in_use> <footprint> (-1 = unknown) */
void ml_timeline_write(struct ml_out *o)
{
    for (int tries = 0; atomic_exchange_explicit(&lock, 1, memory_order_acquire); tries++) {
        if (tries > 100000)
            return; /* a point is being taken by a thread that cannot go on (we interrupted it) */
        __builtin_ia32_pause();
    }
    /* Not looked up before the first point (a dump may run in a signal handler: no dladdr there). */
    ml_out_str(o, "view allocator ");
    ml_out_str(o, kind_names[stats_kind]);
    ml_out_str(o, "\n");
    for (uint32_t i = 0; i < npoints; i++) {
        const struct point *p = &points[i];
        ml_out_str(o, "tl ");
        ml_out_u64(o, p->ns);
        ml_out_str(o, " ");
        ml_out_i64(o, p->heap);
        ml_out_str(o, " ");
        ml_out_i64(o, p->rss);
        ml_out_str(o, " ");
        ml_out_i64(o, p->in_use);
        ml_out_str(o, " ");
        ml_out_i64(o, p->footprint);
        ml_out_str(o, "\n");
    }
    ml_spin_unlock(&lock);
}
