/* The control interface (control.c): what the control socket (ctl.c), the public C API (api.c) and
 * `memlens attach` call into the sampling runtime with, and the fast switch behind it.
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
};
void ml_get_status(struct ml_status *st);
/* Samples taken by the calling thread so far (never reset). */
uint64_t ml_thread_samples(void);
/* The last switch: threads it reached, threads that had not acknowledged when it returned (they
 * switch at their next allocation), and how long it took. */
void ml_last_switch(uint64_t *threads, uint64_t *pending, uint64_t *ns);

/* The fast switch. Every start/stop/interval change bumps ml_epoch and forces each registered
 * thread's countdown to 0, so its next allocation takes the slow path, which sees the new epoch and
 * re-arms for the new state. */
extern _Atomic uint64_t ml_epoch;
enum { ML_REG_NO, ML_REG_YES, ML_REG_FULL, ML_REG_EXITED };
/* Call f on every registered thread, the registry locked (threads do not come or go meanwhile); -1
 * if the lock could not be taken within ~1 ms (its holder was interrupted). */
int ml_threads_each(void (*f)(struct ml_thread *t, void *arg), void *arg);
void ml_thread_register(struct ml_thread *t);

#pragma GCC visibility pop
#endif
