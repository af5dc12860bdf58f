/* The internal control interface (internal.h) used by ctl.c and api.c. */
#define _GNU_SOURCE
#include "rt.h"

int ml_set_active(int on)
{
    ml_init();
    if (on && atomic_load(&ml_cfg.failed))
        return 0; /* after an internal failure profiling stays off */
    return atomic_exchange(&ml_cfg.active, on ? 1 : 0);
}

void ml_set_interval(uint64_t bytes)
{
    ml_init();
    atomic_store(&ml_cfg.interval, bytes);
}

void ml_reset(void)
{
    ml_init();
    ml_stacks_zero_alloc();
    atomic_store(&ml_cfg.truncated, 0);
    atomic_store(&ml_cfg.dropped, 0);
    atomic_store(&ml_cfg.dropped_bytes, 0);
    atomic_store(&ml_cfg.unwind_fallbacks, 0);
    atomic_store(&ml_cfg.start_ns, ml_now_ns());
}

static void add_inuse(struct ml_stack *r, void *arg)
{
    int64_t b = atomic_load_explicit(&r->inuse_bytes, memory_order_relaxed);
    *(uint64_t *)arg += b > 0 ? (uint64_t)b : 0;
}

void ml_get_status(struct ml_status *st)
{
    ml_init();
    st->active = atomic_load(&ml_cfg.active);
    st->interval = atomic_load(&ml_cfg.interval);
    ml_stacks_totals(&st->samples, &st->alloc_bytes);
    st->stacks = ml_stack_count();
    st->truncated = atomic_load(&ml_cfg.truncated);
    st->dropped = atomic_load(&ml_cfg.dropped);
    st->inuse_bytes = 0;
    ml_stacks_each(add_inuse, &st->inuse_bytes);
}
