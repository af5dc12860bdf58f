/* The runtime's own account of what it costs the process (cost.c). */
#ifndef MEMLENS_COST_H
#define MEMLENS_COST_H
#include <x86intrin.h>

#include "../base/rt.h"

#pragma GCC visibility push(hidden)

/* Around the runtime's sampled path only (a sample's stack, record and views; the free or realloc
 * of a sampled block): the unsampled fast path is never timed, and its calls are estimated from
 * the samples' weights instead of counted. The time a thread waits (yields) for the range lock is
 * taken out: it is another thread's work, not this one's CPU time. Begun now, or at a TSC stamp the
 * caller also uses (a block's birth or death: one read, ~25 cycles here, instead of two). */
static inline uint64_t ml_cost_begin_at(uint64_t tsc) { return tsc - ml_tls.cost_wait; }
static inline uint64_t ml_cost_begin(void) { return ml_cost_begin_at(__rdtsc()); }
/* End a timed stretch begun at `t0`; `calls_fx` is the number of allocation calls it stands for
 * (a sample's weight, 16-bit fixed point; 0 for a free or a realloc). It counts `times` times: exact
 * mode, where every allocation is recorded, times one record in ML_COST_EXACT_EVERY. */
void ml_cost_end(uint64_t t0, uint64_t calls_fx, uint64_t times);
#define ML_COST_EXACT_EVERY 64

/* What profiling has cost this process so far (never reset): nanoseconds in the sampled path,
 * allocation calls made while sampling (estimated), and the process's CPU time. -1 when the
 * threads' accounts could not be read (their registry was held: a dump in a signal handler). */
int ml_cost_get(uint64_t *sampled_ns, uint64_t *calls, uint64_t *cpu_ns);
/* The same as a dump's `cost_ns`, `cost_calls` and `cpu_ns` lines (none when unknown). */
void ml_cost_write(struct ml_out *o);
/* A thread exits (switch.c's key destructor): fold its account into the total. */
void ml_cost_thread_exit(struct ml_thread *t);

#pragma GCC visibility pop
#endif
