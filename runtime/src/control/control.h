/* The control interface (control.c): what the control socket (ctl.c), the public C API (api.c) and
 * `memlens attach` call into the sampling runtime with (the fast switch behind it: sample/switch.h).
 *
 * Threading: every function may be called from any thread, concurrently with allocations. None of
 * them allocates through the interposed malloc. */
#ifndef MEMLENS_CONTROL_H
#define MEMLENS_CONTROL_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

/* Start (on=1) or stop (on=0) sampling. Returns the previous state. Every thread picks the change up
 * at its next allocation (the fast switch, below). */
int ml_set_active(int on);
/* Mean sampling interval in bytes; 0 = exact mode (every allocation is recorded). */
void ml_set_interval(uint64_t bytes);
/* Zero the cumulative (alloc) counters and the sample totals; keep live (inuse) records so that
 * frees of blocks sampled before the reset still balance. Restarts start_ns. */
void ml_reset(void);

struct ml_status {
    int active;
    uint64_t interval;
    uint64_t samples, alloc_bytes, stacks, truncated, dropped;
    uint64_t inuse_bytes; /* live heap estimated from the samples (for memlens serve's metrics) */
    uint64_t mmap_inuse_bytes; /* live anonymous mmap estimated from its samples (intercept/mmap.c) */
};
void ml_get_status(struct ml_status *st);
/* Samples taken by the calling thread so far (never reset). */
uint64_t ml_thread_samples(void);

#pragma GCC visibility pop
#endif
