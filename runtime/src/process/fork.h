/* pthread_atfork handlers (fork.c). */
#ifndef MEMLENS_FORK_H
#define MEMLENS_FORK_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

/* Install the handlers (the constructor). */
void ml_fork_setup(void);

#pragma GCC visibility pop
#endif
