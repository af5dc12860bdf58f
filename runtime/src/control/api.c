/* The public C API (include/memlens.h): thin, exported wrappers over the runtime's internal control
 * interface. Kept apart from the control socket so that a program steering itself and `memlens ctl`
 * steering it from outside go through exactly the same calls. */
#define MEMLENS_BUILDING 1
#include "memlens.h"

#include <errno.h>

#include "../sample/cost.h"
#include "../sample/switch.h"
#include "control.h"
#include "dump.h"

int memlens_start(void) { return ml_set_active(1); }

int memlens_stop(void) { return ml_set_active(0); }

int memlens_dump(const char *path)
{
    if (path == NULL)
        return ml_dump_auto("api");
    return ml_dump(path, "api");
}

int memlens_set_interval(size_t bytes)
{
    ml_set_interval((uint64_t)bytes);
    return 0;
}

int memlens_status(struct memlens_status *st)
{
    if (st == NULL)
        return -EINVAL;
    struct ml_status s;
    ml_get_status(&s);
    st->active = s.active;
    st->interval = s.interval;
    st->samples = s.samples;
    st->alloc_bytes = s.alloc_bytes;
    st->stacks = s.stacks;
    st->truncated = s.truncated;
    st->dropped = s.dropped;
    return 0;
}

int memlens_reset(void)
{
    ml_reset();
    return 0;
}

uint64_t memlens_thread_samples(void) { return ml_thread_samples(); }

int memlens_last_switch(struct memlens_switch *sw)
{
    if (sw == NULL)
        return -EINVAL;
    ml_last_switch(&sw->threads, &sw->pending, &sw->ns);
    return 0;
}

int memlens_cost(struct memlens_cost *c)
{
    if (c == NULL)
        return -EINVAL;
    return ml_cost_get(&c->sampled_ns, &c->calls, &c->cpu_ns) == 0 ? 0 : -EAGAIN;
}
