/* A sampled block's accounting: one place for every event of its life and every figure it feeds.
 *
 * Events: born (a sampled allocation), resized in place or moved (realloc), freed, inherited by a
 * fork child. Figures: its stack's live counts (inuse) and live age, the estimated live heap and its
 * peak snapshot (peak.c), lifetimes (at free), the timeline (timeline.c), the real bytes in the range
 * (range.c), and its stack's cumulative counts for reallocations. Each event updates all of them
 * here, with the range lock held (the lock that hands out the block's memory), so a view cannot miss
 * an event, and a peak snapshot or a dump sees the counts of one moment. The live sampled blocks are
 * kept in a list: a dump walks it, and debug builds check against it that the heap estimate is the
 * sum of the live timed weights (ML_ASSERT(accounts_ok())).
 *
 * realloc counts the new size as an allocation, as jemalloc and heaptrack do: realloc(p, n) adds one
 * object of n bytes to alloc_*, and the block's live size becomes n. Unbiased, and cheap for a buffer
 * grown step by step:
 *   - a block outside the range (not sampled so far) is an allocation like any other for the
 *     countdown: sampled with probability p(n) = 1 - exp(-n/R) and weight 1/p(n); it then moves in;
 *   - a block in the range is seen at every reallocation, so each one is counted exactly in alloc_*
 *     (weight 1). Expected count of an event: P(in range)·n + P(not)·p(n)·n/p(n) = n;
 *   - whether it is live-sampled at its new size n is decided by a point of its own, an Exp(R) draw
 *     made at its first reallocation in the range, independent of everything before: it is sampled
 *     while n reaches the point, which has probability p(n) whatever its history, and then weighs
 *     n/p(n) — exactly how a fresh allocation of n bytes would be counted. A growing buffer needs no
 *     draw per step: once past its point it stays sampled;
 *   - its stack is the one of the event that sampled it; a reallocation from another call site
 *     (return address) unwinds again and moves the block's live bytes to that stack.
 * A reallocation in place stores into the header only: the exact counts wait there (pend_*) and the
 * live weights are recomputed (lock, expm1, the stack's counters) when the size moved by R/8 since
 * they were, when the block becomes sampled or unsampled, when it is freed or moved, and a dump adds
 * what waits. So the figures lag a growing block by at most R/8 bytes between dumps.
 * Lifetimes: a reallocation keeps the block's birth; a block that entered the range at a
 * reallocation is timed from there. */
#define _GNU_SOURCE
#include <math.h>
#include <stddef.h>
#include <string.h>
#include <x86intrin.h>

#include "../base/check.h"
#include "../sample/clock.h"
#include "../sample/cost.h"
#include "../sample/sample.h"
#include "../store/stacks.h"
#include "../store/state.h"
#include "../unwind/unwind.h"
#include "block.h"
#include "peak.h"
#include "range.h"
#include "timeline.h"
#include "usdt.h"

#define PEND_MAX (1u << 20) /* reallocations waiting in a header before they are counted anyway */

static struct ml_block *head; /* live sampled blocks, newest first (range lock) */
static uint64_t nlive;
static _Atomic uint64_t nheaped; /* of them, those in a mimalloc heap of their own (range lock) */
static _Atomic uint32_t gen = 1; /* reallocations pending from an older generation (before a reset,
                                    or the parent's, in a fork child) are not counted */
static void (*ph_release)(void *); /* ml_block_placeholders */
static int64_t dump_heap;        /* dump lock: the heap's share of what blocks have not flushed */
static uint32_t dump_gen;        /* dump lock: this dump's mark on the stack records it adds to */

/* Lock held: a plain read-modify-write (no bus lock) of a counter others only read. */
static inline void add_i64(_Atomic int64_t *x, int64_t d)
{
    atomic_store_explicit(x, atomic_load_explicit(x, memory_order_relaxed) + d, memory_order_relaxed);
}
static inline void add_u64(_Atomic uint64_t *x, uint64_t d)
{
    atomic_store_explicit(x, atomic_load_explicit(x, memory_order_relaxed) + d, memory_order_relaxed);
}

