/* A thread's stack as the unwinders see it (bounds.c). */
#ifndef MEMLENS_BOUNDS_H
#define MEMLENS_BOUNDS_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

/* Top of the current thread's stack (above every frame). */
uintptr_t ml_stack_top(void);
/* Is sp on the thread's own stack (below top `hi`), rather than a coroutine's or a sigaltstack? */
int ml_on_own_stack(uintptr_t sp, uintptr_t hi);
/* Can the aligned word at addr be read (checked with the kernel; for foreign stacks)? */
int ml_readable(uintptr_t addr);
/* At start-up (unwind.c's set-up, from the constructor): how far a thread's own stack reaches. */
void ml_bounds_setup(void);

#pragma GCC visibility pop
#endif
