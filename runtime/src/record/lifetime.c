/* Lifetimes and live ages of sampled blocks, and the views' dump lines (the clock they are measured
 * with is sample/clock.c).
 *
 * A sampled block's header keeps its allocation tick (TSC). block.c puts its lifetime, when it is
 * freed, into a per-stack histogram of decades (1 us ... 100 s, edges in ticks), weighted by the block's
 * unbiased bytes, so the CLI can tell sites whose blocks die young (temporaries) from those whose
 * blocks live long. While a block lives, its birth is part of a per-stack sum weighted the same way:
 * a dump turns that sum into the mean age of the stack's live bytes (old live bytes are suspected
 * leaks). A reallocation keeps the block's birth: a buffer that grows is one object to the program.
 * Ages are converted to time by the CLI with the tick rate clock.c measures between the first timed
 * block and the dump. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

#include "../base/out.h"
#include "../sample/clock.h"
#include "../store/stacks.h"
#include "../store/state.h"
#include "block.h"
#include "lifetime.h"
#include "peak.h"
#include "timeline.h"

/* In the state's header (state.c), where they outlive the process: the tick the views count from
 * (clock.c sets it), and whether this process has written a dump (growth is measured from it). */
#define anchor_tsc (ml_st->anchor_tsc)
#define dumped (ml_st->dumped)

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
    int64_t unflushed = ml_blocks_dump_heap();
    ml_peak_write(o, unflushed);
    ml_timeline_dump(__rdtsc(), unflushed);
    ml_timeline_write(o);
    dumped = 1;
}
