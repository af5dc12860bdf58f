/* The tick clock: the TSC tick the views count from (the anchor, set at the first timed block), the
 * tick rate measured since, and the lifetime decade edges in ticks. Below the views and the cost
 * account, which both convert ticks with it; its anchor and rates live in the state's header
 * (state.c), where a reader converts ticks once the process is gone. */
#define _GNU_SOURCE
#include <time.h>
#include <x86intrin.h>

#include "../store/state.h"
#include "clock.h"

_Atomic uint64_t ml_life_edges[ML_LIFE_BUCKETS - 1];
/* In the state's header: the anchor tick (at CLOCK_MONOTONIC anchor_ns) and the tick rate measured
 * over 50 us then (hz_start). */
#define anchor_tsc (ml_st->anchor_tsc)
#define anchor_ns (ml_st->anchor_ns)
#define hz_start (ml_st->hz_start)

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void ml_life_set_rate(uint64_t hz)
{
    double per_ns = (double)hz * 1e-9, ns = 1000.0;
    for (int i = 0; i < ML_LIFE_BUCKETS - 1; i++, ns *= 10.0)
        atomic_store_explicit(&ml_life_edges[i], (uint64_t)(ns * per_ns + 0.5), memory_order_relaxed);
}

/* The tick rate before there is a span to measure it on: 50 us of both clocks (both count while
 * this thread is preempted, so a preemption costs time, not accuracy: within ~0.2 % here). */
static uint64_t calibrate(void)
{
    uint64_t n0 = mono_ns(), t0 = __rdtsc(), n1, t1;
    do {
        n1 = mono_ns();
        t1 = __rdtsc();
    } while (n1 - n0 < 50000u);
    return (uint64_t)((double)(t1 - t0) * 1e9 / (double)(n1 - n0));
}

uint64_t ml_views_anchor(void)
{
    uint64_t a = atomic_load_explicit(&anchor_tsc, memory_order_acquire);
    if (likely(a))
        return a;
    uint64_t hz = calibrate();
    uint64_t ns = mono_ns(), t = __rdtsc();
    uint64_t zero = 0;
    hz_start = hz; /* racing initialisers write nearly the same values */
    ml_life_set_rate(hz);
    anchor_ns = ns;
    if (atomic_compare_exchange_strong(&anchor_tsc, &zero, t ? t : 1))
        return t ? t : 1;
    return zero;
}

/* Ticks per second, measured since the anchor; before 1 ms of it has passed, the 50 us calibration
 * (within ~0.2 %: the ticks of a process that has lived less than a millisecond since its first
 * sample need no better). It never waits: a wait for a longer span, paid in the exit dump of every
 * short-lived process that sampled, cost a program forking 300 children 0.3 s at 1 ms each (and 6 s
 * at 20 ms before). */
uint64_t ml_views_tsc_hz(void)
{
    uint64_t a = ml_views_anchor();
    uint64_t ns = mono_ns(), t = __rdtsc();
    if (ns - anchor_ns < 1000000u)
        return hz_start;
    return (uint64_t)((double)(t - a) * 1e9 / (double)(ns - anchor_ns));
}

uint64_t ml_views_tsc_hz_rough(void)
{
    uint64_t a = ml_views_anchor();
    uint64_t ns = mono_ns(), t = __rdtsc();
    if (ns - anchor_ns < 20000000u)
        return hz_start;
    return (uint64_t)((double)(t - a) * 1e9 / (double)(ns - anchor_ns));
}

uint64_t ml_tick_ns(uint64_t tick)
{
    uint64_t hz = ml_views_tsc_hz(), now = __rdtsc(), ns = ml_now_ns();
    uint64_t ago = now > tick ? (uint64_t)((double)(now - tick) * 1e9 / (double)hz) : 0;
    return ns > ago ? ns - ago : 0;
}
