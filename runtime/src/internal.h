/* Internal control interface of libmemlens.so: what the control socket (ctl.c) and the public C API
 * (api.c) call into the sampling runtime with. Everything here is hidden (not exported from the .so).
 *
 * Threading: every function may be called from any thread, concurrently with allocations.
 * None of them allocates through the interposed malloc; ml_dump* take the dump lock (one dump at a time). */
#ifndef MEMLENS_INTERNAL_H
#define MEMLENS_INTERNAL_H

#include <stdint.h>

/* Start (on=1) or stop (on=0) sampling. Returns the previous state. Every thread picks the change up
 * at its next allocation (control.c: the fast switch). */
int ml_set_active(int on);

/* Mean sampling interval in bytes; 0 = exact mode (every allocation is recorded). */
void ml_set_interval(uint64_t bytes);

/* Write a raw dump (runtime/README.md) to `path`, created with O_EXCL. `reason` is one word
 * (exit, exec, ctl, api, fork-child-exit). Returns 0 or -errno. */
int ml_dump(const char *path, const char *reason);

/* Dump to the next `<MEMLENS_OUT>.<pid>.<seq>.raw`. Returns 0, -errno, or -EINVAL if MEMLENS_OUT is unset. */
int ml_dump_auto(const char *reason);

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

/* Hooks provided by ctl.c (weak in the runtime, which works without them):
 * ml_ctl_start is called once from the library constructor after the runtime is initialised (never from
 * inside malloc), in the main thread; it may create the control thread.
 * ml_ctl_atfork_child is called in a forked child (after the runtime's own locks are reset): the
 * control thread does not exist there, so it resets its state and sets ml_cfg.ctl_pending; the
 * child's allocation slow path then calls ml_ctl_child_poll, which starts the thread once the child
 * has lived CTL_CHILD_DELAY_MS (most children exec or exit first, and never get one). */
void ml_ctl_start(void);
void ml_ctl_atfork_child(void);
void ml_ctl_child_poll(void);
/* ctl.c: the process leaves through _exit (no destructor runs): remove the socket. */
void ml_ctl_exit(void);
/* ctl.c: the main thread's state letter from /proc (R, S, Z after pthread_exit...), 0 if unknown. */
char ml_main_state(void);

/* Print `memlens: <msg>` on stderr with write(2) (no stdio, no malloc). */
void ml_log(const char *msg);

#endif