static inline struct ml_stack *stack_of(const struct ml_block *b)
{
    return b->stack == ML_NO_STACK ? NULL : ml_stack_get(b->stack);
}

static inline uint64_t tick(const struct ml_block *b) { return b->born ? __rdtsc() | 1 : 0; }

/* Lock held: the list against the counters. Every event checks in debug builds (every 64th once
 * the list is long): the heap estimate is the sum of the weights of the live timed blocks, and the
 * list is whole. */
static int accounts_ok(void)
{
    static uint64_t events;
    if (nlive > 256 && (++events & 63))
        return 1;
    int64_t timed = 0, half[2] = {0, 0};
    uint64_t n = 0;
    for (const struct ml_block *b = head; b; b = b->next) {
        if (++n > nlive || b->kind != ML_KIND_SAMPLED || (b->w_fx == 0) != (b->w_bytes == 0) ||
            (b->next && b->next->prev != b) || (b->stack != ML_NO_STACK && !ml_stack_get(b->stack)))
            return 0;
        if (b->born) {
            timed += (int64_t)b->w_bytes;
            half[0] += (int64_t)b->w_half[0];
            half[1] += (int64_t)b->w_half[1];
        }
    }
    return n == nlive && timed == ml_heap_now() && half[0] == ml_heap_half(0) && half[1] == ml_heap_half(1);
}

/* The block's stack's live counts and age change by (dfx, dbytes). */
static void count_stack(const struct ml_block *b, int64_t dfx, int64_t dbytes)
{
    struct ml_stack *st = stack_of(b);
    if (st) {
        add_i64(&st->inuse_fx, dfx);
        add_i64(&st->inuse_bytes, dbytes);
        if (b->born) {
            add_u64(&st->age_sum, (uint64_t)dbytes * ml_age_units(b->born, ml_views_anchor()));
            add_i64(&st->age_w, dbytes);
        }
    }
}

/* Lock held: the block's weights change by (dfx, dbytes) and its half-sample weights by dh — its
 * stack's live counts and age, and the heap estimates if it is timed. 1 when that took a peak
 * snapshot. */
static int count(const struct ml_block *b, int64_t dfx, int64_t dbytes, const int64_t dh[2], uint64_t now)
{
    count_stack(b, dfx, dbytes);
    return b->born ? ml_heap_change_locked(dbytes, dh, now) : 0;
}

/* Lock held: all the block's weights leave its stack and the estimates (freed, moved away, or
 * re-counted elsewhere). */
static int uncount(const struct ml_block *b, uint64_t now)
{
    int64_t dh[2] = {-(int64_t)b->w_half[0], -(int64_t)b->w_half[1]};
    return count(b, -(int64_t)b->w_fx, -(int64_t)b->w_bytes, dh, now);
}

/* A timeline point after the lock: at a new peak snapshot, or when the period is over. */
static void after(uint64_t now, int snap)
{
    if (snap)
        ml_timeline_tick(now, ML_TL_PEAK);
    else if (now && now >= atomic_load_explicit(&ml_timeline_next, memory_order_relaxed))
        ml_timeline_tick(now, ML_TL_PERIODIC);
}

static void link_block(struct ml_block *b)
{
    b->prev = NULL;
    b->next = head;
    if (head)
        head->prev = b;
    head = b;
    nlive++;
}

static void unlink_block(struct ml_block *b)
{
    if (b->prev)
        b->prev->next = b->next;
    else
        head = b->next;
    if (b->next)
        b->next->prev = b->prev;
    nlive--;
}

/* The exact counts of the block's reallocations go to its stack (atomics: exact mode adds there
 * without the lock). */
