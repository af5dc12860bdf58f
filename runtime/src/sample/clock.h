/* The tick clock (clock.c): the anchor the views count from, the tick rate, live-age units and the
 * lifetime decade edges in ticks. */
#ifndef MEMLENS_CLOCK_H
#define MEMLENS_CLOCK_H
#include "../base/views.h"

#pragma GCC visibility push(hidden)

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
/* Set the edges for a tick rate (timeline.c, at every point, with the rate measured since the anchor). */
void ml_life_set_rate(uint64_t hz);

#pragma GCC visibility pop
#endif
