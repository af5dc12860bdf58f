/* The estimated live heap and the sampled live set at its high-water mark.
 *
 * Every sampled block adds its unbiased bytes to one counter while it lives (block.c, with the range
 * lock held), so the counter is an unbiased estimate of the whole live heap. When it passes the last
 * snapshot by a margin (1/32 of it, at least R/4), each stack's live counters are copied into
 * its peak columns: the dump then carries the set that was live at the (estimated) peak. The margin
 * bounds the number of snapshots to a few per doubling of the heap, and the copy walks the dense
 * stack list, not the hash table. Under the lock nothing else changes the live counters, so the set
 * copied is the one of a single moment.
 *
 * The highest estimate is the top of a noisy curve: on a heap that churns at a steady size, each
 * moment's estimate is a fresh draw, and the maximum over thousands of moments leans high by
 * several standard errors (200 blocks of 32 KiB replaced 400,000 times read 2.2x their size at
 * 512 KiB). So the peak is also estimated by splitting the samples: thinning a Poisson process
 * gives two independent ones of rate 1/(2R), and block.c puts each sampled block in half A, B or
 * both as the thinned processes would (a block of s bytes is in each with probability
 * q = 1 - exp(-s/2R), independently). Each half weighs its blocks s/q: two independent unbiased
 * estimates of the heap. The moment A is highest is chosen by A's noise alone, so B's value then is
 * an unbiased estimate of the true heap at that moment (at most the true peak, and equal to it when
 * A's highest is at the true peak); the same the other way round. The CLI prints the mean of the
 * two (views.rs), whose error is that of one estimate, not of a maximum. */
#define _GNU_SOURCE
#include "../base/out.h"
#include "../sample/clock.h"
#include "../store/stacks.h"
#include "../store/state.h"
#include "peak.h"
#include "range.h"

/* In the state's header (state.c), where they outlive the process:
 *   heap          the estimate, written with the range lock held, read anywhere
 *   heap_max      its highest value, at heap_max_tick (a tick: taking the time at every new maximum
 *                 costs), and next_snap, the value past which the next snapshot is taken
 *   snap_heap/ns  the estimate and the time of the last snapshot
 *   snapped       the peak columns are this process's (a fork child starts without; state.c sets
 *                 it at start-up) */
#define heap (ml_st->heap)
#define heap_max (ml_st->heap_max)
#define next_snap (ml_st->next_snap)
#define heap_max_tick (ml_st->heap_max_tick)
#define snap_heap (ml_st->snap_heap)
#define snap_ns (ml_st->snap_ns)
#define snapped (ml_st->snapped)

int64_t ml_heap_now(void) { return atomic_load_explicit(&heap, memory_order_relaxed); }
int ml_peak_valid(void) { return atomic_load_explicit(&snapped, memory_order_relaxed); }

static void copy_peak(struct ml_stack *r, void *arg)
{
    (void)arg;
    atomic_store_explicit(&r->peak_fx, atomic_load_explicit(&r->inuse_fx, memory_order_relaxed),
                          memory_order_relaxed);
    atomic_store_explicit(&r->peak_bytes, atomic_load_explicit(&r->inuse_bytes, memory_order_relaxed),
                          memory_order_relaxed);
}

static ML_NOINLINE void snapshot(int64_t h)
{
    ml_stacks_each_listed(copy_peak, NULL);
    uint64_t R = atomic_load_explicit(&ml_cfg.interval, memory_order_relaxed);
    /* A heap of a few intervals has its peak set within R/4 of its maximum, a big one within 3%. */
    int64_t margin = h >> 5;
    if (margin < (int64_t)(R / 4))
        margin = (int64_t)(R / 4);
    next_snap = h + margin;
    atomic_store_explicit(&snap_heap, (uint64_t)h, memory_order_relaxed);
    atomic_store_explicit(&snap_ns, ml_now_ns(), memory_order_relaxed);
    atomic_store_explicit(&snapped, 1, memory_order_relaxed);
}

/* Each half's estimate, and at its highest the other's (both change first: a block in both). */
static void halves(const int64_t dh[2], uint64_t now)
{
    ml_st->half[0] += dh[0];
    ml_st->half[1] += dh[1];
    for (int h = 0; h < 2; h++) {
        if (dh[h] > 0 && ml_st->half[h] > ml_st->half_max[h]) {
            ml_st->half_max[h] = ml_st->half[h];
            ml_st->half_other[h] = ml_st->half[1 - h];
            ml_st->half_tick[h] = now;
        }
    }
}

int64_t ml_heap_half(int h) { return ml_st->half[h]; }

int ml_heap_change_locked(int64_t delta, const int64_t dh[2], uint64_t now)
{
    halves(dh, now);
    int64_t h = atomic_load_explicit(&heap, memory_order_relaxed) + delta;
    atomic_store_explicit(&heap, h, memory_order_relaxed);
    int snap = 0;
    if (delta > 0 && h > heap_max) {
        heap_max = h;
        heap_max_tick = now;
        if (h > next_snap) {
            snapshot(h);
            snap = 1;
        }
    }
    ml_range_heap_room_locked(heap_max - h); /* freed pages the range keeps: within this (range.c) */
    return snap;
}

/* The child's peak is its own: the heap it inherited is its maximum so far, and the first growth
 * above it takes a snapshot (until then its peak columns are the parent's, and are not written). */
void ml_peak_fork_child(uint64_t now)
{
    heap_max = next_snap = ml_heap_now();
    heap_max_tick = now;
    for (int h = 0; h < 2; h++) {
        ml_st->half_max[h] = ml_st->half[h];
        ml_st->half_other[h] = ml_st->half[1 - h];
        ml_st->half_tick[h] = now;
    }
    atomic_store(&snap_heap, 0);
    atomic_store(&snap_ns, 0);
    atomic_store(&snapped, 0);
}

/* view heap <now> / heap_max <bytes> <ns> / peak <bytes at the snapshot> <ns> /
 * split <B's estimate when A was highest> <ns> <A's when B was> <ns> */
void ml_peak_write(struct ml_out *o, int64_t unflushed)
{
    int64_t now = ml_heap_now() + unflushed, max = heap_max; /* racy: a dump reads while others count */
    uint64_t max_tick = heap_max_tick;
    ml_out_str(o, "view heap ");
    ml_out_i64(o, now);
    ml_out_str(o, "\nview heap_max ");
    ml_out_i64(o, max >= now ? max : now); /* growth not flushed yet may be the highest */
    ml_out_str(o, " ");
    ml_out_u64(o, max < now ? ml_now_ns() : max_tick ? ml_tick_ns(max_tick) : 0);
    ml_out_str(o, "\nview peak ");
    ml_out_u64(o, atomic_load(&snap_heap));
    ml_out_str(o, " ");
    ml_out_u64(o, atomic_load(&snap_ns));
    ml_out_str(o, "\nview split");
    for (int h = 0; h < 2; h++) {
        uint64_t t = ml_st->half_tick[h];
        ml_out_str(o, " ");
        ml_out_i64(o, ml_st->half_other[h]);
        ml_out_str(o, " ");
        ml_out_u64(o, t ? ml_tick_ns(t) : 0);
    }
    ml_out_str(o, "\n");
}
