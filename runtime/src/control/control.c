/* The control interface (control.h) used by ctl.c, api.c and attach.c: start, stop, a new interval
 * (each reaches the threads through the fast switch, sample/switch.c), reset and status. */
#define _GNU_SOURCE

#include "../intercept/boot.h"
#include "../intercept/finder.h"
#include "../record/block.h"
#include "../sample/cost.h"
#include "../sample/switch.h"
#include "../store/stacks.h"
#include "../store/state.h"
#include "control.h"

uint64_t ml_thread_samples(void) { return ml_tls.samples; }

int ml_set_active(int on)
{
    ml_init();
    if (on && atomic_load(&ml_cfg.failed))
        return 0; /* after an internal failure profiling stays off */
    int was = atomic_exchange(&ml_cfg.active, on ? 1 : 0);
    ml_hooks_sampling(on); /* entry hooks: the countdown runs only while sampling */
    atomic_store(&ml_st->active, on ? 1u : 0u); /* for a reader of the state file */
    ml_switch_kick();
    return was;
}

void ml_set_interval(uint64_t bytes)
{
    ml_init();
    atomic_store(&ml_cfg.interval, bytes);
    atomic_store(&ml_st->interval, bytes);
    ml_switch_kick();
}

void ml_reset(void)
{
    ml_init();
    ml_state_own();
    ml_stacks_zero_alloc();
    ml_blocks_reset();
    ml_state_zero_counters();
    uint64_t now = ml_now_ns();
    atomic_store(&ml_cfg.start_ns, now);
    ml_st->start_ns = now;
}

/* The heap and anonymous mmap (a stack of its own, ML_STACK_MMAP) apart. */
static void add_inuse(struct ml_stack *r, void *arg)
{
    struct ml_status *st = arg;
    int64_t b = atomic_load_explicit(&r->inuse_bytes, memory_order_relaxed);
    *(r->flags & ML_STACK_MMAP ? &st->mmap_inuse_bytes : &st->inuse_bytes) += b > 0 ? (uint64_t)b : 0;
}

void ml_get_status(struct ml_status *st)
{
    ml_init();
    st->active = atomic_load(&ml_cfg.active);
    st->interval = atomic_load(&ml_cfg.interval);
    ml_stacks_totals(&st->samples, &st->alloc_bytes);
    st->stacks = ml_stack_count();
    st->truncated = atomic_load(&ml_st->truncated);
    st->dropped = atomic_load(&ml_st->dropped);
    st->inuse_bytes = st->mmap_inuse_bytes = 0;
    ml_stacks_each(add_inuse, st);
}