static void flush_alloc(struct ml_block *b)
{
    uint32_t g = atomic_load_explicit(&gen, memory_order_relaxed);
    if (b->pend_objs && b->gen == g) {
        struct ml_stack *st = stack_of(b);
        if (st) {
            ml_stack_touch(st);
            atomic_fetch_add_explicit(&st->alloc_fx, (uint64_t)b->pend_objs << 16, memory_order_relaxed);
            atomic_fetch_add_explicit(&st->alloc_bytes, b->pend_bytes, memory_order_relaxed);
        } else {
            atomic_fetch_add_explicit(&ml_st->dropped_bytes, b->pend_bytes, memory_order_relaxed);
        }
    }
    b->pend_objs = 0;
    b->pend_bytes = 0;
    b->gen = g;
}

/* Its point: the nearer of its halves' (0 until its first reallocation: the sample that put it in
 * the range). */
static inline uint64_t point_of(const struct ml_block *b)
{
    return b->point_h[0] < b->point_h[1] ? b->point_h[0] : b->point_h[1];
}

/* Sampled at its current size: it reaches its own point. */
static inline int live_sampled(const struct ml_block *b, uint64_t size) { return point_of(b) <= size; }

/* What it weighs at `size` in each half-sample (peak.c): size/q, q = 1 - exp(-size/2R), in the
 * halves whose point it reaches. */
static void half_weights(const struct ml_block *b, uint64_t size, uint64_t w[2])
{
    uint64_t fx, by = 0;
    if (live_sampled(b, size))
        ml_weights(size, 2 * b->point_R, &fx, &by);
    w[0] = b->point_h[0] <= size ? by : 0;
    w[1] = b->point_h[1] <= size ? by : 0;
}

/* A block just sampled at `size` bytes: in which halves of the thinned sampling process (peak.c),
 * and its weight in them (half_weights' for this size, without a second expm1). Given a sample
 * point in it, both halves hold one with probability q^2/p = q/(2-q) (p = 1-(1-q)^2), else one of
 * them, evenly. Exact mode: both, weight 1. */
static void choose_halves(struct ml_block *b, uint64_t size, uint64_t R)
{
    b->point_R = R;
    b->point_h[0] = b->point_h[1] = 0;
    if (!R) {
        b->w_half[0] = b->w_half[1] = size;
        return;
    }
    struct ml_thread *t = &ml_tls;
    if (t->h_size != size || t->h_R != R) {
        double q = -expm1(-(double)size / (double)(2 * R));
        t->h_both = q / (2.0 - q);
        t->h_w = (uint64_t)((double)size / q + 0.5);
        t->h_size = size;
        t->h_R = R;
    }
    double both = t->h_both, u = ml_uniform();
    b->w_half[0] = b->w_half[1] = t->h_w;
    if (u >= both) {
        int out = (u - both) < 0.5 * (1.0 - both) ? 0 : 1;
        b->point_h[out] = UINT64_MAX;
        b->w_half[out] = 0;
    }
}

static void live_weights(const struct ml_block *b, uint64_t size, uint64_t *fx, uint64_t *bytes)
{
    *fx = *bytes = 0;
    if (live_sampled(b, size))
        ml_weights(size, b->point_R, fx, bytes);
}

/* The weights no longer say what the block is: sampled or not, or R/8 bytes off its size. */
static inline int stale(const struct ml_block *b)
{
    int sampled = live_sampled(b, b->size);
    if (sampled != (b->w_bytes != 0))
        return 1;
    uint64_t d = b->size > b->counted ? b->size - b->counted : b->counted - b->size;
    uint64_t slack = b->point_R >> 3;
    return (sampled && d >= (slack < 4096 ? 4096 : slack)) || b->pend_objs >= PEND_MAX;
}

/* Lock held: weights for the block's size now, and its pending counts to its stack. */
static int reweigh(struct ml_block *b, uint64_t now)
{
    uint64_t fx, by, wh[2];
    live_weights(b, b->size, &fx, &by);
    half_weights(b, b->size, wh);
    int64_t dh[2] = {(int64_t)wh[0] - (int64_t)b->w_half[0], (int64_t)wh[1] - (int64_t)b->w_half[1]};
    int snap = count(b, (int64_t)fx - (int64_t)b->w_fx, (int64_t)by - (int64_t)b->w_bytes, dh, now);
    b->w_fx = fx;
    b->w_bytes = by;
    b->w_half[0] = wh[0];
    b->w_half[1] = wh[1];
    b->counted = b->size;
    flush_alloc(b);
    return snap;
}

