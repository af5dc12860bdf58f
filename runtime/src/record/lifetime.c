/* Lifetimes and live ages of sampled blocks: the clock they are measured with and the dump lines.
 *
 * A sampled block's header keeps its allocation tick (TSC). block.c puts its lifetime, when it is
 * freed, into a per-stack histogram of decades (1 us ... 100 s, edges in ticks), weighted by the block's
 * unbiased bytes, so the CLI can tell sites whose blocks die young (temporaries) from those whose
 * blocks live long. While a block lives, its birth is part of a per-stack sum weighted the same way:
 * a dump turns that sum into the mean age of the stack's live bytes (old live bytes are suspected
 * leaks). A reallocation keeps the block's birth: a buffer that grows is one object to the program.
 * Ages are converted to time by the CLI with the tick rate this file measures between the first
 * timed block and the dump. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

#include "../base/out.h"
#include "../store/stacks.h"
#include "../store/state.h"
#include "block.h"
#include "lifetime.h"
#include "peak.h"
#include "timeline.h"

_Atomic int ml_views_on = 1;
_Atomic uint64_t ml_life_edges[ML_LIFE_BUCKETS - 1];
/* In the state's header (state.c), where they outlive the process: the tick the views count from
 * (anchor_tsc, at CLOCK_MONOTONIC anchor_ns), the tick rate measured over 50 us then (hz_start),
 * and whether this process has written a dump (growth is measured from it). */
#define anchor_tsc (ml_st->anchor_tsc)
#define anchor_ns (ml_st->anchor_ns)
#define hz_start (ml_st->hz_start)
#define dumped (ml_st->dumped)

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

__attribute__((constructor(102))) static void views_config(void)
{
    const char *s = getenv("MEMLENS_VIEWS");
    if (s && s[0] == '0')
        atomic_store(&ml_views_on, 0);
    atomic_store(&ml_st->views_on, atomic_load(&ml_views_on));
}

/* Switch the views on or off at run time (the fast-path benchmark pairs the two in one process). */
ML_EXPORT void memlens_views(int on)
{
    atomic_store(&ml_views_on, !!on);
    atomic_store(&ml_st->views_on, !!on);
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

/* Ticks per second, measured since the anchor (at least 1 ms of it: a shorter span is extended; the
 * clock's error is tens of ns, so 1e-4 at worst). Every short-lived process that sampled pays the
 * wait in its exit dump: 20 ms cost a program forking 300 such children 6 s. */
uint64_t ml_views_tsc_hz(void)
{
    uint64_t a = ml_views_anchor();
    uint64_t ns = mono_ns(), t = __rdtsc();
    while (ns - anchor_ns < 1000000u) {
        __builtin_ia32_pause();
        ns = mono_ns();
        t = __rdtsc();
    }
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

void ml_views_fork_child(void) { dumped = 0; }

/* life <peak_fx> <peak_bytes> <live age ticks> <inuse bytes at the previous dump> <freed bytes by bucket>…
 * (block.c has added what live blocks had not flushed yet to the d_ columns) */
void ml_views_write_stack(struct ml_out *o, struct ml_stack *r)
{
    int64_t d[4];
    ml_blocks_unflushed(r, d);
    int64_t inuse = atomic_load_explicit(&r->inuse_bytes, memory_order_relaxed) + d[3];
    uint64_t sum = atomic_load_explicit(&r->age_sum, memory_order_relaxed);
    int64_t w = atomic_load_explicit(&r->age_w, memory_order_relaxed);
    uint64_t age = 0;
    if (w > 0) {
        uint64_t now = ml_age_units(__rdtsc(), ml_views_anchor());
        uint64_t born = sum / (uint64_t)w;
        age = now > born ? (now - born) << ML_AGE_SHIFT : 0;
    }
    int peak = ml_peak_valid();
    ml_out_str(o, "life ");
    ml_out_i64(o, peak ? atomic_load_explicit(&r->peak_fx, memory_order_relaxed) : 0);
    ml_out_str(o, " ");
    ml_out_i64(o, peak ? atomic_load_explicit(&r->peak_bytes, memory_order_relaxed) : 0);
    ml_out_str(o, " ");
    ml_out_u64(o, age);
    ml_out_str(o, " ");
    ml_out_i64(o, dumped ? r->dumped_inuse : 0);
    r->dumped_inuse = inuse < 0 ? 0 : inuse;
    int stale = ml_stack_stale(r); /* fork child: the parent's lifetimes */
    for (int i = 0; i < ML_LIFE_BUCKETS; i++) {
        ml_out_str(o, " ");
        ml_out_u64(o, stale ? 0 : atomic_load_explicit(&r->life[i], memory_order_relaxed));
    }
    ml_out_str(o, "\n");
}

static void line(struct ml_out *o, const char *key, uint64_t v)
{
    ml_out_str(o, "view ");
    ml_out_str(o, key);
    ml_out_str(o, " ");
    ml_out_u64(o, v);
    ml_out_str(o, "\n");
}

void ml_views_write(struct ml_out *o)
{
    line(o, "enabled", (uint64_t)atomic_load(&ml_views_on));
    /* Without a sample there is no tick to convert (and no reason to wait for a measurement). */
    int timed = atomic_load(&anchor_tsc) != 0;
    line(o, "tsc_hz", timed ? ml_views_tsc_hz() : 0);
    line(o, "life_decades", 1); /* the life lines' buckets are decades of ns (views.h) */
    ml_peak_write(o, ml_blocks_dump_heap());
    ml_timeline_tick(__rdtsc(), ML_TL_DUMP);
    ml_timeline_write(o);
    dumped = 1;
}
