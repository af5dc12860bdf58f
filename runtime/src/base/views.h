/* Beyond "who allocated": the estimated live heap and its peak set (peak.c), lifetimes and live ages
 * (lifetime.c), and memory over time (timeline.c). block.c feeds them on the sampled paths only: the
 * unsampled fast path never sees any of it. Each file's functions are in its own header (lifetime.h,
 * peak.h, timeline.h); this one holds what they share. */
#ifndef MEMLENS_VIEWS_H
#define MEMLENS_VIEWS_H
#include "rt.h"

#pragma GCC visibility push(hidden)

/* Off (MEMLENS_VIEWS=0, or memlens_views(0)): sampled blocks carry no time and no view runs. */
extern _Atomic int ml_views_on;

/* Lifetime buckets are decades of time: bucket 0 is < 1 us, bucket k is [10^(k-1), 10^k) us, the
 * last (>= 100 s) is open. Decades, not powers of two of ticks: a report's "freed within 1 ms" and
 * "median 100 ms-1 s" are then what was measured, with nothing spread across buckets. */
#define ML_LIFE_BUCKETS 10
#define ML_AGE_SHIFT 20 /* live ages are summed in units of 2^20 ticks (~0.3 ms) */

#pragma GCC visibility pop
#endif
