/* Beyond "who allocated": the estimated live heap and its peak set (peak.c), lifetimes and live ages
 * (lifetime.c), and memory over time (timeline.c). All of it runs on the sampled paths only: the
 * unsampled fast path never sees it. */
#ifndef MEMLENS_VIEWS_H
#define MEMLENS_VIEWS_H
#include "rt.h"

#pragma GCC visibility push(hidden)

#define ML_LIFE_BUCKETS 16
#define ML_LIFE_LG0 12 /* bucket 0: < 2^12 ticks; bucket k: [2^(10+2k), 2^(12+2k)); the last is open */
#define ML_AGE_SHIFT 20 /* live ages are summed in units of 2^20 ticks (~0.3 ms) */

/* Off (MEMLENS_VIEWS=0, or memlens_views(0)): sampled blocks carry no time and nothing below runs. */
extern _Atomic int ml_views_on;

/* lifetime.c */
/* A sampled block was recorded on stack `st` (NULL when its stack was dropped). */
void ml_views_alloc(struct ml_block *b, struct ml_stack *st);
/* A sampled block is being freed. */
void ml_views_free(struct ml_block *b, struct ml_stack *st);
/* Tick the views count time from (set once), its wall-clock time, and the tick rate measured since. */
uint64_t ml_views_anchor(void);
uint64_t ml_views_tsc_hz(void);
/* The same without waiting: 1 GHz until a millisecond has passed since the anchor. */
uint64_t ml_views_tsc_hz_rough(void);
/* The `life` line that follows each `stack` line of a dump. */
void ml_views_write_stack(struct ml_out *o, struct ml_stack *r);
/* The `view` and `tl` lines, written just before a dump's `end`. */
void ml_views_write(struct ml_out *o);

/* peak.c */
/* A sampled block of `size` real bytes and `weight` estimated bytes was allocated (or freed: both
 * negative) at tick `now`. */
void ml_heap_add(int64_t weight, int64_t size, uint64_t now);
int64_t ml_heap_now(void);
int64_t ml_sampled_live_bytes(void);
void ml_peak_write(struct ml_out *o);

/* timeline.c */
/* Take a point if the period elapsed, or now (a new peak, a dump). A dump's point leaves the
 * allocator's figures unknown: a dump must be async-signal-safe, and mallinfo2/mallctl take locks
 * the interrupted thread may hold. */
enum { ML_TL_PERIODIC, ML_TL_PEAK, ML_TL_DUMP };
void ml_timeline_tick(uint64_t now, int why);
extern _Atomic uint64_t ml_timeline_next; /* tick of the next periodic point */
void ml_timeline_write(struct ml_out *o);

#pragma GCC visibility pop
#endif
