/* Lifetimes and live ages of sampled blocks.
 *
 * A sampled block's header keeps its allocation tick (TSC). On free its lifetime goes into a per-stack
 * histogram of a few log buckets (factor 4 in ticks), weighted by the block's unbiased bytes, so the
 * CLI can tell sites whose blocks die young (temporaries) from those whose blocks live long. While a
 * block lives, its tick is part of a per-stack sum weighted the same way: a dump turns that sum into
 * the mean age of the stack's live bytes (old live bytes are suspected leaks). Ticks are converted to
 * time by the CLI with the tick rate this file measures between the first sample and the dump. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

#include "views.h"

_Atomic int ml_views_on = 1;
static _Atomic uint64_t anchor_tsc;
static uint64_t anchor_ns; /* CLOCK_MONOTONIC at anchor_tsc */

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
}

/* Switch the views on or off at run time (the fast-path benchmark pairs the two in one process). */
ML_EXPORT void memlens_views(int on) { atomic_store(&ml_views_on, !!on); }

uint64_t ml_views_anchor(void)
{
    uint64_t a = atomic_load_explicit(&anchor_tsc, memory_order_acquire);
    if (likely(a))
        return a;
    uint64_t ns = mono_ns(), t = __rdtsc();
    uint64_t zero = 0;
    anchor_ns = ns; /* racing initialisers write nearly the same value */
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
    if (ns - anchor_ns < 1000000u)
        return 1000000000u;
    return (uint64_t)((double)(t - a) * 1e9 / (double)(ns - anchor_ns));
}

static inline uint64_t age_units(uint64_t tick, uint64_t anchor)
{
    return tick > anchor ? (tick - anchor) >> ML_AGE_SHIFT : 0;
}

static inline unsigned life_bucket(uint64_t ticks)
{
    if (ticks < (1u << ML_LIFE_LG0))
        return 0;
    unsigned k = (unsigned)(63 - __builtin_clzll(ticks) - (ML_LIFE_LG0 - 2)) >> 1;
    return k < ML_LIFE_BUCKETS ? k : ML_LIFE_BUCKETS - 1;
}

void ml_views_alloc(struct ml_block *b, struct ml_stack *st)
{
    if (!atomic_load_explicit(&ml_views_on, memory_order_relaxed)) {
        b->pad = 0;
        return;
    }
    uint64_t anchor = ml_views_anchor(), now = __rdtsc();
    b->pad = now ? now : 1;
    if (st)
        atomic_fetch_add_explicit(&st->age_sum, b->w_bytes * age_units(b->pad, anchor),
                                  memory_order_relaxed);
    ml_heap_add((int64_t)b->w_bytes, (int64_t)b->size, now);
}

void ml_views_free(struct ml_block *b, struct ml_stack *st)
{
    if (!b->pad)
        return; /* allocated while the views were off */
    uint64_t anchor = ml_views_anchor(), now = __rdtsc();
    if (st) {
        uint64_t life = now > b->pad ? now - b->pad : 0;
        ml_stack_touch(st); /* fork child: the histogram is cumulative, the child's starts at zero */
        atomic_fetch_add_explicit(&st->life[life_bucket(life)], b->w_bytes, memory_order_relaxed);
        atomic_fetch_sub_explicit(&st->age_sum, b->w_bytes * age_units(b->pad, anchor),
                                  memory_order_relaxed);
    }
    ml_heap_add(-(int64_t)b->w_bytes, -(int64_t)b->size, now);
}

/* life <peak_fx> <peak_bytes> <live age ticks> <inuse bytes at the previous dump> <freed bytes by bucket>… */
void ml_views_write_stack(struct ml_out *o, struct ml_stack *r)
{
    int64_t inuse = atomic_load_explicit(&r->inuse_bytes, memory_order_relaxed);
    uint64_t sum = atomic_load_explicit(&r->age_sum, memory_order_relaxed);
    uint64_t age = 0;
    if (inuse > 0 && sum) {
        uint64_t now = age_units(__rdtsc(), ml_views_anchor());
        uint64_t born = sum / (uint64_t)inuse;
        age = now > born ? (now - born) << ML_AGE_SHIFT : 0;
    }
    ml_out_str(o, "life ");
    ml_out_i64(o, atomic_load_explicit(&r->peak_fx, memory_order_relaxed));
    ml_out_str(o, " ");
    ml_out_i64(o, atomic_load_explicit(&r->peak_bytes, memory_order_relaxed));
    ml_out_str(o, " ");
    ml_out_u64(o, age);
    ml_out_str(o, " ");
    ml_out_i64(o, r->dumped_inuse);
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
    line(o, "tsc_hz", atomic_load(&anchor_tsc) ? ml_views_tsc_hz() : 0);
    line(o, "life_lg0", ML_LIFE_LG0);
    ml_peak_write(o);
    ml_timeline_tick(__rdtsc(), ML_TL_DUMP);
    ml_timeline_write(o);
}