void *ml_block_new(size_t size, size_t room, size_t weigh, size_t align, int zero, uint32_t id,
                   uint64_t w_fx, uint64_t w_bytes, uintptr_t ra, uint64_t tsc)
{
    uint64_t now = 0;
    if (atomic_load_explicit(&ml_views_on, memory_order_relaxed)) {
        /* the first timed block sets the clock's origin, before its birth */
        uint64_t anchor = ml_views_anchor();
        now = (tsc >= anchor ? tsc : __rdtsc()) | 1;
    }
    int dirty;
    ml_range_lock();
    struct ml_block *b = ml_range_alloc_locked(room > size ? room : size, align, zero, &dirty);
    if (!b) {
        ml_range_unlock();
        return NULL;
    }
    b->usable = b->size; /* the room; the block's size is what was asked */
    b->size = size;
    b->stack = id;
    b->w_fx = w_fx;
    b->w_bytes = w_bytes;
    b->counted = size;
    b->born = now;
    b->ra = ra;
    b->gen = atomic_load_explicit(&gen, memory_order_relaxed);
    choose_halves(b, weigh, atomic_load_explicit(&ml_cfg.interval, memory_order_relaxed));
    link_block(b);
    int64_t dh[2] = {(int64_t)b->w_half[0], (int64_t)b->w_half[1]};
    int snap = count(b, (int64_t)w_fx, (int64_t)w_bytes, dh, now);
    ML_ASSERT(accounts_ok());
    ml_range_unlock();
    if (zero && dirty)
        memset(b + 1, 0, size); /* a reused small chunk; fresh and large ones are zero already */
    after(now, snap);
    return b + 1;
}

/* Frees of sampled blocks from signal handlers that interrupted the runtime on their thread, which
 * may hold the range lock (or any lock of the sampled path) at that moment: each waits here, pushed
 * without a lock (its header's `deferred` links them), and is freed by the next sampled free or
 * reallocation that ends on any thread (until then it counts as live). Taken all at once (an
 * exchange), so the pushes never meet an ABA. */
static _Atomic(struct ml_block *) deferred;

static void defer_free(struct ml_block *b)
{
    struct ml_block *old = atomic_load_explicit(&deferred, memory_order_relaxed);
    do
        b->deferred = old;
    while (!atomic_compare_exchange_weak_explicit(&deferred, &old, b, memory_order_release,
                                                  memory_order_relaxed));
}

/* Lock held: the block leaves every count, the list and the range (freed at `now`). */
static void release_locked(struct ml_block *b, uint64_t now)
{
    uncount(b, now);
    struct ml_stack *st = stack_of(b);
    if (st && now && b->w_bytes) {
        ml_stack_touch(st); /* fork child: the histogram is cumulative, the child's starts at zero */
        add_u64(&st->life[ml_life_bucket(now > b->born ? now - b->born : 0)], b->w_bytes);
    }
    add_u64(&nheaped, b->heap ? UINT64_MAX : 0); /* -1 */
    unlink_block(b);
    ml_range_free_locked(b);
}

/* A placeholder leaves with its block, once the block is gone from the range (outside our lock). */
static void release_placeholder(void *ph)
{
    if (ph)
        ph_release(ph);
}

void ml_block_placeholders(void (*release)(void *)) { ph_release = release; }

int ml_blocks_placed(void) { return ph_release != NULL; }

static void free_now(struct ml_block *b)
{
    void *ph = b->placeholder;
    ml_usdt_free(b + 1); /* when it is freed: a deferred free (signal handler) fires it later */
    /* one TSC read for the runtime's account and the block's death (cost.h) */
    uint64_t tsc = __rdtsc(), c0 = ml_cost_begin_at(tsc), now = b->born ? tsc | 1 : 0;
    ml_busy_enter();
    ml_state_own(); /* a fork child's first write to its table copies its parent's (state.c) */
    flush_alloc(b);
    ml_range_lock();
    release_locked(b, now);
    ML_ASSERT(accounts_ok());
    ml_range_unlock();
    after(now, 0);
    ml_busy_leave();
    release_placeholder(ph);
    ml_cost_end(c0, 0, 1);
}

