/* set*id with the runtime's thread ended around the call (setxid.c). */
#ifndef MEMLENS_SETXID_H
#define MEMLENS_SETXID_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

/* fork.c, in the child: the lock may have been held by a thread of the parent. */
void ml_setxid_fork_child(void);

#pragma GCC visibility pop
#endif
