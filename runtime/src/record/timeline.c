/* Memory over time: every ~100 ms (checked on the sampled path only, against a tick deadline set
 * after the previous point), on every new peak snapshot and at every dump, one point: wall time, the
 * estimated live heap, the estimated anonymous mappings apart from it (peak.c keeps their share
 * beside the heap's counter: one more load, whatever the heap's size), the resident set (/proc/self/statm) and the allocator's own figures, as the
 * runtime's thread last read them (allocstats.c: never read on the program's threads, whose cost
 * may grow with the heap). Sampled blocks live in the runtime's own range, where the allocator does
 * not see them, so their real bytes are added to both of its figures.
 *
 * Points go to a fixed array; when it is full every other point is dropped and the period doubles,
 * so a long run keeps its whole span at a coarser grain. A point is taken under a try-lock: a thread
 * that finds it taken skips the point rather than wait. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <x86intrin.h>
#include <unistd.h>

#include "../base/fd.h"
#include "../base/out.h"
#include "../base/proc.h"
#include "../sample/clock.h"
#include "../store/state.h"
#include "allocstats.h"
#include "peak.h"
#include "range.h"
#include "block.h"
#include "timeline.h"

#define NPOINTS ML_STATE_POINTS
#define PERIOD_NS 100000000u

/* A point: ns, the estimated heap, RSS (bytes; -1 unknown), the allocator's figures (-1 unknown),
 * the estimated anonymous mappings. */
#define point ml_state_point

_Atomic uint64_t ml_timeline_next = 0; /* 0: the first sample takes the first point */
/* In the state mapping (state.c), where they outlive the process: the points, how many, the
 * period between two (0 until the first point: PERIOD_NS) and which allocator the figures are of. */
#define points ml_st_points
#define npoints (ml_st->npoints)
#define period_ns (ml_st->period_ns)
static _Atomic int lock;

/* Resident bytes from /proc/self/statm (second field, in pages); -1 unknown. The file stays open
 * (a high descriptor of ours, checked before each read: base/fd.c), read with pread: a point costs
 * two system calls, not an open and a close on the program's allocation path. The timeline lock is
 * held. */
static struct ml_fd statm = ML_FD_NONE;

static int64_t rss_bytes(void) { return ml_proc_rss_at(&statm); }

static void compact(void)
{
    for (uint32_t i = 0; i < NPOINTS / 2; i++)
        points[i] = points[2 * i + 1];
    npoints = NPOINTS / 2;
    period_ns *= 2;
}

/* A point at tick `now`; a dump's adds `unflushed` to the heap, as the dump counts it. Nothing here
 * costs more as the heap grows: the allocator's figures are the latest the runtime's thread read
 * (allocstats.c), never asked for on the program's thread. */
static void take_point(uint64_t now, int why, int64_t unflushed)
{
    (void)now;
    if (atomic_exchange_explicit(&lock, 1, memory_order_acquire))
        return;
    ml_tls.busy++;
    if (!period_ns)
        period_ns = PERIOD_NS;
    uint64_t hz = ml_views_tsc_hz_rough();
    ml_life_set_rate(hz);
    int64_t mmap = ml_heap_mmap_now();
    struct point pt = {.ns = ml_now_ns(), .heap = ml_heap_now() - mmap, .rss = rss_bytes(),
                        .in_use = -1, .footprint = -1, .mmap = mmap};
    pt.heap += unflushed; /* reallocations in place: malloc's blocks only */
    if (why != ML_TL_DUMP)
        ml_allocstats_latest(&pt.in_use, &pt.footprint);
    /* the sampled blocks are in the allocator's figures already when they have placeholders (those
     * over 32 MiB, or 128 KiB where address space is scarce, have none: left out then) */
    int64_t sampled = ml_blocks_placed() ? 0 : ml_range_live_bytes();
    if (pt.in_use >= 0)
        pt.in_use += sampled;
    if (pt.footprint >= 0)
        pt.footprint += sampled;
    /* the tick, the time and the rate of this moment: a reader of the state file converts ticks
     * with them once the process is gone */
    atomic_store_explicit(&ml_st->clock_hz, hz, memory_order_relaxed);
    atomic_store_explicit(&ml_st->clock_ns, pt.ns, memory_order_relaxed);
    uint64_t after = __rdtsc(); /* the deadline counts from after the point, never from before */
    atomic_store_explicit(&ml_st->clock_tsc, after, memory_order_relaxed);
    if (npoints == NPOINTS)
        compact();
    if (ml_state_points_room(npoints + 1) == 0)
        points[npoints++] = pt;
    atomic_store_explicit(&ml_timeline_next, after + (uint64_t)((double)period_ns * 1e-9 * (double)hz),
                          memory_order_relaxed);
    ml_tls.busy--;
    ml_spin_unlock(&lock);
}

void ml_timeline_allocator(void *(*malloc_fn)(size_t)) { ml_allocstats_allocator(malloc_fn); }

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
    /* /proc/self/statm opened by the parent reads the parent's: our copy is closed, reopened later */
    ml_fd_close(&statm);
    ml_allocstats_fork_child();
}

/* view allocator <kind> / tl <ns> <heap> <rss> <in_use> <footprint> <mmap> (-1 = unknown; the heap
 * without the anonymous mappings, which are <mmap>) */
void ml_timeline_write(struct ml_out *o)
{
    for (int tries = 0; atomic_exchange_explicit(&lock, 1, memory_order_acquire); tries++) {
        if (tries > 100000)
            return; /* a point is being taken by a thread that cannot go on (we interrupted it) */
        __builtin_ia32_pause();
    }
    ml_allocstats_write(o);
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
        ml_out_str(o, " ");
        ml_out_i64(o, p->mmap);
        ml_out_str(o, "\n");
    }
    ml_spin_unlock(&lock);
}
