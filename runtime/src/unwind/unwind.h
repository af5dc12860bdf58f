/* The fp, libgcc and libunwind unwinders, and what every unwinder needs of a thread's stack
 * (unwind.c). */
#ifndef MEMLENS_UNWIND_H
#define MEMLENS_UNWIND_H
#include "../base/rt.h"

#pragma GCC visibility push(hidden)

#define ML_UNWIND_BUF (ML_MAX_DEPTH + 16 + 1)
int ml_unwind(uintptr_t *buf, int max, int *truncated, uintptr_t ra, const uintptr_t **out);
void ml_unwind_setup(void);
/* Top of the current thread's stack (above every frame). */
uintptr_t ml_stack_top(void);
/* Is sp on the thread's own stack (below top `hi`), rather than a coroutine's or a sigaltstack? */
int ml_on_own_stack(uintptr_t sp, uintptr_t hi);
/* Can the aligned word at addr be read (checked with the kernel; for foreign stacks)? */
int ml_readable(uintptr_t addr);

#pragma GCC visibility pop
#endif