/* The waiting frees, once this thread is outside the runtime. */
static void drain_deferred(void)
{
    if (likely(!atomic_load_explicit(&deferred, memory_order_relaxed)) || ml_tls.busy)
        return;
    for (struct ml_block *b = atomic_exchange_explicit(&deferred, NULL, memory_order_acquire), *next; b;
         b = next) {
        next = b->deferred;
        free_now(b);
    }
}

void ml_sampled_free(void *p)
{
    struct ml_block *b = ml_block_of(p);
    if (b->kind != ML_KIND_SAMPLED)
        return; /* boot arena blocks are never freed */
    if (unlikely(ml_tls.busy)) {
        defer_free(b); /* a signal handler that interrupted the runtime on this thread */
        return;
    }
    free_now(b);
    drain_deferred();
}

/* ---- mimalloc's heaps (hooks.c) ---- */

void ml_block_set_heap(void *p, void *heap)
{
    struct ml_block *b = ml_block_of(p);
    if (b->kind != ML_KIND_SAMPLED || b->heap == heap)
        return;
    ml_range_lock();
    add_u64(&nheaped, (uint64_t)((heap != NULL) - (b->heap != NULL)));
    b->heap = heap;
    ml_range_unlock();
}

/* The walk is over every live sampled block, and only while one of them is in a heap of its own:
 * a program that destroys heaps holding samples pays O(live samples) per destroy (few: one per R
 * bytes of the heap). */
void ml_blocks_heap_gone(const void *heap, int destroyed)
{
    if (!heap || !atomic_load_explicit(&nheaped, memory_order_relaxed) || ml_tls.busy)
        return;
    ml_busy_enter();
    ml_state_own();
    uint64_t last = 0;
    ml_range_lock();
    for (struct ml_block *b = head, *next; b; b = next) {
        next = b->next;
        if (b->heap != heap)
            continue;
        if (!destroyed) { /* mi_heap_delete: its blocks live on in the backing heap */
            b->heap = NULL;
            add_u64(&nheaped, UINT64_MAX);
            continue;
        }
        ml_usdt_free(b + 1);
        uint64_t now = tick(b);
        flush_alloc(b);
        release_locked(b, now);
        last = now ? now : last;
    }
    ML_ASSERT(accounts_ok());
    ml_range_unlock();
    after(last, 0);
    ml_busy_leave();
    drain_deferred();
}

/* A reallocation from another call site: its stack, and the block's live bytes moved there. */
static ML_NOINLINE void resite(struct ml_block *b, uintptr_t ra)
{
    uint32_t id = ml_unwind_intern(ra, 0);
    uint64_t now = tick(b);
    flush_alloc(b); /* what came from the old site stays there */
    ml_range_lock();
    int64_t fx = (int64_t)b->w_fx, by = (int64_t)b->w_bytes;
    int64_t dh[2] = {(int64_t)b->w_half[0], (int64_t)b->w_half[1]};
    int snap = uncount(b, now);
    b->stack = id;
    b->ra = ra;
    snap |= count(b, fx, by, dh, now);
    ML_ASSERT(accounts_ok());
    ml_range_unlock();
    after(now, snap);
}

static ML_NOINLINE void settle(struct ml_block *b)
{
    uint64_t now = tick(b);
    ml_range_lock();
    int snap = reweigh(b, now);
    ML_ASSERT(accounts_ok());
    ml_range_unlock();
    after(now, snap);
}

/* The range is full: the block moves out to the allocator the caller forwards to and leaves the
 * profile (counted as dropped: the estimate loses it). */
