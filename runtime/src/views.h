/* Beyond "who allocated": the estimated live heap and its peak set (peak.c), lifetimes and live ages
 * (lifetime.c), and memory over time (timeline.c). block.c feeds them on the sampled paths only: the
 * unsampled fast path never sees any of it. */
#ifndef MEMLENS_VIEWS_H
#define MEMLENS_VIEWS_H
#include "rt.h"

#pragma GCC visibility push(hidden)

/* Lifetime buckets are decades of time: bucket 0 is < 1 us, bucket k is [10^(k-1), 10^k) us, the
 * last (>= 100 s) is open. Decades, not powers of two of ticks: a report's "freed within 1 ms" and
 * "median 100 ms-1 s" are then what was measured, with nothing spread across buckets. */
#define ML_LIFE_BUCKETS 10
#define ML_AGE_SHIFT 20 /* live ages are summed in units of 2^20 ticks (~0.3 ms) */

/* Off (MEMLENS_VIEWS=0, or memlens_views(0)): sampled blocks carry no time and nothing below runs. */
extern _Atomic int ml_views_on;

/* lifetime.c */
/* Tick the views count time from (set once, at the first timed block), and the tick rate measured
 * since. */
uint64_t ml_views_anchor(void);
uint64_t ml_views_tsc_hz(void);
/* The same without waiting: 1 GHz until a millisecond has passed since the anchor. */
uint64_t ml_views_tsc_hz_rough(void);
/* CLOCK_REALTIME ns of a past tick (for a dump: it waits for a measured tick rate). */
uint64_t ml_tick_ns(uint64_t tick);
/* A block born at tick t counts t's age unit in its stack's age sum: units of 2^ML_AGE_SHIFT ticks
 * since the anchor, plus one, so that a block born in the first unit still has a birth to age from. */
static inline uint64_t ml_age_units(uint64_t t, uint64_t anchor)
{
    return (t > anchor ? (t - anchor) >> ML_AGE_SHIFT : 0) + 1;
}
/* The bucket edges in ticks (1 us ... 100 s), from the tick rate: calibrated for 50 us when the
 * anchor is set, then measured again over the whole span since it at every timeline point. */
extern _Atomic uint64_t ml_life_edges[ML_LIFE_BUCKETS - 1];
/* The lifetime bucket of a block that lived `ticks`: how many edges it reached. */
static inline unsigned ml_life_bucket(uint64_t ticks)
{
    unsigned k = 0;
    for (int i = 0; i < ML_LIFE_BUCKETS - 1; i++)
        k += ticks >= atomic_load_explicit(&ml_life_edges[i], memory_order_relaxed);
    return k;
}
/* Set the edges for a tick rate (timeline.c, every point, with the rate measured since the anchor). */
void ml_life_set_rate(uint64_t hz);
/* The `life` line that follows each `stack` line of a dump. */
void ml_views_write_stack(struct ml_out *o, struct ml_stack *r);
/* The `view` and `tl` lines, written just before a dump's `end`. */
void ml_views_write(struct ml_out *o);
/* Fork child: no dump written yet by this process (growth since the previous dump is unknown). */
void ml_views_fork_child(void);

/* peak.c (the range lock held, by block.c) */
/* The estimate changed by `delta` bytes at tick `now`; 1 when that took a peak snapshot (the caller
 * then adds a timeline point, after the lock). */
int ml_heap_change_locked(int64_t delta, uint64_t now);
int64_t ml_heap_now(void);
/* The peak columns hold this process's snapshot (a fork child has none until it grows). */
int ml_peak_valid(void);
void ml_peak_fork_child(uint64_t now);
/* view heap/heap_max/peak lines; `unflushed`: the estimate's share of what blocks have not flushed. */
void ml_peak_write(struct ml_out *o, int64_t unflushed);

/* timeline.c */
/* Take a point if the period elapsed, or now (a new peak, a dump). A dump's point leaves the
 * allocator's figures unknown: a dump must be async-signal-safe, and mallinfo2/mallctl take locks
 * the interrupted thread may hold. */
enum { ML_TL_PERIODIC, ML_TL_PEAK, ML_TL_DUMP };
void ml_timeline_tick(uint64_t now, int why);
extern _Atomic uint64_t ml_timeline_next; /* tick of the next periodic point */
void ml_timeline_write(struct ml_out *o);
/* Fork child: the points so far are the parent's. */
void ml_timeline_fork_child(void);

#pragma GCC visibility pop
#endif
