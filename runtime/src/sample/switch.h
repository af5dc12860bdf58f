/* The fast switch and the registry of threads behind it (switch.c). */
#ifndef MEMLENS_SWITCH_H
#define MEMLENS_SWITCH_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

/* Every start/stop/interval change bumps ml_epoch and forces each registered thread's countdown to
 * 0 (ml_switch_kick), so its next allocation takes the slow path, which sees the new epoch and
 * re-arms for the new state. */
extern _Atomic uint64_t ml_epoch;
void ml_switch_kick(void);
enum { ML_REG_NO, ML_REG_YES, ML_REG_FULL, ML_REG_EXITED };
/* Call f on every registered thread, the registry locked (threads do not come or go meanwhile); -1
 * if the lock could not be taken within ~1 ms (its holder was interrupted). */
int ml_threads_each(void (*f)(struct ml_thread *t, void *arg), void *arg);
void ml_thread_register(struct ml_thread *t);
/* The last switch: threads it reached, threads that had not acknowledged when it returned (they
 * switch at their next allocation), and how long it took. */
void ml_last_switch(uint64_t *threads, uint64_t *pending, uint64_t *ns);

#pragma GCC visibility pop
#endif