static ML_NOINLINE void *leave(struct ml_block *b, size_t n, void *(*out)(size_t))
{
    void *q = out(n);
    if (!q)
        return NULL;
    memcpy(q, b + 1, ml_block_usable(b) < n ? ml_block_usable(b) : n);
    uint64_t now = tick(b);
    flush_alloc(b);
    ml_range_lock();
    uncount(b, now);
    atomic_fetch_add_explicit(&ml_st->dropped, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&ml_st->dropped_bytes, b->w_bytes, memory_order_relaxed);
    add_u64(&nheaped, b->heap ? UINT64_MAX : 0); /* -1 */
    unlink_block(b);
    void *ph = b->placeholder;
    ml_range_free_locked(b);
    ML_ASSERT(accounts_ok());
    ml_range_unlock();
    release_placeholder(ph);
    return q;
}

/* The accounting fields of the header lie together, from w_fx up to the list links. */
#define ACCT_FROM offsetof(struct ml_block, w_fx)
#define ACCT_BYTES (offsetof(struct ml_block, prev) - ACCT_FROM)
_Static_assert(offsetof(struct ml_block, gen) < offsetof(struct ml_block, prev), "accounting before the links");

/* Lock held: nb takes b's place (accounting and list); b's memory is given back. */
static void moved(struct ml_block *b, struct ml_block *nb)
{
    nb->stack = b->stack;
    memcpy((char *)nb + ACCT_FROM, (char *)b + ACCT_FROM, ACCT_BYTES);
    nb->placeholder = b->placeholder;
    nb->prev = b->prev;
    nb->next = b->next;
    if (b->prev)
        b->prev->next = nb;
    else
        head = nb;
    if (b->next)
        b->next->prev = nb;
    ml_range_free_locked(b);
}

static void *realloc_in_range(struct ml_block *b, void *p, size_t n, size_t room, uintptr_t ra,
                              void *(*out)(size_t));

void *ml_block_realloc(void *p, size_t n, size_t room, uintptr_t ra, void *(*out)(size_t))
{
    struct ml_block *b = ml_block_of(p);
    if (unlikely(ml_tls.busy)) {
        /* A signal handler that interrupted the runtime on this thread: no lock of ours may be
         * taken. The block moves out to the allocator and its free waits (defer_free). */
        void *q = out(n);
        if (q) {
            memcpy(q, p, ml_block_usable(b) < n ? ml_block_usable(b) : n);
            defer_free(b);
        }
        return q;
    }
    ml_busy_enter();
    void *q = realloc_in_range(b, p, n, room > n ? room : n, ra, out);
    ml_busy_leave();
    drain_deferred();
    return q;
}

static void *realloc_in_range(struct ml_block *b, void *p, size_t n, size_t room, uintptr_t ra,
                              void *(*out)(size_t))
{
    ml_state_own();
    uint32_t g = atomic_load_explicit(&gen, memory_order_relaxed);
    if (unlikely(b->gen != g)) { /* counts of an older generation are not this profile's */
        b->pend_bytes = 0;
        b->pend_objs = 0;
        b->gen = g;
    }
    if (unlikely(b->ra != ra))
        resite(b, ra);
    if (likely(atomic_load_explicit(&ml_cfg.active, memory_order_relaxed))) {
        b->pend_bytes += n;
        b->pend_objs++;
    }
    if (unlikely(!point_of(b))) {
        /* two independent Exp(2R) points, one per half: their minimum is the Exp(R) point */
        uint64_t R = atomic_load_explicit(&ml_cfg.interval, memory_order_relaxed);
        b->point_R = R;
        b->point_h[0] = R ? ml_draw(2 * R) : 1; /* exact mode: every size is sampled, weight 1 */
        b->point_h[1] = R ? ml_draw(2 * R) : 1;
    }
    if (likely(ml_range_fits(b, room))) {
        b->size = n;
        b->usable = room;
        if (unlikely(stale(b)))
            settle(b);
        return p;
    }
    uint64_t now = tick(b);
    size_t old = ml_block_usable(b); /* the program may have written into its slack */
    int dirty, snap = 0;
    ml_range_lock();
    if (ml_range_resize_locked(b, room)) { /* a large block: the pages after it */
        b->size = n;
        b->usable = room;
        if (stale(b))
            snap = reweigh(b, now);
        ML_ASSERT(accounts_ok());
        ml_range_unlock();
        after(now, snap);
        return p;
    }
    struct ml_block *nb = ml_range_alloc_locked(room, 16, 0, &dirty);
    ml_range_unlock();
    if (!nb)
        return leave(b, n, out);
    memcpy(nb + 1, p, old < n ? old : n);
    ml_range_lock();
    moved(b, nb);
    nb->size = n;
    nb->usable = room;
    if (stale(nb))
        snap = reweigh(nb, now);
    ML_ASSERT(accounts_ok());
    ml_range_unlock();
    after(now, snap);
    return nb + 1;
}

void ml_blocks_fork_child(void)
{
    atomic_fetch_add(&gen, 1); /* the parent's pending reallocations are in the parent's profile */
    ml_peak_fork_child(atomic_load(&ml_views_on) ? __rdtsc() | 1 : 0);
    ml_timeline_fork_child();
}

void ml_blocks_reset(void) { atomic_fetch_add(&gen, 1); }

/* No range lock: every writer of a record or of this list calls ml_state_own first, and the copy
 * that calls this holds it up (state.c). The blocks are this process's memory, as at the fork. The
 * heap estimates are in the header, which the child took as at the fork: only the records need it. */
void ml_blocks_recount(void)
{
    for (const struct ml_block *b = head; b; b = b->next)
        count_stack(b, (int64_t)b->w_fx, (int64_t)b->w_bytes);
}

/* The record's dump columns, zeroed on this dump's first use (a fork child writes no other record:
 * its stack table stays shared with the parent's). */
static struct ml_stack *dump_record(struct ml_stack *r)
{
    if (r->d_gen != dump_gen) {
        r->d_gen = dump_gen;
        r->d_alloc_fx = r->d_alloc_bytes = r->d_inuse_fx = r->d_inuse_bytes = 0;
    }
    return r;
}

void ml_blocks_unflushed(const struct ml_stack *r, int64_t d[4])
{
    int mine = r->d_gen == dump_gen;
    d[0] = mine ? r->d_alloc_fx : 0;
    d[1] = mine ? r->d_alloc_bytes : 0;
    d[2] = mine ? r->d_inuse_fx : 0;
    d[3] = mine ? r->d_inuse_bytes : 0;
}

void ml_blocks_dump_begin(void)
{
    dump_gen++;
    dump_heap = 0;
    /* A dump from a signal handler that interrupted this thread's accounting, or one that would wait
     * too long: the counts waiting in headers are left out of this dump (they stay for the next). */
    if (!ml_range_lock_bounded())
        return;
    uint32_t g = atomic_load(&gen);
    for (const struct ml_block *b = head; b; b = b->next) {
        /* size and pend_* are written without the lock by the thread resizing the block: read
         * once, they are at most one reallocation behind */
        uint64_t size = b->size, fx = b->w_fx, by = b->w_bytes;
        if (size != b->counted || live_sampled(b, size) != (by != 0))
            live_weights(b, size, &fx, &by);
        int64_t dfx = (int64_t)fx - (int64_t)b->w_fx, dby = (int64_t)by - (int64_t)b->w_bytes;
        struct ml_stack *st = stack_of(b);
        if (st && (dfx || dby || (b->gen == g && b->pend_objs))) {
            dump_record(st);
            st->d_inuse_fx += dfx;
            st->d_inuse_bytes += dby;
            if (b->gen == g && b->pend_objs) {
                st->d_alloc_fx += (int64_t)((uint64_t)b->pend_objs << 16);
                st->d_alloc_bytes += (int64_t)b->pend_bytes;
            }
        }
        if (b->born)
            dump_heap += dby;
    }
    ML_ASSERT(accounts_ok());
    ml_range_unlock();
}

int64_t ml_blocks_dump_heap(void) { return dump_heap; }
